/* Quantized matmul and embedding: every kernel table, bit width and group
 * size against a double-precision product with the scalar dequantization
 * (affine_dequant), over decode and prefill batch sizes; FAST within bf16
 * rounding. */
#include "test.h"

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/timer.h"
#include "tensor/affine.h"

#include <stdint.h>
#include <string.h>

static uint64_t rs = 99;
static uint32_t rnd32(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)(rs >> 16);
}
static float frand(void) { return (float)(rnd32() % 2000001) / 1000000.0f - 1.0f; }

/* A random N x K weight of `bits`-bit codes with bf16 scales and biases
 * (free with free_weight). */
static em_weight random_weight(int N, int K, int bits, int group) {
    size_t words = (size_t)N * K * bits / 32, groups = (size_t)N * K / group;
    uint32_t *wq = malloc(words * 4);
    uint16_t *sc = malloc(groups * 2), *bi = malloc(groups * 2);
    for (size_t i = 0; i < words; i++) wq[i] = rnd32() ^ (rnd32() << 16);
    for (size_t i = 0; i < groups; i++) {
        sc[i] = f32_to_bf16(frand() * 0.05f);
        bi[i] = f32_to_bf16(frand() * 0.2f);
    }
    return (em_weight){.dtype = EM_U32, .rows = N, .cols = K, .data = wq, .bits = bits, .group_size = group,
                       .scales = sc, .biases = bi, .scale_dtype = EM_BF16};
}

static void free_weight(em_weight *w) {
    free((void *)w->data);
    free((void *)w->scales);
    free((void *)w->biases);
}

static void check(em_backend *be, int M, int N, int K, int bits, int group, em_math math) {
    em_weight w = random_weight(N, K, bits, group);
    const uint32_t *wq = w.data;
    const uint16_t *sc = w.scales, *bi = w.biases;
    float *x = malloc(sizeof(float) * M * K), *y = malloc(sizeof(float) * M * N), *bias = malloc(sizeof(float) * N);
    float *wf = malloc(sizeof(float) * N * K);
    for (int i = 0; i < M * K; i++) x[i] = frand();
    for (int i = 0; i < N; i++) bias[i] = frand();
    for (int n = 0; n < N; n++) affine_dequant(wq, sc, bi, EM_BF16, bits, group, K, n, 0, K, wf + (size_t)n * K);
    be->ops->matmul(be, y, x, M, &w, bias, math);
    const cpu_backend *cb = be->impl;
    const cpu_kernels *kt = cb->k;
    /* FAST products with 4-/8-bit weights round x to int8 per 32: few rows
     * on the int8 GEMV (below 16, or below 64 where the kernels have the
     * int8 GEMM and no AMX takes 16+), more on the GEMM */
    bool q48 = math == EM_MATH_FAST && (bits == 4 || bits == 8), gemm = kt->qgemm_i8 && !cb->amx;
    bool int8 = q48 && (M < (gemm ? 64 : 16) ? kt->qtile_i8 != NULL : gemm);
    /* other FAST products of 16+ rows may round x and w to bf16 (unit
     * roundoff 2^-9 each): at most 2^-8 of sum |x*w| per output, checked
     * with 2x room */
    bool bf16 = math == EM_MATH_FAST && M >= 16 && !int8;
    double tol = int8 ? 0.03 * sqrt(K) : 2e-5 * sqrt(K) * 4;
    double worst = 0; /* the largest error as a fraction of its output's bound */
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = bias[n], mag = 0;
            for (int k = 0; k < K; k++) {
                ref += (double)x[m * K + k] * wf[(size_t)n * K + k];
                mag += fabs((double)x[m * K + k] * wf[(size_t)n * K + k]);
            }
            double bound = bf16 ? 0x1p-7 * mag + 1e-5 : tol;
            worst = fmax(worst, fabs(ref - y[m * N + n]) / bound);
        }
    CHECKF(worst <= 1.0, "%s M=%d N=%d K=%d bits=%d g=%d math=%d: error %.3g of its bound", kt->isa, M, N, K, bits,
           group, (int)math, worst);
    if (int8) { /* and exactly that arithmetic: x rounded as the kernel rounds it, then f32-level error only */
        float *xr = malloc(sizeof(float) * M * K);
        for (int b = 0; b < M * K / 32; b++) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
            float inv = amax > 0 ? 127.0f / amax : 0.0f;
            for (int i = 0; i < 32; i++) xr[b * 32 + i] = (float)lrintf(x[b * 32 + i] * inv) * (amax / 127.0f);
        }
        /* per group: s * sum(x8 * (q - c)) + (b + c*s) * sum(x), c = 128 for 8-bit codes (centred) */
        double worst8 = 0, c = bits == 8 ? 128 : 0;
        const uint8_t *wb = (const uint8_t *)wq;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double ref = bias[n];
                for (int g = 0; g < K / group; g++) {
                    size_t gi = (size_t)n * (K / group) + g;
                    double sc_g = bf16_to_f32(sc[gi]), bi_g = bf16_to_f32(bi[gi]), dot = 0, sx = 0;
                    for (int k = g * group; k < (g + 1) * group; k++) {
                        dot += (double)xr[m * K + k] * ((double)affine_get(wb + (size_t)n * K * bits / 8, k, bits) - c);
                        sx += x[m * K + k];
                    }
                    ref += sc_g * dot + (bi_g + c * sc_g) * sx;
                }
                worst8 = fmax(worst8, fabs(ref - y[m * N + n]));
            }
        CHECKF(worst8 <= 2e-5 * sqrt(K) * 4, "%s int8 path M=%d K=%d bits=%d g=%d: err %g from its own arithmetic",
               kt->isa, M, K, bits, group, worst8);
        free(xr);
    }
    /* embedding rows dequantize exactly */
    int32_t ids[2] = {0, N - 1};
    float *rows = malloc(sizeof(float) * 2 * K);
    be->ops->embed(be, rows, &w, ids, 2);
    int bad = 0;
    for (int k = 0; k < K; k++) bad += rows[k] != wf[k] || rows[K + k] != wf[(size_t)(N - 1) * K + k];
    CHECKF(bad == 0, "embed bits=%d: %d values differ", bits, bad);
    free(rows);
    free_weight(&w);
    free(x); free(y); free(bias); free(wf);
}

