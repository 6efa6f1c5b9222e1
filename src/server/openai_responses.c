/* openai_responses.c — the OpenAI Responses API: POST /v1/responses,
 * GET /v1/responses/{id}, GET /v1/responses/{id}/input_items and
 * DELETE /v1/responses/{id}.
 *
 * The engine's event stream (reasoning, content, tool calls, finish) maps
 * onto output items: consecutive reasoning deltas form one reasoning item,
 * consecutive content deltas one message item, and each tool call one
 * function_call item. One builder serves both forms of the reply: it keeps
 * the closed items and the open one, and when streaming it also sends the
 * Responses event grammar (response.created, .in_progress,
 * .output_item.added, .content_part.added, the deltas and their .done
 * events, .output_item.done, then .completed / .incomplete / .failed), each
 * event with its sequence_number. Finished responses are kept in the
 * response store (unless store is false) so that previous_response_id can
 * continue the conversation: a record holds the response, its own input
 * items and the items of the conversation before them. */
#include "server/openai_responses.h"

#include "base/alloc.h"
#include "base/log.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "server/metrics.h"
#include "server/openai_common.h"
#include "server/response_store.h"
#include "server/routes.h"
#include "server/sse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { ITEM_NONE = 0, ITEM_MESSAGE, ITEM_REASONING, ITEM_CALL } item_kind;

typedef struct open_item {
    item_kind kind;
    char id[48];
    int output_index;
    oai_buf text;         /* message or reasoning text, or call arguments */
    char *call_id, *name; /* function_call */
} open_item;

typedef struct resp_job {
    srv_job base;
    srv_server *srv;
    em_model *model;
    em_request req;
    em_prompt prompt;
    oai_resp_opts o;
    json_t *context;      /* items before this request's input (array) */
    char id[48];
    json_int_t created;
    double t_arrival;
    json_t *output;       /* closed output items */
    open_item cur;
    json_int_t seq;       /* next sequence_number */
    oai_usage_acc usage;
    em_finish_reason reason;
    bool finished, failed;
    char error[512];
    json_t *final;        /* the finished response object */
} resp_job;

static void item_reset(open_item *it) {
    oai_buf_free(&it->text);
    free(it->call_id);
    free(it->name);
    memset(it, 0, sizeof *it);
}

static void resp_destroy(srv_job *base) {
    resp_job *j = (resp_job *)base;
    item_reset(&j->cur);
    json_decref(j->output);
    json_decref(j->context);
    json_decref(j->final);
    oai_resp_opts_free(&j->o);
    em_prompt_free(&j->prompt);
    em_request_free(&j->req);
    free(j);
}

/* ---- the response object -------------------------------------------------- */

static json_t *usage_json(const resp_job *j) {
    const oai_usage_acc *u = &j->usage;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)u->prompt_tokens,
                     "input_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens, "output_tokens", (json_int_t)u->completion_tokens,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)u->reasoning_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

/* A sampling parameter as the client would have written it (0.9, not
 * the float's 0.89999997615814209). */
static double tidy(float x) { return round((double)x * 1e6) / 1e6; }

/* The response object with its current output; status "in_progress",
 * "completed", "incomplete" or "failed". New reference. */
static json_t *response_json(resp_job *j, const char *status) {
    em_sampling s = em_request_sampling(&j->req, em_sampling_defaults(j->model));
    bool done = strcmp(status, "in_progress") != 0;
    json_t *err = json_null(), *incomplete = json_null();
    if (!strcmp(status, "failed")) err = json_pack("{s:s, s:o}", "code", "server_error", "message", oai_json_text(j->error, strlen(j->error)));
    if (!strcmp(status, "incomplete")) incomplete = json_pack("{s:s}", "reason", "max_output_tokens");
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:b, s:o, s:o, s:O, s:O, s:s, s:O, s:b, s:o, s:O, s:b, s:f, s:{s:{s:s}}, "
                          "s:O, s:O, s:f, s:s, s:o, s:n, s:O}",
                          "id", j->id, "object", "response", "created_at", j->created, "status", status, "background",
                          false, "error", err, "incomplete_details", incomplete, "instructions", j->o.instructions,
                          "max_output_tokens", j->o.max_output_tokens, "model", em_model_name(j->model), "output",
                          j->output, "parallel_tool_calls", j->req.parallel_tool_calls, "previous_response_id",
                          j->o.previous_response_id ? json_string(j->o.previous_response_id) : json_null(),
                          "reasoning", j->o.reasoning, "store", j->o.store, "temperature", tidy(s.temperature),
                          "text", "format", "type", "text", "tool_choice", j->o.tool_choice, "tools", j->o.tools,
                          "top_p", tidy(s.top_p), "truncation", "disabled", "usage",
                          done ? usage_json(j) : json_null(), "user", "metadata", j->o.metadata);
    return r;
}

