/* dense_tp.c — the Llama family graph split over several GPUs (tensor
 * parallelism, Megatron-style; the plan is in tp_plan.h).
 *
 * One process drives every rank: each rank has its own CUDA backend (one
 * stream), its own weight slices and its own KV storage, and the host
 * issues each operation of the step to every rank in turn. Every operation
 * is asynchronous, so the GPUs run concurrently while one thread enqueues;
 * the two all-reduces of a layer (after o_proj, after down_proj) are NCCL
 * calls grouped over the ranks' streams. The KV cache's block tables are
 * the model's one kv_cache (m->kv, on rank 0's storage): the other ranks
 * keep storage of the same layout and translate block ids into their own
 * pointers, so allocation, prefix sharing and preemption stay in one place.
 *
 * Rank r computes attention for its heads and its slice of the MLP; the
 * partial outputs of o_proj and down_proj are summed over ranks (their
 * biases are added by rank 0 alone). The head is split by vocabulary rows:
 * each rank's logit columns are downloaded into their place in the host
 * logits. The embedding is replicated: a lookup of T rows costs nothing
 * next to a layer, and splitting it by vocabulary would add a collective per
 * step to save one table's memory per GPU. */
#include "model/model.h"

#include "backend/collective.h"
#include "base/alloc.h"
#include "base/bootstrap.h"
#include "base/config.h"
#include "base/log.h"
#include "model/batch_rows.h"
#include "model/rope.h"
#include "model/tp_plan.h"
#include "model/tp_step.h"
#include "model/weights_shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    row_runs runs;
    int *span_rows, *span_len0;
    float *host_slice; /* one rank's logit columns on the host */
} tp_impl;

#define LNAME(buf, i, suffix) snprintf(buf, sizeof buf, "model.layers.%d.%s", i, suffix)


static int tp_timeout_ms(const em_model *m) { return (int)em_config_int(m->config, EMC_TP_TIMEOUT) * 1000; }

/* ---- loading ---- */

static em_status vec(em_model *m, tp_rank *R, const char *name, int64_t n_full, int64_t off, int64_t n, float **out) {
    EM_TRY(weight_load_vector_shard(m, R->be, name, n_full, off, n, out));
    em_status s = dev_list_add(&R->wl, *out);
    if (s != EM_OK) {
        R->be->ops->free(R->be, *out);
        *out = NULL;
    }
    return s;
}

static em_status bind_rows(em_model *m, tp_rank *R, const char *name, int64_t rows, int64_t cols, int64_t r0,
                           int64_t n, em_weight *w) {
    tp_slice s = {r0, n, 0, cols, n};
    return weight_bind_shard(m, &R->wl, name, rows, cols, &s, w);
}

static em_status bind_cols(em_model *m, tp_rank *R, const char *name, int64_t rows, int64_t cols, int64_t c0,
                           int64_t n, em_weight *w) {
    tp_slice s = {0, rows, c0, n, rows};
    return weight_bind_shard(m, &R->wl, name, rows, cols, &s, w);
}

static em_status bind_layer(em_model *m, tp_rank *R, int i, tp_layer *L) {
    const model_config *c = &m->cfg;
    const tp_shard *sh = &R->sh;
    int64_t H = c->hidden, hd = c->head_dim, F = c->intermediate;
    int64_t qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
    int64_t q0 = sh->q_head0 * hd, qn = sh->n_q_heads * hd, k0 = sh->kv_head0 * hd, kn = sh->n_kv_heads * hd;
    char name[160];
#define NM(suffix) (LNAME(name, i, suffix), name)
    EM_TRY(bind_rows(m, R, NM("self_attn.q_proj.weight"), qd, H, q0, qn, &L->wq));
    EM_TRY(bind_rows(m, R, NM("self_attn.k_proj.weight"), kvd, H, k0, kn, &L->wk));
    EM_TRY(bind_rows(m, R, NM("self_attn.v_proj.weight"), kvd, H, k0, kn, &L->wv));
    EM_TRY(bind_cols(m, R, NM("self_attn.o_proj.weight"), H, qd, q0, qn, &L->wo));
    EM_TRY(bind_rows(m, R, NM("mlp.gate_proj.weight"), F, H, sh->ff0, sh->n_ff, &L->wg));
    EM_TRY(bind_rows(m, R, NM("mlp.up_proj.weight"), F, H, sh->ff0, sh->n_ff, &L->wu));
    EM_TRY(bind_cols(m, R, NM("mlp.down_proj.weight"), H, F, sh->ff0, sh->n_ff, &L->wd));
    if (c->qkv_bias) {
        EM_TRY(vec(m, R, NM("self_attn.q_proj.bias"), qd, q0, qn, &L->bq));
        EM_TRY(vec(m, R, NM("self_attn.k_proj.bias"), kvd, k0, kn, &L->bk));
        EM_TRY(vec(m, R, NM("self_attn.v_proj.bias"), kvd, k0, kn, &L->bv));
    }
    /* summed over ranks after the all-reduce: added once, by rank 0 */
    if (c->o_bias && sh->rank == 0) EM_TRY(vec(m, R, NM("self_attn.o_proj.bias"), H, 0, H, &L->bo));
    if (c->mlp_bias) {
        EM_TRY(vec(m, R, NM("mlp.gate_proj.bias"), F, sh->ff0, sh->n_ff, &L->bg));
        EM_TRY(vec(m, R, NM("mlp.up_proj.bias"), F, sh->ff0, sh->n_ff, &L->bu));
        if (sh->rank == 0) EM_TRY(vec(m, R, NM("mlp.down_proj.bias"), H, 0, H, &L->bd));
    }
    EM_TRY(vec(m, R, NM("input_layernorm.weight"), H, 0, H, &L->attn_norm));
    EM_TRY(vec(m, R, NM("post_attention_layernorm.weight"), H, 0, H, &L->mlp_norm));
    if (c->qk_norm) {
        EM_TRY(vec(m, R, NM("self_attn.q_norm.weight"), hd, 0, hd, &L->q_norm));
        EM_TRY(vec(m, R, NM("self_attn.k_norm.weight"), hd, 0, hd, &L->k_norm));
    }
#undef NM
    return EM_OK;
}

