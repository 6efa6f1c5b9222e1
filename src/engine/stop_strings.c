/* stop_strings.c — the hold-back stop-string matcher (see stop_strings.h). */
#include "engine/stop_strings.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

void stop_matcher_init(stop_matcher *m, const char *const *stops, size_t n_stops) {
    memset(m, 0, sizeof *m);
    m->stops = stops;
    m->n_stops = n_stops;
    m->match = -1;
}

void stop_matcher_free(stop_matcher *m) {
    free(m->held);
    free(m->out);
    memset(m, 0, sizeof *m);
}

/* Position of the earliest stop string in s[0..n), or n when none; *which
 * receives its index (the first listed wins a tie). */
static size_t earliest_match(const stop_matcher *m, const char *s, size_t n, int *which) {
    size_t best = n;
    for (size_t i = 0; i < m->n_stops; i++) {
        size_t sl = strlen(m->stops[i]);
        if (!sl || sl > n) continue;
        const char *hit = memmem(s, n, m->stops[i], sl);
        if (hit && (size_t)(hit - s) < best) {
            best = (size_t)(hit - s);
            *which = (int)i;
        }
    }
    return best;
}

/* Length of the longest tail of s[0..n) that is a proper prefix of a stop string. */
static size_t held_tail(const stop_matcher *m, const char *s, size_t n) {
    size_t best = 0;
    for (size_t i = 0; i < m->n_stops; i++) {
        size_t sl = strlen(m->stops[i]);
        size_t k = sl ? sl - 1 : 0;
        if (k > n) k = n;
        for (; k > best; k--)
            if (!memcmp(s + n - k, m->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Moves held[0..n) to out and keeps the rest held. */
static em_status release(stop_matcher *m, size_t n, const char **emit, size_t *emit_len) {
    if (!em_grow((void **)&m->out, &m->out_cap, n + 1, 1))
        return em_fail(EM_ERR_NOMEM, "stop strings: out of memory releasing %zu bytes", n);
    memcpy(m->out, m->held, n);
    m->out[n] = 0;
    memmove(m->held, m->held + n, m->held_len - n);
    m->held_len -= n;
    *emit = m->out;
    *emit_len = n;
    return EM_OK;
}

em_status stop_matcher_feed(stop_matcher *m, const char *text, size_t len, const char **emit,
                            size_t *emit_len, bool *matched) {
    *emit = "";
    *emit_len = 0;
    *matched = m->matched;
    if (m->matched) return EM_OK;
    size_t need;
    if (!em_add(m->held_len, len, &need) || !em_grow((void **)&m->held, &m->held_cap, need + 1, 1))
        return em_fail(EM_ERR_NOMEM, "stop strings: out of memory holding %zu bytes", len);
    if (len) memcpy(m->held + m->held_len, text, len);
    m->held_len += len;
    int which = -1;
    size_t at = earliest_match(m, m->held, m->held_len, &which);
    if (at < m->held_len) {
        m->matched = *matched = true;
        m->match = which;
        em_status s = release(m, at, emit, emit_len);
        m->held_len = 0;
        return s;
    }
    return release(m, m->held_len - held_tail(m, m->held, m->held_len), emit, emit_len);
}

em_status stop_matcher_flush(stop_matcher *m, const char **emit, size_t *emit_len) {
    *emit = "";
    *emit_len = 0;
    if (m->matched) return EM_OK;
    return release(m, m->held_len, emit, emit_len);
}
