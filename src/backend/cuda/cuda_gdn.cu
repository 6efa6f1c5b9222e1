/* cuda_gdn.cu — the Gated DeltaNet operations on the GPU: the sigmoid
 * output gate, the fused causal conv1d + SiLU with its state tail, the
 * decay/strength gates, the gated delta rule and the gated RMSNorm. Each
 * mirrors its CPU counterpart in cpu_gdn.c (f32 arithmetic; the norm's sum
 * of squares in double).
 *
 * The delta rule is a per-column recurrence: for value column c of head h,
 *     S[:,c] <- exp(g) S[:,c];  u = beta (v[c] - S[:,c].k);  S[:,c] += k u;
 *     o[c] = S[:,c].q
 * so columns never talk to each other, only share the normalised q and k
 * of the token. A block owns DR_COLS columns of one value head; each column
 * is split over DR_PARTS lanes of a warp that hold its dk rows in
 * registers (row i with i % DR_PARTS == part), so the state is read from
 * memory once and written once per call however many tokens it runs —
 * decode and prefill alike — and no barrier stands between tokens. Spans
 * of 8 tokens or more stage the tokens' inputs in shared memory a tile
 * ahead (delta_rule_tiled_kernel) with the same per-token arithmetic, so
 * a prefill and its decode continue with the same bits. The chunked form
 * of the CPU computes the same function; `chunk` only matters to the CPU. */
#include "backend/cuda/cuda_internal.cuh"

#define GDN_THREADS 256
/* Lanes per state column: the more, the shorter each token's chain of
 * products and the more warps to interleave (4,096 tokens of Qwen3.5-4B's
 * shape on the H200, a layer's delta rule staged: 4 lanes 3.3 ms, 8 2.6,
 * 16 2.1). The parts' sums are a butterfly over them, so the bits depend
 * on this number (and on nothing else of the launch). */
#define DR_PARTS 16
#define DR_COLS 32                   /* columns per block */
#define DR_THREADS (DR_COLS * DR_PARTS)
#define DR_MAX_DK 256                /* register-resident state up to this dk (NJ <= 32) */
#define DR_TILED_MIN 8               /* tokens from which a call stages them (delta_rule_tiled_kernel) */
#define DR_TILE_MAX 32               /* tokens a tile, fewer where shared memory is short */
#define DR_TILED_SMEM_MAX ((size_t)48 << 10)
#define CONV_SEGS 16    /* warps (token segments) a block of 32 channels */
#define CONV_SEG_MIN 32 /* tokens a segment at least */
#define CONV_MAX_KERNEL 64
#define CONV_TOKENS 8 /* inputs in flight per thread */

__device__ __forceinline__ float gdn_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gdn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ---- sigmoid_mul ---- */

__global__ void sigmoid_mul_kernel(float *y, const float *gate, int rows, int n, int ld) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)rows * n;
    if (t >= total) return;
    size_t r = t / n, i = t % n;
    y[t] *= gdn_sigmoid(gate[r * ld + i]);
}

void cuda_sigmoid_mul(em_backend *be, float *y, const float *gate, int rows, int n, int ld_gate) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    size_t total = (size_t)rows * n;
    if (cuda_graph_skip(cb, y, gate, rows, n, ld_gate)) return;
    cuda_launch(sigmoid_mul_kernel, cuda_blocks(total, GDN_THREADS), GDN_THREADS, 0, cb->stream, y, gate, rows, n, ld_gate);
    CUDA_LAUNCHED(cb, "sigmoid_mul");
}

/* ---- conv1d_silu ---- */

/* A block owns 32 channels (a warp's lanes) and splits the tokens into
 * as many segments as it has warps; a thread walks its channel through
 * its segment in order with the last K-1 inputs in a window (registers
 * when KMAX is small). Each thread first reads the K-1 inputs before its
 * segment (x, or the state before the first token), then the block meets
 * at a barrier, so those reads precede every write: y may alias x, as a
 * thread writes only the rows of its own segment and channel. The last
 * segment's thread leaves its window, the last K-1 inputs, as the state.
 * Every output is the same sum over the same window, however the tokens
 * are split. With `states` (decode rows: n is 1), blockIdx.y is a row of
 * x and y, each of its own sequence, states[row] that sequence's state. */
