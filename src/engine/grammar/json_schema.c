/* json_schema.c — JSON Schema → GBNF text → grammar.
 *
 * Each subschema becomes an expression; $ref targets become rules (so
 * recursion works); objects list their properties in schema order with the
 * optional ones skippable. Keywords ember enforces: type (string or list),
 * enum, const, anyOf, oneOf (as anyOf: the alternatives must not overlap),
 * allOf with one member, $ref (#, #/$defs/.., #/definitions/.., any JSON
 * pointer into the document), properties, required, additionalProperties
 * (false, or a schema for objects without "properties": with properties
 * listed, no other keys are produced, which every schema allows), items, prefixItems,
 * minItems, maxItems, minLength, maxLength, pattern, format (date, time,
 * date-time, uuid, email, ipv4, hostname), minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (integers: any; numbers: integral
 * bounds). Annotations (title, description, default, examples, $schema,
 * $id, $comment, readOnly, writeOnly, deprecated) are ignored. Any other
 * keyword is EM_ERR_UNSUPPORTED naming it and its location. */
#include "engine/grammar/grammar_internal.h"

#include "base/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SC_MAX_REFS 4096
#define SC_MAX_ITEMS 1000 /* explicit minItems/maxItems bound */
#define SC_MAX_LEN 10000   /* explicit string length bound */

typedef struct sc_ref {
    json_t *target;
    char name[48];
} sc_ref;

typedef struct sc {
    gbuf rules; /* definitions */
    json_t *doc;
    const char *prefix;
    int counter;
    sc_ref *refs;
    size_t n_refs, cap_refs;
    int depth;
} sc;

static em_status sc_fail(em_status code, const char *path, const char *fmt, const char *arg) {
    return em_fail(code, "json schema at %s: %s%s%s", *path ? path : "/", fmt, arg ? arg : "", arg ? "'" : "");
}

static em_status sc_oom(void) { return em_fail(EM_ERR_NOMEM, "json schema: out of memory"); }

/* Shared JSON pieces, emitted once per grammar. */
static const char json_base[] =
    "j-ws ::= ( [ \\t]{1,2} | \"\\n\" [ \\t]{0,32} )?\n"
    "j-value ::= j-object | j-array | j-string | j-number | \"true\" | \"false\" | \"null\"\n"
    "j-object ::= \"{\" j-ws ( j-pair ( \",\" j-ws j-pair )* )? \"}\"\n"
    "j-pair ::= j-string j-ws \":\" j-ws j-value j-ws\n"
    "j-array ::= \"[\" j-ws ( j-value j-ws ( \",\" j-ws j-value j-ws )* )? \"]\"\n"
    "j-string ::= \"\\\"\" j-char* \"\\\"\"\n"
    "j-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" j-hex4 )\n"
    "j-hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"
    "j-digits ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "j-number ::= \"-\"? j-digits ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "j-integer ::= \"-\"? j-digits\n";

static const char *const annotations[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "readOnly", "writeOnly", "deprecated", "$defs",
                                          "definitions", NULL};

static bool is_annotation(const char *k) {
    for (int i = 0; annotations[i]; i++)
        if (!strcmp(annotations[i], k)) return true;
    return false;
}

static em_status sc_expr(sc *c, json_t *s, const char *path, gbuf *o);

static void new_name(sc *c, char *buf, size_t n) { snprintf(buf, n, "%ss%d", c->prefix, c->counter++); }

/* Defines `name ::= expr` from an expression already built. */
static void define(sc *c, const char *name, const gbuf *expr) {
    gb_printf(&c->rules, "%s ::= ", name);
    gb_put(&c->rules, expr->s ? expr->s : "\"\"", expr->s ? expr->len : 2);
    gb_puts(&c->rules, "\n");
}

