/* value.c — reference-counted template values with Python semantics:
 * truthiness, equality, ordering, str() and repr(). */
#include "chat/jinja/value.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static jv_str oom_marker_str = {.rc = 1, .len = 0};

jv jv_str_new(const char *s, size_t len) {
    jv v = {.kind = JV_STR};
    size_t sz;
    jv_str *p = NULL;
    if (em_add(sizeof(jv_str) + 1, len, &sz)) p = em_malloc(sz);
    if (!p) {
        v.u.s = NULL;
        return v;
    }
    p->rc = 1;
    p->len = len;
    if (len) memcpy(p->data, s, len);
    p->data[len] = 0;
    v.u.s = p;
    return v;
}

jv jv_cstr(const char *s) { return jv_str_new(s, strlen(s)); }

jv jv_undef_msg(const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jv s = jv_cstr(msg);
    jv v = {.kind = JV_UNDEF};
    v.u.s = s.u.s; /* NULL on OOM: a plain Undefined */
    return v;
}

static jv list_new(size_t cap, bool tuple) {
    jv v = {.kind = JV_LIST};
    jv_list *l = em_calloc(1, sizeof *l);
    if (l && cap) {
        l->items = em_mallocn(cap, sizeof(jv));
        if (!l->items) {
            free(l);
            l = NULL;
        } else {
            l->cap = cap;
        }
    }
    if (l) {
        l->rc = 1;
        l->tuple = tuple;
    }
    v.u.l = l;
    return v;
}

jv jv_list_new(size_t cap) { return list_new(cap, false); }
jv jv_tuple_new(size_t cap) { return list_new(cap, true); }

jv jv_dict_new(void) {
    jv v = {.kind = JV_DICT};
    jv_dict *d = em_calloc(1, sizeof *d);
    if (d) d->rc = 1;
    v.u.d = d;
    return v;
}

jv jv_obj_wrap(jv_obj *o) {
    jv v = {.kind = JV_OBJ};
    v.u.o = o;
    return v;
}

bool jv_is_oom(jv v) {
    switch (v.kind) {
    case JV_STR: return v.u.s == NULL || v.u.s == &oom_marker_str;
    case JV_LIST: return v.u.l == NULL;
    case JV_DICT: return v.u.d == NULL;
    case JV_OBJ: return v.u.o == NULL;
    default: return false;
    }
}

static atomic_int *refcount(jv v) {
    switch (v.kind) {
    case JV_UNDEF:
    case JV_STR: return v.u.s ? &v.u.s->rc : NULL;
    case JV_LIST: return v.u.l ? &v.u.l->rc : NULL;
    case JV_DICT: return v.u.d ? &v.u.d->rc : NULL;
    case JV_OBJ: return v.u.o ? &v.u.o->rc : NULL;
    default: return NULL;
    }
}

jv jv_retain(jv v) {
    atomic_int *rc = refcount(v);
    if (rc) atomic_fetch_add_explicit(rc, 1, memory_order_relaxed);
    return v;
}

void jv_release(jv v) {
    atomic_int *rc = refcount(v);
    if (!rc || atomic_fetch_sub_explicit(rc, 1, memory_order_acq_rel) > 1) return;
    switch (v.kind) {
    case JV_UNDEF:
    case JV_STR: free(v.u.s); break;
    case JV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++) jv_release(v.u.l->items[i]);
        free(v.u.l->items);
        free(v.u.l);
        break;
    case JV_DICT:
        for (size_t i = 0; i < v.u.d->n; i++) {
            jv_release(v.u.d->keys[i]);
            jv_release(v.u.d->vals[i]);
        }
        free(v.u.d->keys);
        free(v.u.d->vals);
        free(v.u.d);
        break;
    case JV_OBJ:
        if (v.u.o->free_fn) v.u.o->free_fn(v.u.o);
        free(v.u.o);
        break;
    default: break;
    }
}

bool jv_list_push(jv list, jv item) {
    jv_list *l = list.u.l;
    if (jv_is_oom(item) || !em_grow((void **)&l->items, &l->cap, l->n + 1, sizeof(jv))) {
        jv_release(item);
        return false;
    }
    l->items[l->n++] = item;
    return true;
}

