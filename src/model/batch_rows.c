/* batch_rows.c — runs of equal arithmetic over a batch's rows. */
#include "model/batch_rows.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static bool reserve(row_runs *r, int n) {
    if (n <= r->cap) return true;
    int *s = realloc(r->start, (size_t)n * sizeof *s);
    if (!s) return false;
    r->start = s;
    int *l = realloc(r->len, (size_t)n * sizeof *l);
    if (!l) return false;
    r->len = l;
    em_math *m = realloc(r->math, (size_t)n * sizeof *m);
    if (!m) return false;
    r->math = m;
    bool *p = realloc(r->pending, (size_t)n * sizeof *p);
    if (!p) return false;
    r->pending = p;
    r->cap = n;
    return true;
}

em_math span_prefill_math(const em_span *sp, em_math model_math) {
    return sp->math == SPAN_MATH_EXACT ? EM_MATH_EXACT : sp->math == SPAN_MATH_FAST ? EM_MATH_FAST : model_math;
}

em_status row_runs_plan(row_runs *r, const int *span_n, const bool *exact_only, const em_math *fast, int n_spans,
                        em_math model_math) {
    r->n = 0;
    if (!reserve(r, n_spans + 1)) return em_fail(EM_ERR_NOMEM, "out of memory planning a batch");
    int row = 0;
    for (int s = 0; s < n_spans; s++) {
        int n = span_n[s];
        if (!n) continue;
        em_math want = fast ? fast[s] : model_math;
        em_math math = exact_only && exact_only[s] ? EM_MATH_EXACT : want;
        if (r->n && r->math[r->n - 1] == math) {
            r->len[r->n - 1] += n;
        } else {
            r->start[r->n] = row;
            r->len[r->n] = n;
            r->pending[r->n] = false;
            r->math[r->n++] = math;
        }
        row += n;
    }
    return EM_OK;
}

em_status row_runs_plan_batch(row_runs *r, const em_batch *b, em_math fast) {
    int stack[64] = {0}, *n = b->n_spans <= 64 ? stack : em_mallocn((size_t)b->n_spans, sizeof *n);
    em_math mstack[64], *math = b->n_spans <= 64 ? mstack : em_mallocn((size_t)b->n_spans, sizeof *math);
    em_status st = EM_OK;
    if (!n || !math) {
        st = em_fail(EM_ERR_NOMEM, "out of memory planning a batch");
    } else {
        for (int s = 0; s < b->n_spans; s++) {
            n[s] = b->spans[s].n;
            math[s] = span_prefill_math(&b->spans[s], fast);
        }
        st = row_runs_plan(r, n, NULL, math, b->n_spans, fast);
    }
    if (n != stack) free(n);
    if (math != mstack) free(math);
    return st;
}

void row_runs_free(row_runs *r) {
    free(r->start);
    free(r->len);
    free(r->math);
    free(r->pending);
    memset(r, 0, sizeof *r);
}

void row_runs_matmul(em_backend *be, const row_runs *r, float *out, const float *in, const em_weight *w,
                     const float *bias) {
    for (int i = 0; i < r->n; i++) {
        size_t o = (size_t)r->start[i];
        be->ops->matmul(be, out + o * (size_t)w->rows, in + o * (size_t)w->cols, r->len[i], w, bias, r->math[i]);
    }
}

void row_runs_matmul_group(em_backend *be, const row_runs *r, int n, float *const *outs, const float *in,
                           const em_weight *const *ws, const float *const *biases) {
    if (!be->ops->matmul_group || n > EM_MATMUL_GROUP_MAX) {
        for (int j = 0; j < n; j++) row_runs_matmul(be, r, outs[j], in, ws[j], biases[j]);
        return;
    }
    for (int i = 0; i < r->n; i++) {
        size_t o = (size_t)r->start[i];
        float *ys[EM_MATMUL_GROUP_MAX];
        for (int j = 0; j < n; j++) ys[j] = outs[j] + o * (size_t)ws[j]->rows;
        be->ops->matmul_group(be, n, ys, in + o * (size_t)ws[0]->cols, r->len[i], ws, biases, r->math[i]);
    }
}

bool row_runs_matmul_swiglu(em_backend *be, const row_runs *r, float *out, const float *in,
                            const em_weight *const *ws, const float *const *biases) {
    if (!be->ops->matmul_swiglu || r->n != 1 || r->start[0] != 0) return false;
    return be->ops->matmul_swiglu(be, out, in, r->len[0], ws[0], ws[1], biases[0], biases[1], r->math[0]);
}

bool row_runs_matmul_mlp(em_backend *be, const row_runs *r, float *out, float *act, const float *in,
                         const em_weight *const *ws, const float *const *biases, bool add) {
    if (!be->ops->matmul_mlp || r->n != 1 || r->start[0] != 0) return false;
    return be->ops->matmul_mlp(be, out, act, in, r->len[0], ws[0], ws[1], ws[2], biases[0], biases[1], biases[2],
                               r->math[0], add);
}

