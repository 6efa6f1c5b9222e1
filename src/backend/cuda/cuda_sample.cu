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
 *      descent over the key, a digit at a time (12 bits first, then 8): a
 *      histogram of the weights (1 to count, mass to weigh) of the entries
 *      matching the digits found so far, and the digit whose bucket holds
 *      the crossing. Once those entries are few they are gathered into
 *      shared memory, so a descent reads the row two or three times;
 *   3. top-k keeps the keys down to the k-th; top-p down to the first whose
 *      running mass reaches top_p of the total (of the top k when top-k
 *      applies); min-p keeps p >= min_p;
 *   4. the draw, r = u * (kept mass): the first kept entry whose running
 *      mass exceeds r, in key order when top-k or top-p applies (the
 *      sampler walks its sorted candidates then), else in vocabulary order
 *      (as the sampler walks them then), by a block scan.
 * Masses are fixed-point integers (p * 2^s, s as large as the row length
 * allows without overflow; histograms add them in 12-bit limbs with 32-bit
 * atomics, which shared memory does natively), so every sum is exact
 * whatever the order of the atomic adds: a row's draw is reproducible, and it is the host sampler's
 * choice for the same u except where rounding moves a boundary (the host's
 * expf and this exp differ in the last bit now and then, and entries below
 * 2^-s of the best carry no mass here). */
#include "backend/cuda/cuda_internal.cuh"

#define SAMPLE_THREADS 1024
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)
/* The widest digit: the first, over the sign, exponent and 4 mantissa bits
 * of p, so entries of a row spread over many buckets (few atomics collide). */
#define SAMPLE_BUCKETS 4096
/* Entries matching the digits found so far are gathered into shared memory
 * once they are this few, and the later digits read them there. */
#define SAMPLE_CAP 4096
/* Masses are added in limbs of 12 bits (the last one takes the rest) with
 * 32-bit atomics; a bucket's limb total stays below 2^32 for rows of up to
 * 2^20 entries. */
#define SAMPLE_LIMB 12
#define SAMPLE_MAX_N EM_SAMPLE_MAX_N

typedef unsigned long long u64;

struct sample_smem {
    u64 red[SAMPLE_WARPS];
    u64 prefix, target;
    int found, pick, n_cmp;
    float fred[SAMPLE_WARPS];
};

/* Dynamic shared memory: the histograms (count in limb 0 alone, or the four
 * mass limbs) and the gathered entries. */
struct sample_dyn {
    unsigned hist[4][SAMPLE_BUCKETS];
    u64 ckey[SAMPLE_CAP], cmass[SAMPLE_CAP];
};

/* The digits of a key, most significant first: bit 63 is p's sign (0). */
__constant__ int sample_shift[8] = {51, 43, 35, 27, 19, 11, 3, 0};
__constant__ int sample_width[8] = {12, 8, 8, 8, 8, 8, 8, 3};

__device__ __forceinline__ u64 sample_key(float p, int i) {
    return (u64)__float_as_uint(p) << 32 | (u64)(0xffffffffu - (unsigned)i);
}
__device__ __forceinline__ int sample_key_id(u64 k) { return (int)(0xffffffffu - (unsigned)(k & 0xffffffffu)); }
__device__ __forceinline__ float sample_key_p(u64 k) { return __uint_as_float((unsigned)(k >> 32)); }
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

/* The sum of v over the threads before this one (thread order). */
__device__ u64 block_excl_scan_u64(sample_smem &sm, u64 v) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    u64 incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        u64 x = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += x;
    }
    if (lane == 31) sm.red[warp] = incl;
    __syncthreads();
    u64 before = incl - v;
    for (int w = 0; w < warp; w++) before += sm.red[w];
    __syncthreads();
    return before;
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

/* Adds weight w (a run of one bucket's entries) to bucket b. */
__device__ __forceinline__ void hist_add(sample_dyn &dy, int b, u64 w, bool mass) {
    if (!mass) {
        atomicAdd(&dy.hist[0][b], (unsigned)w);
        return;
    }
    const u64 m = (1ull << SAMPLE_LIMB) - 1;
    if (w & m) atomicAdd(&dy.hist[0][b], (unsigned)(w & m));
    if ((w >> SAMPLE_LIMB) & m) atomicAdd(&dy.hist[1][b], (unsigned)((w >> SAMPLE_LIMB) & m));
    if ((w >> 2 * SAMPLE_LIMB) & m) atomicAdd(&dy.hist[2][b], (unsigned)((w >> 2 * SAMPLE_LIMB) & m));
    if (w >> 3 * SAMPLE_LIMB) atomicAdd(&dy.hist[3][b], (unsigned)(w >> 3 * SAMPLE_LIMB));
}

