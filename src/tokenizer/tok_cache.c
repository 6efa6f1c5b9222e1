/* tok_cache.c — memo of piece → ids for the BPE model. Natural text repeats
 * the same words, so most pieces are found here. Shared by all threads
 * using a tokenizer: the table is split into shards, each behind its own
 * reader-writer lock, so concurrent encoders rarely wait on each other.
 * A shard stops accepting entries when full (no eviction), like the
 * reference's fixed-capacity cache. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"
#include "base/hash.h"

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
    pthread_rwlock_t lock;
    entry **slots;
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
        c->shards[i].slots = em_calloc(CACHE_SLOTS, sizeof(entry *));
        pthread_rwlock_init(&c->shards[i].lock, NULL);
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
        for (size_t k = 0; s->slots && k < CACHE_SLOTS; k++) free(s->slots[k]);
        free(s->slots);
        pthread_rwlock_destroy(&s->lock);
    }
    free(c);
}

static uint64_t key_hash(const char *s, size_t n) { return em_hash_finish(em_hash_bytes(EM_HASH_SEED, s, n)); }

bool tok_cache_get(tok_cache *c, const char *s, size_t n, int32_t **ids, size_t *n_ids, size_t *cap, bool *oom) {
    uint64_t h = key_hash(s, n);
    shard *sh = &c->shards[h % CACHE_SHARDS];
    bool found = false;
    pthread_rwlock_rdlock(&sh->lock);
    for (size_t i = (h >> 8) & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        entry *e = sh->slots[i];
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
    pthread_rwlock_unlock(&sh->lock);
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
    pthread_rwlock_wrlock(&sh->lock);
    bool stored = false;
    if (sh->n < CACHE_MAX_FILL) {
        for (size_t i = (h >> 8) & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
            entry *o = sh->slots[i];
            if (!o) {
                sh->slots[i] = e;
                sh->n++;
                stored = true;
                break;
            }
            if (o->hash == h && o->klen == n && memcmp(o->data, s, n) == 0) break; /* another thread won */
        }
    }
    pthread_rwlock_unlock(&sh->lock);
    if (!stored) free(e);
}
