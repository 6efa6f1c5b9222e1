/* regex.c — an ECMAScript regex subset → a GBNF expression matching the
 * whole text (JSON Schema "pattern" and the regex response format).
 *
 * Supported: literals, escapes (\d \w \s \D \W \S \n \r \t \f \v \0 \xHH
 * \uHHHH \u{H..} and escaped punctuation), classes with ranges and
 * negation, ., groups ( ) (?: ) (?<name> ), alternation, quantifiers
 * * + ? {m} {m,} {m,n} (lazy forms alike), ^ at the start and $ at the end
 * of a top-level branch. Anything else (backreferences, lookaround, \b,
 * anchors in the middle) is EM_ERR_UNSUPPORTED naming the construct.
 *
 * Generating a full match is sound for JSON Schema, whose patterns search
 * anywhere: a text that matches in full also matches somewhere. */
#include "engine/grammar/grammar_internal.h"

#include "base/utf8.h"

#include <string.h>

typedef struct rx {
    const char *s;
    size_t n, i;
    bool json;
    int depth;
    gbuf *out;
} rx;

static em_status rx_fail(const rx *r, em_status code, const char *what) {
    return em_fail(code, "regex at offset %zu: %s", r->i, what);
}

static bool add_named(cp_set *s, char k) {
    static const uint32_t d[] = {'0', '9'};
    static const uint32_t w[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
    static const uint32_t sp[] = {9, 13, ' ', ' ', 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029,
                                  0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
    const uint32_t *t;
    size_t n;
    char lk = (char)(k | 0x20);
    if (lk == 'd') t = d, n = 1;
    else if (lk == 'w') t = w, n = 4;
    else t = sp, n = 10;
    cp_set tmp = {0};
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) ok = cp_set_add(&tmp, t[2 * i], t[2 * i + 1]);
    if (ok) ok = cp_set_normalize(&tmp, k != lk);
    for (size_t i = 0; i < tmp.n && ok; i++) ok = cp_set_add(s, tmp.r[2 * i], tmp.r[2 * i + 1]);
    cp_set_free(&tmp);
    return ok;
}

/* An escape after '\': a single code point (*cp) or a named class (*cls). */
static em_status rx_escape(rx *r, uint32_t *cp, char *cls) {
    *cls = 0;
    if (r->i >= r->n) return rx_fail(r, EM_ERR_FORMAT, "unfinished escape");
    char e = r->s[r->i++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': *cls = e; return EM_OK;
    case 'n': *cp = '\n'; return EM_OK;
    case 'r': *cp = '\r'; return EM_OK;
    case 't': *cp = '\t'; return EM_OK;
    case 'f': *cp = '\f'; return EM_OK;
    case 'v': *cp = '\v'; return EM_OK;
    case '0': *cp = 0; return EM_OK;
    case 'b': case 'B': return rx_fail(r, EM_ERR_UNSUPPORTED, "word boundaries (\\b, \\B) are not supported");
    case 'c': return rx_fail(r, EM_ERR_UNSUPPORTED, "control escapes (\\cX) are not supported");
    case 'x': case 'u': {
        uint32_t v = 0;
        if (e == 'u' && r->i < r->n && r->s[r->i] == '{') {
            r->i++;
            int k = 0;
            for (; r->i < r->n && r->s[r->i] != '}' && k < 7; k++, r->i++) {
                if (em_hex_digit(r->s[r->i]) < 0) return rx_fail(r, EM_ERR_FORMAT, "bad hex digit");
                v = v * 16 + (uint32_t)em_hex_digit(r->s[r->i]);
            }
            if (!k || r->i >= r->n || r->s[r->i] != '}') return rx_fail(r, EM_ERR_FORMAT, "bad \\u{...} escape");
            r->i++;
        } else {
            int digits = e == 'x' ? 2 : 4;
            for (int k = 0; k < digits; k++, r->i++) {
                if (r->i >= r->n || em_hex_digit(r->s[r->i]) < 0) return rx_fail(r, EM_ERR_FORMAT, "bad hex digit");
                v = v * 16 + (uint32_t)em_hex_digit(r->s[r->i]);
            }
        }
        if (v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
            return rx_fail(r, EM_ERR_UNSUPPORTED, "escapes of surrogates or beyond U+10FFFF are not supported");
        *cp = v;
        return EM_OK;
    }
    default:
        if (e >= '1' && e <= '9') return rx_fail(r, EM_ERR_UNSUPPORTED, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return rx_fail(r, EM_ERR_FORMAT, "unknown escape");
        r->i--;
        {
            int k = utf8_decode(r->s + r->i, r->n - r->i, cp);
            if (k <= 0) return rx_fail(r, EM_ERR_FORMAT, "invalid UTF-8");
            r->i += (size_t)k;
        }
        return EM_OK;
    }
}

/* A JSON-escaped form of a character JSON must escape, as a GBNF literal. */
static void json_escaped(gbuf *b, uint32_t c) {
    char tmp[8];
    if (c == '"') gb_literal(b, "\\\"", 2);
    else if (c == '\\') gb_literal(b, "\\\\", 2);
    else if (c == '\n') gb_literal(b, "\\n", 2);
    else if (c == '\t') gb_literal(b, "\\t", 2);
    else if (c == '\r') gb_literal(b, "\\r", 2);
    else if (c == '\b') gb_literal(b, "\\b", 2);
    else if (c == '\f') gb_literal(b, "\\f", 2);
    else {
        static const char hx[] = "0123456789abcdef";
        memcpy(tmp, "\\u00", 4);
        tmp[4] = hx[(c >> 4) & 15];
        tmp[5] = hx[c & 15];
        gb_literal(b, tmp, 6);
    }
}

static bool json_special(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

/* Emits a normalized set as a GBNF expression (in JSON mode, the characters
 * JSON escapes come out escaped). */
static em_status emit_set(rx *r, cp_set *set) {
    if (!r->json) {
        gb_class(r->out, set);
        return EM_OK;
    }
    cp_set plain = {0};
    uint32_t specials[34];
    int ns = 0;
    bool ok = true;
    for (size_t i = 0; i < set->n && ok; i++)
        for (uint32_t c = set->r[2 * i]; c <= set->r[2 * i + 1]; c++) {
            if (c > '\\') {
                ok = cp_set_add(&plain, c, set->r[2 * i + 1]);
                break;
            }
            if (json_special(c)) specials[ns++] = c;
            else ok = cp_set_add(&plain, c, c);
        }
    if (ok) ok = cp_set_normalize(&plain, false);
    if (!ok) {
        cp_set_free(&plain);
        return em_fail(EM_ERR_NOMEM, "regex: out of memory");
    }
    gb_puts(r->out, "(");
    gb_class(r->out, &plain);
    for (int k = 0; k < ns; k++) {
        gb_puts(r->out, " | ");
        json_escaped(r->out, specials[k]);
    }
    gb_puts(r->out, ")");
    cp_set_free(&plain);
    return EM_OK;
}

static em_status emit_char(rx *r, uint32_t c) {
    if (r->json && json_special(c)) {
        json_escaped(r->out, c);
        return EM_OK;
    }
    char buf[4];
    int k = utf8_encode(c, buf);
    gb_literal(r->out, buf, (size_t)k);
    return EM_OK;
}

static em_status rx_class(rx *r) {
    r->i++; /* [ */
    bool neg = r->i < r->n && r->s[r->i] == '^';
    if (neg) r->i++;
    cp_set set = {0};
    em_status s = EM_OK;
    while (s == EM_OK && r->i < r->n && r->s[r->i] != ']') {
        uint32_t lo = 0, hi;
        char cls = 0;
        if (r->s[r->i] == '\\') {
            r->i++;
            s = rx_escape(r, &lo, &cls);
            if (s == EM_OK && cls) {
                if (!add_named(&set, cls)) s = em_fail(EM_ERR_NOMEM, "regex: out of memory");
                continue;
            }
        } else {
            int k = utf8_decode(r->s + r->i, r->n - r->i, &lo);
            if (k <= 0) s = rx_fail(r, EM_ERR_FORMAT, "invalid UTF-8");
            else r->i += (size_t)k;
        }
        if (s != EM_OK) break;
        hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                s = rx_escape(r, &hi, &cls);
                if (s == EM_OK && cls) s = rx_fail(r, EM_ERR_FORMAT, "a class escape cannot end a range");
            } else {
                int k = utf8_decode(r->s + r->i, r->n - r->i, &hi);
                if (k <= 0) s = rx_fail(r, EM_ERR_FORMAT, "invalid UTF-8");
                else r->i += (size_t)k;
            }
            if (s == EM_OK && hi < lo) s = rx_fail(r, EM_ERR_FORMAT, "character range out of order");
        }
        if (s == EM_OK && !cp_set_add(&set, lo, hi)) s = em_fail(EM_ERR_NOMEM, "regex: out of memory");
    }
    if (s == EM_OK && r->i >= r->n) s = rx_fail(r, EM_ERR_FORMAT, "unterminated character class");
    if (s == EM_OK) {
        r->i++;
        s = cp_set_normalize(&set, neg) ? emit_set(r, &set) : em_fail(EM_ERR_NOMEM, "regex: out of memory");
    }
    cp_set_free(&set);
    return s;
}

static em_status rx_alt(rx *r, bool top);

static em_status rx_atom(rx *r) {
    char c = r->s[r->i];
    if (c == '(') {
        if (++r->depth > GR_MAX_DEPTH) return rx_fail(r, EM_ERR_LIMIT, "groups nested too deeply");
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') r->i += 2;
            else if (r->i + 2 < r->n && r->s[r->i + 1] == '<' && r->s[r->i + 2] != '=' && r->s[r->i + 2] != '!') {
                while (r->i < r->n && r->s[r->i] != '>') r->i++;
                if (r->i >= r->n) return rx_fail(r, EM_ERR_FORMAT, "unterminated group name");
                r->i++;
            } else return rx_fail(r, EM_ERR_UNSUPPORTED, "lookaround assertions are not supported");
        }
        gb_puts(r->out, "(");
        EM_TRY(rx_alt(r, false));
        if (r->i >= r->n || r->s[r->i] != ')') return rx_fail(r, EM_ERR_FORMAT, "missing ')'");
        r->i++;
        r->depth--;
        gb_puts(r->out, ")");
        return EM_OK;
    }
    if (c == '[') return rx_class(r);
    if (c == '.') {
        r->i++;
        cp_set set = {0};
        bool ok = cp_set_add(&set, '\n', '\n') && cp_set_add(&set, '\r', '\r') && cp_set_add(&set, 0x2028, 0x2029) &&
                  cp_set_normalize(&set, true);
        em_status s = ok ? emit_set(r, &set) : em_fail(EM_ERR_NOMEM, "regex: out of memory");
        cp_set_free(&set);
        return s;
    }
    if (c == '\\') {
        r->i++;
        uint32_t cp = 0;
        char cls;
        EM_TRY(rx_escape(r, &cp, &cls));
        if (!cls) return emit_char(r, cp);
        cp_set set = {0};
        em_status s = add_named(&set, cls) && cp_set_normalize(&set, false) ? emit_set(r, &set)
                                                                          : em_fail(EM_ERR_NOMEM, "regex: out of memory");
        cp_set_free(&set);
        return s;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return rx_fail(r, EM_ERR_FORMAT, "nothing to repeat");
    if (c == ')') return rx_fail(r, EM_ERR_FORMAT, "unbalanced ')'");
    uint32_t cp;
    int k = utf8_decode(r->s + r->i, r->n - r->i, &cp);
    if (k <= 0) return rx_fail(r, EM_ERR_FORMAT, "invalid UTF-8");
    r->i += (size_t)k;
    return emit_char(r, cp);
}

static bool rx_int(rx *r, int *v) { return gr_read_count(r->s, r->n, &r->i, v); }

/* A quantifier at r->i, copied into GBNF; *had false when none. */
static em_status rx_quant(rx *r, bool *had) {
    *had = false;
    if (r->i >= r->n) return EM_OK;
    char c = r->s[r->i];
    if (c == '*' || c == '+' || c == '?') {
        r->i++;
        gb_put(r->out, &c, 1);
    } else if (c == '{') {
        size_t save = r->i;
        int m, n = -1;
        r->i++;
        if (!rx_int(r, &m)) {
            r->i = save;
            return rx_fail(r, EM_ERR_UNSUPPORTED, "'{' must start a repetition {m,n} with m, n <= 10000");
        }
        bool comma = r->i < r->n && r->s[r->i] == ',';
        if (comma) {
            r->i++;
            if (r->i < r->n && r->s[r->i] != '}' && !rx_int(r, &n)) return rx_fail(r, EM_ERR_UNSUPPORTED, "bad repetition bound");
        } else n = m;
        if (r->i >= r->n || r->s[r->i] != '}') return rx_fail(r, EM_ERR_FORMAT, "unterminated repetition");
        r->i++;
        if (n >= 0 && n < m) return rx_fail(r, EM_ERR_FORMAT, "repetition {m,n} with n < m");
        if (n < 0) gb_printf(r->out, "{%d,}", m);
        else gb_printf(r->out, "{%d,%d}", m, n);
    } else return EM_OK;
    *had = true;
    if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: same language */
    return EM_OK;
}

static em_status rx_concat(rx *r, bool top) {
    bool first = true;
    gb_puts(r->out, "(\"\"");
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        char c = r->s[r->i];
        if (c == '^') {
            if (!top || !first) return rx_fail(r, EM_ERR_UNSUPPORTED, "'^' is only supported at the start");
            r->i++;
            continue;
        }
        if (c == '$') {
            r->i++;
            if (!top || (r->i < r->n && r->s[r->i] != '|'))
                return rx_fail(r, EM_ERR_UNSUPPORTED, "'$' is only supported at the end");
            continue;
        }
        first = false;
        gb_puts(r->out, " (");
        EM_TRY(rx_atom(r));
        gb_puts(r->out, ")");
        bool had;
        EM_TRY(rx_quant(r, &had));
        if (had && r->i < r->n && strchr("*+?{", r->s[r->i])) return rx_fail(r, EM_ERR_FORMAT, "nothing to repeat");
    }
    gb_puts(r->out, ")");
    return EM_OK;
}

static em_status rx_alt(rx *r, bool top) {
    gb_puts(r->out, "(");
    EM_TRY(rx_concat(r, top));
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        gb_puts(r->out, " | ");
        EM_TRY(rx_concat(r, top));
    }
    gb_puts(r->out, ")");
    return EM_OK;
}

