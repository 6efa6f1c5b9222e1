/* qwen3_5_tp_load.c — loading the Qwen3.5 family split over several ranks:
 * each rank's plan (tp_plan.h: attention heads, MLP features, vocabulary,
 * and the Gated DeltaNet key and value heads), its slices of every layer,
 * and the recurrent state of its linear-attention heads. The ranks, the
 * communicator, the embedding, the head and the KV storage are the split
 * graph's (dense_tp_load.c). */
#include "model/dense_tp_internal.h"

#include "base/alloc.h"
#include "base/log.h"

#include <stdio.h>

/* Canonical tensor names in the checkpoint's layout (io/sanitize_qwen3_5.h). */
static const char *tp_weight_name(const em_model *m, const char *name, char *buf, size_t len) {
    const tp_impl *t = m->impl;
    return q35_name(&t->layout, name, buf, len);
}

/* A replicated zero-centred gain of n elements, shifted by +1 when the
 * checkpoint stores gamma - 1 (as the one-device graph loads it). */
static em_status gain(em_model *m, tp_impl *t, tp_rank *R, const char *name, int64_t n, float **out) {
    float shift = t->layout.shift_gains && q35_is_centred_gain(name) ? 1.0f : 0.0f;
    tp_rows all = {0, n};
    return dense_tp_f32(m, R, name, 1, &n, &all, 1, shift, out);
}

/* Gated attention of prefix p: q_proj's [query | gate] rows of the rank's
 * heads, its KV heads, o_proj's columns; q_norm and k_norm replicated. */
static em_status bind_attn(em_model *m, tp_impl *t, tp_rank *R, const char *p, tp_layer *L) {
    int64_t hd = m->cfg.head_dim;
    char name[200];
    EM_TRY(dense_tp_bind_attn(m, R, p, 2, L));
    snprintf(name, sizeof name, "%sself_attn.q_norm.weight", p);
    EM_TRY(gain(m, t, R, name, hd, &L->q_norm));
    snprintf(name, sizeof name, "%sself_attn.k_norm.weight", p);
    return gain(m, t, R, name, hd, &L->k_norm);
}

/* The Gated DeltaNet of layer i over the rank's key heads [k0, k0 + hk)
 * and value heads [v0, v0 + hv): in_proj_qkv's and the conv's q, k and v
 * channel ranges, z/b/a rows, A_log and dt_bias of its value heads,
 * out_proj's columns; the gated norm (per head dim) replicated. */
static em_status bind_gdn(em_model *m, tp_rank *R, int i, tp_layer *L) {
    const qwen3_5_config *q = &m->cfg.q35;
    const tp_shard *sh = &R->sh;
    int64_t H = m->cfg.hidden, dk = q->lin_k_dim, dv = q->lin_v_dim, Hk = q->lin_k_heads, Hv = q->lin_v_heads;
    int64_t C = 2 * Hk * dk + Hv * dv, K = q->conv_kernel;
    int64_t k0 = sh->lin_k_head0 * dk, kn = sh->n_lin_k_heads * dk;
    int64_t v0 = sh->lin_v_head0 * dv, vn = sh->n_lin_v_heads * dv;
    tp_rows heads = {sh->lin_v_head0, sh->n_lin_v_heads}, whole = {0, dv};
    tp_rows chan[3] = {{k0, kn}, {Hk * dk + k0, kn}, {2 * Hk * dk + v0, vn}};
    tp_slice rows[3];
    for (int k = 0; k < 3; k++) rows[k] = (tp_slice){chan[k].row0, chan[k].nrows, 0, H, chan[k].nrows};
    q35_gdn *g = &L->gdn;
    char name[160];
#define GNAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.linear_attn.%s", i, suffix), name)
    EM_TRY(weight_bind_shard_pieces(m, &R->wl, GNAME("in_proj_qkv.weight"), C, H, rows, 3, &g->w_qkv));
    EM_TRY(dense_tp_rows(m, R, GNAME("in_proj_z.weight"), Hv * dv, H, v0, vn, &g->w_z));
    EM_TRY(dense_tp_rows(m, R, GNAME("in_proj_b.weight"), Hv, H, heads.row0, heads.nrows, &g->w_b));
    EM_TRY(dense_tp_rows(m, R, GNAME("in_proj_a.weight"), Hv, H, heads.row0, heads.nrows, &g->w_a));
    EM_TRY(dense_tp_cols(m, R, GNAME("out_proj.weight"), H, Hv * dv, v0, vn, &g->w_out));
    EM_TRY(dense_tp_f32(m, R, GNAME("A_log"), 1, &Hv, &heads, 1, 0.0f, &g->A_log));
    EM_TRY(dense_tp_f32(m, R, GNAME("dt_bias"), 1, &Hv, &heads, 1, 0.0f, &g->dt_bias));
    EM_TRY(dense_tp_f32(m, R, GNAME("norm.weight"), 1, &dv, &whole, 1, 0.0f, &g->norm)); /* never shifted */
    int64_t shape[3];
    q35_conv_shape(m, GNAME("conv1d.weight"), C, K, shape);
    EM_TRY(dense_tp_f32(m, R, name, 3, shape, chan, 3, 0.0f, &g->conv_w));
#undef GNAME
    return EM_OK;
}

