/* cuda_matmul.cu — y[M, N] = x[M, K] · Wᵀ (+ bias) with W bf16/f16/f32 and
 * x, y f32.
 *
 * Decode (M <= 8, and EXACT batches up to 64 rows; FAST ones below
 * CUDA_FAST_MIN_M): a GEMV kernel, f32
 * accumulation in an order that does not depend on M (see gemv_kernel). Larger EXACT batches widen slices of W to f32 and run
 * cuBLAS SGEMM (f32 in, f32 accumulate: the activations are never
 * rounded). FAST batches of CUDA_FAST_MIN_M rows or more over bf16
 * weights round the activations to bf16 and run a bf16 tensor-core GEMM
 * with f32 accumulate, as the CPU's FAST path does for 16 rows or more:
 * the skinny kernel (cuda_skinny.cu) for few rows over small matrices,
 * cuBLAS otherwise. */
#include "backend/cuda/cuda_internal.cuh"

#define GEMV_ROWS 8     /* activation rows per pass */
#define GEMV_WARPS 4    /* warps per block: small blocks spread narrow matrices over every SM */
#define GEMV_MAX_EXACT_M CUDA_GEMV_MAX_EXACT_M
#define FAST_MIN_M CUDA_FAST_MIN_M
#define WIDE_SLICE_ELEMS CUDA_WIDE_SLICE_ELEMS

template <int DT> __device__ __forceinline__ float wload(const void *w, size_t i);
template <> __device__ __forceinline__ float wload<EM_F32>(const void *w, size_t i) { return ((const float *)w)[i]; }
template <> __device__ __forceinline__ float wload<EM_BF16>(const void *w, size_t i) {
    return cuda_bf16(((const uint16_t *)w)[i]);
}
template <> __device__ __forceinline__ float wload<EM_F16>(const void *w, size_t i) {
    return cuda_f16(((const uint16_t *)w)[i]);
}

/* The decode GEMV. A warp owns R weight rows; lane l reads the 8 weights
 * at k = l*8 + 256*i (one 16-byte load per row and i) and multiplies them
 * with up to GEMV_ROWS activation rows read through L1, so each weight is
 * fetched from memory once per pass of 8 activation rows (the passes of a
 * large batch reread the warp's rows from cache). Every row's sum is the
 * same chain of fmaf in the same order — lane partials over ascending k,
 * then a fixed butterfly across lanes — whatever M and R are, so a
 * sequence's logits do not depend on which other sequences share its batch.
 * Loads are issued several steps ahead of their use to keep enough bytes
 * in flight to saturate memory. */

template <int DT> __device__ __forceinline__ uint4 wfetch(const void *w, size_t i) {
    /* streamed once: keep it out of L1, where the activations live */
    if (DT == EM_F32) return __ldcs((const uint4 *)((const float *)w + i));
    return __ldcs((const uint4 *)((const uint16_t *)w + i));
}

/* the 8 weights at i, from a 16-byte fetch (f32 needs a second one) */
template <int DT> __device__ __forceinline__ void wunpack(const void *w, size_t i, uint4 u, float *o) {
    if (DT == EM_F32) {
        uint4 b = __ldcs((const uint4 *)((const float *)w + i + 4));
        o[0] = __uint_as_float(u.x), o[1] = __uint_as_float(u.y), o[2] = __uint_as_float(u.z), o[3] = __uint_as_float(u.w);
        o[4] = __uint_as_float(b.x), o[5] = __uint_as_float(b.y), o[6] = __uint_as_float(b.z), o[7] = __uint_as_float(b.w);
        return;
    }
    uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint16_t lo = (uint16_t)(p[k] & 0xffffu), hi = (uint16_t)(p[k] >> 16);
        o[2 * k] = DT == EM_BF16 ? cuda_bf16(lo) : cuda_f16(lo);
        o[2 * k + 1] = DT == EM_BF16 ? cuda_bf16(hi) : cuda_f16(hi);
    }
}

/* The norm these GEMVs apply as they read x (gemv_norm, cuda_internal.cuh):
 * each element is multiplied by gain + goff before its products, a warp
 * sums each row's squares over the elements its lanes read (every warp the
 * same chain, so the same sum), and the row's dot products are scaled by
 * 1 / sqrt(mean square + eps) once reduced. */

template <int R, int MR, bool SMEM = false, bool NORM = false>
__device__ __forceinline__ void gemv_step(float (*acc)[MR], const float (*wv)[8], const float *x, int K, int mr,
                                          size_t k, const gemv_norm *nm = nullptr, float *ss = nullptr) {
    float g[8];
    if (NORM) {
        float4 ga = __ldg((const float4 *)(nm->gain + k)), gb = __ldg((const float4 *)(nm->gain + k) + 1);
        g[0] = ga.x + nm->goff, g[1] = ga.y + nm->goff, g[2] = ga.z + nm->goff, g[3] = ga.w + nm->goff;
        g[4] = gb.x + nm->goff, g[5] = gb.y + nm->goff, g[6] = gb.z + nm->goff, g[7] = gb.w + nm->goff;
    }
#pragma unroll
    for (int m = 0; m < MR; m++) {
        if (m < mr) {
            const float4 *xp = (const float4 *)(x + (size_t)m * K + k);
            float4 a = SMEM ? xp[0] : __ldg(xp), b = SMEM ? xp[1] : __ldg(xp + 1);
            float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            if (NORM)
#pragma unroll
                for (int e = 0; e < 8; e++) ss[m] = fmaf(v[e], v[e], ss[m]), v[e] *= g[e];
#pragma unroll
            for (int r = 0; r < R; r++) {
                float s = acc[r][m];
#pragma unroll
                for (int e = 0; e < 8; e++) s = fmaf(wv[r][e], v[e], s);
                acc[r][m] = s;
            }
        }
    }
}

