/* kernels_avx2.c — AVX2 + FMA (+F16C) dot-product tiles for machines without
 * AVX-512. Same 4x4 tiling as the AVX-512 kernels, 8 lanes, scalar K tail. */
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/avx2_common.h"

#include "tensor/dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

AVX2_TARGET static inline __m256 ld_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AVX2_TARGET static inline __m256 ld_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
AVX2_TARGET static inline __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }


#define DEFINE_AVX2_TILE(SUFFIX, WT, WLOAD, WSCALAR)                                                 \
    AVX2_TARGET __attribute__((always_inline)) static inline void SUFFIX##_mn(                      \
        const float *x, size_t ldx, const WT *w, size_t ldw, int K, float *y, size_t ldy, const int MR, \
        const int NR) {                                                                             \
        __m256 acc[4][4];                                                                           \
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)                                                                \
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm256_setzero_ps();                           \
        int k = 0;                                                                                  \
        for (; k + 8 <= K; k += 8) {                                                                \
            __m256 wr[4], xr[4];                                                                    \
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) wr[n] = WLOAD(w + (size_t)n * ldw + k);                    \
            _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) xr[m] = _mm256_loadu_ps(x + (size_t)m * ldx + k);          \
            _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)                                                            \
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm256_fmadd_ps(xr[m], wr[n], acc[m][n]);  \
        }                                                                                           \
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)                                                                \
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {                                                          \
                float s = avx2_hsum8(acc[m][n]);                                                         \
                for (int kk = k; kk < K; kk++) s += x[(size_t)m * ldx + kk] * WSCALAR(w[(size_t)n * ldw + kk]); \
                y[(size_t)m * ldy + n] = s;                                                         \
            }                                                                                       \
    }                                                                                               \
    AVX2_TARGET static void SUFFIX(const void *xv, size_t ldx, int mr, const void *wv, size_t ldw, int nr, \
                                   int K, float *y, size_t ldy) {                                   \
        const float *x = xv;                                                                        \
        const WT *w = wv;                                                                           \
        if (mr == 4 && nr == 4) SUFFIX##_mn(x, ldx, w, ldw, K, y, ldy, 4, 4);                       \
        else if (mr == 1 && nr == 4) SUFFIX##_mn(x, ldx, w, ldw, K, y, ldy, 1, 4);                  \
        else                                                                                        \
            for (int n = 0; n < nr; n++)                                                            \
                for (int m = 0; m < mr; m++)                                                        \
                    SUFFIX##_mn(x + (size_t)m * ldx, ldx, w + (size_t)n * ldw, ldw, K,              \
                                y + (size_t)m * ldy + n, ldy, 1, 1);                                \
    }

#define ID(v) (v)
DEFINE_AVX2_TILE(avx2_f32_bf16, uint16_t, ld_bf16, bf16_to_f32)
DEFINE_AVX2_TILE(avx2_f32_f16, uint16_t, ld_f16, f16_to_f32)
DEFINE_AVX2_TILE(avx2_f32_f32, float, ld_f32, ID)

AVX2_TARGET static float avx2_dot(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    float s = avx2_hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

AVX2_TARGET static void avx2_axpy(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static const cpu_kernels avx2_kernels = {
    .isa = "avx2-fma",
    .tile_f32_bf16 = avx2_f32_bf16,
    .tile_f32_f16 = avx2_f32_f16,
    .tile_f32_f32 = avx2_f32_f32,
    .tile_bf16_bf16 = NULL,
    .qtile = cpu_qtile_avx2,
    .qdequant = cpu_qdequant_avx2,
    .qtile_i8 = cpu_qtile_i8_avx2,
    .dot = avx2_dot,
    .axpy = avx2_axpy,
    .silu_mul = cpu_silu_mul_ref,
};

const cpu_kernels *cpu_kernels_avx2(void) { return &avx2_kernels; }
#else
const cpu_kernels *cpu_kernels_avx2(void) { return 0; }
#endif
