/* cpu_attention.c — causal GQA attention over the paged KV cache.
 *
 * Per (query row, head): scores against every visible key, a max-subtracted
 * softmax, then the weighted sum of values. Prefill and decode run the very
 * same arithmetic per (row, head), so a sequence decoded step by step gets
 * the attention outputs of its full-sequence prefill.
 *
 * Many rows (prefill): one task per (row, kv head) takes the query heads
 * that share the kv head together, key by key, so each key and value row is
 * read from memory once for all of them while it sits in L1 (the per-head
 * arithmetic unchanged). Few rows (decode): one task per (row, head), so
 * every thread has work. */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define ATT_GROUP_MAX 8 /* query heads a grouped task takes at once */

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

/* Query heads [h0, h0 + nh) of one row, all of kv head kvh. */
static void attn_heads(const attn_job *a, int row, int h0, int nh, int thread) {
    int kvh = h0 / (a->n_heads / a->n_kv), hd = a->head_dim;
    int p = a->pos[row];
    int start = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    int n_keys = p - start + 1;
    float *scores = cpu_scratch(a->cb, thread, (size_t)n_keys * (size_t)nh);
    const float *q = a->q + ((size_t)row * (size_t)a->n_heads + (size_t)h0) * (size_t)hd;
    float *o = a->out + ((size_t)row * (size_t)a->n_heads + (size_t)h0) * (size_t)hd;
    const em_kv_view *kv = a->kv;
    float mx[ATT_GROUP_MAX], inv[ATT_GROUP_MAX];
    for (int g = 0; g < nh; g++) mx[g] = -INFINITY;
    const cpu_kernels *kt = a->cb->k;
    bool rows = kt->dots && kt->axpy_rows && hd % 8 == 0;
    size_t stride = (size_t)a->n_kv * (size_t)hd;
    if (rows) { /* a KV block's rows at a time */
        for (int j = 0; j < n_keys;) {
            int in_block = kv->block_size - (start + j) % kv->block_size;
            int cnt = n_keys - j < in_block ? n_keys - j : in_block;
            const float *k = kv_row(kv->k_blocks, kv->block_size, a->n_kv, hd, start + j, kvh);
            for (int g = 0; g < nh; g++) kt->dots(q + (size_t)g * hd, k, stride, cnt, hd, scores + (size_t)g * n_keys + j);
            j += cnt;
        }
        for (int g = 0; g < nh; g++)
            for (int j = 0; j < n_keys; j++) {
                float *s = scores + (size_t)g * n_keys + j;
                *s *= a->scale;
                if (*s > mx[g]) mx[g] = *s;
            }
    } else {
        for (int j = 0; j < n_keys; j++) {
            const float *k = kv_row(kv->k_blocks, kv->block_size, a->n_kv, hd, start + j, kvh);
            for (int g = 0; g < nh; g++) {
                float s = kt->dot(q + (size_t)g * hd, k, hd) * a->scale;
                scores[(size_t)g * n_keys + j] = s;
                if (s > mx[g]) mx[g] = s;
            }
        }
    }
    for (int g = 0; g < nh; g++) {
        float *sc = scores + (size_t)g * n_keys, sum = 0;
        for (int j = 0; j < n_keys; j++) {
            sc[j] = expf(sc[j] - mx[g]);
            sum += sc[j];
        }
        inv[g] = 1.0f / sum;
    }
    memset(o, 0, (size_t)nh * (size_t)hd * sizeof *o);
    if (rows) {
        for (int g = 0; g < nh; g++) {
            float *sc = scores + (size_t)g * n_keys;
            for (int j = 0; j < n_keys; j++) sc[j] *= inv[g];
        }
        for (int j = 0; j < n_keys;) {
            int in_block = kv->block_size - (start + j) % kv->block_size;
            int cnt = n_keys - j < in_block ? n_keys - j : in_block;
            const float *v = kv_row(kv->v_blocks, kv->block_size, a->n_kv, hd, start + j, kvh);
            for (int g = 0; g < nh; g++) kt->axpy_rows(o + (size_t)g * hd, scores + (size_t)g * n_keys + j, v, stride, cnt, hd);
            j += cnt;
        }
        return;
    }
    for (int j = 0; j < n_keys; j++) {
        const float *v = kv_row(kv->v_blocks, kv->block_size, a->n_kv, hd, start + j, kvh);
        for (int g = 0; g < nh; g++) kt->axpy(o + (size_t)g * hd, scores[(size_t)g * n_keys + j] * inv[g], v, hd);
    }
}

/* one (row, head) */
static void attn_task(void *ctx, int task, int thread) {
    const attn_job *a = ctx;
    attn_heads(a, task / a->n_heads, task % a->n_heads, 1, thread);
}

/* one (row, kv head): its group of query heads, ATT_GROUP_MAX at a time */
static void attn_group_task(void *ctx, int task, int thread) {
    const attn_job *a = ctx;
    int row = task / a->n_kv, group = a->n_heads / a->n_kv, h0 = (task % a->n_kv) * group;
    for (int g = 0; g < group; g += ATT_GROUP_MAX)
        attn_heads(a, row, h0 + g, group - g < ATT_GROUP_MAX ? group - g : ATT_GROUP_MAX, thread);
}

void cpu_attention(em_backend *be, float *out, const float *q, const em_kv_view *kv, const int32_t *pos, int n,
                   int n_heads, int n_kv, int head_dim, float scale, int window) {
    attn_job a = {be->impl, out, q, kv, pos, n_heads, n_kv, head_dim, scale, window};
    em_pool *pool = ((cpu_backend *)be->impl)->pool;
    /* grouped tasks once there are enough of them to keep every thread busy */
    if (n_heads > n_kv && n * n_kv >= 4 * em_pool_threads(pool))
        em_pool_for(pool, n * n_kv, attn_group_task, &a);
    else
        em_pool_for(pool, n * n_heads, attn_task, &a);
}