template <int KMAX>
__global__ void conv_kernel(float *y, const float *x, int n, int C, int ld, const float *w, int K, float *state,
                            float *const *states) {
    /* the taps and the state are read before the wait: the kernel before
     * (a product or the gates) writes neither; the state was left by this
     * layer's last call, which has finished */
    if (states) {
        size_t row = blockIdx.y;
        state = states[row], x += row * ld, y += row * ld;
    }
    int c = blockIdx.x * 32 + threadIdx.x % 32, segs = blockDim.x / 32, seg = threadIdx.x / 32;
    int len = (n + segs - 1) / segs, t_begin = seg * len, t_end = t_begin + len < n ? t_begin + len : n;
    bool on = c < C;
    /* every index below is a compile-time constant after unrolling, so
     * the window and the taps stay in registers */
    float win[KMAX > 1 ? KMAX - 1 : 1], wc[KMAX > 1 ? KMAX - 1 : 1];
    float wlast = on ? w[(size_t)c * K + K - 1] : 0.0f;
#pragma unroll
    for (int r = 0; r < KMAX - 1; r++) {
        int p = t_begin - (K - 1) + r; /* the position window slot r holds */
        wc[r] = on && r < K - 1 ? w[(size_t)c * K + r] : 0.0f;
        win[r] = on && r < K - 1 && p < 0 ? state[(size_t)(p + K - 1) * C + c] : 0.0f;
    }
    cuda_pdl_enter();
#pragma unroll
    for (int r = 0; r < KMAX - 1; r++) { /* the window's rows of x (a segment after the first) */
        int p = t_begin - (K - 1) + r;
        if (on && r < K - 1 && p >= 0) win[r] = x[(size_t)p * ld + c];
    }
    __syncthreads(); /* the windows are read before any segment writes */
    if (!on) return;
    for (int t0 = t_begin; t0 < t_end; t0 += CONV_TOKENS) {
        /* the next inputs are loaded together so their latencies overlap;
         * reading rows ahead of writing this one is safe in place, as a
         * row of y aliases only the same row of x */
        float in[CONV_TOKENS];
#pragma unroll
        for (int u = 0; u < CONV_TOKENS; u++)
            if (t0 + u < t_end) in[u] = x[(size_t)(t0 + u) * ld + c];
#pragma unroll
        for (int u = 0; u < CONV_TOKENS; u++) {
            if (t0 + u >= t_end) break;
            float cur = in[u], acc = 0;
#pragma unroll
            for (int r = 0; r < KMAX - 1; r++)
                if (r < K - 1) acc += wc[r] * win[r];
            acc += wlast * cur;
#pragma unroll
            for (int r = 0; r + 1 < KMAX - 1; r++)
                if (r + 1 < K - 1) win[r] = win[r + 1];
            if (K > 1) {
#pragma unroll
                for (int r = 0; r < KMAX - 1; r++)
                    if (r == K - 2) win[r] = cur;
            }
            y[(size_t)(t0 + u) * ld + c] = gdn_silu(acc);
        }
    }
    if (t_end != n || t_begin >= n) return; /* only the segment that holds the last token */
#pragma unroll
    for (int r = 0; r < KMAX - 1; r++)
        if (r < K - 1) state[(size_t)r * C + c] = win[r];
}

static void conv_launch(cuda_backend *cb, dim3 grid, dim3 block, float *y, const float *x, int n, int C, int ld,
                        const float *w, int K, float *state, float *const *states) {
    if (K <= 4) cuda_launch(conv_kernel<4>, grid, block, 0, cb->stream, y, x, n, C, ld, w, K, state, states);
    else if (K <= 8) cuda_launch(conv_kernel<8>, grid, block, 0, cb->stream, y, x, n, C, ld, w, K, state, states);
    else cuda_launch(conv_kernel<CONV_MAX_KERNEL>, grid, block, 0, cb->stream, y, x, n, C, ld, w, K, state, states);
    CUDA_LAUNCHED(cb, "conv1d_silu");
}

