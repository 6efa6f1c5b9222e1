/* qwen3_5_tp.c — the Qwen3.5 hybrid family split over several GPUs
 * (tensor parallelism, Megatron-style; the plan is in tp_plan.h, the step,
 * the MLP, the vocabulary-split head and the logits gather in dense_tp.c).
 *
 * Per layer, each rank runs its share of the token mixer — gated attention
 * over its query heads (their [query | gate] rows of q_proj) and KV heads,
 * or the Gated DeltaNet over its key and value heads — up to its partial
 * output projection, which the step sums over ranks, then its slice of the
 * MLP. A head's convolution channels and delta-rule state depend only on
 * that head's inputs, so each rank keeps the recurrent state of its own
 * heads, complete: new sequences, rollback marks, rewinds with their
 * replay, and snapshots act on every rank's state in turn, with no
 * collective.
 *
 * Not split: the multi-token-prediction head (speculative decoding is not
 * offered under tensor parallelism: the family has no mtp operations), and
 * one process per rank (refused at open: the step descriptor rank 0 sends
 * carries forwards only, not the recurrent-state operations above). */
#include "model/dense_tp_internal.h"

#include "base/alloc.h"

#include <stdlib.h>

/* A rank's KV storage, as q35_gated_attention asks for it. */
typedef struct rank_kv {
    const em_model *m;
    const tp_rank *R;
} rank_kv;

static em_kv_view rank_view(const void *arg, int seq, int layer) {
    const rank_kv *k = arg;
    return dense_tp_view(k->m, k->R, seq, layer);
}

static q35_gdn_run rank_gdn(const em_model *m, tp_impl *t, tp_rank *R) {
    const qwen3_5_config *q = &m->cfg.q35;
    return (q35_gdn_run){R->be, &t->runs, R->rs, R->sh.n_lin_k_heads, R->sh.n_lin_v_heads, q->lin_k_dim, q->lin_v_dim,
                         q->conv_kernel, t->lin_channels, (float)m->cfg.rms_eps, R->h, R->qkv, R->z, R->a, R->b, R->g,
                         R->beta, R->core, {NULL, NULL, 0}}; /* the normed input in h, the output to h */
}

void qwen3_5_tp_mixer(em_model *m, tp_impl *t, tp_rank *R, int layer, const em_batch *b, int T) {
    const model_config *c = &m->cfg;
    em_backend *be = R->be;
    tp_layer *L = &R->layers[layer];
    be->ops->rmsnorm(be, R->h, R->x, L->attn_norm, T, c->hidden, (float)c->rms_eps, 0.0f);
    if (L->linear) {
        q35_gdn_run r = rank_gdn(m, t, R);
        q35_gdn_block(&r, &L->gdn, L->slot, t->q35_spans, b->n_spans, T);
        return;
    }
    rank_kv kv = {m, R};
    q35_attn_run r = {be, &t->runs, R->sh.n_q_heads, R->sh.n_kv_heads, c->head_dim, t->rot_dim, (float)c->rms_eps,
                      t->attn_factor, t->inv_freq, t->pos, R->h, R->qg, R->q, R->k, R->v, R->att,
                      rank_view, &kv, {NULL, NULL, 0}};
    q35_attn A = {L->wq, L->wk, L->wv, L->wo, L->bq, L->bk, L->bv, L->bo, L->q_norm, L->k_norm};
    q35_gated_attention(&r, &A, L->slot, t->q35_spans, b->n_spans, T);
}

/* The ranks' recurrent states (none without linear-attention layers). */
static int rank_states(tp_impl *t, rstate **rs) {
    int n = 0;
    for (int r = 0; r < t->n; r++)
        if (t->r[r].rs) rs[n++] = t->r[r].rs;
    return n;
}

static em_status q35_tp_forward(em_model *m, const em_batch *b, float *logits) {
    tp_impl *t = m->impl;
    int T = batch_tokens(b);
    if (T == 0) return EM_OK;
    EM_TRY(dense_tp_ensure_workspace(m, t, T));
    EM_TRY(dense_tp_ensure_spans(t, b));
    if (b->n_spans > t->cap_q35_spans) {
        q35_span *sp = realloc(t->q35_spans, (size_t)b->n_spans * sizeof *sp);
        if (!sp) return em_fail(EM_ERR_NOMEM, "out of memory for a batch of %d sequences", b->n_spans);
        t->q35_spans = sp;
        t->cap_q35_spans = b->n_spans;
    }
    rstate *rs[64];
    EM_TRY(q35_prepare_spans(m, rs, rank_states(t, rs), b, t->q35_spans, t->ids, t->pos));
    EM_TRY(q35_plan_runs(m, &t->runs, b, t->q35_spans));
    for (int s = 0; s < b->n_spans; s++) {
        const kv_seq *q = &m->kv->seqs[b->spans[s].seq];
        for (int r = 1; r < t->n; r++)
            EM_TRY(dense_tp_map_update(m->kv, &t->r[r], b->spans[s].seq, q->blocks, q->n_blocks));
    }
    EM_TRY(dense_tp_run_step(m, t, b, T, logits));
    for (int s = 0; s < b->n_spans; s++) m->kv->seqs[b->spans[s].seq].len += b->spans[s].n;
    return EM_OK;
}

