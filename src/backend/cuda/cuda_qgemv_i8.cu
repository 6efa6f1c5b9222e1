/* cuda_qgemv_i8.cu — FAST products of few rows (decode steps, short verify
 * spans) against 4- and 8-bit MLX affine weights (cuda_quant.cuh): the
 * activations rounded to int8 per 32 values, the codes dotted with them by
 * dp4a. One or two rows stream the weights through every multiprocessor
 * (qgemv_i8_stream_kernel, which also fuses an MLP's gate, up and SwiGLU);
 * up to 8 rows a pass otherwise (qgemv_i8_kernel). */
#include "backend/cuda/cuda_quant.cuh"

/* FAST few-row products against 4- and 8-bit weights: the activations are
 * rounded to int8 per 32 values (the CPU's FAST rounding, quant_avx2.c) and
 * the codes are dotted with them four at a time (dp4a), so the kernel is
 * bound by the weight stream instead of by unpacking. Per 32-value segment
 * of a row (inside one group of scale s and bias b):
 *   sum x*(s*q + b) ~= s * dx * sum(x8 * q') + b' * sum(x)
 * with x8 = rint(x / dx), dx = max|x| / 127, and sum(x) of the unrounded
 * activations; 8-bit codes are centred (q' = q - 128, b' = b + 128 s) so they
 * fit a signed byte. For 4 bits a word's even codes are its low nibbles, so
 * each 8 activations are staged evens first, then odds.
 *
 * A block of Q8_WARPS warps owns Q8_RW weight rows per warp. Per chunk of
 * Q8_KC columns every lane first issues the loads of its segments (weights,
 * scales, biases), then the block stages the chunk's activations in shared
 * memory as int8, then computes, so the staging hides under the loads. */
#define Q8_WARPS 8
#define Q8_RW 2
#define Q8_KC 2048
#define Q8_SPL (Q8_KC / QG_SEG / 32) /* segments per lane per chunk */
#define Q8_MAX_M 8
#define Q8_STREAM_SMEM_MAX ((size_t)48 << 10) /* without opting in to more */

/* Byte position of activation k (within its 32) in the staged segment. */
template <int BITS> __device__ __forceinline__ int q8_pos(int k) {
    if (BITS == 8) return k;
    int e = k & 7;
    return (k & ~7) + ((e & 1) ? 4 + (e >> 1) : (e >> 1));
}

/* Rounds rows [0, mr) of x[., k0 .. k0 + kc) into staged int8 (row m at
 * xq + m * cap bytes, its per-32 scales and sums at xd/xs + m * cap / 32):
 * 8 lanes per 32 values (a float4 each), max and sum by a fixed butterfly.
 * Each thread issues Q8_QPT loads before using any. PLANES (the pipelined
 * kernel's layout): a row's segments are split in two planes of cap / 2
 * bytes (each segment's first 16 staged bytes in the first, its last 16 in
 * the second), so lanes that read consecutive segments' halves meet no bank
 * conflict, and each segment's scale and sum are a pair at xd (one 8-byte
 * read; xs unused). */
#define Q8_QPT 4
template <int BITS, int ROWS, bool PLANES = false>
__device__ __forceinline__ void q8_stage(int8_t *xq, float *xd, float *xs, int cap, const float *x, int K, int k0,
                                         int kc, int mr) {
    int quads = kc / 4, step = Q8_QPT * blockDim.x;
#pragma unroll
    for (int m = 0; m < ROWS; m++) {
        if (m >= mr) break;
        const float4 *xr = (const float4 *)(x + (size_t)m * K + k0);
        for (int i0 = 0; i0 < quads; i0 += step) { /* whole warps take part in the shuffles */
            float4 v[Q8_QPT];
#pragma unroll
            for (int j = 0; j < Q8_QPT; j++) {
                int i = i0 + j * blockDim.x + threadIdx.x;
                v[j] = i < quads ? __ldg(xr + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int j = 0; j < Q8_QPT; j++) {
                int i = i0 + j * blockDim.x + threadIdx.x;
                float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
                float sum = (v[j].x + v[j].y) + (v[j].z + v[j].w);
#pragma unroll
                for (int o = 1; o < 8; o <<= 1) {
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
                    sum += __shfl_xor_sync(0xffffffffu, sum, o);
                }
                if (i >= quads) continue;
                float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                int k = i * 4, seg = k / QG_SEG, e = k % QG_SEG;
                int8_t *d = xq + (size_t)m * cap;
                float f[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    int p = q8_pos<BITS>(e + c);
                    size_t at = PLANES ? (size_t)(p >> 4) * (cap / 2) + (size_t)seg * 16 + (p & 15)
                                       : (size_t)seg * QG_SEG + p;
                    d[at] = (int8_t)__float2int_rn(f[c] * inv);
                }
                if (e == 0 && PLANES) {
                    float2 *ds = (float2 *)xd + m * (cap / QG_SEG) + seg;
                    *ds = make_float2(amax / 127.0f, sum);
                } else if (e == 0) {
                    xd[m * (cap / QG_SEG) + seg] = amax / 127.0f, xs[m * (cap / QG_SEG) + seg] = sum;
                }
            }
        }
    }
}

/* dp4a of four unsigned bytes a with four signed bytes b, plus c. */
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* sum(x8 * q') over one segment: BITS words of codes, the 8 words of its
 * staged activations (q8_dot loads them; q8_dot_x takes them loaded). The
 * high nibbles are dotted in place, as 16 q (unsigned bytes w & 0xF0...),
 * and their sum shifted down once: one shift a segment instead of one a
 * word, and the same integer. */
template <int BITS> __device__ __forceinline__ int q8_dot_x(const uint32_t *w, const uint4 &a, const uint4 &b) {
    int xv[8] = {(int)a.x, (int)a.y, (int)a.z, (int)a.w, (int)b.x, (int)b.y, (int)b.z, (int)b.w};
    int d = 0;
    if (BITS == 4) {
        int h = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            d = __dp4a((int)(w[j] & 0x0F0F0F0Fu), xv[2 * j], d);
            h = dp4a_us(w[j] & 0xF0F0F0F0u, xv[2 * j + 1], h);
        }
        d += h >> 4; /* h is 16 times the high nibbles' sum */
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) d = __dp4a((int)(w[j] ^ 0x80808080u), xv[j], d);
    }
    return d;
}

