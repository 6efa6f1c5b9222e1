/* cuda_matmul.cu — y[M, N] = x[M, K] · Wᵀ (+ bias) with W bf16/f16/f32 and
 * x, y f32.
 *
 * Decode (M <= 8, and EXACT batches up to 64 rows, 8 at a time): a GEMV
 * kernel, one warp per weight row, 16-byte weight loads, every activation
 * row against each weight vector so the weights are read once per 8 rows,
 * f32 accumulation. Larger EXACT batches widen slices of W to f32 and run
 * cuBLAS SGEMM (f32 in, f32 accumulate: the activations are never
 * rounded). FAST batches of >= 16 rows over bf16 weights round the
 * activations to bf16 and run a bf16 tensor-core GEMM with f32 accumulate,
 * as the CPU's FAST path does. */
#include "backend/cuda/cuda_internal.cuh"

#define GEMV_ROWS 8     /* activation rows per pass */
#define GEMV_WARPS 16   /* weight rows per block (they share the staged activations) */
#define GEMV_KC 1024    /* activation columns staged in shared memory per step (32 KiB for 8 rows) */
#define GEMV_MAX_EXACT_M 64
#define FAST_MIN_M 16
#define WIDE_SLICE_ELEMS ((size_t)32 << 20) /* 128 MiB of widened f32 weights per SGEMM */

template <int DT> __device__ __forceinline__ float wload(const void *w, size_t i);
template <> __device__ __forceinline__ float wload<EM_F32>(const void *w, size_t i) { return ((const float *)w)[i]; }
template <> __device__ __forceinline__ float wload<EM_BF16>(const void *w, size_t i) {
    return cuda_bf16(((const uint16_t *)w)[i]);
}
template <> __device__ __forceinline__ float wload<EM_F16>(const void *w, size_t i) {
    return cuda_f16(((const uint16_t *)w)[i]);
}

/* Eight consecutive weights from a 16-byte aligned address (32 bytes for f32). */
template <int DT> __device__ __forceinline__ void wload8(const void *w, size_t i, float *o) {
    if (DT == EM_F32) {
        float4 a = *(const float4 *)((const float *)w + i), b = *(const float4 *)((const float *)w + i + 4);
        o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
    } else {
        uint4 u = *(const uint4 *)((const uint16_t *)w + i);
        uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint16_t lo = (uint16_t)(p[k] & 0xffffu), hi = (uint16_t)(p[k] >> 16);
            o[2 * k] = DT == EM_BF16 ? cuda_bf16(lo) : cuda_f16(lo);
            o[2 * k + 1] = DT == EM_BF16 ? cuda_bf16(hi) : cuda_f16(hi);
        }
    }
}

/* One warp per weight row, GEMV_WARPS rows per block. The activation rows
 * are staged in shared memory one K-chunk at a time, so every block reads
 * them from L2 once instead of once per weight row (with 8 activation rows
 * those reads otherwise outweigh the weights 16 to 1). Each lane covers the
 * same k positions whatever M is, so a row's sum does not depend on which
 * other rows share its pass. */
template <int DT>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel(float *y, const float *x, const void *w,
                                                               const float *bias, int M, int N, int K, bool vec) {
    __shared__ __align__(16) float xs[GEMV_ROWS * GEMV_KC];
    int lane = threadIdx.x % 32, n = blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    bool active = n < N; /* inactive warps still help stage and sync */
    float acc[GEMV_ROWS];
#pragma unroll
    for (int m = 0; m < GEMV_ROWS; m++) acc[m] = 0.0f;
    size_t wrow = (size_t)(active ? n : 0) * K;
    for (int k0 = 0; k0 < K; k0 += GEMV_KC) {
        int kc = K - k0 < GEMV_KC ? K - k0 : GEMV_KC;
        __syncthreads(); /* the previous chunk has been consumed */
        for (int m = 0; m < M; m++)
            for (int k = threadIdx.x; k < kc; k += blockDim.x) xs[m * GEMV_KC + k] = x[(size_t)m * K + k0 + k];
        __syncthreads();
        if (!active) continue;
        if (vec) {
            for (int k = lane * 8; k < kc; k += 32 * 8) {
                float wv[8];
                wload8<DT>(w, wrow + k0 + k, wv);
#pragma unroll
                for (int m = 0; m < GEMV_ROWS; m++) {
                    if (m < M) {
                        const float *xr = xs + m * GEMV_KC + k;
                        float4 a = *(const float4 *)xr, b = *(const float4 *)(xr + 4);
                        acc[m] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y +
                                  wv[6] * b.z + wv[7] * b.w;
                    }
                }
            }
        } else {
            for (int k = lane; k < kc; k += 32) {
                float wv = wload<DT>(w, wrow + k0 + k);
#pragma unroll
                for (int m = 0; m < GEMV_ROWS; m++)
                    if (m < M) acc[m] += wv * xs[m * GEMV_KC + k];
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int m = 0; m < GEMV_ROWS; m++) {
        float v = acc[m];
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[m] = v;
    }
    if (lane == 0) {
        float b = bias ? bias[n] : 0.0f;
#pragma unroll
        for (int m = 0; m < GEMV_ROWS; m++)
            if (m < M) y[(size_t)m * N + n] = acc[m] + b;
    }
}

__global__ void widen_kernel(float *dst, const uint16_t *src, size_t n, bool bf16) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) dst[t] = bf16 ? cuda_bf16(src[t]) : cuda_f16(src[t]);
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) dst[t] = __float2bfloat16_rn(src[t]);
}

