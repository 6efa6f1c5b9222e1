/* kv_cache.h — the paged KV cache shared by all sequences of a model.
 *
 * Keys and values live in fixed-size blocks (block_size positions x n_kv
 * heads x head_dim, f32). Each sequence owns a block table; blocks are taken
 * from a free list as the sequence grows and returned when it is freed, so
 * batching and prefix reuse share one mechanism. Storage is the backend's
 * (ops->reserve): on the CPU virtual memory committed by the OS only as
 * blocks are used, on a GPU device memory; block tables hold pointers into
 * it that only the backend's operations dereference.
 * Allocation is thread-safe; a sequence is used by one thread at a time. */
#ifndef EMBER_MODEL_KV_CACHE_H
#define EMBER_MODEL_KV_CACHE_H

#include "backend/backend.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct kv_seq {
    bool in_use;
    int len;        /* positions written */
    int *blocks;    /* block ids */
    int n_blocks, cap_blocks;
    float **k_ptrs; /* per layer x block: pointers handed to the backend */
    float **v_ptrs;
} kv_seq;

typedef struct kv_cache {
    em_backend *be;      /* owns the storage (not owned by the cache) */
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
    /* prefix sharing (kv_prefix.c): per-block reference counts; full blocks
     * registered by content hash stay cached after their last user leaves,
     * on an LRU list, until their room is needed. */
    int *ref;
    uint64_t *bhash;
    int32_t *btokens;       /* block_size ids per registered block */
    unsigned char *cached;
    int *lru_prev, *lru_next, lru_head, lru_tail, n_lru;
    int *hbucket, *hnext;   /* hash table over registered blocks */
    uint64_t *bparent;      /* per registered block: the chain hash before it */
    int *bvalid;            /* per registered block: positions it holds (block_size, or fewer for a
                               finished sequence's last block, which only partial matches use) */
    int *pbucket, *pnext;   /* registered blocks by that hash (partial matches) */
    unsigned hmask;
    unsigned long long prefix_lookup_tokens, prefix_hit_tokens, prefix_evictions;
    /* Recurrent-state snapshots (hybrid families): a registered block may
     * carry the sequence state at its end (snap_bytes each, heap, owned by
     * the cache, immutable once set). A snapshot is only copied out when a
     * sequence attaches, never held, so it can be dropped any time: it has
     * an LRU list of its own and goes with its block's registration. */
    void **bsnap;
    int *snap_prev, *snap_next, snap_head, snap_tail;
    unsigned long long *lru_tick, *snap_tick, tick; /* recency across both lists */
    size_t snap_bytes, snap_total;
    int n_snaps;
    /* Budget of the prefix cache: unused cached blocks plus every snapshot
     * (0: no cap on unused blocks; snapshots then capped by snap_cap). */
    size_t cap_bytes, snap_cap;
} kv_cache;

/* Reserves room in be's memory for max_seqs sequences of up to max_ctx
 * positions, or fewer blocks when budget_bytes (> 0) is smaller: sequences
 * then compete for blocks and the scheduler preempts under pressure. be must
 * outlive the cache. */
em_status kv_cache_create(em_backend *be, int n_layers, int n_kv, int head_dim, int max_ctx, int max_seqs, size_t budget_bytes,
                          kv_cache **out);
void kv_cache_free(kv_cache *c);

/* Lowers the number of blocks the cache hands out to n (< max_blocks),
 * before any is used: the ranks of a multi-process group agree on the
 * smallest cache among them. EM_ERR_LIMIT when n cannot hold one full
 * context, EM_ERR_INTERNAL when blocks are already in use. */
em_status kv_cache_limit_blocks(kv_cache *c, int n);

/* Claims a free sequence slot (empty). EM_ERR_LIMIT when none is free. */
em_status kv_seq_alloc(kv_cache *c, int *seq);
/* Returns a sequence's blocks to the pool and frees the slot. */
void kv_seq_release(kv_cache *c, int seq);
/* Returns a sequence's blocks to the pool; the slot stays claimed, empty. */
void kv_seq_clear(kv_cache *c, int seq);
void kv_seq_clear_locked(kv_cache *c, int seq);
/* Ensures the sequence has blocks for positions [0, new_len). */
em_status kv_seq_reserve(kv_cache *c, int seq, int new_len);
/* Drops positions >= len (rollback after speculative verification). */
void kv_seq_truncate(kv_cache *c, int seq, int len);
/* The backend view of one layer of one sequence. */
em_kv_view kv_seq_view(const kv_cache *c, int seq, int layer);
/* ---- prefix sharing (kv_prefix.c) ---- */

