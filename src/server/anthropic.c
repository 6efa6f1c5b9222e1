/* anthropic.c — POST /v1/messages and POST /v1/messages/count_tokens.
 *
 * The request becomes the internal request (anthropic_parse.c) and runs as
 * one generation job; its events become content blocks (anthropic_stream.c)
 * streamed as SSE or collected into one message object. These routes check
 * the API key and the model themselves so that every error, 401 and 529
 * included, has Anthropic's shape: {"type":"error","error":{"type","message"}}.
 * The key comes as "x-api-key" or "Authorization: Bearer"; the
 * anthropic-version and anthropic-beta headers are accepted and not needed. */
#include "server/anthropic.h"

#include "base/alloc.h"
#include "base/json_read.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "server/metrics.h"
#include "server/routes.h"
#include "server/sse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ----------------------------------------------------------- */

const char *ant_error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *ant_error_json(int status, const char *message) {
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", ant_error_type(status), "message",
                     message);
}

void ant_reply_error(srv_response *r, int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_reply_json(r, status, ant_error_json(status, msg));
}

/* A parse error: "path: message", as the API reports them. */
static void reply_parse_error(srv_response *r, const oai_error *e) {
    int status = e->status ? e->status : 400;
    if (status >= 500) ant_reply_error(r, status, "%s", e->message);
    else if (e->param[0]) ant_reply_error(r, status, "%s: %s", e->param, e->message);
    else ant_reply_error(r, status, "%s", e->message);
}

/* An engine failure while building the prompt. */
static void reply_status(srv_response *r, em_status st) {
    const char *msg = em_last_error();
    if (!msg || !*msg) msg = em_status_name(st);
    bool client = st == EM_ERR_FORMAT || st == EM_ERR_INVALID || st == EM_ERR_UNSUPPORTED || st == EM_ERR_LIMIT;
    ant_reply_error(r, client ? 400 : 500, "%s", msg);
}

/* Authentication, a loaded model, a JSON object body. NULL after replying. */
static json_t *admit(srv_request *req, srv_response *resp) {
    if (!srv_authorized(req)) {
        ant_reply_error(resp, 401, "invalid x-api-key: a valid API key is required (x-api-key or Authorization: Bearer)");
        return NULL;
    }
    if (!srv_model(req->srv)) {
        bool loading = atomic_load(&req->srv->state) == SRV_LOADING;
        resp->retry_after = loading ? 2 : 0;
        ant_reply_error(resp, 529, "%s", loading ? "the model is still loading" : "the server is not serving requests");
        return NULL;
    }
    json_error_t err;
    json_t *body = em_json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(body)) {
        if (body) ant_reply_error(resp, 400, "the request body must be a JSON object");
        else ant_reply_error(resp, 400, "the request body is not valid JSON: %s (line %d, column %d)", err.text,
                             err.line, err.column);
        json_decref(body);
        return NULL;
    }
    return body;
}

/* ---- the job ------------------------------------------------------------ */

typedef struct ant_job {
    srv_job base;
    srv_server *srv;
    em_model *model;
    em_request req;
    em_prompt prompt;
    bool stream;
    double t_arrival;
    char id[48];
    ant_reply reply;
} ant_job;

static void ant_destroy(srv_job *base) {
    ant_job *j = (ant_job *)base;
    ant_reply_free(&j->reply);
    em_prompt_free(&j->prompt);
    em_request_free(&j->req);
    free(j);
}

static int ant_on_event(void *user, const em_event *ev) {
    ant_job *j = user;
    if (ev->kind == EM_EVENT_FINISH)
        metrics_generation(j->srv->metrics, ev->usage.prompt_tokens, ev->usage.completion_tokens,
                           ev->usage.ttft_seconds, ev->usage.itl, ev->usage.n_itl);
    if (ev->kind == EM_EVENT_ERROR) metrics_generation_error(j->srv->metrics);
    if (!ant_reply_event(&j->reply, ev)) {
        if (!j->reply.failed) snprintf(j->reply.error, sizeof j->reply.error, "out of memory building the reply");
        j->reply.failed = true;
        j->base.cancel = 1;
    }
    return j->base.cancel;
}

static void ant_run(srv_job *base) {
    ant_job *j = (ant_job *)base;
    if (base->cancel) return;
    em_session_opts o = {.choice = 0, .cancel = &base->cancel, .t_start = j->t_arrival, .on_event = ant_on_event,
                         .user = j};
    em_session_run(j->model, &j->req, &j->prompt, &o);
}

