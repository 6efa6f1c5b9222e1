/* lexer.c — cuts template source into tokens the way jinja2's lexer does
 * under transformers' settings: newlines normalized to "\n", one trailing
 * newline dropped, trim_blocks (a newline right after a block or comment
 * tag is removed) and lstrip_blocks (spaces before a block or comment tag
 * on its own line are removed), "-" strips all whitespace on that side,
 * "+" keeps it. */
#include "chat/jinja/ast.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    const char *s;
    size_t n, pos;
    jtoks *out;
    bool line_starting;
    char balance[256];
    int nbalance;
    /* line cursor: tokens arrive in source order, so positions are found
     * by scanning forward from the previous one */
    size_t cur_at, cur_ls;
    int cur_line;
} lexer;

static void pos_of(lexer *lx, size_t at, int *line, int *col) {
    if (at > lx->n) at = lx->n;
    if (at < lx->cur_at) {
        lx->cur_at = lx->cur_ls = 0;
        lx->cur_line = 1;
    }
    for (size_t i = lx->cur_at; i < at; i++)
        if (lx->s[i] == '\n') {
            lx->cur_line++;
            lx->cur_ls = i + 1;
        }
    lx->cur_at = at;
    *line = lx->cur_line;
    *col = (int)jv_utf8_count(lx->s + lx->cur_ls, at - lx->cur_ls) + 1;
}

static em_status lex_fail(lexer *lx, size_t at, const char *msg) {
    int line, col;
    pos_of(lx, at, &line, &col);
    return em_fail(EM_ERR_FORMAT, "template syntax error at line %d, column %d: %s", line, col, msg);
}

static em_status push(lexer *lx, jtok_kind kind, size_t at, const char *text, size_t len) {
    jtoks *t = lx->out;
    if (!em_grow((void **)&t->v, &t->cap, t->n + 1, sizeof(jtok))) return em_fail(EM_ERR_NOMEM, "template: out of memory");
    jtok *k = &t->v[t->n];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    pos_of(lx, at, &k->line, &k->col);
    if (text) {
        k->text = em_strndup(text, len);
        if (!k->text) return em_fail(EM_ERR_NOMEM, "template: out of memory");
        k->len = len;
    }
    t->n++;
    return EM_OK;
}

/* Length of the whitespace code point at s (Python's \s), 0 if none. */
static size_t space_at(const char *s, size_t n) {
    uint32_t cp;
    int k = utf8_decode(s, n, &cp);
    return k > 0 && jv_is_space(cp) ? (size_t)k : 0;
}

static size_t skip_space(const char *s, size_t n, size_t pos) {
    size_t k;
    while (pos < n && (k = space_at(s + pos, n - pos)) > 0) pos += k;
    return pos;
}

/* Length of text after removing trailing whitespace (Python rstrip). */
static size_t rstrip_len(const char *s, size_t len) {
    while (len > 0) {
        size_t st = len - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        if (!space_at(s + st, len - st)) break;
        len = st;
    }
    return len;
}

/* Emits the text before a tag, applying "-" or lstrip_blocks. */
static em_status emit_text(lexer *lx, size_t start, size_t end, char sign, bool lstrip_ok) {
    const char *t = lx->s + start;
    size_t len = end - start;
    if (sign == '-') {
        len = rstrip_len(t, len);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = 0;
        for (size_t i = len; i > 0; i--)
            if (t[i - 1] == '\n') {
                l_pos = i;
                break;
            }
        if ((l_pos > 0 || lx->line_starting) && l_pos < len && rstrip_len(t + l_pos, len - l_pos) == 0) len = l_pos;
    }
    if (len == 0) return EM_OK;
    return push(lx, JT_DATA, start, t, len);
}

static bool starts(const lexer *lx, size_t at, const char *lit) {
    size_t k = strlen(lit);
    return at + k <= lx->n && memcmp(lx->s + at, lit, k) == 0;
}

/* Matches the end of a block/comment at `at` (after the body):
 * "+X}", "-X}" + whitespace, or "X}" + optional newline. Returns the
 * position after the match, or 0 when there is none. */
