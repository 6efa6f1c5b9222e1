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
    float *x, *h, *hid, *cat, *qg, *q, *gate, *k, *v, *att, *mg, *mu, *act;
    float *qkv, *z, *a, *b, *g, *beta, *core;
    int32_t *pos, *ids;
    /* logits in backend memory before their download (device backends) */
    float *logits;
    int cap_logit_rows;
} q35_impl;

/* One sequence's part of a batch, as the blocks see it. */
typedef struct q35_span {
    int seq, n;
    int journal_first; /* >= 0: journal these tokens from this index */
} q35_span;

em_status q35_workspace(em_model *m, q35_impl *d, int T);
/* Host logits[rows, vocab] = h[rows, hidden] · headᵀ (h in backend memory);
 * through a backend buffer and a download on device backends. */
em_status q35_logits(em_model *m, q35_impl *d, const em_batch *b, float *logits, const float *h, int rows,
                     const em_weight *head);
/* x += attention(rmsnorm(x)), x += mlp(rmsnorm(x)) for one decoder layer. */
void q35_attention_layer(em_model *m, q35_impl *d, q35_layer *L, const q35_span *sp, int n_spans, int T);
void q35_mlp(em_model *m, q35_impl *d, q35_layer *L, int T);

/* gdn.c: the token mixer of a linear-attention layer over d->h -> d->h. */
void q35_gdn_block(em_model *m, q35_impl *d, q35_layer *L, const q35_span *sp, int n_spans, int T);
/* Replays n journaled tokens of layer L into seq's restored state. */
void q35_gdn_replay(em_model *m, q35_impl *d, q35_layer *L, int seq, int n);
em_status q35_gdn_bind(em_model *m, q35_impl *d, int i, q35_layer *L);
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
