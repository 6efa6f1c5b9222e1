/* builtins.c — the global functions a template can call: jinja2's range,
 * namespace, dict, cycler, joiner, and transformers' raise_exception and
 * strftime_now. range is capped as jinja2's sandbox caps it. */
#include "chat/jinja/eval.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define JX_MAX_RANGE 100000 /* jinja2.sandbox.MAX_RANGE */

static const struct {
    const char *name;
    jbuiltin_id id;
} globals[] = {
    {"range", JB_RANGE}, {"namespace", JB_NAMESPACE}, {"dict", JB_DICT}, {"raise_exception", JB_RAISE_EXCEPTION},
    {"strftime_now", JB_STRFTIME_NOW}, {"cycler", JB_CYCLER}, {"joiner", JB_JOINER},
};

bool jx_global(jctx *c, const char *name, jv *out) {
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++) {
        if (strcmp(globals[i].name, name) != 0) continue;
        jo_builtin *b = em_calloc(1, sizeof *b);
        if (!b) {
            *out = (jv){.kind = JV_OBJ, .u.o = NULL};
            return true;
        }
        b->base.rc = 1;
        b->base.kind = JO_BUILTIN;
        b->id = globals[i].id;
        *out = jv_obj_wrap(&b->base);
        return true;
    }
    return false;
}

static bool as_int(const jv *v, int64_t *out) {
    if (v->kind == JV_INT) *out = v->u.i;
    else if (v->kind == JV_BOOL) *out = v->u.b;
    else return false;
    return true;
}

static em_status b_range(jctx *c, jcallargs *a, jv *out) {
    int64_t p[3] = {0, 0, 1};
    if (a->nkw || a->npos < 1 || a->npos > 3) return jx_fail(c, EM_ERR_FORMAT, "TypeError: range expected 1 to 3 integer arguments");
    for (size_t i = 0; i < a->npos; i++)
        if (!as_int(&a->pos[i], &p[i])) return jx_fail(c, EM_ERR_FORMAT, "TypeError: '%s' object cannot be interpreted as an integer", jv_type_name(&a->pos[i]));
    int64_t start = a->npos == 1 ? 0 : p[0], stop = a->npos == 1 ? p[0] : p[1], step = a->npos == 3 ? p[2] : 1;
    if (step == 0) return jx_fail(c, EM_ERR_FORMAT, "ValueError: range() arg 3 must not be zero");
    /* count in 128-bit to avoid overflow on extreme bounds */
    __int128 span = (__int128)stop - start, n = 0;
    if (step > 0 && span > 0) n = (span + step - 1) / step;
    else if (step < 0 && span < 0) n = (-span + (-(__int128)step) - 1) / (-(__int128)step);
    if (n > JX_MAX_RANGE)
        return jx_fail(c, EM_ERR_LIMIT, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JX_MAX_RANGE);
    *out = jv_list_new((size_t)n);
    if (jv_is_oom(*out)) return jx_oom(c);
    for (int64_t i = 0; i < (int64_t)n; i++) jv_list_push(*out, jv_int(start + i * step));
    return EM_OK;
}

static void ns_free(jv_obj *o) { jv_release(((jo_ns *)o)->dict); }

static em_status kwargs_dict(jctx *c, jcallargs *a, const char *what, jv *out) {
    if (a->npos > 1) return jx_fail(c, EM_ERR_FORMAT, "TypeError: %s expected at most 1 positional argument", what);
    *out = jv_dict_new();
    if (jv_is_oom(*out)) return jx_oom(c);
    if (a->npos == 1) {
        const jv *src = &a->pos[0];
        if (src->kind == JV_DICT) {
            for (size_t i = 0; i < src->u.d->n; i++) jv_dict_set(*out, jv_retain(src->u.d->keys[i]), jv_retain(src->u.d->vals[i]));
        } else {
            jv l;
            em_status st = jx_iter(c, src, &l);
            if (st != EM_OK) { jv_release(*out); return st; }
            for (size_t i = 0; i < l.u.l->n; i++) {
                const jv *pair = &l.u.l->items[i];
                if (pair->kind != JV_LIST || pair->u.l->n != 2 || !jv_hashable(&pair->u.l->items[0])) {
                    jv_release(l);
                    jv_release(*out);
                    return jx_fail(c, EM_ERR_FORMAT, "ValueError: %s update sequence element #%zu has the wrong shape", what, i);
                }
                jv_dict_set(*out, jv_retain(pair->u.l->items[0]), jv_retain(pair->u.l->items[1]));
            }
            jv_release(l);
        }
    }
    for (size_t i = 0; i < a->nkw; i++) jv_dict_set(*out, jv_retain(a->kwnames[i]), jv_retain(a->kwvals[i]));
    return EM_OK;
}

