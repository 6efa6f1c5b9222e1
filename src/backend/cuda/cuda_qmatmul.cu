/* cuda_qmatmul.cu — y[M, N] = x[M, K] · Wᵀ (+ bias) for MLX affine
 * quantized W (cuda_quant.cuh: the layout, read a 32-value segment at a
 * time), and the quantized embedding lookup.
 *
 * Decode (M <= 8, and EXACT batches up to 64 rows, 8 at a time): one warp
 * per weight row, 16 rows per block sharing activations staged in shared
 * memory (segments padded to 36 floats so the lanes' 16-byte reads hit
 * distinct banks), up to 4 segment loads in flight per lane. The weights
 * cross the bus once per 8 activation rows.
 * FAST products of fewer than 16 rows against 4- and 8-bit weights round
 * the activations to int8 and use integer dot products (cuda_qgemv_i8.cu),
 * and so do those of CUDA_QMMA_MIN_M .. CUDA_QMMA_MAX_M rows, on int8
 * tensor cores (cuda_qmma.cu); over 4-bit weights CUDA_QTC_MIN_M ..
 * CUDA_QTC_MAX_M rows run on bf16 tensor cores (cuda_qtc.cu). Larger batches dequantize slices of W once (f32 for EXACT, then cuBLAS
 * SGEMM; bf16 for FAST, then the bf16 tensor-core GEMM over activations
 * rounded to bf16), the regimes of the CPU's quantized matmul. FAST slices
 * are whole matrices up to 64 M values (every matrix of an 8B model but its
 * head), with row counts a multiple of 128, so cuBLAS sees the shapes of a
 * bf16 checkpoint; the activations' rounding is the twin their producer
 * wrote when there is one, and one rounding serves a group (q, k, v). */
#include "backend/cuda/cuda_quant.cuh"

#define QG_ROWS 8      /* activation rows per pass */
#define QG_WARPS 16    /* weight rows per block */
#define QG_PAD 36      /* floats per staged segment (bank-conflict-free float4 reads) */
#define QG_MAX_EXACT_M CUDA_QGEMV_MAX_EXACT_M
#define QFAST_MIN_M CUDA_QFAST_MIN_M
#define QSLICE_ELEMS CUDA_QSLICE_ELEMS
#define QSLICE_BF16_ELEMS CUDA_QSLICE_BF16_ELEMS
#define QD_THREADS 256                       /* segments per block of the bf16 dequantization */

/* ROWS (1, 2, 4 or 8) bounds the activation rows of a pass; fewer rows
 * stage more columns at once, so each lane issues SPL segment loads back to
 * back before it computes (more weight bytes in flight per barrier). Lane
 * L always takes the segments s with s % 32 == L in ascending order,
 * whatever ROWS is, so a row's sum does not depend on which other rows share
 * its pass (a verified span computes what single decode steps do). */