bool row_runs_matmul_add(em_backend *be, const row_runs *r, float *out, const float *in, const em_weight *w) {
    if (!be->ops->matmul_add || r->n != 1 || r->start[0] != 0) return false;
    return be->ops->matmul_add(be, out, in, r->len[0], w, r->math[0]);
}

bool row_runs_matmul_residual(em_backend *be, row_runs *r, float *x, float *h, const float *in, const em_weight *w,
                              const float *bias) {
    const em_backend_ops *op = be->ops;
    size_t N = (size_t)w->rows, K = (size_t)w->cols;
    bool any = false;
    for (int i = 0; i < r->n; i++) {
        size_t o = (size_t)r->start[i];
        r->pending[i] = !(!bias && op->matmul_add && op->matmul_add(be, x + o * N, in + o * K, r->len[i], w, r->math[i]));
        if (r->pending[i]) op->matmul(be, h + o * N, in + o * K, r->len[i], w, bias, r->math[i]);
        any |= r->pending[i];
    }
    return any;
}

void row_runs_set_pending(row_runs *r, bool pending) {
    for (int i = 0; i < r->n; i++) r->pending[i] = pending;
}

/* Run i's rows of a [T, n] buffer. */
static float *run_rows(const row_runs *r, int i, const float *buf, size_t n) {
    return (float *)buf + (size_t)r->start[i] * n;
}

void row_runs_add_pending(em_backend *be, row_runs *r, float *x, const float *h, int n) {
    for (int i = 0; i < r->n; i++) {
        if (r->pending[i]) be->ops->add(be, run_rows(r, i, x, (size_t)n), run_rows(r, i, h, (size_t)n),
                                        (size_t)r->len[i] * n);
        r->pending[i] = false;
    }
}

/* Run i's norm of x into h, adding its pending h into x first. */
static void run_norm(em_backend *be, row_runs *r, int i, float *x, float *h, const float *gain, float eps, int n) {
    const em_backend_ops *op = be->ops;
    float *xi = run_rows(r, i, x, (size_t)n), *hi = run_rows(r, i, h, (size_t)n);
    if (r->pending[i] && op->add_rmsnorm) {
        op->add_rmsnorm(be, xi, hi, hi, gain, r->len[i], n, eps, 0.0f);
    } else {
        if (r->pending[i]) op->add(be, xi, hi, (size_t)r->len[i] * n);
        op->rmsnorm(be, hi, xi, gain, r->len[i], n, eps, 0.0f);
    }
    r->pending[i] = false;
}

void row_runs_norm(em_backend *be, row_runs *r, float *x, float *h, const float *gain, float eps, int n) {
    bool all = true, none = true; /* one call for the batch when its runs agree */
    for (int i = 0; i < r->n; i++) all &= r->pending[i], none &= !r->pending[i];
    if (r->n > 1 && (all || none)) {
        row_runs one = *r;
        int len = r->start[r->n - 1] + r->len[r->n - 1], start = 0;
        one.n = 1, one.start = &start, one.len = &len;
        run_norm(be, &one, 0, x, h, gain, eps, n);
        row_runs_set_pending(r, false);
        return;
    }
    for (int i = 0; i < r->n; i++) run_norm(be, r, i, x, h, gain, eps, n);
}

/* The n products of run i over its normed rows in h. */
static void run_matmul_group(em_backend *be, const row_runs *r, int i, int n, float *const *outs, const float *h,
                             const em_weight *const *ws, const float *const *biases) {
    float *ys[EM_MATMUL_GROUP_MAX];
    const float *in = run_rows(r, i, h, (size_t)ws[0]->cols);
    for (int j = 0; j < n; j++) ys[j] = run_rows(r, i, outs[j], (size_t)ws[j]->rows);
    if (be->ops->matmul_group) {
        be->ops->matmul_group(be, n, ys, in, r->len[i], ws, biases, r->math[i]);
        return;
    }
    for (int j = 0; j < n; j++) be->ops->matmul(be, ys[j], in, r->len[i], ws[j], biases[j], r->math[i]);
}

/* Run i's SwiGLU of its gate and up products (gu) into act. */
static void run_swiglu(em_backend *be, const row_runs *r, int i, float *act, float *const *gu, size_t F) {
    be->ops->swiglu(be, run_rows(r, i, act, F), run_rows(r, i, gu[0], F), run_rows(r, i, gu[1], F), r->len[i], (int)F,
                    (int)F);
}

/* Run i's products through the backend's norm_matmul_group (nothing
 * pending); false where it declines. */
