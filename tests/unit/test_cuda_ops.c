/* test_cuda_ops.c — every CUDA operation against the CPU backend on random
 * inputs and edge shapes (odd widths, a single row, partial rotary, GQA,
 * sliding windows, scattered KV blocks; quantized weights of every bit
 * width, group size and scale dtype; the Gated DeltaNet operations over
 * head ratios, chunk boundaries and calls that carry state over). Skipped (77) when ember is built
 * without CUDA or the machine has no GPU. */
#include "test.h"

#include "backend/backend.h"

#ifndef EMBER_HAVE_CUDA
int main(void) {
    fprintf(stderr, "built without CUDA: skipped\n");
    return 77;
}
#else
#include "backend/cuda/cuda_backend.h"
#include "base/config.h"
#include "engine/sampler.h"
#include "tensor/affine.h"

#include "cuda_test_util.h"

#include <stdint.h>

static void test_matmul_case(em_dtype dt, int M, int N, int K, bool with_bias, em_math math) {
    size_t wbytes = (size_t)N * K * dtype_size(dt);
    void *wh = weight_data(dt, (size_t)N * K);
    float *x = rand_f32((size_t)M * K, 1.0f), *bias = with_bias ? rand_f32((size_t)N, 1.0f) : NULL;
    em_weight wc = {.dtype = dt, .rows = N, .cols = K, .data = wh, .name = "w"};
    em_weight wg = wc;
    wg.data = up(wh, wbytes);
    float *xd = up(x, (size_t)M * K * 4), *bd = bias ? up(bias, (size_t)N * 4) : NULL;
    float *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4), *yc = malloc((size_t)M * N * 4);
    cpu->ops->matmul(cpu, yc, x, M, &wc, bias, math);
    gpu->ops->matmul(gpu, yd, xd, M, &wg, bd, math);
    float *yg = down(yd, (size_t)M * N);
    /* FAST rounds activations to bf16 from 16 rows on the CPU, CUDA_FAST_MIN_M on the GPU */
    double tol = math == EM_MATH_FAST && dt == EM_BF16 && M >= CUDA_FAST_MIN_M ? 2e-2 : 2e-5;
    double e = rel_err(yg, yc, (size_t)M * N);
    CHECKF(e <= tol, "matmul %s M=%d N=%d K=%d bias=%d %s: rel err %.3g", dtype_name(dt), M, N, K, with_bias,
           math == EM_MATH_FAST ? "fast" : "exact", e);
    gpu->ops->free(gpu, (void *)wg.data);
    gpu->ops->free(gpu, xd);
    gpu->ops->free(gpu, yd);
    if (bd) gpu->ops->free(gpu, bd);
    free(wh), free(x), free(bias), free(yc), free(yg);
}

static void test_matmul(void) {
    em_dtype dts[] = {EM_BF16, EM_F16, EM_F32};
    int shapes[][3] = {{1, 67, 64}, {3, 256, 512}, {8, 130, 136}, {9, 64, 37}, {1, 5, 1}, {33, 96, 64},
                       {64, 200, 128}, {17, 48, 2056}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int b = 0; b < 2; b++) {
                test_matmul_case(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], b, EM_MATH_EXACT);
                if (dts[d] == EM_BF16) test_matmul_case(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], b, EM_MATH_FAST);
            }
}

/* EXACT rows do not depend on the batch: every row of a batched matmul is
 * bit for bit the row computed alone (the decode GEMV and the staged batch
 * kernel share one summation order). */
static void test_matmul_batch_invariance(void) {
    int Ms[] = {2, 3, 4, 5, 8, 9, 37, 64}; /* each GEMV width (1, 2, 4, 8 rows a pass) and the staged kernel */
    int N = 96, K = 2048 + 512 + 8; /* several staged chunks and a partial one */
    size_t wbytes = (size_t)N * K * 2;
    void *wh = weight_data(EM_BF16, (size_t)N * K);
    em_weight wg = {.dtype = EM_BF16, .rows = N, .cols = K, .data = up(wh, wbytes), .name = "w"};
    for (size_t t = 0; t < sizeof Ms / sizeof Ms[0]; t++) {
        int M = Ms[t];
        float *x = rand_f32((size_t)M * K, 1.0f);
        float *xd = up(x, (size_t)M * K * 4), *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4);
        gpu->ops->matmul(gpu, yd, xd, M, &wg, NULL, EM_MATH_EXACT);
        float *batch = down(yd, (size_t)M * N);
        int differ = 0;
        for (int m = 0; m < M; m++) {
            float *y1 = gpu->ops->alloc(gpu, (size_t)N * 4);
            gpu->ops->matmul(gpu, y1, xd + (size_t)m * K, 1, &wg, NULL, EM_MATH_EXACT);
            float *one = down(y1, (size_t)N);
            differ += memcmp(one, batch + (size_t)m * N, (size_t)N * 4) != 0;
            gpu->ops->free(gpu, y1);
            free(one);
        }
        CHECKF(differ == 0, "matmul exact M=%d: %d rows differ from the same rows computed alone", M, differ);
        gpu->ops->free(gpu, xd);
        gpu->ops->free(gpu, yd);
        free(x), free(batch);
    }
    gpu->ops->free(gpu, (void *)wg.data);
    free(wh);
}

static void test_rmsnorm(void) {
    int cases[][2] = {{1, 64}, {5, 37}, {3, 2048}, {130, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], n = cases[c][1];
        for (int off = 0; off < 2; off++) {
            float *x = rand_f32((size_t)rows * n, 3.0f), *g = rand_f32((size_t)n, 1.0f), *yc = malloc((size_t)rows * n * 4);
            float *xd = up(x, (size_t)rows * n * 4), *gd = up(g, (size_t)n * 4);
            cpu->ops->rmsnorm(cpu, yc, x, g, rows, n, 1e-6f, (float)off);
            gpu->ops->rmsnorm(gpu, xd, xd, gd, rows, n, 1e-6f, (float)off); /* in place */
            float *yg = down(xd, (size_t)rows * n);
            double e = rel_err(yg, yc, (size_t)rows * n);
            CHECKF(e <= 1e-6, "rmsnorm rows=%d n=%d offset=%d: rel err %.3g", rows, n, off, e);
            gpu->ops->free(gpu, xd), gpu->ops->free(gpu, gd);
            free(x), free(g), free(yc), free(yg);
        }
    }
}

/* hadamard (the online rotation) gives the CPU's bits, for orders with no,
 * one and two Paley factors. */
static void test_hadamard(void) {
    int orders[] = {128, 288, 768, 2560, 4096, 5120};
    for (size_t c = 0; c < sizeof orders / sizeof orders[0]; c++)
        for (int rows = 1; rows <= 3; rows += 2) {
            int n = orders[c];
            size_t N = (size_t)rows * n;
            hadamard h;
            REQUIRE(hadamard_make_plain(n, "test order", &h) == EM_OK);
            float *x = rand_f32(N, 2.0f), *xd = up(x, N * 4);
            cpu->ops->hadamard(cpu, x, rows, &h);
            gpu->ops->hadamard(gpu, xd, rows, &h);
            float *xg = down(xd, N);
            CHECKF(!memcmp(xg, x, N * 4), "hadamard n=%d rows=%d: differs from the CPU (rel err %.3g)", n, rows,
                   rel_err(xg, x, N));
            gpu->ops->free(gpu, xd);
            free(x), free(xg);
            hadamard_free(&h);
        }
}

/* add_rmsnorm equals add then rmsnorm; its output may be the h it adds. */
static void test_add_rmsnorm(void) {
    int cases[][2] = {{1, 2048}, {5, 37}, {70, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], n = cases[c][1];
        size_t N = (size_t)rows * n;
        float *x = rand_f32(N, 3.0f), *h = rand_f32(N, 3.0f), *g = rand_f32((size_t)n, 1.0f), *yc = malloc(N * 4);
        float *xd = up(x, N * 4), *hd = up(h, N * 4), *gd = up(g, (size_t)n * 4);
        cpu->ops->add(cpu, x, h, N);
        cpu->ops->rmsnorm(cpu, yc, x, g, rows, n, 1e-5f, 0.0f);
        gpu->ops->add_rmsnorm(gpu, xd, hd, hd, gd, rows, n, 1e-5f, 0.0f);
        float *xg = down(xd, N), *yg = down(hd, N);
        CHECKF(rel_err(xg, x, N) <= 1e-7, "add_rmsnorm rows=%d n=%d: residual differs", rows, n);
        double e = rel_err(yg, yc, N);
        CHECKF(e <= 1e-6, "add_rmsnorm rows=%d n=%d: rel err %.3g", rows, n, e);
        gpu->ops->free(gpu, xd), gpu->ops->free(gpu, hd), gpu->ops->free(gpu, gd);
        free(x), free(h), free(g), free(yc), free(xg), free(yg);
    }
}

static void test_rope(void) {
    int cases[][4] = {{4, 8, 64, 64}, {3, 2, 48, 24}, {1, 32, 128, 128}, {7, 3, 80, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], heads = cases[c][1], hd = cases[c][2], rot = cases[c][3];
        size_t n = (size_t)rows * heads * hd;
        float *x = rand_f32(n, 2.0f), *inv = malloc((size_t)rot / 2 * 4);
        for (int i = 0; i < rot / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / rot);
        int32_t *pos = malloc((size_t)rows * 4);
        for (int r = 0; r < rows; r++) pos[r] = r * 977 + 3; /* large angles too */
        float *xd = up(x, n * 4);
        cpu->ops->rope(cpu, x, rows, heads, hd, rot, pos, inv, 1.25f);
        gpu->ops->rope(gpu, xd, rows, heads, hd, rot, pos, inv, 1.25f);
        float *xg = down(xd, n);
        double e = rel_err(xg, x, n);
        CHECKF(e <= 2e-6, "rope rows=%d heads=%d hd=%d rot=%d: rel err %.3g", rows, heads, hd, rot, e);
        /* rope_qk: queries (these heads) and keys (2 heads) in one launch, bitwise two rope calls */
        size_t nk = (size_t)rows * 2 * hd;
        float *k = rand_f32(nk, 2.0f), *qd2 = up(xg, n * 4), *kd = up(k, nk * 4), *kd2 = up(k, nk * 4);
        gpu->ops->rope(gpu, xd, rows, heads, hd, rot, pos, inv, 1.25f);
        gpu->ops->rope(gpu, kd, rows, 2, hd, rot, pos, inv, 1.25f);
        gpu->ops->rope_qk(gpu, qd2, kd2, rows, heads, 2, hd, rot, pos, inv, 1.25f);
        float *a = down(xd, n), *b = down(qd2, n), *ka = down(kd, nk), *kb = down(kd2, nk);
        CHECKF(!memcmp(a, b, n * 4) && !memcmp(ka, kb, nk * 4), "rope_qk rows=%d heads=%d hd=%d: differs from rope",
               rows, heads, hd);
        gpu->ops->free(gpu, qd2), gpu->ops->free(gpu, kd), gpu->ops->free(gpu, kd2);
        free(k), free(a), free(b), free(ka), free(kb);
        gpu->ops->free(gpu, xd);
        free(x), free(inv), free(pos), free(xg);
    }
}

