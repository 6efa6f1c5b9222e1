/* filters.c — jinja2's builtin filters, with transformers' tojson. Values
 * are converted the way jinja2 converts them: soft_str (str(), Undefined as
 * "") where a filter works on text, Python's ordering where it sorts. */
#include "chat/jinja/eval.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef em_status (*filter_fn)(jctx *c, const jv *v, jcallargs *a, jv *out);

static em_status done(jctx *c, jv *out) { return jv_is_oom(*out) ? jx_oom(c) : EM_OK; }

static em_status str_result(jctx *c, jbuf *b, jv *out) {
    if (b->oom) {
        jbuf_free(b);
        return jx_oom(c);
    }
    EM_TRY(jx_check_size(c, b->len));
    *out = jbuf_take(b);
    return done(c, out);
}

static em_status soft_str(jctx *c, const jv *v, jv *out) {
    *out = jv_stringify(v);
    return done(c, out);
}

static bool as_int(const jv *v, int64_t *out) {
    if (v->kind == JV_INT) *out = v->u.i;
    else if (v->kind == JV_BOOL) *out = v->u.b;
    else return false;
    return true;
}

/* Attribute path "a.b.0" looked up with getitem per part (jinja2's
 * make_attrgetter). */
static em_status attr_path(jctx *c, const jv *item, const jv *attr, const jv *dflt, jv *out) {
    if (attr->kind != JV_STR) return jx_getitem(c, item, attr, out);
    jv cur = jv_retain(*item);
    const char *p = attr->u.s->data;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= p[i] >= '0' && p[i] <= '9';
        jv key = digits ? jv_int(strtoll(p, NULL, 10)) : jv_str_new(p, n), next;
        if (jv_is_oom(key)) {
            jv_release(cur);
            return jx_oom(c);
        }
        em_status st = jx_getitem(c, &cur, &key, &next);
        jv_release(key);
        jv_release(cur);
        EM_TRY(st);
        cur = next;
        if (cur.kind == JV_UNDEF && dflt) {
            jv_release(cur);
            cur = jv_retain(*dflt);
        }
        if (!dot) break;
        p = dot + 1;
    }
    *out = cur;
    return EM_OK;
}

/* Lower-cases strings for case-insensitive comparisons. */
static jv fold(const jv *v, bool case_sensitive) {
    if (!case_sensitive && v->kind == JV_STR) return jx_str_case(v, 'l');
    return jv_retain(*v);
}

static em_status iterate(jctx *c, const jv *v, jv *out) { return jx_iter(c, v, out); }

/* ---- text filters ---- */

/* upper, lower and capitalize: no arguments; the value as a string with
 * jx_str_case's mode applied. */
static em_status case_filter(jctx *c, const char *name, char mode, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, name, a, P, s));
    jv t;
    EM_TRY(soft_str(c, v, &t));
    *out = jx_str_case(&t, mode);
    jv_release(t);
    return done(c, out);
}

static em_status f_upper(jctx *c, const jv *v, jcallargs *a, jv *out) {
    return case_filter(c, "upper", 'u', v, a, out);
}
static em_status f_lower(jctx *c, const jv *v, jcallargs *a, jv *out) {
    return case_filter(c, "lower", 'l', v, a, out);
}
static em_status f_capitalize(jctx *c, const jv *v, jcallargs *a, jv *out) {
    return case_filter(c, "capitalize", 'c', v, a, out);
}

static em_status f_title(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "title", a, P, s));
    jv t;
    EM_TRY(soft_str(c, v, &t));
    /* pieces split at runs of -, whitespace, ( { [ <; each piece gets an
     * upper-case first character and lower-case rest */
    jbuf b = {0};
    const char *d = t.u.s->data;
    size_t n = t.u.s->len, i = 0;
    bool word_start = true;
    while (i < n) {
        uint32_t cp;
        int k = utf8_decode(d + i, n - i, &cp);
        if (k <= 0) { cp = (unsigned char)d[i]; k = 1; }
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jv_is_space(cp);
        if (sep) {
            jbuf_put(&b, d + i, (size_t)k);
            word_start = true;
        } else {
            utf8proc_int32_t m = word_start ? utf8proc_toupper((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp);
            char enc[4];
            int e = utf8_encode((uint32_t)m, enc);
            jbuf_put(&b, enc, (size_t)(e > 0 ? e : 0));
            word_start = false;
        }
        i += (size_t)k;
    }
    jv_release(t);
    return str_result(c, &b, out);
}

static em_status f_trim(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"chars", NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "trim", a, P, s));
    jv t;
    EM_TRY(soft_str(c, v, &t));
    const jv *chars = s[0] && s[0]->kind != JV_NONE ? s[0] : NULL;
    if (chars && chars->kind != JV_STR) {
        jv_release(t);
        return jx_fail(c, EM_ERR_FORMAT, "TypeError: strip arg must be None or str");
    }
    *out = jx_str_strip(&t, chars, 'b');
    jv_release(t);
    return done(c, out);
}

