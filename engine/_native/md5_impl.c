/* MD5 (RFC 1321), one-shot over a buffer; written from the RFC's description. */
#include <math.h>
#include <string.h>
#include "md5_impl.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

static uint32_t K[64];

static void init_k(void) {
    /* the RFC's table: floor(|sin(i + 1)| * 2^32) */
    for (int i = 0; i < 64; i++)
        K[i] = (uint32_t)(fabs(sin((double)(i + 1))) * 4294967296.0);
}

/* A left rotation; written once for a uint32_t and for a vector of them (the side-by-side blocks below). */
#define MD5_ROTL(x, c) (((x) << (c)) | ((x) >> (32 - (c))))

/* The four rounds' functions (RFC 1321 section 3.4), F and G in forms with one operation fewer. */
#define MD5_F(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define MD5_G(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define MD5_H(x, y, z) ((x) ^ (y) ^ (z))
#define MD5_I(x, y, z) ((y) ^ ((x) | ~(z)))
/* One step: a = b + rotl(a + fn(b, c, d) + word + K[i], s). The caller passes a, b, c, d in turn, so no values move. */
#define MD5_STEP(fn, a, b, c, d, word, i, s) (a) = (b) + MD5_ROTL((a) + fn((b), (c), (d)) + (word) + K[(i)], (s))

/* Four steps of round r (0-3) from step i: the word schedule and shifts of RFC 1321, unrolled so that every index
   and rotation is a constant. */
#define MD5_FOUR(fn, i, g0, g1, g2, g3, s0, s1, s2, s3) \
    MD5_STEP(fn, a, b, c, d, m[g0], (i), s0);              \
    MD5_STEP(fn, d, a, b, c, m[g1], (i) + 1, s1);          \
    MD5_STEP(fn, c, d, a, b, m[g2], (i) + 2, s2);          \
    MD5_STEP(fn, b, c, d, a, m[g3], (i) + 3, s3)

/* The 64 steps over a, b, c, d and the words m[0..15]. */
#define MD5_ROUNDS \
    /* round 1: word i */ \
    MD5_FOUR(MD5_F, 0, 0, 1, 2, 3, 7, 12, 17, 22); \
    MD5_FOUR(MD5_F, 4, 4, 5, 6, 7, 7, 12, 17, 22); \
    MD5_FOUR(MD5_F, 8, 8, 9, 10, 11, 7, 12, 17, 22); \
    MD5_FOUR(MD5_F, 12, 12, 13, 14, 15, 7, 12, 17, 22); \
    /* round 2: word (5i + 1) mod 16 */ \
    MD5_FOUR(MD5_G, 16, 1, 6, 11, 0, 5, 9, 14, 20); \
    MD5_FOUR(MD5_G, 20, 5, 10, 15, 4, 5, 9, 14, 20); \
    MD5_FOUR(MD5_G, 24, 9, 14, 3, 8, 5, 9, 14, 20); \
    MD5_FOUR(MD5_G, 28, 13, 2, 7, 12, 5, 9, 14, 20); \
    /* round 3: word (3i + 5) mod 16 */ \
    MD5_FOUR(MD5_H, 32, 5, 8, 11, 14, 4, 11, 16, 23); \
    MD5_FOUR(MD5_H, 36, 1, 4, 7, 10, 4, 11, 16, 23); \
    MD5_FOUR(MD5_H, 40, 13, 0, 3, 6, 4, 11, 16, 23); \
    MD5_FOUR(MD5_H, 44, 9, 12, 15, 2, 4, 11, 16, 23); \
    /* round 4: word 7i mod 16 */ \
    MD5_FOUR(MD5_I, 48, 0, 7, 14, 5, 6, 10, 15, 21); \
    MD5_FOUR(MD5_I, 52, 12, 3, 10, 1, 6, 10, 15, 21); \
    MD5_FOUR(MD5_I, 56, 8, 15, 6, 13, 6, 10, 15, 21); \
    MD5_FOUR(MD5_I, 60, 4, 11, 2, 9, 6, 10, 15, 21);

