/* cuda_prefetch.cu — weights brought into L2 ahead of their product.
 *
 * A decode step's attention, norms and rope read little, so the card's
 * memory idles while they run, and a weight-streaming product that follows
 * starts cold. The model names the weights whose product comes next
 * (em_backend_ops.prefetch); a small kernel hands the card bulk L2
 * prefetches of them (cp.async.bulk.prefetch.L2: no registers, no shared
 * memory, no completion to wait for), up to half the L2, so the product
 * finds them there. Nothing is computed, so no result depends on it.
 *
 * A multiprocessor issues such prefetches at a few hundred GB/s: measured
 * on the H200, one block issuing 25 MB took about 100 us, which the next
 * kernel waited for (an 8B decode step 5 times slower). So the chunks are
 * spread over a block a multiprocessor, a few each. */
#include "backend/cuda/cuda_internal.cuh"

#define PF_RANGES 12            /* 3 ranges (codes, scales, biases) for 4 weights */
#define PF_CHUNK (64u << 10)    /* bytes one prefetch instruction asks for */
#define PF_THREADS 32

struct pf_ranges {
    const char *p[PF_RANGES];
    unsigned long long n[PF_RANGES];
    int count;
};

/* Chunk i of the ranges (laid end to end) goes to block i % gridDim.x.
 * The prefetches go out before the wait for the kernel before: weights
 * never depend on it. The wait keeps stream order for the kernel after,
 * which waits on this one's end only. */
__global__ void __launch_bounds__(PF_THREADS) prefetch_kernel(pf_ranges r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned long long first = 0; /* the first chunk of range i */
    for (int i = 0; i < r.count; i++) {
        unsigned long long chunks = (r.n[i] + PF_CHUNK - 1) / PF_CHUNK;
        /* this thread's chunks c = first + k: c % gridDim.x == block, (c / gridDim.x) % PF_THREADS == thread */
        unsigned long long c = first + (blockIdx.x + (unsigned long long)gridDim.x * threadIdx.x + gridDim.x * PF_THREADS -
                                        first % ((unsigned long long)gridDim.x * PF_THREADS)) %
                                           ((unsigned long long)gridDim.x * PF_THREADS);
        for (; c < first + chunks; c += (unsigned long long)gridDim.x * PF_THREADS) {
            unsigned long long off = (c - first) * PF_CHUNK;
            unsigned len = (unsigned)(r.n[i] - off < PF_CHUNK ? r.n[i] - off : PF_CHUNK) & ~15u;
            if (len) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.p[i] + off), "r"(len) : "memory");
        }
        first += chunks;
    }
#endif
    cuda_pdl_enter();
}

/* Adds [p, p + n) to the ranges, within what is left of the budget; 16-byte
 * aligned ends (what the instruction takes). */
static void pf_add(pf_ranges *r, const void *p, size_t n, size_t *left) {
    uintptr_t a = ((uintptr_t)p + 15) & ~(uintptr_t)15;
    if (!p || r->count == PF_RANGES || *left == 0) return;
    n -= n < a - (uintptr_t)p ? n : a - (uintptr_t)p;
    n = (n < *left ? n : *left) & ~(size_t)15;
    if (!n) return;
    r->p[r->count] = (const char *)a, r->n[r->count++] = n;
    *left -= n;
}

/* A weight's codes and its scales and biases, or the first rows of them
 * that the budget covers. */
static void pf_weight(pf_ranges *r, const em_weight *w, size_t *left) {
    size_t total = em_weight_bytes(w), rows = (size_t)w->rows;
    if (!total || !rows) return;
    size_t take = total <= *left ? rows : *left / (total / rows);
    if (!take) return;
    if (!w->bits) {
        pf_add(r, w->data, take * (size_t)w->cols * dtype_size(w->dtype), left);
        return;
    }
    size_t groups = (size_t)(w->cols / w->group_size), sb = take * groups * dtype_size(w->scale_dtype);
    pf_add(r, w->data, take * (size_t)w->cols * (size_t)w->bits / 8, left);
    pf_add(r, w->scales, sb, left);
    pf_add(r, w->biases, sb, left);
}

void cuda_prefetch(em_backend *be, const em_weight *const *ws, int n) {
    cuda_backend *cb = cuda_enter(be);
    if (!cb->prefetch_budget) return;
    pf_ranges r;
    memset(&r, 0, sizeof r);
    size_t left = cb->prefetch_budget;
    for (int i = 0; i < n && left; i++)
        if (ws[i]) pf_weight(&r, ws[i], &left);
    if (!r.count) return;
    if (cb->graphs.mode) {
        for (int i = 0; i < r.count; i++) cuda_graph_mix(cb, cuda_graph_word(r.p[i])), cuda_graph_mix(cb, r.n[i]);
        if (cb->graphs.mode == 2 /* EM_GRAPH_REPLAY */) return;
    }
    unsigned long long chunks = 0;
    for (int i = 0; i < r.count; i++) chunks += (r.n[i] + PF_CHUNK - 1) / PF_CHUNK;
    unsigned blocks = (unsigned)(chunks < (unsigned long long)cb->n_sm ? chunks : (unsigned long long)cb->n_sm);
    cuda_launch(prefetch_kernel, blocks, PF_THREADS, 0, cb->stream, r);
    CUDA_LAUNCHED(cb, "prefetch");
}