static em_status f_string(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "string", a, P, s));
    return soft_str(c, v, out);
}

static em_status f_safe(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "safe", a, P, s));
    if (v->kind == JV_STR) { *out = jv_retain(*v); return EM_OK; }
    return soft_str(c, v, out);
}

static em_status f_escape(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "escape", a, P, s));
    jv t;
    if (v->kind == JV_UNDEF) t = jv_cstr("");
    else EM_TRY(soft_str(c, v, &t));
    if (jv_is_oom(t)) return jx_oom(c);
    jbuf b = {0};
    for (size_t i = 0; i < t.u.s->len; i++) {
        char ch = t.u.s->data[i];
        switch (ch) {
        case '&': jbuf_puts(&b, "&amp;"); break;
        case '<': jbuf_puts(&b, "&lt;"); break;
        case '>': jbuf_puts(&b, "&gt;"); break;
        case '"': jbuf_puts(&b, "&#34;"); break;
        case '\'': jbuf_puts(&b, "&#39;"); break;
        default: jbuf_putc(&b, ch);
        }
    }
    jv_release(t);
    return str_result(c, &b, out);
}

static em_status f_replace(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"old", "new", "count", NULL};
    const jv *s[3];
    EM_TRY(jx_bind(c, "replace", a, P, s));
    if (!s[0] || !s[1]) return jx_fail(c, EM_ERR_FORMAT, "TypeError: replace() missing required arguments");
    jv t, o, n;
    EM_TRY(soft_str(c, v, &t));
    jcallargs m = {0};
    bool ok = jx_args_push(&m, jv_stringify(s[0])) && jx_args_push(&m, jv_stringify(s[1]));
    if (ok && s[2] && s[2]->kind != JV_NONE) ok = jx_args_push(&m, jv_retain(*s[2]));
    (void)o;
    (void)n;
    em_status st = ok ? jx_method(c, &t, "replace", &m, out) : jx_oom(c);
    jx_args_free(&m);
    jv_release(t);
    return st;
}

static em_status f_indent(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"width", "first", "blank", NULL};
    const jv *s[3];
    EM_TRY(jx_bind(c, "indent", a, P, s));
    jbuf ind = {0};
    int64_t w = 4;
    if (s[0] && s[0]->kind == JV_STR) jbuf_put(&ind, s[0]->u.s->data, s[0]->u.s->len);
    else if (s[0] && !as_int(s[0], &w)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: indent width must be an integer or a string");
    else {
        if (w > 4096) w = 4096;
        for (int64_t i = 0; i < w; i++) jbuf_putc(&ind, ' ');
    }
    bool first = s[1] && jv_truthy(s[1]), blank = s[2] && jv_truthy(s[2]);
    jv t, lines;
    EM_TRY(soft_str(c, v, &t));
    jbuf tmp = {0};
    jbuf_put(&tmp, t.u.s->data, t.u.s->len);
    jbuf_putc(&tmp, '\n');
    jv_release(t);
    t = jbuf_take(&tmp);
    if (jv_is_oom(t)) { jbuf_free(&ind); return jx_oom(c); }
    em_status st = jx_splitlines(c, &t, &lines);
    jv_release(t);
    if (st != EM_OK) { jbuf_free(&ind); return st; }
    jbuf b = {0};
    if (first) jbuf_put(&b, ind.p, ind.len);
    jv_list *l = lines.u.l;
    for (size_t i = 0; i < l->n; i++) {
        const jv_str *line = l->items[i].u.s;
        if (i > 0) {
            jbuf_putc(&b, '\n');
            if (blank || line->len) jbuf_put(&b, ind.p, ind.len);
        }
        jbuf_put(&b, line->data, line->len);
    }
    jv_release(lines);
    jbuf_free(&ind);
    return str_result(c, &b, out);
}

static em_status f_center(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"width", NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "center", a, P, s));
    jv t;
    EM_TRY(soft_str(c, v, &t));
    jcallargs m = {0};
    em_status st = jx_args_push(&m, s[0] ? jv_retain(*s[0]) : jv_int(80)) ? jx_method(c, &t, "center", &m, out) : jx_oom(c);
    jx_args_free(&m);
    jv_release(t);
    return st;
}

static em_status f_wordcount(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "wordcount", a, P, s));
    jv t;
    EM_TRY(soft_str(c, v, &t));
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < t.u.s->len;) {
        uint32_t cp;
        int k = utf8_decode(t.u.s->data + i, t.u.s->len - i, &cp);
        if (k <= 0) { cp = 0; k = 1; }
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        bool w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                 (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
        if (w && !in) words++;
        in = w;
        i += (size_t)k;
    }
    jv_release(t);
    *out = jv_int(words);
    return EM_OK;
}

