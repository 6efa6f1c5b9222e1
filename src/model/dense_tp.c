/* dense_tp.c — the Llama family graph split over several GPUs (tensor
 * parallelism, Megatron-style; the plan is in tp_plan.h), and the step the
 * split Qwen3.5 graph shares with it: the Qwen3.5 family plugs in its own
 * token mixer (qwen3_5_tp.c), everything else below is the same.
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
#include "model/dense_tp_internal.h"

#include "base/alloc.h"
#include "model/tp_step.h"
#include "model/workspace.h"
#include "tensor/argmax.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_status dense_tp_ensure_workspace(em_model *m, tp_impl *t, int T) {
    if (T <= t->cap_tokens) return EM_OK;
    const model_config *c = &m->cfg;
    t->cap_tokens = 0;
    for (int r = 0; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        em_backend *be = R->be;
        size_t qd = (size_t)R->sh.n_q_heads * c->head_dim, kvd = (size_t)R->sh.n_kv_heads * c->head_dim;
        size_t ff = (size_t)R->sh.n_ff, hv = (size_t)R->sh.n_lin_v_heads, vd = hv * (size_t)c->q35.lin_v_dim;
        /* the Qwen3.5 buffers' widths: 0 (none) in the Llama family */
        size_t q = t->q35 ? 1 : 0, H = (size_t)c->hidden;
        const ws_buf bufs[] = {
            {&R->x, H}, {&R->h, H}, {&R->q, qd}, {&R->k, kvd}, {&R->v, kvd}, {&R->att, qd}, {&R->gate, ff},
            {&R->up, ff}, {&R->act, ff}, {&R->qg, q * 2 * qd}, {&R->qkv, q * (size_t)t->lin_channels},
            {&R->z, q * vd}, {&R->a, q * hv}, {&R->b, q * hv}, {&R->g, q * hv}, {&R->beta, q * hv},
            {&R->core, q * vd},
        };
        EM_TRY(ws_bufs_alloc(be, bufs, sizeof bufs / sizeof bufs[0], T));
    }
    EM_TRY(ws_tokens_alloc(&t->pos, &t->ids, T));
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
        if (R->amax_ids) R->be->ops->free(R->be, R->amax_ids);
        if (R->amax_vals) R->be->ops->free(R->be, R->amax_vals);
        R->amax_ids = R->be->ops->alloc(R->be, (size_t)rows * sizeof(int32_t));
        R->amax_vals = R->be->ops->alloc(R->be, (size_t)rows * sizeof(float));
        if (!(R->logits = R->be->ops->alloc(R->be, bytes)) || !R->amax_ids || !R->amax_vals)
            return em_fail(EM_ERR_NOMEM, "out of %s memory for %d rows of logits", R->be->desc, rows);
        if (copies > 1) {
            if (t->gathered[r]) R->be->ops->free(R->be, t->gathered[r]);
            if (!(t->gathered[r] = R->be->ops->alloc(R->be, bytes * copies)))
                return em_fail(EM_ERR_NOMEM, "out of %s memory for %d rows of logits", R->be->desc, rows);
        }
    }
    free(t->host_slice);
    free(t->amax_host);
    t->amax_host = em_mallocn((size_t)rows * 3, sizeof(float));
    if (!(t->host_slice = em_mallocn((size_t)rows * vp * copies, sizeof(float))) || !t->amax_host)
        return em_fail(EM_ERR_NOMEM, "out of memory");
    (void)m;
    t->cap_logit_rows = rows;
    return EM_OK;
}

