/* cuda_ring_stream.cu — what limits the steady state of a weight stream fed
 * to shared memory the way the pipelined int8 GEMV feeds it
 * (cuda_qgemv_pipe.cu): each warp a ring of stages filled by bulk copies
 * (cp.async.bulk) and counted in by a transaction barrier, with and without
 * the scales and biases as copies of their own, with them interleaved in
 * one copy, with deeper rings and fewer warps, with and without dp4a
 * arithmetic, against plain 16-byte loads into registers (the bf16 GEMV's
 * way). Rows of 2 KB of 4-bit codes (K = 4,096) and 128 bytes each of bf16
 * scales and biases (group 64); prints µs a pass and GB/s.
 *
 *   nvcc -O3 -arch=sm_90a -std=c++17 -o /tmp/ring_stream bench/cuda_ring_stream.cu
 *   /tmp/ring_stream [ROWS]   (128,256 rows: the 8B head; then 4,096 / 6,144 / 28,672)
 *
 * On the H200 (2026-12-07) every form streams the 8B head's 295 MB at
 * 4.2-4.4 TB/s, the plain loads' rate: 67.4 us for the loads, 68.2 with
 * three copies a stage, 67.9 interleaved, 68.5 with dp4a, 67.6-70.3 with
 * other depths and warp counts. The pipelined GEMV takes 93 us for the
 * same bytes, so what holds it back is its own work between the waits, not
 * the ring. Smaller products: 4,096 rows 4.4-4.7 us (plain loads 4.8),
 * 6,144 rows 4.6-5.4 (4.6), 28,672 rows 17.9-18.3 (15.8). */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
__device__ __forceinline__ void bar_init(unsigned bar) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory"); }
__device__ __forceinline__ void bulk(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ uint4 ld16(unsigned a) { uint4 v; asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a)); return v; }

// SC: 0 codes only; 1 codes + scales + biases as 3 copies; 2 one interleaved copy.
// COMP: 0 touch one word a line; 1 dp4a-like arithmetic per line.
template <int WARPS, int NS, int SL, int SC, int COMP>
__global__ void __launch_bounds__(WARPS * 32, 1) ring_kernel(const uint8_t *codes, const uint8_t *sc, const uint8_t *bi, long rows, int *out) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int LB = 512, RB = 2048, SB = 128;       // K = 4096 at 4 bits, group 64, bf16 scales: 4 lines, 128 B scales a row
    const int STB = SL * LB + (SC ? 2 * SL * 32 : 0);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned base = (unsigned)__cvta_generic_to_shared(sm) + warp * NS * STB;
    unsigned bars = (unsigned)__cvta_generic_to_shared(sm) + WARPS * NS * STB + warp * NS * 8;
    long W = (long)gridDim.x * WARPS, gw = (long)blockIdx.x * WARPS + warp;
    long r0 = gw * rows / W, r1 = (gw + 1) * rows / W;
    int lpr = 4, spr = lpr / SL;
    long nst = (r1 - r0) * spr;
    long pk = 0;
    auto issue = [&]() {
        if (pk >= nst) { pk++; return; }
        int s = pk % NS;
        long row = r0 + pk / spr; int j0 = (pk % spr) * SL;
        unsigned dst = base + s * STB, bar = bars + s * 8;
        if (SC == 2) {
            const uint8_t *src = codes + row * (RB + 2 * SB) + j0 * (LB + 64);
            bar_expect(bar, STB); bulk(dst, src, STB, bar);
        } else {
            unsigned cb = SL * LB;
            bar_expect(bar, cb + (SC ? 2 * SL * 32 : 0));
            bulk(dst, codes + row * RB + j0 * LB, cb, bar);
            if (SC) { bulk(dst + cb, sc + row * SB + j0 * 32, SL * 32, bar); bulk(dst + cb + SL * 32, bi + row * SB + j0 * 32, SL * 32, bar); }
        }
        pk++;
    };
    if (lane == 0) { for (int s = 0; s < NS; s++) bar_init(bars + s * 8); asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); for (int s = 0; s < NS; s++) issue(); }
    __syncwarp();
    int acc = 0;
    for (long k = 0; k < nst; k++) {
        int s = k % NS;
        bar_wait(bars + s * 8, (unsigned)(k / NS) & 1u);
        unsigned a = base + s * STB + lane * 16;
#pragma unroll
        for (int j = 0; j < SL; j++) {
            uint4 v = ld16(a + j * LB);
            if (COMP) {
                uint4 x = ld16(a + ((j + 1) % SL) * LB), y = ld16(a + ((j + 2) % SL) * LB);
                int d = __dp4a((int)(v.x & 0x0F0F0F0F), (int)x.x, 0); d = __dp4a((int)(v.x & 0xF0F0F0F0), (int)x.y, d);
                d = __dp4a((int)(v.y & 0x0F0F0F0F), (int)x.z, d); d = __dp4a((int)(v.y & 0xF0F0F0F0), (int)x.w, d);
                d = __dp4a((int)(v.z & 0x0F0F0F0F), (int)y.x, d); d = __dp4a((int)(v.z & 0xF0F0F0F0), (int)y.y, d);
                d = __dp4a((int)(v.w & 0x0F0F0F0F), (int)y.z, d); d = __dp4a((int)(v.w & 0xF0F0F0F0), (int)y.w, d);
                acc += d;
            } else acc ^= v.x;
        }
        __syncwarp();
        if (lane == 0) issue();
    }
    if (acc == 0x12345678) out[0] = acc;
}

