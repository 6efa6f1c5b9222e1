/* hadamard.c — seeded randomized Hadamard rotations, applied in place in f32
 * with the fast transform (n log n) for the power-of-two factor and a dense
 * m x m mix for the Paley factor. */
#include "quant/hadamard.h"

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

bool hadamard_order_ok(int64_t n) {
    return pow2(n) || (n % 12 == 0 && pow2(n / 12)) || (n % 20 == 0 && pow2(n / 20));
}

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

em_status hadamard_make(int64_t n, uint64_t seed, uint64_t stream, const char *what, hadamard *out) {
    memset(out, 0, sizeof *out);
    if (!hadamard_order_ok(n))
        return em_fail(EM_ERR_UNSUPPORTED,
                       "%s is %lld: a Hadamard rotation needs 2^k, 12*2^k or 20*2^k (no known construction here)",
                       what, (long long)n);
    out->n = n;
    out->m = pow2(n) ? 1 : (n % 12 == 0 && pow2(n / 12)) ? 12 : 20;
    out->p = n / out->m;
    out->sign = em_malloc((size_t)n);
    if (out->m > 1) out->hm = em_malloc((size_t)out->m * (size_t)out->m);
    if (!out->sign || (out->m > 1 && !out->hm)) {
        hadamard_free(out);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    if (out->m > 1) paley(out->m - 1, out->hm);
    uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ull), bits = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i % 64 == 0) bits = splitmix(&s);
        out->sign[i] = (bits >> (i % 64)) & 1 ? -1 : 1;
    }
    return EM_OK;
}

void hadamard_free(hadamard *h) {
    free(h->sign);
    free(h->hm);
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

void hadamard_left_t(const hadamard *h, float *a, int64_t width, float *tmp) {
    int64_t n = h->n, p = h->p;
    int m = h->m;
    for (int64_t i = 0; i < n; i++)
        if (h->sign[i] < 0)
            for (int64_t k = 0; k < width; k++) a[i * width + k] = -a[i * width + k];
    /* Hᵀ = H_mᵀ ⊗ H_p (H_p symmetric): the p-transform inside each block,
     * then the transposed m-mix across blocks, row offset b of each. */
    for (int blk = 0; blk < m; blk++) fwht_rows(a + blk * p * width, p, width);
    if (m > 1)
        for (int64_t b = 0; b < p; b++) {
            for (int r = 0; r < m; r++) {
                float *o = tmp + r * width;
                memset(o, 0, (size_t)width * sizeof *o);
                for (int c = 0; c < m; c++) {
                    const float *x = a + (c * p + b) * width;
                    float s = (float)h->hm[c * m + r];
                    for (int64_t k = 0; k < width; k++) o[k] += s * x[k];
                }
            }
            for (int r = 0; r < m; r++) memcpy(a + (r * p + b) * width, tmp + r * width, (size_t)width * sizeof *tmp);
        }
    float norm = (float)(1.0 / sqrt((double)n));
    for (int64_t i = 0; i < n * width; i++) a[i] *= norm;
}

void hadamard_right(const hadamard *h, float *v, float *tmp) { hadamard_left_t(h, v, 1, tmp); }