/* A row's result does not depend on the batch it is in. EXACT (N 12, K
 * 256, 9 rows): alone (the fused decode tile), among 3 (fused, rows in
 * pairs) and among 9 (rows dequantized, then the f32 tile) it gets the same
 * bits. FAST few-row int8 products (N 14, K 17 groups, 7 rows): alone (one
 * weight row at a time), among 3 and among 7 (activation rows in pairs
 * over four-row tiles, then one), over weight rows not a multiple of 4 and
 * rows whose last window is short. */
static void invariance(em_backend *be, int bits, int group, em_math math, int N, int K, int MB) {
    em_weight w = random_weight(N, K, bits, group);
    float *x = malloc(sizeof(float) * MB * K), *yb = malloc(sizeof(float) * MB * N), *y3 = malloc(sizeof(float) * 3 * N),
          *y1 = malloc(sizeof(float) * N);
    for (int i = 0; i < MB * K; i++) x[i] = frand();
    be->ops->matmul(be, yb, x, MB, &w, NULL, math);
    be->ops->matmul(be, y3, x, 3, &w, NULL, math);
    int bad = 0;
    for (int m = 0; m < MB; m++) {
        be->ops->matmul(be, y1, x + (size_t)m * K, 1, &w, NULL, math);
        for (int n = 0; n < N; n++) bad += y1[n] != yb[m * N + n] || (m < 3 && y1[n] != y3[m * N + n]);
    }
    CHECKF(bad == 0, "%s bits=%d g=%d %s: %d results depend on the batch", ((cpu_backend *)be->impl)->k->isa, bits,
           group, math == EM_MATH_FAST ? "fast" : "exact", bad);
    free(x), free(yb), free(y3), free(y1);
    free_weight(&w);
}

/* The int8 GEMM (FAST, 64+ rows, 4-/8-bit weights) gives a row the same
 * bits in any batch: rows 0..70 together (tiles of 6 rows over 45 weight
 * rows: two panels and a partial one), rows 0..63 and rows 7..70 (each row
 * in another place of its tile, or a tile of another height). */
