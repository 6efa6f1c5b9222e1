/* gbnf_parse.c — GBNF grammar text → named rules of expression trees.
 *
 *   root  ::= "{" ws pair ( "," ws pair )* "}"   # comment
 *   pair  ::= [a-z]+ ":" ( num | "x"{2,4} )?
 *
 * Whitespace and newlines are free everywhere; a rule ends where the next
 * `name ::=` begins. Errors name the line and column. */
#include "engine/grammar/grammar_internal.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <string.h>

typedef struct gp {
    const char *s;
    size_t n, i;
    gx_rules *r;
    int depth;
} gp;

static em_status gp_fail(const gp *p, const char *what) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') line++, col = 1;
        else col++;
    }
    return em_fail(EM_ERR_FORMAT, "grammar line %zu column %zu: %s", line, col, what);
}

static em_status gp_oom(void) { return em_fail(EM_ERR_NOMEM, "grammar: out of memory"); }

static void skip_space(gp *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else break;
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static size_t name_len(const gp *p, size_t at) {
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k])) k++;
    return k - at;
}

/* True when a `name ::=` starts at p->i (the end of the current rule). */
static bool at_rule_start(const gp *p) {
    size_t l = name_len(p, p->i);
    if (!l) return false;
    gp q = *p;
    q.i += l;
    skip_space(&q);
    return q.n - q.i >= 3 && memcmp(q.s + q.i, "::=", 3) == 0;
}

/* One character of a literal or class at p->i (escapes decoded). */
static em_status read_char(gp *p, uint32_t *cp) {
    if (p->i >= p->n) return gp_fail(p, "unexpected end of grammar");
    if (p->s[p->i] != '\\') {
        int k = utf8_decode(p->s + p->i, p->n - p->i, cp);
        if (k <= 0) return gp_fail(p, "invalid UTF-8");
        p->i += (size_t)k;
        return EM_OK;
    }
    if (p->i + 1 >= p->n) return gp_fail(p, "unfinished escape");
    char e = p->s[p->i + 1];
    p->i += 2;
    int digits = 0;
    switch (e) {
    case 'n': *cp = '\n'; return EM_OK;
    case 'r': *cp = '\r'; return EM_OK;
    case 't': *cp = '\t'; return EM_OK;
    case 'f': *cp = '\f'; return EM_OK;
    case 'v': *cp = '\v'; return EM_OK;
    case '0': *cp = 0; return EM_OK;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
        *cp = (uint32_t)e;
        return EM_OK;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: p->i -= 2; return gp_fail(p, "unknown escape");
    }
    uint32_t v = 0;
    for (int d = 0; d < digits; d++) {
        int h = p->i < p->n ? em_hex_digit(p->s[p->i]) : -1;
        if (h < 0) return gp_fail(p, "bad hex digit in escape");
        v = v * 16 + (uint32_t)h;
        p->i++;
    }
    if (v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return gp_fail(p, "escape is not a Unicode scalar value");
    *cp = v;
    return EM_OK;
}

static em_status parse_literal(gp *p, gx **out) {
    p->i++; /* opening quote */
    size_t cap = 16, len = 0;
    uint8_t *buf = gx_alloc(p->r->arena, cap);
    if (!buf) return gp_oom();
    while (p->i < p->n && p->s[p->i] != '"') {
        uint32_t cp;
        EM_TRY(read_char(p, &cp));
        if (len + 4 > cap) {
            uint8_t *nb = gx_alloc(p->r->arena, cap * 2);
            if (!nb) return gp_oom();
            memcpy(nb, buf, len);
            buf = nb;
            cap *= 2;
        }
        len += (size_t)utf8_encode(cp, (char *)buf + len);
    }
    if (p->i >= p->n) return gp_fail(p, "unterminated string literal");
    p->i++;
    gx *x = gx_node(p->r->arena, len ? GX_BYTES : GX_EMPTY);
    if (!x) return gp_oom();
    x->bytes = buf;
    x->len = len;
    *out = x;
    return EM_OK;
}

static em_status class_node(gp *p, cp_set *set, bool negate, gx **out) {
    if (!cp_set_normalize(set, negate)) return gp_oom();
    gx *x = gx_node(p->r->arena, GX_CLASS);
    uint32_t *r = set->n ? gx_alloc(p->r->arena, set->n * 2 * sizeof(uint32_t)) : NULL;
    if (!x || (set->n && !r)) return gp_oom();
    if (set->n) memcpy(r, set->r, set->n * 2 * sizeof(uint32_t));
    x->ranges = r;
    x->n_ranges = set->n;
    *out = x;
    return EM_OK;
}

static em_status parse_class(gp *p, gx **out) {
    p->i++; /* [ */
    bool neg = p->i < p->n && p->s[p->i] == '^';
    if (neg) p->i++;
    cp_set set = {0};
    em_status s = EM_OK;
    while (s == EM_OK && p->i < p->n && p->s[p->i] != ']') {
        uint32_t lo, hi;
        s = read_char(p, &lo);
        hi = lo;
        if (s == EM_OK && p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            s = read_char(p, &hi);
            if (s == EM_OK && hi < lo) s = gp_fail(p, "character range is reversed");
        }
        if (s == EM_OK && !cp_set_add(&set, lo, hi)) s = gp_oom();
    }
    if (s == EM_OK && p->i >= p->n) s = gp_fail(p, "unterminated character class");
    if (s == EM_OK) {
        p->i++;
        s = class_node(p, &set, neg, out);
    }
    cp_set_free(&set);
    return s;
}

static em_status parse_alts(gp *p, gx **out);

static bool read_int(gp *p, int *v) { return gr_read_count(p->s, p->n, &p->i, v); }

static em_status parse_braces(gp *p, int *min, int *max) {
    p->i++; /* { */
    skip_space(p);
    if (!read_int(p, min)) return gp_fail(p, "expected a repetition count (0..10000)");
    skip_space(p);
    *max = *min;
    if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        skip_space(p);
        *max = GR_UNBOUNDED;
        if (p->i < p->n && p->s[p->i] != '}') {
            if (!read_int(p, max)) return gp_fail(p, "expected a repetition count (0..10000)");
            if (*max < *min) return gp_fail(p, "repetition {m,n} with n < m");
        }
        skip_space(p);
    }
    if (p->i >= p->n || p->s[p->i] != '}') return gp_fail(p, "expected '}'");
    p->i++;
    return EM_OK;
}

