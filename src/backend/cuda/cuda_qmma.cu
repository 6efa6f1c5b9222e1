/* cuda_qmma.cu — FAST products of CUDA_QMMA_MIN_M .. CUDA_QMMA_MAX_M
 * activation rows (a decode step of that many sequences, a short prefill)
 * over 4- and 8-bit MLX affine weights, on int8 tensor cores. Where it
 * applies, 4-bit weights go to the bf16 tensor-core kernel (cuda_qtc.cu)
 * instead, which was faster there; 8-bit ones stay here.
 *
 * Without it such a product dequantized every matrix to bf16 for cuBLAS:
 * the codes read once, their bf16 copy written and read back, eight times
 * the 4-bit codes' bytes (and the int8 GEMV, which reads them once, takes
 * eight rows a pass on dp4a). Here the codes are read once for all the
 * rows and the integer dot products are mma.sync m16n8k32 (int8 in, int32
 * out): 16 activation rows are the A operand, 8 weight rows the B operand,
 * straight from the loads into registers. No shared memory, no shuffles.
 *
 * The arithmetic is the int8 regime of the GEMV (cuda_q8.cuh) and of the
 * CPU's int8 GEMM (quant_gemm_vnni.c): the activations rounded to int8 per
 * 32 values by the same q8_stage, and for a weight row's group g of scale
 * s_g and bias b_g,
 *   y += s_g * sum_{b in g} dx_b * sum_{k in b} x8_k * q'_k + b'_g * sum_{k in g} x_k
 * (8-bit codes centred, q' = q - 128, b' = b + 128 s). One mma gives the
 * integer sums of one 32-value segment for 16 x 8 (activation, weight)
 * pairs. A dot product does not care in which order its k run as long as
 * both operands agree: lane (g, t) holds word t of the segment of weight
 * row g; at 4 bits its low nibbles are the segment's values 8t, 8t+2,
 * 8t+4, 8t+6 and its high nibbles the odd ones, fed as fragment slots
 * 4t..4t+3 and 16+4t..16+4t+3, and q8_stage lays each 8 activations out
 * evens first, so the lane's A fragment of an activation row is bytes
 * 8t..8t+7 of its staged segment, one 8-byte load; at 8 bits words 2t and
 * 2t+1 against the activations in order.
 *
 * The activations are rounded once for the grid (qmma_round_kernel). A
 * block owns 16 weight rows, its warps one stretch of K each
 * (cuda_skinny_split); a warp requests the codes and activations of a
 * batch of segments together, and the next batch before computing one (the
 * first batch's codes before waiting for the kernel before it: weights
 * never depend on it). The warps' sums are added by a fixed tree
 * (tc_reduce_warps): every output is one lane's chain over its stretch's
 * segments in order, then the tree, whatever M, so a row's result is the
 * same bits in any batch this kernel takes, run after run. */
#include "backend/cuda/cuda_q8.cuh"

#define QM_ROUND_KC 2048 /* columns a block of the rounding kernel takes */
#define QM_ROUND_THREADS 256

/* Rounded activations: row m's codes at x + m * K (q8_stage's layout),
 * segment s's (scale, sum) of row m at ds[s * mp + m], mp the rows padded
 * to a multiple of 8 (the padding's pairs zero). */
struct qmma_rounded {
    int8_t *x;
    float2 *ds;
    int mp;
};

/* One matrix's product, as a block sees it. */
struct qmma_args {
    const uint32_t *w;
    const void *scales, *biases;
    const float *bias;
    float *y;
    qmma_rounded q;
    int M, N, K, lg, sdt; /* lg: log2 of the group size */
    bool add;
};

/* A launch: matrix i (of count, alike but for their rows) takes blocks
 * block[i] .. block[i + 1] - 1; a holds what they share. */
struct qmma_plan {
    qmma_args a;
    const uint32_t *w[EM_MATMUL_GROUP_MAX];
    const void *scales[EM_MATMUL_GROUP_MAX], *biases[EM_MATMUL_GROUP_MAX];
    const float *bias[EM_MATMUL_GROUP_MAX];
    float *y[EM_MATMUL_GROUP_MAX];
    int rows[EM_MATMUL_GROUP_MAX], block[EM_MATMUL_GROUP_MAX + 1], count;
};

/* Block (chunk, row m) rounds one chunk of row m as the int8 GEMV does;
 * rows from M to mp only zero their pairs. */