static em_status bind_rank(em_model *m, tp_impl *t, tp_rank *R) {
    const model_config *c = &m->cfg;
    const qwen3_5_config *q = &c->q35;
    const tp_shard *sh = &R->sh;
    R->layers = em_calloc((size_t)c->n_layers, sizeof *R->layers);
    if (!R->layers) return em_fail(EM_ERR_NOMEM, "out of memory");
    EM_TRY(dense_tp_bind_ends(m, R, t->layout.shift_gains && q35_is_centred_gain("model.norm.weight") ? 1.0f : 0.0f));
    int n_lin = 0, n_full = 0;
    for (int i = 0; i < c->n_layers; i++) {
        tp_layer *L = &R->layers[i];
        char p[64], name[200];
        snprintf(p, sizeof p, "model.layers.%d.", i);
        L->linear = q->layer_linear[i];
        L->slot = L->linear ? n_lin++ : n_full++;
        EM_TRY(dense_tp_bind_mlp(m, R, p, L));
        snprintf(name, sizeof name, "%sinput_layernorm.weight", p);
        EM_TRY(gain(m, t, R, name, c->hidden, &L->attn_norm));
        snprintf(name, sizeof name, "%spost_attention_layernorm.weight", p);
        EM_TRY(gain(m, t, R, name, c->hidden, &L->mlp_norm));
        EM_TRY(L->linear ? bind_gdn(m, R, i, L) : bind_attn(m, t, R, p, L));
    }
    if (n_lin) EM_TRY(rstate_create(R->be, n_lin, m->max_seqs, q->conv_kernel, t->lin_channels, sh->n_lin_v_heads,
                                    q->lin_k_dim, q->lin_v_dim, &R->rs));
    EM_LOGI("%s: rank %d on %s: query heads %d..%d, KV heads %d..%d%s, linear-attention key heads %d..%d%s and value "
            "heads %d..%d, features %lld..%lld, vocabulary %lld..%lld",
            m->dir, sh->rank, R->be->desc, sh->q_head0, sh->q_head0 + sh->n_q_heads - 1, sh->kv_head0,
            sh->kv_head0 + sh->n_kv_heads - 1, sh->kv_replicated ? " (replicated)" : "", sh->lin_k_head0,
            sh->lin_k_head0 + sh->n_lin_k_heads - 1, sh->lin_k_replicated ? " (replicated)" : "", sh->lin_v_head0,
            sh->lin_v_head0 + sh->n_lin_v_heads - 1, (long long)sh->ff0, (long long)(sh->ff0 + sh->n_ff - 1),
            (long long)sh->vocab0, (long long)(sh->vocab0 + sh->n_vocab - 1));
    return EM_OK;
}

em_status qwen3_5_tp_load(em_model *m) {
    const qwen3_5_config *q = &m->cfg.q35;
    EM_TRY(q35_backend_check(m));
    EM_TRY(dense_tp_start(m));
    tp_impl *t = m->impl;
    t->q35 = true;
    t->mixer = qwen3_5_tp_mixer;
    /* the one-device Qwen3.5 graph does not record its steps either: the
     * Gated DeltaNet operations name per-sequence state */
    t->graphs = false;
    EM_TRY(q35_sanitize(m->st, m->dir, &t->layout));
    m->weight_name = tp_weight_name;
    for (int r = 0; r < t->n; r++) {
        tp_shard *sh = &t->r[r].sh;
        if (q->n_linear) EM_TRY(tp_plan_gdn(q->lin_k_heads, q->lin_v_heads, sh));
        t->lin_channels = 2 * sh->n_lin_k_heads * q->lin_k_dim + sh->n_lin_v_heads * q->lin_v_dim;
    }
    for (int r = 0; r < t->n; r++) EM_TRY(bind_rank(m, t, &t->r[r]));
    return EM_OK;
}
