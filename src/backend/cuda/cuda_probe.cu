/* cuda_probe.cu — the device memory's streaming-read bandwidth, the
 * roofline that `ember bench` divides a decode step's weight bytes by.
 *
 * Decode reads weights and writes almost nothing, so the figure is a read
 * stream, not a copy: a copy's reads and writes share the bus and the
 * turnarounds between them cost it a few percent, which flattered every
 * fraction measured against it: the device-to-device copy this replaces
 * measured 2,940-2,990 GB/s on an H100 (reads and writes counted), this
 * read 3,100-3,170; on an H200 about 4,200 against 4,290-4,380. */
#include "backend/cuda/cuda_internal.cuh"

#define PROBE_THREADS 512
#define PROBE_UNROLL 8

/* Every thread reads 16-byte words a grid-stride apart, PROBE_UNROLL loads
 * in flight, bypassing L1 (each byte is read once); the XOR of the words
 * is stored only if it equals a value it never takes for the buffer's
 * contents (all bytes 1), so the loads cannot be dropped and nothing is
 * written. */
__global__ void __launch_bounds__(PROBE_THREADS) probe_read_kernel(const uint4 *p, size_t n, unsigned *sink) {
    cuda_pdl_enter();
    size_t stride = (size_t)gridDim.x * PROBE_THREADS, i = (size_t)blockIdx.x * PROBE_THREADS + threadIdx.x;
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (; i + (PROBE_UNROLL - 1) * stride < n; i += PROBE_UNROLL * stride) {
        uint4 v[PROBE_UNROLL];
#pragma unroll
        for (int u = 0; u < PROBE_UNROLL; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < PROBE_UNROLL; u++) acc.x ^= v[u].x, acc.y ^= v[u].y, acc.z ^= v[u].z, acc.w ^= v[u].w;
    }
    for (; i < n; i += stride) {
        uint4 v = __ldcs(p + i);
        acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) *sink = acc.x;
}

/* Reads of 1 GiB (twenty times the largest L2 of these cards), best of
 * four after a warm-up: bytes read per second; 0 if the memory or the
 * events cannot be had. */
double cuda_read_bandwidth(cuda_backend *cb) {
    const size_t bytes = (size_t)1 << 30, words = bytes / sizeof(uint4);
    uint4 *a = NULL;
    unsigned *sink = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 0;
    if (cudaMalloc((void **)&a, bytes) == cudaSuccess && cudaMalloc((void **)&sink, sizeof *sink) == cudaSuccess &&
        cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess &&
        cudaMemsetAsync(a, 1, bytes, cb->stream) == cudaSuccess) {
        unsigned blocks = (unsigned)cb->n_sm * 4; /* 2,048 threads a multiprocessor */
        for (int r = 0; r < 5; r++) {
            cudaEventRecord(e0, cb->stream);
            cuda_launch(probe_read_kernel, blocks, PROBE_THREADS, 0, cb->stream, (const uint4 *)a, words, sink);
            cudaEventRecord(e1, cb->stream);
            float ms = 0;
            if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0 &&
                r > 0) {
                double bw = (double)bytes / (ms * 1e-3);
                if (bw > best) best = bw;
            }
        }
    }
    cudaGetLastError();
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (a) cudaFree(a);
    if (sink) cudaFree(sink);
    return best;
}
