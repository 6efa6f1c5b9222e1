/* quant_avx512.c — AVX-512 kernels over MLX affine packed weights.
 *
 * Sixteen values of `bits` bits occupy 2*bits consecutive bytes of a row
 * (every chunk of 16 starts on a byte), whatever the width. One masked load
 * brings those bytes in; broadcast to the four 128-bit lanes, a byte shuffle
 * puts the (at most two) bytes holding value j at the bottom of 32-bit lane
 * j, a variable shift and a mask extract it. The values become f32, then
 * scale*q + bias with one FMA: exactly the dequantized weight, which is then
 * multiplied with f32 FMAs like any f32 weight (EXACT math).
 *
 * FAST few-row products with 4- and 8-bit weights (where the CPU has
 * AVX-512 VNNI) take int8 activations instead: VPDPBUSD multiplies the
 * unsigned codes by the signed activations and adds four products per
 * 32-bit lane, so a weight is never widened nor converted, and the per-32
 * activation scales and per-group weight scales are applied a vector of 16
 * lanes at a time, each lane holding the sum of 4 (8-bit) or 8 (4-bit)
 * consecutive values of one block. */
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
    const qconst q = qconst_make(bits);
    const uint8_t *wr[4];
    const void *ws[4], *wb[4];
    _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
        wr[n] = em_qrow_codes(w, n0 + n);
        ws[n] = em_qrow_scales(w, n0 + n);
        wb[n] = em_qrow_biases(w, n0 + n);
    }
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = _mm512_setzero_ps();
    for (int64_t g = 0; g < gpr; g++) {
        __m512 s[4], b[4];
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
            s[n] = _mm512_set1_ps(affine_scalar(ws[n], w->scale_dtype, (size_t)g));
            b[n] = _mm512_set1_ps(affine_scalar(wb[n], w->scale_dtype, (size_t)g));
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
    const uint8_t *row = em_qrow_codes(w, r);
    const void *rs = em_qrow_scales(w, r), *rbi = em_qrow_biases(w, r);
    const qconst q = qconst_make(bits);
    for (int64_t g = 0; g < gpr; g++) {
        __m512 s = _mm512_set1_ps(affine_scalar(rs, w->scale_dtype, (size_t)g));
        __m512 b = _mm512_set1_ps(affine_scalar(rbi, w->scale_dtype, (size_t)g));
        for (int c = 0; c < G; c += 16) {
            int64_t k = g * G + c;
            _mm512_storeu_ps(out + k, _mm512_fmadd_ps(dq16(row + k * bits / 8, &q), s, b));
        }
    }
}

/* ---- FAST: int8 activations, VPDPBUSD --------------------------------- */

/* One block of 32 values rounded as cpu_qi8_quantize_ref rounds it (the
 * same divisions; cvtps rounds to nearest even like lrintf), its evens
 * stored at qe and odds at qo, or all in order at qe when qo is NULL.
 * Returns what rounding took off, per lane. */
Q_TARGET static inline __m512 qi8_block16(const float *xb, int8_t *qe, int8_t *qo, float *d) {
    __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    *d = amax / 127.0f;
    __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f), dv = _mm512_set1_ps(*d);
    __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv)), qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, inv));
    __m512 err = _mm512_add_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(qa), dv, a), _mm512_fnmadd_ps(_mm512_cvtepi32_ps(qb), dv, b));
    if (!qo) {
        _mm_storeu_si128((__m128i *)qe, _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128((__m128i *)(qe + 16), _mm512_cvtepi32_epi8(qb));
        return err;
    }
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    _mm_storeu_si128((__m128i *)qe, _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(qa, ev, qb)));
    _mm_storeu_si128((__m128i *)qo, _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(qa, od, qb)));
    return err;
}

/* cpu_qi8_quantize_ref in vectors. err is summed lane-wise, then across
 * lanes: FAST results may differ from the portable rounding there (and in
 * the group sums) by f32 rounding only. */
