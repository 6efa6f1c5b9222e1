/* model_config.c — config.json → model_config for the Llama family
 * (llama, mistral, qwen2, qwen3). Other families parse their extra fields in
 * their own files and share the helpers here. */
#include "io/model_config.h"

#include "base/alloc.h"
#include "base/file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

em_status mc_get_int(json_t *obj, const char *key, const char *path, bool required, long long *out, bool *found) {
    json_t *v = json_object_get(obj, key);
    if (found) *found = false;
    if (!v || json_is_null(v)) {
        if (required) return em_fail(EM_ERR_FORMAT, "%s: required field '%s' is missing", path, key);
        return EM_OK;
    }
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 1e15) {
        *out = (long long)json_real_value(v);
    } else if (!json_is_integer(v)) {
        return em_fail(EM_ERR_FORMAT, "%s: field '%s' must be an integer", path, key);
    } else {
        *out = json_integer_value(v);
    }
    if (found) *found = true;
    return EM_OK;
}

em_status mc_get_num(json_t *obj, const char *key, const char *path, bool required, double *out, bool *found) {
    json_t *v = json_object_get(obj, key);
    if (found) *found = false;
    if (!v || json_is_null(v)) {
        if (required) return em_fail(EM_ERR_FORMAT, "%s: required field '%s' is missing", path, key);
        return EM_OK;
    }
    if (!json_is_number(v)) return em_fail(EM_ERR_FORMAT, "%s: field '%s' must be a number", path, key);
    *out = json_number_value(v);
    if (found) *found = true;
    return EM_OK;
}

em_status mc_get_bool(json_t *obj, const char *key, const char *path, bool *out, bool *found) {
    json_t *v = json_object_get(obj, key);
    if (found) *found = false;
    if (!v || json_is_null(v)) return EM_OK;
    if (!json_is_boolean(v)) return em_fail(EM_ERR_FORMAT, "%s: field '%s' must be true or false", path, key);
    *out = json_is_true(v);
    if (found) *found = true;
    return EM_OK;
}

static em_status get_pos_int(json_t *o, const char *key, const char *path, bool required, int lo, int hi, int *out) {
    long long v = 0;
    bool found;
    EM_TRY(mc_get_int(o, key, path, required, &v, &found));
    if (!found) return EM_OK;
    if (v < lo || v > hi) return em_fail(EM_ERR_FORMAT, "%s: field '%s' = %lld is out of range [%d, %d]", path, key, v, lo, hi);
    *out = (int)v;
    return EM_OK;
}

/* eos_token_id may be an int or a list of ints. */
static em_status parse_id_list(json_t *o, const char *key, const char *path, int32_t *ids, int *n) {
    json_t *v = json_object_get(o, key);
    *n = 0;
    if (!v || json_is_null(v)) return EM_OK;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return em_fail(EM_ERR_FORMAT, "%s: '%s' is out of range", path, key);
        ids[(*n)++] = (int32_t)json_integer_value(v);
        return EM_OK;
    }
    if (!json_is_array(v)) return em_fail(EM_ERR_FORMAT, "%s: '%s' must be an integer or a list of integers", path, key);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return em_fail(EM_ERR_FORMAT, "%s: '%s'[%zu] must be a non-negative integer", path, key, i);
        if (*n >= MC_MAX_EOS) return em_fail(EM_ERR_FORMAT, "%s: '%s' lists more than %d ids", path, key, MC_MAX_EOS);
        ids[(*n)++] = (int32_t)json_integer_value(e);
    }
    return EM_OK;
}

