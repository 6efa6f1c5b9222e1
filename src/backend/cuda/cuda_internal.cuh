/* cuda_internal.cuh — state shared by the CUDA backend's files: the stream,
 * the cuBLAS handle, scratch buffers, the staging arena for per-call host
 * arrays, and the first error seen (reported at the next download). */
#ifndef EMBER_BACKEND_CUDA_INTERNAL_CUH
#define EMBER_BACKEND_CUDA_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

/* Per-call host arrays (positions, ids, block tables, inv_freq) are written
 * into a pinned host arena and copied to a device arena at the same offset
 * in one transfer just before the kernel that reads them. The arena is only
 * rewound after the stream has drained (at a download, or when full), so a
 * queued copy never reads bytes the host has overwritten. Identical arrays
 * staged again in the same step (the positions of every layer) are reused. */
#define CUDA_STAGE_RECENT 8

typedef struct cuda_stage {
    char *host;          /* pinned */
    char *dev;
    size_t cap, used, flushed;
    struct { size_t off, bytes; } recent[CUDA_STAGE_RECENT];
    int n_recent, next_recent;
} cuda_stage;

/* cuBLAS is opened when a CUDA backend is created (cuda_blas.cu), not
 * linked: its libraries are large, and a CPU-only run of a CUDA build
 * should not carry them. */
typedef struct cuda_blas {
    void *lib;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSetWorkspace_v2) set_workspace; /* NULL in a cuBLAS without it: its own pool then */
    /* the C entry point (C++ sees an overload set under this name) */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
} cuda_blas;

/* Opens cuBLAS into *b; false with the reason in why. */
bool cuda_blas_open(cuda_blas *b, char *why, size_t cap);
void cuda_blas_close(cuda_blas *b);

/* Recorded decode steps (cuda_graph.cu): a step's operations captured into
 * a CUDA graph, keyed by the caller's key and a hash of every operation's
 * arguments, so a replay can prove it issues what was recorded. */
#define CUDA_GRAPHS_MAX 128 /* decode steps of 1-64 rows, short prefills, room to spare */

typedef struct cuda_graph_entry {
    uint64_t key, args, last_used;
    cudaGraphExec_t exec;
} cuda_graph_entry;

typedef struct cuda_graphs {
    int mode;            /* em_graph_mode of the step in progress */
    int slot;            /* REPLAY: the entry being replayed */
    uint64_t key, args;  /* the step's key and its running argument hash */
    bool broken;         /* the step cannot be recorded or replayed */
    cudaError_t err_before;
    cuda_graph_entry e[CUDA_GRAPHS_MAX];
    int n;
    uint64_t clock;
    size_t replays, records, misses; /* for --verbose figures */
} cuda_graphs;

typedef struct cuda_backend {
    int device;
    cudaStream_t stream;
    cuda_blas fn;
    cublasHandle_t blas;
    cuda_stage stage;
    /* matmul scratch: activations rounded to bf16 (FAST), weight slices
     * widened to f32 (EXACT batches); grown on demand */
    void *blas_ws; /* the cuBLAS workspace, CUDA_BLAS_WORKSPACE_BYTES */
    void *xconv;
    size_t xconv_bytes;
    /* xconv may hold the bf16 copy of the previous operation's f32 output
     * (twin_src, twin_elems; written by that operation's own kernel, when
     * it ran at op_seq == twin_seq), which a FAST matmul of it issued next
     * takes instead of rounding it again (cuda_twin_make, cuda_twin_ready).
     * Any other operation in between ends that. */
    const float *twin_src;
    size_t twin_elems;
    uint64_t twin_seq, op_seq;
    float *wide;
    size_t wide_bytes;
    /* activations rounded to int8 once for a few-row product's blocks
     * (cuda_qgemv_i8.cu, three rows or more) */
    void *q8x;
    size_t q8x_bytes;
    float *att_part; /* attention splits' partial results */
    size_t att_part_bytes;
    int *att_count; /* per (row, kv head): splits done (CUDA_ATT_COUNT_CAP, zero between launches) */
    unsigned *grid_bar; /* a grid-wide barrier's count and generation (cuda_qgemv_pipe.cu; starts zeroed) */
    float *att_tile_part; /* the tiled attention's, for tiles whose keys are split */
    size_t att_tile_part_bytes;
    void *att_kv16; /* the FAST tiles' bf16 copy of a layer's keys and values (cuda_attention_fa.cu) */
    size_t att_kv16_bytes;
    void *amax_part; /* argmax_rows: each chunk's (value, index) pair */
    size_t amax_part_bytes;
    /* quantized matmul scratch: weight slices dequantized to bf16 (FAST) */
    void *wconv;
    size_t wconv_bytes;
    bool skinny_on; /* EMBER_CUDA_SKINNY: the skinny GEMM (cuda_skinny.cu) */
    bool qmma_on;   /* EMBER_CUDA_QMMA: the int8 tensor-core kernel (cuda_qmma.cu) */
    bool qtc_on;    /* EMBER_CUDA_QTC: its 4-bit products on bf16 tensor cores (cuda_qtc.cu) */
    int qtc_share; /* EMBER_CUDA_QTC_SHARE: of those, the shared-activation kernel: 0 never, 1 where a block takes
                      all of K, 2 also where K is split (cuda_qtc.cu) */
    float *qtc_part; /* its blocks' sums over a stretch of K, where K is split */
    size_t qtc_part_bytes;
    unsigned *qtc_count; /* per 128 weight rows of such a set: stretches done (n_sm EM_MATMUL_GROUP_MAX, zero between launches) */
    bool qpipe_on;  /* EMBER_CUDA_QPIPE: the pipelined int8 GEMV (cuda_qgemv_pipe.cu) */
    int qmlp;       /* EMBER_CUDA_QMLP: a quantized MLP in one pipelined launch (cuda_qgemv_pipe.cu): 0 never, 1 where it applies, 2 auto */
    bool fused_att; /* EMBER_CUDA_FUSED_ATTENTION: rope_attention_spans fuses */
    int n_sm;
    int smem_optin; /* the most dynamic shared memory a block may opt in to */
    cuda_graphs graphs;
    /* first failure of a queued operation; reported by download */
    cudaError_t err;
    cublasStatus_t blas_err;
    const char *err_where;
} cuda_backend;

