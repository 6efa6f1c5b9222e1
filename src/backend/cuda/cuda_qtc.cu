/* cuda_qtc.cu — FAST products of CUDA_QTC_MIN_M .. CUDA_QTC_MAX_M
 * activation rows (a decode step of that many sequences, a short prefill)
 * over 4-bit MLX affine weights, on bf16 tensor cores with the codes turned
 * into bf16 in registers.
 *
 * The int8 tensor-core kernel (cuda_qmma.cu) spends most of its issue
 * slots on each 32-value segment's activation scale: every mma's four
 * integer sums are converted and scaled before the next segment. Here the
 * activations are bf16 (rounded once for the grid, as for cuBLAS), so a
 * group's sums need scaling once, and a code becomes a bf16 operand in one
 * logic instruction: (q | 0x4300) is the bf16 number 128 + q. For a weight
 * row's group g of scale s and bias b,
 *   y += s * sum_k x_k (128 + q_k) + (b - 128 s) * sum_k x_k,
 * the first sum from the mma (bf16 products, f32 sums), the second from the
 * rounding kernel (the same bf16 x, summed in f32): the affine product of
 * the bf16-rounded activations, exact but for f32 roundings.
 *
 * The weight rows are the mma's A operand (16 a warp), the activation rows
 * the B operand (8 a tile). A dot product does not care in which order its
 * k run as long as both operands agree: lane (g, t) takes G/32 code words of
 * each of its rows g and g+8 per group (G the group size), and each word's
 * nibbles n0..n7 feed two mma steps as the fragment pairs (n0, n4), (n1,
 * n5) and then (n2, n6), (n3, n7) — each pair one mask of the shifted word.
 * The rounding kernel stores every 8 activations in that order (x0, x4, x1,
 * x5, x2, x6, x3, x7), so a lane's B fragments for both steps are one
 * 16-byte load. Every step's 16 k lie in one group, so the group's sums are
 * whole before they are scaled.
 *
 * A block's 8 warps own 16 R consecutive weight rows, R warps a stretch of
 * K (KS = 8 / R stretches): the R warps of a stretch read the same
 * activations at about the same time, so they come from L2 once for all of
 * them (a block of 16 rows read them once for every 16 rows: at 32
 * activation rows four times the codes' bytes). A matrix with few rows gets
 * more stretches a block (qtc_stretches, from its shape and the device
 * alone), so that it still has enough warps streaming it; the stretches'
 * sums are added in stretch order. Every output is one lane's chain over its
 * stretch's groups in order, then the stretches in order, whatever M: a
 * row's result is the same bits in any batch this kernel takes, alone or in
 * a matmul_group, run after run.
 *
 * Two kernels share this plan: the staged one (below), which streams the
 * codes through shared memory and takes every K of whole 256-input stages
 * with 2-byte scales, and the register one, which loads them straight into
 * registers and takes the rest. Which one runs depends on the weights
 * alone. Past 32 activation rows the products run in passes of 32, or of
 * 64 on the shared-activation kernel (below). */
#include "backend/cuda/cuda_quant.cuh"

#define QTC_WARPS 8
#define QTC_MIN_GROUPS 4 /* the fewest groups a stretch of K takes */
#define QTC_ROUND_THREADS 256

/* What every block of a launch shares. xb: the activations as bf16, row m
 * at m * K, each 8 values permuted (x0, x4, x1, x5, x2, x6, x3, x7); sx:
 * group gi's sum of row m's bf16 values at gi * mp + m (mp: M rounded up to
 * the launch's column tiles, the padding rows zero). */
struct qtc_args {
    const __nv_bfloat16 *xb;
    const float *sx;
    float *part;     /* the shared-activation kernel's sums of a stretch of K, 128 mp floats a block */
    unsigned *count; /* and its stretches done, per 128 weight rows (zero between launches) */
    int M, mp, K, ng, sdt;
    bool add;
};

/* One matrix: N rows, KS stretches of K, blocks from `block`; where the
 * shared-activation kernel splits K over blocks, their sums from part
 * block `part0` and their counts from `tile0`. */
struct qtc_mat {
    const uint32_t *w;
    const void *scales, *biases;
    const float *bias;
    float *y;
    int N, KS, block, part0, tile0;
};

struct qtc_plan {
    qtc_args a;
    qtc_mat m[EM_MATMUL_GROUP_MAX];
    int count, blocks;
    bool staged; /* qtc_stage_kernel (the host's choice, qtc_staged) */
    bool shared; /* qtc_share_kernel instead (qtc_pass) */
};

/* Block (chunk, row m): each thread rounds 8 activations of row m to bf16,
 * stores them in the order the codes' fragments take them (qtc_warp), and
 * the G / 8 threads of a group add their sums by a butterfly (the same bits
 * in every lane). Rows from M to mp store zeros. */
template <int G>
__global__ void __launch_bounds__(QTC_ROUND_THREADS) qtc_round_kernel(__nv_bfloat16 *xb, float *sx, const float *x, int M,
                                                                      int mp, int K) {
    cuda_pdl_enter();
    int m = blockIdx.y, k = (blockIdx.x * QTC_ROUND_THREADS + threadIdx.x) * 8;
    bool in = k < K;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (in && m < M) {
        float4 lo = *(const float4 *)(x + (size_t)m * K + k), hi = *(const float4 *)(x + (size_t)m * K + k + 4);
        v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
        s += v[i];
    }
#pragma unroll
    for (int o = 1; o < G / 8; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (!in) return;
    *(uint4 *)(xb + (size_t)m * K + k) =
        make_uint4(tc_pack(v[0], v[4]), tc_pack(v[1], v[5]), tc_pack(v[2], v[6]), tc_pack(v[3], v[7]));
    if (threadIdx.x % (G / 8) == 0) sx[(size_t)(k / G) * mp + m] = s;
}

/* Two codes (bits 0-3 and 16-19 of w) as the bf16 pair 128 + q. */
__device__ __forceinline__ uint32_t qtc_pair(uint32_t w) { return (w & 0x000F000Fu) | 0x43004300u; }

/* The A fragment of step h (0, 1) of code words ca (row g) and cb (row
 * g + 8): the nibble pairs (n0, n4), (n1, n5), then (n2, n6), (n3, n7). */
__device__ __forceinline__ void qtc_afrag(uint32_t *af, uint32_t ca, uint32_t cb, int h) {
    const int sh = 8 * h;
    af[0] = qtc_pair(ca >> sh), af[1] = qtc_pair(cb >> sh);
    af[2] = qtc_pair(ca >> (sh + 4)), af[3] = qtc_pair(cb >> (sh + 4));
}

/* d = a b for one m16n8k16 tile, the sums started at zero. */
__device__ __forceinline__ void qtc_mma0(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}
__device__ __forceinline__ void qtc_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The two mma steps of one pair of code words (ca of row g, cb of row
 * g + 8) against the activation tiles' words xv, into d (the sums started
 * at zero where `first`). */