static em_status parse_rope(json_t *root, const char *path, model_config *c) {
    rope_config *r = &c->rope;
    r->kind = ROPE_DEFAULT;
    r->theta = 10000.0;
    r->factor = 1.0;
    r->truncate = true;
    r->partial_rotary_factor = 1.0;
    EM_TRY(mc_get_num(root, "rope_theta", path, false, &r->theta, NULL));
    EM_TRY(mc_get_num(root, "partial_rotary_factor", path, false, &r->partial_rotary_factor, NULL));
    /* transformers 5 writes rope_parameters (with rope_theta inside); older
     * checkpoints write rope_scaling (null for the default). */
    json_t *rp = json_object_get(root, "rope_parameters");
    if (!rp || json_is_null(rp)) rp = json_object_get(root, "rope_scaling");
    if (!rp || json_is_null(rp)) return EM_OK;
    if (!json_is_object(rp)) return em_fail(EM_ERR_FORMAT, "%s: rope_scaling/rope_parameters must be an object", path);
    EM_TRY(mc_get_num(rp, "rope_theta", path, false, &r->theta, NULL));
    EM_TRY(mc_get_num(rp, "partial_rotary_factor", path, false, &r->partial_rotary_factor, NULL));
    json_t *t = json_object_get(rp, "rope_type");
    if (!t) t = json_object_get(rp, "type");
    const char *type = t ? json_string_value(t) : "default";
    if (!type) return em_fail(EM_ERR_FORMAT, "%s: rope_type must be a string", path);
    bool f;
    EM_TRY(mc_get_num(rp, "factor", path, false, &r->factor, NULL));
    if (!strcmp(type, "default")) {
        r->kind = ROPE_DEFAULT;
    } else if (!strcmp(type, "linear")) {
        r->kind = ROPE_LINEAR;
        EM_TRY(mc_get_num(rp, "factor", path, true, &r->factor, NULL));
    } else if (!strcmp(type, "llama3")) {
        r->kind = ROPE_LLAMA3;
        EM_TRY(mc_get_num(rp, "factor", path, true, &r->factor, NULL));
        EM_TRY(mc_get_num(rp, "low_freq_factor", path, true, &r->low_freq_factor, NULL));
        EM_TRY(mc_get_num(rp, "high_freq_factor", path, true, &r->high_freq_factor, NULL));
        EM_TRY(mc_get_num(rp, "original_max_position_embeddings", path, true, &r->original_max_pos, NULL));
        if (r->high_freq_factor == r->low_freq_factor)
            return em_fail(EM_ERR_FORMAT, "%s: llama3 rope needs high_freq_factor != low_freq_factor", path);
    } else if (!strcmp(type, "yarn")) {
        r->kind = ROPE_YARN;
        EM_TRY(mc_get_num(rp, "factor", path, true, &r->factor, NULL));
        r->beta_fast = 32;
        r->beta_slow = 1;
        EM_TRY(mc_get_num(rp, "beta_fast", path, false, &r->beta_fast, NULL));
        EM_TRY(mc_get_num(rp, "beta_slow", path, false, &r->beta_slow, NULL));
        EM_TRY(mc_get_num(rp, "attention_factor", path, false, &r->attention_factor, NULL));
        EM_TRY(mc_get_num(rp, "mscale", path, false, &r->mscale, NULL));
        EM_TRY(mc_get_num(rp, "mscale_all_dim", path, false, &r->mscale_all_dim, NULL));
        EM_TRY(mc_get_num(rp, "original_max_position_embeddings", path, false, &r->original_max_pos, &f));
        r->has_original_max_pos = f;
        EM_TRY(mc_get_bool(rp, "truncate", path, &r->truncate, NULL));
    } else {
        /* "dynamic" rescales with the current length, which a KV cache built
         * at shorter lengths cannot follow exactly: refused, not approximated. */
        return em_fail(EM_ERR_UNSUPPORTED, "%s: rope type '%s' is not supported (default, linear, llama3, yarn)",
                       path, type);
    }
    if (!(r->factor > 0) || !(r->theta > 0))
        return em_fail(EM_ERR_FORMAT, "%s: rope factor and theta must be positive", path);
    return EM_OK;
}