static em_status bind_rank(em_model *m, tp_rank *R) {
    const model_config *c = &m->cfg;
    R->layers = em_calloc((size_t)c->n_layers, sizeof *R->layers);
    if (!R->layers) return em_fail(EM_ERR_NOMEM, "out of memory");
    EM_TRY(bind_rows(m, R, "model.embed_tokens.weight", c->vocab, c->hidden, 0, c->vocab, &R->embed));
    const char *head = "lm_head.weight";
    if (c->tied_embeddings || !st_find(m->st, head)) {
        if (!c->tied_embeddings)
            return em_fail(EM_ERR_FORMAT, "%s: tensor lm_head.weight is missing and tie_word_embeddings is false", m->dir);
        head = "model.embed_tokens.weight";
    }
    tp_slice hs = {R->sh.vocab0, R->sh.n_vocab, 0, c->hidden, R->sh.vocab_pad};
    EM_TRY(weight_bind_shard(m, &R->wl, head, c->vocab, c->hidden, &hs, &R->head));
    EM_TRY(vec(m, R, "model.norm.weight", c->hidden, 0, c->hidden, &R->final_norm));
    for (int i = 0; i < c->n_layers; i++) EM_TRY(bind_layer(m, R, i, &R->layers[i]));
    EM_LOGI("%s: rank %d on %s: query heads %d..%d, KV heads %d..%d%s, features %lld..%lld, vocabulary %lld..%lld",
            m->dir, R->sh.rank, R->be->desc, R->sh.q_head0, R->sh.q_head0 + R->sh.n_q_heads - 1, R->sh.kv_head0,
            R->sh.kv_head0 + R->sh.n_kv_heads - 1, R->sh.kv_replicated ? " (replicated)" : "", (long long)R->sh.ff0,
            (long long)(R->sh.ff0 + R->sh.n_ff - 1), (long long)R->sh.vocab0,
            (long long)(R->sh.vocab0 + R->sh.n_vocab - 1));
    return EM_OK;
}

static void free_workspace(tp_rank *R) {
    float **ws[] = {&R->x, &R->h, &R->q, &R->k, &R->v, &R->att, &R->gate, &R->up, &R->act, &R->logits};
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
        if (*ws[k]) R->be->ops->free(R->be, *ws[k]);
        *ws[k] = NULL;
    }
}

static void free_rank(em_model *m, tp_rank *R) {
    if (!R->be) return;
    free_workspace(R);
    dev_list_free(&R->wl);
    free(R->layers);
    for (int l = 0; R->own_kv && R->k_layer && l < m->kv->n_layers; l++) {
        if (R->k_layer[l]) R->be->ops->release(R->be, R->k_layer[l], m->kv->layer_bytes);
        if (R->v_layer[l]) R->be->ops->release(R->be, R->v_layer[l], m->kv->layer_bytes);
    }
    if (R->own_kv) {
        free(R->k_layer);
        free(R->v_layer);
    }
    for (int s = 0; R->maps && s < m->kv->max_seqs; s++) {
        free(R->maps[s].ids);
        free(R->maps[s].k);
        free(R->maps[s].v);
    }
    free(R->maps);
    free(R->views);
}

static void dense_tp_free(em_model *m) {
    tp_impl *t = m->impl;
    if (!t) return;
    if (t->boot && t->rank0 == 0) {
        /* tells the other processes to stop (best effort: they also stop
         * when the connection closes) */
        int32_t stop[TP_STEP_HEADER];
        tp_step_stop(stop);
        if (boot_broadcast(t->boot, stop, sizeof stop, 1000) != EM_OK) EM_LOGW("%s", em_last_error());
    }
    boot_close(t->boot);
    for (int r = 0; t->r && r < t->n; r++) {
        if (t->gathered && t->gathered[r]) t->r[r].be->ops->free(t->r[r].be, t->gathered[r]);
        free_rank(m, &t->r[r]);
    }
    free(t->gathered);
    em_comm_free(t->comm); /* before the backends it queues on */
    for (int r = 1; t->r && r < t->n; r++) em_backend_free(t->r[r].be);
    free(t->r);
    free(t->sum_bufs);
    free(t->window);
    free(t->inv_freq);
    free(t->pos);
    free(t->ids);
    row_runs_free(&t->runs);
    free(t->span_rows);
    free(t->span_len0);
    free(t->host_slice);
    free(t->frame);
    free(t->rx);
    free(t->rx_spans);
    free(t);
    m->impl = NULL;
}

