/* cuda_attention_prefill.cu — tiled (flash) attention for prefill batches.
 *
 * A block takes a tile of consecutive query rows of one sequence and one kv
 * head, together with the `group` query heads that share it: 64 (row, head)
 * pairs in all, so a key or value tile in shared memory serves every head
 * of the group. The block streams the sequence's keys through shared memory
 * BN at a time, copying the next tile in (cp.async) while it works on the
 * current one: each thread scores 4 pairs against BN/16 keys (f32 FMA over
 * float4 reads that the warp shares), the 16 threads holding a pair's row
 * of scores update its running maximum and sum (online softmax, reduced by
 * shuffles in a fixed order), and each thread then accumulates the weighted
 * values of its 4 pairs in head_dim/16 output dimensions. Causal mask and
 * sliding window apply per pair, by position.
 *
 * The plan is built on the host from the spans: tiles of at most 64/group
 * rows that never cross a span, each with the range of keys its rows can
 * see, heaviest first; spans too short to fill half a tile (decode rows
 * of a large batch) are left to the per-row kernel of cuda_attention.cu. The kernel is specialised for head
 * dims 64, 128 and 256; smaller dims run in the next specialisation with
 * zero padding. Every sum has a fixed order, so results are reproducible. */
#include "backend/cuda/cuda_internal.cuh"

#include <stdlib.h>

#define TILE_THREADS 256
#define TILE_PAIRS 64 /* (query row, head) pairs per block */
/* Spans filling less of a tile than this go to the per-row kernel, which
 * wastes no pairs (decode rows of a large batch, short chunks). */
#define TILE_MIN_PAIRS 32

/* src[d..d+3] with zeros past hd (or everywhere when src is NULL); float4
 * reads when hd is a multiple of 4 (rows are then 16-byte aligned). */
__device__ __forceinline__ float4 load4(const float *src, int d, int hd) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (!src || d >= hd) return v;
    if ((hd & 3) == 0) return *(const float4 *)(src + d);
    v.x = src[d];
    if (d + 1 < hd) v.y = src[d + 1];
    if (d + 2 < hd) v.z = src[d + 2];
    if (d + 3 < hd) v.w = src[d + 3];
    return v;
}

/* 16 bytes global -> shared without passing through registers; with
 * valid false it writes zeros and reads nothing. */
