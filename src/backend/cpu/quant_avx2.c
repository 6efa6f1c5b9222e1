/* quant_avx2.c — AVX2 + FMA kernels over MLX affine packed weights, for
 * machines without AVX-512.
 *
 * Eight values of `bits` bits occupy `bits` consecutive bytes of a row
 * (every chunk of 8 starts on a byte), whatever the width. They are read as
 * one integer; its low and high halves (values 0-3 and 4-7) go to the two
 * halves of a vector, a variable shift per lane and a mask extract each
 * value, and one FMA turns the codes into scale*q + bias. The weights are
 * then multiplied exactly as the f32 tile multiplies stored f32 weights —
 * 8 lanes accumulated in order over k, summed at the end — so a row of a
 * decode batch (this fused tile) and the same row in a prefill batch
 * (qdequant, then the f32 tile) get the same bits. */
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/avx2_common.h"

#include "tensor/affine.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define Q2_TARGET __attribute__((target("avx2,fma,f16c")))

/* The n bytes at p as a little-endian integer, in fixed-size loads that
 * never read past them (the row, and the mapping, may end there). */
static inline uint64_t load_le(const uint8_t *p, const int n) {
    uint32_t a;
    uint16_t b;
    switch (n) {
    case 2: memcpy(&b, p, 2); return b;
    case 3: memcpy(&b, p, 2); return b | (uint64_t)p[2] << 16;
    case 4: memcpy(&a, p, 4); return a;
    case 5: memcpy(&a, p, 4); return a | (uint64_t)p[4] << 32;
    case 6: memcpy(&a, p, 4); memcpy(&b, p + 4, 2); return a | (uint64_t)b << 32;
    default: {
        uint64_t u;
        memcpy(&u, p, 8);
        return u;
    }
    }
}

/* 8 codes of BITS bits from the BITS bytes at p, as f32 integers. */
Q2_TARGET __attribute__((always_inline)) static inline __m256 dq8(const uint8_t *p, const int BITS) {
    if (BITS == 8) return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
    uint64_t u = load_le(p, BITS);
    uint32_t lo = (uint32_t)u, hi = (uint32_t)(u >> (4 * BITS));
    __m256i v = _mm256_set_epi32((int)hi, (int)hi, (int)hi, (int)hi, (int)lo, (int)lo, (int)lo, (int)lo);
    v = _mm256_srlv_epi32(v, _mm256_set_epi32(3 * BITS, 2 * BITS, BITS, 0, 3 * BITS, 2 * BITS, BITS, 0));
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32((1 << BITS) - 1)));
}

/* 4 bits: 32 codes from 16 bytes at once (byte i holds codes 2i and 2i+1,
 * low nibble first), as four vectors of 8 in order. */
Q2_TARGET __attribute__((always_inline)) static inline void dq32_4(const uint8_t *p, __m256 out[4]) {
    __m128i v = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi);
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
}


Q2_TARGET __attribute__((always_inline)) static inline void qtile_mn(const float *x, size_t ldx, const em_weight *w,
                                                                     int n0, float *y, size_t ldy, const int MR,
                                                                     const int NR, const int BITS) {
    const int G = w->group_size;
    const int64_t K = w->cols, gpr = K / G;
    const uint8_t *wr[4];
    const void *ws[4], *wb[4];
    _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
        wr[n] = em_qrow_codes(w, n0 + n);
        ws[n] = em_qrow_scales(w, n0 + n);
        wb[n] = em_qrow_biases(w, n0 + n);
    }
    __m256 acc[4][4];
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm256_setzero_ps();
    for (int64_t g = 0; g < gpr; g++) {
        __m256 s[4], b[4];
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
            s[n] = _mm256_set1_ps(affine_scalar(ws[n], w->scale_dtype, (size_t)g));
            b[n] = _mm256_set1_ps(affine_scalar(wb[n], w->scale_dtype, (size_t)g));
        }
        if (BITS == 4) { /* groups are multiples of 32 */
            for (int c = 0; c < G; c += 32) {
                int64_t k = g * G + c;
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
                    __m256 q[4];
                    dq32_4(wr[n] + k / 2, q);
                    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
                        __m256 wv = _mm256_fmadd_ps(q[j], s[n], b[n]);
                        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
                            acc[m][n] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (size_t)m * ldx + k + 8 * j), wv, acc[m][n]);
                    }
                }
            }
            continue;
        }
        for (int c = 0; c < G; c += 8) {
            int64_t k = g * G + c;
            __m256 wv[4];
            _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++)
                wv[n] = _mm256_fmadd_ps(dq8(wr[n] + k * BITS / 8, BITS), s[n], b[n]);
            _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) {
                __m256 xv = _mm256_loadu_ps(x + (size_t)m * ldx + k);
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) y[(size_t)m * ldy + n] = avx2_hsum8(acc[m][n]);
}

