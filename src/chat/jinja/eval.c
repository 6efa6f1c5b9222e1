/* eval.c — walks the node tree: expressions to values, statements to
 * output text. Scoping follows jinja2: each for-loop iteration, macro call
 * and with-block gets a fresh frame whose parent is the enclosing one, so
 * `set` inside them does not leak out; `if` shares its frame. */
#include "chat/jinja/eval.h"

#include "base/alloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors and limits ---- */

em_status jx_fail(jctx *c, em_status code, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return em_fail(code, "template error at line %d: %s", c->line, msg);
}

em_status jx_undefined(jctx *c, const jv *u) {
    if (u->kind == JV_UNDEF && u->u.s) return jx_fail(c, EM_ERR_FORMAT, "UndefinedError: %s", u->u.s->data);
    return jx_fail(c, EM_ERR_FORMAT, "UndefinedError: value is undefined");
}

em_status jx_oom(jctx *c) { return jx_fail(c, EM_ERR_NOMEM, "out of memory"); }

em_status jx_step(jctx *c) {
    if (++c->steps > c->lim->max_steps)
        return jx_fail(c, EM_ERR_LIMIT, "render exceeded %llu steps (loop iterations and calls)", (unsigned long long)c->lim->max_steps);
    if (c->has_deadline && (c->steps & 1023) == 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > c->deadline.tv_sec || (now.tv_sec == c->deadline.tv_sec && now.tv_nsec > c->deadline.tv_nsec))
            return jx_fail(c, EM_ERR_LIMIT, "render exceeded its time limit of %g s", c->lim->max_seconds);
    }
    return EM_OK;
}

em_status jx_check_size(jctx *c, size_t n) {
    if (n > c->lim->max_output) return jx_fail(c, EM_ERR_LIMIT, "value of %zu bytes exceeds the output limit of %zu bytes", n, c->lim->max_output);
    return EM_OK;
}

/* ---- call arguments ---- */

void jx_args_free(jcallargs *a) {
    for (size_t i = 0; i < a->npos; i++) jv_release(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) {
        jv_release(a->kwnames[i]);
        jv_release(a->kwvals[i]);
    }
    free(a->pos);
    free(a->kwnames);
    free(a->kwvals);
    memset(a, 0, sizeof *a);
}

bool jx_args_push(jcallargs *a, jv v) {
    if (jv_is_oom(v) || !em_grow((void **)&a->pos, &a->cappos, a->npos + 1, sizeof(jv))) {
        jv_release(v);
        return false;
    }
    a->pos[a->npos++] = v;
    return true;
}

bool jx_args_push_kw(jcallargs *a, const char *name, jv v) {
    jv k = jv_cstr(name);
    size_t c2 = a->capkw;
    if (jv_is_oom(k) || jv_is_oom(v) || !em_grow((void **)&a->kwnames, &a->capkw, a->nkw + 1, sizeof(jv)) ||
        !em_grow((void **)&a->kwvals, &c2, a->nkw + 1, sizeof(jv))) {
        jv_release(k);
        jv_release(v);
        return false;
    }
    a->kwnames[a->nkw] = k;
    a->kwvals[a->nkw++] = v;
    return true;
}

em_status jx_bind(jctx *c, const char *what, const jcallargs *a, const char *const *params, const jv **slots) {
    size_t np = 0;
    while (params[np]) np++;
    for (size_t i = 0; i < np; i++) slots[i] = NULL;
    if (a->npos > np) return jx_fail(c, EM_ERR_FORMAT, "%s() takes at most %zu argument(s) (%zu given)", what, np, a->npos);
    for (size_t i = 0; i < a->npos; i++) slots[i] = &a->pos[i];
    for (size_t k = 0; k < a->nkw; k++) {
        const char *name = a->kwnames[k].u.s->data;
        size_t i = 0;
        while (i < np && strcmp(params[i], name) != 0) i++;
        if (i == np) return jx_fail(c, EM_ERR_FORMAT, "%s() got an unexpected keyword argument '%s'", what, name);
        if (slots[i]) return jx_fail(c, EM_ERR_FORMAT, "%s() got multiple values for argument '%s'", what, name);
        slots[i] = &a->kwvals[k];
    }
    return EM_OK;
}

bool jx_track(jctx *c, jv obj) { return jv_list_push(c->tracked, jv_retain(obj)); }

/* ---- frames ---- */

static jframe *frame_new(jframe *parent) {
    jframe *f = em_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->vars = jv_dict_new();
    if (jv_is_oom(f->vars)) {
        free(f);
        return NULL;
    }
    f->rc = 1;
    f->parent = parent;
    if (parent) parent->rc++;
    return f;
}

static void frame_release(jframe *f) {
    while (f && --f->rc == 0) {
        jframe *parent = f->parent;
        jv_release(f->vars);
        free(f);
        f = parent;
    }
}

static const jv *frame_lookup(jframe *f, const char *name) {
    for (; f; f = f->parent) {
        const jv *v = jv_dict_get_str(f->vars, name);
        if (v) return v;
    }
    return NULL;
}

static em_status frame_set(jctx *c, jframe *f, const char *name, jv v) {
    if (!jv_dict_set_str(f->vars, name, v)) return jx_oom(c);
    return EM_OK;
}

/* ---- objects ---- */

static void macro_free(jv_obj *o) { frame_release(((jo_macro *)o)->closure); }
static void method_free(jv_obj *o) { jv_release(((jo_method *)o)->self); }
static void loop_free(jv_obj *o) {
    jv_release(((jo_loop *)o)->items);
    jv_release(((jo_loop *)o)->last_changed);
}

static em_status make_macro(jctx *c, const jnode *def, jframe *closure, jv *out) {
    jo_macro *m = em_calloc(1, sizeof *m);
    if (!m) return jx_oom(c);
    m->base.rc = 1;
    m->base.kind = JO_MACRO;
    m->base.free_fn = macro_free;
    m->def = def;
    m->closure = closure;
    m->name = def->kind == JN_MACRO ? def->name : "caller";
    closure->rc++;
    *out = jv_obj_wrap(&m->base);
    if (!jx_track(c, *out)) {
        jv_release(*out);
        return jx_oom(c);
    }
    return EM_OK;
}

static em_status make_method(jctx *c, const jv *self, const char *name, jv *out) {
    jo_method *m = em_calloc(1, sizeof *m);
    if (!m) return jx_oom(c);
    m->base.rc = 1;
    m->base.kind = JO_METHOD;
    m->base.free_fn = method_free;
    m->self = jv_retain(*self);
    snprintf(m->name, sizeof m->name, "%s", name);
    *out = jv_obj_wrap(&m->base);
    return EM_OK;
}

