/* cuda_attention.cu — causal GQA attention over the paged KV cache.
 *
 * Three paths:
 * - Decode and small batches (up to ATT_SPLIT_MAX_ROWS rows, and any batch
 *   while a step is recorded): here. For head dims 32/64/128 and 1/2/4/8
 *   query heads per kv head, cuda_attention_rows.cu: one block per (row,
 *   kv head), its query heads sharing each tile of keys and values it
 *   loads. Otherwise attention_kernel: one block per (query row, head)
 *   visits keys in tiles of one key per thread: each thread scores its key,
 *   the block finds the tile's maximum and the softmax weights, and each
 *   thread accumulates the weighted values of its own output dimensions,
 *   rescaling what it holds whenever the running maximum grows (online
 *   softmax).
 *   Rows of small batches split their keys over cuda_att_splits() blocks
 *   (flash-decoding) and a second kernel merges the splits in order; the
 *   grid depends only on the row count, so a recorded step stays valid as
 *   the context grows.
 * - A short FAST chunk of one sequence (2 to 15 rows: a cached prompt's
 *   tail, recorded per row count): the tensor-core kernel with each tile's
 *   keys in CUDA_ATT_TAIL_SHARES shares (attention_tail below).
 * - Prefill (more rows): cuda_attention_prefill.cu, a tiled flash-attention
 *   kernel — a block holds 64 (query row, head) pairs of one sequence and
 *   one kv head and streams that sequence's keys and values through shared
 *   memory (keys of a long sequence split over several blocks and merged
 *   when the tiles alone are too few for the GPU). Rows of spans too short
 *   to fill half a tile (decode rows in a large batch) still come here,
 *   listed in a row map; so do head dims above 256 and groups above 64
 *   heads.
 * All keep fixed summation orders (reproducible); EXACT batches f32
 * arithmetic, FAST ones may round to bf16 on tensor cores. */
#include "backend/cuda/cuda_internal.cuh"

#define ATT_THREADS 128
#define ATT_DIMS_PER_THREAD 4 /* head_dim <= 512 */
#define ATT_SPLIT_MAX_ROWS CUDA_ATT_SPLIT_MAX_ROWS

__device__ float block_reduce_f(float v, float *red, bool is_max) {
    for (int o = 16; o; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? red[lane] : (is_max ? -INFINITY : 0.0f);
        for (int o = 16; o; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, v, o);
            v = is_max ? fmaxf(v, w) : v + w;
        }
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    float r = red[0];
    __syncthreads();
    return r;
}

/* Block x serves row rmap[x / n_heads] (row x / n_heads without a map).
 * part != NULL: split s = blockIdx.y of gridDim.y covers an equal share of
 * the row's keys and writes its unnormalised partial (max, sum, acc[hd])
 * for attention_combine; else the block covers all keys and writes out. */