static em_status parse_atom(gp *p, gx **out) {
    char c = p->s[p->i];
    if (c == '"') return parse_literal(p, out);
    if (c == '[') return parse_class(p, out);
    if (c == '.') {
        p->i++;
        cp_set set = {0};
        em_status s = cp_set_add(&set, 0, GR_MAX_CP) ? class_node(p, &set, false, out) : gp_oom();
        cp_set_free(&set);
        return s;
    }
    if (c == '(') {
        if (++p->depth > GR_MAX_DEPTH) return gp_fail(p, "groups nested too deeply");
        p->i++;
        EM_TRY(parse_alts(p, out));
        skip_space(p);
        if (p->i >= p->n || p->s[p->i] != ')') return gp_fail(p, "expected ')'");
        p->i++;
        p->depth--;
        return EM_OK;
    }
    size_t l = name_len(p, p->i);
    if (!l) return gp_fail(p, "expected a literal, a class, a rule name or '('");
    int id = gx_rule_id(p->r, p->s + p->i, l);
    if (id < 0) return gp_oom();
    gx *x = gx_node(p->r->arena, GX_REF);
    if (!x) return gp_oom();
    x->ref = id;
    p->i += l;
    *out = x;
    return EM_OK;
}

static em_status parse_postfix(gp *p, gx **out) {
    gx *x;
    EM_TRY(parse_atom(p, &x));
    for (;;) {
        skip_space(p);
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        int min, max;
        if (c == '*') min = 0, max = GR_UNBOUNDED, p->i++;
        else if (c == '+') min = 1, max = GR_UNBOUNDED, p->i++;
        else if (c == '?') min = 0, max = 1, p->i++;
        else if (c == '{') EM_TRY(parse_braces(p, &min, &max));
        else break;
        gx *r = gx_node(p->r->arena, GX_REPEAT);
        gx **k = gx_alloc(p->r->arena, sizeof(gx *));
        if (!r || !k) return gp_oom();
        k[0] = x;
        r->kids = k;
        r->n_kids = 1;
        r->min = min;
        r->max = max;
        x = r;
    }
    *out = x;
    return EM_OK;
}

