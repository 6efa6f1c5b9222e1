/* cuda_ops.cu — the element-wise and per-row operations on the GPU:
 * RMSNorm, rotary embeddings, SwiGLU, residual add, embedding lookup (the
 * quantized table's in cuda_qmatmul.cu) and
 * writes into the paged KV cache. Each mirrors its CPU counterpart's
 * arithmetic (f32, the norm's sum of squares in double). */
#include "backend/cuda/cuda_internal.cuh"

#include <limits.h>

#define ROW_THREADS 256

/* The norms and swiglu also write their output's bf16 rounding to yb
 * when given one (cuda_twin_make): the FAST matmul that reads it next then
 * needs no rounding launch of its own. */
__device__ __forceinline__ void twin_put(__nv_bfloat16 *yb, size_t i, float v) {
    if (yb) yb[i] = __float2bfloat16_rn(v);
}

/* Elements per thread the norms keep in registers when a row fits
 * (n <= NORM_REGS * threads): x (and h) are read once, and the gain —
 * weights, which no kernel writes — is read before waiting on the kernel
 * before, so no load waits after the block's sum. The sums and products
 * are those of the loop over memory (same order), so the bits agree. */
#define NORM_REGS 4

/* gain[i] + offset for this thread's elements (0 past n). */
__device__ __forceinline__ void norm_gains(float *g, const float *gain, float offset, int n) {
#pragma unroll
    for (int r = 0; r < NORM_REGS; r++) {
        int i = (int)threadIdx.x + r * (int)blockDim.x;
        g[r] = i < n ? gain[i] + offset : 0.0f;
    }
}

/* y = v * inv * g for this thread's elements, and their bf16 twin. */
__device__ __forceinline__ void norm_store(float *yr, __nv_bfloat16 *br, const float *v, const float *g, float inv,
                                           int n) {
#pragma unroll
    for (int r = 0; r < NORM_REGS; r++) {
        int i = (int)threadIdx.x + r * (int)blockDim.x;
        if (i >= n) break;
        float o = v[r] * inv * g[r];
        yr[i] = o;
        twin_put(br, i, o);
    }
}

__global__ void rmsnorm_kernel(float *y, __nv_bfloat16 *yb, const float *x, const float *gain, int n, float eps,
                               float offset) {
    __shared__ double red[32];
    bool regs = n <= NORM_REGS * (int)blockDim.x;
    float g[NORM_REGS], v[NORM_REGS];
    if (regs) norm_gains(g, gain, offset, n);
    cuda_pdl_enter();
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    __nv_bfloat16 *br = yb ? yb + (size_t)blockIdx.x * n : NULL;
    double ss = 0;
    if (regs) {
#pragma unroll
        for (int r = 0; r < NORM_REGS; r++) {
            int i = (int)threadIdx.x + r * (int)blockDim.x;
            v[r] = i < n ? xr[i] : 0.0f;
            if (i < n) ss += (double)v[r] * v[r];
        }
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * xr[i];
    }
    ss = cuda_block_sum_d(ss, red); /* every read of x precedes this barrier, so y may alias x */
    float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    if (regs) return norm_store(yr, br, v, g, inv, n);
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = xr[i] * inv * (gain[i] + offset);
        yr[i] = o;
        twin_put(br, i, o);
    }
}

void cuda_rmsnorm(em_backend *be, float *y, const float *x, const float *gain, int rows, int n, float eps,
                  float gain_offset) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    __nv_bfloat16 *yb = cuda_twin_make(cb, y, rows, n);
    if (cuda_graph_skip(cb, y, yb, x, gain, rows, n, eps, gain_offset)) return;
    /* few rows (decode): wide blocks, so each thread's loads are few (many
     * rows in registers through 1,024 threads: 98 us a 4,096-wide row of a
     * 4,096-row prefill on the H200, against 90 with a second pass) */
    int threads = rows >= 64 || n <= ROW_THREADS ? ROW_THREADS : 1024;
    cuda_launch(rmsnorm_kernel, rows, threads, 0, cb->stream, y, yb, x, gain, n, eps, gain_offset);
    CUDA_LAUNCHED(cb, "rmsnorm");
}

/* The residual add fused with the next norm: x += h, y = rmsnorm(x). Each
 * thread reads its own elements of h before the barrier, so y may be h. */
