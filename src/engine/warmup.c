/* warmup.c — one short prefill and a few decode steps before a server
 * says it is ready.
 *
 * On a GPU the first use of each kernel loads its code, cuBLAS picks its
 * algorithms on the first call of a shape, and the first decode step is
 * recorded as a graph: together tens of milliseconds that would otherwise
 * land on the first requests' time to first token. cuBLAS's choice is per
 * row count: on the H200 the first 31- or 34-row prefill of a 1B model took
 * 7-9 ms and the next one of the same count 3.6 ms. Short prefills (the
 * uncached tail of a prompt whose prefix is cached) and batched decode steps
 * are where that shows, so every row count from WARM_ROWS_MIN (where FAST
 * products start using cuBLAS) to WARM_ROWS_MAX is prefilled once, each in
 * a fresh sequence. Host-memory backends have nothing to warm and skip it. */
#include "engine/engine.h"
#include "engine/gen_internal.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/timer.h"

enum { WARM_PREFILL = 48, WARM_STEPS = 3, WARM_ROWS_MIN = 16, WARM_ROWS_MAX = 64 };

/* One prefill of n rows (n <= WARM_ROWS_MAX) in a sequence of its own. */
static em_status warm_rows(em_model *m, const int32_t *ids, int n, float *logits) {
    int seq;
    EM_TRY(kv_seq_alloc(m->kv, &seq));
    em_span sp = {seq, ids, n, LOGITS_LAST, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    em_status s = model_forward(m, &b, logits);
    kv_seq_release(m->kv, seq);
    return s;
}

em_status model_warmup(em_model *m) {
    if (m->be->ops->host_memory) return EM_OK;
    double t0 = em_now();
    int seq;
    EM_TRY(kv_seq_alloc(m->kv, &seq));
    int32_t ids[WARM_ROWS_MAX + WARM_STEPS], chosen = 0;
    for (int i = 0; i < WARM_ROWS_MAX + WARM_STEPS; i++) ids[i] = (int32_t)((i * 7919 + 11) % m->cfg.vocab);
    float *logits = em_mallocn((size_t)m->cfg.vocab, sizeof *logits);
    em_status s = logits ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
    em_span sp = {seq, ids, WARM_PREFILL, LOGITS_LAST, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    if (s == EM_OK) s = model_forward(m, &b, logits);
    for (int i = 0; s == EM_OK && i < WARM_STEPS; i++) {
        sp = (em_span){seq, ids + WARM_PREFILL + i, 1, LOGITS_LAST, SPAN_MATH_MODEL};
        b = (em_batch){.spans = &sp, .n_spans = 1, .argmax = &chosen, .argmax_only = i % 2 == 0};
        s = model_forward(m, &b, logits);
    }
    kv_seq_release(m->kv, seq);
    for (int n = WARM_ROWS_MIN; s == EM_OK && n <= WARM_ROWS_MAX && n < m->max_ctx; n++)
        if (n != WARM_PREFILL) s = warm_rows(m, ids, n, logits);
    free(logits);
    if (s == EM_OK) EM_LOGI("%s: warmed up in %.0f ms", m->name, (em_now() - t0) * 1e3);
    return s;
}
