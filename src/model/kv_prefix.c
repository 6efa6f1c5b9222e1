/* kv_prefix.c — sharing full KV blocks between sequences by content.
 *
 * A full block is registered under a chained hash of its tokens (the hash
 * of block i covers blocks 0..i, so equal hashes mean equal prefixes; the
 * tokens are kept to rule out collisions). Blocks are reference-counted: a
 * sequence that starts with a registered prefix attaches those blocks
 * instead of recomputing them. Shared blocks are only ever read: a
 * sequence appends after its attached prefix, into blocks of its own. A
 * sequence whose prompt agrees with a cached block for only its first
 * positions (a shared preamble that ends inside a block) copies those
 * positions into a block of its own and continues there
 * (kv_prefix_attach_partial: copy on write); blocks are also indexed by
 * the chain hash they extend, so such candidates are found without hashing
 * partial blocks. When the last user leaves, a registered block
 * stays cached on an LRU list and is reclaimed when room is needed (or
 * when the cache exceeds its byte budget).
 *
 * Hybrid families (recurrent layers beside the KV cache) cannot resume from
 * KV blocks alone: a registered block may also carry a snapshot of the
 * sequence's recurrent state at its end. A snapshot is copied out when a
 * sequence attaches and never held, so it has an LRU list of its own; it
 * goes with its block's registration, or earlier when the budget needs
 * room. The budget counts unused blocks and all snapshots; over it, the
 * least recently used of either goes first. */
#include "model/kv_cache.h"

#include "base/alloc.h"
#include "base/hash.h"

#include <stdlib.h>
#include <string.h>

em_status kv_prefix_init(kv_cache *c, size_t max_cached_bytes) {
    size_t n = (size_t)c->max_blocks;
    c->ref = em_calloc(n, sizeof *c->ref);
    c->bhash = em_calloc(n, sizeof *c->bhash);
    c->bsnap = em_calloc(n, sizeof *c->bsnap);
    c->snap_prev = em_mallocn(n, sizeof *c->snap_prev);
    c->snap_next = em_mallocn(n, sizeof *c->snap_next);
    c->lru_tick = em_calloc(n, sizeof *c->lru_tick);
    c->snap_tick = em_calloc(n, sizeof *c->snap_tick);
    c->btokens = em_calloc(n * (size_t)c->block_size, sizeof *c->btokens);
    c->cached = em_calloc(n, 1);
    c->lru_prev = em_mallocn(n, sizeof *c->lru_prev);
    c->lru_next = em_mallocn(n, sizeof *c->lru_next);
    c->hnext = em_mallocn(n, sizeof *c->hnext);
    c->bparent = em_calloc(n, sizeof *c->bparent);
    c->bvalid = em_calloc(n, sizeof *c->bvalid);
    c->pnext = em_mallocn(n, sizeof *c->pnext);
    size_t buckets = 16;
    while (buckets < n) buckets *= 2;
    c->hbucket = em_mallocn(buckets, sizeof *c->hbucket);
    c->pbucket = em_mallocn(buckets, sizeof *c->pbucket);
    if (!c->ref || !c->bhash || !c->bsnap || !c->snap_prev || !c->snap_next || !c->lru_tick || !c->snap_tick ||
        !c->btokens || !c->cached || !c->lru_prev || !c->lru_next || !c->hnext || !c->hbucket || !c->bparent ||
        !c->bvalid || !c->pnext || !c->pbucket)
        return em_fail(EM_ERR_NOMEM, "out of memory for the prefix cache tables");
    for (size_t i = 0; i < buckets; i++) c->hbucket[i] = c->pbucket[i] = -1;
    c->hmask = (unsigned)(buckets - 1);
    c->lru_head = c->lru_tail = -1;
    c->snap_head = c->snap_tail = -1;
    c->cap_bytes = max_cached_bytes;
    return EM_OK;
}

void kv_prefix_free(kv_cache *c) {
    for (int b = 0; c->bsnap && b < c->max_blocks; b++) free(c->bsnap[b]);
    free(c->bsnap);
    free(c->snap_prev);
    free(c->snap_next);
    free(c->lru_tick);
    free(c->snap_tick);
    free(c->ref);
    free(c->bhash);
    free(c->btokens);
    free(c->cached);
    free(c->lru_prev);
    free(c->lru_next);
    free(c->hnext);
    free(c->hbucket);
    free(c->bparent);
    free(c->bvalid);
    free(c->pnext);
    free(c->pbucket);
}

