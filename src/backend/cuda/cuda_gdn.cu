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
 * decode and prefill alike — and no barrier stands between tokens. The chunked form of the CPU computes the same
 * function; on the GPU the recurrence over a block's tokens is cheap next
 * to the projections around it, so `chunk` only matters to the CPU. */
#include "backend/cuda/cuda_internal.cuh"

#define GDN_THREADS 256
#define DR_PARTS 4                   /* lanes per state column */
#define DR_COLS 32                   /* columns per block */
#define DR_THREADS (DR_COLS * DR_PARTS)
#define DR_MAX_DK 256                /* register-resident state up to this dk (NJ <= 64) */
#define CONV_THREADS 128
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
    cuda_launch(sigmoid_mul_kernel, cuda_blocks(total, GDN_THREADS), GDN_THREADS, 0, cb->stream, y, gate, rows, n, ld_gate);
    CUDA_LAUNCHED(cb, "sigmoid_mul");
}

/* ---- conv1d_silu ---- */

/* One thread per channel walks the tokens in order with the last K-1
 * inputs in a window (registers when KMAX is small): y may alias x because
 * a channel's input is read before its output is written, and no other
 * thread touches that channel. */
template <int KMAX>
__global__ void conv_kernel(float *y, const float *x, int n, int C, int ld, const float *w, int K, float *state) {
    cuda_pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    /* every index below is a compile-time constant after unrolling, so
     * the window and the taps stay in registers */
    float win[KMAX > 1 ? KMAX - 1 : 1], wc[KMAX > 1 ? KMAX - 1 : 1];
    float wlast = w[(size_t)c * K + K - 1];
#pragma unroll
    for (int r = 0; r < KMAX - 1; r++) {
        wc[r] = r < K - 1 ? w[(size_t)c * K + r] : 0.0f;
        win[r] = r < K - 1 ? state[(size_t)r * C + c] : 0.0f;
    }
    for (int t0 = 0; t0 < n; t0 += CONV_TOKENS) {
        /* the next inputs are loaded together so their latencies overlap;
         * reading rows ahead of writing this one is safe in place, as a
         * row of y aliases only the same row of x */
        float in[CONV_TOKENS];
#pragma unroll
        for (int u = 0; u < CONV_TOKENS; u++)
            if (t0 + u < n) in[u] = x[(size_t)(t0 + u) * ld + c];
#pragma unroll
        for (int u = 0; u < CONV_TOKENS; u++) {
            if (t0 + u >= n) break;
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
#pragma unroll
    for (int r = 0; r < KMAX - 1; r++)
        if (r < K - 1) state[(size_t)r * C + c] = win[r];
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
    dim3 grid(cuda_blocks((size_t)C, CONV_THREADS));
    if (K <= 4) cuda_launch(conv_kernel<4>, grid, CONV_THREADS, 0, cb->stream, y, x, n, C, ld, w, K, state);
    else if (K <= 8) cuda_launch(conv_kernel<8>, grid, CONV_THREADS, 0, cb->stream, y, x, n, C, ld, w, K, state);
    else cuda_launch(conv_kernel<CONV_MAX_KERNEL>, grid, CONV_THREADS, 0, cb->stream, y, x, n, C, ld, w, K, state);
    CUDA_LAUNCHED(cb, "conv1d_silu");
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

/* Grid (Hv, ceil(dv / DR_COLS)); NJ = rows of the column each lane holds
 * (ceil(dk / DR_PARTS) rounded up to the instantiation). Every warp
 * normalises the token's q and k itself (a warp reduction over dk), so
 * warps never wait on each other; the lanes then read the k and q entries
 * of their rows from L1 and scale them as the CPU's l2norm does. */
template <int NJ>
__global__ void __launch_bounds__(DR_THREADS) delta_rule_kernel(float *out, const float *qkv, int ld, const float *g,
                                                                const float *beta, float *state, int n, int Hk, int Hv,
                                                                int dk, int dv) {
    cuda_pdl_enter();
    int h = blockIdx.x, kh = h / (Hv / Hk), lane = threadIdx.x % 32;
    int part = threadIdx.x % DR_PARTS, c = blockIdx.y * DR_COLS + threadIdx.x / DR_PARTS;
    bool col = c < dv;
    float *S = state + (size_t)h * dk * dv;
    float s[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int i = part + DR_PARTS * j;
        s[j] = col && i < dk ? S[(size_t)i * dv + c] : 0.0f;
    }
    const float *q0 = qkv + (size_t)kh * dk, *k0 = qkv + (size_t)Hk * dk + (size_t)kh * dk;
    const float *v0 = qkv + (size_t)2 * Hk * dk + (size_t)h * dv;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        const float *qt = q0 + (size_t)t * ld, *kt = k0 + (size_t)t * ld;
        float iq, ik;
        qk_norms(qt, kt, dk, lane, qscale, &iq, &ik);
        float decay = expf(g[(size_t)t * Hv + h]), b = beta[(size_t)t * Hv + h];
        float kv = 0;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            int i = part + DR_PARTS * j;
            s[j] *= decay;
            if (i < dk) kv += s[j] * (kt[i] * ik);
        }
        kv = parts_sum(kv);
        float u = col ? b * (v0[(size_t)t * ld + c] - kv) : 0.0f;
        float o = 0;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            int i = part + DR_PARTS * j;
            if (i < dk) {
                s[j] += (kt[i] * ik) * u;
                o += s[j] * (qt[i] * iq);
            }
        }
        o = parts_sum(o);
        if (col && part == 0) out[(size_t)t * Hv * dv + (size_t)h * dv + c] = o;
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int i = part + DR_PARTS * j;
        if (col && i < dk) S[(size_t)i * dv + c] = s[j];
    }
}

