/* backend.h — the operation table every compute backend implements.
 *
 * Model graphs are written once against these operations and run on any
 * backend. Buffers passed to operations live in the backend's memory space
 * (host memory for the CPU backend, device memory for CUDA) and come from
 * alloc/reserve; host data enters through upload and leaves through
 * download. Small per-call arrays — token ids, positions, inv_freq and the
 * block tables of an em_kv_view — are host arrays: a device backend copies
 * what it needs. Activations are f32 rows, row-major. Weights are described
 * by em_weight and keep the layout they were loaded in (f32/f16/bf16, MLX
 * affine packed; a host-memory backend's copy may hold a quantized weight's
 * rows as records: em_weight.row_stride).
 *
 * Operations are queued in order; only download waits for them, so a
 * device backend runs a whole forward step without host synchronisation. */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/hadamard.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A linear layer's weight, logically [rows = out features, cols = in]. */
typedef struct em_weight {
    em_dtype dtype;       /* F32, F16, BF16; U32 when quantized (affine) */
    int64_t rows, cols;
    const void *data;
    /* MLX affine quantization (bits > 0): data packs cols*bits/32 u32 per
     * row; scales/biases hold one value per group of group_size inputs. */
    int bits, group_size;
    const void *scales, *biases;
    em_dtype scale_dtype;
    /* 0: the codes, scales and biases are MLX's three arrays, as in the
     * checkpoint. Else row r of all three is one record of row_stride bytes
     * (its scales, its biases, its codes: one stream for a row's reader)
     * that starts at scales + r * row_stride; biases and data point into
     * the first record. Only a host-memory backend's copy has records
     * (weights_host.c); read rows through em_qrow_*. */
    size_t row_stride;
    const char *name;     /* for messages */
} em_weight;

/* Bytes from row r to row r + 1 of a quantized weight's codes. */
static inline size_t em_qrow_step(const em_weight *w) {
    return w->row_stride ? w->row_stride : (size_t)(w->cols * w->bits / 8);
}
/* Row r of a quantized weight: its packed codes, and its cols / group_size
 * scales and biases (scale_dtype). */
static inline const uint8_t *em_qrow_codes(const em_weight *w, int64_t r) {
    return (const uint8_t *)w->data + (size_t)r * em_qrow_step(w);
}
static inline size_t em_qrow_scalar_step(const em_weight *w) {
    return w->row_stride ? w->row_stride : (size_t)(w->cols / w->group_size) * (w->scale_dtype == EM_F32 ? 4u : 2u);
}
static inline const void *em_qrow_scales(const em_weight *w, int64_t r) {
    return (const uint8_t *)w->scales + (size_t)r * em_qrow_scalar_step(w);
}
static inline const void *em_qrow_biases(const em_weight *w, int64_t r) {
    return (const uint8_t *)w->biases + (size_t)r * em_qrow_scalar_step(w);
}

/* Most products one matmul_group call takes. */
#define EM_MATMUL_GROUP_MAX 4

/* Arithmetic regimes a matmul may use. EXACT keeps f32 activations; FAST may
 * round activations to bf16 for compute-bound GEMMs (prefill). */
typedef enum em_math { EM_MATH_EXACT = 0, EM_MATH_FAST } em_math;

/* One sequence's view of a layer of the paged KV cache. The tables are host
 * arrays; the blocks they point to are backend memory. */
typedef struct em_kv_view {
    float *const *k_blocks; /* per block: [block_size][n_kv][head_dim] */
    float *const *v_blocks;
    int block_size;
    int n_blocks;
} em_kv_view;

/* Several sequences' views of one layer, for operations over a batch:
 * span s owns the next rows[s] rows (its tokens, in order). */
typedef struct em_kv_spans {
    const em_kv_view *views;
    const int *rows;
    int n_spans;
    /* FAST: every row may round its queries, keys, values and weights (a
     * backend may then use bf16 tensor cores); EXACT (the zero value) keeps
     * f32 arithmetic. */
    em_math math;
    /* While a step is recorded or replayed: block tables padded to at least
     * this many entries (0: the backend's own minimum), so one recording
     * serves every context length up to it. */
    int min_table;
} em_kv_spans;

/* What graph_begin decided for a step (see em_backend_ops). */
typedef enum em_graph_mode { EM_GRAPH_NONE = 0, EM_GRAPH_RECORD, EM_GRAPH_REPLAY } em_graph_mode;