/* Allocates the sharing tables; max_cached_bytes caps the memory of cached
 * blocks nobody uses (0: no cap beyond the cache itself). */
em_status kv_prefix_init(kv_cache *c, size_t max_cached_bytes);
void kv_prefix_free(kv_cache *c);
/* Chained content hash of one block given the previous block's hash. */
uint64_t kv_block_hash(uint64_t prev, const int32_t *tokens, int n);
/* Registers block `index` of seq (full, holding `tokens`) under `hash`;
 * parent is the chain hash it extends (the previous block's, or the
 * chain's seed for block 0). A block whose content is already registered
 * is left alone. */
void kv_prefix_register(kv_cache *c, int seq, int index, uint64_t parent, uint64_t hash, const int32_t *tokens);
/* Attaches to the empty sequence the longest run of registered blocks
 * matching hashes[0..n) (and their tokens); sets its length; returns the
 * number of blocks attached. */
int kv_prefix_attach(kv_cache *c, int seq, const uint64_t *hashes, const int32_t *tokens, int n);
/* After the full blocks attached to seq (its length a whole number of
 * blocks, the last with chain hash `parent`), reuses the first positions
 * of a registered block that extends the same chain and starts with the
 * same ids as tokens[0..n) (n < block_size): those positions' keys and
 * values are copied into a new block of the sequence (copy on write: the
 * cached block stays as it was), which the sequence then fills. Only the
 * cache's own storage is copied, so tensor-parallel ranks must not use it.
 * Returns the positions reused (0 when fewer than KV_PARTIAL_MIN match). */
#define KV_PARTIAL_MIN 4
/* Registers the last block of seq, which holds n (1 .. block_size-1)
 * positions with these ids, for partial matches only (never attached
 * whole): the sequence is about to be released and writes no more, so a
 * later prompt that continues the same text inside this block (the next
 * turn of a conversation) copies what it shares. */
void kv_prefix_register_tail(kv_cache *c, int seq, int index, uint64_t parent, const int32_t *tokens, int n);
int kv_prefix_attach_partial(kv_cache *c, int seq, uint64_t parent, const int32_t *tokens, int n);
/* Like kv_prefix_attach, but the run ends at the last matching block that
 * carries a state snapshot (hybrid families: the KV alone cannot resume a
 * sequence); that snapshot is copied to state (snap_bytes) when something
 * was attached. */
int kv_prefix_attach_with_state(kv_cache *c, int seq, const uint64_t *hashes, const int32_t *tokens, int n,
                                void *state);
/* Sets the byte size of one snapshot (0: the family has no recurrent
 * state) and the cache budget (see cap_bytes). */
void kv_prefix_configure(kv_cache *c, size_t snap_bytes, size_t cap_bytes, size_t snap_cap);
/* True when the registered block with this hash and tokens exists and has
 * no snapshot yet (worth saving the state for). */
bool kv_prefix_wants_state(kv_cache *c, uint64_t hash, const int32_t *tokens);
/* Stores state (snap_bytes, malloc'ed; ownership passes to the cache) as
 * the snapshot of the registered block with this hash and tokens, evicting
 * unused cached blocks to stay within the budget. Returns false (state
 * freed) when the block is gone, already has one, or no room can be made. */
bool kv_prefix_put_state(kv_cache *c, uint64_t hash, const int32_t *tokens, void *state);
/* Bytes held by cached blocks that no sequence uses, plus all snapshots. */
size_t kv_prefix_cached_bytes(const kv_cache *c);
/* Internal to the cache: take a block (free list, else evict the least
 * recently used cached block) / drop a reference. Called with mu held. */
int kv_block_take_locked(kv_cache *c);
bool kv_seq_push_block_locked(kv_cache *c, int seq, int b);
void kv_block_drop_locked(kv_cache *c, int b);

/* Bytes of KV storage per position (all layers, K and V). */
size_t kv_bytes_per_token(int n_layers, int n_kv, int head_dim);

#endif