static inline uint32_t le32(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
#endif
}

static void block(uint32_t st[4], const uint8_t *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = le32(p + 4 * i);
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    MD5_ROUNDS;
    st[0] += a;
    st[1] += b;
    st[2] += c;
    st[3] += d;
}

static const uint32_t INIT[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};

/* The last block(s) of a message: its final `rest` bytes, 0x80, zeros and the bit length (little-endian) in the
   last 8 bytes; returns 64 or 128, the bytes written to `tail`. */
static size_t pad(uint8_t tail[128], const uint8_t *rest_data, size_t rest, size_t len) {
    size_t tail_len = rest < 56 ? 64 : 128;
    memset(tail, 0, tail_len);
    if (rest)
        memcpy(tail, rest_data, rest);
    tail[rest] = 0x80;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tail_len - 8 + i] = (uint8_t)(bits >> (8 * i));
    return tail_len;
}

static inline void put_le32(uint8_t *out, uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(out, &v, 4);
#else
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
    out[3] = (uint8_t)(v >> 24);
#endif
}

void kl_md5(const uint8_t *data, size_t len, uint8_t out[16]) {
    uint32_t st[4] = {INIT[0], INIT[1], INIT[2], INIT[3]};
    size_t full = len & ~(size_t)63;
    for (size_t off = 0; off < full; off += 64)
        block(st, data + off);
    uint8_t tail[128];
    if (pad(tail, data + full, len - full, len) == 128) {
        block(st, tail);
        block(st, tail + 64);
    } else {
        block(st, tail);
    }
    for (int i = 0; i < 4; i++)
        put_le32(out + 4 * i, st[i]);
}

/* Up to KL_MD5_LANES messages of one block each, side by side: lane l of every vector belongs to message l, so each
   of the 64 steps is one vector operation for all of them (GCC and Clang vector extensions: 16 x uint32_t is two
   AVX2 registers or four SSE2 ones, chains of steps the CPU runs side by side). */
#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t lanes_t __attribute__((vector_size(4 * KL_MD5_LANES)));

/* A message of at most 55 bytes as its one padded block of words: the key, 0x80, zeros and the bit length. Each word
   is read from the key itself. A block first copied into a byte buffer was loaded back by the compiler as vectors
   wider than the stores that filled it, a load the CPU cannot forward from them, so it waited for them to retire:
   a fifth of the side-by-side MD5's time in a profile of the cleaner's map pass. */
static inline void lane_block(uint32_t w[16], const uint8_t *key, size_t n) {
    size_t full = n >> 2, rest = n & 3, j;
    uint32_t last = (uint32_t)0x80 << (8 * rest);
    for (j = 0; j < 16; j++)
        w[j] = 0;
    for (j = 0; j < full; j++)
        w[j] = le32(key + 4 * j);
    for (j = 0; j < rest; j++)
        last |= (uint32_t)key[4 * full + j] << (8 * j);
    w[full] = last;
    w[14] = (uint32_t)(n << 3);
}

/* The 64 steps over the words m of KL_MD5_LANES blocks side by side; the first `count` digests go to out. */
static inline __attribute__((always_inline)) void lanes_rounds(const lanes_t m[16], int count, uint8_t out[][16]) {
    const lanes_t zero = {0};
    lanes_t a = zero + INIT[0], b = zero + INIT[1], c = zero + INIT[2], d = zero + INIT[3];
    MD5_ROUNDS;
    uint32_t st[4][KL_MD5_LANES] __attribute__((aligned(64)));
    a += INIT[0];
    b += INIT[1];
    c += INIT[2];
    d += INIT[3];
    memcpy(st[0], &a, sizeof a);
    memcpy(st[1], &b, sizeof b);
    memcpy(st[2], &c, sizeof c);
    memcpy(st[3], &d, sizeof d);
    for (int l = 0; l < count; l++)
        for (int i = 0; i < 4; i++)
            put_le32(out[l] + 4 * i, st[i][l]);
}

