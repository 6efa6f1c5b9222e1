/* hugepage.c — anonymous memory on transparent huge pages. */
#include "base/hugepage.h"

#include "base/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

bool em_thp_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = {0};
    bool ok = fgets(line, sizeof line, f) && (strstr(line, "[always]") || strstr(line, "[madvise]"));
    fclose(f);
    return ok;
}

/* Rounded up to whole huge pages; false on overflow. */
static bool huge_round(size_t bytes, size_t *out) {
    if (!em_add(bytes ? bytes : 1, EM_HUGE_PAGE - 1, out)) return false;
    *out &= ~(EM_HUGE_PAGE - 1);
    return true;
}

void *em_huge_reserve(size_t bytes) {
    size_t len, span;
    if (!huge_round(bytes, &len) || !em_add(len, EM_HUGE_PAGE, &span)) return NULL;
    /* over-map by one huge page, then trim to an aligned start */
    uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uintptr_t start = ((uintptr_t)raw + EM_HUGE_PAGE - 1) & ~(uintptr_t)(EM_HUGE_PAGE - 1);
    size_t head = start - (uintptr_t)raw, tail = span - head - len;
    if (head) munmap(raw, head);
    if (tail) munmap((void *)(start + len), tail);
#ifdef MADV_HUGEPAGE
    (void)madvise((void *)start, len, MADV_HUGEPAGE); /* advice: a refusal leaves small pages */
#endif
    return (void *)start;
}

void em_huge_release(void *p, size_t bytes) {
    size_t len;
    if (p && huge_round(bytes, &len)) munmap(p, len);
}