static em_status f_truncate(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"length", "killwords", "end", "leeway", NULL};
    const jv *s[4];
    EM_TRY(jx_bind(c, "truncate", a, P, s));
    int64_t length = 255, leeway = 5;
    if (s[0] && !as_int(s[0], &length)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: truncate length must be an integer");
    if (s[3] && s[3]->kind != JV_NONE && !as_int(s[3], &leeway)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: truncate leeway must be an integer");
    bool killwords = s[1] && jv_truthy(s[1]);
    jv t, end;
    EM_TRY(soft_str(c, v, &t));
    end = s[2] ? jv_stringify(s[2]) : jv_cstr("...");
    if (jv_is_oom(end)) { jv_release(t); return jx_oom(c); }
    size_t endlen = jv_utf8_count(end.u.s->data, end.u.s->len);
    if (length < (int64_t)endlen) {
        jv_release(t);
        jv_release(end);
        return jx_fail(c, EM_ERR_FORMAT, "AssertionError: expected length >= %zu, got %lld", endlen, (long long)length);
    }
    if (leeway < 0) {
        jv_release(t);
        jv_release(end);
        return jx_fail(c, EM_ERR_FORMAT, "AssertionError: expected leeway >= 0, got %lld", (long long)leeway);
    }
    size_t n = jv_utf8_count(t.u.s->data, t.u.s->len);
    if ((int64_t)n <= length + leeway) {
        jv_release(end);
        *out = t;
        return EM_OK;
    }
    size_t keep = jv_utf8_offset(t.u.s->data, t.u.s->len, (size_t)(length - (int64_t)endlen));
    jbuf b = {0};
    if (killwords) {
        jbuf_put(&b, t.u.s->data, keep);
    } else {
        size_t cut = keep;
        while (cut > 0 && t.u.s->data[cut - 1] != ' ') cut--;
        size_t k = cut > 0 ? cut - 1 : 0; /* text.rsplit(" ", 1)[0] */
        if (cut == 0) k = keep;
        jbuf_put(&b, t.u.s->data, k);
    }
    jbuf_put(&b, end.u.s->data, end.u.s->len);
    jv_release(t);
    jv_release(end);
    return str_result(c, &b, out);
}

static em_status f_format(jctx *c, const jv *v, jcallargs *a, jv *out) {
    jv t;
    EM_TRY(soft_str(c, v, &t));
    em_status st;
    if (a->nkw && a->npos) st = jx_fail(c, EM_ERR_FORMAT, "FilterArgumentError: can't handle positional and keyword arguments at the same time");
    else if (a->nkw) {
        jv d = jv_dict_new();
        for (size_t i = 0; !jv_is_oom(d) && i < a->nkw; i++) jv_dict_set(d, jv_retain(a->kwnames[i]), jv_retain(a->kwvals[i]));
        st = jv_is_oom(d) ? jx_oom(c) : jx_percent_format(c, &t, &d, out);
        jv_release(d);
    } else {
        jv tup = jv_tuple_new(a->npos);
        for (size_t i = 0; !jv_is_oom(tup) && i < a->npos; i++) jv_list_push(tup, jv_retain(a->pos[i]));
        st = jv_is_oom(tup) ? jx_oom(c) : jx_percent_format(c, &t, &tup, out);
        jv_release(tup);
    }
    jv_release(t);
    return st;
}

/* ---- numbers ---- */

static em_status f_int(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"default", "base", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, "int", a, P, s));
    int64_t base = 10;
    if (s[1] && !as_int(s[1], &base)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: int base must be an integer");
    if (v->kind == JV_INT || v->kind == JV_BOOL) { *out = jv_int(v->kind == JV_BOOL ? v->u.b : v->u.i); return EM_OK; }
    if (v->kind == JV_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18) { *out = jv_int((int64_t)v->u.f); return EM_OK; }
    if (v->kind == JV_STR) {
        jv t = jx_str_strip(v, NULL, 'b');
        if (jv_is_oom(t)) return jx_oom(c);
        char *end = NULL;
        const char *d = t.u.s->data;
        bool ok = t.u.s->len > 0 && base >= 2 && base <= 36;
        long long r = 0;
        if (ok) {
            char clean[128];
            size_t k = 0;
            for (size_t i = 0; i < t.u.s->len && k + 1 < sizeof clean; i++)
                if (d[i] != '_') clean[k++] = d[i];
            clean[k] = 0;
            /* Past 64 bits (where jinja2's Python integers go on) the value
             * does not convert, and the filter gives its default, as for a
             * float value out of that range. */
            errno = 0;
            r = strtoll(clean, &end, (int)base);
            ok = end && *end == 0 && end != clean && errno != ERANGE;
            if (!ok) {
                double f = strtod(clean, &end);
                ok = end && *end == 0 && end != clean && isfinite(f) && fabs(f) < 9.2e18 && base == 10;
                r = ok ? (long long)f : 0;
            }
        }
        jv_release(t);
        if (ok) { *out = jv_int(r); return EM_OK; }
    }
    *out = s[0] ? jv_retain(*s[0]) : jv_int(0);
    return EM_OK;
}