Q_TARGET void cpu_qi8_quantize_avx512(const float *x, int K, int G, int run, int8_t *q, float *d, float *sum,
                                      float *err) {
    for (int g = 0; g < K / G; g++) {
        __m512 e = _mm512_setzero_ps(), s = _mm512_setzero_ps();
        for (int k = g * G; k < (g + 1) * G; k += 32) {
            int base = run ? k - k % run : k, len = run ? (K - base < run ? K - base : run) : 0;
            int8_t *qe = run ? q + base + (k - base) / 2 : q + k;
            e = _mm512_add_ps(e, qi8_block16(x + k, qe, run ? qe + len / 2 : NULL, d + k / 32));
            s = _mm512_add_ps(s, _mm512_add_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(x + k + 16)));
        }
        sum[g] = _mm512_reduce_add_ps(s);
        err[g] = _mm512_reduce_add_ps(e);
    }
}

#define QV_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

/* 16 scales or biases (or fewer, by mask m) of dtype t from index i, as f32. */
QV_TARGET static inline __m512 qv_scalars(const void *base, em_dtype t, size_t i, __mmask16 m) {
    if (t == EM_F32) return _mm512_maskz_loadu_ps(m, (const float *)base + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)base + i);
    if (t == EM_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The lowest n bits set (n <= 64). */
static inline uint64_t qv_mask(size_t n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

/* Prefetches into L2 the line `ahead` bytes past p, the address formed as an
 * integer: past the last tile it lies outside the matrix, where pointer
 * arithmetic would be undefined (the prefetch itself never faults). Always
 * inlined: GCC finds a function made of a prefetch free of side effects and
 * drops its calls. */
QV_TARGET __attribute__((always_inline)) static inline void qv_prefetch(const uint8_t *p, size_t ahead) {
    _mm_prefetch((const char *)((uintptr_t)p + ahead), _MM_HINT_T1);
}

/* How far ahead of its reads a one-row product prefetches its weight codes.
 * The hardware prefetchers alone kept a core at about 17 GB/s of 4-bit
 * codes, the loads of codes and of each row's scales and biases (a second
 * and third stream, one line a row) stalling where a plain read reaches
 * 29; 8 KB ahead (and the scales of the rows those bytes belong to) raised
 * a 1B layer's gate+up products from 22-28 to 29-48 GB/s on two cores, and
 * the 1B decode, six alternated runs each, from a median of 19.8 to 25.1
 * tok/s at 8 bits and 33.8 to 36.3 at 4 (16 KB ahead was no better, into L1
 * rather than L2 no different). */
#define QV_STREAM_AHEAD 8192

/* Prefetches into L2 the scales and biases of weight row r, if the matrix
 * has it (in a row record they lie just before the row's codes). */
QV_TARGET __attribute__((always_inline)) static inline void qv_prefetch_scalars(const em_weight *w, int64_t r) {
    if (r >= w->rows) return;
    size_t sb = (size_t)(w->cols / w->group_size) * (w->scale_dtype == EM_F32 ? 4 : 2);
    for (size_t o = 0; o < sb; o += 64) {
        qv_prefetch(em_qrow_scales(w, r), o);
        qv_prefetch(em_qrow_biases(w, r), o);
    }
}

/* The row whose scales a one-row product prefetches as it starts row n:
 * the one its code prefetches will reach first (rows `step` bytes apart:
 * em_qrow_step). */
static inline int64_t qv_scalars_ahead(int64_t n, size_t step) {
    return n + 1 + (int64_t)(QV_STREAM_AHEAD / step);
}

/* What a tile shares across its rows for one chunk: the activations (at 4
 * bits the chunk's evens and odds, cpu_xq8 run 128), each lane's block
 * scale, and each lane's group within the window. */
typedef struct qv_chunk {
    __m512i xe, xo, gidx;
    __m512 d;
} qv_chunk;

/* One chunk of a weight row (128 values at 4 bits, 64 at 8; `bytes` bytes
 * of them, fewer than 64 only at the row's end), split for VPDPBUSD: at 4
 * bits the low nibbles (the chunk's even positions) in lo and the high
 * ones (its odd positions) in hi, at 8 bits the codes in lo. */
typedef struct qv_codes {
    __m512i lo, hi;
} qv_codes;

QV_TARGET __attribute__((always_inline)) static inline qv_codes qv_unpack(const uint8_t *p, size_t bytes, const int BITS,
                                                                          const bool TAIL) {
    __m512i v = TAIL ? _mm512_maskz_loadu_epi8(qv_mask(bytes), p) : _mm512_loadu_si512(p);
    if (BITS == 8) return (qv_codes){v, v};
    __m512i m4 = _mm512_set1_epi8(0x0F);
    return (qv_codes){_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)};
}

/* The integer dot products of a chunk's codes with the activations, one
 * 32-bit sum per lane: at 4 bits lane j sums values 8j..8j+7, at 8 bits
 * values 4j..4j+3. */
QV_TARGET __attribute__((always_inline)) static inline __m512i qv_dot(const qv_codes *q, const qv_chunk *c,
                                                                       const int BITS) {
    if (BITS == 8) return _mm512_dpbusd_epi32(_mm512_setzero_si512(), q->lo, c->xe);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q->lo, c->xe), q->hi, c->xo);
}