static ptrdiff_t dict_find(const jv_dict *d, const jv *key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(&d->keys[i], key)) return (ptrdiff_t)i;
    return -1;
}

bool jv_dict_set(jv dict, jv key, jv val) {
    jv_dict *d = dict.u.d;
    if (jv_is_oom(key) || jv_is_oom(val)) goto fail;
    ptrdiff_t at = dict_find(d, &key);
    if (at >= 0) {
        jv_release(key);
        jv_release(d->vals[at]);
        d->vals[at] = val;
        return true;
    }
    size_t kc = d->cap, vc = d->cap;
    if (!em_grow((void **)&d->keys, &kc, d->n + 1, sizeof(jv))) goto fail;
    if (!em_grow((void **)&d->vals, &vc, d->n + 1, sizeof(jv))) {
        d->cap = kc < vc ? kc : vc;
        goto fail;
    }
    d->cap = kc < vc ? kc : vc;
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return true;
fail:
    jv_release(key);
    jv_release(val);
    return false;
}

bool jv_dict_set_str(jv dict, const char *key, jv val) { return jv_dict_set(dict, jv_cstr(key), val); }

const jv *jv_dict_get(jv dict, const jv *key) {
    ptrdiff_t at = dict_find(dict.u.d, key);
    return at >= 0 ? &dict.u.d->vals[at] : NULL;
}

const jv *jv_dict_get_str(jv dict, const char *key) {
    size_t n = strlen(key);
    jv_dict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++) {
        const jv *k = &d->keys[i];
        if (k->kind == JV_STR && k->u.s->len == n && memcmp(k->u.s->data, key, n) == 0) return &d->vals[i];
    }
    return NULL;
}

jv jv_list_copy(jv list, bool tuple) {
    jv out = list_new(list.u.l->n, tuple);
    if (jv_is_oom(out)) return out;
    for (size_t i = 0; i < list.u.l->n; i++) out.u.l->items[i] = jv_retain(list.u.l->items[i]);
    out.u.l->n = list.u.l->n;
    return out;
}

jv jv_dict_copy(jv dict) {
    jv out = jv_dict_new();
    if (jv_is_oom(out)) return out;
    for (size_t i = 0; i < dict.u.d->n; i++)
        if (!jv_dict_set(out, jv_retain(dict.u.d->keys[i]), jv_retain(dict.u.d->vals[i]))) {
            jv_release(out);
            return (jv){.kind = JV_DICT, .u.d = NULL};
        }
    return out;
}

/* ---- Python semantics ---- */

bool jv_truthy(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0.0;
    case JV_STR: return v->u.s->len != 0;
    case JV_LIST: return v->u.l->n != 0;
    case JV_DICT: return v->u.d->n != 0;
    case JV_OBJ: return true;
    }
    return false;
}

bool jv_is_number(const jv *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }

double jv_as_double(const jv *v) {
    switch (v->kind) {
    case JV_INT: return (double)v->u.i;
    case JV_FLOAT: return v->u.f;
    case JV_BOOL: return v->u.b ? 1.0 : 0.0;
    default: return 0.0;
    }
}

static bool num_equal(const jv *a, const jv *b) {
    if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
        int64_t x = a->kind == JV_BOOL ? a->u.b : a->u.i, y = b->kind == JV_BOOL ? b->u.b : b->u.i;
        return x == y;
    }
    return jv_as_double(a) == jv_as_double(b);
}

bool jv_equal(const jv *a, const jv *b) {
    if (jv_is_number(a) && jv_is_number(b)) return num_equal(a, b);
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a->u.s->len == b->u.s->len && memcmp(a->u.s->data, b->u.s->data, a->u.s->len) == 0;
    case JV_LIST:
        if (a->u.l->tuple != b->u.l->tuple || a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!jv_equal(&a->u.l->items[i], &b->u.l->items[i])) return false;
        return true;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const jv *o = jv_dict_get(*b, &a->u.d->keys[i]);
            if (!o || !jv_equal(&a->u.d->vals[i], o)) return false;
        }
        return true;
    case JV_OBJ: return a->u.o == b->u.o;
    default: return false;
    }
}

