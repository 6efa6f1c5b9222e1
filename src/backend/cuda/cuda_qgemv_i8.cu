/* cuda_qgemv_i8.cu — FAST products of few rows (decode steps, short verify
 * spans) against 4- and 8-bit MLX affine weights (cuda_quant.cuh), in the
 * int8 arithmetic of cuda_q8.cuh. One or two rows go to the pipelined
 * kernel where it applies (cuda_qgemv_pipe.cu), else stream the weights
 * through every multiprocessor from registers (qgemv_i8_stream_kernel, which
 * also fuses an MLP's gate, up and SwiGLU); up to 8 rows a pass otherwise
 * (qgemv_i8_kernel).
 *
 * qgemv_i8_kernel: a block of Q8_WARPS warps owns Q8_RW weight rows per
 * warp. Per chunk of Q8_KC columns every lane first issues the loads of its
 * segments (weights, scales, biases), then the block stages the chunk's
 * activations in shared memory as int8, then computes, so the staging hides
 * under the loads. For three rows or more the activations are rounded once
 * for the whole grid first (q8_round_kernel) and each block copies its
 * chunk's codes, scales and sums: every block rounding eight rows itself
 * read four times the weights' bytes and spent more on the rounding than on
 * the dot products (4-bit decode of eight sequences, 1B shape on an H100:
 * 2,399 tok/s against 1,603 for one). The copy holds the bits the block
 * would have computed (the same q8_stage, over the same 32-value
 * segments). */
#include "backend/cuda/cuda_q8.cuh"

#define Q8_WARPS 8
#define Q8_RW 2
#define Q8_KC 2048
#define Q8_SPL (Q8_KC / QG_SEG / 32) /* segments per lane per chunk */
#define Q8_MAX_M CUDA_Q8_MAX_M
#define Q8_STREAM_SMEM_MAX ((size_t)48 << 10) /* without opting in to more */

/* Rounded activations for the whole grid: row m's codes at q.x + m * K
 * (each chunk of Q8_KC laid out as q8_stage lays it out), its per-32
 * scales and sums at q.d and q.s + m * K / 32. */
struct q8_rounded {
    int8_t *x;
    float *d, *s;
};

/* Block (chunk, row) rounds one chunk of one row, as qgemv_i8_kernel's
 * q8_stage would. */
template <int BITS> __global__ void q8_round_kernel(q8_rounded q, const float *x, int K) {
    cuda_pdl_enter();
    int m = blockIdx.y, k0 = blockIdx.x * Q8_KC, kc = K - k0 < Q8_KC ? K - k0 : Q8_KC;
    size_t seg0 = ((size_t)m * K + k0) / QG_SEG;
    q8_stage<BITS, 1>(q.x + (size_t)m * K + k0, q.d + seg0, q.s + seg0, K, x + (size_t)m * K, K, k0, kc, 1);
}

/* Copies chunk k0 (kc columns) of rows [0, mr) of the rounded activations
 * into the block's staging (row stride cap bytes, cap / 32 floats). */
template <int ROWS>
__device__ __forceinline__ void q8_copy_rounded(int8_t *xq, float *xd, float *xs, int cap, const q8_rounded &q, int K,
                                                int k0, int kc, int mr) {
    int v16 = kc / 16, segs = kc / QG_SEG;
#pragma unroll
    for (int m = 0; m < ROWS; m++) {
        if (m >= mr) break;
        const uint4 *src = (const uint4 *)(q.x + (size_t)m * K + k0);
        for (int i = threadIdx.x; i < v16; i += blockDim.x) ((uint4 *)(xq + (size_t)m * cap))[i] = __ldcg(src + i);
        size_t seg0 = ((size_t)m * K + k0) / QG_SEG;
        for (int i = threadIdx.x; i < segs; i += blockDim.x) {
            xd[m * (cap / QG_SEG) + i] = __ldcg(q.d + seg0 + i);
            xs[m * (cap / QG_SEG) + i] = __ldcg(q.s + seg0 + i);
        }
    }
}

/* Registers capped so that 3 blocks (2 for 8-bit codes and 4+ rows) share
 * a multiprocessor: a block's life is mostly waiting on its loads. */
