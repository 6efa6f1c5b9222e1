/* dense_tp_load.c — loading a split graph: the ranks' backends and
 * communicator — one process over several GPUs, or one rank per process
 * met at the rendezvous — the weight slices every family has (embedding,
 * head, final norm), the Llama family's layer slices (tp_plan.h says
 * which), and the ranks' KV storage. */
#include "model/dense_tp_internal.h"

#include "base/alloc.h"
#include "base/log.h"
#include "model/rope.h"
#include "model/tp_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LNAME(buf, i, suffix) snprintf(buf, sizeof buf, "model.layers.%d.%s", i, suffix)

em_status dense_tp_f32(em_model *m, tp_rank *R, const char *name, int ndim, const int64_t *shape, const tp_rows *rows,
                       int n, float shift, float **out) {
    EM_TRY(weight_load_rows_shard(m, R->be, name, ndim, shape, rows, n, shift, out));
    em_status s = dev_list_add(&R->wl, *out);
    if (s != EM_OK) {
        R->be->ops->free(R->be, *out);
        *out = NULL;
    }
    return s;
}

em_status dense_tp_vec(em_model *m, tp_rank *R, const char *name, int64_t n_full, int64_t off, int64_t n, float **out) {
    tp_rows r = {off, n};
    return dense_tp_f32(m, R, name, 1, &n_full, &r, 1, 0.0f, out);
}

em_status dense_tp_rows(em_model *m, tp_rank *R, const char *name, int64_t rows, int64_t cols, int64_t r0, int64_t n,
                        em_weight *w) {
    tp_slice s = {r0, n, 0, cols, n};
    return weight_bind_shard(m, &R->wl, name, rows, cols, &s, w);
}

em_status dense_tp_cols(em_model *m, tp_rank *R, const char *name, int64_t rows, int64_t cols, int64_t c0, int64_t n,
                        em_weight *w) {
    tp_slice s = {0, rows, c0, n, rows};
    return weight_bind_shard(m, &R->wl, name, rows, cols, &s, w);
}

em_status dense_tp_bind_attn(em_model *m, tp_rank *R, const char *p, int q_rows, tp_layer *L) {
    const model_config *c = &m->cfg;
    const tp_shard *sh = &R->sh;
    int64_t H = c->hidden, hd = c->head_dim;
    int64_t qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
    int64_t q0 = sh->q_head0 * hd, qn = sh->n_q_heads * hd, k0 = sh->kv_head0 * hd, kn = sh->n_kv_heads * hd;
    char name[200];
#define PNAME(suffix) (snprintf(name, sizeof name, "%s%s", p, suffix), name)
    EM_TRY(dense_tp_rows(m, R, PNAME("self_attn.q_proj.weight"), q_rows * qd, H, q_rows * q0, q_rows * qn, &L->wq));
    EM_TRY(dense_tp_rows(m, R, PNAME("self_attn.k_proj.weight"), kvd, H, k0, kn, &L->wk));
    EM_TRY(dense_tp_rows(m, R, PNAME("self_attn.v_proj.weight"), kvd, H, k0, kn, &L->wv));
    EM_TRY(dense_tp_cols(m, R, PNAME("self_attn.o_proj.weight"), H, qd, q0, qn, &L->wo));
    if (c->qkv_bias) {
        EM_TRY(dense_tp_vec(m, R, PNAME("self_attn.q_proj.bias"), q_rows * qd, q_rows * q0, q_rows * qn, &L->bq));
        EM_TRY(dense_tp_vec(m, R, PNAME("self_attn.k_proj.bias"), kvd, k0, kn, &L->bk));
        EM_TRY(dense_tp_vec(m, R, PNAME("self_attn.v_proj.bias"), kvd, k0, kn, &L->bv));
    }
    /* summed over ranks after the all-reduce: added once, by rank 0 */
    if (c->o_bias && sh->rank == 0) EM_TRY(dense_tp_vec(m, R, PNAME("self_attn.o_proj.bias"), H, 0, H, &L->bo));
#undef PNAME
    return EM_OK;
}