static em_status f_float(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"default", NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "float", a, P, s));
    if (jv_is_number(v)) { *out = jv_float(jv_as_double(v)); return EM_OK; }
    if (v->kind == JV_STR) {
        jv t = jx_str_strip(v, NULL, 'b');
        if (jv_is_oom(t)) return jx_oom(c);
        char *end = NULL;
        double f = strtod(t.u.s->data, &end);
        bool ok = t.u.s->len > 0 && end && *end == 0;
        bool hex = strchr(t.u.s->data, 'x') || strchr(t.u.s->data, 'X');
        jv_release(t);
        if (ok && !hex) { *out = jv_float(f); return EM_OK; }
    }
    *out = s[0] ? jv_retain(*s[0]) : jv_float(0.0);
    return EM_OK;
}

static em_status f_abs(jctx *c, const jv *v, jcallargs *a, jv *out) {
    if (v->kind == JV_FLOAT) { *out = jv_float(fabs(v->u.f)); return EM_OK; }
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        int64_t i = v->kind == JV_BOOL ? v->u.b : v->u.i;
        if (i == INT64_MIN) return jx_fail(c, EM_ERR_LIMIT, "integer overflow");
        *out = jv_int(i < 0 ? -i : i);
        return EM_OK;
    }
    if (v->kind == JV_UNDEF) return jx_undefined(c, v);
    return jx_fail(c, EM_ERR_FORMAT, "TypeError: bad operand type for abs(): '%s'", jv_type_name(v));
}

static em_status f_round(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"precision", "method", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, "round", a, P, s));
    int64_t prec = 0;
    if (s[0] && !as_int(s[0], &prec)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: round precision must be an integer");
    const char *method = s[1] && s[1]->kind == JV_STR ? s[1]->u.s->data : "common";
    if (!jv_is_number(v)) {
        if (v->kind == JV_UNDEF) return jx_undefined(c, v);
        return jx_fail(c, EM_ERR_FORMAT, "TypeError: type %s doesn't define __round__ method", jv_type_name(v));
    }
    double x = jv_as_double(v), scale = pow(10.0, (double)prec), r;
    if (!strcmp(method, "common")) {
        if (prec > 300 || prec < -300) r = x;
        else {
            char buf[512];
            if (prec >= 0) {
                snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
                r = strtod(buf, NULL);
            } else {
                r = nearbyint(x / pow(10.0, (double)-prec)) * pow(10.0, (double)-prec);
            }
        }
    } else if (!strcmp(method, "ceil")) r = ceil(x * scale) / scale;
    else if (!strcmp(method, "floor")) r = floor(x * scale) / scale;
    else return jx_fail(c, EM_ERR_FORMAT, "FilterArgumentError: method must be common, ceil or floor");
    *out = jv_float(r);
    return EM_OK;
}

/* ---- sequences ---- */

static em_status f_length(jctx *c, const jv *v, jcallargs *a, jv *out) {
    switch (v->kind) {
    case JV_STR: *out = jv_int((int64_t)jv_utf8_count(v->u.s->data, v->u.s->len)); return EM_OK;
    case JV_LIST: *out = jv_int((int64_t)v->u.l->n); return EM_OK;
    case JV_DICT: *out = jv_int((int64_t)v->u.d->n); return EM_OK;
    case JV_UNDEF: *out = jv_int(0); return EM_OK;
    case JV_OBJ:
        if (v->u.o->kind == JO_NAMESPACE) { *out = jv_int((int64_t)((jo_ns *)v->u.o)->dict.u.d->n); return EM_OK; }
        /* fallthrough */
    default: return jx_fail(c, EM_ERR_FORMAT, "TypeError: object of type '%s' has no len()", jv_type_name(v));
    }
}

static em_status f_list(jctx *c, const jv *v, jcallargs *a, jv *out) {
    jv l;
    EM_TRY(iterate(c, v, &l));
    *out = jv_list_copy(l, false);
    jv_release(l);
    return done(c, out);
}

static em_status f_first(jctx *c, const jv *v, jcallargs *a, jv *out) {
    jv l;
    EM_TRY(iterate(c, v, &l));
    *out = l.u.l->n ? jv_retain(l.u.l->items[0]) : jv_undef_msg("No first item, sequence was empty.");
    jv_release(l);
    return EM_OK;
}