__global__ void add_rmsnorm_kernel(float *x, const float *h, float *y, __nv_bfloat16 *yb, const float *gain, int n,
                                   float eps, float offset) {
    __shared__ double red[32];
    bool regs = n <= NORM_REGS * (int)blockDim.x;
    float g[NORM_REGS], v[NORM_REGS];
    if (regs) norm_gains(g, gain, offset, n);
    cuda_pdl_enter();
    float *xr = x + (size_t)blockIdx.x * n;
    const float *hr = h + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    __nv_bfloat16 *br = yb ? yb + (size_t)blockIdx.x * n : NULL;
    double ss = 0;
    if (regs) {
#pragma unroll
        for (int r = 0; r < NORM_REGS; r++) {
            int i = (int)threadIdx.x + r * (int)blockDim.x;
            v[r] = i < n ? xr[i] + hr[i] : 0.0f;
            if (i < n) xr[i] = v[r], ss += (double)v[r] * v[r];
        }
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float o = xr[i] + hr[i];
            xr[i] = o;
            ss += (double)o * o;
        }
    }
    ss = cuda_block_sum_d(ss, red);
    float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    if (regs) return norm_store(yr, br, v, g, inv, n);
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = xr[i] * inv * (gain[i] + offset);
        yr[i] = o;
        twin_put(br, i, o);
    }
}

void cuda_add_rmsnorm(em_backend *be, float *x, const float *h, float *y, const float *gain, int rows, int n, float eps,
                      float gain_offset) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    __nv_bfloat16 *yb = cuda_twin_make(cb, y, rows, n);
    if (cuda_graph_skip(cb, x, h, y, yb, gain, rows, n, eps, gain_offset)) return;
    int threads = rows >= 64 || n <= ROW_THREADS ? ROW_THREADS : 1024;
    cuda_launch(add_rmsnorm_kernel, rows, threads, 0, cb->stream, x, h, y, yb, gain, n, eps, gain_offset);
    CUDA_LAUNCHED(cb, "add_rmsnorm");
}

/* rope_apply at position p (rope_kernel and rope_kv_write_kernel share
 * these, so their bits agree). */
__device__ __forceinline__ float2 rope_pair(float *v, int i, int half, int p, const float *inv_freq, float attn_factor) {
    return rope_apply(v, i, half, rope_cs(i, p, inv_freq, attn_factor));
}

/* One thread per (row, head, i < rot_dim/2): rotate-half on the pair (i,
 * i + half). A row's first nq heads are in x (nq per row), the next nk in
 * k (nk per row; rope_qk), so queries and keys share one launch. */
__global__ void rope_kernel(float *x, float *k, int rows, int nq, int nk, int head_dim, int half, const int32_t *pos,
                            const float *inv_freq, float attn_factor) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)rows * (nq + nk) * half;
    if (t >= total) return;
    int i = (int)(t % half);
    size_t rh = t / half;
    int r = (int)(rh / (nq + nk)), h = (int)(rh % (nq + nk));
    float *v = h < nq ? x + ((size_t)r * nq + h) * head_dim : k + ((size_t)r * nk + h - nq) * head_dim;
    rope_pair(v, i, half, pos[r], inv_freq, attn_factor);
}

void cuda_rope_qk(em_backend *be, float *q, float *k, int rows, int n_heads, int n_kv_heads, int head_dim,
                  int rot_dim, const int32_t *pos, const float *inv_freq, float attn_factor) {
    cuda_backend *cb = cuda_enter(be);
    int half = rot_dim / 2;
    if (!k) n_kv_heads = 0;
    if (rows <= 0 || n_heads + n_kv_heads <= 0 || half <= 0) return;
    size_t pb = (size_t)rows * sizeof *pos, fb = (size_t)half * sizeof *inv_freq;
    cuda_stage_begin(cb, pb + fb, 2);
    const int32_t *dpos = (const int32_t *)cuda_stage_put(cb, pos, pb);
    const float *dfreq = (const float *)cuda_stage_put(cb, inv_freq, fb);
    if (!dpos || !dfreq) return;
    cuda_stage_flush(cb);
    size_t total = (size_t)rows * (n_heads + n_kv_heads) * half;
    if (cuda_graph_skip(cb, q, k, rows, n_heads, n_kv_heads, head_dim, half, attn_factor)) return;
    cuda_launch(rope_kernel, cuda_blocks(total, 256), 256, 0, cb->stream, q, k, rows, n_heads, n_kv_heads, head_dim, half,
                                                                  dpos, dfreq, attn_factor);
    CUDA_LAUNCHED(cb, "rope");
}

