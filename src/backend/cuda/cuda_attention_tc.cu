/* cuda_attention_tc.cu — the tiled prefill attention on tensor cores, for
 * FAST batches (em_kv_spans.math) with head_dim 64 or 128, reading the f32
 * cache: a cached prompt's short tail (its keys in shares whatever their
 * count, a grid that a recorded step can replay); larger FAST batches read
 * a bf16 copy through cuda_attention_fa.cu, the same arithmetic.
 *
 * Work items of the same plan as attention_tiled_kernel
 * (cuda_attention_prefill.cu), built for tiles of CUDA_TC_PAIRS (128) (query
 * row, head) pairs of one kv head, with a range of keys or a share of them
 * (tile_merge combines shares). Twice the tiled kernel's pairs per tile:
 * every key and value a block reads from the f32 cache (the bound of this
 * kernel: each block reads the whole range) serves twice the queries.
 * The arithmetic is flash-attention-2 style: each of the block's 8 warps
 * owns 16 pairs and keeps everything about them in
 * registers (their queries as bf16 fragments, the scores of a key tile, the
 * running maximum and sum, the output accumulator), so the only shared data
 * are the key and value tiles. Per tile of 64 keys:
 *   1. the tile's keys and values (f32 in the paged cache), copied to shared
 *      memory asynchronously while the previous tile was being used, are
 *      rounded to bf16 (row-major, rows padded so fragment reads hit
 *      distinct banks);
 *   2. S = Q Kᵀ with mma.sync m16n8k16 (bf16 in, f32 out);
 *   3. mask (causal, window, the tile's last key) and online softmax in f32
 *      on the accumulator fragments; the weights are rounded to bf16 and
 *      become, without leaving registers, the A operand of
 *   4. O += P V (V's fragments by transposing matrix loads).
 * The row sum adds the rounded weights, so O / l normalises what was
 * multiplied. FAST allows rounding activations: queries, keys, values and
 * weights are rounded to bf16; sums stay f32. Every sum has a fixed order,
 * so a tile's result is reproducible. */
#include "backend/cuda/cuda_attention_tc.cuh"

#define TC_WARPS 8
#define TC_THREADS (TC_WARPS * 32)
#define TC_KEYS 64

/* Shared memory for HD: two f32 stagings of a key tile (keys, then values,
 * unpadded for the 16-byte copies: the next two tiles are in flight while
 * one is used), then the bf16 keys and values with rows of HD + 8 (a row is
 * 16-byte aligned and consecutive rows start 4 banks apart, so 8 rows of
 * fragment reads cover all 32 banks). */
template <int HD> struct tc_layout {
    static constexpr int LB = HD + 8;                        /* bf16 per row */
    static constexpr size_t stage_floats = (size_t)2 * TC_KEYS * HD; /* one staging */
    static constexpr size_t stage = 0, kb = stage + 2 * stage_floats * 4, vb = kb + (size_t)TC_KEYS * LB * 2,
                            bytes = vb + (size_t)TC_KEYS * LB * 2;
};

/* Starts copying keys and values k0 .. k0+63 of the kv head into an f32
 * staging (nothing when k0 is past hi), as one group of copies; keys past
 * hi are zeros (their weight is 0, but 0 times whatever the cache holds
 * there need not be). */
template <int HD>
__device__ __forceinline__ void tc_stage(float *st, float *const *kb, float *const *vb, int k0, int hi, int bs,
                                         size_t rowlen, size_t head_off) {
    constexpr int C4 = HD / 4;
    for (int i = (int)threadIdx.x; k0 <= hi && i < TC_KEYS * C4; i += TC_THREADS) {
        int kr = i / C4, d = (i % C4) * 4, key = k0 + kr;
        bool ok = key <= hi;
        size_t off = ok ? (size_t)(key % bs) * rowlen + head_off + d : 0;
        cp_async16(st + kr * HD + d, ok ? kb[key / bs] + off : (const float *)kb, ok);
        cp_async16(st + (TC_KEYS + kr) * HD + d, ok ? vb[key / bs] + off : (const float *)vb, ok);
    }
    cp_async_commit();
}

