/* server.h — the HTTP server: configuration, shared state, and the request
 * and response records that route handlers work with.
 *
 * http.c owns libmicrohttpd; handlers (router.c, openai_*.c, stats.c...)
 * see only srv_request / srv_response, so a protocol file never touches the
 * HTTP library. The model is loaded after the server starts listening:
 * /health answers 503 until srv_set_model publishes it. */
#ifndef EMBER_SERVER_SERVER_H
#define EMBER_SERVER_SERVER_H

#include "ember/ember.h"
#include "server/job.h"
#include "server/scheduler.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_config {
    const char *host;          /* "127.0.0.1"; IPv6 literals allowed */
    int port;                  /* 0: any free port (see srv_port) */
    const char *api_key;       /* NULL: no authentication */
    const char *cors_origin;   /* NULL: no CORS headers */
    int max_concurrency;       /* generations in flight */
    int queue;                 /* generations waiting beyond those */
    int max_connections;
    size_t max_body;           /* bytes of a request body */
    int idle_timeout_s;        /* an idle / stalled connection is closed after this */
    int upload_timeout_s;      /* a request body must arrive within this */
    int shutdown_grace_s;      /* in-flight work gets this long at shutdown */
    double response_store_ttl_s;     /* stored Responses live this long (<= 0: until evicted) */
    size_t response_store_bytes;     /* cap on the stored Responses' total size (0: none) */
    const char *response_store_dir;  /* persist stored Responses here (NULL: memory only) */
} srv_config;

/* Defaults for every field (loopback, port 8080, 4 in flight, 64 queued...). */
void srv_config_defaults(srv_config *c);

typedef enum srv_state { SRV_LOADING = 0, SRV_READY, SRV_DRAINING, SRV_FAILED } srv_state;

typedef struct srv_metrics srv_metrics;
typedef struct resp_store resp_store;

typedef struct srv_server {
    srv_config cfg;
    struct MHD_Daemon *daemon;
    _Atomic(em_model *) model;
    atomic_int state;
    srv_sched *sched;
    srv_metrics *metrics;
    double t_start;
    int port;                  /* the bound port */
    atomic_int open_streams;   /* SSE responses not yet finished */
    resp_store *responses;     /* stored Responses API objects (response_store.h) */
} srv_server;

typedef struct srv_request {
    srv_server *srv;
    const char *method;
    const char *path;
    const char *body;          /* NUL-terminated, body_len bytes */
    size_t body_len;
    double t_arrival;
    const char *route;         /* set by the router: the metrics label */
    void *conn;                /* the HTTP connection (http.c only) */
} srv_request;

typedef struct srv_response {
    int status;
    char *body;                /* malloc'd, owned by the response */
    size_t len;
    const char *content_type;  /* static string */
    srv_job *stream;           /* SSE: the reply is this job's pipe (one reference owned) */
    const char *allow;         /* 405: the Allow header */
    int retry_after;           /* seconds, for 429 / 503; 0: none */
} srv_response;

/* Starts listening (the model may still be loading). *out owned by the
 * caller; stop with srv_stop. */
em_status srv_start(const srv_config *cfg, srv_server **out);
/* Publishes the loaded model (the server borrows it) or a failed load. */
void srv_set_model(srv_server *s, em_model *m);
void srv_set_failed(srv_server *s);
/* Graceful stop: stop accepting, let in-flight generations finish within
 * cfg.shutdown_grace_s, cancel what is left, close every connection, free. */
void srv_stop(srv_server *s);
em_model *srv_model(const srv_server *s); /* NULL until ready */

/* ---- helpers for handlers (http.c) ---------------------------------- */
/* A request header, or NULL. */
const char *http_header(const srv_request *r, const char *name);
/* Every value of a request header that may repeat, joined with ", " as
 * HTTP joins repeated fields (malloc'd, caller frees), or NULL when absent;
 * *oom tells a failed allocation from an absent header. */
char *http_header_joined(const srv_request *r, const char *name, bool *oom);
/* A URL query argument ("?name=value"), or NULL. */
const char *http_query(const srv_request *r, const char *name);
/* True when the client has closed its connection. */
bool http_client_gone(const srv_request *r);
/* Waits for a non-streaming job, cancelling it if the client leaves. */
void http_wait_job(const srv_request *r, srv_job *j);

/* ---- responses (errors.c) ------------------------------------------- */
/* Sets a JSON body (takes ownership of obj; may be NULL → 500). */
void srv_reply_json(srv_response *r, int status, json_t *obj);
/* An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
 * param and code may be NULL. */
void srv_reply_error(srv_response *r, int status, const char *type, const char *param, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Maps a failure status from the engine to an HTTP error (400/413/500...). */
void srv_reply_status(srv_response *r, em_status st, const char *param);
/* An id like "chatcmpl-3f9a..." (24 random hex digits) into buf. */
void srv_random_id(const char *prefix, char *buf, size_t size);

/* ---- per-request configuration (request_config.c) ---------------------- */
/* The header that carries a request's configuration overrides. */
#define SRV_CONFIG_HEADER "X-Ember-Config"
/* The snapshot of one request: the model's configuration with the
 * overrides of its X-Ember-Config header(s) (see docs/configuration.md).
 * EM_OK with *out a new reference (caller releases); on a bad header
 * EM_ERR_INVALID with a message naming the variable. */
em_status srv_request_config(const srv_request *req, em_model *m, em_config **out);

/* ---- auth (auth.c) --------------------------------------------------- */
/* True when no key is configured or the request carries it
 * ("Authorization: Bearer KEY" or "x-api-key: KEY"); constant-time compare. */
bool srv_authorized(const srv_request *r);

/* ---- routing (router.c) ---------------------------------------------- */
void srv_route(srv_request *req, srv_response *resp);

#endif