void cuda_rope(em_backend *be, float *x, int rows, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
               const float *inv_freq, float attn_factor) {
    cuda_rope_qk(be, x, NULL, rows, n_heads, 0, head_dim, rot_dim, pos, inv_freq, attn_factor);
}

/* Block (x, y) takes rows y, y + gridDim.y, ... and in each, elements
 * V * (x * 256 + thread) on: V = 4 with float4 loads and stores where rows
 * allow (n and ld multiples of 4, 16-byte aligned), else 1. A 2-D grid
 * spares every element a 64-bit division (one thread an element of the
 * flat array moved 2.5 TB/s over a 4,096-token prefill's 14,336-wide rows
 * on the H200). */
template <int V>
__global__ void swiglu_kernel(float *out, __nv_bfloat16 *ob, const float *gate, const float *up, int rows, int n,
                              int ld) {
    cuda_pdl_enter();
    int i = ((int)blockIdx.x * (int)blockDim.x + (int)threadIdx.x) * V;
    if (i >= n) return;
    for (int r = (int)blockIdx.y; r < rows; r += (int)gridDim.y) {
        const float *g = gate + (size_t)r * ld + i, *u = up + (size_t)r * ld + i;
        size_t at = (size_t)r * n + i;
        if (V == 4) {
            float4 gv = *(const float4 *)g, uv = *(const float4 *)u;
            float4 v = make_float4(cuda_swiglu_one(gv.x, uv.x), cuda_swiglu_one(gv.y, uv.y), cuda_swiglu_one(gv.z, uv.z),
                                   cuda_swiglu_one(gv.w, uv.w));
            *(float4 *)(out + at) = v;
            if (ob) *(uint2 *)(ob + at) = make_uint2(tc_pack(v.x, v.y), tc_pack(v.z, v.w));
        } else {
            float v = cuda_swiglu_one(*g, *u);
            out[at] = v;
            twin_put(ob, at, v);
        }
    }
}

void cuda_swiglu(em_backend *be, float *out, const float *gate, const float *up, int rows, int n, int ld_in) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    __nv_bfloat16 *ob = cuda_twin_make(cb, out, rows, n);
    if (cuda_graph_skip(cb, out, ob, gate, up, rows, n, ld_in)) return;
    bool v4 = n % 4 == 0 && ld_in % 4 == 0 && ((uintptr_t)out | (uintptr_t)gate | (uintptr_t)up) % 16 == 0;
    dim3 grid(cuda_blocks((size_t)n, v4 ? 1024 : 256), rows < 65535 ? (unsigned)rows : 65535u);
    if (v4) cuda_launch(swiglu_kernel<4>, grid, 256, 0, cb->stream, out, ob, gate, up, rows, n, ld_in);
    else cuda_launch(swiglu_kernel<1>, grid, 256, 0, cb->stream, out, ob, gate, up, rows, n, ld_in);
    CUDA_LAUNCHED(cb, "swiglu");
}

__global__ void add_kernel(float *y, const float *x, size_t n) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) y[t] += x[t];
}

void cuda_add(em_backend *be, float *y, const float *x, size_t n) {
    cuda_backend *cb = cuda_enter(be);
    if (!n) return;
    if (cuda_graph_skip(cb, y, x, n)) return;
    cuda_launch(add_kernel, cuda_blocks(n, 256), 256, 0, cb->stream, y, x, n);
    CUDA_LAUNCHED(cb, "add");
}

/* Stage 1: block (c, r) reduces columns [c*ARGMAX_CHUNK, ...) of row r to
 * one pair. A vocabulary-wide row spreads over many SMs (one SM alone reads
 * a 128K-entry row at a tenth of the card's bandwidth); each thread keeps
 * ARGMAX_PER_THREAD independent loads in flight. The order of the pairs'
 * reduction does not matter: argmax_take is a total order (value, then
 * lowest index), so the result is the same as one scan's. */
#define ARGMAX_THREADS 256
#define ARGMAX_PER_THREAD 8
#define ARGMAX_CHUNK (ARGMAX_THREADS * ARGMAX_PER_THREAD)
__global__ void argmax_part_kernel(float *pv, int *pi, const float *x, int n, int ld) {
    cuda_pdl_enter();
    int r = blockIdx.y, c0 = blockIdx.x * ARGMAX_CHUNK;
    const float *xr = x + (size_t)r * ld;
    float v = -INFINITY, e[ARGMAX_PER_THREAD];
    int at = INT_MAX;
#pragma unroll
    for (int j = 0; j < ARGMAX_PER_THREAD; j++) {
        int k = c0 + j * ARGMAX_THREADS + threadIdx.x;
        e[j] = k < n ? __ldcs(xr + k) : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < ARGMAX_PER_THREAD; j++) {
        int k = c0 + j * ARGMAX_THREADS + threadIdx.x;
        if (k < n) argmax_take(v, at, e[j], k);
    }
    argmax_block(v, at);
    if (threadIdx.x == 0) pv[(size_t)r * gridDim.x + blockIdx.x] = v, pi[(size_t)r * gridDim.x + blockIdx.x] = at;
}

