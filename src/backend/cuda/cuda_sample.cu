/* cuda_sample.cu — tempered sampling on the GPU (sample_rows), so a sampled
 * decode step downloads one id per sequence instead of a vocabulary-wide
 * row, and the host sorts nothing.
 *
 * One block per row, with the host sampler's arithmetic (engine/sampler.c)
 * and without its sorts:
 *   1. the row's maximum m; every entry is replaced by its probability
 *      relative to the most likely token, p = exp((x - m) / T) rounded to
 *      float, or 0 where (x - m) / T <= -40 (never a candidate);
 *   2. the sampler's candidate order (descending p, ties to the lower id)
 *      is the descending order of the 64-bit key (bits of p) << 32 | ~id,
 *      since a positive float orders like its bits. The entry at which a
 *      running sum over that order crosses a target is found by a radix
 *      descent over the key, 8 bits at a time: a histogram of the weights
 *      (1 to count, mass to weigh) of the entries matching the digits found
 *      so far, and the digit whose bucket holds the crossing;
 *   3. top-k keeps the keys down to the k-th; top-p down to the first whose
 *      running mass reaches top_p of the total (of the top k when top-k
 *      applies); min-p keeps p >= min_p;
 *   4. the draw, r = u * (kept mass): the first kept entry whose running
 *      mass exceeds r, in key order when top-k or top-p applies (the
 *      sampler walks its sorted candidates then), else in vocabulary order
 *      (as the sampler walks them then), by a block scan.
 * Masses are fixed-point integers (p * 2^s, s as large as the row length
 * allows without overflow), so every sum is exact whatever the order of the
 * atomic adds: a row's draw is reproducible, and it is the host sampler's
 * choice for the same u except where rounding moves a boundary (the host's
 * expf and this exp differ in the last bit now and then, and entries below
 * 2^-s of the best carry no mass here). */
#include "backend/cuda/cuda_internal.cuh"

#define SAMPLE_THREADS 1024
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)

typedef unsigned long long u64;

struct sample_smem {
    u64 hist[256];
    u64 red[SAMPLE_WARPS];
    u64 prefix, target;
    int found, pick;
    float fred[SAMPLE_WARPS];
};

__device__ __forceinline__ u64 sample_key(float p, int i) {
    return (u64)__float_as_uint(p) << 32 | (u64)(0xffffffffu - (unsigned)i);
}
__device__ __forceinline__ int sample_key_id(u64 k) { return (int)(0xffffffffu - (unsigned)(k & 0xffffffffu)); }
/* p's mass in units of 2^-s of the best entry's (scale = 2^s). */
__device__ __forceinline__ u64 sample_mass(float p, double scale) { return __double2ull_rn((double)p * scale); }
__device__ __forceinline__ bool sample_kept(float p, float pmin) { return p > 0.0f && p >= pmin; }

/* Sum over the block; every thread gets it. Integer sums: the order of
 * the additions does not matter. */
__device__ u64 block_sum_u64(sample_smem &sm, u64 v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sm.red[warp] = v;
    __syncthreads();
    u64 t = 0;
    for (int w = 0; w < SAMPLE_WARPS; w++) t += sm.red[w];
    __syncthreads();
    return t;
}

/* The largest value over the block (NaN never wins: fmaxf drops it). */
__device__ float block_max_f(sample_smem &sm, float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sm.fred[warp] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < SAMPLE_WARPS; w++) m = fmaxf(m, sm.fred[w]);
    __syncthreads();
    return m;
}

/* Warp 0, after the histogram of one digit: the bucket (highest digit
 * first) in which the running weight first exceeds target; extends the
 * prefix by it and leaves the target within the bucket, or clears found. */