static const struct { const char *type, *arch; model_family family; } known_types[] = {
    {"llama", "LlamaForCausalLM", FAMILY_DENSE}, {"mistral", "MistralForCausalLM", FAMILY_DENSE},
    {"qwen2", "Qwen2ForCausalLM", FAMILY_DENSE}, {"qwen3", "Qwen3ForCausalLM", FAMILY_DENSE},
    {"qwen3_5_text", "Qwen3_5ForCausalLM", FAMILY_QWEN3_5},
    {"qwen3_5", "Qwen3_5ForConditionalGeneration", FAMILY_QWEN3_5},
};

static em_status resolve_type(json_t *root, const char *path, model_config *c) {
    json_t *mt = json_object_get(root, "model_type");
    json_t *archs = json_object_get(root, "architectures");
    if (mt && !json_is_string(mt)) return em_fail(EM_ERR_FORMAT, "%s: model_type must be a string", path);
    if (archs && !json_is_null(archs) && !json_is_array(archs))
        return em_fail(EM_ERR_FORMAT, "%s: architectures must be a list", path);
    const char *type = mt ? json_string_value(mt) : NULL;
    const char *arch = json_is_array(archs) && json_array_size(archs) ? json_string_value(json_array_get(archs, 0)) : NULL;
    for (size_t i = 0; i < sizeof known_types / sizeof known_types[0]; i++) {
        if ((type && !strcmp(type, known_types[i].type)) || (!type && arch && !strcmp(arch, known_types[i].arch))) {
            snprintf(c->model_type, sizeof c->model_type, "%s", known_types[i].type);
            snprintf(c->architecture, sizeof c->architecture, "%s", arch ? arch : known_types[i].arch);
            c->family = known_types[i].family;
            return EM_OK;
        }
    }
    if (!type && !arch) return em_fail(EM_ERR_FORMAT, "%s: neither model_type nor architectures is given", path);
    return em_fail(EM_ERR_UNSUPPORTED, "%s: model_type '%s' (architecture %s) is not supported", path,
                   type ? type : "?", arch ? arch : "?");
}

static em_status parse_layer_windows(json_t *root, const char *path, model_config *c) {
    long long sw = 0;
    bool found;
    EM_TRY(mc_get_int(root, "sliding_window", path, false, &sw, &found));
    if (!found || sw <= 0) return EM_OK;
    bool use = true;
    if (!strcmp(c->model_type, "qwen2") || !strcmp(c->model_type, "qwen3")) {
        use = false;
        EM_TRY(mc_get_bool(root, "use_sliding_window", path, &use, NULL));
    }
    if (!use) return EM_OK;
    c->sliding_window = sw > INT32_MAX ? INT32_MAX : (int)sw;
    json_t *lt = json_object_get(root, "layer_types");
    long long max_window_layers = 0;
    EM_TRY(mc_get_int(root, "max_window_layers", path, false, &max_window_layers, NULL));
    for (int i = 0; i < c->n_layers; i++) {
        if (json_is_array(lt)) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (!s) return em_fail(EM_ERR_FORMAT, "%s: layer_types[%d] missing or not a string", path, i);
            c->layer_sliding[i] = !strcmp(s, "sliding_attention");
        } else if (!strcmp(c->model_type, "mistral")) {
            c->layer_sliding[i] = true;
        } else {
            c->layer_sliding[i] = i >= max_window_layers;
        }
    }
    return EM_OK;
}

