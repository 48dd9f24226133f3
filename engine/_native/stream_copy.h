/* kafkalog native helper: a copy whose full cache lines bypass the cache (non-temporal stores).
 * For large outputs written once and read later (a columnar decode's value column): it saves reading each
 * destination line before writing it, and leaves the cache to the input still to be decoded. x86-64 only; a plain
 * memcpy elsewhere. A run of kl_stream_copy calls ends with kl_stream_fence before the data is published. */
#ifndef KAFKALOG_STREAM_COPY_H
#define KAFKALOG_STREAM_COPY_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define KL_STREAM_MIN 256
static inline void kl_stream_copy(uint8_t *dst, const uint8_t *src, size_t n) {
    if (n < KL_STREAM_MIN) { memcpy(dst, src, n); return; }
    size_t head = (64 - ((uintptr_t)dst & 63)) & 63;   /* up to the first full destination line */
    memcpy(dst, src, head);
    dst += head; src += head; n -= head;
    size_t lines = n & ~(size_t)63;
    for (size_t i = 0; i < lines; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + lines, src + lines, n - lines);
}
static inline void kl_stream_fence(void) { _mm_sfence(); }
#else
static inline void kl_stream_copy(uint8_t *dst, const uint8_t *src, size_t n) { memcpy(dst, src, n); }
static inline void kl_stream_fence(void) {}
#endif
#endif
