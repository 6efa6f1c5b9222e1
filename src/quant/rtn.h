/* rtn.h — round-to-nearest affine quantization of weight rows, computed as
 * MLX computes it, so an artifact quantized here is the one MLX would write. */
#ifndef EMBER_QUANT_RTN_H
#define EMBER_QUANT_RTN_H

#include <stdint.h>

/* Quantizes one row of `cols` values (cols a multiple of group) into packed
 * (cols*bits/8 bytes, zeroed by the caller) and per-group scales/biases
 * (f32, before the caller rounds them to the artifact's dtype).
 *
 * Per group: range = max - min over the group; scale = max(range / (2^bits-1),
 * 1e-7), signed so that the end of larger magnitude (the "edge") maps to
 * q = round(edge/scale); when that q is non-zero the scale becomes edge/q and
 * the bias is the edge, so the edge value is reproduced exactly; otherwise the
 * bias is 0. Values are round((w - bias)/scale) clamped to [0, 2^bits-1], all
 * in f32 with ties to even. */
void rtn_quantize_row(const float *w, int64_t cols, int bits, int group, uint8_t *packed, float *scales,
                      float *biases);

#endif
