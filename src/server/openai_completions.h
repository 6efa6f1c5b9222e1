/* openai_completions.h — OpenAI (legacy) Completions request parsing,
 * exposed for the fuzz harness; the route is in routes.h. */
#ifndef EMBER_SERVER_OPENAI_COMPLETIONS_H
#define EMBER_SERVER_OPENAI_COMPLETIONS_H

#include "server/openai_params.h"

/* A /v1/completions body may hold several prompts; each becomes one
 * internal request (a copy of the shared fields with its own prompt).
 * *reqs is a malloc'd array of *n initialised requests, owned by the caller
 * (em_request_free each, then free) — also on failure, where *n counts the
 * ones to free. */
bool oai_completions_parse(json_t *body, const char *served_model, int vocab, em_request **reqs, size_t *n,
                           oai_stream_opts *so, oai_error *e);

#endif
