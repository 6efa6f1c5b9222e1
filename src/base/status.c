/* status.c — thread-local error messages behind em_fail/em_last_error. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define EM_ERRMSG_MAX 1024
static _Thread_local char errmsg[EM_ERRMSG_MAX];

const char *em_status_name(em_status s) {
    switch (s) {
    case EM_OK: return "ok";
    case EM_ERR_IO: return "io";
    case EM_ERR_FORMAT: return "format";
    case EM_ERR_INVALID: return "invalid";
    case EM_ERR_UNSUPPORTED: return "unsupported";
    case EM_ERR_NOMEM: return "nomem";
    case EM_ERR_LIMIT: return "limit";
    case EM_ERR_CANCELLED: return "cancelled";
    case EM_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}

const char *em_last_error(void) { return errmsg; }

void em_clear_error(void) { errmsg[0] = 0; }

em_status em_fail(em_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return code;
}

em_status em_fail_prefix(em_status code, const char *fmt, ...) {
    char prefix[512], old[EM_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errmsg, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof errmsg - 3) pl = sizeof errmsg - 3;
    memcpy(errmsg, prefix, pl);
    errmsg[pl] = ':';
    errmsg[pl + 1] = ' ';
    size_t room = sizeof errmsg - pl - 3, ol = strlen(old);
    if (ol > room) ol = room;
    memcpy(errmsg + pl + 2, old, ol);
    errmsg[pl + 2 + ol] = 0;
    return code;
}