template <int BITS, int ROWS>
__global__ void __launch_bounds__(Q8_WARPS * 32, BITS == 8 && ROWS >= 4 ? 2 : 3)
    qgemv_i8_kernel(float *y, const float *x, const uint32_t *w, const void *scales, const void *biases, int sdt,
                    const float *bias, int M, int N, int K, int group, q8_rounded rq) {
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
        if (rq.x) q8_copy_rounded<ROWS>(&xq[0][0], &xd[0][0], &xs[0][0], Q8_KC, rq, K, k0, kc, M);
        else q8_stage<BITS, ROWS>(&xq[0][0], &xd[0][0], &xs[0][0], Q8_KC, x, K, k0, kc, M);
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
 * it, into set.y[0] ([M, N]). nm.gain set: over the rows normed by nm
 * (q8_stage). */
template <int BITS, int ROWS, int RW, bool SWI>
__global__ void __launch_bounds__(Q8_WARPS * 32, Q8_STREAM_BLOCKS_PER_SM)
    qgemv_i8_stream_kernel(gemv_set set, const float *x, int sdt, int M, int K, int group, gemv_norm nm) {
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
    float *red = xs + (size_t)ROWS * (K / QG_SEG), inv[ROWS];
    q8_stage<BITS, ROWS>(xq, xd, xs, K, x, K, 0, K, M, nm, red);
    __syncthreads();
    q8_norm_inv<ROWS>(inv, nm, red, M, K);
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
                    float g = acc[0][m] * inv[m] + (bg ? bg[u.n0] : 0.0f);
                    float up = acc[1][m] * inv[m] + (bu ? bu[u.n0] : 0.0f);
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
                    gemv_store(set.y[u.g] + (size_t)m * u.Ng + u.n0 + r,
                               acc[r][m] * inv[m] + (bias ? bias[u.n0 + r] : 0.0f), set.add);
        }
    }
}

/* Shared memory of the streaming kernel for ROWS rows of K activations
 * (and the norm's sums of each warp). */
static size_t q8_stream_smem(int rows, int K) {
    return (size_t)rows * ((size_t)K + (size_t)K / QG_SEG * 8 + Q8_WARPS * 4);
}

