/* weights_host.h — where a host-memory backend's weights live (weights_host.c). */
#ifndef EMBER_MODEL_WEIGHTS_HOST_H
#define EMBER_MODEL_WEIGHTS_HOST_H

#include "model/model.h"

/* The address the CPU kernels read tensor t at: its copy on huge pages,
 * made now if this is its first binding (*copied = the bytes copied), or
 * its place in the mapped checkpoint (EMBER_CPU_WEIGHTS decides, at the
 * first call). */
em_status host_weights_place(em_model *m, const st_tensor *t, const void **out, size_t *copied);
/* Where the CPU kernels read a quantized weight w (rows and cols set):
 * its codes t, scales s and biases b copied as one record a row
 * (em_weight.row_stride), made now if this is their first binding, or
 * their places in the mapped checkpoint, as host_weights_place decides. */
em_status host_weights_place_quant(em_model *m, const st_tensor *t, const st_tensor *s, const st_tensor *b,
                                   em_weight *w, size_t *copied);
/* Bytes of a tensor copied between drops of its file pages. */
#define HOST_WEIGHTS_SLICE ((size_t)8 << 20)
/* Whether EMBER_CPU_WEIGHTS = `mode` (NULL: auto) copies `bytes` of weights
 * on this machine: copy always, map never, auto where the kernel has
 * transparent huge pages and the copy leaves 1 GiB of available memory. */
bool host_weights_copies(const char *mode, uint64_t bytes);
/* Frees the copies (weights_release calls it). */
void host_weights_release(em_model *m);

#endif
