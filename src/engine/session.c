/* session.c — the generation driver (see session.h).
 *
 * Per generated token: record its logprobs, detokenize it incrementally,
 * pass the new text through the stop-string matcher, then through the chat
 * parser, which calls back with reasoning / content / tool-call pieces that
 * become events. Logprob records wait in `pending` until the text they
 * produced is released as an event, so a token withheld by a stop string is
 * never reported. */
#include "engine/session.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"
#include "base/timer.h"
#include "engine/engine.h"
#include "engine/stop_strings.h"
#include "engine/structured.h"

#include <stdlib.h>
#include <string.h>

static em_status prompt_build(em_model *m, const em_request *req, em_prompt *out) {
    memset(out, 0, sizeof *out);
    const tokenizer *tk = em_model_tokenizer(m);
    if (!tk) return em_fail(EM_ERR_INVALID, "model %s has no tokenizer.json", em_model_name(m));
    em_status s = EM_OK;
    if (req->chat) {
        const chat_template *tpl = em_model_chat_template(m);
        if (!tpl) return em_fail(EM_ERR_INVALID, "model %s has no chat template", em_model_name(m));
        json_t *vars = NULL;
        EM_TRY(em_request_template_vars(req, &vars));
        size_t len = 0;
        /* EMBER_TEMPLATE_NOW pins strftime_now: the request's override, or
         * the model's snapshot (0: the clock). */
        const em_config *cfg = req->config ? req->config : em_model_config(m);
        s = chat_render_at(tpl, vars, (time_t)em_config_int(cfg, EMC_TEMPLATE_NOW), &out->text, &len);
        if (s == EM_OK) {
            out->format = chat_detect_format(tpl, em_model_type(m), vars);
            /* Tool calls are parsed only when the client offered tools. */
            if (!req->tools || !json_array_size(req->tools) || req->tool_choice == EM_TOOL_CHOICE_NONE)
                out->format.tools = CHAT_TOOLS_NONE;
            out->parse = true;
            /* The template writes BOS itself. */
            s = tok_encode(tk, out->text, len, false, &out->ids, &out->n_ids);
        }
        json_decref(vars);
    } else if (req->prompt_ids) {
        int32_t vocab = tok_vocab_size(tk), nv = em_model_vocab_size(m);
        if (nv > vocab) vocab = nv;
        for (size_t i = 0; i < req->n_prompt_ids; i++)
            if (req->prompt_ids[i] < 0 || req->prompt_ids[i] >= vocab) {
                return em_fail(EM_ERR_INVALID, "prompt token %zu: id %d is outside the vocabulary (%d)", i,
                               (int)req->prompt_ids[i], (int)vocab);
            }
        out->ids = em_mallocn(req->n_prompt_ids ? req->n_prompt_ids : 1, sizeof *out->ids);
        if (!out->ids) return em_fail(EM_ERR_NOMEM, "prompt: out of memory");
        memcpy(out->ids, req->prompt_ids, req->n_prompt_ids * sizeof *out->ids);
        out->n_ids = req->n_prompt_ids;
        s = tok_decode(tk, out->ids, out->n_ids, false, &out->text);
    } else {
        const char *text = req->prompt ? req->prompt : "";
        out->text = em_strdup(text);
        s = out->text ? tok_encode(tk, text, strlen(text), true, &out->ids, &out->n_ids)
                      : em_fail(EM_ERR_NOMEM, "prompt: out of memory");
    }
    if (s == EM_OK && out->n_ids == 0) s = em_fail(EM_ERR_INVALID, "the prompt is empty");
    if (s == EM_OK) {
        size_t ctx = (size_t)em_model_context_size(m);
        if (req->max_tokens > 0) {
            if (out->n_ids + (size_t)req->max_tokens > ctx)
                s = em_fail(EM_ERR_LIMIT,
                            "this model's maximum context length is %zu tokens; the prompt has %zu tokens "
                            "and max_tokens asks for %d more",
                            ctx, out->n_ids, req->max_tokens);
            out->max_tokens = req->max_tokens;
        } else if (out->n_ids >= ctx) {
            s = em_fail(EM_ERR_LIMIT, "this model's maximum context length is %zu tokens; the prompt has %zu tokens",
                        ctx, out->n_ids);
        } else {
            out->max_tokens = (int)(ctx - out->n_ids);
        }
    }
    if (s == EM_OK) s = structured_compile(req, out, &out->grammar);
    if (s != EM_OK) em_prompt_free(out);
    return s;
}

