/* model_config.h — config.json (and generation_config.json) of a checkpoint,
 * parsed and validated into the numbers the graphs need. */
#ifndef EMBER_IO_MODEL_CONFIG_H
#define EMBER_IO_MODEL_CONFIG_H

#include "base/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum { ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN } rope_kind;

typedef struct rope_config {
    rope_kind kind;
    double theta;
    double factor;
    double low_freq_factor, high_freq_factor; /* llama3 */
    double original_max_pos;                  /* llama3, yarn */
    double beta_fast, beta_slow;              /* yarn */
    double attention_factor;                  /* yarn; 0 = derive */
    double mscale, mscale_all_dim;            /* yarn */
    bool truncate;                            /* yarn */
    bool has_original_max_pos;                /* yarn: factor derived from it */
    double partial_rotary_factor;             /* fraction of head_dim rotated */
} rope_config;

typedef enum { FAMILY_DENSE = 0, FAMILY_QWEN3_5 } model_family;

#define MC_MAX_EOS 8
#define MC_MAX_LAYERS 1024

/* Qwen3.5 (hybrid Gated DeltaNet + gated attention): the fields beyond the
 * Llama-family ones, parsed by model_config_qwen3_5.c. */
typedef struct qwen3_5_config {
    int lin_k_heads, lin_v_heads;   /* linear_num_key_heads / linear_num_value_heads */
    int lin_k_dim, lin_v_dim;       /* linear_key_head_dim / linear_value_head_dim */
    int conv_kernel;                /* linear_conv_kernel_dim */
    int n_linear, n_full;           /* layers of each kind */
    bool layer_linear[MC_MAX_LAYERS];
    int mtp_layers;                 /* mtp_num_hidden_layers; 0: no MTP head declared */
    bool vl_wrapper;                /* config.json is the qwen3_5 VL wrapper (text_config) */
} qwen3_5_config;

typedef struct model_config {
    char model_type[32];
    char architecture[64];
    model_family family;
    int hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab;
    int max_pos;
    double rms_eps;
    bool tied_embeddings;
    bool qkv_bias;    /* q/k/v projections have bias (qwen2, llama attention_bias) */
    bool o_bias;      /* o_proj bias (llama attention_bias) */
    bool mlp_bias;
    bool qk_norm;     /* per-head RMSNorm on q and k (qwen3) */
    int sliding_window;                 /* 0: none */
    bool layer_sliding[MC_MAX_LAYERS];  /* which layers use the window */
    rope_config rope;
    int32_t bos_id;                     /* -1 when absent */
    int32_t eos_ids[MC_MAX_EOS];
    int n_eos;
    char dtype[16];                     /* torch_dtype / dtype as written */
    int n_kv_layers;                    /* layers with a KV cache; 0: n_layers */
    /* online rotations an `ember quantize --rotate-online` artifact needs
     * (config.json ember_transform.online_rotations): the normed input of
     * each attention / MLP block multiplied by H/√hidden at run time */
    bool rot_attn_in, rot_mlp_in;
    qwen3_5_config q35;                 /* FAMILY_QWEN3_5 only */
} model_config;

typedef struct generation_defaults {
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    double temperature, top_p, min_p, repetition_penalty;
    int top_k;
    bool do_sample; /* false means greedy */
    bool has_do_sample;
    int32_t eos_ids[MC_MAX_EOS];
    int n_eos;
} generation_defaults;

/* Whether the checkpoint needs any online rotation applied at run time. */
static inline bool model_config_has_online_rotations(const model_config *c) { return c->rot_attn_in || c->rot_mlp_in; }

/* Parses config.json text; `path` names it in errors. Unknown model types and
 * missing or contradictory fields are errors naming the field. */
em_status model_config_parse(const char *json_text, size_t len, const char *path, model_config *out);
/* Reads DIR/config.json. */
em_status model_config_load(const char *dir, model_config *out);
/* Reads DIR/generation_config.json when present (absent: all has_* false). */
em_status generation_defaults_load(const char *dir, generation_defaults *out);

/* JSON helpers shared by config parsers: read an optional field with type
 * checking. Missing → *out untouched and false returned; wrong type → error. */
em_status mc_get_int(json_t *obj, const char *key, const char *path, bool required, long long *out, bool *found);
em_status mc_get_num(json_t *obj, const char *key, const char *path, bool required, double *out, bool *found);
em_status mc_get_bool(json_t *obj, const char *key, const char *path, bool *out, bool *found);

/* Qwen3.5 (model_config_qwen3_5.c). The text fields live at the top level
 * (qwen3_5_text) or under text_config (the qwen3_5 VL wrapper). */
em_status mc_qwen3_5_text_root(json_t *root, const char *path, json_t **text);
/* Parses the family's own fields after the shared ones (c already holds
 * them, parsed from `text`); root is the whole config.json object. */
em_status mc_qwen3_5_parse(json_t *root, json_t *text, const char *path, model_config *c);

#endif