static em_status parse_dense(json_t *root, const char *path, model_config *c) {
    EM_TRY(get_pos_int(root, "hidden_size", path, true, 1, 1 << 20, &c->hidden));
    EM_TRY(get_pos_int(root, "intermediate_size", path, true, 1, 1 << 22, &c->intermediate));
    EM_TRY(get_pos_int(root, "num_hidden_layers", path, true, 1, MC_MAX_LAYERS, &c->n_layers));
    EM_TRY(get_pos_int(root, "num_attention_heads", path, true, 1, 1 << 12, &c->n_heads));
    c->n_kv_heads = c->n_heads;
    EM_TRY(get_pos_int(root, "num_key_value_heads", path, false, 1, 1 << 12, &c->n_kv_heads));
    EM_TRY(get_pos_int(root, "vocab_size", path, true, 1, 1 << 24, &c->vocab));
    c->max_pos = 4096;
    EM_TRY(get_pos_int(root, "max_position_embeddings", path, false, 1, 1 << 26, &c->max_pos));
    c->head_dim = 0;
    EM_TRY(get_pos_int(root, "head_dim", path, false, 1, 1 << 14, &c->head_dim));
    if (!c->head_dim) {
        if (c->hidden % c->n_heads)
            return em_fail(EM_ERR_FORMAT, "%s: hidden_size %d is not divisible by num_attention_heads %d and head_dim is not given",
                           path, c->hidden, c->n_heads);
        c->head_dim = c->hidden / c->n_heads;
    }
    if (c->head_dim % 2) return em_fail(EM_ERR_FORMAT, "%s: head_dim %d must be even for rotary embeddings", path, c->head_dim);
    if (c->n_heads % c->n_kv_heads)
        return em_fail(EM_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path,
                       c->n_heads, c->n_kv_heads);
    c->rms_eps = 1e-6;
    EM_TRY(mc_get_num(root, "rms_norm_eps", path, false, &c->rms_eps, NULL));
    if (!(c->rms_eps > 0) || c->rms_eps > 1) return em_fail(EM_ERR_FORMAT, "%s: rms_norm_eps must be in (0, 1]", path);
    json_t *act = json_object_get(root, "hidden_act");
    if (act && (!json_is_string(act) || (strcmp(json_string_value(act), "silu") && strcmp(json_string_value(act), "swish"))))
        return em_fail(EM_ERR_UNSUPPORTED, "%s: hidden_act must be \"silu\"", path);
    bool is_qwen2 = !strcmp(c->model_type, "qwen2"), is_qwen3 = !strcmp(c->model_type, "qwen3");
    bool attn_bias = is_qwen2;
    EM_TRY(mc_get_bool(root, "attention_bias", path, &attn_bias, NULL));
    c->qkv_bias = attn_bias;
    c->o_bias = attn_bias && !is_qwen2; /* qwen2's o_proj never has a bias */
    EM_TRY(mc_get_bool(root, "mlp_bias", path, &c->mlp_bias, NULL));
    c->qk_norm = is_qwen3;
    c->tied_embeddings = false;
    EM_TRY(mc_get_bool(root, "tie_word_embeddings", path, &c->tied_embeddings, NULL));
    EM_TRY(parse_rope(root, path, c));
    if (c->rope.partial_rotary_factor <= 0 || c->rope.partial_rotary_factor > 1)
        return em_fail(EM_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", path);
    return parse_layer_windows(root, path, c);
}

/* ember_transform.online_rotations: the run-time rotations the weights
 * were written for (ember quantize --rotate-online). A name this build does
 * not know is refused: the weights would be read in the wrong basis. */
static em_status parse_online_rotations(json_t *root, const char *path, model_config *c) {
    json_t *t = json_object_get(root, "ember_transform");
    if (!t) return EM_OK;
    if (!json_is_object(t)) return em_fail(EM_ERR_FORMAT, "%s: ember_transform must be an object", path);
    json_t *a = json_object_get(t, "online_rotations");
    if (!a) return EM_OK;
    if (!json_is_array(a))
        return em_fail(EM_ERR_FORMAT, "%s: ember_transform.online_rotations must be an array of names", path);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        const char *n = json_is_string(v) ? json_string_value(v) : NULL;
        if (n && !strcmp(n, "attention_input")) c->rot_attn_in = true;
        else if (n && !strcmp(n, "mlp_input")) c->rot_mlp_in = true;
        else
            return em_fail(EM_ERR_UNSUPPORTED,
                           "%s: ember_transform.online_rotations[%zu] is %s%s%s: not a rotation this build applies "
                           "(attention_input, mlp_input)",
                           path, i, n ? "\"" : "", n ? n : "not a string", n ? "\"" : "");
    }
    return EM_OK;
}

