/* cuda_backend.h — the CUDA backend (built when EMBER_HAVE_CUDA is defined).
 *
 * Weights and activations live in device memory; every operation is queued
 * on one stream and only download waits. Matmuls read bf16/f16/f32 weights
 * with f32 activations: a GEMV kernel for up to 8 rows at a time, cuBLAS
 * for larger batches (f32 SGEMM over weights widened in slices under EXACT
 * math; bf16 tensor-core GEMM with bf16-rounded activations under FAST).
 * MLX affine quantized weights stay packed on the device (cuda_qmatmul.cu,
 * cuda_qgemv_i8.cu);
 * the Gated DeltaNet operations of hybrid families are in cuda_gdn.cu. */
#ifndef EMBER_BACKEND_CUDA_BACKEND_H
#define EMBER_BACKEND_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device memory the backend allocates besides weights, KV cache and
 * the model's activations; `ember fit --device cuda` (model/fit_cuda.c)
 * predicts with the same numbers, so they live here, in plain C.
 *
 *   staging arena   CUDA_STAGE_MIN_BYTES of device memory (and as much
 *                   pinned host memory), doubled while one operation stages
 *                   more (never for the dense graph's block tables)
 *   cuBLAS          a workspace of CUDA_BLAS_WORKSPACE_BYTES handed to the
 *                   handle (cublasSetWorkspace), so cuBLAS allocates none
 *   matmul scratch  FAST products (M >= CUDA_FAST_MIN_M rows, bf16 weights)
 *                   round the activations to bf16: M x K x 2 bytes; EXACT
 *                   GEMMs of more than CUDA_GEMV_MAX_EXACT_M rows over
 *                   16-bit weights widen up to CUDA_WIDE_SLICE_ELEMS weights
 *                   at a time to f32. Each buffer grows to cuda_scratch_grow
 *                   of the largest request and is never shrunk. */
#define CUDA_STAGE_MIN_BYTES ((size_t)4 << 20)
#define CUDA_BLAS_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLAS's recommendation for Hopper */
/* FAST products over bf16 weights of this many rows or more round the
 * activations to bf16 and run on tensor cores; fewer rows take the GEMV,
 * which reloads the f32 activations through L1 for every row and so slows
 * with the rows. On the H200 (1B shape): a decode step of 2 sequences took
 * 1.8 ms on the GEMV, of 3 2.7 ms, of 3-4 on tensor cores 1.7 ms; a 7-row
 * prefill 3.5 ms on the GEMV, 1.7 ms on tensor cores. */
#ifndef CUDA_FAST_MIN_M
#define CUDA_FAST_MIN_M 3
#endif
#define CUDA_GEMV_MAX_EXACT_M 64
#define CUDA_WIDE_SLICE_ELEMS ((size_t)32 << 20) /* 128 MiB of widened f32 weights per SGEMM */
/* FAST products of CUDA_FAST_MIN_M .. CUDA_SKINNY_MAX_M rows over bf16
 * weights of at most CUDA_SKINNY_MAX_BYTES (rows a multiple of 16, K of
 * 32) run on the skinny tensor-core kernel (cuda_skinny.cu), which needs
 * no memory beyond its output: each block's warps split K into
 * cuda_skinny_split stretches. */
#define CUDA_SKINNY_MAX_M 32
#define CUDA_SKINNY_MAX_BYTES ((size_t)16 << 20)
#define CUDA_SKINNY_KSPLIT 8
/* FAST products of CUDA_QMMA_MIN_M .. CUDA_QMMA_MAX_M rows over 8-bit
 * weights (a decode step of that many sequences, a short prefill) run on
 * int8 tensor cores reading the codes once for all the rows (cuda_qmma.cu);
 * fewer rows keep the int8 GEMV (whose rows give the bits of single rows),
 * more go to the dequantizing bf16 GEMM. Over 4-bit weights the range is
 * CUDA_QTC_MIN_M .. CUDA_QTC_MAX_M, on bf16 tensor cores (cuda_qtc.cu). */
#define CUDA_QMMA_MIN_M 16
#define CUDA_QMMA_MAX_M 32
/* Over 4-bit weights the bf16 tensor-core kernel (cuda_qtc.cu) takes
 * CUDA_QTC_MIN_M .. CUDA_QTC_MAX_M rows: a tile of 8 activation rows costs
 * it no more weight traffic than one row, where the int8 GEMV's lanes redo
 * their dot products for every row, and past 32 rows it runs passes of 32
 * rather than write and read back a bf16 copy of the weights for cuBLAS.
 * EMBER_CUDA_QTC=0 puts those rows back on the GEMV and the GEMM. */
#ifndef CUDA_QTC_MIN_M
#define CUDA_QTC_MIN_M 3
#endif
#define CUDA_QTC_MAX_M 64
/* The fewest rows the shared-activation kernel takes (EMBER_CUDA_QTC_SHARE):
 * below, a stage waiting for the block's slowest copy costs more than the
 * activations it saves (cuda_qtc.cu). */
#define CUDA_QTC_SHARE_MIN_M 17
/* The stretches (warps per block) for K: the most, up to
 * CUDA_SKINNY_KSPLIT, that cut K into whole k32 steps. From K alone, so a
 * product's sums do not depend on what shares its launch. */
static inline int cuda_skinny_split(int K) {
    int s = CUDA_SKINNY_KSPLIT;
    while (s > 1 && K % (32 * s)) s /= 2;
    return s;
}
/* Attention over at most CUDA_ATT_SPLIT_MAX_ROWS rows (decode) splits each
 * row's keys over cuda_att_splits(rows) blocks whose partial results
 * (head_dim + 2 floats per row, head and split) live in a scratch buffer
 * grown like the matmul scratch. (64 splits for up to 16 rows were tried
 * on the H200: a one-row step's attention went from 16 to 11 us a layer
 * at 2,048 positions, but merging 64 partials cost more than that gained,
 * and a 7-row tail got slower: a block's fixed work, not its keys,
 * bounds it.) */
#define CUDA_ATT_SPLITS 16
#define CUDA_ATT_SPLIT_MAX_ROWS 64
/* Counters of the splits' in-kernel merge: one per (row, kv head) of a
 * split batch, for up to 64 kv heads (more merge in a second kernel). */
#define CUDA_ATT_COUNT_CAP (CUDA_ATT_SPLIT_MAX_ROWS * 64)
static inline int cuda_att_splits(int rows) { return rows <= CUDA_ATT_SPLIT_MAX_ROWS ? CUDA_ATT_SPLITS : 1; }
/* Head sizes the FAST prefill attention over a bf16 copy of the keys and
 * values takes (cuda_attention_fa.cu); ember fit counts the copy for them. */
static inline bool cuda_attention_fa_head_dim(int hd) { return hd == 64 || hd == 128 || hd == 256; }
/* A span of this many rows (a prefill chunk) goes to the tiled prefill
 * attention whatever the batch's size; dense.c records prefills only below it. */
#define CUDA_ATT_TILE_MIN_ROWS 16
/* Shorter FAST spans of one sequence (2 to 15 rows) attend on tensor cores
 * with each tile's keys split into this many items (cuda_attention.cu). */
#define CUDA_ATT_TAIL_SHARES 16
/* A scratch buffer grown for `bytes` gets a quarter more, so a slightly
 * larger batch next does not reallocate. */
static inline size_t cuda_scratch_grow(size_t bytes) { return bytes + bytes / 4; }

/* Where products over quantized weights go beyond the kernels above, and
 * the scratch they take there (cuda_qmatmul.cu, cuda_qgemv_i8.cu; ember fit
 * models the same, fit_cuda.c): EXACT rows up to CUDA_QGEMV_MAX_EXACT_M on
 * the quantized GEMV, more as f32 slices of W for SGEMM; FAST rows from
 * CUDA_QFAST_MIN_M as bf16 slices for the tensor-core GEMM; the int8 GEMV
 * rounds CUDA_Q8_MAX_M activation rows at a time. */
#define CUDA_QGEMV_MAX_EXACT_M 64
#define CUDA_QFAST_MIN_M 16
#define CUDA_QSLICE_ELEMS ((size_t)32 << 20)      /* dequantized f32 weights per SGEMM slice */
#define CUDA_QSLICE_BF16_ELEMS ((size_t)64 << 20) /* dequantized bf16 weights per GEMM slice */
#define CUDA_Q8_MAX_M 8
/* Rows of an N x K matrix a slice of at most cap values takes: all of them
 * when they fit, else a multiple of 128 rows (cuBLAS's tiles) that fits. */
static inline int cuda_qslice_rows(int N, int K, size_t cap) {
    size_t rows = cap / (size_t)K;
    if (rows >= (size_t)N) return N;
    return rows >= 128 ? (int)(rows / 128 * 128) : rows < 1 ? 1 : (int)rows;
}

/* Free and total memory of GPU `device` (creating this process's CUDA
 * context on it, which stays). EM_ERR_UNSUPPORTED without a GPU. */
em_status cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes);

/* Number of usable CUDA devices; 0 when there is no GPU or no driver. */
int cuda_device_count(void);
/* Creates the backend on GPU `device`. Free with em_backend_free. */
em_status cuda_backend_create(int device, em_backend **out);

#ifdef __cplusplus
}
#endif

#endif
