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

/* Rows per block: about 512 KB of weights for prefill (each block streams
 * every activation row past it; 1B shape, bf16, 512-token prefill on 2
 * cores, runs alternated: 256 KB 155-168 tokens/s, 512 KB 166-179), and at
 * least 8 blocks per thread for decode, handed out by em_pool_for_runs so
 * each thread reads a contiguous run of them as one stream, the small
 * blocks only balancing the runs' ends. */
static int block_rows(int M, int N, int K, size_t w_elem, int n_threads) {
    size_t row_bytes = (size_t)K * w_elem;
    int rows = (int)((512u << 10) / (row_bytes ? row_bytes : 1));
    if (M <= 4) {
        int per = N / (n_threads * 8);
        if (per < rows) rows = per;
    }
    rows &= ~3;
    if (rows < 4) rows = 4;
    return rows;
}

typedef struct convert_job {
    const cpu_kernels *k;
    const float *x;
    uint16_t *out;
    size_t n;
} convert_job;

static void convert_rows(void *ctx, int task, int thread) {
    (void)thread;
    convert_job *c = ctx;
    size_t chunk = (c->n + 63) / 64, b = (size_t)task * chunk, e = b + chunk < c->n ? b + chunk : c->n;
    if (b < e) c->k->to_bf16(c->out + b, c->x + b, e - b);
}

typedef struct pack_job {
    uint16_t *xp;
    const float *x;
    int M, K, groups;
} pack_job;

static void pack_groups(void *ctx, int task, int thread) {
    (void)thread;
    const pack_job *p = ctx;
    cpu_amx_pack(p->xp, p->x, p->M, p->K, task, task + 1);
}

const uint16_t *cpu_activations_amx(cpu_backend *cb, const float *x, int M, int K) {
    int groups = (M + 31) / 32 * 2;
    size_t n = (size_t)groups * 16 * (size_t)K;
    if (n > cb->xamx_len) {
        free(cb->xamx);
        cb->xamx = em_aligned_alloc(n * 2);
        cb->xamx_len = cb->xamx ? n : 0;
    }
    if (!cb->xamx) return NULL;
    pack_job p = {cb->xamx, x, M, K, groups};
    em_pool_for(cb->pool, groups, pack_groups, &p);
    return cb->xamx;
}

typedef struct amx_job {
    cpu_backend *cb;
    const uint16_t *xp, *w;
    int M, N, K, rows_per_block;
    float *y;
    const float *bias;
} amx_job;

static void amx_rows(void *ctx, int task, int thread) {
    const amx_job *j = ctx;
    int n0 = task * j->rows_per_block, n1 = n0 + j->rows_per_block < j->N ? n0 + j->rows_per_block : j->N;
    uint16_t *tail = (uint16_t *)cpu_scratch(j->cb, thread, (size_t)16 * (size_t)j->K); /* 32*K bf16 */
    if (!tail) return; /* scratch was reserved before the pool ran; see amx_matmul */
    cpu_amx_gemm(j->xp, j->M, j->w + (size_t)n0 * (size_t)j->K, (size_t)j->K, n1 - n0, j->K, j->y + n0, (size_t)j->N,
                 tail);
    if (j->bias)
        for (int m = 0; m < j->M; m++)
            for (int n = n0; n < n1; n++) j->y[(size_t)m * j->N + n] += j->bias[n];
}

/* FAST bf16 weights x 16+ rows on AMX tiles; false (nothing done) when the
 * shape or memory does not allow it. Blocks of whole tile pairs (32 rows),
 * about 256 KB of weights each. */
static bool amx_matmul(cpu_backend *cb, int n_threads, float *y, const float *x, int M, const em_weight *w,
                       const float *bias) {
    int N = (int)w->rows, K = (int)w->cols;
    if (!cb->amx || K % 32) return false;
    for (int t = 0; t < n_threads; t++)
        if (!cpu_scratch(cb, t, (size_t)16 * (size_t)K)) return false;
    const uint16_t *xp = cpu_activations_amx(cb, x, M, K);
    if (!xp) return false;
    int rows = (int)((256u << 10) / ((size_t)K * 2)) & ~31;
    amx_job j = {cb, xp, w->data, M, N, K, rows < 32 ? 32 : rows, y, bias};
    em_pool_for(cb->pool, (N + j.rows_per_block - 1) / j.rows_per_block, amx_rows, &j);
    return true;
}

const uint16_t *cpu_activations_bf16(cpu_backend *cb, const float *x, size_t n) {
    if (n > cb->xbf16_len) {
        free(cb->xbf16);
        cb->xbf16 = em_aligned_alloc(n * 2);
        cb->xbf16_len = cb->xbf16 ? n : 0;
    }
    if (!cb->xbf16) return NULL;
    convert_job c = {cb->k, x, cb->xbf16, n};
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
    /* FAST: large bf16 GEMMs round activations once and use AMX tiles where
     * the CPU has them, else bf16 dot products. */
    if (math == EM_MATH_FAST && w->dtype == EM_BF16 && M >= 16 && amx_matmul(cb, be->n_threads, y, x, M, w, bias))
        return;
    if (math == EM_MATH_FAST && w->dtype == EM_BF16 && M >= 16 && cb->k->tile_bf16_bf16) {
        const uint16_t *xb = cpu_activations_bf16(cb, x, (size_t)M * (size_t)w->cols);
        if (xb) {
            j.x = xb;
            j.tile = cb->k->tile_bf16_bf16;
        }
    }
    j.rows_per_block = block_rows(M, j.N, j.K, j.w_elem, be->n_threads);
    int n_blocks = (j.N + j.rows_per_block - 1) / j.rows_per_block;
    if (M <= 4) em_pool_for_runs(cb->pool, n_blocks, matmul_block, &j); /* a stream a thread: see block_rows */
    else em_pool_for(cb->pool, n_blocks, matmul_block, &j);
}

/* Quantized few-row FAST sets in one job (quant_matmul.c); else each alone. */
void cpu_matmul_group(em_backend *be, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                      const float *const *biases, em_math math) {
    if (cpu_qmatmul_group(be, n, ys, x, M, ws, biases, math)) return;
    for (int i = 0; i < n; i++) cpu_matmul(be, ys[i], x, M, ws[i], biases ? biases[i] : NULL, math);
}

size_t em_weight_bytes(const em_weight *w) {
    if (w->bits) {
        size_t groups = (size_t)w->rows * (size_t)(w->cols / (w->group_size ? w->group_size : 1));
        return (size_t)w->rows * (size_t)w->cols * (size_t)w->bits / 8 + groups * 2 * dtype_size(w->scale_dtype);
    }
    return (size_t)w->rows * (size_t)w->cols * dtype_size(w->dtype);
}