/* Remembers the first error of an operation (void ops cannot return it). */
static inline void cuda_note(cuda_backend *cb, cudaError_t e, const char *where) {
    if (e != cudaSuccess && cb->err == cudaSuccess && cb->blas_err == CUBLAS_STATUS_SUCCESS) {
        cb->err = e;
        cb->err_where = where;
    }
}
static inline void cuda_note_blas(cuda_backend *cb, cublasStatus_t e, const char *where) {
    if (e != CUBLAS_STATUS_SUCCESS && cb->err == cudaSuccess && cb->blas_err == CUBLAS_STATUS_SUCCESS) {
        cb->blas_err = e;
        cb->err_where = where;
    }
}
/* After a kernel launch: records a launch failure. */
#define CUDA_LAUNCHED(cb, what) cuda_note((cb), cudaGetLastError(), (what))

/* Programmatic dependent launch (sm_90+). Every kernel of this backend is
 * launched with cuda_launch and starts with cuda_pdl_enter: it waits until
 * the kernel before it in the stream has finished and its writes are
 * visible, then lets the kernel after it be scheduled. So the next kernel's
 * launch and block set-up overlap this one's work instead of following its
 * last block, which is most of a small decode kernel's cost; the order of
 * every read and write is what plain stream order gives. Kernels of other
 * libraries (cuBLAS, NCCL) are launched plainly and wait as usual.
 * Only launches recorded into a step's graph are programmatic: on the H200
 * they make a 1B-shape decode step 2-5 % faster, while 4,096-token
 * prefills (run eagerly) were 7 % slower with programmatic launches.
 * cuda_pdl_now is set on the recording thread while it records, when
 * EMBER_CUDA_PDL allows (the default on sm_90 and newer); otherwise
 * kernels launch plainly and the wait is a no-op. */
extern bool cuda_pdl_allowed;
extern thread_local bool cuda_pdl_now;

__device__ __forceinline__ void cuda_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* RoPE, shared by the kernels that rotate (rope, rope_kv_write and the
 * decode attention that rotates its own queries and key), so their bits
 * agree. The rotation of pair i at position p: (cos, sin) times
 * attn_factor. */
__device__ __forceinline__ float2 rope_cs(int i, int p, const float *inv_freq, float attn_factor) {
    float ang = (float)p * inv_freq[i]; /* in f32, as the reference computes position * inv_freq */
    return make_float2(cosf(ang) * attn_factor, sinf(ang) * attn_factor);
}

/* Rotate-half on the pair (v[i], v[i + half]) by cs, in place; the
 * rotated pair is also returned. */
__device__ __forceinline__ float2 rope_apply(float *v, int i, int half, float2 cs) {
    float a = v[i], b = v[i + half];
    float2 r = make_float2(a * cs.x - b * cs.y, b * cs.x + a * cs.y);
    v[i] = r.x;
    v[i + half] = r.y;
    return r;
}

/* Loads from shared memory by 32-bit address (so a kernel's places in it
 * stay plain integers): 16 bytes, and two floats. */
