/* sha256.h — SHA-256 (FIPS 180-4), incremental. Used for fingerprints,
 * where a value must stay the same across versions and machines. */
#ifndef EMBER_BASE_SHA256_H
#define EMBER_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct em_sha256 {
    uint32_t h[8];
    uint64_t len;      /* bytes hashed so far */
    uint8_t buf[64];
    size_t n_buf;
} em_sha256;

void em_sha256_init(em_sha256 *s);
void em_sha256_update(em_sha256 *s, const void *data, size_t n);
void em_sha256_final(em_sha256 *s, uint8_t out[32]);
/* Lowercase hex of the first n_hex digits (n_hex <= 64) of a digest into
 * out (n_hex + 1 bytes, NUL-terminated). */
void em_sha256_hex(const uint8_t digest[32], size_t n_hex, char *out);

#endif
