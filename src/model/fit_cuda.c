/* fit_cuda.c — the device memory of running a model on the CUDA backend,
 * from the headers alone: every cudaMalloc the backend and the dense graph
 * make, as they make them, plus what the GPU spends outside cudaMalloc.
 *
 *   weights    each 2-D tensor the graph binds, uploaded as stored (bf16,
 *              f16 or f32: model/weights.c); a tied lm_head is the
 *              embedding table, uploaded once
 *   vectors    each 1-D tensor (norms, biases) converted to f32
 *   kv         per attention layer a K and a V buffer of f32 for every
 *              position of every sequence, in blocks of 32 (kv_cache.c)
 *   transient  the dense graph's nine activation buffers for the largest
 *              batch of tokens (a prefill chunk of 512, or the decode batch)
 *              and the device-side logits rows (dense.c)
 *   scratch    the matmul scratch of the CUDA backend, replayed call by call
 *              over one prefill chunk and one decode step (cuda_backend.h),
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
#include "io/safetensors.h"
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#define FIT_DENSE_BUFFERS 9

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

/* Device bytes of the checkpoint's tensors; refuses what the backend cannot
 * run. dt[0] gets the dtype of the first layer's matmul weights, dt[1] the
 * head's. */
static em_status device_tensors(const char *dir, const fit_shape *s, uint64_t *weights, uint64_t *vectors,
                                em_dtype dt[2]) {
    st_set *st;
    EM_TRY(st_open(dir, &st));
    *weights = *vectors = 0;
    bool tied_head = s->tied || !st_find(st, "lm_head.weight");
    const st_tensor *q = st_find(st, "model.layers.0.self_attn.q_proj.weight");
    const st_tensor *e = st_find(st, "model.embed_tokens.weight");
    const st_tensor *h = tied_head ? e : st_find(st, "lm_head.weight");
    dt[0] = q ? q->dtype : e ? e->dtype : EM_BF16;
    dt[1] = h ? h->dtype : dt[0];
    em_status rc = EM_OK;
    for (size_t i = 0; rc == EM_OK && i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        if (t->dtype == EM_U32)
            rc = em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s is quantized: fit's device memory model covers "
                         "f32/f16/bf16 weights only so far (fit it with --device cpu)", dir, t->name);
        else if (t->ndim == 1) *vectors += dev_round(t->n_elements * 4u);
        else if (t->ndim == 2 && !(tied_head && !strcmp(t->name, "lm_head.weight"))) *weights += dev_round(t->nbytes);
    }
    st_close(st);
    return rc;
}

typedef struct scratch_sim {
    uint64_t xconv, wide, att; /* capacities, as cuda_scratch grows them */
} scratch_sim;

static void scratch_need(uint64_t *cap, uint64_t bytes) {
    if (bytes > *cap) *cap = cuda_scratch_grow((size_t)bytes);
}

/* One cuda_matmul of M rows over a weight [N, K] (cuda_matmul.cu). */
static void sim_matmul(scratch_sim *sc, int M, int N, int K, em_dtype dt, bool fast) {
    if (fast && dt == EM_BF16 && M >= CUDA_FAST_MIN_M) {
        scratch_need(&sc->xconv, (uint64_t)M * (uint64_t)K * 2u);
    } else if (M > CUDA_GEMV_MAX_EXACT_M && dt != EM_F32) {
        uint64_t rows = CUDA_WIDE_SLICE_ELEMS / (uint64_t)K;
        uint64_t slice = rows < 1 ? 1 : rows < (uint64_t)N ? rows : (uint64_t)N;
        scratch_need(&sc->wide, slice * (uint64_t)K * 4u);
    }
}

/* A forward of M rows through every layer, then the head over `heads` rows.
 * fast: the rows' arithmetic (the head's too: FAST only for 16+ last
 * positions, as dense.c decides). Few rows split attention's keys. */
static void sim_forward(scratch_sim *sc, const fit_shape *s, int M, int heads, const em_dtype dt[2], bool fast) {
    if (M <= CUDA_ATT_SPLIT_MAX_ROWS)
        scratch_need(&sc->att, (uint64_t)M * (uint64_t)s->heads * (uint64_t)cuda_att_splits(M) *
                                   ((uint64_t)s->head_dim + 2u) * 4u);
    int qd = s->heads * s->head_dim, kvd = s->kv_heads * s->head_dim;
    int calls[7][2] = {{qd, s->hidden}, {kvd, s->hidden}, {kvd, s->hidden}, {s->hidden, qd},
                       {s->inter, s->hidden}, {s->inter, s->hidden}, {s->hidden, s->inter}};
    for (int c = 0; c < 7; c++) sim_matmul(sc, M, calls[c][0], calls[c][1], dt[0], fast);
    if (heads) sim_matmul(sc, heads, s->vocab, s->hidden, dt[1], fast && heads >= CUDA_FAST_MIN_M);
}

