/* cuda_q8.cuh — the int8 arithmetic of the FAST few-row products against
 * 4- and 8-bit MLX affine weights, shared by the register-resident kernels
 * (cuda_qgemv_i8.cu) and the pipelined one (cuda_qgemv_pipe.cu).
 *
 * FAST few-row products against 4- and 8-bit weights: the activations are
 * rounded to int8 per 32 values (the CPU's FAST rounding, quant_avx2.c) and
 * the codes are dotted with them four at a time (dp4a), so the kernel is
 * bound by the weight stream instead of by unpacking. Per 32-value segment
 * of a row (inside one group of scale s and bias b):
 *   sum x*(s*q + b) ~= s * dx * sum(x8 * q') + b' * sum(x)
 * with x8 = rint(x / dx), dx = max|x| / 127, and sum(x) of the unrounded
 * activations; 8-bit codes are centred (q' = q - 128, b' = b + 128 s) so they
 * fit a signed byte. For 4 bits a word's even codes are its low nibbles, so
 * each 8 activations are staged evens first, then odds.
 */
#ifndef EMBER_CUDA_Q8_CUH
#define EMBER_CUDA_Q8_CUH

#include "backend/cuda/cuda_quant.cuh"

/* Byte position of activation k (within its 32) in the staged segment. */
template <int BITS> __device__ __forceinline__ int q8_pos(int k) {
    if (BITS == 8) return k;
    int e = k & 7;
    return (k & ~7) + ((e & 1) ? 4 + (e >> 1) : (e >> 1));
}

/* Rounds rows [0, mr) of x[., k0 .. k0 + kc) into staged int8 (row m at
 * xq + m * cap bytes, its per-32 scales and sums at xd/xs + m * cap / 32):
 * 8 lanes per 32 values (a float4 each), max and sum by a fixed butterfly.
 * Each thread issues Q8_QPT loads before using any. PLANES (the pipelined
 * kernel's layout): a row's segments are split in two planes of cap / 2
 * bytes (each segment's first 16 staged bytes in the first, its last 16 in
 * the second), so lanes that read consecutive segments' halves meet no bank
 * conflict, and each segment's scale and sum are a pair at xd (one 8-byte
 * read; xs unused). COHERENT: x was written by this kernel's other blocks
 * (read through L2, not the non-coherent path).
 *
 * nm.gain set (the norm fusion, gemv_norm): the staged values are x times
 * gain + goff, and each warp's sum of the squares of x (its threads' in a
 * fixed order, then the butterfly) goes to red[m * warps + warp] (shared,
 * ROWS * warps floats) for q8_norm_inv. Rounding x * gain rather than the
 * normed row gives the same codes up to the roundings of the scale: the
 * norm is one factor of a whole row, which the sums take at the end. */