static inline __attribute__((always_inline)) void lanes_md5(const uint8_t *const keys[], const size_t lens[],
                                                            int count, uint8_t out[][16]) {
    union {
        lanes_t m[16];
        uint32_t words[16][KL_MD5_LANES];
    } msg;
    uint32_t w[16];
    for (int l = 0; l < KL_MD5_LANES; l++) {
        lane_block(w, l < count ? keys[l] : NULL, l < count ? lens[l] : 0);
        for (int j = 0; j < 16; j++)
            msg.words[j][l] = w[j];
    }
    lanes_rounds(msg.m, count, out);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static void lanes_avx2(const uint8_t *const keys[], const size_t lens[], int count,
                                                       uint8_t out[][16]) {
    lanes_md5(keys, lens, count, out);
}

/* With AVX-512 (BW for byte masks): each lane's padded block is one masked load (bytes past the key are neither
   read nor faulted on) with the 0x80 and the bit length merged in, and a word of all lanes is one gather of the
   blocks; the steps rotate in one instruction. */
__attribute__((target("avx512f,avx512bw"))) static void lanes_avx512(const uint8_t *const keys[], const size_t lens[],
                                                                     int count, uint8_t out[][16]) {
    static const uint8_t none[1];
    uint32_t blocks[KL_MD5_LANES][16] __attribute__((aligned(64)));
    lanes_t m[16];
    for (int l = 0; l < KL_MD5_LANES; l++) {
        size_t n = l < count ? lens[l] : 0;
        __m512i v = _mm512_maskz_loadu_epi8(n ? ~(__mmask64)0 >> (64 - n) : 0, l < count ? keys[l] : none);
        v = _mm512_mask_mov_epi8(v, (__mmask64)1 << n, _mm512_set1_epi8((char)0x80));
        v = _mm512_mask_mov_epi32(v, (__mmask16)1 << 14, _mm512_set1_epi32((int)(n << 3)));
        _mm512_store_si512((void *)blocks[l], v);
    }
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(16));
    for (int j = 0; j < 16; j++)
        m[j] = (lanes_t)_mm512_i32gather_epi32(_mm512_add_epi32(rows, _mm512_set1_epi32(j)), blocks, 4);
    lanes_rounds(m, count, out);
}
#endif

static void lanes_base(const uint8_t *const keys[], const size_t lens[], int count, uint8_t out[][16]) {
    lanes_md5(keys, lens, count, out);
}
#else
static void lanes_base(const uint8_t *const keys[], const size_t lens[], int count, uint8_t out[][16]) {
    for (int l = 0; l < count; l++)
        kl_md5(keys[l], lens[l], out[l]);
}
#endif

typedef void (*lanes_fn)(const uint8_t *const[], const size_t[], int, uint8_t[][16]);

/* The code of each KL_MD5_CODE_* that this CPU runs (NULL: not this CPU's), filled by kl_md5_init. */
static lanes_fn codes[KL_MD5_CODES];
static int selected = KL_MD5_PORTABLE;

void kl_md5_init(void) {
    init_k();
    codes[KL_MD5_PORTABLE] = lanes_base;
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        codes[selected = KL_MD5_AVX2] = lanes_avx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        codes[selected = KL_MD5_AVX512] = lanes_avx512;
#endif
}

int kl_md5_lanes_selected(void) {
    return selected;
}

int kl_md5_lanes_with(int code, const uint8_t *const keys[], const size_t lens[], int count, uint8_t out[][16]) {
    if (code < 0 || code >= KL_MD5_CODES || codes[code] == NULL)
        return -1;
    codes[code](keys, lens, count, out);
    return 0;
}

void kl_md5_lanes(const uint8_t *const keys[], const size_t lens[], int count, uint8_t out[][16]) {
    codes[selected](keys, lens, count, out);
}