static void test_elementwise(void) {
    int rows = 5, n = 77, ld = 100;
    float *g = rand_f32((size_t)rows * ld, 4.0f), *u = rand_f32((size_t)rows * ld, 2.0f), *oc = malloc((size_t)rows * n * 4);
    float *gd = up(g, (size_t)rows * ld * 4), *ud = up(u, (size_t)rows * ld * 4), *od = gpu->ops->alloc(gpu, (size_t)rows * n * 4);
    cpu->ops->swiglu(cpu, oc, g, u, rows, n, ld);
    gpu->ops->swiglu(gpu, od, gd, ud, rows, n, ld);
    float *og = down(od, (size_t)rows * n);
    double e = rel_err(og, oc, (size_t)rows * n);
    CHECKF(e <= 1e-5, "swiglu: rel err %.3g", e);
    size_t an = 100003;
    float *a = rand_f32(an, 1.0f), *b = rand_f32(an, 1.0f);
    float *ad = up(a, an * 4), *bd = up(b, an * 4);
    cpu->ops->add(cpu, a, b, an);
    gpu->ops->add(gpu, ad, bd, an);
    float *ag = down(ad, an);
    CHECKF(rel_err(ag, a, an) == 0, "add differs");
    /* copy, overlapping */
    gpu->ops->copy(gpu, ad + 1, ad, (an - 1) * 4);
    float *cg = down(ad, an);
    CHECK(cg[1] == a[0] && cg[an - 1] == a[an - 2]);
    gpu->ops->free(gpu, gd), gpu->ops->free(gpu, ud), gpu->ops->free(gpu, od);
    gpu->ops->free(gpu, ad), gpu->ops->free(gpu, bd);
    free(g), free(u), free(oc), free(og), free(a), free(b), free(ag), free(cg);
}

static void test_embed(void) {
    em_dtype dts[] = {EM_BF16, EM_F16, EM_F32};
    int V = 50, D = 36, n = 7;
    int32_t ids[] = {0, 49, 3, 3, 17, 8, 48};
    for (int d = 0; d < 3; d++) {
        void *th = weight_data(dts[d], (size_t)V * D);
        em_weight tc = {.dtype = dts[d], .rows = V, .cols = D, .data = th, .name = "embed"}, tg = tc;
        tg.data = up(th, (size_t)V * D * dtype_size(dts[d]));
        float *oc = malloc((size_t)n * D * 4), *od = gpu->ops->alloc(gpu, (size_t)n * D * 4);
        cpu->ops->embed(cpu, oc, &tc, ids, n);
        gpu->ops->embed(gpu, od, &tg, ids, n);
        float *og = down(od, (size_t)n * D);
        CHECKF(rel_err(og, oc, (size_t)n * D) == 0, "embed %s differs", dtype_name(dts[d]));
        gpu->ops->free(gpu, (void *)tg.data), gpu->ops->free(gpu, od);
        free(th), free(oc), free(og);
    }
}

/* ---- MLX affine quantized weights ---- */

static uint32_t rand_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 17);
}

/* A random quantized [N, K] weight with `lead` spare words before the
 * packed rows (to exercise unaligned word addresses); scales/biases in sdt. */
typedef struct qw {
    uint32_t *words; /* lead + N*K*bits/32 */
    void *scales, *biases;
    size_t n_words, n_groups;
} qw;

static qw qw_make(int N, int K, int bits, int group, em_dtype sdt, int lead) {
    qw q;
    q.n_words = (size_t)N * K * bits / 32 + (size_t)lead;
    q.n_groups = (size_t)N * (K / group);
    q.words = malloc(q.n_words * 4);
    for (size_t i = 0; i < q.n_words; i++) q.words[i] = rand_u32() ^ (rand_u32() << 15);
    size_t es = dtype_size(sdt);
    q.scales = malloc(q.n_groups * es);
    q.biases = malloc(q.n_groups * es);
    for (size_t i = 0; i < q.n_groups; i++) {
        float s = frand() * 0.05f, b = frand() * 0.2f;
        if (sdt == EM_F32) ((float *)q.scales)[i] = s, ((float *)q.biases)[i] = b;
        else if (sdt == EM_BF16) ((uint16_t *)q.scales)[i] = f32_to_bf16(s), ((uint16_t *)q.biases)[i] = f32_to_bf16(b);
        else ((uint16_t *)q.scales)[i] = f32_to_f16(s), ((uint16_t *)q.biases)[i] = f32_to_f16(b);
    }
    return q;
}

static void qw_free(qw *q) { free(q->words), free(q->scales), free(q->biases); }

/* The CPU view of q and its device copy (freed with qw_weight_free). */
static void qw_weights(const qw *q, int N, int K, int bits, int group, em_dtype sdt, int lead, em_weight *wc,
                       em_weight *wg) {
    *wc = (em_weight){.dtype = EM_U32, .rows = N, .cols = K, .data = q->words + lead, .bits = bits,
                      .group_size = group, .scales = q->scales, .biases = q->biases, .scale_dtype = sdt, .name = "qw"};
    *wg = *wc;
    uint32_t *d = up(q->words, q->n_words * 4);
    wg->data = d + lead;
    wg->scales = up(q->scales, q->n_groups * dtype_size(sdt));
    wg->biases = up(q->biases, q->n_groups * dtype_size(sdt));
}

static void qw_weight_free(em_weight *wg, int lead) {
    gpu->ops->free(gpu, (uint32_t *)wg->data - lead);
    gpu->ops->free(gpu, (void *)wg->scales);
    gpu->ops->free(gpu, (void *)wg->biases);
}

static void test_qmatmul_case(int M, int N, int K, int bits, int group, em_dtype sdt, bool with_bias, em_math math,
                              int lead) {
    qw q = qw_make(N, K, bits, group, sdt, lead);
    em_weight wc, wg;
    qw_weights(&q, N, K, bits, group, sdt, lead, &wc, &wg);
    float *x = rand_f32((size_t)M * K, 1.0f), *bias = with_bias ? rand_f32((size_t)N, 1.0f) : NULL;
    float *xd = up(x, (size_t)M * K * 4), *bd = bias ? up(bias, (size_t)N * 4) : NULL;
    float *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4), *yc = malloc((size_t)M * N * 4);
    cpu->ops->matmul(cpu, yc, x, M, &wc, bias, math);
    gpu->ops->matmul(gpu, yd, xd, M, &wg, bd, math);
    float *yg = down(yd, (size_t)M * N);
    double tol = math == EM_MATH_FAST && M >= 16 ? 2e-2 : 2e-5;
    double e = rel_err(yg, yc, (size_t)M * N);
    CHECKF(e <= tol, "qmatmul bits=%d group=%d scales=%s M=%d N=%d K=%d bias=%d %s lead=%d: rel err %.3g", bits, group,
           dtype_name(sdt), M, N, K, with_bias, math == EM_MATH_FAST ? "fast" : "exact", lead, e);
    qw_weight_free(&wg, lead);
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, yd);
    if (bd) gpu->ops->free(gpu, bd);
    qw_free(&q);
    free(x), free(bias), free(yc), free(yg);
}

static void test_qmatmul(void) {
    int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    em_dtype sdts[] = {EM_BF16, EM_F16, EM_F32};
    /* M: decode, the 2- and 4-row passes, a full pass, a full pass and a
     * 2-row one, FAST range, beyond the GEMV (dequantized slices + cuBLAS) */
    int Ms[] = {1, 2, 3, 8, 10, 17, 70};
    int nM = (int)(sizeof Ms / sizeof Ms[0]);
    int v = 0;
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++, v++) {
            em_dtype sdt = sdts[v % 3];
            int K = g == 2 ? 1152 : 384; /* 1152: more than one staged chunk of 1024 */
            for (int m = 0; m < nM; m++) {
                int N = m % 2 ? 37 : 130; /* odd row counts: partial blocks */
                test_qmatmul_case(Ms[m], N, K, bits[b], groups[g], sdt, m % 3 == 1, EM_MATH_EXACT, 0);
                if (Ms[m] >= 16) test_qmatmul_case(Ms[m], N, K, bits[b], groups[g], sdt, m % 3 == 1, EM_MATH_FAST, 0);
            }
        }
    /* words one u32 off 16-byte alignment: the GEMV's wide loads step aside */
    test_qmatmul_case(1, 33, 256, 4, 64, EM_BF16, true, EM_MATH_EXACT, 1);
    test_qmatmul_case(5, 33, 256, 8, 32, EM_F16, false, EM_MATH_EXACT, 1);
    test_qmatmul_case(2, 33, 256, 6, 128, EM_F32, false, EM_MATH_EXACT, 1);
    /* a single row, a single group of 32 inputs */
    test_qmatmul_case(1, 1, 32, 3, 32, EM_BF16, true, EM_MATH_EXACT, 0);
}

/* FAST few-row products against 4-/8-bit weights round the activations to
 * int8 per 32 values: the result must be that arithmetic (x rounded as the
 * kernel rounds it; 8-bit codes centred on 128, the constant part over the
 * unrounded sum, as on the CPU) to f32 level, and no further from the
 * exact product than the rounding can move it: sum |xr - x| * |s (q - c)|.
 * Products of CUDA_QTC_MIN_M .. CUDA_QTC_MAX_M rows over 4-bit weights
 * (cuda_qtc.cu, EMBER_CUDA_QTC) round them to bf16 instead, the constant
 * part over the rounded sum: the affine product of the rounded x, so the
 * reach is sum |xr - x| * |s q + b|. */
static bool qtc_regime(int M, int bits) {
    return bits == 4 && M >= CUDA_QTC_MIN_M && M <= CUDA_QTC_MAX_M && em_config_flag(em_config_global(), EMC_CUDA_QTC);
}

static void test_qmatmul_int8_case(int M, int N, int K, int bits, int group, em_dtype sdt, bool with_bias) {
    qw q = qw_make(N, K, bits, group, sdt, 0);
    em_weight wc, wg;
    qw_weights(&q, N, K, bits, group, sdt, 0, &wc, &wg);
    float *x = rand_f32((size_t)M * K, 1.0f), *bias = with_bias ? rand_f32((size_t)N, 1.0f) : NULL;
    for (int i = 0; i < K; i += 7) x[i] *= 9.0f; /* uneven magnitudes inside a block of 32 */
    float *xd = up(x, (size_t)M * K * 4), *bd = bias ? up(bias, (size_t)N * 4) : NULL;
    float *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4), *yc = malloc((size_t)M * N * 4);
    cpu->ops->matmul(cpu, yc, x, M, &wc, bias, EM_MATH_EXACT);
    gpu->ops->matmul(gpu, yd, xd, M, &wg, bd, EM_MATH_FAST);
    float *yg = down(yd, (size_t)M * N);
    float *xr = malloc((size_t)M * K * sizeof *xr);
    bool tc = qtc_regime(M, bits);
    for (int b = 0; b < M * K / 32 && tc; b++)
        for (int i = 0; i < 32; i++) xr[b * 32 + i] = bf16_to_f32(f32_to_bf16(x[b * 32 + i]));
    for (int b = 0; b < M * K / 32 && !tc; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        float inv = amax > 0 ? 127.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++) xr[b * 32 + i] = (float)lrintf(x[b * 32 + i] * inv) * (amax / 127.0f);
    }
    const uint8_t *wb = (const uint8_t *)q.words;
    double worst = 0, mag = 1e-30, excess = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = bias ? bias[n] : 0.0, reach = 0;
            double c = bits == 8 ? 128 : 0;
            for (int g = 0; g < K / group; g++) {
                size_t gi = (size_t)n * (K / group) + g;
                double sc = affine_scalar(q.scales, sdt, gi), bi = affine_scalar(q.biases, sdt, gi), dot = 0, sx = 0;
                for (int k = g * group; k < (g + 1) * group; k++) {
                    double qc = affine_get(wb + (size_t)n * K * bits / 8, k, bits) - c;
                    dot += (double)xr[(size_t)m * K + k] * qc;
                    sx += tc ? xr[(size_t)m * K + k] : x[(size_t)m * K + k];
                    double wv = tc ? sc * (qc + c) + bi : sc * qc; /* what a rounding of x_k is multiplied by */
                    reach += fabs((double)xr[(size_t)m * K + k] - x[(size_t)m * K + k]) * fabs(wv);
                }
                ref += sc * dot + (bi + c * sc) * sx;
            }
            worst = fmax(worst, fabs(ref - yg[(size_t)m * N + n]));
            mag = fmax(mag, fabs(ref));
            excess = fmax(excess, fabs((double)yg[(size_t)m * N + n] - yc[(size_t)m * N + n]) - reach);
        }
    CHECKF(worst / mag <= 2e-5, "qmatmul %s bits=%d group=%d M=%d N=%d K=%d: rel err %.3g from its own arithmetic",
           tc ? "bf16" : "int8", bits, group, M, N, K, worst / mag);
    CHECKF(excess / mag <= 2e-5, "qmatmul %s bits=%d group=%d M=%d N=%d K=%d: %.3g (relative) further from the exact "
           "product than the rounding reaches", tc ? "bf16" : "int8", bits, group, M, N, K, excess / mag);
    /* one or two rows (the streaming kernels) give the bits their rows get
     * in a larger batch (the chunked kernel): a lane's segments and the
     * butterfly are the same in both; from CUDA_QMMA_MIN_M rows (the
     * tensor-core kernels, their own order of sums; 4-bit from
     * CUDA_QTC_MIN_M) a row gets the same bits in any batch that kernel
     * takes */
    int tc_min = tc ? CUDA_QTC_MIN_M : CUDA_QMMA_MIN_M;
    int alone = M >= tc_min ? tc_min : 1, last = M >= tc_min ? tc_min : 2;
    for (int r = alone; r <= last && r < M; r++) {
        float *yr = gpu->ops->alloc(gpu, (size_t)r * N * 4);
        gpu->ops->matmul(gpu, yr, xd, r, &wg, bd, EM_MATH_FAST);
        float *yh = down(yr, (size_t)r * N);
        CHECKF(!memcmp(yh, yg, (size_t)r * N * 4), "qmatmul int8 bits=%d group=%d N=%d K=%d: %d row(s) alone differ from "
               "the same rows in a batch of %d", bits, group, N, K, r, M);
        gpu->ops->free(gpu, yr), free(yh);
    }
    qw_weight_free(&wg, 0);
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, yd);
    if (bd) gpu->ops->free(gpu, bd);
    qw_free(&q);
    free(x), free(bias), free(yc), free(yg), free(xr);
}