/* A NORM kernel's last step before its stores: every row's sum of squares
 * reduced across the warp (the butterfly of cuda_warp_sums) and the row's
 * sums, already reduced, scaled by the norm. */
template <int R, int MR>
__device__ __forceinline__ void gemv_norm_scale(float (*acc)[MR], float *ss, const gemv_norm &nm, int K) {
#pragma unroll
    for (int m = 0; m < MR; m++) {
        float t = ss[m];
        for (int o = 16; o; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        float inv = 1.0f / sqrtf(t / (float)K + nm.eps);
#pragma unroll
        for (int r = 0; r < R; r++) acc[r][m] *= inv;
    }
}


/* Ends a pass, the sums reduced across the warp (cuda_warp_sums): lane
 * r*MR + m stores row m's result for weight row n0 + r (the stores spread
 * over the warp), or adds it to what y holds. */
template <int R, int MR>
__device__ __forceinline__ void gemv_finish(float (*acc)[MR], int lane, float *y, const float *bias, int m0, int mr,
                                            int n0, int N, bool add = false) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++)
            if (lane == (r * MR + m) % 32 && m < mr && n0 + r < N) {
                gemv_store(y + (size_t)(m0 + m) * N + n0 + r, acc[r][m] + (bias ? bias[n0 + r] : 0.0f), add);
            }
}

/* Vector path: K % 8 == 0 and 16-byte aligned rows. MR activation rows
 * per pass: 1 for single-sequence decode, 2 and 4 for a few rows (a short
 * verification span, a small decode batch), all of which need few
 * registers and run at high occupancy with many loads in flight, and 8.
 * (On the H200's 1B shape a 2-row decode step took 2.7 ms through the
 * 8-row kernel, as long as two 1-row steps; 1.8 ms with 2 rows a pass.) */
template <int MR> struct gemv_shape {
    static constexpr int blocks = MR == 1 ? 8 : MR <= 4 ? 4 : 1; /* resident per SM, at least */
    static constexpr int loads = MR == 1 ? 8 : MR <= 2 ? 4 : 2;  /* 16-byte weight loads in flight per lane */
};
/* gemv_swiglu_kernel's: its warps load two rows, so one row's occupancy
 * (64 registers) spilled them at one activation row; with 128 its 16 loads
 * a lane stay in flight. On an H100, bf16 gate+up+SwiGLU of the 8B shape
 * alone 93 -> 84 us (ember-gemv-bench --bits 0), decode after 512 tokens
 * +0.5-1 % (8-layer 8B), +0.5-1 % (1B), +1.5-2 % (8-layer Qwen3.5-4B);
 * same bits. */
template <int MR> struct swiglu_shape {
    static constexpr int blocks = MR == 1 ? 4 : gemv_shape<MR>::blocks;
};
/* The one-row GEMV that norms its activations: at eight blocks a
 * multiprocessor (64 registers) it spilled the gain's registers and the
 * 8B shape decoded 0.9 % slower than with norm kernels (H100); at six (80
 * registers, no spill) 1.1 % faster, the 1B 3-4 %. */
#ifndef GEMV_NORM_BLOCKS
#define GEMV_NORM_BLOCKS 6
#endif
#ifndef SWIGLU_NORM_BLOCKS
#define SWIGLU_NORM_BLOCKS 4
#endif
template <int MR, bool NORM> constexpr int gemv_blocks() { return NORM && MR == 1 ? GEMV_NORM_BLOCKS : gemv_shape<MR>::blocks; }
template <int MR, bool NORM> constexpr int swiglu_blocks() { return NORM && MR == 1 ? SWIGLU_NORM_BLOCKS : swiglu_shape<MR>::blocks; }

template <int DT, int MR, bool NORM>
__global__ void __launch_bounds__(GEMV_WARPS * 32, gemv_blocks<MR, NORM>()) gemv_kernel(gemv_set set, const float *x,
                                                                                     int M, int K, gemv_norm nm) {
    cuda_pdl_enter();
    constexpr int R = 1; /* a warp's rows never straddle two matrices of the set */
    int lane = threadIdx.x % 32, v = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (v >= set.start[set.count]) return;
    int g = gemv_set_find(set, v), n0 = v - set.start[g], N = set.start[g + 1] - set.start[g];
    const void *w = set.w[g];
    float *y = set.y[g];
    const float *bias = set.bias[g];
    size_t wrow[R];
#pragma unroll
    for (int r = 0; r < R; r++) wrow[r] = (size_t)(n0 + r < N ? n0 + r : n0) * K;
    for (int m0 = 0; m0 < M; m0 += MR) {
        int mr = M - m0 < MR ? M - m0 : MR;
        const float *xm = x + (size_t)m0 * K;
        float acc[R][MR], ss[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) {
            ss[m] = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) acc[r][m] = 0.0f;
        }
        constexpr int U = gemv_shape<MR>::loads;
        int k = lane * 8;
        for (; k + (U - 1) * 256 < K; k += U * 256) {
            uint4 u[U][R];
#pragma unroll
            for (int i = 0; i < U; i++)
#pragma unroll
                for (int r = 0; r < R; r++) u[i][r] = wfetch<DT>(w, wrow[r] + k + i * 256);
#pragma unroll
            for (int i = 0; i < U; i++) {
                float wv[R][8];
#pragma unroll
                for (int r = 0; r < R; r++) wunpack<DT>(w, wrow[r] + k + i * 256, u[i][r], wv[r]);
                gemv_step<R, MR, false, NORM>(acc, wv, xm, K, mr, (size_t)k + i * 256, &nm, ss);
            }
        }
        for (; k < K; k += 256) {
            float wv[R][8];
#pragma unroll
            for (int r = 0; r < R; r++) wunpack<DT>(w, wrow[r] + k, wfetch<DT>(w, wrow[r] + k), wv[r]);
            gemv_step<R, MR, false, NORM>(acc, wv, xm, K, mr, (size_t)k, &nm, ss);
        }
        cuda_warp_sums<R, MR>(acc);
        if (NORM) gemv_norm_scale<R, MR>(acc, ss, nm, K);
        gemv_finish<R, MR>(acc, lane, y, bias, m0, mr, n0, N, set.add);
    }
}

