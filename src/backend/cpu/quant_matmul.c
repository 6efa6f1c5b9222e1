/* quant_matmul.c — y = x · wᵀ for MLX affine quantized weights, threaded
 * over blocks of weight rows like the float matmul.
 *
 * Small batches (decode) run the fused tile: packed weights are dequantized
 * in registers and multiplied at once, so only the packed bytes cross the
 * memory bus. Larger batches (prefill) dequantize a block of rows once into
 * the thread's scratch (kept in L2) and run the float tiles over every
 * activation row: f32 for EXACT math, bf16 dot products for FAST (AMX
 * tiles over the block's rows in bf16 where the CPU has them). FAST
 * products with 4- or 8-bit weights round the activations to int8 (one
 * scale per 32) and use integer dot products where the kernel table has
 * them: few rows on the int8 GEMV (decode is then bound by memory, not by
 * dequantization), many (QI8_GEMM_MIN_M) on the int8 GEMM, whose blocks repack the codes
 * as bytes instead of dequantizing them (twice the products per
 * instruction of bf16: 1B shape, 512-token prefill on 2 cores, 4-bit
 * 182-213 -> 295-339 tokens/s, 8-bit 198-207 -> 274-303, runs alternated). */
#include "backend/cpu/cpu_internal.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>

/* Batches below this use the fused tile (it dequantizes once per 4 rows). */
#define QFUSED_MAX_M 8
/* FAST batches below this use int8 activations (4- and 8-bit weights) on
 * the few-row kernels; where the kernels have the int8 GEMM (and no AMX
 * takes the larger batches), batches below QI8_GEMM_MIN_M do, and larger
 * ones run on the GEMM, whose repacking of every block pays only over many
 * rows (1B shape, 4-bit, 2 cores: batched decode of 16 and 32 sequences
 * 137-148 and 148-162 tok/s on the few-row kernel, 63-77 and 128-131 on
 * the GEMM, 57-61 and 89-93 on the bf16 path before it; prompts of 32 and
 * 64 tokens 185-240 and 188-260 tok/s against 134-163 and 244-258 on the
 * GEMM; of 128, 208-232 against 270-309). */
#define QI8_MAX_M 16
#define QI8_GEMM_MIN_M 64
/* Codes a block of the int8 GEMM repacks: every row of x passes over it
 * while it stays in L2. */
#define GEMM_BLOCK_BYTES (256u << 10)

typedef struct qjob {
    cpu_backend *cb;
    const em_weight *w;
    const float *x;
    const uint16_t *xb; /* bf16 activations for FAST, else NULL */
    const uint16_t *xp; /* or the activations packed for AMX tiles (cpu_amx_pack) */
    const cpu_xq8 *xq;  /* int8 activations for FAST few-row products, else NULL */
    int M, N, K;
    int rows_per_block;
    bool fused;
    bool gemm;          /* FAST many-row product on the int8 GEMM (with xq) */
    float *y;
    const float *bias;
} qjob;

static void run_fused(const qjob *j, int n0, int n1) {
    for (int m = 0; m < j->M; m += 4) {
        int mr = j->M - m < 4 ? j->M - m : 4;
        for (int n = n0; n < n1; n += 4) {
            int nr = n1 - n < 4 ? n1 - n : 4;
            j->cb->k->qtile(j->x + (size_t)m * j->K, (size_t)j->K, mr, j->w, n, nr, j->y + (size_t)m * j->N + n,
                            (size_t)j->N);
        }
    }
}

static void run_i8(const qjob *j, int n0, int n1) {
    j->cb->k->qtile_i8(j->xq, 0, j->M, j->w, n0, n1 - n0, j->y + n0, (size_t)j->N);
}

/* Rows from which FAST 4-/8-bit products leave the few-row int8 kernels. */
static int qi8_rows_limit(const cpu_backend *cb) {
    return cb->k->qgemm_i8 && !cb->amx ? QI8_GEMM_MIN_M : QI8_MAX_M;
}

