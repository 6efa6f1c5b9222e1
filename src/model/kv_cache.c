/* kv_cache.c — block pool, free list and per-sequence block tables. */
#include "model/kv_cache.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define KV_BLOCK 32

size_t kv_bytes_per_token(int n_layers, int n_kv, int head_dim) {
    return (size_t)n_layers * 2u * (size_t)n_kv * (size_t)head_dim * sizeof(float);
}

em_status kv_cache_create(em_backend *be, int n_layers, int n_kv, int head_dim, int max_ctx, int max_seqs, size_t budget_bytes,
                          kv_cache **out) {
    kv_cache *c = em_calloc(1, sizeof *c);
    if (!c) return em_fail(EM_ERR_NOMEM, "out of memory");
    c->be = be;
    c->n_layers = n_layers;
    c->n_kv = n_kv;
    c->head_dim = head_dim;
    c->block_size = KV_BLOCK;
    c->max_ctx = max_ctx;
    c->max_seqs = max_seqs;
    size_t blocks_per_seq = ((size_t)max_ctx + KV_BLOCK - 1) / KV_BLOCK, total_blocks, bytes;
    c->block_floats = (size_t)KV_BLOCK * (size_t)n_kv * (size_t)head_dim;
    if (!em_mul(blocks_per_seq, (size_t)max_seqs, &total_blocks) || total_blocks > INT32_MAX ||
        !em_mul(total_blocks, c->block_floats * sizeof(float), &bytes)) {
        free(c);
        return em_fail(EM_ERR_LIMIT, "KV cache of %d sequences x %d positions is too large", max_seqs, max_ctx);
    }
    size_t block_all_layers = c->block_floats * sizeof(float) * 2u * (size_t)n_layers;
    if (budget_bytes > 0 && budget_bytes / block_all_layers < total_blocks) {
        total_blocks = budget_bytes / block_all_layers;
        if (total_blocks < blocks_per_seq) {
            free(c);
            return em_fail(EM_ERR_LIMIT,
                           "a KV budget of %zu bytes holds %zu positions, less than one full context of %d "
                           "(%zu bytes per position)", budget_bytes, total_blocks * KV_BLOCK, max_ctx,
                           block_all_layers / KV_BLOCK);
        }
        bytes = total_blocks * c->block_floats * sizeof(float);
    }
    c->max_blocks = (int)total_blocks;
    c->layer_bytes = bytes;
    c->k_layer = em_calloc((size_t)n_layers, sizeof *c->k_layer);
    c->v_layer = em_calloc((size_t)n_layers, sizeof *c->v_layer);
    c->free_list = em_mallocn(total_blocks, sizeof *c->free_list);
    c->seqs = em_calloc((size_t)max_seqs, sizeof *c->seqs);
    pthread_mutex_init(&c->mu, NULL);
    if (!c->k_layer || !c->v_layer || !c->free_list || !c->seqs) {
        kv_cache_free(c);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    for (int l = 0; l < n_layers; l++) {
        c->k_layer[l] = be->ops->reserve(be, bytes);
        c->v_layer[l] = be->ops->reserve(be, bytes);
        if (!c->k_layer[l] || !c->v_layer[l]) {
            kv_cache_free(c);
            return em_fail(EM_ERR_NOMEM, "cannot reserve %zu bytes of KV cache", bytes);
        }
    }
    /* Hand out low block ids first so memory is touched contiguously. */
    for (int i = 0; i < c->max_blocks; i++) c->free_list[i] = c->max_blocks - 1 - i;
    c->n_free = c->max_blocks;
    em_status st = kv_prefix_init(c, 0);
    if (st != EM_OK) {
        kv_cache_free(c);
        return st;
    }
    *out = c;
    return EM_OK;
}

em_status kv_cache_limit_blocks(kv_cache *c, int n) {
    if (n >= c->max_blocks) return EM_OK;
    int per_seq = (c->max_ctx + c->block_size - 1) / c->block_size;
    if (n < per_seq)
        return em_fail(EM_ERR_LIMIT, "a KV cache of %d blocks cannot hold one full context of %d positions", n,
                       c->max_ctx);
    pthread_mutex_lock(&c->mu);
    bool untouched = c->n_free == c->max_blocks;
    if (untouched) {
        c->max_blocks = n;
        for (int i = 0; i < n; i++) c->free_list[i] = n - 1 - i;
        c->n_free = n;
    }
    pthread_mutex_unlock(&c->mu);
    return untouched ? EM_OK : em_fail(EM_ERR_INTERNAL, "the KV cache cannot shrink once blocks are in use");
}

void kv_cache_free(kv_cache *c) {
    if (!c) return;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->k_layer && c->k_layer[l]) c->be->ops->release(c->be, c->k_layer[l], c->layer_bytes);
        if (c->v_layer && c->v_layer[l]) c->be->ops->release(c->be, c->v_layer[l], c->layer_bytes);
    }
    for (int s = 0; c->seqs && s < c->max_seqs; s++) {
        free(c->seqs[s].blocks);
        free(c->seqs[s].k_ptrs);
        free(c->seqs[s].v_ptrs);
    }
    kv_prefix_free(c);
    free(c->k_layer);
    free(c->v_layer);
    free(c->free_list);
    free(c->seqs);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

