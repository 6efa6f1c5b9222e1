/* decoder.c — ids → text: pieces of the vocabulary go through the
 * tokenizer.json "decoder" chain (ByteLevel, Replace, ByteFallback, Fuse,
 * Strip, Metaspace, Sequence), then are concatenated. Nested sequences are
 * flattened into one list of steps at load time.
 *
 * Decoding also serves the streaming detokenizer, which decodes a window
 * of recent ids: `first` tells whether that window starts the text, since
 * Metaspace and a Strip after Fuse treat the start of the text specially. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { DC_BYTELEVEL, DC_REPLACE, DC_BYTEFALLBACK, DC_FUSE, DC_STRIP, DC_METASPACE } dc_kind;

typedef struct dec_step {
    dc_kind kind;
    tok_pattern pat;
    char *content;
    size_t content_len;
    uint32_t strip_cp;
    size_t start, stop;
    bool prefix;  /* Metaspace: the first token loses its replacement chars */
    bool whole;   /* runs after Fuse/ByteLevel: sees the whole text as one token */
} dec_step;

struct tok_dec {
    dec_step *v;
    size_t n, cap;
    bool fused;
};

void tok_dec_free(tok_dec *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        tok_pattern_free(&d->v[i].pat);
        free(d->v[i].content);
    }
    free(d->v);
    free(d);
}

static em_status size_field(json_t *j, const char *key, const char *path, size_t *out) {
    json_t *v = json_object_get(j, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1024)
        return em_fail(EM_ERR_FORMAT, "%s.%s: expected an integer in [0, 1024]", path, key);
    *out = (size_t)json_integer_value(v);
    return EM_OK;
}

static em_status one_char(json_t *j, const char *key, const char *path, char **s, size_t *len, uint32_t *cp) {
    json_t *v = json_object_get(j, key);
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        tok_utf8_cp(json_string_value(v), json_string_length(v), cp) != json_string_length(v))
        return em_fail(EM_ERR_FORMAT, "%s.%s: expected a one-character string", path, key);
    *len = json_string_length(v);
    *s = em_strndup(json_string_value(v), *len);
    return *s ? EM_OK : em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
}

static em_status load_step(json_t *j, const char *path, const char *type, dec_step *s) {
    if (strcmp(type, "ByteLevel") == 0) { s->kind = DC_BYTELEVEL; return EM_OK; }
    if (strcmp(type, "ByteFallback") == 0) { s->kind = DC_BYTEFALLBACK; return EM_OK; }
    if (strcmp(type, "Fuse") == 0) { s->kind = DC_FUSE; return EM_OK; }
    if (strcmp(type, "Replace") == 0) {
        s->kind = DC_REPLACE;
        char sub[512];
        snprintf(sub, sizeof sub, "%s.pattern", path);
        EM_TRY(tok_pattern_load(json_object_get(j, "pattern"), sub, &s->pat));
        json_t *c = json_object_get(j, "content");
        if (!json_is_string(c)) return em_fail(EM_ERR_FORMAT, "%s.content: expected a string", path);
        s->content_len = json_string_length(c);
        s->content = em_strndup(json_string_value(c), s->content_len);
        return s->content ? EM_OK : em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    }
    if (strcmp(type, "Strip") == 0) {
        s->kind = DC_STRIP;
        EM_TRY(size_field(j, "start", path, &s->start));
        EM_TRY(size_field(j, "stop", path, &s->stop));
        return one_char(j, "content", path, &s->content, &s->content_len, &s->strip_cp);
    }
    if (strcmp(type, "Metaspace") == 0) {
        s->kind = DC_METASPACE;
        EM_TRY(one_char(j, "replacement", path, &s->content, &s->content_len, &s->strip_cp));
        json_t *ps = json_object_get(j, "prepend_scheme"), *aps = json_object_get(j, "add_prefix_space");
        if (json_is_string(ps)) s->prefix = strcmp(json_string_value(ps), "never") != 0;
        else s->prefix = aps ? json_is_true(aps) : true;
        return EM_OK;
    }
    return em_fail(EM_ERR_UNSUPPORTED, "%s.type: decoder \"%s\" is not supported", path, type);
}

