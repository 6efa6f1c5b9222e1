/* dense.c — the Llama family graph (llama, mistral, qwen2, qwen3).
 *
 * Pre-norm decoder: x += o_proj(attn(rope(q), rope(k), v)); x += down(silu(gate) * up),
 * with GQA, optional q/k/v biases (qwen2, llama attention_bias), per-head
 * q/k RMSNorm (qwen3), sliding-window layers (mistral), tied or untied head.
 * All tokens of a batch go through each layer together; attention reads
 * each span's own sequence in the paged cache. On a backend that records
 * steps, a decode step (one token per sequence) is recorded once per batch
 * size and replayed after. */
#include "model/model.h"

#include "base/alloc.h"
#include "base/config.h"
#include "model/batch_rows.h"
#include "model/mlp_block.h"
#include "model/rope.h"
#include "model/workspace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dense_layer {
    em_weight wq, wk, wv, wo, wg, wu, wd;
    float *bq, *bk, *bv, *bo, *bg, *bu, *bd;
    float *attn_norm, *mlp_norm, *q_norm, *k_norm;
    int window;
} dense_layer;

typedef struct dense_impl {
    dense_layer *layers;
    em_weight embed, head;
    float *final_norm;
    float *inv_freq;
    float attn_factor;
    int rot_dim;
    hadamard rot;       /* H/√hidden for the online rotations the weights need (model_config) */
    /* workspace, grown to the largest batch seen */
    int cap_tokens;
    float *x, *h, *q, *k, *v, *att, *gate, *up, *act;
    int32_t *pos, *ids; /* host arrays: operations copy what they need */
    row_runs runs;      /* arithmetic per row (batch_rows.h) */
    em_kv_view *views;  /* per span, for the batched attention operations */
    int *span_rows;
    int cap_spans;
    bool graphs;        /* record decode steps and short prefills where the backend can */
    int min_table;      /* the step's em_kv_spans.min_table */
    /* logits in backend memory before their download (backends without
     * host memory), grown to the most rows seen */
    float *logits;
    int cap_logit_rows;
} dense_impl;

#define LNAME(buf, i, suffix) snprintf(buf, sizeof buf, "model.layers.%d.%s", i, suffix)

static em_status bind_bias(em_model *m, int i, const char *what, bool present, int64_t n, float **out) {
    char name[160];
    LNAME(name, i, what);
    *out = NULL;
    if (!present) return EM_OK;
    return weight_load_vector(m, name, n, false, out);
}

static em_status bind_layer(em_model *m, int i, dense_layer *L) {
    const model_config *c = &m->cfg;
    int64_t H = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    int64_t F = c->intermediate;
    char name[160];
#define BIND(field, suffix, rows, cols) \
    LNAME(name, i, suffix);             \
    EM_TRY(weight_bind(m, name, rows, cols, &L->field))
    BIND(wq, "self_attn.q_proj.weight", qd, H);
    BIND(wk, "self_attn.k_proj.weight", kvd, H);
    BIND(wv, "self_attn.v_proj.weight", kvd, H);
    BIND(wo, "self_attn.o_proj.weight", H, qd);
    BIND(wg, "mlp.gate_proj.weight", F, H);
    BIND(wu, "mlp.up_proj.weight", F, H);
    BIND(wd, "mlp.down_proj.weight", H, F);
#undef BIND
    EM_TRY(bind_bias(m, i, "self_attn.q_proj.bias", c->qkv_bias, qd, &L->bq));
    EM_TRY(bind_bias(m, i, "self_attn.k_proj.bias", c->qkv_bias, kvd, &L->bk));
    EM_TRY(bind_bias(m, i, "self_attn.v_proj.bias", c->qkv_bias, kvd, &L->bv));
    EM_TRY(bind_bias(m, i, "self_attn.o_proj.bias", c->o_bias, H, &L->bo));
    EM_TRY(bind_bias(m, i, "mlp.gate_proj.bias", c->mlp_bias, F, &L->bg));
    EM_TRY(bind_bias(m, i, "mlp.up_proj.bias", c->mlp_bias, F, &L->bu));
    EM_TRY(bind_bias(m, i, "mlp.down_proj.bias", c->mlp_bias, H, &L->bd));
    LNAME(name, i, "input_layernorm.weight");
    EM_TRY(weight_load_vector(m, name, H, false, &L->attn_norm));
    LNAME(name, i, "post_attention_layernorm.weight");
    EM_TRY(weight_load_vector(m, name, H, false, &L->mlp_norm));
    if (c->qk_norm) {
        LNAME(name, i, "self_attn.q_norm.weight");
        EM_TRY(weight_load_vector(m, name, c->head_dim, false, &L->q_norm));
        LNAME(name, i, "self_attn.k_norm.weight");
        EM_TRY(weight_load_vector(m, name, c->head_dim, false, &L->k_norm));
    }
    L->window = c->sliding_window > 0 && c->layer_sliding[i] ? c->sliding_window : 0;
    return EM_OK;
}

