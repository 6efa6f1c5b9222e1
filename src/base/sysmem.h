/* sysmem.h — memory figures of this machine and this process (Linux /proc). */
#ifndef EMBER_BASE_SYSMEM_H
#define EMBER_BASE_SYSMEM_H

#include <stdint.h>

/* MemAvailable of /proc/meminfo in bytes; 0 when unknown. */
uint64_t em_mem_available(void);
/* Peak resident set of this process (VmHWM of /proc/self/status) in bytes;
 * 0 when unknown. */
uint64_t em_peak_rss(void);
/* Current resident set (VmRSS) in bytes; 0 when unknown. */
uint64_t em_current_rss(void);

#endif