template <int BITS, int ROWS>
__global__ void __launch_bounds__(QG_WARPS * 32, ROWS == 8 ? 1 : 2)
    qgemv_kernel(float *y, const float *x, const uint32_t *w, const void *scales, const void *biases, int sdt,
                 const float *bias, int M, int N, int K, int group) {
    cuda_pdl_enter();
    constexpr int SPL = ROWS == 1 ? 4 : ROWS == 2 ? 2 : 1;           /* segments per lane per chunk */
    constexpr int KC = SPL * 32 * QG_SEG;                            /* columns staged per chunk */
    constexpr int SEG_ROW = (KC / QG_SEG) * QG_PAD;                  /* staged floats per activation row */
    __shared__ __align__(16) float xs[ROWS * SEG_ROW];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int n = blockIdx.x * QG_WARPS + warp;
    bool active = n < N;
    size_t words_per_row = (size_t)K / 32 * BITS, groups_per_row = (size_t)(K / group);
    const uint32_t *wr = w + (size_t)(active ? n : 0) * words_per_row;
    size_t g0 = (size_t)(active ? n : 0) * groups_per_row;
    float acc[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; m++) acc[m] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? K - k0 : KC; /* a multiple of 32 */
        __syncthreads();
        for (int i = threadIdx.x; i < M * kc; i += blockDim.x) {
            int m = i / kc, k = i % kc;
            xs[m * SEG_ROW + (k / QG_SEG) * QG_PAD + k % QG_SEG] = x[(size_t)m * K + k0 + k];
        }
        __syncthreads();
        if (!active) continue;
        uint32_t words[SPL][BITS];
        float sc[SPL], bi[SPL];
#pragma unroll
        for (int p = 0; p < SPL; p++) {
            int ls = p * 32 + lane; /* segment within the chunk */
            if (ls * QG_SEG < kc) {
                size_t seg = (size_t)(k0 / QG_SEG + ls), gi = g0 + seg * QG_SEG / group;
                load_segment<BITS>(wr, seg, words[p]);
                sc[p] = q_scalar(scales, sdt, gi);
                bi[p] = q_scalar(biases, sdt, gi);
            }
        }
#pragma unroll
        for (int p = 0; p < SPL; p++) {
            int ls = p * 32 + lane;
            if (ls * QG_SEG >= kc) break;
            float wv[QG_SEG];
#pragma unroll
            for (int e = 0; e < QG_SEG; e++) wv[e] = sc[p] * q_float(seg_value<BITS>(words[p], e)) + bi[p];
#pragma unroll
            for (int m = 0; m < ROWS; m++) {
                if (m < M) {
                    const float *xr = xs + m * SEG_ROW + ls * QG_PAD;
                    float a = acc[m];
#pragma unroll
                    for (int e = 0; e < QG_SEG; e += 4) {
                        float4 v = *(const float4 *)(xr + e);
                        a += wv[e] * v.x + wv[e + 1] * v.y + wv[e + 2] * v.z + wv[e + 3] * v.w;
                    }
                    acc[m] = a;
                }
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int m = 0; m < ROWS; m++) {
        float v = acc[m];
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[m] = v;
    }
    if (lane == 0) {
        float b = bias ? bias[n] : 0.0f;
#pragma unroll
        for (int m = 0; m < ROWS; m++)
            if (m < M) y[(size_t)m * N + n] = acc[m] + b;
    }
}

/* Element (r, c) of a quantized matrix: scale * q + bias, as the CPU's
 * affine_dequant computes it (bytes of the little-endian bitstream). */
__device__ __forceinline__ float q_element(const uint8_t *words, const void *scales, const void *biases, int sdt,
                                           int bits, int group, size_t K, size_t r, size_t c) {
    const uint8_t *row = words + r * (K * (size_t)bits / 8);
    size_t bit = c * (size_t)bits;
    const uint8_t *p = row + bit / 8;
    unsigned sh = (unsigned)(bit % 8);
    uint32_t v = p[0];
    if (sh + (unsigned)bits > 8) v |= (uint32_t)p[1] << 8;
    uint32_t q = (v >> sh) & ((1u << bits) - 1u);
    size_t g = r * (K / (size_t)group) + c / (size_t)group;
    return q_scalar(scales, sdt, g) * (float)q + q_scalar(biases, sdt, g);
}

/* Rows [r0, r0 + rows) dequantized into f32 (bf16 == false) or bf16, one
 * element per thread: for words without the alignment of the wide loads. */
__global__ void qdequant_kernel(void *dst, bool bf16, const uint8_t *words, const void *scales, const void *biases,
                                int sdt, int bits, int group, size_t K, size_t r0, size_t rows) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * K) return;
    float v = q_element(words, scales, biases, sdt, bits, group, K, r0 + t / K, t % K);
    if (bf16) ((__nv_bfloat16 *)dst)[t] = __float2bfloat16_rn(v);
    else ((float *)dst)[t] = v;
}

/* The same into f32 by segments: a thread unpacks one segment of 32 values
 * with the GEMV's loads and writes them out (rows [r0, r0 + rows)). */
template <int BITS>
__global__ void qdequant_seg_kernel(float *dst, const uint32_t *w, const void *scales, const void *biases, int sdt,
                                    int group, size_t K, size_t r0, size_t rows) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, segs = K / QG_SEG;
    if (t >= rows * segs) return;
    size_t r = r0 + t / segs, seg = t % segs;
    uint32_t words[BITS];
    load_segment<BITS>(w + r * segs * BITS, seg, words);
    size_t gi = r * (K / (size_t)group) + seg * QG_SEG / (size_t)group;
    float s = q_scalar(scales, sdt, gi), b = q_scalar(biases, sdt, gi);
    float4 *d = (float4 *)(dst + t * QG_SEG); /* == (r - r0) * K + seg * 32 */