template <int BITS>
__global__ void __launch_bounds__(QM_ROUND_THREADS) qmma_round_kernel(qmma_rounded q, const float *x, int M, int K) {
    cuda_pdl_enter();
    __shared__ float d[QM_ROUND_KC / QG_SEG], s[QM_ROUND_KC / QG_SEG];
    int m = blockIdx.y, k0 = blockIdx.x * QM_ROUND_KC, kc = K - k0 < QM_ROUND_KC ? K - k0 : QM_ROUND_KC;
    if (m < M) {
        q8_stage<BITS, 1>(q.x + (size_t)m * K + k0, d, s, kc, x + (size_t)m * K, K, k0, kc, 1);
        __syncthreads();
    }
    for (int i = threadIdx.x; i < kc / QG_SEG; i += blockDim.x)
        q.ds[(size_t)(k0 / QG_SEG + i) * q.mp + m] = m < M ? make_float2(d[i], s[i]) : make_float2(0.0f, 0.0f);
}

/* d = the integer sums of one segment: activations a (int8) against codes
 * b (4-bit unsigned, 8-bit centred to signed). */
template <int BITS> __device__ __forceinline__ void qm_mma(int *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if (BITS == 4)
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};\n"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

/* The B fragment of one weight row's segment from the lane's code words. */
template <int BITS> __device__ __forceinline__ void qm_bfrag(uint32_t &b0, uint32_t &b1, const uint32_t *w) {
    if (BITS == 4) b0 = w[0] & 0x0F0F0F0Fu, b1 = (w[0] >> 4) & 0x0F0F0F0Fu;
    else b0 = w[0] ^ 0x80808080u, b1 = w[BITS / 8] ^ 0x80808080u;
}

/* Pulls the scales and biases of the lane's weight rows (first groups at
 * gr[0 .. 2 NB)) over its stretch (segments [s0, s1)) into L1 ahead of
 * their use. */
template <int NB>
__device__ __forceinline__ void qm_prefetch_scales(const qmma_args &a, const int *gr, int s0, int s1) {
    size_t es = a.sdt == EM_F32 ? 4 : 2, g0 = ((size_t)s0 * QG_SEG) >> a.lg, g1 = ((size_t)s1 * QG_SEG - 1) >> a.lg;
    const char *base[2] = {(const char *)a.scales, (const char *)a.biases};
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 2 * NB; r++)
            for (size_t b = (((size_t)gr[r] + g0) * es) & ~(size_t)127; b <= ((size_t)gr[r] + g1) * es; b += 128)
                asm volatile("prefetch.global.L1 [%0];" ::"l"(base[i] + b));
}

/* A warp's shape: NB tiles of 8 weight rows, batches of U segments
 * (codes and activations requested together, the next batch while one is
 * computed), registers capped for two blocks a multiprocessor. Measured on
 * an H100 (8B shape, 4-bit, ember bench --batch 16 / 32): 2 weight tiles
 * and batches of 4 segments 7,525 / 9,904 tok/s; 4 tiles and batches of 2
 * 7,358 / 10,065; single batches (no request ahead) 7,327 / 10,232. */
#define QM_NB 2
template <int BITS, int MA> struct qm_shape {
    static constexpr int U = (MA == 1 ? 4 : 2) / (BITS == 8 ? 2 : 1);
};

/* The activations of one segment for the lane: its A fragments (rows
 * 16 ma + g and + 8) and their (scale, sum) pairs. */
template <int MA> struct qm_act {
    uint32_t af[MA][4];
    float2 ds[2 * MA];
};

/* A warp's tile: MA tiles of 16 activation rows against NB tiles of 8
 * weight rows from r0, over segments [s0, s1). Per segment and pair of
 * tiles one mma gives the integer sums; each is scaled by its activation
 * row's scale into tq (the group's running sums), and at the end of a group
 * (or of the stretch) tq and the activation sums enter acc through the
 * group's weight scales and biases, as the CPU's int8 GEMM computes:
 *   y += s_g * sum_{b in g} dx_b * sum(x8 * q') + b'_g * sum_{b in g} sum(x).
 * The codes and activations of U segments are requested together before
 * any is used, so a warp waits once for them. */
template <int BITS, int SDT, int MA>
__device__ __forceinline__ void qmma_warp(float (*acc)[4], const qmma_args &a, int r0, int s0, int s1, int g, int t) {
    constexpr int NB = QM_NB, U = qm_shape<BITS, MA>::U;
    const int wpr = a.K / 32 * BITS, gpr = a.K >> a.lg; /* words and groups of all the rows < 2^31 (cuda_qmma_takes) */
    int wr[NB];     /* the lane's code words: row r0 + 8 nb + g, word t (or 2t, 2t+1) of each segment */
    int gr[2 * NB]; /* first groups of the lane's output rows r0 + 8 nb + 2t (+1) */
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        wr[nb] = min(r0 + 8 * nb + g, a.N - 1) * wpr + t * (BITS / 4); /* rows past N repeat the last: unstored */
        gr[2 * nb] = min(r0 + 8 * nb + 2 * t, a.N - 1) * gpr;
        gr[2 * nb + 1] = min(r0 + 8 * nb + 2 * t + 1, a.N - 1) * gpr;
    }
    int xr[2 * MA]; /* the lane's activation rows 16 ma + g (+8), past M repeating the last (unstored) */