/* ---- streaming events ----------------------------------------------------- */

/* Sends `ev` (consumed) as the event named by its "type", numbering it. */
static void send_event(resp_job *j, const char *type, json_t *ev) {
    if (!j->o.stream || !ev) {
        json_decref(ev);
        return;
    }
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(j->seq++));
    sse_send_named(&j->base, type, ev);
    json_decref(ev);
}

static void send_lifecycle(resp_job *j, const char *type, const char *status) {
    send_event(j, type, json_pack("{s:o}", "response", response_json(j, status)));
}

/* The item's JSON as it stands (status as given). */
static json_t *item_json(const open_item *it, const char *status) {
    json_t *text = oai_json_text(it->text.data ? it->text.data : "", it->text.len);
    switch (it->kind) {
    case ITEM_MESSAGE:
        return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[], s:[]}]}", "id", it->id, "type", "message", "status",
                         status, "role", "assistant", "content", "type", "output_text", "text", text, "annotations",
                         "logprobs");
    case ITEM_REASONING:
        return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}]}", "id", it->id, "type", "reasoning", "summary", "content",
                         "type", "reasoning_text", "text", text);
    case ITEM_CALL:
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", it->id, "type", "function_call", "status", status,
                         "call_id", it->call_id ? it->call_id : "", "name", it->name ? it->name : "", "arguments", text);
    case ITEM_NONE: break;
    }
    json_decref(text);
    return NULL;
}

/* An empty item for output_item.added. */
static json_t *item_added_json(const open_item *it) {
    switch (it->kind) {
    case ITEM_MESSAGE:
        return json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", it->id, "type", "message", "status", "in_progress", "role",
                         "assistant", "content");
    case ITEM_REASONING: return json_pack("{s:s, s:s, s:[], s:[]}", "id", it->id, "type", "reasoning", "summary", "content");
    case ITEM_CALL: return item_json(it, "in_progress");
    case ITEM_NONE: break;
    }
    return NULL;
}

static json_t *part_json(const open_item *it, bool empty) {
    json_t *text = empty ? json_string("") : oai_json_text(it->text.data ? it->text.data : "", it->text.len);
    if (it->kind == ITEM_REASONING) return json_pack("{s:s, s:o}", "type", "reasoning_text", "text", text);
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text", text, "annotations", "logprobs");
}

static void open_new(resp_job *j, item_kind kind, const char *call_id, const char *name) {
    static const char *const prefix[] = {"", "msg_", "rs_", "fc_"};
    open_item *it = &j->cur;
    it->kind = kind;
    it->output_index = (int)json_array_size(j->output);
    srv_random_id(prefix[kind], it->id, sizeof it->id);
    if (kind == ITEM_CALL) {
        it->call_id = em_strdup(call_id ? call_id : "");
        it->name = em_strdup(name ? name : "");
    }
    send_event(j, "response.output_item.added",
               json_pack("{s:i, s:o}", "output_index", it->output_index, "item", item_added_json(it)));
    if (kind != ITEM_CALL)
        send_event(j, "response.content_part.added",
                   json_pack("{s:s, s:i, s:i, s:o}", "item_id", it->id, "output_index", it->output_index,
                             "content_index", 0, "part", part_json(it, true)));
}