static void subpath(char *buf, size_t n, const char *path, const char *a, const char *b) {
    snprintf(buf, n, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* ---- literals (enum, const) as a prefix tree, so huge enums stay cheap ---- */

typedef struct lit {
    char *s;
    size_t n;
} lit;

static int cmp_lit(const void *a, const void *b) {
    const lit *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static em_status lit_tree(gbuf *o, const lit *l, size_t lo, size_t hi, size_t d, int depth) {
    if (depth > 4 * GR_MAX_DEPTH) return em_fail(EM_ERR_LIMIT, "json schema: enum values too deeply branched");
    gb_puts(o, "(");
    bool first = true;
    size_t i = lo;
    if (i < hi && l[i].n == d) { /* a value ending here */
        gb_puts(o, "\"\"");
        first = false;
        while (i < hi && l[i].n == d) i++;
    }
    while (i < hi) {
        size_t j = i + 1;
        while (j < hi && l[j].s[d] == l[i].s[d]) j++;
        size_t e = d + 1; /* common prefix of l[i..j) */
        while (e < l[i].n && e < l[j - 1].n && l[i].s[e] == l[j - 1].s[e]) e++;
        if (!first) gb_puts(o, " | ");
        first = false;
        gb_literal(o, l[i].s + d, e - d);
        if (!(j == i + 1 && l[i].n == e)) {
            gb_puts(o, " ");
            EM_TRY(lit_tree(o, l, i, j, e, depth + 1));
        }
        i = j;
    }
    if (first) gb_puts(o, "[^\\x00-\\U0010FFFF]"); /* no value: matches nothing */
    gb_puts(o, ")");
    return EM_OK;
}

static bool type_ok(json_t *v, json_t *type) {
    if (!type) return true;
    json_t *one = type;
    size_t k = 0, n = json_is_array(type) ? json_array_size(type) : 1;
    for (; k < n; k++) {
        if (json_is_array(type)) one = json_array_get(type, k);
        const char *t = json_string_value(one);
        if (!t) continue;
        if ((!strcmp(t, "string") && json_is_string(v)) || (!strcmp(t, "boolean") && json_is_boolean(v)) ||
            (!strcmp(t, "null") && json_is_null(v)) || (!strcmp(t, "object") && json_is_object(v)) ||
            (!strcmp(t, "array") && json_is_array(v)) || (!strcmp(t, "number") && json_is_number(v)) ||
            (!strcmp(t, "integer") && (json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))))))
            return true;
    }
    return false;
}

static em_status literals(sc *c, json_t *values, json_t *type, const char *path, gbuf *o) {
    (void)c;
    size_t n = json_array_size(values), m = 0, total = 0;
    lit *l = em_calloc(n + 1, sizeof(lit));
    if (!l) return sc_oom();
    em_status s = EM_OK;
    for (size_t i = 0; i < n && s == EM_OK; i++) {
        json_t *v = json_array_get(values, i);
        if (!type_ok(v, type)) continue;
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) s = sc_oom();
        else {
            l[m].s = t;
            l[m++].n = strlen(t);
            total += strlen(t);
            if (total > GR_MAX_TEXT) s = sc_fail(EM_ERR_LIMIT, path, "enum values exceed the size limit", NULL);
        }
    }
    if (s == EM_OK && m == 0) s = sc_fail(EM_ERR_UNSUPPORTED, path, "no enum value matches the type", NULL);
    if (s == EM_OK) {
        qsort(l, m, sizeof(lit), cmp_lit);
        s = lit_tree(o, l, 0, m, 0, 0);
    }
    for (size_t i = 0; i < m; i++) free(l[i].s);
    free(l);
    return s;
}

/* ---- numbers ---- */

#define NUM_LIMIT 9e15 /* bounds must be exact in a double and an int64 */