template <int NT>
__device__ __forceinline__ void qtc_pair_steps(float (*d)[4], uint32_t ca, uint32_t cb, const uint4 *xv, bool first) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t af[4];
        qtc_afrag(af, ca, cb, h);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            uint32_t b0 = h ? xv[nt].z : xv[nt].x, b1 = h ? xv[nt].w : xv[nt].y;
            if (first && h == 0) qtc_mma0(d[nt], af, b0, b1);
            else qtc_mma(d[nt], af, b0, b1);
        }
    }
}

/* A group's mma sums d into acc, y += s d + (b - 128 s) sum x: rows g (s0,
 * ba = b - 128 s0) and g + 8 (s1, bb), sx[nt] the group's sums of the
 * lane's two activation rows of tile nt. */
template <int NT>
__device__ __forceinline__ void qtc_group_add(float (*acc)[4], const float (*d)[4], float s0, float s1, float ba,
                                              float bb, const float2 *sx) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        acc[nt][0] = fmaf(s0, d[nt][0], fmaf(ba, sx[nt].x, acc[nt][0]));
        acc[nt][1] = fmaf(s0, d[nt][1], fmaf(ba, sx[nt].y, acc[nt][1]));
        acc[nt][2] = fmaf(s1, d[nt][2], fmaf(bb, sx[nt].x, acc[nt][2]));
        acc[nt][3] = fmaf(s1, d[nt][3], fmaf(bb, sx[nt].y, acc[nt][3]));
    }
}

/* A lane's code words of each of its rows per group (W), and the groups a
 * warp has requested ahead (D): 8 words of each row (2 KB a warp in
 * flight), at most 6 groups, each of which brings its scales and biases. */
template <int G> struct qtc_shape {
    static constexpr int W = G / 32, D = 8 / W < 6 ? 8 / W : 6;
};

/* One group of a lane's two rows: its W code words each, their scales and
 * biases. */
template <int W> struct qtc_group {
    uint32_t ca[W], cb[W];
    float s[2], b[2];
};

/* W code words from p (a streaming load: the codes are read once). */
template <int W> __device__ __forceinline__ void qtc_words(uint32_t *o, const uint32_t *p) {
    if (W == 4) {
        uint4 v = __ldcs((const uint4 *)p);
        o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
    } else if (W == 2) {
        uint2 v = __ldcs((const uint2 *)p);
        o[0] = v.x, o[1] = v.y;
    } else {
        o[0] = __ldcs(p);
    }
}

/* A warp's 16 rows from r0 over groups [g0, g1): acc[nt][c] is weight row
 * r0 + g + 8 (c >> 1) against activation row 8 nt + 2t + (c & 1). The
 * codes of D groups (qtc_shape) are requested ahead (the first ones before
 * waiting for the kernel before: weights never depend on it). */
template <int G, int NT>
__device__ __forceinline__ void qtc_warp(float (*acc)[4], const qtc_args &a, const qtc_mat &mt, int r0, int g0, int g1,
                                         int g, int t) {
    constexpr int W = qtc_shape<G>::W, D = qtc_shape<G>::D, GW = G / 8; /* GW: a row's words a group */
    const int ra = min(r0 + g, mt.N - 1), rb = min(r0 + g + 8, mt.N - 1); /* rows past N repeat the last: unstored */
    const size_t rw = (size_t)a.K / 8; /* a row's words */
    const uint32_t *wa = mt.w + (size_t)ra * rw + t * W, *wb = mt.w + (size_t)rb * rw + t * W;
    const size_t sa = (size_t)ra * a.ng, sb = (size_t)rb * a.ng;
    auto fetch = [&](qtc_group<W> &r, int gi) {
        qtc_words<W>(r.ca, wa + (size_t)gi * GW);
        qtc_words<W>(r.cb, wb + (size_t)gi * GW);
        r.s[0] = q_scalar(mt.scales, a.sdt, sa + gi), r.b[0] = q_scalar(mt.biases, a.sdt, sa + gi);
        r.s[1] = q_scalar(mt.scales, a.sdt, sb + gi), r.b[1] = q_scalar(mt.biases, a.sdt, sb + gi);
    };
    qtc_group<W> ring[D];
#pragma unroll
    for (int u = 0; u < D; u++)
        if (g0 + u < g1) fetch(ring[u], g0 + u);
    cuda_pdl_enter();
    const __nv_bfloat16 *xr = a.xb + (size_t)g * a.K + t * (G / 4); /* tile nt's column g at + 8 nt K */
    const size_t xt = (size_t)8 * a.K;
    auto group = [&](const qtc_group<W> &c, int gi) {
        float d[NT][4];
#pragma unroll
        for (int j = 0; j < W; j++) { /* word j of each row: steps 2j (its x, y) and 2j + 1 (z, w) */
            uint4 xv[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) xv[nt] = __ldg((const uint4 *)(xr + nt * xt + (size_t)gi * G) + j);
            qtc_pair_steps<NT>(d, c.ca[j], c.cb[j], xv, j == 0);
        }
        const float ba = fmaf(-128.0f, c.s[0], c.b[0]), bb = fmaf(-128.0f, c.s[1], c.b[1]);
        float2 sx[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) sx[nt] = __ldg((const float2 *)(a.sx + (size_t)gi * a.mp + 8 * nt + 2 * t));
        qtc_group_add<NT>(acc, d, c.s[0], c.s[1], ba, bb, sx);
    };
    for (int gi = g0; gi < g1; gi += D) {
#pragma unroll
        for (int u = 0; u < D; u++) {
            if (gi + u >= g1) break;
            const qtc_group<W> c = ring[u];
            if (gi + u + D < g1) fetch(ring[u], gi + u + D);
            group(c, gi + u);
        }
    }
}

