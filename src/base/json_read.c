/* json_read.c — JSON text to jansson values (see json_read.h).
 *
 * A recursive descent over the bytes. Strings without escapes are found
 * by one scan for their closing quote and copied once; those with escapes
 * are decoded into a scratch buffer. Numbers follow jansson: no fraction
 * or exponent is an integer (strtoll; out of range is an error), otherwise
 * a real (strtod; overflow is an error, underflow is not). */
#include "base/json_read.h"

#include "base/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JR_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */

typedef struct jr {
    const char *start, *p, *end;
    size_t flags;
    json_error_t *err;
    int depth;
    char *tmp; /* decoded strings with escapes, and number tokens */
    size_t tmp_len, tmp_cap;
    bool failed;
} jr;

/* Records the first error, at `at`: line and column (bytes) counted from
 * the start. */
static void jr_fail(jr *r, const char *at, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = true;
    if (!r->err) return;
    int line = 1, col = 1;
    for (const char *q = r->start; q < at && q < r->end; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err->text, sizeof r->err->text, fmt, ap);
    va_end(ap);
    snprintf(r->err->source, sizeof r->err->source, "<buffer>");
    r->err->line = line;
    r->err->column = col;
    r->err->position = (int)(at - r->start);
}

static void skip_ws(jr *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t')) r->p++;
}

/* Consumes c when it is the next byte. */
static bool take(jr *r, char c) {
    if (r->p >= r->end || *r->p != c) return false;
    r->p++;
    return true;
}

static bool tmp_put(jr *r, const char *s, size_t n) {
    if (r->tmp_len + n + 1 > r->tmp_cap) {
        size_t cap = r->tmp_cap ? r->tmp_cap : 256;
        while (cap < r->tmp_len + n + 1) cap *= 2;
        char *t = realloc(r->tmp, cap);
        if (!t) return false;
        r->tmp = t, r->tmp_cap = cap;
    }
    memcpy(r->tmp + r->tmp_len, s, n);
    r->tmp_len += n;
    r->tmp[r->tmp_len] = 0;
    return true;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int d = em_hex_digit(s[i]);
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The \uXXXX escape at q (its backslash), with a low surrogate's escape
 * after a high one; the code point, or -1 (error recorded). *next: past it. */
static long unicode_escape(jr *r, const char *q, const char **next) {
    int cp = r->end - q >= 6 ? hex4(q + 2) : -1;
    if (cp < 0) {
        jr_fail(r, q, "invalid \\u escape in a string");
        return -1;
    }
    *next = q + 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        jr_fail(r, q, "invalid Unicode '\\u%04X' (a lone low surrogate)", cp);
        return -1;
    }
    if (cp < 0xD800 || cp > 0xDBFF) {
        if (cp == 0) jr_fail(r, q, "\\u0000 is not allowed in a string");
        return cp ? cp : -1;
    }
    int lo = r->end - q >= 12 && q[6] == '\\' && q[7] == 'u' ? hex4(q + 8) : -1;
    if (lo < 0xDC00 || lo > 0xDFFF) {
        jr_fail(r, q, "invalid Unicode '\\u%04X' (a high surrogate without its low one)", cp);
        return -1;
    }
    *next = q + 12;
    return 0x10000 + (((long)cp - 0xD800) << 10) + (lo - 0xDC00);
}

/* Decodes a string with escapes from q (the first backslash; b: the
 * string's first byte) into r->tmp. */
