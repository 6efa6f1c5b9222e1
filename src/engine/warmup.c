/* warmup.c — prefills and a few decode steps before a server says it is
 * ready.
 *
 * On a GPU the first use of each kernel loads its code, cuBLAS picks its
 * algorithms on the first call of a shape, and the first step of a shape is
 * recorded as a graph: together tens of milliseconds that would otherwise
 * land on the first requests' time to first token. cuBLAS's choice is per
 * row count: on the H200 the first 31- or 34-row prefill of a 1B model took
 * 7-9 ms and the next one of the same count 3.6 ms. Short prefills (the
 * uncached tail of a prompt whose prefix is cached) of fewer than 16 rows
 * are recorded and replayed like decode steps, one recording per row
 * count, so every row count from 2 to WARM_ROWS_MAX is prefilled once,
 * each in a fresh sequence.
 * The largest step comes first: growing a scratch buffer forgets every
 * recording (they name the old buffer), so the buffers reach the size of the
 * server's longest step (its prefill chunk) before anything is recorded.
 * Host-memory backends have no kernels to load or steps to record, but
 * their first forward faults in every page of the mapped weights: on a
 * 2-core VM host that took about 0.8 s of the first 512-token prefill of a
 * 1B bf16 model (2.5 GB). They run one row and one decode step, which
 * touch every weight once at the cost of two decode steps. */
#include "engine/engine.h"
#include "engine/gen_internal.h"
#include "engine/scheduler.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/timer.h"

enum { WARM_STEPS = 3, WARM_ROWS_MAX = 64 };

/* One prefill of ids[0..n) in a sequence of its own. */
static em_status warm_rows(em_model *m, const int32_t *ids, int n, float *logits) {
    int seq;
    EM_TRY(kv_seq_alloc(m->kv, &seq));
    em_span sp = {seq, ids, n, LOGITS_LAST, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    em_status s = model_forward(m, &b, logits);
    kv_seq_release(m->kv, seq);
    return s;
}

/* A prefill of n rows, then `steps` decode steps of the same sequence. */
static em_status warm_decode(em_model *m, const int32_t *ids, int n, int steps, float *logits) {
    int seq;
    int32_t chosen = 0;
    EM_TRY(kv_seq_alloc(m->kv, &seq));
    em_span sp = {seq, ids, n, LOGITS_LAST, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    em_status s = model_forward(m, &b, logits);
    for (int i = 0; s == EM_OK && i < steps; i++) {
        sp = (em_span){seq, ids + n + i, 1, LOGITS_LAST, SPAN_MATH_MODEL};
        b = (em_batch){.spans = &sp, .n_spans = 1, .argmax = &chosen, .argmax_only = i % 2 == 0};
        s = model_forward(m, &b, logits);
    }
    kv_seq_release(m->kv, seq);
    return s;
}

em_status model_warmup(em_model *m, int max_rows) {
    double t0 = em_now();
    bool host = m->be->ops->host_memory;
    if (host) max_rows = 1;
    if (max_rows <= 0) max_rows = PREFILL_CHUNK;
    if (max_rows > m->max_ctx - WARM_STEPS) max_rows = m->max_ctx - WARM_STEPS;
    if (max_rows < 1) return EM_OK;
    int n_ids = (max_rows > WARM_ROWS_MAX ? max_rows : WARM_ROWS_MAX) + WARM_STEPS;
    int32_t *ids = em_mallocn((size_t)n_ids, sizeof *ids);
    float *logits = em_mallocn((size_t)m->cfg.vocab, sizeof *logits);
    em_status s = ids && logits ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
    for (int i = 0; s == EM_OK && i < n_ids; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + 11) % m->cfg.vocab);
    if (s == EM_OK) s = warm_decode(m, ids, max_rows, host ? 1 : WARM_STEPS, logits);
    for (int n = WARM_ROWS_MAX; s == EM_OK && !host && n >= 2; n--)
        if (n < max_rows && n < m->max_ctx) s = warm_rows(m, ids, n, logits);
    free(ids);
    free(logits);
    if (s == EM_OK) EM_LOGI("%s: warmed up in %.0f ms", m->name, (em_now() - t0) * 1e3);
    return s;
}
