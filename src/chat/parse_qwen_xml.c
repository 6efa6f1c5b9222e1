/* parse_qwen_xml.c — XML-style tool calls (Qwen3-Coder, Qwen3.5, MiniCPM):
 *   <tool_call>\n<function=NAME>\n<parameter=P>\nvalue\n</parameter>\n</function>\n</tool_call>
 * The <tool_call> wrapper is optional (models sometimes drop it). Values
 * are text; the tool's JSON schema says which are JSON (integer, number,
 * boolean, object, array, null), and those that parse as the declared type
 * are kept as JSON, everything else becomes a JSON string. The single
 * newline the models put around each value is not part of it. */
#include "chat/parse_internal.h"

#include <string.h>

static const char tc_open[] = "<tool_call>";
static const char tc_close[] = "</tool_call>";
static const char fn_open[] = "<function=";
static const char fn_close[] = "</function>";
static const char par_open[] = "<parameter=";
static const char par_close[] = "</parameter>";

/* Reads "NAME>" at s[*i]: 1 done (*i past '>'), 0 need more, -1 not a name. */
static int read_tag_name(const char *s, size_t n, size_t *i, size_t *ns, size_t *nl) {
    for (size_t k = *i; k < n; k++) {
        if (s[k] == '>') {
            if (!parse_name_ok(s + *i, k - *i)) return -1;
            *ns = *i;
            *nl = k - *i;
            *i = k + 1;
            return 1;
        }
        unsigned char c = (unsigned char)s[k];
        if (k - *i >= PARSE_NAME_MAX || c < 0x20 || c == '<' || c == '"' || c == ' ') return -1;
    }
    return 0;
}

static int type_bits(const char *t) {
    if (!t) return 0;
    if (!strcmp(t, "string")) return PJ_STRING;
    if (!strcmp(t, "integer") || !strcmp(t, "number")) return PJ_INTEGER | PJ_NUMBER;
    if (!strcmp(t, "boolean")) return PJ_BOOLEAN;
    if (!strcmp(t, "object")) return PJ_OBJECT;
    if (!strcmp(t, "array")) return PJ_ARRAY;
    if (!strcmp(t, "null")) return PJ_NULL;
    return 0;
}

/* The JSON types a schema allows ("type" as string or list, and the
 * alternatives of anyOf / oneOf). */
static int schema_bits(json_t *schema, int depth) {
    if (!json_is_object(schema) || depth > 4) return 0;
    int bits = 0;
    json_t *t = json_object_get(schema, "type"), *el;
    size_t k;
    if (json_is_string(t)) bits |= type_bits(json_string_value(t));
    json_array_foreach(t, k, el) bits |= type_bits(json_string_value(el));
    json_array_foreach(json_object_get(schema, "anyOf"), k, el) bits |= schema_bits(el, depth + 1);
    json_array_foreach(json_object_get(schema, "oneOf"), k, el) bits |= schema_bits(el, depth + 1);
    return bits;
}

static int param_bits(json_t *fn, const char *name, size_t nl) {
    json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
    return json_is_object(props) ? schema_bits(json_object_getn(props, name, nl), 0) : 0;
}

static void put_value(pbuf *out, int bits, const char *v, size_t vn) {
    if (vn && v[0] == '\n') v++, vn--;
    if (vn && v[vn - 1] == '\n') vn--;
    if (bits & ~PJ_STRING) {
        size_t mark = out->len;
        if (pj_minify(v, vn, out)) {
            if (pj_class(v, vn) & bits) return;
            out->len = mark;
        }
    }
    pbuf_put_json_string(out, v, vn);
}

/* Parameters up to </function>, appended to args as JSON members. */
static parse_result read_params(const char *s, size_t n, size_t *i, json_t *fn, pbuf *args, bool final) {
    parse_result wait = final ? PARSE_BAD : PARSE_NEED_MORE;
    for (bool first = true;; first = false) {
        *i = parse_skip_ws(s, n, *i);
        size_t kc = *i, kp = *i, ps, pl;
        int rc = parse_expect(s, n, &kc, fn_close);
        if (rc == 1) {
            *i = kc;
            return PARSE_OK;
        }
        int rp = parse_expect(s, n, &kp, par_open);
        if (rp < 0) return rc == 0 ? wait : PARSE_BAD;
        if (rp == 0) return wait;
        int r = read_tag_name(s, n, &kp, &ps, &pl);
        if (r <= 0) return r < 0 ? PARSE_BAD : wait;
        const char *end = memmem(s + kp, n - kp, par_close, sizeof par_close - 1);
        if (!end) return wait;
        if (!first) pbuf_putc(args, ',');
        pbuf_put_json_string(args, s + ps, pl);
        pbuf_putc(args, ':');
        put_value(args, param_bits(fn, s + ps, pl), s + kp, (size_t)(end - (s + kp)));
        *i = (size_t)(end - s) + sizeof par_close - 1;
    }
}

static parse_result xml_call(chat_parser *p, const char *s, size_t n, bool final, size_t *consumed) {
    parse_result wait = final ? PARSE_BAD : PARSE_NEED_MORE;
    bool wrapped = s[1] == 't';
    size_t i = wrapped ? sizeof tc_open - 1 : 0, ns, nl;
    *consumed = wrapped ? sizeof tc_open - 1 : sizeof fn_open - 1;
    if (wrapped) i = parse_skip_ws(s, n, i);
    int r = parse_expect(s, n, &i, fn_open);
    if (r <= 0) return r < 0 ? PARSE_BAD : wait;
    r = read_tag_name(s, n, &i, &ns, &nl);
    if (r <= 0) return r < 0 ? PARSE_BAD : wait;

    char name[PARSE_NAME_MAX + 1];
    memcpy(name, s + ns, nl);
    name[nl] = 0;
    pbuf args = {0};
    pbuf_putc(&args, '{');
    parse_result res = read_params(s, n, &i, parse_tool_function(p, name), &args, final);
    if (res == PARSE_OK && wrapped) {
        i = parse_skip_ws(s, n, i);
        r = parse_expect(s, n, &i, tc_close);
        /* A reply that ends right after </function> lost only its wrapper. */
        res = r == 1 || (final && i == n) ? PARSE_OK : r < 0 ? PARSE_BAD : wait;
    }
    if (res == PARSE_OK && pbuf_putc(&args, '}')) {
        parse_emit_call(p, name, nl, args.p, args.len);
        *consumed = i;
    } else if (res == PARSE_OK) {
        res = PARSE_BAD; /* out of memory: keep the text */
    }
    pbuf_free(&args);
    return res;
}

static const char *const xml_markers[] = {tc_open, fn_open};
static const char *const xml_closers[] = {fn_close, tc_close};

const parse_tools parse_tools_qwen_xml = {
    .markers = xml_markers,
    .n_markers = 2,
    .closers = xml_closers,
    .n_closers = 2,
    .call = xml_call,
};
