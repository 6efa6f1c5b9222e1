/* parse_llama3.c — Llama 3.x JSON tool calls:
 *   <|python_tag|>{"name": "f", "parameters": {...}}
 * or a reply that is itself the call object, {"name": .., "parameters": ..}
 * (several may follow each other, separated by ';' or whitespace).
 * A bare object is taken as a call only at the start of the reply, only
 * when the request offered tools, and only when it names one of them; any
 * other JSON reply is ordinary content. Text after <|python_tag|> that is
 * not a JSON call (built-in tool code) stays content. */
#include "chat/parse_internal.h"

static const char python_tag[] = "<|python_tag|>";
static const char *const llama_markers[] = {python_tag};
/* A call object usually ends in "}}" (its parameters close, then it);
 * other endings are found by the growth rule or at the end of the reply. */
static const char *const llama_closers[] = {"}}"};

/* Call objects from s[i]: OK with *end past the last one (and its
 * separators), BAD when the first is not a call, NEED_MORE while the text
 * could still extend the sequence. */
static parse_result scan_calls(chat_parser *p, const char *s, size_t n, size_t i, bool final, bool known,
                               bool emit, size_t *end) {
    int count = 0;
    for (;;) {
        size_t oe = 0;
        i = parse_skip_ws(s, n, i);
        int r = i < n ? pj_object_end(s + i, n - i, &oe) : 0;
        if (r == 0 && !final) return PARSE_NEED_MORE;
        if (r <= 0 || !parse_json_call(p, s + i, oe, known, emit)) return count ? PARSE_OK : PARSE_BAD;
        count++;
        i += oe;
        *end = i;
        size_t j = i;
        while (j < n && (parse_is_ws(s[j]) || s[j] == ';')) j++;
        if (j == n && !final) return PARSE_NEED_MORE;
        if (j == n || s[j] != '{') {
            *end = j;
            return PARSE_OK;
        }
        i = j;
    }
}

static parse_result llama_call(chat_parser *p, const char *s, size_t n, bool final, size_t *consumed) {
    size_t start = sizeof python_tag - 1, end = 0;
    *consumed = start;
    parse_result r = scan_calls(p, s, n, start, final, false, false, &end);
    if (r != PARSE_OK) return r;
    scan_calls(p, s, n, start, final, false, true, &end);
    *consumed = end;
    return PARSE_OK;
}

bool parse_llama3_bare_step(chat_parser *p, bool final, bool *progress) {
    const char *s = p->in.p;
    size_t n = p->in.len, i = parse_skip_ws(s, n, 0), end = 0;
    *progress = false;
    if (i == n && !final) return true;
    if (i == n || s[i] != '{') {
        p->bare_json = false;
        return false;
    }
    size_t view = n < PARSE_CALL_MAX ? n : PARSE_CALL_MAX;
    bool vfinal = final || n >= PARSE_CALL_MAX;
    if (!parse_should_run(p, s, view, vfinal, llama_closers, 1)) return true;
    parse_result r = scan_calls(p, s, view, i, vfinal, true, false, &end);
    if (r == PARSE_NEED_MORE) {
        parse_pending_wait(p, view);
        return true;
    }
    parse_pending_reset(p);
    p->bare_json = false;
    if (r == PARSE_BAD) return false;
    scan_calls(p, s, view, i, vfinal, true, true, &end);
    parse_end_text(p, CHAT_EV_CONTENT, true);
    parse_consume(p, end);
    p->text[0].skip_ws = true;
    *progress = true;
    return true;
}

const parse_tools parse_tools_llama3 = {
    .markers = llama_markers,
    .n_markers = 1,
    .closers = llama_closers,
    .n_closers = 1,
    .call = llama_call,
};