__device__ __forceinline__ u64 hist_weight(const sample_dyn &dy, int b, bool mass) {
    if (!mass) return dy.hist[0][b];
    return (u64)dy.hist[0][b] + ((u64)dy.hist[1][b] << SAMPLE_LIMB) + ((u64)dy.hist[2][b] << 2 * SAMPLE_LIMB) +
           ((u64)dy.hist[3][b] << 3 * SAMPLE_LIMB);
}

/* After a digit's histogram: the bucket, highest first, in which the
 * running weight first exceeds target. Extends the prefix by it and leaves
 * the target within the bucket (sm.prefix, sm.target), or clears sm.found. */
__device__ void find_crossing(sample_smem &sm, const sample_dyn &dy, int nb, bool mass, u64 prefix, int width,
                              u64 target) {
    int per = nb > SAMPLE_THREADS ? nb / SAMPLE_THREADS : 1, pos0 = (int)threadIdx.x * per;
    u64 own = 0;
    for (int j = 0; j < per && pos0 + j < nb; j++) own += hist_weight(dy, nb - 1 - (pos0 + j), mass);
    if (threadIdx.x == 0) sm.found = 0;
    u64 a = block_excl_scan_u64(sm, own); /* its barriers order the clear above before any write below */
    if (own && a <= target && target < a + own)
        for (int j = 0; j < per; j++) {
            int b = nb - 1 - (pos0 + j);
            u64 h = hist_weight(dy, b, mass);
            if (target < a + h) {
                sm.prefix = prefix << width | (u64)b;
                sm.target = target - a;
                sm.found = 1;
                break;
            }
            a += h;
        }
    __syncthreads();
}

/* The key of the first entry, in descending key order over the entries with
 * key >= lo and sample_kept(p, pmin), whose running weight (1 each, or the
 * mass when `mass`) exceeds target, with *rem the part of target left
 * within that entry; 0 when all of them weigh <= target. A digit's
 * histogram reads the row while the entries matching the digits found so
 * far are many, and the gathered entries once they are few: every later
 * digit then costs a pass over shared memory, not over the row. */