template <int BITS> __device__ __forceinline__ int q8_dot(const uint32_t *w, const int8_t *xseg) {
    return q8_dot_x<BITS>(w, *(const uint4 *)xseg, *(const uint4 *)(xseg + 16));
}

/* Registers capped so that 3 blocks (2 for 8-bit codes and 4+ rows) share
 * a multiprocessor: a block's life is mostly waiting on its loads. */
template <int BITS, int ROWS>
__global__ void __launch_bounds__(Q8_WARPS * 32, BITS == 8 && ROWS >= 4 ? 2 : 3)
    qgemv_i8_kernel(float *y, const float *x, const uint32_t *w, const void *scales, const void *biases, int sdt,
                    const float *bias, int M, int N, int K, int group) {
    cuda_pdl_enter();
    __shared__ __align__(16) int8_t xq[ROWS][Q8_KC];
    __shared__ float xd[ROWS][Q8_KC / QG_SEG], xs[ROWS][Q8_KC / QG_SEG];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int n0 = (blockIdx.x * Q8_WARPS + warp) * Q8_RW;
    size_t words_per_row = (size_t)K / 32 * BITS, groups_per_row = (size_t)(K / group);
    const uint32_t *wr[Q8_RW];
    size_t g0[Q8_RW];
#pragma unroll
    for (int r = 0; r < Q8_RW; r++) {
        int n = n0 + r < N ? n0 + r : (n0 < N ? n0 : 0);
        wr[r] = w + (size_t)n * words_per_row;
        g0[r] = (size_t)n * groups_per_row;
    }
    float acc[Q8_RW][ROWS];
#pragma unroll
    for (int r = 0; r < Q8_RW; r++)
#pragma unroll
        for (int m = 0; m < ROWS; m++) acc[r][m] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += Q8_KC) {
        int kc = K - k0 < Q8_KC ? K - k0 : Q8_KC;
        uint32_t words[Q8_RW][Q8_SPL][BITS];
        float sc[Q8_RW][Q8_SPL], bi[Q8_RW][Q8_SPL];
#pragma unroll
        for (int p = 0; p < Q8_SPL; p++) {
            int ls = p * 32 + lane;
            if (ls * QG_SEG < kc && n0 < N) {
                size_t seg = (size_t)(k0 / QG_SEG + ls);
#pragma unroll
                for (int r = 0; r < Q8_RW; r++) {
                    size_t gi = g0[r] + seg * QG_SEG / group;
                    load_segment<BITS>(wr[r], seg, words[r][p]);
                    sc[r][p] = q_scalar(scales, sdt, gi);
                    bi[r][p] = q_scalar(biases, sdt, gi);
                }
            }
        }
        __syncthreads(); /* the previous chunk has been consumed */
        q8_stage<BITS, ROWS>(&xq[0][0], &xd[0][0], &xs[0][0], Q8_KC, x, K, k0, kc, M);
        __syncthreads();
        if (n0 >= N) continue;
#pragma unroll
        for (int p = 0; p < Q8_SPL; p++) {
            int ls = p * 32 + lane;
            if (ls * QG_SEG >= kc) break;
#pragma unroll
            for (int m = 0; m < ROWS; m++) {
                if (m >= M) break;
                float dx = xd[m][ls], sx = xs[m][ls];
#pragma unroll
                for (int r = 0; r < Q8_RW; r++) {
                    int d = q8_dot<BITS>(words[r][p], xq[m] + ls * QG_SEG);
                    float b = BITS == 8 ? fmaf(128.0f, sc[r][p], bi[r][p]) : bi[r][p];
                    acc[r][m] = fmaf(sc[r][p] * dx, (float)d, fmaf(b, sx, acc[r][m]));
                }
            }
        }
    }
    if (n0 >= N) return;
    cuda_warp_sums<Q8_RW, ROWS>(acc);
#pragma unroll
    for (int r = 0; r < Q8_RW; r++)
#pragma unroll
        for (int m = 0; m < ROWS; m++)
            if (lane == (r * ROWS + m) % 32 && m < M && n0 + r < N)
                y[(size_t)m * N + n0 + r] = acc[r][m] + (bias ? bias[n0 + r] : 0.0f);
}

/* One or two activation rows: the whole of x is staged once per block, and
 * the block's warps then stream weight rows (RW at a time, a grid-stride
 * over the matrix) with 128 bytes of codes in flight per lane (RW rows of
 * 8 / RW segments for 4-bit codes; half as many segments for 8-bit ones)
 * and no further barrier. The grid is a few blocks per multiprocessor, so
 * the staging is paid a few hundred times, not once per 16 rows. RW is 4
 * where the matrices have rows enough to give every warp of the grid a
 * unit, else 2 or 1: four rows a warp left half the multiprocessors idle
 * for the 1B's o and down projections (64 blocks). A lane takes the same
 * segments in the same order whatever RW is, so the bits do not depend
 * on it. */
#define Q8_STREAM_BLOCKS_PER_SM 2

/* Where a warp's unit of RW rows lies: matrix g, its first row n0 of Ng,
 * its words and the index of its first group. The warps walk units of RW
 * rows of one matrix: matrix g's rows padded to a whole number of units,
 * so a unit never straddles two. */