static bool string_escaped(jr *r, const char *b, const char *q, const char **out, size_t *n) {
    r->tmp_len = 0;
    if (!tmp_put(r, b, (size_t)(q - b))) return false;
    while (q < r->end && *q != '"') {
        unsigned char c = (unsigned char)*q;
        if (c < 0x20) {
            jr_fail(r, q, "control character 0x%x in a string", c);
            return false;
        }
        if (c != '\\') {
            const char *run = q;
            while (q < r->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
            if (!tmp_put(r, run, (size_t)(q - run))) return false;
            continue;
        }
        if (q + 1 >= r->end) {
            jr_fail(r, q, "premature end of input in a string");
            return false;
        }
        char e = q[1], one = 0;
        switch (e) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': break;
        default: jr_fail(r, q, "invalid escape '\\%c' in a string", e); return false;
        }
        if (one) {
            if (!tmp_put(r, &one, 1)) return false;
            q += 2;
            continue;
        }
        long cp = unicode_escape(r, q, &q);
        if (cp < 0) return false;
        char u[4];
        int k = utf8_encode((uint32_t)cp, u);
        if (!tmp_put(r, u, (size_t)k)) return false;
    }
    if (q >= r->end) {
        jr_fail(r, q, "premature end of input in a string");
        return false;
    }
    if (!utf8_valid(r->tmp, r->tmp_len)) {
        jr_fail(r, b, "invalid UTF-8 in a string");
        return false;
    }
    r->p = q + 1;
    *out = r->tmp, *n = r->tmp_len;
    return true;
}

/* The string at r->p (its opening quote): its decoded bytes, inside the
 * input when it has no escape, else in r->tmp (until the next string). */
static bool string_at(jr *r, const char **out, size_t *n) {
    const char *b = ++r->p, *q = b;
    bool high = false;
    while (q < r->end) {
        unsigned char c = (unsigned char)*q;
        if (c == '"' || c == '\\' || c < 0x20) break;
        high |= c >= 0x80;
        q++;
    }
    if (q >= r->end) {
        jr_fail(r, q, "premature end of input in a string");
        return false;
    }
    if (*q == '\\') return string_escaped(r, b, q, out, n);
    if (*q != '"') {
        jr_fail(r, q, "control character 0x%x in a string", (unsigned char)*q);
        return false;
    }
    if (high && !utf8_valid(b, (size_t)(q - b))) {
        jr_fail(r, b, "invalid UTF-8 in a string");
        return false;
    }
    r->p = q + 1;
    *out = b, *n = (size_t)(q - b);
    return true;
}

static const char *digits(const char *q, const char *end) {
    while (q < end && *q >= '0' && *q <= '9') q++;
    return q;
}

/* jansson reads one byte past a number or a literal and puts it back; a
 * NUL put back that way is lost, so it accepts "[1\0]" and "true\0" (and
 * rejects a NUL anywhere else). Done the same here. */
static void skip_lost_nul(jr *r) {
    if (r->p < r->end && *r->p == '\0') r->p++;
}

static json_t *number(jr *r) {
    const char *b = r->p, *q = b, *end = r->end;
    if (q < end && *q == '-') q++;
    if (q < end && *q == '0') q++;
    else if (q < end && *q >= '1' && *q <= '9') q = digits(q, end);
    else {
        jr_fail(r, b, "invalid token");
        return NULL;
    }
    bool real = false;
    if (q < end && *q == '.') {
        const char *d = digits(q + 1, end);
        if (d == q + 1) {
            jr_fail(r, b, "invalid number");
            return NULL;
        }
        q = d, real = true;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        const char *s = q + 1;
        if (s < end && (*s == '+' || *s == '-')) s++;
        const char *d = digits(s, end);
        if (d == s) {
            jr_fail(r, b, "invalid number");
            return NULL;
        }
        q = d, real = true;
    }
    r->tmp_len = 0;
    if (!tmp_put(r, b, (size_t)(q - b))) return NULL;
    r->p = q;
    skip_lost_nul(r);
    errno = 0;
    if (!real) {
        long long v = strtoll(r->tmp, NULL, 10);
        if (errno == ERANGE) {
            jr_fail(r, b, v < 0 ? "too big negative integer" : "too big integer");
            return NULL;
        }
        return json_integer((json_int_t)v);
    }
    double d = strtod(r->tmp, NULL);
    if (errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL)) {
        jr_fail(r, b, "real number overflow");
        return NULL;
    }
    return json_real(d);
}

static json_t *value(jr *r);

/* A failed container: its partial value freed, NULL (an error is set,
 * or out of memory is recorded here). */
static json_t *drop(jr *r, json_t *v) {
    if (!r->failed) jr_fail(r, r->p, "out of memory");
    json_decref(v);
    return NULL;
}

/* Steps past a container's opening bracket and the space after it; true
 * when the container closes right there (empty). */
