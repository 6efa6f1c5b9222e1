/* cuda_attention_tc.cu — the tiled prefill attention on tensor cores, for
 * FAST batches (em_kv_spans.math) with head_dim 64 or 128.
 *
 * Same work items, tiles of 64 (query row, head) pairs of one kv head, and
 * partial-result format as attention_tiled_kernel (cuda_attention_prefill.cu),
 * so the plan and tile_merge serve both. Per tile of 64 keys a block of 8
 * warps:
 *   1. rounds the keys and values (f32 in the paged cache) to bf16 in shared
 *      memory;
 *   2. S = Q Kᵀ on tensor cores (bf16 in, f32 out; wmma 16x16x16), stored
 *      to shared memory;
 *   3. 4 threads per pair row apply the causal / window / range mask and
 *      the online softmax (f32), write P rounded to bf16, and rescale the
 *      row's output accumulator (f32, shared memory) by the change of the
 *      row maximum;
 *   4. O += P V on tensor cores, the accumulator loaded from and stored
 *      back to shared memory.
 * The row sum l adds the rounded weights, so O / l normalises what was
 * multiplied. FAST allows rounding activations: queries, keys, values and
 * weights are rounded to bf16 here; sums stay f32. Every sum has a fixed
 * order, so a tile's result is reproducible. */
#include "backend/cuda/cuda_internal.cuh"

#include <mma.h>

#define TC_THREADS 256
#define TC_PAIRS 64 /* as TILE_PAIRS */
#define TC_KEYS 64

using namespace nvcuda;

/* Shared-memory layout for HD: padded leading dimensions (multiples of 8
 * bf16 / 4 f32, as wmma needs) keep the rows of a fragment in different
 * banks. */
template <int HD> struct tc_layout {
    static constexpr int LQ = HD + 8, LS = TC_KEYS + 4, LP = TC_KEYS + 8, LO = HD + 4;
    static constexpr size_t q = 0, k = q + (size_t)TC_PAIRS * LQ * 2, v = k + (size_t)TC_KEYS * LQ * 2,
                            s = v + (size_t)TC_KEYS * LQ * 2, p = s + (size_t)TC_PAIRS * LS * 4,
                            o = p + (size_t)TC_PAIRS * LP * 2, bytes = o + (size_t)TC_PAIRS * LO * 4;
};

__device__ __forceinline__ void tc_put4(__nv_bfloat16 *d, float4 v) {
    *(__nv_bfloat162 *)d = __floats2bfloat162_rn(v.x, v.y);
    *(__nv_bfloat162 *)(d + 2) = __floats2bfloat162_rn(v.z, v.w);
}