static size_t match_end(const lexer *lx, size_t at, char x, bool trim) {
    char close[3] = {x, '}', 0};
    if (at < lx->n && lx->s[at] == '+' && starts(lx, at + 1, close)) return at + 3;
    if (at < lx->n && lx->s[at] == '-' && starts(lx, at + 1, close)) return skip_space(lx->s, lx->n, at + 3);
    if (starts(lx, at, close)) {
        size_t p = at + 2;
        if (trim && p < lx->n && lx->s[p] == '\n') p++;
        return p;
    }
    return 0;
}

static void set_line_starting(lexer *lx, size_t end) { lx->line_starting = end > 0 && lx->s[end - 1] == '\n'; }

static size_t hexval(const char *s, int n, bool *ok) {
    size_t v = 0;
    for (int i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            *ok = false;
            return 0;
        }
        v = v * 16 + (size_t)d;
    }
    return v;
}

/* Decodes a string literal body with Python's unicode-escape rules. */
static em_status lex_string(lexer *lx, size_t at, size_t *end) {
    char q = lx->s[at];
    size_t i = at + 1;
    jbuf b = {0};
    while (i < lx->n && lx->s[i] != q) {
        char c = lx->s[i];
        if (c != '\\') {
            jbuf_putc(&b, c);
            i++;
            continue;
        }
        if (i + 1 >= lx->n) break;
        char e = lx->s[i + 1];
        i += 2;
        uint32_t cp = 0;
        int hexn = 0;
        switch (e) {
        case '\n': continue;
        case '\\': jbuf_putc(&b, '\\'); continue;
        case '\'': jbuf_putc(&b, '\''); continue;
        case '"': jbuf_putc(&b, '"'); continue;
        case 'a': jbuf_putc(&b, '\a'); continue;
        case 'b': jbuf_putc(&b, '\b'); continue;
        case 'f': jbuf_putc(&b, '\f'); continue;
        case 'n': jbuf_putc(&b, '\n'); continue;
        case 'r': jbuf_putc(&b, '\r'); continue;
        case 't': jbuf_putc(&b, '\t'); continue;
        case 'v': jbuf_putc(&b, '\v'); continue;
        case 'x': hexn = 2; break;
        case 'u': hexn = 4; break;
        case 'U': hexn = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < lx->n && lx->s[i] >= '0' && lx->s[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(lx->s[i++] - '0');
                hexn = -1;
                break;
            }
            jbuf_putc(&b, '\\');
            jbuf_putc(&b, e);
            continue;
        }
        if (hexn > 0) {
            bool ok = i + (size_t)hexn <= lx->n;
            if (ok) cp = (uint32_t)hexval(lx->s + i, hexn, &ok);
            if (!ok) {
                jbuf_free(&b);
                return lex_fail(lx, i - 2, "truncated \\x, \\u or \\U escape in string");
            }
            i += (size_t)hexn;
        }
        char enc[4];
        int k = utf8_encode(cp, enc);
        if (k <= 0) {
            jbuf_free(&b);
            return lex_fail(lx, i, "string escape is not a valid character");
        }
        jbuf_put(&b, enc, (size_t)k);
    }
    if (i >= lx->n) {
        jbuf_free(&b);
        return lex_fail(lx, at, "unterminated string");
    }
    if (b.oom) {
        jbuf_free(&b);
        return em_fail(EM_ERR_NOMEM, "template: out of memory");
    }
    em_status st = push(lx, JT_STRING, at, b.p ? b.p : "", b.len);
    jbuf_free(&b);
    *end = i + 1;
    return st;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/* Digits with optional single underscores between them ((\d+_)*\d+). */
static size_t digits(const lexer *lx, size_t p) {
    size_t q = p;
    while (q < lx->n && is_digit(lx->s[q])) {
        q++;
        if (q + 1 < lx->n && lx->s[q] == '_' && is_digit(lx->s[q + 1])) q++;
    }
    return q;
}

static em_status lex_number(lexer *lx, size_t at, size_t *end) {
    size_t p = digits(lx, at), q = p;
    bool isfloat = false;
    if (q < lx->n && lx->s[q] == '.' && q + 1 < lx->n && is_digit(lx->s[q + 1])) {
        q = digits(lx, q + 1);
        isfloat = true;
    }
    if (q < lx->n && (lx->s[q] == 'e' || lx->s[q] == 'E')) {
        size_t r = q + 1;
        if (r < lx->n && (lx->s[r] == '+' || lx->s[r] == '-')) r++;
        if (r < lx->n && is_digit(lx->s[r])) {
            q = digits(lx, r);
            isfloat = true;
        }
    }
    char buf[128];
    size_t k = 0;
    for (size_t i = at; i < (isfloat ? q : p) && k + 1 < sizeof buf; i++)
        if (lx->s[i] != '_') buf[k++] = lx->s[i];
    buf[k] = 0;
    EM_TRY(push(lx, isfloat ? JT_FLOAT : JT_INT, at, NULL, 0));
    jtok *t = &lx->out->v[lx->out->n - 1];
    errno = 0;
    if (isfloat) {
        t->fval = strtod(buf, NULL);
    } else {
        t->ival = strtoll(buf, NULL, 10);
        if (errno == ERANGE) return lex_fail(lx, at, "integer literal too large");
    }
    *end = isfloat ? q : p;
    return EM_OK;
}

static const char *const ops2[] = {"**", "//", "==", "!=", ">=", "<=", NULL};
static const char ops1[] = "+-/*%~[](){}><=.:|,;";

static em_status lex_op(lexer *lx, size_t at, size_t *end) {
    for (int i = 0; ops2[i]; i++)
        if (starts(lx, at, ops2[i])) {
            *end = at + 2;
            return push(lx, JT_OP, at, ops2[i], 2);
        }
    char c = lx->s[at];
    if (!strchr(ops1, c) || c == 0) return lex_fail(lx, at, "unexpected character");
    if (c == '(' || c == '[' || c == '{') {
        if (lx->nbalance >= (int)sizeof lx->balance) return lex_fail(lx, at, "brackets nested too deeply");
        lx->balance[lx->nbalance++] = c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
        if (lx->nbalance == 0) return lex_fail(lx, at, c == ')' ? "unexpected ')'" : c == ']' ? "unexpected ']'" : "unexpected '}'");
        if (lx->balance[--lx->nbalance] != c) return lex_fail(lx, at, "mismatched closing bracket");
    }
    *end = at + 1;
    return push(lx, JT_OP, at, &c, 1);
}

/* Lexes the inside of {% %} or {{ }} up to and including the end tag. */
static em_status lex_tag(lexer *lx, size_t p0, bool block, size_t *end) {
    size_t p = p0;
    lx->nbalance = 0;
    for (;;) {
        p = skip_space(lx->s, lx->n, p);
        if (p >= lx->n) return lex_fail(lx, p, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
        if (lx->nbalance == 0) {
            size_t e = 0;
            if (block) {
                e = match_end(lx, p, '%', true);
            } else if (lx->s[p] == '-' && starts(lx, p + 1, "}}")) {
                e = skip_space(lx->s, lx->n, p + 3);
            } else if (starts(lx, p, "}}")) {
                e = p + 2;
            }
            if (e) {
                EM_TRY(push(lx, block ? JT_BLOCK_END : JT_VAR_END, p, NULL, 0));
                set_line_starting(lx, e);
                *end = e;
                return EM_OK;
            }
        }
        char c = lx->s[p];
        size_t q = p + 1;
        if (c == '\'' || c == '"') {
            EM_TRY(lex_string(lx, p, &q));
        } else if (is_digit(c)) {
            EM_TRY(lex_number(lx, p, &q));
        } else if (is_name_start(c)) {
            q = p;
            while (q < lx->n && is_name_char(lx->s[q])) q++;
            EM_TRY(push(lx, JT_NAME, p, lx->s + p, q - p));
        } else {
            EM_TRY(lex_op(lx, p, &q));
        }
        p = q;
    }
}

/* {% raw %} at `at` (a "{%" with optional sign): returns the end of the
 * opening tag, or 0 when this block is not a raw block. */
static size_t match_raw_begin(const lexer *lx, size_t at) {
    size_t p = at + 2;
    if (p < lx->n && (lx->s[p] == '-' || lx->s[p] == '+')) p++;
    p = skip_space(lx->s, lx->n, p);
    if (!starts(lx, p, "raw")) return 0;
    p = skip_space(lx->s, lx->n, p + 3);
    if (lx->s[p] == '-' && starts(lx, p + 1, "%}")) return skip_space(lx->s, lx->n, p + 3);
    if (starts(lx, p, "%}")) return p + 2;
    return 0;
}

static em_status lex_raw(lexer *lx, size_t begin, size_t *end) {
    for (size_t p = begin; p + 1 < lx->n; p++) {
        if (lx->s[p] != '{' || lx->s[p + 1] != '%') continue;
        size_t q = p + 2;
        char sign = 0;
        if (q < lx->n && (lx->s[q] == '-' || lx->s[q] == '+')) sign = lx->s[q++];
        q = skip_space(lx->s, lx->n, q);
        if (!starts(lx, q, "endraw")) continue;
        q = skip_space(lx->s, lx->n, q + 6);
        size_t e = match_end(lx, q, '%', true);
        if (!e) continue;
        EM_TRY(emit_text(lx, begin, p, sign, true));
        set_line_starting(lx, e);
        *end = e;
        return EM_OK;
    }
    return lex_fail(lx, begin, "missing end of raw directive");
}

static em_status lex_comment(lexer *lx, size_t begin, size_t *end) {
    for (size_t p = begin; p + 1 < lx->n; p++) {
        if (lx->s[p] != '#' || lx->s[p + 1] != '}') continue;
        size_t at = p > begin && (lx->s[p - 1] == '-' || lx->s[p - 1] == '+') ? p - 1 : p;
        size_t e = match_end(lx, at, '#', true);
        set_line_starting(lx, e);
        *end = e;
        return EM_OK;
    }
    return lex_fail(lx, begin, "missing end of comment tag");
}

static em_status lex_all(lexer *lx) {
    size_t pos = 0;
    lx->line_starting = true;
    while (pos < lx->n) {
        size_t t = pos;
        while (t + 1 < lx->n && !(lx->s[t] == '{' && (lx->s[t + 1] == '%' || lx->s[t + 1] == '{' || lx->s[t + 1] == '#'))) t++;
        if (t + 1 >= lx->n) return push(lx, JT_DATA, pos, lx->s + pos, lx->n - pos);
        char kind = lx->s[t + 1];
        char sign = t + 2 < lx->n && (lx->s[t + 2] == '-' || lx->s[t + 2] == '+') ? lx->s[t + 2] : 0;
        size_t body = t + 2 + (sign ? 1 : 0), end = lx->n;
        size_t raw = kind == '%' ? match_raw_begin(lx, t) : 0;
        EM_TRY(emit_text(lx, pos, t, sign, kind != '{'));
        if (raw) {
            set_line_starting(lx, raw);
            EM_TRY(lex_raw(lx, raw, &end));
        } else if (kind == '#') {
            EM_TRY(lex_comment(lx, body, &end));
        } else {
            EM_TRY(push(lx, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, t, NULL, 0));
            EM_TRY(lex_tag(lx, body, kind == '%', &end));
        }
        pos = end;
    }
    return EM_OK;
}

em_status jlex(const char *src, size_t len, jtoks *toks) {
    memset(toks, 0, sizeof *toks);
    if (!utf8_valid(src, len)) return em_fail(EM_ERR_FORMAT, "template: source is not valid UTF-8");
    /* newlines normalized to \n; one trailing newline dropped (jinja2's
     * keep_trailing_newline=False) */
    char *norm = em_malloc(len + 1);
    if (!norm) return em_fail(EM_ERR_NOMEM, "template: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n > 0 && norm[n - 1] == '\n') n--;
    norm[n] = 0;
    lexer lx = {.s = norm, .n = n, .out = toks, .cur_line = 1};
    em_status st = lex_all(&lx);
    if (st == EM_OK) st = push(&lx, JT_EOF, n, NULL, 0);
    free(norm);
    if (st != EM_OK) jtoks_free(toks);
    return st;
}

void jtoks_free(jtoks *toks) {
    for (size_t i = 0; i < toks->n; i++) free(toks->v[i].text);
    free(toks->v);
    memset(toks, 0, sizeof *toks);
}