// Register streaming (the bf16 GEMV's way): U 16-byte loads in flight a lane.
template <int U>
__global__ void reg_kernel(const uint4 *p, long n16, int *out) {
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x, T = (long)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    for (long i = t; i < n16; i += U * T) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) { long j = i + u * T; v[u] = j < n16 ? __ldg(p + j) : make_uint4(0, 0, 0, 0); }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].w;
    }
    if (acc == 0x12345678) out[0] = acc;
}

static int nsm;
template <int WARPS, int NS, int SL, int SC, int COMP>
static void run_ring(const char *name, uint8_t *codes, uint8_t *sc, uint8_t *bi, long rows, int *out) {
    auto k = ring_kernel<WARPS, NS, SL, SC, COMP>;
    const int STB = SL * 512 + (SC ? 2 * SL * 32 : 0);
    size_t smem = (size_t)WARPS * NS * (STB + 8);
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++) k<<<nsm, WARPS * 32, smem>>>(codes, sc, bi, rows, out);
    cudaEventRecord(e0);
    const int R = 20;
    for (int i = 0; i < R; i++) k<<<nsm, WARPS * 32, smem>>>(codes, sc, bi, rows, out);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    double bytes = (double)rows * (2048 + (SC ? 256 : 0));
    cudaError_t err = cudaGetLastError();
    printf("%-34s smem %6zu  %7.1f us  %7.1f GB/s %s\n", name, smem, ms * 1000 / R, bytes * R / (ms * 1e-3) / 1e9, err ? cudaGetErrorString(err) : "");
}
template <int U> static void run_reg(const char *name, uint8_t *p, size_t bytes, int *out, int bpsm) {
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++) reg_kernel<U><<<nsm * bpsm, 256>>>((const uint4 *)p, bytes / 16, out);
    cudaEventRecord(e0);
    const int R = 20;
    for (int i = 0; i < R; i++) reg_kernel<U><<<nsm * bpsm, 256>>>((const uint4 *)p, bytes / 16, out);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("%-34s %7.1f us  %7.1f GB/s\n", name, ms * 1000 / R, (double)bytes * R / (ms * 1e-3) / 1e9);
}

int main(int argc, char **argv) {
    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
    long rows = argc > 1 ? atol(argv[1]) : 128256;  // the 8B head
    uint8_t *codes, *sc, *bi; int *out;
    cudaMalloc(&codes, rows * 2304 + 4096); cudaMalloc(&sc, rows * 128); cudaMalloc(&bi, rows * 128); cudaMalloc(&out, 64);
    cudaMemset(codes, 1, rows * 2304); cudaMemset(sc, 2, rows * 128); cudaMemset(bi, 3, rows * 128);
    printf("rows %ld (%.1f MB codes), %d SMs\n", rows, rows * 2048 / 1e6, nsm);
    run_reg<8>("reg U8 256t x8/SM", codes, rows * 2048, out, 8);
    run_reg<4>("reg U4 256t x8/SM", codes, rows * 2048, out, 8);
    run_reg<8>("reg U8 256t x8/SM (+sc size)", codes, rows * 2304, out, 8);
    run_ring<32, 2, 4, 0, 0>("ring w32 ns2 sl4 codes", codes, sc, bi, rows, out);
    run_ring<32, 2, 4, 1, 0>("ring w32 ns2 sl4 codes+sc+bi", codes, sc, bi, rows, out);
    run_ring<32, 2, 4, 2, 0>("ring w32 ns2 sl4 interleaved", codes, sc, bi, rows, out);
    run_ring<32, 2, 4, 1, 1>("ring w32 ns2 sl4 3copies+dp4a", codes, sc, bi, rows, out);
    run_ring<32, 2, 4, 2, 1>("ring w32 ns2 sl4 inter+dp4a", codes, sc, bi, rows, out);
    run_ring<32, 3, 4, 1, 0>("ring w32 ns3 sl4 3copies", codes, sc, bi, rows, out);
    run_ring<32, 3, 4, 2, 0>("ring w32 ns3 sl4 interleaved", codes, sc, bi, rows, out);
    run_ring<32, 4, 2, 1, 0>("ring w32 ns4 sl2 3copies", codes, sc, bi, rows, out);
    run_ring<32, 1, 4, 1, 0>("ring w32 ns1 sl4 3copies", codes, sc, bi, rows, out);
    run_ring<16, 4, 4, 1, 0>("ring w16 ns4 sl4 3copies", codes, sc, bi, rows, out);
    run_ring<16, 6, 4, 2, 0>("ring w16 ns6 sl4 interleaved", codes, sc, bi, rows, out);
    run_ring<8, 8, 4, 1, 0>("ring w8 ns8 sl4 3copies", codes, sc, bi, rows, out);
    run_ring<8, 12, 4, 2, 0>("ring w8 ns12 sl4 interleaved", codes, sc, bi, rows, out);
    run_ring<8, 8, 4, 2, 1>("ring w8 ns8 sl4 inter+dp4a", codes, sc, bi, rows, out);
    // the same with smaller products: the o projection (4096 rows) and q/k/v (6144)
    for (long r : {4096L, 6144L, 28672L}) {
        printf("-- rows %ld\n", r);
        run_reg<8>("reg U8 256t x8/SM", codes, r * 2048, out, 8);
        run_ring<32, 2, 4, 1, 0>("ring w32 ns2 sl4 3copies", codes, sc, bi, r, out);
        run_ring<32, 2, 4, 2, 0>("ring w32 ns2 sl4 interleaved", codes, sc, bi, r, out);
        run_ring<32, 3, 4, 2, 0>("ring w32 ns3 sl4 interleaved", codes, sc, bi, r, out);
        run_ring<16, 6, 4, 2, 0>("ring w16 ns6 sl4 interleaved", codes, sc, bi, r, out);
    }
    return 0;
}