template <int HD>
__global__ void __launch_bounds__(TC_THREADS)
    attention_tc_kernel(float *out, float *part, const float *q, float *const *base, const int32_t *toff,
                        const int32_t *pos, const int32_t *tiles, int n, int n_heads, int group, int n_kv, int bs,
                        float scale, int window) {
    cuda_pdl_enter();
    using L = tc_layout<HD>;
    extern __shared__ float4 tc_sm4[];
    char *sm = (char *)tc_sm4;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)(sm + L::q), *Ks = (__nv_bfloat16 *)(sm + L::k),
                  *Vs = (__nv_bfloat16 *)(sm + L::v), *Ps = (__nv_bfloat16 *)(sm + L::p);
    float *Ss = (float *)(sm + L::s), *Os = (float *)(sm + L::o);
    int tile = (int)blockIdx.x / n_kv, kvh = (int)blockIdx.x % n_kv, t = (int)threadIdx.x, warp = t / 32;
    const int32_t *tl = tiles + (size_t)CUDA_TILE_FIELDS * tile;
    int row0 = tl[0], pairs = tl[1] * group, lo = tl[2], hi = tl[3], slot = tl[4];
    float *const *kb = base + toff[row0], *const *vb = base + toff[n + row0];
    size_t rowlen = (size_t)n_kv * HD, head_off = (size_t)kvh * HD;
    constexpr int C4 = HD / 4;

    for (int i = t; i < TC_PAIRS * C4; i += TC_THREADS) {
        int pr = i / C4, d = (i % C4) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (pr < pairs)
            v = *(const float4 *)(q + ((size_t)(row0 + pr / group) * n_heads + (size_t)kvh * group + pr % group) * HD + d);
        tc_put4(Qs + pr * L::LQ + d, v);
        *(float4 *)(Os + pr * L::LO + d) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    /* the softmax thread of a pair row: 4 per row, 16 columns each */
    int sr = t / 4, sc0 = (t % 4) * (TC_KEYS / 4);
    int rp = sr < pairs ? pos[row0 + sr / group] : -1; /* -1: a padding pair sees no key */
    float m = -INFINITY, l = 0.0f;

    for (int k0 = lo; k0 <= hi; k0 += TC_KEYS) {
        __syncthreads(); /* the previous tile's readers of Ks, Vs, Ps and Os are done */
        for (int i = t; i < TC_KEYS * C4; i += TC_THREADS) {
            int kr = i / C4, d = (i % C4) * 4, key = k0 + kr;
            float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
            if (key <= hi) {
                size_t off = (size_t)(key % bs) * rowlen + head_off + d;
                kv = *(const float4 *)(kb[key / bs] + off);
                vv = *(const float4 *)(vb[key / bs] + off);
            }
            tc_put4(Ks + kr * L::LQ + d, kv);
            tc_put4(Vs + kr * L::LQ + d, vv);
        }
        __syncthreads();
        /* S: 4 x 4 tiles of 16 x 16; warp w takes row band w / 2, column bands 2 (w % 2) and + 1 */
        {
            int rb = warp / 2;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                int cb = (warp % 2) * 2 + c;
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::fill_fragment(acc, 0.0f);
#pragma unroll
                for (int kk = 0; kk < HD; kk += 16) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
                    wmma::load_matrix_sync(a, Qs + rb * 16 * L::LQ + kk, L::LQ);
                    wmma::load_matrix_sync(b, Ks + cb * 16 * L::LQ + kk, L::LQ); /* Kᵀ: key rows as columns */
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(Ss + rb * 16 * L::LS + cb * 16, acc, L::LS, wmma::mem_row_major);
            }
        }
        __syncthreads();
        /* online softmax of pair row sr over its 16 columns, reduced over the row's 4 lanes */
        {
            float s[TC_KEYS / 4], mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TC_KEYS / 4; j++) {
                int kp = k0 + sc0 + j;
                bool seen = kp <= rp && kp <= hi && (window <= 0 || kp > rp - window);
                s[j] = seen ? Ss[sr * L::LS + sc0 + j] * scale : -INFINITY;
                mx = fmaxf(mx, s[j]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float m_new = fmaxf(m, mx);
            float mu = m_new == -INFINITY ? 0.0f : m_new; /* no key seen yet: every weight is 0 */
            float corr = expf(m - mu), rs = 0.0f;
#pragma unroll
            for (int j = 0; j < TC_KEYS / 4; j += 2) {
                __nv_bfloat162 pb = __floats2bfloat162_rn(expf(s[j] - mu), expf(s[j + 1] - mu));
                *(__nv_bfloat162 *)(Ps + sr * L::LP + sc0 + j) = pb;
                rs += __bfloat162float(pb.x) + __bfloat162float(pb.y);
            }
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            rs += __shfl_xor_sync(0xffffffffu, rs, 2);
            l = l * corr + rs;
            m = m_new;
            for (int d = (t % 4) * (HD / 4); d < (t % 4 + 1) * (HD / 4); d += 4) {
                float4 *o = (float4 *)(Os + sr * L::LO + d);
                float4 v = *o;
                v.x *= corr, v.y *= corr, v.z *= corr, v.w *= corr;
                *o = v;
            }
        }
        __syncthreads();
        /* O += P V: 4 x HD/16 tiles; warp w takes row band w % 4 and every other column band */
        {
            int rb = warp % 4;
            for (int cb = warp / 4; cb < HD / 16; cb += 2) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                float *o = Os + rb * 16 * L::LO + cb * 16;
                wmma::load_matrix_sync(acc, o, L::LO, wmma::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < TC_KEYS; kk += 16) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                    wmma::load_matrix_sync(a, Ps + rb * 16 * L::LP + kk, L::LP);
                    wmma::load_matrix_sync(b, Vs + kk * L::LQ + cb * 16, L::LQ);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(o, acc, L::LO, wmma::mem_row_major);
            }
        }
    }
    __syncthreads(); /* Os complete */
    if (sr >= pairs) return;
    int d0 = (t % 4) * (HD / 4);
    if (slot >= 0) { /* a share of the tile's keys: the unnormalised partial, for tile_merge */
        float *pp = part + (((size_t)slot * n_kv + kvh) * TC_PAIRS + sr) * (HD + 2);
        if (t % 4 == 0) pp[0] = m, pp[1] = l;
        for (int d = d0; d < d0 + HD / 4; d++) pp[2 + d] = Os[sr * L::LO + d];
        return;
    }
    float inv = 1.0f / l;
    float *o = out + ((size_t)(row0 + sr / group) * n_heads + (size_t)kvh * group + sr % group) * HD;
    for (int d = d0; d < d0 + HD / 4; d++) o[d] = Os[sr * L::LO + d] * inv;
}

bool cuda_attention_tc_fits(cuda_backend *cb, int head_dim) {
    int optin = 0;
    if (head_dim != 64 && head_dim != 128) return false;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cb->device) != cudaSuccess) return false;
    return (head_dim == 64 ? tc_layout<64>::bytes : tc_layout<128>::bytes) <= (size_t)optin;
}

template <int HD>
static void tc_launch(cuda_backend *cb, unsigned blocks, float *out, float *part, const float *q, float *const *base,
                      const int32_t *toff, const int32_t *pos, const int32_t *tiles, int n, int n_heads, int n_kv,
                      int bs, float scale, int window) {
    size_t smem = tc_layout<HD>::bytes;
    cuda_note(cb, cudaFuncSetAttribute(attention_tc_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              "attention (tensor cores): shared memory");
    cuda_launch(attention_tc_kernel<HD>, blocks, TC_THREADS, smem, cb->stream, out, part, q, base, toff, pos, tiles, n, n_heads,
                                                                     n_heads / n_kv, n_kv, bs, scale, window);
    CUDA_LAUNCHED(cb, "attention (tensor cores)");
}

void cuda_attention_tc(cuda_backend *cb, unsigned blocks, float *out, float *part, const float *q, float *const *base,
                       const int32_t *toff, const int32_t *pos, const int32_t *tiles, int n, int n_heads, int n_kv,
                       int head_dim, int bs, float scale, int window) {
    if (head_dim == 64)
        tc_launch<64>(cb, blocks, out, part, q, base, toff, pos, tiles, n, n_heads, n_kv, bs, scale, window);
    else
        tc_launch<128>(cb, blocks, out, part, q, base, toff, pos, tiles, n, n_heads, n_kv, bs, scale, window);
}