em_status kv_seq_alloc(kv_cache *c, int *seq) {
    pthread_mutex_lock(&c->mu);
    for (int s = 0; s < c->max_seqs; s++) {
        if (!c->seqs[s].in_use) {
            c->seqs[s].in_use = true;
            c->seqs[s].len = 0;
            c->seqs[s].n_blocks = 0;
            pthread_mutex_unlock(&c->mu);
            *seq = s;
            return EM_OK;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return em_fail(EM_ERR_LIMIT, "all %d KV-cache sequence slots are in use", c->max_seqs);
}

void kv_seq_clear_locked(kv_cache *c, int seq) {
    kv_seq *s = &c->seqs[seq];
    /* last block first: on the LRU list a prefix's head outlives its tail,
     * which is useless without it */
    for (int i = s->n_blocks - 1; i >= 0; i--) kv_block_drop_locked(c, s->blocks[i]);
    s->n_blocks = 0;
    s->len = 0;
}

void kv_seq_clear(kv_cache *c, int seq) {
    pthread_mutex_lock(&c->mu);
    kv_seq_clear_locked(c, seq);
    pthread_mutex_unlock(&c->mu);
}

void kv_seq_release(kv_cache *c, int seq) {
    pthread_mutex_lock(&c->mu);
    kv_seq_clear_locked(c, seq);
    c->seqs[seq].in_use = false;
    pthread_mutex_unlock(&c->mu);
}

static bool grow_tables(kv_seq *s, int need, int n_layers) {
    if (need <= s->cap_blocks) return true;
    int cap = s->cap_blocks ? s->cap_blocks : 8;
    while (cap < need) cap *= 2;
    int *b = realloc(s->blocks, (size_t)cap * sizeof *b);
    if (!b) return false;
    s->blocks = b;
    float **k = realloc(s->k_ptrs, (size_t)cap * (size_t)n_layers * sizeof *k);
    if (!k) return false;
    s->k_ptrs = k;
    float **v = realloc(s->v_ptrs, (size_t)cap * (size_t)n_layers * sizeof *v);
    if (!v) return false;
    s->v_ptrs = v;
    /* pointer tables are laid out [layer][cap]: re-spread existing entries */
    for (int l = n_layers - 1; l >= 0; l--)
        for (int i = s->n_blocks - 1; i >= 0; i--) {
            s->k_ptrs[(size_t)l * cap + i] = s->k_ptrs[(size_t)l * s->cap_blocks + i];
            s->v_ptrs[(size_t)l * cap + i] = s->v_ptrs[(size_t)l * s->cap_blocks + i];
        }
    s->cap_blocks = cap;
    return true;
}

bool kv_seq_push_block_locked(kv_cache *c, int seq, int b) {
    kv_seq *s = &c->seqs[seq];
    if (!grow_tables(s, s->n_blocks + 1, c->n_layers)) return false;
    s->blocks[s->n_blocks] = b;
    for (int l = 0; l < c->n_layers; l++) {
        s->k_ptrs[(size_t)l * s->cap_blocks + s->n_blocks] = c->k_layer[l] + (size_t)b * c->block_floats;
        s->v_ptrs[(size_t)l * s->cap_blocks + s->n_blocks] = c->v_layer[l] + (size_t)b * c->block_floats;
    }
    s->n_blocks++;
    return true;
}

em_status kv_seq_reserve(kv_cache *c, int seq, int new_len) {
    if (new_len > c->max_ctx)
        return em_fail(EM_ERR_LIMIT, "sequence of %d positions exceeds the context of %d", new_len, c->max_ctx);
    kv_seq *s = &c->seqs[seq];
    int need = (new_len + c->block_size - 1) / c->block_size;
    if (need <= s->n_blocks) return EM_OK;
    pthread_mutex_lock(&c->mu);
    em_status st = EM_OK;
    if (!grow_tables(s, need, c->n_layers)) st = em_fail(EM_ERR_NOMEM, "out of memory growing a block table");
    else if (need - s->n_blocks > c->n_free + c->n_lru)
        st = em_fail(EM_ERR_LIMIT, "KV cache is full (%d blocks)", c->max_blocks);
    while (st == EM_OK && s->n_blocks < need) {
        int b = kv_block_take_locked(c);
        if (b < 0 || !kv_seq_push_block_locked(c, seq, b)) {
            if (b >= 0) kv_block_drop_locked(c, b);
            st = em_fail(EM_ERR_NOMEM, "out of memory growing a block table");
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

void kv_seq_truncate(kv_cache *c, int seq, int len) {
    kv_seq *s = &c->seqs[seq];
    if (len < s->len) s->len = len;
}

em_kv_view kv_seq_view(const kv_cache *c, int seq, int layer) {
    const kv_seq *s = &c->seqs[seq];
    em_kv_view v = {s->k_ptrs + (size_t)layer * s->cap_blocks, s->v_ptrs + (size_t)layer * s->cap_blocks,
                    c->block_size, s->n_blocks};
    return v;
}
