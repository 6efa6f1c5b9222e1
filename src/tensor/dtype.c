/* dtype.c — dtype tables and IEEE half conversions. */
#include "tensor/dtype.h"

static const struct { const char *name; size_t size; } dtype_info[EM_DTYPE_COUNT] = {
    [EM_F32] = {"F32", 4}, [EM_F16] = {"F16", 2}, [EM_BF16] = {"BF16", 2}, [EM_F64] = {"F64", 8},
    [EM_U32] = {"U32", 4}, [EM_I32] = {"I32", 4}, [EM_I64] = {"I64", 8}, [EM_U16] = {"U16", 2},
    [EM_I16] = {"I16", 2}, [EM_U8] = {"U8", 1},   [EM_I8] = {"I8", 1},   [EM_BOOL] = {"BOOL", 1},
};

size_t dtype_size(em_dtype t) { return (unsigned)t < EM_DTYPE_COUNT ? dtype_info[t].size : 0; }

const char *dtype_name(em_dtype t) { return (unsigned)t < EM_DTYPE_COUNT ? dtype_info[t].name : "?"; }

bool dtype_from_name(const char *s, em_dtype *out) {
    for (int i = 0; i < EM_DTYPE_COUNT; i++) {
        if (!strcmp(s, dtype_info[i].name)) {
            *out = (em_dtype)i;
            return true;
        }
    }
    return false;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) {
                mant <<= 1;
                exp--;
            }
            mant &= 0x3ff;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000 | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffff;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)half;
}
