/* batch_rows.h — per-row arithmetic of a batch, shared by the families.
 *
 * A batch's rows are grouped into runs of equal arithmetic. With EXACT as
 * the model's math every row is EXACT, so a sequence's numbers never depend
 * on what else shares its batch. With FAST every row of a FAST span is
 * FAST, and each backend decides per product what that allows: bf16 dot
 * products once a run has FAST_MIN_SPAN rows (a prefill chunk, a busy
 * server's decode batch; on a GPU from CUDA_FAST_MIN_M rows over bf16
 * weights, where tensor cores beat the GEMV), and on a CPU int8
 * activations for fewer rows against 4- and 8-bit weights; other small
 * products are computed as EXACT. Spans marked exact_only (speculative verification) are always
 * EXACT, so a verified draft span computes what EXACT single steps would. */
#ifndef EMBER_MODEL_BATCH_ROWS_H
#define EMBER_MODEL_BATCH_ROWS_H

#include "model/model.h"

/* Rows from which FAST products become GEMMs with rounded activations on
 * every backend (bf16 dot products, cuBLAS). */
#define FAST_MIN_SPAN 16

typedef struct row_runs {
    int n, cap;
    int *start, *len;
    em_math *math;
    /* per run: its rows' last block output waits in the model's h to be
     * added to the residual stream (row_runs_matmul_residual) */
    bool *pending;
} row_runs;

/* Plans runs for spans of span_n[i] rows (exact_only[i]: never FAST; may
 * be NULL). fast[i]: span i's prefill math (NULL: model_math for all). */
em_status row_runs_plan(row_runs *r, const int *span_n, const bool *exact_only, const em_math *fast, int n_spans,
                        em_math model_math);
/* Span sp's prefill math: its own, or the model's. */
em_math span_prefill_math(const em_span *sp, em_math model_math);
/* The same from a batch's spans. */
em_status row_runs_plan_batch(row_runs *r, const em_batch *b, em_math fast);
void row_runs_free(row_runs *r);
/* out[T, w->rows] = in[T, w->cols] · wᵀ (+ bias), run by run. */
void row_runs_matmul(em_backend *be, const row_runs *r, float *out, const float *in, const em_weight *w,
                     const float *bias);

/* The same for n weights of one input (outs[i] for ws[i]), through the
 * backend's matmul_group where it has one: each out gets the bits
 * row_runs_matmul would give it. */
void row_runs_matmul_group(em_backend *be, const row_runs *r, int n, float *const *outs, const float *in,
                           const em_weight *const *ws, const float *const *biases);

/* out = swiglu(in · wgᵀ + bg, in · wuᵀ + bu) (ws = {wg, wu}, biases the
 * same) in one backend call, when the batch is one run and the backend's
 * matmul_swiglu takes it; false: nothing was done, and the caller runs the
 * two products and swiglu (which give the same bits). */
bool row_runs_matmul_swiglu(em_backend *be, const row_runs *r, float *out, const float *in,
                            const em_weight *const *ws, const float *const *biases);

/* out = the MLP of in (ws = {wg, wu, wd}, biases the same; act its
 * scratch) in one backend call, when the batch is one run and the
 * backend's matmul_mlp takes it (add: out += the MLP); false: nothing was
 * done, and the caller runs the SwiGLU and the down projection (backend.h
 * says where the bits may differ). */
bool row_runs_matmul_mlp(em_backend *be, const row_runs *r, float *out, float *act, const float *in,
                         const em_weight *const *ws, const float *const *biases, bool add);

/* out += in · wᵀ in one backend call (matmul_add), when the batch is one
 * run and the backend takes it; false: nothing was done, and the caller
 * runs the product and the add. */
bool row_runs_matmul_add(em_backend *be, const row_runs *r, float *out, const float *in, const em_weight *w);

/* x += in · wᵀ (+ bias) over the batch, run by run: added by the product
 * itself where the backend can (matmul_add), else the run's product left
 * in h and the run marked pending, for the next norm to add. Returns
 * whether any run is pending. A run's path depends on its own rows only,
 * so each run meets the next norm as it would alone. */
bool row_runs_matmul_residual(em_backend *be, row_runs *r, float *x, float *h, const float *in, const em_weight *w,
                              const float *bias);
/* Marks every run pending (its block's output left in h) or none. */
void row_runs_set_pending(row_runs *r, bool pending);
/* x += h over the pending runs' rows (width n); none pending after. */
void row_runs_add_pending(em_backend *be, row_runs *r, float *x, const float *h, int n);
/* h = rmsnorm(x) · gain over every run (n: the row width), adding a
 * pending run's h into x first (add_rmsnorm); nothing is pending after. */
void row_runs_norm(em_backend *be, row_runs *r, float *x, float *h, const float *gain, float eps, int n);

/* The products of a norm: outs[j] = rmsnorm(x) · gain · ws[j]ᵀ (+
 * biases[j]), x the residual stream. Run by run: a pending run is added
 * and normed into h (add_rmsnorm), then multiplied; another goes to the
 * backend's norm_matmul_group where it takes the run (the normed rows are
 * never written; backend.h: a row's bits then do not depend on its
 * batch), else it is normed into h and multiplied. False, nothing done,
 * for a backend without that operation, or a batch of one run that is
 * pending or declined: the caller norms (row_runs_norm) and multiplies. */
bool row_runs_norm_matmul_group(em_backend *be, row_runs *r, int n, float *const *outs, float *x, float *h,
                                const float *gain, float eps, const em_weight *const *ws, const float *const *biases);

/* The same for an MLP's gate and up (ws, biases: {wg, wu}) with their
 * SwiGLU into act: norm_matmul_swiglu where the backend takes a run, else
 * norm_matmul_group into gu = {gate, up} and the SwiGLU kernel, else (a
 * run of a batch of several) the run's norm into h, matmul_swiglu or the
 * products and the SwiGLU. */
bool row_runs_norm_swiglu(em_backend *be, row_runs *r, float *act, float *const *gu, float *x, float *h,
                          const float *gain, float eps, const em_weight *const *ws, const float *const *biases);

/* FAST when every run of the batch is FAST (what a whole-batch operation
 * such as attention may then assume), else EXACT. */
em_math row_runs_common_math(const row_runs *r);

/* Tokens in a batch. */
int batch_tokens(const em_batch *b);
/* Copies the rows of x (width H, backend memory) that want logits, in span
 * order, to out through the backend; returns how many. out may alias x. */
int batch_gather_logit_rows(em_backend *be, const em_batch *b, const float *x, float *out, int H);
/* Whether every row of the batch wants logits (each span all of its rows,
 * or its last of one: a decode step), so that the rows to gather are x's
 * own, in order. */
bool batch_logits_every_row(const em_batch *b);

#endif