static em_status q35_tp_seq_mark(em_model *m, int seq, int max_tokens) {
    tp_impl *t = m->impl;
    rstate *rs[64];
    int n = rank_states(t, rs), len = m->kv->seqs[seq].len;
    for (int r = 0; r < n; r++) {
        if (len == 0) rstate_reset(rs[r], seq); /* what the first forward would do */
        EM_TRY(rstate_mark(rs[r], seq, len, max_tokens));
    }
    return EM_OK;
}

/* Restores every rank's state kept at the mark and replays the journaled
 * tokens up to len, on every rank's heads (every rank has linear layers
 * when one has). */
static em_status rewind_states(em_model *m, tp_impl *t, int seq, int len) {
    int replay = 0;
    for (int r = 0; r < t->n; r++) EM_TRY(rstate_rewind(t->r[r].rs, seq, len, &replay));
    if (replay <= 0) return EM_OK;
    EM_TRY(dense_tp_ensure_workspace(m, t, replay));
    for (int r = 0; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        q35_gdn_run run = rank_gdn(m, t, R);
        for (int l = 0; l < m->cfg.n_layers; l++)
            if (R->layers[l].linear) q35_gdn_replay(&run, &R->layers[l].gdn, R->layers[l].slot, seq, replay);
    }
    return EM_OK;
}

static em_status q35_tp_seq_truncate(em_model *m, int seq, int len) {
    tp_impl *t = m->impl;
    if (len < 0) return em_fail(EM_ERR_INVALID, "cannot truncate sequence %d to %d", seq, len);
    rstate *rs[64];
    int n = rank_states(t, rs);
    if (n && len < m->kv->seqs[seq].len) EM_TRY(rewind_states(m, t, seq, len));
    for (int r = 0; r < n; r++) rstate_journal_close(rs[r], seq);
    kv_seq_truncate(m->kv, seq, len);
    return EM_OK;
}

/* A snapshot holds every rank's state of the sequence, rank after rank. */
static size_t q35_tp_state_bytes(const em_model *m) {
    tp_impl *t = m->impl;
    size_t bytes = 0;
    for (int r = 0; r < t->n; r++)
        if (t->r[r].rs) bytes += rstate_seq_bytes(t->r[r].rs);
    return bytes;
}

static em_status q35_tp_state_save(em_model *m, int seq, void *buf) {
    tp_impl *t = m->impl;
    rstate *rs[64];
    int n = rank_states(t, rs);
    char *p = buf;
    for (int r = 0; r < n; r++) {
        EM_TRY(rstate_save(rs[r], seq, p));
        p += rstate_seq_bytes(rs[r]);
    }
    return EM_OK;
}

static em_status q35_tp_state_load(em_model *m, int seq, const void *buf) {
    tp_impl *t = m->impl;
    rstate *rs[64];
    int n = rank_states(t, rs);
    const char *p = buf;
    for (int r = 0; r < n; r++) {
        EM_TRY(rstate_load(rs[r], seq, p));
        p += rstate_seq_bytes(rs[r]);
    }
    return EM_OK;
}

static void q35_tp_free(em_model *m) {
    dense_tp_free(m);
    m->weight_name = NULL; /* it reads the freed implementation */
}

const family_ops qwen3_5_tp_family = {
    .name = "qwen3_5 (tensor parallel)",
    .load = qwen3_5_tp_load,
    .forward = q35_tp_forward,
    .fills_argmax = true,
    .free = q35_tp_free,
    .kv_ready = dense_tp_kv_ready,
    .seq_mark = q35_tp_seq_mark,
    .seq_truncate = q35_tp_seq_truncate,
    .state_bytes = q35_tp_state_bytes,
    .state_save = q35_tp_state_save,
    .state_load = q35_tp_state_load,
};
