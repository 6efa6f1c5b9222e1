/* errors.c — JSON replies and errors in OpenAI's shape, request ids. */
#include "server/server.h"

#include "base/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void srv_reply_json(srv_response *r, int status, json_t *obj) {
    free(r->body);
    r->body = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(obj);
    if (!r->body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        r->body = em_strdup(oom);
        status = 500;
    }
    r->len = r->body ? strlen(r->body) : 0;
    r->status = status;
    r->content_type = "application/json";
}

void srv_reply_error(srv_response *r, int status, const char *type, const char *param, const char *code,
                     const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *err = json_pack("{s:s, s:s, s:s?, s:s?}", "message", msg, "type", type, "param", param, "code", code);
    /* s? packs NULL as null, which is what OpenAI sends for absent fields */
    srv_reply_json(r, status, err ? json_pack("{s:o}", "error", err) : NULL);
}

void srv_reply_status(srv_response *r, em_status st, const char *param) {
    const char *msg = em_last_error();
    if (!msg || !*msg) msg = em_status_name(st);
    switch (st) {
    case EM_ERR_FORMAT:
    case EM_ERR_INVALID:
        srv_reply_error(r, 400, "invalid_request_error", param, NULL, "%s", msg);
        break;
    case EM_ERR_UNSUPPORTED:
        srv_reply_error(r, 400, "invalid_request_error", param, "unsupported", "%s", msg);
        break;
    case EM_ERR_LIMIT:
        srv_reply_error(r, 400, "invalid_request_error", param, "context_length_exceeded", "%s", msg);
        break;
    case EM_ERR_CANCELLED:
        srv_reply_error(r, 503, "server_error", NULL, "cancelled", "%s", msg);
        break;
    default:
        srv_reply_error(r, 500, "server_error", NULL, NULL, "%s", msg);
        break;
    }
}

void srv_random_id(const char *prefix, char *buf, size_t size) {
    unsigned char raw[12];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) memset(raw, 0, sizeof raw);
    int n = snprintf(buf, size, "%s", prefix);
    for (size_t i = 0; i < sizeof raw && n > 0 && (size_t)n + 2 < size; i++, n += 2)
        snprintf(buf + n, size - (size_t)n, "%02x", raw[i]);
}
