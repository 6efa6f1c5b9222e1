/* alloc.h — allocation helpers and overflow-safe size arithmetic.
 * Sizes computed from untrusted input go through em_mul/em_add, which
 * report overflow instead of wrapping. */
#ifndef EMBER_BASE_ALLOC_H
#define EMBER_BASE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out = a * b; false on overflow. */
static inline bool em_mul(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool em_add(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool em_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool em_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* Return NULL on failure or overflow; free with free(). */
void *em_malloc(size_t n);
void *em_calloc(size_t count, size_t size);
void *em_mallocn(size_t count, size_t size);
void *em_realloc(void *p, size_t n);
/* 64-byte aligned allocation, zeroed; free with free(). */
void *em_aligned_alloc(size_t n);
char *em_strdup(const char *s);
char *em_strndup(const char *s, size_t n);

/* Grow *buf (of *cap elements of elem bytes) to hold at least need elements.
 * Returns false on overflow or allocation failure (buffer left intact). */
bool em_grow(void **buf, size_t *cap, size_t need, size_t elem);

#endif