static void gemm_invariance(em_backend *be, int bits, int group) {
    const int N = 45, K = group * 5, MB = 71, SUB = 64, SHIFT = MB - SUB;
    em_weight w = random_weight(N, K, bits, group);
    float *x = malloc(sizeof(float) * MB * K), *ya = malloc(sizeof(float) * MB * N), *yb = malloc(sizeof(float) * MB * N);
    for (int i = 0; i < MB * K; i++) x[i] = frand();
    be->ops->matmul(be, ya, x, MB, &w, NULL, EM_MATH_FAST);
    be->ops->matmul(be, yb, x, SUB, &w, NULL, EM_MATH_FAST);
    int bad = 0;
    for (int i = 0; i < SUB * N; i++) bad += ya[i] != yb[i];
    be->ops->matmul(be, yb, x + (size_t)SHIFT * K, SUB, &w, NULL, EM_MATH_FAST);
    for (int i = 0; i < SUB * N; i++) bad += ya[(size_t)SHIFT * N + i] != yb[i];
    CHECKF(bad == 0, "%s int8 gemm bits=%d g=%d: %d results depend on the batch", ((cpu_backend *)be->impl)->k->isa,
           bits, group, bad);
    free(x), free(ya), free(yb);
    free_weight(&w);
}

/* matmul_group and matmul_swiglu (FAST few-row int8 sets: x rounded once,
 * one pool job) give every output the bits matmul (and swiglu) give it;
 * weight rows of several blocks and of none, with biases. */
static void fused_sets(em_backend *be, int bits, int group, int M) {
    enum { K = 640, NG = 4 };
    int rows[NG] = {1100, 37, 300, 1100};
    em_weight w[NG];
    float *x = malloc(sizeof(float) * M * K), *bias[NG], *ya[NG], *yb[NG];
    for (int i = 0; i < M * K; i++) x[i] = frand();
    for (int g = 0; g < NG; g++) {
        w[g] = random_weight(rows[g], K, bits, group);
        bias[g] = malloc(sizeof(float) * rows[g]);
        ya[g] = malloc(sizeof(float) * M * rows[g]);
        yb[g] = malloc(sizeof(float) * M * rows[g]);
        for (int n = 0; n < rows[g]; n++) bias[g][n] = frand();
    }
    const em_weight *ws[NG] = {&w[0], &w[1], &w[2], &w[3]};
    const float *bs[NG] = {bias[0], NULL, bias[2], bias[3]};
    be->ops->matmul_group(be, 3, ya, x, M, ws, bs, EM_MATH_FAST);
    int bad = 0;
    for (int g = 0; g < 3; g++) {
        be->ops->matmul(be, yb[g], x, M, ws[g], bs[g], EM_MATH_FAST);
        bad += memcmp(ya[g], yb[g], sizeof(float) * M * rows[g]) != 0;
    }
    CHECKF(bad == 0, "%s bits=%d g=%d M=%d: %d of matmul_group's products differ from matmul",
           ((cpu_backend *)be->impl)->k->isa, bits, group, M, bad);
    /* gate w[0], up w[3] (same rows): fused against the two products and swiglu */
    float *out = malloc(sizeof(float) * M * rows[0]), *want = malloc(sizeof(float) * M * rows[0]);
    CHECK(be->ops->matmul_swiglu(be, out, x, M, ws[0], ws[3], bs[0], bs[3], EM_MATH_FAST));
    be->ops->matmul(be, ya[0], x, M, ws[0], bs[0], EM_MATH_FAST);
    be->ops->matmul(be, ya[3], x, M, ws[3], bs[3], EM_MATH_FAST);
    be->ops->swiglu(be, want, ya[0], ya[3], M, rows[0], rows[0]);
    CHECKF(!memcmp(out, want, sizeof(float) * M * rows[0]), "%s bits=%d g=%d M=%d: matmul_swiglu differs",
           ((cpu_backend *)be->impl)->k->isa, bits, group, M);
    /* not its case (EXACT): nothing done */
    CHECK(!be->ops->matmul_swiglu(be, out, x, M, ws[0], ws[3], bs[0], bs[3], EM_MATH_EXACT));
    for (int g = 0; g < NG; g++) free_weight(&w[g]), free(bias[g]), free(ya[g]), free(yb[g]);
    free(x), free(out), free(want);
}

