/* openai_completions.c — POST /v1/completions: raw prompts (a string, a
 * list of strings, a list of token ids or a list of such lists), no chat
 * template; text_completion objects or SSE chunks of them. Choice indexes
 * run prompt-major: prompt p, sample k → index p * n + k. */
#include "server/openai_completions.h"

#include "base/alloc.h"
#include "base/config.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "server/metrics.h"
#include "server/openai_common.h"
#include "server/routes.h"
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the job ------------------------------------------------------------- */

typedef struct cmpl_choice {
    oai_buf text;
    json_t *tokens, *token_logprobs, *top_logprobs, *text_offset;
    em_finish_reason reason;
} cmpl_choice;

typedef struct cmpl_job {
    srv_job base;
    srv_server *srv;
    em_model *model;
    em_request *reqs;
    em_prompt *prompts;
    size_t n_reqs;
    oai_stream_opts so;
    char id[48];
    json_int_t created;
    double t_arrival;
    cmpl_choice *choices; /* n_reqs * n */
    size_t cur_req;       /* the prompt being generated (choice index base) */
    oai_usage_acc usage;
    bool failed;
    char error[512];
} cmpl_job;

static size_t n_choices(const cmpl_job *j) { return j->n_reqs * (size_t)j->reqs[0].n; }

static void cmpl_destroy(srv_job *base) {
    cmpl_job *j = (cmpl_job *)base;
    for (size_t i = 0; j->choices && i < n_choices(j); i++) {
        cmpl_choice *c = &j->choices[i];
        oai_buf_free(&c->text);
        json_decref(c->tokens);
        json_decref(c->token_logprobs);
        json_decref(c->top_logprobs);
        json_decref(c->text_offset);
    }
    free(j->choices);
    for (size_t i = 0; i < j->n_reqs; i++) {
        if (j->prompts) em_prompt_free(&j->prompts[i]);
        em_request_free(&j->reqs[i]);
    }
    free(j->prompts);
    free(j->reqs);
    free(j);
}

/* Legacy logprobs: parallel arrays, top alternatives as {token: logprob}. */
static json_t *legacy_logprobs(cmpl_job *j, const em_event *ev, size_t offset0) {
    json_t *lp = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    size_t off = offset0;
    for (size_t i = 0; lp && i < ev->n_logprobs; i++) {
        const em_token_logprob *r = &ev->logprobs[i];
        char *t = em_token_text(j->model, r->token);
        json_array_append_new(json_object_get(lp, "tokens"), oai_json_text(t ? t : "", t ? strlen(t) : 0));
        json_array_append_new(json_object_get(lp, "token_logprobs"), oai_logprob_value(r->logprob));
        json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)off));
        off += t ? strlen(t) : 0;
        free(t);
        json_t *top = json_object();
        for (int k = 0; top && k < r->n_top; k++) {
            char *tt = em_token_text(j->model, r->top_ids[k]);
            json_t *key = oai_json_text(tt ? tt : "", tt ? strlen(tt) : 0);
            if (key) json_object_set_new(top, json_string_value(key), oai_logprob_value(r->top_logprobs[k]));
            json_decref(key);
            free(tt);
        }
        json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    }
    return lp;
}

static json_t *cmpl_object(cmpl_job *j, json_t *choices) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", j->id, "object", "text_completion", "created",
                          j->created, "model", em_model_name(j->model), "system_fingerprint", OAI_FINGERPRINT,
                          "choices", choices);
    return o;
}

static void send_text_chunk(cmpl_job *j, int index, const char *text, size_t len, json_t *lp, const char *finish) {
    json_t *choice = json_pack("{s:o, s:i, s:o, s:o}", "text", oai_json_text(text, len), "index", index, "logprobs",
                               lp ? lp : json_null(), "finish_reason", finish ? json_string(finish) : json_null());
    json_t *o = cmpl_object(j, json_pack("[o]", choice));
    if (o && j->so.include_usage) json_object_set_new(o, "usage", json_null());
    if (o) sse_send_json(&j->base, o);
    json_decref(o);
}

static void append_logprobs(cmpl_choice *c, json_t *lp) {
    static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    json_t **dst[] = {&c->tokens, &c->token_logprobs, &c->top_logprobs, &c->text_offset};
    for (int k = 0; k < 4; k++) {
        if (!*dst[k]) *dst[k] = json_array();
        json_array_extend(*dst[k], json_object_get(lp, keys[k]));
    }
    json_decref(lp);
}

static int cmpl_on_event(void *user, const em_event *ev) {
    cmpl_job *j = user;
    int index = (int)j->cur_req * j->reqs[0].n + ev->choice;
    cmpl_choice *c = &j->choices[index];
    if (ev->kind == EM_EVENT_CONTENT || ev->kind == EM_EVENT_REASONING) {
        json_t *lp = j->reqs[0].logprobs ? legacy_logprobs(j, ev, c->text.len) : NULL;
        if (!oai_buf_add(&c->text, ev->text, ev->len)) j->failed = true, j->base.cancel = 1;
        if (j->so.stream) send_text_chunk(j, index, ev->text, ev->len, lp, NULL);
        else if (lp) append_logprobs(c, lp);
    } else if (ev->kind == EM_EVENT_FINISH) {
        c->reason = ev->reason;
        oai_usage_add(&j->usage, ev);
        metrics_generation(j->srv->metrics, ev->usage.prompt_tokens, ev->usage.completion_tokens,
                           ev->usage.ttft_seconds, ev->usage.itl, ev->usage.n_itl);
        if (j->so.stream && ev->reason != EM_REASON_CANCELLED)
            send_text_chunk(j, index, "", 0, NULL, em_finish_reason_name(ev->reason));
    } else if (ev->kind == EM_EVENT_ERROR) {
        metrics_generation_error(j->srv->metrics);
        snprintf(j->error, sizeof j->error, "%.*s", (int)ev->len, ev->text);
        if (j->so.stream) {
            json_t *err = json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", j->error, "type", "server_error",
                                    "param", "code");
            if (err) sse_send_json(&j->base, err);
            json_decref(err);
        }
    }
    return j->base.cancel;
}