template <int BITS, int ROWS, int RW, bool SWI = false>
static void q8s_launch(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M,
                       const gemv_norm &nm) {
    int K = (int)w0->cols, units = SWI ? set.start[1] : q8s_units(set, RW);
    int blocks = (units + Q8_WARPS - 1) / Q8_WARPS;
    int most = cb->n_sm * Q8_STREAM_BLOCKS_PER_SM;
    cuda_launch(qgemv_i8_stream_kernel<BITS, ROWS, RW, SWI>, (unsigned)(blocks < most ? blocks : most), Q8_WARPS * 32,
                q8_stream_smem(ROWS, K), cb->stream, set, x, (int)w0->scale_dtype, M, K, w0->group_size, nm);
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
static void qgemv_i8_stream_set(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M,
                                const gemv_norm &nm = gemv_norm{}) {
    int K = (int)w0->cols, r4 = q8s_rounds(set, 4, BITS, K, cb->n_sm), r2 = q8s_rounds(set, 2, BITS, K, cb->n_sm),
        r1 = q8s_rounds(set, 1, BITS, K, cb->n_sm);
    if (r4 <= r2 && r4 <= r1) q8s_launch<BITS, ROWS, 4>(cb, set, w0, x, M, nm);
    else if (r2 <= r1) q8s_launch<BITS, ROWS, 2>(cb, set, w0, x, M, nm);
    else q8s_launch<BITS, ROWS, 1>(cb, set, w0, x, M, nm);
    CUDA_LAUNCHED(cb, "quantized matmul (int8 gemv)");
}

template <int BITS, int ROWS>
static void qgemv_i8_stream(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    float *ys[1] = {y};
    const float *bs[1] = {bias};
    gemv_set set = gemv_set_make(1, ys, &w, bs);
    if (!cuda_qpipe_set(cb, set, w, x, M, false, gemv_norm{})) qgemv_i8_stream_set<BITS, ROWS>(cb, set, w, x, M);
}

bool cuda_qgemv_i8_fits(const gemv_set *s, const em_weight *w0, const float *x, int M) {
    if ((w0->bits != 4 && w0->bits != 8) || M < 1 || M > 2 || w0->cols % 4 || ((uintptr_t)x & 15) ||
        !qweight_ok(w0) || q8_stream_smem(2, (int)w0->cols) > Q8_STREAM_SMEM_MAX)
        return false;
    for (int i = 0; i < s->count; i++)
        if (!words_aligned(s->w[i], w0->bits)) return false;
    return true;
}

bool cuda_qgemv_i8_set(cuda_backend *cb, const gemv_set *s, const em_weight *w0, const float *x, int M, gemv_norm nm) {
    if (!cuda_qgemv_i8_fits(s, w0, x, M)) return false;
    if (cb->graphs.mode) {
        cuda_graph_mix(cb, cuda_graph_word(x)), cuda_graph_mix(cb, (uint64_t)M), cuda_graph_mix(cb, (uint64_t)s->count);
        for (int i = 0; i < s->count; i++) {
            cuda_graph_mix(cb, cuda_graph_word(s->w[i])), cuda_graph_mix(cb, cuda_graph_word(s->y[i]));
            cuda_graph_mix(cb, cuda_graph_word(s->bias[i])), cuda_graph_mix(cb, cuda_graph_word(s->scales[i]));
            cuda_graph_mix(cb, (uint64_t)s->start[i + 1]);
        }
        cuda_graph_mix(cb, (uint64_t)w0->bits), cuda_graph_mix(cb, (uint64_t)w0->cols);
        cuda_graph_mix(cb, (uint64_t)s->add), cuda_graph_mix(cb, cuda_graph_word(nm.gain));
        cuda_graph_mix(cb, cuda_graph_word(nm.goff)), cuda_graph_mix(cb, cuda_graph_word(nm.eps));
        if (cb->graphs.mode == 2 /* EM_GRAPH_REPLAY */) return true;
    }
    if (cuda_qpipe_set(cb, *s, w0, x, M, false, nm)) return true;
    if (w0->bits == 4 && M == 1) qgemv_i8_stream_set<4, 1>(cb, *s, w0, x, M, nm);
    else if (w0->bits == 4) qgemv_i8_stream_set<4, 2>(cb, *s, w0, x, M, nm);
    else if (M == 1) qgemv_i8_stream_set<8, 1>(cb, *s, w0, x, M, nm);
    else qgemv_i8_stream_set<8, 2>(cb, *s, w0, x, M, nm);
    return true;
}

/* An MLP's gate and up projections over 4- or 8-bit weights and its
 * SwiGLU in one launch, for FAST decode rows (one or two): the streaming
 * kernel with a warp's unit row n of both, so neither product is written
 * and no third kernel reads them back. Each row's sum is the one the set's
 * GEMV gives it. False (nothing queued) where that kernel does not apply. */
bool cuda_qmatmul_swiglu(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                         const float *bg, const float *bu, em_math math, gemv_norm nm) {
    float *ys[2] = {out, out};
    const em_weight *ws[2] = {wg, wu};
    const float *bs[2] = {bg, bu};
    gemv_set set = gemv_set_make(2, ys, ws, bs);
    if (math != EM_MATH_FAST || wu->bits != wg->bits || wg->rows != wu->rows || wg->cols != wu->cols ||
        wg->group_size != wu->group_size || wg->scale_dtype != wu->scale_dtype || wg->rows <= 0 || !qweight_ok(wu) ||
        !cuda_qgemv_i8_fits(&set, wg, x, M))
        return false;
    cuda_backend *cb = cuda_enter(be);
    if (cuda_graph_skip(cb, out, x, M, wg->data, wu->data, wg->scales, wu->scales, wg->biases, wu->biases, bg, bu,
                        wg->bits, wg->rows, wg->cols, nm.gain, nm.goff, nm.eps))
        return true;
    if (cuda_qpipe_set(cb, set, wg, x, M, true, nm)) return true;
    if (wg->bits == 4 && M == 1) q8s_launch<4, 1, 2, true>(cb, set, wg, x, M, nm);
    else if (wg->bits == 4) q8s_launch<4, 2, 2, true>(cb, set, wg, x, M, nm);
    else if (M == 1) q8s_launch<8, 1, 2, true>(cb, set, wg, x, M, nm);
    else q8s_launch<8, 2, 2, true>(cb, set, wg, x, M, nm);
    CUDA_LAUNCHED(cb, "quantized matmul and swiglu (int8 gemv)");
    return true;
}

/* Rounds the M rows of x once for a pass (three rows or more: see
 * qgemv_i8_kernel); NULLs (each block rounds its own) for fewer rows, or
 * where the scratch cannot be had (noted). Recorded steps use the scratch:
 * growing it forgets them (cuda_scratch). */
template <int BITS> static q8_rounded q8_round(cuda_backend *cb, const float *x, int M, int K) {
    q8_rounded q = {NULL, NULL, NULL};
    size_t codes = ((size_t)M * K + 15) & ~(size_t)15, segs = (size_t)M * K / QG_SEG;
    if (M < 3 || K % 32 || !cuda_scratch(cb, &cb->q8x, &cb->q8x_bytes, codes + 2 * segs * sizeof(float))) return q;
    q.x = (int8_t *)cb->q8x, q.d = (float *)((uint8_t *)cb->q8x + codes), q.s = q.d + segs;
    cuda_launch(q8_round_kernel<BITS>, dim3((unsigned)((K + Q8_KC - 1) / Q8_KC), (unsigned)M), Q8_WARPS * 32, 0,
                cb->stream, q, x, K);
    CUDA_LAUNCHED(cb, "quantized matmul (int8 gemv): rounding the activations");
    return q;
}

template <int BITS, int ROWS>
static void qgemv_i8_pass(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias) {
    int N = (int)w->rows, K = (int)w->cols, per_block = Q8_WARPS * Q8_RW;
    q8_rounded rq = q8_round<BITS>(cb, x, M, K);
    cuda_launch(qgemv_i8_kernel<BITS, ROWS>, (unsigned)((N + per_block - 1) / per_block), Q8_WARPS * 32, 0, cb->stream,
                y, x, (const uint32_t *)w->data, w->scales, w->biases, (int)w->scale_dtype, bias, M, N, K,
                w->group_size, rq);
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