/* A recorded step whose later products grow a scratch buffer that its
 * earlier ones used (the first decode step of a batch whose head is its
 * largest product: the dequantizing GEMM's bf16 slices, the int8 rounding
 * of wider rows) must not keep kernels that name the freed buffer: the
 * recording is dropped, the step runs without a graph, the next one records
 * with the grown buffer, and every step gives the eager results, bit for
 * bit. On a backend of its own, so the buffers start small. */
static void test_graph_scratch_growth(void) {
    em_backend *shared = gpu;
    REQUIRE(gpu->ops->graph_begin && cuda_backend_create(0, &gpu) == EM_OK);
    enum { P = 4 };
    const int Ms[P] = {80, 80, 16, 16}, Ns[P] = {64, 2048, 48, 40}, Ks[P] = {256, 2048, 256, 8192};
    qw q[P];
    em_weight wc[P], wg[P], ws[P];
    float *x[P], *y[P], *ref[P];
    for (int i = 0; i < P; i++) {
        q[i] = qw_make(Ns[i], Ks[i], 4, 64, EM_BF16, 0);
        qw_weights(&q[i], Ns[i], Ks[i], 4, 64, EM_BF16, 0, &wc[i], &wg[i]);
        float *xh = rand_f32((size_t)Ms[i] * Ks[i], 1.0f);
        x[i] = up(xh, (size_t)Ms[i] * Ks[i] * 4), free(xh);
        y[i] = gpu->ops->alloc(gpu, (size_t)Ms[i] * Ns[i] * 4);
    }
    int ran_steps = 0;
    for (int step = 0; step < 3; step++) {
        em_graph_mode mode = gpu->ops->graph_begin(gpu, 0x5c7a7c4);
        for (int i = 0; mode != EM_GRAPH_NONE && i < P; i++)
            gpu->ops->matmul(gpu, y[i], x[i], Ms[i], &wg[i], NULL, EM_MATH_FAST);
        bool ran = false;
        REQUIRE(gpu->ops->graph_end(gpu, &ran) == EM_OK);
        ran_steps += ran;
        for (int i = 0; !ran && i < P; i++) gpu->ops->matmul(gpu, y[i], x[i], Ms[i], &wg[i], NULL, EM_MATH_FAST);
        for (int i = 0; i < P; i++) {
            float *got = down(y[i], (size_t)Ms[i] * Ns[i]);
            if (step == 0) ref[i] = got;
            else {
                CHECKF(!memcmp(got, ref[i], (size_t)Ms[i] * Ns[i] * 4), "recorded step %d: product %d differs", step, i);
                free(got);
            }
        }
    }
    CHECKF(ran_steps >= 1, "no step ran from a recording (%d)", ran_steps);
    /* the eager results of the shared backend: the same kernels */
    em_backend *own = gpu;
    gpu = shared;
    for (int i = 0; i < P; i++) {
        qw_weights(&q[i], Ns[i], Ks[i], 4, 64, EM_BF16, 0, &wc[i], &ws[i]);
        float *xs = gpu->ops->alloc(gpu, (size_t)Ms[i] * Ks[i] * 4), *ys = gpu->ops->alloc(gpu, (size_t)Ms[i] * Ns[i] * 4);
        float *xh = malloc((size_t)Ms[i] * Ks[i] * 4);
        REQUIRE(own->ops->download(own, xh, x[i], (size_t)Ms[i] * Ks[i] * 4) == EM_OK);
        REQUIRE(gpu->ops->upload(gpu, xs, xh, (size_t)Ms[i] * Ks[i] * 4) == EM_OK);
        gpu->ops->matmul(gpu, ys, xs, Ms[i], &ws[i], NULL, EM_MATH_FAST);
        float *e = down(ys, (size_t)Ms[i] * Ns[i]);
        CHECKF(!memcmp(e, ref[i], (size_t)Ms[i] * Ns[i] * 4), "product %d: a step's result differs from the eager one", i);
        qw_weight_free(&ws[i], 0);
        gpu->ops->free(gpu, xs), gpu->ops->free(gpu, ys), free(xh), free(e), free(ref[i]);
    }
    gpu = own;
    for (int i = 0; i < P; i++) {
        qw_weight_free(&wg[i], 0), qw_free(&q[i]);
        gpu->ops->free(gpu, x[i]), gpu->ops->free(gpu, y[i]);
    }
    em_backend_free(gpu);
    gpu = shared;
}

/* matmul_group of quantized products in the int8 tensor-core kernel's rows
 * (q, k, v; gate and up): one launch over x rounded once gives each product
 * the bits matmul gives it alone, matrices of rows that end a block part
 * way (48, 20, 130) included. With Ns given (G of them, at most 3), those
 * matrices instead. */
static void test_qmma_group(int bits, int M, int K, em_dtype sdt, int G, const int *Ns) {
    static const int Ndef[3] = {48, 20, 130};
    if (!Ns) G = 3, Ns = Ndef;
    qw q[3];
    em_weight wc[3], wg[3];
    const em_weight *ws[3];
    float *ys[3], *yone[3], *bd[3];
    float *x = rand_f32((size_t)M * K, 1.0f), *xd = up(x, (size_t)M * K * 4);
    for (int i = 0; i < G; i++) {
        q[i] = qw_make(Ns[i], K, bits, 64, sdt, 0);
        qw_weights(&q[i], Ns[i], K, bits, 64, sdt, 0, &wc[i], &wg[i]);
        ws[i] = &wg[i];
        float *b = rand_f32((size_t)Ns[i], 1.0f);
        bd[i] = i == 1 ? NULL : up(b, (size_t)Ns[i] * 4), free(b);
        ys[i] = gpu->ops->alloc(gpu, (size_t)M * Ns[i] * 4), yone[i] = gpu->ops->alloc(gpu, (size_t)M * Ns[i] * 4);
        gpu->ops->matmul(gpu, yone[i], xd, M, &wg[i], bd[i], EM_MATH_FAST);
    }
    gpu->ops->matmul_group(gpu, G, ys, xd, M, ws, (const float *const *)bd, EM_MATH_FAST);
    for (int i = 0; i < G; i++) {
        float *a = down(ys[i], (size_t)M * Ns[i]), *b = down(yone[i], (size_t)M * Ns[i]);
        CHECKF(!memcmp(a, b, (size_t)M * Ns[i] * 4), "qmma group bits=%d M=%d K=%d: product %d differs from matmul",
               bits, M, K, i);
        free(a), free(b);
        qw_weight_free(&wg[i], 0), qw_free(&q[i]);
        gpu->ops->free(gpu, ys[i]), gpu->ops->free(gpu, yone[i]);
        if (bd[i]) gpu->ops->free(gpu, bd[i]);
    }
    gpu->ops->free(gpu, xd), free(x);
}

/* The shapes of the shared-activation kernel (cuda_qtc.cu: 17-64 rows over
 * 4-bit weights; a block takes all of K here at K of 2 and 3 stages, and
 * where a matrix fills every multiprocessor with such blocks; with
 * EMBER_CUDA_QTC_SHARE=all also matrices whose K the blocks split, here
 * into 2 (K = 1,024), 4 (K = 2,048) and 8 (K = 4,096) stretches): each
 * against its arithmetic and, alone at 3 rows on the staged kernel, for the
 * same bits; past 32 rows a pass of 48 or 64; in groups, each product the
 * bits matmul gives it alone (a group beside a matrix of 8 stretches, and
 * one of matrices split 4, 2 and 4 ways). Run with the setting at 0 (the
 * staged kernel), 1 and all. */
static void qtc_share_cases(void) {
    int groups[] = {32, 64, 128}, Ms[] = {33, 47, CUDA_QTC_MAX_M};
    for (int g = 0; g < 3; g++) {
        test_qmatmul_int8_case(g == 1 ? 21 : 32, g == 2 ? 37 : 130, g == 0 ? 512 : 768, 4, groups[g],
                               g == 1 ? EM_F16 : EM_BF16, g != 1);
        test_qmatmul_int8_case(Ms[g], g == 1 ? 37 : 130, 768, 4, groups[g], g == 1 ? EM_F16 : EM_BF16, g != 0);
        test_qmatmul_int8_case(g == 0 ? 24 : Ms[g], 300, 1024 << g, 4, groups[g], g == 2 ? EM_F16 : EM_BF16, g != 2);
    }
    test_qmma_group(4, 24, 512, EM_BF16, 0, NULL);
    test_qmma_group(4, 56, 512, EM_BF16, 0, NULL);
    const int mixed[2] = {48, 16896}, split[3] = {200, 9000, 40};
    test_qmma_group(4, 32, 4096, EM_BF16, 2, mixed);
    test_qmma_group(4, 40, 2048, EM_BF16, 3, split);
}
static void test_qtc_share(void) {
    qtc_share_cases(); /* the default, all */
    with_config("EMBER_CUDA_QTC_SHARE", "1", qtc_share_cases);
    with_config("EMBER_CUDA_QTC_SHARE", "0", qtc_share_cases);
}