template <int NT>
__device__ __forceinline__ void qtc_finish(float (*acc)[4], const qtc_args &a, const qtc_mat &mt, int KS, int r0,
                                           int warp, int lane);
template <int NT>
__device__ __forceinline__ void qtc_store(const float (*acc)[4], const qtc_args &a, const qtc_mat &mt, int r0,
                                          int lane);

/* Where this thread's warp works: the matrix of block b, its stretch (of
 * the matrix's KS) and its first weight row. Block b of a matrix holds rows
 * 16 R b .. 16 R (b + 1) - 1 (R = 8 / KS); warp w the 16 rows 16 (w % R) on
 * of them over stretch w / R of K. */
struct qtc_where {
    int mi, ks, r0;
};
__device__ __forceinline__ qtc_where qtc_locate(const qtc_plan &p) {
    int b = blockIdx.x, mi = 0, warp = threadIdx.x / 32;
    while (mi + 1 < p.count && b >= p.m[mi + 1].block) mi++;
    const int R = QTC_WARPS / p.m[mi].KS;
    return qtc_where{mi, warp / R, (b - p.m[mi].block) * 16 * R + 16 * (warp % R)};
}

/* The register kernel's blocks (qtc_finish adds the stretches). */
template <int G, int NT>
__global__ void __launch_bounds__(QTC_WARPS * 32, 2) qtc_kernel(qtc_plan p) {
    const qtc_where at = qtc_locate(p);
    const qtc_args &a = p.a;
    const qtc_mat &mt = p.m[at.mi];
    const int KS = mt.KS, lane = threadIdx.x % 32;
    const int g0 = (int)((long long)at.ks * a.ng / KS), g1 = (int)((long long)(at.ks + 1) * a.ng / KS);
    float acc[NT][4] = {};
    if (at.r0 < mt.N) qtc_warp<G, NT>(acc, a, mt, at.r0, g0, g1, lane / 4, lane % 4); /* waits for the kernel before */
    else cuda_pdl_enter();
    qtc_finish<NT>(acc, a, mt, KS, at.r0, threadIdx.x / 32, lane);
}

/* The end of a register kernel's block: the stretches' sums meet in shared
 * memory, and the first stretch's warp adds them in stretch order and
 * stores them (qtc_store). */
template <int NT>
__device__ __forceinline__ void qtc_finish(float (*acc)[4], const qtc_args &a, const qtc_mat &mt, int KS, int r0,
                                           int warp, int lane) {
    const int R = QTC_WARPS / KS, ks = warp / R;
    if (KS > 1) {
        __shared__ float red[QTC_WARPS][NT * 4][32];
        if (ks > 0)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) red[warp][nt * 4 + c][lane] = acc[nt][c];
        __syncthreads();
        if (ks > 0) return;
        for (int s = 1; s < KS; s++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[nt][c] += red[warp + s * R][nt * 4 + c][lane];
    }
    qtc_store<NT>(acc, a, mt, r0, lane);
}

/* Stores a warp's sums (rows from r0): y = sums + bias, or that added into
 * y (the order of a single product's store and of the add kernel). */
template <int NT>
__device__ __forceinline__ void qtc_store(const float (*acc)[4], const qtc_args &a, const qtc_mat &mt, int r0,
                                          int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int n = r0 + g + 8 * (c >> 1), m = 8 * nt + 2 * t + (c & 1);
            if (n >= mt.N || m >= a.M) continue;
            float v = acc[nt][c] + (mt.bias ? mt.bias[n] : 0.0f), *yp = mt.y + (size_t)m * mt.N + n;
            *yp = a.add ? *yp + v : v;
        }
}

/* ---- The staged kernel ----
 *
 * The kernel above keeps its next groups' codes in registers, which caps a
 * multiprocessor at 16 warps with about 2 KB each on the way: too few bytes
 * in flight to cover the memory's latency, so it waits on its loads. Here
 * each warp streams its 16 rows through a ring of QTC_STAGES stages in
 * shared memory, filled by 16-byte cp.async (no registers held while the
 * copies fly), so a multiprocessor keeps about 96 KB of codes on the way.
 *
 * A stage is QTC_CHUNK consecutive inputs of the warp's 16 rows: 128 bytes
 * of codes each (row pitch QTC_ROWB, the padding putting the 8 rows that one
 * load touches on distinct banks), then the rows' scales and their biases
 * for those inputs (2-byte scales; f32 ones stay on the kernel above). The
 * lanes take a stage's words differently from the kernel above, so that a
 * load of 8 rows is conflict-free: for its q-th pair of mma steps lane
 * (g, t) takes word 4 q + t of rows g and g + 8, and x is read at that
 * word's 8 values (the rounding kernel's order within a word is the same).
 * The stretches of K are whole stages, so a row's sums follow from the
 * shape alone, here too. */
#define QTC_CHUNK 256
#define QTC_STAGES 4
#define QTC_ROWB 144

