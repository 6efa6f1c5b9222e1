/* rtn.h — round-to-nearest affine quantization of weight rows, computed as
 * MLX computes it, so an artifact quantized here is the one MLX would write. */
#ifndef EMBER_QUANT_RTN_H
#define EMBER_QUANT_RTN_H

#include "tensor/dtype.h"

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

/* A calibration-free refinement of the above (ember quantize --search):
 * per group, the range is shrunk by each factor of a fixed ladder (1.0 down
 * to 0.70: clipping the extremes trades their error for a finer step), each
 * shrunk range mapped both by MLX's rule above and plainly (bias the range's
 * low end, no code spent on keeping zero exact), and the choice of least
 * squared error kept; then the scale and bias are
 * refitted by least squares to the chosen codes. Every candidate is judged
 * with its scale and bias rounded to sdt, the dtype they are stored in, and
 * the codes are computed against those rounded values, so what is measured
 * is what a loader dequantizes. The layout is MLX's; only the values
 * differ. Writes scales/biases already rounded to sdt (kept in f32). */
void rtn_search_row(const float *w, int64_t cols, int bits, int group, em_dtype sdt, uint8_t *packed,
                    float *scales, float *biases);

#endif