/* Floats of scratch a block of the int8 GEMM needs. */
static size_t gemm_scratch_floats(const qjob *j, int rows) {
    return qgemm_i8_scratch_bytes(j->K, j->w->group_size, rows) / sizeof(float) + 1;
}

static void run_gemm_i8(const qjob *j, int n0, int n1, int thread) {
    void *scratch = cpu_scratch(j->cb, thread, gemm_scratch_floats(j, j->rows_per_block));
    if (!scratch) return; /* sized before the job started; see cpu_qmatmul */
    j->cb->k->qgemm_i8(j->xq, j->M, j->w, n0, n1 - n0, j->y + n0, (size_t)j->N, scratch);
}

/* Rounds one block of 32 values to int8 (scale: largest magnitude / 127);
 * evens go to qe[0..16), odds to qo[0..16) (qo = qe + 1 and a stride of 2
 * keep them in order). Returns the sum of what rounding took off. */
static float qi8_block(const float *xb, int8_t *qe, int8_t *qo, int stride, float *d) {
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
    *d = amax / 127.0f;
    float inv = amax > 0 ? 127.0f / amax : 0.0f, err = 0;
    for (int i = 0; i < 32; i++) {
        long v = lrintf(xb[i] * inv);
        (i % 2 ? qo : qe)[(i / 2) * stride] = (int8_t)v;
        err += xb[i] - (float)v * *d;
    }
    return err;
}

/* The portable row quantizer (see qi8_quantize_fn). In the run layout a
 * block's evens and odds land in its run's two halves. */
void cpu_qi8_quantize_ref(const float *x, int K, int G, int run, int8_t *q, float *d, float *sum, float *err) {
    for (int g = 0; g < K / G; g++) {
        float e = 0, s = 0;
        for (int k = g * G; k < (g + 1) * G; k += 32) {
            int base = run ? k - k % run : k, len = run ? (K - base < run ? K - base : run) : 0, b = k - base;
            int8_t *qe = run ? q + base + b / 2 : q + k;
            e += qi8_block(x + k, qe, run ? qe + len / 2 : qe + 1, run ? 1 : 2, d + k / 32);
        }
        for (int k = g * G; k < (g + 1) * G; k++) s += x[k];
        sum[g] = s;
        err[g] = e;
    }
}

/* Rounds the M rows of x to int8 per 32 values and sums each row (and what
 * rounding took off it) over each weight group, into the backend's buffer
 * in the layout of cpu_xq8; false when it cannot be allocated. */
static bool quantize_rows(cpu_backend *cb, const float *x, int M, int K, int G, int run, cpu_xq8 *out) {
    size_t nq = (size_t)M * (size_t)K, nd = nq / 32, ns = nq / (size_t)G;
    size_t bytes = (nd + 2 * ns) * sizeof(float) + nq;
    if (bytes > cb->xq8_bytes) {
        free(cb->xq8);
        cb->xq8 = em_aligned_alloc(bytes);
        cb->xq8_bytes = cb->xq8 ? bytes : 0;
        if (!cb->xq8) return false;
    }
    float *d = cb->xq8, *sum = d + nd, *err = sum + ns;
    int8_t *q = (int8_t *)(err + ns);
    qi8_quantize_fn fn = cb->k->qi8_quantize ? cb->k->qi8_quantize : cpu_qi8_quantize_ref;
    for (int m = 0; m < M; m++) {
        size_t r = (size_t)m;
        fn(x + r * (size_t)K, K, G, run, q + r * (size_t)K, d + r * (size_t)(K / 32), sum + r * (size_t)(K / G),
           err + r * (size_t)(K / G));
    }
    *out = (cpu_xq8){q, d, sum, err, run};
    return true;
}

