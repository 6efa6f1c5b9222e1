/* tests.c — jinja2's tests (`x is defined`, `n is divisibleby 3`...). */
#include "chat/jinja/eval.h"

#include <string.h>

typedef em_status (*test_fn)(jctx *c, const jv *v, const jv **args, bool *out);

static em_status t_defined(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind != JV_UNDEF; return EM_OK; }
static em_status t_undefined(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_UNDEF; return EM_OK; }
static em_status t_none(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_NONE; return EM_OK; }
static em_status t_boolean(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_BOOL; return EM_OK; }
static em_status t_true(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_BOOL && v->u.b; return EM_OK; }
static em_status t_false(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_BOOL && !v->u.b; return EM_OK; }
static em_status t_string(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_STR; return EM_OK; }
static em_status t_number(jctx *c, const jv *v, const jv **a, bool *o) { *o = jv_is_number(v); return EM_OK; }
static em_status t_integer(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_INT; return EM_OK; }
static em_status t_float(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_FLOAT; return EM_OK; }
static em_status t_mapping(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_DICT; return EM_OK; }

static em_status t_iterable(jctx *c, const jv *v, const jv **a, bool *o) {
    *o = v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT || v->kind == JV_UNDEF;
    return EM_OK;
}

static em_status t_sequence(jctx *c, const jv *v, const jv **a, bool *o) {
    /* jinja2: has __len__ and __getitem__ */
    *o = v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT || v->kind == JV_UNDEF;
    return EM_OK;
}

static em_status t_callable(jctx *c, const jv *v, const jv **a, bool *o) {
    *o = v->kind == JV_OBJ && v->u.o->kind != JO_NAMESPACE && v->u.o->kind != JO_LOOP && v->u.o->kind != JO_CYCLER;
    return EM_OK;
}

static em_status need_int(jctx *c, const jv *v, const char *test, int64_t *out) {
    if (v->kind == JV_UNDEF) return jx_undefined(c, v);
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        *out = v->kind == JV_BOOL ? v->u.b : v->u.i;
        return EM_OK;
    }
    return jx_fail(c, EM_ERR_FORMAT, "TypeError: test '%s' needs an integer, got '%s'", test, jv_type_name(v));
}

static em_status t_odd(jctx *c, const jv *v, const jv **a, bool *o) {
    if (v->kind == JV_FLOAT) { *o = v->u.f - 2.0 * __builtin_floor(v->u.f / 2.0) == 1.0; return EM_OK; }
    int64_t i;
    EM_TRY(need_int(c, v, "odd", &i));
    *o = (i % 2) != 0;
    return EM_OK;
}

static em_status t_even(jctx *c, const jv *v, const jv **a, bool *o) {
    if (v->kind == JV_FLOAT) { *o = v->u.f - 2.0 * __builtin_floor(v->u.f / 2.0) == 0.0; return EM_OK; }
    int64_t i;
    EM_TRY(need_int(c, v, "even", &i));
    *o = (i % 2) == 0;
    return EM_OK;
}

static em_status t_divisibleby(jctx *c, const jv *v, const jv **a, bool *o) {
    if (!a[0]) return jx_fail(c, EM_ERR_FORMAT, "TypeError: divisibleby needs an argument");
    int64_t x, y;
    EM_TRY(need_int(c, v, "divisibleby", &x));
    EM_TRY(need_int(c, a[0], "divisibleby", &y));
    if (y == 0) return jx_fail(c, EM_ERR_FORMAT, "ZeroDivisionError: integer modulo by zero");
    *o = y == -1 || x % y == 0;
    return EM_OK;
}

static em_status cmp_test(jctx *c, const jv *v, const jv *w, const char *op, bool *o) {
    if (!w) return jx_fail(c, EM_ERR_FORMAT, "TypeError: test '%s' needs an argument", op);
    if (!strcmp(op, "==")) { *o = jv_equal(v, w); return EM_OK; }
    if (!strcmp(op, "!=")) { *o = !jv_equal(v, w); return EM_OK; }
    if (v->kind == JV_UNDEF) return jx_undefined(c, v);
    if (w->kind == JV_UNDEF) return jx_undefined(c, w);
    int r;
    if (!jv_compare(v, w, &r))
        return jx_fail(c, EM_ERR_FORMAT, "TypeError: '%s' not supported between instances of '%s' and '%s'", op, jv_type_name(v), jv_type_name(w));
    *o = !strcmp(op, "<") ? r < 0 : !strcmp(op, "<=") ? r <= 0 : !strcmp(op, ">") ? r > 0 : r >= 0;
    return EM_OK;
}

static em_status t_eq(jctx *c, const jv *v, const jv **a, bool *o) { return cmp_test(c, v, a[0], "==", o); }
static em_status t_ne(jctx *c, const jv *v, const jv **a, bool *o) { return cmp_test(c, v, a[0], "!=", o); }
static em_status t_lt(jctx *c, const jv *v, const jv **a, bool *o) { return cmp_test(c, v, a[0], "<", o); }
static em_status t_le(jctx *c, const jv *v, const jv **a, bool *o) { return cmp_test(c, v, a[0], "<=", o); }
static em_status t_gt(jctx *c, const jv *v, const jv **a, bool *o) { return cmp_test(c, v, a[0], ">", o); }
static em_status t_ge(jctx *c, const jv *v, const jv **a, bool *o) { return cmp_test(c, v, a[0], ">=", o); }

