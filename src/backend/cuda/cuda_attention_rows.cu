/* cuda_attention_rows.cu — the per-row attention of decode steps and short
 * spans (a cached prompt's tail) for the usual shapes: head_dim 32, 64 or 128,
 * 1, 2, 4 or 8 query heads per kv head.
 *
 * Block (x, y) serves row x / n_kv, kv head x % n_kv and the y-th of
 * gridDim.y equal shares of the row's keys (att_key_range). It walks its
 * keys in tiles of ROWS_TK: the block loads a tile's keys and values into
 * shared memory (coalesced; the next tile's loads are issued before this
 * one is computed), then
 *   scores   warp w takes the heads g = w, w + 4, ...: lane l scores key l
 *            of the tile against head g (a dot product of head_dim terms
 *            read from shared memory), so every score is one thread's work;
 *            the tile's maximum and sum are warp butterflies;
 *   values   thread t owns outputs (g, d) = t, t + 128, ... and adds the
 *            tile's weighted values to them, key by key.
 * An earlier kernel gave each key to head_dim / 4 lanes, which then all
 * redid the online softmax's scalar work: about 6,000 instructions a warp
 * for 128 keys, 16 us a layer of the 1B shape at 2,048 positions.
 *
 * The sums run in a fixed order (a dot product as four partial sums over
 * d, the butterflies, the values as four partial sums over a tile's keys), so a row's result
 * depends on its keys and the split count only, never on the other rows of
 * the batch. Splits write attention_kernel's partials (max, sum, acc[hd]);
 * with a counter per (row, kv head) the last of its splits to finish merges
 * them (attention_combine's arithmetic, in split order) and resets the
 * counter, which saves the merge's launch; without one attention_combine
 * merges them.
 *
 * A decode step's form (ROPE) also does rope_kv_write's work: each block
 * rotates its queries, the block whose keys hold the row's own position
 * rotates that key and writes it and the value into the cache, and every
 * other key is fetched before the kernel waits for the product that made
 * q, k and v. On the H200 that made the 8B 4-bit decode 426 -> 445 tok/s,
 * bf16 219 -> 225, the 1B's 4-bit 1,394 -> 1,442. */
#include "backend/cuda/cuda_internal.cuh"

#define ROWS_THREADS 128
#define ROWS_TK 32 /* keys per tile: one per lane */

/* A tile's keys and values, LPT float4 of each per thread (keys past the
 * end are zeros: their weights are zero, and no garbage meets them). */
template <int HD, int LPT>
__device__ __forceinline__ void rows_fetch(float4 *kn, float4 *vn, float *const *kb, float *const *vb, int j0, int end,
                                           int bs_shift, size_t rowlen, size_t head_off) {
    int bs_mask = (1 << bs_shift) - 1; /* the cache's block size is a power of two */
#pragma unroll
    for (int r = 0; r < LPT; r++) {
        int i = (int)threadIdx.x + r * ROWS_THREADS, jj = i / (HD / 4), c = (i % (HD / 4)) * 4, j = j0 + jj;
        kn[r] = vn[r] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (j <= end) {
            size_t off = (size_t)(j & bs_mask) * rowlen + head_off + c;
            kn[r] = *(const float4 *)(kb[j >> bs_shift] + off);
            vn[r] = *(const float4 *)(vb[j >> bs_shift] + off);
        }
    }
}

/* The last split of block x's (row, kv head) merges the G heads' partials
 * into out, as attention_combine would (the same arithmetic in the same
 * order). Other blocks wrote them, so they are read through L2, and every
 * read is issued before the first is used: thread g < G reads head g's
 * maxima and sums and finds the splits' weights once for the block, each
 * thread its outputs' values, four outputs at a time. (A thread that
 * reread each head's maxima and sums per output, a load waiting on the
 * last, kept the merging block 8 us on the 8B shape.) */
