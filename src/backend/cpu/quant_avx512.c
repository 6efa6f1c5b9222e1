/* quant_avx512.c — AVX-512 kernels over MLX affine packed weights.
 *
 * Sixteen values of `bits` bits occupy 2*bits consecutive bytes of a row
 * (every chunk of 16 starts on a byte), whatever the width. One masked load
 * brings those bytes in; broadcast to the four 128-bit lanes, a byte shuffle
 * puts the (at most two) bytes holding value j at the bottom of 32-bit lane
 * j, a variable shift and a mask extract it. The values become f32, then
 * scale*q + bias with one FMA: exactly the dequantized weight, which is then
 * multiplied with f32 FMAs like any f32 weight (EXACT math). */
#include "backend/cpu/cpu_internal.h"

#include "tensor/affine.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define Q_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

typedef struct qconst {
    __m512i ctl, shift, mask;
    __mmask16 ld;
} qconst;

Q_TARGET static inline qconst qconst_make(int bits) {
    uint8_t c[64];
    int32_t sh[16];
    for (int j = 0; j < 16; j++) {
        int o = j * bits / 8;
        c[4 * j] = (uint8_t)o;
        c[4 * j + 1] = o + 1 < 2 * bits ? (uint8_t)(o + 1) : 0x80;
        c[4 * j + 2] = c[4 * j + 3] = 0x80;
        sh[j] = (j * bits) % 8;
    }
    qconst q;
    q.ctl = _mm512_loadu_si512(c);
    q.shift = _mm512_loadu_si512(sh);
    q.mask = _mm512_set1_epi32((1 << bits) - 1);
    q.ld = bits == 8 ? (__mmask16)0xFFFF : (__mmask16)((1u << (2 * bits)) - 1);
    return q;
}

/* 16 quantized values starting at byte p, as f32 integers. */
Q_TARGET static inline __m512 dq16(const uint8_t *p, const qconst *q) {
    __m128i raw = _mm_maskz_loadu_epi8(q->ld, p);
    __m512i r = _mm512_broadcast_i32x4(raw);
    r = _mm512_shuffle_epi8(r, q->ctl);
    r = _mm512_srlv_epi32(r, q->shift);
    r = _mm512_and_si512(r, q->mask);
    return _mm512_cvtepi32_ps(r);
}

/* 8 bits: the 16 bytes widen straight to 32-bit lanes. */
Q_TARGET static inline __m512 dq16_8(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* BITS8: a compile-time flag for the 8-bit path (the generic one serves all
 * widths, 8 included). */
Q_TARGET __attribute__((always_inline)) static inline void qtile_mn(const float *x, size_t ldx, const em_weight *w,
                                                                    int n0, float *y, size_t ldy, const int MR,
                                                                    const int NR, const bool BITS8) {
    const int bits = w->bits, G = w->group_size;
    const int64_t K = w->cols, gpr = K / G;
    const size_t row_bytes = (size_t)(K * bits / 8);
    const qconst q = qconst_make(bits);
    const uint8_t *wr[4];
    _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) wr[n] = (const uint8_t *)w->data + (size_t)(n0 + n) * row_bytes;
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm512_setzero_ps();
    for (int64_t g = 0; g < gpr; g++) {
        __m512 s[4], b[4];
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
            size_t gi = (size_t)(n0 + n) * (size_t)gpr + (size_t)g;
            s[n] = _mm512_set1_ps(affine_scalar(w->scales, w->scale_dtype, gi));
            b[n] = _mm512_set1_ps(affine_scalar(w->biases, w->scale_dtype, gi));
        }
        for (int c = 0; c < G; c += 16) {
            int64_t k = g * G + c;
            __m512 wv[4], xv[4];
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++)
                wv[n] = _mm512_fmadd_ps(BITS8 ? dq16_8(wr[n] + k) : dq16(wr[n] + k * bits / 8, &q), s[n], b[n]);
            _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) xv[m] = _mm512_loadu_ps(x + (size_t)m * ldx + k);
            _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm512_fmadd_ps(xv[m], wv[n], acc[m][n]);
        }
    }
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) y[(size_t)m * ldy + n] = _mm512_reduce_add_ps(acc[m][n]);
}

#define QTILE_DISPATCH(B8)                                                                                  \
    if (nr == 4 && mr == 1) qtile_mn(x, ldx, w, n0, y, ldy, 1, 4, B8);                                      \
    else if (nr == 4 && mr == 2) qtile_mn(x, ldx, w, n0, y, ldy, 2, 4, B8);                                 \
    else if (nr == 4 && mr == 3) qtile_mn(x, ldx, w, n0, y, ldy, 3, 4, B8);                                 \
    else if (nr == 4 && mr == 4) qtile_mn(x, ldx, w, n0, y, ldy, 4, 4, B8);                                 \
    else                                                                                                    \
        for (int n = 0; n < nr; n++)                                                                        \
            for (int m = 0; m < mr; m++)                                                                    \
                qtile_mn(x + (size_t)m * ldx, ldx, w, n0 + n, y + (size_t)m * ldy + n, ldy, 1, 1, B8);

Q_TARGET void cpu_qtile_avx512(const float *x, size_t ldx, int mr, const em_weight *w, int n0, int nr, float *y,
                               size_t ldy) {
    if (w->bits == 8) {
        QTILE_DISPATCH(true)
    } else {
        QTILE_DISPATCH(false)
    }
}

Q_TARGET void cpu_qdequant_avx512(const em_weight *w, int64_t r, float *out) {
    const int bits = w->bits, G = w->group_size;
    const int64_t K = w->cols, gpr = K / G;
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * (size_t)(K * bits / 8);
    const qconst q = qconst_make(bits);
    for (int64_t g = 0; g < gpr; g++) {
        size_t gi = (size_t)r * (size_t)gpr + (size_t)g;
        __m512 s = _mm512_set1_ps(affine_scalar(w->scales, w->scale_dtype, gi));
        __m512 b = _mm512_set1_ps(affine_scalar(w->biases, w->scale_dtype, gi));
        for (int c = 0; c < G; c += 16) {
            int64_t k = g * G + c;
            _mm512_storeu_ps(out + k, _mm512_fmadd_ps(dq16(row + k * bits / 8, &q), s, b));
        }
    }
}
#endif