static em_status t_sameas(jctx *c, const jv *v, const jv **a, bool *o) {
    const jv *w = a[0];
    if (!w) return jx_fail(c, EM_ERR_FORMAT, "TypeError: sameas needs an argument");
    if (v->kind != w->kind) *o = false;
    else if (v->kind == JV_NONE || v->kind == JV_UNDEF) *o = true;
    else if (v->kind == JV_BOOL) *o = v->u.b == w->u.b;
    else if (v->kind == JV_STR) *o = v->u.s == w->u.s;
    else if (v->kind == JV_LIST) *o = v->u.l == w->u.l;
    else if (v->kind == JV_DICT) *o = v->u.d == w->u.d;
    else if (v->kind == JV_OBJ) *o = v->u.o == w->u.o;
    else *o = jv_equal(v, w) && v->kind == JV_INT && v->u.i >= -5 && v->u.i <= 256; /* CPython small ints */
    return EM_OK;
}

static em_status t_in(jctx *c, const jv *v, const jv **a, bool *o) {
    const jv *w = a[0];
    if (!w) return jx_fail(c, EM_ERR_FORMAT, "TypeError: test 'in' needs an argument");
    if (w->kind == JV_STR) {
        if (v->kind != JV_STR) return jx_fail(c, EM_ERR_FORMAT, "TypeError: 'in <string>' requires string as left operand");
        *o = memmem(w->u.s->data, w->u.s->len, v->u.s->data, v->u.s->len) != NULL;
        return EM_OK;
    }
    if (w->kind == JV_DICT) { *o = jv_hashable(v) && jv_dict_get(*w, v); return EM_OK; }
    if (w->kind == JV_LIST) {
        *o = false;
        for (size_t i = 0; i < w->u.l->n && !*o; i++) *o = jv_equal(v, &w->u.l->items[i]);
        return EM_OK;
    }
    if (w->kind == JV_UNDEF) { *o = false; return EM_OK; }
    return jx_fail(c, EM_ERR_FORMAT, "TypeError: argument of type '%s' is not iterable", jv_type_name(w));
}

static bool has_cased(const jv *v, bool upper, bool *all) {
    bool any = false;
    *all = true;
    for (size_t i = 0; i < v->u.s->len; i++) {
        char ch = v->u.s->data[i];
        if (ch >= 'a' && ch <= 'z') { any = true; if (upper) *all = false; }
        if (ch >= 'A' && ch <= 'Z') { any = true; if (!upper) *all = false; }
    }
    return any;
}

static em_status t_lower(jctx *c, const jv *v, const jv **a, bool *o) {
    jv s = jv_stringify(v);
    if (jv_is_oom(s)) return jx_oom(c);
    bool all;
    *o = has_cased(&s, false, &all) && all;
    jv_release(s);
    return EM_OK;
}

static em_status t_upper(jctx *c, const jv *v, const jv **a, bool *o) {
    jv s = jv_stringify(v);
    if (jv_is_oom(s)) return jx_oom(c);
    bool all;
    *o = has_cased(&s, true, &all) && all;
    jv_release(s);
    return EM_OK;
}

static em_status t_filter(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_STR && jx_filter_exists(v->u.s->data); return EM_OK; }
static em_status t_test(jctx *c, const jv *v, const jv **a, bool *o) { *o = v->kind == JV_STR && jx_test_exists(v->u.s->data); return EM_OK; }
static em_status t_escaped(jctx *c, const jv *v, const jv **a, bool *o) { *o = false; return EM_OK; }

static const struct {
    const char *name;
    test_fn fn;
    int nargs;
} tests[] = {
    {"defined", t_defined, 0}, {"undefined", t_undefined, 0}, {"none", t_none, 0},
    {"boolean", t_boolean, 0}, {"true", t_true, 0}, {"false", t_false, 0},
    {"string", t_string, 0}, {"number", t_number, 0}, {"integer", t_integer, 0},
    {"float", t_float, 0}, {"mapping", t_mapping, 0}, {"iterable", t_iterable, 0},
    {"sequence", t_sequence, 0}, {"callable", t_callable, 0}, {"odd", t_odd, 0},
    {"even", t_even, 0}, {"divisibleby", t_divisibleby, 1}, {"eq", t_eq, 1},
    {"equalto", t_eq, 1}, {"==", t_eq, 1}, {"ne", t_ne, 1}, {"!=", t_ne, 1},
    {"lt", t_lt, 1}, {"lessthan", t_lt, 1}, {"<", t_lt, 1}, {"le", t_le, 1}, {"<=", t_le, 1},
    {"gt", t_gt, 1}, {"greaterthan", t_gt, 1}, {">", t_gt, 1}, {"ge", t_ge, 1}, {">=", t_ge, 1},
    {"sameas", t_sameas, 1}, {"in", t_in, 1}, {"lower", t_lower, 0}, {"upper", t_upper, 0},
    {"filter", t_filter, 0}, {"test", t_test, 0}, {"escaped", t_escaped, 0},
};

bool jx_test_exists(const char *name) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!strcmp(tests[i].name, name)) return true;
    return false;
}

em_status jx_test(jctx *c, const char *name, const jv *value, jcallargs *a, bool *out) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(tests[i].name, name) != 0) continue;
        static const char *const none[] = {NULL};
        static const char *const one[] = {"value", NULL};
        const jv *slots[1] = {NULL};
        EM_TRY(jx_bind(c, name, a, tests[i].nargs ? one : none, slots));
        return tests[i].fn(c, value, slots, out);
    }
    return jx_fail(c, EM_ERR_FORMAT, "TemplateAssertionError: No test named '%s'.", name);
}
