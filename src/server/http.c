/* http.c — libmicrohttpd glue: listening, request bodies, limits, turning
 * srv_response records into HTTP responses, SSE streaming and shutdown.
 *
 * Threading: MHD runs one thread per connection, so a handler may block
 * (waiting for a non-streaming generation) and the SSE reader callback may
 * wait for the next bytes of its job. Both poll the client's socket between
 * waits so a client that hangs up cancels its generation at once.
 * Limits: a connection cap, an idle timeout (slow or stalled clients), a
 * deadline for the whole request body, and a body-size cap answered with
 * 413 as soon as it is exceeded. */
#include "server/server.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/spin.h"
#include "base/timer.h"
#include "server/anthropic.h"
#include "server/metrics.h"
#include "server/response_store.h"
#include "server/sse.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

void srv_config_defaults(srv_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->max_concurrency = 4;
    c->queue = 64;
    c->max_connections = 256;
    c->max_body = 8u << 20;
    c->idle_timeout_s = 30;
    c->upload_timeout_s = 60;
    c->shutdown_grace_s = 10;
    c->response_store_ttl_s = 24 * 3600;
    c->response_store_bytes = 256u << 20;
}

typedef struct conn_state {
    char *body;
    size_t len, cap;
    bool rejected; /* an early response (413) was queued */
    double t_arrival;
} conn_state;

const char *http_header(const srv_request *r, const char *name) {
    return MHD_lookup_connection_value((struct MHD_Connection *)r->conn, MHD_HEADER_KIND, name);
}

typedef struct joined {
    const char *name;
    char *text; /* values so far, ", "-separated; NULL on failure */
    bool failed;
} joined;

static enum MHD_Result join_value(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    joined *j = cls;
    if (j->failed || !key || !value || strcasecmp(key, j->name)) return MHD_YES;
    size_t a = j->text ? strlen(j->text) : 0, b = strlen(value);
    char *t = em_realloc(j->text, a + b + 3);
    if (!t) {
        j->failed = true;
        return MHD_NO;
    }
    if (a) memcpy(t + a, ", ", 2), a += 2;
    memcpy(t + a, value, b + 1);
    j->text = t;
    return MHD_YES;
}

char *http_header_joined(const srv_request *r, const char *name, bool *oom) {
    joined j = {name, NULL, false};
    MHD_get_connection_values((struct MHD_Connection *)r->conn, MHD_HEADER_KIND, join_value, &j);
    if (j.failed) {
        free(j.text);
        j.text = NULL;
    }
    *oom = j.failed;
    return j.text;
}

static bool conn_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
    char b;
    /* Readable with nothing to read is an orderly close; pipelined bytes are not. */
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

const char *http_query(const srv_request *r, const char *name) {
    return MHD_lookup_connection_value((struct MHD_Connection *)r->conn, MHD_GET_ARGUMENT_KIND, name);
}

bool http_client_gone(const srv_request *r) { return conn_gone((struct MHD_Connection *)r->conn); }

void http_wait_job(const srv_request *r, srv_job *j) {
    while (!srv_job_wait(j, 100))
        if (!j->cancel && http_client_gone(r)) j->cancel = 1;
}

/* ---- SSE ------------------------------------------------------------- */

typedef struct stream_ctx {
    srv_server *srv;
    srv_job *job;
    struct MHD_Connection *conn;
    double t_out;       /* when bytes last went out */
    double keepalive_s; /* the job's interval, shortened to beat the idle timeout */
    bool started;       /* the first event has gone out */
    int spin_reads;     /* reads left that poll before sleeping */
} stream_ctx;

/* The job's keepalive bytes when it has been silent long enough. sse_read
 * returning 0 means every byte written so far has been handed out, and
 * writers append whole events, so this falls between two events. */
