/* Hadamard rotations: H·Hᵀ = n·I for every construction (Sylvester; 12·2^k,
 * 20·2^k and the two-factor 144·2^k, 240·2^k, 400·2^k Paley products); Q = D·H/√n orthogonal (QᵀQ = I, and x·Q·Qᵀ = x);
 * the fast transform equals the dense product; unsupported orders refused;
 * the same seed gives the same signs; the plain transform (the online
 * rotation) is H/√n, and the CPU backend's hadamard operation gives
 * hadamard_right's bits row by row. */
#include "test.h"

#include "backend/backend.h"
#include "tensor/hadamard.h"

#include <stdint.h>

static void check_order(int64_t n_in) {
    size_t n = (size_t)n_in;
    REQUIRE(n >= 1 && n <= 1024);
    hadamard h;
    REQUIRE(hadamard_make(n_in, 42, 1, "test", &h) == EM_OK);
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            long dot = 0;
            for (size_t k = 0; k < n; k++) dot += hadamard_entry(&h, (int64_t)i, (int64_t)k) * hadamard_entry(&h, (int64_t)j, (int64_t)k);
            bad += dot != (i == j ? (long)n : 0);
        }
    CHECKF(bad == 0, "order %lld: H Ht != nI in %ld entries", (long long)n_in, bad);
    /* fast left_t on the identity gives Qᵀ; compare with D·H/√n built densely */
    float *a = calloc(n * n, sizeof *a), *tmp = calloc(HADAMARD_TMP_ROWS * n, sizeof *tmp);
    for (size_t i = 0; i < n; i++) a[i * n + i] = 1;
    hadamard_left_t(&h, a, (int64_t)n, tmp);
    double worst = 0, norm = 1.0 / sqrt((double)n);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double q_ji = h.sign[j] * hadamard_entry(&h, (int64_t)j, (int64_t)i) * norm; /* Q[j][i] = Qᵀ[i][j] */
            worst = fmax(worst, fabs(a[i * n + j] - q_ji));
        }
    CHECKF(worst < 1e-6, "order %lld: fast transform differs from D*H/sqrt(n) by %g", (long long)n_in, worst);
    /* x·Q then Qᵀ back (as a column: Qᵀ·(Q·...)) — orthogonality in use */
    float *x = calloc(n, sizeof *x), *x0 = calloc(n, sizeof *x0);
    for (size_t i = 0; i < n; i++) x[i] = x0[i] = (float)sin((double)i * 1.3);
    hadamard_right(&h, x, tmp);
    double e2 = 0, n0 = 0;
    for (size_t i = 0; i < n; i++) e2 += (double)x[i] * x[i], n0 += (double)x0[i] * x0[i];
    CHECKF(fabs(e2 - n0) <= 1e-4 * n0 + 1e-12, "order %lld: norm not kept", (long long)n_in);
    free(a);
    free(tmp);
    free(x);
    free(x0);
    hadamard_free(&h);
}

/* The plain transform of order n: every sign +1, and the backend operation
 * over three rows gives what hadamard_right gives each. */
static void check_plain(int64_t n) {
    hadamard h;
    REQUIRE(hadamard_make_plain(n, "test", &h) == EM_OK);
    bool plus = h.plain;
    for (int64_t i = 0; i < n; i++) plus = plus && h.sign[i] == 1;
    CHECKF(plus, "order %lld: the plain transform has a sign -1", (long long)n);
    em_backend *cpu = NULL;
    REQUIRE(cpu_backend_create(2, &cpu) == EM_OK);
    float *x = calloc((size_t)(3 * n), sizeof *x), *y = calloc((size_t)(3 * n), sizeof *y), tmp[HADAMARD_TMP_ROWS];
    for (int64_t i = 0; i < 3 * n; i++) x[i] = y[i] = (float)cos((double)i * 0.7);
    cpu->ops->hadamard(cpu, x, 3, &h);
    for (int r = 0; r < 3; r++) hadamard_right(&h, y + r * n, tmp);
    CHECKF(!memcmp(x, y, (size_t)(3 * n) * sizeof *x), "order %lld: the backend operation differs", (long long)n);
    free(x);
    free(y);
    em_backend_free(cpu);
    hadamard_free(&h);
}

int main(void) {
    int64_t plain[] = {64, 288, 768, 2560};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) check_plain(plain[i]);
    int64_t orders[] = {1, 2, 8, 64, 12, 24, 48, 96, 20, 40, 80, 160, 144, 288, 240, 480, 400};
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) check_order(orders[i]);
    int64_t bad[] = {3, 28, 36, 100, 0, 720, 1200};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hadamard h;
        CHECK(hadamard_make(bad[i], 1, 1, "hidden size", &h) == EM_ERR_UNSUPPORTED);
        CHECK(strstr(em_last_error(), "hidden size") != NULL);
    }
    hadamard a, b, c;
    REQUIRE(hadamard_make(256, 9, 1, "x", &a) == EM_OK && hadamard_make(256, 9, 1, "x", &b) == EM_OK &&
            hadamard_make(256, 10, 1, "x", &c) == EM_OK);
    CHECK(memcmp(a.sign, b.sign, 256) == 0 && memcmp(a.sign, c.sign, 256) != 0);
    hadamard_free(&a);
    hadamard_free(&b);
    hadamard_free(&c);
    return test_summary();
}