__device__ __forceinline__ uint4 cuda_lds16(unsigned a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ float2 cuda_lds8f(unsigned a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}

/* 16 bytes global -> shared without passing through registers; with
 * valid false it writes zeros and reads nothing. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
/* 4 bytes global -> shared (for rows with no 16-byte alignment). */
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* Waits for all but the most recent group of this thread's copies. */
__device__ __forceinline__ void cp_async_wait_prior() { asm volatile("cp.async.wait_group 1;\n" ::); }
/* Waits for all but the N most recent groups of this thread's copies. */
template <int N> __device__ __forceinline__ void cp_async_wait_groups() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/* Waits for all of this thread's copies. */
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

template <typename... K, typename... A>
static inline void cuda_launch(void (*kernel)(K...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                               A &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = cuda_pdl_now ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<A &&>(args)...); /* a failure is read by CUDA_LAUNCHED */
}

static inline void cuda_graph_mix(cuda_backend *cb, uint64_t v) {
    uint64_t h = cb->graphs.args ^ (v + 0x9e3779b97f4a7c15ull + (cb->graphs.args << 6) + (cb->graphs.args >> 2));
    h ^= h >> 31;
    cb->graphs.args = h * 0xbf58476d1ce4e5b9ull;
}
template <typename T> static inline uint64_t cuda_graph_word(T v) {
    uint64_t w = 0;
    memcpy(&w, &v, sizeof v < sizeof w ? sizeof v : sizeof w);
    return w;
}
/* Every operation calls this with the arguments that shape what it
 * queues, before queuing anything. While a step is recorded or replayed it
 * folds them into the step's hash; during a replay it returns true and the
 * operation queues nothing (its host arrays are still staged, into the
 * offsets the recording copies from). */
template <typename... A> static inline bool cuda_graph_skip(cuda_backend *cb, A... a) {
    if (cb->graphs.mode == 0) return false;
    (cuda_graph_mix(cb, cuda_graph_word(a)), ...);
    return cb->graphs.mode == 2 /* EM_GRAPH_REPLAY */;
}

/* What cuda_matmul mixes into a recorded step's key for one product; an
 * operation that queues several products in one launch mixes each in turn,
 * so a step records the same key whichever way its products were queued. */
static inline bool cuda_graph_skip_matmul(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w,
                                          const float *bias, em_math math) {
    return cuda_graph_skip(cb, y, x, M, w->data, w->dtype, w->rows, w->cols, bias, (int)math, w->bits,
                           w->group_size, w->scales, w->biases);
}

/* Sets the backend's GPU as the calling thread's current device (a model
 * may be driven from several threads over its life) and returns the state. */
cuda_backend *cuda_enter(em_backend *be);
/* Makes room for `count` arrays of `bytes` in all in the staging arena, so
 * the puts of one operation never straddle a rewind. */
void cuda_stage_begin(cuda_backend *cb, size_t bytes, int count);
/* Waits for the stream and rewinds the staging arena. */
void cuda_stage_reset(cuda_backend *cb);
/* Stages a table of n pointers padded with NULLs to `cap` entries (cap >= n). */
const void *cuda_stage_table(cuda_backend *cb, const void *src, size_t n, size_t cap);
/* Copies n bytes of host data into the staging arena; returns the device
 * address it will have once cuda_stage_flush has queued the transfer, or
 * NULL on failure (noted). */
const void *cuda_stage_put(cuda_backend *cb, const void *src, size_t n);
/* Queues the transfer of everything staged since the last flush. */
void cuda_stage_flush(cuda_backend *cb);
/* Stages the block tables of every span (while a graph is recorded or
 * replayed each is padded to a power of two so a growing sequence keeps
 * the recorded sizes), the offsets of each row's key and value tables from
 * *base (toff: n key offsets, then n value offsets) and the positions.
 * `extra` bytes more (one array) are reserved in the same stretch of the
 * arena for the caller to put before its launch: a rewind in between would
 * move what was staged here. *rows is the batch's row count; false when
 * there is nothing to do or staging failed (noted). */
bool cuda_stage_spans(cuda_backend *cb, const em_kv_spans *s, const int32_t *pos, size_t extra,
                      float *const **base, const int32_t **toff, const int32_t **dpos, int *rows);
/* Ensures a scratch buffer of at least `bytes`; false on failure (noted).
 * Growing it forgets every recorded step. */
bool cuda_scratch(cuda_backend *cb, void **buf, size_t *cap, size_t bytes);
/* The same for a buffer that only operations never recorded use (the tiled
 * prefill attention runs eagerly): growing it forgets nothing, so a long
 * prompt's first chunks do not cost the recorded short prefills. */
bool cuda_scratch_eager(cuda_backend *cb, void **buf, size_t *cap, size_t bytes);
/* cuda_scratch_eager for a buffer the caller can do without: false, and
 * nothing noted, when the device has no room for it. */
bool cuda_scratch_try(cuda_backend *cb, void **buf, size_t *cap, size_t bytes);

/* The device memory's streaming-read bandwidth, bytes/s (cuda_probe.cu). */
double cuda_read_bandwidth(cuda_backend *cb);

/* Device-side dtype conversions. */
__device__ __forceinline__ float cuda_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float cuda_f16(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

/* silu(g) * u, as every SwiGLU of the backend computes it. */
__device__ __forceinline__ float cuda_swiglu_one(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* Tensor-core pieces (mma.sync, sm_80+) shared by the attention and matmul kernels. */
__device__ __forceinline__ uint32_t tc_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* Four 8x8 bf16 matrices from shared memory (lane L gives the address of
 * row L % 8 of matrix L / 8); _t: each transposed. */
__device__ __forceinline__ void tc_ldsm_x4(uint32_t *r, const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void tc_ldsm_x4_t(uint32_t *r, const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* d += a b for one m16n8k16 tile (bf16 in, f32 accumulate). */
__device__ __forceinline__ void tc_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Adds a block's warps' mma accumulators (NT tiles of 4 a lane) into warp
 * 0's, as a fixed tree (warp w + h into warp w, h = kw/2 .. 1, kw at most
 * CUDA_SKINNY_KSPLIT), through shared memory: the same order every run. */
template <int NT>
__device__ __forceinline__ void tc_reduce_warps(float (*acc)[4], int warp, int lane, int kw) {
    constexpr int F = NT * 4;
    __shared__ float red[(CUDA_SKINNY_KSPLIT / 2) * F * 32];
    for (int h = kw / 2; h >= 1; h /= 2) {
        if (warp >= h && warp < 2 * h) {
            float *dst = red + (size_t)(warp - h) * F * 32 + lane;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) dst[(nt * 4 + c) * 32] = acc[nt][c];
        }
        __syncthreads();
        if (warp < h) {
            const float *src = red + (size_t)warp * F * 32 + lane;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[nt][c] += src[(nt * 4 + c) * 32];
        }
        __syncthreads();
    }
}

/* Sum over the block in double; every thread gets the result. red holds
 * 32 values; the reduction order is fixed (deterministic). */
static __device__ __forceinline__ double cuda_block_sum_d(double v, double *red) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? red[lane] : 0.0;
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    double r = red[0];
    __syncthreads();
    return r;
}

/* (value, index) pairs ordered as tensor/argmax.h orders them: the larger
 * value wins, equal values go to the lower index, NaN never wins. The empty
 * pair (-inf, INT_MAX) loses to any real entry, -inf included. */
static __device__ __forceinline__ void argmax_take(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) {
        v = v2;
        i = i2;
    }
}

/* Reduces one (value, index) pair per thread to the block's, in thread 0. */
static __device__ __forceinline__ void argmax_block(float &v, int &at) {
    __shared__ float sv[32];
    __shared__ int si[32];
    for (int o = 16; o; o >>= 1) argmax_take(v, at, __shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, at, o));
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (!lane) sv[warp] = v, si[warp] = at;
    __syncthreads();
    if (warp) return;
    v = lane < nw ? sv[lane] : -INFINITY;
    at = lane < nw ? si[lane] : INT_MAX;
    for (int o = 16; o; o >>= 1) argmax_take(v, at, __shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, at, o));
}

