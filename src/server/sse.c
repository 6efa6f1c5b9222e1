/* sse.c — the streaming job pipe and SSE framing (see sse.h). */
#include "server/sse.h"

#include "base/alloc.h"
#include "base/spin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool sse_write(srv_job *j, const char *data, size_t len) {
    pthread_mutex_lock(&j->mu);
    bool ok = !j->cancel;
    if (ok && j->pipe_off && j->pipe_off == j->pipe_len) j->pipe_off = j->pipe_len = 0;
    size_t need = 0;
    if (ok && (!em_add(j->pipe_len, len, &need) || need - j->pipe_off > SSE_PIPE_MAX)) ok = false;
    if (ok && need > j->pipe_cap && j->pipe_off) { /* reclaim what was read */
        memmove(j->pipe, j->pipe + j->pipe_off, j->pipe_len - j->pipe_off);
        j->pipe_len -= j->pipe_off;
        need -= j->pipe_off;
        j->pipe_off = 0;
    }
    if (ok) ok = em_grow((void **)&j->pipe, &j->pipe_cap, need, 1);
    if (ok) {
        memcpy(j->pipe + j->pipe_len, data, len);
        j->pipe_len += len;
        atomic_fetch_add_explicit(&j->changes, 1, memory_order_release);
        pthread_cond_broadcast(&j->cv);
    } else {
        j->cancel = 1; /* a reader that cannot keep up is dropped */
    }
    pthread_mutex_unlock(&j->mu);
    return ok;
}

static bool send_framed(srv_job *j, const char *prefix, const json_t *obj) {
    char *text = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!text) {
        pthread_mutex_lock(&j->mu);
        j->cancel = 1;
        pthread_mutex_unlock(&j->mu);
        return false;
    }
    size_t pl = strlen(prefix), tl = strlen(text);
    char *buf = malloc(pl + tl + 3);
    bool ok = buf != NULL;
    if (ok) {
        memcpy(buf, prefix, pl);
        memcpy(buf + pl, text, tl);
        memcpy(buf + pl + tl, "\n\n", 2);
        ok = sse_write(j, buf, pl + tl + 2);
    }
    free(buf);
    free(text);
    return ok;
}

bool sse_send_json(srv_job *j, const json_t *obj) { return send_framed(j, "data: ", obj); }

bool sse_send_named(srv_job *j, const char *event, const json_t *obj) {
    char prefix[96];
    int n = snprintf(prefix, sizeof prefix, "event: %s\ndata: ", event);
    if (n < 0 || (size_t)n >= sizeof prefix) return false;
    return send_framed(j, prefix, obj);
}

bool sse_send_done(srv_job *j) {
    static const char done[] = "data: [DONE]\n\n";
    return sse_write(j, done, sizeof done - 1);
}

ssize_t sse_read(srv_job *j, char *buf, size_t max, int timeout_ms, double spin_s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)timeout_ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&j->mu);
    if (j->pipe_off == j->pipe_len && !j->done) em_spin_unlocked(&j->mu, &j->changes, spin_s, true);
    while (j->pipe_off == j->pipe_len && !j->done)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT) break;
    ssize_t n;
    if (j->pipe_off < j->pipe_len) {
        size_t avail = j->pipe_len - j->pipe_off;
        if (avail > max) avail = max;
        memcpy(buf, j->pipe + j->pipe_off, avail);
        j->pipe_off += avail;
        n = (ssize_t)avail;
    } else {
        n = j->done ? -1 : 0;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}
