/* cuda_test_util.h — what the CUDA operation tests share: the two
 * backends, seeded random data, device copies in and out (a failed
 * transfer stops the test with the device's error) and the error measure.
 * Included by one test program each (static state). */
#ifndef EMBER_CUDA_TEST_UTIL_H
#define EMBER_CUDA_TEST_UTIL_H

#include "test.h"

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "base/config.h"
#include "base/status.h"
#include "tensor/dtype.h"

#include <stdint.h>

static em_backend *cpu, *gpu;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static float *rand_f32(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

/* Device copy of host bytes (freed by the caller with gpu->ops->free). */
static void *up(const void *h, size_t bytes) {
    void *d = gpu->ops->alloc(gpu, bytes);
    REQUIRE(d);
    if (gpu->ops->upload(gpu, d, h, bytes) != EM_OK) {
        fprintf(stderr, "upload failed: %s\n", em_last_error());
        REQUIRE(!"device operation failed");
    }
    return d;
}

/* A failed download reports the first failed operation queued before it
 * (the device error and where it happened); the test stops there. */
static float *down(const void *d, size_t n) {
    float *h = malloc(n * sizeof *h);
    if (gpu->ops->download(gpu, h, d, n * sizeof *h) != EM_OK) {
        fprintf(stderr, "download failed: %s\n", em_last_error());
        REQUIRE(!"device operation failed");
    }
    return h;
}

#define RUN(test) (fprintf(stderr, "-- %s\n", #test), test())

/* Runs fn against a GPU backend made with the setting name=value (the
 * global gpu for its duration; the configuration and gpu restored after). */
static void with_config(const char *name, const char *value, void (*fn)(void)) {
    em_config *c = NULL;
    const em_config *prev = em_config_retain(em_config_global());
    em_config_override ov = {name, value};
    REQUIRE(em_config_with_overrides(prev, &ov, 1, EM_CFG_SRC_FLAG, &c) == EM_OK);
    em_config_set_global(c);
    em_backend *saved = gpu;
    REQUIRE(cuda_backend_create(0, &gpu) == EM_OK);
    fn();
    em_backend_free(gpu);
    gpu = saved;
    em_config_set_global(prev);
    em_config_release((em_config *)prev), em_config_release(c);
}

/* Largest |a-b| relative to the largest |b| (at least 1e-30). */
static double rel_err(const float *a, const float *b, size_t n) {
    double err = 0, mag = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > err || d != d) err = d != d ? INFINITY : d;
        if (fabs(b[i]) > mag) mag = fabs(b[i]);
    }
    return err / mag;
}

static void *weight_data(em_dtype dt, size_t n) {
    if (dt == EM_F32) return rand_f32(n, 0.5f);
    uint16_t *w = malloc(n * 2);
    for (size_t i = 0; i < n; i++) w[i] = dt == EM_BF16 ? f32_to_bf16(frand() * 0.5f) : f32_to_f16(frand() * 0.5f);
    return w;
}

#endif