/* The dense graph's activation buffers for T tokens and its logits rows. */
static uint64_t activations(const fit_shape *s, uint64_t T, uint64_t rows) {
    uint64_t qd = (uint64_t)s->heads * s->head_dim, kvd = (uint64_t)s->kv_heads * s->head_dim, H = (uint64_t)s->hidden;
    uint64_t w[FIT_DENSE_BUFFERS] = {H, H, qd, kvd, kvd, qd, (uint64_t)s->inter, (uint64_t)s->inter,
                                     (uint64_t)s->inter};
    uint64_t sum = 0;
    for (int i = 0; i < FIT_DENSE_BUFFERS; i++) sum += dev_round((w[i] > H ? w[i] : H) * 4u * T);
    return sum + dev_round(rows * (uint64_t)s->vocab * 4u);
}

static uint64_t predict_cuda(const fit_shape *s, const fit_request *r, int ctx, const em_dtype dt[2], uint64_t weights,
                             uint64_t vectors, fit_result *o) {
    uint64_t batch = (uint64_t)(r->batch > 0 ? r->batch : 1);
    o->weights = weights;
    o->vectors = vectors;
    uint64_t positions = ((uint64_t)ctx + FIT_KV_BLOCK - 1) / FIT_KV_BLOCK * FIT_KV_BLOCK;
    o->kv_per_token = kv_bytes_per_token(s->kv_layers, s->kv_heads, s->head_dim);
    uint64_t layer = positions * batch * (uint64_t)s->kv_heads * (uint64_t)s->head_dim * 4u;
    o->kv = 2u * (uint64_t)s->kv_layers * dev_round(layer);
    /* a prefill chunk, then one decode step of every sequence */
    int chunk = ctx < FIT_PREFILL_CHUNK ? ctx : FIT_PREFILL_CHUNK;
    uint64_t T = (uint64_t)chunk > batch ? (uint64_t)chunk : batch;
    o->transient = activations(s, T, batch);
    scratch_sim sc = {0, 0, 0};
    bool fast = r->fast && chunk >= CUDA_FAST_MIN_M; /* shorter spans are EXACT (batch_rows.h) */
    sim_forward(&sc, s, chunk, 0, dt, fast);
    sim_forward(&sc, s, 1, 1, dt, false); /* the chunk's last position (logits of one row) */
    /* a decode step of every sequence: 16+ rows are one FAST GEMM under fast */
    sim_forward(&sc, s, (int)batch, (int)batch, dt, r->fast && batch >= CUDA_FAST_MIN_M);
    o->scratch = (sc.xconv ? dev_round(sc.xconv) : 0) + (sc.wide ? dev_round(sc.wide) : 0) +
                 (sc.att ? dev_round(sc.att) : 0);
    /* FAST prefill attention reads a bf16 copy of one layer's keys and
     * values: the whole context's by a prompt's last chunk */
    if (fast && chunk > CUDA_ATT_SPLIT_MAX_ROWS && cuda_attention_fa_head_dim(s->head_dim))
        o->scratch += dev_round(positions * (uint64_t)s->kv_heads * (uint64_t)s->head_dim * 4u);
    o->backend = dev_round(CUDA_STAGE_MIN_BYTES) + dev_round(CUDA_BLAS_WORKSPACE_BYTES);
    o->code = FIT_CUDA_CODE_BYTES;
    o->context = FIT_CUDA_CONTEXT_BYTES;
    return o->weights + o->vectors + o->kv + o->transient + o->scratch + o->backend + o->code + o->context;
}

em_status fit_predict_cuda(const char *dir, const fit_request *r, fit_result *o) {
    fit_shape s;
    EM_TRY(fit_read_shape(dir, &s));
    if (s.state_layers)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: %d recurrent (Gated DeltaNet) layers: fit's device memory model "
                       "does not cover their state yet (fit it with --device cpu)", dir, s.state_layers);
    uint64_t weights, vectors;
    em_dtype dt[2];
    EM_TRY(device_tensors(dir, &s, &weights, &vectors, dt));
    o->kv_layers = s.kv_layers;
    o->model_max_ctx = s.max_pos;
    /* Capacity: the budget; else what the GPU has free for a new process
     * (free now, plus the context this process already made there). */
    o->capacity_known = r->budget || r->device_free;
    o->capacity = r->budget ? r->budget : r->device_free ? r->device_free + FIT_CUDA_CONTEXT_BYTES : 0;
    o->total = predict_cuda(&s, r, r->ctx, dt, weights, vectors, o);
    if (!o->capacity_known) {
        o->max_ctx = -1;
        o->fits = false;
        return EM_OK;
    }
    int lo = 0, hi = s.max_pos;
    fit_result scratch = *o;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (predict_cuda(&s, r, mid, dt, weights, vectors, &scratch) <= o->capacity) lo = mid;
        else hi = mid - 1;
    }
    o->max_ctx = lo;
    o->fits = o->total <= o->capacity && r->ctx <= s.max_pos;
    return EM_OK;
}
