/* tok_util.c — byte buffers, span lists, and the UTF-8 / Unicode helpers
 * that make the tokenizer agree with the reference (Rust) on what is
 * whitespace, punctuation or a digit, and on lossy UTF-8 decoding. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

bool tok_buf_reserve(tok_buf *b, size_t extra) {
    size_t need;
    if (!em_add(b->n, extra, &need) || !em_add(need, 1, &need)) return false;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need) {
            if (!em_mul(cap, 2, &cap)) return false;
        }
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    return true;
}

bool tok_buf_put(tok_buf *b, const void *s, size_t n) {
    if (!tok_buf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

bool tok_buf_putc(tok_buf *b, char c) { return tok_buf_put(b, &c, 1); }

void tok_buf_free(tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

bool tok_list_push_span(tok_list *l, size_t off, size_t n, bool at_start) {
    if (l->n == l->cap && !em_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) return false;
    l->v[l->n++] = (tok_span){off, n, at_start};
    return true;
}

bool tok_list_push(tok_list *l, const char *s, size_t n, bool at_start) {
    size_t off = l->arena.n;
    return tok_buf_put(&l->arena, s, n) && tok_list_push_span(l, off, n, at_start);
}

void tok_list_clear(tok_list *l) {
    l->n = 0;
    l->arena.n = 0;
}

void tok_list_free(tok_list *l) {
    tok_buf_free(&l->arena);
    free(l->v);
    memset(l, 0, sizeof *l);
}

size_t tok_utf8_len(const char *s, size_t n) {
    unsigned char c = (unsigned char)s[0];
    size_t l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return l <= n ? l : 1;
}

size_t tok_utf8_cp(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    size_t l = tok_utf8_len(s, n);
    uint32_t v = l == 1 ? u[0] : l == 2 ? (u[0] & 0x1Fu) : l == 3 ? (u[0] & 0x0Fu) : (u[0] & 0x07u);
    for (size_t i = 1; i < l; i++) v = (v << 6) | (u[i] & 0x3Fu);
    *cp = v;
    return l;
}

/* Length of the valid sequence at s, or 0 with *bad set to the length of
 * the maximal subpart (the bytes that one U+FFFD replaces). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        unsigned char b = i < n ? s[i] : 0;
        bool ok = i < n && (i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF));
        if (!ok) {
            *bad = i;
            return 0;
        }
    }
    return need;
}

bool tok_utf8_lossy(tok_buf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        size_t bad = 0, l = utf8_seq(u + i, n - i, &bad);
        if (l) {
            i += l;
            continue;
        }
        if (!tok_buf_put(out, s + run, i - run) || !tok_buf_put(out, "\xEF\xBF\xBD", 3)) return false;
        i += bad;
        run = i;
    }
    return tok_buf_put(out, s + run, n - run);
}

bool tok_is_whitespace(uint32_t cp) {
    if (cp >= 0x09 && cp <= 0x0D) return true;
    switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
        return true;
    }
    return cp >= 0x2000 && cp <= 0x200A;
}

bool tok_is_numeric(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool tok_is_alphanumeric(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    switch (c) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NO:
        return true;
    default:
        return false;
    }
}

bool tok_is_punctuation(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                          (cp >= 0x7B && cp <= 0x7E);
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}