struct q8s_unit {
    int g, n0, Ng;
    const uint32_t *w0;
    size_t gbase;
};
template <int RW, bool SWI>
__device__ __forceinline__ q8s_unit q8s_locate(const gemv_set &set, int unit, size_t words_per_row,
                                               size_t groups_per_row) {
    q8s_unit u;
    if (SWI) { /* row `unit` of the gate (set.w[0]) and of the up projection (set.w[1]) */
        u.g = 0, u.n0 = unit, u.Ng = set.start[1];
        u.w0 = NULL, u.gbase = (size_t)unit * groups_per_row;
        return u;
    }
    int us = 0;
    u.g = 0;
    for (;;) {
        int n = (set.start[u.g + 1] - set.start[u.g] + RW - 1) / RW;
        if (u.g + 1 >= set.count || unit < us + n) break;
        us += n, u.g++;
    }
    u.n0 = (unit - us) * RW, u.Ng = set.start[u.g + 1] - set.start[u.g];
    u.w0 = (const uint32_t *)set.w[u.g] + (size_t)u.n0 * words_per_row;
    u.gbase = (size_t)u.n0 * groups_per_row;
    return u;
}

/* Issues the loads of Q8_U segments from s0 (every 32nd) of the unit's rows:
 * their codes, scales and biases. */
template <int BITS, int Q8_U, int RW, bool SWI>
__device__ __forceinline__ void q8s_load(const gemv_set &set, const q8s_unit &u, int s0, int nseg, int sdt,
                                         size_t words_per_row, size_t groups_per_row, int group,
                                         uint32_t (*words)[Q8_U][BITS], float (*sc)[Q8_U], float (*bi)[Q8_U]) {
#pragma unroll
    for (int v = 0; v < Q8_U; v++) {
        int seg = s0 + v * 32;
        if (seg >= nseg) continue;
#pragma unroll
        for (int r = 0; r < RW; r++) {
            int rr = SWI || u.n0 + r < u.Ng ? r : 0; /* rows past the matrix reread its unit's first */
            size_t gi = u.gbase + (SWI ? 0 : (size_t)rr * groups_per_row) + (size_t)seg * QG_SEG / group;
            const uint32_t *row = SWI ? (const uint32_t *)set.w[r] + (size_t)u.n0 * words_per_row
                                      : u.w0 + (size_t)rr * words_per_row;
            load_segment<BITS>(row, (size_t)seg, words[r][v]);
            sc[r][v] = q_scalar(set.scales[SWI ? r : u.g], sdt, gi);
            bi[r][v] = q_scalar(set.biases[SWI ? r : u.g], sdt, gi);
        }
    }
}

/* Units of RW rows in the set. */
__host__ __device__ __forceinline__ int q8s_units(const gemv_set &set, int rw) {
    int units = 0;
    for (int g = 0; g < set.count; g++) units += (set.start[g + 1] - set.start[g] + rw - 1) / rw;
    return units;
}

/* SWI: the set is an MLP's gate and up projections; a warp's unit is row n
 * of both (RW 2), and it stores silu(gate) * up as swiglu_kernel computes
 * it, into set.y[0] ([M, N]). */
template <int BITS, int ROWS, int RW, bool SWI>
__global__ void __launch_bounds__(Q8_WARPS * 32, Q8_STREAM_BLOCKS_PER_SM)
    qgemv_i8_stream_kernel(gemv_set set, const float *x, int sdt, int M, int K, int group) {
    static_assert(!SWI || RW == 2, "a SwiGLU unit is one row of the gate and one of the up projection");
    constexpr int Q8_U = (BITS == 8 ? 4 : 8) / RW; /* segments in flight per row and lane */
    extern __shared__ __align__(16) int8_t q8_smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nseg = K / QG_SEG;
    size_t words_per_row = (size_t)K / 32 * BITS, groups_per_row = (size_t)(K / group);
    int units = SWI ? set.start[1] : q8s_units(set, RW);
    /* The weights never depend on the kernel before this one: the first
     * unit's first loads go out before waiting for it (and before x is
     * staged), so their latency hides behind its end. */
    int first = blockIdx.x * Q8_WARPS + warp;
    uint32_t words[RW][Q8_U][BITS];
    float sc[RW][Q8_U], bi[RW][Q8_U];
    bool loaded = first < units;
    if (loaded)
        q8s_load<BITS, Q8_U, RW, SWI>(set, q8s_locate<RW, SWI>(set, first, words_per_row, groups_per_row), lane,
                                      nseg, sdt, words_per_row, groups_per_row, group, words, sc, bi);
    cuda_pdl_enter();
    int8_t *xq = q8_smem;
    float *xd = (float *)(q8_smem + (size_t)ROWS * K), *xs = xd + (size_t)ROWS * (K / QG_SEG);
    q8_stage<BITS, ROWS>(xq, xd, xs, K, x, K, 0, K, M);
    __syncthreads();
    for (int unit = first; unit < units; unit += gridDim.x * Q8_WARPS) {
        q8s_unit u = q8s_locate<RW, SWI>(set, unit, words_per_row, groups_per_row);
        float acc[RW][ROWS];
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int m = 0; m < ROWS; m++) acc[r][m] = 0.0f;
        for (int s0 = lane; s0 < nseg; s0 += 32 * Q8_U) {
            if (!loaded)
                q8s_load<BITS, Q8_U, RW, SWI>(set, u, s0, nseg, sdt, words_per_row, groups_per_row, group, words, sc,
                                              bi);
            loaded = false;
#pragma unroll
            for (int v = 0; v < Q8_U; v++) {
                int seg = s0 + v * 32;
                if (seg >= nseg) break;
#pragma unroll
                for (int m = 0; m < ROWS; m++) {
                    if (m >= M) break;
                    float dx = xd[m * (K / QG_SEG) + seg], sx = xs[m * (K / QG_SEG) + seg];
                    const int8_t *xseg = xq + (size_t)m * K + (size_t)seg * QG_SEG;
                    uint4 xa = *(const uint4 *)xseg, xb = *(const uint4 *)(xseg + 16);
#pragma unroll
                    for (int r = 0; r < RW; r++) {
                        int d = q8_dot_x<BITS>(words[r][v], xa, xb);
                        float b = BITS == 8 ? fmaf(128.0f, sc[r][v], bi[r][v]) : bi[r][v];
                        acc[r][m] = fmaf(sc[r][v] * dx, (float)d, fmaf(b, sx, acc[r][m]));
                    }
                }
            }
        }
        cuda_warp_sums<RW, ROWS>(acc);
        if (SWI) {
            const float *bg = set.bias[0], *bu = set.bias[1];
#pragma unroll
            for (int m = 0; m < ROWS; m++)
                if (lane == m && m < M) {
                    float g = acc[0][m] + (bg ? bg[u.n0] : 0.0f), up = acc[1][m] + (bu ? bu[u.n0] : 0.0f);
                    set.y[0][(size_t)m * u.Ng + u.n0] = g / (1.0f + expf(-g)) * up;
                }
            continue;
        }
        const float *bias = set.bias[u.g];
#pragma unroll
        for (int r = 0; r < RW; r++) {
            if (u.n0 + r >= u.Ng) break;
#pragma unroll
            for (int m = 0; m < ROWS; m++)
                if (lane == (r * ROWS + m) % 32 && m < M)
                    set.y[u.g][(size_t)m * u.Ng + u.n0 + r] = acc[r][m] + (bias ? bias[u.n0 + r] : 0.0f);
        }
    }
}

