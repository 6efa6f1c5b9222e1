/* libFuzzer harness: the quantization block of config.json on arbitrary
 * bytes, then a lookup of the modules it names. */
#include "io/quant_config.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t err;
    json_t *root = json_loadb((const char *)data, size, 0, &err);
    if (!root) return 0;
    quant_config qc;
    if (quant_config_parse(root, "fuzz/config.json", &qc) == EM_OK) {
        int bits, group;
        for (size_t i = 0; i < qc.n_overrides; i++) (void)quant_config_lookup(&qc, qc.overrides[i].module, &bits, &group);
        (void)quant_config_lookup(&qc, "lm_head", &bits, &group);
        quant_config_free(&qc);
    }
    json_decref(root);
    return 0;
}
