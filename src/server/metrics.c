/* metrics.c — counters and histograms behind /metrics and /stats. */
#include "server/metrics.h"

#include "base/alloc.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 64
#define N_BUCKETS 12

/* Latency buckets in seconds, shared by TTFT and inter-token latency. */
static const double buckets[N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

typedef struct histogram {
    uint64_t counts[N_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t n;
} histogram;

typedef struct series {
    const char *route;
    int status;
    uint64_t count;
} series;

struct srv_metrics {
    pthread_mutex_t mu;
    series req[MAX_SERIES];
    int n_req;
    uint64_t other_requests; /* beyond MAX_SERIES distinct labels */
    uint64_t errors, gen_errors, prompt_tokens, completion_tokens, generations;
    histogram ttft, itl;
};

srv_metrics *metrics_new(void) {
    srv_metrics *m = em_calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void observe(histogram *h, double v) {
    int b = 0;
    while (b < N_BUCKETS && v > buckets[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->n++;
}

void metrics_request(srv_metrics *m, const char *route, int status) {
    pthread_mutex_lock(&m->mu);
    if (status >= 400) m->errors++;
    int i = 0;
    while (i < m->n_req && !(m->req[i].status == status && !strcmp(m->req[i].route, route))) i++;
    if (i < m->n_req) m->req[i].count++;
    else if (m->n_req < MAX_SERIES) m->req[m->n_req++] = (series){route, status, 1};
    else m->other_requests++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_generation(srv_metrics *m, size_t prompt_tokens, size_t completion_tokens, double ttft_s,
                        const float *itl, size_t n_itl) {
    pthread_mutex_lock(&m->mu);
    m->generations++;
    m->prompt_tokens += prompt_tokens;
    m->completion_tokens += completion_tokens;
    if (completion_tokens) observe(&m->ttft, ttft_s);
    for (size_t i = 0; i < n_itl; i++) observe(&m->itl, itl[i]);
    pthread_mutex_unlock(&m->mu);
}

void metrics_generation_error(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->gen_errors++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_totals(srv_metrics *m, srv_metrics_totals *out) {
    pthread_mutex_lock(&m->mu);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < m->n_req; i++) out->requests += m->req[i].count;
    out->requests += m->other_requests;
    out->errors = m->errors + m->gen_errors;
    out->prompt_tokens = m->prompt_tokens;
    out->completion_tokens = m->completion_tokens;
    out->generations = m->generations;
    out->ttft_sum = m->ttft.sum;
    out->ttft_count = m->ttft.n;
    pthread_mutex_unlock(&m->mu);
}

typedef struct text {
    char *buf;
    size_t len, cap;
    int bad;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    if (t->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->bad = 1;
            return;
        }
        if (t->buf && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        if (!em_grow((void **)&t->buf, &t->cap, t->len + (size_t)n + 1024, 1)) {
            t->bad = 1;
            return;
        }
    }
}

static void put_histogram(text *t, const char *name, const char *help, const histogram *h) {
    put(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < N_BUCKETS; b++) {
        cum += h->counts[b];
        put(t, "%s_bucket{le=\"%g\"} %llu\n", name, buckets[b], (unsigned long long)cum);
    }
    cum += h->counts[N_BUCKETS];
    put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum,
        name, (unsigned long long)h->n);
}

char *metrics_render(srv_metrics *m, int queued, int running, int ready) {
    text t = {0};
    pthread_mutex_lock(&m->mu);
    put(&t, "# HELP ember_requests_total HTTP requests by route and status.\n# TYPE ember_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        put(&t, "ember_requests_total{route=\"%s\",status=\"%d\"} %llu\n", m->req[i].route, m->req[i].status,
            (unsigned long long)m->req[i].count);
    if (m->other_requests)
        put(&t, "ember_requests_total{route=\"overflow\",status=\"0\"} %llu\n",
            (unsigned long long)m->other_requests);
    put(&t, "# HELP ember_prompt_tokens_total Prompt tokens processed.\n# TYPE ember_prompt_tokens_total counter\n"
            "ember_prompt_tokens_total %llu\n",
        (unsigned long long)m->prompt_tokens);
    put(&t, "# HELP ember_generated_tokens_total Tokens generated.\n# TYPE ember_generated_tokens_total counter\n"
            "ember_generated_tokens_total %llu\n",
        (unsigned long long)m->completion_tokens);
    put(&t, "# HELP ember_generation_errors_total Generations that failed.\n"
            "# TYPE ember_generation_errors_total counter\nember_generation_errors_total %llu\n",
        (unsigned long long)m->gen_errors);
    put_histogram(&t, "ember_time_to_first_token_seconds", "Request arrival to first generated token.", &m->ttft);
    put_histogram(&t, "ember_inter_token_latency_seconds", "Time between consecutive generated tokens.", &m->itl);
    pthread_mutex_unlock(&m->mu);
    put(&t, "# HELP ember_queue_depth Requests waiting for a generation slot.\n# TYPE ember_queue_depth gauge\n"
            "ember_queue_depth %d\n",
        queued);
    put(&t, "# HELP ember_requests_running Generations in flight.\n# TYPE ember_requests_running gauge\n"
            "ember_requests_running %d\n",
        running);
    put(&t, "# HELP ember_ready 1 when the model is loaded.\n# TYPE ember_ready gauge\nember_ready %d\n", ready);
    if (t.bad) {
        free(t.buf);
        return NULL;
    }
    return t.buf;
}