/* ---- attribute and item access ---- */

static em_status loop_attr(jctx *c, jo_loop *l, const jv *self, const char *name, jv *out) {
    size_t n = l->items.u.l->n, i = l->index0;
    if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = jv_int(1);
    else if (!strcmp(name, "depth0")) *out = jv_int(0);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? jv_retain(l->items.u.l->items[i - 1]) : jv_undef_msg("there is no previous item");
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? jv_retain(l->items.u.l->items[i + 1]) : jv_undef_msg("there is no next item");
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) return make_method(c, self, name, out);
    else *out = jv_undef_msg("'LoopContext object' has no attribute '%s'", name);
    return EM_OK;
}

em_status jx_getattr(jctx *c, const jv *obj, const char *name, jv *out) {
    bool unsafe = false;
    /* internals (__class__...) are never reachable: the sandbox answers
     * with an undefined value that fails when used */
    if (name[0] == '_') {
        if (obj->kind == JV_UNDEF && obj->u.s && strncmp(obj->u.s->data, "access to attribute", 19) == 0)
            return jx_fail(c, EM_ERR_FORMAT, "SecurityError: %s", obj->u.s->data);
        *out = jv_undef_msg("access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
        return EM_OK;
    }
    switch (obj->kind) {
    case JV_UNDEF: return jx_undefined(c, obj);
    case JV_DICT:
    case JV_STR:
    case JV_LIST:
        if (jx_has_method(obj, name, &unsafe)) {
            if (unsafe) return jx_fail(c, EM_ERR_FORMAT, "SecurityError: access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
            return make_method(c, obj, name, out);
        }
        if (obj->kind == JV_DICT) {
            const jv *v = jv_dict_get_str(*obj, name);
            if (v) {
                *out = jv_retain(*v);
                return EM_OK;
            }
        }
        break;
    case JV_OBJ: {
        jv_obj *o = obj->u.o;
        if (o->kind == JO_NAMESPACE) {
            const jv *v = jv_dict_get_str(((jo_ns *)o)->dict, name);
            if (v) {
                *out = jv_retain(*v);
                return EM_OK;
            }
        } else if (o->kind == JO_LOOP) {
            return loop_attr(c, (jo_loop *)o, obj, name, out);
        } else if (o->kind == JO_CYCLER) {
            jo_cycler *cy = (jo_cycler *)o;
            if (!strcmp(name, "current")) {
                *out = jv_retain(cy->items.u.l->items[cy->pos]);
                return EM_OK;
            }
            if (!strcmp(name, "next") || !strcmp(name, "reset")) return make_method(c, obj, name, out);
        } else if (o->kind == JO_MACRO && !strcmp(name, "name")) {
            *out = jv_cstr(((jo_macro *)o)->name);
            return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
        }
        break;
    }
    default: break;
    }
    *out = jv_undef_msg("'%s object' has no attribute '%s'", jv_type_name(obj), name);
    return EM_OK;
}

static bool as_index(const jv *k, int64_t *i) {
    if (k->kind == JV_INT) *i = k->u.i;
    else if (k->kind == JV_BOOL) *i = k->u.b;
    else return false;
    return true;
}

em_status jx_getitem(jctx *c, const jv *obj, const jv *key, jv *out) {
    int64_t i;
    switch (obj->kind) {
    case JV_UNDEF: return jx_undefined(c, obj);
    case JV_DICT:
        if (jv_hashable(key)) {
            const jv *v = jv_dict_get(*obj, key);
            if (v) {
                *out = jv_retain(*v);
                return EM_OK;
            }
        }
        break;
    case JV_LIST:
        if (as_index(key, &i)) {
            int64_t n = (int64_t)obj->u.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                *out = jv_retain(obj->u.l->items[i]);
                return EM_OK;
            }
            *out = jv_undef_msg("%s object has no element %lld", jv_type_name(obj), (long long)(key->kind == JV_INT ? key->u.i : i));
            return EM_OK;
        }
        break;
    case JV_STR:
        if (as_index(key, &i)) {
            const jv_str *s = obj->u.s;
            int64_t n = (int64_t)jv_utf8_count(s->data, s->len);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t a = jv_utf8_offset(s->data, s->len, (size_t)i), b = jv_utf8_offset(s->data, s->len, (size_t)i + 1);
                *out = jv_str_new(s->data + a, b - a);
                return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
            }
            *out = jv_undef_msg("str object has no element %lld", (long long)i);
            return EM_OK;
        }
        break;
    default: break;
    }
    if (key->kind == JV_STR) return jx_getattr(c, obj, key->u.s->data, out);
    jbuf b = {0};
    jv_repr(&b, key);
    *out = jv_undef_msg("'%s object' has no attribute '%s'", jv_type_name(obj), b.p ? b.p : "");
    jbuf_free(&b);
    return EM_OK;
}

/* Python slice index adjustment. */
static em_status slice_value(jctx *c, const jv *obj, const jv *start, const jv *stop, const jv *step, jv *out) {
    int64_t st = 1, lo = 0, hi = 0;
    if (step->kind != JV_NONE && !as_index(step, &st)) goto undefined;
    if ((start->kind != JV_NONE && !as_index(start, &lo)) || (stop->kind != JV_NONE && !as_index(stop, &hi))) goto undefined;
    if (st == 0) return jx_fail(c, EM_ERR_FORMAT, "ValueError: slice step cannot be zero");
    bool is_str = obj->kind == JV_STR;
    if (!is_str && obj->kind != JV_LIST) goto undefined;
    int64_t n = is_str ? (int64_t)jv_utf8_count(obj->u.s->data, obj->u.s->len) : (int64_t)obj->u.l->n;
    int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
    int64_t a, b;
    if (start->kind == JV_NONE) a = st < 0 ? upper : lower;
    else {
        a = lo < 0 ? lo + n : lo;
        if (a < lower) a = lower;
        else if (a > upper) a = upper;
    }
    if (stop->kind == JV_NONE) b = st < 0 ? lower : upper;
    else {
        b = hi < 0 ? hi + n : hi;
        if (b < lower) b = lower;
        else if (b > upper) b = upper;
    }
    if (is_str) {
        const jv_str *s = obj->u.s;
        jbuf buf = {0};
        if (st == 1) {
            if (b > a) {
                size_t x = jv_utf8_offset(s->data, s->len, (size_t)a), y = jv_utf8_offset(s->data, s->len, (size_t)b);
                jbuf_put(&buf, s->data + x, y - x);
            }
        } else {
            /* code point offsets once, then pick */
            size_t *offs = em_mallocn((size_t)n + 1, sizeof(size_t));
            if (!offs) return jx_oom(c);
            size_t k = 0;
            for (size_t p = 0; p < s->len; p++)
                if (((unsigned char)s->data[p] & 0xC0) != 0x80) offs[k++] = p;
            offs[k] = s->len;
            for (int64_t i = a; st > 0 ? i < b : i > b; i += st) jbuf_put(&buf, s->data + offs[i], offs[i + 1] - offs[i]);
            free(offs);
        }
        *out = jbuf_take(&buf);
        return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
    }
    jv l = obj->u.l->tuple ? jv_tuple_new(0) : jv_list_new(0);
    if (jv_is_oom(l)) return jx_oom(c);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
        if (!jv_list_push(l, jv_retain(obj->u.l->items[i]))) {
            jv_release(l);
            return jx_oom(c);
        }
    *out = l;
    return EM_OK;
undefined:
    *out = jv_undef_msg("'%s object' cannot be sliced that way", jv_type_name(obj));
    return EM_OK;
}