template <int G> struct qtc_stage_geom {
    static constexpr int CG = QTC_CHUNK / G;          /* groups a stage */
    static constexpr int SB = CG * 2;                 /* bytes of a row's scales a stage */
    static constexpr int CODES = 16 * QTC_ROWB;       /* bytes of the codes of a stage */
    static constexpr int SLOT = CODES + 2 * 16 * SB;  /* a stage's bytes (a multiple of 16) */
};

/* An async copy of N (4, 8, 16) bytes to shared address dst. */
template <int N> __device__ __forceinline__ void qtc_cp(unsigned dst, const void *src) {
    if (N == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(N) : "memory");
}
__device__ __forceinline__ uint32_t qtc_lds32(unsigned a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ float qtc_lds_scale(unsigned a, int sdt) {
    unsigned short h;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(a));
    return sdt == EM_F16 ? cuda_f16(h) : cuda_bf16(h);
}

/* Queues stage c (inputs QTC_CHUNK c on) of the warp's rows from r0 into
 * the slot at shared address `slot`: each lane four 16-byte pieces of
 * codes, then lane l < 16 row l's scales and lane 16 + l its biases. Rows
 * past N repeat the last (their sums are not stored). */
template <int G>
__device__ __forceinline__ void qtc_stage_issue(unsigned slot, const qtc_args &a, const qtc_mat &mt, int r0, int c,
                                                int lane) {
    using sg = qtc_stage_geom<G>;
    const size_t rowb = (size_t)a.K / 2;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const int idx = lane + 32 * u, r = idx >> 3, part = idx & 7, row = min(r0 + r, mt.N - 1);
        qtc_cp<16>(slot + r * QTC_ROWB + part * 16,
                   (const uint8_t *)mt.w + (size_t)row * rowb + (size_t)c * (QTC_CHUNK / 2) + part * 16);
    }
    const int r = lane & 15, row = min(r0 + r, mt.N - 1);
    const void *sb = lane < 16 ? mt.scales : mt.biases;
    qtc_cp<sg::SB>(slot + sg::CODES + (lane >> 4) * 16 * sg::SB + r * sg::SB,
                   (const uint8_t *)sb + ((size_t)row * a.ng + (size_t)c * sg::CG) * 2);
}

/* One stage's products into acc (qtc_warp's layout) from the warp's slot
 * (its rows' codes, scales and biases): xload(nt, wi) gives activation
 * tile nt's 16 bytes at code word wi of the lane's rows, sxload(j, nt) the
 * stage's group j's sums of the lane's two activation rows of tile nt. */
template <int G, int NT, typename XL, typename SL>
__device__ __forceinline__ void qtc_stage_products(float (*acc)[4], unsigned slot, int sdt, int g, XL xload,
                                                   SL sxload) {
    using sg = qtc_stage_geom<G>;
    constexpr int P = G / 32; /* pairs of mma steps a group */
    const int t = threadIdx.x % 4;
    const unsigned sc = slot + sg::CODES, bi = sc + 16 * sg::SB;
#pragma unroll
    for (int j = 0; j < sg::CG; j++) {
        float d[NT][4];
#pragma unroll
        for (int q = 0; q < P; q++) {
            const int wi = 4 * (j * P + q) + t;
            const uint32_t ca = qtc_lds32(slot + g * QTC_ROWB + wi * 4),
                           cb = qtc_lds32(slot + (g + 8) * QTC_ROWB + wi * 4);
            uint4 xv[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) xv[nt] = xload(nt, wi);
            qtc_pair_steps<NT>(d, ca, cb, xv, q == 0);
        }
        const float s0 = qtc_lds_scale(sc + g * sg::SB + 2 * j, sdt),
                    s1 = qtc_lds_scale(sc + (g + 8) * sg::SB + 2 * j, sdt);
        const float ba = fmaf(-128.0f, s0, qtc_lds_scale(bi + g * sg::SB + 2 * j, sdt)),
                    bb = fmaf(-128.0f, s1, qtc_lds_scale(bi + (g + 8) * sg::SB + 2 * j, sdt));
        float2 sx[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) sx[nt] = sxload(j, nt);
        qtc_group_add<NT>(acc, d, s0, s1, ba, bb, sx);
    }
}

/* A warp's 16 rows from r0 over stages [c0, c1) into acc (qtc_warp's
 * layout); ring: the warp's QTC_STAGES slots. */
template <int G, int NT>
__device__ __forceinline__ void qtc_stage_warp(float (*acc)[4], const qtc_args &a, const qtc_mat &mt, int r0, int c0,
                                               int c1, int lane, unsigned ring) {
    using sg = qtc_stage_geom<G>;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int s = 0; s < QTC_STAGES - 1; s++) {
        if (c0 + s < c1) qtc_stage_issue<G>(ring + s * sg::SLOT, a, mt, r0, c0 + s, lane);
        cp_async_commit();
    }
    cuda_pdl_enter(); /* the weights never depend on the kernel before; x does */
    const __nv_bfloat16 *xr = a.xb + (size_t)g * a.K;
    const size_t xt = (size_t)8 * a.K;
    for (int c = c0; c < c1; c++) {
        const int i = c - c0;
        if (c + QTC_STAGES - 1 < c1) /* into the slot stage c - 1 used */
            qtc_stage_issue<G>(ring + ((i + QTC_STAGES - 1) % QTC_STAGES) * sg::SLOT, a, mt, r0, c + QTC_STAGES - 1,
                               lane);
        cp_async_commit();
        cp_async_wait_groups<QTC_STAGES - 1>(); /* this lane's copies of stage c are in */
        __syncwarp();                             /* and every lane's */
        const uint4 *xc = (const uint4 *)(xr + (size_t)c * QTC_CHUNK);
        qtc_stage_products<G, NT>(
            acc, ring + (i % QTC_STAGES) * sg::SLOT, a.sdt, g,
            [&](int nt, int wi) { return __ldg(xc + nt * (xt / 8) + wi); },
            [&](int j, int nt) {
                return __ldg((const float2 *)(a.sx + (size_t)(c * sg::CG + j) * a.mp + 8 * nt + 2 * t));
            });
        __syncwarp(); /* every lane is done with the slot before the next pass refills it */
    }
    cp_async_wait_all();
}