__global__ void __launch_bounds__(ATT_THREADS) attention_kernel(float *out, float *part, const float *q,
                                                                float *const *base, const int32_t *toff,
                                                                const int32_t *pos, const int32_t *rmap, int n,
                                                                int n_heads, int group, int n_kv, int hd, int bs,
                                                                float scale, int window) {
    cuda_pdl_enter();
    extern __shared__ float sm[];
    float *qs = sm, *ps = sm + hd;
    __shared__ float red[32];
    int row = rmap ? rmap[blockIdx.x / n_heads] : (int)blockIdx.x / n_heads, h = blockIdx.x % n_heads;
    int kvh = h / group, t = threadIdx.x;
    float *const *kb = base + toff[row], *const *vb = base + toff[n + row]; /* this row's sequence */
    const float *qr = q + ((size_t)row * n_heads + h) * hd;
    for (int d = t; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    __syncthreads();
    int p = pos[row];
    int start, end;
    att_key_range(p, window, part != NULL, &start, &end);
    size_t rowlen = (size_t)n_kv * hd, head_off = (size_t)kvh * hd;
    bool vec = (hd & 3) == 0;
    float m = -INFINITY, l = 0.0f, acc[ATT_DIMS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < ATT_DIMS_PER_THREAD; i++) acc[i] = 0.0f;
    for (int j0 = start; j0 <= end; j0 += ATT_THREADS) {
        int j = j0 + t;
        float s = -INFINITY;
        if (j <= end) {
            const float *k = kb[j / bs] + (size_t)(j % bs) * rowlen + head_off;
            float dot = 0.0f;
            if (vec) {
#pragma unroll 8
                for (int d = 0; d < hd; d += 4) {
                    float4 kv4 = *(const float4 *)(k + d);
                    dot += qs[d] * kv4.x + qs[d + 1] * kv4.y + qs[d + 2] * kv4.z + qs[d + 3] * kv4.w;
                }
            } else {
                for (int d = 0; d < hd; d++) dot += qs[d] * k[d];
            }
            s = dot * scale;
        }
        float m_new = fmaxf(m, block_reduce_f(s, red, true));
        float e = j <= end ? expf(s - m_new) : 0.0f;
        ps[t] = e;
        float tile_sum = block_reduce_f(e, red, false); /* its barriers also publish ps */
        float corr = expf(m - m_new);
        l = l * corr + tile_sum;
        int cnt = end - j0 + 1 < ATT_THREADS ? end - j0 + 1 : ATT_THREADS;
#pragma unroll
        for (int i = 0; i < ATT_DIMS_PER_THREAD; i++) {
            int d = t + i * ATT_THREADS;
            if (d < hd) {
                float a = acc[i] * corr;
#pragma unroll 8
                for (int jj = 0; jj < cnt; jj++) {
                    int jk = j0 + jj;
                    a += ps[jj] * vb[jk / bs][(size_t)(jk % bs) * rowlen + head_off + d];
                }
                acc[i] = a;
            }
        }
        m = m_new;
        __syncthreads(); /* ps is rewritten by the next tile */
    }
    if (part) {
        float *pp = part + ((size_t)blockIdx.x * gridDim.y + blockIdx.y) * (hd + 2);
        if (t == 0) pp[0] = m, pp[1] = l;
#pragma unroll
        for (int i = 0; i < ATT_DIMS_PER_THREAD; i++) {
            int d = t + i * ATT_THREADS;
            if (d < hd) pp[2 + d] = acc[i];
        }
        return;
    }
    float inv = 1.0f / l;
    float *o = out + ((size_t)row * n_heads + h) * hd;
#pragma unroll
    for (int i = 0; i < ATT_DIMS_PER_THREAD; i++) {
        int d = t + i * ATT_THREADS;
        if (d < hd) o[d] = acc[i] * inv;
    }
}

/* Merges the CUDA_ATT_SPLITS splits of one (row, head): rescales each
 * partial to the common maximum, in split order. Rows as in
 * attention_kernel. The split count is a constant so that every split's
 * loads are issued at once (a loop over a run-time count waited for each
 * in turn: 7 us a layer). */
__global__ void attention_combine(float *out, __nv_bfloat16 *ob, const float *part, const int32_t *rmap, int n_heads,
                                  int hd) {
    cuda_pdl_enter();
    constexpr int S = CUDA_ATT_SPLITS;
    const float *pp = part + (size_t)blockIdx.x * S * (hd + 2);
    float ms[S], f[S];
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < S; s++) ms[s] = pp[(size_t)s * (hd + 2)];
#pragma unroll
    for (int s = 0; s < S; s++) mx = fmaxf(mx, ms[s]);
    float l = 0.0f;
#pragma unroll
    for (int s = 0; s < S; s++) {
        f[s] = ms[s] > -INFINITY ? expf(ms[s] - mx) : 0.0f;
        if (ms[s] > -INFINITY) l += pp[(size_t)s * (hd + 2) + 1] * f[s];
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
#pragma unroll
        for (int s = 0; s < S; s++)
            if (ms[s] > -INFINITY) a += pp[(size_t)s * (hd + 2) + 2 + d] * f[s];
        size_t rh = rmap ? (size_t)rmap[blockIdx.x / n_heads] * n_heads + blockIdx.x % n_heads : blockIdx.x;
        out[rh * hd + d] = a / l;
        if (ob) ob[rh * hd + d] = __float2bfloat16_rn(a / l);
    }
}

/* The per-row kernel for m rows: all n rows of the batch (rmap NULL) or
 * the rows rmap lists. */