/* Rows two at a time over four weight rows (the registers AVX2 has: 8
 * accumulators, 8 scales and biases, 4 weight vectors), else one by one. */
#define QTILE2(B)                                                                                           \
    case B:                                                                                                 \
        if (nr == 4) {                                                                                      \
            int m = 0;                                                                                      \
            for (; m + 2 <= mr; m += 2) qtile_mn(x + (size_t)m * ldx, ldx, w, n0, y + (size_t)m * ldy, ldy, 2, 4, B); \
            if (m < mr) qtile_mn(x + (size_t)m * ldx, ldx, w, n0, y + (size_t)m * ldy, ldy, 1, 4, B);      \
        } else {                                                                                            \
            for (int m = 0; m < mr; m++)                                                                    \
                for (int n = 0; n < nr; n++)                                                                \
                    qtile_mn(x + (size_t)m * ldx, ldx, w, n0 + n, y + (size_t)m * ldy + n, ldy, 1, 1, B);   \
        }                                                                                                   \
        break;

Q2_TARGET void cpu_qtile_avx2(const float *x, size_t ldx, int mr, const em_weight *w, int n0, int nr, float *y,
                              size_t ldy) {
    switch (w->bits) {
        QTILE2(2) QTILE2(3) QTILE2(4) QTILE2(5) QTILE2(6) QTILE2(8)
    default: cpu_qtile_ref(x, ldx, mr, w, n0, nr, y, ldy); /* weight_bind admits no other width */
    }
}

Q2_TARGET __attribute__((always_inline)) static inline void qdequant_bits(const em_weight *w, int64_t r, float *out,
                                                                          const int BITS) {
    const int G = w->group_size;
    const int64_t K = w->cols, gpr = K / G;
    const uint8_t *row = em_qrow_codes(w, r);
    const void *rs = em_qrow_scales(w, r), *rbi = em_qrow_biases(w, r);
    for (int64_t g = 0; g < gpr; g++) {
        __m256 s = _mm256_set1_ps(affine_scalar(rs, w->scale_dtype, (size_t)g));
        __m256 b = _mm256_set1_ps(affine_scalar(rbi, w->scale_dtype, (size_t)g));
        if (BITS == 4) {
            for (int c = 0; c < G; c += 32) {
                int64_t k = g * G + c;
                __m256 q[4];
                dq32_4(row + k / 2, q);
                for (int j = 0; j < 4; j++) _mm256_storeu_ps(out + k + 8 * j, _mm256_fmadd_ps(q[j], s, b));
            }
            continue;
        }
        for (int c = 0; c < G; c += 8) {
            int64_t k = g * G + c;
            _mm256_storeu_ps(out + k, _mm256_fmadd_ps(dq8(row + k * BITS / 8, BITS), s, b));
        }
    }
}

Q2_TARGET void cpu_qdequant_avx2(const em_weight *w, int64_t r, float *out) {
    switch (w->bits) {
    case 2: qdequant_bits(w, r, out, 2); break;
    case 3: qdequant_bits(w, r, out, 3); break;
    case 4: qdequant_bits(w, r, out, 4); break;
    case 5: qdequant_bits(w, r, out, 5); break;
    case 6: qdequant_bits(w, r, out, 6); break;
    case 8: qdequant_bits(w, r, out, 8); break;
    default: cpu_qdequant_ref(w, r, out);
    }
}

/* ---- FAST: int8 activations, integer dot products ---------------------- */

/* 32 codes of row p at chunk k as unsigned bytes in order (4 bits), or as
 * signed bytes q - 128 (8 bits: the bias then absorbs 128 * scale). */
Q2_TARGET __attribute__((always_inline)) static inline __m256i codes32(const uint8_t *row, int64_t k, const int BITS) {
    if (BITS == 8)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(row + k)), _mm256_set1_epi8((char)0x80));
    __m128i v = _mm_loadu_si128((const __m128i *)(row + k / 2)), m = _mm_set1_epi8(0x0F);
    __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
}

/* Eight partial sums of w·x over 32 entries, as f32. maddubs multiplies
 * unsigned by signed bytes: 4-bit codes are unsigned already; signed 8-bit
 * codes go in as magnitudes with their signs moved onto x. Pair sums stay
 * within int16 (2 * 128 * 127). */
Q2_TARGET __attribute__((always_inline)) static inline __m256 dot32(__m256i wq, __m256i xq, const int BITS) {
    __m256i p = BITS == 8 ? _mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq))
                          : _mm256_maddubs_epi16(wq, xq);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* Prefetches the byte `ahead` bytes past p. The address is formed as an
 * integer: past the last tile it lies outside the matrix, where pointer
 * arithmetic would be undefined (the prefetch itself never faults). */
Q2_TARGET __attribute__((always_inline)) static inline void qi8_prefetch(const uint8_t *p, size_t ahead) {
    _mm_prefetch((const char *)((uintptr_t)p + ahead), _MM_HINT_T0);
}

