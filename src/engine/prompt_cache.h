/* prompt_cache.h — prefix caching policy: which blocks of a sequence are
 * looked up when it starts and registered as it grows (the block sharing
 * itself is in model/kv_prefix.c). */
#ifndef EMBER_ENGINE_PROMPT_CACHE_H
#define EMBER_ENGINE_PROMPT_CACHE_H

#include "model/kv_cache.h"

#include <stddef.h>
#include <stdint.h>

typedef struct prompt_blocks {
    uint64_t seed;  /* starts the chain: blocks computed with different
                       prefill arithmetic never stand in for each other */
    uint64_t *hash; /* chained hash per full block of ids */
    int n_hashed;   /* blocks hashed so far */
    int n_registered;
    int cap;
} prompt_blocks;

void prompt_blocks_free(prompt_blocks *pb);
/* Attaches the longest cached prefix of ids to the (empty) sequence,
 * leaving at least one id to compute so the next token has logits.
 * Returns the number of positions reused (a multiple of the block size). */
int prompt_cache_attach(kv_cache *c, int seq, const int32_t *ids, size_t n_ids, prompt_blocks *pb);
/* Registers the sequence's blocks that are now full (positions < fed). */
void prompt_cache_register(kv_cache *c, int seq, const int32_t *ids, size_t fed, prompt_blocks *pb);

#endif
