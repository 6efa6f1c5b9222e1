/* hash.h — 64-bit non-cryptographic hashing (FNV-1a over bytes, mixed). */
#ifndef EMBER_BASE_HASH_H
#define EMBER_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define EM_HASH_SEED 0xcbf29ce484222325ULL

uint64_t em_hash_bytes(uint64_t h, const void *data, size_t n);
uint64_t em_hash_u64(uint64_t h, uint64_t v);
/* Final avalanche so low bits are usable as table indexes. */
uint64_t em_hash_finish(uint64_t h);

#endif
