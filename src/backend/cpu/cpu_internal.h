/* cpu_internal.h — shared pieces of the CPU backend: the thread pool, scratch
 * buffers and the SIMD kernel tables chosen at start from CPUID. */
#ifndef EMBER_BACKEND_CPU_INTERNAL_H
#define EMBER_BACKEND_CPU_INTERNAL_H

#include "backend/backend.h"
#include "base/threadpool.h"

#include <stdbool.h>

typedef struct cpu_features {
    bool avx2_fma, f16c, avx512f, avx512bw, avx512vl, avx512bf16, avx512vnni;
    bool amx; /* AMX tiles with bf16 products, granted to this process (and EMBER_CPU_ISA allows them) */
} cpu_features;

const cpu_features *cpu_get_features(void);

/* Dot-product tile kernels: y[m*ldy + n] = sum_k x[m*ldx + k] * w[n*ldw + k]
 * for m < mr (<= 4), n < nr (<= 4). The x row type depends on the kernel. */
typedef void (*tile_fn)(const void *x, size_t ldx, int mr, const void *w, size_t ldw, int nr, int K, float *y,
                        size_t ldy);

/* Quantized (MLX affine) kernels. qtile: y[m*ldy + j] = sum_k x[m*ldx + k] *
 * w(n0 + j, k) for m < mr (<= 4), j < nr (<= 4), dequantizing w to f32 in
 * registers (scale*q + bias) and accumulating with f32 FMAs. qdequant: row r
 * of w as f32 into out[w->cols]. */
typedef void (*qtile_fn)(const float *x, size_t ldx, int mr, const em_weight *w, int n0, int nr, float *y, size_t ldy);
typedef void (*qdequant_fn)(const em_weight *w, int64_t r, float *out);

/* Activations rounded to int8 for FAST few-row products with 4- and 8-bit
 * weights: row m's value k is q * d[m*(K/32) + k/32] (one scale per 32,
 * the largest magnitude to 127); sum[m*(K/G) + g] is the exact f32 sum of
 * row m over weight group g (it carries the groups' biases), and err[m*(K/G)
 * + g] the sum over the group of what rounding took off (x - q*d). q is
 * q[m*K + k], except where `run` is not 0 (4-bit weights, the run the
 * kernel asked for): each run of `run` values of a row (the row's last run
 * may be shorter) holds the even positions first and the odd ones after, the
 * order a load of packed nibbles splits into. */
typedef struct cpu_xq8 {
    const int8_t *q;
    const float *d, *sum, *err;
    int run;
} cpu_xq8;
/* qtile_i8: like qtile over int8 activations, integer dot products per 32
 * (f32 accumulate), over any number of rows (a block: the kernel orders
 * the tiles and their prefetches); bits 4 and 8 only. qi8_run: the `run` the table's
 * qtile_i8 wants for a weight of that width and group size. */
typedef void (*qtile_i8_fn)(const cpu_xq8 *x, int m0, int mr, const em_weight *w, int n0, int nr, float *y,
                            size_t ldy);
typedef int (*qi8_run_fn)(int bits, int group);
/* qgemm_i8: FAST products of many rows (prefill) with 4- and 8-bit weights:
 * M rows of x rounded to int8 in the natural order (cpu_xq8 run 0) against
 * weight rows [n0, n0 + nr), written to y[m * ldy + n - n0]; scratch holds
 * qgemm_i8_scratch_bytes(K, G, nr) bytes (the rows repacked). */
typedef void (*qgemm_i8_fn)(const cpu_xq8 *x, int M, const em_weight *w, int n0, int nr, float *y, size_t ldy,
                            void *scratch);
/* Panels of 16 rows: the codes as bytes, the scales and biases as f32, and
 * one panel's rows unpacked. */
static inline size_t qgemm_i8_scratch_bytes(int K, int G, int rows) {
    size_t panels = ((size_t)rows + 15) / 16;
    return panels * 16 * (size_t)K + 2 * panels * 16 * (size_t)(K / G) * sizeof(float) + 16 * (size_t)K + 64;
}
/* One row x[0..K) rounded into the cpu_xq8 layout of `run`: q[0..K),
 * d[0..K/32), and per group of G sum[0..K/G) and err[0..K/G). Each value is
 * lrintf(x * 127 / amax) with amax its block's largest magnitude, d = amax /
 * 127, whichever kernel computes it. */
typedef void (*qi8_quantize_fn)(const float *x, int K, int G, int run, int8_t *q, float *d, float *sum, float *err);

