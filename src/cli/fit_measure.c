/* fit_measure.c — `ember fit --measure`: opens the model the way the
 * prediction assumes (the context, the sequences, the precision, the
 * device), prefills every sequence to the end of its context in chunks of
 * FIT_PREFILL_CHUNK, runs one decode step over all of them, and reports the
 * peak memory that cost: the process's peak resident set on the CPU, the
 * fall of the GPU's free memory (cudaMemGetInfo, from just after this
 * process's CUDA context was made) on a GPU. */
#include "cli/fit_measure.h"

#include "base/alloc.h"
#include "base/sysmem.h"
#include "model/fit.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

/* The lowest free figure the device has shown so far. */
static void sample(em_model *m, uint64_t *low) {
    if (!m->be->ops->mem_free) return;
    uint64_t f = (uint64_t)m->be->ops->mem_free(m->be);
    if (f && f < *low) *low = f;
}

/* Prefills ctx - 1 tokens into each of the batch's sequences, then decodes
 * one token of every sequence in one step. */
static em_status run(em_model *m, int ctx, int batch, uint64_t *low) {
    int vocab = m->cfg.vocab, n = ctx - 1 > 0 ? ctx - 1 : 1;
    int32_t *ids = em_mallocn((size_t)n + 1, sizeof *ids);
    float *logits = em_mallocn((size_t)batch * (size_t)vocab, sizeof *logits);
    em_span *spans = em_calloc((size_t)batch, sizeof *spans);
    int *seqs = em_mallocn((size_t)batch, sizeof *seqs);
    em_status s = ids && logits && spans && seqs ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
    for (int i = 0; s == EM_OK && i <= n; i++) ids[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)vocab);
    int held = 0;
    for (; s == EM_OK && held < batch; held++) {
        s = kv_seq_alloc(m->kv, &seqs[held]);
        if (s != EM_OK) break;
        for (int done = 0; s == EM_OK && done < n;) {
            int k = n - done < FIT_PREFILL_CHUNK ? n - done : FIT_PREFILL_CHUNK;
            em_span sp = {seqs[held], ids + done, k, done + k == n ? LOGITS_LAST : LOGITS_NONE, SPAN_MATH_MODEL};
            em_batch b = {.spans = &sp, .n_spans = 1};
            s = model_forward(m, &b, logits);
            sample(m, low);
            done += k;
        }
    }
    if (s == EM_OK && ctx > 1) {
        for (int i = 0; i < batch; i++) spans[i] = (em_span){seqs[i], ids + n, 1, LOGITS_LAST, SPAN_MATH_MODEL};
        em_batch b = {.spans = spans, .n_spans = batch};
        s = model_forward(m, &b, logits);
        sample(m, low);
    }
    for (int i = 0; i < held; i++) kv_seq_release(m->kv, seqs[i]);
    free(ids);
    free(logits);
    free(spans);
    free(seqs);
    return s;
}

em_status fit_measure(const char *dir, const char *device, int ctx, int batch, int threads, bool fast,
                      fit_measured *out) {
    memset(out, 0, sizeof *out);
    bool cuda;
    int index;
    EM_TRY(em_device_parse(device, &cuda, &index));
    size_t free0 = 0, total = 0;
    if (cuda) EM_TRY(em_device_memory(device, &free0, &total)); /* the context exists from here on */
    em_open_options o = {.n_threads = threads, .max_context = ctx, .max_sequences = batch,
                         .precision = fast ? EM_PRECISION_FAST : EM_PRECISION_EXACT, .device = device};
    em_model *m;
    EM_TRY(em_model_open(dir, &o, &m));
    if (m->max_ctx < ctx) {
        em_model_free(m);
        return em_fail(EM_ERR_LIMIT, "%s: the model's context is %d, less than --ctx %d", dir, m->max_ctx, ctx);
    }
    uint64_t low = free0;
    sample(m, &low);
    em_status s = run(m, ctx, batch, &low);
    em_model_free(m);
    if (s != EM_OK) return s;
    out->cuda = cuda;
    out->peak = cuda ? (uint64_t)free0 - low : em_peak_rss();
    out->device_total = total;
    out->in_use_before = cuda ? (uint64_t)(total - free0) : 0;
    return EM_OK;
}
