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

em_status weight_bind_shard(em_model *m, dev_list *l, const char *canonical, int64_t rows, int64_t cols,
                            const tp_slice *s, em_weight *w) {
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
    if (!slice_ok(s, rows, cols))
        return em_fail(EM_ERR_INTERNAL, "%s: slice rows %lld+%lld, columns %lld+%lld is outside %s", m->dir,
                       (long long)s->row0, (long long)s->nrows, (long long)s->col0, (long long)s->ncols, name);
    em_backend *be = l->be;
    size_t bytes;
    if (!em_mul((size_t)s->pad_rows * (size_t)s->ncols, dtype_size(t->dtype), &bytes))
        return em_fail(EM_ERR_NOMEM, "%s: slice of %s is too large", m->dir, name);
    char *d = be->ops->alloc(be, bytes); /* zeroed: padding rows stay 0 */
    if (!d) return em_fail(EM_ERR_NOMEM, "%s: no room in %s memory for a slice of %s (%zu bytes)", m->dir, be->desc,
                           name, bytes);
    em_status st = dev_list_add(l, d);
    if (st != EM_OK) {
        be->ops->free(be, d);
        return st;
    }
    if (s->nrows) EM_TRY(upload_slice(m, be, t, cols, s, d));
    *w = (em_weight){.dtype = t->dtype, .rows = s->pad_rows, .cols = s->ncols, .data = d, .name = t->name};
    return EM_OK;
}

em_status weight_load_vector_shard(em_model *m, em_backend *be, const char *canonical, int64_t n_full, int64_t off,
                                   int64_t n, float **out) {
    char buf[256];
    const char *name = weight_resolve(m, canonical, buf, sizeof buf);
    *out = NULL;
    const st_tensor *t = st_find(m->st, name);
    if (!t) return em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing", m->dir, name);
    if (t->ndim != 1 || t->shape[0] != n_full)
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s does not have the shape [%lld] the config implies", m->dir, name,
                       (long long)n_full);
    if (t->dtype != EM_F32 && t->dtype != EM_BF16 && t->dtype != EM_F16)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected a float type", m->dir, name,
                       dtype_name(t->dtype));
    if (off < 0 || n < 1 || off + n > n_full)
        return em_fail(EM_ERR_INTERNAL, "%s: elements %lld+%lld are outside %s", m->dir, (long long)off, (long long)n,
                       name);
    float *h = em_mallocn((size_t)n, sizeof *h);
    float *v = be->ops->alloc(be, (size_t)n * sizeof(float));
    if (!h || !v) {
        free(h);
        if (v) be->ops->free(be, v);
        return em_fail(EM_ERR_NOMEM, "out of memory loading %s", name);
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t k = off + i;
        switch (t->dtype) {
        case EM_F32: h[i] = ((const float *)t->data)[k]; break;
        case EM_BF16: h[i] = bf16_to_f32(((const uint16_t *)t->data)[k]); break;
        default: h[i] = f16_to_f32(((const uint16_t *)t->data)[k]); break;
        }
    }
    em_status s = be->ops->upload(be, v, h, (size_t)n * sizeof(float));
    free(h);
    if (s != EM_OK) {
        be->ops->free(be, v);
        return s;
    }
    *out = v;
    return EM_OK;
}