/* Opens the backends of ranks 1.., then the communicator over all. */
static em_status open_ranks(em_model *m, tp_impl *t) {
    em_backend **bes = em_calloc((size_t)t->n, sizeof *bes);
    if (!bes) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = EM_OK;
    bes[0] = m->be;
    for (int r = 1; r < t->n && s == EM_OK; r++) {
        char dev[32];
        /* host-memory ranks: the CPU (tests of the split graph) */
        if (m->be->ops->host_memory) snprintf(dev, sizeof dev, "cpu");
        else snprintf(dev, sizeof dev, "cuda:%d", m->tp_device0 + r);
        s = em_backend_open(dev, m->be->n_threads, &t->r[r].be);
        bes[r] = t->r[r].be;
    }
    if (s == EM_OK) s = em_comm_init_all(bes, t->n, tp_timeout_ms(m), &t->comm);
    free(bes);
    return s;
}

/* One process per rank: the rendezvous at EMBER_MASTER_ADDR:PORT hands
 * rank 0's NCCL id to the others, then each joins the communicator. */
static em_status open_procs(em_model *m, tp_impl *t) {
    const char *addr = em_config_str(m->config, EMC_MASTER_ADDR);
    int port = (int)em_config_int(m->config, EMC_MASTER_PORT), timeout = tp_timeout_ms(m);
    uint8_t id[EM_COMM_ID_BYTES];
    if (t->rank0 == 0) {
        EM_TRY(em_comm_unique_id(id));
        boot_listener *l;
        EM_TRY(boot_listen(addr, port, &l));
        EM_LOGI("tensor parallelism: rank 0 waits for %d more ranks on %s:%d", t->world - 1, addr, port);
        em_status s = boot_accept(l, t->world, id, sizeof id, timeout, &t->boot);
        boot_listener_close(l);
        EM_TRY(s);
    } else {
        size_t len;
        EM_TRY(boot_join(addr, port, t->rank0, t->world, id, sizeof id, &len, timeout, &t->boot));
        if (len != sizeof id)
            return em_fail(EM_ERR_FORMAT, "rendezvous: rank 0 sent %zu bytes where an NCCL id has %d", len,
                           EM_COMM_ID_BYTES);
    }
    return em_comm_init_rank(m->be, t->rank0, t->world, id, timeout, &t->comm);
}

static em_status dense_tp_load(em_model *m) {
    const model_config *c = &m->cfg;
    tp_impl *t = em_calloc(1, sizeof *t);
    if (!t) return em_fail(EM_ERR_NOMEM, "out of memory");
    m->impl = t;
    t->world = m->tp_size;
    t->n = m->tp_procs ? 1 : t->world;
    t->rank0 = m->tp_procs ? m->tp_rank : 0;
    t->r = em_calloc((size_t)t->n, sizeof *t->r);
    t->sum_bufs = em_calloc((size_t)t->n, sizeof *t->sum_bufs);
    t->window = em_calloc((size_t)c->n_layers, sizeof *t->window);
    if (!t->r || !t->sum_bufs || !t->window) return em_fail(EM_ERR_NOMEM, "out of memory");
    for (int r = 0; r < t->n; r++)
        EM_TRY(tp_plan_make(c->n_heads, c->n_kv_heads, c->intermediate, c->vocab, t->rank0 + r, t->world, &t->r[r].sh));
    t->r[0].be = m->be;
    EM_TRY(m->tp_procs ? open_procs(m, t) : open_ranks(m, t));
    for (int r = 0; r < t->n; r++) {
        t->r[r].wl.be = t->r[r].be;
        EM_TRY(bind_rank(m, &t->r[r]));
    }
    for (int i = 0; i < c->n_layers; i++)
        t->window[i] = c->sliding_window > 0 && c->layer_sliding[i] ? c->sliding_window : 0;
    t->rot_dim = (int)(c->head_dim * c->rope.partial_rotary_factor);
    t->rot_dim &= ~1;
    t->inv_freq = em_calloc((size_t)t->rot_dim / 2 + 1, sizeof *t->inv_freq);
    if (!t->inv_freq) return em_fail(EM_ERR_NOMEM, "out of memory");
    rope_inv_freq(&c->rope, t->rot_dim, c->max_pos, t->inv_freq, &t->attn_factor);
    /* decode steps are recorded as the one-GPU graph records them */
    t->graphs = m->be->ops->graph_begin && m->be->ops->graph_end && m->be->ops->graph_reset &&
                em_config_flag(m->config, EMC_CUDA_GRAPHS) && t->n <= 64;
    /* the cache holds a rank's KV heads */
    m->kv_heads = t->r[0].sh.n_kv_heads;
    return EM_OK;
}

/* One process per rank: the ranks agree on the KV blocks every one of them
 * holds (the fewest) and check that their sequence slots and context are
 * equal, through an all-reduce that is also the barrier after loading. */