static void test_qmatmul_int8(void) {
    int Ms[] = {1, 2, 3, 5, 8, 11, 15}, bits[] = {4, 8}, groups[] = {32, 64, 128};
    em_dtype sdts[] = {EM_BF16, EM_F16, EM_F32};
    int v = 0;
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 3; g++)
            for (int m = 0; m < 7; m++, v++) {
                int K = m % 3 == 2 ? 4096 + 1152 : 384; /* 5248: two chunks of 2048 and a partial third */
                test_qmatmul_int8_case(Ms[m], m % 2 ? 37 : 130, K, bits[b], groups[g], sdts[v % 3], m % 3 == 1);
            }
    /* the int8 tensor-core kernel: column tiles partly past M, weight rows
     * past a block's 16, stretches of K from 8 down to 1 a block (K = 384:
     * 12 segments, 4 stretches; 5,248: 164, 4; 14,336: 448, 8; 32: 1) */
    int Mq[] = {16, 17, 24, 31, CUDA_QMMA_MAX_M};
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 3; g++)
            for (int m = 0; m < 5; m++, v++) {
                int K = m == 2 ? 5248 : m == 4 && g < 2 ? 14336 : 384;
                test_qmatmul_int8_case(Mq[m], m % 2 ? 37 : 130, K, bits[b], groups[g], sdts[v % 3], m % 3 == 1);
            }
    /* the staged bf16 kernel (4-bit, K a multiple of 256, 2-byte scales):
     * one to four activation tiles, weight rows past a block's 16, every
     * group size; K = 1,280 is five stages, cut into uneven stretches */
    int Ms2[] = {3, 8, 13, 21, 32};
    for (int g = 0; g < 3; g++)
        for (int m = 0; m < 5; m++)
            test_qmatmul_int8_case(Ms2[m], m % 2 ? 37 : 130, m == 2 ? 1280 : 2048, 4, groups[g],
                                   g == 1 ? EM_F16 : EM_BF16, m % 2 == 0);
    /* past 32 rows: passes of 32 over the same weights (the staged kernel
     * at K = 2,048, the register one at 1,152) */
    int Ms3[] = {33, 47, CUDA_QTC_MAX_M};
    for (int m = 0; m < 3; m++) {
        test_qmatmul_int8_case(Ms3[m], 130, 2048, 4, 64, EM_BF16, m != 1);
        test_qmatmul_int8_case(Ms3[m], 37, 1152, 4, 32 << m, m == 2 ? EM_F32 : EM_F16, m == 1);
    }
    test_qmatmul_int8_case(20, 19, 32, 4, 32, EM_BF16, true);
    test_qmatmul_int8_case(16, 16, 256, 8, 128, EM_F32, false);
    test_qmma_group(4, 16, 1024, EM_BF16, 0, NULL);
    test_qmma_group(4, 5, 1024, EM_BF16, 0, NULL); /* one tile of 8 activation rows */
    test_qmma_group(8, 29, 2048, EM_F16, 0, NULL);
    /* one or two rows too wide to stage whole: the chunked kernel */
    test_qmatmul_int8_case(1, 37, 24576, 4, 64, EM_BF16, true);
    test_qmatmul_int8_case(2, 130, 24576, 8, 128, EM_F16, false);
    /* one or two rows through the streaming kernel at a width that is no
     * multiple of its rounds of loads (6,656 = 3 x 2,048 + 512), rows that
     * leave the last unit partial */
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 3; g++) {
            em_dtype sdt = groups[g] == 128 ? EM_F32 : sdts[(b + g) % 2];
            test_qmatmul_int8_case(1 + (b + g) % 2, g == 1 ? 37 : 130, 6656, bits[b], groups[g], sdt, g == 2);
        }
}

/* FAST products of a few rows over small bf16 matrices (the skinny
 * tensor-core kernel, cuda_skinny.cu): each output within f32 summation
 * error of the double-precision product of the bf16-rounded activations and
 * the weights (2^-16 of the sum of |x·w|, K up to 14,336), with K cut into
 * 1 to 8 stretches and stretches shorter than the kernel's unrolled step;
 * the same bits on a second run; and each row the same bits as in a batch
 * of CUDA_FAST_MIN_M (the sums do not depend on M). */
static void test_matmul_skinny_case(int M, int N, int K, bool with_bias) {
    uint16_t *wh = weight_data(EM_BF16, (size_t)N * K);
    float *x = rand_f32((size_t)M * K, 1.0f), *bias = with_bias ? rand_f32((size_t)N, 1.0f) : NULL;
    em_weight wg = {.dtype = EM_BF16, .rows = N, .cols = K, .data = up(wh, (size_t)N * K * 2), .name = "w"};
    float *xd = up(x, (size_t)M * K * 4), *bd = bias ? up(bias, (size_t)N * 4) : NULL;
    float *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4);
    gpu->ops->matmul(gpu, yd, xd, M, &wg, bd, EM_MATH_FAST);
    float *y1 = down(yd, (size_t)M * N);
    gpu->ops->matmul(gpu, yd, xd, M, &wg, bd, EM_MATH_FAST);
    float *y2 = down(yd, (size_t)M * N);
    int Ms = CUDA_FAST_MIN_M;
    gpu->ops->matmul(gpu, yd, xd, Ms, &wg, bd, EM_MATH_FAST);
    float *ys = down(yd, (size_t)Ms * N);
    int bad = 0;
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = bias ? bias[n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = (double)bf16_to_f32(f32_to_bf16(x[(size_t)m * K + k])) * bf16_to_f32(wh[(size_t)n * K + k]);
                ref += p, mag += fabs(p);
            }
            double e = fabs(y1[(size_t)m * N + n] - ref) / (mag + 1e-30);
            if (e > worst) worst = e;
            bad += !(e <= 0x1p-16);
        }
    CHECKF(bad == 0, "matmul skinny M=%d N=%d K=%d bias=%d: %d outputs off (worst %.3g of sum |x w|)", M, N, K,
           with_bias, bad, worst);
    CHECKF(!memcmp(y1, y2, (size_t)M * N * 4), "matmul skinny M=%d N=%d K=%d: a second run gave other bits", M, N, K);
    CHECKF(!memcmp(y1, ys, (size_t)Ms * N * 4), "matmul skinny M=%d N=%d K=%d: rows differ from a batch of %d", M, N,
           K, Ms);
    gpu->ops->free(gpu, (void *)wg.data);
    gpu->ops->free(gpu, xd);
    gpu->ops->free(gpu, yd);
    if (bd) gpu->ops->free(gpu, bd);
    free(wh), free(x), free(bias), free(y1), free(y2), free(ys);
}

static void test_matmul_skinny(void) {
    int shapes[][3] = {{16, 2048, 2048}, {7, 512, 8192}, {CUDA_FAST_MIN_M, 4096, 256}, {23, 80, 96}, {17, 16, 32},
                       {32, 3072, 1024}, {9, 176, 14336}, {12, 1040, 4096}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        test_matmul_skinny_case(shapes[s][0], shapes[s][1], shapes[s][2], s % 2 == 1);
}

/* matmul_group gives every product the bits matmul gives it alone: plain
 * and quantized weights, in the fused regimes (GEMV rows; FAST int8 rows)
 * and out of them (the fallback), with and without biases. */
static void test_matmul_group_case(int M, int bits, em_dtype dt, em_math math, bool with_bias) {
    int K = 512, Ns[4] = {96, 32, 40, 8}, n = 4; /* the last as small as a GDN's b and a projections */
    em_weight wg[4];
    qw q[4];
    void *wh[4] = {0};
    float *ys[4], *yg[4], *bd[4] = {0};
    float *x = rand_f32((size_t)M * K, 1.0f), *xd = up(x, (size_t)M * K * 4);
    for (int i = 0; i < n; i++) {
        if (bits) {
            em_weight wc;
            q[i] = qw_make(Ns[i], K, bits, 64, EM_BF16, 0);
            qw_weights(&q[i], Ns[i], K, bits, 64, EM_BF16, 0, &wc, &wg[i]);
        } else {
            wh[i] = weight_data(dt, (size_t)Ns[i] * K);
            wg[i] = (em_weight){.dtype = dt, .rows = Ns[i], .cols = K,
                                .data = up(wh[i], (size_t)Ns[i] * K * dtype_size(dt)), .name = "w"};
        }
        if (with_bias) {
            float *b = rand_f32((size_t)Ns[i], 1.0f);
            bd[i] = up(b, (size_t)Ns[i] * 4);
            free(b);
        }
        ys[i] = gpu->ops->alloc(gpu, (size_t)M * Ns[i] * 4);
        yg[i] = gpu->ops->alloc(gpu, (size_t)M * Ns[i] * 4);
        gpu->ops->matmul(gpu, ys[i], xd, M, &wg[i], bd[i], math);
    }
    const em_weight *wp[4] = {&wg[0], &wg[1], &wg[2], &wg[3]};
    const float *bp[4] = {bd[0], bd[1], bd[2], bd[3]};
    gpu->ops->matmul_group(gpu, n, yg, xd, M, wp, bp, math);
    int differ = 0;
    for (int i = 0; i < n; i++) {
        float *a = down(ys[i], (size_t)M * Ns[i]), *b = down(yg[i], (size_t)M * Ns[i]);
        differ += memcmp(a, b, (size_t)M * Ns[i] * 4) != 0;
        free(a), free(b);
        gpu->ops->free(gpu, ys[i]), gpu->ops->free(gpu, yg[i]);
        if (bd[i]) gpu->ops->free(gpu, bd[i]);
        if (bits) qw_weight_free(&wg[i], 0), qw_free(&q[i]);
        else gpu->ops->free(gpu, (void *)wg[i].data), free(wh[i]);
    }
    CHECKF(differ == 0, "matmul_group M=%d bits=%d dtype=%s %s bias=%d: %d of 4 outputs differ from matmul", M, bits,
           dtype_name(dt), math == EM_MATH_FAST ? "fast" : "exact", with_bias, differ);
    gpu->ops->free(gpu, xd);
    free(x);
}

static void test_matmul_group(void) {
    int Ms[] = {1, 2, 3, 8, 20, 64};
    for (int m = 0; m < 6; m++) {
        test_matmul_group_case(Ms[m], 0, EM_BF16, EM_MATH_EXACT, m % 2);
        test_matmul_group_case(Ms[m], 0, EM_F32, EM_MATH_FAST, m % 2 == 0);
        test_matmul_group_case(Ms[m], 0, EM_BF16, EM_MATH_FAST, m % 2); /* M >= CUDA_FAST_MIN_M: one rounding, tensor cores */
        test_matmul_group_case(Ms[m], 4, EM_BF16, EM_MATH_FAST, m % 2);
        test_matmul_group_case(Ms[m], 8, EM_BF16, EM_MATH_FAST, m % 2 == 0);
        test_matmul_group_case(Ms[m], 4, EM_BF16, EM_MATH_EXACT, true);
    }
}

/* A row's product does not depend on the other rows of its batch: a verified
 * speculative span (M rows) must compute what single decode steps did.
 * EXACT: the f32 GEMV; FAST: the int8 kernels (11 rows take passes of 8 and
 * 3, one row the streaming kernel), or over 4-bit weights the bf16
 * tensor-core kernel, whose rows are compared with the same rows in its
 * smallest batch (CUDA_QTC_MIN_M) instead of alone. */
static void test_qgemv_rows_independent_case(int bits, em_math math) {
    int N = 50, K = 4096, M = 11, one = math == EM_MATH_FAST && qtc_regime(M, bits) ? CUDA_QTC_MIN_M : 1;
    qw q = qw_make(N, K, bits, 64, EM_BF16, 0);
    em_weight wc, wg;
    qw_weights(&q, N, K, bits, 64, EM_BF16, 0, &wc, &wg);
    float *x = rand_f32((size_t)M * K, 1.0f);
    float *xd = up(x, (size_t)M * K * 4), *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4);
    float *y1d = gpu->ops->alloc(gpu, (size_t)one * N * 4);
    gpu->ops->matmul(gpu, yd, xd, M, &wg, NULL, math);
    float *y = down(yd, (size_t)M * N);
    int differ = 0;
    for (int m = 0; m < M; m++) {
        int m0 = m + one <= M ? m : M - one; /* the batch of `one` rows from m0 holds row m */
        gpu->ops->matmul(gpu, y1d, xd + (size_t)m0 * K, one, &wg, NULL, math);
        float *y1 = down(y1d, (size_t)one * N);
        differ += memcmp(y1 + (size_t)(m - m0) * N, y + (size_t)m * N, (size_t)N * 4) != 0;
        free(y1);
    }
    CHECKF(differ == 0, "qmatmul bits=%d %s: %d of %d rows differ between M=%d and M=%d", bits,
           math == EM_MATH_FAST ? "fast" : "exact", differ, M, M, one);
    qw_weight_free(&wg, 0);
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, yd), gpu->ops->free(gpu, y1d);
    qw_free(&q);
    free(x), free(y);
}

static void test_qgemv_rows_independent(void) {
    int bits[] = {4, 3, 8};
    for (int b = 0; b < 3; b++) test_qgemv_rows_independent_case(bits[b], EM_MATH_EXACT);
    test_qgemv_rows_independent_case(4, EM_MATH_FAST);
    test_qgemv_rows_independent_case(8, EM_MATH_FAST);
}

