/* anthropic.h — the Anthropic Messages API: an adapter over the same
 * internal request (engine/request.h) and event stream (engine/events.h)
 * as the OpenAI endpoints.
 *
 *   anthropic_parse.c   request JSON → em_request (messages, system, tools,
 *                       tool_choice, thinking, sampling, stop sequences)
 *   anthropic_stream.c  events → content blocks: the SSE grammar
 *                       (content_block_start / _delta / _stop) or the
 *                       collected blocks of a non-streaming reply
 *   anthropic.c         the routes, the job, errors in Anthropic's shape
 *
 * Routes are in routes.h. */
#ifndef EMBER_SERVER_ANTHROPIC_H
#define EMBER_SERVER_ANTHROPIC_H

#include "engine/events.h"
#include "server/openai_common.h"
#include "server/openai_params.h"
#include "server/server.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- parsing (anthropic_parse.c) -------------------------------------- */

typedef enum ant_mode {
    ANT_MESSAGES,     /* POST /v1/messages: max_tokens required, sampling, stream */
    ANT_COUNT_TOKENS  /* POST /v1/messages/count_tokens: the prompt fields only */
} ant_mode;

/* Translates a request body into req (initialised by the caller with
 * em_request_init; freed by the caller either way). *stream receives the
 * "stream" flag. Returns false with e filled (status 400 or 404, message
 * naming the JSON path) for a bad request. */
bool ant_parse(json_t *body, const char *served_model, ant_mode mode, em_request *req, bool *stream, oai_error *e);

/* ---- the reply's content blocks (anthropic_stream.c) ------------------ */

typedef enum ant_block_kind { ANT_TEXT, ANT_THINKING, ANT_TOOL_USE } ant_block_kind;

typedef struct ant_block {
    ant_block_kind kind;
    oai_buf text;    /* text, thinking, or the tool's JSON input (collected replies only) */
    char *id, *name; /* tool_use */
    uint64_t hash;   /* thinking: running hash of the text, for the signature */
} ant_block;

/* Turns one choice's events into content blocks. Streaming (job != NULL):
 * writes content_block_* events, then message_delta and message_stop (or an
 * error event) to the job's pipe. Collecting (job == NULL): keeps the
 * blocks for ant_message_json. */
typedef struct ant_reply {
    srv_job *job;
    ant_block *blocks;
    int n_blocks;
    bool open;               /* the last block has not been stopped */
    int open_tool;           /* the engine's tool index of an open tool_use block */
    bool finished;           /* FINISH seen */
    em_finish_reason reason;
    char *stop;              /* the stop sequence that ended the reply (owned) */
    size_t input_tokens, output_tokens;
    size_t cached_tokens;    /* of input_tokens, reused from the prefix cache (known at FINISH) */
    bool failed;             /* ERROR seen, or out of memory */
    char error[512];
} ant_reply;

/* Handles one event; false when the reply cannot go on (out of memory,
 * client gone), which should cancel the generation. */
bool ant_reply_event(ant_reply *r, const em_event *ev);
void ant_reply_free(ant_reply *r);
/* The "content" array of a collected reply. New reference (NULL on OOM). */
json_t *ant_content_json(const ant_reply *r);
/* stop_reason for a finish: end_turn, max_tokens, stop_sequence, tool_use. */
const char *ant_stop_reason(em_finish_reason reason, const char *stop);
/* The usage object. As the Messages API counts them, input_tokens are the
 * prompt tokens computed and cache_read_input_tokens those reused from the
 * prefix cache (prompt = both); nothing is written on request, so
 * cache_creation_input_tokens stays 0. */
json_t *ant_usage_json(size_t prompt_tokens, size_t cached_tokens, size_t output_tokens);
/* The tool_use id for an engine call id: "call_X" becomes "toolu_X". */
void ant_tool_id(const char *engine_id, char *buf, size_t size);
/* The signature of a thinking block from its text hash (see anthropic_stream.c). */
void ant_signature(uint64_t hash, char *buf, size_t size);

#define ANT_SIGNATURE_MAX 40
#define ANT_KEEPALIVE_S 15.0

/* ---- errors (anthropic.c) --------------------------------------------- */

/* The Anthropic error type for an HTTP status (400 invalid_request_error,
 * 401 authentication_error, 404 not_found_error, 413 request_too_large,
 * 429 rate_limit_error, 529 overloaded_error, 500 api_error...). */
const char *ant_error_type(int status);
/* {"type":"error","error":{"type","message"}} with the type for status. */
json_t *ant_error_json(int status, const char *message);
void ant_reply_error(srv_response *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
