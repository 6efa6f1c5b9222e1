/* libFuzzer harness: config.json parsing on arbitrary bytes. */
#include "io/model_config.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    model_config c;
    (void)model_config_parse((const char *)data, size, "fuzz/config.json", &c);
    return 0;
}
