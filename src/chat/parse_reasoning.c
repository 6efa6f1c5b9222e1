/* parse_reasoning.c — <think>...</think> at the start of a reply.
 *
 * A reply may open with <think> (after optional whitespace); when the
 * generation prompt already opened it, the parser starts in reasoning
 * instead. Reasoning ends at the first </think>; a <think> later in the
 * content is ordinary text. */
#include "chat/parse_internal.h"

#include "base/utf8.h"

static const char think_open[] = "<think>";
static const char *const think_close[] = {"</think>"};

bool parse_step_start(chat_parser *p, bool final) {
    const char *s = p->in.p;
    size_t n = p->in.len;
    size_t i = parse_skip_ws(s, n, 0);
    if (i == n && !final) return false;
    int r = parse_expect(s, n, &i, think_open);
    if (r == 0 && !final) return false;
    if (r == 1) {
        parse_consume(p, i);
        p->mode = PARSE_MODE_REASONING;
        p->text[1].skip_ws = true;
        return true;
    }
    p->mode = PARSE_MODE_CONTENT;
    return true;
}

bool parse_step_reasoning(chat_parser *p, bool final) {
    const char *s = p->in.p;
    size_t n = p->in.len, safe = n, which = 0;
    if (n == 0) return false;
    size_t at = parse_find_marker(s, n, think_close, 1, &which, &safe);
    if (at < n) {
        parse_emit_text(p, CHAT_EV_REASONING, s, at);
        parse_end_text(p, CHAT_EV_REASONING, true);
        parse_consume(p, at + sizeof "</think>" - 1);
        p->mode = PARSE_MODE_CONTENT;
        p->text[0].skip_ws = true;
        return true;
    }
    size_t emit = final ? n : utf8_complete_prefix(s, safe);
    if (emit == 0) return false;
    parse_emit_text(p, CHAT_EV_REASONING, s, emit);
    parse_consume(p, emit);
    return true;
}