static void dense_free(em_model *m) {
    dense_impl *d = m->impl;
    if (!d) return;
    em_backend *be = m->be;
    for (int i = 0; d->layers && i < m->cfg.n_layers; i++) {
        dense_layer *L = &d->layers[i];
        float *vs[] = {L->bq, L->bk, L->bv, L->bo, L->bg, L->bu, L->bd, L->attn_norm, L->mlp_norm, L->q_norm, L->k_norm};
        for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
            if (vs[k]) be->ops->free(be, vs[k]);
    }
    free(d->layers);
    float *ws[] = {d->final_norm, d->x, d->h, d->q, d->k, d->v, d->att, d->gate, d->up, d->act, d->logits};
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
        if (ws[k]) be->ops->free(be, ws[k]);
    free(d->inv_freq);
    hadamard_free(&d->rot);
    row_runs_free(&d->runs);
    free(d->views);
    free(d->span_rows);
    free(d->pos);
    free(d->ids);
    free(d);
    m->impl = NULL;
}

/* The transform an artifact's online rotations apply to the blocks' normed
 * inputs (ember quantize --rotate-online), on a backend that has it. */
static em_status online_rotation_load(em_model *m, hadamard *rot) {
    if (!m->be->ops->hadamard)
        return em_fail(EM_ERR_UNSUPPORTED,
                       "%s: the weights were written for online rotations (config.json ember_transform), which the "
                       "%s backend does not apply",
                       m->dir, m->be->desc);
    return hadamard_make_plain(m->cfg.hidden, "hidden_size (the online rotation)", rot);
}

static em_status dense_load(em_model *m) {
    const model_config *c = &m->cfg;
    dense_impl *d = em_calloc(1, sizeof *d);
    if (!d) return em_fail(EM_ERR_NOMEM, "out of memory");
    m->impl = d;
    d->layers = em_calloc((size_t)c->n_layers, sizeof *d->layers);
    if (!d->layers) return em_fail(EM_ERR_NOMEM, "out of memory");
    bool tied = c->tied_embeddings || !st_find(m->st, "lm_head.weight");
    EM_TRY((tied ? weight_bind : weight_bind_rows)(m, "model.embed_tokens.weight", c->vocab, c->hidden, &d->embed));
    if (tied) {
        if (!c->tied_embeddings)
            return em_fail(EM_ERR_FORMAT, "%s: tensor lm_head.weight is missing and tie_word_embeddings is false", m->dir);
        d->head = d->embed;
    } else {
        EM_TRY(weight_bind(m, "lm_head.weight", c->vocab, c->hidden, &d->head));
    }
    EM_TRY(weight_load_vector(m, "model.norm.weight", c->hidden, false, &d->final_norm));
    for (int i = 0; i < c->n_layers; i++) EM_TRY(bind_layer(m, i, &d->layers[i]));
    d->rot_dim = (int)(c->head_dim * c->rope.partial_rotary_factor);
    d->rot_dim &= ~1;
    d->inv_freq = em_calloc((size_t)d->rot_dim / 2 + 1, sizeof *d->inv_freq);
    if (!d->inv_freq) return em_fail(EM_ERR_NOMEM, "out of memory");
    rope_inv_freq(&c->rope, d->rot_dim, c->max_pos, d->inv_freq, &d->attn_factor);
    d->graphs = em_config_flag(m->config, EMC_CUDA_GRAPHS);
    return model_config_has_online_rotations(c) ? online_rotation_load(m, &d->rot) : EM_OK;
}

