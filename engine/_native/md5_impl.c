/* MD5 (RFC 1321), one-shot over a buffer; written from the RFC's description. */
#include <math.h>
#include <string.h>
#include "md5_impl.h"

static uint32_t K[64];
static int k_ready = 0;

static void init_k(void) {
    /* the RFC's table: floor(|sin(i + 1)| * 2^32) */
    for (int i = 0; i < 64; i++)
        K[i] = (uint32_t)(fabs(sin((double)(i + 1))) * 4294967296.0);
    k_ready = 1;
}

static inline uint32_t rotl(uint32_t x, int c) { return (x << c) | (x >> (32 - c)); }

/* The four rounds' functions (RFC 1321 section 3.4), F and G in forms with one operation fewer. */
#define MD5_F(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define MD5_G(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define MD5_H(x, y, z) ((x) ^ (y) ^ (z))
#define MD5_I(x, y, z) ((y) ^ ((x) | ~(z)))
/* One step: a = b + rotl(a + fn(b, c, d) + word + K[i], s). The caller passes a, b, c, d in turn, so no values move. */
#define MD5_STEP(fn, a, b, c, d, word, i, s) (a) = (b) + rotl((a) + fn((b), (c), (d)) + (word) + K[(i)], (s))

/* Four steps of round r (0-3) from step i: the word schedule and shifts of RFC 1321, unrolled so that every index
   and rotation is a constant. */
#define MD5_FOUR(fn, i, g0, g1, g2, g3, s0, s1, s2, s3) \
    MD5_STEP(fn, a, b, c, d, m[g0], (i), s0);              \
    MD5_STEP(fn, d, a, b, c, m[g1], (i) + 1, s1);          \
    MD5_STEP(fn, c, d, a, b, m[g2], (i) + 2, s2);          \
    MD5_STEP(fn, b, c, d, a, m[g3], (i) + 3, s3)

static void block(uint32_t st[4], const uint8_t *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
               ((uint32_t)p[4 * i + 3] << 24);
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    /* round 1: word i */
    MD5_FOUR(MD5_F, 0, 0, 1, 2, 3, 7, 12, 17, 22);
    MD5_FOUR(MD5_F, 4, 4, 5, 6, 7, 7, 12, 17, 22);
    MD5_FOUR(MD5_F, 8, 8, 9, 10, 11, 7, 12, 17, 22);
    MD5_FOUR(MD5_F, 12, 12, 13, 14, 15, 7, 12, 17, 22);
    /* round 2: word (5i + 1) mod 16 */
    MD5_FOUR(MD5_G, 16, 1, 6, 11, 0, 5, 9, 14, 20);
    MD5_FOUR(MD5_G, 20, 5, 10, 15, 4, 5, 9, 14, 20);
    MD5_FOUR(MD5_G, 24, 9, 14, 3, 8, 5, 9, 14, 20);
    MD5_FOUR(MD5_G, 28, 13, 2, 7, 12, 5, 9, 14, 20);
    /* round 3: word (3i + 5) mod 16 */
    MD5_FOUR(MD5_H, 32, 5, 8, 11, 14, 4, 11, 16, 23);
    MD5_FOUR(MD5_H, 36, 1, 4, 7, 10, 4, 11, 16, 23);
    MD5_FOUR(MD5_H, 40, 13, 0, 3, 6, 4, 11, 16, 23);
    MD5_FOUR(MD5_H, 44, 9, 12, 15, 2, 4, 11, 16, 23);
    /* round 4: word 7i mod 16 */
    MD5_FOUR(MD5_I, 48, 0, 7, 14, 5, 6, 10, 15, 21);
    MD5_FOUR(MD5_I, 52, 12, 3, 10, 1, 6, 10, 15, 21);
    MD5_FOUR(MD5_I, 56, 8, 15, 6, 13, 6, 10, 15, 21);
    MD5_FOUR(MD5_I, 60, 4, 11, 2, 9, 6, 10, 15, 21);
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
    size_t tail_len = rest < 56 ? 64 : 128;
    memset(tail, 0, tail_len);
    if (rest)
        memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
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