/* Scratch floats a dequantized block of `rows` rows needs (run_dequantized):
 * EXACT, the f32 rows; FAST, one f32 row and the block in bf16 (half the
 * cache an f32 copy would take, so twice the rows share each pass over the
 * activations); AMX, also the tiles' scratch for the last rows. */
static size_t qscratch_floats(const qjob *j, size_t rows) {
    size_t K = (size_t)j->K;
    if (!j->xb && !j->xp) return rows * K;
    size_t n = K + (rows * K + 1) / 2;
    if (j->xp) n += 16 * K; /* 32 x K bf16 */
    return n;
}

static void run_dequantized(const qjob *j, int n0, int n1, int thread) {
    const cpu_kernels *k = j->cb->k;
    size_t K = (size_t)j->K, rows = (size_t)(n1 - n0);
    bool fast = j->xb || j->xp;
    /* EXACT: the f32 rows; FAST: a row in f32, then the rows in bf16, then
     * (AMX) the tiles' scratch for the last rows */
    float *wf = cpu_scratch(j->cb, thread, qscratch_floats(j, rows));
    if (!wf) return; /* scratch was sized at block_rows; see cpu_qmatmul */
    const void *wt = wf, *xt = j->x;
    tile_fn tile = k->tile_f32_f32;
    if (!fast) {
        for (size_t r = 0; r < rows; r++) k->qdequant(j->w, n0 + (int64_t)r, wf + r * K);
    } else {
        uint16_t *wb = (uint16_t *)(wf + K);
        for (size_t r = 0; r < rows; r++) {
            k->qdequant(j->w, n0 + (int64_t)r, wf);
            k->to_bf16(wb + r * K, wf, K);
        }
        if (j->xp) {
            cpu_amx_gemm(j->xp, j->M, wb, K, (int)rows, j->K, j->y + n0, (size_t)j->N, wb + rows * K);
            return;
        }
        wt = wb;
        xt = j->xb;
        tile = k->tile_bf16_bf16;
    }
    size_t xelem = j->xb ? 2 : 4, welem = j->xb ? 2 : 4;
    for (int m = 0; m < j->M; m += 4) {
        int mr = j->M - m < 4 ? j->M - m : 4;
        const char *xr = (const char *)xt + (size_t)m * K * xelem;
        for (int n = n0; n < n1; n += 4) {
            int nr = n1 - n < 4 ? n1 - n : 4;
            tile(xr, K, mr, (const char *)wt + (size_t)(n - n0) * K * welem, K, nr, j->K, j->y + (size_t)m * j->N + n,
                 (size_t)j->N);
        }
    }
}

/* y[m * ldy + i] += bias[n0 + i] for M rows of w outputs (no bias: nothing). */
static void add_bias(float *y, size_t ldy, int M, const float *bias, int n0, int w) {
    if (!bias) return;
    for (int m = 0; m < M; m++)
        for (int i = 0; i < w; i++) y[(size_t)m * ldy + i] += bias[n0 + i];
}

static void qblock(void *ctx, int task, int thread) {
    const qjob *j = ctx;
    int n0 = task * j->rows_per_block;
    int n1 = n0 + j->rows_per_block < j->N ? n0 + j->rows_per_block : j->N;
    if (j->gemm) run_gemm_i8(j, n0, n1, thread);
    else if (j->xq) run_i8(j, n0, n1);
    else if (j->fused) run_fused(j, n0, n1);
    else run_dequantized(j, n0, n1, thread);
    add_bias(j->y + n0, (size_t)j->N, j->M, j->bias, n0, n1 - n0);
}

