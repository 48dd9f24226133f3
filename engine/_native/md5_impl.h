/* MD5 (RFC 1321) of one buffer: the key hash of the log cleaner's offset map (Kafka's SkimpyOffsetMap). */
#ifndef KAFKALOG_MD5_IMPL_H
#define KAFKALOG_MD5_IMPL_H
#include <stddef.h>
#include <stdint.h>

void kl_md5(const uint8_t *data, size_t len, uint8_t out[16]);

#endif