#define KV_FACTS 3
static em_status agree_kv(em_model *m, tp_impl *t) {
    em_backend *be = m->be;
    size_t n = KV_FACTS * (size_t)t->world;
    float *h = em_calloc(n, sizeof *h), *d = be->ops->alloc(be, n * sizeof(float));
    em_status s = h && d ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
    if (s == EM_OK) {
        /* small integers: exact in f32 (blocks up to 2^24) */
        h[KV_FACTS * t->rank0] = (float)m->kv->max_blocks;
        h[KV_FACTS * t->rank0 + 1] = (float)m->kv->max_seqs;
        h[KV_FACTS * t->rank0 + 2] = (float)m->kv->max_ctx;
        s = be->ops->upload(be, d, h, n * sizeof(float));
    }
    if (s == EM_OK) s = em_comm_allreduce_sum(t->comm, &d, n);
    if (s == EM_OK && (s = em_comm_wait(t->comm)) != EM_OK)
        em_fail_prefix(s, "waiting for every rank to finish loading");
    if (s == EM_OK) s = be->ops->download(be, h, d, n * sizeof(float));
    int blocks = m->kv->max_blocks;
    for (int r = 0; s == EM_OK && r < t->world; r++) {
        const float *f = h + KV_FACTS * r;
        if ((int)f[0] < blocks) blocks = (int)f[0];
        if ((int)f[1] != m->kv->max_seqs || (int)f[2] != m->kv->max_ctx)
            s = em_fail(EM_ERR_INVALID, "tensor parallelism: rank %d has %d sequence slots of %d positions, rank %d "
                        "has %d of %d: start every rank with the same options", r, (int)f[1], (int)f[2], t->rank0,
                        m->kv->max_seqs, m->kv->max_ctx);
    }
    free(h);
    if (d) be->ops->free(be, d);
    EM_TRY(s);
    if (t->rank0 == 0 && blocks < m->kv->max_blocks) {
        EM_LOGI("tensor parallelism: KV cache of %d blocks, the smallest among the ranks", blocks);
        EM_TRY(kv_cache_limit_blocks(m->kv, blocks));
    }
    t->kv_blocks = blocks;
    /* a follower translates rank 0's block ids into its own storage */
    if (t->rank0 != 0) {
        tp_rank *R = &t->r[0];
        R->k_layer = m->kv->k_layer;
        R->v_layer = m->kv->v_layer;
        R->maps = em_calloc((size_t)m->kv->max_seqs, sizeof *R->maps);
        if (!R->maps) return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    return EM_OK;
}

/* Gives ranks 1.. of this process KV storage in the layout of the model's
 * cache. */
static em_status dense_tp_kv_ready(em_model *m) {
    tp_impl *t = m->impl;
    const kv_cache *kv = m->kv;
    if (t->boot) return agree_kv(m, t);
    t->kv_blocks = kv->max_blocks;
    for (int r = 1; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        R->own_kv = true;
        R->k_layer = em_calloc((size_t)kv->n_layers, sizeof *R->k_layer);
        R->v_layer = em_calloc((size_t)kv->n_layers, sizeof *R->v_layer);
        R->maps = em_calloc((size_t)kv->max_seqs, sizeof *R->maps);
        if (!R->k_layer || !R->v_layer || !R->maps) return em_fail(EM_ERR_NOMEM, "out of memory");
        for (int l = 0; l < kv->n_layers; l++) {
            R->k_layer[l] = R->be->ops->reserve(R->be, kv->layer_bytes);
            R->v_layer[l] = R->be->ops->reserve(R->be, kv->layer_bytes);
            if (!R->k_layer[l] || !R->v_layer[l])
                return em_fail(EM_ERR_NOMEM, "%s: cannot reserve %zu bytes of KV cache on %s (rank %d)", m->dir,
                               kv->layer_bytes, R->be->desc, r);
        }
    }
    return EM_OK;
}

/* ---- the step ---- */

static em_status ensure_workspace(em_model *m, tp_impl *t, int T) {
    if (T <= t->cap_tokens) return EM_OK;
    const model_config *c = &m->cfg;
    t->cap_tokens = 0;
    for (int r = 0; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        em_backend *be = R->be;
        /* recordings name the old buffers */
        if (be->ops->graph_reset) be->ops->graph_reset(be);
        float *keep_logits = R->logits;
        R->logits = NULL;
        free_workspace(R);
        R->logits = keep_logits;
        float **bufs[] = {&R->x, &R->h, &R->q, &R->k, &R->v, &R->att, &R->gate, &R->up, &R->act};
        size_t qd = (size_t)R->sh.n_q_heads * c->head_dim, kvd = (size_t)R->sh.n_kv_heads * c->head_dim;
        size_t ff = (size_t)R->sh.n_ff;
        size_t widths[] = {(size_t)c->hidden, (size_t)c->hidden, qd, kvd, kvd, qd, ff, ff, ff};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) {
            size_t bytes;
            if (!em_mul(widths[k] * sizeof(float), (size_t)T, &bytes) || !(*bufs[k] = be->ops->alloc(be, bytes)))
                return em_fail(EM_ERR_NOMEM, "out of %s memory for a batch of %d tokens", be->desc, T);
        }
    }
    free(t->pos);
    free(t->ids);
    t->pos = em_mallocn((size_t)T, sizeof *t->pos);
    t->ids = em_mallocn((size_t)T, sizeof *t->ids);
    if (!t->pos || !t->ids) return em_fail(EM_ERR_NOMEM, "out of memory");
    t->cap_tokens = T;
    return EM_OK;
}

