/* kernels_avx2.c — AVX2 + FMA (+F16C) dot-product tiles for machines without
 * AVX-512. Same 4x4 tiling as the AVX-512 kernels (and the same prefetch of
 * the next tile in decode), 8 lanes, scalar K tail. */
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
            if (MR == 1 && NR == 4 && k % (64 / sizeof(WT)) == 0) /* see kernels_avx512.c */         \
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++)                                \
                    _mm_prefetch((const char *)((uintptr_t)(w + (size_t)n * ldw + k) + 4 * ldw * sizeof(WT)), _MM_HINT_NTA); \
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

/* Eight dots at once: the keys' partial sums (8 lanes each) reduced by one
 * hadd tree into a vector of 8 results. */
AVX2_TARGET static inline __m256 dot8_rows(const float *q, const float *const k[8], int hd) {
    __m256 a[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[i] + d), a[i]);
    }
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

AVX2_TARGET void cpu_dots_avx2(const float *q, const float *k, size_t stride, int n, int hd, float *out) {
    for (int i0 = 0; i0 < n; i0 += 8) {
        const float *rows[8];
        for (int i = 0; i < 8; i++) rows[i] = k + (size_t)(i0 + i < n ? i0 + i : n - 1) * stride;
        float r[8];
        _mm256_storeu_ps(r, dot8_rows(q, rows, hd));
        for (int i = 0; i < 8 && i0 + i < n; i++) out[i0 + i] = r[i];
    }
}

/* C * 8 dims of o (C <= 8) held in registers across every row. */
AVX2_TARGET __attribute__((always_inline)) static inline void axpy_rows_c(float *o, const float *w, const float *v,
                                                                         size_t stride, int n, const int C) {
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int j = 0; j < C; j++) acc[j] = _mm256_loadu_ps(o + 8 * j);
    for (int i = 0; i < n; i++) {
        __m256 wi = _mm256_set1_ps(w[i]);
        const float *vr = v + (size_t)i * stride;
        _Pragma("GCC unroll 8") for (int j = 0; j < C; j++) acc[j] = _mm256_fmadd_ps(wi, _mm256_loadu_ps(vr + 8 * j), acc[j]);
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < C; j++) _mm256_storeu_ps(o + 8 * j, acc[j]);
}

/* 64 dims of o at a time, then the rest 8 at a time. */
AVX2_TARGET void cpu_axpy_rows_avx2(float *o, const float *w, const float *v, size_t stride, int n, int hd) {
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) axpy_rows_c(o + d0, w, v + d0, stride, n, 8);
    for (; d0 < hd; d0 += 8) axpy_rows_c(o + d0, w, v + d0, stride, n, 1);
}

/* f32_to_bf16 on 8 lanes, as 32-bit lanes holding the result: round to
 * nearest even by adding 0x7fff and the kept part's lowest bit; a NaN keeps
 * its top half with the quiet bit set. */
AVX2_TARGET static inline __m256i bf16_bits8(const float *p) {
    __m256i u = _mm256_loadu_si256((const __m256i *)p);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    return _mm256_srli_epi32(r, 16);
}

AVX2_TARGET void cpu_to_bf16_avx2(uint16_t *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        /* the pack interleaves 128-bit halves; the permute restores order */
        __m256i p = _mm256_packus_epi32(bf16_bits8(x + i), bf16_bits8(x + i + 8));
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_permute4x64_epi64(p, 0xD8));
    }
    for (; i < n; i++) out[i] = f32_to_bf16(x[i]);
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
    .qi8_run = cpu_qi8_run_avx2,
    .dot = avx2_dot,
    .axpy = avx2_axpy,
    .dots = cpu_dots_avx2,
    .axpy_rows = cpu_axpy_rows_avx2,
    .silu_mul = cpu_silu_mul_ref,
    .to_bf16 = cpu_to_bf16_avx2,
};

const cpu_kernels *cpu_kernels_avx2(void) { return &avx2_kernels; }
#else
const cpu_kernels *cpu_kernels_avx2(void) { return 0; }
#endif
