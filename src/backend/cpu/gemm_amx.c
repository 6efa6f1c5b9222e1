/* gemm_amx.c — FAST bf16 products on the matrix unit of recent Intel Xeons
 * (AMX: 8 tile registers of 16 rows x 64 bytes and a 16x16x32 bf16 product
 * per instruction).
 *
 * The AVX-512 BF16 dot-product tiles (kernels_avx512.c) bound CPU prefill;
 * one AMX instruction does the work of 32 of their dot products. Weights,
 * row-major with K contiguous, are the A operand as they lie in memory:
 * one tile is 16 weight rows x 32 inputs. The activations are the B
 * operand, which AMX wants in pairs of k (row k/2 holds every column's
 * values k and k+1): cpu_amx_pack rounds them to bf16 and lays them out so
 * once per product, while the weights — the bulk of the bytes — are read
 * in place. The accumulators therefore hold the transpose of y; each 16x16
 * tile is stored once, after its whole sum, and transposed into y. Each
 * output is a sum of bf16 x bf16 products in f32, the arithmetic of the
 * AVX-512 tile in another order (FAST).
 *
 * Linux gives the tile state only to a process that asks for it
 * (arch_prctl ARCH_REQ_XCOMP_PERM); cpu_amx_request asks. */
#include "backend/cpu/cpu_internal.h"

#include "tensor/dtype.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

bool cpu_amx_request(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    bool tile = d & (1u << 24), bf16 = d & (1u << 22);
    return tile && bf16 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* The tile configuration LDTILECFG reads (palette 1). */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

void cpu_amx_pack(uint16_t *xp, const float *x, int M, int K, int g0, int g1) {
    size_t kb = (size_t)K / 32;
    for (int g = g0; g < g1; g++)
        for (int m = 0; m < 16; m++) {
            int row = g * 16 + m;
            const float *xr = x + (size_t)row * (size_t)K;
            uint16_t *base = xp + (size_t)g * kb * 512 + (size_t)m * 2;
            for (int k = 0; k < K; k++) /* tile k/32, row (k%32)/2, column m, half k%2 */
                base[(size_t)(k / 32) * 512 + (size_t)(k % 32 / 2) * 32 + (size_t)(k & 1)] =
                    row < M ? f32_to_bf16(xr[k]) : 0;
        }
}

/* y[m*ldy + n] for the valid part of one transposed accumulator tile c
 * (c[i*16 + j]: weight row n0 + i, activation row m0 + j), a row of y at a
 * time so the stores are contiguous (the strided reads stay in L1). */
static void store_transposed(const float *c, int n0, int nr, int m0, int M, float *y, size_t ldy) {
    int ni = nr - n0 < 16 ? nr - n0 : 16, mj = M - m0 < 16 ? M - m0 : 16;
    for (int j = 0; j < mj; j++) {
        float *yr = y + (size_t)(m0 + j) * ldy + (size_t)n0;
        for (int i = 0; i < ni; i++) yr[i] = c[i * 16 + j];
    }
}

/* 32 weight rows (from wa, rows lda apart) against activation groups g and
 * g + 1: four accumulators, each K/32 products deep. */
AMX_TARGET static void amx_block(const uint16_t *wa, size_t lda, const uint16_t *b0, const uint16_t *b1, int kb,
                                 float c[4][256]) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int b = 0; b < kb; b++) {
        _tile_loadd(4, wa + (size_t)b * 32, lda * 2);
        _tile_loadd(5, wa + 16 * lda + (size_t)b * 32, lda * 2);
        _tile_loadd(6, b0 + (size_t)b * 512, 64);
        _tile_loadd(7, b1 + (size_t)b * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
}

AMX_TARGET static void amx_begin(void) {
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    /* as an asm with cfg as its input: GCC does not see that the builtin
     * reads cfg and dropped the stores above */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

AMX_TARGET static void amx_end(void) { _tile_release(); }

void cpu_amx_gemm(const uint16_t *xp, int M, const uint16_t *w, size_t ldw, int nr, int K, float *y, size_t ldy,
                  uint16_t *tail) {
    int kb = K / 32, groups = (M + 31) / 32 * 2;
    _Alignas(64) float c[4][256];
    amx_begin();
    for (int n = 0; n < nr; n += 32) {
        const uint16_t *wa = w + (size_t)n * ldw;
        size_t lda = ldw;
        if (nr - n < 32) { /* the last rows, padded to a whole pair of tiles */
            memset(tail, 0, (size_t)32 * (size_t)K * sizeof *tail);
            for (int r = 0; r < nr - n; r++) memcpy(tail + (size_t)r * K, wa + (size_t)r * ldw, (size_t)K * sizeof *tail);
            wa = tail;
            lda = (size_t)K;
        }
        for (int g = 0; g < groups; g += 2) {
            const uint16_t *b0 = xp + (size_t)g * (size_t)kb * 512, *b1 = b0 + (size_t)kb * 512;
            amx_block(wa, lda, b0, b1, kb, c);
            store_transposed(c[0], n, nr, g * 16, M, y, ldy);
            store_transposed(c[1], n, nr, g * 16 + 16, M, y, ldy);
            store_transposed(c[2], n + 16, nr, g * 16, M, y, ldy);
            store_transposed(c[3], n + 16, nr, g * 16 + 16, M, y, ldy);
        }
    }
    amx_end();
}

#else

bool cpu_amx_request(void) { return false; }
void cpu_amx_pack(uint16_t *xp, const float *x, int M, int K, int g0, int g1) {
    (void)xp, (void)x, (void)M, (void)K, (void)g0, (void)g1;
}
void cpu_amx_gemm(const uint16_t *xp, int M, const uint16_t *w, size_t ldw, int nr, int K, float *y, size_t ldy,
                  uint16_t *tail) {
    (void)xp, (void)M, (void)w, (void)ldw, (void)nr, (void)K, (void)y, (void)ldy, (void)tail;
}

#endif
