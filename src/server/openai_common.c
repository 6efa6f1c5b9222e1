/* openai_common.c — shared OpenAI formatting helpers (see openai_common.h). */
#include "server/openai_common.h"

#include "base/alloc.h"
#include "base/json_read.h"
#include "base/log.h"
#include "base/timer.h"
#include "base/utf8.h"
#include "engine/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

json_t *oai_json_text(const char *s, size_t len) {
    if (utf8_valid(s, len)) return json_stringn(s, len);
    oai_buf b = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < len;) {
        uint32_t cp;
        int n = utf8_decode(s + i, len - i, &cp);
        if (n > 0 && cp != 0) {
            ok = oai_buf_add(&b, s + i, (size_t)n);
            i += (size_t)n;
        } else {
            ok = oai_buf_add(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    json_t *out = ok ? json_stringn(b.data ? b.data : "", b.len) : NULL;
    oai_buf_free(&b);
    return out;
}

json_t *oai_logprob_value(float lp) { return json_real(isfinite(lp) ? (double)lp : -9999.0); }

/* {"token", "logprob", "bytes"} for one id. */
static json_t *token_entry(em_model *m, int32_t id, float lp) {
    char *text = em_token_text(m, id);
    const char *t = text ? text : "";
    size_t len = strlen(t);
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < len; i++) json_array_append_new(bytes, json_integer((unsigned char)t[i]));
    json_t *o = json_pack("{s:o, s:o, s:o}", "token", oai_json_text(t, len), "logprob", oai_logprob_value(lp), "bytes",
                          bytes);
    free(text);
    return o;
}

json_t *oai_chat_logprob(em_model *m, const em_token_logprob *lp) {
    json_t *o = token_entry(m, lp->token, lp->logprob);
    json_t *top = json_array();
    for (int i = 0; top && i < lp->n_top; i++) json_array_append_new(top, token_entry(m, lp->top_ids[i], lp->top_logprobs[i]));
    if (o) json_object_set_new(o, "top_logprobs", top);
    else json_decref(top);
    return o;
}

void oai_usage_add(oai_usage_acc *u, const em_event *finish) {
    u->completion_tokens += finish->usage.completion_tokens;
    u->reasoning_tokens += finish->usage.reasoning_tokens;
    /* choices share one prompt: report the best reuse among them */
    if (finish->usage.cached_tokens > u->cached_tokens) u->cached_tokens = finish->usage.cached_tokens;
}

json_t *oai_usage_json(const oai_usage_acc *u) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)u->cached_tokens, "completion_tokens_details", "reasoning_tokens",
                     (json_int_t)u->reasoning_tokens);
}

bool oai_buf_add(oai_buf *b, const char *s, size_t len) {
    size_t need;
    if (!em_add(b->len, len, &need) || !em_add(need, 1, &need) || !em_grow((void **)&b->data, &b->cap, need, 1))
        return false;
    memcpy(b->data + b->len, s, len);
    b->len += len;
    b->data[b->len] = 0;
    return true;
}

void oai_buf_free(oai_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

bool oai_request_config(srv_request *req, srv_response *resp, em_model *m, em_config **out) {
    em_status st = srv_request_config(req, m, out);
    if (st == EM_OK) return true;
    if (st == EM_ERR_INVALID)
        srv_reply_error(resp, 400, "invalid_request_error", SRV_CONFIG_HEADER, "invalid_config", "%s", em_last_error());
    else srv_reply_status(resp, st, NULL);
    return false;
}

void oai_reply_error(srv_response *resp, const oai_error *e) {
    const char *type = e->status >= 500 ? "server_error" : "invalid_request_error";
    srv_reply_error(resp, e->status ? e->status : 400, type, e->param[0] ? e->param : NULL, e->code, "%s", e->message);
}

json_t *oai_parse_body(const srv_request *req, srv_response *resp) {
    json_error_t err;
    json_t *body = em_json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &err);
    if (!body) {
        srv_reply_error(resp, 400, "invalid_request_error", NULL, "invalid_json",
                        "the request body is not valid JSON: %s (line %d, column %d)", err.text, err.line, err.column);
        return NULL;
    }
    if (!json_is_object(body)) {
        json_decref(body);
        srv_reply_error(resp, 400, "invalid_request_error", NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return body;
}

bool oai_submit(srv_request *req, srv_response *resp, srv_job *j, bool stream) {
    /* An SSE comment (clients skip it) keeps a stream that waits in the
     * queue, or in a long prefill, from reaching the idle timeout. */
    if (stream && !j->keepalive) {
        j->keepalive = ": keepalive\n\n";
        j->keepalive_s = OAI_KEEPALIVE_S;
    }
    em_status st = sched_submit(req->srv->sched, j);
    if (st == EM_OK)
        EM_LOGD("http: a request is queued %.2f ms after it arrived (its body parsed, its prompt built)",
                (j->t_queued - req->t_arrival) * 1e3);
    if (st == EM_ERR_LIMIT) {
        resp->retry_after = 1;
        srv_reply_error(resp, 429, "server_error", NULL, "server_busy", "%s", em_last_error());
        srv_job_unref(j);
        return false;
    }
    if (st != EM_OK) {
        srv_reply_error(resp, 503, "server_error", NULL, "unavailable", "%s", em_last_error());
        srv_job_unref(j);
        return false;
    }
    if (stream) {
        resp->status = 200;
        resp->stream = j; /* the response now holds our reference */
        return false;
    }
    http_wait_job(req, j);
    return true;
}
