/* cuda_qgemv_pipe.cu — the pipelined int8 GEMV of one or two activation
 * rows against 4- and 8-bit MLX affine weights (sm_90: bulk copies and
 * transaction barriers), for a set of matrices, an MLP's gate and up with
 * their SwiGLU, or a whole MLP in one launch. */
#include "backend/cuda/cuda_q8.cuh"

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
/* the most a block, one block a multiprocessor (qp_warps picks a launch's
 * count, QP_WARPS_MIN to QP_WARPS); 16 with twice the ring measured
 * slower on the H200 (8B 4-bit layer 58 against 54 us, head 106 against 95) */
#define QP_WARPS 32
#endif
#ifndef QP_WARPS_MIN
#define QP_WARPS_MIN 16
#endif
/* Whether a launch may take fewer warps a block where that shares a set's
 * rows out more evenly (qp_warps); 0 for 32 always (an A/B build). */
#ifndef QP_BALANCE
#define QP_BALANCE 1
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
    static constexpr int NS = (BITS == 4 ? 8 : 4) / SL;                   /* stages a ring: 4 KB of codes a warp */
    static constexpr int SEGB = BITS * 4;                                 /* bytes of a lane's codes a line */
    static constexpr int LB = 32 * SEGB;                                  /* bytes of a line's codes */
};

struct qp_args {
    gemv_set set;
    gemv_norm nm; /* the rows' norm (a first phase only) */
    const float *x;
    int M, K, lg;  /* activation rows, inputs, log2 of the group size */
    int nseg, lpr; /* segments and lines of a row */
    int rowb, rsb; /* bytes of a row's codes, and of its scales */
    int scb;       /* bytes of a whole line's scales */
    int items;     /* the set's rows, or an MLP's N */
};

/* Shared memory by 32-bit address: the loop's places stay plain integers. */
__device__ __forceinline__ unsigned qp_sa(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
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

/* A warp's share of a phase's items (rows, or an MLP's N): equal to
 * within one across the grid's warps. */
__device__ __forceinline__ int2 qp_share(const qp_args &a) {
    const int nw = blockDim.x / 32;
    long long W = (long long)gridDim.x * nw, gw = (long long)blockIdx.x * nw + threadIdx.x / 32;
    return make_int2((int)(gw * a.items / W), (int)((gw + 1) * a.items / W));
}

/* Every block of the grid has reached this point and its writes before it
 * are visible to all (the grid is one block a multiprocessor, all resident:
 * qp_mlp_smem). bar[0] counts arrivals, bar[1] is the generation the last
 * arrival advances, so the count is back to 0 after each use and needs no
 * reset between launches or replays. */
__device__ __forceinline__ void qp_grid_sync(unsigned *bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned gen, now;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(gen) : "l"(bar + 1) : "memory");
        __threadfence(); /* the block's writes (ordered before by the barrier) go before its arrival */
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar + 1) : "memory");
            while (now == gen);
        }
        __threadfence();
    }
    __syncthreads();
}

/* A warp's rows of one phase, from row `it0` on (`rows` of them: an MLP's
 * gate and up rows count apart), consuming ring stages from k on; `issue`
 * refills each slot once its lanes are done with it. inv: each activation
 * row's norm factor (q8_norm_inv), applied to its sums before the bias. */
