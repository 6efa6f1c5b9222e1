/* cuda_quant.cuh — what the kernels over MLX affine quantized weights share
 * (cuda_qmatmul.cu: the EXACT GEMV, dequantization for larger batches, the
 * embedding; cuda_qgemv_i8.cu: the FAST int8 GEMVs of few rows).
 *
 * W is tensor/affine.h's layout: rows of little-endian bitstreams of
 * `bits`-bit values, a scale and a bias per group of 32/64/128 inputs, in
 * the model's float dtype. Every 32 consecutive values of a row fill exactly
 * `bits` u32 words, so a lane takes one such segment at a time: it loads its
 * `bits` words (16-byte loads for 4 and 8 bits, 8-byte for 2 and 6, single
 * words for 3 and 5; neighbouring lanes read neighbouring segments, so a
 * warp's loads are one contiguous run) and unpacks 32 values whose word and
 * shift are compile-time constants. A segment never straddles a group. */
#ifndef EMBER_CUDA_QUANT_CUH
#define EMBER_CUDA_QUANT_CUH

#include "backend/cuda/cuda_internal.cuh"

#define QG_SEG 32 /* values per segment */

__device__ __forceinline__ float q_scalar(const void *p, int dt, size_t i) {
    if (dt == EM_F32) return ((const float *)p)[i];
    if (dt == EM_F16) return cuda_f16(((const uint16_t *)p)[i]);
    return cuda_bf16(((const uint16_t *)p)[i]);
}

/* The BITS words of segment `seg` of a row (w: the row's first word). */
template <int BITS> __device__ __forceinline__ void load_segment(const uint32_t *w, size_t seg, uint32_t *o) {
    const uint32_t *p = w + seg * BITS;
    if (BITS == 4) {
        uint4 a = *(const uint4 *)p;
        o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
    } else if (BITS == 8) {
        uint4 a = *(const uint4 *)p, b = *(const uint4 *)(p + 4);
        o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
    } else if (BITS == 2 || BITS == 6) {
#pragma unroll
        for (int i = 0; i < BITS; i += 2) {
            uint2 a = *(const uint2 *)(p + i);
            o[i] = a.x, o[i + 1] = a.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < BITS; i++) o[i] = p[i];
    }
}

/* Value e (0..31) of a segment's words. */
template <int BITS> __device__ __forceinline__ uint32_t seg_value(const uint32_t *w, int e) {
    int bit = e * BITS, wi = bit / 32, sh = bit % 32;
    uint32_t v = w[wi] >> sh;
    if (sh + BITS > 32) v |= w[wi + 1] << (32 - sh);
    return v & ((1u << BITS) - 1u);
}

/* (float)v for a code v < 2^23 without the quarter-rate integer conversion:
 * v in the mantissa of 2^23, then 2^23 taken away (exact). */
__device__ __forceinline__ float q_float(uint32_t v) { return __uint_as_float(0x4B000000u | v) - 8388608.0f; }

/* Alignment the segment loads need: 16 bytes for 4/8 bits, 8 for 2/6. */
static inline bool words_aligned(const void *p, int bits) {
    uintptr_t a = (uintptr_t)p;
    if (bits == 4 || bits == 8) return (a & 15) == 0;
    if (bits == 2 || bits == 6) return (a & 7) == 0;
    return (a & 3) == 0;
}

/* Whether the kernels take w: its width, group size and scale dtype. */
static inline bool qweight_ok(const em_weight *w) {
    return (w->bits == 2 || w->bits == 3 || w->bits == 4 || w->bits == 5 || w->bits == 6 || w->bits == 8) &&
           (w->group_size == 32 || w->group_size == 64 || w->group_size == 128) && w->cols % w->group_size == 0 &&
           (w->scale_dtype == EM_F32 || w->scale_dtype == EM_F16 || w->scale_dtype == EM_BF16) && w->data &&
           w->scales && w->biases;
}

/* cuda_qgemv_i8.cu: y = x · Wᵀ (+ bias) for FAST products of fewer than 16
 * rows over 4- and 8-bit weights, activations rounded to int8; false
 * (nothing queued) where it does not apply (other widths, alignment). */
bool cuda_qgemv_i8(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias);

#endif
