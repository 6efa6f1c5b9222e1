/* kernels_avx512.c — AVX-512 dot-product tiles (F, BW, VL, BF16, F16C).
 *
 * Each tile computes up to 4x4 dot products along K at once: 16 accumulators
 * of 16 lanes, so every weight vector loaded is used by 4 activation rows and
 * every activation vector by 4 weight rows. A tile of one activation row
 * (decode) prefetches the next tile's rows, a line of each per line read: the
 * hardware prefetchers do not follow 4 streams a row apart (1B shape, bf16,
 * 2 cores: a layer's products 23 -> 55 GB/s; the hint that keeps the line
 * out of the caches after its use beat L2's, 1 and 2 tiles ahead alike).
 * bf16 weights widen to f32 with a
 * zero-extend and a shift (exact). The FAST kernel multiplies bf16 pairs with
 * VDPBF16PS, twice the f32 FMA rate, at the cost of rounding activations. */
#include "backend/cpu/cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c,avx2")))

/* Prefetches, without keeping it in the caches past its use, the line
 * `ahead` bytes past p; the address is formed as an integer since past the
 * last tile it lies outside the matrix (the prefetch never faults). */
AVX512_TARGET __attribute__((always_inline)) static inline void tile_prefetch(const void *p, size_t ahead) {
    _mm_prefetch((const char *)((uintptr_t)p + ahead), _MM_HINT_NTA);
}

AVX512_TARGET static inline __m512 load_bf16_as_f32(const uint16_t *p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AVX512_TARGET static inline __m512 load_f16_as_f32(const uint16_t *p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_cvtph_ps(h);
}

AVX512_TARGET static inline __m512 load_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

/* The generic tile body; WLOAD widens 16 weights to f32. MR/NR are small
 * constants after inlining, so the loops fully unroll. */
#define AVX512_TILE_BODY(WT, WLOAD)                                                                 \
    const float *x = xv;                                                                            \
    const WT *w = wv;                                                                               \
    __m512 acc[4][4];                                                                               \
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)                                                                    \
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm512_setzero_ps();                               \
    for (int k = 0; k < K; k += 16) {                                                               \
        __mmask16 mask = K - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (K - k)) - 1);        \
        if (MR == 1 && NR == 4 && k % (64 / sizeof(WT)) == 0)                                       \
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++)                                    \
                tile_prefetch(w + (size_t)n * ldw + k, 4 * ldw * sizeof(WT));                       \
        __m512 wr[4], xr[4];                                                                        \
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) wr[n] = WLOAD(w + (size_t)n * ldw + k, mask);                  \
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) xr[m] = _mm512_maskz_loadu_ps(mask, x + (size_t)m * ldx + k);  \
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)                                                                \
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm512_fmadd_ps(xr[m], wr[n], acc[m][n]);      \
    }                                                                                               \
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)                                                                    \
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) y[(size_t)m * ldy + n] = _mm512_reduce_add_ps(acc[m][n]);

#define DEFINE_TILE(SUFFIX, WT, WLOAD)                                                              \
    AVX512_TARGET __attribute__((always_inline)) static inline void tile_##SUFFIX##_mn(             \
        const void *xv, size_t ldx, const void *wv, size_t ldw, int K, float *y, size_t ldy,        \
        const int MR, const int NR) {                                                               \
        AVX512_TILE_BODY(WT, WLOAD)                                                                 \
    }                                                                                               \
    AVX512_TARGET static void tile_##SUFFIX(const void *x, size_t ldx, int mr, const void *w,       \
                                            size_t ldw, int nr, int K, float *y, size_t ldy) {      \
        if (mr == 4 && nr == 4) tile_##SUFFIX##_mn(x, ldx, w, ldw, K, y, ldy, 4, 4);                \
        else if (mr == 1 && nr == 4) tile_##SUFFIX##_mn(x, ldx, w, ldw, K, y, ldy, 1, 4);           \
        else if (mr == 2 && nr == 4) tile_##SUFFIX##_mn(x, ldx, w, ldw, K, y, ldy, 2, 4);           \
        else if (mr == 3 && nr == 4) tile_##SUFFIX##_mn(x, ldx, w, ldw, K, y, ldy, 3, 4);           \
        else                                                                                        \
            for (int n = 0; n < nr; n++)                                                            \
                for (int m = 0; m < mr; m++)                                                        \
                    tile_##SUFFIX##_mn((const float *)x + (size_t)m * ldx, ldx,                     \
                                       (const WT *)w + (size_t)n * ldw, ldw, K,                     \
                                       y + (size_t)m * ldy + n, ldy, 1, 1);                         \
    }

DEFINE_TILE(f32_bf16, uint16_t, load_bf16_as_f32)
DEFINE_TILE(f32_f16, uint16_t, load_f16_as_f32)
DEFINE_TILE(f32_f32, float, load_f32)

