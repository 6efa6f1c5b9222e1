/* openai_chat.c — POST /v1/chat/completions: runs the request's choices
 * and formats the event stream as chat.completion.chunk SSE events, or
 * collects it into one chat.completion object. */
#include "server/openai_chat.h"

#include "base/alloc.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "server/metrics.h"
#include "server/openai_common.h"
#include "server/routes.h"
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct tool_acc {
    char *id, *name;
    oai_buf args;
} tool_acc;

typedef struct choice_acc {
    oai_buf content, reasoning;
    tool_acc *tools;
    int n_tools;
    json_t *logprobs; /* array of content token records */
    em_finish_reason reason;
} choice_acc;

typedef struct chat_job {
    srv_job base;
    srv_server *srv;
    em_model *model;
    em_request req;
    em_prompt prompt;
    oai_stream_opts so;
    char id[48];
    json_int_t created;
    double t_arrival;
    choice_acc *choices;
    oai_usage_acc usage;
    bool failed;
    char error[512];
} chat_job;

static void chat_destroy(srv_job *base) {
    chat_job *j = (chat_job *)base;
    for (int i = 0; j->choices && i < j->req.n; i++) {
        choice_acc *c = &j->choices[i];
        oai_buf_free(&c->content);
        oai_buf_free(&c->reasoning);
        for (int t = 0; t < c->n_tools; t++) {
            free(c->tools[t].id);
            free(c->tools[t].name);
            oai_buf_free(&c->tools[t].args);
        }
        free(c->tools);
        json_decref(c->logprobs);
    }
    free(j->choices);
    em_prompt_free(&j->prompt);
    em_request_free(&j->req);
    free(j);
}

/* ---- streaming --------------------------------------------------------- */

static json_t *chunk(chat_job *j, int index, json_t *delta, const char *finish, json_t *logprobs) {
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", delta, "logprobs",
                               logprobs ? logprobs : json_null(), "finish_reason",
                               finish ? json_string(finish) : json_null());
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", j->id, "object", "chat.completion.chunk",
                          "created", j->created, "model", em_model_name(j->model), "system_fingerprint",
                          OAI_FINGERPRINT, "choices", choice);
    if (o && j->so.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static void send_chunk(chat_job *j, json_t *c) {
    if (c) sse_send_json(&j->base, c);
    json_decref(c);
}

static json_t *content_logprobs(chat_job *j, const em_event *ev) {
    if (!j->req.logprobs) return NULL;
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < ev->n_logprobs; i++) json_array_append_new(arr, oai_chat_logprob(j->model, &ev->logprobs[i]));
    return json_pack("{s:o}", "content", arr);
}

static json_t *tool_delta(const em_event *ev, bool start) {
    json_t *fn = start ? json_pack("{s:s, s:s}", "name", ev->tool_name ? ev->tool_name : "", "arguments", "")
                       : json_pack("{s:o}", "arguments", oai_json_text(ev->text, ev->len));
    json_t *call = json_pack("{s:i, s:o}", "index", ev->tool_index, "function", fn);
    if (call && start) {
        json_object_set_new(call, "id", json_string(ev->tool_id ? ev->tool_id : ""));
        json_object_set_new(call, "type", json_string("function"));
    }
    return json_pack("{s:[o]}", "tool_calls", call);
}