static inline unsigned cuda_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* Operations by file. */
void cuda_matmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math);
void cuda_matmul_group(em_backend *be, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                       const float *const *biases, em_math math);

/* The matrices of one GEMV launch (one, or a matmul_group's): row v of their
 * concatenation is row v - start[g] of matrix g, start[g] <= v < start[g+1].
 * Passed by value, so a launch carries it in its parameters. */
typedef struct gemv_set {
    const void *w[EM_MATMUL_GROUP_MAX];
    const void *scales[EM_MATMUL_GROUP_MAX], *biases[EM_MATMUL_GROUP_MAX]; /* quantized weights */
    float *y[EM_MATMUL_GROUP_MAX];
    const float *bias[EM_MATMUL_GROUP_MAX];
    int start[EM_MATMUL_GROUP_MAX + 1];
    int count;
    int add; /* add each product to what its y holds (matmul_add) */
} gemv_set;

/* Each lane's partial sums acc[r][m] summed across the warp by a fixed
 * butterfly (every lane gets every sum): the GEMVs' last step, in an order
 * that does not depend on R, MR or the other rows. */
template <int R, int MR> __device__ __forceinline__ void cuda_warp_sums(float (*acc)[MR]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MR; m++) {
            float v = acc[r][m];
            for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            acc[r][m] = v;
        }
}

/* A GEMV's store of one result v, or its add to what y holds (matmul_add:
 * as the add kernel adds the product written alone). */
__device__ __forceinline__ void gemv_store(float *at, float v, int add) { *at = add ? *at + v : v; }

__device__ __forceinline__ int gemv_set_find(const gemv_set &s, int v) {
    int g = 0;
    while (g + 1 < s.count && v >= s.start[g + 1]) g++;
    return g;
}

/* The rmsnorm a GEMV applies to its activations as it reads them
 * (backend.h's norm_matmul_group, norm_matmul_swiglu): x is then the
 * residual stream, each element is multiplied by gain + goff before its
 * products, and each row's sums are scaled by 1 / sqrt(mean square + eps)
 * at the end (a row's norm is one factor of all its products). The normed
 * rows are never written; no norm kernel runs between the producer of x
 * and the products. gain NULL: plain activations. */
typedef struct gemv_norm {
    const float *gain;
    float goff, eps;
} gemv_norm;

/* A set of the n weights (and their outputs), rows in order. */
gemv_set gemv_set_make(int n, float *const *ys, const em_weight *const *ws, const float *const *biases);
/* cuda_qmma.cu: FAST products of CUDA_QMMA_MIN_M .. CUDA_QMMA_MAX_M rows
 * over 4- and 8-bit weights on int8 tensor cores, y = x · Wᵀ (+ bias), or
 * added into y. takes: whether it applies; cuda_qmma queues it (false:
 * nothing queued, x not 16-byte aligned). cuda_qmma_group: matmul_group's
 * products of one x in one launch, x rounded once, where each applies and
 * they are alike but for their rows (recorded-step arguments mixed in as
 * cuda_matmul mixes them); false: nothing queued. */
bool cuda_qmma_takes(const cuda_backend *cb, const em_weight *w, int M, em_math math);
/* cuda_qtc.cu: those products over 4-bit weights, of CUDA_QTC_MIN_M ..
 * CUDA_QTC_MAX_M rows, on bf16 tensor cores, the codes turned into bf16 in
 * registers (takes: whether it applies to w; set: as cuda_qmma for n
 * weights alike but for their rows, always queued). */
bool cuda_qtc_takes(const cuda_backend *cb, const em_weight *w);
bool cuda_qtc_set(cuda_backend *cb, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                  const float *const *biases, bool add);
bool cuda_qmma(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias, bool add);
bool cuda_qmma_group(cuda_backend *cb, int n, float *const *ys, const float *x, int M, const em_weight *const *ws,
                     const float *const *biases, em_math math);

/* cuda_skinny.cu: FAST products of CUDA_FAST_MIN_M .. CUDA_SKINNY_MAX_M rows
 * on tensor cores. fits: whether w can take part at M rows. cuda_skinny
 * queues ys[i] = xb · ws[i]ᵀ (+ biases[i]) for n such weights with equal
 * cols, xb the activations already rounded to bf16 ([M, cols]). */
bool cuda_skinny_fits(const cuda_backend *cb, const em_weight *w, int M);
void cuda_skinny(cuda_backend *cb, int n, float *const *ys, const em_weight *const *ws, const float *const *biases,
                 const void *xb, int M);