/* The same recurrence for keys wider than DR_MAX_DK: the state stays in
 * device memory and is updated in place, token by token (the thread
 * mapping and arithmetic of delta_rule_kernel). */
__global__ void __launch_bounds__(DR_THREADS) delta_rule_wide_kernel(float *out, const float *qkv, int ld,
                                                                     const float *g, const float *beta, float *state,
                                                                     int n, int Hk, int Hv, int dk, int dv) {
    cuda_pdl_enter();
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

void cuda_gated_delta_rule(em_backend *be, float *out, const float *qkv, int ld, const float *g, const float *beta,
                           float *state, int n, int Hk, int Hv, int dk, int dv, int chunk) {
    (void)chunk; /* both forms compute the same function; the GPU runs the recurrence */
    cuda_backend *cb = cuda_enter(be);
    if (n <= 0 || Hv <= 0 || dv <= 0 || dk <= 0) return;
    if (Hk <= 0 || Hv % Hk != 0) {
        cuda_note(cb, cudaErrorInvalidValue, "gated_delta_rule (value heads not a multiple of key heads)");
        return;
    }
    dim3 grid((unsigned)Hv, (unsigned)((dv + DR_COLS - 1) / DR_COLS));
    int nj = (dk + DR_PARTS - 1) / DR_PARTS;
    if (nj <= 8)
        cuda_launch(delta_rule_kernel<8>, grid, DR_THREADS, 0, cb->stream, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv);
    else if (nj <= 16)
        cuda_launch(delta_rule_kernel<16>, grid, DR_THREADS, 0, cb->stream, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv);
    else if (nj <= 32)
        cuda_launch(delta_rule_kernel<32>, grid, DR_THREADS, 0, cb->stream, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv);
    else if (nj <= 64)
        cuda_launch(delta_rule_kernel<64>, grid, DR_THREADS, 0, cb->stream, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv);
    else
        cuda_launch(delta_rule_wide_kernel, grid, DR_THREADS, 0, cb->stream, out, qkv, ld, g, beta, state, n, Hk, Hv, dk, dv);
    CUDA_LAUNCHED(cb, "gated_delta_rule");
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
    cuda_launch(rmsnorm_gated_kernel, rows, threads, 0, cb->stream, y, x, z, gain, n, eps);
    CUDA_LAUNCHED(cb, "rmsnorm_gated");
}