/* Stage 2: one block per row over its chunks' pairs. */
__global__ void argmax_final_kernel(int32_t *ids, float *vals, const float *pv, const int *pi, int chunks) {
    cuda_pdl_enter();
    float v = -INFINITY;
    int at = INT_MAX;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x)
        argmax_take(v, at, pv[(size_t)blockIdx.x * chunks + c], pi[(size_t)blockIdx.x * chunks + c]);
    argmax_block(v, at);
    if (threadIdx.x) return;
    ids[blockIdx.x] = at == INT_MAX ? 0 : at; /* every value NaN: 0, as on the host */
    if (vals) vals[blockIdx.x] = at == INT_MAX ? NAN : v;
}

void cuda_argmax_rows(em_backend *be, int32_t *ids, float *vals, const float *x, int rows, int n, int ld) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    int chunks = (n + ARGMAX_CHUNK - 1) / ARGMAX_CHUNK;
    size_t pairs = (size_t)rows * chunks;
    if (!cuda_scratch(cb, &cb->amax_part, &cb->amax_part_bytes, pairs * (sizeof(float) + sizeof(int)))) return;
    if (cuda_graph_skip(cb, ids, vals, x, rows, n, ld)) return;
    float *pv = (float *)cb->amax_part;
    int *pi = (int *)(pv + pairs);
    cuda_launch(argmax_part_kernel, dim3((unsigned)chunks, (unsigned)rows), ARGMAX_THREADS, 0, cb->stream, pv, pi, x, n, ld);
    CUDA_LAUNCHED(cb, "argmax_rows");
    cuda_launch(argmax_final_kernel, rows, chunks < 128 ? 128 : 256, 0, cb->stream, ids, vals, pv, pi, chunks);
    CUDA_LAUNCHED(cb, "argmax_rows");
}

__global__ void embed_kernel(float *out, const void *table, em_dtype dt, const int32_t *ids, int n, size_t d) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n * d) return;
    size_t i = t / d, k = t % d, src = (size_t)ids[i] * d + k;
    float v;
    if (dt == EM_F32) v = ((const float *)table)[src];
    else if (dt == EM_BF16) v = cuda_bf16(((const uint16_t *)table)[src]);
    else v = cuda_f16(((const uint16_t *)table)[src]);
    out[t] = v;
}

void cuda_embed(em_backend *be, float *out, const em_weight *t, const int32_t *ids, int n) {
    cuda_backend *cb = cuda_enter(be);
    if (n <= 0 || (!t->bits && t->dtype != EM_F32 && t->dtype != EM_BF16 && t->dtype != EM_F16)) return;
    size_t ib = (size_t)n * sizeof *ids, total = (size_t)n * (size_t)t->cols;
    cuda_stage_begin(cb, ib, 1);
    const int32_t *dids = (const int32_t *)cuda_stage_put(cb, ids, ib);
    if (!dids) return;
    cuda_stage_flush(cb);
    if (cuda_graph_skip(cb, out, t->data, t->dtype, n, t->cols, t->bits)) return;
    if (t->bits) { /* quantized table: dequantize the rows looked up */
        cuda_qembed(cb, out, t, dids, n);
        return;
    }
    cuda_launch(embed_kernel, cuda_blocks(total, 256), 256, 0, cb->stream, out, t->data, t->dtype, dids, n, (size_t)t->cols);
    CUDA_LAUNCHED(cb, "embed");
}

/* Rows find their sequence's block tables through toff: entries i and n+i
 * are the offsets (in pointers, from the arena's start) of row i's key and
 * value tables. */
__global__ void kv_write_kernel(float *const *base, const int32_t *toff, const float *k, const float *v,
                                const int32_t *pos, int n, int bs, size_t row) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n * row) return;
    size_t i = t / row, e = t % row;
    int p = pos[i];
    size_t dst = (size_t)(p % bs) * row + e;
    base[toff[i] + p / bs][dst] = k[t];
    base[toff[n + i] + p / bs][dst] = v[t];
}

