/* router.c — maps method + path to a handler, applying authentication and
 * the "model loaded" precondition; 404 for unknown paths, 405 for a known
 * path with the wrong method, 204 for CORS preflight. */
#include "server/routes.h"

#include <string.h>

typedef void (*route_fn)(srv_request *, srv_response *);

typedef struct route {
    const char *method;
    const char *path;  /* exact, or a prefix when it ends with '/' */
    route_fn fn;
    bool auth;         /* needs the API key */
    bool model;        /* needs the model loaded */
} route;

static const route routes[] = {
    {"GET", "/", route_webui, false, false},
    {"GET", "/health", route_health, false, false},
    {"GET", "/stats", route_stats, true, false},
    {"GET", "/metrics", route_metrics, true, false},
    {"GET", "/v1/models", openai_models_list, true, true},
    {"GET", "/v1/models/", openai_models_get, true, true},
    {"POST", "/v1/chat/completions", openai_chat_completions, true, true},
    {"POST", "/v1/completions", openai_completions, true, true},
    {"POST", "/v1/responses", openai_responses_create, true, true},
    {"GET", "/v1/responses/", openai_responses_get, true, false},
    {"DELETE", "/v1/responses/", openai_responses_delete, true, false},
    {"POST", "/v1/messages", anthropic_messages, false, false}, /* checks key and model itself (Anthropic errors) */
    {"POST", "/v1/messages/count_tokens", anthropic_count_tokens, false, false},
    {"POST", "/v1/messages/", anthropic_not_found, false, false},
};

static bool path_matches(const route *r, const char *path) {
    size_t n = strlen(r->path);
    if (n > 1 && r->path[n - 1] == '/') return !strncmp(path, r->path, n) && path[n];
    return !strcmp(path, r->path);
}

void srv_route(srv_request *req, srv_response *resp) {
    const route *hit = NULL;
    bool path_known = false;
    /* The Allow header: the methods of every route on this path (bits: GET 1, POST 2, DELETE 4). */
    static const char *const allow[] = {"OPTIONS", "GET, OPTIONS", "POST, OPTIONS", "GET, POST, OPTIONS",
                                        "DELETE, OPTIONS", "GET, DELETE, OPTIONS", "POST, DELETE, OPTIONS",
                                        "GET, POST, DELETE, OPTIONS"};
    unsigned methods = 0;
    const char *allow_hdr = NULL;
    req->route = "other";
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (!path_matches(&routes[i], req->path)) continue;
        path_known = true;
        req->route = routes[i].path;
        methods |= !strcmp(routes[i].method, "GET") ? 1u : !strcmp(routes[i].method, "POST") ? 2u : 4u;
        allow_hdr = allow[methods & 7u];
        if (!strcmp(routes[i].method, req->method) || (!strcmp(req->method, "HEAD") && !strcmp(routes[i].method, "GET"))) {
            hit = &routes[i];
            break;
        }
    }
    if (path_known && !strcmp(req->method, "OPTIONS")) {
        resp->status = 204;
        resp->allow = allow_hdr;
        return;
    }
    if (!hit) {
        if (path_known) {
            resp->allow = allow_hdr;
            srv_reply_error(resp, 405, "invalid_request_error", NULL, "method_not_allowed",
                            "method %s is not allowed on %s", req->method, req->path);
        } else {
            srv_reply_error(resp, 404, "invalid_request_error", NULL, "not_found", "no route for %s %s",
                            req->method, req->path);
        }
        return;
    }
    if (hit->auth && !srv_authorized(req)) {
        srv_reply_error(resp, 401, "invalid_request_error", NULL, "invalid_api_key",
                        "a valid API key is required (Authorization: Bearer KEY)");
        return;
    }
    if (hit->model && !srv_model(req->srv)) {
        bool loading = atomic_load(&req->srv->state) == SRV_LOADING;
        resp->retry_after = loading ? 2 : 0;
        srv_reply_error(resp, 503, "server_error", NULL, loading ? "model_loading" : "unavailable", "%s",
                        loading ? "the model is still loading" : "the server is not serving requests");
        return;
    }
    hit->fn(req, resp);
}
