/* cpu_matmul.c — y = x · wᵀ on the CPU: blocking and threading around the
 * tile kernels.
 *
 * Work is split into blocks of weight rows, handed to threads dynamically.
 * A block is sized so its weights stay in L2 while every activation row
 * passes over it (prefill), and small enough that decode (M = 1) spreads
 * the weight stream evenly over all threads. */
#include "backend/cpu/cpu_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct matmul_job {
    const cpu_kernels *k;
    tile_fn tile;
    const void *x;      /* f32 rows, or bf16 rows for FAST */
    size_t ldx;
    const void *w;
    size_t w_elem;      /* bytes per weight element */
    size_t ldw;
    int M, N, K;
    int rows_per_block;
    float *y;
    const float *bias;
} matmul_job;

static void matmul_block(void *ctx, int task, int thread) {
    (void)thread;
    const matmul_job *j = ctx;
    int n0 = task * j->rows_per_block;
    int n1 = n0 + j->rows_per_block < j->N ? n0 + j->rows_per_block : j->N;
    size_t xelem = j->tile == j->k->tile_bf16_bf16 ? 2 : 4;
    for (int m = 0; m < j->M; m += 4) {
        int mr = j->M - m < 4 ? j->M - m : 4;
        const char *xr = (const char *)j->x + (size_t)m * j->ldx * xelem;
        for (int n = n0; n < n1; n += 4) {
            int nr = n1 - n < 4 ? n1 - n : 4;
            const char *wr = (const char *)j->w + (size_t)n * j->ldw * j->w_elem;
            j->tile(xr, j->ldx, mr, wr, j->ldw, nr, j->K, j->y + (size_t)m * j->N + n, (size_t)j->N);
        }
    }
    if (j->bias)
        for (int m = 0; m < j->M; m++)
            for (int n = n0; n < n1; n++) j->y[(size_t)m * j->N + n] += j->bias[n];
}

/* Rows per block: about 256 KB of weights for prefill, and at least 8 blocks
 * per thread for decode so the stream stays balanced. */
static int block_rows(int M, int N, int K, size_t w_elem, int n_threads) {
    size_t row_bytes = (size_t)K * w_elem;
    int rows = (int)((256u << 10) / (row_bytes ? row_bytes : 1));
    if (M <= 4) {
        int per = N / (n_threads * 8);
        if (per < rows) rows = per;
    }
    rows &= ~3;
    if (rows < 4) rows = 4;
    return rows;
}

typedef struct convert_job {
    const float *x;
    uint16_t *out;
    size_t n;
} convert_job;

static void convert_rows(void *ctx, int task, int thread) {
    (void)thread;
    convert_job *c = ctx;
    size_t chunk = (c->n + 63) / 64, b = (size_t)task * chunk, e = b + chunk < c->n ? b + chunk : c->n;
    for (size_t i = b; i < e; i++) c->out[i] = f32_to_bf16(c->x[i]);
}

const uint16_t *cpu_activations_bf16(cpu_backend *cb, const float *x, size_t n) {
    if (n > cb->xbf16_len) {
        free(cb->xbf16);
        cb->xbf16 = em_aligned_alloc(n * 2);
        cb->xbf16_len = cb->xbf16 ? n : 0;
    }
    if (!cb->xbf16) return NULL;
    convert_job c = {x, cb->xbf16, n};
    em_pool_for(cb->pool, 64, convert_rows, &c);
    return cb->xbf16;
}

void cpu_matmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math) {
    cpu_backend *cb = be->impl;
    if (w->bits) {
        cpu_qmatmul(be, y, x, M, w, bias, math);
        return;
    }
    matmul_job j = {.k = cb->k, .x = x, .ldx = (size_t)w->cols, .w = w->data, .ldw = (size_t)w->cols,
                    .M = M, .N = (int)w->rows, .K = (int)w->cols, .y = y, .bias = bias};
    switch (w->dtype) {
    case EM_BF16: j.tile = cb->k->tile_f32_bf16; j.w_elem = 2; break;
    case EM_F16: j.tile = cb->k->tile_f32_f16; j.w_elem = 2; break;
    case EM_F32: j.tile = cb->k->tile_f32_f32; j.w_elem = 4; break;
    default: return; /* weight_bind admits no other dtype */
    }
    /* FAST: large bf16 GEMMs round activations once and use bf16 dot products. */
    if (math == EM_MATH_FAST && w->dtype == EM_BF16 && M >= 16 && cb->k->tile_bf16_bf16) {
        const uint16_t *xb = cpu_activations_bf16(cb, x, (size_t)M * (size_t)w->cols);
        if (xb) {
            j.x = xb;
            j.tile = cb->k->tile_bf16_bf16;
        }
    }
    j.rows_per_block = block_rows(M, j.N, j.K, j.w_elem, be->n_threads);
    int n_blocks = (j.N + j.rows_per_block - 1) / j.rows_per_block;
    em_pool_for(cb->pool, n_blocks, matmul_block, &j);
}

size_t em_weight_bytes(const em_weight *w) {
    if (w->bits) {
        size_t groups = (size_t)w->rows * (size_t)(w->cols / (w->group_size ? w->group_size : 1));
        return (size_t)w->rows * (size_t)w->cols * (size_t)w->bits / 8 + groups * 2 * dtype_size(w->scale_dtype);
    }
    return (size_t)w->rows * (size_t)w->cols * dtype_size(w->dtype);
}
