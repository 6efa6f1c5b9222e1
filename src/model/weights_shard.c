/* weights_shard.c — a rank's slices of checkpoint tensors (weights_shard.h). */
#include "model/weights_shard.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_status dev_list_add(dev_list *l, void *p) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        void **q = realloc(l->p, cap * sizeof *q);
        if (!q) return em_fail(EM_ERR_NOMEM, "out of memory");
        l->p = q;
        l->cap = cap;
    }
    l->p[l->n++] = p;
    return EM_OK;
}

void dev_list_free(dev_list *l) {
    for (size_t i = 0; i < l->n; i++) l->be->ops->free(l->be, l->p[i]);
    free(l->p);
    l->p = NULL;
    l->n = l->cap = 0;
}

void shard_gather_rows(void *dst, const void *src, int64_t cols, size_t esize, int64_t r0, int64_t n, int64_t col0,
                       int64_t ncols) {
    const char *s = src;
    char *d = dst;
    size_t row_bytes = (size_t)ncols * esize;
    for (int64_t r = 0; r < n; r++)
        memcpy(d + (size_t)r * row_bytes, s + ((size_t)(r0 + r) * (size_t)cols + (size_t)col0) * esize, row_bytes);
}

static bool slice_ok(const tp_slice *s, int64_t rows, int64_t cols) {
    return s->row0 >= 0 && s->nrows >= 0 && s->row0 + s->nrows <= rows && s->col0 >= 0 && s->ncols > 0 &&
           s->col0 + s->ncols <= cols && s->pad_rows >= s->nrows && s->pad_rows > 0;
}

/* Streams the slice into dst: whole rows at once, columns through a
 * bounded gather buffer. */
static em_status upload_slice(em_model *m, em_backend *be, const st_tensor *t, int64_t cols, const tp_slice *s,
                              char *dst) {
    size_t esize = dtype_size(t->dtype);
    size_t row_bytes = (size_t)s->ncols * esize;
    if (s->col0 == 0 && s->ncols == cols)
        return be->ops->upload(be, dst, (const char *)t->data + (size_t)s->row0 * row_bytes,
                               (size_t)s->nrows * row_bytes);
    int64_t per = (int64_t)(SHARD_GATHER_BYTES / row_bytes);
    if (per < 1) per = 1;
    if (per > s->nrows) per = s->nrows;
    char *buf = em_mallocn((size_t)per, row_bytes);
    if (!buf) return em_fail(EM_ERR_NOMEM, "%s: out of memory gathering a slice of %s", m->dir, t->name);
    em_status st = EM_OK;
    for (int64_t r = 0; r < s->nrows && st == EM_OK; r += per) {
        int64_t n = s->nrows - r < per ? s->nrows - r : per;
        shard_gather_rows(buf, t->data, cols, esize, s->row0 + r, n, s->col0, s->ncols);
        st = be->ops->upload(be, dst + (size_t)r * row_bytes, buf, (size_t)n * row_bytes);
    }
    free(buf);
    return st;
}

/* The tensor behind canonical `name`, checked to be a float [rows, cols]
 * matrix that is not a quantized module. */
static em_status find_matrix(em_model *m, const char *canonical, int64_t rows, int64_t cols, const st_tensor **out) {
    char buf[256];
    const char *name = weight_resolve(m, canonical, buf, sizeof buf);
    const st_tensor *t = st_find(m->st, name);
    if (!t) return em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing", m->dir, name);
    size_t n = strlen(name);
    char sname[272];
    if (n > 7 && !strcmp(name + n - 7, ".weight")) {
        snprintf(sname, sizeof sname, "%.*s.scales", (int)(n - 7), name);
        if (st_find(m->st, sname))
            return em_fail(EM_ERR_UNSUPPORTED, "%s: %s is quantized; tensor parallelism runs f32/f16/bf16 weights only",
                           m->dir, name);
    }
    if (t->dtype != EM_F32 && t->dtype != EM_F16 && t->dtype != EM_BF16)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected F32, F16 or BF16", m->dir, name,
                       dtype_name(t->dtype));
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s does not have the shape [%lld, %lld] the config implies", m->dir,
                       name, (long long)rows, (long long)cols);
    *out = t;
    return EM_OK;
}