/* The message object without content (message_start) or with it. */
static json_t *message_json(ant_job *j, json_t *content) {
    const ant_reply *r = &j->reply;
    bool done = content && r->finished;
    const char *reason = done ? ant_stop_reason(r->reason, r->stop) : NULL;
    bool by_stop = reason && !strcmp(reason, "stop_sequence");
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id", j->id, "type", "message", "role", "assistant",
                     "model", em_model_name(j->model), "content", content ? content : json_array(), "stop_reason",
                     reason ? json_string(reason) : json_null(), "stop_sequence",
                     by_stop ? json_string(r->stop) : json_null(), "usage",
                     ant_usage_json(r->input_tokens, done ? r->cached_tokens : 0, content ? r->output_tokens : 0));
}

/* Streaming: message_start and the first ping go into the pipe before the
 * job is queued, so a client sees them at once even while it waits for a
 * worker; later silence is covered by the HTTP side's keepalive pings. */
static bool stream_prologue(ant_job *j) {
    static const char ping[] = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    json_t *start = json_pack("{s:s, s:o}", "type", "message_start", "message", message_json(j, NULL));
    bool ok = start && sse_send_named(&j->base, "message_start", start) && sse_write(&j->base, ping, sizeof ping - 1);
    json_decref(start);
    j->base.keepalive = ping;
    j->base.keepalive_s = ANT_KEEPALIVE_S;
    return ok;
}

/* Queues j; streaming hands the pipe to resp. True when the caller should
 * build a non-streaming reply (and then drop its reference). */
static bool submit(srv_request *req, srv_response *resp, ant_job *j) {
    if (j->stream && !stream_prologue(j)) {
        ant_reply_error(resp, 500, "out of memory starting the stream");
        srv_job_unref(&j->base);
        return false;
    }
    em_status st = sched_submit(req->srv->sched, &j->base);
    if (st != EM_OK) {
        resp->retry_after = 1;
        if (st == EM_ERR_LIMIT) ant_reply_error(resp, 429, "%s", em_last_error());
        else ant_reply_error(resp, 529, "%s", em_last_error());
        srv_job_unref(&j->base);
        return false;
    }
    if (j->stream) {
        resp->status = 200;
        resp->stream = &j->base; /* the response holds our reference now */
        return false;
    }
    http_wait_job(req, &j->base);
    return true;
}

/* Parses and renders the request into a new job; NULL after replying. */
static ant_job *prepare(srv_request *req, srv_response *resp, ant_mode mode) {
    json_t *body = admit(req, resp);
    if (!body) return NULL;
    ant_job *j = em_calloc(1, sizeof *j);
    if (!j) {
        json_decref(body);
        ant_reply_error(resp, 500, "out of memory");
        return NULL;
    }
    srv_job_init(&j->base, ant_run, ant_destroy);
    em_request_init(&j->req);
    j->srv = req->srv;
    j->model = srv_model(req->srv);
    j->t_arrival = req->t_arrival;
    srv_random_id("msg_", j->id, sizeof j->id);
    oai_error e = {0};
    bool ok = ant_parse(body, em_model_name(j->model), mode, &j->req, &j->stream, &e);
    json_decref(body);
    if (!ok) {
        reply_parse_error(resp, &e);
        srv_job_unref(&j->base);
        return NULL;
    }
    em_status st = srv_request_config(req, j->model, &j->req.config);
    if (st == EM_OK) st = em_prompt_build(j->model, &j->req, &j->prompt);
    if (st != EM_OK) {
        reply_status(resp, st);
        srv_job_unref(&j->base);
        return NULL;
    }
    j->reply.input_tokens = j->prompt.n_ids;
    return j;
}

void anthropic_messages(srv_request *req, srv_response *resp) {
    ant_job *j = prepare(req, resp, ANT_MESSAGES);
    if (!j) return;
    if (j->stream) j->reply.job = &j->base;
    if (!submit(req, resp, j)) return;
    if (j->reply.finished && j->reply.reason == EM_REASON_CANCELLED && !j->reply.failed) {
        ant_reply_error(resp, 529, "the request was cancelled: the server is shutting down");
    } else if (j->reply.failed || !j->reply.finished) {
        ant_reply_error(resp, 500, "%s", j->reply.error[0] ? j->reply.error : "the generation did not finish");
    } else {
        json_t *content = ant_content_json(&j->reply);
        srv_reply_json(resp, 200, content ? message_json(j, content) : NULL);
    }
    srv_job_unref(&j->base);
}

void anthropic_count_tokens(srv_request *req, srv_response *resp) {
    ant_job *j = prepare(req, resp, ANT_COUNT_TOKENS);
    if (!j) return;
    srv_reply_json(resp, 200, json_pack("{s:I}", "input_tokens", (json_int_t)j->prompt.n_ids));
    srv_job_unref(&j->base);
}

void anthropic_not_found(srv_request *req, srv_response *resp) {
    ant_reply_error(resp, 404, "no route for %s %s", req->method, req->path);
}