em_status dense_tp_ensure_spans(tp_impl *t, const em_batch *b) {
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
em_status dense_tp_map_update(const kv_cache *kv, tp_rank *R, int seq, const int32_t *ids, int n) {
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

em_kv_view dense_tp_view(const em_model *m, const tp_rank *R, int seq, int layer) {
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
        for (int s = 0; s < b->n_spans; s++) R->views[s] = dense_tp_view(m, R, b->spans[s].seq, layer);
        em_kv_spans spans = {R->views, t->span_rows, b->n_spans, EM_MATH_EXACT, 0};
        op->kv_write_spans(be, &spans, R->k, R->v, t->pos, nkv, hd);
        op->attention_spans(be, R->att, R->q, &spans, t->pos, nq, nkv, hd, scale, t->window[layer]);
    } else {
        int row = 0;
        size_t qd = (size_t)nq * hd, kvd = (size_t)nkv * hd;
        for (int s = 0; s < b->n_spans; s++) {
            const em_span *sp = &b->spans[s];
            em_kv_view kv = dense_tp_view(m, R, sp->seq, layer);
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
    tp_mixer_fn mix = t->mixer ? t->mixer : attention_part;
    for (int l = 0; l < c->n_layers; l++) {
        for (int r = 0; r < t->n; r++)
            if (HAS(mask, r)) mix(m, t, &t->r[r], l, b, T);
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

/* Columns of the vocabulary local rank r holds (its padding excluded). */
static int rank_columns(const em_model *m, const tp_impl *t, int r) {
    int64_t vp = t->r[0].sh.vocab_pad, v0 = (int64_t)(t->rank0 + r) * vp, nv = m->cfg.vocab - v0;
    return nv <= 0 ? 0 : (int)(nv < vp ? nv : vp);
}

/* Whether each rank can choose greedy ids in its own columns: one process
 * drives every rank (a multi-process group gathers whole rows). */
static bool device_argmax(const tp_impl *t, const em_batch *b) {
    if (!b->argmax || t->gathered) return false;
    for (int r = 0; r < t->n; r++)
        if (!t->r[r].be->ops->argmax_rows) return false;
    return true;
}

static void queue_argmax(const em_model *m, tp_impl *t, int rows) {
    for (int r = 0; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        int nv = rank_columns(m, t, r);
        if (nv) R->be->ops->argmax_rows(R->be, R->amax_ids, R->amax_vals, R->logits, rows, nv, t->r[0].sh.vocab_pad);
    }
}

/* The greedy id of each row over every rank's columns: the largest value,
 * the lowest global id on ties (ranks hold increasing columns), NaN never
 * chosen (tensor/argmax.h), from each rank's own choice. */
static em_status combine_argmax(const em_model *m, tp_impl *t, int rows, int32_t *out) {
    int64_t vp = t->r[0].sh.vocab_pad;
    int32_t *ids = (int32_t *)t->amax_host;
    float *vals = t->amax_host + rows, *best = t->amax_host + 2 * (size_t)rows;
    for (int i = 0; i < rows; i++) out[i] = -1;
    for (int r = 0; r < t->n; r++) {
        tp_rank *R = &t->r[r];
        if (!rank_columns(m, t, r)) continue;
        EM_TRY(R->be->ops->download(R->be, ids, R->amax_ids, (size_t)rows * sizeof *ids));
        EM_TRY(R->be->ops->download(R->be, vals, R->amax_vals, (size_t)rows * sizeof *vals));
        for (int i = 0; i < rows; i++) {
            if (vals[i] != vals[i]) continue;
            if (out[i] < 0 || vals[i] > best[i]) {
                best[i] = vals[i];
                out[i] = (int32_t)((t->rank0 + r) * vp + ids[i]);
            }
        }
    }
    for (int i = 0; i < rows; i++)
        if (out[i] < 0) out[i] = 0;
    return EM_OK;
}

/* Issues the step, waits for every stream (or a clear error) and brings
 * the logits home (logits NULL: a follower, whose columns went to rank 0);
 * b->argmax, when asked, is filled here (chosen on the devices where one
 * process drives them all). */
em_status dense_tp_run_step(em_model *m, tp_impl *t, const em_batch *b, int T, float *logits) {
    int rows = batch_logit_rows(b);
    if (rows) EM_TRY(ensure_logits(m, t, rows));
    EM_TRY(issue_recorded(m, t, b, T));
    if (rows && t->gathered) {
        size_t slice = (size_t)rows * (size_t)t->r[0].sh.vocab_pad;
        const float *send[1] = {t->r[0].logits};
        EM_TRY(em_comm_allgather(t->comm, send, t->gathered, slice));
    }
    bool dev = rows && logits && device_argmax(t, b);
    if (dev) queue_argmax(m, t, rows);
    EM_TRY(em_comm_wait(t->comm));
    if (rows && logits) {
        if (dev) {
            EM_TRY(combine_argmax(m, t, rows, b->argmax));
            if (b->argmax_only) return EM_OK;
        }
        EM_TRY(gather_logits(m, t, rows, logits));
        for (int i = 0; !dev && b->argmax && i < rows; i++)
            b->argmax[i] = em_argmax_f32(logits + (size_t)i * (size_t)m->cfg.vocab, m->cfg.vocab);
        return EM_OK;
    }
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
    return boot_broadcast(t->boot, t->frame, words * sizeof(int32_t), dense_tp_timeout_ms(m));
}

static em_status dense_tp_forward(em_model *m, const em_batch *b, float *logits) {
    tp_impl *t = m->impl;
    const model_config *c = &m->cfg;
    if (t->rank0 != 0)
        return em_fail(EM_ERR_INTERNAL, "rank %d of a multi-process group runs only the steps rank 0 sends", t->rank0);
    int T = batch_tokens(b);
    if (T == 0) return EM_OK;
    EM_TRY(dense_tp_ensure_workspace(m, t, T));
    EM_TRY(dense_tp_ensure_spans(t, b));
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
        for (int r = 1; r < t->n; r++) EM_TRY(dense_tp_map_update(m->kv, &t->r[r], sp->seq, q->blocks, q->n_blocks));
    }
    /* everything that can fail on this side before the others start */
    int rows = batch_logit_rows(b);
    if (rows) EM_TRY(ensure_logits(m, t, rows));
    if (t->boot) EM_TRY(send_step(m, t, b));
    EM_TRY(dense_tp_run_step(m, t, b, T, logits));
    for (int s = 0; s < b->n_spans; s++) m->kv->seqs[b->spans[s].seq].len += b->spans[s].n;
    return EM_OK;
}

const family_ops dense_tp_family = {
    .name = "dense (tensor parallel)",
    .load = dense_tp_load,
    .forward = dense_tp_forward,
    .fills_argmax = true,
    .free = dense_tp_free,
    .kv_ready = dense_tp_kv_ready,
};

tp_impl *dense_tp_of(const em_model *m) {
    return m->impl && (m->family == &dense_tp_family || m->family == &qwen3_5_tp_family) ? m->impl : NULL;
}

int model_tp_size(const em_model *m) {
    const tp_impl *t = dense_tp_of(m);
    return t ? t->world : 1;
}

void model_tp_timing(em_model *m, bool on) {
    tp_impl *t = dense_tp_of(m);
    if (t) em_comm_set_timing(t->comm, on);
}

double model_tp_take_time(em_model *m, long *calls) {
    tp_impl *t = dense_tp_of(m);
    if (!t) {
        if (calls) *calls = 0;
        return 0;
    }
    return em_comm_take_time(t->comm, calls);
}
