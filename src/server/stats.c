/* stats.c — /health, /stats (JSON) and /metrics (Prometheus text). */
#include "server/routes.h"

#include "base/alloc.h"
#include "base/timer.h"
#include "engine/engine.h"
#include "server/metrics.h"

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
    srv_reply_json(resp, 200, o);
}

void route_metrics(srv_request *req, srv_response *resp) {
    srv_server *s = req->srv;
    char *text = metrics_render(s->metrics, sched_queued(s->sched), sched_running(s->sched), srv_model(s) != NULL);
    if (!text) {
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory rendering metrics");
        return;
    }
    resp->status = 200;
    resp->body = text;
    resp->len = strlen(text);
    resp->content_type = "text/plain; version=0.0.4";
}