em_status dense_tp_bind_mlp(em_model *m, tp_rank *R, const char *p, tp_layer *L) {
    const tp_shard *sh = &R->sh;
    int64_t H = m->cfg.hidden, F = m->cfg.intermediate;
    char name[200];
#define PNAME(suffix) (snprintf(name, sizeof name, "%s%s", p, suffix), name)
    EM_TRY(dense_tp_rows(m, R, PNAME("mlp.gate_proj.weight"), F, H, sh->ff0, sh->n_ff, &L->wg));
    EM_TRY(dense_tp_rows(m, R, PNAME("mlp.up_proj.weight"), F, H, sh->ff0, sh->n_ff, &L->wu));
    EM_TRY(dense_tp_cols(m, R, PNAME("mlp.down_proj.weight"), H, F, sh->ff0, sh->n_ff, &L->wd));
#undef PNAME
    return EM_OK;
}

static em_status bind_layer(em_model *m, tp_rank *R, int i, tp_layer *L) {
    const model_config *c = &m->cfg;
    const tp_shard *sh = &R->sh;
    int64_t H = c->hidden, hd = c->head_dim, F = c->intermediate;
    char name[160];
#define NM(suffix) (LNAME(name, i, suffix), name)
    snprintf(name, sizeof name, "model.layers.%d.", i);
    EM_TRY(dense_tp_bind_attn(m, R, name, 1, L));
    EM_TRY(dense_tp_bind_mlp(m, R, name, L));
    if (c->mlp_bias) {
        EM_TRY(dense_tp_vec(m, R, NM("mlp.gate_proj.bias"), F, sh->ff0, sh->n_ff, &L->bg));
        EM_TRY(dense_tp_vec(m, R, NM("mlp.up_proj.bias"), F, sh->ff0, sh->n_ff, &L->bu));
        if (sh->rank == 0) EM_TRY(dense_tp_vec(m, R, NM("mlp.down_proj.bias"), H, 0, H, &L->bd));
    }
    EM_TRY(dense_tp_vec(m, R, NM("input_layernorm.weight"), H, 0, H, &L->attn_norm));
    EM_TRY(dense_tp_vec(m, R, NM("post_attention_layernorm.weight"), H, 0, H, &L->mlp_norm));
    if (c->qk_norm) {
        EM_TRY(dense_tp_vec(m, R, NM("self_attn.q_norm.weight"), hd, 0, hd, &L->q_norm));
        EM_TRY(dense_tp_vec(m, R, NM("self_attn.k_norm.weight"), hd, 0, hd, &L->k_norm));
    }
#undef NM
    return EM_OK;
}

em_status dense_tp_bind_ends(em_model *m, tp_rank *R, float norm_shift) {
    const model_config *c = &m->cfg;
    char buf[256];
    EM_TRY(dense_tp_rows(m, R, "model.embed_tokens.weight", c->vocab, c->hidden, 0, c->vocab, &R->embed));
    const char *head = "lm_head.weight";
    if (c->tied_embeddings || !st_find(m->st, weight_resolve(m, head, buf, sizeof buf))) {
        if (!c->tied_embeddings)
            return em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing and tie_word_embeddings is false", m->dir, buf);
        head = "model.embed_tokens.weight";
    }
    tp_slice hs = {R->sh.vocab0, R->sh.n_vocab, 0, c->hidden, R->sh.vocab_pad};
    EM_TRY(weight_bind_shard(m, &R->wl, head, c->vocab, c->hidden, &hs, &R->head));
    int64_t H = c->hidden;
    tp_rows all = {0, H};
    return dense_tp_f32(m, R, "model.norm.weight", 1, &H, &all, 1, norm_shift, &R->final_norm);
}