static em_status f_last(jctx *c, const jv *v, jcallargs *a, jv *out) {
    if (v->kind == JV_DICT) return jx_fail(c, EM_ERR_FORMAT, "TypeError: 'dict' object is not reversible");
    jv l;
    EM_TRY(iterate(c, v, &l));
    *out = l.u.l->n ? jv_retain(l.u.l->items[l.u.l->n - 1]) : jv_undef_msg("No last item, sequence was empty.");
    jv_release(l);
    return EM_OK;
}

static em_status f_reverse(jctx *c, const jv *v, jcallargs *a, jv *out) {
    if (v->kind == JV_STR) {
        jv l;
        EM_TRY(iterate(c, v, &l));
        jbuf b = {0};
        for (size_t i = l.u.l->n; i > 0; i--) jbuf_put(&b, l.u.l->items[i - 1].u.s->data, l.u.l->items[i - 1].u.s->len);
        jv_release(l);
        return str_result(c, &b, out);
    }
    jv l;
    EM_TRY(iterate(c, v, &l));
    *out = jv_list_new(l.u.l->n);
    for (size_t i = l.u.l->n; !jv_is_oom(*out) && i > 0; i--) jv_list_push(*out, jv_retain(l.u.l->items[i - 1]));
    jv_release(l);
    return done(c, out);
}

static em_status f_join(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"d", "attribute", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, "join", a, P, s));
    jv l, sep = s[0] ? jv_stringify(s[0]) : jv_cstr("");
    if (jv_is_oom(sep)) return jx_oom(c);
    em_status st = iterate(c, v, &l);
    if (st != EM_OK) { jv_release(sep); return st; }
    jbuf b = {0};
    for (size_t i = 0; st == EM_OK && i < l.u.l->n; i++) {
        if (i) jbuf_put(&b, sep.u.s->data, sep.u.s->len);
        if (s[1] && s[1]->kind != JV_NONE) {
            jv item;
            st = attr_path(c, &l.u.l->items[i], s[1], NULL, &item);
            if (st == EM_OK) { jv_to_str(&b, &item); jv_release(item); }
        } else {
            jv_to_str(&b, &l.u.l->items[i]);
        }
        if (st == EM_OK && b.len > c->lim->max_output) st = jx_check_size(c, b.len);
    }
    jv_release(l);
    jv_release(sep);
    if (st != EM_OK) { jbuf_free(&b); return st; }
    return str_result(c, &b, out);
}

static em_status f_default(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"default_value", "boolean", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, "default", a, P, s));
    bool boolean = s[1] && jv_truthy(s[1]);
    if (v->kind == JV_UNDEF || (boolean && !jv_truthy(v))) *out = s[0] ? jv_retain(*s[0]) : jv_cstr("");
    else *out = jv_retain(*v);
    return done(c, out);
}

static em_status f_items(jctx *c, const jv *v, jcallargs *a, jv *out) {
    if (v->kind == JV_UNDEF) { *out = jv_list_new(0); return done(c, out); }
    if (v->kind != JV_DICT) return jx_fail(c, EM_ERR_FORMAT, "TypeError: can only get item pairs from a mapping.");
    *out = jv_list_new(v->u.d->n);
    for (size_t i = 0; !jv_is_oom(*out) && i < v->u.d->n; i++) {
        jv t = jv_tuple_new(2);
        if (jv_is_oom(t)) { jv_release(*out); return jx_oom(c); }
        jv_list_push(t, jv_retain(v->u.d->keys[i]));
        jv_list_push(t, jv_retain(v->u.d->vals[i]));
        jv_list_push(*out, t);
    }
    return done(c, out);
}

/* Stable merge sort of vals by keys[i] with Python ordering. */
static em_status sort_by(jctx *c, jv *keys, jv *vals, size_t n, bool reverse) {
    for (size_t i = 1; i < n; i++) { /* insertion sort: n is bounded and small in practice */
        EM_TRY(jx_step(c));
        size_t j = i;
        while (j > 0) {
            int cmp;
            if (!jv_compare(&keys[j - 1], &keys[j], &cmp))
                return jx_fail(c, EM_ERR_FORMAT, "TypeError: '<' not supported between instances of '%s' and '%s'", jv_type_name(&keys[j]), jv_type_name(&keys[j - 1]));
            if (reverse ? cmp >= 0 : cmp <= 0) break;
            jv t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
            t = vals[j]; vals[j] = vals[j - 1]; vals[j - 1] = t;
            j--;
        }
    }
    return EM_OK;
}

