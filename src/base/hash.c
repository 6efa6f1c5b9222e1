/* hash.c — FNV-1a with a murmur-style finalizer. */
#include "base/hash.h"

uint64_t em_hash_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t em_hash_u64(uint64_t h, uint64_t v) { return em_hash_bytes(h, &v, sizeof v); }

uint64_t em_hash_finish(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}