em_status em_prompt_build(em_model *m, const em_request *req, em_prompt *out) {
    double t0 = em_now();
    em_status st = prompt_build(m, req, out);
    if (st == EM_OK)
        EM_LOGD("prompt: %zu tokens built in %.2f ms (%zu bytes of text)", out->n_ids, (em_now() - t0) * 1e3,
                out->text ? strlen(out->text) : (size_t)0);
    return st;
}

void em_prompt_free(em_prompt *p) {
    if (!p) return;
    grammar_free(p->grammar);
    free(p->ids);
    free(p->text);
    memset(p, 0, sizeof *p);
}

char *em_token_text(const em_model *m, int32_t id) {
    const tokenizer *tk = em_model_tokenizer(m);
    char *text = NULL;
    if (!tk || tok_decode(tk, &id, 1, false, &text) != EM_OK) return NULL;
    return text;
}

/* ---- one choice ------------------------------------------------------- */

typedef struct session {
    const em_request *req;
    const em_session_opts *opts;
    tok_stream *detok;
    stop_matcher stops;
    chat_parser *parser;
    em_token_logprob *pending; /* logprob records not yet attached to an event */
    size_t n_pending, cap_pending;
    size_t unreleased;         /* tokens generated since the last text event */
    size_t n_tokens, reasoning_tokens;
    int n_tool_calls;          /* tool calls started */
    bool stop_matched, consumer_stopped;
    em_status error;           /* a failure inside the token callback */
    double t_start, t_first, t_last;
    float *itl;
    size_t n_itl, cap_itl;
} session;

static void emit(session *s, em_event *ev) {
    ev->choice = s->opts->choice;
    if (s->opts->on_event(s->opts->user, ev)) s->consumer_stopped = true;
}

/* Emits a text-bearing event with the pending logprobs attached. */
static void emit_text(session *s, em_event_kind kind, const char *text, size_t len, int tool_index) {
    em_event ev = {.kind = kind, .text = text, .len = len, .tool_index = tool_index};
    if (kind == EM_EVENT_REASONING) s->reasoning_tokens += s->unreleased;
    s->unreleased = 0;
    ev.logprobs = s->pending;
    ev.n_logprobs = s->n_pending;
    emit(s, &ev);
    s->n_pending = 0;
}

static void on_chat_event(void *user, const chat_event *ce) {
    session *s = user;
    /* Without parallel tool calls only the first call is kept. */
    bool dropped = !s->req->parallel_tool_calls && ce->index > 0;
    switch (ce->kind) {
    case CHAT_EV_CONTENT: emit_text(s, EM_EVENT_CONTENT, ce->text, ce->len, 0); break;
    case CHAT_EV_REASONING: emit_text(s, EM_EVENT_REASONING, ce->text, ce->len, 0); break;
    case CHAT_EV_TOOL_ARGS:
        if (!dropped) emit_text(s, EM_EVENT_TOOL_ARGS, ce->text, ce->len, ce->index);
        break;
    case CHAT_EV_TOOL_START:
        if (!dropped) {
            s->n_tool_calls++;
            em_event ev = {.kind = EM_EVENT_TOOL_START, .tool_index = ce->index, .tool_id = ce->id,
                           .tool_name = ce->name};
            emit(s, &ev);
        }
        break;
    case CHAT_EV_TOOL_END:
        if (!dropped) {
            em_event ev = {.kind = EM_EVENT_TOOL_END, .tool_index = ce->index};
            emit(s, &ev);
        }
        break;
    }
}

/* Released text goes to the parser (chat) or straight out (raw prompts). */
static void deliver(session *s, const em_prompt *p, const char *text, size_t len) {
    if (!len) return;
    if (s->parser) chat_parser_feed(s->parser, text, len);
    else emit_text(s, EM_EVENT_CONTENT, text, len, 0);
}

