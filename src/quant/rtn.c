/* rtn.c — MLX's affine round-to-nearest, one group at a time. */
#include "quant/rtn.h"

#include "tensor/affine.h"

#include <math.h>
#include <stdbool.h>

static void rtn_group(const float *w, int n, int bits, uint8_t *packed, int64_t k0, float *scale_out,
                      float *bias_out) {
    float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        hi = fmaxf(hi, w[i]);
        lo = fminf(lo, w[i]);
    }
    bool neg_edge = fabsf(lo) > fabsf(hi);
    float scale = fmaxf((hi - lo) / n_bins, eps);
    if (!neg_edge) scale = -scale;
    float edge = neg_edge ? lo : hi;
    float q0 = rintf(edge / scale), bias = 0;
    if (q0 != 0) {
        scale = edge / q0;
        bias = edge;
    }
    for (int i = 0; i < n; i++) {
        float q = rintf((w[i] - bias) / scale);
        q = fminf(fmaxf(q, 0.0f), n_bins);
        affine_put(packed, k0 + i, bits, (uint32_t)q);
    }
    *scale_out = scale;
    *bias_out = bias;
}

void rtn_quantize_row(const float *w, int64_t cols, int bits, int group, uint8_t *packed, float *scales,
                      float *biases) {
    for (int64_t g = 0; g * group < cols; g++)
        rtn_group(w + g * group, group, bits, packed, g * group, &scales[g], &biases[g]);
}