/* One row's draw for sample_rows: tempered sampling as engine/sampler.c
 * defines it (probabilities exp((x - max) / temperature), then top-k,
 * top-p and min-p in that order, the walk in the sampler's order), with u
 * the uniform in [0, 1) the row's sequence drew from its own generator.
 * temperature <= 0 or top_k == 1: the row's argmax (tensor/argmax.h). */
#define EM_SAMPLE_MAX_N (1 << 20) /* the longest row sample_rows takes */
typedef struct em_sample_params {
    double u;
    float temperature;
    float top_p;   /* 1 (or <= 0): off */
    float min_p;   /* 0: off */
    int32_t top_k; /* 0: off */
} em_sample_params;

typedef struct em_backend em_backend;

typedef struct em_backend_ops {
    const char *name;
    /* Backend memory is ordinary host memory: callers may read and write it
     * directly, and weights are used in place without an upload. */
    bool host_memory;
    void (*destroy)(em_backend *be);
    void *(*alloc)(em_backend *be, size_t bytes); /* zeroed, 64-byte aligned */
    void (*free)(em_backend *be, void *p);
    /* A large pool (the KV cache) of `bytes`, contents undefined; the CPU
     * reserves address space committed as it is touched. NULL on failure. */
    void *(*reserve)(em_backend *be, size_t bytes);
    void (*release)(em_backend *be, void *p, size_t bytes);
    /* Host → backend copy; src may be reused as soon as it returns. */
    em_status (*upload)(em_backend *be, void *dst, const void *src, size_t bytes);
    /* Backend → host copy after all queued work; reports any failure of the
     * queued operations (device errors surface here). */
    em_status (*download)(em_backend *be, void *dst, const void *src, size_t bytes);
    /* Copy within backend memory (regions may overlap). */
    void (*copy)(em_backend *be, void *dst, const void *src, size_t bytes);
    /* n copies of `bytes` each within backend memory, dst[i] <- src[i] (no
     * region overlaps another); queued in order with other work. Optional
     * (NULL: callers copy one by one): on a GPU it is one launch instead
     * of n (the KV cache's copy on write touches two tensors per layer). */
    void (*copy_many)(em_backend *be, int n, void *const *dst, const void *const *src, size_t bytes);
    /* Host memory the backend's transfers are fastest from and to (pinned
     * for a GPU); optional (NULL: callers use malloc). */
    void *(*host_alloc)(em_backend *be, size_t bytes);
    void (*host_free)(em_backend *be, void *p);
    /* Strided copy within backend memory: rows of n floats from src (rows
     * ld_src floats apart) to dst (ld_dst apart); the regions do not overlap. */
    void (*copy_rows)(em_backend *be, float *dst, int ld_dst, const float *src, int ld_src, int rows, int n);
    /* ids[r] = the greedy choice over the n floats of row r of x (rows ld
     * apart; tensor/argmax.h: lowest index of the largest value, NaN never
     * wins) and, when vals is not NULL, vals[r] = that value (NaN when every
     * value is NaN); ids and vals are backend memory. Optional (NULL:
     * callers download the rows and scan them). */
    void (*argmax_rows)(em_backend *be, int32_t *ids, float *vals, const float *x, int rows, int n, int ld);
    /* ids[r] (backend memory) = the token params[r] (a host array) draws
     * from the n floats of row r of x (rows ld apart). The rows are
     * overwritten (they hold the row's probabilities afterwards): callers
     * that want the logits themselves download them first. Optional (NULL:
     * callers download the rows and sample on the host). */
    void (*sample_rows)(em_backend *be, int32_t *ids, float *x, int rows, int n, int ld,
                        const em_sample_params *params);
    /* Bytes of backend memory still free, or 0 when not bounded apart from
     * the host's (CPU). Optional (NULL: 0). */
    size_t (*mem_free)(em_backend *be);
    /* Measured read bandwidth of backend memory in bytes/s, for roofline
     * figures; optional (NULL: the caller measures host memory). */
    double (*bandwidth)(em_backend *be);
    /* y[M, w->rows] = x[M, w->cols] · wᵀ (+ bias[w->rows] when not NULL). */
    void (*matmul)(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math);
    /* y[M, w->rows] += x · wᵀ: a product added into y (the residual stream)
     * by the product itself, where that saves the separate add's passes
     * over y. The sum is y + (x · wᵀ), each element rounded once, as matmul
     * then add give it when the product's own sums come out the same. A
     * backend that does so for some shapes returns true when it queued
     * them; false means nothing was queued and the caller runs matmul and
     * add. Optional (NULL: always those). */
    bool (*matmul_add)(em_backend *be, float *y, const float *x, int M, const em_weight *w, em_math math);
    /* n (1..EM_MATMUL_GROUP_MAX) products of one x: ys[i] = x · ws[i]ᵀ (+ biases[i]), all ws[i] with
     * the same cols. Each ys[i] gets exactly the bits matmul would give it:
     * a backend may fuse the launches (the q/k/v or gate/up projections of a
     * decode step as one kernel that reads x once), never the arithmetic.
     * Optional (NULL: matmul n times). */
    void (*matmul_group)(em_backend *be, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                         const float *const *biases, em_math math);
    /* out = silu(x · wgᵀ + bg) * (x · wuᵀ + bu), rows of wg->rows (the
     * gate and up projections of an MLP and its SwiGLU): bitwise
     * matmul_group of the two into gate and up, then swiglu. A backend
     * that fuses some shapes returns true when it queued them; false means
     * nothing was queued and the caller makes those calls. Optional
     * (NULL: always the calls). */
    bool (*matmul_swiglu)(em_backend *be, float *out, const float *x, int M, const em_weight *wg,
                          const em_weight *wu, const float *bg, const float *bu, em_math math);
    /* A whole MLP: act = silu(x · wgᵀ + bg) * (x · wuᵀ + bu) ([M, wg->rows]),
     * then y = act · wdᵀ + bd, with the bits of matmul_swiglu (or
     * matmul_group and swiglu) then matmul; y may be x. With `add`, y +=
     * act · wdᵀ + bd instead, as matmul_add adds (y is then not x). act is the
     * operation's scratch ([M, wg->rows] floats): what it holds afterwards
     * is unspecified. One arithmetic difference is allowed, and documented
     * by the backend that makes it: FAST batches of many rows (prefill) may
     * round the gate and up products to bf16 before the SwiGLU, as bf16
     * inference does (the CUDA backend above CUDA_SKINNY_MAX_M rows). A
     * backend that runs some shapes as one operation returns true when it
     * queued them; false means nothing was queued and the caller makes
     * those calls. Optional (NULL: always the calls). */
    bool (*matmul_mlp)(em_backend *be, float *y, float *act, const float *x, int M, const em_weight *wg,
                       const em_weight *wu, const em_weight *wd, const float *bg, const float *bu, const float *bd,
                       em_math math, bool add);
    /* matmul_group and matmul_swiglu of the rows rmsnorm(x) · (gain +
     * gain_offset) (rmsnorm's arguments), with x the residual stream: the
     * normed rows are never written. Their bits are the backend's own (the
     * CUDA GEMVs scale each product's sum by the row's norm: within f32
     * roundings of rmsnorm then the products over float weights, within the
     * int8 rounding of the activations over 4- and 8-bit ones). A backend
     * that does so for some shapes (decode rows) returns true when it queued
     * them; false means nothing was queued and the caller runs rmsnorm and
     * the products. Whether it takes M rows depends only on M's regime for
     * the weights and math (CUDA: the rows its matmul gives to a GEMV),
     * never on the batch around them, and an EXACT row's bits are the same
     * for every M it takes: so a sequence's numbers still do not depend on
     * its batch (batch_rows.h runs a batch's runs one by one). Optional
     * (NULL: always rmsnorm and the products). */
    bool (*norm_matmul_group)(em_backend *be, int n, float *const *ys, const float *x, const float *gain, float eps,
                              float gain_offset, int M, const em_weight *const *ws, const float *const *biases,
                              em_math math);
    bool (*norm_matmul_swiglu)(em_backend *be, float *out, const float *x, const float *gain, float eps,
                               float gain_offset, int M, const em_weight *wg, const em_weight *wu, const float *bg,
                               const float *bu, em_math math);
    /* y = x / rms(x) * (gain + gain_offset) over rows of n. y may equal x. */
    void (*rmsnorm)(em_backend *be, float *y, const float *x, const float *gain, int rows, int n, float eps,
                    float gain_offset);
    /* x += h, then y = x / rms(x) * (gain + gain_offset), over rows of n;
     * y may equal h. Optional (NULL: add, then rmsnorm). */
    void (*add_rmsnorm)(em_backend *be, float *x, const float *h, float *y, const float *gain, int rows, int n,
                        float eps, float gain_offset);
    /* x[r] <- x[r]·Q for rows of h->n, in place, by hadamard_right's
     * arithmetic (the same bits): the online rotation of a block's normed
     * input (h is the plain transform, hadamard_make_plain). Optional (NULL:
     * models that need it refuse to load). */
    void (*hadamard)(em_backend *be, float *x, int rows, const hadamard *h);
    /* Rotates the first rot_dim dims of each head in place (rotate-half
     * convention), for rows of n_heads*head_dim; cos/sin from inv_freq at
     * pos[row], multiplied by attn_factor. */
    void (*rope)(em_backend *be, float *x, int rows, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
                 const float *inv_freq, float attn_factor);
    /* rope over the queries (n_heads per row) and the keys (n_kv_heads) of
     * the same rows, bitwise what two rope calls give: one launch where the
     * backend fuses them. Optional (NULL: rope twice). */
    void (*rope_qk)(em_backend *be, float *q, float *k, int rows, int n_heads, int n_kv_heads, int head_dim,
                    int rot_dim, const int32_t *pos, const float *inv_freq, float attn_factor);
    /* out[i] = silu(gate[i]) * up[i] for rows of n, gate/up strided by ld. */
    void (*swiglu)(em_backend *be, float *out, const float *gate, const float *up, int rows, int n, int ld_in);
    void (*add)(em_backend *be, float *y, const float *x, size_t n); /* y += x */
    /* out[i, :] = row ids[i] of the embedding table (any weight dtype). */
    void (*embed)(em_backend *be, float *out, const em_weight *table, const int32_t *ids, int n);
    /* Writes k/v rows [n, n_kv*head_dim] at positions pos[] into the view. */
    void (*kv_write)(em_backend *be, const em_kv_view *kv, const float *k, const float *v, const int32_t *pos, int n,
                     int n_kv, int head_dim);
    /* Causal GQA attention for n query rows of one sequence at positions
     * pos[], against keys 0..pos (or the last `window` when window > 0). */
    void (*attention)(em_backend *be, float *out, const float *q, const em_kv_view *kv, const int32_t *pos, int n,
                      int n_heads, int n_kv, int head_dim, float scale, int window);

    /* kv_write and attention for every span of a batch in one call
     * (optional: NULL means callers loop over the spans). */
    void (*kv_write_spans)(em_backend *be, const em_kv_spans *s, const float *k, const float *v, const int32_t *pos,
                           int n_kv, int head_dim);
    void (*attention_spans)(em_backend *be, float *out, const float *q, const em_kv_spans *s, const int32_t *pos,
                            int n_heads, int n_kv, int head_dim, float scale, int window);
    /* rope_qk over q and k, then kv_write_spans of the rotated keys and v:
     * bitwise those two calls (q and k are left rotated), in one launch
     * where the backend fuses them. Optional (NULL: the two calls). */
    void (*rope_kv_write_spans)(em_backend *be, const em_kv_spans *s, float *q, float *k, const float *v,
                                const int32_t *pos, int n_heads, int n_kv, int head_dim, int rot_dim,
                                const float *inv_freq, float attn_factor);
    /* rope_kv_write_spans, then attention_spans over the same spans, in
     * one launch where the backend fuses them (decode steps): the cache
     * and out are bitwise what the two calls give; q and k are scratch
     * afterwards. False: nothing was queued, and the caller makes the two
     * calls. Optional (NULL: the two calls). */
    bool (*rope_attention_spans)(em_backend *be, float *out, const em_kv_spans *s, float *q, float *k,
                                 const float *v, const int32_t *pos, int n_heads, int n_kv, int head_dim,
                                 int rot_dim, const float *inv_freq, float attn_factor, float scale, int window);

    /* ---- step graphs (optional; NULL: never) ----
     * A device backend may record the operations of a step once and replay
     * them, so a decode step costs one launch. graph_begin(key) answers
     * RECORD (operations run and are recorded), REPLAY (a recording for key
     * exists: the caller issues the same operations on the same buffers
     * and shapes, and the backend only stages their host arrays) or NONE.
     * graph_end runs the step and sets *ran; *ran is false when the
     * replayed operations did not match the recording or the recording
     * failed — nothing ran then, and the caller issues the step again
     * without a graph. graph_reset forgets every recording. */
    em_graph_mode (*graph_begin)(em_backend *be, uint64_t key);
    em_status (*graph_end)(em_backend *be, bool *ran);
    void (*graph_reset)(em_backend *be);

    /* ---- hybrid (Gated DeltaNet) families ---- */

    /* y[i] *= sigmoid(gate[i]) for rows of n; gate rows strided by ld_gate. */
    void (*sigmoid_mul)(em_backend *be, float *y, const float *gate, int rows, int n, int ld_gate);
    /* Depthwise causal conv1d over channels + SiLU, continuing a sequence:
     * y[t][c] = silu(sum_j w[c][j] * x'[t + j][c]) where x' is the K-1 rows of
     * `state` (oldest first) followed by x. Rows of x and y are ld floats
     * apart (channels 0..C-1 used); y may equal x. On return state holds the
     * last K-1 input rows: the fused "conv + SiLU + new state tail". */
    void (*conv1d_silu)(em_backend *be, float *y, const float *x, int n, int C, int ld, const float *w, int K,
                        float *state);
    /* Decay and write strength of the gated delta rule, per token and value
     * head: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b); a/b
     * rows strided by ld_in, g/beta rows of Hv. */
    void (*gdn_gates)(em_backend *be, float *g, float *beta, const float *a, const float *b, int ld_in,
                      const float *A_log, const float *dt_bias, int n, int Hv);
    /* The gated delta rule over n tokens of one sequence. qkv rows (stride
     * ld) hold q[Hk*dk], k[Hk*dk], v[Hv*dv]; q and k are L2-normalised here
     * (and q scaled by 1/sqrt(dk)); value head h reads key head h/(Hv/Hk).
     * state [Hv][dk][dv] is read and replaced by the state after the last
     * token; out rows are [Hv*dv]. chunk 0: token-by-token recurrence;
     * chunk > 0: the chunked (UT-transform) form in blocks of `chunk`
     * tokens. Both compute the same function. */
    void (*gated_delta_rule)(em_backend *be, float *out, const float *qkv, int ld, const float *g, const float *beta,
                             float *state, int n, int Hk, int Hv, int dk, int dv, int chunk);
    /* Decode rows of `rows` sequences, one token each: row r of qkv (rows
     * of C) through conv1d_silu with conv_states[r] (in place), then
     * gated_delta_rule with ssm_states[r] (g, beta rows of Hv) into row r
     * of core (rows of Hv*dv), in a launch of each for all the rows; the
     * bits of the per-row calls. The state tables are host arrays (staged
     * like block tables, so a recorded step serves any sequences). False:
     * nothing was queued, and the caller makes the per-row calls.
     * Optional (NULL: the per-row calls). */
    bool (*gdn_mix_rows)(em_backend *be, float *core, float *qkv, int C, const float *conv_w, int K, const float *g,
                         const float *beta, float *const *conv_states, float *const *ssm_states, int rows, int Hk,
                         int Hv, int dk, int dv);
    /* y = x / rms(x) * gain * silu(z) over rows of n (z rows strided like x). */
    void (*rmsnorm_gated)(em_backend *be, float *y, const float *x, const float *z, const float *gain, int rows, int n,
                          float eps);
} em_backend_ops;

