/* libFuzzer harness: the safetensors header parser on arbitrary bytes. */
#include "io/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_header h;
    if (st_parse(data, size, "fuzz", &h) == EM_OK) {
        for (size_t i = 0; i < h.n_tensors; i++) {
            const st_tensor *t = &h.tensors[i];
            /* touch the first and last byte: must be inside the buffer */
            if (t->nbytes) {
                volatile uint8_t a = ((const uint8_t *)t->data)[0];
                volatile uint8_t b = ((const uint8_t *)t->data)[t->nbytes - 1];
                (void)a;
                (void)b;
            }
        }
        st_header_free(&h);
    }
    return 0;
}