static void cmpl_run(srv_job *base) {
    cmpl_job *j = (cmpl_job *)base;
    for (size_t r = 0; r < j->n_reqs && !base->cancel && !j->failed; r++) {
        j->cur_req = r;
        for (int k = 0; k < j->reqs[r].n && !base->cancel && !j->failed; k++) {
            int index = (int)r * j->reqs[0].n + k;
            if (j->reqs[r].echo) {
                const char *t = j->prompts[r].text ? j->prompts[r].text : "";
                if (!oai_buf_add(&j->choices[index].text, t, strlen(t))) j->failed = true;
                if (j->so.stream) send_text_chunk(j, index, t, strlen(t), NULL, NULL);
            }
            em_session_opts o = {.choice = k, .cancel = &base->cancel, .t_start = j->t_arrival,
                                 .on_event = cmpl_on_event, .user = j};
            if (em_session_run(j->model, &j->reqs[r], &j->prompts[r], &o) != EM_OK) j->failed = true;
        }
    }
    if (!j->so.stream || base->cancel) return;
    if (j->so.include_usage && !j->failed) {
        json_t *o = cmpl_object(j, json_array());
        if (o) json_object_set_new(o, "usage", oai_usage_json(&j->usage));
        if (o) sse_send_json(base, o);
        json_decref(o);
    }
    sse_send_done(base);
}

/* A new reference to a, or a new empty array when a is NULL. */
static json_t *ref_or_new(json_t *a) { return a ? json_incref(a) : json_array(); }

static json_t *final_json(cmpl_job *j) {
    json_t *choices = json_array();
    for (size_t i = 0; choices && i < n_choices(j); i++) {
        cmpl_choice *c = &j->choices[i];
        json_t *lp = NULL;
        if (j->reqs[0].logprobs)
            lp = json_pack("{s:o, s:o, s:o, s:o}", "tokens", ref_or_new(c->tokens), "token_logprobs",
                           ref_or_new(c->token_logprobs), "top_logprobs", ref_or_new(c->top_logprobs), "text_offset",
                           ref_or_new(c->text_offset));
        json_array_append_new(choices, json_pack("{s:o, s:i, s:o, s:s}", "text",
                                                 oai_json_text(c->text.data ? c->text.data : "", c->text.len), "index",
                                                 (int)i, "logprobs", lp ? lp : json_null(), "finish_reason",
                                                 em_finish_reason_name(c->reason)));
    }
    json_t *o = cmpl_object(j, choices);
    if (o) json_object_set_new(o, "usage", oai_usage_json(&j->usage));
    return o;
}

void openai_completions(srv_request *req, srv_response *resp) {
    json_t *body = oai_parse_body(req, resp);
    if (!body) return;
    cmpl_job *j = em_calloc(1, sizeof *j);
    if (!j) {
        json_decref(body);
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    srv_job_init(&j->base, cmpl_run, cmpl_destroy);
    j->srv = req->srv;
    j->model = srv_model(req->srv);
    j->t_arrival = req->t_arrival;
    j->created = (json_int_t)time(NULL);
    srv_random_id("cmpl-", j->id, sizeof j->id);
    oai_error e = {0};
    bool ok = oai_completions_parse(body, em_model_name(j->model), em_model_vocab_size(j->model), &j->reqs, &j->n_reqs,
                                    &j->so, &e);
    json_decref(body);
    if (!ok) {
        oai_reply_error(resp, &e);
        srv_job_unref(&j->base);
        return;
    }
    em_config *cfg;
    if (!oai_request_config(req, resp, j->model, &cfg)) {
        srv_job_unref(&j->base);
        return;
    }
    for (size_t i = 0; i < j->n_reqs; i++) j->reqs[i].config = em_config_retain(cfg);
    em_config_release(cfg);
    j->prompts = em_calloc(j->n_reqs, sizeof *j->prompts);
    j->choices = em_calloc(n_choices(j), sizeof *j->choices);
    if (!j->prompts || !j->choices) {
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory");
        srv_job_unref(&j->base);
        return;
    }
    for (size_t i = 0; i < j->n_reqs; i++) {
        em_status st = em_prompt_build(j->model, &j->reqs[i], &j->prompts[i]);
        if (st != EM_OK) {
            srv_reply_status(resp, st, "prompt");
            srv_job_unref(&j->base);
            return;
        }
        j->usage.prompt_tokens += j->prompts[i].n_ids;
    }
    if (!oai_submit(req, resp, &j->base, j->so.stream)) return;
    if (j->failed || j->error[0]) srv_reply_error(resp, 500, "server_error", NULL, NULL, "%s", j->error);
    else srv_reply_json(resp, 200, final_json(j));
    srv_job_unref(&j->base);
}
