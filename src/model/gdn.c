/* gdn.c — the Gated DeltaNet token mixer of Qwen3.5's linear-attention
 * layers, and the replay of journaled tokens that rolls its state back.
 *
 *   [q k v] = conv1d_silu(in_proj_qkv(h))   (per-sequence conv state)
 *   g = -exp(A_log) softplus(in_proj_a(h) + dt_bias),  beta = sigmoid(in_proj_b(h))
 *   o = gated_delta_rule(l2norm(q), l2norm(k), v, g, beta)  (per-sequence state)
 *   out = out_proj(rmsnorm(o) * norm * silu(in_proj_z(h)))  per value head
 * Projections run over all tokens of the batch; the convolution and the
 * recurrence run per sequence. */
#include "model/qwen3_5_internal.h"

#include <stdio.h>

em_status q35_gdn_bind(em_model *m, q35_impl *d, int i, q35_layer *L) {
    const model_config *c = &m->cfg;
    const qwen3_5_config *q = &c->q35;
    int64_t H = c->hidden, C = d->channels, vd = (int64_t)q->lin_v_heads * q->lin_v_dim, K = q->conv_kernel;
    char name[160], buf[256];
    q35_gdn *g = &L->gdn;
#define GNAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.linear_attn.%s", i, suffix), name)
    EM_TRY(weight_bind(m, GNAME("in_proj_qkv.weight"), C, H, &g->w_qkv));
    EM_TRY(weight_bind(m, GNAME("in_proj_z.weight"), vd, H, &g->w_z));
    EM_TRY(weight_bind(m, GNAME("in_proj_b.weight"), q->lin_v_heads, H, &g->w_b));
    EM_TRY(weight_bind(m, GNAME("in_proj_a.weight"), q->lin_v_heads, H, &g->w_a));
    EM_TRY(weight_bind(m, GNAME("out_proj.weight"), H, vd, &g->w_out));
    EM_TRY(weight_load_vector(m, GNAME("A_log"), q->lin_v_heads, false, &g->A_log));
    EM_TRY(weight_load_vector(m, GNAME("dt_bias"), q->lin_v_heads, false, &g->dt_bias));
    EM_TRY(weight_load_vector(m, GNAME("norm.weight"), q->lin_v_dim, false, &g->norm)); /* never shifted */
    /* transformers stores the depthwise kernel [C, 1, K], mlx-lm [C, K, 1]:
     * the same bytes either way. */
    const st_tensor *t = st_find(m->st, weight_resolve(m, GNAME("conv1d.weight"), buf, sizeof buf));
    int64_t torch_shape[3] = {C, 1, K}, mlx_shape[3] = {C, K, 1};
    bool mlx = t && t->ndim == 3 && t->shape[1] == K && t->shape[2] == 1;
    EM_TRY(weight_load_array(m, name, 3, mlx ? mlx_shape : torch_shape, &g->conv_w));
#undef GNAME
    return EM_OK;
}

void q35_gdn_free(em_backend *be, q35_gdn *g) {
    float *vs[] = {g->conv_w, g->A_log, g->dt_bias, g->norm};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
        if (vs[k]) be->ops->free(be, vs[k]);
}

/* Journal row of one token: [conv input (channels) | g (Hv) | beta (Hv)];
 * the journal is backend memory, written with strided copies. */
static void journal_write(em_backend *be, q35_impl *d, int layer, int seq, int first, int row0, int n, int Hv) {
    rstate *r = d->rs;
    float *rows = rstate_journal_rows(r, seq, layer) + (size_t)first * r->row_floats;
    int C = d->channels, ld = r->row_floats;
    be->ops->copy_rows(be, rows, ld, d->qkv + (size_t)row0 * C, C, n, C);
    be->ops->copy_rows(be, rows + C, ld, d->g + (size_t)row0 * Hv, Hv, n, Hv);
    be->ops->copy_rows(be, rows + C + Hv, ld, d->beta + (size_t)row0 * Hv, Hv, n, Hv);
}

/* Conv + delta rule of n rows starting at row0 for one sequence. */
static void mix_rows(em_model *m, q35_impl *d, q35_layer *L, int seq, int row0, int n, int chunk) {
    const qwen3_5_config *q = &m->cfg.q35;
    em_backend *be = m->be;
    int C = d->channels, Hv = q->lin_v_heads, vd = Hv * q->lin_v_dim;
    float *qkv = d->qkv + (size_t)row0 * C;
    be->ops->conv1d_silu(be, qkv, qkv, n, C, C, L->gdn.conv_w, q->conv_kernel, rstate_conv(d->rs, seq, L->slot));
    be->ops->gated_delta_rule(be, d->core + (size_t)row0 * vd, qkv, C, d->g + (size_t)row0 * Hv,
                              d->beta + (size_t)row0 * Hv, rstate_ssm(d->rs, seq, L->slot), n, q->lin_k_heads, Hv,
                              q->lin_k_dim, q->lin_v_dim, chunk);
}

void q35_gdn_block(em_model *m, q35_impl *d, q35_layer *L, const q35_span *sp, int n_spans, int T) {
    const model_config *c = &m->cfg;
    const qwen3_5_config *q = &c->q35;
    em_backend *be = m->be;
    const em_backend_ops *op = be->ops;
    int Hv = q->lin_v_heads;
    row_runs_matmul(be, &d->runs, d->qkv, d->h, &L->gdn.w_qkv, NULL);
    row_runs_matmul(be, &d->runs, d->z, d->h, &L->gdn.w_z, NULL);
    row_runs_matmul(be, &d->runs, d->b, d->h, &L->gdn.w_b, NULL);
    row_runs_matmul(be, &d->runs, d->a, d->h, &L->gdn.w_a, NULL);
    op->gdn_gates(be, d->g, d->beta, d->a, d->b, Hv, L->gdn.A_log, L->gdn.dt_bias, T, Hv);
    int row = 0;
    for (int s = 0; s < n_spans; s++) {
        if (sp[s].journal_first >= 0) journal_write(be, d, L->slot, sp[s].seq, sp[s].journal_first, row, sp[s].n, Hv);
        /* journaled spans use the recurrence, which the replay repeats exactly */
        int chunk = sp[s].n > Q35_RECURRENT_MAX && sp[s].journal_first < 0 ? Q35_CHUNK : 0;
        if (sp[s].n) mix_rows(m, d, L, sp[s].seq, row, sp[s].n, chunk);
        row += sp[s].n;
    }
    op->rmsnorm_gated(be, d->core, d->core, d->z, L->gdn.norm, T * Hv, q->lin_v_dim, (float)c->rms_eps);
    row_runs_matmul(be, &d->runs, d->h, d->core, &L->gdn.w_out, NULL);
}

void q35_gdn_replay(em_model *m, q35_impl *d, q35_layer *L, int seq, int n) {
    int Hv = m->cfg.q35.lin_v_heads;
    rstate *r = d->rs;
    em_backend *be = m->be;
    const float *rows = rstate_journal_rows(r, seq, L->slot);
    int C = d->channels, ld = r->row_floats;
    be->ops->copy_rows(be, d->qkv, C, rows, ld, n, C);
    be->ops->copy_rows(be, d->g, Hv, rows + C, ld, n, Hv);
    be->ops->copy_rows(be, d->beta, Hv, rows + C + Hv, ld, n, Hv);
    mix_rows(m, d, L, seq, 0, n, 0);
}