/* Fused: about 64 KB of packed weights per block, at least 8 blocks per
 * thread so the stream stays balanced. Int8: about 256 KB, at least 4 blocks
 * per thread, handed out by em_pool_for_runs: these kernels are bound by the
 * bus, and each thread then reads its own contiguous run of blocks as one
 * stream (a block that went to another thread would restart it cold), the
 * small blocks only balancing the runs' ends. 4-bit decode of a 1B-shaped
 * model, 2 cores: ten alternated runs, 43.3-48.0 tokens/s (median 45.1) with
 * 1 MB blocks handed out in turn and four-row tiles, 45.8-55.0 (51.0) so;
 * 8-bit 23.1-24.1 against 27.2-30.2. Dequantized:
 * 512 KB of rows as the tiles read them (bf16 for FAST, else f32): every
 * block streams all the activation rows past its weights, so taller blocks
 * stream them fewer times (1B shape, 4-bit, 512-token prefill on 2 cores:
 * runs alternated: 2048-wide rows 32 at a time in f32 166-183 tokens/s,
 * 128 at a time in bf16 187-206). */
static int qblock_rows(const qjob *j, int n_threads) {
    if (j->gemm) { /* GEMM_BLOCK_BYTES of codes, one byte each, whole panels of 16 */
        int rows = (int)(GEMM_BLOCK_BYTES / (size_t)j->K) & ~15;
        return rows < 16 ? 16 : rows;
    }
    size_t row_bytes = j->fused ? (size_t)j->K * (size_t)j->w->bits / 8 : (size_t)j->K * (j->xb || j->xp ? 2 : 4);
    size_t target = j->xq ? 256u << 10 : j->fused ? 64u << 10 : 512u << 10;
    int rows = (int)(target / (row_bytes ? row_bytes : 1));
    if (j->fused) {
        int per = j->N / (n_threads * (j->xq ? 4 : 8));
        if (per < rows) rows = per;
    }
    rows &= ~3;
    if (j->xp) return rows < 32 ? 32 : rows & ~31; /* whole pairs of AMX tiles */
    return rows < 4 ? 4 : rows;
}

/* FAST many-row products on the int8 GEMM where the kernels have one (and
 * no AMX, whose bf16 tiles take them): x rounded once, every thread's
 * scratch sized up front; false (nothing run) where any of it fails. */
static bool qmatmul_gemm_i8(cpu_backend *cb, int n_threads, qjob *j) {
    const em_weight *w = j->w;
    cpu_xq8 xq;
    if (!cb->k->qgemm_i8 || cb->amx || (w->bits != 4 && w->bits != 8) ||
        !quantize_rows(cb, j->x, j->M, j->K, w->group_size, 0, &xq))
        return false;
    j->gemm = true;
    j->xq = &xq;
    j->rows_per_block = qblock_rows(j, n_threads);
    for (int t = 0; t < n_threads; t++)
        if (!cpu_scratch(cb, t, gemm_scratch_floats(j, j->rows_per_block))) return false;
    em_pool_for(cb->pool, (j->N + j->rows_per_block - 1) / j->rows_per_block, qblock, j);
    return true;
}

