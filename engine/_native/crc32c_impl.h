/* kafkalog native helpers: CRC-32C and the byte-level primitives of RecordBatch v2.
 * All integers in Kafka files are big-endian; varints are protobuf base-128 with zigzag. */
#ifndef KAFKALOG_CRC32C_IMPL_H
#define KAFKALOG_CRC32C_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

void kl_crc32c_init(void);
/* Standard CRC-32C (init and final XOR 0xFFFFFFFF); pass the previous result to continue. */
uint32_t kl_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t kl_crc32c_software(uint32_t crc, const void *buf, size_t len);
int kl_crc32c_hardware_available(void);

static inline uint64_t kl_be64(const uint8_t *p) {
    uint64_t v; memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return __builtin_bswap64(v);
#endif
}
static inline uint32_t kl_be32(const uint8_t *p) {
    uint32_t v; memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return __builtin_bswap32(v);
#endif
}
static inline uint16_t kl_be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline void kl_put64(uint8_t *p, uint64_t v) {
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}
static inline void kl_put32(uint8_t *p, uint32_t v) {
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}
static inline void kl_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

/* Varint reads: 0 on success; -1 truncated; -2 too long or overflowing its width. */
static inline int kl_read_uvarint(const uint8_t **pp, const uint8_t *end, int max_bytes, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    int shift = 0;
    if (p < end && !(*p & 0x80)) {  /* one byte: most lengths and deltas */
        *pp = p + 1; *out = *p; return 0;
    }
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            if (i == max_bytes - 1 && (b >> (max_bytes == 10 ? 1 : 4))) return -2;
            *pp = p; *out = v; return 0;
        }
        shift += 7;
    }
    return -2;
}
static inline int kl_read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out) {
    uint64_t v; int rc = kl_read_uvarint(pp, end, 5, &v);
    if (rc == 0) { uint32_t u = (uint32_t)v; *out = (int32_t)((u >> 1) ^ (0u - (u & 1))); }
    return rc;
}
static inline int kl_read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    uint64_t v; int rc = kl_read_uvarint(pp, end, 10, &v);
    if (rc == 0) *out = (int64_t)((v >> 1) ^ (0ull - (v & 1)));
    return rc;
}
static inline int kl_add_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }
static inline int kl_uvarint_size(uint64_t v) { int n = 1; while (v > 0x7F) { v >>= 7; n++; } return n; }
static inline int kl_varint_size(int32_t n) { return kl_uvarint_size((uint32_t)(((uint32_t)n << 1) ^ (uint32_t)(n >> 31))); }
static inline int kl_varlong_size(int64_t n) { return kl_uvarint_size(((uint64_t)n << 1) ^ (uint64_t)(n >> 63)); }
static inline uint8_t *kl_write_uvarint(uint8_t *p, uint64_t v) {
    while (v > 0x7F) { *p++ = (uint8_t)((v & 0x7F) | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}
static inline uint8_t *kl_write_varint(uint8_t *p, int32_t n) {
    return kl_write_uvarint(p, (uint32_t)(((uint32_t)n << 1) ^ (uint32_t)(n >> 31)));
}
static inline uint8_t *kl_write_varlong(uint8_t *p, int64_t n) {
    return kl_write_uvarint(p, ((uint64_t)n << 1) ^ (uint64_t)(n >> 63));
}
#endif