static void stream_event(chat_job *j, const em_event *ev) {
    switch (ev->kind) {
    case EM_EVENT_CONTENT:
        send_chunk(j, chunk(j, ev->choice, json_pack("{s:o}", "content", oai_json_text(ev->text, ev->len)), NULL,
                            content_logprobs(j, ev)));
        break;
    case EM_EVENT_REASONING:
        send_chunk(j, chunk(j, ev->choice, json_pack("{s:o}", "reasoning_content", oai_json_text(ev->text, ev->len)),
                            NULL, NULL));
        break;
    case EM_EVENT_TOOL_START: send_chunk(j, chunk(j, ev->choice, tool_delta(ev, true), NULL, NULL)); break;
    case EM_EVENT_TOOL_ARGS: send_chunk(j, chunk(j, ev->choice, tool_delta(ev, false), NULL, NULL)); break;
    case EM_EVENT_TOOL_END: break;
    case EM_EVENT_FINISH:
        if (ev->reason != EM_REASON_CANCELLED)
            send_chunk(j, chunk(j, ev->choice, json_object(), em_finish_reason_name(ev->reason), NULL));
        break;
    case EM_EVENT_ERROR: {
        json_t *err = json_pack("{s:{s:o, s:s, s:n, s:n}}", "error", "message", oai_json_text(ev->text, ev->len),
                                "type", "server_error", "param", "code");
        if (err) sse_send_json(&j->base, err);
        json_decref(err);
        break;
    }
    }
}

/* ---- collecting ------------------------------------------------------- */

static void collect_event(chat_job *j, const em_event *ev) {
    choice_acc *c = &j->choices[ev->choice];
    bool ok = true;
    switch (ev->kind) {
    case EM_EVENT_CONTENT:
        ok = oai_buf_add(&c->content, ev->text, ev->len);
        if (j->req.logprobs) {
            if (!c->logprobs) c->logprobs = json_array();
            for (size_t i = 0; c->logprobs && i < ev->n_logprobs; i++)
                json_array_append_new(c->logprobs, oai_chat_logprob(j->model, &ev->logprobs[i]));
        }
        break;
    case EM_EVENT_REASONING: ok = oai_buf_add(&c->reasoning, ev->text, ev->len); break;
    case EM_EVENT_TOOL_START: {
        tool_acc *t = em_realloc(c->tools, (size_t)(c->n_tools + 1) * sizeof *t);
        ok = t != NULL;
        if (ok) {
            c->tools = t;
            memset(&t[c->n_tools], 0, sizeof *t);
            t[c->n_tools].id = em_strdup(ev->tool_id ? ev->tool_id : "");
            t[c->n_tools].name = em_strdup(ev->tool_name ? ev->tool_name : "");
            c->n_tools++;
        }
        break;
    }
    case EM_EVENT_TOOL_ARGS:
        for (int i = 0; i < c->n_tools; i++) /* the latest call with this index */
            if (i == ev->tool_index) ok = oai_buf_add(&c->tools[i].args, ev->text, ev->len);
        break;
    case EM_EVENT_TOOL_END: break;
    case EM_EVENT_FINISH: c->reason = ev->reason; break;
    case EM_EVENT_ERROR: snprintf(j->error, sizeof j->error, "%.*s", (int)ev->len, ev->text); break;
    }
    if (!ok) {
        snprintf(j->error, sizeof j->error, "out of memory collecting the reply");
        j->failed = true;
        j->base.cancel = 1;
    }
}

static int chat_on_event(void *user, const em_event *ev) {
    chat_job *j = user;
    if (ev->kind == EM_EVENT_FINISH) {
        oai_usage_add(&j->usage, ev);
        metrics_generation(j->srv->metrics, ev->usage.prompt_tokens, ev->usage.completion_tokens,
                           ev->usage.ttft_seconds, ev->usage.itl, ev->usage.n_itl);
    }
    if (ev->kind == EM_EVENT_ERROR) metrics_generation_error(j->srv->metrics);
    if (j->so.stream) stream_event(j, ev);
    else collect_event(j, ev);
    return j->base.cancel;
}

static void chat_run(srv_job *base) {
    chat_job *j = (chat_job *)base;
    for (int i = 0; i < j->req.n && !base->cancel && !j->failed; i++) {
        if (j->so.stream)
            send_chunk(j, chunk(j, i, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL));
        em_session_opts o = {.choice = i, .cancel = &base->cancel, .t_start = j->t_arrival, .on_event = chat_on_event,
                             .user = j};
        if (em_session_run(j->model, &j->req, &j->prompt, &o) != EM_OK) j->failed = true;
    }
    if (!j->so.stream || base->cancel) return;
    if (j->so.include_usage && !j->failed) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", j->id, "object", "chat.completion.chunk",
                              "created", j->created, "model", em_model_name(j->model), "system_fingerprint",
                              OAI_FINGERPRINT, "choices", "usage", oai_usage_json(&j->usage));
        send_chunk(j, u);
    }
    sse_send_done(base);
}

