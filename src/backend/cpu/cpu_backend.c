/* cpu_backend.c — the CPU operation table: element-wise operations,
 * normalisation, rotary embeddings, embedding lookup and KV writes. The
 * heavy operations (matmul, attention) have their own files. */
#include "backend/cpu/cpu_internal.h"

#include "base/alloc.h"
#include "tensor/argmax.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

float *cpu_scratch(cpu_backend *cb, int t, size_t n) {
    if (n > cb->scratch_len[t]) {
        free(cb->scratch[t]);
        size_t cap = n < 4096 ? 4096 : n * 2;
        cb->scratch[t] = em_aligned_alloc(cap * sizeof(float));
        cb->scratch_len[t] = cb->scratch[t] ? cap : 0;
    }
    return cb->scratch[t];
}

static void *cpu_alloc(em_backend *be, size_t bytes) {
    (void)be;
    return em_aligned_alloc(bytes);
}

static void cpu_free(em_backend *be, void *p) {
    (void)be;
    free(p);
}

/* Address space only: the OS commits pages as blocks are first written. */
static void *cpu_reserve(em_backend *be, size_t bytes) {
    (void)be;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void cpu_release(em_backend *be, void *p, size_t bytes) {
    (void)be;
    if (p) munmap(p, bytes);
}

/* Host memory is the backend's memory: transfers are plain copies. */
static em_status cpu_transfer(em_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return EM_OK;
}

static void cpu_copy(em_backend *be, void *dst, const void *src, size_t bytes) {
    (void)cpu_transfer(be, dst, src, bytes);
}

static void cpu_argmax_rows(em_backend *be, int32_t *ids, float *vals, const float *x, int rows, int n, int ld) {
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * (size_t)ld;
        ids[r] = em_argmax_f32(row, n);
        if (vals) vals[r] = row[ids[r]] == row[ids[r]] ? row[ids[r]] : NAN;
    }
}

static void cpu_copy_rows(em_backend *be, float *dst, int ld_dst, const float *src, int ld_src, int rows, int n) {
    (void)be;
    for (int r = 0; r < rows && n > 0; r++)
        memcpy(dst + (size_t)r * (size_t)ld_dst, src + (size_t)r * (size_t)ld_src, (size_t)n * sizeof(float));
}

typedef struct rows_job {
    float *y;
    const float *x;
    const float *gain;
    int n;
    float eps, offset;
} rows_job;

static void rmsnorm_row(void *ctx, int r, int thread) {
    (void)thread;
    const rows_job *j = ctx;
    const float *x = j->x + (size_t)r * (size_t)j->n;
    float *y = j->y + (size_t)r * (size_t)j->n;
    double ss = 0; /* double: the sum of squares of a wide row loses bits in f32 */
    for (int i = 0; i < j->n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / j->n + j->eps));
    for (int i = 0; i < j->n; i++) y[i] = x[i] * inv * (j->gain[i] + j->offset);
}

static void cpu_rmsnorm(em_backend *be, float *y, const float *x, const float *gain, int rows, int n, float eps,
                        float gain_offset) {
    rows_job j = {y, x, gain, n, eps, gain_offset};
    em_pool_for(((cpu_backend *)be->impl)->pool, rows, rmsnorm_row, &j);
}

typedef struct hadamard_job {
    float *x;
    const hadamard *h;
} hadamard_job;

static void hadamard_row(void *ctx, int r, int thread) {
    (void)thread;
    const hadamard_job *j = ctx;
    float tmp[HADAMARD_TMP_ROWS];
    hadamard_right(j->h, j->x + (size_t)r * (size_t)j->h->n, tmp);
}

static void cpu_hadamard(em_backend *be, float *x, int rows, const hadamard *h) {
    hadamard_job j = {x, h};
    em_pool_for(((cpu_backend *)be->impl)->pool, rows, hadamard_row, &j);
}