/* cuda_qgemv_i8.cu: the int8 GEMV over a set of 4-/8-bit matrices alike (FAST,
 * M <= 2), over rows normed by nm where nm.gain is set, each product added
 * to its y where s->add; false when it does not apply (nothing queued).
 * cuda_qgemv_i8_fits says beforehand whether it applies. */
bool cuda_qgemv_i8_fits(const gemv_set *s, const em_weight *w0, const float *x, int M);
bool cuda_qgemv_i8_set(cuda_backend *cb, const gemv_set *s, const em_weight *w0, const float *x, int M,
                       gemv_norm nm = gemv_norm{});
/* cuda_qgemv_pipe.cu: a quantized MLP of FAST decode rows (gate, up, SwiGLU,
 * down) in one launch (backend.h's matmul_mlp); false: nothing queued. */
bool cuda_qmatmul_mlp(em_backend *be, float *y, float *act, const float *x, int M, const em_weight *wg,
                      const em_weight *wu, const em_weight *wd, const float *bg, const float *bu, const float *bd,
                      em_math math, bool add);
/* cuda_mlp.cu: backend.h's matmul_mlp (FAST prefill batches here, decode
 * rows through cuda_qmatmul_mlp). */
bool cuda_matmul_mlp(em_backend *be, float *y, float *act, const float *x, int M, const em_weight *wg,
                     const em_weight *wu, const em_weight *wd, const float *bg, const float *bu, const float *bd,
                     em_math math, bool add);
/* cuda_qgemv_i8.cu: gate and up of 4-/8-bit weights with their SwiGLU, for
 * FAST decode rows (cuda_matmul_swiglu hands quantized weights here), over
 * rows normed by nm where nm.gain is set. */
bool cuda_qmatmul_swiglu(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                         const float *bg, const float *bu, em_math math, gemv_norm nm = gemv_norm{});
/* cuda_qgemv_pipe.cu: whether matmul_mlp would run an MLP of gate rows
 * like wg's as its one launch (the norm fusion then leaves it there). */
bool cuda_qmlp_preferred(const cuda_backend *cb, const em_weight *wg);
void cuda_attention(em_backend *be, float *out, const float *q, const em_kv_view *kv, const int32_t *pos, int n,
                    int n_heads, int n_kv, int head_dim, float scale, int window);
/* cuda_hadamard.cu: backend.h's hadamard (plain transforms only). */
void cuda_hadamard(em_backend *be, float *x, int rows, const hadamard *h);
void cuda_rmsnorm(em_backend *be, float *y, const float *x, const float *gain, int rows, int n, float eps,
                  float gain_offset);
void cuda_add_rmsnorm(em_backend *be, float *x, const float *h, float *y, const float *gain, int rows, int n, float eps,
                      float gain_offset);
void cuda_rope_qk(em_backend *be, float *q, float *k, int rows, int n_heads, int n_kv_heads, int head_dim,
                  int rot_dim, const int32_t *pos, const float *inv_freq, float attn_factor);
void cuda_rope(em_backend *be, float *x, int rows, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
               const float *inv_freq, float attn_factor);
void cuda_swiglu(em_backend *be, float *out, const float *gate, const float *up, int rows, int n, int ld_in);
void cuda_add(em_backend *be, float *y, const float *x, size_t n);
void cuda_embed(em_backend *be, float *out, const em_weight *table, const int32_t *ids, int n);
void cuda_copy_rows(em_backend *be, float *dst, int ld_dst, const float *src, int ld_src, int rows, int n);
void cuda_argmax_rows(em_backend *be, int32_t *ids, float *vals, const float *x, int rows, int n, int ld);
void cuda_sample_rows(em_backend *be, int32_t *ids, float *x, int rows, int n, int ld, const em_sample_params *params);
/* cuda_qmatmul.cu: MLX affine quantized weights (cuda_matmul dispatches,
 * inside its operation: an input's bf16 twin stays usable). */
void cuda_qmatmul(cuda_backend *cb, float *y, const float *x, int M, const em_weight *w, const float *bias,
                  em_math math);
/* Whether a FAST product of M rows with quantized w takes the dequantizing
 * tensor-core path (cuda_qgemm_rounded): 16 rows or more, where the int8
 * tensor-core kernel does not (cuda_qmma_takes). */
bool cuda_qgemm_fast_ok(const cuda_backend *cb, const em_weight *w, int M, em_math math);
/* y = (the activations rounded in cb->xconv) · Wᵀ (+ bias) for quantized W:
 * slices of W dequantized to bf16, then the bf16 GEMM. */
void cuda_qgemm_rounded(cuda_backend *cb, float *y, int M, const em_weight *w, const float *bias);
/* y = xb · Wᵀ (add: y +=) for quantized W and bf16 activations xb ([M,
 * cols]): the same slices and GEMM, y of ytype (CUDA_R_32F or
 * CUDA_R_16BF), no bias. */
void cuda_qgemm_bf16(cuda_backend *cb, void *y, cudaDataType_t ytype, const void *xb, int M, const em_weight *w,
                     bool add);
/* cuda_matmul.cu: y = xb · Wᵀ (add: y += it, rounded once) on tensor cores
 * for bf16 or quantized W (FAST): xb bf16 activations [M, cols], y of
 * ytype (CUDA_R_32F or CUDA_R_16BF), f32 sums, no bias. */
void cuda_gemm_bf16(cuda_backend *cb, void *y, cudaDataType_t ytype, const void *xb, int M, const em_weight *w,
                    bool add);
