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
 * The plan is built on the host from the spans: tiles of at most
 * pairs/group rows (64 pairs here, 128 for the tensor-core kernel of
 * cuda_attention_tc.cu, which FAST batches use) that never cross a span,
 * each with the range of keys its rows can see, heaviest first; spans
 * filling less than 32 pairs (decode rows of a large batch) are left to
 * the per-row kernel of cuda_attention.cu.
 * When the tiles are too few to fill the GPU (a short chunk of a long
 * sequence), a tile's keys are shared among several blocks that write
 * partial results, and tile_merge combines them in a fixed order. The kernel is specialised for head
 * dims 64, 128 and 256; smaller dims run in the next specialisation with
 * zero padding. Every sum has a fixed order, so results are reproducible. */
#include "backend/cuda/cuda_internal.cuh"

#include <stdlib.h>

#define TILE_THREADS 256
#define TILE_PAIRS CUDA_TILE_PAIRS /* (query row, head) pairs per block */
/* Spans filling less of a tile than this go to the per-row kernel, which
 * wastes no pairs (decode rows of a large batch, short chunks). */
#define TILE_MIN_PAIRS 32
#define TILE_SPLIT_MIN_KEYS 512

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
    attention_tiled_kernel(float *out, float *part, const float *q, float *const *base, const int32_t *toff,
                           const int32_t *pos, const int32_t *tiles, int n, int n_heads, int group, int n_kv, int hd,
                           int bs, float scale, int window) {
    cuda_pdl_enter();
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
    int row0 = tl[0], pairs = tl[1] * group, lo = tl[2], hi = tl[3], slot = tl[4];
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
                /* kp <= hi: a share of a split tile ends before the pairs' positions */
                bool seen = kp <= rp[i] && kp <= hi && (window <= 0 || kp > rp[i] - window);
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

    if (slot >= 0) { /* a share of the tile's keys: the unnormalised partial, for tile_merge */
#pragma unroll
        for (int i = 0; i < RM; i++) {
            int pr = ty * RM + i;
            if (pr >= pairs) continue;
            float *pp = part + (((size_t)slot * n_kv + kvh) * BM + pr) * (hd + 2);
            if (tx == 0) pp[0] = m[i], pp[1] = l[i];
#pragma unroll
            for (int cv = 0; cv < CV; cv++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int d = tx * 4 + 64 * cv + e;
                    if (d < hd) pp[2 + d] = acc[i][cv * 4 + e];
                }
        }
        return;
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

/* Merges the partials of a tile whose keys were split: block (x, y) takes
 * merge x / n_kv, kv head x % n_kv and pairs 8y..8y+7, a warp a pair
 * (cuda_merge_pair). (One thread an output element, each re-reading every
 * split's maximum, took 37-80 us a layer on the H200: latency-bound.) */
#define MERGE_WARPS 8
__global__ void __launch_bounds__(MERGE_WARPS * 32)
    tile_merge(float *out, __nv_bfloat16 *ob, const float *part, const int32_t *merges, int n_heads, int group,
               int n_kv, int hd, int tile_pairs) {
    __shared__ float wsh[MERGE_WARPS][CUDA_MERGE_CHUNK];
    cuda_pdl_enter();
    const int32_t *mg = merges + (size_t)CUDA_MERGE_FIELDS * (blockIdx.x / n_kv);
    int kvh = (int)blockIdx.x % n_kv, row0 = mg[0], pairs = mg[1] * group, slot0 = mg[2], splits = mg[3];
    int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, pr = (int)blockIdx.y * MERGE_WARPS + warp;
    if (pr >= pairs) return;
    size_t stride = (size_t)n_kv * tile_pairs * (hd + 2); /* from one slot to the next */
    const float *pp = part + (((size_t)slot0 * n_kv + kvh) * tile_pairs + pr) * (hd + 2);
    size_t at = ((size_t)(row0 + pr / group) * n_heads + (size_t)kvh * group + pr % group) * hd;
    cuda_merge_pair(out, ob, at, pp, stride, splits, hd, wsh[warp], lane);
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

template <int HD> static void tile_launch(cuda_backend *cb, unsigned blocks, float *out, float *part, const float *q,
                                          float *const *base, const int32_t *toff, const int32_t *pos,
                                          const int32_t *tiles, int n, int n_heads, int n_kv, int hd, int bs,
                                          float scale, int window) {
    constexpr int BN = tile_keys(HD);
    size_t smem = tile_smem(HD);
    cuda_note(cb,
              cudaFuncSetAttribute(attention_tiled_kernel<HD, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem),
              "attention (tiled): shared memory");
    cuda_launch(attention_tiled_kernel<HD, BN>, blocks, TILE_THREADS, smem, cb->stream, 
        out, part, q, base, toff, pos, tiles, n, n_heads, n_heads / n_kv, n_kv, hd, bs, scale, window);
}

void cuda_attention_tiled(cuda_backend *cb, float *out, __nv_bfloat16 *ob, float *part, const float *q,
                          float *const *base, const int32_t *toff, const int32_t *pos, const int32_t *dplan,
                          const cuda_att_plan *p, int n, int n_heads, int n_kv, int head_dim, int bs, float scale,
                          int window) {
    if (p->n_slots && !part) {
        size_t bytes = (size_t)p->n_slots * n_kv * p->pairs * ((size_t)head_dim + 2) * sizeof(float);
        if (!cuda_scratch_eager(cb, (void **)&cb->att_tile_part, &cb->att_tile_part_bytes, bytes)) return;
        part = cb->att_tile_part;
    }
    unsigned blocks = (unsigned)p->n_items * (unsigned)n_kv;
    int hdc = tile_dims(head_dim);
    if (p->pairs == CUDA_TC_PAIRS && p->n_conv) {
        const int32_t *conv = dplan + (size_t)p->n_items * CUDA_TILE_FIELDS + p->n_rest +
                              (size_t)p->n_merge * CUDA_MERGE_FIELDS;
        if (!cuda_attention_fa(cb, blocks, out, ob, part, q, base, toff, pos, dplan, conv, p, n, n_heads, n_kv,
                               head_dim, bs, scale, window)) {
            /* no room for the bf16 copy (a very long context): the f32
             * cache through the kernel that stages it, the same bits; its
             * tiles write no bf16 rounding of out, so out has no twin.
             * head_dim 256 has no such kernel: the failure is reported. */
            cb->twin_src = NULL;
            if (!cuda_attention_tc_fits(cb, head_dim)) {
                cuda_note(cb, cudaErrorMemoryAllocation, "attention: no room for the bf16 copy of keys and values");
                return;
            }
            cuda_attention_tc(cb, blocks, out, part, q, base, toff, pos, dplan, n, n_heads, n_kv, head_dim, bs, scale,
                              window);
        }
    } else if (p->pairs == CUDA_TC_PAIRS)
        cuda_attention_tc(cb, blocks, out, part, q, base, toff, pos, dplan, n, n_heads, n_kv, head_dim, bs, scale,
                          window);
    else if (hdc == 64)
        tile_launch<64>(cb, blocks, out, part, q, base, toff, pos, dplan, n, n_heads, n_kv, head_dim, bs, scale, window);
    else if (hdc == 128)
        tile_launch<128>(cb, blocks, out, part, q, base, toff, pos, dplan, n, n_heads, n_kv, head_dim, bs, scale, window);
    else
        tile_launch<256>(cb, blocks, out, part, q, base, toff, pos, dplan, n, n_heads, n_kv, head_dim, bs, scale, window);
    CUDA_LAUNCHED(cb, "attention (tiled)");
    if (p->n_merge) {
        const int32_t *merges = dplan + (size_t)p->n_items * CUDA_TILE_FIELDS + p->n_rest;
        dim3 grid((unsigned)p->n_merge * (unsigned)n_kv, (unsigned)((p->pairs + MERGE_WARPS - 1) / MERGE_WARPS));
        cuda_launch(tile_merge, grid, MERGE_WARPS * 32, 0, cb->stream, 
            out, ob, part, merges, n_heads, n_heads / n_kv, n_kv, head_dim, p->pairs);
        CUDA_LAUNCHED(cb, "attention (tiled, merge)");
    }
}

static int tile_cost_desc(const void *x, const void *y) {
    const int32_t *a = (const int32_t *)x, *b = (const int32_t *)y;
    int64_t ca = (int64_t)(a[3] - a[2] + 1) * a[1], cb = (int64_t)(b[3] - b[2] + 1) * b[1];
    if (ca != cb) return ca > cb ? -1 : 1;
    if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
    return a[2] < b[2] ? -1 : a[2] > b[2]; /* shares of one tile: by first key (a total order) */
}

/* Splits of a tile's keys: when the tiles give the GPU fewer blocks than
 * about two per multiprocessor (short chunks of long sequences), long key
 * ranges are shared among several blocks, each of at least
 * TILE_SPLIT_MIN_KEYS keys, and merged. Depends only on the shapes, the
 * positions and the GPU, so the same call gives the same bits. */
static int tile_splits(int keys, int blocks, int n_sm, int *per) {
    int sp = 1;
    if (blocks < n_sm) {
        int want = (2 * n_sm + blocks - 1) / blocks, most = keys / TILE_SPLIT_MIN_KEYS;
        sp = want < most ? want : most > 1 ? most : 1;
    }
    *per = (keys + sp - 1) / sp;
    return (keys + *per - 1) / *per; /* no empty share */
}

/* The keys rows r0..end-1 see, in any order of positions: lo..hi. */
static void tile_keys_seen(const int32_t *pos, int r0, int end, int window, int32_t *lo, int32_t *hi) {
    *lo = INT32_MAX, *hi = -1;
    for (int r = r0; r < end; r++) {
        int first = window > 0 && pos[r] - window + 1 > 0 ? pos[r] - window + 1 : 0;
        if (first < *lo) *lo = first;
        if (pos[r] > *hi) *hi = pos[r];
    }
}

bool cuda_attention_plan(cuda_att_plan *p, const em_kv_spans *s, const int32_t *pos, int n_heads, int n_kv,
                         int window, int n_sm, int pairs) {
    int group = n_heads / n_kv, bq = pairs / group, nt = 0, nr = 0, nc = 0;
    memset(p, 0, sizeof *p);
    p->pairs = pairs;
    for (int i = 0; i < s->n_spans; i++) {
        if (s->rows[i] * group >= TILE_MIN_PAIRS) nt += (s->rows[i] + bq - 1) / bq, nc++;
        else nr += s->rows[i];
    }
    /* the tiles with their key ranges and their span's keys in a bf16 copy
     * (cuda_attention_fa.cu) first, in a scratch list; then the copies */
    int32_t *tiles = (int32_t *)malloc(((size_t)nt * 5 + (size_t)nc * CUDA_CONV_FIELDS + 1) * sizeof *tiles);
    if (!tiles) return false;
    int32_t *conv = tiles + (size_t)nt * 5;
    int k = 0, c = 0, items = 0, merges = 0;
    int64_t keys = 0;
    for (int i = 0, row = 0; i < s->n_spans; row += s->rows[i++]) {
        if (s->rows[i] * group < TILE_MIN_PAIRS) continue;
        int32_t seen = -1;
        for (int r0 = row; r0 < row + s->rows[i]; r0 += bq) {
            int end = r0 + bq < row + s->rows[i] ? r0 + bq : row + s->rows[i];
            int32_t *e = tiles + 5 * k++;
            e[0] = r0, e[1] = end - r0, e[4] = (int32_t)keys;
            tile_keys_seen(pos, r0, end, window, &e[2], &e[3]);
            if (e[3] > seen) seen = e[3];
        }
        int32_t *v = conv + (size_t)CUDA_CONV_FIELDS * c++;
        v[0] = row, v[1] = seen + 1, v[2] = (int32_t)keys;
        keys += seen + 1;
        if (keys > INT32_MAX / 2) { /* offsets stay int32 */
            free(tiles);
            return false;
        }
    }
    int blocks = nt * n_kv;
    for (int t = 0; t < nt; t++) {
        int per, sp = tile_splits(tiles[5 * t + 3] - tiles[5 * t + 2] + 1, blocks, n_sm, &per);
        items += sp;
        merges += sp > 1;
    }
    p->v = (int32_t *)malloc(((size_t)items * CUDA_TILE_FIELDS + (size_t)nr + (size_t)merges * CUDA_MERGE_FIELDS +
                              (size_t)nc * CUDA_CONV_FIELDS + 1) *
                             sizeof *p->v);
    if (!p->v) {
        free(tiles);
        return false;
    }
    int32_t *rest = p->v + (size_t)items * CUDA_TILE_FIELDS, *mg = rest + nr;
    int it = 0, m = 0, slots = 0;
    for (int t = 0; t < nt; t++) {
        const int32_t *e = tiles + 5 * t;
        int per, sp = tile_splits(e[3] - e[2] + 1, blocks, n_sm, &per);
        if (sp > 1) {
            int32_t *g = mg + (size_t)CUDA_MERGE_FIELDS * m++;
            g[0] = e[0], g[1] = e[1], g[2] = slots, g[3] = sp;
        }
        for (int j = 0; j < sp; j++) {
            int32_t *w = p->v + (size_t)CUDA_TILE_FIELDS * it++;
            w[0] = e[0], w[1] = e[1], w[2] = e[2] + j * per;
            w[3] = w[2] + per - 1 < e[3] ? w[2] + per - 1 : e[3];
            w[4] = sp > 1 ? slots + j : -1;
            w[5] = e[4];
        }
        if (sp > 1) slots += sp;
    }
    memcpy(mg + (size_t)CUDA_MERGE_FIELDS * m, conv, (size_t)nc * CUDA_CONV_FIELDS * sizeof *conv);
    free(tiles);
    for (int i = 0, row = 0; i < s->n_spans; row += s->rows[i++])
        if (s->rows[i] * group < TILE_MIN_PAIRS)
            for (int r = row; r < row + s->rows[i]; r++) *rest++ = r;
    qsort(p->v, (size_t)it, CUDA_TILE_FIELDS * sizeof *p->v, tile_cost_desc);
    p->n_items = it, p->n_rest = nr, p->n_merge = m, p->n_slots = slots, p->n_conv = nc, p->conv_keys = (int)keys;
    return true;
}

bool cuda_attention_plan_shares(cuda_att_plan *p, int rows, const int32_t *pos, int n_heads, int n_kv, int window,
                                int pairs, int shares) {
    int bq = pairs / (n_heads / n_kv), nt = (rows + bq - 1) / bq;
    memset(p, 0, sizeof *p);
    p->pairs = pairs;
    p->v = (int32_t *)malloc(((size_t)nt * shares * CUDA_TILE_FIELDS + (size_t)nt * CUDA_MERGE_FIELDS) * sizeof *p->v);
    if (!p->v) return false;
    int32_t *mg = p->v + (size_t)nt * shares * CUDA_TILE_FIELDS;
    for (int t = 0; t < nt; t++) {
        int r0 = t * bq, end = r0 + bq < rows ? r0 + bq : rows;
        int32_t lo, hi;
        tile_keys_seen(pos, r0, end, window, &lo, &hi);
        int per = (hi - lo + 1 + shares - 1) / shares; /* the last shares may be empty: lo > hi */
        for (int j = 0; j < shares; j++) {
            int32_t *w = p->v + (size_t)CUDA_TILE_FIELDS * (t * shares + j);
            w[0] = r0, w[1] = end - r0, w[2] = lo + j * per;
            w[3] = w[2] + per - 1 < hi ? w[2] + per - 1 : hi;
            w[4] = t * shares + j;
            w[5] = 0;
        }
        int32_t *g = mg + (size_t)CUDA_MERGE_FIELDS * t;
        g[0] = r0, g[1] = end - r0, g[2] = t * shares, g[3] = shares;
    }
    p->n_items = nt * shares, p->n_merge = nt, p->n_slots = nt * shares;
    return true;
}