struct em_backend {
    const em_backend_ops *ops;
    void *impl;
    int n_threads;
    char desc[96]; /* "cpu (avx512)", "cuda:0 (NVIDIA H200)" */
};

/* Creates the CPU backend with n_threads (0: one per core). */
em_status cpu_backend_create(int n_threads, em_backend **out);
void cpu_backend_free(em_backend *be);

/* Creates the backend a device string names: "cpu", "cuda" (device 0) or
 * "cuda:N". A CUDA device in a build without CUDA, or on a machine without
 * that GPU, is an error saying so. The caller frees with em_backend_free. */
em_status em_backend_open(const char *device, int n_threads, em_backend **out);
void em_backend_free(em_backend *be);
/* Parses a device string: *cuda false for "cpu"; *index is the GPU number. */
em_status em_device_parse(const char *device, bool *cuda, int *index);

/* Free and total memory of the GPU a device string names ("cuda[:N]"),
 * creating this process's CUDA context there. EM_ERR_UNSUPPORTED for the
 * CPU, in a build without CUDA, or without a GPU. */
em_status em_device_memory(const char *device, size_t *free_bytes, size_t *total_bytes);

/* Bytes of weight data read by one matmul over w (for roofline figures). */
size_t em_weight_bytes(const em_weight *w);

#endif