static void attention_rows(cuda_backend *cb, float *out, const float *q, float *const *base, const int32_t *toff,
                           const int32_t *dpos, const int32_t *rmap, int m, int n, int n_heads, int n_kv,
                           int head_dim, int bs, float scale, int window) {
    size_t smem = ((size_t)head_dim + ATT_THREADS) * sizeof(float);
    /* Few rows (decode) would leave most multiprocessors idle: split each
     * row's keys over several blocks (flash-decoding) and merge. The split
     * count depends only on the row count, so a recorded step stays valid
     * as the context grows. */
    unsigned splits = (unsigned)cuda_att_splits(m);
    size_t rows_heads = (size_t)m * (size_t)n_heads;
    if (splits > 1 && !cuda_scratch(cb, (void **)&cb->att_part, &cb->att_part_bytes,
                                    rows_heads * splits * ((size_t)head_dim + 2) * sizeof(float)))
        return;
    float *part = splits > 1 ? cb->att_part : NULL;
    /* all rows written by the per-row kernel (and its merge): their bf16
     * rounding too, for the output projection (cuda_twin_make) */
    bool rows_kernel = cuda_attention_rows_fits(head_dim, n_heads / n_kv, q, bs);
    __nv_bfloat16 *ob = rows_kernel && !rmap ? cuda_twin_make(cb, out, m, n_heads * head_dim) : NULL;
    if (cuda_graph_skip(cb, out, ob, q, base, part, m, n_heads, n_kv, head_dim, bs, scale, window)) return;
    /* the per-row kernel merges its own splits where the counters reach */
    int *count = part && (size_t)m * (size_t)n_kv <= CUDA_ATT_COUNT_CAP ? cb->att_count : NULL;
    bool merged = false;
    cuda_rows_args a = {out, ob, part, count, q, base, toff, dpos, rmap, n, n_heads, n_kv, 0, window, scale,
                        NULL, NULL, NULL, 0.0f, 0};
    if (rows_kernel && cuda_attention_rows(cb->stream, (unsigned)m, splits, n_heads / n_kv, head_dim, bs, &a))
        merged = count != NULL;
    else
        cuda_launch(attention_kernel, dim3((unsigned)rows_heads, splits), ATT_THREADS, smem, cb->stream, 
            out, part, q, base, toff, dpos, rmap, n, n_heads, n_heads / n_kv, n_kv, head_dim, bs, scale, window);
    if (part && !merged) {
        CUDA_LAUNCHED(cb, "attention (splits)");
        cuda_launch(attention_combine, (unsigned)rows_heads, 64, 0, cb->stream, out, ob, part, rmap, n_heads, head_dim);
    }
    CUDA_LAUNCHED(cb, "attention");
}

/* Stages the spans and the plan (whose list it frees) and queues their
 * transfer; the plan's device address, or NULL (noted). */
static const int32_t *stage_plan(cuda_backend *cb, const em_kv_spans *s, const int32_t *pos, cuda_att_plan *p,
                                 float *const **base, const int32_t **toff, const int32_t **dpos, int *n) {
    size_t pb = cuda_att_plan_ints(p) * sizeof *p->v;
    const int32_t *dplan = NULL;
    if (cuda_stage_spans(cb, s, pos, pb, base, toff, dpos, n)) dplan = (const int32_t *)cuda_stage_put(cb, p->v, pb);
    free(p->v);
    p->v = NULL;
    if (dplan) cuda_stage_flush(cb);
    return dplan;
}

/* A batch of many rows: the spans' tiles go to the tiled kernel, the rows
 * of spans too short to fill a good part of a tile to the per-row kernel. */
static void attention_batch(cuda_backend *cb, float *out, const float *q, const em_kv_spans *s, const int32_t *pos,
                            int n_heads, int n_kv, int head_dim, float scale, int window) {
    cuda_att_plan p;
    bool fast = s->math == EM_MATH_FAST, fa = fast && cuda_attention_fa_fits(cb, head_dim);
    int pairs = fa || (fast && cuda_attention_tc_fits(cb, head_dim)) ? CUDA_TC_PAIRS : CUDA_TILE_PAIRS;
    if (!cuda_attention_plan(&p, s, pos, n_heads, n_kv, window, cb->n_sm, pairs)) {
        cuda_note(cb, cudaErrorMemoryAllocation, "attention: planning the batch");
        return;
    }
    if (!fa) p.n_conv = 0; /* the tensor-core kernel reads the f32 cache itself */
    /* every output row from the bf16-copy kernel: its bf16 rounding, which
     * the output projection takes instead of rounding again */
    int rows = 0;
    for (int i = 0; i < s->n_spans; i++) rows += s->rows[i];
    __nv_bfloat16 *ob = fa && p.n_items && !p.n_rest ? cuda_twin_make(cb, out, rows, n_heads * head_dim) : NULL;
    float *const *base;
    const int32_t *toff, *dpos;
    int n;
    const int32_t *dplan = stage_plan(cb, s, pos, &p, &base, &toff, &dpos, &n);
    if (!dplan) return; /* noted */
    int bs = s->views[0].block_size;
    if (p.n_items)
        cuda_attention_tiled(cb, out, ob, NULL, q, base, toff, dpos, dplan, &p, n, n_heads, n_kv, head_dim, bs, scale,
                             window);
    if (p.n_rest)
        attention_rows(cb, out, q, base, toff, dpos, dplan + (size_t)p.n_items * CUDA_TILE_FIELDS, p.n_rest, n,
                       n_heads, n_kv, head_dim, bs, scale, window);
}

