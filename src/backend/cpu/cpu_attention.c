/* cpu_attention.c — causal GQA attention over the paged KV cache.
 *
 * One task per (query row, head): scores against every visible key, a
 * max-subtracted softmax, then the weighted sum of values. Prefill and
 * decode run the very same arithmetic per (row, head), so a sequence decoded
 * step by step gets the attention outputs of its full-sequence prefill. */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

typedef struct attn_job {
    cpu_backend *cb;
    float *out;
    const float *q;
    const em_kv_view *kv;
    const int32_t *pos;
    int n_heads, n_kv, head_dim;
    float scale;
    int window;
} attn_job;

static inline const float *kv_row(float *const *blocks, int block_size, int n_kv, int head_dim, int j, int h) {
    return blocks[j / block_size] + ((size_t)(j % block_size) * (size_t)n_kv + (size_t)h) * (size_t)head_dim;
}

static void attn_task(void *ctx, int task, int thread) {
    const attn_job *a = ctx;
    int row = task / a->n_heads, h = task % a->n_heads;
    int kvh = h / (a->n_heads / a->n_kv), hd = a->head_dim;
    int p = a->pos[row];
    int start = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    int n_keys = p - start + 1;
    float *scores = cpu_scratch(a->cb, thread, (size_t)n_keys);
    const float *q = a->q + ((size_t)row * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
    const em_kv_view *kv = a->kv;
    float mx = -INFINITY;
    for (int j = 0; j < n_keys; j++) {
        const float *k = kv_row(kv->k_blocks, kv->block_size, a->n_kv, hd, start + j, kvh);
        scores[j] = a->cb->k->dot(q, k, hd) * a->scale;
        if (scores[j] > mx) mx = scores[j];
    }
    float sum = 0;
    for (int j = 0; j < n_keys; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    float inv = 1.0f / sum;
    float *o = a->out + ((size_t)row * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
    memset(o, 0, (size_t)hd * sizeof *o);
    for (int j = 0; j < n_keys; j++) {
        const float *v = kv_row(kv->v_blocks, kv->block_size, a->n_kv, hd, start + j, kvh);
        a->cb->k->axpy(o, scores[j] * inv, v, hd);
    }
}

void cpu_attention(em_backend *be, float *out, const float *q, const em_kv_view *kv, const int32_t *pos, int n,
                   int n_heads, int n_kv, int head_dim, float scale, int window) {
    attn_job a = {be->impl, out, q, kv, pos, n_heads, n_kv, head_dim, scale, window};
    em_pool_for(((cpu_backend *)be->impl)->pool, n * n_heads, attn_task, &a);
}