template <int BITS, int SDT, int ROWS, bool SWI, typename Issue>
__device__ __forceinline__ void qp_rows(const qp_args &a, int it0, int rows, int &k, unsigned ring, unsigned sring,
                                        unsigned bars, unsigned xl, unsigned dl, const float *inv, Issue &issue) {
    constexpr int SL = qp_geom<BITS>::SL, NS = qp_geom<BITS>::NS, SEGB = qp_geom<BITS>::SEGB;
    constexpr int LB = qp_geom<BITS>::LB, ES = SDT == EM_F32 ? 4 : 2;
    const int lane = threadIdx.x % 32, ssb = 2 * SL * a.scb;
    const unsigned sl = (lane >> (a.lg - 5)) * ES; /* the lane's group's scale in a line's */
    qp_row cr = qp_row_at<SWI>(a, it0);
    float acc[ROWS], gate[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; m++) acc[m] = gate[m] = 0.0f;
    /* Line jj of the stage at (codes, scl), line j of the row, into acc. */
    /* A lane's part of line jj of the stage at (codes, scl): its codes, scale
     * and bias, read out of the ring. */
    struct qline {
        uint32_t w[BITS];
        float sc, bi;
    };
    auto fetch = [&](unsigned codes, unsigned scl, int jj) {
        qline q;
        uint4 v = cuda_lds16(codes + jj * LB);
        q.w[0] = v.x, q.w[1] = v.y, q.w[2] = v.z, q.w[3] = v.w;
        if (BITS == 8) {
            uint4 u = cuda_lds16(codes + jj * LB + 16);
            q.w[4 % BITS] = u.x, q.w[5 % BITS] = u.y, q.w[6 % BITS] = u.z, q.w[7 % BITS] = u.w;
        }
        q.sc = qp_scalar<SDT>(scl + jj * a.scb), q.bi = qp_scalar<SDT>(scl + (SL + jj) * a.scb);
        return q;
    };
    /* Its products with line j of the staged activations, into acc. */
    auto dot = [&](const qline &q, int j) {
        const float sc = q.sc, b = BITS == 8 ? fmaf(128.0f, q.sc, q.bi) : q.bi;
        const uint32_t *w = q.w;
#pragma unroll
        for (int m = 0; m < ROWS; m++) { /* ROWS is the launch's M (qp_set, qp_mlp: 1 or 2) */
            float2 ds = cuda_lds8f(dl + j * 256 + m * a.nseg * 8);
            unsigned xm = xl + j * 512 + m * a.K;
            uint4 x0 = cuda_lds16(xm), x1 = cuda_lds16(xm + a.K / 2);
            int d = q8_dot_x<BITS>(w, x0, x1);
            acc[m] = fmaf(sc * ds.x, (float)d, fmaf(b, ds.y, acc[m]));
        }
    };
    auto line = [&](unsigned codes, unsigned scl, int jj, int j) { dot(fetch(codes, scl, jj), j); };
    /* Whether a row's lines are whole (K a multiple of 1,024): a stage of
     * SL of them then runs its lines without a branch between, so the
     * compiler can interleave their loads and dot products. */
    const bool whole = a.nseg % 32 == 0;
    for (; rows > 0; rows--) {
        for (int j0 = 0; j0 < a.lpr; j0 += SL, k++) {
            const int s = k & (NS - 1);
            const unsigned codes = ring + s * (SL * LB) + lane * SEGB, scl = sring + s * ssb + sl;
            qp_bar_wait(bars + s * 8, (unsigned)(k / NS) & 1u);
            if (whole && j0 + SL <= a.lpr) {
                /* the slot read out first and refilled before the products, so
                 * its next copy is on the way while they run (H100, 8-layer 8B
                 * 4-bit: layer 58.5-58.8 -> 56.3 us, decode 1,570-1,578 ->
                 * 1,586-1,609 tok/s; 1B layer 24.6 -> 23.5 us) */
                qline q[SL];
#pragma unroll
                for (int jj = 0; jj < SL; jj++) q[jj] = fetch(codes, scl, jj);
                __syncwarp();
                if (lane == 0) issue();
#pragma unroll
                for (int jj = 0; jj < SL; jj++) dot(q[jj], j0 + jj);
                continue;
            }
#pragma unroll
            for (int jj = 0; jj < SL; jj++) {
                const int j = j0 + jj;
                if (SL > 1 && j >= a.lpr) break;
                if (j * 32 + lane >= a.nseg) continue; /* past a row's partial last line */
                line(codes, scl, jj, j);
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
                if (lane == m) {
                    float gv = gate[m] * inv[m] + (bg ? bg[cr.item] : 0.0f);
                    float up = acc[m] * inv[m] + (bu ? bu[cr.item] : 0.0f);
                    a.set.y[0][(size_t)m * a.items + cr.item] = gv / (1.0f + expf(-gv)) * up;
                }
        } else {
            const float *bias = a.set.bias[cr.g];
            int n = cr.item - a.set.start[cr.g], Ng = a.set.start[cr.g + 1] - a.set.start[cr.g];
#pragma unroll
            for (int m = 0; m < ROWS; m++)
                if (lane == m)
                    gemv_store(a.set.y[cr.g] + (size_t)m * Ng + n, acc[m] * inv[m] + (bias ? bias[n] : 0.0f),
                               a.set.add);
        }
#pragma unroll
        for (int m = 0; m < ROWS; m++) acc[m] = 0.0f;
        cr.next<SWI>(a);
    }
}

/* MLP: a second phase b (an MLP's down projection, of a.set.y[0], the
 * SwiGLU that phase a stores) after a grid-wide barrier. The ring runs on
 * across the barrier: lane 0 queues b's first stages as a's last slots
 * free, so the weights keep streaming while the grid waits for the SwiGLU
 * to be complete, where a second launch would start them only once this
 * one's block had left its multiprocessor. */
template <int BITS, int SDT, int ROWS, bool SWI, bool MLP>
__global__ void __launch_bounds__(QP_WARPS * 32, 1) qgemv_i8_pipe_kernel(qp_args a, qp_args b, unsigned *gbar) {
    static_assert(!MLP || SWI, "an MLP's first phase is its gate and up");
    constexpr int SL = qp_geom<BITS>::SL, NS = qp_geom<BITS>::NS, LB = qp_geom<BITS>::LB;
    static_assert((NS & (NS - 1)) == 0, "a ring of a power of two stages");
    extern __shared__ __align__(16) uint8_t qp_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    /* per warp: NS stages of codes, NS of (scales, biases), NS barriers */
    const int ssb = 2 * SL * a.scb; /* a stage's scales and biases (the phases share the group and dtype) */
    const unsigned ring = qp_sa(qp_smem) + warp * NS * (SL * LB);
    const unsigned sring = qp_sa(qp_smem) + nw * NS * (SL * LB) + warp * NS * ssb;
    const unsigned bars = qp_sa(qp_smem) + nw * NS * (SL * LB + ssb) + warp * NS * 8;
    int8_t *const xq = (int8_t *)(qp_smem + (size_t)nw * NS * (SL * LB + ssb + 8));
    const int kx = MLP ? max(a.K, b.K) : a.K; /* the longest row staged */
    float *const xd = (float *)(xq + (size_t)ROWS * kx);
    float *const red = xd + (size_t)ROWS * (kx / QG_SEG) * 2; /* the norm's sums, ROWS * nw */
    const int2 sa = qp_share(a), sb = MLP ? qp_share(b) : make_int2(0, 0);
    const int spa = (a.lpr + SL - 1) / SL, spb = (b.lpr + SL - 1) / SL; /* stages a row */
    const int na = (sa.y - sa.x) * (SWI ? 2 : 1) * spa, nb = (sb.y - sb.x) * spb; /* the warp's stages */
    /* lane 0 queues stage k (row pa of a, then pb of b; lines pj ..) into slot k % NS */
    qp_row pa = qp_row_at<SWI>(a, sa.x), pb = {0, 0, 0};
    if (MLP) pb = qp_row_at<false>(b, sb.x);
    int pj = 0, pk = 0;
    auto issue = [&]() {
        const int s = pk & (NS - 1);
        if (pk < na) {
            qp_issue<BITS, SWI>(a, pa, pj, ring + s * (SL * LB), sring + s * ssb, bars + s * 8);
            if ((pj += SL) >= a.lpr) pj = 0, pa.next<SWI>(a);
        } else if (MLP && pk < na + nb) {
            qp_issue<BITS, false>(b, pb, pj, ring + s * (SL * LB), sring + s * ssb, bars + s * 8);
            if ((pj += SL) >= b.lpr) pj = 0, pb.next<false>(b);
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
    q8_stage<BITS, ROWS, true>(xq, xd, NULL, a.K, a.x, a.K, 0, a.K, a.M, a.nm, red);
    __syncthreads();
    float inv[ROWS];
    q8_norm_inv<ROWS>(inv, a.nm, red, a.M, a.K);
    const unsigned xl = qp_sa(xq) + lane * 16, dl = qp_sa(xd) + lane * 8; /* the lane's place in the staged x */
    int k = 0;
    qp_rows<BITS, SDT, ROWS, SWI>(a, sa.x, na / spa, k, ring, sring, bars, xl, dl, inv, issue);
    if (MLP) {
        qp_grid_sync(gbar);
        q8_stage<BITS, ROWS, true, true>(xq, xd, NULL, b.K, b.x, b.K, 0, b.K, b.M);
        __syncthreads();
        q8_norm_inv<ROWS>(inv, b.nm, red, b.M, b.K);
        qp_rows<BITS, SDT, ROWS, false>(b, sb.x, nb / spb, k, ring, sring, bars, xl, dl, inv, issue);
    }
}

/* Whether the set's rows suit the pipelined kernel: scales whose rows are a
 * whole number of 16-byte chunks, and every array 16-byte aligned. */
static bool qp_fits(const gemv_set &set, const em_weight *w0) {
    int es = (int)dtype_size(w0->scale_dtype), gpr = (int)w0->cols / w0->group_size;
    if ((size_t)gpr * es % 16) return false;
    for (int i = 0; i < set.count; i++)
        if (((uintptr_t)set.w[i] | (uintptr_t)set.scales[i] | (uintptr_t)set.biases[i]) & 15) return false;
    return true;
}

/* Shared memory of the pipelined kernel of nw warps a block for `rows`
 * activation rows of K (the longest a launch stages); 0 where it exceeds
 * what a block may have. */
template <int BITS>
static size_t qp_smem_bytes(const cuda_backend *cb, const em_weight *w0, int rows, int K, int nw = QP_WARPS) {
    using G = qp_geom<BITS>;
    size_t scb = (size_t)(1024 / w0->group_size * dtype_size(w0->scale_dtype));
    size_t bytes = (size_t)nw * G::NS * (G::SL * (G::LB + 2 * scb) + 8) +
                   (size_t)rows * ((size_t)K + (size_t)K / QG_SEG * 8 + nw * 4);
    return bytes <= (size_t)cb->smem_optin ? bytes : 0;
}

/* Blocks of the grid of nw warps a block: one a multiprocessor, fewer for
 * sets of few rows. */
static int qp_blocks(const cuda_backend *cb, int items, int nw = QP_WARPS) {
    int blocks = (items + nw - 1) / nw;
    return blocks < cb->n_sm ? blocks : cb->n_sm;
}

/* The least share of the grid's warp time at work (qp_use) that counts as
 * balanced: the busiest warp within 1.2 rows a warp of the average. */
static const double QP_EVEN = 1.0 / 1.2;

/* The share of the grid's warp time that does work: items over (rows of
 * the busiest warp x warps), a warp owning whole rows. */
static double qp_use(const cuda_backend *cb, int items, int nw) {
    long long warps = (long long)qp_blocks(cb, items, nw) * nw, most = (items + warps - 1) / warps;
    return (double)items / ((double)most * (double)warps);
}

/* Warps a block for a set of `items` rows: QP_WARPS where they share out
 * over its warps to within 1.2 rows a warp of the busiest, else the most
 * warps within 3 % of the best use a count from QP_WARPS_MIN up gives. A
 * warp owns whole rows, so the kernel lasts as long as its busiest warp:
 * Qwen3.5-4B's 9,216 gate and up units leave warps of 32 a multiprocessor
 * 2 or 3 (73 % of the warp time used), warps of 24 nearly all 3 (97 %).
 * H100, ember-gemv-bench --shape qwen3.5-4b --bits 4: gate and up 16.4 ->
 * 13.5 us, q/k/v (10,240 rows, 26 warps) 10.4 -> 9.7, the layer 40.0 ->
 * 36.5; an 8-layer Qwen3.5-4B's 4-bit decode 1,551-1,569 -> 1,627-1,649
 * tok/s. Where 32 warps already balance, fewer gained nothing (the 8B's
 * 14,336 gate and up units: 27.3 us at 32 warps, 27.9 at 28). */
static int qp_warps(const cuda_backend *cb, int items) {
    if (!QP_BALANCE || qp_use(cb, items, QP_WARPS) >= QP_EVEN) return QP_WARPS;
    double best = 0.0;
    for (int nw = QP_WARPS_MIN; nw <= QP_WARPS; nw++) best = fmax(best, qp_use(cb, items, nw));
    int nw = QP_WARPS;
    while (qp_use(cb, items, nw) < best - 0.03) nw--;
    return nw;
}

/* A phase's arguments: the set (rows in order, or an MLP's gate and up
 * when swi) over x. */
template <int BITS>
static qp_args qp_args_make(const gemv_set &set, const em_weight *w0, const float *x, int M, bool swi,
                            const gemv_norm &nm = gemv_norm{}) {
    qp_args a;
    a.set = set, a.nm = nm, a.x = x, a.M = M, a.K = (int)w0->cols;
    a.lg = w0->group_size == 32 ? 5 : w0->group_size == 64 ? 6 : 7;
    int es = (int)dtype_size(w0->scale_dtype);
    a.nseg = a.K / QG_SEG, a.lpr = (a.nseg + 31) / 32;
    a.scb = (1024 >> a.lg) * es, a.rsb = (a.K >> a.lg) * es, a.rowb = a.K / 8 * BITS;
    a.items = swi ? set.start[1] : set.start[set.count];
    return a;
}

template <int BITS, int SDT, int ROWS, bool SWI, bool MLP>
static void qp_launch_sdt(cuda_backend *cb, const qp_args &a, const qp_args &b, int blocks, int nw, size_t smem) {
    auto kernel = qgemv_i8_pipe_kernel<BITS, SDT, ROWS, SWI, MLP>;
    cuda_note(cb, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              "quantized matmul (int8 gemv): shared memory");
    cuda_launch(kernel, (unsigned)blocks, (unsigned)nw * 32, smem, cb->stream, a, b, cb->grid_bar);
    CUDA_LAUNCHED(cb, MLP ? "quantized mlp (int8 gemv)" : "quantized matmul (int8 gemv)");
}

template <int BITS, int ROWS, bool SWI, bool MLP>
static void qp_launch_dt(cuda_backend *cb, em_dtype sdt, const qp_args &a, const qp_args &b, int blocks, int nw,
                         size_t smem) {
    if (sdt == EM_BF16) qp_launch_sdt<BITS, EM_BF16, ROWS, SWI, MLP>(cb, a, b, blocks, nw, smem);
    else if (sdt == EM_F16) qp_launch_sdt<BITS, EM_F16, ROWS, SWI, MLP>(cb, a, b, blocks, nw, smem);
    else qp_launch_sdt<BITS, EM_F32, ROWS, SWI, MLP>(cb, a, b, blocks, nw, smem);
}

/* Whether the warps of the grid get nearly equal work at qp_warps's count
 * a block: a warp owns whole rows, so 6,144 rows over 4,224 warps (the 8B
 * shape's q/k/v at 32 warps a block) would leave a third of the warps two
 * rows and the rest one, and the kernel end with the two-row warps:
 * measured on the H200 with step graphs, 9.3 us against the
 * register-resident kernel's 8.1, which balances by rows a warp (24 warps
 * a block balance them: 9.05 against 9.01 us on an H100); with at most
 * one row a warp (o, down: 6.4 against 6.6 us, 15.5 against 19.7) or many
 * (the head: 110 against 130 us) it is the faster. */
static bool qp_balanced(const cuda_backend *cb, int items) {
    int nw = qp_warps(cb, items);
    return items <= qp_blocks(cb, items, nw) * nw || qp_use(cb, items, nw) >= QP_EVEN;
}

bool cuda_qmlp_preferred(const cuda_backend *cb, const em_weight *wg) {
    return cb->qpipe_on && cb->qmlp && (cb->qmlp == 1 || !qp_balanced(cb, (int)wg->rows));
}

/* Queues the pipelined kernel; false (nothing queued) where it does not
 * apply. */
template <int BITS, int ROWS, bool SWI>
static bool qp_launch(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M,
                      const gemv_norm &nm) {
    qp_args a = qp_args_make<BITS>(set, w0, x, M, SWI, nm), none = {};
    const int nw = qp_warps(cb, a.items);
    size_t smem = qp_smem_bytes<BITS>(cb, w0, ROWS, (int)w0->cols, nw);
    if (!smem || !qp_fits(set, w0) || !qp_balanced(cb, a.items)) return false;
    qp_launch_dt<BITS, ROWS, SWI, false>(cb, w0->scale_dtype, a, none, qp_blocks(cb, a.items, nw), nw, smem);
    return true;
}

/* The pipelined kernel over the set (SWI: an MLP's gate and up, stored
 * as their SwiGLU), when it is on and applies. */
template <bool SWI>
static bool qp_set(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M,
                   const gemv_norm &nm) {
    if (!cb->qpipe_on) return false;
    if (w0->bits == 4)
        return M == 1 ? qp_launch<4, 1, SWI>(cb, set, w0, x, M, nm) : qp_launch<4, 2, SWI>(cb, set, w0, x, M, nm);
    return M == 1 ? qp_launch<8, 1, SWI>(cb, set, w0, x, M, nm) : qp_launch<8, 2, SWI>(cb, set, w0, x, M, nm);
}

bool cuda_qpipe_set(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M, bool swi,
                    const gemv_norm &nm) {
    return swi ? qp_set<true>(cb, set, w0, x, M, nm) : qp_set<false>(cb, set, w0, x, M, nm);
}

/* ---- A whole MLP in one launch ----
 *
 * Gate and up with their SwiGLU, a grid-wide barrier, then the down
 * projection of the SwiGLU (qgemv_i8_pipe_kernel's MLP phase). The barrier
 * needs every block of the grid resident at once: the grid is at most one
 * block a multiprocessor, and the block must fit one alone. */

/* The MLP's two phases over act (the SwiGLU) and y. */
template <int BITS>
static void qp_mlp_args(float *y, float *act, const float *x, int M, const em_weight *const *w,
                        const float *const *bias, qp_args *a, qp_args *b) {
    float *ys[2] = {act, act}, *yd[1] = {y};
    const em_weight *wgu[2] = {w[0], w[1]};
    const float *bgu[2] = {bias[0], bias[1]}, *bd[1] = {bias[2]};
    *a = qp_args_make<BITS>(gemv_set_make(2, ys, wgu, bgu), w[0], x, M, true);
    *b = qp_args_make<BITS>(gemv_set_make(1, yd, &w[2], bd), w[2], act, M, false);
}

/* Shared memory of the MLP launch, 0 where it does not apply. A block that
 * gets it fits a multiprocessor alone (its registers are bounded for 1,024
 * threads, and it asks no more than a block may opt in to), so a grid of
 * one block a multiprocessor is resident at once. */
template <int BITS, int ROWS>
static size_t qp_mlp_smem(const cuda_backend *cb, const em_weight *const *w, const qp_args &a, const qp_args &b) {
    int F = (int)w[0]->rows, H = (int)w[0]->cols;
    size_t smem = qp_smem_bytes<BITS>(cb, w[0], ROWS, F > H ? F : H);
    return smem && qp_fits(a.set, w[0]) && qp_fits(b.set, w[2]) ? smem : 0;
}

/* Queues the MLP launch; false (nothing queued, nothing recorded) where it
 * does not apply. */
template <int BITS, int ROWS>
static bool qp_mlp(em_backend *be, float *y, float *act, const float *x, int M, const em_weight *const *w,
                   const float *const *bias) {
    cuda_backend *cb = (cuda_backend *)be->impl;
    qp_args a, b;
    qp_mlp_args<BITS>(y, act, x, M, w, bias, &a, &b);
    size_t smem = qp_mlp_smem<BITS, ROWS>(cb, w, a, b);
    if (!smem) return false;
    cb = cuda_enter(be);
    const em_weight *g = w[0], *u = w[1], *d = w[2];
    if (cuda_graph_skip(cb, y, act, x, M, g->data, u->data, d->data, g->scales, u->scales, d->scales, g->biases,
                        u->biases, d->biases, bias[0], bias[1], bias[2], g->bits, g->rows, g->cols))
        return true;
    int blocks = qp_blocks(cb, a.items > b.items ? a.items : b.items);
    qp_launch_dt<BITS, ROWS, true, true>(cb, g->scale_dtype, a, b, blocks, QP_WARPS, smem);
    return true;
}

/* Whether matmul_mlp's three weights can run as one launch: 4- or 8-bit
 * codes alike in bits, group and scale dtype, gate and up [F, H], down
 * [H, F], each as the int8 GEMV takes them. */
static bool qp_mlp_weights(const em_weight *const *w) {
    const em_weight *g = w[0];
    if ((g->bits != 4 && g->bits != 8) || g->rows <= 0 || g->cols % 32 || g->rows % 32) return false;
    for (int i = 0; i < 3; i++) {
        const em_weight *q = w[i];
        if (q->bits != g->bits || q->group_size != g->group_size || q->scale_dtype != g->scale_dtype ||
            !qweight_ok(q) || !words_aligned(q->data, q->bits))
            return false;
    }
    return w[1]->rows == g->rows && w[1]->cols == g->cols && w[2]->rows == g->cols && w[2]->cols == g->rows;
}

/* backend.h's matmul_mlp for 4- and 8-bit weights. EMBER_CUDA_QMLP=auto
 * takes the one launch only where the gate and up alone would not balance
 * on the pipelined kernel (qp_balanced), and so would run on the
 * register-resident one: measured on the H200 against
 * two launches (ember bench --prompt-tokens 128 --gen-tokens 256, two runs
 * each), Qwen3.5-4B 4-bit (9,216 gate rows over 4,224 warps) 347-349 ->
 * 372-381 tok/s, before qp_warps balanced those rows at 24 warps a block
 * (two launches then beat it by 5 %), while where both balance the one
 * launch was no faster: Llama-3.1-8B 4-bit 506-511 -> 493-498, 8-bit 355
 * -> 345-346, the 1B 4-bit 1,579-1,602 -> 1,587-1,619. Its grid-wide
 * barrier is then slower than the dependency between two launches that
 * it replaces. */
bool cuda_qmatmul_mlp(em_backend *be, float *y, float *act, const float *x, int M, const em_weight *wg,
                      const em_weight *wu, const em_weight *wd, const float *bg, const float *bu, const float *bd,
                      em_math math, bool add) {
    const em_weight *w[3] = {wg, wu, wd};
    const float *bias[3] = {bg, bu, bd};
    const cuda_backend *cb = (const cuda_backend *)be->impl;
    if (add || math != EM_MATH_FAST || M < 1 || M > 2 || !cb->qpipe_on || !cb->qmlp || !qp_mlp_weights(w) ||
        (((uintptr_t)x | (uintptr_t)act) & 15) || (cb->qmlp == 2 && qp_balanced(cb, (int)wg->rows)))
        return false;
    if (wg->bits == 4) return M == 1 ? qp_mlp<4, 1>(be, y, act, x, M, w, bias) : qp_mlp<4, 2>(be, y, act, x, M, w, bias);
    return M == 1 ? qp_mlp<8, 1>(be, y, act, x, M, w, bias) : qp_mlp<8, 2>(be, y, act, x, M, w, bias);
}
