/* st_writer.c — writes safetensors files tensor by tensor. */
#include "io/st_writer.h"

#include "base/alloc.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct st_writer {
    FILE *f;
    char *path;
    uint64_t expected, written;
};

uint64_t st_wtensor_bytes(const st_wtensor *t) {
    uint64_t n = dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0 || !em_mul_u64(n, (uint64_t)t->shape[i], &n)) return 0;
    return n;
}

/* Header JSON: tensors in order with consecutive offsets, then metadata. */
static em_status build_header(const st_wtensor *t, size_t n, const st_kv *meta, size_t n_meta, char **out,
                              uint64_t *total) {
    json_t *root = json_object();
    if (!root) return em_fail(EM_ERR_NOMEM, "out of memory");
    uint64_t off = 0;
    if (n_meta) {
        json_t *m = json_object();
        for (size_t i = 0; i < n_meta; i++) json_object_set_new(m, meta[i].key, json_string(meta[i].value));
        json_object_set_new(root, "__metadata__", m);
    }
    for (size_t i = 0; i < n; i++) {
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS) {
            json_decref(root);
            return em_fail(EM_ERR_INVALID, "tensor %s: %d dimensions", t[i].name, t[i].ndim);
        }
        uint64_t bytes = st_wtensor_bytes(&t[i]), end;
        if ((bytes == 0 && t[i].ndim && dtype_size(t[i].dtype)) || !em_add_u64(off, bytes, &end)) {
            json_decref(root);
            return em_fail(EM_ERR_INVALID, "tensor %s: size overflows", t[i].name);
        }
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)end));
        json_object_set_new(e, "dtype", json_string(dtype_name(t[i].dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_get(root, t[i].name)) {
            json_decref(e);
            json_decref(root);
            return em_fail(EM_ERR_INVALID, "tensor %s declared twice", t[i].name);
        }
        json_object_set_new(root, t[i].name, e);
        off = end;
    }
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!*out) return em_fail(EM_ERR_NOMEM, "out of memory");
    *total = off;
    return EM_OK;
}

em_status st_writer_open(const char *path, const st_wtensor *t, size_t n, const st_kv *meta, size_t n_meta,
                         st_writer **out) {
    *out = NULL;
    char *hdr;
    uint64_t total = 0;
    EM_TRY(build_header(t, n, meta, n_meta, &hdr, &total));
    size_t len = strlen(hdr), padded = (len + 7) & ~(size_t)7;
    st_writer *w = em_calloc(1, sizeof *w);
    if (!w || !(w->path = em_strdup(path))) {
        free(w);
        free(hdr);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    w->expected = total;
    w->f = fopen(path, "wb");
    if (!w->f) {
        em_status s = em_fail(EM_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        free(hdr);
        free(w->path);
        free(w);
        return s;
    }
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(le, 1, 8, w->f) == 8 && fwrite(hdr, 1, len, w->f) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', w->f) != EOF;
    free(hdr);
    if (!ok) {
        st_writer_abort(w);
        return em_fail(EM_ERR_IO, "%s: write failed", path);
    }
    *out = w;
    return EM_OK;
}

em_status st_writer_write(st_writer *w, const void *data, size_t len) {
    if (len > w->expected - w->written)
        return em_fail(EM_ERR_INTERNAL, "%s: %zu bytes more than the declared tensors hold", w->path, len);
    if (len && fwrite(data, 1, len, w->f) != len) return em_fail(EM_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    w->written += len;
    return EM_OK;
}

em_status st_writer_close(st_writer *w) {
    em_status s = EM_OK;
    if (w->written != w->expected)
        s = em_fail(EM_ERR_INTERNAL, "%s: %llu of %llu declared bytes written", w->path, (unsigned long long)w->written,
                    (unsigned long long)w->expected);
    if (fclose(w->f) != 0 && s == EM_OK) s = em_fail(EM_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    free(w->path);
    free(w);
    return s;
}

void st_writer_abort(st_writer *w) {
    if (!w) return;
    fclose(w->f);
    free(w->path);
    free(w);
}
