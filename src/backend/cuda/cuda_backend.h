/* cuda_backend.h — the CUDA backend (built when EMBER_HAVE_CUDA is defined).
 *
 * Weights and activations live in device memory; every operation is queued
 * on one stream and only download waits. Matmuls read bf16/f16/f32 weights
 * with f32 activations: a GEMV kernel for up to 8 rows at a time, cuBLAS
 * for larger batches (f32 SGEMM over weights widened in slices under EXACT
 * math; bf16 tensor-core GEMM with bf16-rounded activations under FAST).
 * MLX affine quantized weights stay packed on the device (cuda_qmatmul.cu);
 * the Gated DeltaNet operations of hybrid families are in cuda_gdn.cu. */
#ifndef EMBER_BACKEND_CUDA_BACKEND_H
#define EMBER_BACKEND_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no GPU or no driver. */
int cuda_device_count(void);
/* Creates the backend on GPU `device`. Free with em_backend_free. */
em_status cuda_backend_create(int device, em_backend **out);

#ifdef __cplusplus
}
#endif

#endif
