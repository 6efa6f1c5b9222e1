/* prompt_cache.h — prefix caching policy: which blocks of a sequence are
 * looked up when it starts and registered as it grows, and, for hybrid
 * families (recurrent layers beside the KV cache), where the recurrent
 * state is snapshotted (the block sharing itself is in model/kv_prefix.c).
 *
 * Snapshot policy. A hybrid sequence can only resume at a block boundary
 * whose state was saved, and a snapshot costs the whole recurrent state
 * (every GDN layer's conv tail and delta-rule state: rstate_seq_bytes, far
 * more than a KV block), so boundaries are chosen, not taken wholesale:
 *   - the last full block of the prompt (a repeated prompt, the next turn of
 *     a conversation, a resumed preempted request reuse all of it), and
 *   - every PROMPT_SNAP_EVERY-th block (512 positions): a shared preamble
 *     followed by different questions reuses all but < 512 of its tokens.
 * A prompt of P positions thus keeps at most P/512 + 1 snapshots. Prefill
 * spans are cut at these boundaries so the state exists there. */
#ifndef EMBER_ENGINE_PROMPT_CACHE_H
#define EMBER_ENGINE_PROMPT_CACHE_H

#include "engine/kv_store.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

enum { PROMPT_SNAP_EVERY = 16 }; /* blocks between periodic snapshots */

typedef struct prompt_blocks {
    uint64_t seed;  /* starts the chain: blocks computed with different
                       prefill arithmetic never stand in for each other */
    uint64_t *hash; /* chained hash per full block of ids */
    int n_hashed;   /* blocks hashed so far */
    int n_registered;
    int cap;
    int last_block; /* the prompt's last full block before its final id */
    int snap_every; /* periodic snapshot interval in blocks; 0: PROMPT_SNAP_EVERY */
} prompt_blocks;

/* Sets up prefix caching on m: the snapshot size of its family (0 without
 * recurrent state) and the budget of cached bytes (0: unused KV blocks are
 * not capped; snapshots then default to two per sequence slot). */
void prompt_cache_configure(em_model *m, size_t cap_bytes);
void prompt_blocks_free(prompt_blocks *pb);
/* Attaches the longest cached prefix of ids to the (empty) sequence,
 * leaving at least one id to compute so the next token has logits; for a
 * hybrid family the prefix ends at a snapshot, which is restored into the
 * sequence's recurrent state. With a store (NULL: none), blocks past what
 * memory holds are read from disk. Past the whole blocks, a cached block
 * whose first ids agree with the prompt's next ones gives those positions
 * too (copied into a block of the sequence: kv_prefix_attach_partial),
 * except for hybrid families and tensor-parallel models. Returns the
 * number of positions reused. */
int prompt_cache_attach(em_model *m, kv_store *store, int seq, const int32_t *ids, size_t n_ids, prompt_blocks *pb);
/* Registers the sequence's blocks that are now full (positions < fed) and,
 * when fed is a snapshot boundary, the recurrent state there; with a store,
 * the prompt's blocks (and their snapshots) are written to disk. */
void prompt_cache_register(em_model *m, kv_store *store, int seq, const int32_t *ids, size_t fed, prompt_blocks *pb);
/* Before a finished sequence is released: registers its last block, when
 * that holds only part of a block's positions (ids[0..fed) are its
 * positions), for partial matches (kv_prefix_register_tail), so the next
 * turn of a conversation reuses it; not for hybrid families or
 * tensor-parallel models (see prompt_cache_attach). */
void prompt_cache_register_tail(em_model *m, int seq, const int32_t *ids, size_t fed, prompt_blocks *pb);
/* How many of `take` ids from position fed a forward may run so that it
 * stops at the next snapshot boundary instead of crossing it. */
int prompt_cache_span(const em_model *m, const prompt_blocks *pb, size_t fed, int take);

#endif