em_status jx_iter(jctx *c, const jv *v, jv *out) {
    switch (v->kind) {
    case JV_UNDEF: *out = jv_list_new(0); break;
    case JV_LIST: *out = jv_retain(*v); return EM_OK;
    case JV_DICT: {
        *out = jv_list_new(v->u.d->n);
        if (jv_is_oom(*out)) return jx_oom(c);
        for (size_t i = 0; i < v->u.d->n; i++) jv_list_push(*out, jv_retain(v->u.d->keys[i]));
        return EM_OK;
    }
    case JV_STR: {
        const jv_str *s = v->u.s;
        *out = jv_list_new(0);
        if (jv_is_oom(*out)) return jx_oom(c);
        for (size_t p = 0; p < s->len;) {
            size_t q = p + 1;
            while (q < s->len && ((unsigned char)s->data[q] & 0xC0) == 0x80) q++;
            if (!jv_list_push(*out, jv_str_new(s->data + p, q - p))) {
                jv_release(*out);
                return jx_oom(c);
            }
            p = q;
        }
        return EM_OK;
    }
    case JV_OBJ:
        if (v->u.o->kind == JO_NAMESPACE) return jx_fail(c, EM_ERR_FORMAT, "TypeError: 'Namespace' object is not iterable");
        /* fallthrough */
    default: return jx_fail(c, EM_ERR_FORMAT, "TypeError: '%s' object is not iterable", jv_type_name(v));
    }
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

/* ---- evaluation ---- */

static em_status eval(jctx *c, jframe *f, const jnode *n, jv *out);
static em_status exec_body(jctx *c, jframe *f, const jnode *body, jbuf *out);

static em_status eval_args(jctx *c, jframe *f, const jargs *na, jcallargs *a) {
    for (size_t i = 0; i < na->npos; i++) {
        jv v;
        EM_TRY(eval(c, f, na->pos[i], &v));
        if (!jx_args_push(a, v)) return jx_oom(c);
    }
    if (na->star) {
        jv v, l;
        EM_TRY(eval(c, f, na->star, &v));
        em_status st = jx_iter(c, &v, &l);
        jv_release(v);
        EM_TRY(st);
        for (size_t i = 0; i < l.u.l->n; i++)
            if (!jx_args_push(a, jv_retain(l.u.l->items[i]))) {
                jv_release(l);
                return jx_oom(c);
            }
        jv_release(l);
    }
    for (size_t i = 0; i < na->nkw; i++) {
        jv v;
        EM_TRY(eval(c, f, na->kwvals[i], &v));
        if (!jx_args_push_kw(a, na->kwnames[i], v)) return jx_oom(c);
    }
    if (na->starstar) {
        jv v;
        EM_TRY(eval(c, f, na->starstar, &v));
        if (v.kind != JV_DICT) {
            jv_release(v);
            return jx_fail(c, EM_ERR_FORMAT, "TypeError: argument after ** must be a mapping");
        }
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (v.u.d->keys[i].kind != JV_STR) continue;
            if (!jx_args_push_kw(a, v.u.d->keys[i].u.s->data, jv_retain(v.u.d->vals[i]))) {
                jv_release(v);
                return jx_oom(c);
            }
        }
        jv_release(v);
    }
    return EM_OK;
}

static em_status int_result(jctx *c, bool overflow, int64_t r, jv *out) {
    if (overflow) return jx_fail(c, EM_ERR_LIMIT, "integer overflow");
    *out = jv_int(r);
    return EM_OK;
}

static int64_t as_int(const jv *v) { return v->kind == JV_BOOL ? v->u.b : v->u.i; }

