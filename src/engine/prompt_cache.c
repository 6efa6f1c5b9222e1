/* prompt_cache.c — hash chains over token blocks, lookup and registration. */
#include "engine/prompt_cache.h"

#include <stdlib.h>

void prompt_blocks_free(prompt_blocks *pb) {
    free(pb->hash);
    pb->hash = NULL;
    pb->n_hashed = pb->n_registered = pb->cap = 0; /* the seed stays */
}

/* Extends the hash chain to cover `blocks` full blocks of ids. */
static bool hash_blocks(const kv_cache *c, const int32_t *ids, int blocks, prompt_blocks *pb) {
    if (blocks > pb->cap) {
        int cap = pb->cap ? pb->cap : 16;
        while (cap < blocks) cap *= 2;
        uint64_t *h = realloc(pb->hash, (size_t)cap * sizeof *h);
        if (!h) return false;
        pb->hash = h;
        pb->cap = cap;
    }
    for (int b = pb->n_hashed; b < blocks; b++)
        pb->hash[b] = kv_block_hash(b ? pb->hash[b - 1] : pb->seed, ids + (size_t)b * c->block_size, c->block_size);
    if (blocks > pb->n_hashed) pb->n_hashed = blocks;
    return true;
}

int prompt_cache_attach(kv_cache *c, int seq, const int32_t *ids, size_t n_ids, prompt_blocks *pb) {
    if (n_ids < 2) return 0;
    int blocks = (int)((n_ids - 1) / (size_t)c->block_size);
    if (blocks == 0 || !hash_blocks(c, ids, blocks, pb)) return 0;
    int got = kv_prefix_attach(c, seq, pb->hash, ids, blocks);
    pb->n_registered = got; /* attached blocks are registered already */
    return got * c->block_size;
}

void prompt_cache_register(kv_cache *c, int seq, const int32_t *ids, size_t fed, prompt_blocks *pb) {
    int full = (int)(fed / (size_t)c->block_size);
    if (full <= pb->n_registered || !hash_blocks(c, ids, full, pb)) return;
    for (int b = pb->n_registered; b < full; b++)
        kv_prefix_register(c, seq, b, pb->hash[b], ids + (size_t)b * c->block_size);
    pb->n_registered = full;
}