template <int HD, int G>
__device__ __forceinline__ void rows_merge(float *out, __nv_bfloat16 *ob, const float *part, int row, int xr, int kvh,
                                           int n_heads) {
    constexpr int S = CUDA_ATT_SPLITS, PS = HD + 2; /* a split's partial: max, sum, acc[HD] */
    constexpr int OUTS = (G * HD + ROWS_THREADS - 1) / ROWS_THREADS, OC = OUTS < 4 ? OUTS : 4;
    __shared__ float fs[G][S], ls[G];
    __shared__ unsigned live[G]; /* bit s: split s saw keys */
    const int t = threadIdx.x;
    const float *pk = part + ((size_t)xr * n_heads + (size_t)kvh * G) * S * PS; /* the G heads', in order */
    float av[OC][S];
    auto fetch = [&](int o0) {
#pragma unroll
        for (int o = 0; o < OC; o++) {
            int idx = t + (o0 + o) * ROWS_THREADS, g = idx < G * HD ? idx / HD : 0, d = idx % HD;
#pragma unroll
            for (int s = 0; s < S; s++) av[o][s] = __ldcg(pk + ((size_t)g * S + s) * PS + 2 + d);
        }
    };
    fetch(0);
    if (t < G) {
        const float *pg = pk + (size_t)t * S * PS;
        float ms[S], lv[S], mx = -INFINITY, l = 0.0f;
        unsigned mask = 0;
#pragma unroll
        for (int s = 0; s < S; s++) ms[s] = __ldcg(pg + (size_t)s * PS), lv[s] = __ldcg(pg + (size_t)s * PS + 1);
#pragma unroll
        for (int s = 0; s < S; s++) mx = fmaxf(mx, ms[s]);
#pragma unroll
        for (int s = 0; s < S; s++) {
            float f = ms[s] > -INFINITY ? expf(ms[s] - mx) : 0.0f;
            if (ms[s] > -INFINITY) l += lv[s] * f, mask |= 1u << s;
            fs[t][s] = f;
        }
        ls[t] = l, live[t] = mask;
    }
    __syncthreads();
    for (int o0 = 0; o0 < OUTS; o0 += OC) {
        if (o0) fetch(o0);
#pragma unroll
        for (int o = 0; o < OC; o++) {
            int idx = t + (o0 + o) * ROWS_THREADS;
            if (idx >= G * HD) break;
            int g = idx / HD, d = idx % HD;
            float a = 0.0f;
#pragma unroll
            for (int s = 0; s < S; s++)
                if (live[g] >> s & 1) a += av[o][s] * fs[g][s];
            size_t at = ((size_t)row * n_heads + (size_t)kvh * G + g) * HD + d;
            out[at] = a / ls[g];
            if (ob) ob[at] = __float2bfloat16_rn(a / ls[g]);
        }
    }
}

/* The rows' unrotated queries (into qs) and, for the block holding the
 * row's own position p, its key and value (into kp, vp), rotated as
 * rope_kv_write_kernel rotates them; that block also writes the key and
 * value into the cache, as rope_kv_write_kernel writes them. */
