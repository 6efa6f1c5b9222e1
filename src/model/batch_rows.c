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
