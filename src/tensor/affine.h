/* affine.h — the MLX affine quantization layout, shared by the loader, the
 * backends and the quantizer.
 *
 * A quantized [rows, cols] weight is three tensors:
 *   weight  U32 [rows, cols*bits/32]  every row a little-endian bitstream of
 *           cols values of `bits` bits: value k occupies stream bits
 *           [k*bits, (k+1)*bits), stream bit i is bit i%8 of byte i/8, and
 *           bytes are laid out as the little-endian u32 words are in memory.
 *           For bits 3, 5, 6 values cross word boundaries (as MLX packs them).
 *   scales  float [rows, cols/group_size]
 *   biases  float [rows, cols/group_size]
 * and element (r, c) is scales[r, g] * q + biases[r, g] with g = c/group_size. */
#ifndef EMBER_TENSOR_AFFINE_H
#define EMBER_TENSOR_AFFINE_H

#include "tensor/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool affine_bits_ok(int bits) {
    return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}
static inline bool affine_group_ok(int g) { return g == 32 || g == 64 || g == 128; }

/* Value k of a packed row (bytes of the row's u32 words). */
static inline uint32_t affine_get(const uint8_t *row, int64_t k, int bits) {
    uint64_t bit = (uint64_t)k * (uint64_t)bits;
    const uint8_t *p = row + bit / 8;
    unsigned sh = (unsigned)(bit % 8);
    uint32_t v = p[0];
    if (sh + (unsigned)bits > 8) v |= (uint32_t)p[1] << 8;
    return (v >> sh) & ((1u << bits) - 1u);
}

/* Sets value k of a packed row; the row must start zeroed. */
static inline void affine_put(uint8_t *row, int64_t k, int bits, uint32_t q) {
    uint64_t bit = (uint64_t)k * (uint64_t)bits;
    uint8_t *p = row + bit / 8;
    unsigned sh = (unsigned)(bit % 8);
    uint32_t v = q << sh;
    p[0] |= (uint8_t)v;
    if (sh + (unsigned)bits > 8) p[1] |= (uint8_t)(v >> 8);
}

/* A float scalar of dtype t (F32, F16 or BF16) at index i. */
static inline float affine_scalar(const void *base, em_dtype t, size_t i) {
    switch (t) {
    case EM_F32: return ((const float *)base)[i];
    case EM_F16: return f16_to_f32(((const uint16_t *)base)[i]);
    default: return bf16_to_f32(((const uint16_t *)base)[i]);
    }
}

/* Dequantizes columns [c0, c0+n) of row r of a quantized weight into out
 * (f32: scale*q + bias, one rounding). c0 and n are multiples of nothing in
 * particular; words_per_row = cols*bits/32, groups_per_row = cols/group. */
static inline void affine_dequant(const void *words, const void *scales, const void *biases, em_dtype sdt,
                                  int bits, int group, int64_t cols, int64_t r, int64_t c0, int64_t n, float *out) {
    const uint8_t *row = (const uint8_t *)words + (size_t)r * (size_t)(cols * bits / 8);
    size_t g0 = (size_t)r * (size_t)(cols / group);
    for (int64_t c = c0; c < c0 + n; c++) {
        size_t g = g0 + (size_t)(c / group);
        float s = affine_scalar(scales, sdt, g), b = affine_scalar(biases, sdt, g);
        out[c - c0] = s * (float)affine_get(row, c, bits) + b;
    }
}

#endif