#pragma unroll
    for (int e = 0; e < QG_SEG; e += 4)
        d[e / 4] = make_float4(s * (float)seg_value<BITS>(words, e) + b, s * (float)seg_value<BITS>(words, e + 1) + b,
                               s * (float)seg_value<BITS>(words, e + 2) + b, s * (float)seg_value<BITS>(words, e + 3) + b);
}

/* The same into bf16 with coalesced stores: a block unpacks QD_THREADS
 * consecutive segments (thread t the t-th, 64 bytes of output) into shared
 * memory, then the block writes its 16 KB out in consecutive 16-byte
 * stores (bf16 of qdequant_seg_kernel's values). */
template <int BITS>
__global__ void __launch_bounds__(QD_THREADS) qdequant_bf16_kernel(__nv_bfloat16 *dst, const uint32_t *w,
                                                                   const void *scales, const void *biases, int sdt,
                                                                   int group, size_t K, size_t r0, size_t rows) {
    __shared__ uint4 tile[QD_THREADS * 4]; /* 32 bf16 a segment: 4 x 16 bytes */
    cuda_pdl_enter();
    size_t segs = K / QG_SEG, total = rows * segs, first = (size_t)blockIdx.x * QD_THREADS;
    size_t t = first + threadIdx.x;
    if (t < total) {
        size_t r = r0 + t / segs, seg = t % segs;
        uint32_t words[BITS];
        load_segment<BITS>(w + r * segs * BITS, seg, words);
        size_t gi = r * (K / (size_t)group) + seg * QG_SEG / (size_t)group;
        float s = q_scalar(scales, sdt, gi), b = q_scalar(biases, sdt, gi);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __align__(16) __nv_bfloat162 h[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                h[e] = __floats2bfloat162_rn(s * (float)seg_value<BITS>(words, 8 * j + 2 * e) + b,
                                             s * (float)seg_value<BITS>(words, 8 * j + 2 * e + 1) + b);
            tile[threadIdx.x * 4 + j] = *(const uint4 *)h;
        }
    }
    __syncthreads();
    size_t here = total - first < QD_THREADS ? total - first : QD_THREADS;
    uint4 *out = (uint4 *)dst + first * 4; /* segment t's output starts at t * 32 values */
    for (size_t i = threadIdx.x; i < here * 4; i += QD_THREADS) out[i] = tile[i];
}

__global__ void qembed_kernel(float *out, const uint8_t *words, const void *scales, const void *biases, int sdt,
                              int bits, int group, const int32_t *ids, int n, size_t K) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n * K) return;
    out[t] = q_element(words, scales, biases, sdt, bits, group, K, (size_t)ids[t / K], t % K);
}

__global__ void qbias_kernel(float *y, const float *bias, int M, int N) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (size_t)M * N) y[t] += bias[t % N];
}

template <int BITS, int ROWS>
static void qgemv_pass(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    int N = (int)w->rows, K = (int)w->cols;
    dim3 grid((unsigned)((N + QG_WARPS - 1) / QG_WARPS));
    cuda_launch(qgemv_kernel<BITS, ROWS>, grid, QG_WARPS * 32, 0, cb->stream, y, x, (const uint32_t *)w->data, w->scales,
                                                                     w->biases, (int)w->scale_dtype, bias, M, N, K,
                                                                     w->group_size);
    CUDA_LAUNCHED(cb, "quantized matmul (gemv)");
}

template <int BITS>
static void qgemv_launch(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    int N = (int)w->rows, K = (int)w->cols;
    for (int m0 = 0; m0 < M; m0 += QG_ROWS) {
        int mr = M - m0 < QG_ROWS ? M - m0 : QG_ROWS;
        float *ym = y + (size_t)m0 * N;
        const float *xm = x + (size_t)m0 * K;
        if (mr == 1) qgemv_pass<BITS, 1>(cb, ym, xm, mr, w, bias);
        else if (mr == 2) qgemv_pass<BITS, 2>(cb, ym, xm, mr, w, bias);
        else if (mr <= 4) qgemv_pass<BITS, 4>(cb, ym, xm, mr, w, bias);
        else qgemv_pass<BITS, 8>(cb, ym, xm, mr, w, bias);
    }
}

