/* sanitize_qwen3_5.h — one canonical naming for the Qwen3.5 checkpoint
 * layouts, decided once at load from the tensor names and shapes.
 *
 * Canonical names are the transformers text layout: model.layers.N.*,
 * model.embed_tokens.weight, model.norm.weight, lm_head.weight, mtp.*.
 * Layouts mapped onto them, with no change to the graph:
 *   text  transformers Qwen3_5ForCausalLM: model.*, lm_head.weight
 *   vl    transformers Qwen3_5ForConditionalGeneration: model.language_model.*,
 *         top-level lm_head.weight; model.visual.* is ignored, mtp.* kept
 *   mlx   mlx-lm conversions: language_model.model.*, language_model.lm_head.weight,
 *         conv1d [C, K, 1] instead of [C, 1, K], norm gains already shifted
 * Gains: transformers stores the zero-centred RMSNorm gains as gamma - 1 (the
 * graph multiplies by 1 + stored). The reference rule decides whether the
 * stored gains need the +1: they do if and only if the checkpoint has any
 * mtp.* tensor or any conv1d.weight whose last dimension is not 1 (mlx-lm
 * drops mtp.* and moves the kernel axis when it shifts). Shifted are 1-D
 * input_layernorm, post_attention_layernorm, final norm, q_norm and k_norm
 * gains (and the MTP head's norms, which exist only in shifted checkpoints);
 * the gated norm of the linear-attention layers never is. */
#ifndef EMBER_IO_SANITIZE_QWEN3_5_H
#define EMBER_IO_SANITIZE_QWEN3_5_H

#include "io/safetensors.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum { Q35_LAYOUT_TEXT = 0, Q35_LAYOUT_VL, Q35_LAYOUT_MLX } q35_layout_kind;

typedef struct q35_layout {
    q35_layout_kind kind;
    const char *trunk;  /* replaces the canonical "model." prefix */
    const char *head;   /* checkpoint name of lm_head.weight */
    bool shift_gains;   /* add 1 to the zero-centred gains at load */
    bool has_mtp;       /* any mtp.* tensor */
} q35_layout;

/* Detects the layout of st; `dir` names the checkpoint in errors. */
em_status q35_sanitize(const st_set *st, const char *dir, q35_layout *out);
/* Checkpoint name of canonical `name` under layout l: name itself or buf. */
const char *q35_name(const q35_layout *l, const char *name, char *buf, size_t len);
/* Whether canonical `name` is a zero-centred gain the shift applies to. */
bool q35_is_centred_gain(const char *name);
/* Layout name ("text", "vl", "mlx"). */
const char *q35_layout_name(q35_layout_kind k);

#endif