void cuda_conv1d_silu(em_backend *be, float *y, const float *x, int n, int C, int ld, const float *w, int K,
                      float *state) {
    cuda_backend *cb = cuda_enter(be);
    if (C <= 0 || K <= 0) return;
    if (K > CONV_MAX_KERNEL) { /* the config parser bounds the kernel to 64 */
        cuda_note(cb, cudaErrorInvalidValue, "conv1d_silu (kernel wider than 64)");
        return;
    }
    if (n <= 0) return;
    /* a segment of at least CONV_SEG_MIN tokens a warp, at most CONV_SEGS warps */
    int segs = n / CONV_SEG_MIN < 1 ? 1 : n / CONV_SEG_MIN > CONV_SEGS ? CONV_SEGS : n / CONV_SEG_MIN;
    dim3 grid(cuda_blocks((size_t)C, 32)), block(32 * segs);
    if (cuda_graph_skip(cb, y, x, n, C, ld, w, K, state)) return;
    conv_launch(cb, grid, block, y, x, n, C, ld, w, K, state, NULL);
}

/* ---- gdn_gates ---- */

__global__ void gates_kernel(float *g, float *beta, const float *a, const float *b, int ld, const float *A_log,
                             const float *dt_bias, int n, int Hv) {
    cuda_pdl_enter();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n * Hv) return;
    size_t tok = t / Hv;
    int h = (int)(t % Hv);
    float av = a[tok * ld + h] + dt_bias[h], bv = b[tok * ld + h];
    float sp = av > 20.0f ? av : log1pf(expf(av));
    g[t] = -expf(A_log[h]) * sp;
    beta[t] = gdn_sigmoid(bv);
}

void cuda_gdn_gates(em_backend *be, float *g, float *beta, const float *a, const float *b, int ld_in,
                    const float *A_log, const float *dt_bias, int n, int Hv) {
    cuda_backend *cb = cuda_enter(be);
    if (n <= 0 || Hv <= 0) return;
    size_t total = (size_t)n * Hv;
    if (cuda_graph_skip(cb, g, beta, a, b, ld_in, A_log, dt_bias, n, Hv)) return;
    cuda_launch(gates_kernel, cuda_blocks(total, GDN_THREADS), GDN_THREADS, 0, cb->stream, g, beta, a, b, ld_in, A_log, dt_bias,
                                                                                  n, Hv);
    CUDA_LAUNCHED(cb, "gdn_gates");
}

/* ---- gated_delta_rule ---- */

/* Sum over the warp; every lane gets the result. */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the DR_PARTS lanes of one column (adjacent lanes). */
__device__ __forceinline__ float parts_sum(float v) {
#pragma unroll
    for (int o = 1; o < DR_PARTS; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The L2-normalisation factors of one token's query (times qscale) and key,
 * reduced over each warp (every warp of the block computes the same). */
__device__ __forceinline__ void qk_norms(const float *qt, const float *kt, int dk, int lane, float qscale, float *iq,
                                         float *ik) {
    float sq = 0, sk = 0;
    for (int i = lane; i < dk; i += 32) {
        float a = qt[i], b = kt[i];
        sq += a * a;
        sk += b * b;
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    *iq = qscale / sqrtf(sq + 1e-6f);
    *ik = 1.0f / sqrtf(sk + 1e-6f);
}

/* One token of the recurrence for this thread's rows of column c (row
 * i = part + DR_PARTS * j in s[j]): kt and qt are the token's key and
 * query (global or shared memory), raw with ik and iq their normalisation
 * factors, or already scaled by them (SCALED: the same products, rounded
 * once either way), v the column's value. Returns o[c] (summed over the
 * parts). Both kernels below step through this one function, so they give
 * the same bits. */
template <int NJ, bool SCALED>
__device__ __forceinline__ float dr_token(float (&s)[NJ], const float *kt, const float *qt, float ik, float iq,
                                          float decay, float b, float v, bool col, int part, int dk) {
    float kv = 0;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int i = part + DR_PARTS * j;
        s[j] *= decay;
        if (i < dk) kv += s[j] * (SCALED ? kt[i] : kt[i] * ik);
    }
    kv = parts_sum(kv);
    float u = col ? b * (v - kv) : 0.0f;
    float o = 0;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int i = part + DR_PARTS * j;
        if (i < dk) {
            s[j] += (SCALED ? kt[i] : kt[i] * ik) * u;
            o += s[j] * (SCALED ? qt[i] : qt[i] * iq);
        }
    }
    return parts_sum(o);
}

/* Decode rows: the block's row of out, qkv, g and beta, and the state of
 * its sequence. */
__device__ __forceinline__ void dr_row(float *&out, const float *&qkv, const float *&g, const float *&beta,
                                       float *&state, float *const *states, int ld, int Hv, int dv) {
    size_t row = blockIdx.z;
    out += row * Hv * dv, qkv += row * ld, g += row * Hv, beta += row * Hv, state = states[row];
}

/* The block's columns of the state into registers (load) or back (store). */
template <int NJ, bool STORE>
__device__ __forceinline__ void dr_state(float (&s)[NJ], float *S, int part, int c, bool col, int dk, int dv) {
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int i = part + DR_PARTS * j;
        if (STORE) {
            if (col && i < dk) S[(size_t)i * dv + c] = s[j];
        } else {
            s[j] = col && i < dk ? S[(size_t)i * dv + c] : 0.0f;
        }
    }
}