typedef struct token_ctx {
    session *s;
    const em_prompt *p;
    grammar_matcher *gm; /* constrained decoding, or NULL */
} token_ctx;

/* The grammar mask as the logit processor; a failure stops the generation
 * at the next token callback and becomes the session's error. */
static void on_logits(void *user, float *logits, int n_vocab, const int32_t *history, size_t n_history) {
    token_ctx *tc = user;
    if (tc->s->error != EM_OK) return;
    em_status st = grammar_matcher_process(tc->gm, logits, n_vocab, history, n_history);
    if (st != EM_OK) tc->s->error = st;
}

static bool push_logprob(session *s, const em_token_info *info) {
    if (!em_grow((void **)&s->pending, &s->cap_pending, s->n_pending + 1, sizeof *s->pending)) return false;
    em_token_logprob *r = &s->pending[s->n_pending++];
    memset(r, 0, sizeof *r);
    r->token = info->token;
    r->logprob = info->logprob;
    int top = s->req->top_logprobs < info->n_top ? s->req->top_logprobs : info->n_top;
    r->n_top = top < 0 ? 0 : top;
    for (int i = 0; i < r->n_top; i++) {
        r->top_ids[i] = info->top_ids[i];
        r->top_logprobs[i] = info->top_logprobs[i];
    }
    return true;
}

static void note_time(session *s) {
    double now = em_now();
    if (!s->n_tokens) s->t_first = now;
    else if (em_grow((void **)&s->itl, &s->cap_itl, s->n_itl + 1, sizeof *s->itl))
        s->itl[s->n_itl++] = (float)(now - s->t_last);
    s->t_last = now;
}

