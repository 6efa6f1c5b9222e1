/* cuda_attention_fa.cu — the tiled prefill attention of FAST batches on
 * tensor cores, reading a bf16 copy of the layer's keys and values.
 *
 * The KV cache holds f32 (EXACT attention reads it as it is). A FAST tile
 * rounds every key and value it reads to bf16 anyway, and each of a
 * sequence's keys is read by every tile of its rows: on the H200 the
 * tensor-core kernel of cuda_attention_tc.cu, which stages f32 tiles and
 * rounds them in shared memory, spent 1.56 ms a layer of a 4,096-token
 * prefill of the Llama-3.1-8B shape (88 TFLOP/s): one block of eight warps
 * a multiprocessor (its shared memory), tensor cores idle while it rounded.
 * Here one launch first rounds the keys and values the plan's tiles read
 * (each key once, into a contiguous copy per sequence: kv_bf16_kernel), and
 * the attention kernel streams that copy through a pipeline of two or
 * three stages of asynchronous copies straight into the tiles its fragments
 * are loaded from (matrix loads for queries, keys and values), one barrier
 * a tile. A warp owns one or two m-tiles of 16 (query row, head) pairs, so
 * each key and value fragment it loads serves 16 or 32 pairs (fa_shape):
 * 0.59 ms a layer for that prefill (232 TFLOP/s).
 *
 * The arithmetic is that of attention_tc_kernel, step for step: the same
 * bf16 roundings of queries, keys, values and weights, the same products
 * in the same order, so a tile gives the same bits through either kernel
 * (greedy generations of the 1B and 8B shapes over a 2,300-token prompt
 * were identical through both on the H200). Work items, splits and merges
 * are the plan's (cuda_attention_prefill.cu). */
#include "backend/cuda/cuda_attention_tc.cuh"

#define CONV_THREADS 256

/* Rounds keys 0..n-1 of conversion entry blockIdx.y (a sequence, as the
 * plan lists it) into kc/vc from offset off: rows of n_kv * hd values, as
 * the cache lays them out. */
__global__ void __launch_bounds__(CONV_THREADS)
    kv_bf16_kernel(__nv_bfloat16 *kc, __nv_bfloat16 *vc, float *const *base, const int32_t *toff,
                   const int32_t *conv, int n, int rowlen, int bs) {
    cuda_pdl_enter();
    const int32_t *cv = conv + (size_t)CUDA_CONV_FIELDS * blockIdx.y;
    int row = cv[0], keys = cv[1], off = cv[2], c4 = rowlen / 4;
    float *const *kb = base + toff[row], *const *vb = base + toff[n + row];
    size_t total = (size_t)keys * (size_t)c4, step = (size_t)gridDim.x * CONV_THREADS;
    for (size_t i = (size_t)blockIdx.x * CONV_THREADS + threadIdx.x; i < total; i += step) {
        int key = (int)(i / (size_t)c4), d = (int)(i % (size_t)c4) * 4;
        size_t src = (size_t)(key % bs) * (size_t)rowlen + (size_t)d, dst = (size_t)(off + key) * (size_t)rowlen + d;
        float4 k = *(const float4 *)(kb[key / bs] + src), v = *(const float4 *)(vb[key / bs] + src);
        *(uint2 *)(kc + dst) = make_uint2(tc_pack(k.x, k.y), tc_pack(k.z, k.w));
        *(uint2 *)(vc + dst) = make_uint2(tc_pack(v.x, v.y), tc_pack(v.z, v.w));
    }
}

/* The kernel's shape: HD head dims, MT m-tiles of 16 pairs a warp (its
 * key and value fragments serve MT times the queries), KN keys a tile.
 * Shared memory: STAGES key and value tiles, then the block's queries
 * rounded to bf16, in rows of HD + 8 (16-byte aligned; 8 consecutive rows
 * start in 8 distinct 16-byte bank groups, so a matrix load hits every bank
 * once). */
