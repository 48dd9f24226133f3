/* MD5 (RFC 1321), one-shot over a buffer; written from the RFC's description. */
#include <math.h>
#include <string.h>
#include "md5_impl.h"

static uint32_t K[64];
static int k_ready = 0;
static const uint8_t S[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static void init_k(void) {
    /* the RFC's table: floor(|sin(i + 1)| * 2^32) */
    for (int i = 0; i < 64; i++)
        K[i] = (uint32_t)(fabs(sin((double)(i + 1))) * 4294967296.0);
    k_ready = 1;
}

static inline uint32_t rotl(uint32_t x, int c) { return (x << c) | (x >> (32 - c)); }

static void block(uint32_t st[4], const uint8_t *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
               ((uint32_t)p[4 * i + 3] << 24);
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        uint32_t t = d;
        d = c;
        c = b;
        b = b + rotl(a + f + K[i] + m[g], S[i]);
        a = t;
    }
    st[0] += a;
    st[1] += b;
    st[2] += c;
    st[3] += d;
}

void kl_md5(const uint8_t *data, size_t len, uint8_t out[16]) {
    if (!k_ready)
        init_k();
    uint32_t st[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    size_t full = len & ~(size_t)63;
    for (size_t off = 0; off < full; off += 64)
        block(st, data + off);
    uint8_t tail[128];
    size_t rest = len - full;
    memset(tail, 0, sizeof tail);
    if (rest)
        memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tail_len - 8 + i] = (uint8_t)(bits >> (8 * i));
    block(st, tail);
    if (tail_len == 128)
        block(st, tail + 64);
    for (int i = 0; i < 4; i++) {
        out[4 * i] = (uint8_t)st[i];
        out[4 * i + 1] = (uint8_t)(st[i] >> 8);
        out[4 * i + 2] = (uint8_t)(st[i] >> 16);
        out[4 * i + 3] = (uint8_t)(st[i] >> 24);
    }
}