template <int HD, int G>
__device__ __forceinline__ void rows_rope(const cuda_rows_args &A, float *qs, float *kp, float *vp, int row, int kvh,
                                         int p, bool own, float *const *kb, float *const *vb) {
    const int t = threadIdx.x, half = A.half;
    const float *qr = A.q + ((size_t)row * A.n_heads + (size_t)kvh * G) * HD;
    for (int i = t; i < G * HD / 4; i += ROWS_THREADS) ((float4 *)qs)[i] = ((const float4 *)qr)[i];
    if (own) {
        size_t at = ((size_t)row * A.n_kv + kvh) * HD;
        for (int i = t; i < HD / 4; i += ROWS_THREADS) {
            ((float4 *)kp)[i] = ((const float4 *)(A.k + at))[i];
            ((float4 *)vp)[i] = ((const float4 *)(A.v + at))[i];
        }
    }
    __syncthreads();
    for (int i = t; i < G * half; i += ROWS_THREADS)
        rope_apply(qs + i / half * HD, i % half, half, rope_cs(i % half, p, A.inv_freq, A.attn_factor));
    if (!own) return;
    int bs_mask = (1 << A.bs_shift) - 1;
    size_t off = (size_t)(p & bs_mask) * A.n_kv * HD + (size_t)kvh * HD;
    float *kd = kb[p >> A.bs_shift] + off, *vd = vb[p >> A.bs_shift] + off;
    for (int i = t; i < HD / 2; i += ROWS_THREADS) {
        if (i < half) {
            float2 r = rope_apply(kp, i, half, rope_cs(i, p, A.inv_freq, A.attn_factor));
            kd[i] = r.x, kd[i + half] = r.y;
        } else {
            int d = 2 * half + 2 * (i - half);
            kd[d] = kp[d], kd[d + 1] = kp[d + 1];
        }
        vd[2 * i] = vp[2 * i], vd[2 * i + 1] = vp[2 * i + 1];
    }
}

/* ROPE: the fused form (cuda_rows_args.k); its first tile's keys are
 * fetched before the wait for the kernel before, which wrote only the
 * row's own key. */
