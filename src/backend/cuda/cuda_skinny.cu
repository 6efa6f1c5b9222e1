/* cuda_skinny.cu — FAST products of a few activation rows (CUDA_FAST_MIN_M
 * to CUDA_SKINNY_MAX_M) over small bf16 matrices, on tensor cores.
 *
 * Such products are a prefill's tail after a cached prefix, a short prompt,
 * or a decode step of a few sequences; the small matrices are a model's
 * attention projections. cuBLAS covers a 2,048 x 2,048 product of 16 rows
 * with few output tiles, so few multiprocessors stream the weights: on the
 * H200 it moved 874 GB/s there (1,366 for the 1B shape's q, k and v
 * together), against 3.3 TB/s for its 16,384-row gate and up projections.
 * Here a block owns 16 weight rows, each of its warps one stretch of K
 * (cuda_skinny_split in cuda_backend.h), so even a narrow matrix has
 * enough warps streaming it: 1,427 and 1,546 GB/s for those two. A warp
 * keeps several 16-byte weight loads per lane in flight and multiplies them
 * straight from registers with mma.sync m16n8k16: the weight rows are the
 * A operand, the activation rows (rounded to bf16 beforehand, as for
 * cuBLAS) the B operand, so the accumulators hold yᵀ. Larger matrices,
 * and more rows (whose activation loads through L1 then bound the kernel),
 * stay with cuBLAS, which stages tiles in shared memory and is faster
 * there (CUDA_SKINNY_MAX_BYTES, CUDA_SKINNY_MAX_M).
 *
 * A dot product does not care in which order its k run, as long as both
 * operands agree: lane (g, t) of a warp loads the 8 consecutive weights
 * k0 + 8t .. 8t+7 of rows g and g+8 in one load each, and the same 8
 * activations of its B column, and feeds them to two mma steps as if they
 * were the fragment's k positions {2t, 2t+1, 2t+8, 2t+9} of each, which the
 * four lanes of a row cover exactly. No shared memory, no shuffles.
 *
 * The warps' partial sums are added in shared memory in a fixed tree. The
 * stretches depend on K alone, so a row's product is the same bits in any
 * batch (whatever M), alone or in a matmul_group, run after run. */
#include "backend/cuda/cuda_internal.cuh"

#define SK_U 8 /* k32 steps whose weight loads are in flight at once */

/* The matrices of one launch: blocks block[g] .. block[g+1]-1 cover
 * matrix g, 16 weight rows each. */
typedef struct skinny_plan {
    const uint16_t *w[EM_MATMUL_GROUP_MAX];
    float *y[EM_MATMUL_GROUP_MAX];
    const float *bias[EM_MATMUL_GROUP_MAX];
    int rows[EM_MATMUL_GROUP_MAX];
    int block[EM_MATMUL_GROUP_MAX + 1];
    int count;
} skinny_plan;

/* One k32 step of a warp: the lane's 8 weights of rows g and g+8 (lo, hi)
 * against the same 8 activations of each of the NT columns of 8 rows. */
template <int NT>
__device__ __forceinline__ void skinny_step(float (*acc)[4], uint4 lo, uint4 hi, const uint16_t *const *xr, int k) {
    const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        uint4 b = __ldg((const uint4 *)(xr[nt] + k));
        tc_mma(acc[nt], a0, b.x, b.y);
        tc_mma(acc[nt], a1, b.z, b.w);
    }
}

/* A warp's 16 rows over kc values of K: wlo is row g's first weight of the
 * stretch (plus 8t), x the activations' (plus 8t). */
template <int NT>
__device__ __forceinline__ void skinny_warp(float (*acc)[4], const uint16_t *wlo, size_t K, const uint16_t *x, int M,
                                            int kc, int g) {
    const uint16_t *whi = wlo + 8 * K;
    const uint16_t *xr[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int m = nt * 8 + g; /* columns past M repeat the last row; their sums are not stored */
        xr[nt] = x + (size_t)(m < M ? m : M - 1) * K;
    }
    int k = 0;
    for (; k + 32 * SK_U <= kc; k += 32 * SK_U) {
        uint4 lo[SK_U], hi[SK_U];
#pragma unroll
        for (int i = 0; i < SK_U; i++) {
            lo[i] = __ldcs((const uint4 *)(wlo + k + 32 * i));
            hi[i] = __ldcs((const uint4 *)(whi + k + 32 * i));
        }
#pragma unroll
        for (int i = 0; i < SK_U; i++) skinny_step<NT>(acc, lo[i], hi[i], xr, k + 32 * i);
    }
    for (; k < kc; k += 32)
        skinny_step<NT>(acc, __ldcs((const uint4 *)(wlo + k)), __ldcs((const uint4 *)(whi + k)), xr, k);
}

