/* scheduler.h — continuous batching: one thread runs the model; every step
 * is one batched forward over all active sequences. Decoding sequences add
 * one token each; prompts are prefilled in chunks (at most prefill_chunk
 * tokens per step, shared first come first served) interleaved with the
 * decodes so a long prompt never freezes streams in progress. Requests
 * join and leave between steps; a finished or cancelled sequence frees its
 * KV blocks at once. When the KV cache runs out, the newest running
 * sequence is preempted (its blocks freed) and later recomputed from its
 * history, instead of failing everyone.
 *
 * Prefix caching: a request's history is matched block by block against
 * the KV blocks other requests computed (prompt_cache.c); the longest
 * cached prefix is reused and only the rest is prefilled. Hybrid families
 * also restore a snapshot of their recurrent state there.
 *
 * Greedy outputs under batching equal those of each request served alone:
 * a row's arithmetic depends only on its own span (see dense.c). */
#ifndef EMBER_ENGINE_SCHEDULER_H
#define EMBER_ENGINE_SCHEDULER_H

#include "engine/gen_seq.h"
#include "engine/kv_store.h"

typedef struct em_scheduler em_scheduler;

typedef struct sched_options {
    int max_batch;     /* active sequences per step; 0: the KV cache's slots */
    int prefill_chunk; /* prompt tokens per step; 0: 512 */
    bool no_prefix_cache;      /* disable prefix caching */
    size_t prompt_cache_bytes; /* cap on cached blocks nobody uses + state snapshots; 0: no cap */
    int snapshot_every;        /* hybrid families: blocks between periodic state snapshots; 0: 16 */
    const char *kv_store_dir;  /* persist prompt blocks here (kv_store.h); NULL: none */
    size_t kv_store_bytes;     /* bound on the store's folder; 0: 4 GiB */
    /* threads that choose the tokens of sampled (not greedy) rows of a
     * step in parallel: 0 = one per core when the model runs on a device
     * (the host is idle meanwhile), none on the CPU (whose threads run the
     * model); 1 = none */
    int sample_threads;
} sched_options;

typedef struct sched_stats {
    unsigned long long steps, batched_tokens, prefill_tokens, decode_tokens, preemptions;
    /* prompt tokens in spans planned with FAST arithmetic (rounded
     * activations where the backend has such products): shows each
     * request's precision at work */
    unsigned long long prefill_fast_tokens;
    int active, waiting;
    double busy_seconds;
    /* where a step's time goes: the forward (with the logits' download),
     * then sampling and streaming the new tokens */
    double forward_seconds, sample_seconds;
    unsigned long long prefix_lookup_tokens, prefix_hit_tokens, prefix_evictions;
    size_t prefix_cached_bytes;  /* unused cached KV blocks + state snapshots */
    size_t prefix_state_bytes;   /* of which recurrent-state snapshots */
    int prefix_state_snapshots;
    int kv_blocks_total, kv_blocks_free;
    bool kv_store;             /* a store is open: the figures below */
    kv_store_stats store;
} sched_stats;

/* Starts the scheduler thread on m and attaches it (m->sched): from then on
 * em_generate on m goes through it. */
em_status sched_start(em_model *m, const sched_options *o);
/* Prefills and a few decode steps on scratch sequences, so the first
 * requests do not pay for loading GPU kernels, cuBLAS's first use of a row
 * count and recording steps (warmup.c); max_rows: the most rows a step of
 * the server prefills (its prefill chunk; 0: 512). Nothing on host-memory
 * backends. */
em_status model_warmup(em_model *m, int max_rows);
/* Stops the thread after cancelling what is still running; detaches. */
void sched_stop(em_model *m);
/* Runs g to completion inside the batch; blocks the calling thread. */
em_status sched_run(em_scheduler *s, gen_seq *g);
void sched_get_stats(em_scheduler *s, sched_stats *out);

#endif