static em_status bind_rank(em_model *m, tp_rank *R) {
    const model_config *c = &m->cfg;
    R->layers = em_calloc((size_t)c->n_layers, sizeof *R->layers);
    if (!R->layers) return em_fail(EM_ERR_NOMEM, "out of memory");
    EM_TRY(dense_tp_bind_ends(m, R, 0.0f));
    for (int i = 0; i < c->n_layers; i++) EM_TRY(bind_layer(m, R, i, &R->layers[i]));
    EM_LOGI("%s: rank %d on %s: query heads %d..%d, KV heads %d..%d%s, features %lld..%lld, vocabulary %lld..%lld",
            m->dir, R->sh.rank, R->be->desc, R->sh.q_head0, R->sh.q_head0 + R->sh.n_q_heads - 1, R->sh.kv_head0,
            R->sh.kv_head0 + R->sh.n_kv_heads - 1, R->sh.kv_replicated ? " (replicated)" : "", (long long)R->sh.ff0,
            (long long)(R->sh.ff0 + R->sh.n_ff - 1), (long long)R->sh.vocab0,
            (long long)(R->sh.vocab0 + R->sh.n_vocab - 1));
    return EM_OK;
}

void dense_tp_free_workspace(tp_rank *R) {
    float **ws[] = {&R->x, &R->h, &R->q,  &R->k, &R->v, &R->att, &R->gate, &R->up,   &R->act,  &R->logits,
                    &R->qg, &R->qkv, &R->z, &R->a, &R->b, &R->g, &R->beta, &R->core};
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
        if (*ws[k]) R->be->ops->free(R->be, *ws[k]);
        *ws[k] = NULL;
    }
}

static void free_rank(em_model *m, tp_rank *R) {
    if (!R->be) return;
    dense_tp_free_workspace(R);
    rstate_free(R->rs);
    if (R->amax_ids) R->be->ops->free(R->be, R->amax_ids);
    if (R->amax_vals) R->be->ops->free(R->be, R->amax_vals);
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

void dense_tp_free(em_model *m) {
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
    /* Recorded steps hold NCCL operations, and NCCL keeps a communicator
     * alive until every graph that captured it is gone: forget them first. */
    for (int r = 0; t->r && r < t->n; r++)
        if (t->r[r].be && t->r[r].be->ops->graph_reset) t->r[r].be->ops->graph_reset(t->r[r].be);
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
    free(t->amax_host);
    free(t->frame);
    free(t->rx);
    free(t->rx_spans);
    free(t->q35_spans);
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
    if (s == EM_OK) s = em_comm_init_all(bes, t->n, dense_tp_timeout_ms(m), &t->comm);
    free(bes);
    return s;
}

/* One process per rank: the rendezvous at EMBER_MASTER_ADDR:PORT hands
 * rank 0's NCCL id to the others, then each joins the communicator. */
static em_status open_procs(em_model *m, tp_impl *t) {
    const char *addr = em_config_str(m->config, EMC_MASTER_ADDR);
    int port = (int)em_config_int(m->config, EMC_MASTER_PORT), timeout = dense_tp_timeout_ms(m);
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

em_status dense_tp_start(em_model *m) {
    const model_config *c = &m->cfg;
    if (model_config_has_online_rotations(c))
        return em_fail(EM_ERR_UNSUPPORTED,
                       "%s: the weights were written for online rotations (config.json ember_transform), which "
                       "tensor parallelism does not apply",
                       m->dir);
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
    for (int r = 0; r < t->n; r++) t->r[r].wl.be = t->r[r].be;
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

em_status dense_tp_load(em_model *m) {
    EM_TRY(dense_tp_start(m));
    tp_impl *t = m->impl;
    for (int r = 0; r < t->n; r++) EM_TRY(bind_rank(m, &t->r[r]));
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
em_status dense_tp_kv_ready(em_model *m) {
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