static bool qgemv(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    if (!words_aligned(w->data, w->bits)) return false;
    switch (w->bits) {
    case 2: qgemv_launch<2>(cb, y, x, M, w, bias); return true;
    case 3: qgemv_launch<3>(cb, y, x, M, w, bias); return true;
    case 4: qgemv_launch<4>(cb, y, x, M, w, bias); return true;
    case 5: qgemv_launch<5>(cb, y, x, M, w, bias); return true;
    case 6: qgemv_launch<6>(cb, y, x, M, w, bias); return true;
    case 8: qgemv_launch<8>(cb, y, x, M, w, bias); return true;
    default: return false;
    }
}

template <int BITS>
static void qdequant_seg(cuda_backend *cb, void *dst, bool bf16, const em_weight *w, size_t r0, size_t rows) {
    size_t K = (size_t)w->cols, segs = rows * (K / QG_SEG);
    if (bf16)
        cuda_launch(qdequant_bf16_kernel<BITS>, cuda_blocks(segs, QD_THREADS), QD_THREADS, 0, cb->stream,
                    (__nv_bfloat16 *)dst, (const uint32_t *)w->data, w->scales, w->biases, (int)w->scale_dtype,
                    w->group_size, K, r0, rows);
    else
        cuda_launch(qdequant_seg_kernel<BITS>, cuda_blocks(segs, 256), 256, 0, cb->stream, (float *)dst,
                    (const uint32_t *)w->data, w->scales, w->biases, (int)w->scale_dtype, w->group_size, K, r0, rows);
    CUDA_LAUNCHED(cb, "quantized matmul (dequantizing weights)");
}

/* dst (scratch from cudaMalloc, so aligned) receives rows [r0, r0 + rows). */
static void qdequant(cuda_backend *cb, void *dst, bool bf16, const em_weight *w, size_t r0, size_t rows) {
    size_t K = (size_t)w->cols, elems = rows * K;
    if (words_aligned(w->data, w->bits)) {
        switch (w->bits) {
        case 2: qdequant_seg<2>(cb, dst, bf16, w, r0, rows); return;
        case 3: qdequant_seg<3>(cb, dst, bf16, w, r0, rows); return;
        case 4: qdequant_seg<4>(cb, dst, bf16, w, r0, rows); return;
        case 5: qdequant_seg<5>(cb, dst, bf16, w, r0, rows); return;
        case 6: qdequant_seg<6>(cb, dst, bf16, w, r0, rows); return;
        case 8: qdequant_seg<8>(cb, dst, bf16, w, r0, rows); return;
        default: break;
        }
    }
    cuda_launch(qdequant_kernel, cuda_blocks(elems, 256), 256, 0, cb->stream, dst, bf16, (const uint8_t *)w->data, w->scales,
                                                                     w->biases, (int)w->scale_dtype, w->bits,
                                                                     w->group_size, K, r0, rows);
    CUDA_LAUNCHED(cb, "quantized matmul (dequantizing weights)");
}

/* Rows of W a GEMM slice takes (cuda_backend.h). */
static int slice_rows(const em_weight *w, size_t cap) { return cuda_qslice_rows((int)w->rows, (int)w->cols, cap); }

/* EXACT batches beyond the GEMV: slices of W dequantized to f32, then SGEMM. */
static void qgemm_exact(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w) {
    int N = (int)w->rows, K = (int)w->cols, slice = slice_rows(w, QSLICE_ELEMS);
    const float one = 1.0f, zero = 0.0f;
    if (!cuda_scratch(cb, (void **)&cb->wide, &cb->wide_bytes, (size_t)slice * K * sizeof(float))) return;
    for (int n0 = 0; n0 < N; n0 += slice) {
        int nr = N - n0 < slice ? N - n0 : slice;
        qdequant(cb, cb->wide, false, w, (size_t)n0, (size_t)nr);
        /* column-major view: yᵀ[N, M] = W[K, N]ᵀ · xᵀ[K, M] */
        cuda_note_blas(cb, cb->fn.sgemm(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, M, K, &one, cb->wide, K, x, K, &zero,
                                        y + n0, N),
                       "quantized matmul (cuBLAS SGEMM)");
    }
}

