/* qwen3_5_internal.h — the pieces of the Qwen3.5 family shared by its files:
 * qwen3_5.c (load, trunk forward, rollback), gdn.c (the Gated DeltaNet
 * block), qwen3_5_mtp.c (the multi-token-prediction head). */
#ifndef EMBER_MODEL_QWEN3_5_INTERNAL_H
#define EMBER_MODEL_QWEN3_5_INTERNAL_H

#include "io/sanitize_qwen3_5.h"
#include "model/batch_rows.h"
#include "model/model.h"
#include "model/recurrent_state.h"

/* Spans of at most this many tokens run the delta rule token by token (as
 * decode does, so a verified span equals its single steps); longer ones the
 * chunked form. */
#define Q35_RECURRENT_MAX 16
#define Q35_CHUNK 64

typedef struct q35_attn {
    em_weight wq, wk, wv, wo; /* wq yields [query | gate] per head */
    float *bq, *bk, *bv, *bo;
    float *q_norm, *k_norm;
} q35_attn;

typedef struct q35_gdn {
    em_weight w_qkv, w_z, w_b, w_a, w_out;
    float *conv_w; /* [channels][kernel] */
    float *A_log, *dt_bias, *norm;
} q35_gdn;

typedef struct q35_layer {
    bool linear;
    int slot; /* recurrent-state layer (linear) or KV-cache layer (attention) */
    q35_gdn gdn;
    q35_attn attn;
    em_weight wg, wu, wd;
    float *attn_norm, *mlp_norm;
} q35_layer;

typedef struct q35_mtp {
    int n_layers; /* 0: no head */
    em_weight fc;
    float *norm_emb, *norm_hid, *final_norm;
    q35_layer *layers;
    /* mtp.lm_head.weight: the head's own copy when the artifact has one (a
     * rotated artifact folds mtp.norm into it); else the trunk's head */
    em_weight own_head;
    bool has_own_head;
} q35_mtp;

typedef struct q35_impl {
    row_runs runs; /* arithmetic per row of the current batch (batch_rows.h) */
    q35_layout layout;
    q35_layer *layers;
    q35_mtp mtp;
    em_weight embed, head;
    float *final_norm;
    float *inv_freq;
    float attn_factor;
    int rot_dim;
    int channels; /* conv channels: 2 * Hk * dk + Hv * dv */
    rstate *rs;
    /* workspace, grown to the largest batch seen */
    int cap_tokens;
    float *x, *h, *hid, *cat, *qg, *q, *k, *v, *att, *mg, *mu, *act;
    float *qkv, *z, *a, *b, *g, *beta, *core;
    int32_t *pos, *ids;
    /* logits in backend memory before their download (device backends) */
    float *logits;
    int cap_logit_rows;
    bool graphs; /* record decode steps where the backend can */
} q35_impl;

/* One sequence's part of a batch, as the blocks see it. */
typedef struct q35_span {
    int seq, n;
    int journal_first; /* >= 0: journal these tokens from this index */
} q35_span;

/* Where a token mixer meets the residual stream. On one device (x set)
 * the mixer norms x itself into its input products (the norm inside them
 * where the backend takes the rows) and adds its output projection into x
 * (or leaves it in h, its runs pending for the next norm: batch_rows.h).
 * A tensor-parallel rank (x NULL) finds its normed input in h and leaves
 * its share of the output there for the all-reduce. */
typedef struct q35_resid {
    float *x;
    const float *gain; /* the layer's input norm */
    int width;
} q35_resid;

/* What the gated attention of one layer runs over: the one device's heads
 * (qwen3_5.c) or one tensor-parallel rank's share (qwen3_5_tp.c). The
 * workspace buffers hold T rows of this graph's widths. */
typedef struct q35_attn_run {
    em_backend *be;
    row_runs *runs;
    int n_heads, n_kv_heads, head_dim, rot_dim;
    float eps, attn_factor;
    const float *inv_freq;
    const int32_t *pos;
    float *h, *qg, *q, *k, *v, *att;
    /* sequence seq's KV-cache layer in this graph's storage */
    em_kv_view (*view)(const void *arg, int seq, int layer);
    const void *view_arg;
    q35_resid res;
} q35_attn_run;

/* What a Gated DeltaNet block runs over: hk key and hv value heads (all of
 * the model's, or one rank's), their recurrent state and workspace. */
