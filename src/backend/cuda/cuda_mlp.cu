/* cuda_mlp.cu — backend.h's matmul_mlp and matmul_add over FAST prefill
 * rows. matmul_mlp: the gate, up, SwiGLU and down of a
 * FAST batch of more than CUDA_SKINNY_MAX_M rows (prefill) as one
 * operation, so that its intermediates never exist in f32.
 *
 * Separately, the products would write gate and up in f32 ([M, F] each),
 * and the SwiGLU would read both and write its output in f32 and again as
 * the bf16 copy the down product reads: at 4,096 rows of the 8B shape,
 * 0.94 GB written and 0.47 GB read a layer besides the GEMMs' own work.
 * Here the gate and up products write bf16 (f32 sums rounded once, as a
 * bf16 model's products do) into the caller's act buffer — [M, F] f32 is
 * exactly room for both — the SwiGLU reads them and writes its bf16
 * output over the gate's half, and the down product reads that. This is
 * the one place a FAST batch rounds a product's output rather than only
 * its input: a regime boundary at CUDA_SKINNY_MAX_M rows (fewer rows keep
 * f32 gate and up, docs/architecture.md). With `add` the down product adds
 * its output into y (the residual stream) in its own epilogue, as
 * matmul_add's product does: the next norm then reads the stream once
 * instead of reading it and the product and writing the sum. Decode rows
 * go to the quantized one-launch MLP where it applies (cuda_qmatmul_mlp). */
#include "backend/cuda/cuda_internal.cuh"

/* Eight elements per thread: g[i] <- bf16(silu(g[i]) * u[i]) over rows of
 * n (a multiple of 8), block (x, y) taking rows y, y + gridDim.y, ... */
__global__ void swiglu_bf16_kernel(__nv_bfloat16 *g, const __nv_bfloat16 *u, int rows, int n) {
    cuda_pdl_enter();
    int i = ((int)blockIdx.x * (int)blockDim.x + (int)threadIdx.x) * 8;
    if (i >= n) return;
    for (int r = (int)blockIdx.y; r < rows; r += (int)gridDim.y) {
        size_t at = (size_t)r * n + i;
        uint4 gv = *(const uint4 *)(g + at), uv = *(const uint4 *)(u + at);
        uint32_t gw[4] = {gv.x, gv.y, gv.z, gv.w}, uw[4] = {uv.x, uv.y, uv.z, uv.w}, o[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float g0 = cuda_bf16((uint16_t)(gw[k] & 0xffffu)), g1 = cuda_bf16((uint16_t)(gw[k] >> 16));
            float u0 = cuda_bf16((uint16_t)(uw[k] & 0xffffu)), u1 = cuda_bf16((uint16_t)(uw[k] >> 16));
            o[k] = tc_pack(cuda_swiglu_one(g0, u0), cuda_swiglu_one(g1, u1));
        }
        *(uint4 *)(g + at) = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

/* Whether w takes a FAST tensor-core product of M rows here: bf16, or
 * quantized where the dequantizing GEMM takes it. */
static bool mlp_weight_ok(const cuda_backend *cb, const em_weight *w, int M) {
    if (w->rows <= 0 || w->cols <= 0) return false;
    return w->bits ? cuda_qgemm_fast_ok(cb, w, M, EM_MATH_FAST) : w->dtype == EM_BF16;
}

/* Whether a FAST product of M rows takes the tensor-core GEMM that can
 * round its output or add into it: more rows than the skinny kernel takes. */
static bool gemm_rows_fit(const cuda_backend *cb, int M, const em_weight *w, em_math math) {
    return math == EM_MATH_FAST && M > CUDA_SKINNY_MAX_M && mlp_weight_ok(cb, w, M);
}

static bool mlp_rows_fit(const cuda_backend *cb, int M, const em_weight *wg, const em_weight *wu,
                         const em_weight *wd, const float *act, const float *bg, const float *bu, const float *bd,
                         em_math math) {
    if (bg || bu || bd || !gemm_rows_fit(cb, M, wg, math) || !gemm_rows_fit(cb, M, wu, math) ||
        !gemm_rows_fit(cb, M, wd, math))
        return false;
    if (wu->rows != wg->rows || wu->cols != wg->cols || wd->cols != wg->rows || wd->rows != wg->cols) return false;
    return wg->rows % 8 == 0 && ((uintptr_t)act & 15) == 0;
}

static void mlp_rows(cuda_backend *cb, float *y, float *act, const float *x, int M, const em_weight *wg,
                     const em_weight *wu, const em_weight *wd, bool add) {
    int F = (int)wg->rows;
    if (!cuda_round_activations(cb, x, M, (int)wg->cols)) return;
    __nv_bfloat16 *g = (__nv_bfloat16 *)act, *u = g + (size_t)M * F;
    cuda_gemm_bf16(cb, g, CUDA_R_16BF, cb->xconv, M, wg, false);
    cuda_gemm_bf16(cb, u, CUDA_R_16BF, cb->xconv, M, wu, false);
    dim3 grid(cuda_blocks((size_t)F / 8, 256), M < 65535 ? (unsigned)M : 65535u);
    cuda_launch(swiglu_bf16_kernel, grid, 256, 0, cb->stream, g, (const __nv_bfloat16 *)u, M, F);
    CUDA_LAUNCHED(cb, "matmul_mlp (swiglu)");
    cuda_gemm_bf16(cb, y, CUDA_R_32F, g, M, wd, add); /* y may be x: x was read into xconv above */
}

bool cuda_matmul_mlp(em_backend *be, float *y, float *act, const float *x, int M, const em_weight *wg,
                     const em_weight *wu, const em_weight *wd, const float *bg, const float *bu, const float *bd,
                     em_math math, bool add) {
    if (!mlp_rows_fit((const cuda_backend *)be->impl, M, wg, wu, wd, act, bg, bu, bd, math) || (add && y == x))
        return cuda_qmatmul_mlp(be, y, act, x, M, wg, wu, wd, bg, bu, bd, math, add);
    cuda_backend *cb = cuda_enter(be);
    bool replay = cuda_graph_skip(cb, y, act, x, M, add);
    const em_weight *w[3] = {wg, wu, wd};
    for (int i = 0; i < 3; i++)
        replay = cuda_graph_skip(cb, w[i]->data, w[i]->scales, w[i]->biases, w[i]->dtype, w[i]->bits,
                                 w[i]->group_size, w[i]->scale_dtype, w[i]->rows, w[i]->cols);
    if (!replay) mlp_rows(cb, y, act, x, M, wg, wu, wd, add);
    return true;
}

bool cuda_matmul_add(em_backend *be, float *y, const float *x, int M, const em_weight *w, em_math math) {
    if (y == x) return false;
    if (!gemm_rows_fit((const cuda_backend *)be->impl, M, w, math)) return cuda_gemv_add(be, y, x, M, w, math);
    cuda_backend *cb = cuda_enter(be);
    if (cuda_graph_skip(cb, y, x, M, w->data, w->scales, w->biases, w->dtype, w->bits, w->group_size, w->scale_dtype,
                        w->rows, w->cols))
        return true;
    if (cuda_round_activations(cb, x, M, (int)w->cols)) cuda_gemm_bf16(cb, y, CUDA_R_32F, cb->xconv, M, w, true);
    return true;
}