#pragma unroll
    for (int i = 0; i < 2 * MA; i++) xr[i] = min(16 * (i / 2) + g + 8 * (i % 2), a.M - 1);
    qm_prefetch_scales<NB>(a, gr, s0, s1);
    const int8_t *xq = a.q.x + 8 * t;
    float tq[MA * NB][4], sx[2 * MA];
    auto zero = [&]() {
#pragma unroll
        for (int i = 0; i < MA * NB; i++) tq[i][0] = tq[i][1] = tq[i][2] = tq[i][3] = 0.0f;
#pragma unroll
        for (int i = 0; i < 2 * MA; i++) sx[i] = 0.0f;
    };
    /* the group's sums into acc: column c & 1 of a tile is weight row 2t (+1), c >> 1 activation row g (+8) */
    auto flush = [&](int seg) {
        int gi = (seg * QG_SEG) >> a.lg;
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float sc = q_scalar(a.scales, SDT, gr[2 * nb + c] + gi);
                float bi = q_scalar(a.biases, SDT, gr[2 * nb + c] + gi);
                if (BITS == 8) bi = fmaf(128.0f, sc, bi);
#pragma unroll
                for (int ma = 0; ma < MA; ma++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        float &o = acc[ma * NB + nb][2 * h + c];
                        o = fmaf(sc, tq[ma * NB + nb][2 * h + c], fmaf(bi, sx[2 * ma + h], o));
                    }
            }
        zero();
    };
    auto fetch_w = [&](uint32_t (*w)[BITS / 4], int seg) {
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            if (BITS == 4) {
                w[nb][0] = __ldcs(a.w + wr[nb] + seg * 4);
            } else {
                uint2 v = __ldcs((const uint2 *)(a.w + wr[nb] + seg * 8));
                w[nb][0] = v.x, w[nb][BITS / 8] = v.y;
            }
        }
    };
    auto fetch_x = [&](qm_act<MA> &x, int seg) {
#pragma unroll
        for (int ma = 0; ma < MA; ma++) {
            uint2 lo = __ldg((const uint2 *)(xq + (size_t)xr[2 * ma] * a.K + (size_t)seg * QG_SEG));
            uint2 hi = __ldg((const uint2 *)(xq + (size_t)xr[2 * ma + 1] * a.K + (size_t)seg * QG_SEG));
            x.af[ma][0] = lo.x, x.af[ma][1] = hi.x, x.af[ma][2] = lo.y, x.af[ma][3] = hi.y;
#pragma unroll
            for (int h = 0; h < 2; h++) x.ds[2 * ma + h] = __ldg(a.q.ds + (size_t)seg * a.q.mp + xr[2 * ma + h]);
        }
    };
    auto step = [&](const uint32_t (*w)[BITS / 4], const qm_act<MA> &x, int seg) {
#pragma unroll
        for (int i = 0; i < 2 * MA; i++) sx[i] += x.ds[i].y;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            uint32_t b0, b1;
            qm_bfrag<BITS>(b0, b1, w[nb]);
#pragma unroll
            for (int ma = 0; ma < MA; ma++) {
                int d[4];
                qm_mma<BITS>(d, x.af[ma], b0, b1);
                float *o = tq[ma * NB + nb], dl = x.ds[2 * ma].x, dh = x.ds[2 * ma + 1].x;
                o[0] = fmaf(dl, (float)d[0], o[0]), o[1] = fmaf(dl, (float)d[1], o[1]);
                o[2] = fmaf(dh, (float)d[2], o[2]), o[3] = fmaf(dh, (float)d[3], o[3]);
            }
        }
        if (seg + 1 == s1 || (((seg + 1) * QG_SEG) & ((1 << a.lg) - 1)) == 0) flush(seg);
    };
    auto fetch_codes = [&](uint32_t (*w)[NB][BITS / 4], int seg) {
#pragma unroll
        for (int u = 0; u < U; u++) fetch_w(w[u], seg + u);
    };
    auto fetch_acts = [&](qm_act<MA> *x, int seg) {
#pragma unroll
        for (int u = 0; u < U; u++) fetch_x(x[u], seg + u);
    };
    /* Batches of U segments, the next one's codes and activations
     * requested before the current one is computed; the first batch's
     * codes before waiting for the kernel before (they never depend on
     * it), its activations after. */
    zero();
    const int nb_full = (s1 - s0) / U;
    uint32_t w[2][U][NB][BITS / 4];
    qm_act<MA> x[2][U];
    if (nb_full) fetch_codes(w[0], s0);
    cuda_pdl_enter();
    if (nb_full) fetch_acts(x[0], s0);
    for (int b = 0; b < nb_full; b += 2) {
        if (b + 1 < nb_full) fetch_codes(w[1], s0 + (b + 1) * U), fetch_acts(x[1], s0 + (b + 1) * U);
#pragma unroll
        for (int u = 0; u < U; u++) step(w[0][u], x[0][u], s0 + b * U + u);
        if (b + 1 >= nb_full) break;
        if (b + 2 < nb_full) fetch_codes(w[0], s0 + (b + 2) * U), fetch_acts(x[0], s0 + (b + 2) * U);
#pragma unroll
        for (int u = 0; u < U; u++) step(w[1][u], x[1][u], s0 + (b + 1) * U + u);
    }
    for (int s = s0 + nb_full * U; s < s1; s++) {
        uint32_t w1[NB][BITS / 4];
        qm_act<MA> x1;
        fetch_w(w1, s), fetch_x(x1, s);
        step(w1, x1, s);
    }
}