__device__ __forceinline__ void cp_async16(float *dst, const float *src, bool valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* Waits for all but the most recent group of this thread's copies. */
__device__ __forceinline__ void cp_async_wait_prior() { asm volatile("cp.async.wait_group 1;\n" ::); }

/* Starts loading keys and values k0..k0+BN-1 of kv head head_off/hd into
 * Kd/Vd: asynchronous when rows are whole float4s, else plain loads. Keys
 * past hi and dims past hd are zeros: a key's weight may be 0, but 0 times
 * whatever the cache holds past the sequence need not be. */
template <int HD, int BN>
__device__ __forceinline__ void load_kv(float *Kd, float *Vd, float *const *kb, float *const *vb, int k0, int hi,
                                        int bs, size_t rowlen, size_t head_off, int hd) {
    constexpr int C4 = HD / 4, LD = HD + 4;
    for (int i = (int)threadIdx.x; i < BN * C4; i += TILE_THREADS) {
        int kr = i / C4, d = (i % C4) * 4, key = k0 + kr;
        const float *ks = NULL, *vs = NULL;
        if (key <= hi) {
            size_t off = (size_t)(key % bs) * rowlen + head_off;
            ks = kb[key / bs] + off;
            vs = vb[key / bs] + off;
        }
        if ((hd & 3) == 0) {
            bool ok = ks && d < hd;
            cp_async16(&Kd[kr * LD + d], ok ? ks + d : (const float *)kb, ok);
            cp_async16(&Vd[kr * LD + d], ok ? vs + d : (const float *)vb, ok);
        } else {
            *(float4 *)&Kd[kr * LD + d] = load4(ks, d, hd);
            *(float4 *)&Vd[kr * LD + d] = load4(vs, d, hd);
        }
    }
}

__device__ __forceinline__ float f4_get(float4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/* HD: head_dim rounded up to 64/128/256; BN: keys per shared-memory tile. */
template <int HD, int BN>
__global__ void __launch_bounds__(TILE_THREADS, HD <= 128 ? 2 : 1)
    attention_tiled_kernel(float *out, const float *q, float *const *base, const int32_t *toff, const int32_t *pos,
                           const int32_t *tiles, int n, int n_heads, int group, int n_kv, int hd, int bs, float scale,
                           int window) {
    constexpr int BM = TILE_PAIRS, RM = BM / 16, RN = BN / 16, CV = HD / 64, LD = HD + 4, PLD = BN + 4;
    constexpr int C4 = HD / 4; /* float4 per row */
    static_assert(RM == 4 && BN % 16 == 0 && HD % 64 == 0, "thread layout: 16 x 16, 4 pairs, BN/16 keys, HD/16 dims");
    /* row strides of HD+4 floats: the 16 key rows a warp reads at once fall
     * in distinct banks (8 rows per 128 bytes) */
    extern __shared__ float4 sm4[];
    /* Q, then two buffers of K and V (one loading while the other is used), then P */
    float *Qs = (float *)sm4, *KV = Qs + BM * LD, *Ps = KV + 4 * BN * LD;
    int tile = (int)blockIdx.x / n_kv, kvh = (int)blockIdx.x % n_kv, t = (int)threadIdx.x;
    int tx = t % 16, ty = t / 16; /* a half-warp shares ty: one pair row's 16 score columns */
    const int32_t *tl = tiles + (size_t)CUDA_TILE_FIELDS * tile;
    int row0 = tl[0], pairs = tl[1] * group, lo = tl[2], hi = tl[3];
    float *const *kb = base + toff[row0], *const *vb = base + toff[n + row0]; /* the tile's sequence */
    size_t rowlen = (size_t)n_kv * hd, head_off = (size_t)kvh * hd;

    /* pair pr = (row row0 + pr / group, query head kvh * group + pr % group) */
    for (int i = t; i < BM * C4; i += TILE_THREADS) {
        int pr = i / C4, d = (i % C4) * 4;
        const float *src = pr < pairs
                               ? q + ((size_t)(row0 + pr / group) * n_heads + (size_t)kvh * group + pr % group) * hd
                               : NULL;
        *(float4 *)&Qs[pr * LD + d] = load4(src, d, hd);
    }
    int rp[RM]; /* the pairs' positions; -1 masks every key of a padding pair */
    float m[RM], l[RM], acc[RM][CV * 4];
#pragma unroll
    for (int i = 0; i < RM; i++) {
        int pr = ty * RM + i;
        rp[i] = pr < pairs ? pos[row0 + pr / group] : -1;
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < CV * 4; c++) acc[i][c] = 0.0f;
    }

    load_kv<HD, BN>(KV, KV + BN * LD, kb, vb, lo, hi, bs, rowlen, head_off, hd);
    cp_async_commit();
    for (int k0 = lo, buf = 0; k0 <= hi; k0 += BN, buf ^= 1) {
        const float *Ks = KV + 2 * buf * BN * LD, *Vs = Ks + BN * LD;
        __syncthreads(); /* the previous tile's readers are done (and Qs is written) */
        if (k0 + BN <= hi) { /* the next tile, into the buffer the previous one used */
            float *Kn = KV + 2 * (buf ^ 1) * BN * LD;
            load_kv<HD, BN>(Kn, Kn + BN * LD, kb, vb, k0 + BN, hi, bs, rowlen, head_off, hd);
        }
        cp_async_commit(); /* perhaps empty: the wait below always leaves the newest group */
        cp_async_wait_prior();
        __syncthreads(); /* this tile is in shared memory, every thread's part of it */

        float s[RM][RN];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < RN; j++) s[i][j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < HD; d += 4) {
            float4 qv[RM], kv[RN];
#pragma unroll
            for (int i = 0; i < RM; i++) qv[i] = *(const float4 *)&Qs[(ty * RM + i) * LD + d];
#pragma unroll
            for (int j = 0; j < RN; j++) kv[j] = *(const float4 *)&Ks[(tx + 16 * j) * LD + d];
#pragma unroll
            for (int i = 0; i < RM; i++)
#pragma unroll
                for (int j = 0; j < RN; j++) {
                    float a = s[i][j];
                    a = fmaf(qv[i].x, kv[j].x, a);
                    a = fmaf(qv[i].y, kv[j].y, a);
                    a = fmaf(qv[i].z, kv[j].z, a);
                    s[i][j] = fmaf(qv[i].w, kv[j].w, a);
                }
        }

        /* online softmax per pair row; the 16 lanes of a half-warp hold it */
#pragma unroll
        for (int i = 0; i < RM; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < RN; j++) {
                int kp = k0 + tx + 16 * j;
                bool seen = kp <= rp[i] && (window <= 0 || kp > rp[i] - window);
                s[i][j] = seen ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
#pragma unroll
            for (int o = 8; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_new = fmaxf(m[i], mx);
            float mu = m_new == -INFINITY ? 0.0f : m_new; /* no key seen yet: every weight is 0 */
            float corr = expf(m[i] - mu), rs = 0.0f;
#pragma unroll
            for (int j = 0; j < RN; j++) {
                float e = expf(s[i][j] - mu);
                Ps[(ty * RM + i) * PLD + tx + 16 * j] = e;
                rs += e;
            }
#pragma unroll
            for (int o = 8; o; o >>= 1) rs += __shfl_xor_sync(0xffffffffu, rs, o);
            l[i] = l[i] * corr + rs;
            m[i] = m_new;
#pragma unroll
            for (int c = 0; c < CV * 4; c++) acc[i][c] *= corr;
        }
        __syncthreads(); /* Ps complete */

#pragma unroll 2
        for (int j = 0; j < BN; j += 4) {
            float4 pv[RM];
#pragma unroll
            for (int i = 0; i < RM; i++) pv[i] = *(const float4 *)&Ps[(ty * RM + i) * PLD + j];
#pragma unroll
            for (int jj = 0; jj < 4; jj++)
#pragma unroll
                for (int cv = 0; cv < CV; cv++) {
                    float4 v = *(const float4 *)&Vs[(j + jj) * LD + tx * 4 + 64 * cv];
#pragma unroll
                    for (int i = 0; i < RM; i++) {
                        float p = f4_get(pv[i], jj);
                        float *a = &acc[i][cv * 4];
                        a[0] = fmaf(p, v.x, a[0]);
                        a[1] = fmaf(p, v.y, a[1]);
                        a[2] = fmaf(p, v.z, a[2]);
                        a[3] = fmaf(p, v.w, a[3]);
                    }
                }
        }
    }

#pragma unroll
    for (int i = 0; i < RM; i++) {
        int pr = ty * RM + i;
        if (pr >= pairs) continue;
        float inv = 1.0f / l[i];
        float *o = out + ((size_t)(row0 + pr / group) * n_heads + (size_t)kvh * group + pr % group) * hd;
#pragma unroll
        for (int cv = 0; cv < CV; cv++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int d = tx * 4 + 64 * cv + e;
                if (d < hd) o[d] = acc[i][cv * 4 + e] * inv;
            }
    }
}

/* Keys per shared-memory tile: fewer for wide heads, so two blocks (each
 * with Q, two K/V buffers and P) fit on a multiprocessor up to head_dim 128. */
static constexpr int tile_keys(int hdc) { return hdc <= 64 ? 64 : 32; }
static constexpr int tile_dims(int head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

static size_t tile_smem(int hdc) {
    int bn = tile_keys(hdc);
    return ((size_t)(TILE_PAIRS + 4 * bn) * (size_t)(hdc + 4) + (size_t)TILE_PAIRS * (size_t)(bn + 4)) * sizeof(float);
}

bool cuda_attention_tiled_fits(cuda_backend *cb, int n_heads, int n_kv, int head_dim) {
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cb->device) != cudaSuccess) return false;
    return head_dim > 0 && head_dim <= 256 && n_heads / n_kv <= TILE_PAIRS &&
           tile_smem(tile_dims(head_dim)) <= (size_t)optin;
}

