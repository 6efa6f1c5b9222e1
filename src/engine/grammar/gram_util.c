/* gram_util.c — the small containers the grammar front ends share: an
 * arena for expression nodes, the named rule table, code point sets and
 * the GBNF text buffer. */
#include "engine/grammar/grammar_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gx_block {
    struct gx_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} gx_block;

struct gx_arena {
    gx_block *head;
};

gx_arena *gx_arena_new(void) { return em_calloc(1, sizeof(gx_arena)); }

void gx_arena_free(gx_arena *a) {
    if (!a) return;
    for (gx_block *b = a->head, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(a);
}

void *gx_alloc(gx_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        gx_block *b = em_malloc(sizeof(gx_block) + cap);
        if (!b) return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

gx *gx_node(gx_arena *a, gx_kind k) {
    gx *x = gx_alloc(a, sizeof(gx));
    if (x) x->kind = k;
    return x;
}

int gx_rule_id(gx_rules *r, const char *name, size_t len) {
    for (size_t i = 0; i < r->n; i++)
        if (strlen(r->names[i]) == len && memcmp(r->names[i], name, len) == 0) return (int)i;
    if (r->n >= GR_MAX_RULES) return -1;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        char **nn = em_realloc(r->names, cap * sizeof(char *));
        if (!nn) return -1;
        r->names = nn;
        gx **nb = em_realloc(r->bodies, cap * sizeof(gx *));
        if (!nb) return -1;
        r->bodies = nb;
        r->cap = cap;
    }
    char *s = em_strndup(name, len);
    if (!s) return -1;
    r->names[r->n] = s;
    r->bodies[r->n] = NULL;
    return (int)r->n++;
}

void gx_rules_free(gx_rules *r) {
    for (size_t i = 0; i < r->n; i++) free(r->names[i]);
    free(r->names);
    free(r->bodies);
    gx_arena_free(r->arena);
    memset(r, 0, sizeof *r);
}

bool cp_set_add(cp_set *s, uint32_t lo, uint32_t hi) {
    if (lo > hi) return true;
    if (!em_grow((void **)&s->r, &s->cap, 2 * (s->n + 1), sizeof(uint32_t))) return false;
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return true;
}

static int cmp_pair(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

bool cp_set_normalize(cp_set *s, bool negate) {
    if (s->n > 1) qsort(s->r, s->n, 2 * sizeof(uint32_t), cmp_pair); /* an empty set may have no array */
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (k && lo <= s->r[2 * k - 1] + 1) {
            if (hi > s->r[2 * k - 1]) s->r[2 * k - 1] = hi;
        } else {
            s->r[2 * k] = lo;
            s->r[2 * k + 1] = hi;
            k++;
        }
    }
    s->n = k;
    if (negate) {
        cp_set c = {0};
        uint32_t next = 0;
        bool ok = true;
        for (size_t i = 0; i < s->n && ok; i++) {
            if (s->r[2 * i] > next) ok = cp_set_add(&c, next, s->r[2 * i] - 1);
            next = s->r[2 * i + 1] + 1;
        }
        if (ok && next <= GR_MAX_CP) ok = cp_set_add(&c, next, GR_MAX_CP);
        if (!ok) {
            cp_set_free(&c);
            return false;
        }
        cp_set_free(s);
        *s = c;
    }
    /* Surrogates are not characters; UTF-8 cannot carry them. */
    cp_set o = {0};
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        bool ok = true;
        if (hi < 0xD800 || lo > 0xDFFF) ok = cp_set_add(&o, lo, hi);
        else {
            if (lo < 0xD800) ok = cp_set_add(&o, lo, 0xD7FF);
            if (ok && hi > 0xDFFF) ok = cp_set_add(&o, 0xE000, hi);
        }
        if (!ok) {
            cp_set_free(&o);
            return false;
        }
    }
    cp_set_free(s);
    *s = o;
    return true;
}

void cp_set_free(cp_set *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}

void gb_put(gbuf *b, const char *s, size_t n) {
    if (b->oom || !n) return;
    if (b->len + n + 1 > GR_MAX_TEXT * 4 || !em_grow((void **)&b->s, &b->cap, b->len + n + 1, 1)) {
        b->oom = true;
        return;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void gb_puts(gbuf *b, const char *s) { gb_put(b, s, strlen(s)); }

void gb_printf(gbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = true;
        return;
    }
    gb_put(b, tmp, (size_t)n);
}

void gb_literal(gbuf *b, const char *s, size_t n) {
    gb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') gb_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) gb_printf(b, "\\x%02X", c);
        else gb_put(b, (const char *)&s[i], 1);
    }
    gb_put(b, "\"", 1);
}

void gb_class_cp(gbuf *b, uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) gb_printf(b, "%c", (char)cp);
    else if (cp < 0x100) gb_printf(b, "\\x%02X", cp);
    else if (cp < 0x10000) gb_printf(b, "\\u%04X", cp);
    else gb_printf(b, "\\U%08X", cp);
}

void gb_class(gbuf *b, const cp_set *s) {
    gb_put(b, "[", 1);
    for (size_t i = 0; i < s->n; i++) {
        gb_class_cp(b, s->r[2 * i]);
        if (s->r[2 * i + 1] != s->r[2 * i]) {
            gb_put(b, "-", 1);
            gb_class_cp(b, s->r[2 * i + 1]);
        }
    }
    gb_put(b, "]", 1);
}

void gb_free(gbuf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

bool gr_read_count(const char *s, size_t n, size_t *i, int *v) {
    size_t k = *i;
    long x = 0;
    while (k < n && s[k] >= '0' && s[k] <= '9') {
        x = x * 10 + (s[k] - '0');
        if (x > GR_MAX_REPEAT) return false;
        k++;
    }
    if (k == *i) return false;
    *i = k;
    *v = (int)x;
    return true;
}
