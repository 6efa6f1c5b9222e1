/* dense_tp_follow.c — ranks > 0 of a multi-process tensor-parallel group:
 * each step rank 0 sends (tp_step.h) is checked against this rank's own
 * cache and vocabulary, its block tables translated into this rank's KV
 * storage, and run; a stop, or rank 0 going away, ends the loop. */
#include "model/dense_tp_internal.h"

#include "base/log.h"
#include "model/tp_step.h"

#include <stdlib.h>

/* Runs one checked step: spans over the received words, positions from
 * their start, block tables translated into this rank's storage. */
static em_status follow_step(em_model *m, tp_impl *t, const int32_t *w, int n_spans, int T) {
    if (n_spans > t->cap_spans) {
        em_span *sp = realloc(t->rx_spans, (size_t)n_spans * sizeof *sp);
        if (!sp) return em_fail(EM_ERR_NOMEM, "out of memory");
        t->rx_spans = sp;
    }
    size_t at = TP_STEP_HEADER;
    int row = 0;
    EM_TRY(dense_tp_ensure_workspace(m, t, T));
    for (int s = 0; s < n_spans; s++) {
        tp_step_span sp;
        at = tp_step_span_at(w, at, &sp);
        t->rx_spans[s] = (em_span){sp.seq, sp.tokens, sp.n, (logits_mode)sp.logits, (span_math)sp.math};
        EM_TRY(dense_tp_map_update(m->kv, &t->r[0], sp.seq, sp.blocks, sp.n_blocks));
        for (int i = 0; i < sp.n; i++) {
            t->ids[row] = sp.tokens[i];
            t->pos[row++] = sp.len0 + i;
        }
    }
    em_batch b = {.spans = t->rx_spans, .n_spans = n_spans};
    EM_TRY(dense_tp_ensure_spans(t, &b));
    EM_TRY(row_runs_plan_batch(&t->runs, &b, m->prefill_math));
    return dense_tp_run_step(m, t, &b, T, NULL);
}

bool model_tp_follower(const em_model *m) {
    const tp_impl *t = dense_tp_of(m);
    return t && t->rank0 != 0;
}

em_status model_tp_follow(em_model *m) {
    if (!model_tp_follower(m)) return em_fail(EM_ERR_INTERNAL, "only ranks > 0 of a multi-process group follow");
    tp_impl *t = m->impl;
    EM_LOGI("tensor parallelism: rank %d of %d ready, running rank 0's steps", t->rank0, t->world);
    for (;;) {
        size_t len;
        em_status s = boot_receive(t->boot, &t->rx, &t->rx_cap, &len, -1);
        if (s != EM_OK) return em_fail_prefix(s, "rank %d: rank 0 is gone", t->rank0);
        const kv_cache *kv = m->kv;
        tp_step_limits lim = {kv->max_seqs, kv->max_ctx, kv->block_size, t->kv_blocks, m->cfg.vocab};
        int n_spans = 0, T = 0;
        s = len % sizeof(int32_t) ? em_fail(EM_ERR_FORMAT, "malformed step from rank 0: not whole words")
                                  : tp_step_check(t->rx, len / sizeof(int32_t), &lim, &n_spans, &T);
        if (s != EM_OK) return em_fail_prefix(s, "rank %d", t->rank0);
        if (T < 0) {
            EM_LOGI("tensor parallelism: rank 0 stopped; rank %d stops", t->rank0);
            return EM_OK;
        }
        EM_TRY(follow_step(m, t, t->rx, n_spans, T));
    }
}
