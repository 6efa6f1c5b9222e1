/* tp_plan.h — which slice of every weight a rank of a tensor-parallel
 * group holds (Megatron-style sharding of the Llama family).
 *
 * With N ranks, rank r holds:
 *   query heads   [r*H/N, (r+1)*H/N): rows of q_proj, columns of o_proj
 *   KV heads      split like the query heads when N divides the KV heads;
 *                 else, when the KV heads divide N, the one KV head its
 *                 query heads read (replicated on N/KV ranks); else refused
 *   MLP features  [r*F/N, (r+1)*F/N): rows of gate/up, columns of down
 *   vocabulary    rows [r*Vp, r*Vp + n_vocab) of the head, Vp = ceil(V/N),
 *                 held as Vp rows (the tail of the last rank zero-filled)
 * The plan is pure arithmetic: no files, no devices. */
#ifndef EMBER_MODEL_TP_PLAN_H
#define EMBER_MODEL_TP_PLAN_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct tp_shard {
    int rank, world;
    int q_head0, n_q_heads;   /* query heads of this rank */
    int kv_head0, n_kv_heads; /* KV heads it holds (and its cache stores) */
    bool kv_replicated;       /* the KV heads are copies other ranks hold too */
    int64_t ff0, n_ff;        /* intermediate (MLP) features */
    int64_t vocab0, n_vocab;  /* head rows read from the checkpoint */
    int64_t vocab_pad;        /* head rows held: ceil(vocab / world) */
} tp_shard;

/* Fills *out for `rank` of `world` ranks; a shape the plan cannot split is
 * EM_ERR_UNSUPPORTED with a message naming the numbers. */
em_status tp_plan_make(int n_heads, int n_kv_heads, int64_t intermediate, int64_t vocab, int rank, int world,
                       tp_shard *out);

#endif