/* An MLP's gate and up projections and its SwiGLU in one launch: warp n
 * computes row n of both (each the chain of gemv_kernel, so the same bits)
 * and stores silu(gate) * up as swiglu_kernel computes it. The two
 * products are never written, and no third kernel reads them back. */
template <int DT, int MR, bool NORM>
__global__ void __launch_bounds__(GEMV_WARPS * 32, swiglu_blocks<MR, NORM>())
    gemv_swiglu_kernel(float *out, const void *wg, const void *wu, const float *bg, const float *bu, const float *x,
                       int M, int N, int K, gemv_norm nm) {
    cuda_pdl_enter();
    int lane = threadIdx.x % 32, n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N) return;
    const void *w[2] = {wg, wu};
    size_t wrow = (size_t)n * K;
    for (int m0 = 0; m0 < M; m0 += MR) {
        int mr = M - m0 < MR ? M - m0 : MR;
        const float *xm = x + (size_t)m0 * K;
        float acc[2][MR], ss[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) ss[m] = acc[0][m] = acc[1][m] = 0.0f;
        constexpr int U = gemv_shape<MR>::loads;
        int k = lane * 8;
        for (; k + (U - 1) * 256 < K; k += U * 256) {
            uint4 u[U][2];
#pragma unroll
            for (int i = 0; i < U; i++)
#pragma unroll
                for (int r = 0; r < 2; r++) u[i][r] = wfetch<DT>(w[r], wrow + k + i * 256);
#pragma unroll
            for (int i = 0; i < U; i++) {
                float wv[2][8];
#pragma unroll
                for (int r = 0; r < 2; r++) wunpack<DT>(w[r], wrow + k + i * 256, u[i][r], wv[r]);
                gemv_step<2, MR, false, NORM>(acc, wv, xm, K, mr, (size_t)k + i * 256, &nm, ss);
            }
        }
        for (; k < K; k += 256) {
            float wv[2][8];
#pragma unroll
            for (int r = 0; r < 2; r++) wunpack<DT>(w[r], wrow + k, wfetch<DT>(w[r], wrow + k), wv[r]);
            gemv_step<2, MR, false, NORM>(acc, wv, xm, K, mr, (size_t)k, &nm, ss);
        }
        cuda_warp_sums<2, MR>(acc);
        if (NORM) gemv_norm_scale<2, MR>(acc, ss, nm, K);
#pragma unroll
        for (int m = 0; m < MR; m++)
            if (lane == m && m < mr) {
                float g = acc[0][m] + (bg ? bg[n] : 0.0f), up = acc[1][m] + (bu ? bu[n] : 0.0f);
                out[(size_t)(m0 + m) * N + n] = cuda_swiglu_one(g, up);
            }
    }
}

/* Batches of more than 8 rows: the same per-row arithmetic as gemv_kernel
 * (so a sequence's logits still do not depend on its batch), with the
 * activations staged in shared memory, where the block's warps share
 * them, and each weight load serving 16 rows. */
#define GEMVB_R 4
#define GEMVB_MR 16
#define GEMVB_KC 512 /* a multiple of 256: each lane keeps its k positions */

template <int DT, bool NORM>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_batch_kernel(float *y, const float *x, const void *w,
                                                                     const float *bias, int M, int N, int K, int add,
                                                                     gemv_norm nm) {
    cuda_pdl_enter();
    constexpr int R = GEMVB_R, MR = GEMVB_MR, KC = GEMVB_KC;
    __shared__ __align__(16) float xs[MR * KC];
    int lane = threadIdx.x % 32, n0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * R;
    bool active = n0 < N; /* inactive warps still stage and synchronise */
    size_t wrow[R];
#pragma unroll
    for (int r = 0; r < R; r++) wrow[r] = (size_t)(n0 + r < N ? n0 + r : (active ? n0 : 0)) * K;
    for (int m0 = 0; m0 < M; m0 += MR) {
        int mr = M - m0 < MR ? M - m0 : MR;
        float acc[R][MR], ss[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) {
            ss[m] = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) acc[r][m] = 0.0f;
        }
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC, q = kc / 4;
            __syncthreads(); /* the previous chunk has been consumed */
            for (int i = threadIdx.x; i < mr * q; i += blockDim.x) {
                int m = i / q, c = i % q;
                ((float4 *)xs)[m * (KC / 4) + c] = __ldg((const float4 *)(x + (size_t)(m0 + m) * K + k0) + c);
            }
            __syncthreads();
            if (!active) continue;
            gemv_norm nk = {NORM ? nm.gain + k0 : nullptr, nm.goff, nm.eps}; /* the chunk's gains */
            for (int k = lane * 8; k < kc; k += 256) {
                uint4 u[R];
#pragma unroll
                for (int r = 0; r < R; r++) u[r] = wfetch<DT>(w, wrow[r] + k0 + k);
                float wv[R][8];
#pragma unroll
                for (int r = 0; r < R; r++) wunpack<DT>(w, wrow[r] + k0 + k, u[r], wv[r]);
                gemv_step<R, MR, true, NORM>(acc, wv, xs, KC, mr, (size_t)k, &nk, ss);
            }
        }
        if (!active) continue;
        cuda_warp_sums<R, MR>(acc);
        if (NORM) gemv_norm_scale<R, MR>(acc, ss, nm, K);
        gemv_finish<R, MR>(acc, lane, y, bias, m0, mr, n0, N, add);
    }
}