/* A short FAST chunk of one sequence (a cached prompt's tail, recorded
 * once per row count and replayed at every context length): its rows share
 * each tile of keys on tensor cores, the keys split into CUDA_ATT_TAIL_SHARES
 * items whatever the positions, so the grid depends only on the row count.
 * The per-row kernel reads every key once per row (35 us a layer for 7 rows
 * after 2,047 keys on the H200). False when the shape is not one for it
 * (nothing queued). */
static bool attention_tail(cuda_backend *cb, float *out, const float *q, const em_kv_spans *s, const int32_t *pos,
                           int n_heads, int n_kv, int head_dim, float scale, int window) {
    int rows = s->n_spans == 1 ? s->rows[0] : 0;
    if (s->math != EM_MATH_FAST || rows < 2 || rows >= CUDA_ATT_TILE_MIN_ROWS || n_heads / n_kv > CUDA_TC_PAIRS ||
        !cuda_attention_tc_fits(cb, head_dim))
        return false;
    cuda_att_plan p;
    if (!cuda_attention_plan_shares(&p, rows, pos, n_heads, n_kv, window, CUDA_TC_PAIRS, CUDA_ATT_TAIL_SHARES)) {
        cuda_note(cb, cudaErrorMemoryAllocation, "attention: planning a short prefill");
        return true;
    }
    size_t part_bytes = (size_t)p.n_slots * n_kv * CUDA_TC_PAIRS * ((size_t)head_dim + 2) * sizeof(float);
    float *const *base;
    const int32_t *toff, *dpos;
    int n;
    const int32_t *dplan = stage_plan(cb, s, pos, &p, &base, &toff, &dpos, &n);
    if (!dplan || !cuda_scratch(cb, (void **)&cb->att_part, &cb->att_part_bytes, part_bytes)) return true; /* noted */
    __nv_bfloat16 *ob = cuda_twin_make(cb, out, rows, n_heads * head_dim);
    int bs = s->views[0].block_size;
    /* The merge is a launch of its own, a warp a pair: merged in the kernel
     * by the last share of a (tile, kv head) to finish, as the per-row
     * kernel does, one block merges all its pairs, and the 7-row tail took
     * longer on the H200 (1.66 ms in that run, 1.49 without). */
    if (cuda_graph_skip(cb, out, ob, q, base, cb->att_part, rows, n_heads, n_kv, head_dim, bs, scale, window))
        return true;
    cuda_attention_tiled(cb, out, ob, cb->att_part, q, base, toff, dpos, dplan, &p, n, n_heads, n_kv, head_dim, bs,
                         scale, window);
    return true;
}