__global__ void bias_kernel(float *y, const float *bias, int M, int N) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (size_t)M * N) y[t] += bias[t % N];
}

static void gemv(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    int N = (int)w->rows, K = (int)w->cols;
    bool vec = K % 8 == 0 && ((uintptr_t)w->data & 15) == 0 && ((uintptr_t)x & 15) == 0;
    dim3 grid((unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS));
    for (int m0 = 0; m0 < M; m0 += GEMV_ROWS) {
        int mr = M - m0 < GEMV_ROWS ? M - m0 : GEMV_ROWS;
        const float *xm = x + (size_t)m0 * K;
        float *ym = y + (size_t)m0 * N;
        switch (w->dtype) {
        case EM_BF16: gemv_kernel<EM_BF16><<<grid, GEMV_WARPS * 32, 0, cb->stream>>>(ym, xm, w->data, bias, mr, N, K, vec); break;
        case EM_F16: gemv_kernel<EM_F16><<<grid, GEMV_WARPS * 32, 0, cb->stream>>>(ym, xm, w->data, bias, mr, N, K, vec); break;
        default: gemv_kernel<EM_F32><<<grid, GEMV_WARPS * 32, 0, cb->stream>>>(ym, xm, w->data, bias, mr, N, K, vec); break;
        }
        CUDA_LAUNCHED(cb, "matmul (gemv)");
    }
}

static void add_bias(cuda_backend *cb, float *y, const float *bias, int M, int N) {
    if (!bias) return;
    size_t total = (size_t)M * N;
    bias_kernel<<<cuda_blocks(total, 256), 256, 0, cb->stream>>>(y, bias, M, N);
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
            widen_kernel<<<cuda_blocks(elems, 256), 256, 0, cb->stream>>>(
                cb->wide, (const uint16_t *)w->data + (size_t)n0 * K, elems, w->dtype == EM_BF16);
            CUDA_LAUNCHED(cb, "matmul (widening weights)");
            ws = cb->wide;
        }
        /* column-major view: yᵀ[N, M] = W[K, N]ᵀ · xᵀ[K, M] */
        cuda_note_blas(cb, cb->fn.sgemm(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, M, K, &one, ws, K, x, K, &zero, y + n0, N),
                       "matmul (cuBLAS SGEMM)");
    }
}

/* FAST batches over bf16 weights: activations rounded to bf16. */
static void gemm_fast(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w) {
    int N = (int)w->rows, K = (int)w->cols;
    size_t elems = (size_t)M * K;
    if (!cuda_scratch(cb, &cb->xconv, &cb->xconv_bytes, elems * sizeof(__nv_bfloat16))) return;
    to_bf16_kernel<<<cuda_blocks(elems, 256), 256, 0, cb->stream>>>((__nv_bfloat16 *)cb->xconv, x, elems);
    CUDA_LAUNCHED(cb, "matmul (rounding activations)");
    const float one = 1.0f, zero = 0.0f;
    cuda_note_blas(cb,
                   cb->fn.gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w->data, CUDA_R_16BF, K, cb->xconv,
                                CUDA_R_16BF, K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "matmul (cuBLAS bf16 GEMM)");
}

void cuda_matmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math) {
    cuda_backend *cb = cuda_enter(be);
    if (M <= 0 || w->rows <= 0 || w->cols <= 0) return;
    if (w->bits) {
        cuda_qmatmul(be, y, x, M, w, bias, math);
        return;
    }
    if ((w->dtype != EM_BF16 && w->dtype != EM_F16 && w->dtype != EM_F32)) {
        cuda_note(cb, cudaErrorNotSupported, "matmul (weight dtype not supported)");
        return;
    }
    int N = (int)w->rows;
    if (math == EM_MATH_FAST && w->dtype == EM_BF16 && M >= FAST_MIN_M) {
        gemm_fast(cb, y, x, M, w);
        add_bias(cb, y, bias, M, N);
    } else if (M <= GEMV_MAX_EXACT_M) {
        gemv(cb, y, x, M, w, bias);
    } else {
        gemm_exact(cb, y, x, M, w);
        add_bias(cb, y, bias, M, N);
    }
}