void cpu_qmatmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math) {
    cpu_backend *cb = be->impl;
    qjob j = {.cb = cb, .w = w, .x = x, .M = M, .N = (int)w->rows, .K = (int)w->cols, .y = y, .bias = bias};
    cpu_xq8 xq;
    if (math == EM_MATH_FAST && M >= qi8_rows_limit(cb)) {
        qjob g = j;
        if (qmatmul_gemm_i8(cb, be->n_threads, &g)) return;
    }
    if (math == EM_MATH_FAST && M < qi8_rows_limit(cb) && (w->bits == 4 || w->bits == 8) && cb->k->qtile_i8 &&
        quantize_rows(cb, x, M, j.K, w->group_size, cb->k->qi8_run(w->bits, w->group_size), &xq)) {
        j.xq = &xq;
        j.fused = true; /* blocks sized for a packed stream */
        j.rows_per_block = qblock_rows(&j, be->n_threads);
        em_pool_for_runs(cb->pool, (j.N + j.rows_per_block - 1) / j.rows_per_block, qblock, &j);
        return;
    }
    j.fused = cb->k->qtile && M < QFUSED_MAX_M;
    if (!j.fused && math == EM_MATH_FAST && M >= 16 && cb->amx && j.K % 32 == 0)
        j.xp = cpu_activations_amx(cb, x, M, j.K);
    if (!j.fused && !j.xp && math == EM_MATH_FAST && M >= 16 && cb->k->tile_bf16_bf16) {
        const uint16_t *xb = cpu_activations_bf16(cb, x, (size_t)M * (size_t)w->cols);
        if (xb) j.xb = xb;
    }
    j.rows_per_block = qblock_rows(&j, be->n_threads);
    int n_blocks = (j.N + j.rows_per_block - 1) / j.rows_per_block;
    if (!j.fused) {
        /* Size every thread's scratch up front: a worker cannot report an
         * allocation failure, so fall back to the fused tile when it fails. */
        size_t need = qscratch_floats(&j, (size_t)j.rows_per_block);
        for (int t = 0; t < be->n_threads; t++)
            if (!cpu_scratch(cb, t, need)) j.fused = true;
        if (j.fused) {
            if (!cb->k->qtile) return; /* out of memory with no fallback: y is left as is */
            j.xb = NULL;
            j.xp = NULL;
            j.rows_per_block = qblock_rows(&j, be->n_threads);
            n_blocks = (j.N + j.rows_per_block - 1) / j.rows_per_block;
        }
    }
    em_pool_for(cb->pool, n_blocks, qblock, &j);
}

/* ---- Few-row FAST products of several weights of one input ----
 *
 * The q/k/v (or gate/up) projections of a decode step: x is rounded to
 * int8 once, and every weight's row blocks go to the pool as one job, so
 * the threads wait for the slowest once instead of once a weight. Each
 * block is what cpu_qmatmul would run for its weight (the same rows a
 * block, the same tile), so every output gets the bits matmul gives it. */

/* Whether cpu_qmatmul would take the int8 path for all n weights with one
 * rounding of x: 4- or 8-bit codes of one width and group, FAST, few rows. */
static bool qgroup_ok(const cpu_backend *cb, int n, const em_weight *const *ws, int M, em_math math) {
    if (math != EM_MATH_FAST || M >= qi8_rows_limit(cb) || !cb->k->qtile_i8 || n < 1) return false;
    for (int i = 0; i < n; i++)
        if ((ws[i]->bits != 4 && ws[i]->bits != 8) || ws[i]->bits != ws[0]->bits ||
            ws[i]->group_size != ws[0]->group_size || ws[i]->cols != ws[0]->cols)
            return false;
    return true;
}

typedef struct qgroup {
    qjob j[EM_MATMUL_GROUP_MAX];
    int first[EM_MATMUL_GROUP_MAX + 1]; /* weight i's blocks are tasks first[i] .. first[i+1]-1 */
    int n;
    /* matmul_swiglu: gate (j[0]) and up (j[1]) blocks paired, a task's
     * rows of both written to the thread's scratch, then silu * up */
    float *swi_out;
    size_t swi_scratch; /* floats of scratch a task needs */
} qgroup;

/* Sets up g for the n weights against x already rounded into *xq. */
static int qgroup_plan(qgroup *g, cpu_backend *cb, int n_threads, int n, float *const *ys, const float *x,
                       const cpu_xq8 *xq, int M, const em_weight *const *ws, const float *const *biases) {
    g->n = n;
    g->first[0] = 0;
    for (int i = 0; i < n; i++) {
        qjob *j = &g->j[i];
        *j = (qjob){.cb = cb, .w = ws[i], .x = x, .xq = xq, .M = M, .N = (int)ws[i]->rows, .K = (int)ws[i]->cols,
                    .fused = true, .y = ys[i], .bias = biases ? biases[i] : NULL};
        j->rows_per_block = qblock_rows(j, n_threads);
        g->first[i + 1] = g->first[i] + (j->N + j->rows_per_block - 1) / j->rows_per_block;
    }
    return g->first[n];
}

