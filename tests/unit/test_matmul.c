/* CPU matmul: every kernel table (portable, AVX2, AVX-512) and dtype against
 * a double-precision reference, on shapes with ragged edges; FAST (bf16
 * activations) within bf16 rounding. Where the CPU has AMX, FAST products
 * of 16+ rows on its tiles are also checked against the AVX-512 dot
 * products: the same bf16 products summed in f32 in another order. Each
 * table's f32 -> bf16 rounding gives the portable rounding's bits. */
#include "test.h"

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/timer.h"
#include "backend/cpu/membw.h"

#include <stdint.h>

static uint64_t rs = 12345;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
}

/* A table's f32 -> bf16 rounding gives f32_to_bf16's bits: ties both ways,
 * subnormals, infinities, NaNs (signalling ones come back quiet), every
 * length's tail, and a million random bit patterns. */
static void check_to_bf16(const cpu_kernels *k) {
    enum { N = 1 << 20 };
    uint32_t special[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00008000, 0x00018000, 0x3f808000,
                          0x3f818000, 0x3f807fff, 0x7f7fffff, 0xff7f8000, 0x7f800000, 0xff800000, 0x7f800001,
                          0x7fc00000, 0xffbfffff, 0x7fffffff, 0x00800000};
    uint32_t *u = malloc(N * 4);
    uint16_t *got = malloc(N * 2);
    int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < N; i++) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        u[i] = i < ns ? special[i] : (uint32_t)(rs >> 17);
    }
    int bad = 0;
    for (size_t n = 0; n <= 40; n++) { /* every tail length, from a misaligned start */
        k->to_bf16(got, (const float *)(u + 1), n);
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, &u[1 + i], 4);
            bad += got[i] != f32_to_bf16(f);
        }
    }
    k->to_bf16(got, (const float *)u, N);
    for (int i = 0; i < N; i++) {
        float f;
        memcpy(&f, &u[i], 4);
        if (got[i] != f32_to_bf16(f) && bad++ < 3)
            fprintf(stderr, "  %s to_bf16(0x%08x) = 0x%04x, expected 0x%04x\n", k->isa, u[i], got[i], f32_to_bf16(f));
    }
    CHECKF(bad == 0, "%s to_bf16: %d values differ from f32_to_bf16", k->isa, bad);
    free(u), free(got);
}

static void check_shape(em_backend *be, int M, int N, int K, em_dtype dt, em_math math) {
    float *x = malloc(sizeof(float) * M * K), *y = malloc(sizeof(float) * M * N), *bias = malloc(sizeof(float) * N);
    void *w = malloc((size_t)N * K * 4);
    float *wf = malloc(sizeof(float) * N * K);
    for (int i = 0; i < M * K; i++) x[i] = frand();
    for (int i = 0; i < N; i++) bias[i] = frand();
    for (int i = 0; i < N * K; i++) {
        float v = frand();
        if (dt == EM_BF16) { ((uint16_t *)w)[i] = f32_to_bf16(v); wf[i] = bf16_to_f32(((uint16_t *)w)[i]); }
        else if (dt == EM_F16) { ((uint16_t *)w)[i] = f32_to_f16(v); wf[i] = f16_to_f32(((uint16_t *)w)[i]); }
        else { ((float *)w)[i] = v; wf[i] = v; }
    }
    em_weight wt = {.dtype = dt, .rows = N, .cols = K, .data = w};
    be->ops->matmul(be, y, x, M, &wt, bias, math);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = bias[n];
            for (int k = 0; k < K; k++) ref += (double)x[m * K + k] * wf[n * K + k];
            double err = fabs(ref - y[m * N + n]);
            if (err > worst) worst = err;
        }
    double tol = math == EM_MATH_FAST ? 0.02 * sqrt(K) : 1e-5 * sqrt(K) * 4;
    CHECKF(worst <= tol, "M=%d N=%d K=%d dtype=%s math=%d err=%g", M, N, K, dtype_name(dt), (int)math, worst);
    free(x); free(y); free(bias); free(w); free(wf);
}

static void bench(em_backend *be, em_math math) {
    int M = 128, N = 2048, K = 2048;
    float *x = calloc((size_t)M * K, 4), *y = calloc((size_t)M * N, 4);
    uint16_t *w = calloc((size_t)N * K, 2);
    for (int i = 0; i < N * K; i++) w[i] = f32_to_bf16(frand());
    for (int i = 0; i < M * K; i++) x[i] = frand();
    em_weight wt = {.dtype = EM_BF16, .rows = N, .cols = K, .data = w};
    be->ops->matmul(be, y, x, M, &wt, NULL, math);
    double t0 = em_now();
    for (int r = 0; r < 5; r++) be->ops->matmul(be, y, x, M, &wt, NULL, math);
    double dt = (em_now() - t0) / 5;
    fprintf(stderr, "  %s %s: %.1f GFLOP/s (M=%d N=%d K=%d)\n", ((cpu_backend *)be->impl)->k->isa,
            math == EM_MATH_FAST ? "fast" : "exact", 2.0 * M * N * K / dt / 1e9, M, N, K);
    free(x); free(y); free(w);
}

/* FAST bf16 on AMX tiles against the AVX-512 tile kernel over the same
 * bf16 activations: each output within f32 summation error of the other
 * (2^-18 of sum |x*w|), bias included. */
