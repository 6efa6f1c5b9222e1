/* parse_core.c — the output parsers' buffers and event emission.
 *
 * Text sections (content, reasoning) hold back their trailing whitespace:
 * when a marker ends the section (</think>, a tool call) that whitespace
 * is dropped, so "answer\n\n<tool_call>" yields the content "answer";
 * when more text of the same section follows, it is emitted with it. */
#include "chat/parse_internal.h"

#include "base/alloc.h"
#include "base/hash.h"

#include <string.h>
#include <time.h>

bool pbuf_put(pbuf *b, const void *s, size_t n) {
    if (b->oom) return false;
    if (n == 0) return true;
    size_t need;
    if (!em_add(b->len, n, &need) || !em_add(need, 1, &need) || !em_grow((void **)&b->p, &b->cap, need, 1)) {
        b->oom = true;
        return false;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0; /* names are read as C strings */
    return true;
}

bool pbuf_putc(pbuf *b, char c) { return pbuf_put(b, &c, 1); }

void pbuf_free(pbuf *b) {
    free(b->p);
    *b = (pbuf){0};
}

bool parse_is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t parse_skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && parse_is_ws(s[i])) i++;
    return i;
}

bool parse_is_prefix(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    return n < ml && memcmp(s, m, n) == 0;
}

int parse_expect(const char *s, size_t n, size_t *i, const char *m) {
    size_t ml = strlen(m), have = n - *i;
    if (have == 0) return 0;
    if (have < ml) return memcmp(s + *i, m, have) == 0 ? 0 : -1;
    if (memcmp(s + *i, m, ml) != 0) return -1;
    *i += ml;
    return 1;
}

size_t parse_find_marker(const char *s, size_t n, const char *const *markers, size_t n_markers,
                         size_t *which, size_t *safe) {
    size_t best = n;
    for (size_t k = 0; k < n_markers; k++) {
        const char *hit = memmem(s, n, markers[k], strlen(markers[k]));
        if (hit && (size_t)(hit - s) < best) {
            best = (size_t)(hit - s);
            *which = k;
        }
    }
    if (best < n) {
        *safe = best;
        return best;
    }
    /* Longest suffix that a marker could still complete. */
    size_t hold = 0;
    for (size_t k = 0; k < n_markers; k++) {
        size_t ml = strlen(markers[k]);
        for (size_t l = (ml - 1 < n ? ml - 1 : n); l > hold; l--) {
            if (memcmp(s + n - l, markers[k], l) == 0) {
                hold = l;
                break;
            }
        }
    }
    *safe = n - hold;
    return n;
}

static void emit_raw(chat_parser *p, chat_event_kind kind, const char *s, size_t n) {
    if (n == 0) return;
    chat_event ev = {.kind = kind, .index = 0, .text = s, .len = n};
    p->fn(p->user, &ev);
}

/* One event for held whitespace followed by text, two if the copy fails. */
static void emit_joined(chat_parser *p, chat_event_kind kind, const pbuf *ws, const char *s, size_t n) {
    if (ws->len == 0) {
        emit_raw(p, kind, s, n);
        return;
    }
    p->scratch.len = 0;
    p->scratch.oom = false;
    if (pbuf_put(&p->scratch, ws->p, ws->len) && pbuf_put(&p->scratch, s, n)) {
        emit_raw(p, kind, p->scratch.p, p->scratch.len);
    } else {
        emit_raw(p, kind, ws->p, ws->len);
        emit_raw(p, kind, s, n);
    }
}

/* Adds whitespace to the held run; a run past PARSE_WS_MAX is released and
 * the rest of it flows through directly (the choice depends only on the
 * run's length, not on chunking). */
static void hold_ws(chat_parser *p, parse_text *t, chat_event_kind kind, const char *s, size_t n) {
    if (t->ws_spill) {
        emit_raw(p, kind, s, n);
        return;
    }
    if (t->ws.len + n > PARSE_WS_MAX || !pbuf_put(&t->ws, s, n)) {
        t->ws.oom = false;
        emit_joined(p, kind, &t->ws, s, n);
        t->ws.len = 0;
        t->ws_spill = true;
    }
}

void parse_emit_text(chat_parser *p, chat_event_kind kind, const char *s, size_t n) {
    parse_text *t = &p->text[kind == CHAT_EV_REASONING];
    if (t->skip_ws) {
        while (n && parse_is_ws(*s)) s++, n--;
        if (n == 0) return;
        t->skip_ws = false;
    }
    size_t body = n;
    while (body && parse_is_ws(s[body - 1])) body--;
    if (body == 0) {
        hold_ws(p, t, kind, s, n);
        return;
    }
    emit_joined(p, kind, &t->ws, s, body);
    t->ws.len = 0;
    t->ws_spill = false;
    if (body < n) hold_ws(p, t, kind, s + body, n - body);
}

void parse_end_text(chat_parser *p, chat_event_kind kind, bool drop) {
    parse_text *t = &p->text[kind == CHAT_EV_REASONING];
    if (!drop) emit_raw(p, kind, t->ws.p, t->ws.len);
    t->ws.len = 0;
    t->ws_spill = false;
    t->skip_ws = false;
}

void parse_seed_ids(chat_parser *p) {
    struct timespec a, b;
    clock_gettime(CLOCK_REALTIME, &a);
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t h = em_hash_bytes(EM_HASH_SEED, &p, sizeof p);
    h = em_hash_bytes(h, &a, sizeof a);
    h = em_hash_bytes(h, &b, sizeof b);
    p->id_state = em_hash_finish(h);
}

/* splitmix64: ids only need to be unique, not secret. */
static uint64_t next_random(chat_parser *p) {
    uint64_t z = (p->id_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void parse_emit_call(chat_parser *p, const char *name, size_t name_len, const char *args, size_t args_len) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char id[5 + 24 + 1] = "call_";
    for (int i = 0; i < 24; i++) id[5 + i] = alnum[next_random(p) % 62];
    id[29] = 0;
    char nm[PARSE_NAME_MAX + 1];
    if (name_len > PARSE_NAME_MAX) name_len = PARSE_NAME_MAX; /* callers check; stay in bounds */
    memcpy(nm, name, name_len);
    nm[name_len] = 0;

    int index = p->n_calls++;
    chat_event ev = {.kind = CHAT_EV_TOOL_START, .index = index, .name = nm, .id = id};
    p->fn(p->user, &ev);
    ev = (chat_event){.kind = CHAT_EV_TOOL_ARGS, .index = index, .text = args, .len = args_len};
    p->fn(p->user, &ev);
    ev = (chat_event){.kind = CHAT_EV_TOOL_END, .index = index};
    p->fn(p->user, &ev);
}

json_t *parse_tool_function(const chat_parser *p, const char *name) {
    if (!json_is_array(p->tools)) return NULL;
    size_t i;
    json_t *tool;
    json_array_foreach(p->tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(fn)) fn = tool;
        const char *nm = json_string_value(json_object_get(fn, "name"));
        if (nm && strcmp(nm, name) == 0) return fn;
    }
    return NULL;
}