void cuda_attention_spans(em_backend *be, float *out, const float *q, const em_kv_spans *s, const int32_t *pos,
                          int n_heads, int n_kv, int head_dim, float scale, int window) {
    cuda_backend *cb = cuda_enter(be);
    if (n_heads <= 0) return;
    if (head_dim > ATT_THREADS * ATT_DIMS_PER_THREAD || n_kv <= 0 || n_heads % n_kv) {
        cuda_note(cb, cudaErrorInvalidValue, "attention (head_dim above 512 or heads not a multiple of kv heads)");
        return;
    }
    int rows = 0, longest = 0;
    for (int i = 0; i < s->n_spans; i++) rows += s->rows[i], longest = s->rows[i] > longest ? s->rows[i] : longest;
    /* Many rows, or a prefill chunk (a cached prompt's tail: its rows share
     * every key they read in a tile, where the per-row kernel reads the
     * keys once per row); a step being recorded keeps the per-row path:
     * its grid depends only on the row count. */
    bool tiled = rows > ATT_SPLIT_MAX_ROWS || longest >= CUDA_ATT_TILE_MIN_ROWS;
    if (tiled && cb->graphs.mode == EM_GRAPH_NONE && cuda_attention_tiled_fits(cb, n_heads, n_kv, head_dim)) {
        attention_batch(cb, out, q, s, pos, n_heads, n_kv, head_dim, scale, window);
        return;
    }
    if (attention_tail(cb, out, q, s, pos, n_heads, n_kv, head_dim, scale, window)) return;
    float *const *base;
    const int32_t *toff, *dpos;
    int n;
    if (!cuda_stage_spans(cb, s, pos, 0, &base, &toff, &dpos, &n)) return;
    attention_rows(cb, out, q, base, toff, dpos, NULL, n, n, n_heads, n_kv, head_dim, s->views[0].block_size, scale,
                   window);
}

/* rope_kv_write_spans and attention_spans of decode rows (one a span, a
 * step's worth) as one launch of the per-row kernel in its fused form
 * (cuda_rows_args.k): no launch between the product that made q, k and v
 * and the attention, whose cached keys are read while that product ends.
 * False, with nothing queued, for any other batch or shape. */
bool cuda_rope_attention_spans(em_backend *be, float *out, const em_kv_spans *s, float *q, float *k, const float *v,
                               const int32_t *pos, int n_heads, int n_kv, int head_dim, int rot_dim,
                               const float *inv_freq, float attn_factor, float scale, int window) {
    int half = rot_dim / 2, m = s->n_spans;
    if (!((cuda_backend *)be->impl)->fused_att || m <= 0 || m > ATT_SPLIT_MAX_ROWS || n_kv <= 0 || n_heads % n_kv ||
        half <= 0 || rot_dim > head_dim || head_dim % 2 || (size_t)m * (size_t)n_kv > CUDA_ATT_COUNT_CAP ||
        ((uintptr_t)k | (uintptr_t)v) & 15 || !cuda_attention_rows_fits(head_dim, n_heads / n_kv, q, s->views[0].block_size))
        return false;
    for (int i = 0; i < m; i++)
        if (s->rows[i] != 1) return false;
    cuda_backend *cb = cuda_enter(be);
    size_t fb = (size_t)half * sizeof *inv_freq;
    float *const *base;
    const int32_t *toff, *dpos;
    int n;
    if (!cuda_stage_spans(cb, s, pos, fb, &base, &toff, &dpos, &n)) return true; /* noted */
    const float *dfreq = (const float *)cuda_stage_put(cb, inv_freq, fb);
    if (!dfreq) return true;
    cuda_stage_flush(cb);
    size_t part_bytes = (size_t)m * n_heads * CUDA_ATT_SPLITS * ((size_t)head_dim + 2) * sizeof(float);
    if (!cuda_scratch(cb, (void **)&cb->att_part, &cb->att_part_bytes, part_bytes)) return true;
    __nv_bfloat16 *ob = cuda_twin_make(cb, out, m, n_heads * head_dim);
    int bs = s->views[0].block_size;
    if (cuda_graph_skip(cb, out, ob, q, k, v, base, cb->att_part, m, n_heads, n_kv, head_dim, half, bs, scale, window,
                        attn_factor))
        return true;
    cuda_rows_args a = {out, ob, cb->att_part, cb->att_count, q, base, toff, dpos, NULL, n, n_heads, n_kv, 0, window,
                        scale, k, v, dfreq, attn_factor, half};
    if (!cuda_attention_rows(cb->stream, (unsigned)m, CUDA_ATT_SPLITS, n_heads / n_kv, head_dim, bs, &a))
        cuda_note(cb, cudaErrorInvalidValue, "rope and attention: a shape the per-row kernel declined");
    CUDA_LAUNCHED(cb, "rope and attention");
    return true;
}

void cuda_attention(em_backend *be, float *out, const float *q, const em_kv_view *kv, const int32_t *pos, int n,
                    int n_heads, int n_kv, int head_dim, float scale, int window) {
    if (n <= 0 || kv->n_blocks <= 0) return;
    em_kv_spans s = {kv, &n, 1, EM_MATH_EXACT, 0};
    cuda_attention_spans(be, out, q, &s, pos, n_heads, n_kv, head_dim, scale, window);
}