static em_status ensure_workspace(em_model *m, dense_impl *d, int T) {
    if (T <= d->cap_tokens) return EM_OK;
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    size_t H = (size_t)c->hidden, F = (size_t)c->intermediate;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    /* no buffer narrower than a hidden row */
    qd = qd > H ? qd : H, kvd = kvd > H ? kvd : H, F = F > H ? F : H;
    const ws_buf bufs[] = {{&d->x, H},    {&d->h, H},    {&d->q, qd},  {&d->k, kvd}, {&d->v, kvd},
                           {&d->att, qd}, {&d->gate, F}, {&d->up, F}, {&d->act, F}};
    d->cap_tokens = 0;
    EM_TRY(ws_bufs_alloc(be, bufs, sizeof bufs / sizeof bufs[0], T));
    EM_TRY(ws_tokens_alloc(&d->pos, &d->ids, T));
    d->cap_tokens = T;
    return EM_OK;
}

/* Device-side logits for `rows` rows (backends without host memory). */
static em_status ensure_logits(em_model *m, dense_impl *d, int rows) {
    if (rows <= d->cap_logit_rows) return EM_OK;
    em_backend *be = m->be;
    if (d->logits) be->ops->free(be, d->logits);
    d->logits = NULL;
    d->cap_logit_rows = 0;
    size_t bytes;
    if (!em_mul((size_t)rows * sizeof(float), (size_t)m->cfg.vocab, &bytes) || !(d->logits = be->ops->alloc(be, bytes)))
        return em_fail(EM_ERR_NOMEM, "out of %s memory for %d rows of logits", be->desc, rows);
    d->cap_logit_rows = rows;
    return EM_OK;
}

/* h = rmsnorm(x) · gain, after adding to the residual stream the previous
 * block's output that waits in h for a run (add_rmsnorm where the backend
 * fuses the two). */
static void residual_norm(em_model *m, dense_impl *d, const float *gain) {
    row_runs_norm(m->be, &d->runs, d->x, d->h, gain, (float)m->cfg.rms_eps, m->cfg.hidden);
}

/* Rotary embeddings on the step's queries and keys, in place. */
static void rope_qk(em_model *m, dense_impl *d, int T) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    const em_backend_ops *op = be->ops;
    if (op->rope_qk) {
        op->rope_qk(be, d->q, d->k, T, c->n_heads, c->n_kv_heads, c->head_dim, d->rot_dim, d->pos, d->inv_freq,
                    d->attn_factor);
        return;
    }
    op->rope(be, d->q, T, c->n_heads, c->head_dim, d->rot_dim, d->pos, d->inv_freq, d->attn_factor);
    op->rope(be, d->k, T, c->n_kv_heads, c->head_dim, d->rot_dim, d->pos, d->inv_freq, d->attn_factor);
}

/* Rotates the step's queries and keys, writes its keys and values into
 * the cache and attends over the spans: one call where the backend fuses
 * the three (decode steps), else the rotation with the cache write, then
 * the attention. */