static void qbias(cuda_backend *cb, float *y, const float *bias, int M, int N) {
    if (!bias) return;
    size_t total = (size_t)M * N;
    cuda_launch(qbias_kernel, cuda_blocks(total, 256), 256, 0, cb->stream, y, bias, M, N);
    CUDA_LAUNCHED(cb, "quantized matmul (bias)");
}

bool cuda_qgemm_fast_ok(const cuda_backend *cb, const em_weight *w, int M, em_math math) {
    return w->bits && math == EM_MATH_FAST && M >= QFAST_MIN_M && qweight_ok(w) && w->rows > 0 && w->cols > 0 &&
           !cuda_qmma_takes(cb, w, M, math);
}

void cuda_qgemm_bf16(cuda_backend *cb, void *y, cudaDataType_t ytype, const void *xb, int M, const em_weight *w,
                     bool add) {
    int N = (int)w->rows, K = (int)w->cols, slice = slice_rows(w, QSLICE_BF16_ELEMS);
    size_t ysize = ytype == CUDA_R_32F ? sizeof(float) : sizeof(__nv_bfloat16);
    const float one = 1.0f, beta = add ? 1.0f : 0.0f;
    if (!cuda_scratch(cb, &cb->wconv, &cb->wconv_bytes, (size_t)slice * K * sizeof(__nv_bfloat16))) return;
    for (int n0 = 0; n0 < N; n0 += slice) {
        int nr = N - n0 < slice ? N - n0 : slice;
        qdequant(cb, cb->wconv, true, w, (size_t)n0, (size_t)nr);
        cuda_note_blas(cb,
                       cb->fn.gemm_ex(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, M, K, &one, cb->wconv, CUDA_R_16BF, K,
                                      xb, CUDA_R_16BF, K, &beta, (char *)y + (size_t)n0 * ysize, ytype, N,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "quantized matmul (cuBLAS bf16 GEMM)");
    }
}

void cuda_qgemm_rounded(cuda_backend *cb, float *y, int M, const em_weight *w, const float *bias) {
    cuda_qgemm_bf16(cb, y, CUDA_R_32F, cb->xconv, M, w, false);
    qbias(cb, y, bias, M, (int)w->rows);
}

void cuda_qmatmul(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias,
                  em_math math) {
    if (M <= 0 || w->rows <= 0 || w->cols <= 0) return;
    if (!qweight_ok(w)) {
        cuda_note(cb, cudaErrorNotSupported, "quantized matmul (bits, group size or scale dtype out of range)");
        return;
    }
    if (cuda_qmma_takes(cb, w, M, math) && cuda_qmma(cb, y, x, M, w, bias, false)) return;
    if (cuda_qgemm_fast_ok(cb, w, M, math)) {
        if (cuda_round_activations(cb, x, M, (int)w->cols)) cuda_qgemm_rounded(cb, y, M, w, bias);
        return;
    }
    if (math == EM_MATH_FAST && cuda_qgemv_i8(cb, y, x, M, w, bias)) return;
    if (M <= QG_MAX_EXACT_M && qgemv(cb, y, x, M, w, bias)) return;
    qgemm_exact(cb, y, x, M, w);
    qbias(cb, y, bias, M, (int)w->rows);
}

void cuda_qembed(cuda_backend *cb, float *out, const em_weight *t, const int32_t *dids, int n) {
    if (!qweight_ok(t)) {
        cuda_note(cb, cudaErrorNotSupported, "embed (quantized table: bits, group size or scale dtype out of range)");
        return;
    }
    size_t K = (size_t)t->cols, total = (size_t)n * K;
    cuda_launch(qembed_kernel, cuda_blocks(total, 256), 256, 0, cb->stream, out, (const uint8_t *)t->data, t->scales, t->biases,
                                                                   (int)t->scale_dtype, t->bits, t->group_size, dids,
                                                                   n, K);
    CUDA_LAUNCHED(cb, "embed (quantized)");
}