template <int HD, int G, bool ROPE>
__global__ void __launch_bounds__(ROWS_THREADS) attention_rows_kernel(cuda_rows_args A) {
    constexpr int KS = HD + 4;                                       /* padded key row: conflict-free float4 reads */
    constexpr int OUTS = (G * HD + ROWS_THREADS - 1) / ROWS_THREADS; /* outputs per thread */
    constexpr int HPW = (G + 3) / 4;                                 /* heads per warp */
    constexpr int LPT = ROWS_TK * HD / 4 / ROWS_THREADS;             /* float4 of keys (and values) per thread */
    __shared__ __align__(16) float qs[G * HD];
    __shared__ __align__(16) float ks[ROWS_TK * KS];
    __shared__ __align__(16) float vs[ROWS_TK * HD];
    __shared__ __align__(16) float ps[G * ROWS_TK];
    __shared__ __align__(16) float kp[ROPE ? HD : 1], vp[ROPE ? HD : 1];
    __shared__ float corr_s[G], m_s[G], l_s[G];
    if (!ROPE) cuda_pdl_enter();
    const int n_kv = A.n_kv, n_heads = A.n_heads, bs_shift = A.bs_shift;
    int xr = (int)blockIdx.x / n_kv, kvh = (int)blockIdx.x % n_kv;
    int row = A.rmap ? A.rmap[xr] : xr;
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    float *const *kb = A.base + A.toff[row], *const *vb = A.base + A.toff[A.n + row];
    size_t rowlen = (size_t)n_kv * HD, head_off = (size_t)kvh * HD;
    int pr = A.pos[row], start, end;
    att_key_range(pr, A.window, A.part != NULL, &start, &end);
    /* keys read from the cache: the fused form has the row's own in kp */
    const bool own = ROPE && start <= pr && pr <= end;
    const int cached = own ? pr - 1 : end;
    float m[HPW], l[HPW], acc[OUTS];
#pragma unroll
    for (int h = 0; h < HPW; h++) m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
    for (int o = 0; o < OUTS; o++) acc[o] = 0.0f;
    /* the next tile's loads are in flight while this one is computed */
    float4 kn[LPT], vn[LPT];
    if (start <= end) rows_fetch<HD, LPT>(kn, vn, kb, vb, start, cached, bs_shift, rowlen, head_off);
    if (ROPE) {
        cuda_pdl_enter();
        rows_rope<HD, G>(A, qs, kp, vp, row, kvh, pr, own, kb, vb);
    } else {
        const float *qr = A.q + ((size_t)row * n_heads + (size_t)kvh * G) * HD;
        for (int i = t; i < G * HD / 4; i += ROWS_THREADS) ((float4 *)qs)[i] = ((const float4 *)qr)[i];
    }
    for (int j0 = start; j0 <= end; j0 += ROWS_TK) {
        __syncthreads(); /* the previous tile is consumed (and qs, kp, vp are in place) */
#pragma unroll
        for (int r = 0; r < LPT; r++) {
            int i = t + r * ROWS_THREADS, jj = i / (HD / 4), c = (i % (HD / 4)) * 4;
            bool mine = own && j0 + jj == pr; /* the row's own key, from shared memory */
            *(float4 *)(ks + jj * KS + c) = mine ? *(const float4 *)(kp + c) : kn[r];
            *(float4 *)(vs + jj * HD + c) = mine ? *(const float4 *)(vp + c) : vn[r];
        }
        if (j0 + ROWS_TK <= end) rows_fetch<HD, LPT>(kn, vn, kb, vb, j0 + ROWS_TK, cached, bs_shift, rowlen, head_off);
        __syncthreads();
#pragma unroll
        for (int h = 0; h < HPW; h++) {
            int g = warp + 4 * h;
            if (g >= G) break; /* whole warps */
            const float *qg = qs + g * HD, *kr = ks + lane * KS;
            float dp[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* four chains, not one of head_dim dependent steps */
#pragma unroll
            for (int d = 0; d < HD; d += 16)
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    float4 a = *(const float4 *)(qg + d + 4 * u), b = *(const float4 *)(kr + d + 4 * u);
                    dp[u] = fmaf(a.x, b.x, dp[u]), dp[u] = fmaf(a.y, b.y, dp[u]);
                    dp[u] = fmaf(a.z, b.z, dp[u]), dp[u] = fmaf(a.w, b.w, dp[u]);
                }
            float dot = (dp[0] + dp[1]) + (dp[2] + dp[3]);
            float s = j0 + lane <= end ? dot * A.scale : -INFINITY;
            float mx = s;
#pragma unroll
            for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_new = fmaxf(m[h], mx); /* finite: the tile holds at least one key */
            float p = expf(s - m_new), sum = p;
#pragma unroll
            for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            float c = expf(m[h] - m_new);
            l[h] = l[h] * c + sum;
            m[h] = m_new;
            ps[g * ROWS_TK + lane] = p;
            if (lane == 0) corr_s[g] = c;
        }
        __syncthreads();
        /* each output as four chains over the tile's keys (k % 4), the
         * outputs interleaved: independent steps for the scheduler, where
         * one chain of 32 dependent steps per output left it idle */
        float va[OUTS][4];
        const float *pg[OUTS];
        int dd[OUTS];
#pragma unroll
        for (int o = 0; o < OUTS; o++) {
            int idx = t + o * ROWS_THREADS, g = idx < G * HD ? idx / HD : 0; /* threads past the outputs idle along */
            pg[o] = ps + g * ROWS_TK, dd[o] = idx % HD;
            va[o][0] = acc[o] * corr_s[g], va[o][1] = va[o][2] = va[o][3] = 0.0f;
        }
        /* keys past the row's end hold zeros and weigh zero: a group of
         * four wholly past it would add only zeros, and is left out (a
         * decode step's last tile is mostly such groups) */
#pragma unroll
        for (int jj = 0; jj < ROWS_TK; jj += 4) {
            if (j0 + jj > end) break;
#pragma unroll
            for (int o = 0; o < OUTS; o++) {
                float4 p4 = *(const float4 *)(pg[o] + jj);
                const float *vk = vs + jj * HD + dd[o];
                va[o][0] = fmaf(p4.x, vk[0], va[o][0]), va[o][1] = fmaf(p4.y, vk[HD], va[o][1]);
                va[o][2] = fmaf(p4.z, vk[2 * HD], va[o][2]), va[o][3] = fmaf(p4.w, vk[3 * HD], va[o][3]);
            }
        }
#pragma unroll
        for (int o = 0; o < OUTS; o++) acc[o] = (va[o][0] + va[o][1]) + (va[o][2] + va[o][3]);
    }
#pragma unroll
    for (int h = 0; h < HPW; h++) {
        int g = warp + 4 * h;
        if (g < G && lane == 0) m_s[g] = m[h], l_s[g] = l[h];
    }
    __syncthreads();
#pragma unroll
    for (int o = 0; o < OUTS; o++) {
        int idx = t + o * ROWS_THREADS;
        if (idx >= G * HD) break;
        int g = idx / HD, d = idx % HD;
        size_t rh = (size_t)xr * n_heads + (size_t)kvh * G + g; /* the grid's row, as attention_combine reads */
        if (A.part) {
            float *pp = A.part + (rh * gridDim.y + blockIdx.y) * (HD + 2);
            if (d == 0) pp[0] = m_s[g], pp[1] = l_s[g];
            pp[2 + d] = acc[o];
        } else {
            size_t at = ((size_t)row * n_heads + (size_t)kvh * G + g) * HD + d;
            A.out[at] = acc[o] / l_s[g];
            if (A.ob) A.ob[at] = __float2bfloat16_rn(acc[o] / l_s[g]);
        }
    }
    if (!A.part || !A.count) return;
    /* publish this split's partials, then count it; the last one merges.
     * One thread fences for the block, after the barrier that orders its
     * threads' writes before it (as a grid-wide barrier does). */
    __syncthreads();
    __shared__ int last;
    if (t == 0) {
        __threadfence();
        last = atomicAdd(A.count + blockIdx.x, 1) == (int)gridDim.y - 1;
        if (last) __threadfence();
    }
    __syncthreads();
    if (!last) return;
    rows_merge<HD, G>(A.out, A.ob, A.part, row, xr, kvh, n_heads);
    if (t == 0) A.count[blockIdx.x] = 0; /* ready for the next launch */
}