/* Grid (Hv, ceil(dv / DR_COLS)); NJ = rows of the column each lane holds
 * (ceil(dk / DR_PARTS) rounded up to the instantiation). Every warp
 * normalises the token's q and k itself (a warp reduction over dk), so
 * warps never wait on each other; the lanes then read the k and q entries
 * of their rows from L1 and scale them as the CPU's l2norm does. Decode
 * steps and short spans: each token's loads and norms lie on the path
 * from one token to the next, which delta_rule_tiled_kernel avoids.
 * With `states` (decode rows: n is 1), blockIdx.z is a row, each of its
 * own sequence (dr_row). */
template <int NJ>
__global__ void __launch_bounds__(DR_THREADS) delta_rule_kernel(float *out, const float *qkv, int ld, const float *g,
                                                                const float *beta, float *state, int n, int Hk, int Hv,
                                                                int dk, int dv, float *const *states) {
    if (states) dr_row(out, qkv, g, beta, state, states, ld, Hv, dv);
    int h = blockIdx.x, kh = h / (Hv / Hk), lane = threadIdx.x % 32;
    int part = threadIdx.x % DR_PARTS, c = blockIdx.y * DR_COLS + threadIdx.x / DR_PARTS;
    bool col = c < dv;
    float *S = state + (size_t)h * dk * dv;
    float s[NJ];
    /* the state is read before the wait: only this layer's last call,
     * which has finished, wrote it (the kernel before is the convolution) */
    dr_state<NJ, false>(s, S, part, c, col, dk, dv);
    cuda_pdl_enter();
    const float *q0 = qkv + (size_t)kh * dk, *k0 = qkv + (size_t)Hk * dk + (size_t)kh * dk;
    const float *v0 = qkv + (size_t)2 * Hk * dk + (size_t)h * dv;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        const float *qt = q0 + (size_t)t * ld, *kt = k0 + (size_t)t * ld;
        float iq, ik;
        qk_norms(qt, kt, dk, lane, qscale, &iq, &ik);
        float decay = expf(g[(size_t)t * Hv + h]), b = beta[(size_t)t * Hv + h];
        float v = col ? v0[(size_t)t * ld + c] : 0.0f;
        float o = dr_token<NJ, false>(s, kt, qt, ik, iq, decay, b, v, col, part, dk);
        if (col && part == 0) out[(size_t)t * Hv * dv + (size_t)h * dv + c] = o;
    }
    dr_state<NJ, true>(s, S, part, c, col, dk, dv);
}

/* Prefill spans: the same recurrence (dr_token, so the same bits), with the
 * tokens' keys, queries, values and gates staged in shared memory a tile of
 * `tt` tokens at a time by asynchronous copies one tile ahead, and each
 * tile's keys and queries normalised in place by the block's warps
 * together (a token each) before the tile runs. A token's step then waits
 * only on the state and shared memory, not on global loads and warp
 * reductions (4,096 tokens of
 * Qwen3.5-4B's shape spent 2.1 us a token a layer in delta_rule_kernel).
 * Per buffer: keys [tt][dk], queries [tt][dk], the block's value columns
 * [tt][DR_COLS], g [tt], beta [tt]; after both buffers, exp(g) of the
 * tile being run. */
struct dr_tile {
    float *k, *q, *v, *g, *b;
};

__device__ __forceinline__ dr_tile dr_buffer(float *smem, int buf, int tt, int dk) {
    dr_tile d;
    d.k = smem + (size_t)buf * tt * (2 * dk + DR_COLS + 2);
    d.q = d.k + (size_t)tt * dk;
    d.v = d.q + (size_t)tt * dk;
    d.g = d.v + (size_t)tt * DR_COLS;
    d.b = d.g + tt;
    return d;
}

