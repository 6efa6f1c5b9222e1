/* parse_json.c — the JSON the output parsers need: validating model-written
 * arguments and re-emitting them compactly with numbers and escapes kept
 * exactly as written (a round trip through doubles would turn 0.1 into
 * 0.10000000000000001, and big integers would not survive at all). */
#include "chat/parse_internal.h"

#include "base/utf8.h"

#include <string.h>

#define PJ_DEPTH_MAX 64

typedef struct pj {
    const char *s;
    size_t n, i;
    pbuf *out;
    int depth;
} pj;

static void pj_ws(pj *j) { j->i = parse_skip_ws(j->s, j->n, j->i); }

static bool pj_put(pj *j, size_t from) { return !j->out || pbuf_put(j->out, j->s + from, j->i - from); }

static bool pj_is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool pj_string(pj *j) {
    size_t from = j->i;
    if (j->i >= j->n || j->s[j->i] != '"') return false;
    j->i++;
    while (j->i < j->n) {
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') {
            j->i++;
            return pj_put(j, from);
        }
        if (c < 0x20) return false;
        if (c == '\\') {
            if (j->i + 1 >= j->n) return false;
            char e = j->s[j->i + 1];
            if (e == 'u') {
                if (j->n - j->i < 6) return false;
                for (int k = 2; k < 6; k++)
                    if (!pj_is_hex(j->s[j->i + (size_t)k])) return false;
                j->i += 6;
            } else if (strchr("\"\\/bfnrt", e) && e) {
                j->i += 2;
            } else {
                return false;
            }
        } else if (c >= 0x80) {
            uint32_t cp;
            int l = utf8_decode(j->s + j->i, j->n - j->i, &cp);
            if (!l) return false;
            j->i += (size_t)l;
        } else {
            j->i++;
        }
    }
    return false;
}

static bool pj_digits(pj *j) {
    size_t from = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > from;
}

static bool pj_number(pj *j) {
    size_t from = j->i;
    if (j->i < j->n && j->s[j->i] == '-') j->i++;
    if (j->i < j->n && j->s[j->i] == '0') {
        j->i++;
    } else if (!pj_digits(j)) {
        return false;
    }
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        if (!pj_digits(j)) return false;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        if (!pj_digits(j)) return false;
    }
    return pj_put(j, from);
}

static bool pj_word(pj *j, const char *w) {
    size_t l = strlen(w), from = j->i;
    if (j->n - j->i < l || memcmp(j->s + j->i, w, l) != 0) return false;
    j->i += l;
    return pj_put(j, from);
}

static bool pj_value(pj *j);

static bool pj_punct(pj *j, char c) {
    if (j->i >= j->n || j->s[j->i] != c) return false;
    j->i++;
    return !j->out || pbuf_putc(j->out, c);
}

/* Object or array: open, members separated by ',', close. */
static bool pj_container(pj *j, char open, char close) {
    if (++j->depth > PJ_DEPTH_MAX) return false;
    if (!pj_punct(j, open)) return false;
    pj_ws(j);
    if (j->i < j->n && j->s[j->i] == close) return pj_punct(j, close) && (j->depth--, true);
    for (;;) {
        if (open == '{') {
            if (!pj_string(j)) return false;
            pj_ws(j);
            if (!pj_punct(j, ':')) return false;
            pj_ws(j);
        }
        if (!pj_value(j)) return false;
        pj_ws(j);
        if (j->i < j->n && j->s[j->i] == ',') {
            if (!pj_punct(j, ',')) return false;
            pj_ws(j);
            continue;
        }
        if (!pj_punct(j, close)) return false;
        j->depth--;
        return true;
    }
}

static bool pj_value(pj *j) {
    if (j->i >= j->n) return false;
    switch (j->s[j->i]) {
    case '{': return pj_container(j, '{', '}');
    case '[': return pj_container(j, '[', ']');
    case '"': return pj_string(j);
    case 't': return pj_word(j, "true");
    case 'f': return pj_word(j, "false");
    case 'n': return pj_word(j, "null");
    default: return pj_number(j);
    }
}

bool pj_minify(const char *s, size_t n, pbuf *out) {
    pj j = {.s = s, .n = n, .out = out};
    size_t mark = out ? out->len : 0;
    pj_ws(&j);
    bool ok = pj_value(&j);
    pj_ws(&j);
    if (ok && j.i == n && !(out && out->oom)) return true;
    if (out) {
        out->len = mark;
        out->oom = false;
    }
    return false;
}

int pj_object_end(const char *s, size_t n, size_t *end) {
    if (n == 0 || s[0] != '{') return -1;
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > PJ_DEPTH_MAX) return -1;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) {
                *end = i + 1;
                return 1;
            }
        }
    }
    return 0;
}

bool pj_member(const char *s, size_t n, const char *key, size_t *vs, size_t *vn) {
    pj j = {.s = s, .n = n};
    size_t kl = strlen(key);
    pj_ws(&j);
    if (!pj_punct(&j, '{')) return false;
    for (;;) {
        pj_ws(&j);
        size_t ks = j.i;
        if (!pj_string(&j)) return false;
        bool match = j.i - ks == kl + 2 && memcmp(s + ks + 1, key, kl) == 0;
        pj_ws(&j);
        if (!pj_punct(&j, ':')) return false;
        pj_ws(&j);
        size_t from = j.i;
        if (!pj_value(&j)) return false;
        if (match) {
            *vs = from;
            *vn = j.i - from;
            return true;
        }
        pj_ws(&j);
        if (!pj_punct(&j, ',')) return false;
    }
}

bool pj_string_value(const char *s, size_t n, pbuf *out) {
    json_error_t err;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, &err);
    bool ok = json_is_string(v);
    if (ok) {
        const char *str = json_string_value(v);
        size_t len = json_string_length(v);
        ok = memchr(str, 0, len) == NULL && pbuf_put(out, str, len);
    }
    json_decref(v);
    return ok;
}

int pj_class(const char *s, size_t n) {
    size_t i = parse_skip_ws(s, n, 0);
    if (i == n) return 0;
    switch (s[i]) {
    case '"': return PJ_STRING;
    case '{': return PJ_OBJECT;
    case '[': return PJ_ARRAY;
    case 't':
    case 'f': return PJ_BOOLEAN;
    case 'n': return PJ_NULL;
    default: break;
    }
    for (; i < n; i++)
        if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') return PJ_NUMBER;
    return PJ_INTEGER | PJ_NUMBER;
}

bool pbuf_put_json_string(pbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    pbuf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            uint32_t cp;
            int l = utf8_decode(s + i, n - i, &cp);
            if (l) pbuf_put(b, s + i, (size_t)l);
            else pbuf_put(b, "\xEF\xBF\xBD", 3);
            i += l ? (size_t)l : 1;
            continue;
        }
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            pbuf_put(b, e, 2);
        } else if (c == '\n') {
            pbuf_put(b, "\\n", 2);
        } else if (c == '\t') {
            pbuf_put(b, "\\t", 2);
        } else if (c == '\r') {
            pbuf_put(b, "\\r", 2);
        } else if (c < 0x20 || c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            pbuf_put(b, e, 6);
        } else {
            pbuf_putc(b, (char)c);
        }
        i++;
    }
    return pbuf_putc(b, '"');
}

bool parse_name_ok(const char *s, size_t n) {
    if (n == 0 || n > PARSE_NAME_MAX || !utf8_valid(s, n)) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == '"' || c == '<' || c == '>' || c == ' ') return false;
    }
    return true;
}
