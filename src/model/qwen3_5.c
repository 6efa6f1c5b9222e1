/* qwen3_5.c — the Qwen3.5 family graph: a hybrid of Gated DeltaNet
 * (linear-attention) layers and gated full-attention layers.
 *
 * Pre-norm decoder with zero-centred RMSNorm gains (x * (1 + gamma); the
 * +1 is folded in at load when the checkpoint stores gamma - 1, see
 * io/sanitize_qwen3_5.h). Per layer the token mixer is either the Gated
 * DeltaNet of gdn.c or gated attention:
 *   [q | gate] = q_proj(h) per head; q, k get per-head RMSNorm; partial
 *   rotary over the first rot_dim dims; GQA over the paged KV cache;
 *   out = o_proj(attn * sigmoid(gate)),
 * followed by a SwiGLU MLP. Full-attention layers own KV-cache layers (in
 * order), linear layers own recurrent-state layers; the multi-token-
 * prediction head (qwen3_5_mtp.c) owns the KV layers after the trunk's. */
#include "model/qwen3_5_internal.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/hash.h"
#include "model/mlp_block.h"
#include "model/rope.h"
#include "model/workspace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *q35_weight_name(const em_model *m, const char *name, char *buf, size_t len) {
    const q35_impl *d = m->impl;
    return q35_name(&d->layout, name, buf, len);
}

em_status q35_gain(em_model *m, q35_impl *d, const char *name, int64_t n, float **out) {
    float shift = d->layout.shift_gains && q35_is_centred_gain(name) ? 1.0f : 0.0f;
    return weight_load_vector_shifted(m, name, n, false, shift, out);
}

static em_status opt_bias(em_model *m, const char *p, const char *what, int64_t n, float **out) {
    char name[200];
    *out = NULL;
    if (!m->cfg.qkv_bias) return EM_OK;
    snprintf(name, sizeof name, "%s%s", p, what);
    return weight_load_vector(m, name, n, false, out);
}

/* Binds the gated attention of prefix p ("model.layers.3." or "mtp.layers.0."),
 * the MLP and both norms. */
em_status q35_bind_attn_layer(em_model *m, q35_impl *d, const char *p, q35_layer *L) {
    const model_config *c = &m->cfg;
    int64_t H = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    char name[200];
    q35_attn *A = &L->attn;
#define NAME(suffix) (snprintf(name, sizeof name, "%s%s", p, suffix), name)
    EM_TRY(weight_bind(m, NAME("self_attn.q_proj.weight"), 2 * qd, H, &A->wq));
    EM_TRY(weight_bind(m, NAME("self_attn.k_proj.weight"), kvd, H, &A->wk));
    EM_TRY(weight_bind(m, NAME("self_attn.v_proj.weight"), kvd, H, &A->wv));
    EM_TRY(weight_bind(m, NAME("self_attn.o_proj.weight"), H, qd, &A->wo));
    EM_TRY(opt_bias(m, p, "self_attn.q_proj.bias", 2 * qd, &A->bq));
    EM_TRY(opt_bias(m, p, "self_attn.k_proj.bias", kvd, &A->bk));
    EM_TRY(opt_bias(m, p, "self_attn.v_proj.bias", kvd, &A->bv));
    EM_TRY(opt_bias(m, p, "self_attn.o_proj.bias", H, &A->bo));
    EM_TRY(q35_gain(m, d, NAME("self_attn.q_norm.weight"), c->head_dim, &A->q_norm));
    EM_TRY(q35_gain(m, d, NAME("self_attn.k_norm.weight"), c->head_dim, &A->k_norm));
#undef NAME
    return EM_OK;
}

static em_status bind_common(em_model *m, q35_impl *d, const char *p, q35_layer *L) {
    const model_config *c = &m->cfg;
    int64_t H = c->hidden, F = c->intermediate;
    char name[200];
#define NAME(suffix) (snprintf(name, sizeof name, "%s%s", p, suffix), name)
    EM_TRY(weight_bind(m, NAME("mlp.gate_proj.weight"), F, H, &L->wg));
    EM_TRY(weight_bind(m, NAME("mlp.up_proj.weight"), F, H, &L->wu));
    EM_TRY(weight_bind(m, NAME("mlp.down_proj.weight"), H, F, &L->wd));
    EM_TRY(q35_gain(m, d, NAME("input_layernorm.weight"), H, &L->attn_norm));
    EM_TRY(q35_gain(m, d, NAME("post_attention_layernorm.weight"), H, &L->mlp_norm));
#undef NAME
    return EM_OK;
}

