/* fit.h — the memory contract of running a model: how many bytes a process
 * needs for a context and a number of sequences, from the headers alone, in
 * resident memory on the CPU (below) or in device memory on a GPU
 * (fit_cuda.c, the CUDA backend's allocations; see there).
 *
 * On the CPU:
 *   weights    the safetensors files, mmapped; every page is touched by a
 *              forward pass, so they count whole in resident memory
 *   vectors    1-D tensors (norms, biases) copied to f32 at load
 *   kv         per token: layers with attention x 2 (K, V) x kv heads x
 *              head_dim x 4 bytes (f32, kv_cache.c), in blocks of 32
 *              positions, for each sequence; the peak counts the positions
 *              written, since the OS commits the pool's pages as they are
 *   state      recurrent layers (Qwen3.5 Gated DeltaNet): per layer and
 *              sequence, the convolution tail (kernel - 1) x (2 key dims +
 *              value dim) and the delta state v_heads x k_dim x v_dim, f32
 *   transient  the forward workspace for the largest batch of tokens (a
 *              prefill chunk of 512): the dense graph's nine activation
 *              buffers, token positions, per-thread attention scores, logits
 *   runtime    the process itself (code, libraries, allocator) and the
 *              tokenizer (estimated from tokenizer.json's size)
 * Weights copied onto huge pages (EMBER_CPU_WEIGHTS, weights_host.c) count
 * the same (an untied embedding stays in place), the transient adds the
 * arena's last huge page, and the peak is at least that of loading: the
 * weights with one slice of a tensor resident twice.
 */
#ifndef EMBER_MODEL_FIT_H
#define EMBER_MODEL_FIT_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

#define FIT_PREFILL_CHUNK 512
#define FIT_KV_BLOCK 32

typedef struct fit_request {
    int ctx;         /* positions per sequence */
    int batch;       /* sequences at once (>= 1) */
    int threads;     /* compute threads (0: one per core) */
    uint64_t budget; /* bytes available; 0: MemAvailable (cpu), the GPU's (cuda) */
    bool cuda;       /* predict the CUDA backend's device memory */
    bool fast;       /* cuda: FAST prefill arithmetic (bf16 GEMMs), as ember serve runs */
    uint64_t device_free; /* cuda: free memory the GPU reports to this process
                             (its CUDA context already made); 0: no GPU here */
    const char *cpu_weights; /* cpu: EMBER_CPU_WEIGHTS (NULL: auto) */
} fit_request;

typedef struct fit_result {
    /* cpu: weights (mmapped), vectors, kv, state, transient (workspace),
     * runtime (the process). cuda: weights and vectors in device memory,
     * kv, transient (activations and logits), scratch (matmul), backend
     * (staging arena and cuBLAS workspace), code (kernels loaded on first
     * use), context (the CUDA context, outside cudaMalloc). */
    uint64_t weights, vectors, kv, state, transient, runtime, total;
    uint64_t scratch, backend, code, context;
    uint64_t kv_per_token, state_per_seq;
    uint64_t capacity; /* the budget compared against */
    bool capacity_known; /* false: a GPU prediction without a GPU or a budget */
    int kv_layers, state_layers;
    int model_max_ctx;
    int max_ctx;       /* largest context that fits (0: none; -1: capacity unknown) */
    bool fits;
} fit_result;

/* Predicts the peak memory of running the model in dir: resident memory on
 * the CPU, device memory with r->cuda. A model the CUDA backend cannot run
 * (quantized weights, recurrent layers) is EM_ERR_UNSUPPORTED saying why. */
em_status fit_predict(const char *dir, const fit_request *r, fit_result *out);

#endif
