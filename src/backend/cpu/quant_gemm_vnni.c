/* quant_gemm_vnni.c — FAST products of many activation rows (prefill) with
 * 4- and 8-bit MLX affine weights, on VPDPBUSD.
 *
 * The dequantize-to-bf16 path multiplies 32 pairs per VDPBF16PS; VPDPBUSD
 * multiplies 64 (unsigned bytes by signed bytes), and the codes are
 * already small integers. So a block of weight rows is repacked once into
 * panels of 16 rows whose codes, one byte each, lie as VPDPBUSD reads
 * them: for every 4 inputs, 16 rows x 4 bytes. A tile then holds MR rows of
 * x against two panels (32 weight rows): each step broadcasts 4 int8
 * activations of a row and adds their products with 4 codes of each of the
 * 32 weight rows into one 32-bit lane per weight row. The activations are
 * x rounded to int8 per 32 values, as the few-row kernels round them
 * (cpu_xq8, natural order), so a 32-input block's integer sums are scaled
 * once by the block's activation scale times the group's weight scale, and
 * the biases enter per group through the sums of x:
 *
 *   y = sum_g s_g * sum_{b in g} d_b * sum_{k in b} xq_k * (q_k - c)
 *       + (b_g + c * s_g) * sum_{k in g} x_k
 *
 * with c = 128 for 8-bit codes and 0 for 4-bit ones, as the decode kernels
 * compute it (the integer sums use the unsigned codes; c * s_g * err_g puts
 * back what centring would have taken off, err the group's rounding loss).
 * Each output is one tile lane's chain in input order whatever the batch,
 * so a row's result does not depend on the rows beside it. */
#include "backend/cpu/cpu_internal.h"

#include "tensor/affine.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
#define QG_MR 6 /* activation rows a tile: 12 integer and 12 float accumulators */

/* The scratch's parts for `rows` rows (qgemm_i8_scratch_bytes). */
typedef struct qg_pack {
    uint8_t *codes; /* panel p: 16 * K bytes, [K/4][16][4] */
    float *s, *b;   /* panel p: [K/G][16] */
    uint8_t *tmp;   /* one panel's rows, unpacked to a byte a code */
} qg_pack;

static qg_pack qg_layout(void *scratch, int K, int G, int rows) {
    size_t panels = ((size_t)rows + 15) / 16;
    uint8_t *p = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    qg_pack q;
    q.codes = p;
    q.s = (float *)(p + panels * 16 * (size_t)K);
    q.b = q.s + panels * 16 * (size_t)(K / G);
    q.tmp = (uint8_t *)(q.b + panels * 16 * (size_t)(K / G));
    return q;
}

/* A row's 4-bit codes as K bytes: byte i of the row holds codes 2i (low
 * nibble) and 2i + 1 (high). */
QG_TARGET static void qg_unpack4(const uint8_t *row, int K, uint8_t *out) {
    const __m512i lo = _mm512_set1_epi16(0x0F);
    for (int i = 0; i < K / 2; i += 32) {
        int n = K / 2 - i < 32 ? K / 2 - i : 32;
        __mmask32 in = n == 32 ? ~(__mmask32)0 : (__mmask32)((1u << n) - 1);
        __mmask64 outm = n == 32 ? ~(__mmask64)0 : (__mmask64)((1ull << (2 * n)) - 1);
        __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(in, row + i));
        __m512i pair = _mm512_or_si512(_mm512_and_si512(v, lo), _mm512_slli_epi16(_mm512_srli_epi16(v, 4), 8));
        _mm512_mask_storeu_epi8(out + 2 * i, outm, pair);
    }
}

/* Panel p of the block at n0 (rows n0 + 16p .. , nr in the block): codes
 * gathered 4 bytes a row at a time from the rows as bytes, scales and biases
 * widened to f32; rows past nr get zero codes, scales and biases. */
QG_TARGET static void qg_pack_panel(const em_weight *w, int n0, int nr, int p, const qg_pack *q) {
    const int K = (int)w->cols, G = w->group_size, gpr = K / G, first = 16 * p;
    const int valid = nr - first < 16 ? nr - first : 16;
    const uint8_t *base;
    int stride;
    if (w->bits == 8) { /* the codes are bytes already */
        base = em_qrow_codes(w, n0 + first);
        stride = (int)em_qrow_step(w);
    } else {
        for (int r = 0; r < valid; r++) qg_unpack4(em_qrow_codes(w, n0 + first + r), K, q->tmp + (size_t)r * K);
        base = q->tmp;
        stride = K;
    }
    const __mmask16 live = (__mmask16)((1u << valid) - 1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32(stride));
    uint8_t *dst = q->codes + (size_t)p * 16 * (size_t)K;
    for (int k = 0; k < K; k += 4) {
        __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, base + k, 1);
        _mm512_store_si512(dst + (size_t)k * 16, v);
    }
    float *s = q->s + (size_t)p * 16 * (size_t)gpr, *b = q->b + (size_t)p * 16 * (size_t)gpr;
    for (int r = 0; r < 16; r++) {
        const void *rs = r < valid ? em_qrow_scales(w, n0 + first + r) : NULL;
        const void *rbi = r < valid ? em_qrow_biases(w, n0 + first + r) : NULL;
        for (int g = 0; g < gpr; g++) {
            s[g * 16 + r] = rs ? affine_scalar(rs, w->scale_dtype, (size_t)g) : 0.0f;
            b[g * 16 + r] = rbi ? affine_scalar(rbi, w->scale_dtype, (size_t)g) : 0.0f;
        }
    }
}

