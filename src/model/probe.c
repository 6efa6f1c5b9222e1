/* probe.c — describing a model directory from its headers (probe.h). */
#include "model/probe.h"

#include "base/alloc.h"
#include "base/file.h"
#include "model/registry.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void raw_config(const char *dir, model_probe *p) {
    char *path = em_path_join(dir, "config.json"), *text = NULL;
    size_t len;
    if (path && em_read_file(path, 16u << 20, &text, &len) == EM_OK) {
        json_t *root = json_loadb(text, len, 0, NULL);
        json_t *mt = json_object_get(root, "model_type"), *ar = json_object_get(root, "architectures");
        if (json_is_string(mt)) snprintf(p->model_type, sizeof p->model_type, "%s", json_string_value(mt));
        if (json_is_array(ar) && json_is_string(json_array_get(ar, 0)))
            snprintf(p->architecture, sizeof p->architecture, "%s", json_string_value(json_array_get(ar, 0)));
        json_t *q = json_object_get(root, "quantization");
        if (!json_is_object(q)) q = json_object_get(root, "quantization_config");
        if (json_is_object(q)) {
            json_t *b = json_object_get(q, "bits"), *g = json_object_get(q, "group_size");
            p->quant_bits = json_is_integer(b) ? (int)json_integer_value(b) : 0;
            p->quant_group = json_is_integer(g) ? (int)json_integer_value(g) : 0;
            snprintf(p->quant, sizeof p->quant, "%d-bit affine, group %d", p->quant_bits, p->quant_group);
        }
        json_decref(root);
    }
    free(text);
    free(path);
}

/* Packed U32 weights hold 32/bits values per element; their scales and
 * biases are quantization bookkeeping, not parameters. */
static uint64_t count_params(const st_set *st, int bits) {
    uint64_t n = 0;
    for (size_t i = 0; i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        size_t l = strlen(t->name);
        bool aux = bits && ((l > 7 && !strcmp(t->name + l - 7, ".scales")) || (l > 7 && !strcmp(t->name + l - 7, ".biases")));
        if (aux) continue;
        n += t->dtype == EM_U32 && bits > 0 ? t->n_elements * (uint64_t)(32 / bits) : t->n_elements;
    }
    return n;
}

static em_status note(model_probe *p, em_status s) {
    if (s != EM_OK && !p->error[0]) snprintf(p->error, sizeof p->error, "%s", em_last_error());
    return s;
}

em_status model_probe_open(const char *dir, const char *profiles_dir, model_probe *p) {
    memset(p, 0, sizeof *p);
    raw_config(dir, p);
    em_status first = note(p, model_config_load(dir, &p->cfg));
    p->config_ok = first == EM_OK;
    em_status s = note(p, st_open(dir, &p->st));
    if (s != EM_OK) {
        p->st = NULL;
        return first != EM_OK ? first : s;
    }
    p->n_params = count_params(p->st, p->quant_bits);
    if (!p->config_ok) {
        /* fingerprints need no parsed config; the selection does */
        char *path = em_path_join(dir, "config.json"), *text = NULL;
        size_t len;
        if (path && em_read_file(path, 16u << 20, &text, &len) == EM_OK &&
            fingerprint_config(text, len, path, p->id.config_fp) == EM_OK)
            fingerprint_artifact(p->st, text, len, p->id.artifact_fp);
        free(text);
        free(path);
        return first;
    }
    s = note(p, registry_identify(dir, &p->cfg, p->st, profiles_dir, &p->id));
    p->identity_ok = s == EM_OK;
    return s;
}

void model_probe_close(model_probe *p) {
    st_close(p->st);
    p->st = NULL;
}