template <int HD, int MT, int KN> struct fa_shape {
    /* stages: two for 64-key tiles at head_dim 128, where three would leave
     * room for one block a multiprocessor (104 KB a block with two); head_dim
     * 256 runs one block a multiprocessor either way and keeps three */
    static constexpr int LB = HD + 8, STAGES = HD == 128 && KN >= 64 ? 2 : 3;
    static constexpr int warps = CUDA_TC_PAIRS / (16 * MT), threads = warps * 32;
    static constexpr int tile = KN * LB; /* bf16 of a key or value tile */
    static constexpr size_t q = (size_t)STAGES * 2 * tile * 2;
    static constexpr size_t bytes = q + (size_t)CUDA_TC_PAIRS * LB * 2;
};

/* Starts copying keys and values k0 .. k0+KN-1 (kh, vh: key 0 of the
 * tile's sequence and kv head in the copy; rows rowlen apart) into a
 * stage, as one group of copies (empty past hi). Keys past hi are zeros:
 * their weight is 0, but 0 times whatever lies there need not be. */
template <class F, int KN>
__device__ __forceinline__ void fa_stage(__nv_bfloat16 *ks, const __nv_bfloat16 *kh, const __nv_bfloat16 *vh,
                                         int k0, int hi, size_t rowlen) {
    constexpr int C8 = (F::LB - 8) / 8;
    __nv_bfloat16 *vs = ks + F::tile;
    for (int i = (int)threadIdx.x; k0 <= hi && i < KN * C8; i += F::threads) {
        int kr = i / C8, d = (i % C8) * 8, key = k0 + kr;
        bool ok = key <= hi;
        size_t off = ok ? (size_t)key * rowlen + (size_t)d : 0;
        cp_async16(ks + kr * F::LB + d, kh + off, ok);
        cp_async16(vs + kr * F::LB + d, vh + off, ok);
    }
    cp_async_commit();
}

/* Two blocks a multiprocessor up to head_dim 128; at 256 a thread's
 * outputs alone take 128 registers (and the block 165 KB of shared memory). */
