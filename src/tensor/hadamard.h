/* hadamard.h — randomized Hadamard rotations Q = D·H/√n for the weight
 * transforms (D: seeded random ±1 diagonal, H: a Hadamard matrix of order n),
 * and the plain normalized transform H/√n that models apply to activations at
 * run time (online rotations: the weights hold W·Q, the signs D sit in the norm
 * gain before it).
 *
 * Orders supported: 2^k (Sylvester), and m·2^k for m in 12, 20, 144, 240 and
 * 400: Kronecker products of one or two Paley matrices (orders 12 and 20, built
 * from the quadratic residues mod 11 and 19) with a Sylvester one. The products
 * of two cover widths such as 288 (TinyStories), 2304 and 4608 (Gemma-2).
 * Q is orthogonal, so x·Q·Qᵀ = x. */
#ifndef EMBER_TENSOR_HADAMARD_H
#define EMBER_TENSOR_HADAMARD_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hadamard {
    int64_t n;    /* order */
    int m;        /* 1, 12, 20, 144, 240 or 400: the non-power-of-two factor */
    int64_t p;    /* n / m, a power of two */
    int8_t *hm;   /* m x m entries ±1, the Kronecker product of the Paley
                     factors (NULL when m == 1) */
    int n_paley;  /* 0, 1 or 2 Paley factors, outermost first */
    int q[2];     /* their orders, 12 or 20 */
    int8_t *pm[2];/* their q x q entries */
    int8_t *sign; /* D, n entries ±1 */
    bool plain;   /* every sign +1 (hadamard_make_plain) */
} hadamard;

/* True when n has a supported order. */
bool hadamard_order_ok(int64_t n);
/* Builds Q of order n with signs drawn from (seed, stream). Free with
 * hadamard_free. An unsupported order is EM_ERR_UNSUPPORTED naming it and
 * `what` (the dimension's role, for the message). */
em_status hadamard_make(int64_t n, uint64_t seed, uint64_t stream, const char *what, hadamard *out);
/* Q = H/√n itself (every sign +1): the transform applied at run time. */
em_status hadamard_make_plain(int64_t n, const char *what, hadamard *out);
void hadamard_free(hadamard *h);

/* a: n x width row-major. a ← Qᵀ·a (mixes rows: the output side of a weight,
 * W' = Qᵀ W). tmp: scratch of HADAMARD_TMP_ROWS*width floats (NULL allowed when
 * m == 1): each Paley factor is applied on its own. */
#define HADAMARD_TMP_ROWS 20
void hadamard_left_t(const hadamard *h, float *a, int64_t width, float *tmp);
/* v: one row of n values, v ← v·Q (the input side: W' = W Q row by row).
 * The arithmetic is fixed (butterflies, then each Paley factor's sums in
 * order, then the scale), so every backend that repeats it gets these bits. */
void hadamard_right(const hadamard *h, float *v, float *tmp);
/* The plain (unrandomized, unnormalized) Hadamard matrix entry H[i][j], for
 * tests. */
int hadamard_entry(const hadamard *h, int64_t i, int64_t j);

#endif
