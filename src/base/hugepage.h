/* hugepage.h — anonymous memory on transparent huge pages (Linux). */
#ifndef EMBER_BASE_HUGEPAGE_H
#define EMBER_BASE_HUGEPAGE_H

#include <stdbool.h>
#include <stddef.h>

/* Size of a transparent huge page on x86-64 and the usual arm64 kernels. */
#define EM_HUGE_PAGE ((size_t)2 << 20)

/* Whether the kernel gives anonymous memory huge pages when asked
 * (/sys/kernel/mm/transparent_hugepage/enabled is [always] or [madvise]). */
bool em_thp_available(void);

/* Address space of `bytes`, aligned to EM_HUGE_PAGE and advised huge;
 * pages are committed (zeroed) as they are first written. NULL on
 * failure. Release with em_huge_release and the same size. */
void *em_huge_reserve(size_t bytes);
void em_huge_release(void *p, size_t bytes);

#endif