/* Shared memory of the streaming kernel for ROWS rows of K activations. */
static size_t q8_stream_smem(int rows, int K) { return (size_t)rows * ((size_t)K + (size_t)K / QG_SEG * 8); }

template <int BITS, int ROWS, int RW, bool SWI = false>
static void q8s_launch(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M) {
    int K = (int)w0->cols, units = SWI ? set.start[1] : q8s_units(set, RW);
    int blocks = (units + Q8_WARPS - 1) / Q8_WARPS;
    int most = cb->n_sm * Q8_STREAM_BLOCKS_PER_SM;
    cuda_launch(qgemv_i8_stream_kernel<BITS, ROWS, RW, SWI>, (unsigned)(blocks < most ? blocks : most), Q8_WARPS * 32,
                q8_stream_smem(ROWS, K), cb->stream, set, x, (int)w0->scale_dtype, M, K, w0->group_size);
}

/* Rounds of loads a warp waits on for RW rows a warp: the units each warp
 * of the grid takes, times the passes over a row (32 lanes take Q8_U
 * segments each per pass). */
static int q8s_rounds(const gemv_set &set, int rw, int bits, int K, int n_sm) {
    int units = q8s_units(set, rw), most = n_sm * Q8_STREAM_BLOCKS_PER_SM;
    int blocks = (units + Q8_WARPS - 1) / Q8_WARPS, warps = (blocks < most ? blocks : most) * Q8_WARPS;
    int per_pass = 32 * ((bits == 8 ? 4 : 8) / rw), nseg = K / QG_SEG;
    return ((units + warps - 1) / warps) * ((nseg + per_pass - 1) / per_pass);
}

/* w0: the set's first weight (they share bits, cols, group and scale
 * dtype). Rows per warp: those that make the fewest rounds of loads, the
 * most rows at a tie (fewer blocks stage x). Measured on the 1B's down
 * projection (2,048 rows of 8,192): four rows a warp gave 64 blocks of
 * four rounds each. */
template <int BITS, int ROWS>
static void qgemv_i8_stream_set(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M) {
    int K = (int)w0->cols, r4 = q8s_rounds(set, 4, BITS, K, cb->n_sm), r2 = q8s_rounds(set, 2, BITS, K, cb->n_sm),
        r1 = q8s_rounds(set, 1, BITS, K, cb->n_sm);
    if (r4 <= r2 && r4 <= r1) q8s_launch<BITS, ROWS, 4>(cb, set, w0, x, M);
    else if (r2 <= r1) q8s_launch<BITS, ROWS, 2>(cb, set, w0, x, M);
    else q8s_launch<BITS, ROWS, 1>(cb, set, w0, x, M);
    CUDA_LAUNCHED(cb, "quantized matmul (int8 gemv)");
}

template <bool SWI = false>
static bool qp_set(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M);

template <int BITS, int ROWS>
static void qgemv_i8_stream(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    float *ys[1] = {y};
    const float *bs[1] = {bias};
    gemv_set set = gemv_set_make(1, ys, &w, bs);
    if (!qp_set(cb, set, w, x, M)) qgemv_i8_stream_set<BITS, ROWS>(cb, set, w, x, M);
}

