/* source.c — logical tensors of a checkpoint for the quantizer. */
#include "quant/source.h"

#include "base/alloc.h"
#include "base/file.h"
#include "tensor/affine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t qsrc_elements(const qsrc_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* True when `name` is the .scales/.biases of a module with a U32 weight. */
static bool is_quant_side(const st_set *st, const char *name) {
    const char *suf = ends_with(name, ".scales") ? ".scales" : ends_with(name, ".biases") ? ".biases" : NULL;
    if (!suf) return false;
    char w[512];
    size_t base = strlen(name) - strlen(suf);
    if (base + 8 > sizeof w) return false;
    memcpy(w, name, base);
    memcpy(w + base, ".weight", 8);
    const st_tensor *t = st_find(st, w);
    return t && t->dtype == EM_U32;
}

static em_status add_tensor(qsrc *s, const st_tensor *t, size_t *cap) {
    if (!em_grow((void **)&s->tensors, cap, s->n + 1, sizeof *s->tensors)) return em_fail(EM_ERR_NOMEM, "out of memory");
    qsrc_tensor *q = &s->tensors[s->n];
    *q = (qsrc_tensor){.name = t->name, .ndim = t->ndim, .t = t};
    memcpy(q->shape, t->shape, sizeof q->shape);
    if (t->dtype == EM_U32 && ends_with(t->name, ".weight")) {
        char module[512], name[528];
        size_t len = strlen(t->name) - 7;
        if (len >= sizeof module) return em_fail(EM_ERR_FORMAT, "%s: tensor name too long", s->dir);
        memcpy(module, t->name, len);
        module[len] = 0;
        int bits, group;
        if (!s->qc.present || quant_config_lookup(&s->qc, module, &bits, &group) == QC_FLOAT)
            return em_fail(EM_ERR_FORMAT, "%s: tensor %s is packed U32 but config.json does not quantize %s", s->dir,
                           t->name, module);
        snprintf(name, sizeof name, "%s.scales", module);
        q->scales = st_find(s->st, name);
        snprintf(name, sizeof name, "%s.biases", module);
        q->biases = st_find(s->st, name);
        if (!q->scales || !q->biases) return em_fail(EM_ERR_FORMAT, "%s: %s lacks its scales or biases", s->dir, module);
        if (t->ndim != 2 || q->scales->ndim != 2 || q->biases->ndim != 2)
            return em_fail(EM_ERR_FORMAT, "%s: %s: quantized tensors must be 2-D", s->dir, module);
        int64_t cols = t->shape[1] * 32 / bits;
        if ((t->shape[1] * 32) % bits || cols % group || q->scales->shape[0] != t->shape[0] ||
            q->scales->shape[1] != cols / group || q->biases->shape[0] != t->shape[0] ||
            q->biases->shape[1] != cols / group || q->scales->dtype != q->biases->dtype ||
            (q->scales->dtype != EM_BF16 && q->scales->dtype != EM_F16 && q->scales->dtype != EM_F32))
            return em_fail(EM_ERR_FORMAT, "%s: %s: packed, scales and biases shapes disagree with %d bits, group %d",
                           s->dir, module, bits, group);
        q->bits = bits;
        q->group = group;
        q->shape[1] = cols;
    }
    s->n++;
    return EM_OK;
}

static em_status load_config(qsrc *s) {
    char *path = em_path_join(s->dir, "config.json"), *text = NULL;
    size_t len;
    if (!path) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status st = em_read_file(path, 16u << 20, &text, &len);
    if (st == EM_OK) {
        json_error_t jerr;
        s->config = json_loadb(text, len, 0, &jerr);
        if (!s->config || !json_is_object(s->config))
            st = em_fail(EM_ERR_FORMAT, "%s: %s (line %d)", path, s->config ? "not an object" : jerr.text, jerr.line);
        else st = quant_config_parse(s->config, path, &s->qc);
        if (st == EM_OK) {
            s->cfg_ok = model_config_parse(text, len, path, &s->cfg) == EM_OK;
            em_clear_error();
        }
    }
    free(text);
    free(path);
    return st;
}

em_status qsrc_open(const char *dir, qsrc *s) {
    memset(s, 0, sizeof *s);
    if (!(s->dir = em_strdup(dir))) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status st = load_config(s);
    if (st == EM_OK) st = st_open(dir, &s->st);
    size_t cap = 0;
    s->float_dtype = EM_BF16;
    bool seen_float = false;
    for (size_t i = 0; st == EM_OK && i < st_count(s->st); i++) {
        const st_tensor *t = st_at(s->st, i);
        if (is_quant_side(s->st, t->name)) continue;
        if (!seen_float && (t->dtype == EM_BF16 || t->dtype == EM_F16 || t->dtype == EM_F32)) {
            s->float_dtype = t->dtype;
            seen_float = true;
        }
        st = add_tensor(s, t, &cap);
    }
    if (st != EM_OK) qsrc_close(s);
    return st;
}

void qsrc_close(qsrc *s) {
    st_close(s->st);
    quant_config_free(&s->qc);
    json_decref(s->config);
    free(s->tensors);
    free(s->dir);
    memset(s, 0, sizeof *s);
}

const qsrc_tensor *qsrc_find(const qsrc *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->tensors[i].name, name)) return &s->tensors[i];
    return NULL;
}

em_status qsrc_read(const qsrc *s, const qsrc_tensor *t, float *out) {
    uint64_t n = qsrc_elements(t);
    if (t->bits) {
        for (int64_t r = 0; r < t->shape[0]; r++)
            affine_dequant(t->t->data, t->scales->data, t->biases->data, t->scales->dtype, t->bits, t->group,
                           t->shape[1], r, 0, t->shape[1], out + (size_t)r * (size_t)t->shape[1]);
        return EM_OK;
    }
    switch (t->t->dtype) {
    case EM_F32: memcpy(out, t->t->data, n * sizeof(float)); return EM_OK;
    case EM_BF16: for (uint64_t i = 0; i < n; i++) out[i] = bf16_to_f32(((const uint16_t *)t->t->data)[i]); return EM_OK;
    case EM_F16: for (uint64_t i = 0; i < n; i++) out[i] = f16_to_f32(((const uint16_t *)t->t->data)[i]); return EM_OK;
    default:
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; the quantizer reads float tensors", s->dir,
                       t->name, dtype_name(t->t->dtype));
    }
}