template <int HD, int MT, int KN>
__global__ void __launch_bounds__(fa_shape<HD, MT, KN>::threads, HD > 128 ? 1 : 2)
    attention_fa_kernel(float *out, __nv_bfloat16 *ob, float *part, const float *q, const __nv_bfloat16 *kc,
                        const __nv_bfloat16 *vc, const int32_t *pos, const int32_t *tiles, int n_heads, int group,
                        int n_kv, float scale, int window) {
    cuda_pdl_enter();
    using F = fa_shape<HD, MT, KN>;
    constexpr int ST = F::STAGES, LB = F::LB;
    constexpr int KS = HD / 16; /* k-steps of Q Kᵀ */
    constexpr int NT = HD / 8;  /* n-tiles of the output */
    constexpr int SN = KN / 8;  /* n-tiles of the scores */
    extern __shared__ float4 fa_sm4[];
    __nv_bfloat16 *sm = (__nv_bfloat16 *)fa_sm4; /* stage s: keys at sm + 2 s tile, values after them */
    __nv_bfloat16 *Qs = sm + F::q / 2;
    int tile = (int)blockIdx.x / n_kv, kvh = (int)blockIdx.x % n_kv, t = (int)threadIdx.x;
    int warp = t / 32, lane = t % 32, g = lane / 4, c = (lane % 4) * 2;
    const int32_t *tl = tiles + (size_t)CUDA_TILE_FIELDS * tile;
    int row0 = tl[0], pairs = tl[1] * group, lo = tl[2], hi = tl[3], slot = tl[4];
    size_t rowlen = (size_t)n_kv * HD, first = (size_t)tl[5] * rowlen + (size_t)kvh * HD;
    const __nv_bfloat16 *kh = kc + first, *vh = vc + first;

#pragma unroll
    for (int s = 0; s < ST - 1; s++) fa_stage<F, KN>(sm + 2 * s * F::tile, kh, vh, lo + s * KN, hi, rowlen);

    /* this thread's pair rows: g and g + 8 of each of the warp's m-tiles,
     * their queries rounded into the A operand's rows in shared memory */
    int pr[MT][2], rp[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int p = (warp * MT + mt) * 16 + g + 8 * h;
            bool real = p < pairs;
            pr[mt][h] = p;
            rp[mt][h] = real ? pos[row0 + p / group] : -1; /* -1: a padding pair sees no key */
            const float *qr =
                real ? q + ((size_t)(row0 + p / group) * n_heads + (size_t)kvh * group + p % group) * HD : NULL;
            for (int d = c; d < HD; d += 8) {
                float2 v = qr ? *(const float2 *)(qr + d) : make_float2(0.f, 0.f);
                *(uint32_t *)(Qs + p * LB + d) = tc_pack(v.x, v.y);
            }
        }
    /* lane L's row of A for matrix loads: pair L % 8 + 8 ((L / 8) & 1), dims 8 (L / 16) on */
    const __nv_bfloat16 *qrow = Qs + (warp * MT * 16 + lane % 8 + ((lane / 8) & 1) * 8) * LB + (lane / 16) * 8;
    float o[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < NT; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

    for (int k0 = lo, it = 0; k0 <= hi; k0 += KN, it++) {
        cp_async_wait_groups<ST - 2>(); /* this tile's group is in */
        __syncthreads(); /* every thread's copies (and the queries) are visible; the stage read last tile is free */
        fa_stage<F, KN>(sm + 2 * ((it + ST - 1) % ST) * F::tile, kh, vh, k0 + (ST - 1) * KN, hi, rowlen);
        const __nv_bfloat16 *Ks = sm + 2 * (it % ST) * F::tile, *Vs = Ks + F::tile;

        /* S = Q Kᵀ in SN n-tiles of 8 keys, k-steps in order; a matrix load
         * gives the A fragments, or the B fragments (dims c, c+1 of key g),
         * of two k-steps */
        float s[MT][SN][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < SN; j++) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
        for (int kp = 0; kp < KS / 2; kp++) {
            uint32_t a[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                tc_ldsm_x4(a[mt][0], qrow + mt * 16 * LB + kp * 32);
                tc_ldsm_x4(a[mt][1], qrow + mt * 16 * LB + kp * 32 + 16);
            }
#pragma unroll
            for (int j = 0; j < SN; j++) {
                uint32_t b[4];
                tc_ldsm_x4(b, Ks + (j * 8 + lane % 8) * LB + (lane / 8) * 8 + kp * 32);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    tc_mma(s[mt][j], a[mt][0], b[0], b[1]);
                    tc_mma(s[mt][j], a[mt][1], b[2], b[3]);
                }
            }
        }
        /* mask and online softmax; a tile below the diagonals of the warp's
         * rows, without a window, masks nothing (the same bits either way) */
        uint32_t pf[MT][SN / 2][4];
        int last = k0 + KN - 1;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            bool all = window <= 0 && last <= hi && last <= rp[mt][0] && last <= rp[mt][1];
            if (__all_sync(0xffffffffu, all))
                tc_softmax<SN, NT, false>(s[mt], pf[mt], o[mt], m[mt], l[mt], rp[mt], k0, hi, window, scale, c);
            else
                tc_softmax<SN, NT, true>(s[mt], pf[mt], o[mt], m[mt], l[mt], rp[mt], k0, hi, window, scale, c);
        }
        /* O += P V: V's B fragments (keys c, c+1 of dim g) by transposing loads of the row-major values */
#pragma unroll
        for (int kk = 0; kk < KN / 16; kk++) {
            const __nv_bfloat16 *vr = Vs + (kk * 16 + (lane % 8) + ((lane / 8) & 1) * 8) * LB + (lane / 16) * 8;
#pragma unroll
            for (int np = 0; np < HD / 16; np++) {
                uint32_t b[4];
                tc_ldsm_x4_t(b, vr + np * 16);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    tc_mma(o[mt][2 * np], pf[mt][kk], b[0], b[1]);
                    tc_mma(o[mt][2 * np + 1], pf[mt][kk], b[2], b[3]);
                }
            }
        }
    }
    cp_async_wait_all();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            tc_store<HD>(o[mt], m[mt][h], l[mt][h], h, pr[mt][h], pairs, slot, part, out, ob, row0, group, n_heads,
                         n_kv, kvh, c);
}

