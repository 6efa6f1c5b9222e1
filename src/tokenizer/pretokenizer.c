/* pretokenizer.c — tokenizer.json "pre_tokenizer": splits normalized text
 * into the pieces the model encodes one by one. Split (regex or string,
 * five delimiter behaviors, invert), ByteLevel, Metaspace, Digits,
 * Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer,
 * CharDelimiterSplit and Sequence, with the reference's semantics. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PT_SEQ, PT_SPLIT, PT_BYTELEVEL, PT_METASPACE, PT_DIGITS, PT_PUNCT, PT_WHITESPACE, PT_WSSPLIT,
               PT_BERT, PT_CHARDELIM } pt_kind;
typedef enum { BH_REMOVED, BH_ISOLATED, BH_PREVIOUS, BH_NEXT, BH_CONTIGUOUS } pt_behavior;
typedef enum { PS_ALWAYS, PS_FIRST, PS_NEVER } pt_prepend;

struct tok_pretok {
    pt_kind kind;
    tok_pretok **kids;
    size_t n_kids;
    tok_pattern pat; /* Split, ByteLevel (GPT-2 regex), Whitespace */
    pt_behavior behavior;
    bool invert, add_prefix_space, use_regex, split, individual;
    char repl[8];
    size_t repl_len;
    pt_prepend prepend;
    uint32_t delim;
    tok_bytelevel bl; /* ByteLevel: byte → UTF-8 of its stand-in char */
};

static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char WS_RE[] = "\\w+|[^\\w\\s]+";

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_kids; i++) tok_pretok_free(p->kids[i]);
    free(p->kids);
    tok_pattern_free(&p->pat);
    free(p);
}

static em_status get_bool(json_t *j, const char *key, bool dflt, const char *path, bool *out) {
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return EM_OK;
    }
    if (!json_is_boolean(v)) return em_fail(EM_ERR_FORMAT, "%s.%s: expected a boolean", path, key);
    *out = json_is_true(v);
    return EM_OK;
}

static em_status get_behavior(json_t *j, const char *path, pt_behavior dflt, pt_behavior *out) {
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    json_t *v = json_object_get(j, "behavior");
    if (!v) {
        *out = dflt;
        return EM_OK;
    }
    for (int i = 0; json_is_string(v) && i < 5; i++) {
        if (strcmp(json_string_value(v), names[i]) == 0) {
            *out = (pt_behavior)i;
            return EM_OK;
        }
    }
    return em_fail(EM_ERR_FORMAT, "%s.behavior: expected one of Removed, Isolated, MergedWithPrevious, "
                                  "MergedWithNext, Contiguous", path);
}

static em_status load_metaspace(json_t *j, const char *path, tok_pretok *p) {
    json_t *r = json_object_get(j, "replacement");
    if (!json_is_string(r) || json_string_length(r) == 0 || json_string_length(r) > 4 ||
        tok_utf8_len(json_string_value(r), json_string_length(r)) != json_string_length(r))
        return em_fail(EM_ERR_FORMAT, "%s.replacement: expected a one-character string", path);
    memcpy(p->repl, json_string_value(r), json_string_length(r));
    p->repl_len = json_string_length(r);
    EM_TRY(get_bool(j, "split", true, path, &p->split));
    json_t *ps = json_object_get(j, "prepend_scheme");
    if (json_is_string(ps)) {
        const char *s = json_string_value(ps);
        if (strcmp(s, "always") == 0) p->prepend = PS_ALWAYS;
        else if (strcmp(s, "first") == 0) p->prepend = PS_FIRST;
        else if (strcmp(s, "never") == 0) p->prepend = PS_NEVER;
        else return em_fail(EM_ERR_FORMAT, "%s.prepend_scheme: expected always, first or never", path);
    } else if (ps && !json_is_null(ps)) {
        return em_fail(EM_ERR_FORMAT, "%s.prepend_scheme: expected a string", path);
    } else {
        bool aps = true;
        EM_TRY(get_bool(j, "add_prefix_space", true, path, &aps));
        p->prepend = aps ? PS_ALWAYS : PS_NEVER;
    }
    return EM_OK;
}