static em_status ensure_logits(em_model *m, tp_impl *t, int rows) {
    if (rows <= t->cap_logit_rows) return EM_OK;
    t->cap_logit_rows = 0;
    size_t vp = (size_t)t->r[0].sh.vocab_pad, bytes;
    if (!em_mul((size_t)rows * sizeof(float), vp, &bytes)) return em_fail(EM_ERR_NOMEM, "too many logit rows");
    /* one process per rank: every rank's columns are gathered on each */
    size_t copies = t->world > t->n ? (size_t)t->world : 1;
    if (copies > 1 && !t->gathered && !(t->gathered = em_calloc((size_t)t->n, sizeof *t->gathered)))
        return em_fail(EM_ERR_NOMEM, "out of memory");
    for (int r = 0; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        if (R->be->ops->graph_reset) R->be->ops->graph_reset(R->be);
        if (R->logits) R->be->ops->free(R->be, R->logits);
        if (!(R->logits = R->be->ops->alloc(R->be, bytes)))
            return em_fail(EM_ERR_NOMEM, "out of %s memory for %d rows of logits", R->be->desc, rows);
        if (copies > 1) {
            if (t->gathered[r]) R->be->ops->free(R->be, t->gathered[r]);
            if (!(t->gathered[r] = R->be->ops->alloc(R->be, bytes * copies)))
                return em_fail(EM_ERR_NOMEM, "out of %s memory for %d rows of logits", R->be->desc, rows);
        }
    }
    free(t->host_slice);
    if (!(t->host_slice = em_mallocn((size_t)rows * vp * copies, sizeof(float))))
        return em_fail(EM_ERR_NOMEM, "out of memory");
    (void)m;
    t->cap_logit_rows = rows;
    return EM_OK;
}

static em_status ensure_spans(tp_impl *t, const em_batch *b) {
    if (b->n_spans > t->cap_spans) {
        int *rows = realloc(t->span_rows, (size_t)b->n_spans * sizeof *rows);
        if (rows) t->span_rows = rows;
        int *len0 = rows ? realloc(t->span_len0, (size_t)b->n_spans * sizeof *len0) : NULL;
        if (!len0) return em_fail(EM_ERR_NOMEM, "out of memory for a batch of %d sequences", b->n_spans);
        t->span_len0 = len0;
        for (int r = 0; r < t->n; r++) {
            em_kv_view *v = realloc(t->r[r].views, (size_t)b->n_spans * sizeof *v);
            if (!v) return em_fail(EM_ERR_NOMEM, "out of memory for a batch of %d sequences", b->n_spans);
            t->r[r].views = v;
        }
        t->cap_spans = b->n_spans;
    }
    for (int s = 0; s < b->n_spans; s++) t->span_rows[s] = b->spans[s].n;
    return EM_OK;
}

/* Brings a rank's translation of a sequence's block table (ids[0..n)) up
 * to date: entries whose block id changed (or are new) get this rank's
 * pointers. */
static em_status map_update(const kv_cache *kv, tp_rank *R, int seq, const int32_t *ids, int n) {
    tp_seq_map *mp = &R->maps[seq];
    int L = kv->n_layers;
    if (n > mp->cap) {
        int cap = mp->cap ? mp->cap : 8;
        while (cap < n) cap *= 2;
        int *nid = em_mallocn((size_t)cap, sizeof *nid);
        float **k = em_mallocn((size_t)cap * (size_t)L, sizeof *k);
        float **v = em_mallocn((size_t)cap * (size_t)L, sizeof *v);
        if (!nid || !k || !v) {
            free(nid), free(k), free(v);
            return em_fail(EM_ERR_NOMEM, "out of memory growing a block table");
        }
        free(mp->ids), free(mp->k), free(mp->v);
        mp->ids = nid, mp->k = k, mp->v = v;
        mp->cap = cap;
        mp->n = 0; /* rebuilt below */
    }
    for (int i = 0; i < n; i++) {
        int b = ids[i];
        if (i < mp->n && mp->ids[i] == b) continue;
        mp->ids[i] = b;
        for (int l = 0; l < L; l++) {
            mp->k[(size_t)l * mp->cap + i] = R->k_layer[l] + (size_t)b * kv->block_floats;
            mp->v[(size_t)l * mp->cap + i] = R->v_layer[l] + (size_t)b * kv->block_floats;
        }
    }
    mp->n = n;
    return EM_OK;
}

static em_kv_view rank_view(const em_model *m, const tp_rank *R, int seq, int layer) {
    if (!R->maps) return kv_seq_view(m->kv, seq, layer);
    const tp_seq_map *mp = &R->maps[seq];
    em_kv_view v = {mp->k + (size_t)layer * mp->cap, mp->v + (size_t)layer * mp->cap, m->kv->block_size, mp->n};
    return v;
}

static void mm(tp_impl *t, tp_rank *R, float *out, const float *in, const em_weight *w, const float *bias) {
    row_runs_matmul(R->be, &t->runs, out, in, w, bias);
}

