/* fit_cuda.c — the device memory of running a model on the CUDA backend,
 * from the headers alone: every cudaMalloc the backend and the dense graph
 * make, as they make them, plus what the GPU spends outside cudaMalloc.
 *
 *   weights    each 2-D tensor the graph binds, uploaded as stored (bf16,
 *              f16 or f32, or a quantized weight's packed codes, scales
 *              and biases: model/weights.c); a tied lm_head is the
 *              embedding table, uploaded once
 *   vectors    each 1-D tensor (norms, biases) converted to f32, and a
 *              hybrid's 3-D convolution weights, also as f32
 *   kv         per attention layer a K and a V buffer of f32 for every
 *              position of every sequence, in blocks of 32 (kv_cache.c);
 *              a Qwen3.5 hybrid's full-attention layers and its MTP head's
 *   state      a hybrid's recurrent state: each Gated DeltaNet layer's
 *              convolution tail and delta-rule state for every sequence,
 *              and one sequence's zeros (recurrent_state.c)
 *   transient  the graph's activation buffers for the largest batch of
 *              tokens (a prefill chunk of 512, or the decode batch: nine
 *              for the dense graph, dense.c; nineteen for the hybrid,
 *              q35_workspace) and the device-side logits rows
 *   scratch    the matmul scratch of the CUDA backend, replayed call by call
 *              over one prefill chunk and one decode step (cuda_backend.h;
 *              over quantized weights the kernel each product takes:
 *              cuda_qmatmul.cu, cuda_qmma.cu, cuda_qtc.cu),
 *              and the bf16 copy of a layer's keys and values that FAST
 *              prefill attention reads (cuda_attention_fa.cu)
 *   backend    the staging arena and the cuBLAS workspace
 *   code       kernels loaded on first use (lazy module loading)
 *   context    the CUDA context, which the driver takes outside cudaMalloc
 *
 * `ember fit --measure` opens the model and reports what the device really
 * lost, beside this. */
#include "model/fit_internal.h"

#include "backend/cuda/cuda_backend.h"
#include "base/alloc.h"
#include "base/config.h"
#include "io/safetensors.h"
#include "model/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIT_DENSE_BUFFERS 9
#define FIT_Q35_BUFFERS 19

/* What the GPU spends outside the buffers above. Estimates for H100/H200
 * class GPUs with CUDA 12-13 and lazy module loading (the default since
 * CUDA 12.2): nvidia-smi shows about half a GiB for a process that has made
 * its context and cuBLAS handle, before any allocation. The context is
 * there before the first cudaMemGetInfo, so a measured delta never holds
 * it; kernel code is loaded later, as the forward first runs each kernel.
 * `ember fit --measure` prints the in-use figure of the machine at hand. */
#define FIT_CUDA_CONTEXT_BYTES ((uint64_t)512 << 20)
/* Kernel code and the libraries' own device state, loaded as the first
 * forward runs (ember's kernels, cuBLAS's GEMM kernels and handle state):
 * measured on an H200 as the constant 50-57 MiB that every model, small or
 * large, used beyond its allocations (tests/config/test_fit_cuda.sh). */
#define FIT_CUDA_CODE_BYTES ((uint64_t)68 << 20)

/* cudaMalloc's granularity: a request of 2 MiB or more takes whole 2 MiB
 * pages (cuMemGetAllocationGranularity's figure on current GPUs); smaller
 * ones share pages at 512-byte alignment. */
#define FIT_CUDA_PAGE ((uint64_t)2 << 20)
#define FIT_CUDA_ALIGN 512u

static uint64_t dev_round(uint64_t b) {
    uint64_t g = b >= FIT_CUDA_PAGE ? FIT_CUDA_PAGE : FIT_CUDA_ALIGN;
    return (b ? b : 1) + g - 1 - ((b ? b : 1) + g - 1) % g;
}

/* One product's weight as the backend takes it: N x K, its dtype, and
 * for quantized (EM_U32) weights the code width and group size. */
typedef struct fit_weight {
    int N, K;
    em_dtype dt;
    int bits, group;
} fit_weight;

#define FIT_LAYER_PRODUCTS 8 /* at most, a layer: q, k, v, o (or a Gated DeltaNet's five), gate, up, down */

/* The weight of module `name` (its ".weight", and for packed codes its
 * ".scales"), an N x K product; dt `dflt` where the checkpoint names it
 * otherwise. */