/* The shared part of the chunk of `len` values at k (window from k0). */
QV_TARGET __attribute__((always_inline)) static inline qv_chunk qv_chunk_at(const int8_t *xq, const float *xd, size_t k,
                                                                             size_t k0, size_t len, __m512i lane_k,
                                                                             int lg, const int BITS, const bool TAIL) {
    qv_chunk c;
    size_t half = BITS == 4 ? len / 2 : len;
    __m128 d;
    if (TAIL) {
        c.xe = _mm512_maskz_loadu_epi8(qv_mask(half), xq + k);
        c.xo = BITS == 4 ? _mm512_maskz_loadu_epi8(qv_mask(half), xq + k + half) : c.xe;
        d = _mm_maskz_loadu_ps((__mmask8)qv_mask(len / 32), xd + k / 32);
    } else {
        c.xe = _mm512_loadu_si512(xq + k);
        c.xo = BITS == 4 ? _mm512_loadu_si512(xq + k + 64) : c.xe;
        /* the chunk's 4 (4-bit) or 2 (8-bit) block scales */
        d = BITS == 4 ? _mm_loadu_ps(xd + k / 32) : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(xd + k / 32)));
    }
    /* lane j's block is lane_k[j] / 32, its group (lane_k[j] + k - k0) / G */
    c.d = _mm512_permutexvar_ps(_mm512_srli_epi32(lane_k, 5), _mm512_castps128_ps512(d));
    c.gidx = _mm512_srli_epi32(_mm512_add_epi32(lane_k, _mm512_set1_epi32((int)(k - k0))), (unsigned)lg);
    return c;
}

/* One chunk against NR weight rows at p (row stride rb), for MR rows of
 * activations (c[m]): acc[m][n] gains each lane's sum times its block scale
 * times its group's weight scale. A row's codes are split once for all MR. */
QV_TARGET __attribute__((always_inline)) static inline void qv_rows_chunk(const uint8_t *p, size_t rb, size_t bytes,
                                                                           const qv_chunk *c, const __m512 *S,
                                                                           __m512 (*acc)[4], const int MR, const int NR,
                                                                           const int BITS, const bool TAIL) {
    _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
        qv_codes q = qv_unpack(p + (size_t)n * rb, bytes, BITS, TAIL);
        __m512 sg = _mm512_permutexvar_ps(c[0].gidx, S[n]); /* the lanes' groups are the rows' alike */
        _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++) {
            __m512i i = qv_dot(&q, &c[m], BITS);
            acc[m][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(c[m].d, sg), acc[m][n]);
        }
    }
}

