/* safetensors.c — header parsing and validation, mmap of single files.
 *
 * Format: u64 little-endian header length N, N bytes of JSON (a map from
 * tensor name to {dtype, shape, data_offsets:[begin,end]} plus an optional
 * "__metadata__" map of strings), then the data area; offsets are relative to
 * the start of the data area. */
#include "io/safetensors.h"

#include "base/alloc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void tensor_clear(st_tensor *t) { free(t->name); }

void st_header_free(st_header *h) {
    for (size_t i = 0; i < h->n_tensors; i++) tensor_clear(&h->tensors[i]);
    for (size_t i = 0; i < h->n_metadata; i++) {
        free(h->metadata[i].key);
        free(h->metadata[i].value);
    }
    free(h->tensors);
    free(h->metadata);
    memset(h, 0, sizeof *h);
}

static em_status parse_metadata(json_t *meta, const char *name, st_header *h) {
    if (!json_is_object(meta))
        return em_fail(EM_ERR_FORMAT, "%s: __metadata__ is not an object", name);
    size_t n = json_object_size(meta);
    h->metadata = em_calloc(n, sizeof *h->metadata);
    if (!h->metadata) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return em_fail(EM_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", name, k);
        st_kv *kv = &h->metadata[h->n_metadata++];
        kv->key = em_strdup(k);
        kv->value = em_strndup(json_string_value(v), json_string_length(v));
        if (!kv->key || !kv->value) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    }
    return EM_OK;
}

static em_status parse_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return EM_ERR_FORMAT;
    *out = (uint64_t)json_integer_value(v);
    return EM_OK;
}

static em_status parse_tensor(const char *tname, json_t *desc, uint64_t data_len, const uint8_t *data,
                              const char *name, st_tensor *t) {
    if (!json_is_object(desc)) return em_fail(EM_ERR_FORMAT, "%s: tensor %s: entry is not an object", name, tname);
    json_t *dt = json_object_get(desc, "dtype"), *shape = json_object_get(desc, "shape");
    json_t *offs = json_object_get(desc, "data_offsets");
    if (!json_is_string(dt)) return em_fail(EM_ERR_FORMAT, "%s: tensor %s: dtype missing or not a string", name, tname);
    if (!dtype_from_name(json_string_value(dt), &t->dtype))
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s: unknown dtype '%s'", name, tname, json_string_value(dt));
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_DIMS)
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s: shape missing, not an array or over %d dims", name, tname,
                       ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (parse_u64(json_array_get(shape, (size_t)d), &dim) != EM_OK || dim > INT64_MAX)
            return em_fail(EM_ERR_FORMAT, "%s: tensor %s: shape[%d] is not a non-negative integer", name, tname, d);
        t->shape[d] = (int64_t)dim;
        if (!em_mul_u64(count, dim, &count))
            return em_fail(EM_ERR_FORMAT, "%s: tensor %s: element count overflows", name, tname);
    }
    t->n_elements = count;
    uint64_t begin, end, bytes;
    if (!json_is_array(offs) || json_array_size(offs) != 2 || parse_u64(json_array_get(offs, 0), &begin) ||
        parse_u64(json_array_get(offs, 1), &end))
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s: data_offsets must be two non-negative integers", name, tname);
    if (begin > end || end > data_len)
        return em_fail(EM_ERR_FORMAT,
                       "%s: tensor %s: data_offsets [%llu, %llu] outside the data area of %llu bytes", name, tname,
                       (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_len);
    if (!em_mul_u64(count, dtype_size(t->dtype), &bytes) || bytes != end - begin)
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s: %llu bytes in data_offsets but shape x %s needs %llu", name,
                       tname, (unsigned long long)(end - begin), dtype_name(t->dtype), (unsigned long long)bytes);
    t->name = em_strdup(tname);
    if (!t->name) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    t->offset = begin;
    t->nbytes = (size_t)bytes;
    t->data = data + begin;
    return EM_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static em_status check_overlaps(st_header *h, const char *name) {
    size_t n = h->n_tensors;
    st_tensor *sorted = em_mallocn(n, sizeof *sorted);
    if (!sorted) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    memcpy(sorted, h->tensors, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_offset);
    em_status s = EM_OK;
    for (size_t i = 1; i < n && s == EM_OK; i++) {
        const st_tensor *a = &sorted[i - 1], *b = &sorted[i];
        if (a->offset + a->nbytes > b->offset && b->nbytes && a->nbytes)
            s = em_fail(EM_ERR_FORMAT, "%s: tensors %s and %s overlap in the data area", name, a->name, b->name);
    }
    free(sorted);
    return s;
}

em_status st_parse(const uint8_t *buf, size_t len, const char *name, st_header *out) {
    memset(out, 0, sizeof *out);
    if (len < 8) return em_fail(EM_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file", name, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > len - 8 || hlen > ST_MAX_HEADER)
        return em_fail(EM_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes)", name,
                       (unsigned long long)hlen, len);
    if (hlen < 2 || buf[8] != '{')
        return em_fail(EM_ERR_FORMAT, "%s: header is not a JSON object", name);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return em_fail(EM_ERR_FORMAT, "%s: header JSON: %s (byte %d)", name, jerr.text, jerr.position);
    em_status s = EM_OK;
    if (!json_is_object(root)) s = em_fail(EM_ERR_FORMAT, "%s: header is not a JSON object", name);
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    out->header_len = hlen;
    if (s == EM_OK) {
        out->tensors = em_calloc(json_object_size(root), sizeof *out->tensors);
        if (!out->tensors) s = em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    }
    const char *key;
    json_t *val;
    if (s == EM_OK) {
        json_object_foreach(root, key, val) {
            if (!strcmp(key, "__metadata__")) s = parse_metadata(val, name, out);
            else s = parse_tensor(key, val, data_len, data, name, &out->tensors[out->n_tensors++]);
            if (s != EM_OK) break;
        }
    }
    json_decref(root);
    if (s == EM_OK) s = check_overlaps(out, name);
    if (s != EM_OK) st_header_free(out);
    return s;
}
