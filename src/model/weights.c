/* weights.c — binding named checkpoint tensors to graph weights, with the
 * shape and dtype checks that make a wrong checkpoint a clear error. */
#include "model/model.h"

#include "base/alloc.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>

const char *weight_resolve(const em_model *m, const char *name, char *buf, size_t len) {
    return m->weight_name ? m->weight_name(m, name, buf, len) : name;
}

static em_status find(em_model *m, const char *name, const st_tensor **out) {
    *out = st_find(m->st, name);
    if (!*out) return em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing", m->dir, name);
    return EM_OK;
}

static void shape_str(const st_tensor *t, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < t->ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* Records a device buffer the model owns. */
static em_status track(em_model *m, void *p) {
    if (m->n_weight_bufs == m->cap_weight_bufs) {
        size_t cap = m->cap_weight_bufs ? m->cap_weight_bufs * 2 : 64;
        void **b = realloc(m->weight_bufs, cap * sizeof *b);
        if (!b) return em_fail(EM_ERR_NOMEM, "out of memory");
        m->weight_bufs = b;
        m->cap_weight_bufs = cap;
    }
    m->weight_bufs[m->n_weight_bufs++] = p;
    return EM_OK;
}

/* Copies tensor t into backend memory; logs progress every tenth of the
 * checkpoint, since a large model takes seconds to cross the bus. */
static em_status upload_tensor(em_model *m, const st_tensor *t, const void **out) {
    em_backend *be = m->be;
    void *d = be->ops->alloc(be, t->nbytes);
    if (!d) return em_fail(EM_ERR_NOMEM, "%s: no room in %s memory for tensor %s (%zu bytes)", m->dir, be->desc,
                           t->name, (size_t)t->nbytes);
    em_status s = track(m, d);
    if (s != EM_OK) {
        be->ops->free(be, d);
        return s;
    }
    EM_TRY(be->ops->upload(be, d, t->data, t->nbytes));
    size_t total = (size_t)st_data_bytes(m->st), step = total / 10;
    m->weight_uploaded += t->nbytes;
    if (step && m->weight_uploaded >= m->weight_progress + step) {
        m->weight_progress = m->weight_uploaded;
        EM_LOGI("%s: uploaded %.2f of %.2f GiB of weights to %s", m->dir, m->weight_uploaded / 1073741824.0,
                total / 1073741824.0, be->desc);
    }
    *out = d;
    return EM_OK;
}

em_status weight_bind(em_model *m, const char *canonical, int64_t rows, int64_t cols, em_weight *w) {
    char buf[256];
    const char *name = weight_resolve(m, canonical, buf, sizeof buf);
    const st_tensor *t;
    EM_TRY(find(m, name, &t));
    if (t->dtype != EM_F32 && t->dtype != EM_F16 && t->dtype != EM_BF16)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected F32, F16 or BF16", m->dir, name,
                       dtype_name(t->dtype));
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        char got[96];
        shape_str(t, got, sizeof got);
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s has shape %s; the config implies [%lld, %lld]", m->dir, name, got,
                       (long long)rows, (long long)cols);
    }
    *w = (em_weight){.dtype = t->dtype, .rows = rows, .cols = cols, .data = t->data, .name = t->name};
    if (!m->be->ops->host_memory) EM_TRY(upload_tensor(m, t, &w->data));
    return EM_OK;
}

void weights_release(em_model *m) {
    for (size_t i = 0; i < m->n_weight_bufs; i++) m->be->ops->free(m->be, m->weight_bufs[i]);
    free(m->weight_bufs);
    m->weight_bufs = NULL;
    m->n_weight_bufs = m->cap_weight_bufs = 0;
}


static em_status load_f32(em_model *m, const st_tensor *t, const char *name, int64_t n, float **out);

em_status weight_load_vector(em_model *m, const char *canonical, int64_t n, bool optional, float **out) {
    char buf[256];
    const char *name = weight_resolve(m, canonical, buf, sizeof buf);
    *out = NULL;
    const st_tensor *t = st_find(m->st, name);
    if (!t) return optional ? EM_OK : em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing", m->dir, name);
    if (t->ndim != 1 || t->shape[0] != n) {
        char got[96];
        shape_str(t, got, sizeof got);
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s has shape %s; the config implies [%lld]", m->dir, name, got,
                       (long long)n);
    }
    return load_f32(m, t, name, n, out);
}

em_status weight_load_array(em_model *m, const char *canonical, int ndim, const int64_t *shape, float **out) {
    char buf[256];
    const char *name = weight_resolve(m, canonical, buf, sizeof buf);
    const st_tensor *t;
    *out = NULL;
    EM_TRY(find(m, name, &t));
    bool same = t->ndim == ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        same = same && t->shape[i] == shape[i];
        n *= shape[i];
    }
    if (!same) {
        char got[96];
        shape_str(t, got, sizeof got);
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s has shape %s, not the one the config implies", m->dir, name, got);
    }
    return load_f32(m, t, name, n, out);
}

static em_status load_f32(em_model *m, const st_tensor *t, const char *name, int64_t n, float **out) {
    if (t->dtype != EM_F32 && t->dtype != EM_BF16 && t->dtype != EM_F16)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected a float type", m->dir, name,
                       dtype_name(t->dtype));
    /* converted on the host, then uploaded (a plain copy on the CPU) */
    float *h = em_mallocn((size_t)n, sizeof *h);
    float *v = m->be->ops->alloc(m->be, (size_t)n * sizeof(float));
    if (!h || !v) {
        free(h);
        if (v) m->be->ops->free(m->be, v);
        return em_fail(EM_ERR_NOMEM, "out of memory loading %s", name);
    }
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case EM_F32: h[i] = ((const float *)t->data)[i]; break;
        case EM_BF16: h[i] = bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        default: h[i] = f16_to_f32(((const uint16_t *)t->data)[i]); break;
        }
    }
    em_status s = m->be->ops->upload(m->be, v, h, (size_t)n * sizeof(float));
    free(h);
    if (s != EM_OK) {
        m->be->ops->free(m->be, v);
        return s;
    }
    *out = v;
    return EM_OK;
}