__device__ void descend_digit(sample_smem &sm, u64 prefix, u64 target) {
    int lane = (int)threadIdx.x;
    u64 own = 0;
    for (int j = 0; j < 8; j++) own += sm.hist[255 - 8 * lane - j];
    u64 incl = own;
    for (int o = 1; o < 32; o <<= 1) {
        u64 v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    u64 before = incl - own;
    bool mine = before <= target && target < incl; /* the ranges partition [0, total): one lane at most */
    if (__ballot_sync(0xffffffffu, mine) == 0) {
        if (lane == 0) sm.found = 0;
        return;
    }
    if (!mine) return;
    u64 a = before;
    for (int j = 0; j < 8; j++) {
        int b = 255 - 8 * lane - j;
        if (target < a + sm.hist[b]) {
            sm.prefix = prefix << 8 | (u64)b;
            sm.target = target - a;
            sm.found = 1;
            return;
        }
        a += sm.hist[b];
    }
}

/* The key of the first entry, in descending key order over the entries with
 * key >= lo and sample_kept(p, pmin), whose running weight (1 each, or the
 * mass when `mass`) exceeds target; 0 when all of them weigh <= target. */
__device__ u64 descend(sample_smem &sm, const float *pr, int n, u64 lo, float pmin, bool mass, double scale,
                       u64 target) {
    u64 prefix = 0;
    for (int d = 7; d >= 0; d--) {
        int shift = 8 * d;
        for (int i = (int)threadIdx.x; i < 256; i += SAMPLE_THREADS) sm.hist[i] = 0;
        __syncthreads();
        /* a thread's entries mostly share the leading digits' bucket: one
         * atomic per run of equal buckets */
        int run = 0;
        u64 acc = 0;
        for (int i = (int)threadIdx.x; i < n; i += SAMPLE_THREADS) {
            float p = pr[i];
            if (!sample_kept(p, pmin)) continue;
            u64 k = sample_key(p, i);
            if (k < lo || (d < 7 && (k >> (shift + 8)) != prefix)) continue;
            int b = (int)(k >> shift) & 255;
            if (b != run) {
                if (acc) atomicAdd(&sm.hist[run], acc);
                run = b;
                acc = 0;
            }
            acc += mass ? sample_mass(p, scale) : 1ull;
        }
        if (acc) atomicAdd(&sm.hist[run], acc);
        __syncthreads();
        if (threadIdx.x < 32) descend_digit(sm, prefix, target);
        __syncthreads();
        if (!sm.found) return 0;
        prefix = sm.prefix;
        target = sm.target;
        __syncthreads(); /* every thread has read them before the next digit writes */
    }
    return prefix;
}

/* Total mass of the entries with key >= lo and sample_kept(p, pmin). */
__device__ u64 kept_mass(sample_smem &sm, const float *pr, int n, u64 lo, float pmin, double scale) {
    u64 s = 0;
    for (int i = (int)threadIdx.x; i < n; i += SAMPLE_THREADS) {
        float p = pr[i];
        if (sample_kept(p, pmin) && sample_key(p, i) >= lo) s += sample_mass(p, scale);
    }
    return block_sum_u64(sm, s);
}

/* The first entry in vocabulary order with sample_kept(p, pmin) whose
 * running mass exceeds r (r < their total): each thread sums a contiguous
 * stretch, a scan over the threads finds the stretch, its thread walks it. */
__device__ int scan_draw(sample_smem &sm, const float *pr, int n, float pmin, double scale, u64 r) {
    int per = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS, i0 = (int)threadIdx.x * per, i1 = min(n, i0 + per);
    u64 own = 0;
    for (int i = i0; i < i1; i++)
        if (sample_kept(pr[i], pmin)) own += sample_mass(pr[i], scale);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    u64 incl = own;
    for (int o = 1; o < 32; o <<= 1) {
        u64 v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) sm.red[warp] = incl;
    if (threadIdx.x == 0) sm.pick = -1;
    __syncthreads();
    u64 before = incl - own;
    for (int w = 0; w < warp; w++) before += sm.red[w];
    if (before <= r && r < before + own) {
        u64 a = before;
        for (int i = i0; i < i1; i++) {
            if (!sample_kept(pr[i], pmin)) continue;
            a += sample_mass(pr[i], scale);
            if (r < a) {
                sm.pick = i;
                break;
            }
        }
    }
    __syncthreads();
    return sm.pick;
}

/* The row's argmax as tensor/argmax.h defines it, into *id (thread 0). */
__device__ void row_argmax(const float *xr, int n, int32_t *id) {
    float v = -INFINITY;
    int at = INT_MAX;
    for (int i = (int)threadIdx.x; i < n; i += SAMPLE_THREADS) argmax_take(v, at, xr[i], i);
    argmax_block(v, at);
    if (threadIdx.x == 0) *id = at == INT_MAX ? 0 : at;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(int32_t *ids, float *x, int n, int ld, const em_sample_params *params, int mass_shift) {
    cuda_pdl_enter();
    __shared__ sample_smem sm;
    float *xr = x + (size_t)blockIdx.x * ld;
    em_sample_params P = params[blockIdx.x];
    if (P.temperature <= 0.0f || P.top_k == 1) {
        row_argmax(xr, n, ids + blockIdx.x);
        return;
    }
    double scale = ldexp(1.0, mass_shift);
    float mx = -INFINITY;
    for (int i = (int)threadIdx.x; i < n; i += SAMPLE_THREADS) mx = fmaxf(mx, xr[i]);
    mx = block_max_f(sm, mx);
    float inv_t = 1.0f / P.temperature;
    u64 cnt = 0;
    for (int i = (int)threadIdx.x; i < n; i += SAMPLE_THREADS) {
        float z = (xr[i] - mx) * inv_t; /* the sampler's z, bit for bit */
        float p = z > -40.0f ? (float)exp((double)z) : 0.0f;
        xr[i] = p;
        cnt += p > 0.0f;
    }
    cnt = block_sum_u64(sm, cnt); /* its barrier also orders the writes above before every read below */
    if (cnt == 0) { /* no candidate (every logit NaN): what the argmax of such a row gives */
        if (threadIdx.x == 0) ids[blockIdx.x] = 0;
        return;
    }
    bool top_p = P.top_p > 0.0f && P.top_p < 1.0f, sorted = P.top_k > 0 || top_p;
    u64 lo = 0;
    if (P.top_k > 0 && (u64)P.top_k < cnt) lo = descend(sm, xr, n, 0, 0.0f, false, scale, (u64)P.top_k - 1);
    if (top_p) {
        double limit = ceil((double)P.top_p * (double)kept_mass(sm, xr, n, lo, 0.0f, scale));
        u64 k = descend(sm, xr, n, lo, 0.0f, true, scale, limit >= 1.0 ? (u64)limit - 1 : 0);
        if (k) lo = k; /* else the limit was not reached: every candidate stays */
    }
    float pmin = P.min_p > 0.0f ? P.min_p : 0.0f;
    u64 total = kept_mass(sm, xr, n, lo, pmin, scale);
    if (total == 0) { /* min_p above every kept entry: the sampler keeps none; take them all */
        pmin = 0.0f;
        total = kept_mass(sm, xr, n, lo, pmin, scale);
    }
    u64 r = (u64)(P.u * (double)total);
    if (r >= total) r = total - 1;
    int tok;
    if (sorted) {
        u64 k = descend(sm, xr, n, lo, pmin, true, scale, r);
        tok = k ? sample_key_id(k) : -1;
    } else {
        tok = scan_draw(sm, xr, n, pmin, scale, r);
    }
    if (tok < 0) { /* not reachable with exact sums; the most likely entry then */
        u64 k = descend(sm, xr, n, 0, 0.0f, false, scale, 0);
        tok = sample_key_id(k);
    }
    if (threadIdx.x == 0) ids[blockIdx.x] = tok;
}

void cuda_sample_rows(em_backend *be, int32_t *ids, float *x, int rows, int n, int ld, const em_sample_params *params) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    size_t pb = (size_t)rows * sizeof *params;
    cuda_stage_begin(cb, pb, 1);
    const em_sample_params *dp = (const em_sample_params *)cuda_stage_put(cb, params, pb);
    if (!dp) return;
    cuda_stage_flush(cb);
    if (cuda_graph_skip(cb, ids, x, rows, n, ld)) return;
    /* n masses of at most 2^s each stay below 2^64 */
    int bits = 0;
    while (bits < 31 && (1u << bits) < (unsigned)n) bits++;
    cuda_launch(sample_kernel, rows, SAMPLE_THREADS, 0, cb->stream, ids, x, n, ld, dp, 63 - bits);
    CUDA_LAUNCHED(cb, "sample_rows");
}