/* Measured on the H200 (4,096-token prefill, ms a layer): head_dim 128
 * (Llama-3.1-8B shape) 0.80 with one m-tile a warp and 64 keys a tile,
 * 0.64 with two and 32 (three stages), 0.59 with two and 64 (two stages;
 * three leave one block a multiprocessor: 0.93), though a thread's scores
 * and outputs then fill its 255 registers and spill a few words; head_dim
 * 64 (Llama-3.2-1B) did best with one and 64.
 * head_dim 256 (Qwen3.5's attention layers): one m-tile and 32 keys, what
 * the registers allow. */
#define FA_SHAPES(X) X(64, 1, 64) X(128, 2, 64) X(256, 1, 32)

bool cuda_attention_fa_fits(cuda_backend *cb, int head_dim) {
    int optin = 0;
    if (!cuda_attention_fa_head_dim(head_dim)) return false;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cb->device) != cudaSuccess) return false;
    size_t most = 0;
#define FA_BYTES(h, mt, kn) if (h == head_dim && fa_shape<h, mt, kn>::bytes > most) most = fa_shape<h, mt, kn>::bytes;
    FA_SHAPES(FA_BYTES)
#undef FA_BYTES
    return most <= (size_t)optin;
}

template <int HD, int MT, int KN>
static void fa_launch(cuda_backend *cb, unsigned blocks, float *out, __nv_bfloat16 *ob, float *part, const float *q,
                      const __nv_bfloat16 *kc, const __nv_bfloat16 *vc, const int32_t *pos, const int32_t *tiles,
                      int n_heads, int n_kv, float scale, int window) {
    using F = fa_shape<HD, MT, KN>;
    cuda_note(cb,
              cudaFuncSetAttribute(attention_fa_kernel<HD, MT, KN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)F::bytes),
              "attention (bf16 copy): shared memory");
    cuda_launch(attention_fa_kernel<HD, MT, KN>, blocks, F::threads, F::bytes, cb->stream, out, ob, part, q, kc, vc,
                pos, tiles, n_heads, n_heads / n_kv, n_kv, scale, window);
    CUDA_LAUNCHED(cb, "attention (bf16 copy)");
}

bool cuda_attention_fa(cuda_backend *cb, unsigned blocks, float *out, __nv_bfloat16 *ob, float *part, const float *q,
                       float *const *base, const int32_t *toff, const int32_t *pos, const int32_t *tiles,
                       const int32_t *conv, const cuda_att_plan *p, int n, int n_heads, int n_kv, int head_dim, int bs,
                       float scale, int window) {
    size_t elems = (size_t)p->conv_keys * (size_t)n_kv * (size_t)head_dim;
    if (!cuda_scratch_try(cb, &cb->att_kv16, &cb->att_kv16_bytes, 2 * elems * sizeof(__nv_bfloat16))) return false;
    __nv_bfloat16 *kc = (__nv_bfloat16 *)cb->att_kv16, *vc = kc + elems;
    int rowlen = n_kv * head_dim;
    size_t per_seq = (size_t)p->conv_keys * (size_t)(rowlen / 4); /* at most, for the longest sequence */
    unsigned gx = (unsigned)((per_seq + CONV_THREADS * 4 - 1) / (CONV_THREADS * 4));
    dim3 grid(gx < 1 ? 1 : gx > 4096 ? 4096 : gx, (unsigned)p->n_conv);
    cuda_launch(kv_bf16_kernel, grid, CONV_THREADS, 0, cb->stream, kc, vc, base, toff, conv, n, rowlen, bs);
    CUDA_LAUNCHED(cb, "attention (bf16 copy of keys and values)");
    int mt = head_dim == 128 ? 2 : 1, kn = head_dim == 256 ? 32 : 64;
#define FA_GO(h, m_, k_) \
    if (head_dim == h && mt == m_ && kn == k_) \
        fa_launch<h, m_, k_>(cb, blocks, out, ob, part, q, kc, vc, pos, tiles, n_heads, n_kv, scale, window);
    FA_SHAPES(FA_GO)
#undef FA_GO
    return true;
}
