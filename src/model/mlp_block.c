/* mlp_block.c — a decoder layer's gated MLP over the residual stream. */
#include "model/mlp_block.h"

void mlp_block_run(em_backend *be, row_runs *runs, const mlp_block *p) {
    const em_backend_ops *op = be->ops;
    const em_weight *wgu[2] = {p->w[0], p->w[1]};
    const float *bgu[2] = {p->bias[0], p->bias[1]};
    float *gu[2] = {p->gate, p->up};
    /* decode rows: the norm inside the gate and up products, over x itself */
    if (!p->rot && row_runs_norm_swiglu(be, runs, p->act, gu, p->x, p->h, p->gain, p->eps, wgu, bgu)) {
        row_runs_matmul_residual(be, runs, p->x, p->h, p->act, p->w[2], p->bias[2]);
        return;
    }
    row_runs_norm(be, runs, p->x, p->h, p->gain, p->eps, p->width);
    if (p->rot) op->hadamard(be, p->h, p->rows, p->rot);
    if (row_runs_matmul_mlp(be, runs, p->x, p->act, p->h, p->w, p->bias, true)) return;
    if (row_runs_matmul_mlp(be, runs, p->h, p->act, p->h, p->w, p->bias, false)) {
        row_runs_set_pending(runs, true);
        return;
    }
    if (!row_runs_matmul_swiglu(be, runs, p->act, p->h, wgu, bgu)) {
        row_runs_matmul_group(be, runs, 2, gu, p->h, wgu, bgu);
        op->swiglu(be, p->act, p->gate, p->up, p->rows, p->inter, p->inter);
    }
    row_runs_matmul_residual(be, runs, p->x, p->h, p->act, p->w[2], p->bias[2]);
}