template <int HD> static void tile_launch(cuda_backend *cb, unsigned blocks, float *out, const float *q,
                                          float *const *base, const int32_t *toff, const int32_t *pos,
                                          const int32_t *tiles, int n, int n_heads, int n_kv, int hd, int bs,
                                          float scale, int window) {
    constexpr int BN = tile_keys(HD);
    size_t smem = tile_smem(HD);
    cuda_note(cb,
              cudaFuncSetAttribute(attention_tiled_kernel<HD, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem),
              "attention (tiled): shared memory");
    attention_tiled_kernel<HD, BN><<<blocks, TILE_THREADS, smem, cb->stream>>>(
        out, q, base, toff, pos, tiles, n, n_heads, n_heads / n_kv, n_kv, hd, bs, scale, window);
}

void cuda_attention_tiled(cuda_backend *cb, float *out, const float *q, float *const *base, const int32_t *toff,
                          const int32_t *pos, const int32_t *tiles, int n_tiles, int n, int n_heads, int n_kv,
                          int head_dim, int bs, float scale, int window) {
    unsigned blocks = (unsigned)n_tiles * (unsigned)n_kv;
    int hdc = tile_dims(head_dim);
    if (hdc == 64) tile_launch<64>(cb, blocks, out, q, base, toff, pos, tiles, n, n_heads, n_kv, head_dim, bs, scale, window);
    else if (hdc == 128) tile_launch<128>(cb, blocks, out, q, base, toff, pos, tiles, n, n_heads, n_kv, head_dim, bs, scale, window);
    else tile_launch<256>(cb, blocks, out, q, base, toff, pos, tiles, n, n_heads, n_kv, head_dim, bs, scale, window);
    CUDA_LAUNCHED(cb, "attention (tiled)");
}

