/* membw.c — a memory read-bandwidth probe for roofline figures.
 *
 * Streams a buffer far larger than the caches with every thread, at full
 * vector width and with several independent accumulators (one accumulator
 * would measure the adder's latency, not memory). Best of a few passes.
 * The buffer asks for transparent huge pages and is written once: on a
 * 2-core VM host, faulting in 1 GB of 4 KB pages (zeroed, then filled)
 * took about 4.5 s of each probe, and `ember bench` probes twice. */
#include "backend/cpu/membw.h"

#include "backend/cpu/cpu_internal.h"
#include "base/hugepage.h"
#include "base/timer.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx512f"))) static double sum_avx512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
        a4 = _mm512_add_ps(a4, _mm512_load_ps(p + i + 64));
        a5 = _mm512_add_ps(a5, _mm512_load_ps(p + i + 80));
        a6 = _mm512_add_ps(a6, _mm512_load_ps(p + i + 96));
        a7 = _mm512_add_ps(a7, _mm512_load_ps(p + i + 112));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx2"))) static double sum_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
        a4 = _mm256_add_ps(a4, _mm256_load_ps(p + i + 32));
        a5 = _mm256_add_ps(a5, _mm256_load_ps(p + i + 40));
        a6 = _mm256_add_ps(a6, _mm256_load_ps(p + i + 48));
        a7 = _mm256_add_ps(a7, _mm256_load_ps(p + i + 56));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
#endif

static double sum_portable(const float *p, size_t n) {
    float a[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += p[i + k];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

typedef struct probe_job {
    const float *buf;
    size_t n, chunk;
    double sums[256];
} probe_job;

static void probe_task(void *ctx, int task, int thread) {
    probe_job *j = ctx;
    size_t b = (size_t)task * j->chunk, e = b + j->chunk < j->n ? b + j->chunk : j->n;
    const cpu_features *f = cpu_get_features();
    double s;
#if defined(__x86_64__) && defined(__GNUC__)
    if (f->avx512f) s = sum_avx512(j->buf + b, e - b);
    else if (f->avx2_fma) s = sum_avx2(j->buf + b, e - b);
    else
#endif
        s = sum_portable(j->buf + b, e - b);
    (void)f;
    j->sums[thread & 255] += s;
}

double cpu_read_bandwidth(em_pool *pool, size_t bytes) {
    size_t n = bytes / sizeof(float);
    n &= ~(size_t)1023;
    /* fresh memory on huge pages where the kernel grants them, as the
     * weights are copied (weights_host.c) */
    float *buf = em_huge_reserve(n * sizeof(float));
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    probe_job j = {.buf = buf, .n = n};
    int tasks = em_pool_threads(pool) * 16;
    j.chunk = (n / (size_t)tasks + 1023) & ~(size_t)1023;
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = em_now();
        em_pool_for(pool, tasks, probe_task, &j);
        double dt = em_now() - t0;
        if (dt > 0 && (double)(n * sizeof(float)) / dt > best) best = (double)(n * sizeof(float)) / dt;
    }
    volatile double sink = j.sums[0];
    (void)sink;
    em_huge_release(buf, n * sizeof(float));
    return best;
}