/* A rank's attention up to its partial o_proj output in R->h. */
static void attention_part(em_model *m, tp_impl *t, tp_rank *R, int layer, const em_batch *b, int T) {
    const model_config *c = &m->cfg;
    em_backend *be = R->be;
    const em_backend_ops *op = be->ops;
    tp_layer *L = &R->layers[layer];
    int nq = R->sh.n_q_heads, nkv = R->sh.n_kv_heads, hd = c->head_dim;
    float eps = (float)c->rms_eps;
    op->rmsnorm(be, R->h, R->x, L->attn_norm, T, c->hidden, eps, 0.0f);
    mm(t, R, R->q, R->h, &L->wq, L->bq);
    mm(t, R, R->k, R->h, &L->wk, L->bk);
    mm(t, R, R->v, R->h, &L->wv, L->bv);
    if (L->q_norm) {
        op->rmsnorm(be, R->q, R->q, L->q_norm, T * nq, hd, eps, 0.0f);
        op->rmsnorm(be, R->k, R->k, L->k_norm, T * nkv, hd, eps, 0.0f);
    }
    op->rope(be, R->q, T, nq, hd, t->rot_dim, t->pos, t->inv_freq, t->attn_factor);
    op->rope(be, R->k, T, nkv, hd, t->rot_dim, t->pos, t->inv_freq, t->attn_factor);
    float scale = 1.0f / sqrtf((float)hd);
    if (op->attention_spans && op->kv_write_spans) {
        for (int s = 0; s < b->n_spans; s++) R->views[s] = rank_view(m, R, b->spans[s].seq, layer);
        em_kv_spans spans = {R->views, t->span_rows, b->n_spans};
        op->kv_write_spans(be, &spans, R->k, R->v, t->pos, nkv, hd);
        op->attention_spans(be, R->att, R->q, &spans, t->pos, nq, nkv, hd, scale, t->window[layer]);
    } else {
        int row = 0;
        size_t qd = (size_t)nq * hd, kvd = (size_t)nkv * hd;
        for (int s = 0; s < b->n_spans; s++) {
            const em_span *sp = &b->spans[s];
            em_kv_view kv = rank_view(m, R, sp->seq, layer);
            op->kv_write(be, &kv, R->k + row * kvd, R->v + row * kvd, t->pos + row, sp->n, nkv, hd);
            op->attention(be, R->att + row * qd, R->q + row * qd, &kv, t->pos + row, sp->n, nq, nkv, hd, scale,
                          t->window[layer]);
            row += sp->n;
        }
    }
    mm(t, R, R->h, R->att, &L->wo, L->bo);
}

/* A rank's MLP slice up to its partial down_proj output in R->h. */
static void mlp_part(em_model *m, tp_impl *t, tp_rank *R, int layer, int T) {
    const model_config *c = &m->cfg;
    em_backend *be = R->be;
    tp_layer *L = &R->layers[layer];
    int ff = (int)R->sh.n_ff;
    be->ops->rmsnorm(be, R->h, R->x, L->mlp_norm, T, c->hidden, (float)c->rms_eps, 0.0f);
    mm(t, R, R->gate, R->h, &L->wg, L->bg);
    mm(t, R, R->up, R->h, &L->wu, L->bu);
    be->ops->swiglu(be, R->act, R->gate, R->up, T, ff, ff);
    mm(t, R, R->h, R->act, &L->wd, L->bd);
}

/* The local ranks a step is issued to (bit r: rank r). */
typedef uint64_t rank_mask;
#define ALL_RANKS(n) ((n) >= 64 ? ~(rank_mask)0 : (((rank_mask)1 << (n)) - 1))
#define HAS(mask, r) (((mask) >> (r)) & 1)

/* x += sum over ranks of each rank's h, on the ranks of mask. collectives
 * false: a recorded step is being replayed, whose recording holds the
 * all-reduce already. */
static em_status reduce_into_x(em_model *m, tp_impl *t, int T, rank_mask mask, bool collectives) {
    size_t n = (size_t)T * m->cfg.hidden;
    for (int r = 0; r < t->n; r++) t->sum_bufs[r] = HAS(mask, r) ? t->r[r].h : NULL;
    if (collectives) EM_TRY(em_comm_allreduce_sum(t->comm, t->sum_bufs, n));
    for (int r = 0; r < t->n; r++)
        if (HAS(mask, r)) t->r[r].be->ops->add(t->r[r].be, t->r[r].x, t->r[r].h, n);
    return EM_OK;
}

static em_status issue_step(em_model *m, tp_impl *t, const em_batch *b, int T, rank_mask mask, bool collectives) {
    const model_config *c = &m->cfg;
    for (int r = 0; r < t->n; r++)
        if (HAS(mask, r)) t->r[r].be->ops->embed(t->r[r].be, t->r[r].x, &t->r[r].embed, t->ids, T);
    for (int l = 0; l < c->n_layers; l++) {
        for (int r = 0; r < t->n; r++)
            if (HAS(mask, r)) attention_part(m, t, &t->r[r], l, b, T);
        EM_TRY(reduce_into_x(m, t, T, mask, collectives));
        for (int r = 0; r < t->n; r++)
            if (HAS(mask, r)) mlp_part(m, t, &t->r[r], l, T);
        EM_TRY(reduce_into_x(m, t, T, mask, collectives));
    }
    for (int r = 0; r < t->n; r++) {
        if (!HAS(mask, r)) continue;
        tp_rank *R = &t->r[r];
        int rows = batch_gather_logit_rows(R->be, b, R->x, R->h, c->hidden);
        if (!rows) continue;
        R->be->ops->rmsnorm(R->be, R->h, R->h, R->final_norm, rows, c->hidden, (float)c->rms_eps, 0.0f);
        R->be->ops->matmul(R->be, R->logits, R->h, rows, &R->head, NULL, EM_MATH_EXACT);
    }
    return EM_OK;
}

/* Puts row i of rank r's logit columns (vocab_pad wide) into their place. */
static void place_columns(float *logits, const float *cols, int rows, int64_t V, int64_t vp, int r) {
    int64_t v0 = (int64_t)r * vp, nv = V - v0 < vp ? V - v0 : vp;
    for (int i = 0; nv > 0 && i < rows; i++)
        memcpy(logits + (size_t)i * (size_t)V + (size_t)v0, cols + (size_t)i * (size_t)vp, (size_t)nv * sizeof(float));
}

/* Downloads every rank's logit columns into their place in logits: from
 * each local rank, or (one process per rank) from the all-gather. */