void q35_layer_free(em_backend *be, q35_layer *L) {
    q35_attn *A = &L->attn;
    float *vs[] = {A->bq, A->bk, A->bv, A->bo, A->q_norm, A->k_norm, L->attn_norm, L->mlp_norm};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
        if (vs[k]) be->ops->free(be, vs[k]);
    q35_gdn_free(be, &L->gdn);
}

static void q35_free(em_model *m) {
    q35_impl *d = m->impl;
    if (!d) return;
    em_backend *be = m->be;
    for (int i = 0; d->layers && i < m->cfg.n_layers; i++) q35_layer_free(be, &d->layers[i]);
    free(d->layers);
    row_runs_free(&d->runs);
    q35_mtp_free(m, d);
    float *ws[] = {d->final_norm, d->x, d->h, d->hid, d->cat, d->qg, d->q, d->k, d->v, d->att,
                   d->mg, d->mu, d->act, d->qkv, d->z, d->a, d->b, d->g, d->beta, d->core, d->logits};
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
        if (ws[k]) be->ops->free(be, ws[k]);
    rstate_free(d->rs);
    free(d->inv_freq);
    free(d->pos);
    free(d->ids);
    free(d);
    m->impl = NULL;
    m->weight_name = NULL;
}

static em_status bind_head(em_model *m, q35_impl *d) {
    const model_config *c = &m->cfg;
    char buf[256];
    bool have_head = st_find(m->st, weight_resolve(m, "lm_head.weight", buf, sizeof buf)) != NULL;
    bool tied = c->tied_embeddings || !have_head;
    EM_TRY((tied ? weight_bind : weight_bind_rows)(m, "model.embed_tokens.weight", c->vocab, c->hidden, &d->embed));
    if (tied) {
        if (!c->tied_embeddings)
            return em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing and tie_word_embeddings is false", m->dir, buf);
        d->head = d->embed;
    } else {
        EM_TRY(weight_bind(m, "lm_head.weight", c->vocab, c->hidden, &d->head));
    }
    return q35_gain(m, d, "model.norm.weight", c->hidden, &d->final_norm);
}

em_status q35_backend_check(const em_model *m) {
    const em_backend_ops *ops = m->be->ops;
    if (!ops->conv1d_silu || !ops->gated_delta_rule || !ops->gdn_gates || !ops->rmsnorm_gated || !ops->sigmoid_mul)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: the Qwen3.5 family needs the Gated DeltaNet operations, which the %s "
                       "backend does not have yet (use --device cpu)", m->dir, m->be->desc);
    return EM_OK;
}

static em_status q35_load(em_model *m) {
    const model_config *c = &m->cfg;
    const qwen3_5_config *q = &c->q35;
    if (model_config_has_online_rotations(c))
        return em_fail(EM_ERR_UNSUPPORTED,
                       "%s: config.json ember_transform asks for online rotations, which the Qwen3.5 graph does not "
                       "apply",
                       m->dir);
    EM_TRY(q35_backend_check(m));
    q35_impl *d = em_calloc(1, sizeof *d);
    if (!d) return em_fail(EM_ERR_NOMEM, "out of memory");
    m->impl = d;
    EM_TRY(q35_sanitize(m->st, m->dir, &d->layout));
    m->weight_name = q35_weight_name;
    d->channels = 2 * q->lin_k_heads * q->lin_k_dim + q->lin_v_heads * q->lin_v_dim;
    d->layers = em_calloc((size_t)c->n_layers, sizeof *d->layers);
    if (!d->layers) return em_fail(EM_ERR_NOMEM, "out of memory");
    EM_TRY(bind_head(m, d));
    int n_lin = 0, n_full = 0;
    for (int i = 0; i < c->n_layers; i++) {
        q35_layer *L = &d->layers[i];
        char p[64];
        snprintf(p, sizeof p, "model.layers.%d.", i);
        L->linear = q->layer_linear[i];
        L->slot = L->linear ? n_lin++ : n_full++;
        EM_TRY(bind_common(m, d, p, L));
        EM_TRY(L->linear ? q35_gdn_bind(m, d, i, L) : q35_bind_attn_layer(m, d, p, L));
    }
    EM_TRY(q35_mtp_bind(m, d));
    if (n_lin) EM_TRY(rstate_create(m->be, n_lin, m->max_seqs, q->conv_kernel, d->channels, q->lin_v_heads, q->lin_k_dim,
                                    q->lin_v_dim, &d->rs));
    d->rot_dim = (int)(c->head_dim * c->rope.partial_rotary_factor) & ~1;
    d->inv_freq = em_calloc((size_t)d->rot_dim / 2 + 1, sizeof *d->inv_freq);
    if (!d->inv_freq) return em_fail(EM_ERR_NOMEM, "out of memory");
    rope_inv_freq(&c->rope, d->rot_dim, c->max_pos, d->inv_freq, &d->attn_factor);
    d->graphs = em_config_flag(m->config, EMC_CUDA_GRAPHS);
    return EM_OK;
}