uint64_t kv_block_hash(uint64_t prev, const int32_t *tokens, int n) {
    return em_hash_finish(em_hash_bytes(prev ^ 0x9e3779b97f4a7c15ULL, tokens, (size_t)n * sizeof *tokens));
}

static size_t block_bytes(const kv_cache *c) { return c->block_floats * sizeof(float) * 2u * (size_t)c->n_layers; }

static void lru_unlink(kv_cache *c, int b) {
    int p = c->lru_prev[b], n = c->lru_next[b];
    if (p >= 0) c->lru_next[p] = n;
    else c->lru_head = n;
    if (n >= 0) c->lru_prev[n] = p;
    else c->lru_tail = p;
    c->n_lru--;
}

static void lru_push_front(kv_cache *c, int b) {
    c->lru_tick[b] = ++c->tick;
    c->lru_prev[b] = -1;
    c->lru_next[b] = c->lru_head;
    if (c->lru_head >= 0) c->lru_prev[c->lru_head] = b;
    c->lru_head = b;
    if (c->lru_tail < 0) c->lru_tail = b;
    c->n_lru++;
}

static void snap_unlink(kv_cache *c, int b) {
    int p = c->snap_prev[b], n = c->snap_next[b];
    if (p >= 0) c->snap_next[p] = n;
    else c->snap_head = n;
    if (n >= 0) c->snap_prev[n] = p;
    else c->snap_tail = p;
}

static void snap_push_front(kv_cache *c, int b) {
    c->snap_tick[b] = ++c->tick;
    c->snap_prev[b] = -1;
    c->snap_next[b] = c->snap_head;
    if (c->snap_head >= 0) c->snap_prev[c->snap_head] = b;
    c->snap_head = b;
    if (c->snap_tail < 0) c->snap_tail = b;
}

static void snap_drop(kv_cache *c, int b) {
    snap_unlink(c, b);
    free(c->bsnap[b]);
    c->bsnap[b] = NULL;
    c->snap_total -= c->snap_bytes;
    c->n_snaps--;
}

static void table_remove(kv_cache *c, int b) {
    int *pp;
    if (c->bvalid[b] == c->block_size) { /* partial tails are in the parent index only */
        pp = &c->hbucket[c->bhash[b] & c->hmask];
        while (*pp != b) pp = &c->hnext[*pp];
        *pp = c->hnext[b];
    }
    pp = &c->pbucket[c->bparent[b] & c->hmask];
    while (*pp != b) pp = &c->pnext[*pp];
    *pp = c->pnext[b];
    c->cached[b] = 0;
    if (c->bsnap[b]) snap_drop(c, b);
}

static int table_find(const kv_cache *c, uint64_t hash, const int32_t *tokens) {
    for (int b = c->hbucket[hash & c->hmask]; b >= 0; b = c->hnext[b]) /* whole blocks only */
        if (c->bhash[b] == hash && !memcmp(c->btokens + (size_t)b * c->block_size, tokens,
                                            (size_t)c->block_size * sizeof *tokens))
            return b;
    return -1;
}

/* Forgets the least recently used unreferenced block; returns it. */
static int evict_lru(kv_cache *c) {
    int b = c->lru_tail;
    if (b < 0) return -1;
    lru_unlink(c, b);
    table_remove(c, b);
    c->prefix_evictions++;
    return b;
}

static bool over_total(const kv_cache *c) {
    return c->cap_bytes && (size_t)c->n_lru * block_bytes(c) + c->snap_total > c->cap_bytes;
}

static bool over_snaps(const kv_cache *c) { return c->snap_cap && c->snap_total > c->snap_cap; }

/* Drops the least recently used of the unused blocks and the snapshots
 * until the budget holds (only snapshots when they alone exceed theirs). */
static void shrink(kv_cache *c) {
    for (;;) {
        int b = c->lru_tail, sn = c->snap_tail;
        if (over_snaps(c) && sn >= 0) {
            snap_drop(c, sn);
        } else if (over_total(c) && (b >= 0 || sn >= 0)) {
            if (sn >= 0 && (b < 0 || c->snap_tick[sn] <= c->lru_tick[b])) snap_drop(c, sn);
            else c->free_list[c->n_free++] = evict_lru(c);
        } else {
            return;
        }
    }
}

void kv_prefix_configure(kv_cache *c, size_t snap_bytes, size_t cap_bytes, size_t snap_cap) {
    pthread_mutex_lock(&c->mu);
    c->snap_bytes = snap_bytes;
    c->cap_bytes = cap_bytes;
    c->snap_cap = snap_cap;
    shrink(c);
    pthread_mutex_unlock(&c->mu);
}

