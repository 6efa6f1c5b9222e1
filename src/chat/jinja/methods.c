/* methods.c — the Python str/dict/list methods templates call
 * (message.content.startswith(...), d.items(), s.split()...), and Python's
 * two string formatting mini-languages (str % args, str.format). Methods
 * that would mutate a value are refused, as ImmutableSandboxedEnvironment
 * refuses them. */
#include "chat/jinja/eval.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static const char *const str_methods[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "upper", "lower", "title",
    "capitalize", "replace", "format", "join", "find", "rfind", "index", "rindex", "count", "isdigit",
    "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal", "splitlines", "zfill",
    "center", "ljust", "rjust", "partition", "rpartition", "swapcase", "casefold", "removeprefix",
    "removesuffix", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const dict_unsafe[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};
static const char *const list_methods[] = {"count", "index", "copy", NULL};
static const char *const list_unsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL};

static bool in_list(const char *const *l, const char *name) {
    for (; *l; l++)
        if (!strcmp(*l, name)) return true;
    return false;
}

bool jx_has_method(const jv *obj, const char *name, bool *unsafe) {
    *unsafe = false;
    if (obj->kind == JV_STR) return in_list(str_methods, name);
    if (obj->kind == JV_DICT) {
        if (in_list(dict_unsafe, name)) return *unsafe = true;
        return in_list(dict_methods, name);
    }
    if (obj->kind == JV_LIST) {
        if (!obj->u.l->tuple && in_list(list_unsafe, name)) return *unsafe = true;
        return in_list(list_methods, name);
    }
    return false;
}

/* ---- string helpers ---- */

jv jx_str_case(const jv *s, char mode) {
    jbuf b = {0};
    const char *d = s->u.s->data;
    size_t n = s->u.s->len, i = 0;
    bool prev_cased = false, first = true;
    while (i < n) {
        uint32_t cp;
        int k = utf8_decode(d + i, n - i, &cp);
        if (k <= 0) { cp = (unsigned char)d[i]; k = 1; }
        utf8proc_int32_t m = (utf8proc_int32_t)cp;
        bool upper = utf8proc_toupper(m) == m && utf8proc_tolower(m) != m;
        bool lower = utf8proc_tolower(m) == m && utf8proc_toupper(m) != m;
        switch (mode) {
        case 'u': m = utf8proc_toupper(m); break;
        case 'l': m = utf8proc_tolower(m); break;
        case 'c': m = first ? utf8proc_totitle(m) : utf8proc_tolower(m); break;
        case 's': m = upper ? utf8proc_tolower(m) : lower ? utf8proc_toupper(m) : m; break;
        case 't': {
            bool cased = upper || lower || utf8proc_totitle(m) != m;
            m = cased ? (prev_cased ? utf8proc_tolower(m) : utf8proc_totitle(m)) : m;
            prev_cased = cased;
            break;
        }
        }
        char enc[4];
        int e = utf8_encode((uint32_t)m, enc);
        if (e > 0) jbuf_put(&b, enc, (size_t)e);
        first = false;
        i += (size_t)k;
    }
    return jbuf_take(&b);
}

static bool in_chars(uint32_t cp, const jv *chars) {
    if (!chars) return jv_is_space(cp);
    const char *d = chars->u.s->data;
    for (size_t i = 0; i < chars->u.s->len;) {
        uint32_t x;
        int k = utf8_decode(d + i, chars->u.s->len - i, &x);
        if (k <= 0) return false;
        if (x == cp) return true;
        i += (size_t)k;
    }
    return false;
}

jv jx_str_strip(const jv *s, const jv *chars, char mode) {
    const char *d = s->u.s->data;
    size_t a = 0, b = s->u.s->len;
    if (mode != 'r')
        while (a < b) {
            uint32_t cp;
            int k = utf8_decode(d + a, b - a, &cp);
            if (k <= 0 || !in_chars(cp, chars)) break;
            a += (size_t)k;
        }
    if (mode != 'l')
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)d[st] & 0xC0) == 0x80) st--;
            uint32_t cp;
            int k = utf8_decode(d + st, b - st, &cp);
            if (k <= 0 || !in_chars(cp, chars)) break;
            b = st;
        }
    return jv_str_new(d + a, b - a);
}

static bool is_line_break(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || cp == 0x1c || cp == 0x1d || cp == 0x1e || cp == 0x85 ||
           cp == 0x2028 || cp == 0x2029;
}

em_status jx_splitlines(jctx *c, const jv *s, jv *out) {
    *out = jv_list_new(0);
    if (jv_is_oom(*out)) return jx_oom(c);
    const char *d = s->u.s->data;
    size_t n = s->u.s->len, start = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        int k = utf8_decode(d + i, n - i, &cp);
        if (k <= 0) { i++; continue; }
        if (is_line_break(cp)) {
            if (!jv_list_push(*out, jv_str_new(d + start, i - start))) return jx_oom(c);
            i += (size_t)k;
            if (cp == '\r' && i < n && d[i] == '\n') i++;
            start = i;
        } else {
            i += (size_t)k;
        }
    }
    if (start < n && !jv_list_push(*out, jv_str_new(d + start, n - start))) return jx_oom(c);
    return EM_OK;
}