__device__ u64 descend(sample_smem &sm, sample_dyn &dy, const float *pr, int n, u64 lo, float pmin, bool mass,
                       double scale, u64 target, u64 *rem) {
    u64 prefix = 0;
    bool gathered = false;
    for (int d = 0; d < 8; d++) {
        int shift = sample_shift[d], width = sample_width[d], nb = 1 << width, above = shift + width;
        for (int i = (int)threadIdx.x; i < nb; i += SAMPLE_THREADS)
            dy.hist[0][i] = dy.hist[1][i] = dy.hist[2][i] = dy.hist[3][i] = 0;
        bool gather = !gathered && d > 0; /* the entries of this digit's pass are those of every later one */
        if (gather && threadIdx.x == 0) sm.n_cmp = 0;
        __syncthreads();
        int run = 0;
        u64 acc = 0;
        if (gathered) {
            for (int i = (int)threadIdx.x; i < sm.n_cmp; i += SAMPLE_THREADS) {
                u64 k = dy.ckey[i];
                if ((k >> above) != prefix) continue;
                hist_add(dy, (int)(k >> shift) & (nb - 1), dy.cmass[i], mass);
            }
        } else {
            /* warp-uniform trips, so a warp gathers with one atomic */
            for (int base = 0; base < n; base += SAMPLE_THREADS) {
                int i = base + (int)threadIdx.x;
                float p = i < n ? pr[i] : 0.0f;
                u64 k = sample_key(p, i);
                bool in = i < n && sample_kept(p, pmin) && k >= lo && (k >> above) == prefix;
                u64 w = !in ? 0 : mass ? sample_mass(p, scale) : 1ull;
                if (gather) {
                    unsigned ballot = __ballot_sync(0xffffffffu, in), lane = threadIdx.x % 32;
                    int leader = ballot ? __ffs(ballot) - 1 : 0, slot = 0;
                    if (ballot && (int)lane == leader) slot = atomicAdd(&sm.n_cmp, __popc(ballot));
                    slot = __shfl_sync(0xffffffffu, slot, leader) + __popc(ballot & ((1u << lane) - 1));
                    if (in && slot < SAMPLE_CAP) dy.ckey[slot] = k, dy.cmass[slot] = w;
                }
                if (!in) continue;
                /* a thread's entries often share a bucket: one add per run */
                int b = (int)(k >> shift) & (nb - 1);
                if (b != run) {
                    if (acc) hist_add(dy, run, acc, mass);
                    run = b;
                    acc = 0;
                }
                acc += w;
            }
        }
        if (acc) hist_add(dy, run, acc, mass);
        __syncthreads();
        if (gather && sm.n_cmp <= SAMPLE_CAP) gathered = true;
        find_crossing(sm, dy, nb, mass, prefix, width, target);
        if (!sm.found) return 0;
        prefix = sm.prefix;
        target = sm.target;
        __syncthreads(); /* every thread has read them before the next digit writes */
    }
    *rem = target;
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
    if (threadIdx.x == 0) sm.pick = -1;
    u64 before = block_excl_scan_u64(sm, own);
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

/* The draw of one row (see the file's comment); the row is overwritten by
 * its probabilities unless the row is greedy. */
__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(int32_t *ids, float *x, int n, int ld, const em_sample_params *params, int mass_shift) {
    cuda_pdl_enter();
    __shared__ sample_smem sm;
    extern __shared__ float4 sample_dyn4[];
    sample_dyn &dy = *(sample_dyn *)sample_dyn4;
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
    u64 cnt = 0, all = 0;
    for (int i = (int)threadIdx.x; i < n; i += SAMPLE_THREADS) {
        float z = (xr[i] - mx) * inv_t; /* the sampler's z, bit for bit */
        float p = z > -40.0f ? (float)exp((double)z) : 0.0f;
        xr[i] = p;
        cnt += p > 0.0f;
        all += sample_mass(p, scale);
    }
    cnt = block_sum_u64(sm, cnt); /* its barriers also order the writes above before every read below */
    all = block_sum_u64(sm, all);
    if (cnt == 0) { /* no candidate (every logit NaN): what the argmax of such a row gives */
        if (threadIdx.x == 0) ids[blockIdx.x] = 0;
        return;
    }
    bool top_p = P.top_p > 0.0f && P.top_p < 1.0f, sorted = P.top_k > 0 || top_p;
    u64 lo = 0, rem, kept = all; /* kept: the mass of the keys >= lo */
    if (P.top_k > 0 && (u64)P.top_k < cnt) {
        lo = descend(sm, dy, xr, n, 0, 0.0f, false, scale, (u64)P.top_k - 1, &rem);
        kept = kept_mass(sm, xr, n, lo, 0.0f, scale);
    }
    if (top_p) {
        double limit = ceil((double)P.top_p * (double)kept);
        u64 target = limit >= 1.0 ? (u64)limit - 1 : 0;
        u64 k = descend(sm, dy, xr, n, lo, 0.0f, true, scale, target, &rem);
        if (k) { /* else the limit was not reached: every candidate stays */
            lo = k;
            kept = target - rem + sample_mass(sample_key_p(k), scale); /* the running mass through k */
        }
    }
    float pmin = P.min_p > 0.0f ? P.min_p : 0.0f;
    u64 total = pmin > 0.0f ? kept_mass(sm, xr, n, lo, pmin, scale) : kept;
    if (total == 0) { /* min_p above every kept entry: the sampler keeps none; take them all */
        pmin = 0.0f;
        total = kept;
    }
    u64 r = (u64)(P.u * (double)total);
    if (r >= total) r = total - 1;
    int tok;
    if (sorted) {
        u64 k = descend(sm, dy, xr, n, lo, pmin, true, scale, r, &rem);
        tok = k ? sample_key_id(k) : -1;
    } else {
        tok = scan_draw(sm, xr, n, pmin, scale, r);
    }
    if (tok < 0) { /* not reachable with exact sums; the most likely entry then */
        row_argmax(xr, n, ids + blockIdx.x);
        return;
    }
    if (threadIdx.x == 0) ids[blockIdx.x] = tok;
}

void cuda_sample_rows(em_backend *be, int32_t *ids, float *x, int rows, int n, int ld, const em_sample_params *params) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    if (n > SAMPLE_MAX_N) {
        cuda_note(cb, cudaErrorInvalidValue, "sample_rows: rows longer than 2^20 entries");
        return;
    }
    size_t pb = (size_t)rows * sizeof *params;
    cuda_stage_begin(cb, pb, 1);
    const em_sample_params *dp = (const em_sample_params *)cuda_stage_put(cb, params, pb);
    if (!dp) return;
    cuda_stage_flush(cb);
    if (cuda_graph_skip(cb, ids, x, rows, n, ld)) return;
    /* n masses of at most 2^s each stay below 2^64 */
    int bits = 0;
    while ((1 << bits) < n) bits++;
    size_t smem = sizeof(sample_dyn);
    cuda_note(cb, cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              "sample_rows: shared memory");
    cuda_launch(sample_kernel, rows, SAMPLE_THREADS, smem, cb->stream, ids, x, n, ld, dp, 63 - bits);
    CUDA_LAUNCHED(cb, "sample_rows");
}