/* The same scales and biases stored as bf16, f16 and f32 (values exact in
 * all three) give the same bits, over rows of several windows of 16 groups:
 * the int8 kernels read every dtype right. */
static void scale_dtypes(em_backend *be, int bits, int group, int M) {
    enum { N = 6 };
    int K = group * 19;
    em_weight w = random_weight(N, K, bits, group);
    size_t groups = (size_t)N * K / group;
    uint16_t *sc = (uint16_t *)w.scales, *bi = (uint16_t *)w.biases;
    uint16_t *s16 = malloc(groups * 2), *b16 = malloc(groups * 2);
    float *s32 = malloc(groups * 4), *b32 = malloc(groups * 4);
    for (size_t i = 0; i < groups; i++) { /* 8 significant bits, far from f16's subnormals */
        float fs = frand(), fb = frand();
        sc[i] = f32_to_bf16(copysignf(0.01f + 0.04f * fabsf(fs), fs));
        bi[i] = f32_to_bf16(copysignf(0.01f + 0.2f * fabsf(fb), fb));
        s32[i] = bf16_to_f32(sc[i]), b32[i] = bf16_to_f32(bi[i]);
        s16[i] = f32_to_f16(s32[i]), b16[i] = f32_to_f16(b32[i]);
    }
    float *x = malloc(sizeof(float) * M * K), *y[3];
    for (int i = 0; i < M * K; i++) x[i] = frand();
    const void *sv[3] = {sc, s16, s32}, *bv[3] = {bi, b16, b32};
    em_dtype dt[3] = {EM_BF16, EM_F16, EM_F32};
    for (int d = 0; d < 3; d++) {
        em_weight wd = w;
        wd.scales = sv[d], wd.biases = bv[d], wd.scale_dtype = dt[d];
        y[d] = malloc(sizeof(float) * M * N);
        be->ops->matmul(be, y[d], x, M, &wd, NULL, EM_MATH_FAST);
    }
    int bad = 0;
    for (int i = 0; i < M * N; i++) bad += y[1][i] != y[0][i] || y[2][i] != y[0][i];
    CHECKF(bad == 0, "%s bits=%d g=%d M=%d: %d results depend on the scales' dtype",
           ((cpu_backend *)be->impl)->k->isa, bits, group, M, bad);
    for (int d = 0; d < 3; d++) free(y[d]);
    free(s16); free(b16); free(s32); free(b32); free(x);
    free_weight(&w);
}

/* w's rows as records of `pad` bytes more than [scales | biases | codes]
 * (em_weight.row_stride; the CPU backend's host copy has pad 0), in buf. */
static em_weight as_records(const em_weight *w, uint8_t **buf, size_t pad) {
    size_t rows = (size_t)w->rows, cb = (size_t)w->cols * (size_t)w->bits / 8;
    size_t sb = (size_t)(w->cols / w->group_size) * 2, rec = 2 * sb + cb + pad;
    uint8_t *p = *buf = calloc(rows, rec);
    for (size_t r = 0; r < rows; r++) {
        memcpy(p + r * rec, (const uint8_t *)w->scales + r * sb, sb);
        memcpy(p + r * rec + sb, (const uint8_t *)w->biases + r * sb, sb);
        memcpy(p + r * rec + 2 * sb, (const uint8_t *)w->data + r * cb, cb);
    }
    em_weight v = *w;
    v.scales = p, v.biases = p + sb, v.data = p + 2 * sb, v.row_stride = rec;
    return v;
}

/* A weight read as row records gives every kernel's results the bits of its
 * MLX layout: products of every regime and batch, the fused sets, and a
 * quantized embedding's rows. */