static em_status load_kind(json_t *j, const char *path, const char *type, tok_pretok *p) {
    char sub[512];
    if (strcmp(type, "Sequence") == 0) {
        p->kind = PT_SEQ;
        json_t *arr = json_object_get(j, "pretokenizers");
        if (!json_is_array(arr)) return em_fail(EM_ERR_FORMAT, "%s.pretokenizers: expected an array", path);
        p->kids = em_calloc(json_array_size(arr) + 1, sizeof *p->kids);
        if (!p->kids) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i);
            EM_TRY(tok_pretok_load(json_array_get(arr, i), sub, &p->kids[p->n_kids]));
            if (p->kids[p->n_kids]) p->n_kids++;
        }
        return EM_OK;
    }
    if (strcmp(type, "Split") == 0) {
        p->kind = PT_SPLIT;
        snprintf(sub, sizeof sub, "%s.pattern", path);
        EM_TRY(tok_pattern_load(json_object_get(j, "pattern"), sub, &p->pat));
        EM_TRY(get_bool(j, "invert", false, path, &p->invert));
        json_t *b = json_object_get(j, "behavior");
        if (!b) return em_fail(EM_ERR_FORMAT, "%s.behavior: missing", path);
        return get_behavior(j, path, BH_ISOLATED, &p->behavior);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = PT_BYTELEVEL;
        tok_bytelevel_fill(&p->bl);
        EM_TRY(get_bool(j, "add_prefix_space", true, path, &p->add_prefix_space));
        EM_TRY(get_bool(j, "use_regex", true, path, &p->use_regex));
        if (p->use_regex) return tok_pattern_regex(GPT2_RE, sizeof GPT2_RE - 1, path, &p->pat);
        return EM_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        p->kind = PT_METASPACE;
        return load_metaspace(j, path, p);
    }
    if (strcmp(type, "Digits") == 0) {
        p->kind = PT_DIGITS;
        return get_bool(j, "individual_digits", false, path, &p->individual);
    }
    if (strcmp(type, "Punctuation") == 0) {
        p->kind = PT_PUNCT;
        return get_behavior(j, path, BH_ISOLATED, &p->behavior);
    }
    if (strcmp(type, "Whitespace") == 0) {
        p->kind = PT_WHITESPACE;
        return tok_pattern_regex(WS_RE, sizeof WS_RE - 1, path, &p->pat);
    }
    if (strcmp(type, "WhitespaceSplit") == 0) {
        p->kind = PT_WSSPLIT;
        return EM_OK;
    }
    if (strcmp(type, "BertPreTokenizer") == 0) {
        p->kind = PT_BERT;
        return EM_OK;
    }
    if (strcmp(type, "CharDelimiterSplit") == 0) {
        p->kind = PT_CHARDELIM;
        json_t *d = json_object_get(j, "delimiter");
        if (!json_is_string(d) || json_string_length(d) == 0 ||
            tok_utf8_cp(json_string_value(d), json_string_length(d), &p->delim) != json_string_length(d))
            return em_fail(EM_ERR_FORMAT, "%s.delimiter: expected a one-character string", path);
        return EM_OK;
    }
    return em_fail(EM_ERR_UNSUPPORTED, "%s.type: pre-tokenizer \"%s\" is not supported", path, type);
}

em_status tok_pretok_load(json_t *j, const char *path, tok_pretok **out) {
    *out = NULL;
    if (!j || json_is_null(j)) return EM_OK;
    if (!json_is_object(j)) return em_fail(EM_ERR_FORMAT, "%s: expected an object or null", path);
    json_t *type = json_object_get(j, "type");
    if (!json_is_string(type)) return em_fail(EM_ERR_FORMAT, "%s.type: expected a string", path);
    tok_pretok *p = em_calloc(1, sizeof *p);
    if (!p) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    em_status st = load_kind(j, path, json_string_value(type), p);
    if (st != EM_OK) {
        tok_pretok_free(p);
        return st;
    }
    *out = p;
    return EM_OK;
}

/* ---- splitting one piece ---- */

typedef struct seg {
    size_t a, b;
    bool match;
} seg;

typedef struct segs {
    seg *v;
    size_t n, cap;
    size_t prev;
} segs;

static bool segs_push(segs *s, size_t a, size_t b, bool m) {
    if (s->n == s->cap && !em_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) return false;
    s->v[s->n++] = (seg){a, b, m};
    return true;
}

/* Pattern match callback: records the gap before the match and the match. */
static bool on_match(void *ctx, size_t a, size_t b) {
    segs *s = ctx;
    if (s->prev != a && !segs_push(s, s->prev, a, false)) return false;
    s->prev = b;
    return segs_push(s, a, b, true);
}

typedef enum { CP_NUMERIC, CP_PUNCT, CP_SPACE, CP_EQ } cp_pred;

static bool pred(cp_pred p, uint32_t cp, uint32_t eq) {
    switch (p) {
    case CP_NUMERIC: return tok_is_numeric(cp);
    case CP_PUNCT: return tok_is_punctuation(cp);
    case CP_SPACE: return tok_is_whitespace(cp);
    case CP_EQ: return cp == eq;
    }
    return false;
}

/* Every matching character is a match of its own, as the reference's
 * character patterns report them. */
static bool char_matches(segs *s, const char *t, size_t n, cp_pred p, uint32_t eq) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_cp(t + i, n - i, &cp);
        if (pred(p, cp, eq) && !on_match(s, i, i + l)) return false;
        i += l;
    }
    return true;
}