/* Scalar path for odd K or unaligned data: one warp per row, lane-strided. */
template <int DT>
__global__ void gemv_scalar_kernel(float *y, const float *x, const void *w, const float *bias, int M, int N, int K) {
    cuda_pdl_enter();
    int lane = threadIdx.x % 32, n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (n >= N) return;
    for (int m = 0; m < M; m++) {
        float s = 0.0f;
        for (int k = lane; k < K; k += 32) s = fmaf(wload<DT>(w, (size_t)n * K + k), x[(size_t)m * K + k], s);
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[(size_t)m * N + n] = s + (bias ? bias[n] : 0.0f);
    }
}

__global__ void widen_kernel(float *dst, const uint16_t *src, size_t n, bool bf16) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) dst[t] = bf16 ? cuda_bf16(src[t]) : cuda_f16(src[t]);
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) dst[t] = __float2bfloat16_rn(src[t]);
}

__global__ void bias_kernel(float *y, const float *bias, int M, int N) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (size_t)M * N) y[t] += bias[t % N];
}

gemv_set gemv_set_make(int n, float *const *ys, const em_weight *const *ws, const float *const *biases) {
    gemv_set s;
    memset(&s, 0, sizeof s);
    s.count = n;
    for (int i = 0; i < n; i++) {
        s.w[i] = ws[i]->data;
        s.scales[i] = ws[i]->scales;
        s.biases[i] = ws[i]->biases;
        s.y[i] = ys[i];
        s.bias[i] = biases ? biases[i] : NULL;
        s.start[i + 1] = s.start[i] + (int)ws[i]->rows;
    }
    return s;
}

/* Up to 8 activation rows against every matrix of the set, one warp per
 * weight row. */
template <int DT, bool NORM>
static void gemv_set_launch_as(cuda_backend *cb, const gemv_set &set, const float *x, int M, int K, gemv_norm nm) {
    unsigned grid = (unsigned)((set.start[set.count] + GEMV_WARPS - 1) / GEMV_WARPS);
    if (M == 1) cuda_launch(gemv_kernel<DT, 1, NORM>, grid, GEMV_WARPS * 32, 0, cb->stream, set, x, M, K, nm);
    else if (M == 2) cuda_launch(gemv_kernel<DT, 2, NORM>, grid, GEMV_WARPS * 32, 0, cb->stream, set, x, M, K, nm);
    else if (M <= 4) cuda_launch(gemv_kernel<DT, 4, NORM>, grid, GEMV_WARPS * 32, 0, cb->stream, set, x, M, K, nm);
    else cuda_launch(gemv_kernel<DT, GEMV_ROWS, NORM>, grid, GEMV_WARPS * 32, 0, cb->stream, set, x, M, K, nm);
}

/* Batches of more than one pass: a launch of the staged kernel a matrix. */
template <int DT, bool NORM>
static void gemv_batch_launch_as(cuda_backend *cb, const gemv_set &set, const float *x, int M, int K, gemv_norm nm) {
    for (int i = 0; i < set.count; i++) {
        int N = set.start[i + 1] - set.start[i];
        unsigned grid = (unsigned)((N + GEMVB_R * GEMV_WARPS - 1) / (GEMVB_R * GEMV_WARPS));
        cuda_launch(gemv_batch_kernel<DT, NORM>, grid, GEMV_WARPS * 32, 0, cb->stream, set.y[i], x, set.w[i],
                    set.bias[i], M, N, K, set.add, nm);
    }
}

/* The vector GEMV of M <= GEMV_MAX_EXACT_M rows against every matrix of
 * the set, over normed rows when nm.gain is set. Batches of more than one
 * pass stage their activations in shared memory; small ones keep one
 * weight row per warp so that even the narrow k/v projections spread over
 * every multiprocessor. */
template <int DT>
static void gemv_set_launch(cuda_backend *cb, const gemv_set &set, const float *x, int M, int K,
                            gemv_norm nm = gemv_norm{}) {
    if (M > GEMV_ROWS && nm.gain) gemv_batch_launch_as<DT, true>(cb, set, x, M, K, nm);
    else if (M > GEMV_ROWS) gemv_batch_launch_as<DT, false>(cb, set, x, M, K, nm);
    else if (nm.gain) gemv_set_launch_as<DT, true>(cb, set, x, M, K, nm);
    else gemv_set_launch_as<DT, false>(cb, set, x, M, K, nm);
}

