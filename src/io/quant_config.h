/* quant_config.h — the `quantization` block of an MLX-quantized checkpoint's
 * config.json (also accepted as `quantization_config`):
 *
 *   "quantization": {"group_size": 64, "bits": 4, "mode": "affine",
 *                    "model.layers.1.mlp.gate_proj": {"bits": 8, "group_size": 32},
 *                    "lm_head": false}
 *
 * Keys other than group_size/bits/mode are module paths: an object gives the
 * module its own parameters, false keeps it in float. A module that is not
 * listed is quantized with the defaults when the checkpoint has its
 * `<module>.scales` (as MLX loaders decide). */
#ifndef EMBER_IO_QUANT_CONFIG_H
#define EMBER_IO_QUANT_CONFIG_H

#include "base/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct quant_override {
    char *module;
    bool quantized;
    int bits, group_size;
} quant_override;

typedef struct quant_config {
    bool present;
    int bits, group_size; /* defaults */
    quant_override *overrides;
    size_t n_overrides;
} quant_config;

typedef enum { QC_UNLISTED = 0, QC_QUANTIZED, QC_FLOAT } quant_choice;

/* Parses the block from a parsed config.json root (absent block: present =
 * false, EM_OK). Unsupported modes, bits outside {2,3,4,5,6,8} and group
 * sizes outside {32,64,128} are errors naming the JSON path. Free with
 * quant_config_free. */
em_status quant_config_parse(json_t *root, const char *path, quant_config *out);
/* Reads DIR/config.json and parses its block. */
em_status quant_config_load(const char *dir, quant_config *out);
void quant_config_free(quant_config *qc);

/* What the config says of `module` (a path without ".weight"). QC_QUANTIZED
 * fills bits and group (override or defaults); QC_UNLISTED also fills the
 * defaults, for the caller to use when the checkpoint holds scales. */
quant_choice quant_config_lookup(const quant_config *qc, const char *module, int *bits, int *group);

#endif
