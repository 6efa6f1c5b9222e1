/* parse_stream.c — the parser's life cycle and the content-mode step.
 *
 * Content is emitted up to the first tool-call marker; text that could
 * still become a marker (or the rest of a cut UTF-8 character) stays in
 * the buffer. A marker at the front hands the buffer to the format's call
 * handler until it answers OK (calls emitted) or BAD (text is content). */
#include "chat/parse_internal.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <string.h>

void parse_consume(chat_parser *p, size_t n) {
    if (n >= p->in.len) {
        p->in.len = 0;
    } else {
        memmove(p->in.p, p->in.p + n, p->in.len - n);
        p->in.len -= n;
    }
    if (p->in.p) p->in.p[p->in.len] = 0;
}

void parse_pending_reset(chat_parser *p) {
    p->pending_ran = false;
    p->pending_seen = 0;
    p->pending_scanned = 0;
}

void parse_pending_wait(chat_parser *p, size_t view) {
    p->pending_ran = true;
    p->pending_seen = view;
    p->pending_scanned = view;
}

bool parse_should_run(chat_parser *p, const char *s, size_t view, bool final,
                      const char *const *closers, size_t n_closers) {
    if (final || !p->pending_ran) return true;
    size_t seen = p->pending_seen, scanned = p->pending_scanned;
    if (view <= scanned) return false;
    p->pending_scanned = view;
    if (view - seen > seen / 4) return true;
    for (size_t k = 0; k < n_closers; k++) {
        size_t cl = strlen(closers[k]);
        size_t from = scanned >= cl ? scanned - cl + 1 : 0;
        if (memmem(s + from, view - from, closers[k], cl)) return true;
    }
    return false;
}

static bool run_call(chat_parser *p, bool final) {
    const parse_tools *tf = p->tf;
    size_t n = p->in.len;
    size_t view = n < PARSE_CALL_MAX ? n : PARSE_CALL_MAX;
    bool vfinal = final || n >= PARSE_CALL_MAX;
    if (!parse_should_run(p, p->in.p, view, vfinal, tf->closers, tf->n_closers)) return false;
    size_t consumed = 0;
    parse_result r = tf->call(p, p->in.p, view, vfinal, &consumed);
    if (r == PARSE_NEED_MORE && !vfinal) {
        parse_pending_wait(p, view);
        return false;
    }
    parse_pending_reset(p);
    if (consumed > view) consumed = view;
    if (r == PARSE_OK && consumed > 0) {
        parse_end_text(p, CHAT_EV_CONTENT, true);
        parse_consume(p, consumed);
        p->text[0].skip_ws = true;
        return true;
    }
    /* BAD: the first `consumed` bytes are text. A handler that could not
     * decide at the end leaves the whole view as text. */
    if (r != PARSE_BAD || consumed == 0) consumed = view;
    parse_emit_text(p, CHAT_EV_CONTENT, p->in.p, consumed);
    parse_consume(p, consumed);
    return true;
}

static bool step_content(chat_parser *p, bool final) {
    if (p->in.len == 0) return false;
    if (p->bare_json) {
        bool progress = false;
        if (parse_llama3_bare_step(p, final, &progress)) return progress;
    }
    if (p->pending_ran) return run_call(p, final); /* the marker is still at the front */
    const char *s = p->in.p;
    size_t n = p->in.len, at = n, safe = n, which = 0;
    if (p->tf) at = parse_find_marker(s, n, p->tf->markers, p->tf->n_markers, &which, &safe);
    if (at == 0) return run_call(p, final);
    size_t emit = at < n || final ? at : utf8_complete_prefix(s, safe);
    if (emit == 0) return false;
    parse_emit_text(p, CHAT_EV_CONTENT, s, emit);
    parse_consume(p, emit);
    return true;
}

static bool step(chat_parser *p, bool final) {
    switch (p->mode) {
    case PARSE_MODE_START: return parse_step_start(p, final);
    case PARSE_MODE_REASONING: return parse_step_reasoning(p, final);
    case PARSE_MODE_CONTENT: return step_content(p, final);
    }
    return false;
}

static void run(chat_parser *p, bool final) {
    while (step(p, final)) {
    }
}

chat_parser *chat_parser_new(chat_format fmt, json_t *tools, chat_event_fn fn, void *user) {
    if (!fn) return NULL;
    chat_parser *p = em_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fmt = fmt;
    p->tools = tools ? json_incref(tools) : NULL;
    p->fn = fn;
    p->user = user;
    switch (fmt.tools) {
    case CHAT_TOOLS_HERMES: p->tf = &parse_tools_hermes; break;
    case CHAT_TOOLS_QWEN_XML: p->tf = &parse_tools_qwen_xml; break;
    case CHAT_TOOLS_LLAMA3: p->tf = &parse_tools_llama3; break;
    case CHAT_TOOLS_DEEPSEEK: p->tf = &parse_tools_deepseek; break;
    case CHAT_TOOLS_NONE: p->tf = NULL; break;
    }
    /* A bare JSON reply is a call only when the request offered tools;
     * otherwise it is the answer itself and streams as content. */
    p->bare_json = fmt.tools == CHAT_TOOLS_LLAMA3 && json_array_size(tools) > 0;
    if (!fmt.reasoning) {
        p->mode = PARSE_MODE_CONTENT;
    } else if (fmt.think_open_in_prompt) {
        p->mode = PARSE_MODE_REASONING;
        p->text[1].skip_ws = true;
    } else {
        p->mode = PARSE_MODE_START;
    }
    parse_seed_ids(p);
    return p;
}

void chat_parser_free(chat_parser *p) {
    if (!p) return;
    pbuf_free(&p->in);
    pbuf_free(&p->scratch);
    pbuf_free(&p->text[0].ws);
    pbuf_free(&p->text[1].ws);
    json_decref(p->tools);
    free(p);
}

/* Out of memory: what is buffered and all later text go out unparsed, as
 * content, rather than being lost. */
static void go_broken(chat_parser *p, const char *text, size_t len) {
    p->broken = true;
    chat_event_kind kind = p->mode == PARSE_MODE_REASONING ? CHAT_EV_REASONING : CHAT_EV_CONTENT;
    parse_end_text(p, kind, false);
    chat_event ev = {.kind = CHAT_EV_CONTENT, .text = p->in.p, .len = p->in.len};
    if (ev.len) p->fn(p->user, &ev);
    p->in.len = 0;
    ev.text = text;
    ev.len = len;
    if (len) p->fn(p->user, &ev);
}

void chat_parser_feed(chat_parser *p, const char *text, size_t len) {
    if (!p || len == 0) return;
    if (p->broken || !pbuf_put(&p->in, text, len)) {
        go_broken(p, text, len);
        return;
    }
    run(p, false);
}

void chat_parser_finish(chat_parser *p) {
    if (!p || p->broken) return;
    run(p, true);
    if (p->in.len) { /* every step settles at the end; keep text if one did not */
        parse_emit_text(p, CHAT_EV_CONTENT, p->in.p, p->in.len);
        p->in.len = 0;
    }
    parse_end_text(p, CHAT_EV_REASONING, false);
    parse_end_text(p, CHAT_EV_CONTENT, false);
}