static em_status sorted_list(jctx *c, const jv *l, const jv *attr, bool case_sensitive, bool reverse, jv *out) {
    size_t n = l->u.l->n;
    jv *keys = em_calloc(n ? n : 1, sizeof(jv)), *vals = em_calloc(n ? n : 1, sizeof(jv));
    em_status st = keys && vals ? EM_OK : jx_oom(c);
    size_t made = 0;
    for (; st == EM_OK && made < n; made++) {
        jv k;
        if (attr) st = attr_path(c, &l->u.l->items[made], attr, NULL, &k);
        else k = jv_retain(l->u.l->items[made]);
        if (st != EM_OK) break;
        keys[made] = fold(&k, case_sensitive);
        jv_release(k);
        vals[made] = jv_retain(l->u.l->items[made]);
    }
    if (st == EM_OK) st = sort_by(c, keys, vals, n, reverse);
    if (st == EM_OK) {
        *out = jv_list_new(n);
        for (size_t i = 0; !jv_is_oom(*out) && i < n; i++) jv_list_push(*out, jv_retain(vals[i]));
        if (jv_is_oom(*out)) st = jx_oom(c);
    }
    for (size_t i = 0; i < made; i++) {
        jv_release(keys[i]);
        jv_release(vals[i]);
    }
    free(keys);
    free(vals);
    return st;
}

static em_status f_sort(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"reverse", "case_sensitive", "attribute", NULL};
    const jv *s[3];
    EM_TRY(jx_bind(c, "sort", a, P, s));
    jv l;
    EM_TRY(iterate(c, v, &l));
    const jv *attr = s[2] && s[2]->kind != JV_NONE ? s[2] : NULL;
    em_status st = sorted_list(c, &l, attr, s[1] && jv_truthy(s[1]), s[0] && jv_truthy(s[0]), out);
    jv_release(l);
    return st;
}

static em_status f_dictsort(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"case_sensitive", "by", "reverse", NULL};
    const jv *s[3];
    EM_TRY(jx_bind(c, "dictsort", a, P, s));
    jv items;
    EM_TRY(f_items(c, v, NULL, &items));
    int by = 0;
    if (s[1] && s[1]->kind == JV_STR && !strcmp(s[1]->u.s->data, "value")) by = 1;
    else if (s[1] && !(s[1]->kind == JV_STR && !strcmp(s[1]->u.s->data, "key"))) {
        jv_release(items);
        return jx_fail(c, EM_ERR_FORMAT, "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    }
    jv attr = jv_int(by);
    em_status st = sorted_list(c, &items, &attr, s[0] && jv_truthy(s[0]), s[2] && jv_truthy(s[2]), out);
    jv_release(items);
    return st;
}

static em_status f_unique(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"case_sensitive", "attribute", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, "unique", a, P, s));
    jv l;
    EM_TRY(iterate(c, v, &l));
    jv seen = jv_list_new(0);
    *out = jv_list_new(0);
    em_status st = jv_is_oom(seen) || jv_is_oom(*out) ? jx_oom(c) : EM_OK;
    for (size_t i = 0; st == EM_OK && i < l.u.l->n; i++) {
        jv k;
        if (s[1] && s[1]->kind != JV_NONE) st = attr_path(c, &l.u.l->items[i], s[1], NULL, &k);
        else k = jv_retain(l.u.l->items[i]);
        if (st != EM_OK) break;
        jv fk = fold(&k, s[0] && jv_truthy(s[0]));
        jv_release(k);
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jv_equal(&seen.u.l->items[j], &fk);
        if (!dup) {
            jv_list_push(seen, fk);
            jv_list_push(*out, jv_retain(l.u.l->items[i]));
        } else {
            jv_release(fk);
        }
    }
    jv_release(seen);
    jv_release(l);
    if (st != EM_OK) jv_release(*out);
    return st;
}

static em_status min_max(jctx *c, const jv *v, jcallargs *a, bool want_max, jv *out) {
    static const char *const P[] = {"case_sensitive", "attribute", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, want_max ? "max" : "min", a, P, s));
    jv l;
    EM_TRY(iterate(c, v, &l));
    em_status st = EM_OK;
    jv best = jv_undef_msg("No aggregated item, sequence was empty."), bestk = jv_undef();
    for (size_t i = 0; st == EM_OK && i < l.u.l->n; i++) {
        jv k;
        if (s[1] && s[1]->kind != JV_NONE) st = attr_path(c, &l.u.l->items[i], s[1], NULL, &k);
        else k = jv_retain(l.u.l->items[i]);
        if (st != EM_OK) break;
        jv fk = fold(&k, s[0] && jv_truthy(s[0]));
        jv_release(k);
        int cmp = 0;
        if (i > 0 && !jv_compare(&fk, &bestk, &cmp))
            st = jx_fail(c, EM_ERR_FORMAT, "TypeError: '<' not supported between instances of '%s' and '%s'", jv_type_name(&fk), jv_type_name(&bestk));
        if (st == EM_OK && (i == 0 || (want_max ? cmp > 0 : cmp < 0))) {
            jv_release(best);
            jv_release(bestk);
            best = jv_retain(l.u.l->items[i]);
            bestk = fk;
        } else {
            jv_release(fk);
        }
    }
    jv_release(bestk);
    jv_release(l);
    if (st != EM_OK) { jv_release(best); return st; }
    *out = best;
    return EM_OK;
}

