/* status.h — error codes and the thread-local error message.
 *
 * Failing functions call em_fail(code, fmt, ...) which records a message
 * naming what failed and about which input, and returns code, so the
 * idiom is `return em_fail(EM_ERR_FORMAT, "%s: tensor %s: ...", ...)`. */
#ifndef EMBER_BASE_STATUS_H
#define EMBER_BASE_STATUS_H

#include "ember/ember.h"

#if defined(__GNUC__)
#define EM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define EM_PRINTF(a, b)
#endif

em_status em_fail(em_status code, const char *fmt, ...) EM_PRINTF(2, 3);
/* Prepends "prefix: " to the current message (adds context on the way up). */
em_status em_fail_prefix(em_status code, const char *fmt, ...) EM_PRINTF(2, 3);
void em_clear_error(void);

#define EM_TRY(expr)                        \
    do {                                    \
        em_status em_try_s_ = (expr);       \
        if (em_try_s_ != EM_OK) return em_try_s_; \
    } while (0)

#endif
