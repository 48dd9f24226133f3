/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for kafkalog.
 *
 * Three paths, chosen at run time:
 *  - software: slicing-by-8 tables;
 *  - x86-64 with SSE4.2: the crc32 instruction on three independent streams at once
 *    (the instruction's latency is 3 cycles, its throughput 1 per cycle), whose partial
 *    CRCs are merged with precomputed "append N zero bytes" operators;
 *  - x86-64 with AVX-512 and VPCLMULQDQ, for buffers of KL_FOLD_MIN bytes or more: carry-less
 *    multiplication folds 16 lanes of 16 bytes at a time (about three times the crc32
 *    instruction's rate), and the crc32 instruction finishes the last 16 bytes and the tail.
 * The merge relies on linearity: the raw CRC state after A||B equals
 * shift(state after A, |B|) XOR raw_crc(B starting from 0), where shift(s, n) multiplies
 * s by the GF(2) matrix of n zero bytes. The matrices are built once at init by repeated
 * squaring and flattened into four 256-entry lookup tables per block length.
 */
#include "crc32c_impl.h"

#define KL_POLY 0x82F63B78u
#define KL_LONG 8192
#define KL_SHORT 256

static uint32_t sw_table[8][256];
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];
static int hw_enabled = 0;

static uint32_t gf2_apply(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

/* out = a ∘ b (apply b, then a); column n is the image of bit n. */
static void gf2_compose(uint32_t *out, const uint32_t *a, const uint32_t *b) {
    uint32_t tmp[32];
    for (int n = 0; n < 32; n++) tmp[n] = gf2_apply(a, b[n]);
    memcpy(out, tmp, sizeof tmp);
}

static void build_shift_table(uint32_t table[4][256], size_t nbytes) {
    uint32_t op[32], result[32];
    op[0] = KL_POLY;                     /* one zero bit: c -> (c >> 1) ^ (c & 1 ? POLY : 0) */
    for (int n = 1; n < 32; n++) op[n] = 1u << (n - 1);
    for (int i = 0; i < 3; i++) gf2_compose(op, op, op);   /* 2, 4, 8 bits: one zero byte */
    for (int n = 0; n < 32; n++) result[n] = 1u << n;       /* identity */
    while (nbytes) {
        if (nbytes & 1) gf2_compose(result, op, result);
        nbytes >>= 1;
        if (nbytes) gf2_compose(op, op, op);
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) table[k][b] = gf2_apply(result, b << (8 * k));
}

static inline uint32_t apply_shift(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^
           table[3][crc >> 24];
}

uint32_t kl_crc32c_software(uint32_t crc, const void *buf, size_t len) {
    const uint8_t *p = (const uint8_t *)buf;
    crc = ~crc;
    while (len && ((uintptr_t)p & 7)) { crc = sw_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8); len--; }
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = sw_table[7][lo & 0xFF] ^ sw_table[6][(lo >> 8) & 0xFF] ^ sw_table[5][(lo >> 16) & 0xFF] ^
              sw_table[4][lo >> 24] ^ sw_table[3][hi & 0xFF] ^ sw_table[2][(hi >> 8) & 0xFF] ^
              sw_table[1][(hi >> 16) & 0xFF] ^ sw_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) crc = sw_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KL_HAVE_X86 1

static inline uint64_t load_le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Three streams of `block` bytes each; returns the raw (non-inverted) state. */
#define KL_THREE_WAY(block, table)                                                        \
    while (len >= 3 * (block)) {                                                          \
        uint64_t c1 = 0, c2 = 0;                                                          \
        const uint8_t *end = p + (block);                                                 \
        do {                                                                              \
            c0 = _mm_crc32_u64(c0, load_le64(p));                                         \
            c1 = _mm_crc32_u64(c1, load_le64(p + (block)));                               \
            c2 = _mm_crc32_u64(c2, load_le64(p + 2 * (block)));                           \
            p += 8;                                                                       \
        } while (p < end);                                                                \
        c0 = apply_shift(table, (uint32_t)c0) ^ (uint32_t)c1;                             \
        c0 = apply_shift(table, (uint32_t)c0) ^ (uint32_t)c2;                             \
        p += 2 * (block);                                                                 \
        len -= 3 * (block);                                                               \
    }

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len) {
    const uint8_t *p = (const uint8_t *)buf;
    uint64_t c0 = (uint32_t)~crc;
    while (len && ((uintptr_t)p & 7)) { c0 = _mm_crc32_u8((uint32_t)c0, *p++); len--; }
    KL_THREE_WAY(KL_LONG, shift_long)
    KL_THREE_WAY(KL_SHORT, shift_short)
    while (len >= 8) { c0 = _mm_crc32_u64(c0, load_le64(p)); p += 8; len -= 8; }
    while (len--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}

/* Folding. With bit i of a 128-bit lane standing for x^(127-i) (the reflected order of the bytes as loaded), a
 * lane A = Ahi*x^64 + Alo followed by D more bytes contributes A*x^(8D) to the CRC, and
 * A*x^(8D) = Ahi*x^(64+8D) + Alo*x^(8D) is congruent (mod P) to Ahi*K1 + Alo*K2 with K1, K2 those powers reduced:
 * degree < 96, so it can be added into the lane D bytes further on. A carry-less product of two reflected 64-bit
 * values is the reflected product times x, hence the constants are x^(63+8D) and x^(8D-1) mod P, reflected into the
 * top half of 64 bits. The last lane is fed to the crc32 instruction from a zero state (which reduces it), and the
 * initial state is added into the first four bytes (a reflected CRC's state stands for its next 32 message bits). */
#if (defined(__clang__) && __clang_major__ >= 8) || (!defined(__clang__) && __GNUC__ >= 8)
#define KL_HAVE_FOLD 1   /* compilers that know the AVX-512 and VPCLMULQDQ intrinsics and cpu checks */
#include <immintrin.h>
#define KL_FOLD_MIN 512

static int fold_enabled = 0;
static uint64_t fold_k16[2], fold_k64[2], fold_k256[2];

static uint32_t xpow_mod(unsigned n) {         /* x^n mod P, reflected into 32 bits */
    uint32_t r = 0x80000000u;
    while (n--) r = (r >> 1) ^ (r & 1 ? KL_POLY : 0);
    return r;
}

static void fold_constants(uint64_t k[2], unsigned bytes) {
    k[0] = (uint64_t)xpow_mod(63 + 8 * bytes) << 32;   /* for the lane's first 8 bytes (Ahi) */
    k[1] = (uint64_t)xpow_mod(8 * bytes - 1) << 32;    /* for its last 8 bytes (Alo) */
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))
static inline __m512i fold512(__m512i x, __m512i k, __m512i next) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11),
                                     next, 0x96);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))