static bool run_norm_group(em_backend *be, const row_runs *r, int i, int n, float *const *outs, const float *x,
                           const float *gain, float eps, const em_weight *const *ws, const float *const *biases) {
    float *ys[EM_MATMUL_GROUP_MAX];
    if (r->pending[i]) return false;
    for (int j = 0; j < n; j++) ys[j] = run_rows(r, i, outs[j], (size_t)ws[j]->rows);
    return be->ops->norm_matmul_group(be, n, ys, run_rows(r, i, x, (size_t)ws[0]->cols), gain, eps, 0.0f, r->len[i],
                                      ws, biases, r->math[i]);
}

bool row_runs_norm_matmul_group(em_backend *be, row_runs *r, int n, float *const *outs, float *x, float *h,
                                const float *gain, float eps, const em_weight *const *ws, const float *const *biases) {
    if (!be->ops->norm_matmul_group || n < 1 || n > EM_MATMUL_GROUP_MAX) return false;
    int K = (int)ws[0]->cols;
    for (int i = 0; i < r->n; i++) {
        if (run_norm_group(be, r, i, n, outs, x, gain, eps, ws, biases)) continue;
        if (r->n == 1) return false;
        run_norm(be, r, i, x, h, gain, eps, K);
        run_matmul_group(be, r, i, n, outs, h, ws, biases);
    }
    return true;
}

/* Run i's SwiGLU of its gate and up products over normed rows (nothing
 * pending): one call where the backend fuses the three, else the two
 * products and the SwiGLU kernel; false where the backend takes neither. */
static bool run_norm_swiglu(em_backend *be, const row_runs *r, int i, float *act, float *const *gu, const float *x,
                            const float *gain, float eps, const em_weight *const *ws, const float *const *biases) {
    const em_backend_ops *op = be->ops;
    size_t F = (size_t)ws[0]->rows, K = (size_t)ws[0]->cols;
    float *out = run_rows(r, i, act, F);
    if (r->pending[i]) return false;
    if (op->norm_matmul_swiglu && op->norm_matmul_swiglu(be, out, run_rows(r, i, x, K), gain, eps, 0.0f, r->len[i],
                                                         ws[0], ws[1], biases[0], biases[1], r->math[i]))
        return true;
    if (!run_norm_group(be, r, i, 2, gu, x, gain, eps, ws, biases)) return false;
    run_swiglu(be, r, i, act, gu, F);
    return true;
}

bool row_runs_norm_swiglu(em_backend *be, row_runs *r, float *act, float *const *gu, float *x, float *h,
                          const float *gain, float eps, const em_weight *const *ws, const float *const *biases) {
    const em_backend_ops *op = be->ops;
    if (!op->norm_matmul_group) return false;
    size_t F = (size_t)ws[0]->rows;
    int K = (int)ws[0]->cols;
    for (int i = 0; i < r->n; i++) {
        if (run_norm_swiglu(be, r, i, act, gu, x, gain, eps, ws, biases)) continue;
        if (r->n == 1) return false;
        run_norm(be, r, i, x, h, gain, eps, K);
        float *out = run_rows(r, i, act, F);
        if (op->matmul_swiglu && op->matmul_swiglu(be, out, run_rows(r, i, h, (size_t)K), r->len[i], ws[0], ws[1],
                                                   biases[0], biases[1], r->math[i]))
            continue;
        run_matmul_group(be, r, i, 2, gu, h, ws, biases);
        run_swiglu(be, r, i, act, gu, F);
    }
    return true;
}

em_math row_runs_common_math(const row_runs *r) {
    for (int i = 0; i < r->n; i++)
        if (r->math[i] != EM_MATH_FAST) return EM_MATH_EXACT;
    return r->n ? EM_MATH_FAST : EM_MATH_EXACT;
}

int batch_tokens(const em_batch *b) {
    int t = 0;
    for (int s = 0; s < b->n_spans; s++) t += b->spans[s].n;
    return t;
}

bool batch_logits_every_row(const em_batch *b) {
    for (int s = 0; s < b->n_spans; s++) {
        const em_span *sp = &b->spans[s];
        if (sp->n && sp->logits != LOGITS_ALL && !(sp->logits == LOGITS_LAST && sp->n == 1)) return false;
    }
    return true;
}

int batch_gather_logit_rows(em_backend *be, const em_batch *b, const float *x, float *out, int H) {
    int row = 0, n_out = 0;
    for (int s = 0; s < b->n_spans; s++) {
        const em_span *sp = &b->spans[s];
        if (sp->logits == LOGITS_ALL && sp->n) {
            be->ops->copy(be, out + (size_t)n_out * H, x + (size_t)row * H, (size_t)sp->n * H * sizeof(float));
            n_out += sp->n;
        } else if (sp->logits == LOGITS_LAST && sp->n) {
            be->ops->copy(be, out + (size_t)n_out * H, x + (size_t)(row + sp->n - 1) * H, (size_t)H * sizeof(float));
            n_out += 1;
        }
        row += sp->n;
    }
    return n_out;
}