static void test_qembed(void) {
    int bits[] = {2, 3, 4, 5, 6, 8};
    int32_t ids[] = {0, 40, 3, 3, 17, 8, 40};
    int V = 41, K = 256, n = 7;
    for (int b = 0; b < 6; b++) {
        int group = b % 2 ? 64 : 128;
        em_dtype sdt = b % 3 == 0 ? EM_BF16 : b % 3 == 1 ? EM_F16 : EM_F32;
        qw q = qw_make(V, K, bits[b], group, sdt, 0);
        em_weight wc, wg;
        qw_weights(&q, V, K, bits[b], group, sdt, 0, &wc, &wg);
        float *oc = malloc((size_t)n * K * 4), *od = gpu->ops->alloc(gpu, (size_t)n * K * 4);
        cpu->ops->embed(cpu, oc, &wc, ids, n);
        gpu->ops->embed(gpu, od, &wg, ids, n);
        float *og = down(od, (size_t)n * K);
        double e = rel_err(og, oc, (size_t)n * K);
        CHECKF(e <= 1e-6, "quantized embed bits=%d group=%d scales=%s: rel err %.3g", bits[b], group, dtype_name(sdt), e);
        qw_weight_free(&wg, 0);
        gpu->ops->free(gpu, od);
        qw_free(&q);
        free(oc), free(og);
    }
}

/* ---- Gated DeltaNet operations ---- */

static void test_sigmoid_mul(void) {
    /* plain rows, and the gated-attention form: gates interleaved with queries */
    int cases[][3] = {{5, 77, 100}, {1, 1, 1}, {24, 64, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], n = cases[c][1], ld = cases[c][2];
        float *y = rand_f32((size_t)rows * n, 2.0f), *g = rand_f32((size_t)rows * ld, 6.0f);
        float *yd = up(y, (size_t)rows * n * 4), *gd = up(g, (size_t)rows * ld * 4);
        cpu->ops->sigmoid_mul(cpu, y, g, rows, n, ld);
        gpu->ops->sigmoid_mul(gpu, yd, gd, rows, n, ld);
        float *yg = down(yd, (size_t)rows * n);
        double e = rel_err(yg, y, (size_t)rows * n);
        CHECKF(e <= 1e-6, "sigmoid_mul rows=%d n=%d ld=%d: rel err %.3g", rows, n, ld, e);
        gpu->ops->free(gpu, yd), gpu->ops->free(gpu, gd);
        free(y), free(g), free(yg);
    }
}

/* Two calls in a row (the state carries over), in place or not. */
static void test_conv_case(int C, int K, int ld, int n1, int n2, bool in_place) {
    int n = n1 + n2;
    float *x = rand_f32((size_t)n * ld, 2.0f), *w = rand_f32((size_t)C * K, 0.7f);
    float *st = rand_f32((size_t)(K > 1 ? K - 1 : 1) * C, 1.0f);
    size_t sn = (size_t)(K - 1) * C;
    float *xd = up(x, (size_t)n * ld * 4), *wd = up(w, (size_t)C * K * 4), *sd = up(st, (sn ? sn : 1) * 4);
    float *yc = in_place ? x : calloc((size_t)n * ld, 4);
    float *yd = in_place ? xd : gpu->ops->alloc(gpu, (size_t)n * ld * 4);
    cpu->ops->conv1d_silu(cpu, yc, x, n1, C, ld, w, K, st);
    gpu->ops->conv1d_silu(gpu, yd, xd, n1, C, ld, wd, K, sd);
    if (n2) {
        size_t o = (size_t)n1 * ld;
        cpu->ops->conv1d_silu(cpu, yc + o, x + o, n2, C, ld, w, K, st);
        gpu->ops->conv1d_silu(gpu, yd + o, xd + o, n2, C, ld, wd, K, sd);
    }
    float *yg = down(yd, (size_t)n * ld);
    /* The largest difference against the largest output of the case, as
     * rel_err measures every op, not row by row: a row of one channel is
     * one value, and an f32 sum of K products that cancels leaves it no
     * relative accuracy to speak of (C = 1 measured 1.65e-5 of its own
     * value on some inputs). The rows' C channels packed, without the gaps. */
    float *pg = malloc((size_t)n * C * 4), *pc = malloc((size_t)n * C * 4);
    for (int t = 0; t < n; t++) {
        memcpy(pg + (size_t)t * C, yg + (size_t)t * ld, (size_t)C * 4);
        memcpy(pc + (size_t)t * C, yc + (size_t)t * ld, (size_t)C * 4);
    }
    double worst = rel_err(pg, pc, (size_t)n * C);
    free(pg), free(pc);
    CHECKF(worst <= 1e-5, "conv1d_silu C=%d K=%d ld=%d n=%d+%d in_place=%d: rel err %.3g", C, K, ld, n1, n2, in_place,
           worst);
    if (sn) {
        float *sg = down(sd, sn);
        double e = rel_err(sg, st, sn);
        CHECKF(e == 0, "conv1d_silu C=%d K=%d n=%d+%d: state tail differs (rel err %.3g)", C, K, n1, n2, e);
        free(sg);
    }
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, wd), gpu->ops->free(gpu, sd);
    if (!in_place) gpu->ops->free(gpu, yd), free(yc);
    free(x), free(w), free(st), free(yg);
}

static void test_conv(void) {
    test_conv_case(131, 4, 140, 1, 0, true);   /* decode */
    test_conv_case(131, 4, 131, 1, 1, true);   /* two decode steps */
    test_conv_case(300, 4, 310, 20, 3, true);  /* prefill then decode */
    test_conv_case(64, 4, 64, 2, 5, false);    /* fewer tokens than the window */
    test_conv_case(1, 4, 3, 9, 1, true);       /* a single channel */
    test_conv_case(70, 2, 70, 5, 2, true);     /* K = 2 */
    test_conv_case(45, 7, 50, 12, 4, true);    /* K = 7 */
    test_conv_case(33, 1, 33, 4, 0, false);    /* K = 1: no state */
    test_conv_case(40, 12, 40, 30, 2, true);   /* the wide-kernel path */
    test_conv_case(300, 4, 310, 517, 3, true); /* 16 segments of 33 tokens, the last short */
    test_conv_case(131, 4, 131, 100, 0, false); /* 3 segments, out of place */
    test_conv_case(40, 12, 40, 100, 2, true);  /* segments with the wide kernel's window */
}

static void test_gdn_gates(void) {
    int cases[][3] = {{7, 5, 9}, {1, 32, 32}, {130, 16, 40}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c][0], Hv = cases[c][1], ld = cases[c][2];
        float *a = rand_f32((size_t)n * ld, 12.0f), *b = rand_f32((size_t)n * ld, 8.0f); /* softplus both sides of 20 */
        float *A = rand_f32((size_t)Hv, 2.0f), *dt = rand_f32((size_t)Hv, 12.0f);
        float *gc = malloc((size_t)n * Hv * 4), *bc = malloc((size_t)n * Hv * 4);
        float *ad = up(a, (size_t)n * ld * 4), *bd = up(b, (size_t)n * ld * 4), *Ad = up(A, (size_t)Hv * 4),
              *dtd = up(dt, (size_t)Hv * 4);
        float *gd = gpu->ops->alloc(gpu, (size_t)n * Hv * 4), *betad = gpu->ops->alloc(gpu, (size_t)n * Hv * 4);
        cpu->ops->gdn_gates(cpu, gc, bc, a, b, ld, A, dt, n, Hv);
        gpu->ops->gdn_gates(gpu, gd, betad, ad, bd, ld, Ad, dtd, n, Hv);
        float *gg = down(gd, (size_t)n * Hv), *bg = down(betad, (size_t)n * Hv);
        double eg = rel_err(gg, gc, (size_t)n * Hv), eb = rel_err(bg, bc, (size_t)n * Hv);
        CHECKF(eg <= 1e-6 && eb <= 1e-6, "gdn_gates n=%d Hv=%d ld=%d: rel err g %.3g, beta %.3g", n, Hv, ld, eg, eb);
        gpu->ops->free(gpu, ad), gpu->ops->free(gpu, bd), gpu->ops->free(gpu, Ad), gpu->ops->free(gpu, dtd);
        gpu->ops->free(gpu, gd), gpu->ops->free(gpu, betad);
        free(a), free(b), free(A), free(dt), free(gc), free(bc), free(gg), free(bg);
    }
}

/* The delta rule over `n` tokens in calls of `step` tokens (the state
 * carries over), the CPU with chunk `cpu_chunk`, against the GPU. */
static void test_delta_case(int Hk, int Hv, int dk, int dv, int n, int step, int cpu_chunk) {
    int ld = 2 * Hk * dk + Hv * dv + 3; /* rows wider than the heads, as a conv buffer may be */
    size_t sn = (size_t)Hv * dk * dv, on = (size_t)n * Hv * dv;
    float *qkv = rand_f32((size_t)n * ld, 1.0f), *S = rand_f32(sn, 0.3f);
    float *g = malloc((size_t)n * Hv * 4), *beta = malloc((size_t)n * Hv * 4);
    for (int i = 0; i < n * Hv; i++) {
        g[i] = -1.0f - frand(); /* decay exp(g) in (e^-2, 1] */
        beta[i] = 0.5f + 0.5f * frand();
    }
    float *qd = up(qkv, (size_t)n * ld * 4), *Sd = up(S, sn * 4), *gd = up(g, (size_t)n * Hv * 4),
          *bd = up(beta, (size_t)n * Hv * 4);
    float *oc = calloc(on, 4), *od = gpu->ops->alloc(gpu, on * 4);
    for (int t0 = 0; t0 < n; t0 += step) {
        int c = n - t0 < step ? n - t0 : step;
        size_t r = (size_t)t0;
        cpu->ops->gated_delta_rule(cpu, oc + r * Hv * dv, qkv + r * ld, ld, g + r * Hv, beta + r * Hv, S, c, Hk, Hv, dk,
                                   dv, cpu_chunk);
        gpu->ops->gated_delta_rule(gpu, od + r * Hv * dv, qd + r * ld, ld, gd + r * Hv, bd + r * Hv, Sd, c, Hk, Hv, dk,
                                   dv, 64);
    }
    float *og = down(od, on), *Sg = down(Sd, sn);
    double eo = rel_err(og, oc, on), es = rel_err(Sg, S, sn);
    CHECKF(eo <= 1e-4 && es <= 1e-4,
           "gated_delta_rule Hk=%d Hv=%d dk=%d dv=%d n=%d step=%d cpu chunk=%d: rel err out %.3g, state %.3g", Hk, Hv, dk,
           dv, n, step, cpu_chunk, eo, es);
    gpu->ops->free(gpu, qd), gpu->ops->free(gpu, Sd), gpu->ops->free(gpu, gd), gpu->ops->free(gpu, bd);
    gpu->ops->free(gpu, od);
    free(qkv), free(S), free(g), free(beta), free(oc), free(og), free(Sg);
}

/* On the GPU one call over n tokens and n calls of one token compute the
 * same bits (decode after a prefill continues exactly): 7 tokens (the
 * per-token kernel throughout) and 40 (staged in tiles, against the
 * per-token kernel's single steps). */