em_status regex_to_gbnf_expr(const char *re, size_t len, bool json_string, gbuf *out) {
    if (len > GR_MAX_TEXT) return em_fail(EM_ERR_LIMIT, "regex: %zu bytes exceeds the limit", len);
    rx r = {re, len, 0, json_string, 0, out};
    EM_TRY(rx_alt(&r, true));
    if (r.i < r.n) return rx_fail(&r, EM_ERR_FORMAT, "unbalanced ')'");
    if (out->oom) return em_fail(EM_ERR_NOMEM, "regex: out of memory");
    return EM_OK;
}

em_status grammar_regex_to_gbnf(const char *re, size_t len, char **gbnf) {
    *gbnf = NULL;
    gbuf b = {0};
    gb_puts(&b, "root ::= ");
    em_status s = regex_to_gbnf_expr(re, len, false, &b);
    gb_puts(&b, "\n");
    if (s == EM_OK && b.oom) s = em_fail(EM_ERR_NOMEM, "regex: out of memory");
    if (s != EM_OK) {
        gb_free(&b);
        return s;
    }
    *gbnf = b.s;
    return EM_OK;
}

em_status grammar_compile_regex(const char *re, size_t len, grammar **out) {
    *out = NULL;
    char *g;
    EM_TRY(grammar_regex_to_gbnf(re, len, &g));
    em_status s = grammar_compile_gbnf(g, strlen(g), "root", out);
    if (s != EM_OK) em_fail_prefix(s, "regex");
    free(g);
    return s;
}