template <int HD>
__global__ void __launch_bounds__(TC_THREADS, 1)
    attention_tc_kernel(float *out, float *part, const float *q, float *const *base, const int32_t *toff,
                        const int32_t *pos, const int32_t *tiles, int n, int n_heads, int group, int n_kv, int bs,
                        float scale, int window) {
    cuda_pdl_enter();
    using L = tc_layout<HD>;
    constexpr int KS = HD / 16; /* k-steps of Q Kᵀ */
    constexpr int NT = HD / 8;  /* n-tiles of the output */
    extern __shared__ float4 tc_sm4[];
    char *sm = (char *)tc_sm4;
    float *stage = (float *)(sm + L::stage);
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)(sm + L::kb), *Vs = (__nv_bfloat16 *)(sm + L::vb);
    int tile = (int)blockIdx.x / n_kv, kvh = (int)blockIdx.x % n_kv, t = (int)threadIdx.x;
    int warp = t / 32, lane = t % 32, g = lane / 4, c = (lane % 4) * 2;
    const int32_t *tl = tiles + (size_t)CUDA_TILE_FIELDS * tile;
    int row0 = tl[0], pairs = tl[1] * group, lo = tl[2], hi = tl[3], slot = tl[4];
    float *const *kb = base + toff[row0], *const *vb = base + toff[n + row0];
    size_t rowlen = (size_t)n_kv * HD, head_off = (size_t)kvh * HD;

    tc_stage<HD>(stage, kb, vb, lo, hi, bs, rowlen, head_off);
    tc_stage<HD>(stage + L::stage_floats, kb, vb, lo + TC_KEYS, hi, bs, rowlen, head_off);

    /* this thread's two pair rows: g and g + 8 of the warp's 16 */
    int pr[2] = {warp * 16 + g, warp * 16 + g + 8}, rp[2];
    const float *qr[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        bool real = pr[h] < pairs;
        rp[h] = real ? pos[row0 + pr[h] / group] : -1; /* -1: a padding pair sees no key */
        qr[h] = real ? q + ((size_t)(row0 + pr[h] / group) * n_heads + (size_t)kvh * group + pr[h] % group) * HD
                     : NULL;
    }
    uint32_t qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int j = 0; j < 4; j++) { /* a0: (g, c), a1: (g+8, c), a2: (g, c+8), a3: (g+8, c+8) */
            const float *src = qr[j & 1];
            float2 v = src ? *(const float2 *)(src + ks * 16 + c + (j >> 1) * 8) : make_float2(0.f, 0.f);
            qf[ks][j] = tc_pack(v.x, v.y);
        }
    float o[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int k0 = lo, buf = 0; k0 <= hi; k0 += TC_KEYS, buf ^= 1) {
        cp_async_wait_prior(); /* this tile's group: every one but the newest */
        __syncthreads();       /* its copies by all threads are visible; the last tile's readers of Ks, Vs are done */
        const float *st = stage + buf * L::stage_floats;
        for (int i = t; i < TC_KEYS * HD / 4; i += TC_THREADS) {
            int kr = i / (HD / 4), d = (i % (HD / 4)) * 4;
            float4 kv = *(const float4 *)(st + kr * HD + d), vv = *(const float4 *)(st + (TC_KEYS + kr) * HD + d);
            uint2 kp = make_uint2(tc_pack(kv.x, kv.y), tc_pack(kv.z, kv.w)), vp = make_uint2(tc_pack(vv.x, vv.y), tc_pack(vv.z, vv.w));
            *(uint2 *)(Ks + kr * L::LB + d) = kp;
            *(uint2 *)(Vs + kr * L::LB + d) = vp;
        }
        __syncthreads(); /* Ks and Vs ready; this staging is free for the tile after next */
        tc_stage<HD>(stage + buf * L::stage_floats, kb, vb, k0 + 2 * TC_KEYS, hi, bs, rowlen, head_off);

        /* S = Q Kᵀ: 8 n-tiles of 8 keys; B (dims c, c+1 of key g) straight from the row-major keys */
        float s[TC_KEYS / 8][4];
        const uint32_t *K32 = (const uint32_t *)Ks;
#pragma unroll
        for (int j = 0; j < TC_KEYS / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
            const uint32_t *kr = K32 + (j * 8 + g) * (L::LB / 2) + c / 2;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) tc_mma(s[j], qf[ks], kr[ks * 8], kr[ks * 8 + 4]);
        }
        uint32_t pf[TC_KEYS / 16][4];
        tc_softmax<TC_KEYS / 8, NT, true>(s, pf, o, m, l, rp, k0, hi, window, scale, c);
        /* O += P V: V's B fragments (keys c, c+1 of dim g) by transposing loads of the row-major values */
#pragma unroll
        for (int kk = 0; kk < TC_KEYS / 16; kk++) {
            const __nv_bfloat16 *vr = Vs + (kk * 16 + (lane % 8) + ((lane / 8) & 1) * 8) * L::LB + (lane / 16) * 8;
#pragma unroll
            for (int np = 0; np < HD / 16; np++) {
                uint32_t b[4];
                tc_ldsm_x4_t(b, vr + np * 16);
                tc_mma(o[2 * np], pf[kk], b[0], b[1]);
                tc_mma(o[2 * np + 1], pf[kk], b[2], b[3]);
            }
        }
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2; h++)
        tc_store<HD>(o, m[h], l[h], h, pr[h], pairs, slot, part, out, NULL, row0, group, n_heads, n_kv, kvh, c);
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
    cuda_launch(attention_tc_kernel<HD>, blocks, TC_THREADS, smem, cb->stream, out, part, q, base, toff, pos, tiles, n,
                n_heads, n_heads / n_kv, n_kv, bs, scale, window);
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