static em_status f_max(jctx *c, const jv *v, jcallargs *a, jv *out) { return min_max(c, v, a, true, out); }
static em_status f_min(jctx *c, const jv *v, jcallargs *a, jv *out) { return min_max(c, v, a, false, out); }

static em_status f_sum(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"attribute", "start", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, "sum", a, P, s));
    jv l;
    EM_TRY(iterate(c, v, &l));
    jv acc = s[1] ? jv_retain(*s[1]) : jv_int(0);
    em_status st = EM_OK;
    for (size_t i = 0; st == EM_OK && i < l.u.l->n; i++) {
        jv item, next;
        if (s[0] && s[0]->kind != JV_NONE) st = attr_path(c, &l.u.l->items[i], s[0], NULL, &item);
        else item = jv_retain(l.u.l->items[i]);
        if (st != EM_OK) break;
        bool ints = acc.kind != JV_FLOAT && item.kind != JV_FLOAT && jv_is_number(&acc) && jv_is_number(&item);
        if (ints) {
            int64_t r, x = acc.kind == JV_BOOL ? acc.u.b : acc.u.i, y = item.kind == JV_BOOL ? item.u.b : item.u.i;
            if (__builtin_add_overflow(x, y, &r)) st = jx_fail(c, EM_ERR_LIMIT, "integer overflow");
            next = jv_int(r);
        } else if (jv_is_number(&acc) && jv_is_number(&item)) {
            next = jv_float(jv_as_double(&acc) + jv_as_double(&item));
        } else if (acc.kind == JV_LIST && item.kind == JV_LIST) {
            next = jv_list_copy(acc, acc.u.l->tuple);
            for (size_t k = 0; !jv_is_oom(next) && k < item.u.l->n; k++) jv_list_push(next, jv_retain(item.u.l->items[k]));
        } else {
            st = jx_fail(c, EM_ERR_FORMAT, "TypeError: unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(&acc), jv_type_name(&item));
            next = jv_none();
        }
        jv_release(item);
        jv_release(acc);
        acc = next;
    }
    jv_release(l);
    if (st != EM_OK) { jv_release(acc); return st; }
    *out = acc;
    return EM_OK;
}

static em_status f_batch(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"linecount", "fill_with", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, "batch", a, P, s));
    int64_t n;
    if (!s[0] || !as_int(s[0], &n)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: batch() needs an integer line count");
    if (n <= 0) return jx_fail(c, EM_ERR_FORMAT, "ValueError: batch line count must be positive");
    jv l;
    EM_TRY(iterate(c, v, &l));
    *out = jv_list_new(0);
    jv cur = jv_none();
    for (size_t i = 0; !jv_is_oom(*out) && i < l.u.l->n; i++) {
        if (cur.kind == JV_NONE) cur = jv_list_new((size_t)n);
        jv_list_push(cur, jv_retain(l.u.l->items[i]));
        if ((int64_t)cur.u.l->n == n) {
            jv_list_push(*out, cur);
            cur = jv_none();
        }
    }
    if (cur.kind == JV_LIST) {
        if (s[1] && s[1]->kind != JV_NONE)
            while ((int64_t)cur.u.l->n < n) jv_list_push(cur, jv_retain(*s[1]));
        jv_list_push(*out, cur);
    }
    jv_release(l);
    return done(c, out);
}

static em_status f_attr(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"name", NULL};
    const jv *s[1];
    EM_TRY(jx_bind(c, "attr", a, P, s));
    if (!s[0] || s[0]->kind != JV_STR) return jx_fail(c, EM_ERR_FORMAT, "TypeError: attribute name must be a string");
    bool unsafe;
    /* attr() is getattr only: dict keys are not attributes */
    if (v->kind == JV_DICT && !jx_has_method(v, s[0]->u.s->data, &unsafe)) {
        *out = jv_undef_msg("'dict object' has no attribute '%s'", s[0]->u.s->data);
        return EM_OK;
    }
    return jx_getattr(c, v, s[0]->u.s->data, out);
}