static void float_divmod(double vx, double wx, double *floordiv, double *modv) {
    double mod = fmod(vx, wx), div = (vx - mod) / wx;
    if (mod != 0.0) {
        if ((wx < 0) != (mod < 0)) {
            mod += wx;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, wx);
    }
    double fd;
    if (div != 0.0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    *floordiv = fd;
    *modv = mod;
}

static em_status repeat(jctx *c, const jv *seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    size_t unit = seq->kind == JV_STR ? seq->u.s->len : seq->u.l->n, total;
    if (!em_mul(unit, (size_t)times, &total)) return jx_fail(c, EM_ERR_LIMIT, "repeated value too large");
    EM_TRY(jx_check_size(c, total));
    if (seq->kind == JV_STR) {
        jbuf b = {0};
        for (int64_t i = 0; i < times; i++) jbuf_put(&b, seq->u.s->data, unit);
        *out = jbuf_take(&b);
    } else {
        *out = seq->u.l->tuple ? jv_tuple_new(total) : jv_list_new(total);
        if (!jv_is_oom(*out))
            for (int64_t i = 0; i < times; i++)
                for (size_t k = 0; k < unit; k++) jv_list_push(*out, jv_retain(seq->u.l->items[k]));
    }
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

static em_status binop(jctx *c, const char *op, const jv *a, const jv *b, jv *out) {
    if (a->kind == JV_UNDEF) return jx_undefined(c, a);
    if (b->kind == JV_UNDEF) return jx_undefined(c, b);
    bool na = jv_is_number(a), nb = jv_is_number(b);
    bool ints = na && nb && a->kind != JV_FLOAT && b->kind != JV_FLOAT;
    int64_t r = 0;
    char o = op[0];
    bool dbl = op[1] != 0;
    if (o == '+') {
        if (ints) { bool ovf = __builtin_add_overflow(as_int(a), as_int(b), &r); return int_result(c, ovf, r, out); }
        if (na && nb) { *out = jv_float(jv_as_double(a) + jv_as_double(b)); return EM_OK; }
        if (a->kind == JV_STR && b->kind == JV_STR) {
            size_t n;
            if (!em_add(a->u.s->len, b->u.s->len, &n)) return jx_oom(c);
            EM_TRY(jx_check_size(c, n));
            jbuf buf = {0};
            jbuf_put(&buf, a->u.s->data, a->u.s->len);
            jbuf_put(&buf, b->u.s->data, b->u.s->len);
            *out = jbuf_take(&buf);
            return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
        }
        if (a->kind == JV_LIST && b->kind == JV_LIST && a->u.l->tuple == b->u.l->tuple) {
            EM_TRY(jx_check_size(c, a->u.l->n + b->u.l->n));
            *out = jv_list_copy(*a, a->u.l->tuple);
            if (jv_is_oom(*out)) return jx_oom(c);
            for (size_t i = 0; i < b->u.l->n; i++)
                if (!jv_list_push(*out, jv_retain(b->u.l->items[i]))) return jx_oom(c);
            return EM_OK;
        }
    } else if (o == '-') {
        if (ints) { bool ovf = __builtin_sub_overflow(as_int(a), as_int(b), &r); return int_result(c, ovf, r, out); }
        if (na && nb) { *out = jv_float(jv_as_double(a) - jv_as_double(b)); return EM_OK; }
    } else if (o == '*' && !dbl) {
        if (ints) { bool ovf = __builtin_mul_overflow(as_int(a), as_int(b), &r); return int_result(c, ovf, r, out); }
        if (na && nb) { *out = jv_float(jv_as_double(a) * jv_as_double(b)); return EM_OK; }
        if ((a->kind == JV_STR || a->kind == JV_LIST) && nb && b->kind != JV_FLOAT) return repeat(c, a, as_int(b), out);
        if ((b->kind == JV_STR || b->kind == JV_LIST) && na && a->kind != JV_FLOAT) return repeat(c, b, as_int(a), out);
    } else if (o == '/' || o == '%') {
        if (o == '%' && a->kind == JV_STR) return jx_percent_format(c, a, b, out);
        if (na && nb) {
            if (jv_as_double(b) == 0.0) return jx_fail(c, EM_ERR_FORMAT, "ZeroDivisionError: division by zero");
            if (o == '/' && !dbl) { *out = jv_float(jv_as_double(a) / jv_as_double(b)); return EM_OK; }
            if (ints) {
                int64_t x = as_int(a), y = as_int(b);
                if (x == INT64_MIN && y == -1) return jx_fail(c, EM_ERR_LIMIT, "integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) { q -= 1; m += y; }
                *out = jv_int(o == '%' ? m : q);
                return EM_OK;
            }
            double fd, md;
            float_divmod(jv_as_double(a), jv_as_double(b), &fd, &md);
            *out = jv_float(o == '%' ? md : fd);
            return EM_OK;
        }
    } else if (o == '*' && dbl) {
        if (ints && as_int(b) >= 0) {
            int64_t base = as_int(a), e = as_int(b), acc = 1;
            bool ovf = false;
            while (e > 0 && !ovf) {
                if (e & 1) ovf |= __builtin_mul_overflow(acc, base, &acc);
                e >>= 1;
                if (e) ovf |= __builtin_mul_overflow(base, base, &base);
            }
            return int_result(c, ovf, acc, out);
        }
        if (na && nb) {
            double x = jv_as_double(a), y = jv_as_double(b);
            if (x == 0.0 && y < 0) return jx_fail(c, EM_ERR_FORMAT, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
            *out = jv_float(pow(x, y));
            return EM_OK;
        }
    }
    return jx_fail(c, EM_ERR_FORMAT, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static em_status contains(jctx *c, const jv *item, const jv *container, bool *out) {
    switch (container->kind) {
    case JV_STR:
        if (item->kind != JV_STR) return jx_fail(c, EM_ERR_FORMAT, "TypeError: 'in <string>' requires string as left operand, not %s", jv_type_name(item));
        *out = memmem(container->u.s->data, container->u.s->len, item->u.s->data, item->u.s->len) != NULL;
        return EM_OK;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < container->u.l->n && !*out; i++) *out = jv_equal(item, &container->u.l->items[i]);
        return EM_OK;
    case JV_DICT:
        *out = jv_hashable(item) && jv_dict_get(*container, item) != NULL;
        if (!jv_hashable(item) && item->kind != JV_UNDEF) return jx_fail(c, EM_ERR_FORMAT, "TypeError: unhashable type: '%s'", jv_type_name(item));
        return EM_OK;
    case JV_UNDEF: *out = false; return EM_OK;
    default: return jx_fail(c, EM_ERR_FORMAT, "TypeError: argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static em_status compare_op(jctx *c, const char *op, const jv *a, const jv *b, bool *out) {
    if (!strcmp(op, "==")) { *out = jv_equal(a, b); return EM_OK; }
    if (!strcmp(op, "!=")) { *out = !jv_equal(a, b); return EM_OK; }
    if (!strcmp(op, "in") || !strcmp(op, "notin")) {
        EM_TRY(contains(c, a, b, out));
        if (op[0] == 'n') *out = !*out;
        return EM_OK;
    }
    if (a->kind == JV_UNDEF) return jx_undefined(c, a);
    if (b->kind == JV_UNDEF) return jx_undefined(c, b);
    int cmp;
    if (!jv_compare(a, b, &cmp))
        return jx_fail(c, EM_ERR_FORMAT, "TypeError: '%s' not supported between instances of '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
    if (!strcmp(op, "<")) *out = cmp < 0;
    else if (!strcmp(op, "<=")) *out = cmp <= 0;
    else if (!strcmp(op, ">")) *out = cmp > 0;
    else *out = cmp >= 0;
    return EM_OK;
}

static em_status eval_compare(jctx *c, jframe *f, const jnode *n, jv *out) {
    jv left;
    EM_TRY(eval(c, f, n->a, &left));
    bool result = true;
    for (size_t i = 0; i < n->nkids && result; i++) {
        jv right;
        em_status st = eval(c, f, n->kids[i], &right);
        if (st != EM_OK) {
            jv_release(left);
            return st;
        }
        c->line = n->line;
        st = compare_op(c, n->ops[i], &left, &right, &result);
        jv_release(left);
        if (st != EM_OK) {
            jv_release(right);
            return st;
        }
        left = right;
    }
    jv_release(left);
    *out = jv_bool(result);
    return EM_OK;
}

static em_status eval_seq(jctx *c, jframe *f, const jnode *n, jv *out) {
    if (n->kind == JN_DICT) {
        *out = jv_dict_new();
        if (jv_is_oom(*out)) return jx_oom(c);
        for (size_t i = 0; i + 1 < n->nkids; i += 2) {
            jv k, v;
            EM_TRY(eval(c, f, n->kids[i], &k));
            if (!jv_hashable(&k)) {
                c->line = n->line;
                em_status st = jx_fail(c, EM_ERR_FORMAT, "TypeError: unhashable type: '%s'", jv_type_name(&k));
                jv_release(k);
                return st;
            }
            em_status st = eval(c, f, n->kids[i + 1], &v);
            if (st != EM_OK) {
                jv_release(k);
                return st;
            }
            if (!jv_dict_set(*out, k, v)) return jx_oom(c);
        }
        return EM_OK;
    }
    *out = n->kind == JN_TUPLE ? jv_tuple_new(n->nkids) : jv_list_new(n->nkids);
    if (jv_is_oom(*out)) return jx_oom(c);
    for (size_t i = 0; i < n->nkids; i++) {
        jv v;
        EM_TRY(eval(c, f, n->kids[i], &v));
        if (!jv_list_push(*out, v)) return jx_oom(c);
    }
    return EM_OK;
}

static em_status eval_getitem(jctx *c, jframe *f, const jnode *n, jv *out) {
    jv obj;
    EM_TRY(eval(c, f, n->a, &obj));
    em_status st;
    if (n->b->kind == JN_SLICE) {
        jv parts[3] = {jv_none(), jv_none(), jv_none()};
        const jnode *pn[3] = {n->b->a, n->b->b, n->b->c};
        st = EM_OK;
        for (int i = 0; i < 3 && st == EM_OK; i++)
            if (pn[i]) st = eval(c, f, pn[i], &parts[i]);
        c->line = n->line;
        if (st == EM_OK && obj.kind == JV_UNDEF) st = jx_undefined(c, &obj);
        if (st == EM_OK) st = slice_value(c, &obj, &parts[0], &parts[1], &parts[2], out);
        for (int i = 0; i < 3; i++) jv_release(parts[i]);
    } else {
        jv key;
        st = eval(c, f, n->b, &key);
        if (st == EM_OK) {
            c->line = n->line;
            st = jx_getitem(c, &obj, &key, out);
            jv_release(key);
        }
    }
    jv_release(obj);
    return st;
}

static em_status eval_call(jctx *c, jframe *f, const jnode *n, const jv *caller, jv *out) {
    jv fn;
    EM_TRY(eval(c, f, n->a, &fn));
    jcallargs a = {0};
    em_status st = eval_args(c, f, &n->args, &a);
    if (st == EM_OK && caller && !jx_args_push_kw(&a, "caller", jv_retain(*caller))) st = jx_oom(c);
    c->line = n->line;
    if (st == EM_OK) st = jx_call(c, &fn, &a, out);
    jx_args_free(&a);
    jv_release(fn);
    return st;
}

/* Filter chain; `input` replaces the innermost missing operand (filter
 * blocks and set blocks). */
static em_status eval_filter(jctx *c, jframe *f, const jnode *n, const jv *input, jv *out) {
    jv value;
    if (n->a && n->a->kind == JN_FILTER) EM_TRY(eval_filter(c, f, n->a, input, &value));
    else if (n->a) EM_TRY(eval(c, f, n->a, &value));
    else value = jv_retain(*input);
    jcallargs a = {0};
    em_status st = eval_args(c, f, &n->args, &a);
    c->line = n->line;
    if (st == EM_OK) st = jx_step(c);
    if (st == EM_OK) st = jx_filter(c, n->name, &value, &a, out);
    jx_args_free(&a);
    jv_release(value);
    return st;
}

static em_status eval_test(jctx *c, jframe *f, const jnode *n, jv *out) {
    jv value;
    EM_TRY(eval(c, f, n->a, &value));
    jcallargs a = {0};
    em_status st = eval_args(c, f, &n->args, &a);
    bool r = false;
    c->line = n->line;
    if (st == EM_OK) st = jx_test(c, n->name, &value, &a, &r);
    jx_args_free(&a);
    jv_release(value);
    *out = jv_bool(r);
    return st;
}

static em_status eval(jctx *c, jframe *f, const jnode *n, jv *out) {
    c->line = n->line;
    jv a, b;
    em_status st;
    switch (n->kind) {
    case JN_CONST: *out = jv_retain(n->value); return EM_OK;
    case JN_NAME: {
        const jv *v = frame_lookup(f, n->name);
        if (v) *out = jv_retain(*v);
        else if (!jx_global(c, n->name, out)) *out = jv_undef_msg("'%s' is undefined", n->name);
        return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
    }
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT: {
        st = eval_seq(c, f, n, out);
        if (st != EM_OK) {
            jv_release(*out);
            *out = jv_none();
        }
        return st;
    }
    case JN_GETATTR:
        EM_TRY(eval(c, f, n->a, &a));
        c->line = n->line;
        st = jx_getattr(c, &a, n->name, out);
        jv_release(a);
        return st;
    case JN_GETITEM: return eval_getitem(c, f, n, out);
    case JN_NEG:
    case JN_POS:
        EM_TRY(eval(c, f, n->a, &a));
        c->line = n->line;
        if (a.kind == JV_UNDEF) st = jx_undefined(c, &a);
        else if (a.kind == JV_FLOAT) { *out = jv_float(n->kind == JN_NEG ? -a.u.f : a.u.f); st = EM_OK; }
        else if (a.kind == JV_INT || a.kind == JV_BOOL) {
            int64_t x = as_int(&a);
            st = n->kind == JN_NEG ? int_result(c, x == INT64_MIN, -x, out) : int_result(c, false, x, out);
        } else st = jx_fail(c, EM_ERR_FORMAT, "TypeError: bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+", jv_type_name(&a));
        jv_release(a);
        return st;
    case JN_NOT:
        EM_TRY(eval(c, f, n->a, &a));
        *out = jv_bool(!jv_truthy(&a));
        jv_release(a);
        return EM_OK;
    case JN_AND:
    case JN_OR:
        EM_TRY(eval(c, f, n->a, &a));
        if (jv_truthy(&a) == (n->kind == JN_OR)) {
            *out = a;
            return EM_OK;
        }
        jv_release(a);
        return eval(c, f, n->b, out);
    case JN_BINOP:
        EM_TRY(eval(c, f, n->a, &a));
        st = eval(c, f, n->b, &b);
        if (st != EM_OK) {
            jv_release(a);
            return st;
        }
        c->line = n->line;
        if (n->name[0] == '~') {
            jbuf buf = {0};
            jv_to_str(&buf, &a);
            jv_to_str(&buf, &b);
            st = jx_check_size(c, buf.len);
            if (st == EM_OK) {
                *out = jbuf_take(&buf);
                if (jv_is_oom(*out)) st = jx_oom(c);
            } else {
                jbuf_free(&buf);
            }
        } else {
            st = binop(c, n->name, &a, &b, out);
        }
        jv_release(a);
        jv_release(b);
        return st;
    case JN_COMPARE: return eval_compare(c, f, n, out);
    case JN_CONDEXPR:
        EM_TRY(eval(c, f, n->a, &a));
        bool t = jv_truthy(&a);
        jv_release(a);
        if (t) return eval(c, f, n->b, out);
        if (n->c) return eval(c, f, n->c, out);
        *out = jv_undef_msg("the inline if-expression evaluated to false and no else section was defined.");
        return EM_OK;
    case JN_CALL: return eval_call(c, f, n, NULL, out);
    case JN_FILTER: return eval_filter(c, f, n, NULL, out);
    case JN_TEST: return eval_test(c, f, n, out);
    default: return jx_fail(c, EM_ERR_INTERNAL, "node kind %d is not an expression", (int)n->kind);
    }
}

/* ---- calls ---- */

static em_status call_macro(jctx *c, jo_macro *m, jcallargs *a, jv *out) {
    const jnode *def = m->def;
    if (c->depth >= c->lim->max_depth)
        return jx_fail(c, EM_ERR_LIMIT, "macro calls nested deeper than %d (runaway recursion?)", c->lim->max_depth);
    EM_TRY(jx_step(c));
    if (a->npos > def->nparams && !(def->flags & JN_USES_VARARGS))
        return jx_fail(c, EM_ERR_FORMAT, "TypeError: macro '%s' takes not more than %zu argument(s)", m->name, def->nparams);
    jframe *fr = frame_new(m->closure);
    if (!fr) return jx_oom(c);
    em_status st = EM_OK;
    jv varargs = jv_tuple_new(0), kwargs = jv_dict_new();
    const jv **given = em_calloc(def->nparams + 1, sizeof(jv *));
    if (!given || jv_is_oom(varargs) || jv_is_oom(kwargs)) st = jx_oom(c);
    for (size_t i = 0; st == EM_OK && i < a->npos; i++) {
        if (i < def->nparams) given[i] = &a->pos[i];
        else if (!jv_list_push(varargs, jv_retain(a->pos[i]))) st = jx_oom(c);
    }
    bool has_caller = false;
    for (size_t k = 0; st == EM_OK && k < a->nkw; k++) {
        const char *name = a->kwnames[k].u.s->data;
        size_t i = 0;
        while (i < def->nparams && strcmp(def->params[i], name) != 0) i++;
        if (i < def->nparams) {
            if (given[i]) st = jx_fail(c, EM_ERR_FORMAT, "TypeError: macro '%s' got multiple values for argument '%s'", m->name, name);
            given[i] = &a->kwvals[k];
        } else if (!strcmp(name, "caller") && (def->flags & JN_USES_CALLER)) {
            has_caller = true;
            st = frame_set(c, fr, "caller", jv_retain(a->kwvals[k]));
        } else if (def->flags & JN_USES_KWARGS) {
            if (!jv_dict_set(kwargs, jv_retain(a->kwnames[k]), jv_retain(a->kwvals[k]))) st = jx_oom(c);
        } else {
            st = jx_fail(c, EM_ERR_FORMAT, "TypeError: macro '%s' takes no keyword argument '%s'", m->name, name);
        }
    }
    for (size_t i = 0; st == EM_OK && i < def->nparams; i++) {
        jv v;
        if (given[i]) v = jv_retain(*given[i]);
        else if (def->defaults[i]) st = eval(c, fr, def->defaults[i], &v);
        else v = jv_undef_msg("parameter '%s' was not provided", def->params[i]);
        if (st == EM_OK) st = frame_set(c, fr, def->params[i], v);
    }
    if (st == EM_OK && (def->flags & JN_USES_CALLER) && !has_caller && def->kind == JN_MACRO)
        st = frame_set(c, fr, "caller", jv_undef_msg("No caller defined"));
    if (st == EM_OK && (def->flags & JN_USES_VARARGS)) st = frame_set(c, fr, "varargs", jv_retain(varargs));
    if (st == EM_OK && (def->flags & JN_USES_KWARGS)) st = frame_set(c, fr, "kwargs", jv_retain(kwargs));
    jv_release(varargs);
    jv_release(kwargs);
    free(given);
    if (st == EM_OK) {
        jbuf b = {0};
        c->depth++;
        st = exec_body(c, fr, def->body, &b);
        c->depth--;
        c->brk = c->cont = false;
        if (st == EM_OK) {
            *out = jbuf_take(&b);
            if (jv_is_oom(*out)) st = jx_oom(c);
        } else {
            jbuf_free(&b);
        }
    }
    frame_release(fr);
    return st;
}

em_status jx_call(jctx *c, const jv *fn, jcallargs *a, jv *out) {
    if (fn->kind == JV_UNDEF) return jx_undefined(c, fn);
    if (fn->kind != JV_OBJ) return jx_fail(c, EM_ERR_FORMAT, "TypeError: '%s' object is not callable", jv_type_name(fn));
    jv_obj *o = fn->u.o;
    switch (o->kind) {
    case JO_MACRO: return call_macro(c, (jo_macro *)o, a, out);
    case JO_BUILTIN: EM_TRY(jx_step(c)); return jx_call_builtin(c, ((jo_builtin *)o)->id, a, out);
    case JO_METHOD: {
        jo_method *m = (jo_method *)o;
        EM_TRY(jx_step(c));
        return jx_method(c, &m->self, m->name, a, out);
    }
    case JO_JOINER: {
        jo_joiner *j = (jo_joiner *)o;
        if (a->npos || a->nkw) return jx_fail(c, EM_ERR_FORMAT, "TypeError: joiner() takes no arguments");
        *out = j->used ? jv_retain(j->sep) : jv_cstr("");
        j->used = true;
        return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
    }
    default: return jx_fail(c, EM_ERR_FORMAT, "TypeError: '%s' object is not callable", jv_type_name(fn));
    }
}

/* ---- statements ---- */

static em_status emit(jctx *c, jbuf *out, const jv *v) {
    jv_to_str(out, v);
    if (out->oom) return jx_oom(c);
    return jx_check_size(c, out->len);
}

static em_status assign(jctx *c, jframe *f, const jnode *target, jv v) {
    if (target->kind == JN_NAME) return frame_set(c, f, target->name, v);
    if (target->kind == JN_NSREF) {
        const jv *ns = frame_lookup(f, target->name);
        if (!ns || ns->kind != JV_OBJ || ns->u.o->kind != JO_NAMESPACE) {
            jv_release(v);
            return jx_fail(c, EM_ERR_FORMAT, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        }
        if (!jv_dict_set_str(((jo_ns *)ns->u.o)->dict, target->name2, v)) return jx_oom(c);
        return EM_OK;
    }
    /* tuple unpacking */
    jv l;
    em_status st = jx_iter(c, &v, &l);
    jv_release(v);
    EM_TRY(st);
    if (l.u.l->n != target->nkids) {
        st = jx_fail(c, EM_ERR_FORMAT, "ValueError: %s values to unpack (expected %zu, got %zu)",
                     l.u.l->n > target->nkids ? "too many" : "not enough", target->nkids, l.u.l->n);
    }
    for (size_t i = 0; st == EM_OK && i < target->nkids; i++) st = assign(c, f, target->kids[i], jv_retain(l.u.l->items[i]));
    jv_release(l);
    return st;
}

static em_status make_loop(jctx *c, jv items, jv *out) {
    jo_loop *l = em_calloc(1, sizeof *l);
    if (!l) {
        jv_release(items);
        return jx_oom(c);
    }
    l->base.rc = 1;
    l->base.kind = JO_LOOP;
    l->base.free_fn = loop_free;
    l->items = items;
    l->last_changed = jv_undef();
    *out = jv_obj_wrap(&l->base);
    return EM_OK;
}

static em_status exec_for(jctx *c, jframe *f, const jnode *n, jbuf *out) {
    if (n->flags & JN_RECURSIVE) return jx_fail(c, EM_ERR_UNSUPPORTED, "recursive for loops are not supported");
    jv iterable, items;
    EM_TRY(eval(c, f, n->b, &iterable));
    c->line = n->line;
    em_status st = jx_iter(c, &iterable, &items);
    jv_release(iterable);
    EM_TRY(st);
    if (n->c) { /* the loop filter sees the loop variable, not `loop` */
        jv kept = jv_list_new(0);
        if (jv_is_oom(kept)) st = jx_oom(c);
        for (size_t i = 0; st == EM_OK && i < items.u.l->n; i++) {
            jframe *fr = frame_new(f);
            jv cond;
            if (!fr) { st = jx_oom(c); break; }
            st = jx_step(c);
            if (st == EM_OK) st = assign(c, fr, n->a, jv_retain(items.u.l->items[i]));
            if (st == EM_OK) st = eval(c, fr, n->c, &cond);
            if (st == EM_OK) {
                if (jv_truthy(&cond) && !jv_list_push(kept, jv_retain(items.u.l->items[i]))) st = jx_oom(c);
                jv_release(cond);
            }
            frame_release(fr);
        }
        jv_release(items);
        items = kept;
        if (st != EM_OK) {
            jv_release(items);
            return st;
        }
    }
    size_t count = items.u.l->n;
    if (count == 0) {
        jv_release(items);
        if (!n->body2) return EM_OK;
        jframe *fr = frame_new(f);
        if (!fr) return jx_oom(c);
        st = exec_body(c, fr, n->body2, out);
        frame_release(fr);
        return st;
    }
    jv loop;
    EM_TRY(make_loop(c, items, &loop));
    jo_loop *lp = (jo_loop *)loop.u.o;
    for (size_t i = 0; i < count && st == EM_OK; i++) {
        lp->index0 = i;
        c->line = n->line;
        st = jx_step(c);
        jframe *fr = st == EM_OK ? frame_new(f) : NULL;
        if (st == EM_OK && !fr) st = jx_oom(c);
        if (st == EM_OK) st = assign(c, fr, n->a, jv_retain(lp->items.u.l->items[i]));
        if (st == EM_OK) st = frame_set(c, fr, "loop", jv_retain(loop));
        if (st == EM_OK) st = exec_body(c, fr, n->body, out);
        frame_release(fr);
        c->cont = false;
        if (c->brk) {
            c->brk = false;
            break;
        }
    }
    jv_release(loop);
    return st;
}

static em_status exec_set_block(jctx *c, jframe *f, const jnode *n) {
    jbuf b = {0};
    em_status st = exec_body(c, f, n->body, &b);
    if (st != EM_OK) {
        jbuf_free(&b);
        return st;
    }
    jv v = jbuf_take(&b);
    if (jv_is_oom(v)) return jx_oom(c);
    if (n->c) {
        jv filtered;
        st = eval_filter(c, f, n->c, &v, &filtered);
        jv_release(v);
        EM_TRY(st);
        v = filtered;
    }
    return assign(c, f, n->a, v);
}

static em_status exec_call_block(jctx *c, jframe *f, const jnode *n, jbuf *out) {
    jv caller, result;
    EM_TRY(make_macro(c, n, f, &caller));
    em_status st = eval_call(c, f, n->a, &caller, &result);
    jv_release(caller);
    EM_TRY(st);
    st = emit(c, out, &result);
    jv_release(result);
    return st;
}

static em_status exec_filter_block(jctx *c, jframe *f, const jnode *n, jbuf *out) {
    jbuf b = {0};
    em_status st = exec_body(c, f, n->body, &b);
    if (st != EM_OK) {
        jbuf_free(&b);
        return st;
    }
    jv v = jbuf_take(&b), r;
    if (jv_is_oom(v)) return jx_oom(c);
    st = eval_filter(c, f, n->c, &v, &r);
    jv_release(v);
    EM_TRY(st);
    st = emit(c, out, &r);
    jv_release(r);
    return st;
}

static em_status exec_with(jctx *c, jframe *f, const jnode *n, jbuf *out) {
    jframe *fr = frame_new(f);
    if (!fr) return jx_oom(c);
    em_status st = EM_OK;
    for (size_t i = 0; st == EM_OK && i < n->nkids; i++) {
        jv v;
        st = eval(c, f, n->kids2[i], &v);
        if (st == EM_OK) st = assign(c, fr, n->kids[i], v);
    }
    if (st == EM_OK) st = exec_body(c, fr, n->body, out);
    frame_release(fr);
    return st;
}

static em_status exec_stmt(jctx *c, jframe *f, const jnode *n, jbuf *out) {
    c->line = n->line;
    jv v;
    switch (n->kind) {
    case JN_DATA:
        jbuf_put(out, n->value.u.s->data, n->value.u.s->len);
        if (out->oom) return jx_oom(c);
        return jx_check_size(c, out->len);
    case JN_OUTPUT: {
        if (n->flags & JN_PRINT_EACH) {
            for (size_t i = 0; i < n->a->nkids; i++) {
                EM_TRY(eval(c, f, n->a->kids[i], &v));
                em_status st = emit(c, out, &v);
                jv_release(v);
                EM_TRY(st);
            }
            return EM_OK;
        }
        EM_TRY(eval(c, f, n->a, &v));
        em_status st = emit(c, out, &v);
        jv_release(v);
        return st;
    }
    case JN_IF:
        EM_TRY(eval(c, f, n->a, &v));
        bool t = jv_truthy(&v);
        jv_release(v);
        if (t) return exec_body(c, f, n->body, out);
        return n->body2 ? exec_body(c, f, n->body2, out) : EM_OK;
    case JN_FOR: return exec_for(c, f, n, out);
    case JN_SET:
        EM_TRY(eval(c, f, n->b, &v));
        c->line = n->line;
        return assign(c, f, n->a, v);
    case JN_SETBLOCK: return exec_set_block(c, f, n);
    case JN_MACRO:
        EM_TRY(make_macro(c, n, f, &v));
        return frame_set(c, f, n->name, v);
    case JN_CALLBLOCK: return exec_call_block(c, f, n, out);
    case JN_FILTERBLOCK: return exec_filter_block(c, f, n, out);
    case JN_WITH: return exec_with(c, f, n, out);
    case JN_GENERATION:
    case JN_BODY: return exec_body(c, f, n->kind == JN_BODY ? n : n->body, out);
    case JN_BREAK: c->brk = true; return EM_OK;
    case JN_CONTINUE: c->cont = true; return EM_OK;
    default: return jx_fail(c, EM_ERR_INTERNAL, "node kind %d is not a statement", (int)n->kind);
    }
}

static em_status exec_body(jctx *c, jframe *f, const jnode *body, jbuf *out) {
    for (size_t i = 0; i < body->nkids; i++) {
        EM_TRY(exec_stmt(c, f, body->kids[i], out));
        if (c->brk || c->cont) return EM_OK;
    }
    return EM_OK;
}

/* ---- templates ---- */

struct jinja_template {
    jnode *root;
};

jinja_limits jinja_default_limits(void) {
    jinja_limits l = {.max_output = 16u << 20, .max_depth = 200, .max_steps = 10000000, .max_seconds = 10.0, .now = 0};
    return l;
}

em_status jinja_parse(const char *src, size_t len, jinja_template **out) {
    jtoks toks;
    EM_TRY(jlex(src, len, &toks));
    jinja_template *t = em_calloc(1, sizeof *t);
    if (!t) {
        jtoks_free(&toks);
        return em_fail(EM_ERR_NOMEM, "template: out of memory");
    }
    em_status st = jparse(&toks, &t->root);
    jtoks_free(&toks);
    if (st != EM_OK) {
        free(t);
        return st;
    }
    *out = t;
    return EM_OK;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jnode_free(t->root);
    free(t);
}

/* Cuts the references that can form cycles (namespaces holding
 * themselves, macros holding the frame they are stored in). */
static void cut_cycles(jctx *c) {
    jv_list *l = c->tracked.u.l;
    for (size_t i = 0; i < l->n; i++) {
        jv_obj *o = l->items[i].u.o;
        if (o->kind == JO_NAMESPACE) {
            jo_ns *ns = (jo_ns *)o;
            jv old = ns->dict;
            ns->dict = jv_dict_new();
            jv_release(old);
        } else if (o->kind == JO_MACRO) {
            jo_macro *m = (jo_macro *)o;
            jframe *fr = m->closure;
            m->closure = NULL;
            frame_release(fr);
        }
    }
    jv_release(c->tracked);
}

em_status jinja_render(const jinja_template *t, json_t *vars, const jinja_limits *lim, char **out, size_t *out_len) {
    jinja_limits deflim = jinja_default_limits();
    if (!lim) lim = &deflim;
    jctx c = {.lim = lim, .line = 1};
    c.now = lim->now ? lim->now : time(NULL);
    if (lim->max_seconds > 0) {
        clock_gettime(CLOCK_MONOTONIC, &c.deadline);
        double whole = floor(lim->max_seconds);
        c.deadline.tv_sec += (time_t)whole;
        c.deadline.tv_nsec += (long)((lim->max_seconds - whole) * 1e9);
        if (c.deadline.tv_nsec >= 1000000000L) {
            c.deadline.tv_sec++;
            c.deadline.tv_nsec -= 1000000000L;
        }
        c.has_deadline = true;
    }
    c.tracked = jv_list_new(0);
    c.root = frame_new(NULL);
    if (jv_is_oom(c.tracked) || !c.root) {
        jv_release(c.tracked);
        frame_release(c.root);
        return em_fail(EM_ERR_NOMEM, "template: out of memory");
    }
    em_status st = EM_OK;
    if (vars && json_is_object(vars)) {
        const char *k;
        json_t *e;
        json_object_foreach(vars, k, e) {
            if (st == EM_OK) st = frame_set(&c, c.root, k, jv_from_json(e));
        }
    }
    jbuf b = {0};
    if (st == EM_OK) st = exec_body(&c, c.root, t->root, &b);
    cut_cycles(&c);
    frame_release(c.root);
    if (st != EM_OK) {
        jbuf_free(&b);
        return st;
    }
    if (b.oom) {
        jbuf_free(&b);
        return em_fail(EM_ERR_NOMEM, "template: out of memory");
    }
    if (!b.p) {
        b.p = em_strdup("");
        if (!b.p) return em_fail(EM_ERR_NOMEM, "template: out of memory");
    }
    *out = b.p;
    *out_len = b.len;
    return EM_OK;
}