static em_status load_into(json_t *j, const char *path, tok_dec *d) {
    if (!json_is_object(j)) return em_fail(EM_ERR_FORMAT, "%s: expected an object", path);
    json_t *type = json_object_get(j, "type");
    if (!json_is_string(type)) return em_fail(EM_ERR_FORMAT, "%s.type: expected a string", path);
    if (strcmp(json_string_value(type), "Sequence") == 0) {
        json_t *arr = json_object_get(j, "decoders");
        if (!json_is_array(arr)) return em_fail(EM_ERR_FORMAT, "%s.decoders: expected an array", path);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", path, i);
            EM_TRY(load_into(json_array_get(arr, i), sub, d));
        }
        return EM_OK;
    }
    if (d->n == d->cap && !em_grow((void **)&d->v, &d->cap, d->n + 1, sizeof *d->v))
        return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    dec_step *s = &d->v[d->n];
    memset(s, 0, sizeof *s);
    s->whole = d->fused;
    d->n++;
    EM_TRY(load_step(j, path, json_string_value(type), s));
    if (s->kind == DC_FUSE || s->kind == DC_BYTELEVEL) d->fused = true;
    return EM_OK;
}

em_status tok_dec_load(json_t *j, const char *path, tok_dec **out) {
    *out = NULL;
    if (!j || json_is_null(j)) return EM_OK;
    tok_dec *d = em_calloc(1, sizeof *d);
    if (!d) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    em_status st = load_into(j, path, d);
    if (st != EM_OK) {
        tok_dec_free(d);
        return st;
    }
    *out = d;
    return EM_OK;
}

bool tok_dec_has_byte_fallback(const tok_dec *d) {
    for (size_t i = 0; d && i < d->n; i++)
        if (d->v[i].kind == DC_BYTEFALLBACK) return true;
    return false;
}

bool tok_dec_streamable(const tok_dec *d) {
    for (size_t i = 0; d && i < d->n; i++) {
        const dec_step *s = &d->v[i];
        /* Steps that look across token boundaries of the whole text. */
        if (s->whole && (s->kind == DC_REPLACE || s->kind == DC_BYTEFALLBACK || (s->kind == DC_STRIP && s->stop)))
            return false;
    }
    return true;
}

bool tok_piece_is_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
    }
    return true;
}

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

#define OOM() em_fail(EM_ERR_NOMEM, "tokenizer: out of memory")

/* Text of span i; an arena that never received bytes has no buffer. */
static const char *span(const tok_list *l, size_t i) { return l->arena.p ? l->arena.p + l->v[i].off : ""; }

/* ---- the steps: each maps list `in` to list `out` ---- */

static em_status st_bytelevel(tok_list *in, tok_list *out) {
    tok_buf bytes = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < in->n; i++) {
        const char *s = span(in, i);
        size_t n = in->v[i].len, start = bytes.n;
        for (size_t k = 0; ok && k < n;) {
            uint32_t cp;
            k += tok_utf8_cp(s + k, n - k, &cp);
            int b = tok_bytelevel_byte(cp);
            if (b < 0) { /* not a byte-level piece: its own bytes */
                bytes.n = start;
                ok = tok_buf_put(&bytes, s, n);
                break;
            }
            ok = tok_buf_putc(&bytes, (char)b);
        }
    }
    size_t off = out->arena.n;
    ok = ok && tok_utf8_lossy(&out->arena, bytes.p ? bytes.p : "", bytes.n) &&
         tok_list_push_span(out, off, out->arena.n - off, false);
    tok_buf_free(&bytes);
    return ok ? EM_OK : OOM();
}

static bool flush_bytes(tok_list *out, tok_buf *run) {
    if (!run->n) return true;
    bool ok;
    size_t off = out->arena.n;
    if (utf8_valid(run->p, run->n)) {
        ok = tok_buf_put(&out->arena, run->p, run->n);
    } else {
        ok = true;
        for (size_t i = 0; ok && i < run->n; i++) ok = tok_buf_put(&out->arena, "\xEF\xBF\xBD", 3);
    }
    run->n = 0;
    return ok && tok_list_push_span(out, off, out->arena.n - off, false);
}

static em_status st_bytefallback(tok_list *in, tok_list *out) {
    tok_buf run = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < in->n; i++) {
        const char *s = span(in, i);
        size_t n = in->v[i].len;
        if (tok_piece_is_byte(s, n)) {
            ok = tok_buf_putc(&run, (char)(hexval(s[3]) * 16 + hexval(s[4])));
            continue;
        }
        ok = flush_bytes(out, &run) && tok_list_push(out, s, n, false);
    }
    ok = ok && flush_bytes(out, &run);
    tok_buf_free(&run);
    return ok ? EM_OK : OOM();
}

static em_status st_fuse(tok_list *in, tok_list *out) {
    size_t off = out->arena.n;
    for (size_t i = 0; i < in->n; i++)
        if (!tok_buf_put(&out->arena, span(in, i), in->v[i].len)) return OOM();
    return tok_list_push_span(out, off, out->arena.n - off, false) ? EM_OK : OOM();
}