template <int HD, bool ROPE>
static bool rows_launch_g(cudaStream_t st, dim3 grid, int group, const cuda_rows_args &a) {
#define ROWS_CASE(GG)                                                                         \
    case GG: cuda_launch(attention_rows_kernel<HD, GG, ROPE>, grid, ROWS_THREADS, 0, st, a); return true;
    switch (group) {
        ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(4) ROWS_CASE(8)
    default: return false;
    }
#undef ROWS_CASE
}

bool cuda_attention_rows_fits(int hd, int group, const float *q, int bs) {
    return ((uintptr_t)q & 15) == 0 && bs > 0 && !(bs & (bs - 1)) && (hd == 32 || hd == 64 || hd == 128) &&
           (group == 1 || group == 2 || group == 4 || group == 8);
}

template <bool ROPE> static bool rows_launch(cudaStream_t st, dim3 grid, int group, int hd, const cuda_rows_args &a) {
    switch (hd) {
    case 32: return rows_launch_g<32, ROPE>(st, grid, group, a);
    case 64: return rows_launch_g<64, ROPE>(st, grid, group, a);
    case 128: return rows_launch_g<128, ROPE>(st, grid, group, a);
    default: return false;
    }
}

bool cuda_attention_rows(cudaStream_t st, unsigned rows, unsigned splits, int group, int hd, int bs,
                         const cuda_rows_args *a) {
    if (!cuda_attention_rows_fits(hd, group, a->q, bs)) return false;
    if (a->part && a->count && splits != CUDA_ATT_SPLITS) return false;
    if (a->k && (a->rmap || ((uintptr_t)a->k | (uintptr_t)a->v) & 15 || a->half <= 0 || 2 * a->half > hd)) return false;
    cuda_rows_args args = *a;
    args.bs_shift = __builtin_ctz((unsigned)bs);
    dim3 grid(rows * (unsigned)a->n_kv, splits);
    return a->k ? rows_launch<true>(st, grid, group, hd, args) : rows_launch<false>(st, grid, group, hd, args);
}
