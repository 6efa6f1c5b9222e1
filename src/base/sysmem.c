/* sysmem.c — reads "Key:  N kB" lines of /proc files. */
#include "base/sysmem.h"

#include <stdio.h>
#include <string.h>

static uint64_t proc_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t n = strlen(key);
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}

uint64_t em_mem_available(void) { return proc_kb("/proc/meminfo", "MemAvailable"); }
uint64_t em_peak_rss(void) { return proc_kb("/proc/self/status", "VmHWM"); }
uint64_t em_current_rss(void) { return proc_kb("/proc/self/status", "VmRSS"); }