static void records(em_backend *be, int bits, int group, int M, em_math math, size_t pad, int groups) {
    enum { N = 37 };
    int K = group * groups;
    em_weight w = random_weight(N, K, bits, group), w2 = random_weight(N, K, bits, group);
    uint8_t *buf, *buf2;
    em_weight r = as_records(&w, &buf, pad), r2 = as_records(&w2, &buf2, pad);
    float *x = malloc(sizeof(float) * M * K), *ya = malloc(sizeof(float) * M * N), *yb = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) x[i] = frand();
    be->ops->matmul(be, ya, x, M, &w, NULL, math);
    be->ops->matmul(be, yb, x, M, &r, NULL, math);
    const char *isa = ((cpu_backend *)be->impl)->k->isa;
    CHECKF(!memcmp(ya, yb, sizeof(float) * M * N), "%s bits=%d g=%d M=%d math=%d pad=%zu: records differ", isa, bits,
           group, M, math, pad);
    const em_weight *wa[2] = {&w, &w2}, *wr[2] = {&r, &r2};
    float *ga[2] = {ya, malloc(sizeof(float) * M * N)}, *gb[2] = {yb, malloc(sizeof(float) * M * N)};
    {
        be->ops->matmul_group(be, 2, ga, x, M, wa, NULL, math);
        be->ops->matmul_group(be, 2, gb, x, M, wr, NULL, math);
        CHECKF(!memcmp(ga[0], gb[0], sizeof(float) * M * N) && !memcmp(ga[1], gb[1], sizeof(float) * M * N),
               "%s bits=%d g=%d M=%d: matmul_group over records differs", isa, bits, group, M);
    }
    if (be->ops->matmul_swiglu(be, ya, x, M, &w, &w2, NULL, NULL, math)) {
        CHECK(be->ops->matmul_swiglu(be, yb, x, M, &r, &r2, NULL, NULL, math));
        CHECKF(!memcmp(ya, yb, sizeof(float) * M * N), "%s bits=%d g=%d M=%d: matmul_swiglu over records differs",
               isa, bits, group, M);
    }
    int32_t ids[3] = {0, 17, N - 1};
    float *ea = malloc(sizeof(float) * 3 * K), *eb = malloc(sizeof(float) * 3 * K);
    be->ops->embed(be, ea, &w, ids, 3);
    be->ops->embed(be, eb, &r, ids, 3);
    CHECKF(!memcmp(ea, eb, sizeof(float) * 3 * K), "%s bits=%d g=%d: embedding rows from records differ", isa, bits,
           group);
    free(x), free(ya), free(yb), free(ga[1]), free(gb[1]), free(ea), free(eb), free(buf), free(buf2);
    free_weight(&w), free_weight(&w2);
}

static void bench(em_backend *be, int bits, int M) {
    int N = 2048, K = 2048, group = 64;
    float *x = calloc((size_t)M * K, 4), *y = calloc((size_t)M * N, 4);
    em_weight w = random_weight(N, K, bits, group);
    be->ops->matmul(be, y, x, M, &w, NULL, EM_MATH_EXACT);
    double t0 = em_now();
    int reps = M == 1 ? 50 : 3;
    for (int r = 0; r < reps; r++) be->ops->matmul(be, y, x, M, &w, NULL, EM_MATH_EXACT);
    double dt = (em_now() - t0) / reps;
    fprintf(stderr, "  %s %d-bit M=%d: %.1f GFLOP/s, %.1f GB/s of weights\n", ((cpu_backend *)be->impl)->k->isa, bits, M,
            2.0 * M * N * K / dt / 1e9, em_weight_bytes(&w) / dt / 1e9);
    free_weight(&w);
    free(x); free(y);
}

