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

void q35_conv_shape(const em_model *m, const char *name, int64_t C, int64_t K, int64_t shape[3]) {
    char buf[256];
    /* transformers stores the depthwise kernel [C, 1, K], mlx-lm [C, K, 1]:
     * the same bytes either way. */
    const st_tensor *t = st_find(m->st, weight_resolve(m, name, buf, sizeof buf));
    bool mlx = t && t->ndim == 3 && t->shape[1] == K && t->shape[2] == 1;
    shape[0] = C;
    shape[1] = mlx ? K : 1;
    shape[2] = mlx ? 1 : K;
}

em_status q35_gdn_bind(em_model *m, q35_impl *d, int i, q35_layer *L) {
    const model_config *c = &m->cfg;
    const qwen3_5_config *q = &c->q35;
    int64_t H = c->hidden, C = d->channels, vd = (int64_t)q->lin_v_heads * q->lin_v_dim, K = q->conv_kernel;
    char name[160];
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
    int64_t shape[3];
    q35_conv_shape(m, GNAME("conv1d.weight"), C, K, shape);
    EM_TRY(weight_load_array(m, name, 3, shape, &g->conv_w));
#undef GNAME
    return EM_OK;
}

void q35_gdn_free(em_backend *be, q35_gdn *g) {
    float *vs[] = {g->conv_w, g->A_log, g->dt_bias, g->norm};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
        if (vs[k]) be->ops->free(be, vs[k]);
}

q35_gdn_run q35_gdn_run_of(em_model *m, q35_impl *d) {
    const qwen3_5_config *q = &m->cfg.q35;
    return (q35_gdn_run){m->be, &d->runs, d->rs, q->lin_k_heads, q->lin_v_heads, q->lin_k_dim, q->lin_v_dim,
                         q->conv_kernel, d->channels, (float)m->cfg.rms_eps, d->h, d->qkv, d->z, d->a, d->b, d->g,
                         d->beta, d->core, {NULL, NULL, 0}};
}

/* Journal row of one token: [conv input (channels) | g (hv) | beta (hv)];
 * the journal is backend memory, written with strided copies. */
static void journal_write(const q35_gdn_run *r, int layer, int seq, int first, int row0, int n) {
    em_backend *be = r->be;
    float *rows = rstate_journal_rows(r->rs, seq, layer) + (size_t)first * r->rs->row_floats;
    int C = r->channels, Hv = r->hv, ld = r->rs->row_floats;
    be->ops->copy_rows(be, rows, ld, r->qkv + (size_t)row0 * C, C, n, C);
    be->ops->copy_rows(be, rows + C, ld, r->g + (size_t)row0 * Hv, Hv, n, Hv);
    be->ops->copy_rows(be, rows + C + Hv, ld, r->beta + (size_t)row0 * Hv, Hv, n, Hv);
}

/* Conv + delta rule of n rows starting at row0 for one sequence. */
static void mix_rows(const q35_gdn_run *r, const q35_gdn *g, int slot, int seq, int row0, int n, int chunk) {
    em_backend *be = r->be;
    int C = r->channels, Hv = r->hv, vd = Hv * r->dv;
    float *qkv = r->qkv + (size_t)row0 * C;
    be->ops->conv1d_silu(be, qkv, qkv, n, C, C, g->conv_w, r->kernel, rstate_conv(r->rs, seq, slot));
    be->ops->gated_delta_rule(be, r->core + (size_t)row0 * vd, qkv, C, r->g + (size_t)row0 * Hv,
                              r->beta + (size_t)row0 * Hv, rstate_ssm(r->rs, seq, slot), n, r->hk, Hv, r->dk, r->dv,
                              chunk);
}

/* Decode rows of two or more sequences (every span one token or none):
 * the convolutions and the recurrences of all of them in a launch each,
 * where the backend takes them. False: nothing done. */
#define Q35_MIX_ROWS_MAX 64
static bool mix_decode_rows(const q35_gdn_run *r, const q35_gdn *g, int slot, const q35_span *sp, int n_spans, int T) {
    const em_backend_ops *op = r->be->ops;
    if (!op->gdn_mix_rows || T < 2 || T > Q35_MIX_ROWS_MAX) return false;
    float *conv[Q35_MIX_ROWS_MAX], *ssm[Q35_MIX_ROWS_MAX];
    for (int s = 0, row = 0; s < n_spans; s++) {
        if (sp[s].n > 1) return false;
        if (sp[s].n) conv[row] = rstate_conv(r->rs, sp[s].seq, slot), ssm[row++] = rstate_ssm(r->rs, sp[s].seq, slot);
    }
    return op->gdn_mix_rows(r->be, r->core, r->qkv, r->channels, g->conv_w, r->kernel, r->g, r->beta, conv, ssm, T,
                            r->hk, r->hv, r->dk, r->dv);
}

void q35_gdn_block(const q35_gdn_run *r, const q35_gdn *g, int slot, const q35_span *sp, int n_spans, int T) {
    em_backend *be = r->be;
    const em_backend_ops *op = be->ops;
    int Hv = r->hv;
    /* the four input projections read h: one launch where the backend groups them */
    float *outs[4] = {r->qkv, r->z, r->b, r->a};
    const em_weight *ws[4] = {&g->w_qkv, &g->w_z, &g->w_b, &g->w_a};
    const float *none[4] = {NULL, NULL, NULL, NULL};
    q35_in_products(be, r->runs, &r->res, r->h, r->eps, 4, outs, ws, none);
    op->gdn_gates(be, r->g, r->beta, r->a, r->b, Hv, g->A_log, g->dt_bias, T, Hv);
    /* the journal takes the convolution's inputs, before it runs in place */
    for (int s = 0, row = 0; s < n_spans; row += sp[s].n, s++)
        if (sp[s].journal_first >= 0) journal_write(r, slot, sp[s].seq, sp[s].journal_first, row, sp[s].n);
    if (!mix_decode_rows(r, g, slot, sp, n_spans, T)) {
        for (int s = 0, row = 0; s < n_spans; row += sp[s].n, s++) {
            /* journaled spans use the recurrence, which the replay repeats exactly */
            int chunk = sp[s].n > Q35_RECURRENT_MAX && sp[s].journal_first < 0 ? Q35_CHUNK : 0;
            if (sp[s].n) mix_rows(r, g, slot, sp[s].seq, row, sp[s].n, chunk);
        }
    }
    op->rmsnorm_gated(be, r->core, r->core, r->z, g->norm, T * Hv, r->dv, r->eps);
    q35_out_product(be, r->runs, &r->res, r->h, r->core, &g->w_out, NULL);
}

void q35_gdn_replay(const q35_gdn_run *r, const q35_gdn *g, int slot, int seq, int n) {
    int Hv = r->hv, C = r->channels, ld = r->rs->row_floats;
    em_backend *be = r->be;
    const float *rows = rstate_journal_rows(r->rs, seq, slot);
    be->ops->copy_rows(be, r->qkv, C, rows, ld, n, C);
    be->ops->copy_rows(be, r->g, Hv, rows + C, ld, n, Hv);
    be->ops->copy_rows(be, r->beta, Hv, rows + C + Hv, ld, n, Hv);
    mix_rows(r, g, slot, seq, 0, n, 0);
}
