/* qwen3_5_mtp.c — the multi-token-prediction head of Qwen3.5 checkpoints.
 *
 * For the pair (token x_{p+1}, trunk hidden state h_p) at position p it
 * predicts x_{p+2}:
 *   e = pre_fc_norm_embedding(embed(x_{p+1})), r = pre_fc_norm_hidden(h_p)
 *   y = fc([e | r]);  y = decoder_layer(y) (gated attention + MLP, own KV)
 *   logits = lm_head(mtp.norm(y))
 * h_p is the trunk's final-normed hidden state; for a further draft step
 * the head's own normed output takes its place. Embedding and head are the
 * trunk's. Only the first of several MTP layers is used (released
 * checkpoints have one). */
#include "model/qwen3_5_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_status q35_mtp_bind(em_model *m, q35_impl *d) {
    const model_config *c = &m->cfg;
    q35_mtp *t = &d->mtp;
    char buf[256];
    int declared = c->q35.mtp_layers;
    /* A head is used when the config declares it and its tensors are present
     * (conversions often drop them). */
    if (declared == 0 || !st_find(m->st, weight_resolve(m, "mtp.fc.weight", buf, sizeof buf))) return EM_OK;
    t->layers = em_calloc(1, sizeof *t->layers);
    if (!t->layers) return em_fail(EM_ERR_NOMEM, "out of memory");
    t->n_layers = 1;
    int64_t H = c->hidden, F = c->intermediate;
    EM_TRY(weight_bind(m, "mtp.fc.weight", H, 2 * H, &t->fc));
    EM_TRY(q35_gain(m, d, "mtp.pre_fc_norm_embedding.weight", H, &t->norm_emb));
    EM_TRY(q35_gain(m, d, "mtp.pre_fc_norm_hidden.weight", H, &t->norm_hid));
    EM_TRY(q35_gain(m, d, "mtp.norm.weight", H, &t->final_norm));
    if (st_find(m->st, weight_resolve(m, "mtp.lm_head.weight", buf, sizeof buf))) {
        EM_TRY(weight_bind(m, "mtp.lm_head.weight", c->vocab, H, &t->own_head));
        t->has_own_head = true;
    }
    q35_layer *L = &t->layers[0];
    L->linear = false;
    L->slot = c->q35.n_full; /* the KV-cache layer after the trunk's */
    EM_TRY(q35_bind_attn_layer(m, d, "mtp.layers.0.", L));
    EM_TRY(weight_bind(m, "mtp.layers.0.mlp.gate_proj.weight", F, H, &L->wg));
    EM_TRY(weight_bind(m, "mtp.layers.0.mlp.up_proj.weight", F, H, &L->wu));
    EM_TRY(weight_bind(m, "mtp.layers.0.mlp.down_proj.weight", H, F, &L->wd));
    EM_TRY(q35_gain(m, d, "mtp.layers.0.input_layernorm.weight", H, &L->attn_norm));
    EM_TRY(q35_gain(m, d, "mtp.layers.0.post_attention_layernorm.weight", H, &L->mlp_norm));
    return EM_OK;
}

void q35_mtp_free(em_model *m, q35_impl *d) {
    q35_mtp *t = &d->mtp;
    em_backend *be = m->be;
    if (t->layers) q35_layer_free(be, &t->layers[0]);
    free(t->layers);
    float *vs[] = {t->norm_emb, t->norm_hid, t->final_norm};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
        if (vs[k]) be->ops->free(be, vs[k]);
    memset(t, 0, sizeof *t);
}

int q35_mtp_layers(const em_model *m) {
    const q35_impl *d = m->impl;
    return d ? d->mtp.n_layers : 0;
}

em_status q35_mtp_forward(em_model *m, int seq, const int32_t *tokens, const float *hidden, int pos0, int n,
                          float *logits, float *hidden_out) {
    q35_impl *d = m->impl;
    const model_config *c = &m->cfg;
    q35_mtp *t = &d->mtp;
    if (!t->n_layers) return em_fail(EM_ERR_UNSUPPORTED, "%s has no multi-token-prediction head", m->dir);
    if (n <= 0) return EM_OK;
    if (seq < 0 || seq >= m->kv->max_seqs || pos0 < 0)
        return em_fail(EM_ERR_INVALID, "MTP over sequence %d at position %d", seq, pos0);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return em_fail(EM_ERR_INVALID, "token id %d is outside the vocabulary of %d", tokens[i], c->vocab);
    EM_TRY(kv_seq_reserve(m->kv, seq, pos0 + n));
    EM_TRY(q35_workspace(m, d, n));
    em_backend *be = m->be;
    const em_backend_ops *op = be->ops;
    size_t H = (size_t)c->hidden;
    float eps = (float)c->rms_eps;
    for (int i = 0; i < n; i++) {
        d->ids[i] = tokens[i];
        d->pos[i] = pos0 + i;
    }
    op->embed(be, d->x, &d->embed, d->ids, n);
    op->rmsnorm(be, d->x, d->x, t->norm_emb, n, c->hidden, eps, 0.0f);
    /* the hidden rows arrive from the host */
    EM_TRY(op->upload(be, d->h, hidden, (size_t)n * H * sizeof(float)));
    op->rmsnorm(be, d->h, d->h, t->norm_hid, n, c->hidden, eps, 0.0f);
    op->copy_rows(be, d->cat, 2 * c->hidden, d->x, c->hidden, n, c->hidden);
    op->copy_rows(be, d->cat + H, 2 * c->hidden, d->h, c->hidden, n, c->hidden);
    op->matmul(be, d->x, d->cat, n, &t->fc, NULL, n >= 16 ? m->prefill_math : EM_MATH_EXACT);
    q35_span sp = {seq, n, -1};
    EM_TRY(row_runs_plan(&d->runs, &n, NULL, NULL, 1, m->prefill_math)); /* the head's rows, not the last batch's */
    row_runs_set_pending(&d->runs, false);
    q35_attention_layer(m, d, &t->layers[0], &sp, 1, n);
    row_runs_add_pending(be, &d->runs, d->x, d->h, c->hidden); /* the layer's MLP output, where it was left in h */
    float *last = d->h; /* the normed output of the last pair */
    op->rmsnorm(be, last, d->x + (size_t)(n - 1) * H, t->final_norm, 1, c->hidden, eps, 0.0f);
    if (logits) EM_TRY(q35_logits(m, d, NULL, logits, last, 1, t->has_own_head ? &t->own_head : &d->head));
    if (hidden_out) EM_TRY(op->download(be, hidden_out, last, H * sizeof(float)));
    return EM_OK;
}