static void test_delta_steps_exact(int n) {
    int Hk = 2, Hv = 4, dk = 128, dv = 128, ld = 2 * Hk * dk + Hv * dv;
    size_t sn = (size_t)Hv * dk * dv, on = (size_t)n * Hv * dv;
    float *qkv = rand_f32((size_t)n * ld, 1.0f), *S = rand_f32(sn, 0.3f);
    float *g = malloc((size_t)n * Hv * 4), *beta = malloc((size_t)n * Hv * 4);
    for (int i = 0; i < n * Hv; i++) g[i] = -1.0f - frand(), beta[i] = 0.5f + 0.5f * frand();
    float *qd = up(qkv, (size_t)n * ld * 4), *gd = up(g, (size_t)n * Hv * 4), *bd = up(beta, (size_t)n * Hv * 4);
    float *S1 = up(S, sn * 4), *S2 = up(S, sn * 4);
    float *o1 = gpu->ops->alloc(gpu, on * 4), *o2 = gpu->ops->alloc(gpu, on * 4);
    gpu->ops->gated_delta_rule(gpu, o1, qd, ld, gd, bd, S1, n, Hk, Hv, dk, dv, 0);
    for (int t = 0; t < n; t++)
        gpu->ops->gated_delta_rule(gpu, o2 + (size_t)t * Hv * dv, qd + (size_t)t * ld, ld, gd + (size_t)t * Hv,
                                   bd + (size_t)t * Hv, S2, 1, Hk, Hv, dk, dv, 0);
    float *a = down(o1, on), *b = down(o2, on), *sa = down(S1, sn), *sb = down(S2, sn);
    CHECKF(!memcmp(a, b, on * 4) && !memcmp(sa, sb, sn * 4), "gated_delta_rule: %d tokens in one call differ from %d single steps", n, n);
    gpu->ops->free(gpu, qd), gpu->ops->free(gpu, gd), gpu->ops->free(gpu, bd), gpu->ops->free(gpu, S1);
    gpu->ops->free(gpu, S2), gpu->ops->free(gpu, o1), gpu->ops->free(gpu, o2);
    free(qkv), free(S), free(g), free(beta), free(a), free(b), free(sa), free(sb);
}

static void test_delta_steps(void) {
    test_delta_steps_exact(7);
    test_delta_steps_exact(40);
}

static void test_delta_rule(void) {
    test_delta_case(2, 4, 128, 128, 1, 1, 0);     /* decode, Qwen3.5 head sizes, ratio 2 */
    test_delta_case(2, 4, 128, 128, 6, 1, 0);     /* six decode steps */
    test_delta_case(4, 4, 64, 64, 20, 20, 0);     /* ratio 1 */
    test_delta_case(1, 4, 128, 96, 70, 70, 64);   /* ratio 4, chunk boundary at 64 */
    test_delta_case(2, 6, 128, 128, 130, 130, 64); /* ratio 3, two full chunks and a tail */
    test_delta_case(2, 2, 37, 33, 9, 4, 0);       /* odd widths, uneven calls */
    test_delta_case(1, 1, 200, 40, 17, 17, 16);   /* dk past 128: the widest register tile */
    test_delta_case(1, 2, 16, 1, 3, 3, 0);        /* one value column */
    test_delta_case(1, 2, 300, 40, 5, 3, 0);      /* dk past 256: the state stays in memory */
    test_delta_case(3, 3, 128, 128, 65, 65, 64);  /* chunk + 1 */
    test_delta_case(2, 2, 37, 33, 40, 40, 0);     /* odd widths, staged in tiles */
    test_delta_case(2, 4, 64, 128, 300, 100, 0);  /* calls of 100 tokens, tiles of 32 */
}

/* gdn_mix_rows over `rows` decode rows, each its own sequence's states
 * (scattered in one allocation, in another order than the rows), gives
 * the bits of conv1d_silu and gated_delta_rule called row by row. */
static void test_mix_rows_case(int rows, int Hk, int Hv, int dk, int dv, int K) {
    int C = 2 * Hk * dk + Hv * dv;
    size_t cn = (size_t)(K - 1) * C, sn = (size_t)Hv * dk * dv, xn = (size_t)rows * C, on = (size_t)rows * Hv * dv;
    float *qkv = rand_f32(xn, 1.0f), *w = rand_f32((size_t)C * K, 0.7f), *cs = rand_f32(cn * rows, 1.0f);
    float *ss = rand_f32(sn * rows, 0.3f), *g = malloc((size_t)rows * Hv * 4), *beta = malloc((size_t)rows * Hv * 4);
    for (int i = 0; i < rows * Hv; i++) g[i] = -1.0f - frand(), beta[i] = 0.5f + 0.5f * frand();
    float *wd = up(w, (size_t)C * K * 4), *gd = up(g, (size_t)rows * Hv * 4), *bd = up(beta, (size_t)rows * Hv * 4);
    float *x1 = up(qkv, xn * 4), *x2 = up(qkv, xn * 4), *c1 = up(cs, cn * rows * 4), *c2 = up(cs, cn * rows * 4);
    float *s1 = up(ss, sn * rows * 4), *s2 = up(ss, sn * rows * 4);
    float *o1 = gpu->ops->alloc(gpu, on * 4), *o2 = gpu->ops->alloc(gpu, on * 4);
    float *ct[64], *st[64];
    for (int r = 0; r < rows; r++) {
        int q = rows - 1 - r; /* row r's sequence keeps its states at slot q */
        ct[r] = c1 + (size_t)q * cn, st[r] = s1 + (size_t)q * sn;
    }
    bool took = gpu->ops->gdn_mix_rows(gpu, o1, x1, C, wd, K, gd, bd, ct, st, rows, Hk, Hv, dk, dv);
    CHECKF(took, "gdn_mix_rows declined %d rows (Hk=%d Hv=%d dk=%d dv=%d K=%d)", rows, Hk, Hv, dk, dv, K);
    for (int r = 0; r < rows; r++) {
        int q = rows - 1 - r;
        float *xr = x2 + (size_t)r * C;
        gpu->ops->conv1d_silu(gpu, xr, xr, 1, C, C, wd, K, c2 + (size_t)q * cn);
        gpu->ops->gated_delta_rule(gpu, o2 + (size_t)r * Hv * dv, xr, C, gd + (size_t)r * Hv, bd + (size_t)r * Hv,
                                   s2 + (size_t)q * sn, 1, Hk, Hv, dk, dv, 0);
    }
    float *a[4] = {down(o1, on), down(x1, xn), down(c1, cn * rows), down(s1, sn * rows)};
    float *b[4] = {down(o2, on), down(x2, xn), down(c2, cn * rows), down(s2, sn * rows)};
    size_t n[4] = {on, xn, cn * rows, sn * rows};
    int differ = 0;
    for (int k = 0; k < 4; k++) differ += memcmp(a[k], b[k], n[k] * 4) != 0, free(a[k]), free(b[k]);
    CHECKF(took && differ == 0, "gdn_mix_rows %d rows (Hk=%d Hv=%d dk=%d dv=%d K=%d): %d of out, conv, conv state, "
           "delta state differ from the per-row calls", rows, Hk, Hv, dk, dv, K, differ);
    float *bufs[] = {wd, gd, bd, x1, x2, c1, c2, s1, s2, o1, o2};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) gpu->ops->free(gpu, bufs[k]);
    free(qkv), free(w), free(cs), free(ss), free(g), free(beta);
}

static void test_mix_rows(void) {
    test_mix_rows_case(2, 2, 4, 128, 128, 4);  /* Qwen3.5 head sizes, two sequences */
    test_mix_rows_case(7, 1, 3, 37, 33, 3);    /* odd widths */
    test_mix_rows_case(64, 2, 2, 64, 64, 4);   /* the most rows a step records */
    test_mix_rows_case(3, 1, 2, 300, 40, 4);   /* dk past 256: the state stays in memory */
}

static void test_rmsnorm_gated(void) {
    int cases[][2] = {{1, 128}, {7, 37}, {64, 128}, {3, 1}, {2, 1000}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], n = cases[c][1];
        size_t tn = (size_t)rows * n;
        float *x = rand_f32(tn, 3.0f), *z = rand_f32(tn, 4.0f), *gain = rand_f32((size_t)n, 1.0f), *yc = malloc(tn * 4);
        float *xd = up(x, tn * 4), *zd = up(z, tn * 4), *gnd = up(gain, (size_t)n * 4);
        cpu->ops->rmsnorm_gated(cpu, yc, x, z, gain, rows, n, 1e-6f);
        gpu->ops->rmsnorm_gated(gpu, xd, xd, zd, gnd, rows, n, 1e-6f); /* in place */
        float *yg = down(xd, tn);
        double e = rel_err(yg, yc, tn);
        CHECKF(e <= 1e-6, "rmsnorm_gated rows=%d n=%d: rel err %.3g", rows, n, e);
        gpu->ops->free(gpu, xd), gpu->ops->free(gpu, zd), gpu->ops->free(gpu, gnd);
        free(x), free(z), free(gain), free(yc), free(yg);
    }
}

static void test_copy_rows(void) {
    int rows = 9, n = 13, lds = 40, ldd = 20;
    float *src = rand_f32((size_t)rows * lds, 1.0f), *dc = calloc((size_t)rows * ldd, 4);
    float *sd = up(src, (size_t)rows * lds * 4), *dd = up(dc, (size_t)rows * ldd * 4);
    cpu->ops->copy_rows(cpu, dc, ldd, src + 5, lds, rows, n);
    gpu->ops->copy_rows(gpu, dd, ldd, sd + 5, lds, rows, n);
    float *dg = down(dd, (size_t)rows * ldd);
    CHECKF(rel_err(dg, dc, (size_t)rows * ldd) == 0, "copy_rows differs");
    gpu->ops->free(gpu, sd), gpu->ops->free(gpu, dd);
    free(src), free(dc), free(dg);
}

/* copy_many: every copy lands where it should and nothing else is
 * written, for 16-byte aligned copies (the KV cache's) and unaligned ones,
 * and sizes from a few bytes to more than one block's share. */
static void test_copy_many(void) {
    size_t sizes[] = {49152, 4, 1000, 300000};
    int offs[] = {0, 0, 3, 16};
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        int n = 32;
        size_t bytes = sizes[c], slot = bytes + 64, total = slot * (size_t)n * 2;
        float *h = rand_f32(total / 4 + 1, 1.0f);
        char *d = up(h, total);
        void *to[32];
        const void *from[32];
        for (int i = 0; i < n; i++) { /* copy i: slot 2i+1 <- slot (2i + 2) % 2n, at an offset */
            to[i] = d + (size_t)(2 * i + 1) * slot + offs[c];
            from[i] = d + (size_t)((2 * i + 2) % (2 * n)) * slot + offs[c];
        }
        gpu->ops->copy_many(gpu, n, to, from, bytes);
        char *want = malloc(total), *got = (char *)down(d, total / 4);
        memcpy(want, h, total);
        for (int i = 0; i < n; i++)
            memcpy(want + (size_t)(2 * i + 1) * slot + offs[c], (char *)h + (size_t)((2 * i + 2) % (2 * n)) * slot + offs[c],
                   bytes);
        CHECKF(!memcmp(want, got, total / 4 * 4), "copy_many of %zu bytes (offset %d) differs", bytes, offs[c]);
        gpu->ops->free(gpu, d);
        free(h), free(want), free(got);
    }
}

/* The greedy choice per row, and its value, equal the CPU's: rows of a
 * vocabulary's width and odd ones, strided rows (a rank's columns), ties
 * across threads' shares, NaN, all -inf, all NaN. */
static void test_argmax_rows(void) {
    int shapes[][3] = {{1, 128256, 128256}, {64, 32000, 32000}, {5, 33, 40}, {3, 1, 1}, {7, 1025, 2048}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int rows = shapes[c][0], n = shapes[c][1], ld = shapes[c][2];
        size_t tot = (size_t)rows * ld;
        float *x = rand_f32(tot, 4.0f);
        for (size_t i = 0; i < tot; i += 97) x[i] = NAN;
        for (int r = 0; r < rows; r++) {
            float *row = x + (size_t)r * ld;
            for (int i = n; i < ld; i++) row[i] = 100.0f; /* outside the row: never chosen */
            if (r % 3 == 1) row[n - 1] = row[n / 2] = row[n / 3] = 9.0f; /* a tie: the lowest index wins */
            if (r == 2) for (int i = 0; i < n; i++) row[i] = -INFINITY;
            if (r == 4) for (int i = 0; i < n; i++) row[i] = NAN;
        }
        int32_t *want = malloc((size_t)rows * 4), *got = malloc((size_t)rows * 4);
        float *wv = malloc((size_t)rows * 4), *gv = malloc((size_t)rows * 4);
        cpu->ops->argmax_rows(cpu, want, wv, x, rows, n, ld);
        float *xd = up(x, tot * 4);
        int32_t *od = gpu->ops->alloc(gpu, (size_t)rows * 4);
        float *vd = gpu->ops->alloc(gpu, (size_t)rows * 4);
        gpu->ops->argmax_rows(gpu, od, vd, xd, rows, n, ld);
        REQUIRE(gpu->ops->download(gpu, got, od, (size_t)rows * 4) == EM_OK);
        REQUIRE(gpu->ops->download(gpu, gv, vd, (size_t)rows * 4) == EM_OK);
        int diff = 0;
        for (int r = 0; r < rows; r++)
            diff += got[r] != want[r] || !(gv[r] == wv[r] || (gv[r] != gv[r] && wv[r] != wv[r]));
        CHECKF(diff == 0, "argmax_rows %dx%d (ld %d): %d rows differ (row 0: %d vs %d)", rows, n, ld, diff, got[0],
               want[0]);
        gpu->ops->free(gpu, xd), gpu->ops->free(gpu, od), gpu->ops->free(gpu, vd);
        free(x), free(want), free(got), free(wv), free(gv);
    }
}