bool jv_compare(const jv *a, const jv *b, int *cmp) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_BOOL ? a->u.b : a->u.i, y = b->kind == JV_BOOL ? b->u.b : b->u.i;
            *cmp = x < y ? -1 : x > y;
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            *cmp = x < y ? -1 : x > y;
        }
        return true;
    }
    if (a->kind != b->kind) return false;
    if (a->kind == JV_STR) {
        size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
        int c = memcmp(a->u.s->data, b->u.s->data, n);
        if (c == 0) c = a->u.s->len < b->u.s->len ? -1 : a->u.s->len > b->u.s->len;
        *cmp = c < 0 ? -1 : c > 0;
        return true;
    }
    if (a->kind == JV_LIST && a->u.l->tuple == b->u.l->tuple) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(&a->u.l->items[i], &b->u.l->items[i])) continue;
            return jv_compare(&a->u.l->items[i], &b->u.l->items[i], cmp);
        }
        *cmp = a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
        return true;
    }
    return false;
}

const char *jv_type_name(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_OBJ:
        switch (v->u.o->kind) {
        case JO_NAMESPACE: return "Namespace";
        case JO_MACRO: return "Macro";
        case JO_LOOP: return "LoopContext";
        case JO_JOINER: return "Joiner";
        case JO_CYCLER: return "Cycler";
        default: return "builtin_function_or_method";
        }
    }
    return "object";
}

bool jv_hashable(const jv *v) {
    switch (v->kind) {
    case JV_NONE:
    case JV_BOOL:
    case JV_INT:
    case JV_FLOAT:
    case JV_STR: return true;
    case JV_LIST:
        if (!v->u.l->tuple) return false;
        for (size_t i = 0; i < v->u.l->n; i++)
            if (!jv_hashable(&v->u.l->items[i])) return false;
        return true;
    case JV_OBJ: return true;
    default: return false;
    }
}

/* ---- buffers ---- */

void jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    size_t need;
    if (!em_add(b->len, n + 1, &need) || !em_grow((void **)&b->p, &b->cap, need, 1)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void jbuf_puts(jbuf *b, const char *s) { jbuf_put(b, s, strlen(s)); }
void jbuf_putc(jbuf *b, char c) { jbuf_put(b, &c, 1); }

void jbuf_printf(jbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    jbuf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

jv jbuf_take(jbuf *b) {
    jv v;
    if (b->oom) v = (jv){.kind = JV_STR, .u.s = NULL};
    else v = jv_str_new(b->p ? b->p : "", b->len);
    jbuf_free(b);
    return v;
}

void jbuf_free(jbuf *b) {
    free(b->p);
    *b = (jbuf){0};
}

/* ---- str() and repr() ---- */

void jv_float_repr(jbuf *b, double f) {
    if (isnan(f)) { jbuf_puts(b, "nan"); return; }
    if (isinf(f)) { jbuf_puts(b, f < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    int prec = 0;
    for (prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX: split into digits and decimal exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) jbuf_putc(b, '-');
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            jbuf_puts(b, "0.");
            for (int i = 0; i < -exp - 1; i++) jbuf_putc(b, '0');
            jbuf_put(b, digits, nd);
        } else {
            size_t ip = (size_t)exp + 1;
            for (size_t i = 0; i < ip; i++) jbuf_putc(b, i < nd ? digits[i] : '0');
            jbuf_putc(b, '.');
            if (nd > ip) jbuf_put(b, digits + ip, nd - ip);
            else jbuf_putc(b, '0');
        }
    } else {
        jbuf_putc(b, digits[0]);
        if (nd > 1) {
            jbuf_putc(b, '.');
            jbuf_put(b, digits + 1, nd - 1);
        }
        jbuf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static bool cp_printable(uint32_t cp) {
    if (cp == ' ') return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static void str_repr(jbuf *b, const char *s, size_t len) {
    bool has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_putc(b, q);
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int n = utf8_decode(s + i, len - i, &cp);
        if (n <= 0) { cp = (unsigned char)s[i]; n = 1; }
        if (cp == '\\' || cp == (uint32_t)q) { jbuf_putc(b, '\\'); jbuf_putc(b, (char)cp); }
        else if (cp == '\n') jbuf_puts(b, "\\n");
        else if (cp == '\r') jbuf_puts(b, "\\r");
        else if (cp == '\t') jbuf_puts(b, "\\t");
        else if (cp < 0x7f && cp >= 0x20) jbuf_putc(b, (char)cp);
        else if (cp_printable(cp) && cp >= 0x80) jbuf_put(b, s + i, (size_t)n);
        else if (cp < 0x100) jbuf_printf(b, "\\x%02x", cp);
        else if (cp < 0x10000) jbuf_printf(b, "\\u%04x", cp);
        else jbuf_printf(b, "\\U%08x", cp);
        i += (size_t)n;
    }
    jbuf_putc(b, q);
}

void jv_repr(jbuf *b, const jv *v) {
    switch (v->kind) {
    case JV_STR: str_repr(b, v->u.s->data, v->u.s->len); return;
    case JV_UNDEF: return;
    case JV_LIST: {
        jv_list *l = v->u.l;
        jbuf_putc(b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jbuf_puts(b, ", ");
            jv_repr(b, &l->items[i]);
        }
        if (l->tuple && l->n == 1) jbuf_putc(b, ',');
        jbuf_putc(b, l->tuple ? ')' : ']');
        return;
    }
    case JV_DICT: {
        jv_dict *d = v->u.d;
        jbuf_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jbuf_puts(b, ", ");
            jv_repr(b, &d->keys[i]);
            jbuf_puts(b, ": ");
            jv_repr(b, &d->vals[i]);
        }
        jbuf_putc(b, '}');
        return;
    }
    default: jv_to_str(b, v); return;
    }
}

void jv_to_str(jbuf *b, const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: return;
    case JV_NONE: jbuf_puts(b, "None"); return;
    case JV_BOOL: jbuf_puts(b, v->u.b ? "True" : "False"); return;
    case JV_INT: jbuf_printf(b, "%" PRId64, v->u.i); return;
    case JV_FLOAT: jv_float_repr(b, v->u.f); return;
    case JV_STR: jbuf_put(b, v->u.s->data, v->u.s->len); return;
    case JV_LIST:
    case JV_DICT: jv_repr(b, v); return;
    case JV_OBJ: jbuf_printf(b, "<%s object>", jv_type_name(v)); return;
    }
}

jv jv_stringify(const jv *v) {
    if (v->kind == JV_STR) return jv_retain(*v);
    jbuf b = {0};
    jv_to_str(&b, v);
    return jbuf_take(&b);
}

size_t jv_utf8_count(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

size_t jv_utf8_offset(const char *s, size_t len, size_t cp_index) {
    size_t i = 0, n = 0;
    for (; i < len; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (n == cp_index) return i;
            n++;
        }
    }
    return len;
}

bool jv_is_space(uint32_t cp) {
    switch (cp) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1c: case 0x1d: case 0x1e: case 0x1f: case 0x85: case 0xa0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200a;
    }
}

/* ---- JSON ---- */

jv jv_from_json(json_t *j) {
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_str_new(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jv l = jv_list_new(json_array_size(j));
        if (jv_is_oom(l)) return l;
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e) {
            if (!jv_list_push(l, jv_from_json(e))) {
                jv_release(l);
                return (jv){.kind = JV_LIST, .u.l = NULL};
            }
        }
        return l;
    }
    case JSON_OBJECT: {
        jv d = jv_dict_new();
        if (jv_is_oom(d)) return d;
        const char *k;
        json_t *e;
        json_object_foreach(j, k, e) {
            if (!jv_dict_set_str(d, k, jv_from_json(e))) {
                jv_release(d);
                return (jv){.kind = JV_DICT, .u.d = NULL};
            }
        }
        return d;
    }
    }
    return jv_none();
}