/* backend.h's matmul_add: FAST products of more than CUDA_SKINNY_MAX_M
 * rows over bf16 or quantized weights (the GEMM adds into y); false
 * otherwise, nothing queued. */
bool cuda_matmul_add(em_backend *be, float *y, const float *x, int M, const em_weight *w, em_math math);
/* cuda_matmul.cu: matmul_add's decode rows, y += x · Wᵀ through the GEMV
 * (the bits of the GEMV's product added as the add kernel adds it); false
 * where the GEMV does not take the product (nothing queued). */
bool cuda_gemv_add(em_backend *be, float *y, const float *x, int M, const em_weight *w, em_math math);
/* backend.h's norm_matmul_group and norm_matmul_swiglu: the GEMV over
 * rmsnorm'd rows of x, the norm applied as the rows are read. */
bool cuda_norm_matmul_group(em_backend *be, int n, float *const *ys, const float *x, const float *gain, float eps,
                            float gain_offset, int M, const em_weight *const *ws, const float *const *biases,
                            em_math math);
bool cuda_norm_matmul_swiglu(em_backend *be, float *out, const float *x, const float *gain, float eps,
                             float gain_offset, int M, const em_weight *wg, const em_weight *wu, const float *bg,
                             const float *bu, em_math math);
/* cuda_matmul.cu: x (M x K) rounded to bf16 into cb->xconv, unless its
 * producer's twin is there already; false (noted) without scratch. */
bool cuda_round_activations(cuda_backend *cb, const float *x, int M, int K);
/* Rows ids (device array) of a quantized table, dequantized to f32. */
void cuda_qembed(cuda_backend *cb, float *out, const em_weight *t, const int32_t *dids, int n);
/* cuda_gdn.cu: the Gated DeltaNet operations. */
void cuda_sigmoid_mul(em_backend *be, float *y, const float *gate, int rows, int n, int ld_gate);
void cuda_conv1d_silu(em_backend *be, float *y, const float *x, int n, int C, int ld, const float *w, int K,
                      float *state);
void cuda_gdn_gates(em_backend *be, float *g, float *beta, const float *a, const float *b, int ld_in,
                    const float *A_log, const float *dt_bias, int n, int Hv);
void cuda_gated_delta_rule(em_backend *be, float *out, const float *qkv, int ld, const float *g, const float *beta,
                           float *state, int n, int Hk, int Hv, int dk, int dv, int chunk);
bool cuda_gdn_mix_rows(em_backend *be, float *core, float *qkv, int C, const float *conv_w, int K, const float *g,
                       const float *beta, float *const *conv_states, float *const *ssm_states, int rows, int Hk, int Hv,
                       int dk, int dv);
void cuda_rmsnorm_gated(em_backend *be, float *y, const float *x, const float *z, const float *gain, int rows, int n,
                        float eps);
void cuda_kv_write(em_backend *be, const em_kv_view *kv, const float *k, const float *v, const int32_t *pos, int n,
                   int n_kv, int head_dim);
/* An operation about to write rows x n f32 values at y also writes their
 * bf16 rounding (to_bf16's bits) to the pointer returned, for a FAST
 * matmul issued next; NULL: too few rows for one, or no scratch. */
__nv_bfloat16 *cuda_twin_make(cuda_backend *cb, const float *y, int rows, int n);
/* Whether xconv holds x's elems values rounded, made by the operation
 * just before this one. */
static inline bool cuda_twin_ready(const cuda_backend *cb, const float *x, size_t elems) {
    return cb->twin_src == x && cb->twin_elems == elems && cb->twin_seq + 1 == cb->op_seq;
}
bool cuda_matmul_swiglu(em_backend *be, float *out, const float *x, int M, const em_weight *wg, const em_weight *wu,
                        const float *bg, const float *bu, em_math math);
void cuda_rope_kv_write_spans(em_backend *be, const em_kv_spans *s, float *q, float *k, const float *v,
                              const int32_t *pos, int n_heads, int n_kv, int head_dim, int rot_dim,
                              const float *inv_freq, float attn_factor);
void cuda_kv_write_spans(em_backend *be, const em_kv_spans *s, const float *k, const float *v, const int32_t *pos,
                         int n_kv, int head_dim);
void cuda_attention_spans(em_backend *be, float *out, const float *q, const em_kv_spans *s, const int32_t *pos,
                          int n_heads, int n_kv, int head_dim, float scale, int window);
bool cuda_rope_attention_spans(em_backend *be, float *out, const em_kv_spans *s, float *q, float *k, const float *v,
                               const int32_t *pos, int n_heads, int n_kv, int head_dim, int rot_dim,
                               const float *inv_freq, float attn_factor, float scale, int window);
/* Tiled attention for batches of many rows (cuda_attention_prefill.cu).
 * A plan (v, malloc'd) lists n_items work items of CUDA_TILE_FIELDS ints
 * (first row, rows, first key, last key, partial slot or -1, the offset of
 * its sequence's keys in the bf16 copy), heaviest first; then the n_rest
 * rows of spans too short for a tile (for the per-row kernel); then n_merge
 * merges of CUDA_MERGE_FIELDS ints (first row, rows, first slot, slots) for
 * tiles whose keys were split over several items, which write n_slots
 * partial results; then n_conv copies of CUDA_CONV_FIELDS ints (a row of
 * the sequence, its keys 0..n-1 the tiles read, their offset in the copy:
 * conv_keys keys in all) for the bf16 copy of the keys and values that
 * FAST tiles read (cuda_attention_fa.cu). */
