/* weights.c — binding named checkpoint tensors to graph weights, with the
 * shape and dtype checks that make a wrong checkpoint a clear error. */
#include "model/model.h"
#include "model/weights_host.h"

#include "base/alloc.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Counts `bytes` more of the weights copied; logs progress every tenth of
 * the checkpoint, since a large model takes seconds to cross the bus. */
static void note_copied(em_model *m, size_t bytes, const char *where) {
    size_t total = (size_t)st_data_bytes(m->st), step = total / 10;
    m->weight_uploaded += bytes;
    if (step && m->weight_uploaded >= m->weight_progress + step) {
        m->weight_progress = m->weight_uploaded;
        EM_LOGI("%s: copied %.2f of %.2f GiB of weights to %s", m->dir, m->weight_uploaded / 1073741824.0,
                total / 1073741824.0, where);
    }
}

/* Copies tensor t into backend memory. */
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
    note_copied(m, t->nbytes, be->desc);
    *out = d;
    return EM_OK;
}

/* Where the backend reads tensor t: its device copy, or for host memory
 * its host copy or its place in the mapped checkpoint (weights_host.c;
 * always the latter with in_place). */
static em_status place_tensor(em_model *m, const st_tensor *t, bool in_place, const void **out) {
    if (!m->be->ops->host_memory) return upload_tensor(m, t, out);
    if (in_place) {
        *out = t->data;
        return EM_OK;
    }
    size_t copied;
    EM_TRY(host_weights_place(m, t, out, &copied));
    if (copied) note_copied(m, copied, "huge pages");
    return EM_OK;
}

static em_status check_shape(em_model *m, const st_tensor *t, int64_t rows, int64_t cols, const char *what) {
    if (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols) return EM_OK;
    char got[96];
    shape_str(t, got, sizeof got);
    return em_fail(EM_ERR_FORMAT, "%s: tensor %s has shape %s; %s implies [%lld, %lld]", m->dir, t->name, got, what,
                   (long long)rows, (long long)cols);
}

/* Binds the packed weight, scales and biases of a quantized module. */
static em_status bind_quantized(em_model *m, const char *module, const st_tensor *t, int64_t rows, int64_t cols,
                                int bits, int group, bool in_place, em_weight *w) {
    if (cols % group != 0)
        return em_fail(EM_ERR_FORMAT, "%s: %s has %lld input columns, not a multiple of its group size %d", m->dir,
                       module, (long long)cols, group);
    if ((cols * bits) % 32 != 0)
        return em_fail(EM_ERR_FORMAT, "%s: %s: %lld columns of %d bits do not fill whole 32-bit words", m->dir,
                       module, (long long)cols, bits);
    if (t->dtype != EM_U32)
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s has dtype %s; a %d-bit quantized module packs into U32", m->dir,
                       t->name, dtype_name(t->dtype), bits);
    char what[96];
    snprintf(what, sizeof what, "%d-bit packing of [%lld, %lld]", bits, (long long)rows, (long long)cols);
    EM_TRY(check_shape(m, t, rows, cols * bits / 32, what));
    char name[288];
    const st_tensor *s, *b;
    snprintf(name, sizeof name, "%s.scales", module);
    EM_TRY(find(m, name, &s));
    snprintf(name, sizeof name, "%s.biases", module);
    EM_TRY(find(m, name, &b));
    snprintf(what, sizeof what, "group size %d over [%lld, %lld]", group, (long long)rows, (long long)cols);
    EM_TRY(check_shape(m, s, rows, cols / group, what));
    EM_TRY(check_shape(m, b, rows, cols / group, what));
    if (s->dtype != b->dtype || (s->dtype != EM_F32 && s->dtype != EM_F16 && s->dtype != EM_BF16))
        return em_fail(EM_ERR_FORMAT, "%s: %s: scales (%s) and biases (%s) must share one float dtype", m->dir, module,
                       dtype_name(s->dtype), dtype_name(b->dtype));
    *w = (em_weight){.dtype = EM_U32, .rows = rows, .cols = cols, .data = t->data, .name = t->name, .bits = bits,
                     .group_size = group, .scales = s->data, .biases = b->data, .scale_dtype = s->dtype};
    if (m->be->ops->host_memory && !in_place) { /* one record a row, or in place */
        size_t copied;
        EM_TRY(host_weights_place_quant(m, t, s, b, w, &copied));
        if (copied) note_copied(m, copied, "huge pages");
        return EM_OK;
    }
    /* the packed words, scales and biases, as they are */
    EM_TRY(place_tensor(m, t, in_place, &w->data));
    EM_TRY(place_tensor(m, s, in_place, &w->scales));
    return place_tensor(m, b, in_place, &w->biases);
}