/* sample_rows against the host sampler (engine/sampler.c) with the same
 * uniform: each row gets a seeded sampler, a copy of whose generator draws
 * the u handed to the device, so the host's pick consumes the same u. Flat
 * and peaked rows, ties, vocabularies around 2^17, a row stride, every
 * truncation and the greedy forms. The draws must be the host's. */
static void test_sample_rows(void) {
    const em_sampling P[] = {
        {.temperature = 0.7f, .top_p = 0.9f},
        {.temperature = 1.0f, .top_p = 0.95f, .top_k = 50},
        {.temperature = 0.7f, .top_p = 1.0f, .top_k = 40},
        {.temperature = 1.0f, .top_p = 1.0f},
        {.temperature = 0.8f, .top_p = 1.0f, .min_p = 0.05f},
        {.temperature = 1.0f, .top_p = 0.5f, .min_p = 0.1f},
        {.temperature = 1.5f, .top_p = 1.0f, .top_k = 5000},
        {.temperature = 0.3f, .top_p = 0.99f},
        {.temperature = 0.0f, .top_p = 1.0f},
        {.temperature = 1.0f, .top_p = 1.0f, .top_k = 1},
    };
    const int np = (int)(sizeof P / sizeof *P);
    struct { int n, ld; float scale; } shapes[] = {{128256, 128256, 4.0f}, {32000, 32007, 20.0f}, {151936, 151936, 2.0f},
                                                   {1000, 1000, 3.0f}, {7, 7, 1.0f}};
    int draws = 0, diff = 0;
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int n = shapes[c].n, ld = shapes[c].ld, rows = 2 * np;
        size_t tot = (size_t)rows * ld;
        float *x = rand_f32(tot, shapes[c].scale);
        for (int r = 0; r < rows; r++) {
            float *row = x + (size_t)r * ld;
            for (int i = n; i < ld; i++) row[i] = 100.0f; /* outside the row: never chosen */
            if (r % 4 == 1) /* ties at the top and in the middle: the lower id first */
                for (int i = 0; i < n; i += 3) row[i] = row[i / 2 * 2] > 0 ? shapes[c].scale : 0.0f;
        }
        for (int rep = 0; rep < 3; rep++) {
            sampler *smp = calloc((size_t)rows, sizeof *smp);
            em_sample_params *sp = calloc((size_t)rows, sizeof *sp);
            for (int r = 0; r < rows; r++) {
                em_sampling p = P[r % np];
                p.seed = 1000u * (unsigned)c + 10u * (unsigned)rep + (unsigned)r;
                p.has_seed = 1;
                p.repetition_penalty = 1.0f;
                REQUIRE(sampler_init(&smp[r], &p, n) == EM_OK);
                sampler copy = smp[r];
                sp[r] = (em_sample_params){.u = sampler_uniform(&copy), .temperature = p.temperature,
                                           .top_p = p.top_p, .min_p = p.min_p, .top_k = p.top_k};
            }
            float *xd = up(x, tot * 4);
            int32_t *od = gpu->ops->alloc(gpu, (size_t)rows * 4), *got = malloc((size_t)rows * 4);
            gpu->ops->sample_rows(gpu, od, xd, rows, n, ld, sp);
            REQUIRE(gpu->ops->download(gpu, got, od, (size_t)rows * 4) == EM_OK);
            for (int r = 0; r < rows; r++) {
                em_token_info info;
                int32_t want = sampler_pick(&smp[r], x + (size_t)r * ld, 0, false, &info);
                draws++;
                if (got[r] != want) {
                    diff++;
                    fprintf(stderr, "   n %d row %d (T %.2f, top-k %d, top-p %.2f, min-p %.2f, u %.9f): device %d, host %d\n",
                            n, r, sp[r].temperature, sp[r].top_k, sp[r].top_p, sp[r].min_p, sp[r].u, got[r], want);
                }
                sampler_free(&smp[r]);
            }
            gpu->ops->free(gpu, xd), gpu->ops->free(gpu, od);
            free(got), free(smp), free(sp);
        }
        free(x);
    }
    CHECKF(diff == 0, "sample_rows: %d of %d draws differ from the host sampler's", diff, draws);
}

/* A sequence of `len` positions in scattered blocks of a pool, written by
 * kv_write in two parts (a prefill, then single decode rows), then attended
 * by `nq` query rows at the end; CPU and GPU pools get the same layout. */
static void test_attention_case(int n_heads, int n_kv, int hd, int len, int nq, int window) {
    const int bs = 32, pool_blocks = (len + bs - 1) / bs + 3;
    size_t row = (size_t)n_kv * hd, block = (size_t)bs * row;
    float *kpool_c = calloc((size_t)pool_blocks * block, 4), *vpool_c = calloc((size_t)pool_blocks * block, 4);
    float *kpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    float *vpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    REQUIRE(kpool_g && vpool_g);
    int nb = (len + bs - 1) / bs;
    float **kc = malloc((size_t)nb * sizeof *kc), **vc = malloc((size_t)nb * sizeof *vc);
    float **kg = malloc((size_t)nb * sizeof *kg), **vg = malloc((size_t)nb * sizeof *vg);
    for (int b = 0; b < nb; b++) { /* blocks in reverse pool order */
        size_t at = (size_t)(pool_blocks - 1 - b) * block;
        kc[b] = kpool_c + at, vc[b] = vpool_c + at, kg[b] = kpool_g + at, vg[b] = vpool_g + at;
    }
    em_kv_view vc_ = {kc, vc, bs, nb}, vg_ = {kg, vg, bs, nb};
    float *k = rand_f32((size_t)len * row, 1.0f), *v = rand_f32((size_t)len * row, 1.0f);
    int32_t *pos = malloc((size_t)len * 4);
    for (int i = 0; i < len; i++) pos[i] = i;
    float *kd = up(k, (size_t)len * row * 4), *vd = up(v, (size_t)len * row * 4);
    int pre = len - nq > 0 ? len - nq : 0;
    if (pre) {
        cpu->ops->kv_write(cpu, &vc_, k, v, pos, pre, n_kv, hd);
        gpu->ops->kv_write(gpu, &vg_, kd, vd, pos, pre, n_kv, hd);
    }
    for (int i = pre; i < len; i++) {
        cpu->ops->kv_write(cpu, &vc_, k + (size_t)i * row, v + (size_t)i * row, pos + i, 1, n_kv, hd);
        gpu->ops->kv_write(gpu, &vg_, kd + (size_t)i * row, vd + (size_t)i * row, pos + i, 1, n_kv, hd);
    }
    size_t qn = (size_t)nq * n_heads * hd;
    float *q = rand_f32(qn, 1.0f), *oc = malloc(qn * 4);
    float *qd = up(q, qn * 4), *od = gpu->ops->alloc(gpu, qn * 4);
    float scale = 1.0f / sqrtf((float)hd);
    cpu->ops->attention(cpu, oc, q, &vc_, pos + (len - nq), nq, n_heads, n_kv, hd, scale, window);
    gpu->ops->attention(gpu, od, qd, &vg_, pos + (len - nq), nq, n_heads, n_kv, hd, scale, window);
    float *og = down(od, qn);
    double e = rel_err(og, oc, qn);
    CHECKF(e <= 1e-5, "attention heads=%d kv=%d hd=%d len=%d rows=%d window=%d: rel err %.3g", n_heads, n_kv, hd, len,
           nq, window, e);
    /* the cache itself: the last block's bytes */
    float *kb = down(kg[nb - 1], block);
    CHECKF(rel_err(kb, kc[nb - 1], (size_t)((len - 1) % bs + 1) * row) == 0, "kv_write differs");
    gpu->ops->release(gpu, kpool_g, 0), gpu->ops->release(gpu, vpool_g, 0);
    gpu->ops->free(gpu, kd), gpu->ops->free(gpu, vd), gpu->ops->free(gpu, qd), gpu->ops->free(gpu, od);
    free(kpool_c), free(vpool_c), free(kc), free(vc), free(kg), free(vg), free(k), free(v), free(pos), free(q);
    free(oc), free(og), free(kb);
}

static void test_attention(void) {
    test_attention_case(4, 2, 64, 1, 1, 0);      /* first token */
    test_attention_case(8, 2, 64, 45, 45, 0);    /* prefill, GQA 4 */
    test_attention_case(8, 8, 48, 70, 1, 0);     /* decode, MHA, odd-ish head_dim */
    test_attention_case(4, 1, 128, 300, 5, 0);   /* several key tiles */
    test_attention_case(6, 3, 36, 200, 20, 17);  /* sliding window, head_dim not /8 */
    test_attention_case(2, 2, 256, 129, 2, 0);   /* 2 dims per thread */
    test_attention_case(2, 1, 37, 33, 3, 0);     /* head_dim not /4: scalar path */
    test_attention_case(8, 2, 128, 400, 200, 0); /* one sequence, tiled path */
    test_attention_case(4, 4, 64, 97, 97, 31);   /* tiled path, window, whole prompt */
    test_attention_case(8, 1, 32, 150, 3, 0);    /* GQA 8, head_dim 32 */
    test_attention_case(4, 4, 32, 60, 1, 20);    /* MHA, head_dim 32, window */
    test_attention_case(32, 8, 64, 700, 1, 0);   /* Llama-3.2-1B decode, long context */
    test_attention_case(32, 8, 128, 9, 2, 0);    /* Llama-3.1-8B shape, fewer keys than a block's slots */
    test_attention_case(32, 8, 64, 2054, 7, 0);  /* a cached prompt's 7-row tail: each split longer than its prefetch ring */
    test_attention_case(16, 2, 128, 1500, 3, 0); /* GQA 8, head_dim 128, long context */
}

/* One sequence of a batch: `prior` tokens already cached, `rows` new ones. */
typedef struct span_case {
    int prior, rows;
} span_case;

/* A batch of several sequences, each with its own block table over one
 * shared pool (blocks interleaved between the sequences, in no order), is
 * written and attended in one kv_write_spans / attention_spans call on the
 * GPU and span by span on the CPU. More than 64 rows in all take the tiled
 * path. Also checks that a second run gives the same bits. */