/* Issues (and commits as one group) the copies of tokens [t0, t0 + nt). */
__device__ __forceinline__ void dr_issue(const dr_tile &d, const float *qkv, int ld, const float *g, const float *beta,
                                         int t0, int nt, int Hk, int Hv, int h, int dk, int dv) {
    int kh = h / (Hv / Hk), c0 = blockIdx.y * DR_COLS, ncol = dv - c0 < DR_COLS ? dv - c0 : DR_COLS;
    const float *q0 = qkv + (size_t)t0 * ld + (size_t)kh * dk, *k0 = q0 + (size_t)Hk * dk;
    const float *v0 = qkv + (size_t)t0 * ld + (size_t)2 * Hk * dk + (size_t)h * dv + c0;
    for (int e = threadIdx.x; e < nt * dk; e += blockDim.x) {
        int tok = e / dk, i = e - tok * dk;
        cp_async4(d.k + e, k0 + (size_t)tok * ld + i);
        cp_async4(d.q + e, q0 + (size_t)tok * ld + i);
    }
    for (int e = threadIdx.x; e < nt * DR_COLS; e += blockDim.x) {
        int tok = e / DR_COLS, cc = e % DR_COLS;
        if (cc < ncol) cp_async4(d.v + e, v0 + (size_t)tok * ld + cc);
    }
    for (int e = threadIdx.x; e < nt; e += blockDim.x) {
        cp_async4(d.g + e, g + (size_t)(t0 + e) * Hv + h);
        cp_async4(d.b + e, beta + (size_t)(t0 + e) * Hv + h);
    }
    cp_async_commit();
}

template <int NJ>
__global__ void __launch_bounds__(DR_THREADS)
    delta_rule_tiled_kernel(float *out, const float *qkv, int ld, const float *g, const float *beta, float *state,
                            int n, int Hk, int Hv, int dk, int dv, int tt) {
    cuda_pdl_enter();
    extern __shared__ __align__(16) float dr_smem[];
    int h = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int part = threadIdx.x % DR_PARTS, cl = threadIdx.x / DR_PARTS, c = blockIdx.y * DR_COLS + cl;
    bool col = c < dv;
    float *sdec = dr_smem + (size_t)2 * tt * (2 * dk + DR_COLS + 2);
    float *S = state + (size_t)h * dk * dv;
    float s[NJ];
    dr_state<NJ, false>(s, S, part, c, col, dk, dv);
    float qscale = 1.0f / sqrtf((float)dk);
    dr_issue(dr_buffer(dr_smem, 0, tt, dk), qkv, ld, g, beta, 0, n < tt ? n : tt, Hk, Hv, h, dk, dv);
    for (int t0 = 0, buf = 0; t0 < n; t0 += tt, buf ^= 1) {
        int nt = n - t0 < tt ? n - t0 : tt, t1 = t0 + tt;
        if (t1 < n)
            dr_issue(dr_buffer(dr_smem, buf ^ 1, tt, dk), qkv, ld, g, beta, t1, n - t1 < tt ? n - t1 : tt, Hk, Hv, h,
                     dk, dv);
        else
            cp_async_commit(); /* an empty group keeps the count of groups in flight the same */
        cp_async_wait_prior();  /* this tile's copies (all but the newest group) */
        __syncthreads();
        dr_tile d = dr_buffer(dr_smem, buf, tt, dk);
        for (int tl = warp; tl < nt; tl += DR_THREADS / 32) {
            float iq, ik, *qt = d.q + (size_t)tl * dk, *kt = d.k + (size_t)tl * dk;
            qk_norms(qt, kt, dk, lane, qscale, &iq, &ik);
            for (int i = lane; i < dk; i += 32) qt[i] *= iq, kt[i] *= ik; /* a lane's own entries */
            if (lane == 0) sdec[tl] = expf(d.g[tl]);
        }
        __syncthreads();
        /* unrolled so one token's output sum overlaps the next token's
         * products (same arithmetic; 2.1 -> 2.0 ms a layer as above) */
#pragma unroll 4
        for (int tl = 0; tl < nt; tl++) {
            float v = col ? d.v[tl * DR_COLS + cl] : 0.0f;
            float o = dr_token<NJ, true>(s, d.k + (size_t)tl * dk, d.q + (size_t)tl * dk, 1.0f, 1.0f, sdec[tl], d.b[tl],
                                         v, col, part, dk);
            if (col && part == 0) out[(size_t)(t0 + tl) * Hv * dv + (size_t)h * dv + c] = o;
        }
        __syncthreads(); /* the next iteration's copies overwrite this buffer */
    }
    dr_state<NJ, true>(s, S, part, c, col, dk, dv);
}

