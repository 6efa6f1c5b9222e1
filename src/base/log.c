/* log.c — stderr logger; one write per line so concurrent lines don't mix. */
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

static atomic_int log_level = EM_LOG_WARN;

void em_log_set_level(em_log_level lvl) { atomic_store(&log_level, (int)lvl); }
em_log_level em_log_get_level(void) { return (em_log_level)atomic_load(&log_level); }

void em_log(em_log_level lvl, const char *fmt, ...) {
    if ((int)lvl > atomic_load(&log_level)) return;
    static const char *tags[] = {"error", "warn", "info", "debug"};
    char line[2048];
    int n = snprintf(line, sizeof line, "ember: %s: ", tags[lvl]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}