/* One activation row against NR weight rows, over windows of 16 groups: a
 * window's scales and biases are loaded once as vectors, the bias terms
 * (b * sum x per group) are one FMA per window, and each chunk's integer
 * sums are scaled, lane by lane, by its block's activation scale times its
 * group's weight scale. 8-bit codes enter unsigned; the result is still
 * that of codes centred on 128, as the other int8 kernels compute it (xr is
 * x as rounded, err = sum(x - xr) over the group):
 * s * sum(xr * (q - 128)) + (b + 128 s) * sum(x)
 *     = s * sum(xr * q) + b * sum(x) + 128 s * err.
 * With `ahead`, each row's codes are prefetched into L2 that many bytes past
 * the line being read: a tile of NR rows prefetches the next tile (ahead =
 * NR rows), as the hardware prefetchers do not follow NR streams a row
 * apart (2048-wide 4-bit rows, one core: 7.8 -> 15.7 GB/s). */
QV_TARGET __attribute__((always_inline)) static inline void qv_tile(const cpu_xq8 *x, int m0, const em_weight *w,
                                                                     int n0, float *y, size_t ldy, const int MR,
                                                                     const int NR, const int BITS, size_t ahead) {
    const int G = w->group_size, lg = G == 32 ? 5 : G == 64 ? 6 : 7;
    const size_t K = (size_t)w->cols, gpr = K / (size_t)G, CH = BITS == 4 ? 128 : 64;
    const size_t rb = em_qrow_step(w); /* row to row */
    const uint8_t *wr = em_qrow_codes(w, n0);
    const int8_t *xq[2];
    const float *xd[2], *xs[2], *xerr[2];
    _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++) {
        xq[m] = x->q + (size_t)(m0 + m) * K;
        xd[m] = x->d + (size_t)(m0 + m) * (K / 32);
        xs[m] = x->sum + (size_t)(m0 + m) * gpr;
        xerr[m] = x->err + (size_t)(m0 + m) * gpr;
    }
    /* the first value of each lane's share of a chunk */
    const __m512i lane_k = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(BITS == 4 ? 8 : 4));
    __m512 acc[2][4], bacc[2][4], S[4];
    _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) acc[m][n] = bacc[m][n] = _mm512_setzero_ps();
    for (size_t gw = 0; gw < gpr; gw += 16) {
        __mmask16 gm = (__mmask16)qv_mask(gpr - gw);
        __m512 XS[2], XERR[2];
        _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++) {
            XS[m] = _mm512_maskz_loadu_ps(gm, xs[m] + gw);
            XERR[m] = _mm512_mul_ps(_mm512_maskz_loadu_ps(gm, xerr[m] + gw), _mm512_set1_ps(128.0f));
        }
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) {
            S[n] = qv_scalars(em_qrow_scales(w, n0 + n), w->scale_dtype, gw, gm);
            __m512 B = qv_scalars(em_qrow_biases(w, n0 + n), w->scale_dtype, gw, gm);
            _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++) {
                bacc[m][n] = _mm512_fmadd_ps(B, XS[m], bacc[m][n]);
                if (BITS == 8) bacc[m][n] = _mm512_fmadd_ps(S[n], XERR[m], bacc[m][n]);
            }
        }
        size_t k0 = gw * (size_t)G, k1 = K - k0 < 16 * (size_t)G ? K : k0 + 16 * (size_t)G, k = k0;
        qv_chunk c[2];
        for (; k + CH <= k1; k += CH) {
            const uint8_t *p = wr + k * BITS / 8;
            if (ahead)
                _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++) qv_prefetch(p + (size_t)n * rb, ahead);
            _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++)
                c[m] = qv_chunk_at(xq[m], xd[m], k, k0, CH, lane_k, lg, BITS, false);
            qv_rows_chunk(p, rb, 64, c, S, acc, MR, NR, BITS, false);
        }
        if (k < k1) { /* the row's last chunk, short */
            _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++)
                c[m] = qv_chunk_at(xq[m], xd[m], k, k0, k1 - k, lane_k, lg, BITS, true);
            qv_rows_chunk(wr + k * BITS / 8, rb, (k1 - k) * BITS / 8, c, S, acc, MR, NR, BITS, true);
        }
    }
    _Pragma("GCC unroll 2") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 4") for (int n = 0; n < NR; n++)
            y[(size_t)m * ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][n], bacc[m][n]));
}