em_status model_config_parse(const char *text, size_t len, const char *path, model_config *c) {
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return em_fail(EM_ERR_FORMAT, "%s: invalid JSON: %s (line %d)", path, jerr.text, jerr.line);
    em_status s = EM_OK;
    if (!json_is_object(root)) s = em_fail(EM_ERR_FORMAT, "%s: not a JSON object", path);
    if (s == EM_OK) s = resolve_type(root, path, c);
    json_t *arch_root = root; /* where the architecture fields are */
    if (s == EM_OK && c->family == FAMILY_QWEN3_5) s = mc_qwen3_5_text_root(root, path, &arch_root);
    if (s == EM_OK) s = parse_dense(arch_root, path, c);
    if (s == EM_OK && c->family == FAMILY_QWEN3_5) s = mc_qwen3_5_parse(root, arch_root, path, c);
    if (s == EM_OK) s = parse_online_rotations(root, path, c);
    long long bos = -1;
    bool found = false;
    if (s == EM_OK) s = mc_get_int(arch_root, "bos_token_id", path, false, &bos, &found);
    if (s == EM_OK && !found && arch_root != root) s = mc_get_int(root, "bos_token_id", path, false, &bos, NULL);
    c->bos_id = bos >= 0 && bos <= INT32_MAX ? (int32_t)bos : -1;
    if (s == EM_OK) s = parse_id_list(arch_root, "eos_token_id", path, c->eos_ids, &c->n_eos);
    if (s == EM_OK && c->n_eos == 0 && arch_root != root) s = parse_id_list(root, "eos_token_id", path, c->eos_ids, &c->n_eos);
    json_t *dt = json_object_get(root, "torch_dtype");
    if (!json_is_string(dt)) dt = json_object_get(root, "dtype");
    if (!json_is_string(dt)) dt = json_object_get(arch_root, "dtype");
    snprintf(c->dtype, sizeof c->dtype, "%s", json_is_string(dt) ? json_string_value(dt) : "");
    json_decref(root);
    return s;
}

em_status model_config_load(const char *dir, model_config *out) {
    char *path = em_path_join(dir, "config.json"), *text;
    size_t len;
    if (!path) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = em_read_file(path, 16u << 20, &text, &len);
    if (s == EM_OK) {
        s = model_config_parse(text, len, path, out);
        free(text);
    }
    free(path);
    return s;
}

em_status generation_defaults_load(const char *dir, generation_defaults *g) {
    memset(g, 0, sizeof *g);
    char *path = em_path_join(dir, "generation_config.json"), *text;
    size_t len;
    if (!path) return em_fail(EM_ERR_NOMEM, "out of memory");
    if (!em_file_exists(path)) {
        free(path);
        return EM_OK;
    }
    em_status s = em_read_file(path, 1u << 20, &text, &len);
    json_t *root = NULL;
    if (s == EM_OK) {
        json_error_t jerr;
        root = json_loadb(text, len, 0, &jerr);
        free(text);
        if (!json_is_object(root)) s = em_fail(EM_ERR_FORMAT, "%s: invalid JSON object: %s", path, jerr.text);
    }
    long long k = 0;
    if (s == EM_OK) s = mc_get_num(root, "temperature", path, false, &g->temperature, &g->has_temperature);
    if (s == EM_OK) s = mc_get_num(root, "top_p", path, false, &g->top_p, &g->has_top_p);
    if (s == EM_OK) s = mc_get_num(root, "min_p", path, false, &g->min_p, &g->has_min_p);
    if (s == EM_OK) s = mc_get_num(root, "repetition_penalty", path, false, &g->repetition_penalty, &g->has_repetition_penalty);
    if (s == EM_OK) s = mc_get_int(root, "top_k", path, false, &k, &g->has_top_k);
    g->top_k = k > 0 && k < (1 << 24) ? (int)k : 0;
    if (s == EM_OK) s = mc_get_bool(root, "do_sample", path, &g->do_sample, &g->has_do_sample);
    if (s == EM_OK) s = parse_id_list(root, "eos_token_id", path, g->eos_ids, &g->n_eos);
    json_decref(root);
    free(path);
    return s;
}