static fit_weight product_weight(const st_set *st, const char *name, int N, int K, em_dtype dflt) {
    char key[256];
    fit_weight w = {N, K, dflt, 0, 0};
    snprintf(key, sizeof key, "%s.weight", name);
    const st_tensor *t = st_find(st, key);
    if (!t || t->ndim != 2) return w;
    w.dt = t->dtype;
    if (t->shape[0] > 0 && t->shape[0] <= INT32_MAX) w.N = (int)t->shape[0]; /* a gated q_proj: twice the heads */
    snprintf(key, sizeof key, "%s.scales", name);
    const st_tensor *sc = st_find(st, key);
    if (w.dt == EM_U32 && sc && sc->ndim == 2 && sc->shape[1] > 0 && K > 0)
        w.bits = (int)(t->shape[1] * 32 / K), w.group = (int)(K / sc->shape[1]);
    return w;
}

/* The products of every layer and the head's, from the checkpoint's
 * headers: *n of them, the head last (the caller frees). A Qwen3.5 hybrid's
 * Gated DeltaNet layers take their projections in place of attention's. */
static fit_weight *products(const st_set *st, const fit_shape *s, em_dtype d0, em_dtype dh, int *n) {
    fit_weight *ws = em_calloc((size_t)s->layers * FIT_LAYER_PRODUCTS + 1, sizeof *ws);
    if (!ws) return NULL;
    int H = s->hidden, F = s->inter, qd = s->heads * s->head_dim, kvd = s->kv_heads * s->head_dim;
    int C = s->lin_channels, vd = s->lin_vd, hv = s->lin_hv;
    const struct { const char *mod; int N, K; } attn[] = {{"self_attn.q_proj", qd, H}, {"self_attn.k_proj", kvd, H},
                                                          {"self_attn.v_proj", kvd, H}, {"self_attn.o_proj", H, qd}},
                                                lin[] = {{"linear_attn.in_proj_qkv", C, H},
                                                         {"linear_attn.in_proj_z", vd, H},
                                                         {"linear_attn.in_proj_b", hv, H},
                                                         {"linear_attn.in_proj_a", hv, H},
                                                         {"linear_attn.out_proj", H, vd}},
                                                mlp[] = {{"mlp.gate_proj", F, H}, {"mlp.up_proj", F, H},
                                                         {"mlp.down_proj", H, F}};
    char name[160];
    int k = 0;
    for (int l = 0; l < s->layers; l++) {
        bool linear = C > 0 && l < MC_MAX_LAYERS && s->layer_linear[l];
        int na = linear ? 5 : 4;
        for (int c = 0; c < na + 3; c++) {
            const char *mod = c >= na ? mlp[c - na].mod : linear ? lin[c].mod : attn[c].mod;
            int N = c >= na ? mlp[c - na].N : linear ? lin[c].N : attn[c].N;
            int K = c >= na ? mlp[c - na].K : linear ? lin[c].K : attn[c].K;
            snprintf(name, sizeof name, "model.layers.%d.%s", l, mod);
            ws[k++] = product_weight(st, name, N, K, d0);
        }
    }
    bool tied = s->tied || !st_find(st, "lm_head.weight");
    ws[k++] = product_weight(st, tied ? "model.embed_tokens" : "lm_head", s->vocab, H, dh);
    *n = k;
    return ws;
}

/* Device bytes of the checkpoint's tensors, and its products (*ws, the
 * caller frees). */
static em_status device_tensors(const char *dir, const fit_shape *s, uint64_t *weights, uint64_t *vectors,
                                fit_weight **ws, int *n) {
    st_set *st;
    EM_TRY(st_open(dir, &st));
    *weights = *vectors = 0;
    bool tied_head = s->tied || !st_find(st, "lm_head.weight");
    const st_tensor *q = st_find(st, "model.layers.0.self_attn.q_proj.weight");
    const st_tensor *e = st_find(st, "model.embed_tokens.weight");
    const st_tensor *h = tied_head ? e : st_find(st, "lm_head.weight");
    em_dtype d0 = q ? q->dtype : e ? e->dtype : EM_BF16, dh = h ? h->dtype : d0;
    for (size_t i = 0; i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        if (t->ndim == 1 || t->ndim == 3) *vectors += dev_round(t->n_elements * 4u); /* 3-D: convolution weights */
        else if (t->ndim == 2 && !(tied_head && !strcmp(t->name, "lm_head.weight"))) *weights += dev_round(t->nbytes);
    }
    *ws = products(st, s, d0, dh, n);
    st_close(st);
    return *ws ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
}

typedef struct scratch_sim {
    uint64_t xconv, wide, att, q8x, wconv, qtc_part; /* capacities, as cuda_scratch grows them */
} scratch_sim;

