/* argmax.c — one pass over the row in 8 independent lanes, so the compiler
 * keeps the running maxima and their indices in vector registers and the
 * scan is bound by memory, not by a chain of compares. Each lane only moves
 * on a strictly larger value, so it holds the first index of its maximum;
 * the lowest such index over the lanes holding the overall maximum is the
 * row's first. */
#include "tensor/argmax.h"

#include <math.h>

int32_t em_argmax_f32(const float *x, int n) {
    float m[8];
    int32_t at[8];
    for (int j = 0; j < 8; j++) {
        m[j] = -INFINITY;
        at[j] = -1;
    }
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            if (x[i + j] > m[j]) {
                m[j] = x[i + j];
                at[j] = i + j;
            }
    for (; i < n; i++)
        if (x[i] > m[i & 7]) {
            m[i & 7] = x[i];
            at[i & 7] = i;
        }
    float best = -INFINITY;
    int32_t arg = -1;
    for (int j = 0; j < 8; j++)
        if (at[j] >= 0 && (m[j] > best || (m[j] == best && at[j] < arg))) {
            best = m[j];
            arg = at[j];
        }
    if (arg >= 0) return arg;
    for (i = 0; i < n; i++) /* nothing above -inf: the first -inf, if any */
        if (x[i] == -INFINITY) return i;
    return 0;
}