#define CUDA_TILE_FIELDS 6
#define CUDA_MERGE_FIELDS 4
#define CUDA_CONV_FIELDS 3
#define CUDA_TILE_PAIRS 64 /* (query row, head) pairs per tile of the tiled kernel */
#define CUDA_TC_PAIRS 128  /* and of the tensor-core kernel */
typedef struct cuda_att_plan {
    int32_t *v;
    int n_items, n_rest, n_merge, n_slots, n_conv, conv_keys;
    int pairs; /* per tile: CUDA_TILE_PAIRS or CUDA_TC_PAIRS */
} cuda_att_plan;
bool cuda_attention_tiled_fits(cuda_backend *cb, int n_heads, int n_kv, int head_dim);
/* Merges one (query row, head) pair's partials of `splits` shares of its
 * keys (pp: the first share's (max, sum, head_dim values); the next share
 * `stride` floats on), by one warp: the lanes find the common maximum and
 * each share's weight (a share may hold no key the pair sees: maximum
 * -inf, weight 0; its own key is in some share), then each lane sums its
 * output dims over the shares in share order, so the bits depend only on
 * the partials. Writes out[at..at+hd) and, when ob, their bf16 rounding.
 * wsh: CUDA_MERGE_CHUNK floats of shared memory for the warp; hd <= 256. */
#define CUDA_MERGE_CHUNK 64
/* cuda_merge_pair for splits <= S and hd <= 32 * NJ: every
 * load of the pair's partials is issued at once into registers (the loop
 * over shares in shared memory waited on one load after another: 11 us a
 * layer for a cached prompt's tail); then the same sums, in the same order,
 * as the general path, so the bits are those it gives. */
template <int S, int NJ>
__device__ __forceinline__ void cuda_merge_regs(float *out, __nv_bfloat16 *ob, size_t at, const float *pp,
                                                size_t stride, int splits, int hd, int lane) {
    float ms[S], ls[S], v[S][NJ];
#pragma unroll
    for (int k = 0; k < S; k++) {
        if (k >= splits) break;
        const float *p = pp + (size_t)k * stride;
        ms[k] = p[0], ls[k] = p[1];
#pragma unroll
        for (int j = 0; j < NJ; j++) v[k][j] = lane + 32 * j < hd ? p[2 + lane + 32 * j] : 0.0f;
    }
    float mx = -INFINITY, l = 0.0f, acc[NJ];
#pragma unroll
    for (int k = 0; k < S; k++)
        if (k < splits) mx = fmaxf(mx, ms[k]);
#pragma unroll
    for (int j = 0; j < NJ; j++) acc[j] = 0.0f;
#pragma unroll
    for (int k = 0; k < S; k++) {
        if (k >= splits) break;
        float w = ms[k] > -INFINITY ? expf(ms[k] - mx) : 0.0f;
        l += ls[k] * w;
#pragma unroll
        for (int j = 0; j < NJ; j++) acc[j] += v[k][j] * w;
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int d = lane + 32 * j;
        if (d >= hd) break;
        out[at + d] = acc[j] / l;
        if (ob) ob[at + d] = __float2bfloat16_rn(acc[j] / l);
    }
}

__device__ __forceinline__ void cuda_merge_pair(float *out, __nv_bfloat16 *ob, size_t at, const float *pp,
                                                size_t stride, int splits, int hd, float *wsh, int lane) {
    if (splits <= 16 && hd <= 64) return cuda_merge_regs<16, 2>(out, ob, at, pp, stride, splits, hd, lane);
    if (splits <= 16 && hd <= 128) return cuda_merge_regs<16, 4>(out, ob, at, pp, stride, splits, hd, lane);
    if (splits <= 32 && hd <= 64) return cuda_merge_regs<32, 2>(out, ob, at, pp, stride, splits, hd, lane);
    float mx = -INFINITY, l = 0.0f;
    for (int k = lane; k < splits; k += 32) mx = fmaxf(mx, pp[k * stride]);
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}; /* dims lane + 32 j */
    for (int c0 = 0; c0 < splits; c0 += CUDA_MERGE_CHUNK) {
        int nc = splits - c0 < CUDA_MERGE_CHUNK ? splits - c0 : CUDA_MERGE_CHUNK;
        __syncwarp();
        for (int k = lane; k < nc; k += 32) {
            float ms = pp[(size_t)(c0 + k) * stride];
            wsh[k] = ms > -INFINITY ? expf(ms - mx) : 0.0f;
        }
        __syncwarp();
        for (int k = 0; k < nc; k++) l += pp[(size_t)(c0 + k) * stride + 1] * wsh[k]; /* every lane, in order */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int d = lane + 32 * j;
            if (d >= hd) break;
            float a = acc[j];
#pragma unroll 4
            for (int k = 0; k < nc; k++) a += pp[(size_t)(c0 + k) * stride + 2 + d] * wsh[k];
            acc[j] = a;
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int d = lane + 32 * j;
        if (d >= hd) break;
        out[at + d] = acc[j] / l;
        if (ob) ob[at + d] = __float2bfloat16_rn(acc[j] / l);
    }
}
/* Tiles of `pairs` pairs (at least the group of query heads per kv head).
 * False when out of memory. */
bool cuda_attention_plan(cuda_att_plan *p, const em_kv_spans *s, const int32_t *pos, int n_heads, int n_kv,
                         int window, int n_sm, int pairs);