static void check_amx(em_backend *be, int M, int N, int K) {
    cpu_backend *cb = be->impl;
    float *x = malloc(sizeof(float) * M * K), *ya = malloc(sizeof(float) * M * N), *yt = malloc(sizeof(float) * M * N);
    float *bias = malloc(sizeof(float) * N);
    uint16_t *w = malloc((size_t)N * K * 2);
    for (int i = 0; i < M * K; i++) x[i] = frand() * 4;
    for (int i = 0; i < N; i++) bias[i] = frand();
    for (int i = 0; i < N * K; i++) w[i] = f32_to_bf16(frand());
    em_weight wt = {.dtype = EM_BF16, .rows = N, .cols = K, .data = w};
    cb->amx = true;
    be->ops->matmul(be, ya, x, M, &wt, bias, EM_MATH_FAST);
    cb->amx = false;
    be->ops->matmul(be, yt, x, M, &wt, bias, EM_MATH_FAST);
    cb->amx = true;
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double mag = fabs(bias[n]);
            for (int k = 0; k < K; k++) mag += fabs((double)x[m * K + k] * bf16_to_f32(w[n * K + k]));
            bad += !(fabs((double)ya[m * N + n] - yt[m * N + n]) <= mag * 0x1p-18 + 1e-30);
        }
    CHECKF(bad == 0, "AMX M=%d N=%d K=%d: %d outputs differ from the AVX-512 tiles beyond summation error", M, N, K,
           bad);
    free(x); free(ya); free(yt); free(bias); free(w);
}

/* The roofline probe reads a real rate from its own buffer (huge pages
 * where granted), and a size below its unit reads nothing. */
static void check_probe(void) {
    em_pool *pool = em_pool_create(2);
    REQUIRE(pool != NULL);
    double bw = cpu_read_bandwidth(pool, (size_t)64 << 20);
    CHECKF(bw > 1e8 && bw < 1e13, "probe of 64 MB: %.3g B/s", bw);
    CHECKF(cpu_read_bandwidth(pool, 1000) == 0, "probe of 1000 bytes: %.3g B/s", cpu_read_bandwidth(pool, 1000));
    em_pool_free(pool);
}

/* Decode-shaped GEMV over more weights than the caches hold: bytes/s. */
static void bench_gemv(em_backend *be) {
    enum { NMAT = 8, N = 8192, K = 2048 };
    uint16_t *w[NMAT];
    for (int i = 0; i < NMAT; i++) {
        w[i] = malloc((size_t)N * K * 2);
        for (size_t k = 0; k < (size_t)N * K; k++) w[i][k] = (uint16_t)(0x3c00 + (k & 0xff));
    }
    float *x = calloc(K, 4), *y = calloc(N, 4);
    for (int k = 0; k < K; k++) x[k] = frand();
    double t0 = em_now();
    int reps = 4;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < NMAT; i++) {
            em_weight wt = {.dtype = EM_BF16, .rows = N, .cols = K, .data = w[i]};
            be->ops->matmul(be, y, x, 1, &wt, NULL, EM_MATH_EXACT);
        }
    double dt = em_now() - t0;
    fprintf(stderr, "  %s gemv: %.1f GB/s of bf16 weights\n", ((cpu_backend *)be->impl)->k->isa,
            (double)reps * NMAT * N * K * 2 / dt / 1e9);
    for (int i = 0; i < NMAT; i++) free(w[i]);
    free(x);
    free(y);
}

int main(void) {
    const cpu_kernels *tables[] = {cpu_kernels_ref(), cpu_kernels_avx2(), cpu_kernels_avx512(),
                                   cpu_kernels_avx512_vnni()};
    const cpu_features *f = cpu_get_features();
    bool avx512 = f->avx512f && f->avx512bw && f->avx512vl && f->avx512bf16;
    bool usable[] = {true, f->avx2_fma, avx512, avx512 && f->avx512vnni};
    em_backend *be;
    REQUIRE(cpu_backend_create(getenv("EMBER_BENCH_THREADS") ? atoi(getenv("EMBER_BENCH_THREADS")) : 2, &be) == EM_OK);
    int shapes[][3] = {{1, 7, 5}, {1, 64, 100}, {3, 33, 70}, {4, 4, 16}, {5, 13, 257}, {17, 9, 33}, {20, 64, 64}, {33, 21, 130}};
    em_dtype dts[] = {EM_BF16, EM_F16, EM_F32};
    for (int t = 0; t < 4; t++) {
        if (!tables[t] || !usable[t]) continue;
        ((cpu_backend *)be->impl)->k = tables[t];
        ((cpu_backend *)be->impl)->amx = false; /* each table's own kernels */
        check_to_bf16(tables[t]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int d = 0; d < 3; d++) {
                check_shape(be, shapes[s][0], shapes[s][1], shapes[s][2], dts[d], EM_MATH_EXACT);
                check_shape(be, shapes[s][0], shapes[s][1], shapes[s][2], dts[d], EM_MATH_FAST);
            }
        if (getenv("EMBER_BENCH")) { bench(be, EM_MATH_EXACT); bench(be, EM_MATH_FAST); bench_gemv(be); }
    }
    if (f->amx) { /* with the AVX-512 table, as the backend pairs them */
        cpu_backend *cb = be->impl;
        cb->k = cpu_kernels_avx512();
        int amx_shapes[][3] = {{16, 32, 32}, {17, 33, 64}, {31, 64, 96}, {33, 21, 160}, {40, 70, 2048}, {64, 100, 128},
                               {100, 129, 256}};
        for (size_t s = 0; s < sizeof amx_shapes / sizeof amx_shapes[0]; s++) {
            check_amx(be, amx_shapes[s][0], amx_shapes[s][1], amx_shapes[s][2]);
            check_shape(be, amx_shapes[s][0], amx_shapes[s][1], amx_shapes[s][2], EM_BF16, EM_MATH_FAST);
        }
        if (getenv("EMBER_BENCH")) bench(be, EM_MATH_FAST);
    } else {
        fprintf(stderr, "no AMX tiles on this CPU: their checks skipped\n");
    }
    check_probe();
    cpu_backend_free(be);
    return test_summary();
}
