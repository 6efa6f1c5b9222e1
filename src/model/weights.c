/* weights.c — binding named checkpoint tensors to graph weights, with the
 * shape and dtype checks that make a wrong checkpoint a clear error. */
#include "model/model.h"

#include "base/alloc.h"

#include <stdio.h>

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
    return EM_OK;
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
    float *v = m->be->ops->alloc(m->be, (size_t)n * sizeof(float));
    if (!v) return em_fail(EM_ERR_NOMEM, "out of memory loading %s", name);
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case EM_F32: v[i] = ((const float *)t->data)[i]; break;
        case EM_BF16: v[i] = bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        case EM_F16: v[i] = f16_to_f32(((const uint16_t *)t->data)[i]); break;
        default:
            m->be->ops->free(m->be, v);
            return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected a float type", m->dir, name,
                           dtype_name(t->dtype));
        }
    }
    *out = v;
    return EM_OK;
}
