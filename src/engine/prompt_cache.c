/* prompt_cache.c — hash chains over token blocks, lookup and registration,
 * recurrent-state snapshots at chosen boundaries (see prompt_cache.h). */
#include "engine/prompt_cache.h"

#include "base/log.h"

#include <stdlib.h>

void prompt_cache_configure(em_model *m, size_t cap_bytes) {
    size_t snap = m->family->state_bytes ? m->family->state_bytes(m) : 0;
    size_t snap_cap = snap && !cap_bytes ? snap * 2u * (size_t)m->kv->max_seqs : 0;
    kv_prefix_configure(m->kv, snap, cap_bytes, snap_cap);
}

void prompt_blocks_free(prompt_blocks *pb) {
    free(pb->hash);
    pb->hash = NULL;
    pb->n_hashed = pb->n_registered = pb->cap = pb->last_block = 0; /* snap_every and the seed stay */
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

static bool snapshot_boundary(const prompt_blocks *pb, int blocks) {
    int every = pb->snap_every > 0 ? pb->snap_every : PROMPT_SNAP_EVERY;
    return blocks > 0 && (blocks % every == 0 || blocks == pb->last_block);
}

/* Whether this model may resume a sequence inside a block: a recurrent
 * state exists only at snapshot boundaries, and tensor-parallel ranks keep
 * KV storage of their own that a copy here would miss. */
static bool partial_reuse(const em_model *m) { return !m->kv->snap_bytes && model_tp_size(m) == 1; }

/* Attaches the longest run of cached whole blocks among the prompt's
 * first `blocks` (from memory, then the store); returns how many. */
static int attach_whole(em_model *m, kv_store *store, int seq, const int32_t *ids, int blocks, prompt_blocks *pb) {
    kv_cache *c = m->kv;
    if (blocks == 0 || !hash_blocks(c, ids, blocks, pb)) return 0;
    int got;
    if (c->snap_bytes) {
        void *state = malloc(c->snap_bytes);
        got = state ? kv_prefix_attach_with_state(c, seq, pb->hash, ids, blocks, state) : 0;
        if (got > 0 && m->family->state_load(m, seq, state) != EM_OK) {
            /* cannot resume from it: start the sequence over */
            kv_seq_clear(c, seq);
            EM_LOGW("prefix cache: cannot restore a recurrent-state snapshot: %s", em_last_error());
            got = 0;
        }
        free(state);
    } else {
        got = kv_prefix_attach(c, seq, pb->hash, ids, blocks);
    }
    if (store) got = kv_store_extend(store, seq, pb->seed, pb->hash, ids, got, blocks);
    return got;
}

int prompt_cache_attach(em_model *m, kv_store *store, int seq, const int32_t *ids, size_t n_ids, prompt_blocks *pb) {
    kv_cache *c = m->kv;
    if (n_ids < 2) return 0;
    size_t bs = (size_t)c->block_size;
    int blocks = (int)((n_ids - 1) / bs);
    pb->last_block = blocks;
    int got = attach_whole(m, store, seq, ids, blocks, pb);
    pb->n_registered = got; /* attached blocks are registered already */
    size_t at = (size_t)got * bs, left = n_ids - 1 - at; /* the last id is always computed */
    int partial = 0;
    if (partial_reuse(m) && got == c->seqs[seq].n_blocks && left > 0) /* got > 0: hash[got - 1] exists */
        partial = kv_prefix_attach_partial(c, seq, got ? pb->hash[got - 1] : pb->seed, ids + at,
                                           (int)(left < bs ? left : bs));
    return (int)at + partial;
}

/* Saves the sequence's recurrent state as the snapshot of its block
 * `blocks - 1` when that block is registered without one, and with the
 * block's file when it is a prompt block and a store is given. */
static void snapshot(em_model *m, kv_store *store, int seq, const int32_t *ids, int blocks, prompt_blocks *pb) {
    kv_cache *c = m->kv;
    int b = blocks - 1;
    const int32_t *tok = ids + (size_t)b * c->block_size;
    bool to_memory = kv_prefix_wants_state(c, pb->hash[b], tok), to_disk = store && b < pb->last_block;
    if (!to_memory && !to_disk) return;
    void *buf = malloc(c->snap_bytes);
    if (!buf) return; /* a snapshot is an optimisation: skip it */
    if (m->family->state_save(m, seq, buf) != EM_OK) {
        free(buf);
        return;
    }
    if (to_disk) kv_store_save(store, seq, b, pb->hash[b], tok, buf);
    if (to_memory) kv_prefix_put_state(c, pb->hash[b], tok, buf);
    else free(buf);
}

void prompt_cache_register(em_model *m, kv_store *store, int seq, const int32_t *ids, size_t fed, prompt_blocks *pb) {
    kv_cache *c = m->kv;
    int full = (int)(fed / (size_t)c->block_size), old = pb->n_registered;
    bool at_snapshot = c->snap_bytes && fed % (size_t)c->block_size == 0 && snapshot_boundary(pb, full);
    if (full > old && hash_blocks(c, ids, full, pb)) {
        for (int b = old; b < full; b++)
            kv_prefix_register(c, seq, b, b ? pb->hash[b - 1] : pb->seed, pb->hash[b], ids + (size_t)b * c->block_size);
        pb->n_registered = full;
        /* the prompt's blocks go to disk; a snapshot block goes with its state */
        for (int b = old; store && b < full && b < pb->last_block; b++)
            if (!(at_snapshot && b == full - 1)) kv_store_save(store, seq, b, pb->hash[b], ids + (size_t)b * c->block_size, NULL);
    }
    if (at_snapshot && full <= pb->n_hashed) snapshot(m, store, seq, ids, full, pb);
}

void prompt_cache_register_tail(em_model *m, int seq, const int32_t *ids, size_t fed, prompt_blocks *pb) {
    kv_cache *c = m->kv;
    size_t bs = (size_t)c->block_size;
    int full = (int)(fed / bs), n = (int)(fed % bs);
    if (!partial_reuse(m) || n < KV_PARTIAL_MIN || (size_t)c->seqs[seq].len != fed) return;
    if (full > 0 && !hash_blocks(c, ids, full, pb)) return;
    kv_prefix_register_tail(c, seq, full, full ? pb->hash[full - 1] : pb->seed, ids + (size_t)full * bs, n);
}

int prompt_cache_span(const em_model *m, const prompt_blocks *pb, size_t fed, int take) {
    const kv_cache *c = m->kv;
    if (!c->snap_bytes) return take;
    size_t bs = (size_t)c->block_size;
    for (size_t k = fed / bs + 1; k * bs < fed + (size_t)take; k++)
        if (snapshot_boundary(pb, (int)k)) return (int)(k * bs - fed);
    return take;
}