em_status q35_workspace(em_model *m, q35_impl *d, int T) {
    if (T <= d->cap_tokens) return EM_OK;
    const model_config *c = &m->cfg;
    const qwen3_5_config *q = &c->q35;
    em_backend *be = m->be;
    size_t H = (size_t)c->hidden, qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t F = (size_t)c->intermediate, vd = (size_t)q->lin_v_heads * q->lin_v_dim, Hv = (size_t)q->lin_v_heads;
    const ws_buf bufs[] = {
        {&d->x, H}, {&d->h, H}, {&d->hid, H}, {&d->cat, 2 * H}, {&d->qg, 2 * qd}, {&d->q, qd},
        {&d->k, kvd}, {&d->v, kvd}, {&d->att, qd}, {&d->mg, F}, {&d->mu, F}, {&d->act, F},
        {&d->qkv, (size_t)d->channels}, {&d->z, vd}, {&d->a, Hv}, {&d->b, Hv}, {&d->g, Hv}, {&d->beta, Hv},
        {&d->core, vd},
    };
    d->cap_tokens = 0;
    EM_TRY(ws_bufs_alloc(be, bufs, sizeof bufs / sizeof bufs[0], T));
    EM_TRY(ws_tokens_alloc(&d->pos, &d->ids, T));
    d->cap_tokens = T;
    return EM_OK;
}

/* Room for rows of logits in backend memory (device backends), made
 * before a step is recorded: the recording names the buffer. */
static em_status logits_room(em_model *m, q35_impl *d, int rows) {
    em_backend *be = m->be;
    if (be->ops->host_memory || rows <= d->cap_logit_rows) return EM_OK;
    size_t bytes;
    if (d->logits) be->ops->free(be, d->logits);
    d->logits = NULL;
    d->cap_logit_rows = 0;
    if (!em_mul((size_t)rows * sizeof(float), (size_t)m->cfg.vocab, &bytes) || !(d->logits = be->ops->alloc(be, bytes)))
        return em_fail(EM_ERR_NOMEM, "out of %s memory for %d rows of logits", be->desc, rows);
    d->cap_logit_rows = rows;
    return EM_OK;
}

/* Where the head writes: logits itself on a host-memory backend, else the
 * backend buffer that model_logits_out reads. */
static float *logits_dst(const em_model *m, const q35_impl *d, float *logits) {
    return m->be->ops->host_memory ? logits : d->logits;
}

/* The head's product of rows of h (logits_room made its room). The
 * trunk's arithmetic, as the dense family's head: FAST steps (decode) read
 * the head through the FAST few-row products at the weights' streaming
 * speed; EXACT rows (an EXACT model or request, speculation's journaled
 * verify spans) keep it EXACT. */
static void head_rows(em_model *m, q35_impl *d, float *logits, const float *h, int rows, const em_weight *head) {
    em_backend *be = m->be;
    be->ops->matmul(be, logits_dst(m, d, logits), h, rows, head, NULL, row_runs_common_math(&d->runs));
}

em_status q35_logits(em_model *m, q35_impl *d, const em_batch *b, float *logits, const float *h, int rows,
                     const em_weight *head) {
    EM_TRY(logits_room(m, d, rows));
    head_rows(m, d, logits, h, rows, head);
    return model_logits_out(m, b, logits_dst(m, d, logits), rows, logits);
}