static void digits_same_len(gbuf *o, const char *a, const char *b, size_t n) {
    if (n == 0) {
        gb_puts(o, "\"\"");
        return;
    }
    if (a[0] == b[0]) {
        gb_printf(o, "\"%c\" ", a[0]);
        digits_same_len(o, a + 1, b + 1, n - 1);
        return;
    }
    bool low0 = true, high9 = true;
    for (size_t i = 1; i < n; i++) low0 &= a[i] == '0', high9 &= b[i] == '9';
    if (low0 && high9) {
        gb_printf(o, "[%c-%c]", a[0], b[0]);
        if (n > 1) gb_printf(o, " [0-9]{%zu}", n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    gb_printf(o, "( \"%c\" (", a[0]);
    digits_same_len(o, a + 1, nines, n - 1);
    gb_puts(o, ")");
    if (a[0] + 1 <= b[0] - 1) {
        gb_printf(o, " | [%c-%c]", a[0] + 1, b[0] - 1);
        if (n > 1) gb_printf(o, " [0-9]{%zu}", n - 1);
    }
    gb_printf(o, " | \"%c\" (", b[0]);
    digits_same_len(o, zeros, b + 1, n - 1);
    gb_puts(o, ") )");
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded). */
static void uint_range(gbuf *o, long long lo, long long hi) {
    char a[24], b[24];
    int la = snprintf(a, sizeof a, "%lld", lo);
    int lb = hi < 0 ? 17 : snprintf(b, sizeof b, "%lld", hi);
    gb_puts(o, "(");
    for (int len = la; len <= lb; len++) {
        char x[24], y[24];
        if (len == la) memcpy(x, a, (size_t)la + 1);
        else {
            x[0] = '1';
            memset(x + 1, '0', (size_t)len - 1);
        }
        if (hi >= 0 && len == lb) memcpy(y, b, (size_t)lb + 1);
        else memset(y, '9', (size_t)len);
        if (len > la) gb_puts(o, " | ");
        gb_puts(o, "(");
        digits_same_len(o, x, y, (size_t)len);
        gb_puts(o, ")");
    }
    gb_puts(o, ")");
}

static em_status read_bound(json_t *s, const char *key, const char *path, double *v, bool *has) {
    json_t *b = json_object_get(s, key);
    *has = b != NULL;
    if (!b) return EM_OK;
    if (!json_is_number(b)) return sc_fail(EM_ERR_FORMAT, path, "bound is not a number: '", key);
    *v = json_number_value(b);
    if (fabs(*v) > NUM_LIMIT) return sc_fail(EM_ERR_UNSUPPORTED, path, "bound too large to enforce: '", key);
    return EM_OK;
}

typedef struct bounds {
    bool has_lo, has_hi, ex_lo, ex_hi;
    double lo, hi;
} bounds;

static em_status get_bounds(json_t *s, const char *path, bounds *b) {
    double v;
    bool h;
    memset(b, 0, sizeof *b);
    EM_TRY(read_bound(s, "minimum", path, &b->lo, &b->has_lo));
    EM_TRY(read_bound(s, "maximum", path, &b->hi, &b->has_hi));
    EM_TRY(read_bound(s, "exclusiveMinimum", path, &v, &h));
    if (h && (!b->has_lo || v >= b->lo)) b->lo = v, b->has_lo = b->ex_lo = true;
    EM_TRY(read_bound(s, "exclusiveMaximum", path, &v, &h));
    if (h && (!b->has_hi || v <= b->hi)) b->hi = v, b->has_hi = b->ex_hi = true;
    json_t *mo = json_object_get(s, "multipleOf");
    if (mo && !(json_is_number(mo) && json_number_value(mo) == 1))
        return sc_fail(EM_ERR_UNSUPPORTED, path, "unsupported keyword '", "multipleOf");
    return EM_OK;
}

static em_status integer_expr(json_t *s, const char *path, gbuf *o) {
    bounds b;
    EM_TRY(get_bounds(s, path, &b));
    if (json_object_get(s, "multipleOf") && !json_is_integer(json_object_get(s, "multipleOf")) &&
        json_number_value(json_object_get(s, "multipleOf")) != 1)
        return sc_fail(EM_ERR_UNSUPPORTED, path, "unsupported keyword '", "multipleOf");
    if (!b.has_lo && !b.has_hi) {
        gb_puts(o, "j-integer");
        return EM_OK;
    }
    long long lo = b.has_lo ? (long long)(b.ex_lo ? floor(b.lo) + 1 : ceil(b.lo)) : 0;
    long long hi = b.has_hi ? (long long)(b.ex_hi ? ceil(b.hi) - 1 : floor(b.hi)) : 0;
    if (b.has_lo && b.has_hi && lo > hi) return sc_fail(EM_ERR_UNSUPPORTED, path, "no integer satisfies the bounds", NULL);
    bool any = false;
    gb_puts(o, "(");
    if (!b.has_hi || hi >= 0) { /* non-negative part */
        uint_range(o, b.has_lo && lo > 0 ? lo : 0, b.has_hi ? hi : -1);
        any = true;
    }
    if (!b.has_lo || lo < 0) { /* negative part: -k, k in [max(1,-hi), -lo] */
        if (any) gb_puts(o, " | ");
        gb_puts(o, "\"-\" ");
        uint_range(o, b.has_hi && hi < -1 ? -hi : 1, b.has_lo ? -lo : -1);
    }
    gb_puts(o, ")");
    return EM_OK;
}

/* Non-negative numbers between integral a and b (b < 0: unbounded). */
static void unum_range(gbuf *o, long long a, long long b, bool exa, bool exb) {
    static const char frac[] = "( \".\" [0-9]{1,15} )?";
    gb_puts(o, "(");
    if (exa) gb_printf(o, "\"%lld\" \".\" [0-9]{0,14} [1-9]", a);
    else gb_printf(o, "\"%lld\" %s", a, frac);
    if (b < 0 || a + 1 <= b - 1) {
        gb_puts(o, " | ");
        uint_range(o, a + 1, b < 0 ? -1 : b - 1);
        gb_printf(o, " %s", frac);
    }
    if (b >= 0 && !exb && b > a) gb_printf(o, " | \"%lld\"", b);
    gb_puts(o, ")");
}

static em_status number_expr(json_t *s, const char *path, gbuf *o) {
    bounds b;
    EM_TRY(get_bounds(s, path, &b));
    if (!b.has_lo && !b.has_hi) {
        gb_puts(o, "j-number");
        return EM_OK;
    }
    if ((b.has_lo && b.lo != floor(b.lo)) || (b.has_hi && b.hi != floor(b.hi)))
        return sc_fail(EM_ERR_UNSUPPORTED, path, "number bounds that are not whole numbers are not supported", NULL);
    long long lo = (long long)b.lo, hi = (long long)b.hi;
    if (b.has_lo && b.has_hi && (lo > hi || (lo == hi && (b.ex_lo || b.ex_hi))))
        return sc_fail(EM_ERR_UNSUPPORTED, path, "no number satisfies the bounds", NULL);
    bool any = false;
    gb_puts(o, "(");
    if (!b.has_hi || hi > 0 || (hi == 0 && !b.ex_hi)) {
        long long a = b.has_lo && lo >= 0 ? lo : 0;
        bool exa = b.has_lo && lo >= 0 && b.ex_lo;
        if (b.has_hi && a == hi) gb_printf(o, "\"%lld\"", a);
        else unum_range(o, a, b.has_hi ? hi : -1, exa, b.ex_hi);
        any = true;
    }
    if (!b.has_lo || lo < 0) { /* -w, w between max(0,-hi) and -lo */
        long long a = b.has_hi && hi <= 0 ? -hi : 0;
        bool exa = b.has_hi && hi <= 0 && b.ex_hi;
        if (any) gb_puts(o, " | ");
        gb_puts(o, "\"-\" ");
        if (b.has_lo && a == -lo) gb_printf(o, "\"%lld\"", a);
        else unum_range(o, a, b.has_lo ? -lo : -1, exa, b.ex_lo);
    }
    gb_puts(o, ")");
    return EM_OK;
}

/* ---- strings ---- */

static const struct {
    const char *name, *re;
} formats[] = {
    {"date", "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"},
    {"time", "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"},
    {"date-time", "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
                  "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"},
    {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
    {"email", "[a-zA-Z0-9_+-]{1,32}(?:\\.[a-zA-Z0-9_+-]{1,32}){0,3}@[a-z0-9]{1,20}(?:\\.[a-z0-9]{1,20}){0,3}\\.[a-z]{2,8}"},
    {"ipv4", "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"},
    {"hostname", "[a-z0-9]{1,20}(?:\\.[a-z0-9]{1,20}){0,3}"},
};

static em_status read_count(json_t *s, const char *key, const char *path, long limit, long *v, bool *has) {
    json_t *x = json_object_get(s, key);
    *has = x != NULL;
    if (!x) return EM_OK;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return sc_fail(EM_ERR_FORMAT, path, "must be a non-negative integer: '", key);
    if (json_integer_value(x) > limit) return sc_fail(EM_ERR_LIMIT, path, "count above the supported limit: '", key);
    *v = (long)json_integer_value(x);
    return EM_OK;
}

static em_status string_expr(json_t *s, const char *path, gbuf *o) {
    long mn = 0, mx = 0;
    bool hmn, hmx;
    EM_TRY(read_count(s, "minLength", path, SC_MAX_LEN, &mn, &hmn));
    EM_TRY(read_count(s, "maxLength", path, SC_MAX_LEN, &mx, &hmx));
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if ((pat || fmt) && (hmn || hmx))
        return sc_fail(EM_ERR_UNSUPPORTED, path, "pattern or format combined with minLength/maxLength is not supported", NULL);
    if (pat && fmt) return sc_fail(EM_ERR_UNSUPPORTED, path, "pattern combined with format is not supported", NULL);
    if (pat || fmt) {
        const char *re = NULL;
        if (pat) {
            if (!json_is_string(pat)) return sc_fail(EM_ERR_FORMAT, path, "pattern is not a string", NULL);
            re = json_string_value(pat);
        } else {
            const char *f = json_string_value(fmt);
            for (size_t i = 0; f && i < sizeof formats / sizeof formats[0]; i++)
                if (!strcmp(formats[i].name, f)) re = formats[i].re;
            if (!re) return sc_fail(EM_ERR_UNSUPPORTED, path, "unsupported format '", f ? f : "?");
        }
        gb_puts(o, "\"\\\"\" ");
        em_status st = regex_to_gbnf_expr(re, strlen(re), true, o);
        if (st != EM_OK) return em_fail_prefix(st, "json schema at %s: pattern", *path ? path : "/");
        gb_puts(o, " \"\\\"\"");
        return EM_OK;
    }
    if (hmn && hmx && mn > mx) return sc_fail(EM_ERR_UNSUPPORTED, path, "minLength is above maxLength", NULL);
    if (!hmn && !hmx) gb_puts(o, "j-string");
    else if (hmx) gb_printf(o, "\"\\\"\" j-char{%ld,%ld} \"\\\"\"", mn, mx);
    else gb_printf(o, "\"\\\"\" j-char{%ld,} \"\\\"\"", mn);
    return EM_OK;
}

/* ---- objects and arrays ---- */

static em_status object_expr(sc *c, json_t *s, const char *path, gbuf *o) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return sc_fail(EM_ERR_FORMAT, path, "properties is not an object", NULL);
    if (req && !json_is_array(req)) return sc_fail(EM_ERR_FORMAT, path, "required is not an array", NULL);
    long minp = 0, maxp = 0;
    bool hmin, hmax;
    EM_TRY(read_count(s, "minProperties", path, SC_MAX_ITEMS, &minp, &hmin));
    EM_TRY(read_count(s, "maxProperties", path, SC_MAX_ITEMS, &maxp, &hmax));
    size_t np = props ? json_object_size(props) : 0;
    if (!props && json_array_size(req) == 0 && addl != json_false()) {
        /* a map: {"additionalProperties": schema} */
        char vp[512];
        subpath(vp, sizeof vp, path, "additionalProperties", NULL);
        gbuf val = {0};
        em_status st = json_is_object(addl) ? sc_expr(c, addl, vp, &val) : (gb_puts(&val, "j-value"), EM_OK);
        if (st == EM_OK) {
            char pair[48];
            new_name(c, pair, sizeof pair);
            gb_printf(&c->rules, "%s ::= j-string j-ws \":\" j-ws ", pair);
            gb_put(&c->rules, val.s, val.len);
            gb_puts(&c->rules, " j-ws\n");
            long lo = hmin ? minp : 0;
            if (hmax && maxp < lo) st = sc_fail(EM_ERR_UNSUPPORTED, path, "minProperties is above maxProperties", NULL);
            else if (hmax && maxp == 0) gb_puts(o, "\"{\" j-ws \"}\"");
            else if (lo == 0)
                hmax ? gb_printf(o, "\"{\" j-ws ( %s ( \",\" j-ws %s ){0,%ld} )? \"}\"", pair, pair, maxp - 1)
                     : gb_printf(o, "\"{\" j-ws ( %s ( \",\" j-ws %s )* )? \"}\"", pair, pair);
            else
                hmax ? gb_printf(o, "\"{\" j-ws %s ( \",\" j-ws %s ){%ld,%ld} \"}\"", pair, pair, lo - 1, maxp - 1)
                     : gb_printf(o, "\"{\" j-ws %s ( \",\" j-ws %s ){%ld,} \"}\"", pair, pair, lo - 1);
        }
        gb_free(&val);
        return st;
    }
    if (json_is_object(addl) && json_object_size(addl) > 0 && np == 0)
        return sc_fail(EM_ERR_UNSUPPORTED, path, "additionalProperties schema together with properties or required", NULL);
    /* Properties in order: names[i], required flags, value rules. */
    size_t nreq = json_array_size(req), n = 0;
    const char **names = em_calloc(np + nreq + 1, sizeof(char *));
    json_t **schemas = em_calloc(np + nreq + 1, sizeof(json_t *));
    bool *required = em_calloc(np + nreq + 1, 1);
    em_status st = names && schemas && required ? EM_OK : sc_oom();
    const char *key;
    json_t *val;
    if (st == EM_OK)
        json_object_foreach(props, key, val) {
            names[n] = key;
            schemas[n++] = val;
        }
    for (size_t i = 0; i < nreq && st == EM_OK; i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (!r) {
            st = sc_fail(EM_ERR_FORMAT, path, "required holds a non-string", NULL);
            break;
        }
        size_t k = 0;
        while (k < n && strcmp(names[k], r)) k++;
        if (k == n) {
            if (addl == json_false())
                st = sc_fail(EM_ERR_UNSUPPORTED, path, "required property is not allowed by additionalProperties: '", r);
            names[n] = r;
            schemas[n++] = NULL; /* any value */
        }
        required[k] = true;
    }
    size_t n_required = 0;
    for (size_t i = 0; i < n; i++) n_required += required[i];
    if (st == EM_OK && hmin && (size_t)minp > n_required)
        st = sc_fail(EM_ERR_UNSUPPORTED, path, "minProperties above the number of required properties", NULL);
    if (st == EM_OK && hmax && (size_t)maxp < n)
        st = sc_fail(EM_ERR_UNSUPPORTED, path, "maxProperties below the number of properties", NULL);
    /* kv_i rules, then T_i (something before: comma) and F_i (nothing yet). */
    char base[48];
    new_name(c, base, sizeof base);
    for (size_t i = 0; i < n && st == EM_OK; i++) {
        char vp[512];
        subpath(vp, sizeof vp, path, "properties", names[i]);
        gbuf v = {0};
        st = schemas[i] ? sc_expr(c, schemas[i], vp, &v) : (gb_puts(&v, "j-value"), EM_OK);
        if (st == EM_OK) {
            gb_printf(&c->rules, "%s-kv%zu ::= ", base, i);
            gb_literal(&c->rules, "\"", 1);
            gb_puts(&c->rules, " ");
            json_t *ks = json_string(names[i]);
            char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
            if (!kj) st = sc_oom();
            else gb_literal(&c->rules, kj + 1, strlen(kj) - 1); /* the key and its closing quote */
            free(kj);
            json_decref(ks);
            gb_puts(&c->rules, " j-ws \":\" j-ws ");
            gb_put(&c->rules, v.s, v.len);
            gb_puts(&c->rules, " j-ws\n");
        }
        gb_free(&v);
    }
    for (size_t i = n; st == EM_OK && i-- > 0;) {
        gb_printf(&c->rules, "%s-t%zu ::= ", base, i);
        if (required[i]) gb_printf(&c->rules, "\",\" j-ws %s-kv%zu", base, i);
        else gb_printf(&c->rules, "( \",\" j-ws %s-kv%zu )?", base, i);
        if (i + 1 < n) gb_printf(&c->rules, " %s-t%zu", base, i + 1);
        gb_printf(&c->rules, "\n%s-f%zu ::= %s-kv%zu", base, i, base, i);
        if (i + 1 < n) gb_printf(&c->rules, " %s-t%zu", base, i + 1);
        if (!required[i]) {
            if (i + 1 < n) gb_printf(&c->rules, " | %s-f%zu", base, i + 1);
            else gb_puts(&c->rules, " | \"\"");
        }
        gb_puts(&c->rules, "\n");
    }
    if (st == EM_OK) {
        if (n) gb_printf(o, "\"{\" j-ws %s-f0 \"}\"", base);
        else gb_puts(o, "\"{\" j-ws \"}\"");
    }
    free(names);
    free(schemas);
    free(required);
    return st;
}

static em_status array_expr(sc *c, json_t *s, const char *path, gbuf *o) {
    long mn = 0, mx = 0;
    bool hmn, hmx;
    EM_TRY(read_count(s, "minItems", path, SC_MAX_ITEMS, &mn, &hmn));
    EM_TRY(read_count(s, "maxItems", path, SC_MAX_ITEMS, &mx, &hmx));
    json_t *u = json_object_get(s, "uniqueItems");
    if (u && u != json_false()) return sc_fail(EM_ERR_UNSUPPORTED, path, "unsupported keyword '", "uniqueItems");
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (json_is_array(items) && !prefix) prefix = items, items = NULL; /* draft 4 tuples */
    if (prefix && !json_is_array(prefix)) return sc_fail(EM_ERR_FORMAT, path, "prefixItems is not an array", NULL);
    size_t np = json_array_size(prefix);
    if (hmn && hmx && mn > mx) return sc_fail(EM_ERR_UNSUPPORTED, path, "minItems is above maxItems", NULL);
    if (np && (size_t)mn < np && hmn) mn = (long)np;
    if (np && !hmn) mn = (long)np; /* every tuple position is produced */
    bool closed = items == json_false() || (np && !items && json_object_get(s, "additionalItems") == json_false());
    if (!hmx && closed) mx = (long)np, hmx = true;
    if (hmx && (size_t)mx < np) return sc_fail(EM_ERR_UNSUPPORTED, path, "maxItems below the number of prefixItems", NULL);
    gbuf elem = {0};
    char ep[512];
    subpath(ep, sizeof ep, path, "items", NULL);
    em_status st = EM_OK;
    if (json_is_object(items)) st = sc_expr(c, items, ep, &elem);
    else gb_puts(&elem, "j-value");
    char er[48];
    new_name(c, er, sizeof er);
    if (st == EM_OK) define(c, er, &elem);
    gb_free(&elem);
    gb_puts(o, "\"[\" j-ws");
    for (size_t i = 0; i < np && st == EM_OK; i++) {
        char ip[512], idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        subpath(ip, sizeof ip, path, "prefixItems", idx);
        if (i) gb_puts(o, " \",\" j-ws");
        gb_puts(o, " ");
        st = sc_expr(c, json_array_get(prefix, i), ip, o);
        gb_puts(o, " j-ws");
    }
    if (st != EM_OK) return st;
    long rest_min = mn - (long)np, rest_max = hmx ? mx - (long)np : -1;
    if (rest_max == 0) {
        gb_puts(o, " \"]\"");
        return EM_OK;
    }
    const char *sep = np ? "\",\" j-ws " : "";
    if (rest_min > 0) { /* at least one more: first one without a leading comma unless after the prefix */
        gb_printf(o, " %s%s j-ws ( \",\" j-ws %s j-ws )", sep, er, er);
        if (rest_max < 0) gb_printf(o, "{%ld,}", rest_min - 1);
        else gb_printf(o, "{%ld,%ld}", rest_min - 1, rest_max - 1);
    } else if (np) {
        gb_printf(o, " ( \",\" j-ws %s j-ws )", er);
        if (rest_max < 0) gb_puts(o, "*");
        else gb_printf(o, "{0,%ld}", rest_max);
    } else {
        gb_printf(o, " ( %s j-ws ( \",\" j-ws %s j-ws )", er, er);
        if (rest_max < 0) gb_puts(o, "*");
        else gb_printf(o, "{0,%ld}", rest_max - 1);
        gb_puts(o, " )?");
    }
    gb_puts(o, " \"]\"");
    return EM_OK;
}

/* ---- dispatch ---- */

static em_status resolve_ref(sc *c, const char *ref, const char *path, json_t **out) {
    if (ref[0] != '#') return sc_fail(EM_ERR_UNSUPPORTED, path, "only local $ref (\"#...\") is supported: '", ref);
    json_t *cur = c->doc;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return sc_fail(EM_ERR_FORMAT, path, "bad $ref '", ref);
        p++;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        char tok[256];
        size_t k = 0;
        for (size_t i = 0; i < l && k + 1 < sizeof tok; i++) {
            if (p[i] == '~' && i + 1 < l && (p[i + 1] == '0' || p[i + 1] == '1')) {
                tok[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else tok[k++] = p[i];
        }
        tok[k] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, tok);
        else if (json_is_array(cur)) cur = json_array_get(cur, (size_t)strtoul(tok, NULL, 10));
        else cur = NULL;
        if (!cur) return sc_fail(EM_ERR_FORMAT, path, "$ref target not found: '", ref);
        p += l;
    }
    *out = cur;
    return EM_OK;
}

static em_status ref_expr(sc *c, const char *ref, const char *path, gbuf *o) {
    json_t *t = NULL;
    EM_TRY(resolve_ref(c, ref, path, &t));
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].target == t) {
            gb_puts(o, c->refs[i].name);
            return EM_OK;
        }
    if (c->n_refs >= SC_MAX_REFS) return sc_fail(EM_ERR_LIMIT, path, "too many $ref targets", NULL);
    if (!em_grow((void **)&c->refs, &c->cap_refs, c->n_refs + 1, sizeof(sc_ref))) return sc_oom();
    sc_ref *r = &c->refs[c->n_refs++];
    r->target = t;
    new_name(c, r->name, sizeof r->name);
    char name[48];
    memcpy(name, r->name, sizeof name);
    gbuf body = {0};
    em_status s = sc_expr(c, t, ref, &body);
    if (s == EM_OK) define(c, name, &body);
    gb_free(&body);
    if (s == EM_OK) gb_puts(o, name);
    return s;
}

