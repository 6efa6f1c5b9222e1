/* openai_common.h — pieces Chat Completions and Completions share: JSON
 * text from model output, logprob records, usage objects, text
 * accumulation, and handing a job to the scheduler. */
#ifndef EMBER_SERVER_OPENAI_COMMON_H
#define EMBER_SERVER_OPENAI_COMMON_H

#include "engine/events.h"
#include "server/openai_params.h"
#include "server/server.h"

#include <jansson.h>

/* A JSON string from model text; invalid UTF-8 bytes become U+FFFD
 * (never NULL for valid input; NULL only on OOM). New reference. */
json_t *oai_json_text(const char *s, size_t len);

/* {"token", "logprob", "bytes", "top_logprobs": [...]} (Chat Completions). */
json_t *oai_chat_logprob(em_model *m, const em_token_logprob *lp);
/* A log-probability as JSON (-inf, which JSON cannot hold, becomes -9999). */
json_t *oai_logprob_value(float lp);

typedef struct oai_usage_acc {
    size_t prompt_tokens, completion_tokens, reasoning_tokens;
    size_t cached_tokens; /* prompt tokens reused from the prefix cache */
} oai_usage_acc;
/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", ...} */
json_t *oai_usage_json(const oai_usage_acc *u);
/* Adds a FINISH event's usage to the accumulator. */
void oai_usage_add(oai_usage_acc *u, const em_event *finish);

typedef struct oai_buf {
    char *data;
    size_t len, cap;
} oai_buf;
bool oai_buf_add(oai_buf *b, const char *s, size_t len);
void oai_buf_free(oai_buf *b);

/* The request's configuration (X-Ember-Config over the model's snapshot)
 * into *out (a new reference); on a bad header replies 400 (param
 * "X-Ember-Config", code "invalid_config") and returns false. */
bool oai_request_config(srv_request *req, srv_response *resp, em_model *m, em_config **out);

/* Replies with the error e (OpenAI shape). */
void oai_reply_error(srv_response *resp, const oai_error *e);

/* Parses the request body as a JSON object; on failure replies 400 and
 * returns NULL. New reference. */
json_t *oai_parse_body(const srv_request *req, srv_response *resp);

/* Submits j: streaming → resp streams j's pipe; otherwise waits for j and
 * returns true so the caller builds the reply. Replies 429/503 itself and
 * returns false when the job could not be queued. Consumes the caller's
 * reference to j in every case except a true return (caller unrefs). */
bool oai_submit(srv_request *req, srv_response *resp, srv_job *j, bool stream);

/* Seconds of silence after which a stream gets a keepalive comment. */
#define OAI_KEEPALIVE_S 15.0

/* The "system_fingerprint" of every reply. */
#define OAI_FINGERPRINT "ember-" EMBER_VERSION_STRING

#endif