/* qtc_kernel's blocks and warps, the stretches whole stages, each warp's
 * ring in dynamic shared memory. */
template <int G, int NT>
__global__ void __launch_bounds__(QTC_WARPS * 32, 2) qtc_stage_kernel(qtc_plan p) {
    extern __shared__ __align__(16) uint8_t qtc_ring[];
    const qtc_where at = qtc_locate(p);
    const qtc_args &a = p.a;
    const qtc_mat &mt = p.m[at.mi];
    const int KS = mt.KS, warp = threadIdx.x / 32, lane = threadIdx.x % 32, nc = a.K / QTC_CHUNK;
    const int c0 = at.ks * nc / KS, c1 = (at.ks + 1) * nc / KS;
    const unsigned ring =
        (unsigned)__cvta_generic_to_shared(qtc_ring) + warp * QTC_STAGES * qtc_stage_geom<G>::SLOT;
    float acc[NT][4] = {};
    if (at.r0 < mt.N) qtc_stage_warp<G, NT>(acc, a, mt, at.r0, c0, c1, lane, ring); /* waits for the kernel before */
    else cuda_pdl_enter();
    qtc_finish<NT>(acc, a, mt, KS, at.r0, warp, lane);
}

/* ---- The shared-activation kernel ----
 *
 * At 24 or more activation rows a warp's activations for a stage (4 KB a
 * tile of 8 rows) outweigh its codes (2 KB) several times over, and each
 * warp of the staged kernel reads its own from L2: at 32 rows eight times
 * the codes' bytes cross from L2, which then holds the products back (the
 * 8B's gate and up at 32 rows: 101 us for 66 MB on an H200). Here all 8
 * warps of a block take the same stretch of K (16 QTC_WARPS rows), so
 * they read the same activations: the block copies each stage's
 * activations and their groups' sums into shared memory once, beside the
 * warps' codes, and the warps read them there. A warp's chain of sums is
 * the staged kernel's, so a row's bits are the same in either. Past 32
 * rows a pass takes up to 64 (8 tiles, one block a multiprocessor for the
 * registers), so the codes are read once for twice the rows.
 *
 * Where the staged kernel splits a matrix's K into KS stretches (a matrix
 * with fewer 128-row blocks than the device has multiprocessors), each
 * stretch here is a block of its own over the same 128 rows: the blocks
 * store their sums, and the last of a row block's KS to arrive adds them in
 * stretch order (qtc_share_reduce), as the staged kernel does, so the bits
 * are still the same.
 *
 * Measured in an earlier form (H200, one call, `ember-gemv-bench --shape
 * 8b --bits 4 --rows R` against the staged kernel alone; a matrix of
 * several stretches ran them as the blocks of a cluster that added their
 * sums through distributed shared memory): at 32 rows the gate and up
 * 101.2 -> 73.9 us and the head 498.7 -> 265.5, at 64 (two passes) 193.7
 * -> 145.1 and 1,007 -> 509; but at 8 and 16 rows the gate and up 41.3 ->
 * 43.5 and 51.0 -> 57.1 (a stage waits here for the block's slowest copy,
 * where the staged kernel's warps run free of each other), and the
 * products of 4 and 8 stretches slower at every width (o at 32 rows 15.1
 * -> 25.1). So it takes 17 rows and more, and the stretches are added
 * through memory rather than in a cluster. In this form (H100, one call,
 * against the staged kernel on the same build): the 8B's 4-bit layer at
 * 24, 32, 40 and 64 rows 143.4 -> 138.8, 204.6 -> 159.1, 286.7 -> 195.6
 * and 395.0 -> 252.4 us (o alone slower up to 32 rows: 15.5 -> 17.3 at
 * 32, its blocks two stages each), the decode of 64 sequences 10.8k ->
 * 15.3k tok/s. Keeping sets whose stretches have fewer than 3 stages on
 * the staged kernel up to 32 rows (o, but also q/k/v, whose q, k and v
 * are split 8 ways too and gained) was no better: the layer at 24 and 32
 * rows 139.0 and 160.9 us against 140.1 and 159.8.
 * EMBER_CUDA_QTC_SHARE=all (the default) takes every set;
 * 1 only sets whose blocks each take all of K (at the 8B shape on 132
 * multiprocessors, only the head: the gate and up have 112 blocks of 128
 * rows, so 2 stretches); 0 none.
 *
 * A stage of the ring: the 8 warps' slots (the staged kernel's layout),
 * then every activation row's QTC_CHUNK values (bf16), then their groups'
 * sums. An activation row's 16-byte pieces are stored with piece i of odd
 * rows at i ^ 4: the 8 lanes of one phase of a 16-byte load (rows g and
 * g + 1, the same 4 pieces) then fall on distinct banks. */
#ifndef QTC_SHARE_WIDE
#define QTC_SHARE_WIDE 1 /* 0: passes of CUDA_QMMA_MAX_M rows here too (builds that compare) */
#endif
#define QTC_SHARE_MAX_M 64 /* its rows a pass */
#define QTC_SM_SMEM (228 * 1024) /* a multiprocessor's shared memory (sm_90); each block reserves 1 KB of it */