static em_status gather_logits(em_model *m, tp_impl *t, int rows, float *logits) {
    int64_t V = m->cfg.vocab, vp = t->r[0].sh.vocab_pad;
    size_t slice = (size_t)rows * (size_t)vp;
    if (t->gathered) {
        em_backend *be = t->r[0].be;
        EM_TRY(be->ops->download(be, t->host_slice, t->gathered[0], slice * (size_t)t->world * sizeof(float)));
        for (int r = 0; r < t->world; r++) place_columns(logits, t->host_slice + (size_t)r * slice, rows, V, vp, r);
        return EM_OK;
    }
    for (int r = 0; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        EM_TRY(R->be->ops->download(R->be, t->host_slice, R->logits, slice * sizeof(float)));
        place_columns(logits, t->host_slice, rows, V, vp, t->rank0 + r);
    }
    return EM_OK;
}

/* A decode step that may be recorded: one token and its logits per
 * sequence, few enough rows for the GEMV path. */
static bool recordable(const tp_impl *t, const em_batch *b, int T) {
    if (!t->graphs || T > 64) return false;
    for (int s = 0; s < b->n_spans; s++)
        if (b->spans[s].n != 1 || b->spans[s].logits != LOGITS_LAST) return false;
    return true;
}

/* Issues the step, through recordings when the step allows them: each
 * local rank records its own stream's operations (its NCCL calls inside,
 * the ranks' calls grouped as when they run one by one), and replays them
 * after. The local ranks move together: when their recordings disagree
 * (one replays, another must record) they are all forgotten and the step
 * runs without them. A rank whose recording did not run (graph_end's ran
 * false) runs its operations one by one afterwards, collectives included,
 * so every rank — here or in another process — runs each collective once,
 * in order. */
static em_status issue_recorded(em_model *m, tp_impl *t, const em_batch *b, int T) {
    rank_mask all = ALL_RANKS(t->n);
    if (!recordable(t, b, T)) return issue_step(m, t, b, T, all, true);
    em_graph_mode modes[64];
    bool same = true;
    for (int r = 0; r < t->n; r++) {
        em_backend *be = t->r[r].be;
        modes[r] = be->ops->graph_begin(be, (uint64_t)T);
        same = same && modes[r] == modes[0];
    }
    if (!same) {
        for (int r = 0; r < t->n; r++) {
            em_backend *be = t->r[r].be;
            bool ran;
            /* nothing issued: an empty recording, or a replay that does not
             * match and is dropped; then every recording is forgotten */
            if (modes[r] != EM_GRAPH_NONE) EM_TRY(be->ops->graph_end(be, &ran));
            be->ops->graph_reset(be);
        }
        return issue_step(m, t, b, T, all, true);
    }
    if (modes[0] == EM_GRAPH_NONE) return issue_step(m, t, b, T, all, true);
    em_status s = issue_step(m, t, b, T, all, modes[0] != EM_GRAPH_REPLAY);
    rank_mask missed = 0;
    for (int r = 0; r < t->n; r++) {
        em_backend *be = t->r[r].be;
        bool ran = false;
        em_status e = be->ops->graph_end(be, &ran);
        if (s == EM_OK) s = e;
        if (!ran) missed |= (rank_mask)1 << r;
    }
    if (s == EM_OK && missed) s = issue_step(m, t, b, T, missed, true);
    return s;
}

/* Issues the step, waits for every stream (or a clear error) and brings
 * the logits home (logits NULL: a follower, whose columns went to rank 0). */
static em_status run_step(em_model *m, tp_impl *t, const em_batch *b, int T, float *logits) {
    int rows = batch_logit_rows(b);
    if (rows) EM_TRY(ensure_logits(m, t, rows));
    EM_TRY(issue_recorded(m, t, b, T));
    if (rows && t->gathered) {
        size_t slice = (size_t)rows * (size_t)t->r[0].sh.vocab_pad;
        const float *send[1] = {t->r[0].logits};
        EM_TRY(em_comm_allgather(t->comm, send, t->gathered, slice));
    }
    EM_TRY(em_comm_wait(t->comm));
    if (rows && logits) return gather_logits(m, t, rows, logits);
    /* the streams are idle: an empty download reports any failure of the
     * step's operations and lets each backend reuse its staging memory */
    for (int r = 0; r < t->n; r++) {
        float none;
        EM_TRY(t->r[r].be->ops->download(t->r[r].be, &none, t->r[r].x, 0));
    }
    return EM_OK;
}

/* Rank 0 of a multi-process group: sends the step (spans, their start
 * positions, block tables and tokens) to the other ranks (tp_step.h). */
static em_status send_step(em_model *m, tp_impl *t, const em_batch *b) {
    size_t words = tp_step_encode(NULL, b, t->span_len0, m->kv);
    if (words > t->frame_cap) {
        int32_t *f = realloc(t->frame, words * sizeof *f);
        if (!f) return em_fail(EM_ERR_NOMEM, "out of memory for a step of %zu words", words);
        t->frame = f;
        t->frame_cap = words;
    }
    tp_step_encode(t->frame, b, t->span_len0, m->kv);
    return boot_broadcast(t->boot, t->frame, words * sizeof(int32_t), tp_timeout_ms(m));
}