static void cpu_rope(em_backend *be, float *x, int rows, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
                     const float *inv_freq, float attn_factor) {
    (void)be;
    int half = rot_dim / 2;
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < half; i++) {
            /* angle in f32 as the reference computes position * inv_freq */
            float ang = (float)pos[r] * inv_freq[i];
            float c = cosf(ang) * attn_factor, s = sinf(ang) * attn_factor;
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((size_t)r * (size_t)n_heads + (size_t)h) * (size_t)head_dim;
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

typedef struct swiglu_job {
    const cpu_kernels *k;
    float *out;
    const float *gate, *up;
    int n, ld_in;
} swiglu_job;

static void swiglu_row(void *ctx, int r, int thread) {
    (void)thread;
    const swiglu_job *j = ctx;
    j->k->silu_mul(j->out + (size_t)r * (size_t)j->n, j->gate + (size_t)r * (size_t)j->ld_in,
                   j->up + (size_t)r * (size_t)j->ld_in, j->n);
}

static void cpu_swiglu(em_backend *be, float *out, const float *gate, const float *up, int rows, int n, int ld_in) {
    cpu_backend *cb = be->impl;
    swiglu_job j = {cb->k, out, gate, up, n, ld_in};
    em_pool_for(cb->pool, rows, swiglu_row, &j);
}

typedef struct add_job {
    float *y;
    const float *x;
    size_t n, chunk;
} add_job;

static void add_chunk(void *ctx, int t, int thread) {
    (void)thread;
    const add_job *j = ctx;
    size_t b = (size_t)t * j->chunk, e = b + j->chunk < j->n ? b + j->chunk : j->n;
    for (size_t i = b; i < e; i++) j->y[i] += j->x[i];
}

static void cpu_add(em_backend *be, float *y, const float *x, size_t n) {
    add_job j = {y, x, n, 1 << 14};
    em_pool_for(((cpu_backend *)be->impl)->pool, (int)((n + j.chunk - 1) / j.chunk), add_chunk, &j);
}

static void cpu_embed(em_backend *be, float *out, const em_weight *t, const int32_t *ids, int n) {
    const cpu_kernels *k = ((cpu_backend *)be->impl)->k;
    size_t d = (size_t)t->cols;
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * d;
        size_t row = (size_t)ids[i] * d;
        if (t->bits) k->qdequant(t, ids[i], o); /* quantized table: dequantize the one row */
        else if (t->dtype == EM_F32) memcpy(o, (const float *)t->data + row, d * sizeof *o);
        else if (t->dtype == EM_BF16) for (size_t k = 0; k < d; k++) o[k] = bf16_to_f32(((const uint16_t *)t->data)[row + k]);
        else if (t->dtype == EM_F16) for (size_t k = 0; k < d; k++) o[k] = f16_to_f32(((const uint16_t *)t->data)[row + k]);
    }
}

static void cpu_kv_write(em_backend *be, const em_kv_view *kv, const float *k, const float *v, const int32_t *pos,
                         int n, int n_kv, int head_dim) {
    (void)be;
    size_t row = (size_t)n_kv * (size_t)head_dim;
    for (int i = 0; i < n; i++) {
        int b = pos[i] / kv->block_size, off = pos[i] % kv->block_size;
        memcpy(kv->k_blocks[b] + (size_t)off * row, k + (size_t)i * row, row * sizeof(float));
        memcpy(kv->v_blocks[b] + (size_t)off * row, v + (size_t)i * row, row * sizeof(float));
    }
}

static const em_backend_ops cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .destroy = cpu_backend_free,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .reserve = cpu_reserve,
    .release = cpu_release,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .copy = cpu_copy,
    .copy_rows = cpu_copy_rows,
    .argmax_rows = cpu_argmax_rows,
    .matmul = cpu_matmul,
    .matmul_group = cpu_matmul_group,
    .matmul_swiglu = cpu_qmatmul_swiglu,
    .rmsnorm = cpu_rmsnorm,
    .hadamard = cpu_hadamard,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .embed = cpu_embed,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .sigmoid_mul = cpu_sigmoid_mul,
    .conv1d_silu = cpu_conv1d_silu,
    .gdn_gates = cpu_gdn_gates,
    .gated_delta_rule = cpu_gated_delta_rule,
    .rmsnorm_gated = cpu_rmsnorm_gated,
};

em_status cpu_backend_create(int n_threads, em_backend **out) {
    em_backend *be = em_calloc(1, sizeof *be);
    cpu_backend *cb = em_calloc(1, sizeof *cb);
    if (!be || !cb) {
        free(be);
        free(cb);
        return em_fail(EM_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    cb->pool = em_pool_create(n_threads);
    if (!cb->pool) {
        free(be);
        free(cb);
        return em_fail(EM_ERR_NOMEM, "cannot start %d threads", n_threads);
    }
    be->n_threads = em_pool_threads(cb->pool);
    cb->scratch = em_calloc((size_t)be->n_threads, sizeof *cb->scratch);
    cb->scratch_len = em_calloc((size_t)be->n_threads, sizeof *cb->scratch_len);
    cb->k = cpu_kernels_best();
    cb->amx = cpu_get_features()->amx;
    be->ops = &cpu_ops;
    snprintf(be->desc, sizeof be->desc, "cpu (%s, %d threads)", cb->k->isa, be->n_threads);
    be->impl = cb;
    if (!cb->scratch || !cb->scratch_len) {
        cpu_backend_free(be);
        return em_fail(EM_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    *out = be;
    return EM_OK;
}

void cpu_backend_free(em_backend *be) {
    if (!be) return;
    cpu_backend *cb = be->impl;
    if (cb) {
        em_pool_free(cb->pool);
        for (int t = 0; cb->scratch && t < be->n_threads; t++) free(cb->scratch[t]);
        free(cb->scratch);
        free(cb->scratch_len);
        free(cb->xbf16);
        free(cb->xamx);
        free(cb->xq8);
        free(cb);
    }
    free(be);
}