template <int G, int NT> struct qtc_share_geom {
    using cg = qtc_stage_geom<G>;
    static constexpr int XROW = QTC_CHUNK * 2;     /* bytes of an activation row a stage */
    static constexpr int XB = 8 * NT * XROW;       /* the activations' bytes a stage */
    static constexpr int SXB = cg::CG * 8 * NT * 4; /* their groups' sums' bytes a stage */
    static constexpr int STAGE = QTC_WARPS * cg::SLOT + XB + SXB;
    /* blocks a multiprocessor: two, but one where the tiles' sums need more
     * registers than two blocks leave a thread */
    static constexpr int BPS = NT > 4 ? 1 : 2;
    /* the ring's stages: as many as fit, at most 4 */
    static constexpr int FIT = (QTC_SM_SMEM / BPS - 1024) / STAGE, S = FIT > 4 ? 4 : FIT;
    static_assert(S >= 2, "a stage on the way while one is read");
};

/* Queues stage c's activations (all 8 NT rows) into the block's copy at
 * xs, thread i taking pieces i, i + 256, ..., and their groups' sums after
 * them (sx holds group gi's at gi * mp, so a stage's are contiguous). */
template <int G, int NT> __device__ __forceinline__ void qtc_share_issue_x(unsigned xs, const qtc_args &a, int c) {
    using sg = qtc_share_geom<G, NT>;
    const int tid = threadIdx.x;
#pragma unroll
    for (int u = 0; u < NT; u++) {
        const int idx = tid + QTC_WARPS * 32 * u, row = idx >> 5, piece = idx & 31;
        qtc_cp<16>(xs + row * sg::XROW + ((piece ^ ((row & 1) << 2)) << 4),
                   a.xb + (size_t)row * a.K + (size_t)c * QTC_CHUNK + piece * 8);
    }
    if (tid < sg::SXB / 16)
        qtc_cp<16>(xs + sg::XB + tid * 16, (const uint8_t *)(a.sx + (size_t)c * sg::cg::CG * a.mp) + tid * 16);
}

/* The block's stages [c0, c1) of K into acc (qtc_warp's layout), the
 * warp's 16 rows from r0 (live: any of them below N); ring: the block's S
 * stages. */
template <int G, int NT>
__device__ __forceinline__ void qtc_share_block(float (*acc)[4], const qtc_args &a, const qtc_mat &mt, int r0, int c0,
                                                int c1, unsigned ring) {
    using sg = qtc_share_geom<G, NT>;
    using cg = qtc_stage_geom<G>;
    constexpr int S = sg::S;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const bool live = r0 < mt.N;
    const unsigned mine = ring + warp * cg::SLOT, xpart = QTC_WARPS * cg::SLOT;
#pragma unroll
    for (int s = 0; s < S - 1; s++) { /* the weights never depend on the kernel before */
        if (live && c0 + s < c1) qtc_stage_issue<G>(mine + s * sg::STAGE, a, mt, r0, c0 + s, lane);
        cp_async_commit();
    }
    cuda_pdl_enter(); /* x does */
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (c0 + s < c1) qtc_share_issue_x<G, NT>(ring + s * sg::STAGE + xpart, a, c0 + s);
        cp_async_commit();
    }
    for (int c = c0; c < c1; c++) {
        const int i = c - c0;
        cp_async_wait_groups<S - 2>(); /* this thread's copies of stage c are in */
        __syncthreads();               /* and every thread's; every warp is done with stage c - 1 */
        if (c + S - 1 < c1) {          /* into the slot stage c - 1 used */
            const unsigned nx = ring + ((i + S - 1) % S) * sg::STAGE;
            if (live) qtc_stage_issue<G>(nx + warp * cg::SLOT, a, mt, r0, c + S - 1, lane);
            qtc_share_issue_x<G, NT>(nx + xpart, a, c + S - 1);
        }
        cp_async_commit();
        if (!live) continue;
        const unsigned st = ring + (i % S) * sg::STAGE, xs = st + xpart + g * sg::XROW, sxs = st + xpart + sg::XB;
        const int sw = (g & 1) << 2; /* the odd rows' pieces (rows 8 nt + g) */
        qtc_stage_products<G, NT>(
            acc, st + warp * cg::SLOT, a.sdt, g,
            [&](int nt, int wi) { return cuda_lds16(xs + nt * 8 * sg::XROW + ((wi ^ sw) << 4)); },
            [&](int j, int nt) { return cuda_lds8f(sxs + (j * 8 * NT + 8 * nt + 2 * t) * 4); });
    }
    cp_async_wait_all();
}

/* Where this block works here: matrix mi's block `local` of its RB blocks
 * of 128 rows for each of its KS stretches, stretch by stretch (those of
 * a stretch read the same activations at about the same time); the
 * warp's first row r0. */
struct qtc_share_where {
    int mi, local, RB, rb, ks, r0;
};
__device__ __forceinline__ qtc_share_where qtc_share_locate(const qtc_plan &p) {
    int b = blockIdx.x, mi = 0, warp = threadIdx.x / 32;
    while (mi + 1 < p.count && b >= p.m[mi + 1].block) mi++;
    const int local = b - p.m[mi].block, RB = (p.m[mi].N + 16 * QTC_WARPS - 1) / (16 * QTC_WARPS);
    return qtc_share_where{mi, local, RB, local % RB, local / RB, (local % RB) * 16 * QTC_WARPS + 16 * warp};
}

/* The end of a block of a matrix whose K is split: its sums go to its part
 * block, and the last of the row block's KS blocks to arrive adds them in
 * stretch order (the staged kernel's order, qtc_finish) and stores them. */
template <int NT>
__device__ __forceinline__ void qtc_share_reduce(const float (*acc)[4], const qtc_args &a, const qtc_mat &mt,
                                                 const qtc_share_where &at) {
    constexpr int WF = NT * 4 * 32, BF = QTC_WARPS * WF; /* a warp's and a block's floats */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float *mine = a.part + (size_t)(mt.part0 + at.local) * BF + warp * WF + lane;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) mine[(nt * 4 + c) * 32] = acc[nt][c];
    /* publish, then count; one thread fences for the block after the
     * barrier that orders its threads' writes before it */
    __syncthreads();
    __shared__ int last;
    unsigned *count = a.count + mt.tile0 + at.rb;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(count, 1u) == (unsigned)mt.KS - 1;
        if (last) __threadfence();
    }
    __syncthreads();
    if (!last) return;
    const float *first = a.part + (size_t)(mt.part0 + at.rb) * BF + warp * WF + lane; /* stretch 0's block */
    float sum[NT][4];
    for (int s = 0; s < mt.KS; s++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float v = __ldcg(first + (size_t)s * at.RB * BF + (nt * 4 + c) * 32);
                sum[nt][c] = s ? sum[nt][c] + v : v;
            }
    if (threadIdx.x == 0) *count = 0; /* ready for the next launch */
    if (at.r0 < mt.N) qtc_store<NT>(sum, a, mt, at.r0, lane);
}