static void scratch_need(uint64_t *cap, uint64_t bytes) {
    if (bytes > *cap) *cap = cuda_scratch_grow((size_t)bytes);
}

static uint64_t round16(uint64_t b) { return (b + 15) & ~(uint64_t)15; }

/* An upper bound on a card's multiprocessors (an H100 or H200 has 132). */
#define FIT_CUDA_MAX_SM 160

/* The sums the shared-activation kernel keeps for a set (cuda_qtc.cu,
 * EMBER_CUDA_QTC_SHARE=all) with a matrix like w, of mp activation rows:
 * 128 mp floats for each block of a matrix whose K it splits. A matrix is
 * split only while it has fewer 128-row blocks (RB) than the device has
 * multiprocessors, into KS <= 8 stretches with ceil(N KS / 256) blocks of
 * the staged kernel still fewer than those, so RB KS < 2 n_sm + 8. The
 * headers say neither the device nor which matrices share a set, so this
 * counts a set of EM_MATMUL_GROUP_MAX matrices like w, on FIT_CUDA_MAX_SM
 * multiprocessors. */
static uint64_t qtc_share_part(const fit_weight *w, uint64_t mp) {
    uint64_t rb = ((uint64_t)w->N + 127) / 128u, blocks = 8u * rb;
    if (rb >= FIT_CUDA_MAX_SM) return 0;
    if (blocks > 2u * FIT_CUDA_MAX_SM + 8u) blocks = 2u * FIT_CUDA_MAX_SM + 8u;
    return (uint64_t)EM_MATMUL_GROUP_MAX * blocks * 128u * mp * 4u;
}

/* One product of M rows over a quantized weight (cuda_qmatmul.cu's order):
 * the bf16 tensor-core kernel (4-bit, 3-64 rows in passes of 32, or 64:
 * bf16 rows and group sums), the int8 one (16-32 rows: int8 rows and segment scales),
 * the dequantizing GEMM (bf16 rows, bf16 slices of W), the int8 GEMV (rows
 * rounded 8 at a time from 3), the quantized GEMV (EXACT, no scratch), f32
 * slices of W for SGEMM. */
static void sim_qmatmul(scratch_sim *sc, int M, const fit_weight *w, bool fast) {
    const em_config *cfg = em_config_global();
    uint64_t K = (uint64_t)w->K;
    bool qmma = fast && em_config_flag(cfg, EMC_CUDA_QMMA) && (w->bits == 4 || w->bits == 8);
    bool qtc = qmma && w->bits == 4 && em_config_flag(cfg, EMC_CUDA_QTC) &&
               (w->group == 32 || w->group == 64 || w->group == 128) && w->K % w->group == 0;
    if (qtc && M >= CUDA_QTC_MIN_M && M <= CUDA_QTC_MAX_M) {
        /* passes of up to 32 rows; with EMBER_CUDA_QTC_SHARE, of up to 64
         * (6 or 8 tiles) where the backend's qtc_pass_rows also finds whole
         * 256-input stages, 2-byte scales and (under "1") blocks that each
         * take all of K. The headers say neither of the last two, so this
         * may count a wider pass than the backend runs, never a narrower
         * one. Under "all" a matrix whose K the blocks split keeps each
         * block's sums (qtc_share_part). */
        const char *share = em_config_str(cfg, EMC_CUDA_QTC_SHARE);
        bool all = !strcmp(share, "all"), wide = M > CUDA_QMMA_MAX_M && w->K % 256 == 0 && (all || !strcmp(share, "1"));
        uint64_t mp = wide ? (M <= 48 ? 48u : 64u)
                           : (uint64_t)((M < CUDA_QMMA_MAX_M ? M : CUDA_QMMA_MAX_M) + 7) & ~(uint64_t)7;
        scratch_need(&sc->q8x, round16(mp * K * 2u) + K / (uint64_t)w->group * mp * 4u);
        if (all && M >= CUDA_QTC_SHARE_MIN_M && w->K % 256 == 0) scratch_need(&sc->qtc_part, qtc_share_part(w, mp));
    } else if (qmma && M >= CUDA_QMMA_MIN_M && M <= CUDA_QMMA_MAX_M) {
        uint64_t mp = (uint64_t)(M + 7) & ~(uint64_t)7;
        scratch_need(&sc->q8x, round16((uint64_t)M * K) + K / 32u * mp * 8u);
    } else if (fast && M >= CUDA_QFAST_MIN_M) {
        scratch_need(&sc->xconv, (uint64_t)M * K * 2u);
        scratch_need(&sc->wconv, (uint64_t)cuda_qslice_rows(w->N, w->K, CUDA_QSLICE_BF16_ELEMS) * K * 2u);
    } else if (fast && (w->bits == 4 || w->bits == 8) && w->K % 4 == 0) {
        uint64_t mr = (uint64_t)(M < CUDA_Q8_MAX_M ? M : CUDA_Q8_MAX_M);
        if (M >= 3 && w->K % 32 == 0) scratch_need(&sc->q8x, round16(mr * K) + 2u * (mr * K / 32u) * 4u);
    } else if (M > CUDA_QGEMV_MAX_EXACT_M) {
        scratch_need(&sc->wide, (uint64_t)cuda_qslice_rows(w->N, w->K, CUDA_QSLICE_ELEMS) * K * 4u);
    }
}

