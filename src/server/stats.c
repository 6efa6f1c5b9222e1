/* stats.c — /health, /stats (JSON) and /metrics (Prometheus text). */
#include "server/routes.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/timer.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "server/metrics.h"
#include "server/response_store.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void route_health(srv_request *req, srv_response *resp) {
    static const char *const names[] = {"loading", "ok", "draining", "failed"};
    int st = atomic_load(&req->srv->state);
    if (st < SRV_LOADING || st > SRV_FAILED) st = SRV_FAILED;
    srv_reply_json(resp, st == SRV_READY ? 200 : 503, json_pack("{s:s}", "status", names[st]));
}

/* Resident set size of this process in bytes (0 when unknown). */
static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long pages = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &pages, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (size_t)resident * (size_t)page : 0;
}

/* The on-disk prefix store (--kv-store), or null. */
static json_t *kv_store_json(const sched_stats *st) {
    if (!st->kv_store) return json_null();
    const kv_store_stats *k = &st->store;
    return json_pack("{s:i, s:I, s:I, s:I, s:I, s:I}", "files", k->files, "bytes", (json_int_t)k->bytes,
                     "files_written", (json_int_t)k->files_written, "blocks_loaded", (json_int_t)k->blocks_loaded,
                     "files_rejected", (json_int_t)k->files_rejected, "files_deleted", (json_int_t)k->files_deleted);
}

/* Continuous batching and prefix cache figures of the engine. */
static json_t *engine_stats_json(struct em_scheduler *sc) {
    sched_stats st;
    sched_get_stats(sc, &st);
    double hit_rate = st.prefix_lookup_tokens ? (double)st.prefix_hit_tokens / (double)st.prefix_lookup_tokens : 0.0;
    return json_pack("{s:{s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:i, s:i, s:f, s:f, s:f}, s:{s:I, s:I, s:f, s:I, s:I, s:I, s:i}, s:{s:i, s:i}, s:o}",
                     "batching", "steps", (json_int_t)st.steps, "batched_tokens", (json_int_t)st.batched_tokens,
                     "prefill_tokens", (json_int_t)st.prefill_tokens, "prefill_fast_tokens",
                     (json_int_t)st.prefill_fast_tokens, "decode_tokens", (json_int_t)st.decode_tokens,
                     "mean_tokens_per_step", st.steps ? (double)st.batched_tokens / (double)st.steps : 0.0,
                     "preemptions", (json_int_t)st.preemptions, "active", st.active, "waiting", st.waiting,
                     "busy_seconds", st.busy_seconds, "forward_seconds", st.forward_seconds, "sample_seconds",
                     st.sample_seconds, "prefix_cache", "lookup_tokens", (json_int_t)st.prefix_lookup_tokens, "hit_tokens",
                     (json_int_t)st.prefix_hit_tokens, "hit_rate", hit_rate, "evictions",
                     (json_int_t)st.prefix_evictions, "cached_bytes", (json_int_t)st.prefix_cached_bytes,
                     "state_bytes", (json_int_t)st.prefix_state_bytes, "state_snapshots", st.prefix_state_snapshots,
                     "kv_cache", "blocks_total", st.kv_blocks_total, "blocks_free", st.kv_blocks_free,
                     "kv_store", kv_store_json(&st));
}

