/* normalizer.c — tokenizer.json "normalizer": Unicode normal forms through
 * utf8proc, Lowercase, Strip, Replace, Prepend and Sequence. Each works on
 * a whole string; the reference tracks offsets too, which ember does not
 * need. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef enum { NZ_SEQ, NZ_NFC, NZ_NFD, NZ_NFKC, NZ_NFKD, NZ_LOWER, NZ_STRIP, NZ_REPLACE, NZ_PREPEND } nz_kind;

struct tok_norm {
    nz_kind kind;
    tok_norm **kids;
    size_t n_kids;
    bool left, right;
    tok_pattern pat;
    char *content;
    size_t content_len;
};

void tok_norm_free(tok_norm *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_kids; i++) tok_norm_free(n->kids[i]);
    free(n->kids);
    tok_pattern_free(&n->pat);
    free(n->content);
    free(n);
}

static em_status load_string(json_t *o, const char *key, const char *path, char **out, size_t *len) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return em_fail(EM_ERR_FORMAT, "%s.%s: expected a string", path, key);
    *len = json_string_length(v);
    *out = em_strndup(json_string_value(v), *len);
    return *out ? EM_OK : em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
}

static em_status load_seq(json_t *j, const char *path, tok_norm *n) {
    json_t *arr = json_object_get(j, "normalizers");
    if (!json_is_array(arr)) return em_fail(EM_ERR_FORMAT, "%s.normalizers: expected an array", path);
    n->kids = em_calloc(json_array_size(arr) + 1, sizeof *n->kids);
    if (!n->kids) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.normalizers[%zu]", path, i);
        EM_TRY(tok_norm_load(json_array_get(arr, i), sub, &n->kids[n->n_kids]));
        if (n->kids[n->n_kids]) n->n_kids++;
    }
    return EM_OK;
}

static em_status load_kind(json_t *j, const char *path, const char *type, tok_norm *n) {
    static const struct { const char *name; nz_kind kind; } simple[] = {
        {"NFC", NZ_NFC}, {"NFD", NZ_NFD}, {"NFKC", NZ_NFKC}, {"NFKD", NZ_NFKD}, {"Lowercase", NZ_LOWER}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++) {
        if (strcmp(type, simple[i].name) == 0) {
            n->kind = simple[i].kind;
            return EM_OK;
        }
    }
    if (strcmp(type, "Sequence") == 0) {
        n->kind = NZ_SEQ;
        return load_seq(j, path, n);
    }
    if (strcmp(type, "Strip") == 0) {
        n->kind = NZ_STRIP;
        json_t *l = json_object_get(j, "strip_left"), *r = json_object_get(j, "strip_right");
        if ((l && !json_is_boolean(l)) || (r && !json_is_boolean(r)))
            return em_fail(EM_ERR_FORMAT, "%s: strip_left/strip_right must be booleans", path);
        n->left = l ? json_is_true(l) : true;
        n->right = r ? json_is_true(r) : true;
        return EM_OK;
    }
    if (strcmp(type, "Replace") == 0) {
        n->kind = NZ_REPLACE;
        char sub[512];
        snprintf(sub, sizeof sub, "%s.pattern", path);
        EM_TRY(tok_pattern_load(json_object_get(j, "pattern"), sub, &n->pat));
        return load_string(j, "content", path, &n->content, &n->content_len);
    }
    if (strcmp(type, "Prepend") == 0) {
        n->kind = NZ_PREPEND;
        return load_string(j, "prepend", path, &n->content, &n->content_len);
    }
    return em_fail(EM_ERR_UNSUPPORTED, "%s.type: normalizer \"%s\" is not supported", path, type);
}

em_status tok_norm_load(json_t *j, const char *path, tok_norm **out) {
    *out = NULL;
    if (!j || json_is_null(j)) return EM_OK;
    if (!json_is_object(j)) return em_fail(EM_ERR_FORMAT, "%s: expected an object or null", path);
    json_t *type = json_object_get(j, "type");
    if (!json_is_string(type)) return em_fail(EM_ERR_FORMAT, "%s.type: expected a string", path);
    tok_norm *n = em_calloc(1, sizeof *n);
    if (!n) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    em_status st = load_kind(j, path, json_string_value(type), n);
    if (st != EM_OK) {
        tok_norm_free(n);
        return st;
    }
    *out = n;
    return EM_OK;
}

/* ASCII is its own NFC, NFD, NFKC and NFKD, and an ASCII character that
 * another ASCII character follows never combines or reorders: the text up
 * to the character before its first non-ASCII byte is copied as it is (a
 * prompt in English skips utf8proc altogether). */