/* Block tables padded to a power of two (at least 64 entries, or the
 * spans' min_table) while a step is recorded or replayed, so the recording
 * holds as the sequence grows. */
static size_t table_cap(const cuda_backend *cb, const em_kv_spans *s, int n_blocks) {
    if (cb->graphs.mode == 0) return (size_t)n_blocks;
    size_t c = 64;
    while (c < (size_t)n_blocks || c < (size_t)s->min_table) c *= 2;
    return c;
}

/* Stages one kind (keys or values) of every span's table; writes each
 * row's offset from the arena's start into off. */
static bool stage_tables(cuda_backend *cb, const em_kv_spans *s, bool values, int32_t *off) {
    const char *arena = cb->stage.dev;
    for (int i = 0, r = 0; i < s->n_spans; i++) {
        const em_kv_view *v = &s->views[i];
        const char *t = (const char *)cuda_stage_table(cb, values ? (const void *)v->v_blocks : (const void *)v->k_blocks,
                                                       (size_t)v->n_blocks, table_cap(cb, s, v->n_blocks));
        if (!t) return false;
        for (int j = 0; j < s->rows[i]; j++) off[r++] = (int32_t)((t - arena) / (ptrdiff_t)sizeof(float *));
    }
    return true;
}

bool cuda_stage_spans(cuda_backend *cb, const em_kv_spans *s, const int32_t *pos, size_t extra,
                      float *const **base, const int32_t **toff, const int32_t **dpos, int *rows) {
    size_t tables = 0;
    int n = 0;
    for (int i = 0; i < s->n_spans; i++) {
        tables += table_cap(cb, s, s->views[i].n_blocks);
        n += s->rows[i];
    }
    *rows = n;
    if (n <= 0 || tables == 0) return false;
    int32_t stack[512], *off = n <= 256 ? stack : (int32_t *)malloc((size_t)2 * n * sizeof *off);
    if (!off) {
        cuda_note(cb, cudaErrorMemoryAllocation, "staging a batch");
        return false;
    }
    size_t pb = (size_t)n * sizeof *pos;
    cuda_stage_begin(cb, 2 * tables * sizeof(float *) + 3 * pb + extra, 2 * s->n_spans + 2 + (extra ? 1 : 0));
    bool ok = stage_tables(cb, s, false, off) && stage_tables(cb, s, true, off + n);
    *base = (float *const *)cb->stage.dev;
    *toff = ok ? (const int32_t *)cuda_stage_put(cb, off, 2 * pb) : NULL;
    *dpos = ok ? (const int32_t *)cuda_stage_put(cb, pos, pb) : NULL;
    if (off != stack) free(off);
    if (!ok || !*toff || !*dpos) return false;
    cuda_stage_flush(cb);
    return true;
}

void cuda_kv_write_spans(em_backend *be, const em_kv_spans *s, const float *k, const float *v, const int32_t *pos,
                         int n_kv, int head_dim) {
    cuda_backend *cb = cuda_enter(be);
    float *const *base;
    const int32_t *toff, *dpos;
    int n;
    if (!cuda_stage_spans(cb, s, pos, 0, &base, &toff, &dpos, &n)) return;
    size_t row = (size_t)n_kv * head_dim, total = (size_t)n * row;
    if (cuda_graph_skip(cb, base, k, v, n, n_kv, head_dim, s->views[0].block_size)) return;
    cuda_launch(kv_write_kernel, cuda_blocks(total, 256), 256, 0, cb->stream, base, toff, k, v, dpos, n,
                                                                      s->views[0].block_size, row);
    CUDA_LAUNCHED(cb, "kv_write");
}

/* rope_qk and kv_write_spans in one launch. Thread (i < head_dim / 2,
 * heads h0 .. h0+hg-1) of rows blockIdx.y, blockIdx.y + gridDim.y, ...,
 * over a row's nq query heads, then nk key heads, then nk value heads: for
 * a query or key head, i < half rotates the pair (i, i + half) in place (a
 * key's also into the cache); for a key head, i >= half copies the
 * unrotated dims rot + 2(i - half) and the next one into the cache; for a
 * value head, i copies dims 2i and 2i + 1. The rotation is computed once
 * for the thread's heads of a row. */
