/* parse_deepseek.c — DeepSeek V3 / R1 tool calls:
 *   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
 *   ```json
 *   {...}
 *   ```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>...<｜tool▁calls▁end｜>
 * and the V3.1 form <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>.
 * Each call is emitted as soon as its <｜tool▁call▁end｜> arrives; the
 * block's closing marker is dropped once a call was emitted. */
#include "chat/parse_internal.h"

#include <string.h>

static const char calls_begin[] = "<｜tool▁calls▁begin｜>";
static const char calls_end[] = "<｜tool▁calls▁end｜>";
static const char call_begin[] = "<｜tool▁call▁begin｜>";
static const char call_end[] = "<｜tool▁call▁end｜>";
static const char sep[] = "<｜tool▁sep｜>";

static bool starts(const char *s, size_t n, const char *m) {
    size_t l = strlen(m);
    return n >= l && memcmp(s, m, l) == 0;
}

/* "```json\n{...}\n```" (the language word is optional); *i lands after
 * the closing fence. Sets the object span. */
static parse_result fenced_object(const char *s, size_t n, size_t *i, size_t *os, size_t *on, parse_result wait) {
    int r = parse_expect(s, n, i, "```");
    if (r <= 0) return r < 0 ? PARSE_BAD : wait;
    while (*i < n && s[*i] >= 'a' && s[*i] <= 'z') (*i)++;
    *i = parse_skip_ws(s, n, *i);
    if (*i == n) return wait;
    r = pj_object_end(s + *i, n - *i, on);
    if (r <= 0) return r < 0 ? PARSE_BAD : wait;
    *os = *i;
    *i = parse_skip_ws(s, n, *i + *on);
    r = parse_expect(s, n, i, "```");
    return r == 1 ? PARSE_OK : r < 0 ? PARSE_BAD : wait;
}

/* One call starting at s[*i] == call_begin; emits it when complete. */
static parse_result one_call(chat_parser *p, const char *s, size_t n, size_t *i, bool final) {
    parse_result wait = final ? PARSE_BAD : PARSE_NEED_MORE;
    *i += sizeof call_begin - 1;
    size_t lim = n - *i < PARSE_NAME_MAX + sizeof sep ? n - *i : PARSE_NAME_MAX + sizeof sep;
    const char *at = memmem(s + *i, lim, sep, sizeof sep - 1);
    if (!at) return lim == PARSE_NAME_MAX + sizeof sep ? PARSE_BAD : wait;
    size_t ts = *i, tl = (size_t)(at - (s + ts)), ns = ts, nl = tl, os, on;
    *i = ts + tl + sizeof sep - 1;
    parse_result r;
    if (tl == 8 && memcmp(s + ts, "function", 8) == 0) { /* V3: type, then NAME\n```json */
        const char *nlp = memchr(s + *i, '\n', n - *i);
        if (!nlp) return n - *i > PARSE_NAME_MAX ? PARSE_BAD : wait;
        ns = *i;
        nl = (size_t)(nlp - (s + ns));
        while (nl && parse_is_ws(s[ns + nl - 1])) nl--;
        *i = (size_t)(nlp - s) + 1;
        r = fenced_object(s, n, i, &os, &on, wait);
    } else { /* V3.1: NAME, then the object */
        *i = parse_skip_ws(s, n, *i);
        int e = *i < n ? pj_object_end(s + *i, n - *i, &on) : 0;
        os = *i;
        r = e == 1 ? PARSE_OK : e < 0 ? PARSE_BAD : wait;
        if (r == PARSE_OK) *i += on;
    }
    if (r != PARSE_OK) return r;
    *i = parse_skip_ws(s, n, *i);
    int e = parse_expect(s, n, i, call_end);
    if (e <= 0) return e < 0 ? PARSE_BAD : wait;
    if (!parse_name_ok(s + ns, nl) || pj_class(s + os, on) != PJ_OBJECT) return PARSE_BAD;
    pbuf args = {0};
    bool ok = pj_minify(s + os, on, &args);
    if (ok) parse_emit_call(p, s + ns, nl, args.p, args.len);
    pbuf_free(&args);
    return ok ? PARSE_OK : PARSE_BAD;
}

static parse_result deepseek_call(chat_parser *p, const char *s, size_t n, bool final, size_t *consumed) {
    size_t i = 0;
    if (starts(s, n, calls_end)) { /* closes a block only after a call */
        *consumed = sizeof calls_end - 1;
        return p->n_calls > 0 ? PARSE_OK : PARSE_BAD;
    }
    if (starts(s, n, calls_begin)) {
        *consumed = sizeof calls_begin - 1;
        i = parse_skip_ws(s, n, *consumed);
        size_t k = i;
        int r = parse_expect(s, n, &k, call_begin);
        if (r <= 0) return r < 0 || final ? PARSE_BAD : PARSE_NEED_MORE;
    } else {
        *consumed = sizeof call_begin - 1;
    }
    parse_result r = one_call(p, s, n, &i, final);
    if (r == PARSE_OK) *consumed = i;
    return r;
}

static const char *const deepseek_markers[] = {calls_begin, call_begin, calls_end};
static const char *const deepseek_closers[] = {call_end};

const parse_tools parse_tools_deepseek = {
    .markers = deepseek_markers,
    .n_markers = 3,
    .closers = deepseek_closers,
    .n_closers = 1,
    .call = deepseek_call,
};