/* Rotates the queries and keys, writes the keys and values into the cache
 * and attends over the batch's spans: one call over all of them where the
 * backend takes spans (with the rows' common precision, so FAST prefill
 * rows may run on tensor cores), the three fused where it fuses them
 * (decode steps); else (or for more spans than Q35_ATTEND_SPANS) a call a
 * span, EXACT. */
#define Q35_ATTEND_SPANS 64
static void rope_attend(const q35_attn_run *r, int kv_layer, const q35_span *sp, int n_spans, int T) {
    em_backend *be = r->be;
    const em_backend_ops *op = be->ops;
    int hd = r->head_dim, nq = r->n_heads, nkv = r->n_kv_heads, rot = r->rot_dim, k = 0;
    size_t qd = (size_t)nq * hd, kvd = (size_t)nkv * hd;
    float scale = 1.0f / sqrtf((float)hd), af = r->attn_factor;
    if (op->attention_spans && op->kv_write_spans && n_spans <= Q35_ATTEND_SPANS) {
        em_kv_view views[Q35_ATTEND_SPANS];
        int rows[Q35_ATTEND_SPANS];
        for (int s = 0; s < n_spans; s++)
            if (sp[s].n) views[k] = r->view(r->view_arg, sp[s].seq, kv_layer), rows[k++] = sp[s].n;
        em_kv_spans spans = {views, rows, k, row_runs_common_math(r->runs), 0};
        if (!k || (op->rope_attention_spans && op->rope_attention_spans(be, r->att, &spans, r->q, r->k, r->v, r->pos, nq,
                                                                         nkv, hd, rot, r->inv_freq, af, scale, 0)))
            return;
        if (op->rope_kv_write_spans) {
            op->rope_kv_write_spans(be, &spans, r->q, r->k, r->v, r->pos, nq, nkv, hd, rot, r->inv_freq, af);
        } else {
            op->rope(be, r->q, T, nq, hd, rot, r->pos, r->inv_freq, af);
            op->rope(be, r->k, T, nkv, hd, rot, r->pos, r->inv_freq, af);
            op->kv_write_spans(be, &spans, r->k, r->v, r->pos, nkv, hd);
        }
        op->attention_spans(be, r->att, r->q, &spans, r->pos, nq, nkv, hd, scale, 0);
        return;
    }
    op->rope(be, r->q, T, nq, hd, rot, r->pos, r->inv_freq, af);
    op->rope(be, r->k, T, nkv, hd, rot, r->pos, r->inv_freq, af);
    for (int s = 0, row = 0; s < n_spans; row += sp[s].n, s++) {
        if (!sp[s].n) continue;
        em_kv_view kv = r->view(r->view_arg, sp[s].seq, kv_layer);
        op->kv_write(be, &kv, r->k + (size_t)row * kvd, r->v + (size_t)row * kvd, r->pos + row, sp[s].n, nkv, hd);
        op->attention(be, r->att + (size_t)row * qd, r->q + (size_t)row * qd, &kv, r->pos + row, sp[s].n, nq, nkv, hd,
                      scale, 0);
    }
}

void q35_gated_attention(const q35_attn_run *r, const q35_attn *A, int kv_layer, const q35_span *sp, int n_spans,
                         int T) {
    em_backend *be = r->be;
    const em_backend_ops *op = be->ops;
    int hd = r->head_dim, nq = r->n_heads, nkv = r->n_kv_heads;
    float *qkv[3] = {r->qg, r->k, r->v};
    const em_weight *wqkv[3] = {&A->wq, &A->wk, &A->wv};
    const float *bqkv[3] = {A->bq, A->bk, A->bv};
    q35_in_products(be, r->runs, &r->res, r->h, r->eps, 3, qkv, wqkv, bqkv);
    /* q_proj writes [query (head_dim) | gate (head_dim)] per head: the
     * queries are copied out (a strided copy in backend memory) to be
     * normed, the gates read in place */
    op->copy_rows(be, r->q, hd, r->qg, 2 * hd, T * nq, hd);
    op->rmsnorm(be, r->q, r->q, A->q_norm, T * nq, hd, r->eps, 0.0f);
    op->rmsnorm(be, r->k, r->k, A->k_norm, T * nkv, hd, r->eps, 0.0f);
    rope_attend(r, kv_layer, sp, n_spans, T);
    op->sigmoid_mul(be, r->att, r->qg + hd, T * nq, hd, 2 * hd);
    q35_out_product(be, r->runs, &r->res, r->h, r->att, &A->wo, A->bo);
}