/* A block's warps 16 rows each over its stretch of K (qtc_share_locate),
 * the stretches' sums added by qtc_share_reduce where K is split. */
template <int G, int NT>
__global__ void __launch_bounds__(QTC_WARPS * 32, (qtc_share_geom<G, NT>::BPS)) qtc_share_kernel(qtc_plan p) {
    extern __shared__ __align__(16) uint8_t qtc_ring[];
    const qtc_share_where at = qtc_share_locate(p);
    const qtc_mat &mt = p.m[at.mi];
    const int nc = p.a.K / QTC_CHUNK, c0 = at.ks * nc / mt.KS, c1 = (at.ks + 1) * nc / mt.KS;
    float acc[NT][4] = {};
    /* waits for the kernel before */
    qtc_share_block<G, NT>(acc, p.a, mt, at.r0, c0, c1, (unsigned)__cvta_generic_to_shared(qtc_ring));
    if (mt.KS > 1) qtc_share_reduce<NT>(acc, p.a, mt, at);
    else if (at.r0 < mt.N) qtc_store<NT>(acc, p.a, mt, at.r0, threadIdx.x % 32);
}

/* The stretches of K a block of a matrix of N rows and `units` of K (groups,
 * or the staged kernel's stages) takes: doubled while the matrix has fewer
 * blocks than the device has multiprocessors and a stretch keeps at least
 * `least` units. From the shape and the device alone, so a product's sums
 * do not depend on its batch or what shares its launch. (Measured on an
 * H100, 8B shape, 16 rows: doubling on up to two or four blocks a
 * multiprocessor made the gate and up slower, 67.6 against 71.4 and 75.9
 * us, and nothing faster.) */
static int qtc_stretches(const cuda_backend *cb, int N, int units, int least) {
    int ks = 1;
    while (ks < QTC_WARPS && (N + 16 * (QTC_WARPS / ks) - 1) / (16 * (QTC_WARPS / ks)) < cb->n_sm &&
           units / (2 * ks) >= least)
        ks *= 2;
    return ks;
}

#ifndef QTC_STAGED
#define QTC_STAGED 1 /* 0: the register kernel everywhere (builds that compare the two) */
#endif
/* Whether a set's products take the staged kernel: whole stages of K,
 * 2-byte scales, the copies' alignment. From the weights alone. */
static bool qtc_staged(int n, const em_weight *const *ws) {
    bool ok = QTC_STAGED && ws[0]->cols % QTC_CHUNK == 0 && ws[0]->scale_dtype != EM_F32;
    for (int i = 0; i < n; i++)
        ok = ok && !(((uintptr_t)ws[i]->scales | (uintptr_t)ws[i]->biases) & 15);
    return ok;
}

