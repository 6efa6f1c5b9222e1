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

#endif
