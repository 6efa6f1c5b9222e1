/* dense_tp_internal.h — the state of the split Llama graph shared by its
 * files: dense_tp_load.c (weights, ranks, communicator, KV storage),
 * dense_tp.c (the step) and dense_tp_follow.c (ranks > 0 of a
 * multi-process group). Internal to src/model. */
#ifndef EMBER_MODEL_DENSE_TP_INTERNAL_H
#define EMBER_MODEL_DENSE_TP_INTERNAL_H

#include "model/model.h"

#include "backend/collective.h"
#include "base/bootstrap.h"
#include "base/config.h"
#include "model/batch_rows.h"
#include "model/tp_plan.h"
#include "model/weights_shard.h"

typedef struct tp_layer {
    em_weight wq, wk, wv, wo, wg, wu, wd;
    float *bq, *bk, *bv, *bo, *bg, *bu, *bd; /* bo, bd: rank 0 only */
    float *attn_norm, *mlp_norm, *q_norm, *k_norm;
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

typedef struct tp_impl {
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
} tp_impl;


/* Milliseconds a peer may keep this rank waiting (EMBER_TP_TIMEOUT). */
static inline int dense_tp_timeout_ms(const em_model *m) {
    return (int)em_config_int(m->config, EMC_TP_TIMEOUT) * 1000;
}

/* dense_tp_load.c */
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

#endif
