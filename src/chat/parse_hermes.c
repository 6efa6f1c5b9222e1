/* parse_hermes.c — Hermes-style JSON tool calls (Qwen2.5, Qwen3):
 *   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 * A call is emitted once </tool_call> closes it; anything else after the
 * marker (no JSON object, invalid JSON, no closing tag) leaves the marker
 * as text and parsing resumes right after it. */
#include "chat/parse_internal.h"

#include <string.h>

static const char open_tag[] = "<tool_call>";
static const char close_tag[] = "</tool_call>";

bool parse_json_call(chat_parser *p, const char *s, size_t n, bool require_known, bool emit) {
    if (!pj_minify(s, n, NULL) || pj_class(s, n) != PJ_OBJECT) return false;
    size_t vs, vn;
    if (!pj_member(s, n, "name", &vs, &vn) || pj_class(s + vs, vn) != PJ_STRING) return false;
    pbuf name = {0}, args = {0}, inner = {0};
    bool ok = pj_string_value(s + vs, vn, &name) && parse_name_ok(name.p, name.len) &&
              (!require_known || parse_tool_function(p, name.p));
    if (ok && (pj_member(s, n, "arguments", &vs, &vn) || pj_member(s, n, "parameters", &vs, &vn))) {
        int cls = pj_class(s + vs, vn);
        if (cls == PJ_OBJECT) {
            ok = pj_minify(s + vs, vn, &args);
        } else if (cls == PJ_STRING) { /* arguments sent as a JSON-encoded string */
            ok = pj_string_value(s + vs, vn, &inner) && pj_minify(inner.p, inner.len, NULL) &&
                 pj_class(inner.p, inner.len) == PJ_OBJECT && pj_minify(inner.p, inner.len, &args);
        } else {
            ok = cls == PJ_NULL && pbuf_put(&args, "{}", 2);
        }
    } else if (ok) {
        ok = pbuf_put(&args, "{}", 2);
    }
    if (ok && emit) parse_emit_call(p, name.p, name.len, args.p, args.len);
    pbuf_free(&name);
    pbuf_free(&args);
    pbuf_free(&inner);
    return ok;
}

static parse_result hermes_call(chat_parser *p, const char *s, size_t n, bool final, size_t *consumed) {
    parse_result wait = final ? PARSE_BAD : PARSE_NEED_MORE;
    size_t i = sizeof open_tag - 1, end;
    *consumed = i;
    i = parse_skip_ws(s, n, i);
    if (i == n) return wait;
    int r = pj_object_end(s + i, n - i, &end);
    if (r < 0) return PARSE_BAD;
    if (r == 0) return wait;
    size_t j = parse_skip_ws(s, n, i + end);
    r = parse_expect(s, n, &j, close_tag);
    if (r < 0) return PARSE_BAD;
    if (r == 0) return wait;
    if (!parse_json_call(p, s + i, end, false, true)) return PARSE_BAD;
    *consumed = j;
    return PARSE_OK;
}

static const char *const hermes_markers[] = {open_tag};
static const char *const hermes_closers[] = {close_tag};

const parse_tools parse_tools_hermes = {
    .markers = hermes_markers,
    .n_markers = 1,
    .closers = hermes_closers,
    .n_closers = 1,
    .call = hermes_call,
};