static int on_token(void *user, const em_token_info *info) {
    token_ctx *tc = user;
    session *s = tc->s;
    if (s->consumer_stopped || s->error != EM_OK) return 1;
    if (info->token < 0) return 0; /* engine-side text flush: the session decodes itself */
    note_time(s);
    s->n_tokens++;
    s->unreleased++;
    if (s->req->logprobs && !push_logprob(s, info)) {
        s->error = em_fail(EM_ERR_NOMEM, "session: out of memory recording logprobs");
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    em_status st = tok_stream_feed(s->detok, info->token, &text, &len);
    const char *out = "";
    size_t out_len = 0;
    bool matched = false;
    if (st == EM_OK) st = stop_matcher_feed(&s->stops, text ? text : "", len, &out, &out_len, &matched);
    free(text);
    if (st != EM_OK) {
        s->error = st;
        return 1;
    }
    deliver(s, tc->p, out, out_len);
    if (matched) s->stop_matched = true;
    return s->stop_matched || s->consumer_stopped;
}

/* Releases held text and closes the parser at the end of the reply. */
static em_status drain(session *s, const em_prompt *p) {
    const char *out;
    size_t out_len;
    bool matched = false;
    if (!s->stop_matched) {
        char *text = NULL;
        size_t len = 0;
        EM_TRY(tok_stream_flush(s->detok, &text, &len));
        em_status st = stop_matcher_feed(&s->stops, text ? text : "", len, &out, &out_len, &matched);
        free(text);
        EM_TRY(st);
        deliver(s, p, out, out_len);
        if (matched) s->stop_matched = true;
    }
    EM_TRY(stop_matcher_flush(&s->stops, &out, &out_len));
    deliver(s, p, out, out_len);
    if (s->parser) chat_parser_finish(s->parser);
    return EM_OK;
}

static em_finish_reason finish_reason(const session *s, em_finish f, const volatile int *cancel) {
    if (s->stop_matched) return s->n_tool_calls ? EM_REASON_TOOL_CALLS : EM_REASON_STOP;
    if (s->consumer_stopped || f == EM_FINISH_CANCELLED || (cancel && *cancel)) return EM_REASON_CANCELLED;
    if (f == EM_FINISH_LENGTH) return EM_REASON_LENGTH;
    return s->n_tool_calls ? EM_REASON_TOOL_CALLS : EM_REASON_STOP;
}

static void session_free(session *s) {
    tok_stream_free(s->detok);
    stop_matcher_free(&s->stops);
    chat_parser_free(s->parser);
    free(s->pending);
    free(s->itl);
}

static em_status fail_event(session *s, em_status st) {
    em_event ev = {.kind = EM_EVENT_ERROR, .status = st, .text = em_last_error()};
    ev.len = strlen(ev.text);
    emit(s, &ev);
    return st;
}

em_status em_session_run(em_model *m, const em_request *req, const em_prompt *p, const em_session_opts *opts) {
    session s = {.req = req, .opts = opts};
    s.t_start = opts->t_start > 0 ? opts->t_start : em_now();
    stop_matcher_init(&s.stops, (const char *const *)req->stop, req->n_stop);
    s.detok = tok_stream_new(em_model_tokenizer(m), true);
    if (!s.detok) {
        session_free(&s);
        return fail_event(&s, em_fail(EM_ERR_NOMEM, "session: cannot create the detokenizer"));
    }
    if (p->parse) {
        json_t *tools = req->tool_choice == EM_TOOL_CHOICE_NONE ? NULL : req->tools;
        s.parser = chat_parser_new(p->format, tools, on_chat_event, &s);
        if (!s.parser) {
            session_free(&s);
            return fail_event(&s, em_fail(EM_ERR_NOMEM, "session: cannot create the output parser"));
        }
    }
    em_generate_params gp = {
        .prompt = p->ids,
        .n_prompt = p->n_ids,
        .max_tokens = p->max_tokens,
        .sampling = em_request_sampling(req, em_sampling_defaults(m)),
        .top_logprobs = req->logprobs ? req->top_logprobs : 0,
        .no_logprob = !req->logprobs,
        .bias_ids = req->bias_ids,
        .bias_values = req->bias_values,
        .n_bias = req->n_bias,
        .ignore_eos = req->ignore_eos,
        .cancel = opts->cancel,
        .precision = em_request_precision(req),
    };
    /* n > 1 with a seed: each choice differs, and each is reproducible. */
    if (gp.sampling.has_seed) gp.sampling.seed += (uint64_t)opts->choice;
    token_ctx tc = {&s, p, NULL};
    if (p->grammar) {
        const grammar_vocab *gv;
        em_status gs = structured_vocab(m, &gv);
        if (gs == EM_OK) gs = grammar_matcher_new(p->grammar, gv, &tc.gm);
        if (gs != EM_OK) {
            session_free(&s);
            return fail_event(&s, gs);
        }
        gp.on_logits = on_logits;
    }
    gp.on_token = on_token;
    gp.user = &tc;
    gp.skip_text = 1; /* the session detokenizes itself */
    em_generate_result res = {0};
    em_status st = (opts->cancel && *opts->cancel) ? EM_OK : em_generate(m, &gp, &res);
    grammar_matcher_free(tc.gm);
    if (opts->cancel && *opts->cancel) res.finish = EM_FINISH_CANCELLED;
    if (st == EM_ERR_CANCELLED) {
        st = EM_OK;
        res.finish = EM_FINISH_CANCELLED;
    }
    if (st == EM_OK && s.error != EM_OK) st = s.error;
    if (st == EM_OK && res.finish != EM_FINISH_CANCELLED && !s.consumer_stopped) st = drain(&s, p);
    if (st != EM_OK) {
        fail_event(&s, st);
        session_free(&s);
        return st;
    }
    em_event fin = {.kind = EM_EVENT_FINISH, .reason = finish_reason(&s, res.finish, opts->cancel)};
    if (s.stop_matched && s.stops.match >= 0 && (size_t)s.stops.match < req->n_stop) fin.stop = req->stop[s.stops.match];
    fin.usage.prompt_tokens = p->n_ids;
    fin.usage.cached_tokens = res.n_cached;
    fin.usage.completion_tokens = s.n_tokens;
    fin.usage.reasoning_tokens = s.reasoning_tokens;
    fin.usage.ttft_seconds = s.n_tokens ? s.t_first - s.t_start : 0;
    fin.usage.decode_seconds = s.n_tokens ? s.t_last - s.t_first : 0;
    fin.usage.itl = s.itl;
    fin.usage.n_itl = s.n_itl;
    emit(&s, &fin);
    session_free(&s);
    return EM_OK;
}