static em_status need_str(jctx *c, const jv *v, const char *what) {
    if (v && v->kind == JV_STR) return EM_OK;
    return jx_fail(c, EM_ERR_FORMAT, "TypeError: %s argument must be str, not %s", what, v ? jv_type_name(v) : "nothing");
}

static bool as_int(const jv *v, int64_t *out) {
    if (v->kind == JV_INT) *out = v->u.i;
    else if (v->kind == JV_BOOL) *out = v->u.b;
    else return false;
    return true;
}

static em_status m_affix(jctx *c, const jv *self, const jv *arg, bool start, jv *out) {
    const jv_str *s = self->u.s;
    bool hit = false;
    if (arg && arg->kind == JV_LIST && arg->u.l->tuple) {
        for (size_t i = 0; i < arg->u.l->n && !hit; i++) {
            const jv *p = &arg->u.l->items[i];
            EM_TRY(need_str(c, p, start ? "startswith" : "endswith"));
            size_t m = p->u.s->len;
            hit = m <= s->len && memcmp(start ? s->data : s->data + s->len - m, p->u.s->data, m) == 0;
        }
    } else {
        if (!arg || arg->kind != JV_STR)
            return jx_fail(c, EM_ERR_FORMAT, "TypeError: %s first arg must be str or a tuple of str", start ? "startswith" : "endswith");
        size_t m = arg->u.s->len;
        hit = m <= s->len && memcmp(start ? s->data : s->data + s->len - m, arg->u.s->data, m) == 0;
    }
    *out = jv_bool(hit);
    return EM_OK;
}

