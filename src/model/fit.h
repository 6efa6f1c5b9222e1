/* fit.h — the memory contract of running a model on the CPU: how many bytes
 * a process needs for a context and a number of sequences, from the headers
 * alone.
 *
 *   weights    the safetensors files, mmapped; every page is touched by a
 *              forward pass, so they count whole in resident memory
 *   vectors    1-D tensors (norms, biases) copied to f32 at load
 *   kv         per token: layers with attention x 2 (K, V) x kv heads x
 *              head_dim x 4 bytes (f32, kv_cache.c), in blocks of 32
 *              positions, for each sequence
 *   state      recurrent layers (Qwen3.5 Gated DeltaNet): per layer and
 *              sequence, the convolution tail (kernel - 1) x (2 key dims +
 *              value dim) and the delta state v_heads x k_dim x v_dim, f32
 *   transient  the forward workspace for the largest batch of tokens (a
 *              prefill chunk of 512): the dense graph's nine activation
 *              buffers, token positions, per-thread attention scores, logits
 *   runtime    the process itself (code, libraries, allocator) and the
 *              tokenizer (estimated from tokenizer.json's size)
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
    uint64_t budget; /* bytes available; 0: MemAvailable */
} fit_request;

typedef struct fit_result {
    uint64_t weights, vectors, kv, state, transient, runtime, total;
    uint64_t kv_per_token, state_per_seq;
    uint64_t capacity; /* the budget compared against */
    int kv_layers, state_layers;
    int model_max_ctx;
    int max_ctx;       /* largest context that fits (0: none) */
    bool fits;
} fit_result;

/* Predicts the peak resident memory of running the model in dir. */
em_status fit_predict(const char *dir, const fit_request *r, fit_result *out);

#endif