/* Warp 0's sums of rows r0 .. r0+15: element (row g (+8), column 2t (+1))
 * of each column tile, into y[m, n] (ld N). */
template <int NT>
__device__ __forceinline__ void skinny_store(float (*acc)[4], float *y, const float *bias, int N, int M, int r0, int g,
                                             int t) {
    int n = r0 + g;
    float b0 = bias ? bias[n] : 0.0f, b1 = bias ? bias[n + 8] : 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            int m = nt * 8 + 2 * t + c;
            if (m >= M) continue;
            y[(size_t)m * N + n] = acc[nt][c] + b0;
            y[(size_t)m * N + n + 8] = acc[nt][2 + c] + b1;
        }
}

/* Block b: 16 rows of one matrix; its blockDim.x / 32 warps each take one
 * stretch of K. */
template <int NT>
__global__ void __launch_bounds__(CUDA_SKINNY_KSPLIT * 32) skinny_kernel(skinny_plan p, const uint16_t *x, int M,
                                                                         int K) {
    cuda_pdl_enter();
    int b = blockIdx.x, mi = 0;
    while (mi + 1 < p.count && b >= p.block[mi + 1]) mi++;
    int kw = blockDim.x / 32, kc = K / kw, N = p.rows[mi];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = (b - p.block[mi]) * 16;
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    size_t k0 = (size_t)warp * kc + 8 * t;
    skinny_warp<NT>(acc, p.w[mi] + (size_t)(r0 + g) * K + k0, (size_t)K, x + k0, M, kc, g);
    tc_reduce_warps<NT>(acc, warp, lane, kw);
    if (warp == 0) skinny_store<NT>(acc, p.y[mi], p.bias[mi], N, M, r0, g, t);
}

bool cuda_skinny_fits(const cuda_backend *cb, const em_weight *w, int M) {
    return cb->skinny_on && M >= CUDA_FAST_MIN_M && M <= CUDA_SKINNY_MAX_M && !w->bits && w->dtype == EM_BF16 &&
           w->rows > 0 && w->rows % 16 == 0 && w->cols > 0 && w->cols % 32 == 0 &&
           (size_t)w->rows * (size_t)w->cols * 2u <= CUDA_SKINNY_MAX_BYTES && ((uintptr_t)w->data & 15) == 0;
}

template <int NT> static void skinny_launch(cuda_backend *cb, const skinny_plan &p, const uint16_t *x, int M, int K) {
    cuda_launch(skinny_kernel<NT>, (unsigned)p.block[p.count], cuda_skinny_split(K) * 32, 0, cb->stream, p, x, M, K);
}

void cuda_skinny(cuda_backend *cb, int n, float *const *ys, const em_weight *const *ws, const float *const *biases,
                 const void *xb, int M) {
    skinny_plan p;
    memset(&p, 0, sizeof p);
    p.count = n;
    for (int i = 0; i < n; i++) {
        p.w[i] = (const uint16_t *)ws[i]->data;
        p.y[i] = ys[i];
        p.bias[i] = biases ? biases[i] : NULL;
        p.rows[i] = (int)ws[i]->rows;
        p.block[i + 1] = p.block[i] + p.rows[i] / 16;
    }
    int K = (int)ws[0]->cols;
    const uint16_t *x = (const uint16_t *)xb;
    switch ((M + 7) / 8) {
    case 1: skinny_launch<1>(cb, p, x, M, K); break;
    case 2: skinny_launch<2>(cb, p, x, M, K); break;
    case 3: skinny_launch<3>(cb, p, x, M, K); break;
    default: skinny_launch<4>(cb, p, x, M, K); break;
    }
    CUDA_LAUNCHED(cb, "matmul (skinny tensor-core GEMM)");
}