static const char *const known[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties",
                                    "required", "additionalProperties", "minProperties", "maxProperties", "items",
                                    "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
                                    "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};

static em_status check_keywords(json_t *s, const char *path) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        bool ok = is_annotation(k);
        for (int i = 0; !ok && known[i]; i++) ok = !strcmp(known[i], k);
        if (!ok) return sc_fail(EM_ERR_UNSUPPORTED, path, "unsupported keyword '", k);
    }
    return EM_OK;
}

static em_status typed_expr(sc *c, json_t *s, const char *t, const char *path, gbuf *o) {
    if (!strcmp(t, "string")) return string_expr(s, path, o);
    if (!strcmp(t, "integer")) return integer_expr(s, path, o);
    if (!strcmp(t, "number")) return number_expr(s, path, o);
    if (!strcmp(t, "boolean")) return gb_puts(o, "(\"true\" | \"false\")"), EM_OK;
    if (!strcmp(t, "null")) return gb_puts(o, "\"null\""), EM_OK;
    if (!strcmp(t, "object")) return object_expr(c, s, path, o);
    if (!strcmp(t, "array")) return array_expr(c, s, path, o);
    return sc_fail(EM_ERR_FORMAT, path, "unknown type '", t);
}

/* Types implied by the keywords present when "type" is absent. */
static const char *implied_type(json_t *s) {
    static const struct {
        const char *kw, *type;
    } imp[] = {{"properties", "object"}, {"additionalProperties", "object"}, {"required", "object"},
               {"minProperties", "object"}, {"maxProperties", "object"}, {"items", "array"},
               {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"}, {"minLength", "string"},
               {"maxLength", "string"}, {"pattern", "string"}, {"format", "string"}, {"minimum", "number"},
               {"maximum", "number"}, {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"}};
    const char *found = NULL;
    for (size_t i = 0; i < sizeof imp / sizeof imp[0]; i++)
        if (json_object_get(s, imp[i].kw)) {
            if (found && strcmp(found, imp[i].type)) return "";
            found = imp[i].type;
        }
    return found;
}

static em_status alternatives(sc *c, json_t *list, const char *kw, const char *path, gbuf *o) {
    if (!json_is_array(list) || json_array_size(list) == 0)
        return sc_fail(EM_ERR_FORMAT, path, "must be a non-empty array: '", kw);
    gb_puts(o, "(");
    for (size_t i = 0; i < json_array_size(list); i++) {
        char ip[512], idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        subpath(ip, sizeof ip, path, kw, idx);
        if (i) gb_puts(o, " | ");
        EM_TRY(sc_expr(c, json_array_get(list, i), ip, o));
    }
    gb_puts(o, ")");
    return EM_OK;
}

static em_status sc_expr(sc *c, json_t *s, const char *path, gbuf *o) {
    if (s == json_true() || (json_is_object(s) && json_object_size(s) == 0)) return gb_puts(o, "j-value"), EM_OK;
    if (s == json_false()) return sc_fail(EM_ERR_UNSUPPORTED, path, "schema false allows no value", NULL);
    if (!json_is_object(s)) return sc_fail(EM_ERR_FORMAT, path, "a schema must be an object or a boolean", NULL);
    if (++c->depth > GR_MAX_DEPTH) return sc_fail(EM_ERR_LIMIT, path, "schema nested too deeply", NULL);
    EM_TRY(check_keywords(s, path));
    em_status st = EM_OK;
    json_t *type = json_object_get(s, "type"), *x;
    int combos = !!json_object_get(s, "$ref") + !!json_object_get(s, "anyOf") + !!json_object_get(s, "oneOf") +
                 !!json_object_get(s, "allOf");
    if (combos > 1) st = sc_fail(EM_ERR_UNSUPPORTED, path, "combining $ref/anyOf/oneOf/allOf in one schema is not supported", NULL);
    else if ((x = json_object_get(s, "$ref"))) {
        if (!json_is_string(x)) st = sc_fail(EM_ERR_FORMAT, path, "$ref is not a string", NULL);
        else if (json_object_size(s) - !!json_object_get(s, "$defs") - !!json_object_get(s, "definitions") > 1) {
            const char *k;
            json_t *v;
            json_object_foreach(s, k, v) if (strcmp(k, "$ref") && !is_annotation(k)) {
                st = sc_fail(EM_ERR_UNSUPPORTED, path, "keywords next to $ref are not supported: '", k);
                break;
            }
            if (st == EM_OK) st = ref_expr(c, json_string_value(x), path, o);
        } else st = ref_expr(c, json_string_value(x), path, o);
    } else if ((x = json_object_get(s, "anyOf")) || (x = json_object_get(s, "oneOf"))) {
        st = alternatives(c, x, json_object_get(s, "anyOf") ? "anyOf" : "oneOf", path, o);
    } else if ((x = json_object_get(s, "allOf"))) {
        if (!json_is_array(x) || json_array_size(x) != 1)
            st = sc_fail(EM_ERR_UNSUPPORTED, path, "allOf with more than one schema is not supported", NULL);
        else st = sc_expr(c, json_array_get(x, 0), path, o);
    } else if ((x = json_object_get(s, "const"))) {
        json_t *one = json_array();
        json_array_append(one, x);
        st = literals(c, one, type, path, o);
        json_decref(one);
    } else if ((x = json_object_get(s, "enum"))) {
        st = json_is_array(x) ? literals(c, x, type, path, o) : sc_fail(EM_ERR_FORMAT, path, "enum is not an array", NULL);
    } else if (json_is_string(type)) {
        st = typed_expr(c, s, json_string_value(type), path, o);
    } else if (json_is_array(type)) {
        gb_puts(o, "(");
        for (size_t i = 0; i < json_array_size(type) && st == EM_OK; i++) {
            const char *t = json_string_value(json_array_get(type, i));
            if (i) gb_puts(o, " | ");
            st = t ? typed_expr(c, s, t, path, o) : sc_fail(EM_ERR_FORMAT, path, "type list holds a non-string", NULL);
        }
        gb_puts(o, ")");
    } else if (type) {
        st = sc_fail(EM_ERR_FORMAT, path, "type must be a string or a list", NULL);
    } else {
        const char *t = implied_type(s);
        if (t && !*t) st = sc_fail(EM_ERR_UNSUPPORTED, path, "keywords of several types without \"type\"", NULL);
        else if (t) st = typed_expr(c, s, t, path, o);
        else gb_puts(o, "j-value");
    }
    c->depth--;
    return st;
}

/* Appends the rules of `schema` to *out, the value rule named `root`. */
em_status json_schema_rules(json_t *schema, const char *prefix, const char *root, gbuf *out) {
    sc c = {.doc = schema, .prefix = prefix};
    gbuf e = {0};
    em_status s = sc_expr(&c, schema, "", &e);
    if (s == EM_OK) {
        gb_printf(out, "%s ::= ", root);
        gb_put(out, e.s, e.len);
        gb_puts(out, "\n");
        gb_put(out, c.rules.s ? c.rules.s : "", c.rules.len);
        if (c.rules.oom || e.oom || out->oom) s = sc_oom();
    }
    gb_free(&e);
    gb_free(&c.rules);
    free(c.refs);
    return s;
}

void json_schema_base(gbuf *out) { gb_puts(out, json_base); }

em_status grammar_schema_to_gbnf(json_t *schema, char **gbnf) {
    *gbnf = NULL;
    gbuf b = {0};
    gb_puts(&b, "root ::= j-ws value j-ws\n");
    em_status s = json_schema_rules(schema, "", "value", &b);
    json_schema_base(&b);
    if (s == EM_OK && b.oom) s = sc_oom();
    if (s != EM_OK) {
        gb_free(&b);
        return s;
    }
    *gbnf = b.s;
    return EM_OK;
}

static em_status compile_text(char *g, grammar **out, const char *what) {
    em_status s = grammar_compile_gbnf(g, strlen(g), "root", out);
    if (s != EM_OK) em_fail_prefix(s, "%s: internal grammar", what);
    free(g);
    return s;
}

em_status grammar_compile_json_schema(json_t *schema, grammar **out) {
    *out = NULL;
    char *g;
    EM_TRY(grammar_schema_to_gbnf(schema, &g));
    return compile_text(g, out, "json schema");
}

em_status grammar_compile_json_object(grammar **out) {
    *out = NULL;
    gbuf b = {0};
    gb_puts(&b, "root ::= j-ws j-object j-ws\n");
    json_schema_base(&b);
    if (b.oom) {
        gb_free(&b);
        return sc_oom();
    }
    return compile_text(b.s, out, "json object");
}
