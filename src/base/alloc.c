/* alloc.c — thin wrappers that turn overflow into NULL. */
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

void *em_malloc(size_t n) { return malloc(n ? n : 1); }

void *em_calloc(size_t count, size_t size) {
    size_t total;
    if (!em_mul(count, size, &total)) return NULL;
    return calloc(total ? total : 1, 1);
}

void *em_mallocn(size_t count, size_t size) {
    size_t total;
    if (!em_mul(count, size, &total)) return NULL;
    return malloc(total ? total : 1);
}

void *em_realloc(void *p, size_t n) { return realloc(p, n ? n : 1); }

void *em_aligned_alloc(size_t n) {
    size_t rounded;
    if (!em_add(n, 63, &rounded)) return NULL;
    rounded &= ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

char *em_strdup(const char *s) { return em_strndup(s, strlen(s)); }

char *em_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

bool em_grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (!em_mul(ncap, 2, &ncap)) return false;
    }
    size_t bytes;
    if (!em_mul(ncap, elem, &bytes)) return false;
    void *p = realloc(*buf, bytes);
    if (!p) return false;
    *buf = p;
    *cap = ncap;
    return true;
}