static em_status m_split(jctx *c, const jv *self, const jv *sep, const jv *maxv, bool right, jv *out) {
    int64_t maxsplit = -1;
    if (maxv && !as_int(maxv, &maxsplit)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: maxsplit must be an integer");
    if (sep && sep->kind == JV_NONE) sep = NULL;
    if (sep) EM_TRY(need_str(c, sep, "split"));
    if (sep && sep->u.s->len == 0) return jx_fail(c, EM_ERR_FORMAT, "ValueError: empty separator");
    const char *d = self->u.s->data;
    size_t n = self->u.s->len;
    jv parts = jv_list_new(0);
    if (jv_is_oom(parts)) return jx_oom(c);
    if (sep) {
        size_t m = sep->u.s->len;
        if (!right) {
            size_t start = 0;
            const char *hit;
            while ((maxsplit < 0 || (int64_t)parts.u.l->n < maxsplit) && (hit = memmem(d + start, n - start, sep->u.s->data, m))) {
                jv_list_push(parts, jv_str_new(d + start, (size_t)(hit - d) - start));
                start = (size_t)(hit - d) + m;
            }
            jv_list_push(parts, jv_str_new(d + start, n - start));
        } else {
            size_t end = n;
            jv rev = jv_list_new(0);
            while ((maxsplit < 0 || (int64_t)rev.u.l->n < maxsplit) && end >= m) {
                size_t p = end - m;
                bool found = false;
                for (;; p--) {
                    if (memcmp(d + p, sep->u.s->data, m) == 0) { found = true; break; }
                    if (p == 0) break;
                }
                if (!found) break;
                jv_list_push(rev, jv_str_new(d + p + m, end - p - m));
                end = p;
            }
            jv_list_push(rev, jv_str_new(d, end));
            for (size_t i = rev.u.l->n; i > 0; i--) jv_list_push(parts, jv_retain(rev.u.l->items[i - 1]));
            jv_release(rev);
        }
    } else {
        /* whitespace runs; empty strings dropped */
        size_t i = 0;
        jv words = jv_list_new(0);
        size_t *starts = NULL;
        (void)starts;
        while (i < n) {
            uint32_t cp;
            int k;
            while (i < n && (k = utf8_decode(d + i, n - i, &cp)) > 0 && jv_is_space(cp)) i += (size_t)k;
            if (i >= n) break;
            size_t st = i;
            while (i < n && (k = utf8_decode(d + i, n - i, &cp)) > 0 && !jv_is_space(cp)) i += (size_t)k;
            jv_list_push(words, jv_str_new(d + st, i - st));
        }
        /* maxsplit with whitespace: the remainder keeps its inner spacing */
        if (maxsplit >= 0 && (int64_t)words.u.l->n > maxsplit + 1) {
            jv_list *w = words.u.l;
            if (!right) {
                for (int64_t k = 0; k < maxsplit; k++) jv_list_push(parts, jv_retain(w->items[k]));
                const char *rest = w->items[maxsplit].u.s->data;
                /* locate the remainder in the original text */
                size_t off = 0, cnt = 0;
                for (size_t p = 0; p < n; p++) {
                    bool sp = jv_is_space((unsigned char)d[p]);
                    bool prev_sp = p == 0 || jv_is_space((unsigned char)d[p - 1]);
                    if (!sp && prev_sp) {
                        if ((int64_t)cnt == maxsplit) { off = p; break; }
                        cnt++;
                    }
                }
                jv full = jv_str_new(d + off, n - off);
                jv trimmed = jx_str_strip(&full, NULL, 'r');
                jv_release(full);
                jv_list_push(parts, trimmed);
                (void)rest;
            } else {
                size_t total = w->n, keep = total - (size_t)maxsplit, cnt = 0, endpos = n;
                for (size_t p = n; p > 0; p--) {
                    bool sp = jv_is_space((unsigned char)d[p - 1]);
                    bool next_sp = p == n || jv_is_space((unsigned char)d[p]);
                    if (!sp && next_sp) {
                        cnt++;
                        if (cnt == (size_t)maxsplit + 1) { endpos = p; break; }
                    }
                }
                jv full = jv_str_new(d, endpos);
                jv trimmed = jx_str_strip(&full, NULL, 'l');
                jv_release(full);
                jv_list_push(parts, trimmed);
                for (size_t k = keep; k < total; k++) jv_list_push(parts, jv_retain(w->items[k]));
            }
            jv_release(words);
        } else {
            jv_release(parts);
            parts = words;
        }
    }
    *out = parts;
    return jv_is_oom(parts) ? jx_oom(c) : EM_OK;
}

static em_status m_replace(jctx *c, const jv *self, const jv *old, const jv *new_, const jv *countv, jv *out) {
    EM_TRY(need_str(c, old, "replace"));
    EM_TRY(need_str(c, new_, "replace"));
    int64_t count = -1;
    if (countv && !as_int(countv, &count)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: replace count must be an integer");
    const char *d = self->u.s->data;
    size_t n = self->u.s->len, m = old->u.s->len, i = 0;
    jbuf b = {0};
    int64_t done = 0;
    if (m == 0) {
        while (i <= n) {
            if (count < 0 || done < count) {
                jbuf_put(&b, new_->u.s->data, new_->u.s->len);
                done++;
            }
            if (i == n) break;
            size_t q = i + 1;
            while (q < n && ((unsigned char)d[q] & 0xC0) == 0x80) q++;
            jbuf_put(&b, d + i, q - i);
            i = q;
            if (b.len > c->lim->max_output) break;
        }
    } else {
        const char *hit;
        while ((count < 0 || done < count) && (hit = memmem(d + i, n - i, old->u.s->data, m))) {
            jbuf_put(&b, d + i, (size_t)(hit - d) - i);
            jbuf_put(&b, new_->u.s->data, new_->u.s->len);
            i = (size_t)(hit - d) + m;
            done++;
            if (b.len > c->lim->max_output) break;
        }
        jbuf_put(&b, d + i, n - i);
    }
    if (b.oom) { jbuf_free(&b); return jx_oom(c); }
    em_status st = jx_check_size(c, b.len);
    if (st != EM_OK) { jbuf_free(&b); return st; }
    *out = jbuf_take(&b);
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

static em_status m_find(jctx *c, const jv *self, const jv *sub, bool right, bool raise, jv *out) {
    EM_TRY(need_str(c, sub, "find"));
    const char *d = self->u.s->data;
    size_t n = self->u.s->len, m = sub->u.s->len;
    int64_t at = -1;
    if (!right) {
        const char *hit = memmem(d, n, sub->u.s->data, m);
        if (hit) at = (int64_t)jv_utf8_count(d, (size_t)(hit - d));
    } else if (m <= n) {
        for (size_t p = n - m + 1; p > 0; p--)
            if (memcmp(d + p - 1, sub->u.s->data, m) == 0) {
                at = (int64_t)jv_utf8_count(d, p - 1);
                break;
            }
    }
    if (at < 0 && raise) return jx_fail(c, EM_ERR_FORMAT, "ValueError: substring not found");
    *out = jv_int(at);
    return EM_OK;
}

static em_status m_count(jctx *c, const jv *self, const jv *sub, jv *out) {
    EM_TRY(need_str(c, sub, "count"));
    const char *d = self->u.s->data;
    size_t n = self->u.s->len, m = sub->u.s->len;
    int64_t k = 0;
    if (m == 0) k = (int64_t)jv_utf8_count(d, n) + 1;
    else
        for (const char *p = d; (p = memmem(p, n - (size_t)(p - d), sub->u.s->data, m)); p += m) k++;
    *out = jv_int(k);
    return EM_OK;
}

static em_status m_join(jctx *c, const jv *self, const jv *items, jv *out) {
    jv l;
    EM_TRY(jx_iter(c, items, &l));
    jbuf b = {0};
    em_status st = EM_OK;
    for (size_t i = 0; i < l.u.l->n; i++) {
        const jv *it = &l.u.l->items[i];
        if (it->kind != JV_STR) {
            st = jx_fail(c, EM_ERR_FORMAT, "TypeError: sequence item %zu: expected str instance, %s found", i, jv_type_name(it));
            break;
        }
        if (i) jbuf_put(&b, self->u.s->data, self->u.s->len);
        jbuf_put(&b, it->u.s->data, it->u.s->len);
        if (b.len > c->lim->max_output) { st = jx_check_size(c, b.len); break; }
    }
    jv_release(l);
    if (st != EM_OK) { jbuf_free(&b); return st; }
    *out = jbuf_take(&b);
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

static em_status m_class(jctx *c, const jv *self, const char *name, jv *out) {
    const char *d = self->u.s->data;
    size_t n = self->u.s->len;
    bool r = n > 0, any_cased = false;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = utf8_decode(d + i, n - i, &cp);
        if (k <= 0) { r = false; break; }
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        bool numeric = cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
        utf8proc_int32_t m = (utf8proc_int32_t)cp;
        bool up = utf8proc_tolower(m) != m, lo = utf8proc_toupper(m) != m;
        if (up || lo) any_cased = true;
        if (!strcmp(name, "isdigit") || !strcmp(name, "isdecimal")) r &= digit;
        else if (!strcmp(name, "isnumeric")) r &= numeric;
        else if (!strcmp(name, "isalpha")) r &= alpha;
        else if (!strcmp(name, "isalnum")) r &= alpha || numeric;
        else if (!strcmp(name, "isspace")) r &= jv_is_space(cp);
        else if (!strcmp(name, "isupper")) r &= !lo;
        else if (!strcmp(name, "islower")) r &= !up;
        i += (size_t)k;
    }
    if (!strcmp(name, "isupper") || !strcmp(name, "islower")) r = r && any_cased;
    *out = jv_bool(r);
    return EM_OK;
}

static em_status m_pad(jctx *c, const jv *self, const char *name, const jv *w, const jv *fill, jv *out) {
    int64_t width;
    if (!w || !as_int(w, &width)) return jx_fail(c, EM_ERR_FORMAT, "TypeError: %s() needs an integer width", name);
    EM_TRY(jx_check_size(c, width > 0 ? (size_t)width : 0));
    const char *fc = " ";
    size_t fl = 1;
    if (fill) {
        EM_TRY(need_str(c, fill, name));
        if (jv_utf8_count(fill->u.s->data, fill->u.s->len) != 1)
            return jx_fail(c, EM_ERR_FORMAT, "TypeError: The fill character must be exactly one character long");
        fc = fill->u.s->data;
        fl = fill->u.s->len;
    }
    int64_t n = (int64_t)jv_utf8_count(self->u.s->data, self->u.s->len);
    if (n >= width) { *out = jv_retain(*self); return EM_OK; }
    int64_t pad = width - n, left;
    if (!strcmp(name, "ljust")) left = 0;
    else if (!strcmp(name, "rjust")) left = pad;
    else left = pad / 2 + (pad & width & 1); /* CPython's centering */
    jbuf b = {0};
    bool zfill = !strcmp(name, "zfill");
    size_t body = 0;
    if (zfill) {
        left = pad;
        fc = "0";
        if (self->u.s->len && (self->u.s->data[0] == '-' || self->u.s->data[0] == '+')) {
            jbuf_putc(&b, self->u.s->data[0]);
            body = 1;
        }
    }
    for (int64_t i = 0; i < left; i++) jbuf_put(&b, fc, fl);
    jbuf_put(&b, self->u.s->data + body, self->u.s->len - body);
    for (int64_t i = left; i < pad; i++) jbuf_put(&b, fc, fl);
    *out = jbuf_take(&b);
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

static em_status m_partition(jctx *c, const jv *self, const jv *sep, bool right, jv *out) {
    EM_TRY(need_str(c, sep, "partition"));
    if (sep->u.s->len == 0) return jx_fail(c, EM_ERR_FORMAT, "ValueError: empty separator");
    const char *d = self->u.s->data;
    size_t n = self->u.s->len, m = sep->u.s->len;
    ptrdiff_t at = -1;
    if (!right) {
        const char *hit = memmem(d, n, sep->u.s->data, m);
        if (hit) at = hit - d;
    } else if (m <= n) {
        for (size_t p = n - m + 1; p > 0; p--)
            if (memcmp(d + p - 1, sep->u.s->data, m) == 0) { at = (ptrdiff_t)p - 1; break; }
    }
    *out = jv_tuple_new(3);
    if (jv_is_oom(*out)) return jx_oom(c);
    if (at < 0) {
        jv_list_push(*out, right ? jv_cstr("") : jv_retain(*self));
        jv_list_push(*out, jv_cstr(""));
        jv_list_push(*out, right ? jv_retain(*self) : jv_cstr(""));
    } else {
        jv_list_push(*out, jv_str_new(d, (size_t)at));
        jv_list_push(*out, jv_retain(*sep));
        jv_list_push(*out, jv_str_new(d + at + m, n - (size_t)at - m));
    }
    return EM_OK;
}

/* ---- str.format ---- */

static em_status format_spec(jctx *c, jbuf *b, const jv *v, const char *spec, size_t sl);

static em_status m_format(jctx *c, const jv *self, jcallargs *a, jv *out) {
    const char *d = self->u.s->data;
    size_t n = self->u.s->len, auto_idx = 0;
    jbuf b = {0};
    em_status st = EM_OK;
    for (size_t i = 0; i < n && st == EM_OK;) {
        char ch = d[i];
        if (ch == '}' ) {
            if (i + 1 < n && d[i + 1] == '}') { jbuf_putc(&b, '}'); i += 2; continue; }
            st = jx_fail(c, EM_ERR_FORMAT, "ValueError: Single '}' encountered in format string");
            break;
        }
        if (ch != '{') { jbuf_putc(&b, ch); i++; continue; }
        if (i + 1 < n && d[i + 1] == '{') { jbuf_putc(&b, '{'); i += 2; continue; }
        const char *close = memchr(d + i, '}', n - i);
        if (!close) { st = jx_fail(c, EM_ERR_FORMAT, "ValueError: Single '{' encountered in format string"); break; }
        const char *f = d + i + 1, *fe = close;
        const char *colon = memchr(f, ':', (size_t)(fe - f)), *bang = memchr(f, '!', (size_t)(fe - f));
        const char *name_end = bang && (!colon || bang < colon) ? bang : colon ? colon : fe;
        size_t nl = 0;
        while (f + nl < name_end && f[nl] != '.' && f[nl] != '[') nl++;
        jv v;
        if (nl == 0) {
            if (auto_idx >= a->npos) { st = jx_fail(c, EM_ERR_FORMAT, "IndexError: Replacement index %zu out of range", auto_idx); break; }
            v = jv_retain(a->pos[auto_idx++]);
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t idx = (size_t)strtoul(f, NULL, 10);
            if (idx >= a->npos) { st = jx_fail(c, EM_ERR_FORMAT, "IndexError: Replacement index %zu out of range", idx); break; }
            v = jv_retain(a->pos[idx]);
        } else {
            const jv *found = NULL;
            for (size_t k = 0; k < a->nkw && !found; k++)
                if (a->kwnames[k].u.s->len == nl && !memcmp(a->kwnames[k].u.s->data, f, nl)) found = &a->kwvals[k];
            if (!found) { st = jx_fail(c, EM_ERR_FORMAT, "KeyError: '%.*s'", (int)nl, f); break; }
            v = jv_retain(*found);
        }
        /* .attr and [key] parts */
        const char *p = f + nl;
        while (st == EM_OK && p < name_end) {
            jv next;
            if (*p == '.') {
                const char *q = p + 1;
                while (q < name_end && *q != '.' && *q != '[') q++;
                char attr[128];
                snprintf(attr, sizeof attr, "%.*s", (int)(q - p - 1), p + 1);
                st = jx_getattr(c, &v, attr, &next);
                p = q;
            } else {
                const char *q = memchr(p, ']', (size_t)(name_end - p));
                if (!q) { st = jx_fail(c, EM_ERR_FORMAT, "ValueError: Missing ']' in format string"); break; }
                bool digits = q > p + 1;
                for (const char *r = p + 1; r < q; r++) digits &= *r >= '0' && *r <= '9';
                jv key = digits ? jv_int(strtoll(p + 1, NULL, 10)) : jv_str_new(p + 1, (size_t)(q - p - 1));
                st = jx_getitem(c, &v, &key, &next);
                jv_release(key);
                p = q + 1;
            }
            if (st == EM_OK) {
                jv_release(v);
                v = next;
            }
        }
        if (st == EM_OK && bang && bang + 1 < fe && bang[1] == 'r') {
            jbuf r = {0};
            jv_repr(&r, &v);
            jv_release(v);
            v = jbuf_take(&r);
        }
        if (st == EM_OK) {
            if (colon) st = format_spec(c, &b, &v, colon + 1, (size_t)(fe - colon - 1));
            else jv_to_str(&b, &v);
        }
        jv_release(v);
        i = (size_t)(close - d) + 1;
        if (st == EM_OK && b.len > c->lim->max_output) st = jx_check_size(c, b.len);
    }
    if (st != EM_OK || b.oom) {
        jbuf_free(&b);
        return st != EM_OK ? st : jx_oom(c);
    }
    *out = jbuf_take(&b);
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

/* [[fill]align][sign][0][width][,][.precision][type] */
static em_status format_spec(jctx *c, jbuf *b, const jv *v, const char *spec, size_t sl) {
    char fill = ' ', align = 0, sign = '-', type = 0;
    size_t i = 0;
    long width = 0, prec = -1;
    if (sl >= 2 && strchr("<>^=", spec[1])) { fill = spec[0]; align = spec[1]; i = 2; }
    else if (sl >= 1 && strchr("<>^=", spec[0])) { align = spec[0]; i = 1; }
    if (i < sl && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < sl && spec[i] == '0') { if (!align) { fill = '0'; align = '='; } i++; }
    while (i < sl && spec[i] >= '0' && spec[i] <= '9' && width < 100000) width = width * 10 + (spec[i++] - '0');
    if (i < sl && spec[i] == '.') {
        prec = 0;
        i++;
        while (i < sl && spec[i] >= '0' && spec[i] <= '9' && prec < 1000) prec = prec * 10 + (spec[i++] - '0');
    }
    if (i < sl) type = spec[i++];
    if (i != sl) return jx_fail(c, EM_ERR_FORMAT, "ValueError: Invalid format specifier");
    jbuf body = {0};
    bool numeric = jv_is_number(v) && v->kind != JV_BOOL ? true : v->kind == JV_BOOL && type && type != 's';
    if (v->kind == JV_STR || (!numeric && (type == 0 || type == 's'))) {
        if (type && type != 's') return jx_fail(c, EM_ERR_FORMAT, "ValueError: Unknown format code '%c' for object of type '%s'", type, jv_type_name(v));
        jv s = jv_stringify(v);
        size_t len = s.u.s->len;
        if (prec >= 0) len = jv_utf8_offset(s.u.s->data, s.u.s->len, (size_t)prec);
        jbuf_put(&body, s.u.s->data, len);
        jv_release(s);
        if (!align) align = '<';
    } else if (numeric) {
        double x = jv_as_double(v);
        bool is_int = v->kind != JV_FLOAT;
        if (!type && is_int) type = 'd';
        if (type == 'd' && !is_int) return jx_fail(c, EM_ERR_FORMAT, "ValueError: Unknown format code 'd' for object of type 'float'");
        char tmp[512];
        if (type == 'd') snprintf(tmp, sizeof tmp, "%" PRId64, v->kind == JV_BOOL ? (int64_t)v->u.b : v->u.i);
        else if (type == 'f' || type == 'F') snprintf(tmp, sizeof tmp, "%.*f", (int)(prec < 0 ? 6 : prec), x);
        else if (type == 'e' || type == 'E') snprintf(tmp, sizeof tmp, type == 'e' ? "%.*e" : "%.*E", (int)(prec < 0 ? 6 : prec), x);
        else if (type == '%') snprintf(tmp, sizeof tmp, "%.*f%%", (int)(prec < 0 ? 6 : prec), x * 100.0);
        else if (type == 'x' && is_int) snprintf(tmp, sizeof tmp, "%" PRIx64, v->u.i);
        else if (type == 'g' || (type == 0 && prec >= 0)) snprintf(tmp, sizeof tmp, "%.*g", (int)(prec < 0 ? 6 : prec == 0 ? 1 : prec), x);
        else if (type == 0) {
            jbuf r = {0};
            jv_float_repr(&r, x);
            snprintf(tmp, sizeof tmp, "%s", r.p ? r.p : "");
            jbuf_free(&r);
        } else return jx_fail(c, EM_ERR_FORMAT, "ValueError: Unknown format code '%c' for object of type '%s'", type, jv_type_name(v));
        const char *digits = tmp[0] == '-' ? tmp + 1 : tmp;
        if (tmp[0] == '-') jbuf_putc(&body, '-');
        else if (sign != '-') jbuf_putc(&body, sign);
        if (align == '=') {
            size_t have = body.len + strlen(digits);
            for (long k = (long)have; k < width; k++) jbuf_putc(&body, fill);
        }
        jbuf_puts(&body, digits);
        if (!align) align = '>';
    } else {
        return jx_fail(c, EM_ERR_FORMAT, "TypeError: unsupported format string passed to %s.__format__", jv_type_name(v));
    }
    long n = (long)jv_utf8_count(body.p ? body.p : "", body.len), pad = width > n ? width - n : 0;
    long left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    if (align == '=') left = 0, pad = 0;
    for (long k = 0; k < left; k++) jbuf_putc(b, fill);
    jbuf_put(b, body.p ? body.p : "", body.len);
    for (long k = left; k < pad; k++) jbuf_putc(b, fill);
    jbuf_free(&body);
    return EM_OK;
}

/* ---- str % args ---- */

em_status jx_percent_format(jctx *c, const jv *fmt, const jv *args, jv *out) {
    const char *d = fmt->u.s->data;
    size_t n = fmt->u.s->len, next = 0;
    bool tuple = args->kind == JV_LIST && args->u.l->tuple;
    size_t nargs = tuple ? args->u.l->n : 1;
    jbuf b = {0};
    em_status st = EM_OK;
    bool used_mapping = false;
    for (size_t i = 0; i < n && st == EM_OK;) {
        if (d[i] != '%') { jbuf_putc(&b, d[i++]); continue; }
        i++;
        if (i >= n) { st = jx_fail(c, EM_ERR_FORMAT, "ValueError: incomplete format"); break; }
        const jv *v = NULL;
        jv keyed = jv_undef();
        if (d[i] == '(') {
            const char *close = memchr(d + i, ')', n - i);
            if (!close || args->kind != JV_DICT) { st = jx_fail(c, EM_ERR_FORMAT, "TypeError: format requires a mapping"); break; }
            const jv *found = NULL;
            jv key = jv_str_new(d + i + 1, (size_t)(close - d) - i - 1);
            found = jv_dict_get(*args, &key);
            jv_release(key);
            if (!found) { st = jx_fail(c, EM_ERR_FORMAT, "KeyError: missing format key"); break; }
            keyed = jv_retain(*found);
            v = &keyed;
            used_mapping = true;
            i = (size_t)(close - d) + 1;
        }
        char flags[8];
        size_t nf = 0;
        while (i < n && strchr("-+ #0", d[i]) && nf < sizeof flags - 1) flags[nf++] = d[i++];
        flags[nf] = 0;
        long width = -1, prec = -1;
        if (i < n && d[i] >= '0' && d[i] <= '9') { width = 0; while (i < n && d[i] >= '0' && d[i] <= '9' && width < 100000) width = width * 10 + (d[i++] - '0'); }
        if (i < n && d[i] == '.') { prec = 0; i++; while (i < n && d[i] >= '0' && d[i] <= '9' && prec < 1000) prec = prec * 10 + (d[i++] - '0'); }
        if (i >= n) { jv_release(keyed); st = jx_fail(c, EM_ERR_FORMAT, "ValueError: incomplete format"); break; }
        char type = d[i++];
        if (type == '%') { jbuf_putc(&b, '%'); jv_release(keyed); continue; }
        if (!v) {
            if (next >= nargs) { st = jx_fail(c, EM_ERR_FORMAT, "TypeError: not enough arguments for format string"); break; }
            v = tuple ? &args->u.l->items[next] : args;
            next++;
        }
        char spec[32], tmp[512];
        jbuf piece = {0};
        if (type == 's' || type == 'r') {
            if (type == 's') jv_to_str(&piece, v);
            else jv_repr(&piece, v);
            if (prec >= 0 && piece.p) piece.len = jv_utf8_offset(piece.p, piece.len, (size_t)prec);
        } else if (strchr("dixXofFeEgGc", type)) {
            if (!jv_is_number(v)) {
                jv_release(keyed);
                jbuf_free(&piece);
                st = jx_fail(c, EM_ERR_FORMAT, "TypeError: %%%c format: a real number is required, not %s", type, jv_type_name(v));
                break;
            }
            /* numbers carry their own width so that the 0 flag pads with zeros */
            long wd = width < 0 ? 0 : width > 400 ? 400 : width;
            if (strchr("dixXoc", type)) {
                int64_t iv = v->kind == JV_FLOAT ? (int64_t)v->u.f : v->kind == JV_BOOL ? v->u.b : v->u.i;
                const char *conv = type == 'x' ? PRIx64 : type == 'X' ? PRIX64 : type == 'o' ? PRIo64 : PRId64;
                snprintf(spec, sizeof spec, "%%%s%ld%s", flags, wd, conv);
                snprintf(tmp, sizeof tmp, spec, iv);
            } else {
                snprintf(spec, sizeof spec, "%%%s%ld.%ld%c", flags, wd, prec < 0 ? 6 : prec > 300 ? 300 : prec, type);
                snprintf(tmp, sizeof tmp, spec, jv_as_double(v));
            }
            width = -1;
            jbuf_puts(&piece, tmp);
        } else {
            jv_release(keyed);
            st = jx_fail(c, EM_ERR_FORMAT, "ValueError: unsupported format character '%c'", type);
            break;
        }
        long plen = (long)jv_utf8_count(piece.p ? piece.p : "", piece.len);
        bool leftj = strchr(flags, '-') != NULL;
        if (!leftj) for (long k = plen; k < width; k++) jbuf_putc(&b, ' ');
        jbuf_put(&b, piece.p ? piece.p : "", piece.len);
        if (leftj) for (long k = plen; k < width; k++) jbuf_putc(&b, ' ');
        jbuf_free(&piece);
        jv_release(keyed);
    }
    if (st == EM_OK && !used_mapping && next < nargs && !(args->kind == JV_DICT))
        st = jx_fail(c, EM_ERR_FORMAT, "TypeError: not all arguments converted during string formatting");
    if (st != EM_OK || b.oom) {
        jbuf_free(&b);
        return st != EM_OK ? st : jx_oom(c);
    }
    *out = jbuf_take(&b);
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

/* ---- dispatch ---- */

static em_status dict_method(jctx *c, const jv *self, const char *name, const jv **s, jv *out) {
    jv_dict *d = self->u.d;
    if (!strcmp(name, "get")) {
        if (!s[0]) return jx_fail(c, EM_ERR_FORMAT, "TypeError: get expected at least 1 argument");
        const jv *v = jv_hashable(s[0]) ? jv_dict_get(*self, s[0]) : NULL;
        *out = v ? jv_retain(*v) : s[1] ? jv_retain(*s[1]) : jv_none();
        return EM_OK;
    }
    if (!strcmp(name, "copy")) { *out = jv_dict_copy(*self); return jv_is_oom(*out) ? jx_oom(c) : EM_OK; }
    *out = jv_list_new(d->n);
    for (size_t i = 0; !jv_is_oom(*out) && i < d->n; i++) {
        if (!strcmp(name, "keys")) jv_list_push(*out, jv_retain(d->keys[i]));
        else if (!strcmp(name, "values")) jv_list_push(*out, jv_retain(d->vals[i]));
        else {
            jv t = jv_tuple_new(2);
            if (jv_is_oom(t)) break;
            jv_list_push(t, jv_retain(d->keys[i]));
            jv_list_push(t, jv_retain(d->vals[i]));
            jv_list_push(*out, t);
        }
    }
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

static em_status list_method(jctx *c, const jv *self, const char *name, const jv **s, jv *out) {
    jv_list *l = self->u.l;
    if (!strcmp(name, "copy")) { *out = jv_list_copy(*self, l->tuple); return jv_is_oom(*out) ? jx_oom(c) : EM_OK; }
    if (!s[0]) return jx_fail(c, EM_ERR_FORMAT, "TypeError: %s() takes exactly one argument", name);
    int64_t k = 0, at = -1;
    for (size_t i = 0; i < l->n; i++)
        if (jv_equal(&l->items[i], s[0])) {
            if (at < 0) at = (int64_t)i;
            k++;
        }
    if (!strcmp(name, "count")) { *out = jv_int(k); return EM_OK; }
    if (at < 0) return jx_fail(c, EM_ERR_FORMAT, "ValueError: value is not in list");
    *out = jv_int(at);
    return EM_OK;
}

static em_status str_method(jctx *c, const jv *self, const char *name, jcallargs *a, jv *out) {
    static const char *const P2[] = {"a", "b", "c", NULL};
    const jv *s[3];
    if (!strcmp(name, "format")) return m_format(c, self, a, out);
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        static const char *const P[] = {"sep", "maxsplit", NULL};
        EM_TRY(jx_bind(c, name, a, P, s));
        return m_split(c, self, s[0], s[1], name[0] == 'r', out);
    }
    EM_TRY(jx_bind(c, name, a, P2, s));
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) return m_affix(c, self, s[0], name[0] == 's', out);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        const jv *chars = s[0] && s[0]->kind != JV_NONE ? s[0] : NULL;
        if (chars) EM_TRY(need_str(c, chars, name));
        *out = jx_str_strip(self, chars, name[0] == 's' ? 'b' : name[0]);
    } else if (!strcmp(name, "upper")) *out = jx_str_case(self, 'u');
    else if (!strcmp(name, "lower") || !strcmp(name, "casefold")) *out = jx_str_case(self, 'l');
    else if (!strcmp(name, "title")) *out = jx_str_case(self, 't');
    else if (!strcmp(name, "capitalize")) *out = jx_str_case(self, 'c');
    else if (!strcmp(name, "swapcase")) *out = jx_str_case(self, 's');
    else if (!strcmp(name, "replace")) return m_replace(c, self, s[0], s[1], s[2], out);
    else if (!strcmp(name, "join")) {
        if (!s[0]) return jx_fail(c, EM_ERR_FORMAT, "TypeError: join() takes exactly one argument");
        return m_join(c, self, s[0], out);
    } else if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex"))
        return m_find(c, self, s[0], name[0] == 'r', strstr(name, "index") != NULL, out);
    else if (!strcmp(name, "count")) return m_count(c, self, s[0], out);
    else if (!strncmp(name, "is", 2)) return m_class(c, self, name, out);
    else if (!strcmp(name, "splitlines")) return jx_splitlines(c, self, out);
    else if (!strcmp(name, "zfill") || !strcmp(name, "center") || !strcmp(name, "ljust") || !strcmp(name, "rjust"))
        return m_pad(c, self, name, s[0], s[1], out);
    else if (!strcmp(name, "partition") || !strcmp(name, "rpartition")) return m_partition(c, self, s[0], name[0] == 'r', out);
    else if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        EM_TRY(need_str(c, s[0], name));
        size_t m = s[0]->u.s->len, n = self->u.s->len;
        bool pre = name[6] == 'p';
        if (m <= n && memcmp(pre ? self->u.s->data : self->u.s->data + n - m, s[0]->u.s->data, m) == 0)
            *out = pre ? jv_str_new(self->u.s->data + m, n - m) : jv_str_new(self->u.s->data, n - m);
        else *out = jv_retain(*self);
    } else return jx_fail(c, EM_ERR_INTERNAL, "str.%s is listed as a method but has no handler", name);
    return jv_is_oom(*out) ? jx_oom(c) : EM_OK;
}

static em_status loop_method(jctx *c, const jv *self, const char *name, jcallargs *a, jv *out) {
    jo_loop *l = (jo_loop *)self->u.o;
    if (!strcmp(name, "cycle")) {
        if (a->npos == 0) return jx_fail(c, EM_ERR_FORMAT, "TypeError: no items for cycling given");
        *out = jv_retain(a->pos[l->index0 % a->npos]);
        return EM_OK;
    }
    /* changed(*values): true when the values differ from the last call */
    jv now = jv_list_new(a->npos);
    if (jv_is_oom(now)) return jx_oom(c);
    for (size_t i = 0; i < a->npos; i++) jv_list_push(now, jv_retain(a->pos[i]));
    bool changed = !l->has_changed || !jv_equal(&now, &l->last_changed);
    jv_release(l->last_changed);
    l->last_changed = now;
    l->has_changed = true;
    *out = jv_bool(changed);
    return EM_OK;
}

em_status jx_method(jctx *c, const jv *self, const char *name, jcallargs *a, jv *out) {
    if (self->kind == JV_STR) return str_method(c, self, name, a, out);
    if (self->kind == JV_OBJ && self->u.o->kind == JO_LOOP) return loop_method(c, self, name, a, out);
    if (self->kind == JV_OBJ && self->u.o->kind == JO_CYCLER) {
        jo_cycler *cy = (jo_cycler *)self->u.o;
        if (!strcmp(name, "reset")) { cy->pos = 0; *out = jv_none(); return EM_OK; }
        *out = jv_retain(cy->items.u.l->items[cy->pos]);
        cy->pos = (cy->pos + 1) % cy->items.u.l->n;
        return EM_OK;
    }
    static const char *const P[] = {"a", "b", NULL};
    const jv *s[2];
    EM_TRY(jx_bind(c, name, a, P, s));
    if (self->kind == JV_DICT) return dict_method(c, self, name, s, out);
    if (self->kind == JV_LIST) return list_method(c, self, name, s, out);
    return jx_fail(c, EM_ERR_FORMAT, "TypeError: '%s' object has no method '%s'", jv_type_name(self), name);
}