static em_status st_strip(const dec_step *s, tok_list *in, tok_list *out, bool first) {
    for (size_t i = 0; i < in->n; i++) {
        const char *t = span(in, i);
        size_t a = 0, b = in->v[i].len;
        /* After Fuse the single token is the whole text: its start is only
         * the text's start in the first window. */
        size_t start = s->whole && !first ? 0 : s->start;
        for (size_t k = 0; k < start && a < b; k++) {
            uint32_t cp;
            size_t l = tok_utf8_cp(t + a, b - a, &cp);
            if (cp != s->strip_cp) break;
            a += l;
        }
        for (size_t k = 0; k < s->stop && b > a; k++) {
            size_t c = b - 1;
            while (c > a && ((unsigned char)t[c] & 0xC0) == 0x80) c--;
            uint32_t cp;
            tok_utf8_cp(t + c, b - c, &cp);
            if (cp != s->strip_cp) break;
            b = c;
        }
        if (!tok_list_push(out, t + a, b - a, false)) return OOM();
    }
    return EM_OK;
}

static em_status st_metaspace(const dec_step *s, tok_list *in, tok_list *out, bool first) {
    for (size_t i = 0; i < in->n; i++) {
        const char *t = span(in, i);
        size_t n = in->v[i].len, off = out->arena.n;
        bool drop = i == 0 && first && s->prefix;
        for (size_t k = 0; k < n;) {
            size_t l = tok_utf8_len(t + k, n - k);
            bool rep = l == s->content_len && memcmp(t + k, s->content, l) == 0;
            if (!(rep && drop) && !tok_buf_put(&out->arena, rep ? " " : t + k, rep ? 1 : l)) return OOM();
            k += l;
        }
        if (!tok_list_push_span(out, off, out->arena.n - off, false)) return OOM();
    }
    return EM_OK;
}

static em_status st_replace(const dec_step *s, tok_list *in, tok_list *out) {
    for (size_t i = 0; i < in->n; i++) {
        size_t off = out->arena.n;
        EM_TRY(tok_pattern_replace(&s->pat, span(in, i), in->v[i].len, s->content, s->content_len,
                                   &out->arena));
        if (!tok_list_push_span(out, off, out->arena.n - off, false)) return OOM();
    }
    return EM_OK;
}

static em_status run_step(const dec_step *s, tok_list *in, tok_list *out, bool first) {
    switch (s->kind) {
    case DC_BYTELEVEL: return st_bytelevel(in, out);
    case DC_BYTEFALLBACK: return st_bytefallback(in, out);
    case DC_FUSE: return st_fuse(in, out);
    case DC_STRIP: return st_strip(s, in, out, first);
    case DC_METASPACE: return st_metaspace(s, in, out, first);
    case DC_REPLACE: return st_replace(s, in, out);
    }
    return em_fail(EM_ERR_INTERNAL, "decoder: unknown step");
}

em_status tok_dec_run(const tok_dec *d, tok_list *pieces, bool first, tok_buf *out) {
    tok_list b = {0};
    em_status st = EM_OK;
    for (size_t k = 0; st == EM_OK && d && k < d->n; k++) {
        tok_list_clear(&b);
        st = run_step(&d->v[k], pieces, &b, first);
        tok_list tmp = *pieces;
        *pieces = b;
        b = tmp;
    }
    for (size_t i = 0; st == EM_OK && i < pieces->n; i++) {
        /* Without a decoder the reference joins pieces with spaces. */
        if ((!d && (i > 0 || !first) && !tok_buf_putc(out, ' ')) ||
            !tok_buf_put(out, span(pieces, i), pieces->v[i].len))
            st = OOM();
    }
    tok_list_free(&b);
    return st;
}

em_status tok_decode_into(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, bool first,
                          tok_buf *out) {
    tok_list a = {0};
    em_status st = EM_OK;
    for (size_t i = 0; st == EM_OK && i < n; i++) {
        int32_t id = ids[i];
        /* Unknown ids are skipped, as the reference does. */
        if (id < 0 || id >= t->n_ids || !t->pieces[id]) continue;
        if (skip_special && t->special[id]) continue;
        if (!tok_list_push(&a, t->pieces[id], t->piece_len[id], false)) st = OOM();
    }
    if (st == EM_OK) st = tok_dec_run(t->decoder, &a, first, out);
    tok_list_free(&a);
    return st;
}