static bool opened_empty(jr *r, char close) {
    r->p++;
    skip_ws(r);
    return take(r, close);
}

static json_t *object(jr *r) {
    json_t *o = json_object();
    if (!o) return drop(r, NULL);
    if (opened_empty(r, '}')) return o;
    for (;;) {
        if (r->p >= r->end || *r->p != '"') {
            jr_fail(r, r->p, "string or '}' expected");
            return drop(r, o);
        }
        const char *k;
        size_t kn;
        if (!string_at(r, &k, &kn)) return drop(r, o);
        char kbuf[64], *key = kn < sizeof kbuf ? kbuf : malloc(kn + 1);
        if (!key) return drop(r, o);
        memcpy(key, k, kn); /* k may sit in tmp, which the value reuses */
        key[kn] = 0;
        bool dup = (r->flags & JSON_REJECT_DUPLICATES) && json_object_getn(o, key, kn);
        json_t *v = NULL;
        if (dup) jr_fail(r, k, "duplicate object key");
        else {
            skip_ws(r);
            if (!take(r, ':')) jr_fail(r, r->p, "':' expected");
            else v = value(r);
        }
        bool ok = v && json_object_setn_new_nocheck(o, key, kn, v) == 0;
        if (key != kbuf) free(key);
        if (!ok) return drop(r, o);
        skip_ws(r);
        if (take(r, ',')) {
            skip_ws(r);
            continue;
        }
        if (take(r, '}')) return o;
        jr_fail(r, r->p, "',' or '}' expected");
        return drop(r, o);
    }
}

static json_t *array(jr *r) {
    json_t *a = json_array();
    if (!a) return drop(r, NULL);
    if (opened_empty(r, ']')) return a;
    for (;;) {
        json_t *v = value(r);
        if (!v || json_array_append_new(a, v)) return drop(r, a);
        skip_ws(r);
        if (take(r, ',')) continue;
        if (take(r, ']')) return a;
        jr_fail(r, r->p, "',' or ']' expected");
        return drop(r, a);
    }
}

static json_t *literal(jr *r, const char *word, size_t n, json_t *v) {
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n)) {
        jr_fail(r, r->p, "invalid token");
        return NULL;
    }
    r->p += n;
    skip_lost_nul(r);
    return v;
}

/* Every value counts a level, as jansson counts them. */
static json_t *value(jr *r) {
    skip_ws(r);
    if (++r->depth > JR_MAX_DEPTH) {
        jr_fail(r, r->p, "maximum parsing depth reached");
        return NULL;
    }
    json_t *v;
    if (r->p >= r->end) {
        jr_fail(r, r->p, "premature end of input");
        return NULL;
    }
    switch (*r->p) {
    case '{': v = object(r); break;
    case '[': v = array(r); break;
    case '"': {
        const char *s;
        size_t n;
        v = string_at(r, &s, &n) ? json_stringn_nocheck(s, n) : NULL;
        if (!v && !r->failed) jr_fail(r, r->p, "out of memory");
        break;
    }
    case 't': v = literal(r, "true", 4, json_true()); break;
    case 'f': v = literal(r, "false", 5, json_false()); break;
    case 'n': v = literal(r, "null", 4, json_null()); break;
    default: v = number(r); break;
    }
    r->depth--;
    return v;
}

json_t *em_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *err) {
    jr r = {.start = buf, .p = buf, .end = buf + len, .flags = flags, .err = err};
    if (err) memset(err, 0, sizeof *err);
    if (flags & ~(size_t)(JSON_REJECT_DUPLICATES | JSON_DECODE_ANY)) {
        jr_fail(&r, buf, "unsupported flags");
        return NULL;
    }
    skip_ws(&r);
    json_t *v = NULL;
    if (!(flags & JSON_DECODE_ANY) && (r.p >= r.end || (*r.p != '{' && *r.p != '['))) jr_fail(&r, r.p, "'[' or '{' expected");
    else v = value(&r);
    if (v) {
        skip_ws(&r);
        if (r.p < r.end) {
            jr_fail(&r, r.p, "end of input expected");
            json_decref(v);
            v = NULL;
        }
    }
    free(r.tmp);
    return v;
}
