/* tp_plan.c — the sharding plan of a tensor-parallel rank (tp_plan.h). */
#include "model/tp_plan.h"

#include <string.h>

em_status tp_plan_make(int n_heads, int n_kv_heads, int64_t intermediate, int64_t vocab, int rank, int world,
                       tp_shard *out) {
    memset(out, 0, sizeof *out);
    if (world < 1 || rank < 0 || rank >= world)
        return em_fail(EM_ERR_INVALID, "tensor parallelism: rank %d of %d ranks is out of range", rank, world);
    if (n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads || intermediate < 1 || vocab < 1)
        return em_fail(EM_ERR_INVALID, "tensor parallelism: inconsistent shape (%d heads, %d KV heads, "
                       "intermediate %lld, vocabulary %lld)", n_heads, n_kv_heads, (long long)intermediate,
                       (long long)vocab);
    if (n_heads % world)
        return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism over %d GPUs: the model's %d attention heads are not "
                       "divisible by %d", world, n_heads, world);
    if (intermediate % world)
        return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism over %d GPUs: the model's intermediate size %lld is "
                       "not divisible by %d", world, (long long)intermediate, world);
    out->rank = rank;
    out->world = world;
    out->n_q_heads = n_heads / world;
    out->q_head0 = rank * out->n_q_heads;
    if (n_kv_heads % world == 0) {
        out->n_kv_heads = n_kv_heads / world;
        out->kv_head0 = rank * out->n_kv_heads;
    } else if (world % n_kv_heads == 0) {
        /* each KV head serves n_heads / n_kv_heads query heads, a whole
         * multiple of a rank's share: the rank's heads read one KV head */
        int group = n_heads / n_kv_heads;
        out->n_kv_heads = 1;
        out->kv_head0 = out->q_head0 / group;
        out->kv_replicated = true;
    } else {
        return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism over %d GPUs: the model's %d KV heads can be neither "
                       "split nor replicated evenly (one of %d and %d must divide the other)", world, n_kv_heads,
                       n_kv_heads, world);
    }
    out->n_ff = intermediate / world;
    out->ff0 = rank * out->n_ff;
    out->vocab_pad = (vocab + world - 1) / world;
    out->vocab0 = rank * out->vocab_pad;
    int64_t left = vocab - out->vocab0;
    out->n_vocab = left <= 0 ? 0 : left < out->vocab_pad ? left : out->vocab_pad;
    return EM_OK;
}

em_status tp_plan_gdn(int k_heads, int v_heads, tp_shard *out) {
    int world = out->world, rank = out->rank;
    if (world < 1 || rank < 0 || rank >= world)
        return em_fail(EM_ERR_INVALID, "tensor parallelism: rank %d of %d ranks is out of range", rank, world);
    if (k_heads < 1 || v_heads < 1 || v_heads % k_heads)
        return em_fail(EM_ERR_INVALID, "tensor parallelism: inconsistent linear-attention shape (%d key heads, %d "
                       "value heads)", k_heads, v_heads);
    if (v_heads % world)
        return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism over %d GPUs: the model's %d linear-attention value "
                       "heads are not divisible by %d", world, v_heads, world);
    out->n_lin_v_heads = v_heads / world;
    out->lin_v_head0 = rank * out->n_lin_v_heads;
    out->lin_k_replicated = false;
    if (k_heads % world == 0) {
        out->n_lin_k_heads = k_heads / world;
        out->lin_k_head0 = rank * out->n_lin_k_heads;
    } else if (world % k_heads == 0) {
        /* a key head serves v_heads / k_heads value heads, a whole multiple
         * of a rank's share: the rank's value heads read one key head */
        out->n_lin_k_heads = 1;
        out->lin_k_head0 = out->lin_v_head0 / (v_heads / k_heads);
        out->lin_k_replicated = true;
    } else {
        return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism over %d GPUs: the model's %d linear-attention key "
                       "heads can be neither split nor replicated evenly (one of %d and %d must divide the other)",
                       world, k_heads, k_heads, world);
    }
    return EM_OK;
}