/* One cuda_matmul of M rows over w (cuda_matmul.cu). */
static void sim_matmul(scratch_sim *sc, int M, const fit_weight *w, bool fast) {
    int N = w->N, K = w->K;
    if (w->dt == EM_U32) {
        sim_qmatmul(sc, M, w, fast);
    } else if (fast && w->dt == EM_BF16 && M >= CUDA_FAST_MIN_M) {
        scratch_need(&sc->xconv, (uint64_t)M * (uint64_t)K * 2u);
    } else if (M > CUDA_GEMV_MAX_EXACT_M && w->dt != EM_F32) {
        uint64_t rows = CUDA_WIDE_SLICE_ELEMS / (uint64_t)K;
        uint64_t slice = rows < 1 ? 1 : rows < (uint64_t)N ? rows : (uint64_t)N;
        scratch_need(&sc->wide, slice * (uint64_t)K * 4u);
    }
}

/* A forward of M rows through every layer, then the head over `heads` rows.
 * fast: the rows' arithmetic (the head's too: FAST only for 16+ last
 * positions, as dense.c decides). Few rows split attention's keys. */
static void sim_forward(scratch_sim *sc, const fit_shape *s, const fit_weight *ws, int n, int M, int heads,
                        bool fast) {
    if (M <= CUDA_ATT_SPLIT_MAX_ROWS)
        scratch_need(&sc->att, (uint64_t)M * (uint64_t)s->heads * (uint64_t)cuda_att_splits(M) *
                                   ((uint64_t)s->head_dim + 2u) * 4u);
    for (int i = 0; i < n - 1; i++) sim_matmul(sc, M, &ws[i], fast);
    if (heads) sim_matmul(sc, heads, &ws[n - 1], fast && heads >= CUDA_FAST_MIN_M);
}

/* The dense graph's activation buffers for T tokens and its logits rows. */
static uint64_t activations(const fit_shape *s, uint64_t T, uint64_t rows) {
    uint64_t qd = (uint64_t)s->heads * s->head_dim, kvd = (uint64_t)s->kv_heads * s->head_dim, H = (uint64_t)s->hidden;
    uint64_t F = (uint64_t)s->inter, sum = 0;
    if (s->lin_channels) { /* a Qwen3.5 hybrid's buffers, each of its width (q35_workspace) */
        uint64_t vd = (uint64_t)s->lin_vd, hv = (uint64_t)s->lin_hv;
        uint64_t w[FIT_Q35_BUFFERS] = {H, H, H, 2 * H, 2 * qd, qd, kvd, kvd, qd, F, F, F, (uint64_t)s->lin_channels,
                                       vd, hv, hv, hv, hv, vd};
        for (int i = 0; i < FIT_Q35_BUFFERS; i++) sum += dev_round(w[i] * 4u * T);
    } else {
        uint64_t w[FIT_DENSE_BUFFERS] = {H, H, qd, kvd, kvd, qd, F, F, F};
        for (int i = 0; i < FIT_DENSE_BUFFERS; i++) sum += dev_round((w[i] > H ? w[i] : H) * 4u * T);
    }
    return sum + dev_round(rows * (uint64_t)s->vocab * 4u);
}

/* A hybrid's recurrent state (recurrent_state.c): every sequence's
 * convolution and delta-rule state per Gated DeltaNet layer, in one
 * reservation, and one sequence's zeros to reset from. */
static uint64_t recurrent_state(const fit_shape *s, uint64_t batch) {
    uint64_t seq = s->state_per_seq * (uint64_t)s->state_layers;
    return seq ? dev_round(seq * batch) + dev_round(seq) : 0;
}