/* One row of x against weight rows [n0, n0 + nr), one after another (one
 * sequential stream the hardware prefetchers follow). A single-row
 * product is bound by the core's vector work, not by memory (one core got
 * through about 24 GB/s of 4-bit rows with qv_tile against 40 for a plain
 * read), so what every weight row would redo per chunk is done once for
 * the block: each chunk's per-lane activation scales (a permute) are
 * expanded into dv, and each chunk position's lane groups within a window
 * (an add and a shift) into gt. The arithmetic is qv_tile's, in its order,
 * so the results are its bits (a batch of rows gives each row what it
 * would get alone). Used at 4 bits only: at 8 bits, where two cores wait on
 * memory rather than on vector work, the 1B shape decoded 8-12 % slower
 * this way than row by row through qv_tile (four alternated runs each;
 * the cause was not found: the same loads, in the same order). */
#define QV_MAX_CHUNKS 512
QV_TARGET __attribute__((always_inline)) static inline void qv_row_stream(const cpu_xq8 *x, int m0, const em_weight *w,
                                                                           int n0, int nr, float *y, const int BITS) {
    const int G = w->group_size, lg = G == 32 ? 5 : G == 64 ? 6 : 7;
    const size_t K = (size_t)w->cols, gpr = K / (size_t)G, CH = BITS == 4 ? 128 : 64;
    const size_t rs = em_qrow_step(w), nch = K / CH, wch = 16 * (size_t)G / CH;
    if (K % CH || nch > QV_MAX_CHUNKS) { /* a short last chunk, or too wide for the tables */
        for (int n = 0; n < nr; n++) qv_tile(x, m0, w, n0 + n, y + n, 1, 1, 1, BITS, 0);
        return;
    }
    const int8_t *xq = x->q + (size_t)m0 * K;
    const float *xd = x->d + (size_t)m0 * (K / 32), *xs = x->sum + (size_t)m0 * gpr;
    const float *xerr = x->err + (size_t)m0 * gpr;
    const __m512i lane_k = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(BITS == 4 ? 8 : 4));
    __m512 dv[QV_MAX_CHUNKS];
    __m512i gt[32]; /* 16 groups of up to 128 over chunks of 64 values (8-bit) */
    const __m512i blk = _mm512_srli_epi32(lane_k, 5);
    for (size_t c = 0; c < nch; c++) {
        size_t k = c * CH;
        __m128 d = BITS == 4 ? _mm_loadu_ps(xd + k / 32) : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(xd + k / 32)));
        dv[c] = _mm512_permutexvar_ps(blk, _mm512_castps128_ps512(d));
    }
    for (size_t c = 0; c < wch; c++)
        gt[c] = _mm512_srli_epi32(_mm512_add_epi32(lane_k, _mm512_set1_epi32((int)(c * CH))), (unsigned)lg);
    for (int n = 0; n < nr; n++) {
        const uint8_t *wr = em_qrow_codes(w, n0 + n);
        const void *ws = em_qrow_scales(w, n0 + n), *wb = em_qrow_biases(w, n0 + n);
        qv_prefetch_scalars(w, qv_scalars_ahead(n0 + n, rs));
        __m512 acc = _mm512_setzero_ps(), bacc = _mm512_setzero_ps();
        for (size_t gw = 0; gw < gpr; gw += 16) {
            __mmask16 gm = (__mmask16)qv_mask(gpr - gw);
            __m512 S = qv_scalars(ws, w->scale_dtype, gw, gm);
            bacc = _mm512_fmadd_ps(qv_scalars(wb, w->scale_dtype, gw, gm), _mm512_maskz_loadu_ps(gm, xs + gw), bacc);
            if (BITS == 8)
                bacc = _mm512_fmadd_ps(S, _mm512_mul_ps(_mm512_maskz_loadu_ps(gm, xerr + gw), _mm512_set1_ps(128.0f)),
                                       bacc);
            size_t c0 = gw * (size_t)G / CH, c1 = c0 + wch < nch ? c0 + wch : nch;
            for (size_t c = c0; c < c1; c++) {
                size_t k = c * CH;
                qv_chunk ch = {.xe = _mm512_loadu_si512(xq + k), .d = dv[c]};
                ch.xo = BITS == 4 ? _mm512_loadu_si512(xq + k + 64) : ch.xe;
                qv_prefetch(wr + k * BITS / 8, QV_STREAM_AHEAD);
                qv_codes q = qv_unpack(wr + k * BITS / 8, 64, BITS, false);
                __m512 t = _mm512_mul_ps(ch.d, _mm512_permutexvar_ps(gt[c - c0], S));
                __m512 v = _mm512_cvtepi32_ps(qv_dot(&q, &ch, BITS));
                acc = _mm512_fmadd_ps(v, t, acc);
            }
        }
        y[n] = _mm512_reduce_add_ps(_mm512_add_ps(acc, bacc));
    }
}

