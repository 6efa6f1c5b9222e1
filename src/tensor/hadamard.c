/* hadamard.c — seeded randomized Hadamard rotations, applied in place in f32
 * with the fast transform (n log n) for the power-of-two factor and a dense
 * q x q mix for each Paley factor in turn (so order 288 = 12·12·2 costs
 * 2·12 + 1 operations a value, not 144). */
#include "tensor/hadamard.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* {m, its Paley factors} for each supported m. paley_product gives 1 for a
 * power of two, 2 + the row of n's m, or 0. Single factors come first, so
 * orders 12·2^k and 20·2^k keep one. */
static const int PALEY_PRODUCTS[][3] = {{12, 12, 0}, {20, 20, 0}, {144, 12, 12}, {240, 12, 20}, {400, 20, 20}};

static int paley_product(int64_t n) {
    if (pow2(n)) return 1;
    for (size_t i = 0; i < sizeof PALEY_PRODUCTS / sizeof PALEY_PRODUCTS[0]; i++)
        if (n % PALEY_PRODUCTS[i][0] == 0 && pow2(n / PALEY_PRODUCTS[i][0])) return (int)i + 2;
    return 0;
}

bool hadamard_order_ok(int64_t n) { return paley_product(n) != 0; }

/* Paley construction I for a prime q ≡ 3 (mod 4): H = I + S with
 * S = [[0, 1ᵀ], [-1, Q]], Q[i][j] = χ(j - i) (χ: quadratic character). */
static void paley(int q, int8_t *h) {
    int m = q + 1;
    int8_t chi[32] = {0};
    for (int x = 1; x < q; x++) chi[(x * x) % q] = 1;
    for (int x = 1; x < q; x++)
        if (!chi[x]) chi[x] = -1;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            int s;
            if (i == 0) s = j == 0 ? 0 : 1;
            else if (j == 0) s = -1;
            else s = chi[((j - i) % q + q) % q];
            h[i * m + j] = (int8_t)(s + (i == j));
        }
}

/* The Paley factors of kind (an index past 1 into PALEY_PRODUCTS), and hm,
 * their Kronecker product: hm[a·q1 + b][c·q1 + d] = P0[a][c]·P1[b][d]. */
static em_status make_factors(hadamard *h, int kind) {
    if (kind == 1) return EM_OK;
    const int *f = PALEY_PRODUCTS[kind - 2];
    h->n_paley = f[2] ? 2 : 1;
    h->q[0] = f[1];
    h->q[1] = f[2];
    for (int i = 0; i < h->n_paley; i++) {
        h->pm[i] = em_malloc((size_t)h->q[i] * (size_t)h->q[i]);
        if (!h->pm[i]) return EM_ERR_NOMEM;
        paley(h->q[i] - 1, h->pm[i]);
    }
    int m = h->m;
    h->hm = em_malloc((size_t)m * (size_t)m);
    if (!h->hm) return EM_ERR_NOMEM;
    if (h->n_paley == 1) {
        memcpy(h->hm, h->pm[0], (size_t)m * (size_t)m);
        return EM_OK;
    }
    int q0 = h->q[0], q1 = h->q[1];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++)
            h->hm[i * m + j] = (int8_t)(h->pm[0][(i / q1) * q0 + j / q1] * h->pm[1][(i % q1) * q1 + j % q1]);
    return EM_OK;
}

em_status hadamard_make(int64_t n, uint64_t seed, uint64_t stream, const char *what, hadamard *out) {
    memset(out, 0, sizeof *out);
    int kind = paley_product(n);
    if (!kind)
        return em_fail(EM_ERR_UNSUPPORTED,
                       "%s is %lld: a Hadamard rotation needs 2^k or m*2^k with m one of 12, 20, 144, 240, 400 "
                       "(no known construction here)",
                       what, (long long)n);
    out->n = n;
    out->m = kind == 1 ? 1 : PALEY_PRODUCTS[kind - 2][0];
    out->p = n / out->m;
    out->sign = em_malloc((size_t)n);
    if (!out->sign || make_factors(out, kind) != EM_OK) {
        hadamard_free(out);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ull), bits = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i % 64 == 0) bits = splitmix(&s);
        out->sign[i] = (bits >> (i % 64)) & 1 ? -1 : 1;
    }
    return EM_OK;
}

