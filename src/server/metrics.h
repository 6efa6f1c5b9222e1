/* metrics.h — server counters and latency histograms, shown as Prometheus
 * text at /metrics and as JSON at /stats. Thread-safe. */
#ifndef EMBER_SERVER_METRICS_H
#define EMBER_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct srv_metrics srv_metrics;

srv_metrics *metrics_new(void);
void metrics_free(srv_metrics *m);

/* route: a static label ("/v1/chat/completions", "other"...). */
void metrics_request(srv_metrics *m, const char *route, int status);
/* One finished generation (a choice). */
void metrics_generation(srv_metrics *m, size_t prompt_tokens, size_t completion_tokens, double ttft_s,
                        const float *itl, size_t n_itl);
/* A generation that failed after it started. */
void metrics_generation_error(srv_metrics *m);

typedef struct srv_metrics_totals {
    uint64_t requests, errors, prompt_tokens, completion_tokens, generations;
    double ttft_sum;
    uint64_t ttft_count;
} srv_metrics_totals;
void metrics_totals(srv_metrics *m, srv_metrics_totals *out);

/* Prometheus text exposition (malloc'd, caller frees; NULL on OOM). */
char *metrics_render(srv_metrics *m, int queued, int running, int ready);

#endif
