/* dense_tp_internal.h — the state of the split graphs shared by their
 * files: dense_tp_load.c (ranks, communicator, KV storage, the Llama
 * family's weights), dense_tp.c (the step), dense_tp_follow.c (ranks > 0
 * of a multi-process group) and qwen3_5_tp.c / qwen3_5_tp_load.c (the
 * Qwen3.5 family's token mixers, recurrent state and weights). The step,
 * the MLP, the embedding, the vocabulary-split head and the logits gather
 * are the same for both families; a family plugs in its token mixer.
 * Internal to src/model. */
#ifndef EMBER_MODEL_DENSE_TP_INTERNAL_H
#define EMBER_MODEL_DENSE_TP_INTERNAL_H

#include "model/model.h"

#include "backend/collective.h"
#include "base/bootstrap.h"
#include "base/config.h"
#include "model/batch_rows.h"
#include "model/qwen3_5_internal.h"
#include "model/tp_plan.h"
#include "model/weights_shard.h"

typedef struct tp_layer {
    em_weight wq, wk, wv, wo, wg, wu, wd;
    float *bq, *bk, *bv, *bo, *bg, *bu, *bd; /* bo, bd: rank 0 only */
    float *attn_norm, *mlp_norm, *q_norm, *k_norm;
    /* Qwen3.5: a linear-attention layer (gdn) or gated attention (wq
     * yields [query | gate] per head); slot: its recurrent-state or KV layer */
    bool linear;
    int slot;
    q35_gdn gdn;
} tp_layer;

/* A sequence's block table translated into one rank's KV storage. */
typedef struct tp_seq_map {
    int *ids;
    int n, cap;
    float **k, **v; /* [layer][cap] */
} tp_seq_map;

typedef struct tp_rank {
    em_backend *be; /* rank 0: m->be (the model's); others owned here */
    tp_shard sh;
    dev_list wl;    /* weight slices and vectors */
    tp_layer *layers;
    em_weight embed, head;
    float *final_norm;
    float *x, *h, *q, *k, *v, *att, *gate, *up, *act; /* workspace */
    /* Qwen3.5 workspace: [query | gate] and gate of attention; the Gated
     * DeltaNet's conv channels, z, a, b, decay, strength and core output */
    float *qg, *qkv, *z, *a, *b, *g, *beta, *core;
    rstate *rs; /* Qwen3.5: the recurrent state of this rank's heads */
    float *logits;                                       /* [rows, vocab_pad] */
    int32_t *amax_ids; /* per logits row: the greedy choice in this rank's columns */
    float *amax_vals;  /* and its value */
    /* KV storage in m->kv's layout: ranks > 0 of one process own theirs;
     * a follower process uses its own m->kv's */
    float **k_layer, **v_layer;
    bool own_kv;
    tp_seq_map *maps; /* per sequence slot; NULL: m->kv's own tables */
    em_kv_view *views;
} tp_rank;

typedef struct tp_impl tp_impl;
/* A family's token mixer of one layer on one rank: R->x in, the rank's
 * partial output projection in R->h (summed over ranks by the step). */
typedef void (*tp_mixer_fn)(em_model *m, tp_impl *t, tp_rank *R, int layer, const em_batch *b, int T);

struct tp_impl {
    int n;            /* ranks this process drives */
    int world, rank0; /* ranks in all; the global rank of local rank 0 */
    tp_rank *r;
    em_comm *comm;
    /* one process per rank: the control channel from rank 0, the step
     * descriptor sent (rank 0) or received (others), the blocks every rank
     * may use, and the gathered logits of all ranks */
    boot_group *boot;
    int32_t *frame;
    size_t frame_cap;
    void *rx;
    size_t rx_cap;
    em_span *rx_spans;
    int kv_blocks;
    float **gathered;
    bool graphs; /* record decode steps */
    float **sum_bufs; /* per rank, for the all-reduces */
    int *window;      /* per layer */
    float *inv_freq;
    float attn_factor;
    int rot_dim;
    int cap_tokens, cap_spans, cap_logit_rows;
    int32_t *pos, *ids;
    float *amax_host; /* 3 x cap_logit_rows: each rank's ids and values, the best so far */
    row_runs runs;
    int *span_rows, *span_len0;
    float *host_slice; /* one rank's logit columns on the host */
    tp_mixer_fn mixer; /* NULL: the Llama family's attention */
    /* Qwen3.5: checkpoint layout, conv channels of a rank, and the step's
     * spans as the blocks see them (journaling for rollback) */
    bool q35;
    q35_layout layout;
    int lin_channels;
    q35_span *q35_spans;
    int cap_q35_spans;
};