em_status weight_bind_shard_pieces(em_model *m, dev_list *l, const char *canonical, int64_t rows, int64_t cols,
                                   const tp_slice *s, int n, em_weight *w) {
    const st_tensor *t;
    EM_TRY(find_matrix(m, canonical, rows, cols, &t));
    int64_t held = 0;
    for (int i = 0; i < n; i++) {
        if (!slice_ok(&s[i], rows, cols) || s[i].col0 != s[0].col0 || s[i].ncols != s[0].ncols)
            return em_fail(EM_ERR_INTERNAL, "%s: slice rows %lld+%lld, columns %lld+%lld is outside %s", m->dir,
                           (long long)s[i].row0, (long long)s[i].nrows, (long long)s[i].col0, (long long)s[i].ncols,
                           t->name);
        held += s[i].pad_rows;
    }
    if (n < 1) return em_fail(EM_ERR_INTERNAL, "%s: no slice of %s", m->dir, t->name);
    em_backend *be = l->be;
    size_t esize = dtype_size(t->dtype), row_bytes = (size_t)s[0].ncols * esize, bytes;
    if (!em_mul((size_t)held, row_bytes, &bytes))
        return em_fail(EM_ERR_NOMEM, "%s: slice of %s is too large", m->dir, t->name);
    char *d = be->ops->alloc(be, bytes); /* zeroed: padding rows stay 0 */
    if (!d) return em_fail(EM_ERR_NOMEM, "%s: no room in %s memory for a slice of %s (%zu bytes)", m->dir, be->desc,
                           t->name, bytes);
    em_status st = dev_list_add(l, d);
    if (st != EM_OK) {
        be->ops->free(be, d);
        return st;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].nrows) EM_TRY(upload_slice(m, be, t, cols, &s[i], d + at));
        at += (size_t)s[i].pad_rows * row_bytes;
    }
    *w = (em_weight){.dtype = t->dtype, .rows = held, .cols = s[0].ncols, .data = d, .name = t->name};
    return EM_OK;
}

em_status weight_bind_shard(em_model *m, dev_list *l, const char *canonical, int64_t rows, int64_t cols,
                            const tp_slice *s, em_weight *w) {
    return weight_bind_shard_pieces(m, l, canonical, rows, cols, s, 1, w);
}

em_status weight_load_rows_shard(em_model *m, em_backend *be, const char *canonical, int ndim, const int64_t *shape,
                                 const tp_rows *rows, int n, float shift, float **out) {
    char buf[256];
    const char *name = weight_resolve(m, canonical, buf, sizeof buf);
    *out = NULL;
    const st_tensor *t = st_find(m->st, name);
    if (!t) return em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing", m->dir, name);
    bool same = t->ndim == ndim && ndim >= 1;
    int64_t row = 1;
    for (int i = 0; same && i < ndim; i++) {
        same = t->shape[i] == shape[i];
        if (i) row *= shape[i];
    }
    if (!same)
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s does not have the shape the config implies (%d dims, first %lld)",
                       m->dir, name, ndim, (long long)shape[0]);
    if (t->dtype != EM_F32 && t->dtype != EM_BF16 && t->dtype != EM_F16)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected a float type", m->dir, name,
                       dtype_name(t->dtype));
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].row0 < 0 || rows[i].nrows < 1 || rows[i].row0 + rows[i].nrows > shape[0])
            return em_fail(EM_ERR_INTERNAL, "%s: rows %lld+%lld are outside %s", m->dir, (long long)rows[i].row0,
                           (long long)rows[i].nrows, name);
        total += rows[i].nrows * row;
    }
    if (n < 1) return em_fail(EM_ERR_INTERNAL, "%s: no rows of %s", m->dir, name);
    float *h = em_mallocn((size_t)total, sizeof *h);
    float *v = be->ops->alloc(be, (size_t)total * sizeof(float));
    if (!h || !v) {
        free(h);
        if (v) be->ops->free(be, v);
        return em_fail(EM_ERR_NOMEM, "out of memory loading %s", name);
    }
    size_t at = 0;
    for (int p = 0; p < n; p++) {
        for (int64_t i = rows[p].row0 * row; i < (rows[p].row0 + rows[p].nrows) * row; i++) {
            float x;
            switch (t->dtype) {
            case EM_F32: x = ((const float *)t->data)[i]; break;
            case EM_BF16: x = bf16_to_f32(((const uint16_t *)t->data)[i]); break;
            default: x = f16_to_f32(((const uint16_t *)t->data)[i]); break;
            }
            h[at++] = x + shift;
        }
    }
    em_status s = be->ops->upload(be, v, h, (size_t)total * sizeof(float));
    free(h);
    if (s != EM_OK) {
        be->ops->free(be, v);
        return s;
    }
    *out = v;
    return EM_OK;
}

em_status weight_load_vector_shard(em_model *m, em_backend *be, const char *canonical, int64_t n_full, int64_t off,
                                   int64_t n, float **out) {
    tp_rows r = {off, n};
    return weight_load_rows_shard(m, be, canonical, 1, &n_full, &r, 1, 0.0f, out);
}
