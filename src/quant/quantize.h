/* quantize.h — `ember quantize`: a checkpoint in, an MLX-layout artifact out.
 *
 * Streams tensor by tensor: each output is computed (read, folded, rotated),
 * quantized row by row and appended to its safetensors shard, then freed.
 * The artifact is assembled in a temporary directory beside DST and renamed
 * into place at the end, so DST is never half-written. */
#ifndef EMBER_QUANT_QUANTIZE_H
#define EMBER_QUANT_QUANTIZE_H

#include "base/status.h"
#include "quant/fold.h"

#include <stdint.h>

/* Per-module choice: a glob over module paths (name without ".weight"),
 * first match wins. */
typedef struct quant_rule {
    char *match;
    bool quantize;
    int bits, group_size;
} quant_rule;

typedef struct quant_recipe {
    int bits, group_size; /* bits 0: write float tensors (transforms only) */
    quant_rule *rules;
    size_t n_rules;
} quant_recipe;

/* Recipe JSON: {"bits": 4, "group_size": 64, "rules": [{"match": "lm_head",
 * "bits": 8}, {"match": "model.layers.*.mlp.down_proj", "bits": 6,
 * "group_size": 32}, {"match": "model.layers.0.*", "quantize": false}]}.
 * Fields absent from the file keep the values already in *r. */
em_status quant_recipe_load(const char *path, quant_recipe *r);
void quant_recipe_free(quant_recipe *r);
/* Bits and group of a module (0 bits: keep float). */
void quant_recipe_pick(const quant_recipe *r, const char *module, int *bits, int *group);

typedef struct quant_job {
    const char *src, *dst;
    quant_recipe recipe;
    fold_options fold;
    em_dtype out_dtype;       /* float dtype of the artifact; EM_DTYPE_COUNT: the source's */
    uint64_t shard_bytes;     /* 0: 5 GB */
    bool force;
    bool search;              /* rtn_search_row instead of MLX's plain round-to-nearest */
    bool progress;            /* a progress line on stderr */
    bool plan_only;           /* print the plan, write nothing */
    int threads;              /* rows quantized in parallel; 0: one thread per core */
} quant_job;

typedef struct quant_report {
    size_t n_tensors;
    uint64_t bytes_in, bytes_out;
    uint64_t largest_tensor_bytes; /* largest output as f32 */
    uint64_t work_peak_bytes;      /* largest working set held at once */
    long max_rss_kb;
    double seconds;
    int shards;
} quant_report;

em_status quant_run(const quant_job *job, quant_report *rep);

#endif