/* The same recurrence for keys wider than DR_MAX_DK: the state stays in
 * device memory and is updated in place, token by token (the thread
 * mapping and arithmetic of delta_rule_kernel). */
__global__ void __launch_bounds__(DR_THREADS) delta_rule_wide_kernel(float *out, const float *qkv, int ld,
                                                                     const float *g, const float *beta, float *state,
                                                                     int n, int Hk, int Hv, int dk, int dv,
                                                                     float *const *states) {
    cuda_pdl_enter();
    if (states) dr_row(out, qkv, g, beta, state, states, ld, Hv, dv);
    int h = blockIdx.x, kh = h / (Hv / Hk), lane = threadIdx.x % 32;
    int part = threadIdx.x % DR_PARTS, c = blockIdx.y * DR_COLS + threadIdx.x / DR_PARTS;
    bool col = c < dv;
    float *S = state + (size_t)h * dk * dv;
    const float *q0 = qkv + (size_t)kh * dk, *k0 = qkv + (size_t)Hk * dk + (size_t)kh * dk;
    const float *v0 = qkv + (size_t)2 * Hk * dk + (size_t)h * dv;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        const float *qt = q0 + (size_t)t * ld, *kt = k0 + (size_t)t * ld;
        float iq, ik;
        qk_norms(qt, kt, dk, lane, qscale, &iq, &ik);
        float decay = expf(g[(size_t)t * Hv + h]), b = beta[(size_t)t * Hv + h];
        float kv = 0;
        if (col)
            for (int i = part; i < dk; i += DR_PARTS) {
                float v = S[(size_t)i * dv + c] * decay;
                S[(size_t)i * dv + c] = v;
                kv += v * (kt[i] * ik);
            }
        kv = parts_sum(kv);
        float u = col ? b * (v0[(size_t)t * ld + c] - kv) : 0.0f;
        float o = 0;
        if (col)
            for (int i = part; i < dk; i += DR_PARTS) {
                float v = S[(size_t)i * dv + c] + (kt[i] * ik) * u;
                S[(size_t)i * dv + c] = v;
                o += v * (qt[i] * iq);
            }
        o = parts_sum(o);
        if (col && part == 0) out[(size_t)t * Hv * dv + (size_t)h * dv + c] = o;
    }
}

/* Shared memory of delta_rule_tiled_kernel for tiles of tt tokens. */
static size_t dr_tiled_smem(int tt, int dk) {
    return ((size_t)2 * tt * (2 * (size_t)dk + DR_COLS + 2) + (size_t)tt) * sizeof(float);
}

/* The register-resident kernels for NJ rows a lane: staged from
 * DR_TILED_MIN tokens on (tiles as long as the shared memory allows),
 * token by token below. */
template <int NJ>
static void dr_launch(cuda_backend *cb, dim3 grid, float *out, const float *qkv, int ld, const float *g,
                      const float *beta, float *state, int n, int Hk, int Hv, int dk, int dv, float *const *states) {
    if (n < DR_TILED_MIN || states) {
        cuda_launch(delta_rule_kernel<NJ>, grid, DR_THREADS, 0, cb->stream, out, qkv, ld, g, beta, state, n, Hk, Hv, dk,
                    dv, states);
        return;
    }
    int tt = DR_TILE_MAX;
    while (tt > 1 && dr_tiled_smem(tt, dk) > DR_TILED_SMEM_MAX) tt /= 2;
    cuda_launch(delta_rule_tiled_kernel<NJ>, grid, DR_THREADS, dr_tiled_smem(tt, dk), cb->stream, out, qkv, ld, g, beta,
                state, n, Hk, Hv, dk, dv, tt);
}

/* The delta rule's launch: the kernel for dk's rows a lane, over grid
 * (Hv, column blocks, rows: 1, or the decode rows of `states`). */
