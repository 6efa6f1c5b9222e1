/* openai_chat.h — OpenAI Chat Completions request parsing (exposed for the
 * fuzz harness and unit tests; the route is in routes.h). */
#ifndef EMBER_SERVER_OPENAI_CHAT_H
#define EMBER_SERVER_OPENAI_CHAT_H

#include "server/openai_params.h"

/* Translates a /v1/chat/completions body into req (initialised by the
 * caller with em_request_init; freed by the caller either way). Returns
 * false with e filled for a bad request. */
bool oai_chat_parse(json_t *body, const char *served_model, int vocab, em_request *req, oai_stream_opts *so,
                    oai_error *e);

#endif