/* Runs of 128 at 4 bits, whatever the group (a chunk's lanes find their
 * group's scale themselves); 8-bit activations stay in order. */
int cpu_qi8_run_vnni(int bits, int group) {
    (void)group;
    return bits == 4 ? 128 : 0;
}

/* One row of x (decode): the weight rows one at a time, in order, so a
 * block is one sequential stream that the hardware prefetchers follow
 * without software prefetches. Four rows a tile read the block as four
 * streams a row apart, which the prefetchers do not follow: the tile's
 * own prefetches brought those to about 18 GB/s on one core against 25
 * for one stream (2048-wide 4-bit rows); with the hint that leaves the
 * caches after use, four-row tiles read a layer faster in ember-gemv-bench
 * but decoded slower (1B 4-bit, six alternated runs: 39.5-42.1 tokens/s
 * against 41.1-44.3 one row at a time). Several rows of x: weight rows four
 * at a time, then one by one, and for each the rows of x two at a time (a
 * weight row's codes split once for both; later pairs find the weights in
 * L1, and only the first prefetches): the tile then shares each chunk's
 * activations over four weight rows, which pays once the product does mr
 * times the arithmetic per byte (1B down projection, 2 cores, 2 and 4 rows
 * of x: 28 and 19 GB/s one row of x at a time, 34-36 and 26 in pairs). */
QV_TARGET __attribute__((always_inline)) static inline void qv_rows(const cpu_xq8 *x, int m0, int mr, const em_weight *w,
                                                                     int n0, int nr, float *y, size_t ldy,
                                                                     const int BITS) {
    int n = 0;
    if (mr == 1 && BITS == 4) {
        qv_row_stream(x, m0, w, n0, nr, y, BITS);
        return;
    }
    if (mr == 1) {
        for (; n < nr; n++) {
            qv_prefetch_scalars(w, qv_scalars_ahead(n0 + n, em_qrow_step(w)));
            qv_tile(x, m0, w, n0 + n, y + n, ldy, 1, 1, BITS, QV_STREAM_AHEAD);
        }
        return;
    }
    for (; n + 4 <= nr; n += 4) {
        int m = 0;
        size_t ahead = 4 * em_qrow_step(w); /* the next tile */
        for (; m + 2 <= mr; m += 2)
            qv_tile(x, m0 + m, w, n0 + n, y + (size_t)m * ldy + n, ldy, 2, 4, BITS, m == 0 ? ahead : 0);
        if (m < mr) qv_tile(x, m0 + m, w, n0 + n, y + (size_t)m * ldy + n, ldy, 1, 4, BITS, m == 0 ? ahead : 0);
    }
    for (; n < nr; n++)
        for (int m = 0; m < mr; m++) /* the first prefetches the next row */
            qv_tile(x, m0 + m, w, n0 + n, y + (size_t)m * ldy + n, ldy, 1, 1, BITS, m == 0 ? em_qrow_step(w) : 0);
}

QV_TARGET void cpu_qtile_i8_vnni(const cpu_xq8 *x, int m0, int mr, const em_weight *w, int n0, int nr, float *y,
                                 size_t ldy) {
    if (w->bits == 4) qv_rows(x, m0, mr, w, n0, nr, y, ldy, 4);
    else if (w->bits == 8) qv_rows(x, m0, mr, w, n0, nr, y, ldy, 8); /* cpu_qmatmul sends no other width */
}
#endif
