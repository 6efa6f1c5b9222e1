/* cpu_features.c — CPUID probing and the choice of kernel table.
 * EMBER_CPU_ISA (portable|avx2|avx512|amx) narrows the choice for testing
 * (avx512: the AVX-512 kernels without the AMX tiles); it is
 * taken from the process configuration the first time the kernels are
 * chosen. */
#include "backend/cpu/cpu_internal.h"

#include "base/config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static cpu_features features;
static const cpu_kernels *best;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void probe(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    features.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    features.f16c = features.avx2_fma; /* every AVX2 CPU ember targets has F16C */
    features.avx512f = __builtin_cpu_supports("avx512f");
    features.avx512bw = __builtin_cpu_supports("avx512bw");
    features.avx512vl = __builtin_cpu_supports("avx512vl");
    features.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    features.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
    const char *want = em_config_str(em_config_global(), EMC_CPU_ISA);
    best = cpu_kernels_ref();
    bool any = !strcmp(want, "auto") || !strcmp(want, "amx");
    bool allow_avx2 = any || strcmp(want, "portable");
    bool allow_avx512 = any || !strcmp(want, "avx512");
    if (allow_avx2 && features.avx2_fma && cpu_kernels_avx2()) best = cpu_kernels_avx2();
    if (allow_avx512 && features.avx512f && features.avx512bw && features.avx512vl && features.avx512bf16 &&
        cpu_kernels_avx512())
        best = features.avx512vnni && cpu_kernels_avx512_vnni() ? cpu_kernels_avx512_vnni() : cpu_kernels_avx512();
    /* AMX products take the AVX-512 tables' bf16 activations and sit beside them */
    features.amx = any && (best == cpu_kernels_avx512() || best == cpu_kernels_avx512_vnni()) && cpu_amx_request();
}

const cpu_features *cpu_get_features(void) {
    pthread_once(&once, probe);
    return &features;
}

const cpu_kernels *cpu_kernels_best(void) {
    pthread_once(&once, probe);
    return best;
}