/* ---- The pipelined streaming kernel ----
 *
 * One or two activation rows, x staged whole per block as above, but the
 * weights reach the warps through shared memory: each warp keeps a ring of
 * qp_geom::NS stages of its rows in flight, a stage being SL lines of one
 * row with their scales and biases, so a multiprocessor has over 100 KB of
 * weights on the way whatever its arithmetic is doing, and the first
 * stages go out before the kernel waits for the one before it.
 *
 * A stage is three bulk copies (cp.async.bulk: the codes, the scales, the
 * biases; a row's lines, scales and biases are each contiguous in memory)
 * that one lane issues and a transaction barrier counts in. An earlier
 * form had every lane copy its 16 bytes of each line (cp.async), about as
 * many issue slots as the dot products (ncu: 0.9 issued a scheduler a
 * cycle); the bulk copies took the 8B 4-bit decode from 500 to 513 tok/s
 * on the H200, its 8-bit from 350 to 357, the 1B 4-bit 1,546 to 1,590.
 *
 * A line is 32 consecutive segments of one weight row, lane l the l-th
 * (512 bytes of 4-bit codes, 1 KB of 8-bit ones). A row of K inputs is
 * ceil(K / 1024) lines, its stages ceil(lines / SL) (a stage never spans
 * two rows). Each warp owns a run of whole rows (the set's rows in order,
 * or an MLP's gate row n then up row n), the warps of the grid getting
 * equal shares to within a row, and takes its rows' lines in order. A lane
 * so sums segments l, l + 32, ... of a row in ascending order, and the
 * warp sums the lanes by the butterfly: qgemv_i8_kernel's sums, bit for
 * bit. */
#ifndef QP_WARPS
/* a block, one block a multiprocessor; 16 with twice the ring measured
 * slower on the H200 (8B 4-bit layer 58 against 54 us, head 106 against 95) */
#define QP_WARPS 32
#endif
/* Lines a stage (2 KB of codes either way), measured on the H200 against
 * halves of them (8B 4-bit decode 513 against 477 tok/s; 8-bit 357 against
 * 354, the 1B's 1,353 against 1,312); 16 warps a block with the same
 * stages lost at 4 bits (479 tok/s) what they gained at 8. */
#ifndef QP_SL4
#define QP_SL4 4
#endif
#ifndef QP_SL8
#define QP_SL8 2
#endif

template <int BITS> struct qp_geom {
    static constexpr int SL = BITS == 4 ? QP_SL4 : QP_SL8;                /* lines a stage */
    static constexpr int NS = (BITS == 4 ? 8 : 4) * 32 / QP_WARPS / SL; /* stages a ring: 4 KB of codes a warp */
    static constexpr int SEGB = BITS * 4;                                 /* bytes of a lane's codes a line */
    static constexpr int LB = 32 * SEGB;                                  /* bytes of a line's codes */
};

struct qp_args {
    gemv_set set;
    const float *x;
    int M, K, lg;  /* activation rows, inputs, log2 of the group size */
    int nseg, lpr; /* segments and lines of a row */
    int rowb, rsb; /* bytes of a row's codes, and of its scales */
    int scb;       /* bytes of a whole line's scales */
    int items;     /* the set's rows, or an MLP's N */
};

/* Shared memory by 32-bit address: the loop's places stay plain integers. */
__device__ __forceinline__ unsigned qp_sa(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ uint4 qp_ld16(unsigned a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ float2 qp_ld8(unsigned a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}
template <int SDT> __device__ __forceinline__ float qp_scalar(unsigned a) {
    if (SDT == EM_F32) {
        float v;
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a));
        return v;
    }
    unsigned short h;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(a));
    return SDT == EM_F16 ? cuda_f16(h) : cuda_bf16(h);
}

/* The transaction barriers and bulk copies of sm_90 (the host takes this
 * kernel only there: cuda_backend.cu's qpipe_on). */