/* FAST: x and w both bf16; 32 products per VDPBF16PS. */
AVX512_TARGET __attribute__((always_inline)) static inline void tile_bf16_mn(const uint16_t *x, size_t ldx,
                                                                             const uint16_t *w, size_t ldw, int K,
                                                                             float *y, size_t ldy, const int MR,
                                                                             const int NR) {
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 32) {
        __mmask32 mask = K - k >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1ull << (K - k)) - 1);
        __m512bh wr[4], xr[4];
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) wr[n] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + (size_t)n * ldw + k);
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) xr[m] = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + (size_t)m * ldx + k);
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xr[m], wr[n]);
    }
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) y[(size_t)m * ldy + n] = _mm512_reduce_add_ps(acc[m][n]);
}

AVX512_TARGET static void tile_bf16_bf16(const void *xv, size_t ldx, int mr, const void *wv, size_t ldw, int nr,
                                         int K, float *y, size_t ldy) {
    const uint16_t *x = xv, *w = wv;
    if (mr == 4 && nr == 4) tile_bf16_mn(x, ldx, w, ldw, K, y, ldy, 4, 4);
    else if (mr == 1 && nr == 4) tile_bf16_mn(x, ldx, w, ldw, K, y, ldy, 1, 4);
    else if (mr == 2 && nr == 4) tile_bf16_mn(x, ldx, w, ldw, K, y, ldy, 2, 4);
    else if (mr == 3 && nr == 4) tile_bf16_mn(x, ldx, w, ldw, K, y, ldy, 3, 4);
    else
        for (int n = 0; n < nr; n++)
            for (int m = 0; m < mr; m++)
                tile_bf16_mn(x + (size_t)m * ldx, ldx, w + (size_t)n * ldw, ldw, K, y + (size_t)m * ldy + n, ldy, 1, 1);
}

AVX512_TARGET static float avx512_dot(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

AVX512_TARGET static void avx512_axpy(float *y, float a, const float *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

/* exp(x) to about 1 ulp: x = k ln2 + r with |r| <= ln2/2, a degree-6
 * polynomial for e^r, then scale by 2^k (scalef handles over/underflow). */
AVX512_TARGET static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-103.9f));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, k);
}

AVX512_TARGET static void avx512_silu_mul(float *out, const float *gate, const float *up, int n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 r = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u);
        _mm512_mask_storeu_ps(out + i, m, r);
    }
}

/* f32_to_bf16 on 16 lanes (see bf16_bits8 in kernels_avx2.c); the tail
 * masked. Not VCVTNEPS2BF16, which flushes subnormal inputs to zero. */
AVX512_TARGET static void avx512_to_bf16(uint16_t *out, const float *x, size_t n) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x400000);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), one), half));
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, quiet));
        _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
}

/* Without VNNI the int8 decode kernel is the AVX2 one (every AVX-512 CPU
 * has AVX2) and prefill dequantizes to bf16; with it, VPDPBUSD over 512-bit
 * vectors for both. The attention helpers
 * are the AVX2 ones: a KV block's keys and values are read 8 dims at a
 * time, and decode and prefill share them (the same arithmetic per row). */
#define AVX512_TABLE(ISA, QI8, QI8_RUN, QGEMM)                                                              \
    {                                                                                                       \
        .isa = ISA, .tile_f32_bf16 = tile_f32_bf16, .tile_f32_f16 = tile_f32_f16, .tile_f32_f32 = tile_f32_f32, \
        .tile_bf16_bf16 = tile_bf16_bf16, .qtile = cpu_qtile_avx512, .qdequant = cpu_qdequant_avx512,       \
        .qtile_i8 = QI8, .qi8_run = QI8_RUN, .qi8_quantize = cpu_qi8_quantize_avx512, .qgemm_i8 = QGEMM,   \
        .dot = avx512_dot, .axpy = avx512_axpy,                                                             \
        .silu_mul = avx512_silu_mul, .dots = cpu_dots_avx2, .axpy_rows = cpu_axpy_rows_avx2,                \
        .to_bf16 = avx512_to_bf16,                                                                          \
    }

static const cpu_kernels avx512_kernels = AVX512_TABLE("avx512-bf16", cpu_qtile_i8_avx2, cpu_qi8_run_avx2, NULL);
static const cpu_kernels avx512_vnni_kernels = AVX512_TABLE("avx512-vnni", cpu_qtile_i8_vnni, cpu_qi8_run_vnni, cpu_qgemm_i8_vnni);

const cpu_kernels *cpu_kernels_avx512(void) { return &avx512_kernels; }
const cpu_kernels *cpu_kernels_avx512_vnni(void) { return &avx512_vnni_kernels; }
#else
const cpu_kernels *cpu_kernels_avx512(void) { return 0; }
const cpu_kernels *cpu_kernels_avx512_vnni(void) { return 0; }
#endif
