/* cmd_serve.c — `ember serve MODEL`: the HTTP server.
 *
 * The server listens before the model is loaded (GET /health says 503
 * "loading" until then), loads on a helper thread, and serves until SIGINT
 * or SIGTERM; then it stops accepting, gives in-flight generations a
 * bounded grace period, cancels the rest and exits 0. */
#include "cli/cli.h"

#include "base/log.h"
#include "engine/engine.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: ember serve MODEL [options]\n\n"
            "Serves MODEL over HTTP: /v1/chat/completions, /v1/completions, /v1/models,\n"
            "/v1/messages and /v1/messages/count_tokens (Anthropic), /health, /stats,\n"
            "/metrics and a chat page at /.\n\n"
            "  --host ADDR            address to listen on (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 picks a free one)\n"
            "  --api-key KEY          require \"Authorization: Bearer KEY\" (or \"x-api-key: KEY\")\n"
            "  --max-concurrency N    generations in flight (default 4)\n"
            "  --queue N              requests that may wait beyond those (default 64)\n"
            "  --ctx N                context length (default: the model's)\n"
            "  --threads N            compute threads (default: one per core)\n"
            "  --cors-origin ORIGIN   send CORS headers allowing ORIGIN (or *)\n"
            "  --max-body BYTES       largest request body (default 8 MiB)\n"
            "  --timeout S            idle connection timeout in seconds (default 30)\n"
            "  -v, --verbose / -q, --quiet\n");
}

typedef struct loader {
    const char *path;
    em_open_options opts;
    srv_server *srv;
    em_model *model;
    atomic_int finished; /* 1 loaded, -1 failed */
} loader;

static void *load_main(void *arg) {
    loader *l = arg;
    em_status st = em_model_open(l->path, &l->opts, &l->model);
    if (st != EM_OK) {
        fprintf(stderr, "ember serve: cannot load %s: %s\n", l->path, em_last_error());
        srv_set_failed(l->srv);
        atomic_store(&l->finished, -1);
        return NULL;
    }
    srv_set_model(l->srv, l->model);
    fprintf(stderr, "ember serve: ready: model %s (context %d) at http://%s%s%s:%d/\n", em_model_name(l->model),
            em_model_context_size(l->model), strchr(l->srv->cfg.host, ':') ? "[" : "", l->srv->cfg.host,
            strchr(l->srv->cfg.host, ':') ? "]" : "", l->srv->port);
    fflush(stderr);
    atomic_store(&l->finished, 1);
    return NULL;
}

static bool int_opt(int argc, char **argv, int *i, long lo, long hi, long *out) {
    const char *v = cli_take_value(argc, argv, i, "serve");
    if (!v) return false;
    if (!cli_parse_int(v, lo, hi, out)) {
        cli_error("serve", "%s: expected an integer in [%ld, %ld], got '%s'", argv[*i - (strchr(argv[*i], '=') ? 0 : 1)],
                  lo, hi, v);
        return false;
    }
    return true;
}

static int parse_args(int argc, char **argv, srv_config *cfg, loader *l) {
    long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(a, "--host")) {
            if (!(cfg->host = cli_take_value(argc, argv, &i, "serve"))) return CLI_USAGE;
        } else if (cli_arg_is(a, "--port")) {
            if (!int_opt(argc, argv, &i, 0, 65535, &v)) return CLI_USAGE;
            cfg->port = (int)v;
        } else if (cli_arg_is(a, "--api-key")) {
            if (!(cfg->api_key = cli_take_value(argc, argv, &i, "serve"))) return CLI_USAGE;
        } else if (cli_arg_is(a, "--max-concurrency")) {
            if (!int_opt(argc, argv, &i, 1, 1024, &v)) return CLI_USAGE;
            cfg->max_concurrency = (int)v;
        } else if (cli_arg_is(a, "--queue")) {
            if (!int_opt(argc, argv, &i, 0, 1 << 20, &v)) return CLI_USAGE;
            cfg->queue = (int)v;
        } else if (cli_arg_is(a, "--ctx")) {
            if (!int_opt(argc, argv, &i, 1, 1 << 24, &v)) return CLI_USAGE;
            l->opts.max_context = (int)v;
        } else if (cli_arg_is(a, "--threads")) {
            if (!int_opt(argc, argv, &i, 1, 4096, &v)) return CLI_USAGE;
            l->opts.n_threads = (int)v;
        } else if (cli_arg_is(a, "--cors-origin")) {
            if (!(cfg->cors_origin = cli_take_value(argc, argv, &i, "serve"))) return CLI_USAGE;
        } else if (cli_arg_is(a, "--max-body")) {
            if (!int_opt(argc, argv, &i, 1024, 1L << 30, &v)) return CLI_USAGE;
            cfg->max_body = (size_t)v;
        } else if (cli_arg_is(a, "--timeout")) {
            if (!int_opt(argc, argv, &i, 1, 3600, &v)) return CLI_USAGE;
            cfg->idle_timeout_s = (int)v;
        } else if (a[0] == '-') {
            cli_error("serve", "unknown option %s", a);
            return CLI_USAGE;
        } else if (!l->path) {
            l->path = a;
        } else {
            cli_error("serve", "unexpected argument %s", a);
            return CLI_USAGE;
        }
    }
    if (!l->path) {
        cli_error("serve", "MODEL is required (a model directory)");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* Waits for SIGINT/SIGTERM (blocked in every thread); false if the model
 * failed to load first. */
static bool wait_for_signal(const sigset_t *set, loader *l) {
    for (;;) {
        struct timespec ts = {0, 200 * 1000000L};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "ember serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            return true;
        }
        if (atomic_load(&l->finished) < 0) return false;
    }
}

static int cmd_serve(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        serve_usage(stdout);
        return CLI_OK;
    }
    em_log_set_level(EM_LOG_INFO);
    srv_config cfg;
    srv_config_defaults(&cfg);
    loader l = {0};
    int rc = parse_args(argc, argv, &cfg, &l);
    if (rc != CLI_OK) return rc;
    /* Signals go to the main thread only: block them before any thread starts. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    srv_server *srv;
    if (srv_start(&cfg, &srv) != EM_OK) {
        cli_error("serve", "%s", em_last_error());
        return CLI_FAIL;
    }
    fprintf(stderr, "ember serve: listening on http://%s%s%s:%d/ (loading %s)\n", strchr(cfg.host, ':') ? "[" : "",
            cfg.host, strchr(cfg.host, ':') ? "]" : "", srv->port, l.path);
    fflush(stderr);
    l.srv = srv;
    pthread_t th;
    if (pthread_create(&th, NULL, load_main, &l)) {
        srv_stop(srv);
        cli_error("serve", "cannot start the loader thread");
        return CLI_FAIL;
    }
    bool ok = wait_for_signal(&set, &l);
    srv_stop(srv);
    /* A load still in progress cannot be interrupted; wait for it to end. */
    pthread_join(th, NULL);
    em_model_free(l.model);
    if (ok) fprintf(stderr, "ember serve: stopped\n");
    return ok ? CLI_OK : CLI_FAIL;
}

EM_CLI_VERB("serve", "HTTP server with OpenAI-compatible APIs", cmd_serve)
