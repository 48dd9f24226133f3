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
/* The same without the CPU-specific code (for tests: the code every CPU can run). */
void kl_md5_lanes_portable(const uint8_t *const keys[], const size_t lens[], int count, uint8_t out[][16]);

#endif