static em_status b_namespace(jctx *c, jcallargs *a, jv *out) {
    jv d;
    EM_TRY(kwargs_dict(c, a, "namespace", &d));
    jo_ns *ns = em_calloc(1, sizeof *ns);
    if (!ns) {
        jv_release(d);
        return jx_oom(c);
    }
    ns->base.rc = 1;
    ns->base.kind = JO_NAMESPACE;
    ns->base.free_fn = ns_free;
    ns->dict = d;
    *out = jv_obj_wrap(&ns->base);
    if (!jx_track(c, *out)) {
        jv_release(*out);
        return jx_oom(c);
    }
    return EM_OK;
}

static em_status b_strftime(jctx *c, jcallargs *a, jv *out) {
    if (a->npos != 1 || a->pos[0].kind != JV_STR) return jx_fail(c, EM_ERR_FORMAT, "TypeError: strftime_now() takes one format string");
    struct tm tm;
    time_t now = c->now;
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = a->pos[0].u.s->len ? strftime(buf, sizeof buf, a->pos[0].u.s->data, &tm) : 0;
    if (n == 0 && a->pos[0].u.s->len) return jx_fail(c, EM_ERR_FORMAT, "strftime_now: format too long");
    *out = jv_str_new(buf, n);
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

static void joiner_free(jv_obj *o) { jv_release(((jo_joiner *)o)->sep); }
static void cycler_free(jv_obj *o) { jv_release(((jo_cycler *)o)->items); }

em_status jx_call_builtin(jctx *c, jbuiltin_id id, jcallargs *a, jv *out) {
    switch (id) {
    case JB_RANGE: return b_range(c, a, out);
    case JB_NAMESPACE: return b_namespace(c, a, out);
    case JB_DICT: return kwargs_dict(c, a, "dict", out);
    case JB_RAISE_EXCEPTION: {
        jv msg = a->npos ? jv_stringify(&a->pos[0]) : jv_cstr("");
        if (jv_is_oom(msg)) return jx_oom(c);
        em_status st = jx_fail(c, EM_ERR_FORMAT, "%s", msg.u.s->data);
        jv_release(msg);
        return st;
    }
    case JB_STRFTIME_NOW: return b_strftime(c, a, out);
    case JB_JOINER: {
        jo_joiner *j = em_calloc(1, sizeof *j);
        if (!j) return jx_oom(c);
        j->base.rc = 1;
        j->base.kind = JO_JOINER;
        j->base.free_fn = joiner_free;
        j->sep = a->npos ? jv_retain(a->pos[0]) : a->nkw ? jv_retain(a->kwvals[0]) : jv_cstr(", ");
        *out = jv_obj_wrap(&j->base);
        return EM_OK;
    }
    case JB_CYCLER: {
        if (a->npos == 0) return jx_fail(c, EM_ERR_FORMAT, "RuntimeError: at least one item has to be provided");
        jo_cycler *cy = em_calloc(1, sizeof *cy);
        if (!cy) return jx_oom(c);
        cy->base.rc = 1;
        cy->base.kind = JO_CYCLER;
        cy->base.free_fn = cycler_free;
        cy->items = jv_list_new(a->npos);
        for (size_t i = 0; !jv_is_oom(cy->items) && i < a->npos; i++) jv_list_push(cy->items, jv_retain(a->pos[i]));
        *out = jv_obj_wrap(&cy->base);
        if (jv_is_oom(cy->items)) {
            jv_release(*out);
            return jx_oom(c);
        }
        return EM_OK;
    }
    }
    return jx_fail(c, EM_ERR_INTERNAL, "unknown builtin");
}