bool cuda_qtc_takes(const cuda_backend *cb, const em_weight *w) {
    return cb->qtc_on && w->bits == 4 && (w->group_size == 32 || w->group_size == 64 || w->group_size == 128) &&
           w->cols % w->group_size == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* Whether the shared-activation kernel is on (EMBER_CUDA_QTC_SHARE) and
 * the device has the shared memory its geometry counts on (QTC_SM_SMEM a
 * multiprocessor, as sm_90's). */
static bool qtc_share_fits(const cuda_backend *cb) { return cb->qtc_share && cb->smem_optin >= QTC_SM_SMEM - 1024; }

/* The staged kernel's stretches of K for a matrix of N rows. */
static int qtc_stage_stretches(const cuda_backend *cb, int N, int K) { return qtc_stretches(cb, N, K / QTC_CHUNK, 2); }

/* Whether a set's products of M rows (a pass's, or more for the pass's
 * width) can take the shared-activation kernel: 17 rows or more, it is on
 * and fits, the staged kernel's weights, and (unless it splits K,
 * EMBER_CUDA_QTC_SHARE=all) every matrix one stretch of K. From the
 * weights, the rows and the device alone. */
static bool qtc_shares(const cuda_backend *cb, int n, const em_weight *const *ws, int M) {
    bool ok = M >= CUDA_QTC_SHARE_MIN_M && qtc_share_fits(cb) && qtc_staged(n, ws);
    const int K = (int)ws[0]->cols;
    for (int i = 0; i < n && ok && cb->qtc_share < 2; i++) ok = qtc_stage_stretches(cb, (int)ws[i]->rows, K) == 1;
    return ok;
}

static void qtc_launch_smem(cuda_backend *cb, const qtc_plan &p, void (*kernel)(qtc_plan), size_t smem) {
    cuda_note(cb, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              "quantized matmul (bf16 tensor cores): shared memory");
    cuda_launch(kernel, (unsigned)p.blocks, QTC_WARPS * 32, smem, cb->stream, p);
}

/* The plan's kernel for NT tiles (the shared-activation kernel takes 3
 * and more; more than 4 only come with p.shared, qtc_pass_rows). */
template <int G, int NT> static void qtc_launch(cuda_backend *cb, const qtc_plan &p) {
    using sg = qtc_share_geom<G, NT>;
    if constexpr (NT >= 3)
        if (p.shared) return qtc_launch_smem(cb, p, qtc_share_kernel<G, NT>, (size_t)sg::S * sg::STAGE);
    if constexpr (NT <= 4) {
        if (!p.staged) return cuda_launch(qtc_kernel<G, NT>, (unsigned)p.blocks, QTC_WARPS * 32, 0, cb->stream, p);
        qtc_launch_smem(cb, p, qtc_stage_kernel<G, NT>, (size_t)QTC_WARPS * QTC_STAGES * qtc_stage_geom<G>::SLOT);
    }
}

template <int G> static void qtc_queue(cuda_backend *cb, const qtc_plan &p, const float *x) {
    const qtc_args &a = p.a;
    dim3 grid((unsigned)((a.K / 8 + QTC_ROUND_THREADS - 1) / QTC_ROUND_THREADS), (unsigned)a.mp);
    cuda_launch(qtc_round_kernel<G>, grid, QTC_ROUND_THREADS, 0, cb->stream, (__nv_bfloat16 *)a.xb, (float *)a.sx, x,
                a.M, a.mp, a.K);
    CUDA_LAUNCHED(cb, "quantized matmul (bf16 tensor cores): rounding the activations");
    static_assert(CUDA_QMMA_MAX_M <= 32 && QTC_SHARE_MAX_M <= 64, "at most 4 (8 shared) activation tiles of 8 rows");
    if (a.mp == 8) qtc_launch<G, 1>(cb, p);
    else if (a.mp == 16) qtc_launch<G, 2>(cb, p);
    else if (a.mp == 24) qtc_launch<G, 3>(cb, p);
    else if (a.mp == 32) qtc_launch<G, 4>(cb, p);
    else if (a.mp == 48) qtc_launch<G, 6>(cb, p);
    else qtc_launch<G, 8>(cb, p);
    CUDA_LAUNCHED(cb, "quantized matmul (bf16 tensor cores)");
}

/* One pass of at most qtc_pass_rows rows: tiles of 8, past four of them
 * 6 or 8. */
static void qtc_pass(cuda_backend *cb, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                     const float *const *biases, bool add) {
    const em_weight *w0 = ws[0];
    int K = (int)w0->cols, G = w0->group_size, ng = K / G, mp = M <= 32 ? (M + 7) & ~7 : M <= 48 ? 48 : 64;
    qtc_plan p;
    memset(&p, 0, sizeof p);
    p.staged = qtc_staged(n, ws);
    p.count = n, p.shared = qtc_shares(cb, n, ws, M);
    int parts = 0, tiles = 0; /* the split matrices' blocks and row blocks (qtc_share_reduce) */
    for (int i = 0; i < n; i++) {
        qtc_mat &m = p.m[i];
        m.w = (const uint32_t *)ws[i]->data, m.scales = ws[i]->scales, m.biases = ws[i]->biases;
        m.bias = biases ? biases[i] : NULL, m.y = ys[i], m.N = (int)ws[i]->rows;
        m.KS = p.staged ? qtc_stage_stretches(cb, m.N, K) : qtc_stretches(cb, m.N, ng, QTC_MIN_GROUPS);
        m.block = p.blocks;
        if (!p.shared) {
            p.blocks += (m.N + 16 * (QTC_WARPS / m.KS) - 1) / (16 * (QTC_WARPS / m.KS));
            continue;
        }
        const int RB = (m.N + 16 * QTC_WARPS - 1) / (16 * QTC_WARPS); /* fewer than n_sm where KS > 1 */
        p.blocks += RB * m.KS;
        if (m.KS > 1) m.part0 = parts, m.tile0 = tiles, parts += RB * m.KS, tiles += RB;
    }
    size_t xbytes = ((size_t)mp * K * sizeof(__nv_bfloat16) + 15) & ~(size_t)15;
    if (!cuda_scratch(cb, &cb->q8x, &cb->q8x_bytes, xbytes + (size_t)ng * mp * sizeof(float))) return; /* noted */
    if (parts && !cuda_scratch(cb, (void **)&cb->qtc_part, &cb->qtc_part_bytes, (size_t)parts * 16 * QTC_WARPS * mp * 4))
        return; /* noted */
    qtc_args &a = p.a;
    a.xb = (const __nv_bfloat16 *)cb->q8x, a.sx = (const float *)((uint8_t *)cb->q8x + xbytes);
    a.part = cb->qtc_part, a.count = cb->qtc_count;
    a.M = M, a.mp = mp, a.K = K, a.ng = ng, a.sdt = (int)w0->scale_dtype, a.add = add;
    if (G == 32) qtc_queue<32>(cb, p, x);
    else if (G == 64) qtc_queue<64>(cb, p, x);
    else qtc_queue<128>(cb, p, x);
}

/* The rows a pass over the set's weights takes: QTC_SHARE_MAX_M where
 * the set's M rows take the shared-activation kernel (its wider tiles read
 * the codes once for twice the rows), else CUDA_QMMA_MAX_M. */
static int qtc_pass_rows(const cuda_backend *cb, int n, const em_weight *const *ws, int M) {
    return QTC_SHARE_WIDE && qtc_shares(cb, n, ws, M) ? QTC_SHARE_MAX_M : CUDA_QMMA_MAX_M;
}

/* Rows past a pass's take further passes over the weights, each row's
 * sums the same as in any other pass (a row's bits never depend on its
 * batch here). The passes share the rounding scratch in stream order. */
bool cuda_qtc_set(cuda_backend *cb, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                  const float *const *biases, bool add) {
    const size_t K = (size_t)ws[0]->cols;
    const int pm = qtc_pass_rows(cb, n, ws, M);
    for (int m0 = 0; m0 < M; m0 += pm) {
        float *yo[EM_MATMUL_GROUP_MAX];
        for (int i = 0; i < n; i++) yo[i] = ys[i] + (size_t)m0 * (size_t)ws[i]->rows;
        qtc_pass(cb, n, yo, x + (size_t)m0 * K, M - m0 < pm ? M - m0 : pm, ws, biases, add);
    }
    return true;
}
