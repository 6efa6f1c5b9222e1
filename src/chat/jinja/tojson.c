/* tojson.c — the tojson filter as transformers defines it:
 * json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
 * sort_keys=sort_keys). Non-ASCII text is written as is; floats use
 * Python's repr; dict keys that are not strings are converted as Python's
 * json module converts them. */
#include "chat/jinja/eval.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct jopts {
    const char *indent; /* NULL: compact layout */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
    bool sort_keys;
} jopts;

static void put_string(jbuf *b, const char *s, size_t n) {
    jbuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': jbuf_puts(b, "\\\""); break;
        case '\\': jbuf_puts(b, "\\\\"); break;
        case '\n': jbuf_puts(b, "\\n"); break;
        case '\r': jbuf_puts(b, "\\r"); break;
        case '\t': jbuf_puts(b, "\\t"); break;
        case '\b': jbuf_puts(b, "\\b"); break;
        case '\f': jbuf_puts(b, "\\f"); break;
        default:
            if (ch < 0x20) jbuf_printf(b, "\\u%04x", ch);
            else jbuf_putc(b, (char)ch);
        }
    }
    jbuf_putc(b, '"');
}

static void put_float(jbuf *b, double f) {
    if (isnan(f)) jbuf_puts(b, "NaN");
    else if (isinf(f)) jbuf_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else jv_float_repr(b, f);
}

static void newline(jbuf *b, const jopts *o, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) jbuf_put(b, o->indent, o->indent_len);
}

/* A dict key as Python's json writes it, or false when not allowed. */
static bool key_text(jbuf *b, const jv *k) {
    switch (k->kind) {
    case JV_STR: put_string(b, k->u.s->data, k->u.s->len); return true;
    case JV_BOOL: jbuf_puts(b, k->u.b ? "\"true\"" : "\"false\""); return true;
    case JV_NONE: jbuf_puts(b, "\"null\""); return true;
    case JV_INT: jbuf_printf(b, "\"%lld\"", (long long)k->u.i); return true;
    case JV_FLOAT:
        jbuf_putc(b, '"');
        put_float(b, k->u.f);
        jbuf_putc(b, '"');
        return true;
    default: return false;
    }
}

static em_status dump(jctx *c, jbuf *b, const jv *v, const jopts *o, int level) {
    if (level > 200) return jx_fail(c, EM_ERR_LIMIT, "tojson: value nested too deeply");
    if (b->len > c->lim->max_output) return jx_check_size(c, b->len);
    switch (v->kind) {
    case JV_NONE: jbuf_puts(b, "null"); return EM_OK;
    case JV_BOOL: jbuf_puts(b, v->u.b ? "true" : "false"); return EM_OK;
    case JV_INT: jbuf_printf(b, "%lld", (long long)v->u.i); return EM_OK;
    case JV_FLOAT: put_float(b, v->u.f); return EM_OK;
    case JV_STR: put_string(b, v->u.s->data, v->u.s->len); return EM_OK;
    case JV_LIST: {
        jv_list *l = v->u.l;
        if (l->n == 0) { jbuf_puts(b, "[]"); return EM_OK; }
        jbuf_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jbuf_put(b, o->item_sep, o->item_sep_len);
            if (o->indent) newline(b, o, level + 1);
            EM_TRY(dump(c, b, &l->items[i], o, level + 1));
        }
        if (o->indent) newline(b, o, level);
        jbuf_putc(b, ']');
        return EM_OK;
    }
    case JV_DICT: {
        jv_dict *d = v->u.d;
        if (d->n == 0) { jbuf_puts(b, "{}"); return EM_OK; }
        size_t *order = em_mallocn(d->n, sizeof(size_t));
        if (!order) return jx_oom(c);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            for (size_t i = 1; i < d->n; i++) {
                for (size_t j = i; j > 0; j--) {
                    int cmp;
                    if (!jv_compare(&d->keys[order[j - 1]], &d->keys[order[j]], &cmp)) {
                        free(order);
                        return jx_fail(c, EM_ERR_FORMAT, "TypeError: '<' not supported between dict keys of different types");
                    }
                    if (cmp <= 0) break;
                    size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
                }
            }
        }
        jbuf_putc(b, '{');
        em_status st = EM_OK;
        for (size_t k = 0; k < d->n && st == EM_OK; k++) {
            size_t i = order[k];
            if (k) jbuf_put(b, o->item_sep, o->item_sep_len);
            if (o->indent) newline(b, o, level + 1);
            if (!key_text(b, &d->keys[i])) {
                st = jx_fail(c, EM_ERR_FORMAT, "TypeError: keys must be str, int, float, bool or None, not %s", jv_type_name(&d->keys[i]));
                break;
            }
            jbuf_put(b, o->key_sep, o->key_sep_len);
            st = dump(c, b, &d->vals[i], o, level + 1);
        }
        free(order);
        EM_TRY(st);
        if (o->indent) newline(b, o, level);
        jbuf_putc(b, '}');
        return EM_OK;
    }
    case JV_UNDEF: return jx_fail(c, EM_ERR_FORMAT, "TypeError: Object of type Undefined is not JSON serializable");
    default: return jx_fail(c, EM_ERR_FORMAT, "TypeError: Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

em_status jx_tojson(jctx *c, const jv *v, const jv *indent, const jv *separators, bool sort_keys, jbuf *out) {
    jopts o = {.sort_keys = sort_keys};
    jbuf ind = {0};
    if (indent && indent->kind != JV_NONE) {
        if (indent->kind == JV_STR) jbuf_put(&ind, indent->u.s->data, indent->u.s->len);
        else if (indent->kind == JV_INT || indent->kind == JV_BOOL) {
            int64_t n = indent->kind == JV_BOOL ? indent->u.b : indent->u.i;
            if (n > 64) n = 64;
            for (int64_t i = 0; i < n; i++) jbuf_putc(&ind, ' ');
        } else {
            return jx_fail(c, EM_ERR_FORMAT, "TypeError: tojson indent must be an integer or a string");
        }
        o.indent = ind.p ? ind.p : "";
        o.indent_len = ind.len;
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (separators && separators->kind != JV_NONE) {
        if (separators->kind != JV_LIST || separators->u.l->n != 2 || separators->u.l->items[0].kind != JV_STR ||
            separators->u.l->items[1].kind != JV_STR) {
            jbuf_free(&ind);
            return jx_fail(c, EM_ERR_FORMAT, "TypeError: tojson separators must be a pair of strings");
        }
        o.item_sep = separators->u.l->items[0].u.s->data;
        o.key_sep = separators->u.l->items[1].u.s->data;
        o.item_sep_len = separators->u.l->items[0].u.s->len;
        o.key_sep_len = separators->u.l->items[1].u.s->len;
    } else {
        o.item_sep_len = strlen(o.item_sep);
        o.key_sep_len = strlen(o.key_sep);
    }
    em_status st = dump(c, out, v, &o, 0);
    jbuf_free(&ind);
    if (st == EM_OK && out->oom) st = jx_oom(c);
    return st;
}
