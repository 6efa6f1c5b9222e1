/* stop_strings.h — finds client stop strings in streamed text.
 *
 * Text arrives in pieces that need not align with the stop strings (one
 * token may end a stop string, or hold only its first byte). The matcher
 * releases text as soon as it can no longer be part of a match and holds
 * back only the longest tail that is a prefix of some stop string. On a
 * match, the text before it is released and the rest is dropped. */
#ifndef EMBER_ENGINE_STOP_STRINGS_H
#define EMBER_ENGINE_STOP_STRINGS_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct stop_matcher {
    const char *const *stops; /* borrowed; must outlive the matcher */
    size_t n_stops;
    char *held;               /* pending text that may begin a stop string */
    size_t held_len, held_cap;
    char *out;                /* released text of the last call */
    size_t out_cap;
    bool matched;
    int match;                /* index into stops of the string found; -1 before a match */
} stop_matcher;

/* stops are borrowed (empty strings are ignored). */
void stop_matcher_init(stop_matcher *m, const char *const *stops, size_t n_stops);
void stop_matcher_free(stop_matcher *m);
/* Adds text. *emit / *emit_len receive the text now safe to release (owned
 * by m, valid until the next call). Sets *matched when a stop string was
 * found; later calls release nothing. */
em_status stop_matcher_feed(stop_matcher *m, const char *text, size_t len, const char **emit,
                            size_t *emit_len, bool *matched);
/* End of text: releases whatever is held (no match is possible any more). */
em_status stop_matcher_flush(stop_matcher *m, const char **emit, size_t *emit_len);

#endif