typedef struct cpu_kernels {
    const char *isa;
    tile_fn tile_f32_bf16; /* f32 x, bf16 w */
    tile_fn tile_f32_f16;  /* f32 x, f16 w */
    tile_fn tile_f32_f32;  /* f32 x, f32 w */
    tile_fn tile_bf16_bf16; /* bf16 x, bf16 w (FAST math); NULL if unsupported */
    qtile_fn qtile;         /* NULL: small batches dequantize rows too */
    qdequant_fn qdequant;
    qtile_i8_fn qtile_i8;   /* NULL: FAST few-row products stay in f32 */
    qi8_run_fn qi8_run;     /* set with qtile_i8 */
    qi8_quantize_fn qi8_quantize; /* NULL: cpu_qi8_quantize_ref */
    qgemm_i8_fn qgemm_i8;   /* NULL: FAST many-row products dequantize to bf16 */
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n); /* y += a * x */
    /* Attention over rows at a fixed stride (one KV block's keys or values),
     * head_dim a multiple of 8; NULL: dot / axpy per row. dots: out[i] =
     * q · k[i * stride], each dot's arithmetic the same whatever n and i.
     * axpy_rows: o += sum over i in order of w[i] * v[i * stride], o held in
     * registers across the rows. */
    void (*dots)(const float *q, const float *k, size_t stride, int n, int hd, float *out);
    void (*axpy_rows)(float *o, const float *w, const float *v, size_t stride, int n, int hd);
    void (*silu_mul)(float *out, const float *gate, const float *up, int n);
    /* out[i] = f32_to_bf16(x[i]) for i < n, the same bits (FAST rounding of
     * activations and of dequantized weights) */
    void (*to_bf16)(uint16_t *out, const float *x, size_t n);
} cpu_kernels;

/* Portable vector helpers shared by kernel tables that lack their own. */
float cpu_dot_ref(const float *a, const float *b, int n);
void cpu_axpy_ref(float *y, float a, const float *x, int n);
void cpu_silu_mul_ref(float *out, const float *gate, const float *up, int n);
void cpu_to_bf16_ref(uint16_t *out, const float *x, size_t n);
void cpu_to_bf16_avx2(uint16_t *out, const float *x, size_t n);

/* Portable quantized kernels (kernels_ref.c). */
void cpu_qtile_ref(const float *x, size_t ldx, int mr, const em_weight *w, int n0, int nr, float *y, size_t ldy);
void cpu_qdequant_ref(const em_weight *w, int64_t r, float *out);
void cpu_qi8_quantize_ref(const float *x, int K, int G, int run, int8_t *q, float *d, float *sum, float *err);
/* AVX2 quantized kernels (quant_avx2.c, x86-64 only). */
void cpu_qtile_avx2(const float *x, size_t ldx, int mr, const em_weight *w, int n0, int nr, float *y, size_t ldy);
void cpu_qdequant_avx2(const em_weight *w, int64_t r, float *out);
void cpu_qtile_i8_avx2(const cpu_xq8 *x, int m0, int mr, const em_weight *w, int n0, int nr, float *y, size_t ldy);
int cpu_qi8_run_avx2(int bits, int group);
/* The AVX2 attention helpers (kernels_avx2.c), which the AVX-512 tables share. */
void cpu_dots_avx2(const float *q, const float *k, size_t stride, int n, int hd, float *out);
void cpu_axpy_rows_avx2(float *o, const float *w, const float *v, size_t stride, int n, int hd);
/* AVX-512 (F, BW, VL) quantized kernels (quant_avx512.c, x86-64 only). */
void cpu_qtile_avx512(const float *x, size_t ldx, int mr, const em_weight *w, int n0, int nr, float *y, size_t ldy);
void cpu_qdequant_avx512(const em_weight *w, int64_t r, float *out);
/* AVX-512 VNNI int8 kernel (quant_avx512.c, x86-64 only). */
void cpu_qtile_i8_vnni(const cpu_xq8 *x, int m0, int mr, const em_weight *w, int n0, int nr, float *y, size_t ldy);
int cpu_qi8_run_vnni(int bits, int group);
void cpu_qgemm_i8_vnni(const cpu_xq8 *x, int M, const em_weight *w, int n0, int nr, float *y, size_t ldy,
                       void *scratch);
void cpu_qi8_quantize_avx512(const float *x, int K, int G, int run, int8_t *q, float *d, float *sum, float *err);