template <int DT>
static void gemv_launch(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias,
                        bool vec) {
    int N = (int)w->rows, K = (int)w->cols;
    if (!vec) {
        cuda_launch(gemv_scalar_kernel<DT>, (unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, 0, cb->stream, 
            y, x, w->data, bias, M, N, K);
        return;
    }
    float *ys[1] = {y};
    const float *bs[1] = {bias};
    gemv_set_launch<DT>(cb, gemv_set_make(1, ys, &w, bs), x, M, K);
}

static void gemv(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    int K = (int)w->cols;
    bool vec = K % 8 == 0 && ((uintptr_t)w->data & 15) == 0 && ((uintptr_t)x & 15) == 0;
    switch (w->dtype) {
    case EM_BF16: gemv_launch<EM_BF16>(cb, y, x, M, w, bias, vec); break;
    case EM_F16: gemv_launch<EM_F16>(cb, y, x, M, w, bias, vec); break;
    default: gemv_launch<EM_F32>(cb, y, x, M, w, bias, vec); break;
    }
    CUDA_LAUNCHED(cb, "matmul (gemv)");
}

static void add_bias(cuda_backend *cb, float *y, const float *bias, int M, int N) {
    if (!bias) return;
    size_t total = (size_t)M * N;
    cuda_launch(bias_kernel, cuda_blocks(total, 256), 256, 0, cb->stream, y, bias, M, N);
    CUDA_LAUNCHED(cb, "matmul (bias)");
}

/* EXACT batches: f32 SGEMM, over W itself (f32) or slices widened to f32. */
static void gemm_exact(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w) {
    int N = (int)w->rows, K = (int)w->cols;
    const float one = 1.0f, zero = 0.0f;
    int slice = N;
    if (w->dtype != EM_F32) {
        size_t rows = WIDE_SLICE_ELEMS / (size_t)K;
        slice = rows < 1 ? 1 : rows < (size_t)N ? (int)rows : N;
        if (!cuda_scratch(cb, (void **)&cb->wide, &cb->wide_bytes, (size_t)slice * K * sizeof(float))) return;
    }
    for (int n0 = 0; n0 < N; n0 += slice) {
        int nr = N - n0 < slice ? N - n0 : slice;
        const float *ws = (const float *)w->data + (size_t)n0 * K;
        if (w->dtype != EM_F32) {
            size_t elems = (size_t)nr * K;
            cuda_launch(widen_kernel, cuda_blocks(elems, 256), 256, 0, cb->stream, 
                cb->wide, (const uint16_t *)w->data + (size_t)n0 * K, elems, w->dtype == EM_BF16);
            CUDA_LAUNCHED(cb, "matmul (widening weights)");
            ws = cb->wide;
        }
        /* column-major view: yᵀ[N, M] = W[K, N]ᵀ · xᵀ[K, M] */
        cuda_note_blas(cb, cb->fn.sgemm(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, M, K, &one, ws, K, x, K, &zero, y + n0, N),
                       "matmul (cuBLAS SGEMM)");
    }
}

/* FAST batches over bf16 weights: activations rounded to bf16 (into
 * cb->xconv; false when that scratch cannot be had, noted). */
bool cuda_round_activations(cuda_backend *cb, const float *x, int M, int K) {
    size_t elems = (size_t)M * K;
    if (cuda_twin_ready(cb, x, elems)) return true; /* its producer rounded it already */
    if (!cuda_scratch(cb, &cb->xconv, &cb->xconv_bytes, elems * sizeof(__nv_bfloat16))) return false;
    cuda_launch(to_bf16_kernel, cuda_blocks(elems, 256), 256, 0, cb->stream, (__nv_bfloat16 *)cb->xconv, x, elems);
    CUDA_LAUNCHED(cb, "matmul (rounding activations)");
    return true;
}

__nv_bfloat16 *cuda_twin_make(cuda_backend *cb, const float *y, int rows, int n) {
    cb->twin_src = NULL;
    size_t elems = (size_t)rows * (size_t)n;
    if (rows < FAST_MIN_M || !cuda_scratch(cb, &cb->xconv, &cb->xconv_bytes, elems * sizeof(__nv_bfloat16)))
        return NULL;
    cb->twin_src = y, cb->twin_elems = elems, cb->twin_seq = cb->op_seq;
    return (__nv_bfloat16 *)cb->xconv;
}

void cuda_gemm_bf16(cuda_backend *cb, void *y, cudaDataType_t ytype, const void *xb, int M, const em_weight *w,
                    bool add) {
    if (w->bits) {
        cuda_qgemm_bf16(cb, y, ytype, xb, M, w, add);
        return;
    }
    int N = (int)w->rows, K = (int)w->cols;
    const float one = 1.0f, beta = add ? 1.0f : 0.0f;
    cuda_note_blas(cb,
                   cb->fn.gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w->data, CUDA_R_16BF, K, xb,
                                  CUDA_R_16BF, K, &beta, y, ytype, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "matmul (cuBLAS bf16 GEMM)");
}

/* The n products of the rounded activations in cb->xconv with bf16 or
 * quantized weights of equal cols: the skinny kernel takes every bf16 weight
 * it fits (one launch), cuBLAS the others (quantized ones dequantized
 * first). Each product gets the bits it would get alone. */
static void gemm_fast_set(cuda_backend *cb, int n, float *const *ys, int M, const em_weight *const *ws,
                          const float *const *biases) {
    float *sy[EM_MATMUL_GROUP_MAX];
    const em_weight *sw[EM_MATMUL_GROUP_MAX];
    const float *sb[EM_MATMUL_GROUP_MAX];
    int k = 0;
    for (int i = 0; i < n; i++) {
        const float *b = biases ? biases[i] : NULL;
        if (ws[i]->bits) {
            cuda_qgemm_rounded(cb, ys[i], M, ws[i], b);
        } else if (cuda_skinny_fits(cb, ws[i], M)) {
            sy[k] = ys[i], sw[k] = ws[i], sb[k] = b;
            k++;
        } else {
            cuda_gemm_bf16(cb, ys[i], CUDA_R_32F, cb->xconv, M, ws[i], false);
            add_bias(cb, ys[i], b, M, (int)ws[i]->rows);
        }
    }
    if (k) cuda_skinny(cb, k, sy, sw, sb, cb->xconv, M);
}

void cuda_matmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math) {
    cuda_backend *cb = cuda_enter(be);
    if (M <= 0 || w->rows <= 0 || w->cols <= 0) return;
    if (cuda_graph_skip_matmul(cb, y, x, M, w, bias, math)) return;
    if (w->bits) {
        cuda_qmatmul(cb, y, x, M, w, bias, math);
        return;
    }
    if ((w->dtype != EM_BF16 && w->dtype != EM_F16 && w->dtype != EM_F32)) {
        cuda_note(cb, cudaErrorNotSupported, "matmul (weight dtype not supported)");
        return;
    }
    int N = (int)w->rows;
    if (math == EM_MATH_FAST && w->dtype == EM_BF16 && M >= FAST_MIN_M) {
        if (cuda_round_activations(cb, x, M, (int)w->cols)) gemm_fast_set(cb, 1, &y, M, &w, &bias);
    } else if (M <= GEMV_MAX_EXACT_M) {
        gemv(cb, y, x, M, w, bias);
    } else {
        gemm_exact(cb, y, x, M, w);
        add_bias(cb, y, bias, M, N);
    }
}