static int tile_cost_desc(const void *x, const void *y) {
    const int32_t *a = (const int32_t *)x, *b = (const int32_t *)y;
    int64_t ca = (int64_t)(a[3] - a[2] + 1) * a[1], cb = (int64_t)(b[3] - b[2] + 1) * b[1];
    if (ca != cb) return ca > cb ? -1 : 1;
    return a[0] < b[0] ? -1 : a[0] > b[0]; /* first rows differ: a total order */
}

int32_t *cuda_attention_plan(const em_kv_spans *s, const int32_t *pos, int group, int window, int *n_tiles,
                             int *n_rest) {
    int bq = TILE_PAIRS / group, nt = 0, nr = 0;
    for (int i = 0; i < s->n_spans; i++) {
        if (s->rows[i] * group >= TILE_MIN_PAIRS) nt += (s->rows[i] + bq - 1) / bq;
        else nr += s->rows[i];
    }
    int32_t *plan = (int32_t *)malloc(((size_t)nt * CUDA_TILE_FIELDS + (size_t)nr + 1) * sizeof *plan);
    if (!plan) return NULL;
    int32_t *rest = plan + (size_t)nt * CUDA_TILE_FIELDS;
    int k = 0, m = 0;
    for (int i = 0, row = 0; i < s->n_spans; row += s->rows[i++]) {
        if (s->rows[i] * group < TILE_MIN_PAIRS) {
            for (int r = row; r < row + s->rows[i]; r++) rest[m++] = r;
            continue;
        }
        for (int r0 = row; r0 < row + s->rows[i]; r0 += bq) {
            int end = r0 + bq < row + s->rows[i] ? r0 + bq : row + s->rows[i], lo = INT32_MAX, hi = -1;
            for (int r = r0; r < end; r++) { /* any order of positions: the keys any row sees */
                int first = window > 0 && pos[r] - window + 1 > 0 ? pos[r] - window + 1 : 0;
                if (first < lo) lo = first;
                if (pos[r] > hi) hi = pos[r];
            }
            int32_t *e = plan + (size_t)CUDA_TILE_FIELDS * k++;
            e[0] = r0, e[1] = end - r0, e[2] = lo, e[3] = hi;
        }
    }
    qsort(plan, (size_t)nt, CUDA_TILE_FIELDS * sizeof *plan, tile_cost_desc);
    *n_tiles = nt, *n_rest = nr;
    return plan;
}
