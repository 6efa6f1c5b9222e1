/* routes.h — the route handlers the router dispatches to. Each fills resp
 * (see server.h); "model" handlers run only once the model is loaded. */
#ifndef EMBER_SERVER_ROUTES_H
#define EMBER_SERVER_ROUTES_H

#include "server/server.h"

void route_webui(srv_request *req, srv_response *resp);           /* GET / */
void route_health(srv_request *req, srv_response *resp);          /* GET /health */
void route_stats(srv_request *req, srv_response *resp);           /* GET /stats */
void route_metrics(srv_request *req, srv_response *resp);         /* GET /metrics */
void openai_models_list(srv_request *req, srv_response *resp);    /* GET /v1/models */
void openai_models_get(srv_request *req, srv_response *resp);     /* GET /v1/models/{id} */
void openai_chat_completions(srv_request *req, srv_response *resp); /* POST /v1/chat/completions */
void openai_completions(srv_request *req, srv_response *resp);    /* POST /v1/completions */
void openai_responses_create(srv_request *req, srv_response *resp); /* POST /v1/responses */
void openai_responses_get(srv_request *req, srv_response *resp);  /* GET /v1/responses/{id}[/input_items] */
void openai_responses_delete(srv_request *req, srv_response *resp); /* DELETE /v1/responses/{id} */
void anthropic_messages(srv_request *req, srv_response *resp);    /* POST /v1/messages */
void anthropic_count_tokens(srv_request *req, srv_response *resp); /* POST /v1/messages/count_tokens */
void anthropic_not_found(srv_request *req, srv_response *resp);   /* POST /v1/messages/... (404) */

#endif
