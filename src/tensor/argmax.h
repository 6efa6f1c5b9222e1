/* argmax.h — the greedy choice over a row of logits, defined once.
 *
 * The token greedy decoding takes is the lowest index holding the row's
 * largest value; NaN never wins, and a row with no value above -inf gives
 * its first -inf (0 when every value is NaN). The sampler, the CPU
 * backend's argmax_rows and the CUDA kernel all follow this rule, so a
 * token chosen on the device equals the one the host would choose. */
#ifndef EMBER_TENSOR_ARGMAX_H
#define EMBER_TENSOR_ARGMAX_H

#include <stdint.h>

int32_t em_argmax_f32(const float *x, int n);

#endif