static inline size_t cuda_att_plan_ints(const cuda_att_plan *p) {
    return (size_t)p->n_items * CUDA_TILE_FIELDS + (size_t)p->n_rest + (size_t)p->n_merge * CUDA_MERGE_FIELDS +
           (size_t)p->n_conv * CUDA_CONV_FIELDS;
}
/* The plan of a short chunk of one sequence (rows 0..rows-1 of the
 * batch): each tile's keys split into exactly `shares` items (some may be
 * empty) and merged, so the items and their grid depend only on the row
 * count, never on the positions — a recorded step stays valid as the
 * context grows. False when out of memory. */
bool cuda_attention_plan_shares(cuda_att_plan *p, int rows, const int32_t *pos, int n_heads, int n_kv, int window,
                                int pairs, int shares);
/* Queues the tiled kernel, or the tensor-core one for a plan of
 * CUDA_TC_PAIRS, and the merges of a plan staged at dplan; the other
 * arguments as cuda_stage_spans staged them. part: room for the plan's
 * partials (n_slots * n_kv * pairs * (head_dim + 2) floats), or NULL for
 * the eager scratch; ob (or NULL): out's bf16 rounding, which the merges
 * write, and the tiles too where the plan lists bf16 copies (n_conv: FAST
 * tiles go to cuda_attention_fa then), else only the merges (a plan whose
 * every tile is split: cuda_twin_make). */
void cuda_attention_tiled(cuda_backend *cb, float *out, __nv_bfloat16 *ob, float *part, const float *q,
                          float *const *base, const int32_t *toff, const int32_t *pos, const int32_t *dplan,
                          const cuda_att_plan *p, int n, int n_heads, int n_kv, int head_dim, int bs, float scale,
                          int window);
/* cuda_attention_tc.cu: work items of CUDA_TC_PAIRS on tensor cores, for
 * FAST batches (head_dim 64 or 128, where the shared memory it needs is
 * available). */
bool cuda_attention_tc_fits(cuda_backend *cb, int head_dim);
void cuda_attention_tc(cuda_backend *cb, unsigned blocks, float *out, float *part, const float *q, float *const *base,
                       const int32_t *toff, const int32_t *pos, const int32_t *tiles, int n, int n_heads, int n_kv,
                       int head_dim, int bs, float scale, int window);
/* cuda_attention_fa.cu: the same work items on tensor cores, reading a
 * bf16 copy of the keys and values that the plan's n_conv entries (at
 * conv) list, made first in a scratch buffer; ob (or NULL) gets out's
 * bf16 rounding from every tile. False, with nothing queued, when the
 * device has no room for the copy. */
bool cuda_attention_fa_fits(cuda_backend *cb, int head_dim);
bool cuda_attention_fa(cuda_backend *cb, unsigned blocks, float *out, __nv_bfloat16 *ob, float *part, const float *q,
                       float *const *base, const int32_t *toff, const int32_t *pos, const int32_t *tiles,
                       const int32_t *conv, const cuda_att_plan *p, int n, int n_heads, int n_kv, int head_dim, int bs,
                       float scale, int window);
/* The keys block (x, y) of a row at position p attends to: the row's
 * window (all keys up to p without one), or with splits (gridDim.y > 1)
 * the y-th of gridDim.y equal shares of it (empty when start > end). */
__device__ __forceinline__ void att_key_range(int p, int window, bool split, int *start, int *end) {
    int s0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, e = p;
    if (split) {
        int len = p - s0 + 1, per = (len + (int)gridDim.y - 1) / (int)gridDim.y;
        s0 += (int)blockIdx.y * per;
        e = s0 + per - 1 < p ? s0 + per - 1 : p;
    }
    *start = s0;
    *end = e;
}
/* cuda_attention_rows.cu: the per-row attention of `rows` rows (all n of
 * the batch, or those rmap lists) for head_dim 32/64/128 and 1/2/4/8 query
 * heads per kv head, over `splits` shares of each row's keys (part: the
 * splits' partials; else out; ob, when given, gets out's bf16 rounding:
 * cuda_twin_make). With count (rows * n_kv zeroed counters,
 * CUDA_ATT_SPLITS splits) the kernel also merges the partials into out;
 * without, attention_combine must.
 * With k set (decode rows only: one row a sequence, rmap NULL), q, k and v
 * are the rows' unrotated queries, keys and values: the kernel rotates
 * them as rope_kv_write does (its bits), the block whose keys hold the
 * row's own position writes that key and value into the cache and uses
 * them from shared memory, and every other key is read from the cache
 * before the kernel waits for the one before it. q and k are not written.
 * False when the shape is not covered (cuda_attention_rows_fits; nothing
 * queued). */
typedef struct cuda_rows_args {
    float *out;
    __nv_bfloat16 *ob;
    float *part;
    int *count;
    const float *q;
    float *const *base;
    const int32_t *toff, *pos, *rmap;
    int n, n_heads, n_kv, bs_shift, window;
    float scale;
    /* the fused rotation and cache write (k NULL: none) */
    const float *k, *v, *inv_freq;
    float attn_factor;
    int half; /* rotated pairs: rot_dim / 2 */
} cuda_rows_args;
bool cuda_attention_rows_fits(int hd, int group, const float *q, int bs);
bool cuda_attention_rows(cudaStream_t st, unsigned rows, unsigned splits, int group, int hd, int bs,
                         const cuda_rows_args *a);
em_graph_mode cuda_graph_begin(em_backend *be, uint64_t key);
em_status cuda_graph_end(em_backend *be, bool *ran);
void cuda_graph_reset(em_backend *be);
void cuda_graphs_free(cuda_backend *cb);

#endif