/* Closes the open item (if any): its .done events, then into `output`. */
static void close_item(resp_job *j, const char *status) {
    open_item *it = &j->cur;
    if (it->kind == ITEM_NONE) return;
    const char *text = it->text.data ? it->text.data : "";
    if (it->kind == ITEM_CALL) {
        send_event(j, "response.function_call_arguments.done",
                   json_pack("{s:s, s:i, s:s, s:o}", "item_id", it->id, "output_index", it->output_index, "name",
                             it->name ? it->name : "", "arguments", oai_json_text(text, it->text.len)));
    } else {
        bool msg = it->kind == ITEM_MESSAGE;
        json_t *done = json_pack("{s:s, s:i, s:i, s:o}", "item_id", it->id, "output_index", it->output_index,
                                 "content_index", 0, "text", oai_json_text(text, it->text.len));
        if (done && msg) json_object_set_new(done, "logprobs", json_array());
        send_event(j, msg ? "response.output_text.done" : "response.reasoning_text.done", done);
        send_event(j, "response.content_part.done",
                   json_pack("{s:s, s:i, s:i, s:o}", "item_id", it->id, "output_index", it->output_index,
                             "content_index", 0, "part", part_json(it, false)));
    }
    json_t *item = item_json(it, status);
    if (item) send_event(j, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", it->output_index, "item", item));
    if (!item || json_array_append_new(j->output, item)) {
        snprintf(j->error, sizeof j->error, "out of memory building the response");
        j->failed = true;
    }
    item_reset(it);
}

static void ensure_open(resp_job *j, item_kind kind) {
    if (j->cur.kind == kind) return;
    close_item(j, "completed");
    open_new(j, kind, NULL, NULL);
}

static bool add_text(resp_job *j, const em_event *ev) {
    if (!oai_buf_add(&j->cur.text, ev->text, ev->len)) return false;
    const char *type = j->cur.kind == ITEM_MESSAGE ? "response.output_text.delta"
                       : j->cur.kind == ITEM_REASONING ? "response.reasoning_text.delta"
                                                       : "response.function_call_arguments.delta";
    if (!j->o.stream) return true;
    json_t *d = json_pack("{s:s, s:i, s:o}", "item_id", j->cur.id, "output_index", j->cur.output_index, "delta",
                          oai_json_text(ev->text, ev->len));
    if (d && j->cur.kind != ITEM_CALL) json_object_set_new(d, "content_index", json_integer(0));
    if (d && j->cur.kind == ITEM_MESSAGE) json_object_set_new(d, "logprobs", json_array());
    send_event(j, type, d);
    return true;
}

static int resp_on_event(void *user, const em_event *ev) {
    resp_job *j = user;
    bool ok = true;
    switch (ev->kind) {
    case EM_EVENT_REASONING:
        ensure_open(j, ITEM_REASONING);
        ok = add_text(j, ev);
        break;
    case EM_EVENT_CONTENT:
        ensure_open(j, ITEM_MESSAGE);
        ok = add_text(j, ev);
        break;
    case EM_EVENT_TOOL_START:
        close_item(j, "completed");
        open_new(j, ITEM_CALL, ev->tool_id, ev->tool_name);
        break;
    case EM_EVENT_TOOL_ARGS:
        if (j->cur.kind == ITEM_CALL) ok = add_text(j, ev);
        break;
    case EM_EVENT_TOOL_END: close_item(j, "completed"); break;
    case EM_EVENT_FINISH:
        j->reason = ev->reason;
        j->finished = true;
        j->usage.completion_tokens += ev->usage.completion_tokens;
        j->usage.reasoning_tokens += ev->usage.reasoning_tokens;
        if (ev->usage.cached_tokens > j->usage.cached_tokens) j->usage.cached_tokens = ev->usage.cached_tokens;
        metrics_generation(j->srv->metrics, ev->usage.prompt_tokens, ev->usage.completion_tokens,
                           ev->usage.ttft_seconds, ev->usage.itl, ev->usage.n_itl);
        break;
    case EM_EVENT_ERROR:
        metrics_generation_error(j->srv->metrics);
        snprintf(j->error, sizeof j->error, "%.*s", (int)ev->len, ev->text);
        j->failed = true;
        break;
    }
    if (!ok) {
        snprintf(j->error, sizeof j->error, "out of memory collecting the reply");
        j->failed = true;
        j->base.cancel = 1;
    }
    return j->base.cancel;
}

/* ---- running ----------------------------------------------------------------- */

static void store_response(resp_job *j) {
    json_t *rec = json_pack("{s:O, s:O, s:O}", "response", j->final, "input", j->o.input, "context", j->context);
    em_status st = rec ? resp_store_put(j->srv->responses, j->id, rec) : EM_ERR_NOMEM;
    if (st != EM_OK) EM_LOGW("response %s was not stored: %s", j->id, rec ? em_last_error() : "out of memory");
    json_decref(rec);
}

static void resp_run(srv_job *base) {
    resp_job *j = (resp_job *)base;
    send_lifecycle(j, "response.created", "in_progress");
    send_lifecycle(j, "response.in_progress", "in_progress");
    em_session_opts so = {.choice = 0, .cancel = &base->cancel, .t_start = j->t_arrival, .on_event = resp_on_event,
                          .user = j};
    if (em_session_run(j->model, &j->req, &j->prompt, &so) != EM_OK && !j->error[0])
        snprintf(j->error, sizeof j->error, "%s", em_last_error());
    if (j->error[0]) j->failed = true;
    if (base->cancel && !j->failed) return; /* the client left: nobody to answer, nothing to keep */
    bool cut = !j->failed && j->reason == EM_REASON_LENGTH;
    close_item(j, cut ? "incomplete" : "completed");
    const char *status = j->failed ? "failed" : cut ? "incomplete" : "completed";
    j->final = response_json(j, status);
    if (j->final && j->o.store) store_response(j);
    if (j->final && j->o.stream)
        send_event(j, j->failed ? "response.failed" : cut ? "response.incomplete" : "response.completed",
                   json_pack("{s:O}", "response", j->final));
}

/* ---- POST /v1/responses --------------------------------------------------------- */

static void reply_not_found(srv_response *resp, const char *param, const char *what, const char *id) {
    srv_reply_error(resp, 404, "invalid_request_error", param, "not_found", "%s with id '%.100s' not found.", what, id);
}

/* The conversation before a stored response's output continues it:
 * its earlier items, its input, its output. New reference, or NULL. */
static json_t *continuation(json_t *rec) {
    json_t *all = json_array();
    json_t *parts[] = {json_object_get(rec, "context"), json_object_get(rec, "input"),
                       json_object_get(json_object_get(rec, "response"), "output")};
    for (size_t i = 0; all && i < 3; i++)
        if (json_is_array(parts[i]) && json_array_extend(all, parts[i])) {
            json_decref(all);
            all = NULL;
        }
    return all;
}

/* Fills j from the body; replies and returns false on a bad request. */
static bool resp_prepare(resp_job *j, srv_request *req, json_t *body, srv_response *resp) {
    oai_error e = {0};
    if (!oai_responses_parse(body, em_model_name(j->model), &j->req, &j->o, &e)) {
        oai_reply_error(resp, &e);
        return false;
    }
    if (!oai_request_config(req, resp, j->model, &j->req.config)) return false;
    if (j->o.previous_response_id) {
        json_t *rec = resp_store_get(j->srv->responses, j->o.previous_response_id);
        if (!rec) {
            srv_reply_error(resp, 404, "invalid_request_error", "previous_response_id", "previous_response_not_found",
                            "Previous response with id '%.100s' not found.", j->o.previous_response_id);
            return false;
        }
        j->context = continuation(rec);
        json_decref(rec);
    } else {
        j->context = json_array();
    }
    if (!j->context || !(j->output = json_array())) {
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    if (!oai_responses_build_messages(&j->o, j->context, &j->req, &e)) {
        oai_reply_error(resp, &e);
        return false;
    }
    em_status st = em_prompt_build(j->model, &j->req, &j->prompt);
    if (st != EM_OK) {
        srv_reply_status(resp, st, st == EM_ERR_LIMIT ? "input" : NULL);
        return false;
    }
    j->usage.prompt_tokens = j->prompt.n_ids;
    return true;
}

void openai_responses_create(srv_request *req, srv_response *resp) {
    json_t *body = oai_parse_body(req, resp);
    if (!body) return;
    resp_job *j = em_calloc(1, sizeof *j);
    if (!j) {
        json_decref(body);
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    srv_job_init(&j->base, resp_run, resp_destroy);
    em_request_init(&j->req);
    j->srv = req->srv;
    j->model = srv_model(req->srv);
    j->t_arrival = req->t_arrival;
    j->created = (json_int_t)time(NULL);
    srv_random_id("resp_", j->id, sizeof j->id);
    bool ok = resp_prepare(j, req, body, resp);
    json_decref(body);
    if (!ok) {
        srv_job_unref(&j->base);
        return;
    }
    if (!oai_submit(req, resp, &j->base, j->o.stream)) return;
    if (!j->final) srv_reply_error(resp, 500, "server_error", NULL, NULL, "%s", j->error[0] ? j->error : "the generation was cancelled");
    else srv_reply_json(resp, 200, json_incref(j->final));
    srv_job_unref(&j->base);
}

/* ---- GET / DELETE /v1/responses/{id} ---------------------------------------------- */

/* Splits "/v1/responses/ID[/input_items]" into id (copied into buf) and
 * whether input_items was asked; false for any other shape. */
static bool split_path(const char *path, char *buf, size_t size, bool *items) {
    const char *p = path + strlen("/v1/responses/");
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    *items = slash && !strcmp(slash, "/input_items");
    if (n == 0 || n >= size || (slash && !*items)) return false;
    memcpy(buf, p, n);
    buf[n] = 0;
    return true;
}

/* GET .../input_items: the items the model saw as input (earlier turns
 * and this request's), as a cursor page. Query: order (desc default),
 * limit (1..100, 20), after (an item id). */
static void input_items(srv_request *req, srv_response *resp, json_t *rec) {
    json_t *all = json_array();
    json_array_extend(all, json_object_get(rec, "context"));
    json_array_extend(all, json_object_get(rec, "input"));
    const char *order = http_query(req, "order"), *lim = http_query(req, "limit"), *after = http_query(req, "after");
    if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
        json_decref(all);
        srv_reply_error(resp, 400, "invalid_request_error", "order", "invalid_value", "order must be 'asc' or 'desc'");
        return;
    }
    char *end = NULL;
    long limit = lim ? strtol(lim, &end, 10) : 20;
    if (lim && (*end || limit < 1 || limit > 100)) {
        json_decref(all);
        srv_reply_error(resp, 400, "invalid_request_error", "limit", "invalid_value", "limit must be an integer in [1, 100]");
        return;
    }
    bool desc = !order || !strcmp(order, "desc");
    size_t n = json_array_size(all), start = 0;
    json_t *data = json_array();
    for (size_t k = 0; after && k < n; k++) {
        json_t *it = json_array_get(all, desc ? n - 1 - k : k);
        if (!strcmp(json_string_value(json_object_get(it, "id")) ? json_string_value(json_object_get(it, "id")) : "", after)) {
            start = k + 1;
            break;
        }
    }
    size_t k = start;
    for (; k < n && json_array_size(data) < (size_t)limit; k++) json_array_append(data, json_array_get(all, desc ? n - 1 - k : k));
    json_t *first = json_object_get(json_array_get(data, 0), "id");
    json_t *last = json_object_get(json_array_get(data, json_array_size(data) ? json_array_size(data) - 1 : 0), "id");
    srv_reply_json(resp, 200,
                   json_pack("{s:s, s:o, s:O?, s:O?, s:b}", "object", "list", "data", data, "first_id", first, "last_id",
                             last, "has_more", k < n));
    json_decref(all);
}

void openai_responses_get(srv_request *req, srv_response *resp) {
    char id[80];
    bool items;
    if (!split_path(req->path, id, sizeof id, &items)) {
        srv_reply_error(resp, 404, "invalid_request_error", NULL, "not_found", "no route for GET %s", req->path);
        return;
    }
    json_t *rec = resp_store_get(req->srv->responses, id);
    if (!rec) {
        reply_not_found(resp, NULL, "Response", id);
        return;
    }
    if (items) input_items(req, resp, rec);
    else srv_reply_json(resp, 200, json_incref(json_object_get(rec, "response")));
    json_decref(rec);
}

void openai_responses_delete(srv_request *req, srv_response *resp) {
    char id[80];
    bool items;
    if (!split_path(req->path, id, sizeof id, &items) || items) {
        srv_reply_error(resp, 404, "invalid_request_error", NULL, "not_found", "no route for DELETE %s", req->path);
        return;
    }
    if (!resp_store_delete(req->srv->responses, id)) {
        reply_not_found(resp, NULL, "Response", id);
        return;
    }
    srv_reply_json(resp, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", true));
}