#define Q8_QPT 4
template <int BITS, int ROWS, bool PLANES = false, bool COHERENT = false>
__device__ __forceinline__ void q8_stage(int8_t *xq, float *xd, float *xs, int cap, const float *x, int K, int k0,
                                         int kc, int mr, const gemv_norm &nm = gemv_norm{}, float *red = nullptr) {
    int quads = kc / 4, step = Q8_QPT * blockDim.x;
    const float4 *gr = nm.gain ? (const float4 *)(nm.gain + k0) : nullptr;
#pragma unroll
    for (int m = 0; m < ROWS; m++) {
        if (m >= mr) break;
        const float4 *xr = (const float4 *)(x + (size_t)m * K + k0);
        float ss = 0.0f;
        for (int i0 = 0; i0 < quads; i0 += step) { /* whole warps take part in the shuffles */
            float4 v[Q8_QPT];
#pragma unroll
            for (int j = 0; j < Q8_QPT; j++) {
                int i = i0 + j * blockDim.x + threadIdx.x;
                v[j] = i >= quads ? make_float4(0.f, 0.f, 0.f, 0.f) : COHERENT ? __ldcg(xr + i) : __ldg(xr + i);
            }
#pragma unroll
            for (int j = 0; j < Q8_QPT; j++) {
                int i = i0 + j * blockDim.x + threadIdx.x;
                if (nm.gain && i < quads) {
                    float4 g = __ldg(gr + i);
                    ss = fmaf(v[j].x, v[j].x, ss), ss = fmaf(v[j].y, v[j].y, ss);
                    ss = fmaf(v[j].z, v[j].z, ss), ss = fmaf(v[j].w, v[j].w, ss);
                    v[j].x *= g.x + nm.goff, v[j].y *= g.y + nm.goff, v[j].z *= g.z + nm.goff, v[j].w *= g.w + nm.goff;
                }
                float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
                float sum = (v[j].x + v[j].y) + (v[j].z + v[j].w);
#pragma unroll
                for (int o = 1; o < 8; o <<= 1) {
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
                    sum += __shfl_xor_sync(0xffffffffu, sum, o);
                }
                if (i >= quads) continue;
                float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                int k = i * 4, seg = k / QG_SEG, e = k % QG_SEG;
                int8_t *d = xq + (size_t)m * cap;
                float f[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    int p = q8_pos<BITS>(e + c);
                    size_t at = PLANES ? (size_t)(p >> 4) * (cap / 2) + (size_t)seg * 16 + (p & 15)
                                       : (size_t)seg * QG_SEG + p;
                    d[at] = (int8_t)__float2int_rn(f[c] * inv);
                }
                if (e == 0 && PLANES) {
                    float2 *ds = (float2 *)xd + m * (cap / QG_SEG) + seg;
                    *ds = make_float2(amax / 127.0f, sum);
                } else if (e == 0) {
                    xd[m * (cap / QG_SEG) + seg] = amax / 127.0f, xs[m * (cap / QG_SEG) + seg] = sum;
                }
            }
        }
        if (nm.gain) {
            for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (threadIdx.x % 32 == 0) red[m * (blockDim.x / 32) + threadIdx.x / 32] = ss;
        }
    }
}

/* Each row's factor 1 / sqrt(mean square + eps) from the warps' sums that
 * q8_stage left in red (after the block's barrier; every thread adds them
 * in the same order, so every warp gets the same factor); 1 without a
 * norm, which leaves a product's bits as they were. */
template <int ROWS>
__device__ __forceinline__ void q8_norm_inv(float *inv, const gemv_norm &nm, const float *red, int mr, int K) {
    const int warps = blockDim.x / 32;
#pragma unroll
    for (int m = 0; m < ROWS; m++) {
        inv[m] = 1.0f;
        if (!nm.gain || m >= mr) continue;
        float t = 0.0f;
        for (int w = 0; w < warps; w++) t += red[m * warps + w];
        inv[m] = 1.0f / sqrtf(t / (float)K + nm.eps);
    }
}

/* dp4a of four unsigned bytes a with four signed bytes b, plus c. */
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* sum(x8 * q') over one segment: BITS words of codes, the 8 words of its
 * staged activations (q8_dot loads them; q8_dot_x takes them loaded). The
 * high nibbles are dotted in place, as 16 q (unsigned bytes w & 0xF0...),
 * and their sum shifted down once: one shift a segment instead of one a
 * word, and the same integer. */
template <int BITS> __device__ __forceinline__ int q8_dot_x(const uint32_t *w, const uint4 &a, const uint4 &b) {
    int xv[8] = {(int)a.x, (int)a.y, (int)a.z, (int)a.w, (int)b.x, (int)b.y, (int)b.z, (int)b.w};
    int d = 0;
    if (BITS == 4) {
        int h = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            d = __dp4a((int)(w[j] & 0x0F0F0F0Fu), xv[2 * j], d);
            h = dp4a_us(w[j] & 0xF0F0F0F0u, xv[2 * j + 1], h);
        }
        d += h >> 4; /* h is 16 times the high nibbles' sum */
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) d = __dp4a((int)(w[j] ^ 0x80808080u), xv[j], d);
    }
    return d;
}

template <int BITS> __device__ __forceinline__ int q8_dot(const uint32_t *w, const int8_t *xseg) {
    return q8_dot_x<BITS>(w, *(const uint4 *)xseg, *(const uint4 *)(xseg + 16));
}

/* cuda_qgemv_pipe.cu: the pipelined kernel over the set (swi: an MLP's gate
 * and up, stored as their SwiGLU into set.y[0]; over rows normed by nm
 * where nm.gain is set) where it is on and applies; false: nothing queued. */
bool cuda_qpipe_set(cuda_backend *cb, const gemv_set &set, const em_weight *w0, const float *x, int M, bool swi,
                    const gemv_norm &nm);

#endif