/* Turns the covering list of (range, is_match) into pieces of out. */
static bool emit(tok_list *out, const char *t, segs *s, pt_behavior bh, bool at_start) {
    seg *v = s->v;
    size_t k = 0;
    bool prev_match = false;
    if (bh == BH_NEXT) {
        /* Merge each match into the piece that follows, walking backwards. */
        for (size_t i = s->n; i-- > 0;) {
            seg g = v[i];
            if (g.match && !prev_match && k > 0) v[s->n - k].a = g.a;
            else v[s->n - ++k] = (seg){g.a, g.b, false};
            prev_match = g.match;
        }
        memmove(v, v + s->n - k, k * sizeof *v);
    } else {
        for (size_t i = 0; i < s->n; i++) {
            seg g = v[i];
            bool merge = k > 0 && ((bh == BH_PREVIOUS && g.match && !prev_match) ||
                                   (bh == BH_CONTIGUOUS && g.match == prev_match));
            prev_match = g.match;
            if (merge) v[k - 1].b = g.b;
            else v[k++] = (seg){g.a, g.b, bh == BH_REMOVED && g.match};
        }
    }
    for (size_t i = 0; i < k; i++) {
        if (v[i].match || v[i].b == v[i].a) continue; /* removed, or empty */
        if (!tok_list_push(out, t + v[i].a, v[i].b - v[i].a, at_start && v[i].a == 0)) return false;
    }
    return true;
}