static void attend_spans(em_model *m, dense_impl *d, const em_kv_spans *spans, int T, float scale, int window) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    const em_backend_ops *op = be->ops;
    if (op->rope_attention_spans &&
        op->rope_attention_spans(be, d->att, spans, d->q, d->k, d->v, d->pos, c->n_heads, c->n_kv_heads, c->head_dim,
                                 d->rot_dim, d->inv_freq, d->attn_factor, scale, window))
        return;
    if (op->rope_kv_write_spans) {
        op->rope_kv_write_spans(be, spans, d->q, d->k, d->v, d->pos, c->n_heads, c->n_kv_heads, c->head_dim,
                                d->rot_dim, d->inv_freq, d->attn_factor);
    } else {
        rope_qk(m, d, T);
        op->kv_write_spans(be, spans, d->k, d->v, d->pos, c->n_kv_heads, c->head_dim);
    }
    op->attention_spans(be, d->att, d->q, spans, d->pos, c->n_heads, c->n_kv_heads, c->head_dim, scale, window);
}

/* x += in · wᵀ + bias: by the product itself where the backend adds into
 * its output, else the product into h, its runs pending for the next norm
 * to add. */
static void mm_residual(em_model *m, dense_impl *d, const float *in, const em_weight *w, const float *bias) {
    row_runs_matmul_residual(m->be, &d->runs, d->x, d->h, in, w, bias);
}

/* Adds the attention output projection to x, or leaves it in h for the
 * next norm to add (d->runs says which runs wait). */
static void attention_block(em_model *m, dense_impl *d, dense_layer *L, int layer, const em_batch *b, int T) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    const em_backend_ops *op = be->ops;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    float *qkv[3] = {d->q, d->k, d->v};
    const em_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
    const float *bqkv[3] = {L->bq, L->bk, L->bv};
    /* decode rows: the norm inside the products, over x itself */
    if (c->rot_attn_in ||
        !row_runs_norm_matmul_group(be, &d->runs, 3, qkv, d->x, d->h, L->attn_norm, (float)c->rms_eps, wqkv, bqkv)) {
        residual_norm(m, d, L->attn_norm);
        if (c->rot_attn_in) op->hadamard(be, d->h, T, &d->rot);
        row_runs_matmul_group(m->be, &d->runs, 3, qkv, d->h, wqkv, bqkv);
    }
    if (L->q_norm) {
        op->rmsnorm(be, d->q, d->q, L->q_norm, T * c->n_heads, c->head_dim, (float)c->rms_eps, 0.0f);
        op->rmsnorm(be, d->k, d->k, L->k_norm, T * c->n_kv_heads, c->head_dim, (float)c->rms_eps, 0.0f);
    }
    float scale = 1.0f / sqrtf((float)c->head_dim);
    if (op->attention_spans && op->kv_write_spans) {
        for (int s = 0; s < b->n_spans; s++) d->views[s] = kv_seq_view(m->kv, b->spans[s].seq, layer);
        em_kv_spans spans = {d->views, d->span_rows, b->n_spans, row_runs_common_math(&d->runs), d->min_table};
        attend_spans(m, d, &spans, T, scale, L->window);
    } else {
        rope_qk(m, d, T);
        int row = 0;
        for (int s = 0; s < b->n_spans; s++) {
            const em_span *sp = &b->spans[s];
            em_kv_view kv = kv_seq_view(m->kv, sp->seq, layer);
            op->kv_write(be, &kv, d->k + (size_t)row * kvd, d->v + (size_t)row * kvd, d->pos + row, sp->n,
                         c->n_kv_heads, c->head_dim);
            op->attention(be, d->att + (size_t)row * qd, d->q + (size_t)row * qd, &kv, d->pos + row, sp->n,
                          c->n_heads, c->n_kv_heads, c->head_dim, scale, L->window);
            row += sp->n;
        }
    }
    mm_residual(m, d, d->att, &L->wo, L->bo);
}

