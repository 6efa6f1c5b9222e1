/* fingerprint.c — config and artifact fingerprints (see fingerprint.h). */
#include "model/fingerprint.h"

#include "base/alloc.h"
#include "base/sha256.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Fields that do not change what the model computes: bookkeeping of the
 * writer, runtime switches, training-only settings, token ids (they steer
 * generation, not the graph), and the storage dtype and quantization (those
 * belong to the artifact fingerprint). */
static const char *const ignored_keys[] = {
    "transformers_version", "_name_or_path", "name_or_path", "torch_dtype", "dtype", "use_cache",
    "_attn_implementation", "attn_implementation", "_commit_hash", "output_attentions", "output_hidden_states",
    "return_dict", "torchscript", "initializer_range", "quantization", "quantization_config", "bos_token_id",
    "eos_token_id", "pad_token_id", "tokenizer_class", "id2label", "label2id", "problem_type",
    "task_specific_params", "_from_model_config", "auto_map",
};

static bool ignored(const char *key) {
    if (strstr(key, "dropout")) return true;
    for (size_t i = 0; i < sizeof ignored_keys / sizeof ignored_keys[0]; i++)
        if (!strcmp(key, ignored_keys[i])) return true;
    return false;
}

/* A copy of v with ignored keys removed at every depth and integral reals
 * written as integers (10000.0 and 10000 are the same theta). NULL on OOM. */
static json_t *canonical(json_t *v, int depth) {
    if (depth > 64) return json_null();
    if (json_is_object(v)) {
        json_t *o = json_object(), *e;
        const char *k;
        json_object_foreach(v, k, e) {
            if (ignored(k)) continue;
            json_t *c = canonical(e, depth + 1);
            if (!c || json_object_set_new(o, k, c)) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    }
    if (json_is_array(v)) {
        json_t *a = json_array(), *e;
        size_t i;
        json_array_foreach(v, i, e) {
            json_t *c = canonical(e, depth + 1);
            if (!c || json_array_append_new(a, c)) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (floor(d) == d && fabs(d) < 9007199254740992.0) return json_integer((json_int_t)d);
    }
    return json_deep_copy(v);
}

static void digest_hex(em_sha256 *s, char out[FP_HEX + 1]) {
    uint8_t d[32];
    em_sha256_final(s, d);
    em_sha256_hex(d, FP_HEX, out);
}

static em_status dump_canonical(json_t *v, char **out) {
    json_t *c = canonical(v, 0);
    *out = c ? json_dumps(c, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(c);
    return *out ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
}

em_status fingerprint_config_canonical(const char *text, size_t len, const char *path, char **out) {
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return em_fail(EM_ERR_FORMAT, "%s: not a JSON object: %s", path, jerr.text);
    }
    em_status s = dump_canonical(root, out);
    json_decref(root);
    return s;
}

em_status fingerprint_config(const char *text, size_t len, const char *path, char out[FP_HEX + 1]) {
    char *canon;
    EM_TRY(fingerprint_config_canonical(text, len, path, &canon));
    em_sha256 s;
    em_sha256_init(&s);
    em_sha256_update(&s, canon, strlen(canon));
    free(canon);
    digest_hex(&s, out);
    return EM_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* Fields are NUL-separated so no two different layouts share a byte string. */
static void hash_str(em_sha256 *s, const char *str) { em_sha256_update(s, str, strlen(str) + 1); }

static void hash_tensors(em_sha256 *s, const st_tensor **sorted, size_t n) {
    char num[32];
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = sorted[i];
        hash_str(s, t->name);
        hash_str(s, dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%lld", (long long)t->shape[d]);
            hash_str(s, num);
        }
        hash_str(s, ";");
    }
}

/* The quantization settings of config.json, canonical, or "" when none. */
static em_status quant_settings(const char *text, size_t len, char **out) {
    *out = NULL;
    json_t *root = text ? json_loadb(text, len, 0, NULL) : NULL, *q = NULL;
    if (json_is_object(root)) {
        q = json_object();
        const char *keys[] = {"quantization", "quantization_config"};
        for (size_t i = 0; q && i < 2; i++) {
            json_t *v = json_object_get(root, keys[i]);
            if (v) json_object_set(q, keys[i], v);
        }
    }
    em_status s = EM_OK;
    if (q && json_object_size(q)) {
        *out = json_dumps(q, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17));
        if (!*out) s = em_fail(EM_ERR_NOMEM, "out of memory");
    } else if (!(*out = em_strdup(""))) {
        s = em_fail(EM_ERR_NOMEM, "out of memory");
    }
    json_decref(q);
    json_decref(root);
    return s;
}

static int kv_cmp(const void *a, const void *b) {
    const st_kv *x = *(const st_kv *const *)a, *y = *(const st_kv *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->value, y->value);
}

/* __metadata__ of every file, sorted and de-duplicated; "format" names the
 * writing framework ("pt", "mlx"), not the weights, and is left out. */
static em_status hash_metadata(em_sha256 *s, const st_set *st) {
    size_t n = 0;
    for (int f = 0; f < st_n_files(st); f++) n += st_file_header(st, f)->n_metadata;
    const st_kv **all = em_mallocn(n ? n : 1, sizeof *all);
    if (!all) return em_fail(EM_ERR_NOMEM, "out of memory");
    n = 0;
    for (int f = 0; f < st_n_files(st); f++) {
        const st_header *h = st_file_header(st, f);
        for (size_t i = 0; i < h->n_metadata; i++)
            if (strcmp(h->metadata[i].key, "format")) all[n++] = &h->metadata[i];
    }
    qsort(all, n, sizeof *all, kv_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i && !kv_cmp(&all[i], &all[i - 1])) continue;
        hash_str(s, all[i]->key);
        hash_str(s, all[i]->value);
    }
    free(all);
    return EM_OK;
}

em_status fingerprint_artifact(const st_set *st, const char *config_text, size_t config_len, char out[FP_HEX + 1]) {
    size_t n = st_count(st);
    const st_tensor **sorted = em_mallocn(n ? n : 1, sizeof *sorted);
    if (!sorted) return em_fail(EM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) sorted[i] = st_at(st, i);
    qsort(sorted, n, sizeof *sorted, by_name);
    em_sha256 s;
    em_sha256_init(&s);
    hash_str(&s, "ember-artifact-1");
    hash_tensors(&s, sorted, n);
    free(sorted);
    char *q;
    EM_TRY(quant_settings(config_text, config_len, &q));
    hash_str(&s, "quantization");
    hash_str(&s, q);
    free(q);
    hash_str(&s, "metadata");
    EM_TRY(hash_metadata(&s, st));
    digest_hex(&s, out);
    return EM_OK;
}
