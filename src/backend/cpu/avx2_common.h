/* avx2_common.h — what the AVX2 kernel files share. One definition of the
 * final horizontal sum: the f32 tiles and the quantized tiles must add
 * their lanes in the same order for a row's result not to depend on which
 * of them computed it. */
#ifndef EMBER_BACKEND_CPU_AVX2_COMMON_H
#define EMBER_BACKEND_CPU_AVX2_COMMON_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define EM_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

EM_AVX2_TARGET static inline float avx2_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif

#endif
