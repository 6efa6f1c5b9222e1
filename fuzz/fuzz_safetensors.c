/* libFuzzer harness: a safetensors image (its JSON header, dtypes, shapes
 * and data offsets) on arbitrary bytes. What st_parse accepts must be
 * consistent: every tensor's bytes inside the image, its byte count its
 * shape times its dtype's size; a violation aborts the run. */
#include "io/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

static void check_tensor(const st_tensor *t, const uint8_t *data, size_t size, uint64_t header_len) {
    const uint8_t *p = (const uint8_t *)t->data;
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || !t->name) abort();
    if (t->nbytes && (p < data || t->nbytes > size || (size_t)(p - data) > size - t->nbytes)) abort();
    if (t->offset != (uint64_t)(p - data) - 8 - header_len) abort();
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) abort();
        n *= (uint64_t)t->shape[d]; /* no overflow: the bytes fit the image */
    }
    if (n != t->n_elements || t->nbytes != n * dtype_size(t->dtype)) abort();
    volatile uint8_t sink = 0;
    if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1]; /* ASan checks the claimed range's ends */
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_header h;
    if (st_parse(data, size, "fuzz.safetensors", &h) != EM_OK) return 0;
    for (size_t i = 0; i < h.n_tensors; i++) check_tensor(&h.tensors[i], data, size, h.header_len);
    for (size_t i = 0; i < h.n_metadata; i++)
        if (!h.metadata[i].key || !h.metadata[i].value) abort();
    st_header_free(&h);
    return 0;
}