/* Adds the MLP's output to x, or leaves it in h, as attention_block does. */
static void mlp_layer(em_model *m, dense_impl *d, dense_layer *L, int T) {
    const model_config *c = &m->cfg;
    mlp_block p = {d->x, d->h, d->act, d->gate, d->up, L->mlp_norm, (float)c->rms_eps, c->rot_mlp_in ? &d->rot : NULL,
                   {&L->wg, &L->wu, &L->wd}, {L->bg, L->bu, L->bd}, T, c->hidden, c->intermediate};
    mlp_block_run(m->be, &d->runs, &p);
}

/* The head runs EXACT for LOGITS_ALL (reference comparisons) and for any
 * request that asked for EXACT; otherwise FAST like the step's other
 * products (batch_rows.h: the backend decides what FAST allows for few
 * rows). */
static em_math head_math(const em_model *m, const em_batch *b) {
    for (int s = 0; s < b->n_spans; s++) {
        const em_span *sp = &b->spans[s];
        if (sp->logits == LOGITS_ALL) return EM_MATH_EXACT;
        if (sp->logits == LOGITS_LAST && sp->n && span_prefill_math(sp, m->prefill_math) != EM_MATH_FAST)
            return EM_MATH_EXACT; /* a request that asked for EXACT keeps its head EXACT */
    }
    return EM_MATH_FAST;
}

/* The final norm and the head over the rows that want logits: x's own in a
 * decode step (no copy; the norm inside the head's product where the
 * backend takes the rows, as for the layers' products), else gathered
 * into h first. */
static void head(em_model *m, dense_impl *d, const em_batch *b, int T, float *logits) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    const em_backend_ops *op = be->ops;
    const float *in = d->x;
    int rows = T;
    if (!batch_logits_every_row(b)) rows = batch_gather_logit_rows(be, b, d->x, d->h, c->hidden), in = d->h;
    if (!rows) return;
    float *out = op->host_memory ? logits : d->logits;
    const em_weight *w = &d->head;
    em_math math = head_math(m, b);
    if (op->norm_matmul_group &&
        op->norm_matmul_group(be, 1, &out, in, d->final_norm, (float)c->rms_eps, 0.0f, rows, &w, NULL, math))
        return;
    op->rmsnorm(be, d->h, in, d->final_norm, rows, c->hidden, (float)c->rms_eps, 0.0f);
    op->matmul(be, out, d->h, rows, w, NULL, math);
}

/* The operations of one forward over the batch, from the embedding to the
 * head's logits in backend memory (or in `logits` on a host-memory
 * backend). Issued again unchanged when a recorded step must rerun. */
static void forward_ops(em_model *m, dense_impl *d, const em_batch *b, int T, float *logits) {
    const model_config *c = &m->cfg;
    em_backend *be = m->be;
    be->ops->embed(be, d->x, &d->embed, d->ids, T);
    row_runs_set_pending(&d->runs, false); /* nothing waits in h to be added to x */
    for (int l = 0; l < c->n_layers; l++) {
        attention_block(m, d, &d->layers[l], l, b, T);
        mlp_layer(m, d, &d->layers[l], T);
    }
    row_runs_add_pending(be, &d->runs, d->x, d->h, c->hidden);
    head(m, d, b, T, logits);
}

/* Steps the backend may record, with their keys (0: none):
 * - a decode step: one token and its logits per sequence, at most 64;
 * - a short prefill: one sequence's 2 to PREFILL_RECORD_ROWS-1 tokens with
 *   the last one's logits (the uncached tail of a prompt whose prefix is
 *   cached), which eagerly spends most of its time launching kernels.
 *   Longer chunks are bound by the GPU's work and run eagerly, where they
 *   attend in tiles (a recording's grids must not depend on the context).
 *   The key carries the rows' arithmetic, and the block tables are padded
 *   to PREFILL_TABLE_MIN entries, so one recording per row count serves
 *   every context up to that many blocks (engine/warmup.c records them).
 * FAST steps are recorded too: the library GEMMs run on the backend's own
 * workspace, so they capture like the kernels. */