static uint64_t predict_cuda(const fit_shape *s, const fit_request *r, int ctx, const fit_weight *ws, int n,
                             uint64_t weights, uint64_t vectors, fit_result *o) {
    uint64_t batch = (uint64_t)(r->batch > 0 ? r->batch : 1);
    o->weights = weights;
    o->vectors = vectors;
    uint64_t positions = ((uint64_t)ctx + FIT_KV_BLOCK - 1) / FIT_KV_BLOCK * FIT_KV_BLOCK;
    int kv_layers = s->kv_layers + s->mtp_kv_layers; /* the MTP head's layers follow the trunk's in the cache */
    o->kv_per_token = kv_bytes_per_token(kv_layers, s->kv_heads, s->head_dim);
    uint64_t layer = positions * batch * (uint64_t)s->kv_heads * (uint64_t)s->head_dim * 4u;
    o->kv = 2u * (uint64_t)kv_layers * dev_round(layer);
    o->state_per_seq = s->state_per_seq * (uint64_t)s->state_layers;
    o->state = recurrent_state(s, batch);
    /* a prefill chunk, then one decode step of every sequence */
    int chunk = ctx < FIT_PREFILL_CHUNK ? ctx : FIT_PREFILL_CHUNK;
    uint64_t T = (uint64_t)chunk > batch ? (uint64_t)chunk : batch;
    o->transient = activations(s, T, batch);
    scratch_sim sc = {0, 0, 0, 0, 0, 0};
    bool fast = r->fast && chunk >= CUDA_FAST_MIN_M; /* shorter spans are EXACT (batch_rows.h) */
    sim_forward(&sc, s, ws, n, chunk, 0, fast);
    sim_forward(&sc, s, ws, n, 1, 1, false); /* the chunk's last position (logits of one row) */
    /* a decode step of every sequence, FAST under fast (bf16 weights take
     * tensor cores from CUDA_FAST_MIN_M rows, quantized ones their kernels) */
    sim_forward(&sc, s, ws, n, (int)batch, (int)batch, r->fast);
    uint64_t bufs[6] = {sc.xconv, sc.wide, sc.att, sc.q8x, sc.wconv, sc.qtc_part};
    o->scratch = 0;
    for (int i = 0; i < 6; i++) o->scratch += bufs[i] ? dev_round(bufs[i]) : 0;
    /* FAST prefill attention reads a bf16 copy of one layer's keys and
     * values: the whole context's by a prompt's last chunk */
    if (fast && chunk > CUDA_ATT_SPLIT_MAX_ROWS && cuda_attention_fa_head_dim(s->head_dim))
        o->scratch += dev_round(positions * (uint64_t)s->kv_heads * (uint64_t)s->head_dim * 4u);
    o->backend = dev_round(CUDA_STAGE_MIN_BYTES) + dev_round(CUDA_BLAS_WORKSPACE_BYTES);
    o->code = FIT_CUDA_CODE_BYTES;
    o->context = FIT_CUDA_CONTEXT_BYTES;
    return o->weights + o->vectors + o->kv + o->state + o->transient + o->scratch + o->backend + o->code + o->context;
}

em_status fit_predict_cuda(const char *dir, const fit_request *r, fit_result *o) {
    fit_shape s;
    EM_TRY(fit_read_shape(dir, &s));
    uint64_t weights, vectors;
    fit_weight *ws;
    int n = 0;
    EM_TRY(device_tensors(dir, &s, &weights, &vectors, &ws, &n));
    o->kv_layers = s.kv_layers + s.mtp_kv_layers;
    o->state_layers = s.state_layers;
    o->model_max_ctx = s.max_pos;
    /* Capacity: the budget; else what the GPU has free for a new process
     * (free now, plus the context this process already made there). */
    o->capacity_known = r->budget || r->device_free;
    o->capacity = r->budget ? r->budget : r->device_free ? r->device_free + FIT_CUDA_CONTEXT_BYTES : 0;
    o->total = predict_cuda(&s, r, r->ctx, ws, n, weights, vectors, o);
    if (!o->capacity_known) {
        o->max_ctx = -1;
        o->fits = false;
        free(ws);
        return EM_OK;
    }
    int lo = 0, hi = s.max_pos;
    fit_result scratch = *o;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (predict_cuda(&s, r, mid, ws, n, weights, vectors, &scratch) <= o->capacity) lo = mid;
        else hi = mid - 1;
    }
    free(ws);
    o->max_ctx = lo;
    o->fits = o->total <= o->capacity && r->ctx <= s.max_pos;
    return EM_OK;
}