/* Prometheus lines for the engine, appended to the server's metrics. */
static char *engine_metrics(struct em_scheduler *sc, char *base) {
    sched_stats st;
    sched_get_stats(sc, &st);
    char extra[4096];
    int n = snprintf(extra, sizeof extra,
                     "# HELP ember_engine_steps_total Batched forward steps.\n# TYPE ember_engine_steps_total counter\n"
                     "ember_engine_steps_total %llu\n"
                     "# HELP ember_engine_batched_tokens_total Tokens processed in batched steps.\n"
                     "# TYPE ember_engine_batched_tokens_total counter\nember_engine_batched_tokens_total %llu\n"
                     "# HELP ember_engine_preemptions_total Sequences preempted for KV-cache room.\n"
                     "# TYPE ember_engine_preemptions_total counter\nember_engine_preemptions_total %llu\n"
                     "# HELP ember_prefix_cache_lookup_tokens_total Prompt tokens looked up in the prefix cache.\n"
                     "# TYPE ember_prefix_cache_lookup_tokens_total counter\nember_prefix_cache_lookup_tokens_total %llu\n"
                     "# HELP ember_prefix_cache_hit_tokens_total Prompt tokens reused from the prefix cache.\n"
                     "# TYPE ember_prefix_cache_hit_tokens_total counter\nember_prefix_cache_hit_tokens_total %llu\n"
                     "# HELP ember_prefix_cache_bytes Bytes held by cached, unused prefix blocks and state snapshots.\n"
                     "# TYPE ember_prefix_cache_bytes gauge\nember_prefix_cache_bytes %zu\n"
                     "# HELP ember_prefix_cache_state_bytes Bytes of recurrent-state snapshots (hybrid models).\n"
                     "# TYPE ember_prefix_cache_state_bytes gauge\nember_prefix_cache_state_bytes %zu\n"
                     "# HELP ember_kv_cache_blocks_free KV-cache blocks free or reclaimable.\n"
                     "# TYPE ember_kv_cache_blocks_free gauge\nember_kv_cache_blocks_free %d\n",
                     st.steps, st.batched_tokens, st.preemptions, st.prefix_lookup_tokens, st.prefix_hit_tokens,
                     st.prefix_cached_bytes, st.prefix_state_bytes, st.kv_blocks_free);
    if (st.kv_store && n > 0 && (size_t)n < sizeof extra)
        n += snprintf(extra + n, sizeof extra - (size_t)n,
                      "# HELP ember_kv_store_bytes Bytes of prefix blocks kept on disk (--kv-store).\n"
                      "# TYPE ember_kv_store_bytes gauge\nember_kv_store_bytes %zu\n"
                      "# HELP ember_kv_store_blocks_loaded_total Prefix blocks read back from disk.\n"
                      "# TYPE ember_kv_store_blocks_loaded_total counter\nember_kv_store_blocks_loaded_total %llu\n"
                      "# HELP ember_kv_store_files_rejected_total Store files ignored as invalid.\n"
                      "# TYPE ember_kv_store_files_rejected_total counter\nember_kv_store_files_rejected_total %llu\n",
                      st.store.bytes, st.store.blocks_loaded, st.store.files_rejected);
    if (n < 0 || (size_t)n >= sizeof extra) return base;
    size_t a = strlen(base);
    char *out = em_realloc(base, a + (size_t)n + 1);
    if (!out) return base;
    memcpy(out + a, extra, (size_t)n + 1);
    return out;
}

/* The model's configuration snapshot (the process's): what requests start
 * from; their X-Ember-Config overrides never show here. */
static json_t *config_json(const em_config *c) {
    json_t *o = json_object();
    for (int k = 0; o && k < EMC_COUNT; k++) {
        const em_config_var *v = em_config_var_at((em_config_key)k);
        const char *val = em_config_str(c, (em_config_key)k);
        json_object_set_new(o, v->name,
                            json_pack("{s:s, s:s}", "value", v->kind == EM_CFG_SECRET && *val ? "********" : val,
                                      "source", em_config_source_name(em_config_source_of(c, (em_config_key)k))));
    }
    return o;
}

void route_stats(srv_request *req, srv_response *resp) {
    srv_server *s = req->srv;
    srv_metrics_totals t;
    metrics_totals(s->metrics, &t);
    em_model *m = srv_model(s);
    json_t *o = json_pack("{s:I, s:I, s:{s:I, s:I}, s:{s:i, s:i, s:i, s:i}, s:{s:I, s:I}, s:f, s:f}",
                          "requests", (json_int_t)t.requests, "errors", (json_int_t)t.errors, "tokens",
                          "prompt", (json_int_t)t.prompt_tokens, "generated", (json_int_t)t.completion_tokens,
                          "queue", "waiting", sched_queued(s->sched), "running", sched_running(s->sched),
                          "max_concurrency", s->cfg.max_concurrency, "capacity", s->cfg.queue, "memory",
                          "rss_bytes", (json_int_t)rss_bytes(), "weight_bytes",
                          (json_int_t)(m ? em_model_weight_bytes(m) : 0), "uptime_seconds", em_now() - s->t_start,
                          "mean_ttft_seconds", t.ttft_count ? t.ttft_sum / (double)t.ttft_count : 0.0);
    if (o && m) json_object_set_new(o, "model", json_string(em_model_name(m)));
    if (o && m) json_object_set_new(o, "config", config_json(em_model_config(m)));
    if (o && m && em_model_scheduler(m)) json_object_set_new(o, "engine", engine_stats_json(em_model_scheduler(m)));
    resp_store_stats rs;
    resp_store_get_stats(s->responses, &rs);
    if (o)
        json_object_set_new(o, "response_store",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "count", (json_int_t)rs.count, "bytes",
                                      (json_int_t)rs.bytes, "hits", (json_int_t)rs.hits, "misses", (json_int_t)rs.misses,
                                      "evicted", (json_int_t)rs.evicted, "expired", (json_int_t)rs.expired, "loaded",
                                      (json_int_t)rs.loaded));
    srv_reply_json(resp, 200, o);
}

void route_metrics(srv_request *req, srv_response *resp) {
    srv_server *s = req->srv;
    char *text = metrics_render(s->metrics, sched_queued(s->sched), sched_running(s->sched), srv_model(s) != NULL);
    em_model *m = srv_model(s);
    if (text && m && em_model_scheduler(m)) text = engine_metrics(em_model_scheduler(m), text);
    if (!text) {
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory rendering metrics");
        return;
    }
    resp->status = 200;
    resp->body = text;
    resp->len = strlen(text);
    resp->content_type = "text/plain; version=0.0.4";
}