static em_status bind(em_model *m, const char *canonical, int64_t rows, int64_t cols, bool in_place, em_weight *w) {
    char buf[256];
    const char *name = weight_resolve(m, canonical, buf, sizeof buf);
    const st_tensor *t;
    EM_TRY(find(m, name, &t));
    char module[256];
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight") && n - 7 < sizeof module) {
        memcpy(module, name, n - 7);
        module[n - 7] = 0;
        int bits = 0, group = 0;
        quant_choice q = quant_config_lookup(&m->qcfg, module, &bits, &group);
        char sname[272];
        snprintf(sname, sizeof sname, "%s.scales", module);
        bool has_scales = st_find(m->st, sname) != NULL;
        if (q == QC_QUANTIZED || (q == QC_UNLISTED && has_scales)) {
            if (!m->qcfg.present)
                return em_fail(EM_ERR_FORMAT, "%s: %s has quantization scales but config.json has no quantization block",
                               m->dir, module);
            return bind_quantized(m, module, t, rows, cols, bits, group, in_place, w);
        }
    }
    if (t->dtype != EM_F32 && t->dtype != EM_F16 && t->dtype != EM_BF16)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected F32, F16 or BF16", m->dir, name,
                       dtype_name(t->dtype));
    EM_TRY(check_shape(m, t, rows, cols, "the config"));
    *w = (em_weight){.dtype = t->dtype, .rows = rows, .cols = cols, .data = t->data, .name = t->name};
    return place_tensor(m, t, in_place, &w->data);
}

em_status weight_bind(em_model *m, const char *name, int64_t rows, int64_t cols, em_weight *w) {
    return bind(m, name, rows, cols, false, w);
}

em_status weight_bind_rows(em_model *m, const char *name, int64_t rows, int64_t cols, em_weight *w) {
    return bind(m, name, rows, cols, true, w);
}

void weights_release(em_model *m) {
    host_weights_release(m);
    for (size_t i = 0; i < m->n_weight_bufs; i++) m->be->ops->free(m->be, m->weight_bufs[i]);
    free(m->weight_bufs);
    m->weight_bufs = NULL;
    m->n_weight_bufs = m->cap_weight_bufs = 0;
}


static em_status load_f32(em_model *m, const st_tensor *t, const char *name, int64_t n, float shift, float **out);

em_status weight_load_vector_shifted(em_model *m, const char *canonical, int64_t n, bool optional, float shift,
                                     float **out) {
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
    return load_f32(m, t, name, n, shift, out);
}

em_status weight_load_vector(em_model *m, const char *canonical, int64_t n, bool optional, float **out) {
    return weight_load_vector_shifted(m, canonical, n, optional, 0.0f, out);
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
    return load_f32(m, t, name, n, 0.0f, out);
}

static em_status load_f32(em_model *m, const st_tensor *t, const char *name, int64_t n, float shift, float **out) {
    if (t->dtype != EM_F32 && t->dtype != EM_BF16 && t->dtype != EM_F16)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; expected a float type", m->dir, name,
                       dtype_name(t->dtype));
    /* converted (and shifted) on the host, then uploaded (a plain copy on the CPU) */
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
        h[i] += shift;
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