/* Warp 0's sums into y (ld N), plus the bias, added to what y holds where
 * a.add: tile (ma, nb), element c is activation row 16 ma + g + 8 (c >> 1)
 * and weight row r0 + 8 nb + 2t + (c & 1). */
template <int MA, int NB>
__device__ __forceinline__ void qmma_store(float (*acc)[4], const qmma_args &a, int r0, int g, int t) {
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int n = r0 + 8 * nb + 2 * t + (c & 1);
            if (n >= a.N) continue;
            float b = a.bias ? a.bias[n] : 0.0f;
#pragma unroll
            for (int ma = 0; ma < MA; ma++) {
                int m = 16 * ma + g + 8 * (c >> 1);
                if (m >= a.M) continue;
                float *yp = a.y + (size_t)m * a.N + n, v = acc[ma * NB + nb][c] + b;
                *yp = a.add ? *yp + v : v;
            }
        }
}

/* Block b: 8 NB weight rows of one of the plan's matrices; its warps one
 * stretch of K each. */
template <int BITS, int SDT, int MA>
__global__ void __launch_bounds__(CUDA_SKINNY_KSPLIT * 32, 2) qmma_kernel(qmma_plan p) {
    constexpr int NB = QM_NB;
    int b = blockIdx.x, mi = 0;
    while (mi + 1 < p.count && b >= p.block[mi + 1]) mi++;
    qmma_args a = p.a;
    a.w = p.w[mi], a.scales = p.scales[mi], a.biases = p.biases[mi], a.bias = p.bias[mi], a.y = p.y[mi];
    a.N = p.rows[mi];
    int kw = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = (b - p.block[mi]) * 8 * NB, ns = a.K / QG_SEG / kw;
    float acc[MA * NB][4];
#pragma unroll
    for (int i = 0; i < MA * NB; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    qmma_warp<BITS, SDT, MA>(acc, a, r0, warp * ns, (warp + 1) * ns, g, t); /* waits for the kernel before */
    tc_reduce_warps<MA * NB>(acc, warp, lane, kw);
    if (warp == 0) qmma_store<MA, NB>(acc, a, r0, g, t);
}

bool cuda_qmma_takes(const cuda_backend *cb, const em_weight *w, int M, em_math math) {
    bool tc = w->bits == 4 && cuda_qtc_takes(cb, w);
    int lo = tc ? CUDA_QTC_MIN_M : CUDA_QMMA_MIN_M, hi = tc ? CUDA_QTC_MAX_M : CUDA_QMMA_MAX_M;
    return cb->qmma_on && math == EM_MATH_FAST && M >= lo && M <= hi &&
           (w->bits == 4 || w->bits == 8) && qweight_ok(w) && w->rows > 0 && w->cols > 0 &&
           w->cols <= INT_MAX / CUDA_QTC_MAX_M && (double)w->rows * (double)w->cols * w->bits / 32 < INT_MAX &&
           ((uintptr_t)w->data & 7) == 0;
}

template <int BITS, int SDT, int MA> static void qmma_launch(cuda_backend *cb, const qmma_plan &p) {
    cuda_launch(qmma_kernel<BITS, SDT, MA>, (unsigned)p.block[p.count], cuda_skinny_split(p.a.K) * 32, 0, cb->stream,
                p);
}

template <int BITS, int SDT> static void qmma_launch_rows(cuda_backend *cb, const qmma_plan &p) {
    static_assert(CUDA_QMMA_MAX_M <= 32, "one or two activation tiles of 16 rows");
    if (p.a.M <= 16) qmma_launch<BITS, SDT, 1>(cb, p);
    else qmma_launch<BITS, SDT, 2>(cb, p);
}

template <int BITS> static void qmma_queue(cuda_backend *cb, const qmma_plan &p, const float *x) {
    const qmma_args &a = p.a;
    dim3 grid((unsigned)((a.K + QM_ROUND_KC - 1) / QM_ROUND_KC), (unsigned)a.q.mp);
    cuda_launch(qmma_round_kernel<BITS>, grid, QM_ROUND_THREADS, 0, cb->stream, a.q, x, a.M, a.K);
    CUDA_LAUNCHED(cb, "quantized matmul (int8 tensor cores): rounding the activations");
    if (a.sdt == EM_BF16) qmma_launch_rows<BITS, EM_BF16>(cb, p);
    else if (a.sdt == EM_F16) qmma_launch_rows<BITS, EM_F16>(cb, p);
    else qmma_launch_rows<BITS, EM_F32>(cb, p);
    CUDA_LAUNCHED(cb, "quantized matmul (int8 tensor cores)");
}

/* ys[i] = x · ws[i]ᵀ (+ biases[i]), or added into ys[i], for n weights
 * alike but for their rows, x rounded once for all of them. False (nothing
 * queued) where x is not 16-byte aligned (the rounding's float4 reads).
 * The rounding scratch is cb->q8x, which the int8 GEMV's rows share:
 * stream order keeps them apart. */
static bool qmma_set(cuda_backend *cb, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                     const float *const *biases, bool add) {
    if ((uintptr_t)x & 15) return false;
    const em_weight *w0 = ws[0];
    bool tc = true;
    for (int i = 0; i < n; i++) tc = tc && cuda_qtc_takes(cb, ws[i]);
    if (tc && cuda_qtc_set(cb, n, ys, x, M, ws, biases, add)) return true;
    int K = (int)w0->cols, mp = (M + 7) & ~7;
    size_t codes = ((size_t)M * K + 15) & ~(size_t)15, pairs = (size_t)K / QG_SEG * mp * sizeof(float2);
    if (!cuda_scratch(cb, &cb->q8x, &cb->q8x_bytes, codes + pairs)) return true; /* noted */
    qmma_plan p;
    memset(&p, 0, sizeof p);
    qmma_args &a = p.a;
    a.q.x = (int8_t *)cb->q8x, a.q.ds = (float2 *)((uint8_t *)cb->q8x + codes), a.q.mp = mp;
    a.M = M, a.K = K, a.sdt = (int)w0->scale_dtype, a.add = add;
    a.lg = w0->group_size == 32 ? 5 : w0->group_size == 64 ? 6 : 7;
    p.count = n;
    for (int i = 0; i < n; i++) {
        p.w[i] = (const uint32_t *)ws[i]->data, p.scales[i] = ws[i]->scales, p.biases[i] = ws[i]->biases;
        p.bias[i] = biases ? biases[i] : NULL, p.y[i] = ys[i], p.rows[i] = (int)ws[i]->rows;
        p.block[i + 1] = p.block[i] + (p.rows[i] + 8 * QM_NB - 1) / (8 * QM_NB);
    }
    if (w0->bits == 4) qmma_queue<4>(cb, p, x);
    else qmma_queue<8>(cb, p, x);
    return true;
}

bool cuda_qmma(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias, bool add) {
    return qmma_set(cb, 1, &y, x, M, &w, &bias, add);
}

bool cuda_qmma_group(cuda_backend *cb, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                     const float *const *biases, em_math math) {
    const em_weight *a = ws[0];
    if (n < 1 || n > EM_MATMUL_GROUP_MAX || ((uintptr_t)x & 15)) return false;
    for (int i = 0; i < n; i++) {
        const em_weight *b = ws[i];
        if (!cuda_qmma_takes(cb, b, M, math) || b->cols != a->cols || b->bits != a->bits ||
            b->group_size != a->group_size || b->scale_dtype != a->scale_dtype)
            return false;
    }
    bool replay = false;
    for (int i = 0; i < n; i++)
        replay = cuda_graph_skip_matmul(cb, ys[i], x, M, ws[i], biases ? biases[i] : NULL, math);
    return replay || qmma_set(cb, n, ys, x, M, ws, biases, false);
}