static em_kv_view cache_view(const void *kv, int seq, int layer) { return kv_seq_view(kv, seq, layer); }

void q35_in_products(em_backend *be, row_runs *runs, const q35_resid *res, float *h, float eps, int n,
                     float *const *outs, const em_weight *const *ws, const float *const *biases) {
    if (res->x) {
        if (row_runs_norm_matmul_group(be, runs, n, outs, res->x, h, res->gain, eps, ws, biases)) return;
        row_runs_norm(be, runs, res->x, h, res->gain, eps, res->width);
    }
    row_runs_matmul_group(be, runs, n, outs, h, ws, biases);
}

void q35_out_product(em_backend *be, row_runs *runs, const q35_resid *res, float *h, const float *in,
                     const em_weight *w, const float *bias) {
    if (res->x) row_runs_matmul_residual(be, runs, res->x, h, in, w, bias);
    else row_runs_matmul(be, runs, h, in, w, bias);
}

void q35_attention_layer(em_model *m, q35_impl *d, q35_layer *L, const q35_span *sp, int n_spans, int T) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    q35_resid res = {d->x, L->attn_norm, c->hidden};
    if (L->linear) {
        q35_gdn_run r = q35_gdn_run_of(m, d);
        r.res = res;
        q35_gdn_block(&r, &L->gdn, L->slot, sp, n_spans, T);
    } else {
        q35_attn_run r = {be, &d->runs, c->n_heads, c->n_kv_heads, c->head_dim, d->rot_dim, (float)c->rms_eps,
                          d->attn_factor, d->inv_freq, d->pos, d->h, d->qg, d->q, d->k, d->v, d->att,
                          cache_view, m->kv, res};
        q35_gated_attention(&r, &L->attn, L->slot, sp, n_spans, T);
    }
    mlp_block p = {d->x, d->h, d->act, d->mg, d->mu, L->mlp_norm, (float)c->rms_eps, NULL,
                   {&L->wg, &L->wu, &L->wd}, {NULL, NULL, NULL}, T, c->hidden, c->intermediate};
    mlp_block_run(be, &d->runs, &p);
}

/* d->hid = the final norm of every row (the MTP head reads the hidden
 * state of each token), the last block's pending output added first. */
static void final_norm(em_model *m, q35_impl *d, int T) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    row_runs_add_pending(be, &d->runs, d->x, d->h, c->hidden);
    be->ops->rmsnorm(be, d->hid, d->x, d->final_norm, T, c->hidden, (float)c->rms_eps, 0.0f);
}

em_status q35_prepare_spans(em_model *m, rstate *const *rs, int n_rs, const em_batch *b, q35_span *sp, int32_t *ids,
                            int32_t *pos) {
    const model_config *c = &m->cfg;
    int row = 0;
    for (int s = 0; s < b->n_spans; s++) {
        const em_span *e = &b->spans[s];
        if (e->seq < 0 || e->seq >= m->kv->max_seqs || e->n < 0)
            return em_fail(EM_ERR_INVALID, "span %d names sequence %d of %d", s, e->seq, m->kv->max_seqs);
        for (int k = 0; k < s; k++)
            if (b->spans[k].seq == e->seq && e->n && b->spans[k].n)
                return em_fail(EM_ERR_INVALID, "sequence %d appears twice in one batch", e->seq);
        int len = m->kv->seqs[e->seq].len;
        EM_TRY(kv_seq_reserve(m->kv, e->seq, len + e->n));
        sp[s] = (q35_span){e->seq, e->n, -1};
        /* every rank's state moves in step: their journals agree */
        for (int r = 0; r < n_rs && e->n; r++) {
            if (len == 0) rstate_reset(rs[r], e->seq); /* a new sequence starts from zero state */
            bool active;
            int first;
            EM_TRY(rstate_journal_span(rs[r], e->seq, len, e->n, &first, &active));
            if (active) sp[s].journal_first = first;
        }
        for (int i = 0; i < e->n; i++) {
            if (e->tokens[i] < 0 || e->tokens[i] >= c->vocab)
                return em_fail(EM_ERR_INVALID, "token id %d is outside the vocabulary of %d", e->tokens[i], c->vocab);
            ids[row] = e->tokens[i];
            pos[row++] = len + i;
        }
    }
    return EM_OK;
}

