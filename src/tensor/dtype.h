/* dtype.h — element types of tensors on disk and in memory, and the scalar
 * conversions between the float formats. */
#ifndef EMBER_TENSOR_DTYPE_H
#define EMBER_TENSOR_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum em_dtype {
    EM_F32 = 0, EM_F16, EM_BF16, EM_F64, EM_U32, EM_I32, EM_I64, EM_U16, EM_I16,
    EM_U8, EM_I8, EM_BOOL, EM_DTYPE_COUNT
} em_dtype;

size_t dtype_size(em_dtype t);
/* safetensors spelling: "F32", "BF16", ... */
const char *dtype_name(em_dtype t);
bool dtype_from_name(const char *s, em_dtype *out);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round-to-nearest-even, NaN kept quiet. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

#endif
