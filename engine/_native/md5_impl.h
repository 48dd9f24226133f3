/* MD5 (RFC 1321) of one buffer: the key hash of the log cleaner's offset map (Kafka's SkimpyOffsetMap). */
#ifndef KAFKALOG_MD5_IMPL_H
#define KAFKALOG_MD5_IMPL_H
#include <stddef.h>
#include <stdint.h>

/* Builds the constant table and picks the CPU's code; called once (at import) before any other function. */
void kl_md5_init(void);

void kl_md5(const uint8_t *data, size_t len, uint8_t out[16]);

/* The MD5s of `count` (at most KL_MD5_LANES) messages of at most KL_MD5_ONE_BLOCK bytes each, computed side by side
   (vector instructions where the CPU has them; the same digests as kl_md5). */
#define KL_MD5_LANES 16
#define KL_MD5_ONE_BLOCK 55
void kl_md5_lanes(const uint8_t *const keys[], const size_t lens[], int count, uint8_t out[][16]);
/* The side-by-side codes: the one every CPU runs, and those of x86-64 CPUs with AVX2 and with AVX-512 (F and BW).
   kl_md5_lanes runs the last one this CPU has (kl_md5_lanes_selected); kl_md5_lanes_with runs the one named, for
   tests, and returns -1 when this CPU cannot run it (or it is not built here), else 0. */
enum { KL_MD5_PORTABLE, KL_MD5_AVX2, KL_MD5_AVX512, KL_MD5_CODES };
int kl_md5_lanes_selected(void);
int kl_md5_lanes_with(int code, const uint8_t *const keys[], const size_t lens[], int count, uint8_t out[][16]);

#endif