em_status q35_plan_runs(em_model *m, row_runs *runs, const em_batch *b, const q35_span *sp) {
    int n_spans = b->n_spans;
    int ns[64];
    bool ex[64];
    em_math ms[64];
    int *n = n_spans <= 64 ? ns : em_mallocn((size_t)n_spans, sizeof *n);
    bool *e = n_spans <= 64 ? ex : em_mallocn((size_t)n_spans, sizeof *e);
    em_math *math = n_spans <= 64 ? ms : em_mallocn((size_t)n_spans, sizeof *math);
    em_status st = n && e && math ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory planning a batch");
    for (int i = 0; st == EM_OK && i < n_spans; i++) {
        n[i] = sp[i].n;
        e[i] = sp[i].journal_first >= 0;
        math[i] = span_prefill_math(&b->spans[i], m->prefill_math);
    }
    if (st == EM_OK) st = row_runs_plan(runs, n, e, math, n_spans, m->prefill_math);
    if (n != ns) free(n);
    if (e != ex) free(e);
    if (math != ms) free(math);
    return st;
}

/* The operations of a step, up to its logits in backend memory: what a
 * recording holds, so it neither reads nor moves anything on the host
 * that a replay would not repeat. */
static void forward_ops(em_model *m, q35_impl *d, const em_batch *b, const q35_span *sp, int T, float *logits) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    be->ops->embed(be, d->x, &d->embed, d->ids, T);
    row_runs_set_pending(&d->runs, false); /* nothing waits in h to be added to x */
    for (int l = 0; l < c->n_layers; l++) q35_attention_layer(m, d, &d->layers[l], sp, b->n_spans, T);
    final_norm(m, d, T);
    int rows = batch_logit_rows(b);
    if (!rows) return;
    /* a decode step wants every row: the head reads them in place */
    const float *h = d->hid;
    if (!batch_logits_every_row(b)) h = d->h, batch_gather_logit_rows(be, b, d->hid, d->h, c->hidden);
    head_rows(m, d, logits, h, rows, &d->head);
}

/* A decode step the backend may record: one token and its logits per
 * sequence, at most 64 of them, none journaled (speculation's verify
 * spans, whose journal rows move step to step, run eagerly). The key
 * holds the rows' arithmetic and, for one sequence, which: its recurrent
 * state is addressed directly (several sequences' states go through
 * staged tables, gdn_mix_rows, so one recording serves any of them, as
 * attention's block tables do). 0: not recorded. */
static uint64_t step_key(const em_model *m, const q35_impl *d, const em_batch *b, const q35_span *sp, int T) {
    if (!d->graphs || !m->be->ops->graph_begin || T > 64) return 0;
    bool tables = T > 1 && m->be->ops->gdn_mix_rows;
    uint64_t h = em_hash_u64(0x71776e3335ull, (uint64_t)T);
    for (int s = 0; s < b->n_spans; s++) {
        if (b->spans[s].n != 1 || b->spans[s].logits != LOGITS_LAST || sp[s].journal_first >= 0) return 0;
        if (!tables) h = em_hash_u64(h, (uint64_t)sp[s].seq);
    }
    h = em_hash_finish(em_hash_u64(h, (uint64_t)row_runs_common_math(&d->runs)));
    return h ? h : 1;
}

/* Runs the step's operations, recorded or replayed where the backend
 * records this step (an eager run where the replay did not match). */
static em_status run_step(em_model *m, q35_impl *d, const em_batch *b, const q35_span *sp, int T, float *logits) {
    em_backend *be = m->be;
    uint64_t key = step_key(m, d, b, sp, T);
    em_graph_mode gm = key ? be->ops->graph_begin(be, key) : EM_GRAPH_NONE;
    forward_ops(m, d, b, sp, T, logits);
    if (gm == EM_GRAPH_NONE) return EM_OK;
    bool ran;
    EM_TRY(be->ops->graph_end(be, &ran));
    if (!ran) forward_ops(m, d, b, sp, T, logits);
    return EM_OK;
}