/* map(attribute=..., default=...) or map('filter', args...) */
static em_status f_map(jctx *c, const jv *v, jcallargs *a, jv *out) {
    jv l;
    EM_TRY(iterate(c, v, &l));
    const jv *attr = NULL, *dflt = NULL;
    for (size_t i = 0; i < a->nkw; i++) {
        if (!strcmp(a->kwnames[i].u.s->data, "attribute")) attr = &a->kwvals[i];
        else if (!strcmp(a->kwnames[i].u.s->data, "default")) dflt = &a->kwvals[i];
    }
    em_status st = EM_OK;
    if (!attr && (a->npos == 0 || a->pos[0].kind != JV_STR)) st = jx_fail(c, EM_ERR_FORMAT, "FilterArgumentError: map requires a filter argument");
    *out = jv_list_new(l.u.l->n);
    for (size_t i = 0; st == EM_OK && i < l.u.l->n; i++) {
        jv r;
        if (attr) {
            st = attr_path(c, &l.u.l->items[i], attr, dflt, &r);
        } else {
            jcallargs sub = {0};
            for (size_t k = 1; k < a->npos; k++) jx_args_push(&sub, jv_retain(a->pos[k]));
            for (size_t k = 0; k < a->nkw; k++) jx_args_push_kw(&sub, a->kwnames[k].u.s->data, jv_retain(a->kwvals[k]));
            st = jx_step(c);
            if (st == EM_OK) st = jx_filter(c, a->pos[0].u.s->data, &l.u.l->items[i], &sub, &r);
            jx_args_free(&sub);
        }
        if (st == EM_OK && !jv_list_push(*out, r)) st = jx_oom(c);
    }
    jv_release(l);
    if (st != EM_OK) jv_release(*out);
    return st;
}

/* select/reject(test, args...) and selectattr/rejectattr(attr, test, args...) */
static em_status select_impl(jctx *c, const jv *v, jcallargs *a, bool by_attr, bool keep_when, jv *out) {
    jv l;
    EM_TRY(iterate(c, v, &l));
    size_t first = 0;
    const jv *attr = NULL, *test = NULL;
    em_status st = EM_OK;
    if (by_attr) {
        if (a->npos < 1) st = jx_fail(c, EM_ERR_FORMAT, "TypeError: missing attribute argument");
        else attr = &a->pos[first++];
    }
    if (st == EM_OK && a->npos > first) {
        test = &a->pos[first++];
        if (test->kind != JV_STR) st = jx_fail(c, EM_ERR_FORMAT, "TypeError: test name must be a string");
    }
    *out = jv_list_new(0);
    for (size_t i = 0; st == EM_OK && i < l.u.l->n; i++) {
        jv item;
        if (attr) st = attr_path(c, &l.u.l->items[i], attr, NULL, &item);
        else item = jv_retain(l.u.l->items[i]);
        if (st != EM_OK) break;
        bool r;
        if (test) {
            jcallargs sub = {0};
            for (size_t k = first; k < a->npos; k++) jx_args_push(&sub, jv_retain(a->pos[k]));
            for (size_t k = 0; k < a->nkw; k++) jx_args_push_kw(&sub, a->kwnames[k].u.s->data, jv_retain(a->kwvals[k]));
            st = jx_step(c);
            if (st == EM_OK) st = jx_test(c, test->u.s->data, &item, &sub, &r);
            jx_args_free(&sub);
        } else {
            r = jv_truthy(&item);
        }
        jv_release(item);
        if (st == EM_OK && r == keep_when && !jv_list_push(*out, jv_retain(l.u.l->items[i]))) st = jx_oom(c);
    }
    jv_release(l);
    if (st != EM_OK) jv_release(*out);
    return st;
}

static em_status f_select(jctx *c, const jv *v, jcallargs *a, jv *out) { return select_impl(c, v, a, false, true, out); }
static em_status f_reject(jctx *c, const jv *v, jcallargs *a, jv *out) { return select_impl(c, v, a, false, false, out); }
static em_status f_selectattr(jctx *c, const jv *v, jcallargs *a, jv *out) { return select_impl(c, v, a, true, true, out); }
static em_status f_rejectattr(jctx *c, const jv *v, jcallargs *a, jv *out) { return select_impl(c, v, a, true, false, out); }

static em_status f_tojson(jctx *c, const jv *v, jcallargs *a, jv *out) {
    static const char *const P[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    const jv *s[4];
    EM_TRY(jx_bind(c, "tojson", a, P, s));
    if (s[0] && jv_truthy(s[0])) return jx_fail(c, EM_ERR_UNSUPPORTED, "tojson: ensure_ascii=True is not supported");
    jbuf b = {0};
    em_status st = jx_tojson(c, v, s[1], s[2], s[3] && jv_truthy(s[3]), &b);
    if (st != EM_OK) { jbuf_free(&b); return st; }
    return str_result(c, &b, out);
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
    {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

bool jx_filter_exists(const char *name) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name)) return true;
    return false;
}

em_status jx_filter(jctx *c, const char *name, const jv *value, jcallargs *a, jv *out) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++) {
        if (strcmp(filters[i].name, name) != 0) continue;
        static const jcallargs none = {0};
        return filters[i].fn(c, value, a ? a : (jcallargs *)&none, out);
    }
    return jx_fail(c, EM_ERR_FORMAT, "TemplateAssertionError: No filter named '%s'.", name);
}