__device__ __forceinline__ void qp_bar_init(unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void qp_bar_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
__device__ __forceinline__ void qp_bar_expect(unsigned bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void qp_bulk(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}
__device__ __forceinline__ void qp_bar_wait(unsigned bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}

/* A warp's walk over its rows: row (item, half) of matrix g of the set
 * (SwiGLU: half 0 the gate, 1 the up projection); next() steps one row. */
struct qp_row {
    int item, half, g;
    template <bool SWI> __device__ __forceinline__ void next(const qp_args &a) {
        if (SWI) {
            item += half, half ^= 1, g = half;
        } else {
            item++;
            if (g + 1 < a.set.count && item >= a.set.start[g + 1]) g++;
        }
    }
};

template <bool SWI> __device__ __forceinline__ qp_row qp_row_at(const qp_args &a, int item) {
    qp_row r = {item, 0, SWI ? 0 : gemv_set_find(a.set, item)};
    return r;
}

/* Lane 0's side: queues the stage of row r from line j0 into a ring slot
 * (its codes at `codes`, scales then biases at `scls`), the three copies
 * counted in by the slot's barrier. */
template <int BITS, bool SWI>
__device__ __forceinline__ void qp_issue(const qp_args &a, const qp_row &r, int j0, unsigned codes, unsigned scls,
                                         unsigned bar) {
    constexpr int LB = qp_geom<BITS>::LB, SL = qp_geom<BITS>::SL;
    int n = SWI ? r.item : r.item - a.set.start[r.g];
    unsigned cb = (unsigned)min(SL * LB, a.rowb - j0 * LB), sb = (unsigned)min(SL * a.scb, a.rsb - j0 * a.scb);
    size_t so = (size_t)n * a.rsb + (size_t)j0 * a.scb;
    qp_bar_expect(bar, cb + 2 * sb);
    qp_bulk(codes, (const uint8_t *)a.set.w[r.g] + (size_t)n * a.rowb + (size_t)j0 * LB, cb, bar);
    qp_bulk(scls, (const uint8_t *)a.set.scales[r.g] + so, sb, bar);
    qp_bulk(scls + SL * a.scb, (const uint8_t *)a.set.biases[r.g] + so, sb, bar);
}

template <int BITS, int SDT, int ROWS, bool SWI>
__global__ void __launch_bounds__(QP_WARPS * 32, 1) qgemv_i8_pipe_kernel(qp_args a) {
    constexpr int SL = qp_geom<BITS>::SL, NS = qp_geom<BITS>::NS, SEGB = qp_geom<BITS>::SEGB;
    constexpr int LB = qp_geom<BITS>::LB, ES = SDT == EM_F32 ? 4 : 2;
    static_assert((NS & (NS - 1)) == 0, "a ring of a power of two stages");
    extern __shared__ __align__(16) uint8_t qp_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    /* per warp: NS stages of codes, NS of (scales, biases), NS barriers */
    const int ssb = 2 * SL * a.scb; /* a stage's scales and biases */
    const unsigned ring = qp_sa(qp_smem) + warp * NS * (SL * LB);
    const unsigned sring = qp_sa(qp_smem) + QP_WARPS * NS * (SL * LB) + warp * NS * ssb;
    const unsigned bars = qp_sa(qp_smem) + QP_WARPS * NS * (SL * LB + ssb) + warp * NS * 8;
    int8_t *const xq = (int8_t *)(qp_smem + (size_t)QP_WARPS * NS * (SL * LB + ssb + 8));
    float *const xd = (float *)(xq + (size_t)ROWS * a.K);
    long long W = (long long)gridDim.x * QP_WARPS, gw = (long long)blockIdx.x * QP_WARPS + warp;
    int it0 = (int)(gw * a.items / W), it1 = (int)((gw + 1) * a.items / W);
    const int spr = (a.lpr + SL - 1) / SL;              /* stages a row */
    const int stages = (it1 - it0) * (SWI ? 2 : 1) * spr; /* the warp's */
    /* lane 0 queues stage k (row pr, lines pj ..) into slot k % NS */
    qp_row pr = qp_row_at<SWI>(a, it0);
    int pj = 0, pk = 0;
    auto issue = [&]() {
        if (pk < stages) {
            int s = pk & (NS - 1);
            qp_issue<BITS, SWI>(a, pr, pj, ring + s * (SL * LB), sring + s * ssb, bars + s * 8);
            if ((pj += SL) >= a.lpr) pj = 0, pr.next<SWI>(a);
        }
        pk++;
    };
    if (lane == 0) {
        for (int s = 0; s < NS; s++) qp_bar_init(bars + s * 8);
        qp_bar_fence();
        /* the weights never depend on the kernel before this one */
        for (int s = 0; s < NS; s++) issue();
    }
    cuda_pdl_enter();
    q8_stage<BITS, ROWS, true>(xq, xd, NULL, a.K, a.x, a.K, 0, a.K, a.M);
    __syncthreads();
    const unsigned xl = qp_sa(xq) + lane * 16, dl = qp_sa(xd) + lane * 8; /* the lane's place in the staged x */
    const unsigned sl = (lane >> (a.lg - 5)) * ES;                        /* its group's scale in a line's */
    qp_row cr = qp_row_at<SWI>(a, it0);
    float acc[ROWS], gate[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; m++) acc[m] = gate[m] = 0.0f;
    int k = 0;
    for (int rows = stages / spr; rows > 0; rows--) {
        for (int j0 = 0; j0 < a.lpr; j0 += SL, k++) {
            const int s = k & (NS - 1);
            const unsigned codes = ring + s * (SL * LB) + lane * SEGB, scl = sring + s * ssb + sl;
            qp_bar_wait(bars + s * 8, (unsigned)(k / NS) & 1u);
#pragma unroll
            for (int jj = 0; jj < SL; jj++) {
                const int j = j0 + jj;
                if (SL > 1 && j >= a.lpr) break;
                if (j * 32 + lane >= a.nseg) continue; /* past a row's partial last line */
                uint32_t w[BITS];
                uint4 v = qp_ld16(codes + jj * LB);
                w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
                if (BITS == 8) {
                    uint4 u = qp_ld16(codes + jj * LB + 16);
                    w[4 % BITS] = u.x, w[5 % BITS] = u.y, w[6 % BITS] = u.z, w[7 % BITS] = u.w;
                }
                float sc = qp_scalar<SDT>(scl + jj * a.scb), bi = qp_scalar<SDT>(scl + (SL + jj) * a.scb);
                float b = BITS == 8 ? fmaf(128.0f, sc, bi) : bi;
#pragma unroll
                for (int m = 0; m < ROWS; m++) {
                    if (m >= a.M) break;
                    float2 ds = qp_ld8(dl + j * 256 + m * a.nseg * 8);
                    unsigned xm = xl + j * 512 + m * a.K;
                    uint4 x0 = qp_ld16(xm), x1 = qp_ld16(xm + a.K / 2);
                    int d = q8_dot_x<BITS>(w, x0, x1);
                    acc[m] = fmaf(sc * ds.x, (float)d, fmaf(b, ds.y, acc[m]));
                }
            }
            __syncwarp(); /* every lane is done with the slot before it is refilled */
            if (lane == 0) issue();
        }
        /* the row's sums are complete */
        float(*a2)[ROWS] = (float(*)[ROWS])acc;
        cuda_warp_sums<1, ROWS>(a2);
        if (SWI && cr.half == 0) {
#pragma unroll
            for (int m = 0; m < ROWS; m++) gate[m] = acc[m];
        } else if (SWI) {
            const float *bg = a.set.bias[0], *bu = a.set.bias[1];
#pragma unroll
            for (int m = 0; m < ROWS; m++)
                if (lane == m && m < a.M) {
                    float gv = gate[m] + (bg ? bg[cr.item] : 0.0f), up = acc[m] + (bu ? bu[cr.item] : 0.0f);
                    a.set.y[0][(size_t)m * a.items + cr.item] = gv / (1.0f + expf(-gv)) * up;
                }
        } else {
            const float *bias = a.set.bias[cr.g];
            int n = cr.item - a.set.start[cr.g], Ng = a.set.start[cr.g + 1] - a.set.start[cr.g];
#pragma unroll
            for (int m = 0; m < ROWS; m++)
                if (lane == m && m < a.M) a.set.y[cr.g][(size_t)m * Ng + n] = acc[m] + (bias ? bias[n] : 0.0f);
        }
#pragma unroll
        for (int m = 0; m < ROWS; m++) acc[m] = 0.0f;
        cr.next<SWI>(a);
    }
}

/* Shared memory of the pipelined kernel (0: it does not apply: scales
 * whose rows are no whole number of 16-byte chunks, or unaligned). */
template <int BITS>
static size_t qp_smem_bytes(const cuda_backend *cb, const gemv_set &set, const em_weight *w0, int rows) {
    int K = (int)w0->cols, es = (int)dtype_size(w0->scale_dtype), gpr = K / w0->group_size;
    if ((size_t)gpr * es % 16) return 0;
    for (int i = 0; i < set.count; i++)
        if (((uintptr_t)set.w[i] | (uintptr_t)set.scales[i] | (uintptr_t)set.biases[i]) & 15) return 0;
    using G = qp_geom<BITS>;
    size_t scb = (size_t)(1024 / w0->group_size * es);
    size_t bytes = (size_t)QP_WARPS * G::NS * (G::SL * (G::LB + 2 * scb) + 8) +
                   (size_t)rows * ((size_t)K + (size_t)K / QG_SEG * 8);
    return bytes <= (size_t)cb->smem_optin ? bytes : 0;
}

/* Blocks of the grid: one a multiprocessor, fewer for sets of few rows. */
static int qp_blocks(const cuda_backend *cb, int items) {
    int blocks = (items + QP_WARPS - 1) / QP_WARPS;
    return blocks < cb->n_sm ? blocks : cb->n_sm;
}

template <int BITS, int SDT, int ROWS, bool SWI>
static void qp_launch_sdt(cuda_backend *cb, const qp_args &a, size_t smem) {
    auto kernel = qgemv_i8_pipe_kernel<BITS, SDT, ROWS, SWI>;
    cuda_note(cb, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              "quantized matmul (int8 gemv): shared memory");
    cuda_launch(kernel, (unsigned)qp_blocks(cb, a.items), QP_WARPS * 32, smem, cb->stream, a);
    CUDA_LAUNCHED(cb, "quantized matmul (int8 gemv)");
}

/* Whether the warps of the grid get nearly equal work: a warp owns whole
 * rows, so 6,144 rows over 4,224 warps (the 8B shape's q/k/v) leave a
 * third of the warps two rows and the rest one, and the kernel ends with
 * the two-row warps: measured on the H200 with step graphs, 9.3 us against
 * the register-resident kernel's 8.1, which balances by rows a warp; with
 * at most one row a warp (o, down: 6.4 against 6.6 us, 15.5 against 19.7)
 * or many (the head: 110 against 130 us) it is the faster. */
static bool qp_balanced(const cuda_backend *cb, int items) {
    long long warps = (long long)qp_blocks(cb, items) * QP_WARPS;
    long long most = (items + warps - 1) / warps; /* rows of the busiest warp */
    return items <= warps || (double)most * (double)warps <= 1.2 * (double)items;
}

/* Queues the pipelined kernel; false (nothing queued) where it does not
 * apply. */
template <int BITS, int ROWS, bool SWI>
static bool qp_launch(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M) {
    size_t smem = qp_smem_bytes<BITS>(cb, set, w0, ROWS);
    if (!smem) return false;
    qp_args a;
    a.set = set, a.x = x, a.M = M, a.K = (int)w0->cols;
    a.lg = w0->group_size == 32 ? 5 : w0->group_size == 64 ? 6 : 7;
    int es = (int)dtype_size(w0->scale_dtype);
    a.nseg = a.K / QG_SEG, a.lpr = (a.nseg + 31) / 32;
    a.scb = (1024 >> a.lg) * es, a.rsb = (a.K >> a.lg) * es, a.rowb = a.K / 8 * BITS;
    a.items = SWI ? set.start[1] : set.start[set.count];
    if (!qp_balanced(cb, a.items)) return false;
    if (w0->scale_dtype == EM_BF16) qp_launch_sdt<BITS, EM_BF16, ROWS, SWI>(cb, a, smem);
    else if (w0->scale_dtype == EM_F16) qp_launch_sdt<BITS, EM_F16, ROWS, SWI>(cb, a, smem);
    else qp_launch_sdt<BITS, EM_F32, ROWS, SWI>(cb, a, smem);
    return true;
}

/* The pipelined kernel over the set (SWI: an MLP's gate and up, stored
 * as their SwiGLU), when it is on and applies. */
template <bool SWI>
static bool qp_set(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M) {
    if (!cb->qpipe_on) return false;
    if (w0->bits == 4) return M == 1 ? qp_launch<4, 1, SWI>(cb, set, w0, x, M) : qp_launch<4, 2, SWI>(cb, set, w0, x, M);
    return M == 1 ? qp_launch<8, 1, SWI>(cb, set, w0, x, M) : qp_launch<8, 2, SWI>(cb, set, w0, x, M);
}

bool cuda_qgemv_i8_set(cuda_backend *cb, const gemv_set *s, const em_weight *w0, const float *x, int M) {
    if ((w0->bits != 4 && w0->bits != 8) || M < 1 || M > 2 || w0->cols % 4 || !qweight_ok(w0) ||
        q8_stream_smem(2, (int)w0->cols) > Q8_STREAM_SMEM_MAX)
        return false;
    for (int i = 0; i < s->count; i++)
        if (!words_aligned(s->w[i], w0->bits)) return false;
    if (cb->graphs.mode) {
        cuda_graph_mix(cb, cuda_graph_word(x)), cuda_graph_mix(cb, (uint64_t)M), cuda_graph_mix(cb, (uint64_t)s->count);
        for (int i = 0; i < s->count; i++) {
            cuda_graph_mix(cb, cuda_graph_word(s->w[i])), cuda_graph_mix(cb, cuda_graph_word(s->y[i]));
            cuda_graph_mix(cb, cuda_graph_word(s->bias[i])), cuda_graph_mix(cb, cuda_graph_word(s->scales[i]));
            cuda_graph_mix(cb, (uint64_t)s->start[i + 1]);
        }
        cuda_graph_mix(cb, (uint64_t)w0->bits), cuda_graph_mix(cb, (uint64_t)w0->cols);
        if (cb->graphs.mode == 2 /* EM_GRAPH_REPLAY */) return true;
    }
    if (qp_set(cb, *s, w0, x, M)) return true;
    if (w0->bits == 4 && M == 1) qgemv_i8_stream_set<4, 1>(cb, *s, w0, x, M);
    else if (w0->bits == 4) qgemv_i8_stream_set<4, 2>(cb, *s, w0, x, M);
    else if (M == 1) qgemv_i8_stream_set<8, 1>(cb, *s, w0, x, M);
    else qgemv_i8_stream_set<8, 2>(cb, *s, w0, x, M);
    return true;
}

/* An MLP's gate and up projections over 4- or 8-bit weights and its
 * SwiGLU in one launch, for FAST decode rows (one or two): the streaming
 * kernel with a warp's unit row n of both, so neither product is written
 * and no third kernel reads them back. Each row's sum is the one the set's
 * GEMV gives it. False (nothing queued) where that kernel does not apply. */
bool cuda_qmatmul_swiglu(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                         const float *bg, const float *bu, em_math math) {
    if (math != EM_MATH_FAST || M < 1 || M > 2 || (wg->bits != 4 && wg->bits != 8) || wu->bits != wg->bits ||
        wg->rows != wu->rows || wg->cols != wu->cols || wg->group_size != wu->group_size ||
        wg->scale_dtype != wu->scale_dtype || wg->rows <= 0 || wg->cols % 4 || ((uintptr_t)x & 15) ||
        !qweight_ok(wg) || !qweight_ok(wu) || !words_aligned(wg->data, wg->bits) ||
        !words_aligned(wu->data, wu->bits) || q8_stream_smem(2, (int)wg->cols) > Q8_STREAM_SMEM_MAX)
        return false;
    cuda_backend *cb = cuda_enter(be);
    if (cuda_graph_skip(cb, out, x, M, wg->data, wu->data, wg->scales, wu->scales, wg->biases, wu->biases, bg, bu,
                        wg->bits, wg->rows, wg->cols))
        return true;
    float *ys[2] = {out, out};
    const em_weight *ws[2] = {wg, wu};
    const float *bs[2] = {bg, bu};
    gemv_set set = gemv_set_make(2, ys, ws, bs);
    if (qp_set<true>(cb, set, wg, x, M)) return true;
    if (wg->bits == 4 && M == 1) q8s_launch<4, 1, 2, true>(cb, set, wg, x, M);
    else if (wg->bits == 4) q8s_launch<4, 2, 2, true>(cb, set, wg, x, M);
    else if (M == 1) q8s_launch<8, 1, 2, true>(cb, set, wg, x, M);
    else q8s_launch<8, 2, 2, true>(cb, set, wg, x, M);
    CUDA_LAUNCHED(cb, "quantized matmul and swiglu (int8 gemv)");
    return true;
}

template <int BITS, int ROWS>
static void qgemv_i8_pass(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    int N = (int)w->rows, K = (int)w->cols, per_block = Q8_WARPS * Q8_RW;
    cuda_launch(qgemv_i8_kernel<BITS, ROWS>, (unsigned)((N + per_block - 1) / per_block), Q8_WARPS * 32, 0, cb->stream, 
        y, x, (const uint32_t *)w->data, w->scales, w->biases, (int)w->scale_dtype, bias, M, N, K, w->group_size);
    CUDA_LAUNCHED(cb, "quantized matmul (int8 gemv)");
}

template <int BITS>
static void qgemv_i8_launch(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    int N = (int)w->rows, K = (int)w->cols;
    for (int m0 = 0; m0 < M; m0 += Q8_MAX_M) {
        int mr = M - m0 < Q8_MAX_M ? M - m0 : Q8_MAX_M;
        float *ym = y + (size_t)m0 * N;
        const float *xm = x + (size_t)m0 * K;
        bool stream = q8_stream_smem(2, K) <= Q8_STREAM_SMEM_MAX;
        if (mr == 1 && stream) qgemv_i8_stream<BITS, 1>(cb, ym, xm, mr, w, bias);
        else if (mr == 2 && stream) qgemv_i8_stream<BITS, 2>(cb, ym, xm, mr, w, bias);
        else if (mr == 1) qgemv_i8_pass<BITS, 1>(cb, ym, xm, mr, w, bias);
        else if (mr == 2) qgemv_i8_pass<BITS, 2>(cb, ym, xm, mr, w, bias);
        else if (mr <= 4) qgemv_i8_pass<BITS, 4>(cb, ym, xm, mr, w, bias);
        else qgemv_i8_pass<BITS, 8>(cb, ym, xm, mr, w, bias);
    }
}

/* The int8 path, where it applies: 4-/8-bit codes with 16-byte aligned
 * rows, activations 16-byte aligned (float4 reads). */
bool cuda_qgemv_i8(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    if (!words_aligned(w->data, w->bits) || ((uintptr_t)x & 15) || w->cols % 4) return false;
    if (w->bits == 4) qgemv_i8_launch<4>(cb, y, x, M, w, bias);
    else if (w->bits == 8) qgemv_i8_launch<8>(cb, y, x, M, w, bias);
    else return false;
    return true;
}
