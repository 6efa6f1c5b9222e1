/* rtn.c — MLX's affine round-to-nearest, one group at a time. */
#include "quant/rtn.h"

#include "tensor/affine.h"
#include "tensor/dtype.h"

#include <math.h>
#include <stdbool.h>

static void rtn_group(const float *w, int n, int bits, uint8_t *packed, int64_t k0, float *scale_out,
                      float *bias_out) {
    float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    float lo = INFINITY, hi = -INFINITY;
    /* fmaxf/fminf as comparisons (they are library calls otherwise); the
     * same results, NaNs included: a NaN never replaces a bound */
    for (int i = 0; i < n; i++) {
        hi = w[i] > hi ? w[i] : hi;
        lo = w[i] < lo ? w[i] : lo;
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
        q = q > 0.0f ? q : 0.0f; /* a NaN becomes 0, as fmaxf makes it */
        q = q < n_bins ? q : n_bins;
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

/* x as stored in sdt and read back. */
static float stored(float x, em_dtype sdt) {
    if (sdt == EM_BF16) return bf16_to_f32(f32_to_bf16(x));
    if (sdt == EM_F16) return f16_to_f32(f32_to_f16(x));
    return x;
}

/* Codes of w against (scale, bias) and their squared error. */
static double codes(const float *w, int n, float n_bins, float scale, float bias, uint8_t *q) {
    double err = 0;
    for (int i = 0; i < n; i++) {
        float v = scale != 0 ? rintf((w[i] - bias) / scale) : 0;
        v = fminf(fmaxf(v, 0.0f), n_bins);
        q[i] = (uint8_t)v;
        double d = (double)scale * v + bias - w[i];
        err += d * d;
    }
    return err;
}

/* MLX's scale and bias for the range [lo, hi], as stored. */
static void mlx_params(float lo, float hi, float n_bins, em_dtype sdt, float *scale, float *bias) {
    bool neg_edge = fabsf(lo) > fabsf(hi);
    float s = fmaxf((hi - lo) / n_bins, 1e-7f), b = 0;
    if (!neg_edge) s = -s;
    float edge = neg_edge ? lo : hi, q0 = rintf(edge / s);
    if (q0 != 0) {
        s = edge / q0;
        b = edge;
    }
    *scale = stored(s, sdt);
    *bias = stored(b, sdt);
}

/* The plain affine map of [lo, hi] (bias lo, scale the range over the
 * bins), as stored: no code is spent on keeping zero exact, which MLX's
 * rule does at the cost of a step that may not span the group (groups
 * symmetric about zero, as rotated weights are, lose most). */
static void minmax_params(float lo, float hi, float n_bins, em_dtype sdt, float *scale, float *bias) {
    *scale = stored(fmaxf((hi - lo) / n_bins, 1e-7f), sdt);
    *bias = stored(lo, sdt);
}

/* Least-squares (scale, bias) for fixed codes q; false when the codes do
 * not determine them (all equal). */
static bool refit(const float *w, const uint8_t *q, int n, double *scale, double *bias) {
    double sq = 0, sqq = 0, sw = 0, sqw = 0;
    for (int i = 0; i < n; i++) {
        sq += q[i];
        sqq += (double)q[i] * q[i];
        sw += w[i];
        sqw += (double)q[i] * w[i];
    }
    double det = n * sqq - sq * sq;
    if (det <= 0) return false;
    *scale = (n * sqw - sq * sw) / det;
    *bias = (sw - *scale * sq) / n;
    return true;
}

enum { SEARCH_MAX_GROUP = 128, SEARCH_STEPS = 11 };

static void search_group(const float *w, int n, int bits, em_dtype sdt, uint8_t *packed, int64_t k0, float *scale_out,
                         float *bias_out) {
    float n_bins = (float)((1 << bits) - 1), lo = INFINITY, hi = -INFINITY;
    /* fmaxf/fminf as comparisons (they are library calls otherwise); the
     * same results, NaNs included: a NaN never replaces a bound */
    for (int i = 0; i < n; i++) {
        hi = w[i] > hi ? w[i] : hi;
        lo = w[i] < lo ? w[i] : lo;
    }
    uint8_t q[SEARCH_MAX_GROUP], best_q[SEARCH_MAX_GROUP];
    float best_s = 0, best_b = 0;
    double best = INFINITY;
    for (int k = 0; k < 2 * SEARCH_STEPS; k++) {
        float a = 1.0f - 0.03f * (float)(k / 2), s, b;
        if (k % 2) minmax_params(lo * a, hi * a, n_bins, sdt, &s, &b);
        else mlx_params(lo * a, hi * a, n_bins, sdt, &s, &b);
        double e = codes(w, n, n_bins, s, b, q);
        if (e < best) {
            best = e, best_s = s, best_b = b;
            for (int i = 0; i < n; i++) best_q[i] = q[i];
        }
    }
    double ls, lb;
    if (refit(w, best_q, n, &ls, &lb)) {
        float s = stored((float)ls, sdt), b = stored((float)lb, sdt);
        double e = codes(w, n, n_bins, s, b, q);
        if (e < best) {
            best = e, best_s = s, best_b = b;
            for (int i = 0; i < n; i++) best_q[i] = q[i];
        }
    }
    for (int i = 0; i < n; i++) affine_put(packed, k0 + i, bits, best_q[i]);
    *scale_out = best_s;
    *bias_out = best_b;
}

void rtn_search_row(const float *w, int64_t cols, int bits, int group, em_dtype sdt, uint8_t *packed,
                    float *scales, float *biases) {
    if (group > SEARCH_MAX_GROUP) { /* not a group size the format has */
        rtn_quantize_row(w, cols, bits, group, packed, scales, biases);
        return;
    }
    for (int64_t g = 0; g * group < cols; g++)
        search_group(w + g * group, group, bits, sdt, packed, g * group, &scales[g], &biases[g]);
}