int kv_block_take_locked(kv_cache *c) {
    int b = c->n_free ? c->free_list[--c->n_free] : evict_lru(c);
    if (b >= 0) c->ref[b] = 1;
    return b;
}

void kv_block_drop_locked(kv_cache *c, int b) {
    if (--c->ref[b] > 0) return;
    if (!c->cached[b]) {
        c->free_list[c->n_free++] = b;
        return;
    }
    lru_push_front(c, b);
    shrink(c);
}

/* Marks block b cached, holding n positions of these ids after the chain
 * hash parent, in the parent index. Called with mu held. */
static void index_parent(kv_cache *c, int b, uint64_t parent, const int32_t *tokens, int n) {
    c->bparent[b] = parent;
    c->bvalid[b] = n;
    memcpy(c->btokens + (size_t)b * c->block_size, tokens, (size_t)n * sizeof *tokens);
    c->pnext[b] = c->pbucket[parent & c->hmask];
    c->pbucket[parent & c->hmask] = b;
    c->cached[b] = 1;
}

void kv_prefix_register(kv_cache *c, int seq, int index, uint64_t parent, uint64_t hash, const int32_t *tokens) {
    pthread_mutex_lock(&c->mu);
    kv_seq *s = &c->seqs[seq];
    if (index < s->n_blocks) {
        int b = s->blocks[index];
        if (!c->cached[b] && table_find(c, hash, tokens) < 0) {
            c->bhash[b] = hash;
            c->hnext[b] = c->hbucket[hash & c->hmask];
            c->hbucket[hash & c->hmask] = b;
            index_parent(c, b, parent, tokens, c->block_size);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* Attaches up to n matching blocks to the empty sequence; counts a lookup
 * of `looked_up` blocks. Called with mu held. */
static int attach_locked(kv_cache *c, int seq, const uint64_t *hashes, const int32_t *tokens, int n, int looked_up) {
    kv_seq *s = &c->seqs[seq];
    int got = 0;
    if (s->n_blocks == 0) {
        for (; got < n; got++) {
            int b = table_find(c, hashes[got], tokens + (size_t)got * c->block_size);
            if (b < 0) break;
            if (c->ref[b] == 0) lru_unlink(c, b);
            c->ref[b]++;
            if (!kv_seq_push_block_locked(c, seq, b)) {
                kv_block_drop_locked(c, b);
                break;
            }
        }
        s->len = got * c->block_size;
    }
    c->prefix_lookup_tokens += (unsigned long long)looked_up * (unsigned long long)c->block_size;
    c->prefix_hit_tokens += (unsigned long long)got * (unsigned long long)c->block_size;
    return got;
}

int kv_prefix_attach(kv_cache *c, int seq, const uint64_t *hashes, const int32_t *tokens, int n) {
    pthread_mutex_lock(&c->mu);
    int got = attach_locked(c, seq, hashes, tokens, n, n);
    pthread_mutex_unlock(&c->mu);
    return got;
}

void kv_prefix_register_tail(kv_cache *c, int seq, int index, uint64_t parent, const int32_t *tokens, int n) {
    pthread_mutex_lock(&c->mu);
    kv_seq *s = &c->seqs[seq];
    if (index < s->n_blocks && n >= KV_PARTIAL_MIN && n < c->block_size) {
        int b = s->blocks[index];
        if (!c->cached[b] && c->ref[b] == 1) index_parent(c, b, parent, tokens, n);
    }
    pthread_mutex_unlock(&c->mu);
}

/* The registered block extending `parent` whose ids agree longest with
 * tokens[0..n); *len gets how many agree. Called with mu held. */
static int partial_find(const kv_cache *c, uint64_t parent, const int32_t *tokens, int n, int *len) {
    int best = -1;
    *len = 0;
    for (int b = c->pbucket[parent & c->hmask]; b >= 0; b = c->pnext[b]) {
        if (c->bparent[b] != parent) continue;
        const int32_t *t = c->btokens + (size_t)b * c->block_size;
        int j = 0, lim = n < c->bvalid[b] ? n : c->bvalid[b];
        while (j < lim && t[j] == tokens[j]) j++;
        if (j > *len) best = b, *len = j;
    }
    return best;
}

/* The first len positions of block src into block dst, every layer. */
/* Layers whose copies go to the backend as one copy_many (more take the
 * one-by-one path; real models have at most a few hundred). */
#define KV_COPY_MANY_LAYERS 512
static void copy_positions(kv_cache *c, int dst, int src, int len) {
    size_t bytes = (size_t)len * (size_t)c->n_kv * (size_t)c->head_dim * sizeof(float);
    size_t d = (size_t)dst * c->block_floats, s = (size_t)src * c->block_floats;
    const em_backend_ops *op = c->be->ops;
    /* queued before any later write to either block */
    if (op->copy_many && c->n_layers <= KV_COPY_MANY_LAYERS) {
        void *to[2 * KV_COPY_MANY_LAYERS];
        const void *from[2 * KV_COPY_MANY_LAYERS];
        for (int l = 0; l < c->n_layers; l++) {
            to[2 * l] = c->k_layer[l] + d, from[2 * l] = c->k_layer[l] + s;
            to[2 * l + 1] = c->v_layer[l] + d, from[2 * l + 1] = c->v_layer[l] + s;
        }
        op->copy_many(c->be, 2 * c->n_layers, to, from, bytes);
        return;
    }
    for (int l = 0; l < c->n_layers; l++) {
        op->copy(c->be, c->k_layer[l] + d, c->k_layer[l] + s, bytes);
        op->copy(c->be, c->v_layer[l] + d, c->v_layer[l] + s, bytes);
    }
}

int kv_prefix_attach_partial(kv_cache *c, int seq, uint64_t parent, const int32_t *tokens, int n) {
    if (n >= c->block_size) n = c->block_size - 1;
    pthread_mutex_lock(&c->mu);
    kv_seq *s = &c->seqs[seq];
    int len = 0, src = s->len == s->n_blocks * c->block_size ? partial_find(c, parent, tokens, n, &len) : -1;
    if (src < 0 || len < KV_PARTIAL_MIN) {
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    if (c->ref[src]++ == 0) lru_unlink(c, src); /* held: not the block evicted to make room for its copy */
    int dst = kv_block_take_locked(c);
    if (dst >= 0 && !kv_seq_push_block_locked(c, seq, dst)) {
        kv_block_drop_locked(c, dst);
        dst = -1;
    }
    if (dst >= 0) {
        copy_positions(c, dst, src, len);
        s->len += len;
        c->prefix_hit_tokens += (unsigned long long)len;
    }
    kv_block_drop_locked(c, src);
    pthread_mutex_unlock(&c->mu);
    return dst >= 0 ? len : 0;
}

int kv_prefix_attach_with_state(kv_cache *c, int seq, const uint64_t *hashes, const int32_t *tokens, int n,
                                void *state) {
    pthread_mutex_lock(&c->mu);
    /* the longest matching run, cut back to its last snapshot */
    int usable = 0;
    for (int i = 0; i < n; i++) {
        int b = table_find(c, hashes[i], tokens + (size_t)i * c->block_size);
        if (b < 0) break;
        if (c->bsnap[b]) usable = i + 1;
    }
    int got = attach_locked(c, seq, hashes, tokens, usable, n);
    if (got > 0 && got < usable) { /* out of memory growing the table: compute from zero */
        kv_seq_clear_locked(c, seq);
        c->prefix_hit_tokens -= (unsigned long long)got * (unsigned long long)c->block_size;
        got = 0;
    }
    if (got > 0) {
        int b = c->seqs[seq].blocks[got - 1];
        memcpy(state, c->bsnap[b], c->snap_bytes);
        snap_unlink(c, b);
        snap_push_front(c, b);
    }
    pthread_mutex_unlock(&c->mu);
    return got;
}

bool kv_prefix_wants_state(kv_cache *c, uint64_t hash, const int32_t *tokens) {
    pthread_mutex_lock(&c->mu);
    int b = c->snap_bytes ? table_find(c, hash, tokens) : -1;
    bool want = b >= 0 && !c->bsnap[b];
    pthread_mutex_unlock(&c->mu);
    return want;
}

bool kv_prefix_put_state(kv_cache *c, uint64_t hash, const int32_t *tokens, void *state) {
    pthread_mutex_lock(&c->mu);
    int b = c->snap_bytes ? table_find(c, hash, tokens) : -1;
    bool stored = b >= 0 && !c->bsnap[b], kept = false;
    if (stored) {
        c->bsnap[b] = state;
        c->snap_total += c->snap_bytes;
        c->n_snaps++;
        snap_push_front(c, b);
        /* older snapshots and unused blocks make room; a budget too small
         * for this one drops it too (and frees it) */
        shrink(c);
        kept = c->bsnap[b] == state;
    }
    pthread_mutex_unlock(&c->mu);
    if (!stored) free(state);
    return kept;
}

size_t kv_prefix_cached_bytes(const kv_cache *c) { return (size_t)c->n_lru * block_bytes(c) + c->snap_total; }
