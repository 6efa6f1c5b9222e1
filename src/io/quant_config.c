/* quant_config.c — parsing the MLX `quantization` block of config.json. */
#include "io/quant_config.h"

#include "base/alloc.h"
#include "base/file.h"
#include "tensor/affine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static em_status get_params(json_t *obj, const char *path, const char *where, int *bits, int *group) {
    json_t *b = json_object_get(obj, "bits"), *g = json_object_get(obj, "group_size"), *m = json_object_get(obj, "mode");
    if (b) {
        if (!json_is_integer(b) || !affine_bits_ok((int)json_integer_value(b)))
            return em_fail(EM_ERR_UNSUPPORTED, "%s: %s.bits must be one of 2, 3, 4, 5, 6, 8", path, where);
        *bits = (int)json_integer_value(b);
    }
    if (g) {
        if (!json_is_integer(g) || !affine_group_ok((int)json_integer_value(g)))
            return em_fail(EM_ERR_UNSUPPORTED, "%s: %s.group_size must be 32, 64 or 128", path, where);
        *group = (int)json_integer_value(g);
    }
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) return em_fail(EM_ERR_FORMAT, "%s: %s.mode must be a string", path, where);
        if (strcmp(json_string_value(m), "affine"))
            return em_fail(EM_ERR_UNSUPPORTED, "%s: %s.mode '%s' is not supported (only affine)", path, where,
                           json_string_value(m));
    }
    return EM_OK;
}

static bool is_param_key(const char *k) {
    return !strcmp(k, "bits") || !strcmp(k, "group_size") || !strcmp(k, "mode");
}

em_status quant_config_parse(json_t *root, const char *path, quant_config *out) {
    memset(out, 0, sizeof *out);
    const char *field = "quantization";
    json_t *q = json_object_get(root, field);
    if (!q || json_is_null(q)) q = json_object_get(root, field = "quantization_config");
    if (!q || json_is_null(q)) return EM_OK;
    if (!json_is_object(q)) return em_fail(EM_ERR_FORMAT, "%s: %s must be an object", path, field);
    json_t *method = json_object_get(q, "quant_method");
    if (method && json_is_string(method) && strcmp(json_string_value(method), "mlx") &&
        strcmp(json_string_value(method), "affine"))
        return em_fail(EM_ERR_UNSUPPORTED, "%s: %s.quant_method '%s' is not supported (MLX affine only)", path, field,
                       json_string_value(method));
    out->present = true;
    out->bits = 4;
    out->group_size = 64;
    if (!json_object_get(q, "bits") || !json_object_get(q, "group_size"))
        return em_fail(EM_ERR_FORMAT, "%s: %s needs bits and group_size", path, field);
    EM_TRY(get_params(q, path, field, &out->bits, &out->group_size));
    const char *k;
    json_t *v;
    size_t cap = 0;
    json_object_foreach(q, k, v) {
        if (is_param_key(k) || !(json_is_object(v) || json_is_boolean(v))) continue;
        if (!em_grow((void **)&out->overrides, &cap, out->n_overrides + 1, sizeof *out->overrides)) {
            quant_config_free(out);
            return em_fail(EM_ERR_NOMEM, "out of memory");
        }
        quant_override *o = &out->overrides[out->n_overrides];
        *o = (quant_override){.quantized = !json_is_false(v), .bits = out->bits, .group_size = out->group_size};
        if (json_is_object(v)) {
            char where[512];
            snprintf(where, sizeof where, "%s[\"%s\"]", field, k);
            em_status s = get_params(v, path, where, &o->bits, &o->group_size);
            if (s != EM_OK) {
                quant_config_free(out);
                return s;
            }
        }
        if (!(o->module = em_strdup(k))) {
            quant_config_free(out);
            return em_fail(EM_ERR_NOMEM, "out of memory");
        }
        out->n_overrides++;
    }
    return EM_OK;
}

em_status quant_config_load(const char *dir, quant_config *out) {
    memset(out, 0, sizeof *out);
    char *path = em_path_join(dir, "config.json"), *text;
    size_t len;
    if (!path) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = em_read_file(path, 16u << 20, &text, &len);
    if (s != EM_OK) {
        free(path);
        return s;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root) s = em_fail(EM_ERR_FORMAT, "%s: %s (line %d)", path, jerr.text, jerr.line);
    else s = quant_config_parse(root, path, out);
    json_decref(root);
    free(path);
    return s;
}

void quant_config_free(quant_config *qc) {
    for (size_t i = 0; i < qc->n_overrides; i++) free(qc->overrides[i].module);
    free(qc->overrides);
    memset(qc, 0, sizeof *qc);
}

quant_choice quant_config_lookup(const quant_config *qc, const char *module, int *bits, int *group) {
    *bits = qc->bits;
    *group = qc->group_size;
    for (size_t i = 0; i < qc->n_overrides; i++) {
        const quant_override *o = &qc->overrides[i];
        if (strcmp(o->module, module)) continue;
        if (!o->quantized) return QC_FLOAT;
        *bits = o->bits;
        *group = o->group_size;
        return QC_QUANTIZED;
    }
    return QC_UNLISTED;
}