/* ---- the final object --------------------------------------------------- */

static json_t *message_json(const choice_acc *c) {
    json_t *msg = json_pack("{s:s, s:o, s:n}", "role", "assistant", "content",
                            c->content.len || !c->n_tools ? oai_json_text(c->content.data ? c->content.data : "", c->content.len)
                                                          : json_null(),
                            "refusal");
    if (msg && c->reasoning.len)
        json_object_set_new(msg, "reasoning_content", oai_json_text(c->reasoning.data, c->reasoning.len));
    if (msg && c->n_tools) {
        json_t *calls = json_array();
        for (int i = 0; calls && i < c->n_tools; i++) {
            const tool_acc *t = &c->tools[i];
            json_array_append_new(
                calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", t->id ? t->id : "", "type", "function", "function",
                                 "name", t->name ? t->name : "", "arguments",
                                 oai_json_text(t->args.data ? t->args.data : "{}", t->args.data ? t->args.len : 2)));
        }
        json_object_set_new(msg, "tool_calls", calls);
    }
    return msg;
}

static json_t *completion_json(chat_job *j) {
    json_t *choices = json_array();
    for (int i = 0; choices && i < j->req.n; i++) {
        choice_acc *c = &j->choices[i];
        json_t *lp = NULL;
        if (j->req.logprobs)
            lp = c->logprobs ? json_pack("{s:O}", "content", c->logprobs) : json_pack("{s:[]}", "content");
        json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", message_json(c),
                                                 "logprobs", lp ? lp : json_null(), "finish_reason",
                                                 em_finish_reason_name(c->reason)));
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", j->id, "object", "chat.completion", "created",
                     j->created, "model", em_model_name(j->model), "system_fingerprint", OAI_FINGERPRINT, "choices",
                     choices, "usage", oai_usage_json(&j->usage));
}

void openai_chat_completions(srv_request *req, srv_response *resp) {
    json_t *body = oai_parse_body(req, resp);
    if (!body) return;
    chat_job *j = em_calloc(1, sizeof *j);
    if (!j) {
        json_decref(body);
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    srv_job_init(&j->base, chat_run, chat_destroy);
    em_request_init(&j->req);
    j->srv = req->srv;
    j->model = srv_model(req->srv);
    j->t_arrival = req->t_arrival;
    j->created = (json_int_t)time(NULL);
    srv_random_id("chatcmpl-", j->id, sizeof j->id);
    oai_error e = {0};
    bool ok = oai_chat_parse(body, em_model_name(j->model), em_model_vocab_size(j->model), &j->req, &j->so, &e);
    json_decref(body);
    if (!ok) {
        oai_reply_error(resp, &e);
        srv_job_unref(&j->base);
        return;
    }
    if (!oai_request_config(req, resp, j->model, &j->req.config)) {
        srv_job_unref(&j->base);
        return;
    }
    em_status st = em_prompt_build(j->model, &j->req, &j->prompt);
    if (st != EM_OK) {
        srv_reply_status(resp, st, st == EM_ERR_LIMIT ? "messages" : NULL);
        srv_job_unref(&j->base);
        return;
    }
    j->usage.prompt_tokens = j->prompt.n_ids;
    j->choices = em_calloc((size_t)j->req.n, sizeof *j->choices);
    if (!j->choices) {
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory");
        srv_job_unref(&j->base);
        return;
    }
    if (!oai_submit(req, resp, &j->base, j->so.stream)) return;
    if (j->failed || j->error[0]) srv_reply_error(resp, 500, "server_error", NULL, NULL, "%s", j->error);
    else srv_reply_json(resp, 200, completion_json(j));
    srv_job_unref(&j->base);
}