static em_status unicode_form(const char *in, size_t n, utf8proc_option_t opt, tok_buf *out) {
    size_t ascii = 0;
    while (ascii < n && !((unsigned char)in[ascii] & 0x80)) ascii++;
    size_t keep = ascii == n ? n : ascii ? ascii - 1 : 0;
    if (!tok_buf_put(out, in, keep)) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (keep == n) return EM_OK;
    in += keep, n -= keep;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)n, &dst, opt | UTF8PROC_STABLE);
    if (r < 0) return em_fail(EM_ERR_INVALID, "tokenizer: normalization failed: %s", utf8proc_errmsg(r));
    bool ok = tok_buf_put(out, dst, (size_t)r);
    free(dst);
    return ok ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
}

/* Rust's char::to_lowercase: the simple mapping, plus U+0130 which lowers
 * to two characters. */
static em_status lowercase(const char *in, size_t n, tok_buf *out) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += tok_utf8_cp(in + i, n - i, &cp);
        char enc[8];
        size_t l;
        if (cp == 0x130) {
            memcpy(enc, "i\xCC\x87", 3);
            l = 3;
        } else {
            l = (size_t)utf8proc_encode_char(utf8proc_tolower((utf8proc_int32_t)cp), (utf8proc_uint8_t *)enc);
        }
        if (!tok_buf_put(out, enc, l)) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    }
    return EM_OK;
}

static em_status strip(const tok_norm *nz, const char *in, size_t n, tok_buf *out) {
    size_t a = 0, b = n;
    while (nz->left && a < b) {
        uint32_t cp;
        size_t l = tok_utf8_cp(in + a, b - a, &cp);
        if (!tok_is_whitespace(cp)) break;
        a += l;
    }
    while (nz->right && b > a) {
        size_t s = b - 1;
        while (s > a && ((unsigned char)in[s] & 0xC0) == 0x80) s--;
        uint32_t cp;
        tok_utf8_cp(in + s, b - s, &cp);
        if (!tok_is_whitespace(cp)) break;
        b = s;
    }
    return tok_buf_put(out, in + a, b - a) ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
}

static em_status apply_one(const tok_norm *nz, const char *in, size_t n, tok_buf *out) {
    switch (nz->kind) {
    case NZ_NFC: return unicode_form(in, n, UTF8PROC_COMPOSE, out);
    case NZ_NFD: return unicode_form(in, n, UTF8PROC_DECOMPOSE, out);
    case NZ_NFKC: return unicode_form(in, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case NZ_NFKD: return unicode_form(in, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case NZ_LOWER: return lowercase(in, n, out);
    case NZ_STRIP: return strip(nz, in, n, out);
    case NZ_REPLACE: return tok_pattern_replace(&nz->pat, in, n, nz->content, nz->content_len, out);
    case NZ_PREPEND:
        if (n && !tok_buf_put(out, nz->content, nz->content_len)) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
        return tok_buf_put(out, in, n) ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    case NZ_SEQ: break;
    }
    /* Sequence: ping-pong between two scratch buffers. */
    tok_buf a = {0}, b = {0};
    em_status st = tok_buf_put(&a, in, n) ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; st == EM_OK && i < nz->n_kids; i++) {
        b.n = 0;
        st = apply_one(nz->kids[i], a.p, a.n, &b);
        tok_buf t = a;
        a = b;
        b = t;
    }
    if (st == EM_OK && !tok_buf_put(out, a.p, a.n)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    tok_buf_free(&a);
    tok_buf_free(&b);
    return st;
}

em_status tok_norm_apply(const tok_norm *nz, const char *in, size_t n, tok_buf *out) {
    if (!nz) return tok_buf_put(out, in, n) ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    return apply_one(nz, in, n, out);
}
