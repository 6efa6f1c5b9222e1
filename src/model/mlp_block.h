/* mlp_block.h — a decoder layer's gated MLP over the residual stream,
 * shared by the families:
 *
 *   x += down(swiglu(gate(n), up(n))),  n = rmsnorm(x) · gain
 *
 * with as few launches as the backend allows for the batch's rows: the
 * norm inside the gate and up products (norm_matmul_swiglu), the whole MLP
 * in one launch (matmul_mlp), the down projection adding into x
 * (matmul_add); where a product cannot add, its output waits in h with its
 * run marked pending for the next norm to add (batch_rows.h). */
#ifndef EMBER_MODEL_MLP_BLOCK_H
#define EMBER_MODEL_MLP_BLOCK_H

#include "model/batch_rows.h"

typedef struct mlp_block {
    float *x;                 /* [rows, width] the residual stream */
    float *h;                 /* [rows, width] scratch: the normed rows, or the output left pending */
    float *act, *gate, *up;   /* [rows, inter] scratch */
    const float *gain;        /* the MLP's input norm */
    float eps;
    const hadamard *rot;      /* an online rotation of the normed rows before the products, or NULL */
    const em_weight *w[3];    /* gate, up, down */
    const float *bias[3];     /* the same, or NULLs */
    int rows, width, inter;
} mlp_block;

/* x += the MLP of p's rows (or its output left pending in h), run by run
 * over `runs`; p's buffers stay the caller's. */
void mlp_block_run(em_backend *be, row_runs *runs, const mlp_block *p);

#endif