/* One activation row against NR weight rows: per block of 32 the integer
 * dot products are scaled by the block's activation scale into a group
 * accumulator, which the group's weight scale then folds into the row's
 * (13 vector registers for NR = 4). */
Q2_TARGET __attribute__((always_inline)) static inline void qtile_i8_n(const cpu_xq8 *x, int m, const em_weight *w,
                                                                       int n0, float *y, const int NR, const int BITS) {
    const int G = w->group_size;
    const int64_t K = w->cols, gpr = K / G;
    const uint8_t *wr[4];
    const void *ws[4], *wb[4];
    _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
        wr[n] = em_qrow_codes(w, n0 + n);
        ws[n] = em_qrow_scales(w, n0 + n);
        wb[n] = em_qrow_biases(w, n0 + n);
    }
    /* Each row is prefetched where the next tile (NR rows on) reads: the
     * loads' latency, not the arithmetic, bounded this loop, and rows of a
     * few KB end before the hardware prefetcher is up to speed. */
    const size_t ahead = (size_t)NR * em_qrow_step(w);
    const int8_t *xq = x->q + (size_t)m * (size_t)K;
    const float *xd = x->d + (size_t)m * (size_t)(K / 32), *xs = x->sum + (size_t)m * (size_t)gpr;
    __m256 acc[4];
    float bias_term[4] = {0};
    _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[n] = _mm256_setzero_ps();
    for (int64_t g = 0; g < gpr; g++) {
        __m256 accg[4];
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) accg[n] = _mm256_setzero_ps();
        if (BITS == 4 && x->run == 64) {
            /* 64 codes per 32-byte load: low nibbles are the even positions
             * of both halves, high nibbles the odd ones, and x is stored in
             * that order; lanes 0-3 sum the first 32, lanes 4-7 the next */
            for (int c = 0; c < G; c += 64) {
                int64_t k = g * G + c;
                __m256i xe = _mm256_loadu_si256((const __m256i *)(xq + k));
                __m256i xo = _mm256_loadu_si256((const __m256i *)(xq + k + 32));
                __m256 d = _mm256_set_m128(_mm_broadcast_ss(xd + k / 32 + 1), _mm_broadcast_ss(xd + k / 32));
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
                    qi8_prefetch(wr[n] + k / 2, ahead);
                    __m256i v = _mm256_loadu_si256((const __m256i *)(wr[n] + k / 2)), m4 = _mm256_set1_epi8(0x0F);
                    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
                    __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
                    accg[n] = _mm256_fmadd_ps(f, d, accg[n]);
                }
            }
        } else {
            for (int c = 0; c < G; c += 32) {
                int64_t k = g * G + c;
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + k));
                __m256 d = _mm256_broadcast_ss(xd + k / 32);
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
                    qi8_prefetch(wr[n] + k * BITS / 8, ahead);
                    accg[n] = _mm256_fmadd_ps(dot32(codes32(wr[n], k, BITS), xv, BITS), d, accg[n]);
                }
            }
        }
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
            float s = affine_scalar(ws[n], w->scale_dtype, (size_t)g);
            float b = affine_scalar(wb[n], w->scale_dtype, (size_t)g) + (BITS == 8 ? 128.0f * s : 0.0f);
            acc[n] = _mm256_fmadd_ps(accg[n], _mm256_set1_ps(s), acc[n]);
            bias_term[n] += b * xs[g];
        }
    }
    _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) y[n] = avx2_hsum8(acc[n]) + bias_term[n];
}

/* Weight rows four at a time (then one by one), every row of x for each. */
#define QTILE_I8(B)                                                                                         \
    case B: {                                                                                               \
        int n = 0;                                                                                          \
        for (; n + 4 <= nr; n += 4)                                                                         \
            for (int m = 0; m < mr; m++) qtile_i8_n(x, m0 + m, w, n0 + n, y + (size_t)m * ldy + n, 4, B);  \
        for (; n < nr; n++)                                                                                 \
            for (int m = 0; m < mr; m++) qtile_i8_n(x, m0 + m, w, n0 + n, y + (size_t)m * ldy + n, 1, B);  \
        break;                                                                                              \
    }

/* 4-bit weights with groups of 64 or more read 64 codes per load (runs of
 * 64 never cross a group); other widths and groups take x in order. */
int cpu_qi8_run_avx2(int bits, int group) { return bits == 4 && group >= 64 ? 64 : 0; }

Q2_TARGET void cpu_qtile_i8_avx2(const cpu_xq8 *x, int m0, int mr, const em_weight *w, int n0, int nr, float *y,
                                 size_t ldy) {
    switch (w->bits) {
        QTILE_I8(4) QTILE_I8(8)
    default: break; /* cpu_qmatmul sends only 4 and 8 bits here */
    }
}
#endif
