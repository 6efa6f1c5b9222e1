/* cmd_serve.c — `ember serve MODEL`: the HTTP server.
 *
 * The server listens before the model is loaded (GET /health says 503
 * "loading" until then), loads on a helper thread, and serves until SIGINT
 * or SIGTERM; then it stops accepting, gives in-flight generations a
 * bounded grace period, cancels the rest and exits 0. */
#include "cli/cli_model.h"

#include "base/config.h"
#include "base/log.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "io/demo_model.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <time.h>

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: ember serve [MODEL] [options]\n\n"
            "Serves MODEL (default: the demo model shipped with ember) over HTTP:\n"
            "/v1/chat/completions, /v1/completions, /v1/responses, /v1/models, /v1/messages and\n"
            "/v1/messages/count_tokens (Anthropic), /health, /stats, /metrics and a chat page\n"
            "at /. Requests are served with continuous batching.\n\n"
            "  --host ADDR            address to listen on (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 picks a free one)\n"
            "  --api-key KEY          require \"Authorization: Bearer KEY\" (or \"x-api-key: KEY\")\n"
            "  --max-concurrency N    generations in flight (default and most: --max-batch)\n"
            "  --queue N              requests that may wait beyond those (default 64)\n"
            "  --ctx N                context length (default: the model's)\n"
            "  --threads N            compute threads (default: one per core)\n"
            "  --device D             cpu (default), cuda or cuda:N (EMBER_DEVICE)\n"
            "  --tensor-parallel N    split the model over N GPUs, cuda:D..D+N-1 (Llama and\n"
            "                         Qwen3.5 families; EMBER_TENSOR_PARALLEL, default 1)\n"
            "  --max-batch N          sequences decoded together per step (default 8)\n"
            "  --prefill-chunk N      prompt tokens prefilled per step (default 512)\n"
            "  --memory-budget BYTES  cap on weights + KV cache + workspace; refuses a model that cannot\n"
            "                         serve one full-context sequence within it (default: no cap)\n"
            "  --prompt-cache-bytes B cap on cached prompt prefixes nobody uses, with the recurrent-state\n"
            "                         snapshots of hybrid models (default: no cap; snapshots: 2 per sequence)\n"
            "  --no-prefix-cache      do not reuse KV blocks across requests\n"
            "  --kv-store DIR         keep prompt prefix blocks in DIR too, reused after a restart\n"
            "  --kv-store-bytes B     cap on the store's files for this model (default 4 GiB)\n"
            "  --precision P          exact or fast (default fast: bf16 dot products in prefill and\n"
            "                         in decode batches of 16+ sequences)\n"
            "  --cors-origin ORIGIN   send CORS headers allowing ORIGIN (or *)\n"
            "  --max-body BYTES       largest request body (default 8 MiB)\n"
            "  --timeout S            idle connection timeout in seconds (default 30)\n"
            "  --response-store-ttl S     stored /v1/responses objects live S seconds (default 86400; 0: until evicted)\n"
            "  --response-store-bytes N   cap on their total size (default 256 MiB); least recently used go first\n"
            "  --response-store-dir DIR   also keep them in DIR (one JSON file each), reloaded at start\n"
            "  -v, --verbose / -q, --quiet\n");
}