typedef struct q35_gdn_run {
    em_backend *be;
    row_runs *runs;
    rstate *rs;
    int hk, hv, dk, dv, kernel;
    int channels; /* 2 * hk * dk + hv * dv */
    float eps;
    float *h, *qkv, *z, *a, *b, *g, *beta, *core;
    q35_resid res;
} q35_gdn_run;

em_status q35_workspace(em_model *m, q35_impl *d, int T);
/* Checks a batch's spans, reserves their KV room and fills sp, ids and
 * pos (T entries); the recurrent states rs[0..n_rs) (the one device's, or
 * every rank's) are reset for new sequences and journal the spans a
 * rollback mark covers. */
em_status q35_prepare_spans(em_model *m, rstate *const *rs, int n_rs, const em_batch *b, q35_span *sp, int32_t *ids,
                            int32_t *pos);
/* Plans the batch's row runs; journaled spans (speculative verification)
 * stay EXACT so they compute what single steps would. */
em_status q35_plan_runs(em_model *m, row_runs *runs, const em_batch *b, const q35_span *sp);
/* Host logits[rows, vocab] = h[rows, hidden] · headᵀ (h in backend memory);
 * through a backend buffer and a download on device backends. */
em_status q35_logits(em_model *m, q35_impl *d, const em_batch *b, float *logits, const float *h, int rows,
                     const em_weight *head);
/* One decoder layer: x += mixer(rmsnorm(x)), then x += mlp(rmsnorm(x)),
 * each output added by its product where the backend does that, else left
 * in d->h with its runs pending (d->runs) for the next norm to add. */
void q35_attention_layer(em_model *m, q35_impl *d, q35_layer *L, const q35_span *sp, int n_spans, int T);
/* A mixer's input products: outs[j] = in · ws[j]ᵀ + biases[j], `in` being
 * rmsnorm(res->x) · res->gain (one device) or h (a rank). */
void q35_in_products(em_backend *be, row_runs *runs, const q35_resid *res, float *h, float eps, int n,
                     float *const *outs, const em_weight *const *ws, const float *const *biases);
/* A mixer's output projection of `in`: added into res->x (or left pending
 * in h), or into h for a rank. */
void q35_out_product(em_backend *be, row_runs *runs, const q35_resid *res, float *h, const float *in,
                     const em_weight *w, const float *bias);
/* The input (r->res) -> the output projection of attention over KV layer
 * kv_layer, positions in r->pos. */
void q35_gated_attention(const q35_attn_run *r, const q35_attn *A, int kv_layer, const q35_span *sp, int n_spans,
                         int T);

/* gdn.c: the token mixer of a linear-attention layer (recurrent-state
 * layer `slot`), its input and output as r->res says. */
void q35_gdn_block(const q35_gdn_run *r, const q35_gdn *g, int slot, const q35_span *sp, int n_spans, int T);
/* Replays n journaled tokens of layer `slot` into seq's restored state. */
void q35_gdn_replay(const q35_gdn_run *r, const q35_gdn *g, int slot, int seq, int n);
/* The one device's run of the GDN blocks. */
q35_gdn_run q35_gdn_run_of(em_model *m, q35_impl *d);
em_status q35_gdn_bind(em_model *m, q35_impl *d, int i, q35_layer *L);
/* The shape of conv1d weight `name` (C channels, kernel K) as the
 * checkpoint stores it. */
void q35_conv_shape(const em_model *m, const char *name, int64_t C, int64_t K, int64_t shape[3]);
/* Whether m's backend has the Gated DeltaNet operations (an error saying
 * so otherwise). */
em_status q35_backend_check(const em_model *m);
void q35_gdn_free(em_backend *be, q35_gdn *g);

/* Loads a norm gain, shifted by +1 when the checkpoint stores gamma - 1. */
em_status q35_gain(em_model *m, q35_impl *d, const char *name, int64_t n, float **out);
/* Binds an attention block + MLP + norms with canonical prefix `p`. */
em_status q35_bind_attn_layer(em_model *m, q35_impl *d, const char *p, q35_layer *L);
void q35_layer_free(em_backend *be, q35_layer *L);

/* qwen3_5_mtp.c */
em_status q35_mtp_bind(em_model *m, q35_impl *d);
void q35_mtp_free(em_model *m, q35_impl *d);
int q35_mtp_layers(const em_model *m);
em_status q35_mtp_forward(em_model *m, int seq, const int32_t *tokens, const float *hidden, int pos0, int n,
                          float *logits, float *hidden_out);

#endif
