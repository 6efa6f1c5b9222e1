/* cuda_attention_tc.cuh — the steps of the tensor-core attention kernels
 * (cuda_attention_tc.cu, cuda_attention_fa.cu) that act on one m-tile of 16
 * (query row, head) pairs of a warp, in mma.sync fragments: a thread holds
 * rows g and g + 8 (h = 0, 1) of the m-tile and, of an n-tile of scores or
 * outputs, columns c and c + 1 (fragment element e: row g + 8 (e / 2),
 * column c + e % 2). Both kernels call the same steps, so their roundings
 * and the order of every sum are the same. */
#ifndef EMBER_CUDA_ATTENTION_TC_CUH
#define EMBER_CUDA_ATTENTION_TC_CUH

#include "backend/cuda/cuda_internal.cuh"

/* 2^x in one special-function instruction (2^-inf = 0). */
__device__ __forceinline__ float tc_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Masks the scores s of SN n-tiles of keys from k0 (causal, window, the
 * tile's last key hi; MASK false: the caller knows none is masked, and the
 * masking is not compiled in — its compares and selects were a third of
 * the instructions of an unmasked tile), updates each row's running
 * maximum m and sum l (online softmax, the sum over the rounded weights),
 * writes the weights, rounded to bf16, as the A operand of P V (pf: k-step
 * kk covers n-tiles 2kk and 2kk+1), and rescales the output o where a
 * row's maximum moved. rp: the rows' positions. The maxima are kept in
 * base-2 units (scaled scores times log2 e), so that a weight is one fused
 * multiply-add and one exp2 of the raw score: scaling by a positive
 * constant keeps the maximum where it was, whichever is done first. */
template <int SN, int NT, bool MASK>
__device__ __forceinline__ void tc_softmax(float (*s)[4], uint32_t (*pf)[4], float (*o)[4], float *m, float *l,
                                           const int *rp, int k0, int hi, int window, float scale, int c) {
    const float sl = scale * 1.4426950408889634f;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < SN; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int h = e >> 1, kp = k0 + j * 8 + c + (e & 1);
            if (MASK && !(kp <= rp[h] && kp <= hi && (window <= 0 || kp > rp[h] - window))) s[j][e] = -INFINITY;
            mx[h] = fmaxf(mx[h], s[j][e]);
        }
    float corr[2], mu[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        float m_new = fmaxf(m[h], mx[h] * sl);
        mu[h] = m_new == -INFINITY ? 0.0f : m_new; /* no key seen yet: every weight is 0 */
        corr[h] = tc_ex2(m[h] - mu[h]);
        m[h] = m_new;
        l[h] *= corr[h];
    }
#pragma unroll
    for (int j = 0; j < SN; j++) {
        float p0 = tc_ex2(fmaf(s[j][0], sl, -mu[0])), p1 = tc_ex2(fmaf(s[j][1], sl, -mu[0]));
        float p2 = tc_ex2(fmaf(s[j][2], sl, -mu[1])), p3 = tc_ex2(fmaf(s[j][3], sl, -mu[1]));
        uint32_t top = tc_pack(p0, p1), bot = tc_pack(p2, p3);
        __nv_bfloat162 tb = *(__nv_bfloat162 *)&top, bb = *(__nv_bfloat162 *)&bot;
        l[0] += __bfloat162float(tb.x) + __bfloat162float(tb.y);
        l[1] += __bfloat162float(bb.x) + __bfloat162float(bb.y);
        pf[j / 2][(j & 1) * 2] = top;
        pf[j / 2][(j & 1) * 2 + 1] = bot;
    }
    if (corr[0] != 1.0f || corr[1] != 1.0f) /* the maxima moved (times 1 would change nothing) */
#pragma unroll
        for (int i = 0; i < NT; i++) o[i][0] *= corr[0], o[i][1] *= corr[0], o[i][2] *= corr[1], o[i][3] *= corr[1];
}

/* Row h of the m-tile, pair p of the block's tile (rows from row0, group
 * query heads of kv head kvh a row), when p < pairs: with slot >= 0 the
 * unnormalised partial (maximum of the scaled scores, sum, outputs) into
 * part for tile_merge;
 * else o / l into out, and its bf16 rounding into ob when given. Every
 * lane calls it (the row sum l is completed over the quad here). */
template <int HD>
__device__ __forceinline__ void tc_store(const float (*o)[4], float m, float l, int h, int p, int pairs, int slot,
                                         float *part, float *out, __nv_bfloat16 *ob, int row0, int group,
                                         int n_heads, int n_kv, int kvh, int c) {
    constexpr int NT = HD / 8;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (p >= pairs) return;
    if (slot >= 0) {
        float *pp = part + (((size_t)slot * n_kv + kvh) * CUDA_TC_PAIRS + p) * (HD + 2);
        if (c == 0) pp[0] = m * 0.6931471805599453f, pp[1] = l; /* the maximum back in natural units */
#pragma unroll
        for (int i = 0; i < NT; i++) pp[2 + i * 8 + c] = o[i][2 * h], pp[3 + i * 8 + c] = o[i][2 * h + 1];
        return;
    }
    float inv = 1.0f / l;
    size_t at = ((size_t)(row0 + p / group) * n_heads + (size_t)kvh * group + p % group) * HD;
#pragma unroll
    for (int i = 0; i < NT; i++) {
        float2 v = make_float2(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
        *(float2 *)(out + at + i * 8 + c) = v;
        if (ob) *(uint32_t *)(ob + at + i * 8 + c) = tc_pack(v.x, v.y);
    }
}

#endif
