/* kernels_ref.c — portable dot-product tiles: the fallback on machines
 * without AVX2, and the yardstick the SIMD kernels are tested against. */
#include "backend/cpu/cpu_internal.h"

#include "tensor/affine.h"
#include "tensor/dtype.h"

#include <math.h>

#define REF_TILE(NAME, XT, XCONV, WT, WCONV)                                                        \
    static void NAME(const void *xv, size_t ldx, int mr, const void *wv, size_t ldw, int nr, int K,  \
                     float *y, size_t ldy) {                                                         \
        const XT *x = xv;                                                                           \
        const WT *w = wv;                                                                           \
        for (int m = 0; m < mr; m++)                                                                \
            for (int n = 0; n < nr; n++) {                                                          \
                const XT *xr = x + (size_t)m * ldx;                                                 \
                const WT *wr = w + (size_t)n * ldw;                                                 \
                float acc = 0;                                                              \
                for (int k = 0; k < K; k++) acc += XCONV(xr[k]) * WCONV(wr[k]);                     \
                y[(size_t)m * ldy + n] = acc;                                                \
            }                                                                                       \
    }

#define ID(v) (v)
REF_TILE(ref_f32_bf16, float, ID, uint16_t, bf16_to_f32)
REF_TILE(ref_f32_f16, float, ID, uint16_t, f16_to_f32)
REF_TILE(ref_f32_f32, float, ID, float, ID)
REF_TILE(ref_bf16_bf16, uint16_t, bf16_to_f32, uint16_t, bf16_to_f32)

void cpu_qdequant_ref(const em_weight *w, int64_t r, float *out) {
    /* row r alone: row 0 of its own codes, scales and biases */
    affine_dequant(em_qrow_codes(w, r), em_qrow_scales(w, r), em_qrow_biases(w, r), w->scale_dtype, w->bits,
                   w->group_size, w->cols, 0, 0, w->cols, out);
}

/* Dequantizes one group at a time into a small buffer, then dots. */
void cpu_qtile_ref(const float *x, size_t ldx, int mr, const em_weight *w, int n0, int nr, float *y, size_t ldy) {
    float wg[128];
    float acc[4][4] = {{0}};
    int64_t K = w->cols, G = w->group_size;
    for (int n = 0; n < nr; n++)
        for (int64_t k = 0; k < K; k += G) {
            affine_dequant(em_qrow_codes(w, n0 + n), em_qrow_scales(w, n0 + n), em_qrow_biases(w, n0 + n),
                           w->scale_dtype, w->bits, (int)G, K, 0, k, G, wg);
            for (int m = 0; m < mr; m++) {
                const float *xr = x + (size_t)m * ldx + k;
                float a = acc[m][n];
                for (int64_t i = 0; i < G; i++) a += xr[i] * wg[i];
                acc[m][n] = a;
            }
        }
    for (int m = 0; m < mr; m++)
        for (int n = 0; n < nr; n++) y[(size_t)m * ldy + n] = acc[m][n];
}

float cpu_dot_ref(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void cpu_axpy_ref(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

void cpu_silu_mul_ref(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void cpu_to_bf16_ref(uint16_t *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = f32_to_bf16(x[i]);
}

static const cpu_kernels ref_kernels = {
    .isa = "portable",
    .tile_f32_bf16 = ref_f32_bf16,
    .tile_f32_f16 = ref_f32_f16,
    .tile_f32_f32 = ref_f32_f32,
    .tile_bf16_bf16 = ref_bf16_bf16,
    .qtile = cpu_qtile_ref,
    .qdequant = cpu_qdequant_ref,
    .dot = cpu_dot_ref,
    .axpy = cpu_axpy_ref,
    .silu_mul = cpu_silu_mul_ref,
    .to_bf16 = cpu_to_bf16_ref,
};

const cpu_kernels *cpu_kernels_ref(void) { return &ref_kernels; }
