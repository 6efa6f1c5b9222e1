/* model_config_qwen3_5.c — the Qwen3.5 fields of config.json: the Gated
 * DeltaNet geometry, which layers are linear or full attention, the MTP head,
 * and the defaults transformers applies when a field is absent (head_dim
 * 256, partial_rotary_factor 0.25, a full-attention layer every 4th). */
#include "io/model_config.h"

#include <stdio.h>
#include <string.h>

em_status mc_qwen3_5_text_root(json_t *root, const char *path, json_t **text) {
    *text = root;
    json_t *tc = json_object_get(root, "text_config");
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    bool wrapper = (mt && !strcmp(mt, "qwen3_5")) || (!mt && tc);
    if (!wrapper) return EM_OK;
    if (!json_is_object(tc)) return em_fail(EM_ERR_FORMAT, "%s: the qwen3_5 wrapper needs a text_config object", path);
    *text = tc;
    return EM_OK;
}

static em_status get_range(json_t *o, const char *key, const char *path, int lo, int hi, int def, int *out) {
    long long v = def;
    EM_TRY(mc_get_int(o, key, path, false, &v, NULL));
    if (v < lo || v > hi) return em_fail(EM_ERR_FORMAT, "%s: field '%s' = %lld is out of range [%d, %d]", path, key, v, lo, hi);
    *out = (int)v;
    return EM_OK;
}

static em_status parse_layer_types(json_t *text, const char *path, model_config *c) {
    qwen3_5_config *q = &c->q35;
    json_t *lt = json_object_get(text, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)c->n_layers)
            return em_fail(EM_ERR_FORMAT, "%s: layer_types must list %d layer kinds", path, c->n_layers);
        for (int i = 0; i < c->n_layers; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (!s) return em_fail(EM_ERR_FORMAT, "%s: layer_types[%d] must be a string", path, i);
            if (!strcmp(s, "linear_attention")) q->layer_linear[i] = true;
            else if (!strcmp(s, "full_attention")) q->layer_linear[i] = false;
            else return em_fail(EM_ERR_UNSUPPORTED, "%s: layer_types[%d] = '%s' (expected linear_attention or full_attention)", path, i, s);
        }
    } else {
        int interval;
        EM_TRY(get_range(text, "full_attention_interval", path, 1, MC_MAX_LAYERS, 4, &interval));
        for (int i = 0; i < c->n_layers; i++) q->layer_linear[i] = (i + 1) % interval != 0;
    }
    q->n_linear = q->n_full = 0;
    for (int i = 0; i < c->n_layers; i++) q->layer_linear[i] ? q->n_linear++ : q->n_full++;
    return EM_OK;
}

/* partial_rotary_factor: rope_parameters, else the top level, else 0.25. */
static em_status parse_partial_rotary(json_t *text, const char *path, model_config *c) {
    json_t *rp = json_object_get(text, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(text, "rope_scaling");
    bool found = false;
    double f = 0.25;
    if (json_is_object(rp)) EM_TRY(mc_get_num(rp, "partial_rotary_factor", path, false, &f, &found));
    if (!found) EM_TRY(mc_get_num(text, "partial_rotary_factor", path, false, &f, NULL));
    if (!(f > 0) || f > 1) return em_fail(EM_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", path);
    c->rope.partial_rotary_factor = f;
    if ((int)(c->head_dim * f) < 2) return em_fail(EM_ERR_FORMAT, "%s: partial_rotary_factor %g rotates no dimension", path, f);
    return EM_OK;
}

em_status mc_qwen3_5_parse(json_t *root, json_t *text, const char *path, model_config *c) {
    qwen3_5_config *q = &c->q35;
    q->vl_wrapper = text != root;
    bool found = false;
    long long hd = 0;
    EM_TRY(mc_get_int(text, "head_dim", path, false, &hd, &found));
    if (!found) c->head_dim = 256; /* the family's default, not hidden / heads */
    if (c->head_dim % 2) return em_fail(EM_ERR_FORMAT, "%s: head_dim %d must be even", path, c->head_dim);
    c->qk_norm = true;
    c->o_bias = c->qkv_bias; /* attention_bias covers o_proj too */
    if (text != root) EM_TRY(mc_get_bool(root, "tie_word_embeddings", path, &c->tied_embeddings, NULL));
    EM_TRY(get_range(text, "linear_num_key_heads", path, 1, 1 << 12, 16, &q->lin_k_heads));
    EM_TRY(get_range(text, "linear_num_value_heads", path, 1, 1 << 12, 32, &q->lin_v_heads));
    EM_TRY(get_range(text, "linear_key_head_dim", path, 1, 1 << 12, 128, &q->lin_k_dim));
    EM_TRY(get_range(text, "linear_value_head_dim", path, 1, 1 << 12, 128, &q->lin_v_dim));
    EM_TRY(get_range(text, "linear_conv_kernel_dim", path, 1, 64, 4, &q->conv_kernel));
    EM_TRY(get_range(text, "mtp_num_hidden_layers", path, 0, 64, 0, &q->mtp_layers));
    if (q->lin_v_heads % q->lin_k_heads)
        return em_fail(EM_ERR_FORMAT, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", path,
                       q->lin_v_heads, q->lin_k_heads);
    EM_TRY(parse_layer_types(text, path, c));
    EM_TRY(parse_partial_rotary(text, path, c));
    c->sliding_window = 0;
    c->n_kv_layers = q->n_full + q->mtp_layers;
    if (c->n_kv_layers == 0) c->n_kv_layers = 1; /* a cache of one layer keeps positions for all-linear models */
    return EM_OK;
}
