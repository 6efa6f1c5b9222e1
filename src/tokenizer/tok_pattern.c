/* tok_pattern.c — the String/Regex patterns of tokenizer.json (Split,
 * Replace). Regexes are written for Oniguruma in the reference; PCRE2 with
 * UTF + UCP accepts the same syntax for the constructs tokenizers use
 * (\p{..} classes, (?i:..) groups, lookahead) and JIT-compiles them. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

/* Oniguruma's \w is letters, marks, decimal digits and connector
 * punctuation; PCRE2's (with UCP) is letters, all numbers and '_'. The
 * source is rewritten so \w and \W mean what the reference means. */
#define ONIG_WORD "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

static bool translate(const char *src, size_t len, tok_buf *out) {
    bool in_class = false, ok = true;
    size_t class_start = 0;
    for (size_t i = 0; ok && i < len; i++) {
        char c = src[i];
        if (c == '\\' && i + 1 < len) {
            char e = src[i + 1];
            if (e == 'w') ok = tok_buf_put(out, in_class ? ONIG_WORD : "[" ONIG_WORD "]", strlen(ONIG_WORD) + (in_class ? 0 : 2));
            else if (e == 'W' && !in_class) ok = tok_buf_put(out, "[^" ONIG_WORD "]", strlen(ONIG_WORD) + 3);
            else ok = tok_buf_put(out, src + i, 2);
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            class_start = i + 1;
            if (class_start < len && src[class_start] == '^') class_start++;
        } else if (in_class && c == ']' && i > class_start) {
            in_class = false;
        }
        ok = tok_buf_putc(out, c);
    }
    return ok;
}

em_status tok_pattern_regex(const char *src, size_t len, const char *path, tok_pattern *p) {
    memset(p, 0, sizeof *p);
    int err;
    PCRE2_SIZE eoff;
    tok_buf tr = {0};
    if (!translate(src, len, &tr) || !tok_buf_put(&tr, "", 0)) {
        tok_buf_free(&tr);
        return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    }
    p->re = pcre2_compile((PCRE2_SPTR)tr.p, tr.n, PCRE2_UTF | PCRE2_UCP, &err, &eoff, NULL);
    tok_buf_free(&tr);
    if (!p->re) {
        char msg[256];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        return em_fail(EM_ERR_FORMAT, "%s: invalid regex at offset %zu: %s", path, (size_t)eoff, msg);
    }
    /* JIT is an optimisation: when unavailable the interpreter still runs. */
    p->jit = pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0;
    p->fast = tok_split_fast_kind(src, len);
    p->is_regex = true;
    p->str = em_strndup(src, len);
    p->len = len;
    if (!p->str) {
        tok_pattern_free(p);
        return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    }
    return EM_OK;
}

em_status tok_pattern_load(json_t *j, const char *path, tok_pattern *p) {
    memset(p, 0, sizeof *p);
    json_t *s = json_is_object(j) ? json_object_get(j, "String") : NULL;
    json_t *r = json_is_object(j) ? json_object_get(j, "Regex") : NULL;
    if (json_is_string(s)) {
        p->str = em_strndup(json_string_value(s), json_string_length(s));
        p->len = json_string_length(s);
        return p->str ? EM_OK : em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    }
    if (json_is_string(r)) return tok_pattern_regex(json_string_value(r), json_string_length(r), path, p);
    return em_fail(EM_ERR_FORMAT, "%s: expected {\"String\": ...} or {\"Regex\": ...}", path);
}

void tok_pattern_free(tok_pattern *p) {
    if (p->re) pcre2_code_free(p->re);
    free(p->str);
    memset(p, 0, sizeof *p);
}

/* Runs one match; retries with a large JIT stack when the default one is
 * too small (long runs of whitespace under a lookahead can need it). */
static int regex_match(const tok_pattern *p, const char *s, size_t n, size_t start, pcre2_match_data *md) {
    /* the JIT's own entry skips pcre2_match's checks, which cost as much as
     * matching a short piece (the text was checked once, whole) */
    int rc = p->jit ? pcre2_jit_match(p->re, (PCRE2_SPTR)s, n, start, 0, md, NULL)
                    : pcre2_match(p->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (mc && js) {
        pcre2_jit_stack_assign(mc, NULL, js);
        rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, mc);
    }
    if (js) pcre2_jit_stack_free(js);
    if (mc) pcre2_match_context_free(mc);
    return rc;
}

em_status tok_pattern_each(const tok_pattern *p, const char *s, size_t n, tok_match_fn fn, void *ctx) {
    if (!p->is_regex) {
        if (p->len == 0) return EM_OK;
        size_t i = 0;
        while (i + p->len <= n) {
            const char *hit = memmem(s + i, n - i, p->str, p->len);
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (!fn(ctx, at, at + p->len)) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
            i = at + p->len;
        }
        return EM_OK;
    }
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    if (!md) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    em_status st = EM_OK;
    size_t start = 0;
    while (start <= n) {
        long e = p->fast && start < n ? tok_split_fast(p->fast, s, n, start) : -1;
        if (e > (long)start) { /* the regex's match, found by hand */
            if (!fn(ctx, start, (size_t)e)) {
                st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
                break;
            }
            start = (size_t)e;
            continue;
        }
        int rc = regex_match(p, s, n, start, md);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            char msg[256];
            pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
            st = em_fail(EM_ERR_LIMIT, "tokenizer: regex /%s/ failed: %s", p->str, msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b < a || b > n) break; /* \K tricks; not used by tokenizers */
        if (!fn(ctx, a, b)) {
            st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
            break;
        }
        if (b == a) {
            if (b >= n) break;
            start = b + tok_utf8_len(s + b, n - b);
        } else {
            start = b;
        }
    }
    pcre2_match_data_free(md);
    return st;
}

typedef struct replace_ctx {
    const char *s, *with;
    size_t with_len, last;
    tok_buf *out;
} replace_ctx;

static bool replace_one(void *c, size_t a, size_t b) {
    replace_ctx *r = c;
    bool ok = tok_buf_put(r->out, r->s + r->last, a - r->last) && tok_buf_put(r->out, r->with, r->with_len);
    r->last = b;
    return ok;
}

em_status tok_pattern_replace(const tok_pattern *p, const char *s, size_t n, const char *with,
                              size_t with_len, tok_buf *out) {
    replace_ctx r = {s, with, with_len, 0, out};
    EM_TRY(tok_pattern_each(p, s, n, replace_one, &r));
    if (!tok_buf_put(out, s + r.last, n - r.last)) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    return EM_OK;
}