#define ROPE_HEADS 8
__global__ void rope_kv_write_kernel(float *q, float *k, const float *v, float *const *base, const int32_t *toff,
                                     const int32_t *pos, const float *inv_freq, float attn_factor, int n, int nq,
                                     int nk, int head_dim, int half, int bs, int hg) {
    cuda_pdl_enter();
    int hp = head_dim / 2, heads = nq + 2 * nk, t = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= (heads + hg - 1) / hg * hp) return;
    int i = t % hp, h0 = t / hp * hg, h1 = h0 + hg < heads ? h0 + hg : heads;
    for (int r = (int)blockIdx.y; r < n; r += (int)gridDim.y) {
        int p = pos[r];
        size_t cache_row = (size_t)(p % bs) * nk * head_dim;
        float2 cs = i < half && h0 < nq + nk ? rope_cs(i, p, inv_freq, attn_factor) : make_float2(0.0f, 0.0f);
        for (int h = h0; h < h1; h++) {
            if (h < nq) {
                if (i < half) rope_apply(q + ((size_t)r * nq + h) * head_dim, i, half, cs);
            } else if (h < nq + nk) {
                int kh = h - nq;
                float *x = k + ((size_t)r * nk + kh) * head_dim;
                float *dst = base[toff[r] + p / bs] + cache_row + (size_t)kh * head_dim;
                if (i < half) {
                    float2 rot = rope_apply(x, i, half, cs);
                    dst[i] = rot.x, dst[i + half] = rot.y;
                } else {
                    int d = 2 * half + 2 * (i - half);
                    dst[d] = x[d], dst[d + 1] = x[d + 1];
                }
            } else {
                int vh = h - nq - nk;
                const float *x = v + ((size_t)r * nk + vh) * head_dim;
                float *dst = base[toff[n + r] + p / bs] + cache_row + (size_t)vh * head_dim;
                dst[2 * i] = x[2 * i], dst[2 * i + 1] = x[2 * i + 1];
            }
        }
    }
}

void cuda_rope_kv_write_spans(em_backend *be, const em_kv_spans *s, float *q, float *k, const float *v,
                              const int32_t *pos, int n_heads, int n_kv, int head_dim, int rot_dim,
                              const float *inv_freq, float attn_factor) {
    cuda_backend *cb = cuda_enter(be);
    int half = rot_dim / 2;
    if (half <= 0 || head_dim % 2 || rot_dim > head_dim || n_kv <= 0) { /* shapes the kernel does not take */
        int rows = 0;
        for (int i = 0; i < s->n_spans; i++) rows += s->rows[i];
        cuda_rope_qk(be, q, k, rows, n_heads, n_kv, head_dim, rot_dim, pos, inv_freq, attn_factor);
        cuda_kv_write_spans(be, s, k, v, pos, n_kv, head_dim);
        return;
    }
    size_t fb = (size_t)half * sizeof *inv_freq;
    float *const *base;
    const int32_t *toff, *dpos;
    int n;
    if (!cuda_stage_spans(cb, s, pos, fb, &base, &toff, &dpos, &n)) return;
    const float *dfreq = (const float *)cuda_stage_put(cb, inv_freq, fb);
    if (!dfreq) return;
    cuda_stage_flush(cb);
    /* many rows: a thread takes a pair of ROPE_HEADS heads, its rotation
     * computed once (the 8B shape's 4,096-token prefill: 101 us a layer with
     * a thread a head); few: a head, for the parallelism */
    int hg = n >= 64 ? ROPE_HEADS : 1, heads = n_heads + 2 * n_kv;
    size_t per_row = (size_t)(heads + hg - 1) / hg * (head_dim / 2);
    if (cuda_graph_skip(cb, base, q, k, v, n, n_heads, n_kv, head_dim, half, attn_factor, s->views[0].block_size))
        return;
    dim3 grid(cuda_blocks(per_row, 128), n < 65535 ? (unsigned)n : 65535u);
    cuda_launch(rope_kv_write_kernel, grid, 128, 0, cb->stream, q, k, v, base, toff, dpos, dfreq, attn_factor, n,
                n_heads, n_kv, head_dim, half, s->views[0].block_size, hg);
    CUDA_LAUNCHED(cb, "rope and kv_write");
}

void cuda_kv_write(em_backend *be, const em_kv_view *kv, const float *k, const float *v, const int32_t *pos, int n,
                   int n_kv, int head_dim) {
    if (n <= 0 || kv->n_blocks <= 0) return;
    em_kv_spans s = {kv, &n, 1, EM_MATH_EXACT, 0};
    cuda_kv_write_spans(be, &s, k, v, pos, n_kv, head_dim);
}