static em_status dense_tp_forward(em_model *m, const em_batch *b, float *logits) {
    tp_impl *t = m->impl;
    const model_config *c = &m->cfg;
    if (t->rank0 != 0)
        return em_fail(EM_ERR_INTERNAL, "rank %d of a multi-process group runs only the steps rank 0 sends", t->rank0);
    int T = batch_tokens(b);
    if (T == 0) return EM_OK;
    EM_TRY(ensure_workspace(m, t, T));
    EM_TRY(ensure_spans(t, b));
    EM_TRY(row_runs_plan_batch(&t->runs, b, m->prefill_math));
    int row = 0;
    for (int s = 0; s < b->n_spans; s++) {
        const em_span *sp = &b->spans[s];
        int len = m->kv->seqs[sp->seq].len;
        t->span_len0[s] = len;
        EM_TRY(kv_seq_reserve(m->kv, sp->seq, len + sp->n));
        for (int i = 0; i < sp->n; i++) {
            if (sp->tokens[i] < 0 || sp->tokens[i] >= c->vocab)
                return em_fail(EM_ERR_INVALID, "token id %d is outside the vocabulary of %d", sp->tokens[i], c->vocab);
            t->ids[row] = sp->tokens[i];
            t->pos[row++] = len + i;
        }
        const kv_seq *q = &m->kv->seqs[sp->seq];
        for (int r = 1; r < t->n; r++) EM_TRY(map_update(m->kv, &t->r[r], sp->seq, q->blocks, q->n_blocks));
    }
    /* everything that can fail on this side before the others start */
    int rows = batch_logit_rows(b);
    if (rows) EM_TRY(ensure_logits(m, t, rows));
    if (t->boot) EM_TRY(send_step(m, t, b));
    EM_TRY(run_step(m, t, b, T, logits));
    for (int s = 0; s < b->n_spans; s++) m->kv->seqs[b->spans[s].seq].len += b->spans[s].n;
    return EM_OK;
}

/* ---- the other processes of a group ---- */

/* Runs one checked step: spans over the received words, positions from
 * their start, block tables translated into this rank's storage. */
static em_status follow_step(em_model *m, tp_impl *t, const int32_t *w, int n_spans, int T) {
    if (n_spans > t->cap_spans) {
        em_span *sp = realloc(t->rx_spans, (size_t)n_spans * sizeof *sp);
        if (!sp) return em_fail(EM_ERR_NOMEM, "out of memory");
        t->rx_spans = sp;
    }
    size_t at = TP_STEP_HEADER;
    int row = 0;
    EM_TRY(ensure_workspace(m, t, T));
    for (int s = 0; s < n_spans; s++) {
        tp_step_span sp;
        at = tp_step_span_at(w, at, &sp);
        t->rx_spans[s] = (em_span){sp.seq, sp.tokens, sp.n, (logits_mode)sp.logits};
        EM_TRY(map_update(m->kv, &t->r[0], sp.seq, sp.blocks, sp.n_blocks));
        for (int i = 0; i < sp.n; i++) {
            t->ids[row] = sp.tokens[i];
            t->pos[row++] = sp.len0 + i;
        }
    }
    em_batch b = {t->rx_spans, n_spans};
    EM_TRY(ensure_spans(t, &b));
    EM_TRY(row_runs_plan_batch(&t->runs, &b, m->prefill_math));
    return run_step(m, t, &b, T, NULL);
}

bool model_tp_follower(const em_model *m) {
    return m->family == &dense_tp_family && m->impl && ((const tp_impl *)m->impl)->rank0 != 0;
}

em_status model_tp_follow(em_model *m) {
    if (!model_tp_follower(m)) return em_fail(EM_ERR_INTERNAL, "only ranks > 0 of a multi-process group follow");
    tp_impl *t = m->impl;
    EM_LOGI("tensor parallelism: rank %d of %d ready, running rank 0's steps", t->rank0, t->world);
    for (;;) {
        size_t len;
        em_status s = boot_receive(t->boot, &t->rx, &t->rx_cap, &len, -1);
        if (s != EM_OK) return em_fail_prefix(s, "rank %d: rank 0 is gone", t->rank0);
        const kv_cache *kv = m->kv;
        tp_step_limits lim = {kv->max_seqs, kv->max_ctx, kv->block_size, t->kv_blocks, m->cfg.vocab};
        int n_spans = 0, T = 0;
        s = len % sizeof(int32_t) ? em_fail(EM_ERR_FORMAT, "malformed step from rank 0: not whole words")
                                  : tp_step_check(t->rx, len / sizeof(int32_t), &lim, &n_spans, &T);
        if (s != EM_OK) return em_fail_prefix(s, "rank %d", t->rank0);
        if (T < 0) {
            EM_LOGI("tensor parallelism: rank 0 stopped; rank %d stops", t->rank0);
            return EM_OK;
        }
        EM_TRY(follow_step(m, t, t->rx, n_spans, T));
    }
}

const family_ops dense_tp_family = {
    .name = "dense (tensor parallel)",
    .load = dense_tp_load,
    .forward = dense_tp_forward,
    .free = dense_tp_free,
    .kv_ready = dense_tp_kv_ready,
};

int model_tp_size(const em_model *m) { return m->family == &dense_tp_family ? ((const tp_impl *)m->impl)->world : 1; }

void model_tp_timing(em_model *m, bool on) {
    if (m->family == &dense_tp_family && m->impl) em_comm_set_timing(((tp_impl *)m->impl)->comm, on);
}

double model_tp_take_time(em_model *m, long *calls) {
    if (m->family != &dense_tp_family || !m->impl) {
        if (calls) *calls = 0;
        return 0;
    }
    return em_comm_take_time(((tp_impl *)m->impl)->comm, calls);
}
