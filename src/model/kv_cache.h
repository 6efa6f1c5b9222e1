/* kv_cache.h — the paged KV cache shared by all sequences of a model.
 *
 * Keys and values live in fixed-size blocks (block_size positions x n_kv
 * heads x head_dim, f32). Each sequence owns a block table; blocks are taken
 * from a free list as the sequence grows and returned when it is freed, so
 * batching and prefix reuse share one mechanism. Storage is reserved as
 * virtual memory up front and committed by the OS only as blocks are used.
 * Allocation is thread-safe; a sequence is used by one thread at a time. */
#ifndef EMBER_MODEL_KV_CACHE_H
#define EMBER_MODEL_KV_CACHE_H

#include "backend/backend.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct kv_seq {
    bool in_use;
    int len;        /* positions written */
    int *blocks;    /* block ids */
    int n_blocks, cap_blocks;
    float **k_ptrs; /* per layer x block: pointers handed to the backend */
    float **v_ptrs;
} kv_seq;

typedef struct kv_cache {
    int n_layers, n_kv, head_dim, block_size;
    int max_blocks, max_seqs, max_ctx;
    size_t block_floats; /* block_size * n_kv * head_dim */
    float **k_layer;     /* per layer: max_blocks * block_floats */
    float **v_layer;
    size_t layer_bytes;
    int *free_list;
    int n_free;
    kv_seq *seqs;
    pthread_mutex_t mu;
} kv_cache;

/* Reserves room for max_seqs sequences of up to max_ctx positions, or fewer
 * blocks when budget_bytes (> 0) is smaller: sequences then compete for
 * blocks and the scheduler preempts under pressure. */
em_status kv_cache_create(int n_layers, int n_kv, int head_dim, int max_ctx, int max_seqs, size_t budget_bytes,
                          kv_cache **out);
void kv_cache_free(kv_cache *c);

/* Claims a free sequence slot (empty). EM_ERR_LIMIT when none is free. */
em_status kv_seq_alloc(kv_cache *c, int *seq);
/* Returns a sequence's blocks to the pool and frees the slot. */
void kv_seq_release(kv_cache *c, int seq);
/* Ensures the sequence has blocks for positions [0, new_len). */
em_status kv_seq_reserve(kv_cache *c, int seq, int new_len);
/* Drops positions >= len (rollback after speculative verification). */
void kv_seq_truncate(kv_cache *c, int seq, int len);
/* The backend view of one layer of one sequence. */
em_kv_view kv_seq_view(const kv_cache *c, int seq, int layer);
/* Bytes of KV storage per position (all layers, K and V). */
size_t kv_bytes_per_token(int n_layers, int n_kv, int head_dim);

#endif
