/* openai_responses.h — OpenAI Responses API request parsing (exposed for the
 * fuzz harness and unit tests; the routes are in routes.h).
 *
 * A request is parsed in two steps because its conversation may continue a
 * stored response: oai_responses_parse reads the body (options, and the
 * request's own input items normalised to the item shapes OpenAI stores and
 * returns), then — once the caller has fetched the items that preceded it
 * from the store — oai_responses_build_messages turns instructions + earlier
 * items + input items into the internal request's messages. */
#ifndef EMBER_SERVER_OPENAI_RESPONSES_H
#define EMBER_SERVER_OPENAI_RESPONSES_H

#include "server/openai_params.h"

typedef struct oai_resp_opts {
    bool stream;
    bool store;                 /* default true */
    json_t *input;              /* own input items, normalised, each with an "id" (new reference) */
    char *previous_response_id; /* malloc'd or NULL */
    json_t *instructions;       /* string or null (new reference) */
    json_t *tools;              /* the tools as the client gave them, for the echo (new reference; [] when absent) */
    json_t *tool_choice;        /* echo: "auto" / "none" (new reference) */
    json_t *metadata;           /* object (new reference; {} when absent) */
    json_t *reasoning;          /* echo {"effort", "summary"} (new reference) */
    json_t *temperature, *top_p, *max_output_tokens; /* echo: number or null (new references) */
} oai_resp_opts;

void oai_resp_opts_free(oai_resp_opts *o);

/* Reads a /v1/responses body into req (settings and tools; no messages yet)
 * and o (zeroed by the caller; freed by the caller either way). Returns
 * false with e filled for a bad request. */
bool oai_responses_parse(json_t *body, const char *served_model, em_request *req, oai_resp_opts *o, oai_error *e);

/* Appends to req: instructions (a system message), then the messages of
 * the items in `earlier` (may be NULL) and in o->input. Reasoning items are
 * dropped; function_call items become assistant tool calls and
 * function_call_output items tool messages. False with e filled when an
 * item cannot be replayed. */
bool oai_responses_build_messages(const oai_resp_opts *o, json_t *earlier, em_request *req, oai_error *e);

#endif