em_status hadamard_make_plain(int64_t n, const char *what, hadamard *out) {
    EM_TRY(hadamard_make(n, 0, 0, what, out));
    memset(out->sign, 1, (size_t)n);
    out->plain = true;
    return EM_OK;
}

void hadamard_free(hadamard *h) {
    free(h->sign);
    free(h->hm);
    free(h->pm[0]);
    free(h->pm[1]);
    memset(h, 0, sizeof *h);
}

int hadamard_entry(const hadamard *h, int64_t i, int64_t j) {
    int64_t a = i / h->p, b = i % h->p, c = j / h->p, d = j % h->p;
    int s = __builtin_popcountll((unsigned long long)(b & d)) & 1 ? -1 : 1; /* Sylvester */
    return h->m > 1 ? s * h->hm[a * h->m + c] : s;
}

/* Rows [0, p) of a (width each) ← H_p · rows (Sylvester, unnormalized). */
static void fwht_rows(float *a, int64_t p, int64_t width) {
    for (int64_t len = 1; len < p; len *= 2)
        for (int64_t i = 0; i < p; i += 2 * len)
            for (int64_t j = i; j < i + len; j++) {
                float *x = a + j * width, *y = a + (j + len) * width;
                for (int64_t k = 0; k < width; k++) {
                    float u = x[k], v = y[k];
                    x[k] = u + v;
                    y[k] = u - v;
                }
            }
}

/* fwht_rows for one column (width 1: a vector, the run-time case): the
 * same sums and differences, in a loop the compiler can vectorise. */
static void fwht_vec(float *a, int64_t p) {
    for (int64_t len = 1; len < p; len *= 2)
        for (int64_t i = 0; i < p; i += 2 * len) {
            float *x = a + i, *y = a + i + len;
            for (int64_t j = 0; j < len; j++) {
                float u = x[j], v = y[j];
                x[j] = u + v;
                y[j] = u - v;
            }
        }
}

/* a (n rows of width) ← (I_outer ⊗ Hqᵀ ⊗ I_stride)·a: rows o·q·stride + c·stride + b,
 * c in [0, q), mixed for every outer block o and offset b. */
static void paley_mix_t(float *a, int64_t n, int q, const int8_t *hq, int64_t stride, int64_t width, float *tmp) {
    for (int64_t o = 0; o < n; o += q * stride)
        for (int64_t b = 0; b < stride; b++) {
            float *base = a + (o + b) * width;
            for (int r = 0; r < q; r++) {
                float *out = tmp + r * width;
                memset(out, 0, (size_t)width * sizeof *out);
                for (int c = 0; c < q; c++) {
                    const float *x = base + c * stride * width;
                    float s = (float)hq[c * q + r];
                    for (int64_t k = 0; k < width; k++) out[k] += s * x[k];
                }
            }
            for (int r = 0; r < q; r++) memcpy(base + r * stride * width, tmp + r * width, (size_t)width * sizeof *tmp);
        }
}

void hadamard_left_t(const hadamard *h, float *a, int64_t width, float *tmp) {
    int64_t n = h->n, p = h->p;
    for (int64_t i = 0; i < n && !h->plain; i++)
        if (h->sign[i] < 0)
            for (int64_t k = 0; k < width; k++) a[i * width + k] = -a[i * width + k];
    /* Hᵀ = P0ᵀ ⊗ P1ᵀ ⊗ H_p (H_p symmetric), and the factors act on different
     * digits of the row index, so each is applied on its own: the p-transform
     * inside each block of p rows, then each Paley factor across its stride. */
    for (int64_t blk = 0; blk < h->m; blk++) {
        if (width == 1) fwht_vec(a + blk * p, p);
        else fwht_rows(a + blk * p * width, p, width);
    }
    int64_t stride = p;
    for (int i = h->n_paley - 1; i >= 0; i--) {
        paley_mix_t(a, n, h->q[i], h->pm[i], stride, width, tmp);
        stride *= h->q[i];
    }
    float norm = (float)(1.0 / sqrt((double)n));
    for (int64_t i = 0; i < n * width; i++) a[i] *= norm;
}

void hadamard_right(const hadamard *h, float *v, float *tmp) { hadamard_left_t(h, v, 1, tmp); }