template <int DT, bool NORM>
static void gemv_swiglu_launch_as(cuda_backend *cb, float *out, const float *x, int M, const em_weight *wg,
                                  const em_weight *wu, const float *bg, const float *bu, gemv_norm nm) {
    int N = (int)wg->rows, K = (int)wg->cols;
    unsigned grid = (unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS), t = GEMV_WARPS * 32;
    const void *g = wg->data, *u = wu->data;
    if (M == 1) cuda_launch(gemv_swiglu_kernel<DT, 1, NORM>, grid, t, 0, cb->stream, out, g, u, bg, bu, x, M, N, K, nm);
    else if (M == 2) cuda_launch(gemv_swiglu_kernel<DT, 2, NORM>, grid, t, 0, cb->stream, out, g, u, bg, bu, x, M, N, K, nm);
    else if (M <= 4) cuda_launch(gemv_swiglu_kernel<DT, 4, NORM>, grid, t, 0, cb->stream, out, g, u, bg, bu, x, M, N, K, nm);
    else cuda_launch(gemv_swiglu_kernel<DT, GEMV_ROWS, NORM>, grid, t, 0, cb->stream, out, g, u, bg, bu, x, M, N, K, nm);
}

template <int DT>
static void gemv_swiglu_launch(cuda_backend *cb, float *out, const float *x, int M, const em_weight *wg,
                               const em_weight *wu, const float *bg, const float *bu, gemv_norm nm) {
    if (nm.gain) gemv_swiglu_launch_as<DT, true>(cb, out, x, M, wg, wu, bg, bu, nm);
    else gemv_swiglu_launch_as<DT, false>(cb, out, x, M, wg, wu, bg, bu, nm);
}

/* Whether M rows of a FAST product over bf16 weights go to tensor cores
 * (the GEMVs below leave them). */
static bool tensor_rows(int M, em_dtype dt, em_math math) {
    return math == EM_MATH_FAST && M >= FAST_MIN_M && dt == EM_BF16;
}

/* Whether M rows of x take the vector GEMV over unquantized w in
 * cuda_matmul (the rows' regime, whatever else is in their batch). */
