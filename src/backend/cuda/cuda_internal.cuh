/* cuda_internal.cuh — state shared by the CUDA backend's files: the stream,
 * the cuBLAS handle, scratch buffers, the staging arena for per-call host
 * arrays, and the first error seen (reported at the next download). */
#ifndef EMBER_BACKEND_CUDA_INTERNAL_CUH
#define EMBER_BACKEND_CUDA_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

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
    /* the C entry point (C++ sees an overload set under this name) */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
} cuda_blas;

/* Opens cuBLAS into *b; false with the reason in why. */
bool cuda_blas_open(cuda_blas *b, char *why, size_t cap);
void cuda_blas_close(cuda_blas *b);

typedef struct cuda_backend {
    int device;
    cudaStream_t stream;
    cuda_blas fn;
    cublasHandle_t blas;
    cuda_stage stage;
    /* matmul scratch: activations rounded to bf16 (FAST), weight slices
     * widened to f32 (EXACT batches); grown on demand */
    void *xconv;
    size_t xconv_bytes;
    float *wide;
    size_t wide_bytes;
    /* quantized matmul scratch: weight slices dequantized to bf16 (FAST) */
    void *wconv;
    size_t wconv_bytes;
    int n_sm;
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

/* Sets the backend's GPU as the calling thread's current device (a model
 * may be driven from several threads over its life) and returns the state. */
cuda_backend *cuda_enter(em_backend *be);
/* Makes room for `count` arrays of `bytes` in all in the staging arena, so
 * the puts of one operation never straddle a rewind. */
void cuda_stage_begin(cuda_backend *cb, size_t bytes, int count);
/* Copies n bytes of host data into the staging arena; returns the device
 * address it will have once cuda_stage_flush has queued the transfer, or
 * NULL on failure (noted). */
const void *cuda_stage_put(cuda_backend *cb, const void *src, size_t n);
/* Queues the transfer of everything staged since the last flush. */
void cuda_stage_flush(cuda_backend *cb);
/* Stages the block tables and positions of a KV view for one operation. */
bool cuda_stage_view(cuda_backend *cb, const em_kv_view *kv, const int32_t *pos, int n, float *const **kb,
                     float *const **vb, const int32_t **dpos);
/* Ensures a scratch buffer of at least `bytes`; false on failure (noted). */
bool cuda_scratch(cuda_backend *cb, void **buf, size_t *cap, size_t bytes);

/* Device-side dtype conversions. */
__device__ __forceinline__ float cuda_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float cuda_f16(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

static inline unsigned cuda_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* Operations by file. */
void cuda_matmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math);
void cuda_attention(em_backend *be, float *out, const float *q, const em_kv_view *kv, const int32_t *pos, int n,
                    int n_heads, int n_kv, int head_dim, float scale, int window);
void cuda_rmsnorm(em_backend *be, float *y, const float *x, const float *gain, int rows, int n, float eps,
                  float gain_offset);
void cuda_rope(em_backend *be, float *x, int rows, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
               const float *inv_freq, float attn_factor);
void cuda_swiglu(em_backend *be, float *out, const float *gate, const float *up, int rows, int n, int ld_in);
void cuda_add(em_backend *be, float *y, const float *x, size_t n);
void cuda_embed(em_backend *be, float *out, const em_weight *table, const int32_t *ids, int n);
void cuda_copy_rows(em_backend *be, float *dst, int ld_dst, const float *src, int ld_src, int rows, int n);
/* cuda_qmatmul.cu: MLX affine quantized weights (cuda_matmul dispatches). */
void cuda_qmatmul(em_backend *be, float *y, const float *x, int M, const em_weight *w, const float *bias, em_math math);
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
void cuda_rmsnorm_gated(em_backend *be, float *y, const float *x, const float *z, const float *gain, int rows, int n,
                        float eps);
void cuda_kv_write(em_backend *be, const em_kv_view *kv, const float *k, const float *v, const int32_t *pos, int n,
                   int n_kv, int head_dim);

#endif