static void dr_dispatch(cuda_backend *cb, unsigned rows, float *out, const float *qkv, int ld, const float *g,
                        const float *beta, float *state, int n, int Hk, int Hv, int dk, int dv, float *const *states) {
    dim3 grid((unsigned)Hv, (unsigned)((dv + DR_COLS - 1) / DR_COLS), rows);
    int nj = (dk + DR_PARTS - 1) / DR_PARTS;
    if (dk > DR_MAX_DK)
        cuda_launch(delta_rule_wide_kernel, grid, DR_THREADS, 0, cb->stream, out, qkv, ld, g, beta, state, n, Hk, Hv, dk,
                    dv, states);
    else if (nj <= 4) dr_launch<4>(cb, grid, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv, states);
    else if (nj <= 8) dr_launch<8>(cb, grid, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv, states);
    else if (nj <= 16) dr_launch<16>(cb, grid, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv, states);
    else dr_launch<32>(cb, grid, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv, states);
    CUDA_LAUNCHED(cb, "gated_delta_rule");
}

static bool dr_heads_ok(cuda_backend *cb, int Hk, int Hv) {
    if (Hk > 0 && Hv % Hk == 0) return true;
    cuda_note(cb, cudaErrorInvalidValue, "gated_delta_rule (value heads not a multiple of key heads)");
    return false;
}

void cuda_gated_delta_rule(em_backend *be, float *out, const float *qkv, int ld, const float *g, const float *beta,
                           float *state, int n, int Hk, int Hv, int dk, int dv, int chunk) {
    (void)chunk; /* both forms compute the same function; the GPU runs the recurrence */
    cuda_backend *cb = cuda_enter(be);
    if (n <= 0 || Hv <= 0 || dv <= 0 || dk <= 0 || !dr_heads_ok(cb, Hk, Hv)) return;
    if (cuda_graph_skip(cb, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv)) return;
    dr_dispatch(cb, 1, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv, NULL);
}

/* ---- decode rows of several sequences ---- */

bool cuda_gdn_mix_rows(em_backend *be, float *core, float *qkv, int C, const float *conv_w, int K, const float *g,
                       const float *beta, float *const *conv_states, float *const *ssm_states, int rows, int Hk, int Hv,
                       int dk, int dv) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || rows > 65535 || C <= 0 || K <= 0 || K > CONV_MAX_KERNEL || Hv <= 0 || dv <= 0 || dk <= 0 ||
        Hk <= 0 || Hv % Hk)
        return false;
    size_t tb = (size_t)rows * sizeof(float *);
    cuda_stage_begin(cb, 2 * tb, 2);
    float *const *cs = (float *const *)cuda_stage_put(cb, conv_states, tb);
    float *const *ss = (float *const *)cuda_stage_put(cb, ssm_states, tb);
    if (!cs || !ss) return true; /* noted (or the recording broken) */
    cuda_stage_flush(cb);
    if (cuda_graph_skip(cb, core, qkv, C, conv_w, K, g, beta, rows, Hk, Hv, dk, dv)) return true;
    /* one token a row: a warp of 32 channels a block, a block a row */
    conv_launch(cb, dim3(cuda_blocks((size_t)C, 32), (unsigned)rows), dim3(32), qkv, qkv, 1, C, C, conv_w, K, NULL, cs);
    dr_dispatch(cb, (unsigned)rows, core, qkv, C, g, beta, NULL, 1, Hk, Hv, dk, dv, ss);
    return true;
}

/* ---- rmsnorm_gated ---- */

/* One block per row; y may alias x (every read of x precedes the barrier). */
__global__ void rmsnorm_gated_kernel(float *y, const float *x, const float *z, const float *gain, int n, float eps) {
    cuda_pdl_enter();
    __shared__ double red[32];
    size_t off = (size_t)blockIdx.x * n;
    const float *xr = x + off, *zr = z + off;
    float *yr = y + off;
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * xr[i];
    ss = cuda_block_sum_d(ss, red);
    float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * gain[i] * gdn_silu(zr[i]);
}

void cuda_rmsnorm_gated(em_backend *be, float *y, const float *x, const float *z, const float *gain, int rows, int n,
                        float eps) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    int threads = n >= 256 ? 256 : n >= 128 ? 128 : 64;
    if (cuda_graph_skip(cb, y, x, z, gain, rows, n, eps)) return;
    cuda_launch(rmsnorm_gated_kernel, rows, threads, 0, cb->stream, y, x, z, gain, n, eps);
    CUDA_LAUNCHED(cb, "rmsnorm_gated");
}
