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
 * and, in the Gated DeltaNet layers of the Qwen3.5 family (tp_plan_gdn):
 *   value heads   [r*Hv/N, (r+1)*Hv/N): rows of in_proj_z/a/b, the v part
 *                 of in_proj_qkv and of the conv channels, A_log, dt_bias,
 *                 columns of out_proj
 *   key heads     the q and k parts: split like the value heads when N
 *                 divides the key heads; else, when the key heads divide
 *                 N, the one key head the rank's value heads read
 *                 (value head v reads key head v / (Hv/Hk)); else refused
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
    /* Gated DeltaNet heads (tp_plan_gdn; zero otherwise) */
    int lin_k_head0, n_lin_k_heads;
    int lin_v_head0, n_lin_v_heads;
    bool lin_k_replicated;
} tp_shard;

/* Fills *out for `rank` of `world` ranks; a shape the plan cannot split is
 * EM_ERR_UNSUPPORTED with a message naming the numbers. */
em_status tp_plan_make(int n_heads, int n_kv_heads, int64_t intermediate, int64_t vocab, int rank, int world,
                       tp_shard *out);
/* Adds the Gated DeltaNet head split of out->rank of out->world (a plan
 * tp_plan_make filled) for k_heads key and v_heads value heads; a shape
 * that does not split is EM_ERR_UNSUPPORTED naming the numbers. */
em_status tp_plan_gdn(int k_heads, int v_heads, tp_shard *out);

#endif