static void qgroup_block(void *ctx, int task, int thread) {
    const qgroup *g = ctx;
    int i = 0;
    while (i + 1 < g->n && task >= g->first[i + 1]) i++;
    qblock((void *)&g->j[i], task - g->first[i], thread);
}

bool cpu_qmatmul_group(em_backend *be, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                       const float *const *biases, em_math math) {
    cpu_backend *cb = be->impl;
    cpu_xq8 xq;
    if (n > EM_MATMUL_GROUP_MAX || !qgroup_ok(cb, n, ws, M, math) ||
        !quantize_rows(cb, x, M, (int)ws[0]->cols, ws[0]->group_size, cb->k->qi8_run(ws[0]->bits, ws[0]->group_size),
                       &xq))
        return false;
    qgroup g;
    int tasks = qgroup_plan(&g, cb, be->n_threads, n, ys, x, &xq, M, ws, biases);
    em_pool_for_runs(cb->pool, tasks, qgroup_block, &g);
    return true;
}

/* A SwiGLU task: rows [n0, n1) of the gate and of the up projection into
 * the thread's scratch (M rows of each, the block's width apart), then
 * out = silu(gate) * up there (silu_mul is elementwise: the bits of the
 * whole-row swiglu). */
static void qswiglu_block(void *ctx, int task, int thread) {
    const qgroup *g = ctx;
    const qjob *jg = &g->j[0], *ju = &g->j[1];
    int N = jg->N, n0 = task * jg->rows_per_block, n1 = n0 + jg->rows_per_block < N ? n0 + jg->rows_per_block : N;
    int w = n1 - n0;
    float *s = cpu_scratch(jg->cb, thread, g->swi_scratch), *gs = s, *us = s + (size_t)jg->M * (size_t)w;
    jg->cb->k->qtile_i8(jg->xq, 0, jg->M, jg->w, n0, w, gs, (size_t)w);
    ju->cb->k->qtile_i8(ju->xq, 0, ju->M, ju->w, n0, w, us, (size_t)w);
    add_bias(gs, (size_t)w, jg->M, jg->bias, n0, w);
    add_bias(us, (size_t)w, ju->M, ju->bias, n0, w);
    for (int m = 0; m < jg->M; m++)
        jg->cb->k->silu_mul(g->swi_out + (size_t)m * N + n0, gs + (size_t)m * w, us + (size_t)m * w, w);
}

bool cpu_qmatmul_swiglu(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                        const float *bg, const float *bu, em_math math) {
    cpu_backend *cb = be->impl;
    const em_weight *ws[2] = {wg, wu};
    const float *bs[2] = {bg, bu};
    float *ys[2] = {out, out}; /* unused: a task writes silu * up itself */
    cpu_xq8 xq;
    if (wg->rows != wu->rows || !qgroup_ok(cb, 2, ws, M, math)) return false;
    qgroup g;
    if (!quantize_rows(cb, x, M, (int)wg->cols, wg->group_size, cb->k->qi8_run(wg->bits, wg->group_size), &xq))
        return false;
    qgroup_plan(&g, cb, be->n_threads, 2, ys, x, &xq, M, ws, bs);
    /* blocks of both at the gate's height, a whole number of 16 rows */
    int rows = g.j[0].rows_per_block & ~15;
    g.j[0].rows_per_block = g.j[1].rows_per_block = rows < 16 ? 16 : rows;
    g.swi_out = out;
    g.swi_scratch = 2 * (size_t)M * (size_t)g.j[0].rows_per_block;
    /* every thread's scratch up front: a worker cannot report a failure */
    for (int t = 0; t < be->n_threads; t++)
        if (!cpu_scratch(cb, t, g.swi_scratch)) return false;
    em_pool_for_runs(cb->pool, (g.j[0].N + g.j[0].rows_per_block - 1) / g.j[0].rows_per_block, qswiglu_block, &g);
    return true;
}