/* Appends x to a growing list (arena-backed, doubled as needed). */
static em_status list_push(gp *p, gx ***list, size_t *n, size_t *cap, gx *x) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        gx **nl = gx_alloc(p->r->arena, nc * sizeof(gx *));
        if (!nl) return gp_oom();
        if (*n) memcpy(nl, *list, *n * sizeof(gx *));
        *list = nl;
        *cap = nc;
    }
    (*list)[(*n)++] = x;
    return EM_OK;
}

static em_status parse_seq(gp *p, gx **out) {
    gx **items = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        skip_space(p);
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        if (c == '|' || c == ')' || at_rule_start(p)) break;
        gx *x = NULL;
        EM_TRY(parse_postfix(p, &x));
        EM_TRY(list_push(p, &items, &n, &cap, x));
    }
    if (n == 1) {
        *out = items[0];
        return EM_OK;
    }
    gx *s = gx_node(p->r->arena, n ? GX_SEQ : GX_EMPTY);
    if (!s) return gp_oom();
    s->kids = items;
    s->n_kids = n;
    *out = s;
    return EM_OK;
}

static em_status parse_alts(gp *p, gx **out) {
    gx **alts = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        gx *x = NULL;
        EM_TRY(parse_seq(p, &x));
        EM_TRY(list_push(p, &alts, &n, &cap, x));
        skip_space(p);
        if (p->i < p->n && p->s[p->i] == '|') p->i++;
        else break;
    }
    if (n == 1) {
        *out = alts[0];
        return EM_OK;
    }
    gx *a = gx_node(p->r->arena, GX_ALT);
    if (!a) return gp_oom();
    a->kids = alts;
    a->n_kids = n;
    *out = a;
    return EM_OK;
}

em_status gbnf_parse(const char *text, size_t len, gx_rules *out) {
    memset(out, 0, sizeof *out);
    if (len > GR_MAX_TEXT) return em_fail(EM_ERR_LIMIT, "grammar: %zu bytes exceeds the limit of %u", len, GR_MAX_TEXT);
    if (!(out->arena = gx_arena_new())) return gp_oom();
    gp p = {text, len, 0, out, 0};
    em_status s = EM_OK;
    for (;;) {
        skip_space(&p);
        if (p.i >= p.n) break;
        size_t l = name_len(&p, p.i);
        if (!l) {
            s = gp_fail(&p, "expected a rule name");
            break;
        }
        int id = gx_rule_id(out, p.s + p.i, l);
        if (id < 0) {
            s = gp_oom();
            break;
        }
        size_t at = p.i;
        p.i += l;
        skip_space(&p);
        if (p.n - p.i < 3 || memcmp(p.s + p.i, "::=", 3) != 0) {
            s = gp_fail(&p, "expected '::='");
            break;
        }
        p.i += 3;
        if (out->bodies[id]) {
            p.i = at;
            s = gp_fail(&p, "rule defined twice");
            break;
        }
        gx *body;
        if ((s = parse_alts(&p, &body)) != EM_OK) break;
        skip_space(&p);
        if (p.i < p.n && p.s[p.i] == ')') {
            s = gp_fail(&p, "unbalanced ')'");
            break;
        }
        out->bodies[id] = body;
    }
    if (s == EM_OK && out->n == 0) s = em_fail(EM_ERR_FORMAT, "grammar: no rules");
    if (s != EM_OK) gx_rules_free(out);
    return s;
}