static ssize_t keepalive(stream_ctx *sc, char *buf, size_t max) {
    const char *ka = sc->job->keepalive;
    double now = em_now();
    if (!ka || now - sc->t_out < sc->keepalive_s) return 0;
    size_t n = strlen(ka);
    if (n > max) return 0;
    memcpy(buf, ka, n);
    sc->t_out = now;
    return (ssize_t)n;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *sc = cls;
    (void)pos;
    for (;;) {
        /* A stream's first events (a role chunk, then the first token) are
         * what its time to first token waits on: those reads poll. */
        ssize_t n = sse_read(sc->job, buf, max, 100, sc->spin_reads > 0 ? 4 * em_spin_window() : 0);
        if (n > 0) {
            sc->spin_reads--;
            sc->t_out = em_now();
            if (!sc->started && sc->job->t_queued > 0)
                EM_LOGD("http: a stream's first %zd bytes go out %.2f ms after its job was queued", n,
                        (sc->t_out - sc->job->t_queued) * 1e3);
            sc->started = true;
            return n;
        }
        if (n < 0) return MHD_CONTENT_READER_END_OF_STREAM;
        if (conn_gone(sc->conn)) {
            sc->job->cancel = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if ((n = keepalive(sc, buf, max)) > 0) return n;
    }
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    sc->job->cancel = 1; /* no-op when it already finished */
    srv_job_unref(sc->job);
    atomic_fetch_sub(&sc->srv->open_streams, 1);
    free(sc);
}

/* ---- responses -------------------------------------------------------- */

static void add_common_headers(srv_server *s, struct MHD_Response *resp, const srv_response *r) {
    if (s->cfg.cors_origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cfg.cors_origin);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        if (strcmp(s->cfg.cors_origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    }
    if (r->allow) MHD_add_response_header(resp, "Allow", r->allow);
    if (r->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", r->retry_after);
        MHD_add_response_header(resp, "Retry-After", v);
    }
    if (r->status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
}

static enum MHD_Result send_reply(srv_server *s, struct MHD_Connection *c, srv_response *r, const char *route) {
    struct MHD_Response *resp;
    if (r->stream) {
        stream_ctx *sc = malloc(sizeof *sc);
        if (!sc) {
            srv_job_unref(r->stream);
            return MHD_NO;
        }
        sc->srv = s;
        sc->job = r->stream;
        sc->conn = c;
        sc->t_out = em_now();
        sc->started = false;
        sc->spin_reads = 2;
        /* A connection silent for idle_timeout_s is closed by the HTTP
         * library even while its reply streams: ping well within it. */
        sc->keepalive_s = sc->job->keepalive_s;
        if (s->cfg.idle_timeout_s > 0 && sc->keepalive_s > s->cfg.idle_timeout_s / 2.0)
            sc->keepalive_s = s->cfg.idle_timeout_s / 2.0;
        atomic_fetch_add(&s->open_streams, 1);
        r->stream = NULL;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, sc, stream_free);
        if (!resp) {
            stream_free(sc);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    } else {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp) return MHD_NO;
        r->body = NULL;
        if (r->content_type) MHD_add_response_header(resp, "Content-Type", r->content_type);
    }
    add_common_headers(s, resp, r);
    metrics_request(s->metrics, route ? route : "other", r->status);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* An early error, in the shape of the protocol the path belongs to. */
static enum MHD_Result reject(srv_server *s, struct MHD_Connection *c, const char *url, int status, const char *fmt) {
    srv_response r = {0};
    if (!strncmp(url, "/v1/messages", 12)) ant_reply_error(&r, status, "%s", fmt);
    else srv_reply_error(&r, status, "invalid_request_error", NULL, status == 413 ? "request_too_large" : NULL,
                         "%s", fmt);
    enum MHD_Result ok = send_reply(s, c, &r, "other");
    free(r.body);
    return ok;
}

/* ---- the request callback -------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_server *s = cls;
    (void)version;
    conn_state *cs = *con_cls;
    if (!cs) { /* first call: headers only */
        cs = em_calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        cs->t_arrival = em_now();
        *con_cls = cs;
        /* Token chunks are small: without this, Nagle's algorithm and the
         * client's delayed ACK hold each one back ~40 ms. */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        int one = 1;
        if (ci) setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
            cs->rejected = true;
            return reject(s, c, url, 413, "the request body is larger than the server accepts");
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (cs->rejected) {
            *upload_size = 0;
            return MHD_YES;
        }
        if (em_now() - cs->t_arrival > s->cfg.upload_timeout_s) return MHD_NO; /* slow body: drop */
        size_t need;
        if (!em_add(cs->len, *upload_size, &need) || need > s->cfg.max_body) {
            cs->rejected = true;
            *upload_size = 0;
            return reject(s, c, url, 413, "the request body is larger than the server accepts");
        }
        if (!em_grow((void **)&cs->body, &cs->cap, need + 1, 1)) return MHD_NO;
        memcpy(cs->body + cs->len, upload, *upload_size);
        cs->len = need;
        cs->body[cs->len] = 0;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->rejected) return MHD_YES;
    srv_request req = {.srv = s, .method = method, .path = url, .body = cs->body ? cs->body : "",
                       .body_len = cs->len, .t_arrival = cs->t_arrival, .conn = c};
    srv_response resp = {0};
    srv_route(&req, &resp);
    enum MHD_Result ok = send_reply(s, c, &resp, req.route);
    free(resp.body);
    if (resp.stream) srv_job_unref(resp.stream);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    conn_state *cs = *con_cls;
    if (!cs) return;
    free(cs->body);
    free(cs);
    *con_cls = NULL;
}

/* ---- lifecycle -------------------------------------------------------- */

em_status srv_start(const srv_config *cfg, srv_server **out) {
    srv_server *s = em_calloc(1, sizeof *s);
    if (!s) return em_fail(EM_ERR_NOMEM, "server: out of memory");
    s->cfg = *cfg;
    s->t_start = em_now();
    atomic_store(&s->state, SRV_LOADING);
    s->metrics = metrics_new();
    s->sched = sched_new(cfg->max_concurrency, cfg->queue);
    if (!s->metrics || !s->sched) {
        metrics_free(s->metrics);
        sched_free(s->sched);
        free(s);
        return em_fail(EM_ERR_NOMEM, "server: cannot create the scheduler");
    }
    resp_store_config rc = {.ttl_s = cfg->response_store_ttl_s, .max_bytes = cfg->response_store_bytes,
                            .dir = cfg->response_store_dir};
    em_status rst = resp_store_open(&rc, &s->responses);
    if (rst != EM_OK) {
        srv_stop(s);
        return rst;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cfg->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        srv_stop(s);
        return em_fail(EM_ERR_INVALID, "--host %s: not an IPv4 or IPv6 address", cfg->host);
    }
    s->daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &ss,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_LISTEN_BACKLOG_SIZE, 256,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        srv_stop(s);
        return em_fail(EM_ERR_IO, "cannot listen on %s port %d (in use, or not permitted)", cfg->host, cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return EM_OK;
}

void srv_set_model(srv_server *s, em_model *m) {
    atomic_store(&s->model, m);
    atomic_store(&s->state, SRV_READY);
}

void srv_set_failed(srv_server *s) { atomic_store(&s->state, SRV_FAILED); }

em_model *srv_model(const srv_server *s) {
    return atomic_load(&s->state) == SRV_READY ? atomic_load(&((srv_server *)s)->model) : NULL;
}

void srv_stop(srv_server *s) {
    if (!s) return;
    atomic_store(&s->state, SRV_DRAINING);
    if (s->daemon) {
        MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
        if (lfd != MHD_INVALID_SOCKET) close(lfd);
    }
    if (s->sched) {
        sched_close(s->sched);
        if (!sched_wait_idle(s->sched, s->cfg.shutdown_grace_s)) {
            EM_LOGW("shutdown: cancelling %d running and %d queued requests", sched_running(s->sched),
                    sched_queued(s->sched));
            sched_cancel_all(s->sched);
            sched_wait_idle(s->sched, 5);
        }
    }
    /* Finished streams get a moment to flush their last bytes to clients. */
    for (int i = 0; i < 40 && atomic_load(&s->open_streams) > 0; i++) usleep(50 * 1000);
    /* Connections still open (keep-alive, streams) end here. */
    if (s->daemon) MHD_stop_daemon(s->daemon);
    sched_free(s->sched);
    metrics_free(s->metrics);
    resp_store_free(s->responses);
    free(s);
}