static em_status split_piece(tok_list *out, const char *t, size_t n, bool at_start, const tok_pattern *pat,
                             cp_pred p, uint32_t eq, bool invert, pt_behavior bh) {
    segs s = {0};
    em_status st = EM_OK;
    if (n == 0) {
        free(s.v);
        return EM_OK;
    }
    if (pat) st = tok_pattern_each(pat, t, n, on_match, &s);
    else if (!char_matches(&s, t, n, p, eq)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (st == EM_OK && s.prev != n && !segs_push(&s, s.prev, n, false)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (st == EM_OK && invert)
        for (size_t i = 0; i < s.n; i++) s.v[i].match = !s.v[i].match;
    if (st == EM_OK && !emit(out, t, &s, bh, at_start)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    free(s.v);
    return st;
}

/* Appends the byte-level text of a space (when space) and s[0..n) to out as
 * one piece, written straight into its arena: this runs once per piece of
 * every prompt. */
static bool bytelevel_emit(const tok_bytelevel *bl, tok_list *out, bool space, const unsigned char *s, size_t n,
                           bool at_start) {
    size_t off = out->arena.n;
    if (!tok_buf_reserve(&out->arena, 2 * (n + 1))) return false; /* a byte's char takes at most 2 bytes */
    char *d = out->arena.p + off;
    if (space) d += tok_bytelevel_map(bl, (const unsigned char *)" ", 1, d);
    d += tok_bytelevel_map(bl, s, n, d);
    out->arena.n = (size_t)(d - out->arena.p);
    out->arena.p[out->arena.n] = 0;
    return tok_list_push_span(out, off, out->arena.n - off, at_start);
}

static em_status bytelevel_piece(const tok_pretok *p, tok_list *out, const char *t, size_t n, bool at_start) {
    const tok_bytelevel *bl = &p->bl;
    bool prefix = p->add_prefix_space && (n == 0 || t[0] != ' ');
    if (!p->use_regex) { /* the piece as it is (a Split before did the splitting) */
        if ((n || prefix) && !bytelevel_emit(bl, out, prefix, (const unsigned char *)t, n, at_start))
            return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
        return EM_OK;
    }
    tok_list tmp = {0};
    em_status st = EM_OK;
    if (!tok_buf_put(&tmp.arena, " ", prefix ? 1 : 0) || !tok_buf_put(&tmp.arena, t, n))
        st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    tok_list parts = {0};
    if (st == EM_OK) st = split_piece(&parts, tmp.arena.p, tmp.arena.n, at_start, &p->pat, CP_EQ, 0, false, BH_ISOLATED);
    for (size_t i = 0; st == EM_OK && i < parts.n; i++)
        if (!bytelevel_emit(bl, out, false, (const unsigned char *)parts.arena.p + parts.v[i].off, parts.v[i].len,
                            parts.v[i].at_start))
            st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    tok_list_free(&tmp);
    tok_list_free(&parts);
    return st;
}

static em_status metaspace_piece(const tok_pretok *p, tok_list *out, const char *t, size_t n, bool at_start) {
    tok_buf b = {0};
    bool ok = true;
    bool starts = n >= p->repl_len && memcmp(t, p->repl, p->repl_len) == 0;
    bool space = n > 0 && t[0] == ' ';
    if (!starts && !space && (p->prepend == PS_ALWAYS || (p->prepend == PS_FIRST && at_start)))
        ok = tok_buf_put(&b, p->repl, p->repl_len);
    for (size_t i = 0; ok && i < n; i++) ok = t[i] == ' ' ? tok_buf_put(&b, p->repl, p->repl_len) : tok_buf_putc(&b, t[i]);
    em_status st = ok ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (st == EM_OK) {
        if (p->split) {
            tok_pattern lit = {.str = (char *)p->repl, .len = p->repl_len};
            st = split_piece(out, b.p, b.n, at_start, &lit, CP_EQ, 0, false, BH_NEXT);
        } else if (b.n && !tok_list_push(out, b.p, b.n, at_start)) {
            st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
        }
    }
    tok_buf_free(&b);
    return st;
}

/* Applies one (non-sequence) pre-tokenizer to one piece. */
static em_status piece(const tok_pretok *p, tok_list *out, const char *t, size_t n, bool at_start) {
    switch (p->kind) {
    case PT_SPLIT: return split_piece(out, t, n, at_start, &p->pat, CP_EQ, 0, p->invert, p->behavior);
    case PT_BYTELEVEL: return bytelevel_piece(p, out, t, n, at_start);
    case PT_METASPACE: return metaspace_piece(p, out, t, n, at_start);
    case PT_DIGITS:
        return split_piece(out, t, n, at_start, NULL, CP_NUMERIC, 0, false, p->individual ? BH_ISOLATED : BH_CONTIGUOUS);
    case PT_PUNCT: return split_piece(out, t, n, at_start, NULL, CP_PUNCT, 0, false, p->behavior);
    case PT_WHITESPACE: return split_piece(out, t, n, at_start, &p->pat, CP_EQ, 0, true, BH_REMOVED);
    case PT_WSSPLIT: return split_piece(out, t, n, at_start, NULL, CP_SPACE, 0, false, BH_REMOVED);
    case PT_CHARDELIM: return split_piece(out, t, n, at_start, NULL, CP_EQ, p->delim, false, BH_REMOVED);
    case PT_BERT: {
        tok_list words = {0};
        em_status st = split_piece(&words, t, n, at_start, NULL, CP_SPACE, 0, false, BH_REMOVED);
        for (size_t i = 0; st == EM_OK && i < words.n; i++)
            st = split_piece(out, words.arena.p + words.v[i].off, words.v[i].len, words.v[i].at_start, NULL,
                             CP_PUNCT, 0, false, BH_ISOLATED);
        tok_list_free(&words);
        return st;
    }
    case PT_SEQ: break;
    }
    return em_fail(EM_ERR_INTERNAL, "pre-tokenizer: sequence applied as a single step");
}

em_status tok_pretok_apply(const tok_pretok *p, tok_list *l, tok_list *tmp) {
    if (!p) return EM_OK;
    if (p->kind == PT_SEQ) {
        for (size_t i = 0; i < p->n_kids; i++) EM_TRY(tok_pretok_apply(p->kids[i], l, tmp));
        return EM_OK;
    }
    tok_list_clear(tmp);
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].len) /* the reference drops empty splits before each step */
            EM_TRY(piece(p, tmp, l->arena.p + l->v[i].off, l->v[i].len, l->v[i].at_start));
    tok_list t = *l;
    *l = *tmp;
    *tmp = t;
    return EM_OK;
}

const tok_bytelevel *tok_pretok_fused(const tok_pretok *p) {
    if (!p || p->kind != PT_SEQ || p->n_kids != 2) return NULL;
    const tok_pretok *sp = p->kids[0], *bl = p->kids[1];
    if (sp->kind != PT_SPLIT || sp->invert || sp->behavior != BH_ISOLATED) return NULL;
    if (bl->kind != PT_BYTELEVEL || bl->use_regex || bl->add_prefix_space) return NULL;
    return &bl->bl;
}

em_status tok_pretok_each_raw(const tok_pretok *p, const char *t, size_t n, tok_piece_fn fn, void *ctx) {
    if (!tok_pretok_fused(p)) return em_fail(EM_ERR_INTERNAL, "pre-tokenizer: not a split and a byte mapping");
    if (n == 0) return EM_OK;
    segs s = {0};
    em_status st = tok_pattern_each(&p->kids[0]->pat, t, n, on_match, &s);
    if (st == EM_OK && s.prev != n && !segs_push(&s, s.prev, n, false)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    /* isolated: every match and every gap between them is a piece */
    for (size_t i = 0; st == EM_OK && i < s.n; i++)
        if (s.v[i].b > s.v[i].a) st = fn(ctx, t + s.v[i].a, s.v[i].b - s.v[i].a);
    free(s.v);
    return st;
}
