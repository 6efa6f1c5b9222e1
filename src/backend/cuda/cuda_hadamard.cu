/* cuda_hadamard.cu — backend.h's hadamard: rows multiplied by H/√n, the
 * online rotation of a block's normed input (tensor/hadamard.h).
 *
 * A block a row, the row in shared memory: the butterflies of the power-of-
 * two factor stage by stage (each pair's sum and difference, as the CPU's
 * fast transform forms them), then each Paley factor, innermost first, as
 * sums over its q inputs in order from zero (its entries are ±1, so every
 * product is exact and a fused multiply-add rounds as the CPU's add does),
 * then the scale. Every value is computed by the same operations in the
 * same order as hadamard_right's, so the bits are the CPU backend's. */
#include "backend/cuda/cuda_internal.cuh"

#define HAD_THREADS 1024

struct had_args {
    float *x;
    int n, p, n_paley;
    int q[2];
    int8_t pm[2][400]; /* each Paley factor, q x q entries */
    float norm;
};

__global__ void __launch_bounds__(HAD_THREADS) hadamard_kernel(had_args a) {
    extern __shared__ float hs[];
    float *v = hs, *t = hs + a.n;
    cuda_pdl_enter();
    float *row = a.x + (size_t)blockIdx.x * a.n;
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) v[i] = row[i];
    __syncthreads();
    const int half = a.p / 2;
    for (int len = 1; len < a.p; len *= 2) { /* pair k: block k / half, then its place among the block's pairs */
        for (int k = threadIdx.x; k < a.n / 2; k += blockDim.x) {
            int kk = k % half, i = (k / half) * a.p + (kk / len) * 2 * len + kk % len;
            float u = v[i], w = v[i + len];
            v[i] = u + w, v[i + len] = u - w;
        }
        __syncthreads();
    }
    int stride = a.p;
    for (int f = a.n_paley - 1; f >= 0; f--) {
        const int q = a.q[f];
        const int8_t *hq = a.pm[f];
        for (int i = threadIdx.x; i < a.n; i += blockDim.x) {
            /* output i = o + r·stride + b: row r of the factor over inputs o + c·stride + b */
            int o = i / (q * stride) * (q * stride), r = i / stride % q, b = i % stride;
            float acc = 0.0f;
            for (int c = 0; c < q; c++) acc += (float)hq[c * q + r] * v[o + c * stride + b];
            t[i] = acc;
        }
        __syncthreads();
        float *sw = v;
        v = t, t = sw;
        stride *= q;
    }
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) row[i] = v[i] * a.norm;
}

void cuda_hadamard(em_backend *be, float *x, int rows, const hadamard *h) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0) return;
    if (cuda_graph_skip(cb, x, rows, h->n, h->m, h->p)) return;
    size_t smem = 2 * (size_t)h->n * sizeof(float);
    if (!h->plain || h->n > INT32_MAX / 2 || smem > (size_t)cb->smem_optin) {
        cuda_note(cb, cudaErrorInvalidValue, !h->plain ? "hadamard: only plain transforms run on the GPU"
                                                       : "hadamard: the order exceeds a block's shared memory");
        return;
    }
    had_args a = {};
    a.x = x, a.n = (int)h->n, a.p = (int)h->p, a.n_paley = h->n_paley;
    for (int f = 0; f < h->n_paley; f++) {
        a.q[f] = h->q[f];
        memcpy(a.pm[f], h->pm[f], (size_t)h->q[f] * (size_t)h->q[f]);
    }
    a.norm = (float)(1.0 / sqrt((double)h->n));
    cuda_note(cb, cudaFuncSetAttribute(hadamard_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              "hadamard: shared memory");
    cuda_launch(hadamard_kernel, (unsigned)rows, HAD_THREADS, smem, cb->stream, a);
    CUDA_LAUNCHED(cb, "hadamard");
}