static em_status q35_forward(em_model *m, const em_batch *b, float *logits) {
    q35_impl *d = m->impl;
    int T = 0;
    for (int s = 0; s < b->n_spans; s++) T += b->spans[s].n;
    if (T == 0) return EM_OK;
    EM_TRY(q35_workspace(m, d, T));
    q35_span stack[8], *sp = b->n_spans <= 8 ? stack : em_mallocn((size_t)b->n_spans, sizeof *sp);
    if (!sp) return em_fail(EM_ERR_NOMEM, "out of memory");
    int rows = batch_logit_rows(b);
    em_status st = q35_prepare_spans(m, &d->rs, d->rs ? 1 : 0, b, sp, d->ids, d->pos);
    if (st == EM_OK) st = q35_plan_runs(m, &d->runs, b, sp);
    if (st == EM_OK) st = logits_room(m, d, rows);
    if (st == EM_OK) st = run_step(m, d, b, sp, T, logits);
    if (st == EM_OK) {
        for (int s = 0; s < b->n_spans; s++) m->kv->seqs[b->spans[s].seq].len += b->spans[s].n;
        st = model_logits_out(m, b, logits_dst(m, d, logits), rows, logits);
    }
    if (sp != stack) free(sp);
    return st;
}

static em_status q35_seq_mark(em_model *m, int seq, int max_tokens) {
    q35_impl *d = m->impl;
    if (!d->rs) return EM_OK;
    int len = m->kv->seqs[seq].len;
    if (len == 0) rstate_reset(d->rs, seq); /* what the first forward would do */
    return rstate_mark(d->rs, seq, len, max_tokens);
}

static em_status q35_seq_truncate(em_model *m, int seq, int len) {
    q35_impl *d = m->impl;
    int cur = m->kv->seqs[seq].len;
    if (len < 0) return em_fail(EM_ERR_INVALID, "cannot truncate sequence %d to %d", seq, len);
    if (d->rs && len < cur) {
        int replay;
        EM_TRY(rstate_rewind(d->rs, seq, len, &replay));
        if (replay > 0) {
            EM_TRY(q35_workspace(m, d, replay));
            q35_gdn_run r = q35_gdn_run_of(m, d);
            for (int l = 0; l < m->cfg.n_layers; l++)
                if (d->layers[l].linear) q35_gdn_replay(&r, &d->layers[l].gdn, d->layers[l].slot, seq, replay);
        }
    }
    if (d->rs) rstate_journal_close(d->rs, seq);
    kv_seq_truncate(m->kv, seq, len);
    return EM_OK;
}

static size_t q35_state_bytes(const em_model *m) {
    const q35_impl *d = m->impl;
    return d->rs ? rstate_seq_bytes(d->rs) : 0;
}

static em_status q35_state_save(em_model *m, int seq, void *buf) {
    q35_impl *d = m->impl;
    return d->rs ? rstate_save(d->rs, seq, buf) : EM_OK;
}

static em_status q35_state_load(em_model *m, int seq, const void *buf) {
    q35_impl *d = m->impl;
    return d->rs ? rstate_load(d->rs, seq, buf) : EM_OK;
}

static em_status q35_hidden_rows(em_model *m, float *dst, int n) {
    q35_impl *d = m->impl;
    if (n <= 0) return EM_OK;
    if (n > d->cap_tokens) return em_fail(EM_ERR_INVALID, "%d hidden rows asked of a batch of at most %d", n, d->cap_tokens);
    return m->be->ops->download(m->be, dst, d->hid, (size_t)n * (size_t)m->cfg.hidden * sizeof(float));
}

const family_ops qwen3_5_family = {
    .name = "qwen3_5",
    .load = q35_load,
    .forward = q35_forward,
    .fills_argmax = true,
    .fills_sample = true,
    .free = q35_free,
    .seq_mark = q35_seq_mark,
    .seq_truncate = q35_seq_truncate,
    .state_bytes = q35_state_bytes,
    .state_save = q35_state_save,
    .state_load = q35_state_load,
    .mtp_layers = q35_mtp_layers,
    .hidden_rows = q35_hidden_rows,
    .mtp_forward = q35_mtp_forward,
};
