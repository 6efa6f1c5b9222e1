/* chat_parse_harness.h — runs chat_parser over a text, whole or in chunks,
 * and writes its events as one normalized string: adjacent deltas of the
 * same kind are merged, so any chunking of the same reply must give the
 * same string. Shared by the parser tests and the fuzz harness.
 *
 *   [C]content  [R]reasoning  [S<i>:name]  [A<i>]args  [E<i>]
 *
 * Tool ids are checked (call_ + 24 alphanumerics, unique in the reply)
 * and left out of the string because they are random. */
#ifndef EMBER_CHAT_PARSE_HARNESS_H
#define EMBER_CHAT_PARSE_HARNESS_H

#include "base/utf8.h"
#include "chat/chat.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cph_sink {
    char *s;
    size_t len, cap;
    int last_kind; /* -1: none */
    int last_index;
    char ids[64][40];
    int n_ids;
    int problems;      /* bad ids, empty deltas, bad order */
    int split_utf8;    /* text deltas that are not valid UTF-8 on their own */
} cph_sink;

static void cph_put(cph_sink *k, const char *s, size_t n) {
    if (k->len + n + 1 > k->cap) {
        size_t cap = (k->len + n + 1) * 2;
        char *p = realloc(k->s, cap);
        if (!p) abort();
        k->s = p;
        k->cap = cap;
    }
    memcpy(k->s + k->len, s, n);
    k->len += n;
    k->s[k->len] = 0;
}

static void cph_header(cph_sink *k, const char *h) { cph_put(k, h, strlen(h)); }

static bool cph_id_ok(const char *id) {
    if (!id || strncmp(id, "call_", 5) != 0 || strlen(id) != 29) return false;
    for (int i = 5; i < 29; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
    }
    return true;
}

static void cph_on_event(void *user, const chat_event *ev) {
    cph_sink *k = user;
    char h[400];
    bool text = ev->kind == CHAT_EV_CONTENT || ev->kind == CHAT_EV_REASONING || ev->kind == CHAT_EV_TOOL_ARGS;
    if (text) {
        if (ev->len == 0 || !ev->text) k->problems++;
        if (ev->kind != CHAT_EV_TOOL_ARGS && !utf8_valid(ev->text, ev->len)) k->split_utf8++;
        if (k->last_kind == (int)ev->kind && (ev->kind != CHAT_EV_TOOL_ARGS || k->last_index == ev->index)) {
            cph_put(k, ev->text, ev->len);
            return;
        }
    }
    switch (ev->kind) {
    case CHAT_EV_CONTENT: cph_header(k, "[C]"); break;
    case CHAT_EV_REASONING: cph_header(k, "[R]"); break;
    case CHAT_EV_TOOL_START:
        snprintf(h, sizeof h, "[S%d:%s]", ev->index, ev->name ? ev->name : "(null)");
        cph_header(k, h);
        if (!cph_id_ok(ev->id)) k->problems++;
        for (int i = 0; i < k->n_ids; i++)
            if (ev->id && strcmp(k->ids[i], ev->id) == 0) k->problems++;
        if (k->n_ids < 64 && ev->id) snprintf(k->ids[k->n_ids++], sizeof k->ids[0], "%s", ev->id);
        break;
    case CHAT_EV_TOOL_ARGS:
        snprintf(h, sizeof h, "[A%d]", ev->index);
        cph_header(k, h);
        break;
    case CHAT_EV_TOOL_END:
        snprintf(h, sizeof h, "[E%d]", ev->index);
        cph_header(k, h);
        break;
    }
    if (text) cph_put(k, ev->text, ev->len);
    k->last_kind = (int)ev->kind;
    k->last_index = ev->index;
}

typedef struct cph_rng {
    uint64_t s;
} cph_rng;

static uint32_t cph_next(cph_rng *r) {
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(r->s >> 33);
}

/* Parses text fed in chunks of 1..max_chunk bytes (max_chunk 0: one
 * feed). Returns the normalized event string (caller frees). */
static char *cph_run(chat_format fmt, json_t *tools, const char *text, size_t len, uint64_t seed, size_t max_chunk,
                     cph_sink *out_sink) {
    cph_sink k = {.last_kind = -1};
    cph_put(&k, "", 0);
    chat_parser *p = chat_parser_new(fmt, tools, cph_on_event, &k);
    if (!p) abort();
    cph_rng r = {seed * 2654435761u + 1};
    size_t i = 0;
    while (i < len) {
        size_t c = max_chunk ? 1 + cph_next(&r) % max_chunk : len;
        if (c > len - i) c = len - i;
        chat_parser_feed(p, text + i, c);
        i += c;
    }
    chat_parser_finish(p);
    chat_parser_free(p);
    if (out_sink) {
        out_sink->problems = k.problems;
        out_sink->split_utf8 = k.split_utf8;
        out_sink->n_ids = k.n_ids;
        out_sink->len = k.len;
    }
    return k.s;
}

#endif