static void test_attention_spans_case(int n_heads, int n_kv, int hd, int window, const span_case *sc, int n_spans) {
    const int bs = 16;
    size_t row = (size_t)n_kv * hd, block = (size_t)bs * row, qrow = (size_t)n_heads * hd;
    int total_blocks = 0, n = 0;
    for (int i = 0; i < n_spans; i++) {
        total_blocks += (sc[i].prior + sc[i].rows + bs - 1) / bs;
        n += sc[i].rows;
    }
    int pool_blocks = total_blocks + 2;
    float *kpool_c = calloc((size_t)pool_blocks * block, 4), *vpool_c = calloc((size_t)pool_blocks * block, 4);
    float *kpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    float *vpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    REQUIRE(kpool_c && vpool_c && kpool_g && vpool_g);
    em_kv_view *views_c = calloc((size_t)n_spans, sizeof *views_c), *views_g = calloc((size_t)n_spans, sizeof *views_g);
    float ***tables = calloc((size_t)n_spans * 4, sizeof *tables);
    int *rows = malloc((size_t)n_spans * sizeof *rows);
    int32_t *pos = malloc((size_t)n * 4);
    float *k = rand_f32((size_t)n * row, 1.0f), *v = rand_f32((size_t)n * row, 1.0f);
    float *kd = up(k, (size_t)n * row * 4), *vd = up(v, (size_t)n * row * 4);
    /* the sequences' blocks in pool slots scrambled by a prime stride (coprime to the pool's size) */
    for (int i = 0, r = 0, slot = 0; i < n_spans; i++) {
        int len = sc[i].prior + sc[i].rows, nb = (len + bs - 1) / bs;
        for (int t = 0; t < 4; t++) tables[4 * i + t] = malloc((size_t)nb * sizeof(float *));
        for (int b = 0; b < nb; b++, slot++) {
            size_t at = (size_t)(((long long)slot * 1000003) % pool_blocks) * block;
            tables[4 * i][b] = kpool_c + at, tables[4 * i + 1][b] = vpool_c + at;
            tables[4 * i + 2][b] = kpool_g + at, tables[4 * i + 3][b] = vpool_g + at;
        }
        views_c[i] = (em_kv_view){tables[4 * i], tables[4 * i + 1], bs, nb};
        views_g[i] = (em_kv_view){tables[4 * i + 2], tables[4 * i + 3], bs, nb};
        if (sc[i].prior) { /* the earlier tokens, as an earlier step wrote them */
            float *pk = rand_f32((size_t)sc[i].prior * row, 1.0f), *pv = rand_f32((size_t)sc[i].prior * row, 1.0f);
            int32_t *pp = malloc((size_t)sc[i].prior * 4);
            for (int j = 0; j < sc[i].prior; j++) pp[j] = j;
            float *pkd = up(pk, (size_t)sc[i].prior * row * 4), *pvd = up(pv, (size_t)sc[i].prior * row * 4);
            cpu->ops->kv_write(cpu, &views_c[i], pk, pv, pp, sc[i].prior, n_kv, hd);
            gpu->ops->kv_write(gpu, &views_g[i], pkd, pvd, pp, sc[i].prior, n_kv, hd);
            float sync;
            REQUIRE(gpu->ops->download(gpu, &sync, pkd, sizeof sync) == EM_OK);
            gpu->ops->free(gpu, pkd), gpu->ops->free(gpu, pvd);
            free(pk), free(pv), free(pp);
        }
        rows[i] = sc[i].rows;
        for (int j = 0; j < sc[i].rows; j++) pos[r++] = sc[i].prior + j;
    }
    em_kv_spans sg = {views_g, rows, n_spans, EM_MATH_EXACT, 0};
    gpu->ops->kv_write_spans(gpu, &sg, kd, vd, pos, n_kv, hd);
    size_t qn = (size_t)n * qrow;
    float *q = rand_f32(qn, 1.0f), *oc = malloc(qn * 4);
    float *qd = up(q, qn * 4), *od = gpu->ops->alloc(gpu, qn * 4), *od2 = gpu->ops->alloc(gpu, qn * 4);
    float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0, r = 0; i < n_spans; r += rows[i++]) {
        cpu->ops->kv_write(cpu, &views_c[i], k + (size_t)r * row, v + (size_t)r * row, pos + r, rows[i], n_kv, hd);
        cpu->ops->attention(cpu, oc + (size_t)r * qrow, q + (size_t)r * qrow, &views_c[i], pos + r, rows[i], n_heads,
                            n_kv, hd, scale, window);
    }
    gpu->ops->attention_spans(gpu, od, qd, &sg, pos, n_heads, n_kv, hd, scale, window);
    gpu->ops->attention_spans(gpu, od2, qd, &sg, pos, n_heads, n_kv, hd, scale, window);
    float *og = down(od, qn), *og2 = down(od2, qn);
    double e = rel_err(og, oc, qn);
    CHECKF(e <= 1e-5, "attention spans=%d rows=%d heads=%d kv=%d hd=%d window=%d: rel err %.3g", n_spans, n, n_heads,
           n_kv, hd, window, e);
    /* per row too, looser (rows of many keys have small outputs): a wrong
     * row of small values must not hide behind the batch's large ones */
    double worst = 0;
    for (int r = 0; r < n; r++) {
        double er = rel_err(og + (size_t)r * qrow, oc + (size_t)r * qrow, qrow);
        if (er > worst || er != er) worst = er != er ? INFINITY : er;
    }
    CHECKF(worst <= 1e-4, "attention spans=%d rows=%d hd=%d window=%d: worst row rel err %.3g", n_spans, n, hd, window,
           worst);
    CHECKF(memcmp(og, og2, qn * 4) == 0, "attention spans=%d rows=%d hd=%d: two runs differ", n_spans, n, hd);
    /* FAST may round queries, keys, values and weights to bf16 (tensor
     * cores for the tiled path): within bf16's reach, and reproducible */
    em_kv_spans sf = sg;
    sf.math = EM_MATH_FAST;
    gpu->ops->attention_spans(gpu, od, qd, &sf, pos, n_heads, n_kv, hd, scale, window);
    gpu->ops->attention_spans(gpu, od2, qd, &sf, pos, n_heads, n_kv, hd, scale, window);
    float *of = down(od, qn), *of2 = down(od2, qn);
    double ef = rel_err(of, oc, qn), worst_f = 0;
    for (int r = 0; r < n; r++) {
        double er = rel_err(of + (size_t)r * qrow, oc + (size_t)r * qrow, qrow);
        if (er > worst_f || er != er) worst_f = er != er ? INFINITY : er;
    }
    CHECKF(ef <= 1e-2 && worst_f <= 3e-2, "attention FAST spans=%d rows=%d hd=%d window=%d: rel err %.3g, worst row %.3g",
           n_spans, n, hd, window, ef, worst_f);
    CHECKF(memcmp(of, of2, qn * 4) == 0, "attention FAST spans=%d rows=%d hd=%d: two runs differ", n_spans, n, hd);
    free(of), free(of2);
    gpu->ops->release(gpu, kpool_g, 0), gpu->ops->release(gpu, vpool_g, 0);
    gpu->ops->free(gpu, kd), gpu->ops->free(gpu, vd), gpu->ops->free(gpu, qd);
    gpu->ops->free(gpu, od), gpu->ops->free(gpu, od2);
    for (int t = 0; t < n_spans * 4; t++) free(tables[t]);
    free(tables), free(views_c), free(views_g), free(rows), free(pos), free(k), free(v), free(q), free(oc);
    free(og), free(og2), free(kpool_c), free(vpool_c);
}

#define SPANS(...) (const span_case[]){__VA_ARGS__}, (int)(sizeof((span_case[]){__VA_ARGS__}) / sizeof(span_case))

static void test_attention_prefill(void) {
    /* GQA 1, 4, 8 at head_dim 64, 128, 256; spans of different lengths and starts */
    test_attention_spans_case(8, 8, 64, 0, SPANS({0, 70}, {37, 5}, {300, 120}));
    test_attention_spans_case(8, 2, 128, 0, SPANS({100, 200}, {0, 65}));
    test_attention_spans_case(16, 2, 64, 0, SPANS({0, 300}, {10, 1}, {500, 200}, {3, 99}));
    test_attention_spans_case(4, 1, 256, 0, SPANS({20, 90}, {0, 40}));
    test_attention_spans_case(32, 8, 64, 0, SPANS({0, 512}));               /* Llama-3.2-1B shape */
    test_attention_spans_case(8, 8, 128, 0, SPANS({5, 65}));                 /* smallest tiled batch */
    test_attention_spans_case(8, 1, 256, 0, SPANS({0, 130}, {64, 70}));
    /* sliding windows: shorter than a key tile, longer than the prompt */
    test_attention_spans_case(8, 1, 256, 50, SPANS({64, 130}));
    test_attention_spans_case(8, 2, 64, 33, SPANS({0, 150}, {200, 80}));
    test_attention_spans_case(4, 4, 128, 100, SPANS({7, 65}, {0, 3}));
    test_attention_spans_case(8, 2, 64, 4096, SPANS({40, 200}));
    /* head dims between specialisations, odd groups, a group of 16 */
    test_attention_spans_case(6, 2, 80, 0, SPANS({5, 70}, {0, 33}));
    test_attention_spans_case(4, 2, 37, 0, SPANS({0, 66}));                  /* not a multiple of 4: scalar loads */
    test_attention_spans_case(6, 2, 200, 17, SPANS({30, 100}));
    test_attention_spans_case(32, 2, 64, 0, SPANS({0, 90}, {77, 30}));
    /* short chunks of long sequences: few tiles, so their keys are split over
     * several blocks and merged (on GPUs of more multiprocessors than blocks) */
    test_attention_spans_case(8, 2, 64, 0, SPANS({3000, 70}));
    test_attention_spans_case(4, 4, 128, 1500, SPANS({2500, 80}));
    test_attention_spans_case(8, 1, 256, 0, SPANS({1500, 40}, {10, 1}));
    /* a cached prompt's tail: 2 to 15 rows of one sequence (FAST: on tensor
     * cores, each tile's keys in 16 shares, some of them empty when the keys
     * are fewer; EXACT: the per-row kernel) */
    test_attention_spans_case(32, 8, 64, 0, SPANS({2040, 7}));   /* Llama-3.2-1B shape */
    test_attention_spans_case(8, 2, 128, 0, SPANS({100, 2}));
    test_attention_spans_case(4, 4, 64, 0, SPANS({0, 15}));      /* fewer keys than shares */
    test_attention_spans_case(8, 2, 64, 40, SPANS({300, 9}));    /* a window */
    test_attention_spans_case(64, 2, 128, 0, SPANS({50, 5}));    /* 32 heads a group: two tiles */
    /* many decode rows in one large batch: the per-row kernel over a row map,
     * with splits (few such rows) and without (more than 64) */
    span_case many[71];
    for (int i = 0; i < 70; i++) many[i] = (span_case){(i * 37) % 300, 1 + (i % 3 == 0)};
    many[70] = (span_case){50, 100};
    test_attention_spans_case(8, 2, 64, 0, many, 71);
    test_attention_spans_case(4, 4, 128, 20, many + 40, 31);
    test_attention_spans_case(8, 2, 64, 0, many, 60);
    /* few rows: the split (decode) path over several spans */
    test_attention_spans_case(8, 2, 128, 0, SPANS({100, 1}, {0, 1}, {33, 1}, {400, 1}));
    test_attention_spans_case(8, 2, 64, 0, SPANS({10, 20}, {0, 44}));
}

int main(void) {
    if (cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    REQUIRE(cpu_backend_create(2, &cpu) == EM_OK);
    REQUIRE(cuda_backend_create(0, &gpu) == EM_OK);
    fprintf(stderr, "comparing %s against %s\n", gpu->desc, cpu->desc);
    RUN(test_graph_scratch_growth);
    RUN(test_matmul);
    RUN(test_matmul_batch_invariance);
    RUN(test_matmul_skinny);
    RUN(test_add_rmsnorm);
    RUN(test_rmsnorm);
    RUN(test_hadamard);
    RUN(test_rope);
    RUN(test_elementwise);
    RUN(test_embed);
    RUN(test_attention);
    RUN(test_attention_prefill);
    RUN(test_qmatmul);
    RUN(test_qmatmul_int8);
    RUN(test_qtc_share);
    RUN(test_matmul_group);
    RUN(test_qgemv_rows_independent);
    RUN(test_qembed);
    RUN(test_sigmoid_mul);
    RUN(test_conv);
    RUN(test_gdn_gates);
    RUN(test_delta_rule);
    RUN(test_delta_steps);
    RUN(test_mix_rows);
    RUN(test_rmsnorm_gated);
    RUN(test_copy_rows);
    RUN(test_copy_many);
    RUN(test_argmax_rows);
    RUN(test_sample_rows);
    em_backend_free(gpu);
    em_backend_free(cpu);
    return test_summary();
}
#endif
