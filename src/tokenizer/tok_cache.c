/* tok_cache.c — memo of piece → ids for the BPE model. Natural text repeats
 * the same words, so most pieces are found here. Shared by all threads
 * using a tokenizer, in shards. Entries are never removed while the cache
 * lives (a shard stops accepting them when full, like the reference's
 * fixed-capacity cache), so readers take no lock: a slot goes from empty
 * to its final entry once, published with release ordering; writers of a
 * shard take its mutex. (Reader-writer locks cost 15% of encoding.) */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"
#include "base/hash.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SHARDS 16
#define CACHE_SLOTS 2048      /* per shard; power of two */
#define CACHE_MAX_FILL 1024   /* entries per shard (load <= 50%) */

typedef struct entry {
    uint64_t hash;
    uint32_t klen, nids;
    /* key bytes, then padding, then nids int32 ids */
    char data[];
} entry;

typedef struct shard {
    pthread_mutex_t lock; /* writers only */
    _Atomic(entry *) *slots;
    size_t n;
} shard;

struct tok_cache {
    shard shards[CACHE_SHARDS];
};

static size_t ids_offset(uint32_t klen) { return ((size_t)klen + 3) & ~(size_t)3; }

tok_cache *tok_cache_new(void) {
    tok_cache *c = em_calloc(1, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < CACHE_SHARDS; i++) {
        c->shards[i].slots = em_calloc(CACHE_SLOTS, sizeof *c->shards[i].slots);
        pthread_mutex_init(&c->shards[i].lock, NULL);
        if (!c->shards[i].slots) {
            tok_cache_free(c);
            return NULL;
        }
    }
    return c;
}

void tok_cache_free(tok_cache *c) {
    if (!c) return;
    for (int i = 0; i < CACHE_SHARDS; i++) {
        shard *s = &c->shards[i];
        for (size_t k = 0; s->slots && k < CACHE_SLOTS; k++)
            free(atomic_load_explicit(&s->slots[k], memory_order_relaxed));
        free(s->slots);
        pthread_mutex_destroy(&s->lock);
    }
    free(c);
}

static uint64_t key_hash(const char *s, size_t n) { return em_hash_finish(em_hash_bytes(EM_HASH_SEED, s, n)); }

bool tok_cache_get(tok_cache *c, const char *s, size_t n, int32_t **ids, size_t *n_ids, size_t *cap, bool *oom) {
    uint64_t h = key_hash(s, n);
    shard *sh = &c->shards[h % CACHE_SHARDS];
    bool found = false;
    for (size_t i = (h >> 8) & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        entry *e = atomic_load_explicit(&sh->slots[i], memory_order_acquire);
        if (!e) break;
        if (e->hash != h || e->klen != n || memcmp(e->data, s, n) != 0) continue;
        size_t need = *n_ids + e->nids;
        if (need > *cap && !em_grow((void **)ids, cap, need, sizeof **ids)) {
            *oom = true;
            break;
        }
        if (e->nids) memcpy(*ids + *n_ids, e->data + ids_offset(e->klen), e->nids * sizeof(int32_t));
        *n_ids += e->nids;
        found = true;
        break;
    }
    return found;
}

void tok_cache_put(tok_cache *c, const char *s, size_t n, const int32_t *ids, size_t n_ids) {
    if (n > UINT32_MAX || n_ids > UINT32_MAX) return;
    uint64_t h = key_hash(s, n);
    shard *sh = &c->shards[h % CACHE_SHARDS];
    entry *e = malloc(sizeof *e + ids_offset((uint32_t)n) + n_ids * sizeof(int32_t));
    if (!e) return; /* the cache is an optimisation: failing to fill it is harmless */
    e->hash = h;
    e->klen = (uint32_t)n;
    e->nids = (uint32_t)n_ids;
    memcpy(e->data, s, n);
    if (n_ids) memcpy(e->data + ids_offset((uint32_t)n), ids, n_ids * sizeof(int32_t));
    pthread_mutex_lock(&sh->lock);
    bool stored = false;
    if (sh->n < CACHE_MAX_FILL) {
        for (size_t i = (h >> 8) & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
            entry *o = atomic_load_explicit(&sh->slots[i], memory_order_relaxed);
            if (!o) {
                atomic_store_explicit(&sh->slots[i], e, memory_order_release);
                sh->n++;
                stored = true;
                break;
            }
            if (o->hash == h && o->klen == n && memcmp(o->data, s, n) == 0) break; /* another thread won */
        }
    }
    pthread_mutex_unlock(&sh->lock);
    if (!stored) free(e);
}