#define PREFILL_TABLE_MIN 256
#define PREFILL_RECORD_ROWS 16
static uint64_t step_key(const em_model *m, const dense_impl *d, const em_batch *b, int T) {
    if (!d->graphs || !m->be->ops->graph_begin || T > 64) return 0;
    bool decode = true;
    for (int s = 0; s < b->n_spans; s++) decode &= b->spans[s].n == 1 && b->spans[s].logits == LOGITS_LAST;
    if (decode) return (uint64_t)T;
    if (b->n_spans != 1 || b->spans[0].logits != LOGITS_LAST || T >= PREFILL_RECORD_ROWS) return 0;
    /* the arithmetic the rows use, however the span asked for it */
    return 1ull << 40 | (uint64_t)row_runs_common_math(&d->runs) << 32 | (uint64_t)T;
}

static em_status ensure_spans(dense_impl *d, const em_batch *b) {
    if (b->n_spans > d->cap_spans) {
        em_kv_view *v = realloc(d->views, (size_t)b->n_spans * sizeof *v);
        if (v) d->views = v;
        int *r = v ? realloc(d->span_rows, (size_t)b->n_spans * sizeof *r) : NULL;
        if (!r) return em_fail(EM_ERR_NOMEM, "out of memory for a batch of %d sequences", b->n_spans);
        d->span_rows = r;
        d->cap_spans = b->n_spans;
    }
    for (int s = 0; s < b->n_spans; s++) d->span_rows[s] = b->spans[s].n;
    return EM_OK;
}

static em_status dense_forward(em_model *m, const em_batch *b, float *logits) {
    dense_impl *d = m->impl;
    const model_config *c = &m->cfg;
    int T = batch_tokens(b);
    if (T == 0) return EM_OK;
    EM_TRY(ensure_workspace(m, d, T));
    EM_TRY(ensure_spans(d, b));
    EM_TRY(row_runs_plan_batch(&d->runs, b, m->prefill_math));
    int row = 0;
    for (int s = 0; s < b->n_spans; s++) {
        const em_span *sp = &b->spans[s];
        int len = m->kv->seqs[sp->seq].len;
        EM_TRY(kv_seq_reserve(m->kv, sp->seq, len + sp->n));
        for (int i = 0; i < sp->n; i++) {
            if (sp->tokens[i] < 0 || sp->tokens[i] >= c->vocab)
                return em_fail(EM_ERR_INVALID, "token id %d is outside the vocabulary of %d", sp->tokens[i], c->vocab);
            d->ids[row] = sp->tokens[i];
            d->pos[row++] = len + i;
        }
    }
    em_backend *be = m->be;
    int rows = batch_logit_rows(b);
    if (rows && !be->ops->host_memory) EM_TRY(ensure_logits(m, d, rows));
    uint64_t key = step_key(m, d, b, T);
    em_graph_mode gm = key ? be->ops->graph_begin(be, key) : EM_GRAPH_NONE;
    d->min_table = gm != EM_GRAPH_NONE && b->spans[0].n > 1 ? PREFILL_TABLE_MIN : 0;
    forward_ops(m, d, b, T, logits);
    if (gm != EM_GRAPH_NONE) {
        bool ran;
        EM_TRY(be->ops->graph_end(be, &ran));
        if (!ran) forward_ops(m, d, b, T, logits);
    }
    for (int s = 0; s < b->n_spans; s++) m->kv->seqs[b->spans[s].seq].len += b->spans[s].n;
    return model_logits_out(m, b, be->ops->host_memory ? logits : d->logits, rows, logits);
}

const family_ops dense_family = {
    .name = "dense",
    .load = dense_load,
    .forward = dense_forward,
    .fills_argmax = true,
    .fills_sample = true,
    .free = dense_free,
};