/* AMX (gemm_amx.c). cpu_amx_request: true when the CPU has bf16 tiles and
 * the kernel granted this process their state (once per process).
 * cpu_amx_pack: activation rows x[M][K] (K a multiple of 32) rounded to bf16
 * into xp in the operand order cpu_amx_gemm reads, 16-row groups g0..g1-1
 * (rows past M are zeros; ceil(M/32)*2 groups of 16*K values in all).
 * cpu_amx_gemm: y[m*ldy + n] = sum_k x[m][k] * w[n*ldw + k] for m < M,
 * n < nr, w bf16; tail is scratch of 32*K bf16 for the last rows of w. */
bool cpu_amx_request(void);
void cpu_amx_pack(uint16_t *xp, const float *x, int M, int K, int g0, int g1);
void cpu_amx_gemm(const uint16_t *xp, int M, const uint16_t *w, size_t ldw, int nr, int K, float *y, size_t ldy,
                  uint16_t *tail);

const cpu_kernels *cpu_kernels_ref(void);
const cpu_kernels *cpu_kernels_avx2(void);   /* NULL when not compiled in */
const cpu_kernels *cpu_kernels_avx512(void); /* NULL when not compiled in */
/* The AVX-512 table with the VNNI int8 kernel (needs avx512vnni too). */
const cpu_kernels *cpu_kernels_avx512_vnni(void);
/* Best table for this machine (EMBER_CPU_ISA may narrow it, read at start). */
const cpu_kernels *cpu_kernels_best(void);

typedef struct cpu_backend {
    em_pool *pool;
    const cpu_kernels *k;
    /* per-thread scratch for attention scores / converted activations */
    float **scratch;
    size_t *scratch_len;
    uint16_t *xbf16; /* activations converted to bf16 for FAST matmuls */
    size_t xbf16_len;
    bool amx;        /* FAST products of 16+ rows on AMX tiles (cpu_features.amx) */
    uint16_t *xamx;  /* activations packed for them (cpu_amx_pack) */
    size_t xamx_len;
    void *xq8;       /* activations rounded to int8 (cpu_xq8) for FAST few-row products */
    size_t xq8_bytes;
} cpu_backend;

/* x[0..n) rounded to bf16 (in parallel) into the backend's buffer, for
 * FAST matmuls; NULL when it cannot be allocated. */
const uint16_t *cpu_activations_bf16(cpu_backend *cb, const float *x, size_t n);
/* The M rows of x (K wide) packed for cpu_amx_gemm (in parallel) into the
 * backend's buffer; NULL when it cannot be allocated. */
const uint16_t *cpu_activations_amx(cpu_backend *cb, const float *x, int M, int K);
/* Ensures thread t's scratch holds n floats; returns it. */
float *cpu_scratch(cpu_backend *cb, int t, size_t n);

/* Quantized weights (w->bits > 0): quant_matmul.c. */
void cpu_qmatmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math);
/* FAST few-row products of n 4-/8-bit weights of one width and group (x
 * rounded to int8 once, the blocks of all in one pool job); false: not
 * such a case, nothing done. */
bool cpu_qmatmul_group(em_backend *be, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                       const float *const *biases, em_math math);
/* The same for an MLP's gate and up, storing silu(gate) * up; false:
 * nothing done. */
bool cpu_qmatmul_swiglu(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                        const float *bg, const float *bu, em_math math);
void cpu_matmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math);
void cpu_matmul_group(em_backend *be, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                      const float *const *biases, em_math math);
void cpu_attention(em_backend *be, float *out, const float *q, const em_kv_view *kv, const int32_t *pos, int n,
                   int n_heads, int n_kv, int head_dim, float scale, int window);
/* cpu_gdn.c */
void cpu_sigmoid_mul(em_backend *be, float *y, const float *gate, int rows, int n, int ld_gate);
void cpu_conv1d_silu(em_backend *be, float *y, const float *x, int n, int C, int ld, const float *w, int K,
                     float *state);
void cpu_gdn_gates(em_backend *be, float *g, float *beta, const float *a, const float *b, int ld_in,
                   const float *A_log, const float *dt_bias, int n, int Hv);
void cpu_gated_delta_rule(em_backend *be, float *out, const float *qkv, int ld, const float *g, const float *beta,
                          float *state, int n, int Hk, int Hv, int dk, int dv, int chunk);
void cpu_rmsnorm_gated(em_backend *be, float *y, const float *x, const float *z, const float *gain, int rows, int n,
                       float eps);

#endif
