/* sanitize_qwen3_5.c — layout detection and the canonical-name mapping of
 * Qwen3.5 checkpoints (see sanitize_qwen3_5.h for the rules). */
#include "io/sanitize_qwen3_5.h"

#include <stdio.h>
#include <string.h>

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

const char *q35_layout_name(q35_layout_kind k) {
    return k == Q35_LAYOUT_VL ? "vl" : k == Q35_LAYOUT_MLX ? "mlx" : "text";
}

em_status q35_sanitize(const st_set *st, const char *dir, q35_layout *out) {
    memset(out, 0, sizeof *out);
    if (st_find(st, "model.language_model.embed_tokens.weight")) {
        *out = (q35_layout){Q35_LAYOUT_VL, "model.language_model.", "lm_head.weight", false, false};
    } else if (st_find(st, "language_model.model.embed_tokens.weight")) {
        *out = (q35_layout){Q35_LAYOUT_MLX, "language_model.model.", "language_model.lm_head.weight", false, false};
    } else if (st_find(st, "model.embed_tokens.weight")) {
        *out = (q35_layout){Q35_LAYOUT_TEXT, "model.", "lm_head.weight", false, false};
    } else {
        return em_fail(EM_ERR_FORMAT,
                       "%s: no embed_tokens.weight under model., model.language_model. or language_model.model.", dir);
    }
    bool unsanitized_conv = false;
    for (size_t i = 0; i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        if (strstr(t->name, "mtp.")) out->has_mtp = true;
        if (strstr(t->name, "conv1d.weight") && t->ndim > 0 && t->shape[t->ndim - 1] != 1) unsanitized_conv = true;
    }
    out->shift_gains = out->has_mtp || unsanitized_conv;
    return EM_OK;
}

const char *q35_name(const q35_layout *l, const char *name, char *buf, size_t len) {
    if (!strcmp(name, "lm_head.weight")) return l->head;
    if (!strncmp(name, "model.", 6) && strcmp(l->trunk, "model.")) {
        snprintf(buf, len, "%s%s", l->trunk, name + 6);
        return buf;
    }
    if (!strncmp(name, "mtp.", 4) && l->kind == Q35_LAYOUT_MLX) {
        snprintf(buf, len, "language_model.%s", name);
        return buf;
    }
    return name;
}

bool q35_is_centred_gain(const char *name) {
    static const char *const suffixes[] = {".input_layernorm.weight", ".post_attention_layernorm.weight",
                                           "model.norm.weight", ".q_norm.weight", ".k_norm.weight"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (ends_with(name, suffixes[i])) return true;
    return !strcmp(name, "mtp.norm.weight") || !strcmp(name, "mtp.pre_fc_norm_hidden.weight") ||
           !strcmp(name, "mtp.pre_fc_norm_embedding.weight");
}