int main(void) {
    const cpu_kernels *tables[] = {cpu_kernels_ref(), cpu_kernels_avx2(), cpu_kernels_avx512(),
                                   cpu_kernels_avx512_vnni()};
    const cpu_features *f = cpu_get_features();
    bool avx512 = f->avx512f && f->avx512bw && f->avx512vl && f->avx512bf16;
    bool usable[] = {true, f->avx2_fma, avx512, avx512 && f->avx512vnni};
    em_backend *be;
    REQUIRE(cpu_backend_create(2, &be) == EM_OK);
    int bitsv[] = {2, 3, 4, 5, 6, 8}, groupv[] = {32, 64, 128};
    int shapes[][2] = {{1, 9}, {3, 8}, {5, 13}, {17, 6}, {20, 4}};
    for (int t = 0; t < 4; t++) {
        if (!tables[t] || !usable[t]) continue;
        ((cpu_backend *)be->impl)->k = tables[t];
        for (int b = 0; b < 6; b++)
            for (int g = 0; g < 3; g++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                    int K = groupv[g] * (1 + (int)(s % 3));
                    check(be, shapes[s][0], shapes[s][1], K, bitsv[b], groupv[g], EM_MATH_EXACT);
                    check(be, shapes[s][0], shapes[s][1], K, bitsv[b], groupv[g], EM_MATH_FAST);
                }
        for (int b = 0; b < 6; b++)
            for (int g = 0; g < 3; g++) invariance(be, bitsv[b], groupv[g], EM_MATH_EXACT, 12, 256, 9);
        /* FAST int8 decode over long rows: several windows of 16 groups,
         * every length of a row's last 128 (K = G*17: 32, 64 or none; G*35:
         * 96 at G=32), 1 and 2 rows, weight rows not a multiple of 4 */
        int int8_bits[] = {4, 8}, int8_rows[][2] = {{1, 7}, {2, 5}};
        for (int b = 0; b < 2; b++)
            for (int g = 0; g < 3; g++)
                for (int r = 0; r < 2; r++) {
                    for (int mult = 17; mult <= 35; mult += 18)
                        check(be, int8_rows[r][0], int8_rows[r][1], groupv[g] * mult, int8_bits[b], groupv[g],
                              EM_MATH_FAST);
                    scale_dtypes(be, int8_bits[b], groupv[g], int8_rows[r][0]);
                    if (tables[t]->qtile_i8) fused_sets(be, int8_bits[b], groupv[g], 1 + 2 * r);
                }
        for (int b = 0; b < 2; b++)
            for (int g = 0; g < 3; g++) invariance(be, int8_bits[b], groupv[g], EM_MATH_FAST, 14, groupv[g] * 17, 7);
        /* FAST many-row products: whole and partial panels of 16 weight
         * rows, tiles of 6 activation rows and their remainders, rows of
         * 4-bit codes whose bytes end mid-vector (K = 288 = 9 x 32); and
         * 16 and 40 rows, which stay on the few-row kernels where the
         * GEMM exists */
        int gemm_shapes[][3] = {{64, 33, 3}, {71, 45, 5}, {77, 16, 2}, {64, 7, 9}, {16, 20, 3}, {40, 9, 2}};
        for (int b = 0; b < 2; b++)
            for (int g = 0; g < 3; g++) {
                for (int s = 0; s < 6; s++)
                    check(be, gemm_shapes[s][0], gemm_shapes[s][1], groupv[g] * gemm_shapes[s][2], int8_bits[b],
                          groupv[g], EM_MATH_FAST);
                gemm_invariance(be, int8_bits[b], groupv[g]);
            }
        /* row records: decode (1, 2 rows), few rows, the int8 GEMM (64);
         * rows of 19 groups, and of 36 (whole chunks of 128 at every group
         * size: the 4-bit decode kernel's own path) */
        int rec_rows[] = {1, 2, 5, 64};
        for (int b = 0; b < 6; b++)
            for (int g = 0; g < 3; g++)
                for (int m = 0; m < 4; m++) {
                    records(be, bitsv[b], groupv[g], rec_rows[m], EM_MATH_FAST, m == 1 ? 0 : 36, 19);
                    if (m < 2) records(be, bitsv[b], groupv[g], rec_rows[m], EM_MATH_FAST, 36, 36);
                    if (m < 3) records(be, bitsv[b], groupv[g], rec_rows[m], EM_MATH_EXACT, 0, 19);
                }
        if (getenv("EMBER_BENCH"))
            for (int b = 0; b < 6; b++) {
                bench(be, bitsv[b], 1);
                bench(be, bitsv[b], 64);
            }
    }
    cpu_backend_free(be);
    return test_summary();
}