typedef struct loader {
    const char *path;
    em_open_options opts;
    sched_options sched;
    srv_server *srv;
    em_model *model;
    atomic_int finished; /* 1 loaded, -1 failed */
    atomic_int stopping; /* a signal came: what is left of the load is skipped */
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
    if (atomic_load(&l->stopping)) return NULL;
    if (model_warmup(l->model, l->sched.prefill_chunk) != EM_OK || sched_start(l->model, &l->sched) != EM_OK) {
        fprintf(stderr, "ember serve: %s\n", em_last_error());
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
    bool concurrency_set = false;
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
            concurrency_set = true;
        } else if (cli_arg_is(a, "--queue")) {
            if (!int_opt(argc, argv, &i, 0, 1 << 20, &v)) return CLI_USAGE;
            cfg->queue = (int)v;
        } else if (cli_arg_is(a, "--ctx")) {
            if (!int_opt(argc, argv, &i, 1, 1 << 24, &v)) return CLI_USAGE;
            l->opts.max_context = (int)v;
        } else if (cli_arg_is(a, "--threads")) {
            if (!int_opt(argc, argv, &i, 1, 4096, &v)) return CLI_USAGE;
            l->opts.n_threads = (int)v;
        } else if (cli_arg_is(a, "--device")) {
            if (!(l->opts.device = cli_take_value(argc, argv, &i, "serve"))) return CLI_USAGE;
        } else if (cli_arg_is(a, "--tensor-parallel")) {
            if (!int_opt(argc, argv, &i, 1, 64, &v)) return CLI_USAGE;
            l->opts.tensor_parallel = (int)v;
        } else if (cli_arg_is(a, "--max-batch")) {
            if (!int_opt(argc, argv, &i, 1, 1024, &v)) return CLI_USAGE;
            l->opts.max_sequences = (int)v;
        } else if (cli_arg_is(a, "--prefill-chunk")) {
            if (!int_opt(argc, argv, &i, 1, 1 << 20, &v)) return CLI_USAGE;
            l->sched.prefill_chunk = (int)v;
        } else if (cli_arg_is(a, "--memory-budget")) {
            if (!int_opt(argc, argv, &i, 1, LONG_MAX, &v)) return CLI_USAGE;
            l->opts.memory_budget = (size_t)v;
        } else if (cli_arg_is(a, "--prompt-cache-bytes")) {
            if (!int_opt(argc, argv, &i, 0, LONG_MAX, &v)) return CLI_USAGE;
            l->sched.prompt_cache_bytes = (size_t)v;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            l->sched.no_prefix_cache = true;
        } else if (cli_arg_is(a, "--kv-store")) {
            if (!(l->sched.kv_store_dir = cli_take_value(argc, argv, &i, "serve"))) return CLI_USAGE;
        } else if (cli_arg_is(a, "--kv-store-bytes")) {
            if (!int_opt(argc, argv, &i, 1, LONG_MAX, &v)) return CLI_USAGE;
            l->sched.kv_store_bytes = (size_t)v;
        } else if (cli_arg_is(a, "--precision")) {
            const char *p = cli_take_value(argc, argv, &i, "serve");
            if (!p) return CLI_USAGE;
            if (!strcmp(p, "exact")) l->opts.precision = EM_PRECISION_EXACT;
            else if (!strcmp(p, "fast")) l->opts.precision = EM_PRECISION_FAST;
            else {
                cli_error("serve", "--precision is exact or fast");
                return CLI_USAGE;
            }
        } else if (cli_arg_is(a, "--cors-origin")) {
            if (!(cfg->cors_origin = cli_take_value(argc, argv, &i, "serve"))) return CLI_USAGE;
        } else if (cli_arg_is(a, "--max-body")) {
            if (!int_opt(argc, argv, &i, 1024, 1L << 30, &v)) return CLI_USAGE;
            cfg->max_body = (size_t)v;
        } else if (cli_arg_is(a, "--timeout")) {
            if (!int_opt(argc, argv, &i, 1, 3600, &v)) return CLI_USAGE;
            cfg->idle_timeout_s = (int)v;
        } else if (cli_arg_is(a, "--response-store-ttl")) {
            if (!int_opt(argc, argv, &i, 0, 10L * 365 * 86400, &v)) return CLI_USAGE;
            cfg->response_store_ttl_s = (double)v;
        } else if (cli_arg_is(a, "--response-store-bytes")) {
            if (!int_opt(argc, argv, &i, 1024, 1L << 40, &v)) return CLI_USAGE;
            cfg->response_store_bytes = (size_t)v;
        } else if (cli_arg_is(a, "--response-store-dir")) {
            if (!(cfg->response_store_dir = cli_take_value(argc, argv, &i, "serve"))) return CLI_USAGE;
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
    if (!l->path && !(l->path = em_demo_model_dir())) {
        cli_error("serve", "no MODEL given and the demo model was not found (set EMBER_DEMO_MODEL)");
        return CLI_USAGE;
    }
    if (l->sched.kv_store_dir && l->sched.no_prefix_cache) {
        cli_error("serve", "--kv-store keeps prefix-cache blocks: it does not go with --no-prefix-cache");
        return CLI_USAGE;
    }
    if (!l->opts.max_sequences) l->opts.max_sequences = 8;
    /* generations in flight: by default as many as one batch holds */
    if (!concurrency_set || cfg->max_concurrency > l->opts.max_sequences) cfg->max_concurrency = l->opts.max_sequences;
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
    /* EMBER_HOST / EMBER_PORT / EMBER_API_KEY / EMBER_MAX_CONCURRENCY are the
     * defaults; flags win. */
    const em_config *conf = em_config_global();
    cfg.host = em_config_str(conf, EMC_HOST);
    cfg.port = (int)em_config_int(conf, EMC_PORT);
    if (*em_config_str(conf, EMC_API_KEY)) cfg.api_key = em_config_str(conf, EMC_API_KEY);
    loader l = {0};
    l.opts.precision = EM_PRECISION_FAST;
    int rc = parse_args(argc, argv, &cfg, &l);
    if (rc != CLI_OK) return rc;
    /* ranks > 0 of a multi-process group serve nothing: rank 0 drives them */
    if (cli_tp_follow("serve", l.path, &l.opts, &rc)) return rc;
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
    /* A load still in progress cannot be interrupted: it ends (skipping the
     * warm-up if it has not begun) before the server it reports to stops. */
    atomic_store(&l.stopping, 1);
    pthread_join(th, NULL);
    srv_stop(srv);
    em_model_free(l.model);
    if (ok) fprintf(stderr, "ember serve: stopped\n");
    return ok ? CLI_OK : CLI_FAIL;
}

EM_CLI_VERB("serve", "HTTP server with OpenAI-compatible APIs", cmd_serve)