/* MR rows of x (from m0) against NP panels (from panel p): y[m][16 * i + l]
 * for the panels' live lanes. */
QG_TARGET __attribute__((always_inline)) static inline void qg_tile(const cpu_xq8 *x, int m0, int K, int G, int bits,
                                                                   const qg_pack *q, int p, int live, float *y,
                                                                   size_t ldy, const int MR, const int NP) {
    const int gpr = K / G, nb = K / 32;
    const uint8_t *P[2];
    const float *S[2], *B[2];
    _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++) {
        P[i] = q->codes + (size_t)(p + i) * 16 * (size_t)K;
        S[i] = q->s + (size_t)(p + i) * 16 * (size_t)gpr;
        B[i] = q->b + (size_t)(p + i) * 16 * (size_t)gpr;
    }
    const int8_t *xq[QG_MR];
    _Pragma("GCC unroll 6") for (int m = 0; m < MR; m++) xq[m] = x->q + (size_t)(m0 + m) * (size_t)K;
    __m512 f[QG_MR][2];
    _Pragma("GCC unroll 6") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++) f[m][i] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < K; k0 += 32) {
        __m512i a[QG_MR][2];
        _Pragma("GCC unroll 6") for (int m = 0; m < MR; m++)
            _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++) a[m][i] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int s = 0; s < 8; s++) {
            const int k = k0 + 4 * s;
            __m512i wv[2];
            _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++) wv[i] = _mm512_load_si512(P[i] + (size_t)k * 16);
            _Pragma("GCC unroll 6") for (int m = 0; m < MR; m++) {
                int32_t four;
                memcpy(&four, xq[m] + k, 4);
                __m512i xb = _mm512_set1_epi32(four);
                _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++) a[m][i] = _mm512_dpbusd_epi32(a[m][i], wv[i], xb);
            }
        }
        const int g = k0 / G;
        _Pragma("GCC unroll 6") for (int m = 0; m < MR; m++) {
            __m512 d = _mm512_set1_ps(x->d[(size_t)(m0 + m) * (size_t)nb + (size_t)(k0 / 32)]);
            _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++)
                f[m][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[m][i]), _mm512_mul_ps(d, _mm512_load_ps(S[i] + g * 16)),
                                          f[m][i]);
        }
    }
    for (int g = 0; g < gpr; g++)
        _Pragma("GCC unroll 6") for (int m = 0; m < MR; m++) {
            size_t gi = (size_t)(m0 + m) * (size_t)gpr + (size_t)g;
            __m512 sx = _mm512_set1_ps(x->sum[gi]);
            __m512 e = _mm512_set1_ps(128.0f * x->err[gi]);
            _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++) {
                f[m][i] = _mm512_fmadd_ps(_mm512_load_ps(B[i] + g * 16), sx, f[m][i]);
                if (bits == 8) f[m][i] = _mm512_fmadd_ps(_mm512_load_ps(S[i] + g * 16), e, f[m][i]);
            }
        }
    _Pragma("GCC unroll 6") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 2") for (int i = 0; i < NP; i++) {
            int l = live - 16 * i;
            __mmask16 mask = l >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (l > 0 ? l : 0)) - 1);
            _mm512_mask_storeu_ps(y + (size_t)m * ldy + 16 * i, mask, f[m][i]);
        }
}

#define QG_ROWS(MR_)                                                                          \
    do {                                                                                      \
        if (np == 2) qg_tile(x, m, K, G, bits, &q, p, live, yt, ldy, MR_, 2);                 \
        else qg_tile(x, m, K, G, bits, &q, p, live, yt, ldy, MR_, 1);                         \
    } while (0)

QG_TARGET void cpu_qgemm_i8_vnni(const cpu_xq8 *x, int M, const em_weight *w, int n0, int nr, float *y, size_t ldy,
                                 void *scratch) {
    const int K = (int)w->cols, G = w->group_size, bits = w->bits, panels = (nr + 15) / 16;
    const qg_pack q = qg_layout(scratch, K, G, nr);
    for (int p = 0; p < panels; p++) qg_pack_panel(w, n0, nr, p, &q);
    /* every row of x passes over the packed block, two panels at a time */
    for (int m = 0; m < M; m += QG_MR) {
        int mr = M - m < QG_MR ? M - m : QG_MR;
        for (int p = 0; p < panels; p += 2) {
            int np = panels - p < 2 ? panels - p : 2, live = nr - 16 * p;
            float *yt = y + (size_t)m * ldy + 16 * (size_t)p;
            switch (mr) {
            case 6: QG_ROWS(6); break;
            case 5: QG_ROWS(5); break;
            case 4: QG_ROWS(4); break;
            case 3: QG_ROWS(3); break;
            case 2: QG_ROWS(2); break;
            default: QG_ROWS(1); break;
            }
        }
    }
}
#endif