/* Milliseconds a peer may keep this rank waiting (EMBER_TP_TIMEOUT). */
static inline int dense_tp_timeout_ms(const em_model *m) {
    return (int)em_config_int(m->config, EMC_TP_TIMEOUT) * 1000;
}

/* dense_tp_load.c: dense_tp_start opens the ranks (plans, backends,
 * communicator, rotary tables) without weights; a family's load binds them
 * after. dense_tp_f32 loads row ranges of a tensor as f32 (weights_shard.h)
 * on rank R; dense_tp_vec / dense_tp_rows / dense_tp_cols bind a slice of a
 * vector or of a matrix's rows or columns; dense_tp_bind_attn the
 * attention projections (q_proj: q_rows rows per head dim — 2 where it
 * yields [query | gate]) and their biases of the layer whose tensors
 * start with prefix p, dense_tp_bind_mlp its MLP matrices;
 * dense_tp_bind_ends the
 * embedding, the vocabulary-split head and the final norm (its gain shifted
 * by norm_shift). */
em_status dense_tp_start(em_model *m);
em_status dense_tp_f32(em_model *m, tp_rank *R, const char *name, int ndim, const int64_t *shape, const tp_rows *rows,
                       int n, float shift, float **out);
em_status dense_tp_vec(em_model *m, tp_rank *R, const char *name, int64_t n_full, int64_t off, int64_t n, float **out);
em_status dense_tp_rows(em_model *m, tp_rank *R, const char *name, int64_t rows, int64_t cols, int64_t r0, int64_t n,
                        em_weight *w);
em_status dense_tp_cols(em_model *m, tp_rank *R, const char *name, int64_t rows, int64_t cols, int64_t c0, int64_t n,
                        em_weight *w);
em_status dense_tp_bind_attn(em_model *m, tp_rank *R, const char *p, int q_rows, tp_layer *L);
em_status dense_tp_bind_mlp(em_model *m, tp_rank *R, const char *p, tp_layer *L);
em_status dense_tp_bind_ends(em_model *m, tp_rank *R, float norm_shift);
em_status dense_tp_load(em_model *m);
em_status dense_tp_kv_ready(em_model *m);
void dense_tp_free(em_model *m);
void dense_tp_free_workspace(tp_rank *R);

/* dense_tp.c: workspace for T tokens, span tables for b, a rank's
 * translation of a block table, and one step run to completion (logits
 * NULL: a rank > 0 of a multi-process group). */
em_status dense_tp_ensure_workspace(em_model *m, tp_impl *t, int T);
em_status dense_tp_ensure_spans(tp_impl *t, const em_batch *b);
em_status dense_tp_map_update(const kv_cache *kv, tp_rank *R, int seq, const int32_t *ids, int n);
em_status dense_tp_run_step(em_model *m, tp_impl *t, const em_batch *b, int T, float *logits);
/* qwen3_5_tp_load.c / qwen3_5_tp.c */
em_status qwen3_5_tp_load(em_model *m);
void qwen3_5_tp_mixer(em_model *m, tp_impl *t, tp_rank *R, int layer, const em_batch *b, int T);

/* The KV-cache layer of sequence seq in rank R's storage. */
em_kv_view dense_tp_view(const em_model *m, const tp_rank *R, int seq, int layer);
/* The split graph of a model of either family (NULL: not split). */
tp_impl *dense_tp_of(const em_model *m);

#endif