static inline __m128i fold128(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))
static uint32_t crc32c_fold(uint32_t crc, const uint8_t *p, size_t len) {   /* len >= KL_FOLD_MIN */
    const __m512i k256 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)fold_k256));
    const __m512i k64 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)fold_k64));
    const __m128i k16 = _mm_loadu_si128((const __m128i *)fold_k16);
    __m512i z0 = _mm512_loadu_si512(p), z1 = _mm512_loadu_si512(p + 64);
    __m512i z2 = _mm512_loadu_si512(p + 128), z3 = _mm512_loadu_si512(p + 192);
    z0 = _mm512_xor_si512(z0, _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128((int)~crc), 0));
    p += 256;
    len -= 256;
    while (len >= 256) {
        z0 = fold512(z0, k256, _mm512_loadu_si512(p));
        z1 = fold512(z1, k256, _mm512_loadu_si512(p + 64));
        z2 = fold512(z2, k256, _mm512_loadu_si512(p + 128));
        z3 = fold512(z3, k256, _mm512_loadu_si512(p + 192));
        p += 256;
        len -= 256;
    }
    z1 = fold512(z0, k64, z1);
    z2 = fold512(z1, k64, z2);
    z3 = fold512(z2, k64, z3);
    __m128i x = _mm512_extracti32x4_epi32(z3, 0);
    x = fold128(x, k16, _mm512_extracti32x4_epi32(z3, 1));
    x = fold128(x, k16, _mm512_extracti32x4_epi32(z3, 2));
    x = fold128(x, k16, _mm512_extracti32x4_epi32(z3, 3));
    for (; len >= 16; p += 16, len -= 16) x = fold128(x, k16, _mm_loadu_si128((const __m128i *)p));
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
    while (len--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif
#endif

void kl_crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ KL_POLY : c >> 1;
        sw_table[0][n] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int n = 0; n < 256; n++)
            sw_table[k][n] = (sw_table[k - 1][n] >> 8) ^ sw_table[0][sw_table[k - 1][n] & 0xFF];
    build_shift_table(shift_long, KL_LONG);
    build_shift_table(shift_short, KL_SHORT);
#ifdef KL_HAVE_X86
    __builtin_cpu_init();
    hw_enabled = __builtin_cpu_supports("sse4.2");
#ifdef KL_HAVE_FOLD
    fold_enabled = hw_enabled && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
                   __builtin_cpu_supports("pclmul");
    fold_constants(fold_k16, 16);
    fold_constants(fold_k64, 64);
    fold_constants(fold_k256, 256);
#endif
#endif
}

int kl_crc32c_hardware_available(void) { return hw_enabled; }

uint32_t kl_crc32c(uint32_t crc, const void *buf, size_t len) {
#ifdef KL_HAVE_X86
#ifdef KL_HAVE_FOLD
    if (fold_enabled && len >= KL_FOLD_MIN) return crc32c_fold(crc, (const uint8_t *)buf, len);
#endif
    if (hw_enabled) return crc32c_hw(crc, buf, len);
#endif
    return kl_crc32c_software(crc, buf, len);
}