static bool gemv_fits(const float *x, int M, const em_weight *w, em_math math) {
    return !w->bits && M > 0 && M <= GEMV_MAX_EXACT_M && !tensor_rows(M, w->dtype, math) &&
           (w->dtype == EM_BF16 || w->dtype == EM_F16 || w->dtype == EM_F32) && w->rows > 0 && w->cols % 8 == 0 &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* matmul_swiglu's GEMV, over normed activations when nm.gain is set. */
static bool swiglu_gemv(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                        const float *bg, const float *bu, em_math math, gemv_norm nm) {
    /* declined before entering, so that a declined call ends no bf16 twin */
    if (M > GEMV_ROWS || !gemv_fits(x, M, wg, math) || !gemv_fits(x, M, wu, math) || wg->dtype != wu->dtype ||
        wg->rows != wu->rows || wg->cols != wu->cols)
        return false;
    cuda_backend *cb = cuda_enter(be);
    if (cuda_graph_skip(cb, out, x, M, wg->data, wu->data, bg, bu, wg->dtype, wg->rows, wg->cols, nm.gain, nm.goff,
                        nm.eps))
        return true;
    switch (wg->dtype) {
    case EM_BF16: gemv_swiglu_launch<EM_BF16>(cb, out, x, M, wg, wu, bg, bu, nm); break;
    case EM_F16: gemv_swiglu_launch<EM_F16>(cb, out, x, M, wg, wu, bg, bu, nm); break;
    default: gemv_swiglu_launch<EM_F32>(cb, out, x, M, wg, wu, bg, bu, nm); break;
    }
    CUDA_LAUNCHED(cb, "matmul and swiglu (gemv)");
    return true;
}

/* The products matmul_group would give to its GEMV (unquantized weights,
 * at most GEMV_ROWS rows, not a FAST tensor-core batch), fused with the
 * SwiGLU; quantized weights go to cuda_qmatmul_swiglu (FAST decode rows);
 * anything else is declined. */
bool cuda_matmul_swiglu(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                        const float *bg, const float *bu, em_math math) {
    if (wg->bits || wu->bits) return cuda_qmatmul_swiglu(be, out, x, M, wg, wu, bg, bu, math);
    return swiglu_gemv(be, out, x, M, wg, wu, bg, bu, math, gemv_norm{});
}

/* Quantized gate and up weights: the int8 GEMV's rows (FAST, one or two),
 * except where matmul_mlp runs the whole MLP as one launch, which the
 * caller then takes over rmsnorm's rows. */
bool cuda_norm_matmul_swiglu(em_backend *be, float *out, const float *x, const float *gain, float eps,
                             float gain_offset, int M, const em_weight *wg, const em_weight *wu, const float *bg,
                             const float *bu, em_math math) {
    if (!gain || ((uintptr_t)gain & 15)) return false;
    gemv_norm nm = {gain, gain_offset, eps};
    if (wg->bits || wu->bits)
        return !cuda_qmlp_preferred((const cuda_backend *)be->impl, wg) &&
               cuda_qmatmul_swiglu(be, out, x, M, wg, wu, bg, bu, math, nm);
    return swiglu_gemv(be, out, x, M, wg, wu, bg, bu, math, nm);
}

/* norm_matmul_group over 4- and 8-bit weights alike: the int8 GEMV's rows
 * (FAST, one or two). */
static bool qnorm_group(em_backend *be, int n, float *const *ys, const float *x, const gemv_norm &nm, int M,
                        const em_weight *const *ws, const float *const *biases, em_math math) {
    const em_weight *a = ws[0];
    if (math != EM_MATH_FAST) return false;
    for (int i = 0; i < n; i++)
        if (ws[i]->cols != a->cols || ws[i]->bits != a->bits || ws[i]->group_size != a->group_size ||
            ws[i]->scale_dtype != a->scale_dtype || ws[i]->rows <= 0)
            return false;
    gemv_set set = gemv_set_make(n, ys, ws, biases);
    if (!cuda_qgemv_i8_fits(&set, a, x, M)) return false; /* declined before entering */
    return cuda_qgemv_i8_set(cuda_enter(be), &set, a, x, M, nm);
}

bool cuda_norm_matmul_group(em_backend *be, int n, float *const *ys, const float *x, const float *gain, float eps,
                            float gain_offset, int M, const em_weight *const *ws, const float *const *biases,
                            em_math math) {
    if (n < 1 || n > EM_MATMUL_GROUP_MAX || !gain || ((uintptr_t)gain & 15)) return false;
    if (ws[0]->bits) return qnorm_group(be, n, ys, x, gemv_norm{gain, gain_offset, eps}, M, ws, biases, math);
    for (int i = 0; i < n; i++)
        if (!gemv_fits(x, M, ws[i], math) || ws[i]->cols != ws[0]->cols || ws[i]->dtype != ws[0]->dtype) return false;
    cuda_backend *cb = cuda_enter(be);
    gemv_set set = gemv_set_make(n, ys, ws, biases);
    gemv_norm nm = {gain, gain_offset, eps};
    bool replay = cuda_graph_skip(cb, x, M, n, gain, gain_offset, eps, ws[0]->dtype, ws[0]->cols);
    for (int i = 0; i < n; i++)
        replay = cuda_graph_skip(cb, set.w[i], set.y[i], set.bias[i], set.start[i + 1]);
    if (replay) return true;
    int K = (int)ws[0]->cols;
    switch (ws[0]->dtype) {
    case EM_BF16: gemv_set_launch<EM_BF16>(cb, set, x, M, K, nm); break;
    case EM_F16: gemv_set_launch<EM_F16>(cb, set, x, M, K, nm); break;
    default: gemv_set_launch<EM_F32>(cb, set, x, M, K, nm); break;
    }
    CUDA_LAUNCHED(cb, "matmul (gemv over normed rows)");
    return true;
}

/* matmul_add over 4- and 8-bit weights: the int8 GEMV's rows (FAST, one
 * or two) and the int8 tensor-core kernel's (16 to 32), each result added
 * as it is stored. */
static bool qgemv_add(em_backend *be, float *y, const float *x, int M, const em_weight *w, em_math math) {
    if (cuda_qmma_takes((const cuda_backend *)be->impl, w, M, math)) {
        cuda_backend *cb = cuda_enter(be);
        if (cuda_graph_skip(cb, y, x, M, w->data, w->scales, w->biases, w->bits, w->group_size, w->scale_dtype,
                            w->rows, w->cols, 2))
            return true;
        return cuda_qmma(cb, y, x, M, w, NULL, true);
    }
    float *ys[1] = {y};
    gemv_set set = gemv_set_make(1, ys, &w, NULL);
    set.add = 1;
    if (math != EM_MATH_FAST || !cuda_qgemv_i8_fits(&set, w, x, M)) return false;
    return cuda_qgemv_i8_set(cuda_enter(be), &set, w, x, M);
}

bool cuda_gemv_add(em_backend *be, float *y, const float *x, int M, const em_weight *w, em_math math) {
    if (y == x) return false;
    if (w->bits) return qgemv_add(be, y, x, M, w, math);
    if (!gemv_fits(x, M, w, math)) return false;
    cuda_backend *cb = cuda_enter(be);
    if (cuda_graph_skip(cb, y, x, M, w->data, w->dtype, w->rows, w->cols, 1)) return true;
    float *ys[1] = {y};
    gemv_set set = gemv_set_make(1, ys, &w, NULL);
    set.add = 1;
    int K = (int)w->cols;
    switch (w->dtype) {
    case EM_BF16: gemv_set_launch<EM_BF16>(cb, set, x, M, K); break;
    case EM_F16: gemv_set_launch<EM_F16>(cb, set, x, M, K); break;
    default: gemv_set_launch<EM_F32>(cb, set, x, M, K); break;
    }
    CUDA_LAUNCHED(cb, "matmul (gemv, added)");
    return true;
}

/* Whether the n products can share one GEMV launch: weights alike (dtype,
 * cols, quantization), a GEMV-sized batch, aligned for the wide loads. */
static bool group_fits(int n, const float *x, int M, const em_weight *const *ws, em_math math) {
    const em_weight *a = ws[0];
    if (n < 2 || n > EM_MATMUL_GROUP_MAX || ((uintptr_t)x & 15)) return false;
    for (int i = 0; i < n; i++) {
        const em_weight *b = ws[i];
        if (b->cols != a->cols || b->dtype != a->dtype || b->bits != a->bits || b->group_size != a->group_size ||
            b->scale_dtype != a->scale_dtype || ((uintptr_t)b->data & 15) || b->rows <= 0)
            return false;
    }
    if (a->bits) return math == EM_MATH_FAST && M <= 2; /* the int8 GEMV (cuda_qgemv_i8_set decides the rest) */
    return (a->dtype == EM_BF16 || a->dtype == EM_F16 || a->dtype == EM_F32) && M <= GEMV_ROWS && a->cols % 8 == 0;
}

/* FAST products of one input with several bf16 or quantized weights (q, k,
 * v; gate, up) in their tensor-core regimes: the input is rounded to bf16
 * once for all of them, the same bits cuda_matmul would give each. False
 * (nothing queued) where that does not apply. */
static bool gemm_fast_group(cuda_backend *cb, int n, float *const *ys, const float *x, int M,
                            const em_weight *const *ws, const float *const *biases, em_math math) {
    if (math != EM_MATH_FAST || M < FAST_MIN_M) return false;
    for (int i = 0; i < n; i++) {
        bool tc = ws[i]->bits ? cuda_qgemm_fast_ok(cb, ws[i], M, math) : ws[i]->dtype == EM_BF16;
        if (!tc || ws[i]->cols != ws[0]->cols || ws[i]->rows <= 0 || ws[i]->cols <= 0) return false;
    }
    bool replay = false;
    for (int i = 0; i < n; i++)
        replay = cuda_graph_skip_matmul(cb, ys[i], x, M, ws[i], biases ? biases[i] : NULL, math);
    if (replay || !cuda_round_activations(cb, x, M, (int)ws[0]->cols)) return true;
    gemm_fast_set(cb, n, ys, M, ws, biases);
    return true;
}

void cuda_matmul_group(em_backend *be, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                       const float *const *biases, em_math math) {
    cuda_backend *cb = cuda_enter(be);
    if (M <= 0) return;
    if (gemm_fast_group(cb, n, ys, x, M, ws, biases, math)) return;
    if (cuda_qmma_group(cb, n, ys, x, M, ws, biases, math)) return;
    gemv_set set;
    bool fits = group_fits(n, x, M, ws, math);
    if (fits) {
        set = gemv_set_make(n, ys, ws, biases);
        if (ws[0]->bits) fits = cuda_qgemv_i8_set(cb, &set, ws[0], x, M); /* queues nothing when it does not fit */
    }
    if (!fits) {
        for (int i = 0; i < n; i++) cuda_matmul(be, ys[i], x, M, ws[i], biases ? biases[i] : NULL, math);
        return;
    }
    /* (cuda_qgemv_i8_set has queued the quantized set, or skipped it in a replay) */
    if (ws[0]->bits) return;
    if (cb->graphs.mode) {
        cuda_graph_mix(cb, cuda_graph_word(x)), cuda_graph_mix(cb, cuda_graph_word(M)), cuda_graph_mix(cb, (uint64_t)n);
        for (int i = 0; i < n; i++) {
            cuda_graph_mix(cb, cuda_graph_word(set.w[i])), cuda_graph_mix(cb, cuda_graph_word(set.y[i]));
            cuda_graph_mix(cb, cuda_graph_word(set.bias[i])), cuda_graph_mix(cb, (uint64_t)set.start[i + 1]);
        }
        cuda_graph_mix(cb, (uint64_t)ws[0]->dtype), cuda_graph_mix(cb, (uint64_t)ws[0]->cols);
        if (cb->graphs.mode == 2 /* EM_GRAPH_REPLAY */) return;
    }
    int K = (int)ws[0]->cols;
    switch (ws[0]->dtype) {
    case EM_BF16: gemv_set_launch<EM_BF16>(cb, set, x, M, K); break;
    case EM_F16: gemv_set_launch<EM_F16>(cb, set, x, M, K); break;
    default: gemv_set_launch<EM_F32>(cb, set, x, M, K); break;
    }
    CUDA_LAUNCHED(cb, "matmul (grouped gemv)");
}
