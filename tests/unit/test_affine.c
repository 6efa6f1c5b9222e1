/* MLX affine layout and RTN, checked against words packed by hand:
 * 2-bit and 3-bit groups whose scales, biases and packed bytes are worked
 * out in the comments; put/get round trips for every width; the edge value
 * of each group reproduced exactly. */
#include "test.h"

#include "quant/rtn.h"
#include "tensor/affine.h"

#include <stdint.h>

static void words_of(const uint8_t *bytes, int n_words, uint32_t *w) {
    for (int i = 0; i < n_words; i++)
        w[i] = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 | (uint32_t)bytes[4 * i + 2] << 16 |
               (uint32_t)bytes[4 * i + 3] << 24;
}

static void hand_2bit(void) {
    /* w = 0,1,2,3 repeated: min 0, max 3; |min| <= |max| so the edge is max
     * and the scale negative: scale = -(3-0)/3 = -1, q0 = rint(3/-1) = -3,
     * scale = 3/-3 = -1, bias = 3; q = rint((w-3)/-1) = 3-w = 3,2,1,0.
     * Byte: 3 | 2<<2 | 1<<4 | 0<<6 = 0x1B; every word 0x1B1B1B1B. */
    float w[32], s, b;
    for (int i = 0; i < 32; i++) w[i] = (float)(i % 4);
    uint8_t packed[8] = {0};
    rtn_quantize_row(w, 32, 2, 32, packed, &s, &b);
    uint32_t words[2];
    words_of(packed, 2, words);
    CHECK(words[0] == 0x1B1B1B1Bu && words[1] == 0x1B1B1B1Bu);
    CHECK(s == -1.0f && b == 3.0f);
    CHECK(f32_to_bf16(s) == 0xBF80 && f32_to_bf16(b) == 0x4040);
}

static void hand_3bit(void) {
    /* w = -(k % 8): min -7, max 0; |min| > |max| so the edge is min:
     * scale = 7/7 = 1, q0 = rint(-7/1) = -7, scale = -7/-7 = 1, bias = -7;
     * q = w + 7 = 7,6,5,4,3,2,1,0. Stream of 8 values = 24 bits:
     * 7 | 6<<3 | 5<<6 | 4<<9 | 3<<12 | 2<<15 | 1<<18 = 0x053977 -> bytes
     * 77 39 05, repeated; as little-endian words: 0x77053977, 0x39770539,
     * 0x05397705 (value 2 straddles bytes 0 and 1, value 10 words 0 and 1). */
    float w[32], s, b;
    for (int i = 0; i < 32; i++) w[i] = -(float)(i % 8);
    uint8_t packed[12] = {0};
    rtn_quantize_row(w, 32, 3, 32, packed, &s, &b);
    uint32_t words[3];
    words_of(packed, 3, words);
    CHECKF(words[0] == 0x77053977u && words[1] == 0x39770539u && words[2] == 0x05397705u, "%08x %08x %08x",
           words[0], words[1], words[2]);
    CHECK(s == 1.0f && b == -7.0f);
    float out[32];
    uint16_t s16 = f32_to_bf16(s), b16 = f32_to_bf16(b);
    affine_dequant(packed, &s16, &b16, EM_BF16, 3, 32, 32, 0, 0, 32, out);
    int bad = 0;
    for (int i = 0; i < 32; i++) bad += out[i] != w[i];
    CHECK(bad == 0);
}

static void zero_group(void) {
    /* all zeros: range 0, scale = -1e-7, edge 0, q0 = 0: bias 0, q = 0 */
    float w[64] = {0}, s[2], b[2];
    uint8_t packed[32] = {0};
    rtn_quantize_row(w, 64, 4, 32, packed, s, b);
    int nz = 0;
    for (int i = 0; i < 32; i++) nz += packed[i] != 0;
    CHECK(nz == 0 && b[0] == 0 && s[0] < 0 && s[0] > -2e-7f);
}

static void roundtrips(void) {
    static const int widths[] = {2, 3, 4, 5, 6, 8};
    uint64_t st = 7;
    for (int wi = 0; wi < 6; wi++) {
        int bits = widths[wi];
        uint8_t row[128 * 8 / 8 + 8] = {0};
        uint32_t vals[128];
        for (int k = 0; k < 128; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            vals[k] = (uint32_t)(st >> 40) & ((1u << bits) - 1);
            affine_put(row, k, bits, vals[k]);
        }
        int bad = 0;
        for (int k = 0; k < 128; k++) bad += affine_get(row, k, bits) != vals[k];
        CHECKF(bad == 0, "bits %d", bits);
        /* the stream definition: bit i of value k is stream bit k*bits+i */
        int bad2 = 0;
        for (int k = 0; k < 128; k++)
            for (int i = 0; i < bits; i++) {
                int sb = k * bits + i;
                bad2 += ((row[sb / 8] >> (sb % 8)) & 1) != ((vals[k] >> i) & 1);
            }
        CHECKF(bad2 == 0, "bits %d stream", bits);
        /* RTN keeps the edge (the larger-magnitude end) exact */
        float w[128], s[4], b[4];
        for (int k = 0; k < 128; k++) w[k] = (float)((int)vals[k] - 3) * 0.37f + 0.01f * (float)(k % 7);
        uint8_t p[128] = {0};
        rtn_quantize_row(w, 128, bits, 32, p, s, b);
        for (int g = 0; g < 4; g++) {
            float lo = w[g * 32], hi = lo;
            for (int i = 1; i < 32; i++) {
                lo = w[g * 32 + i] < lo ? w[g * 32 + i] : lo;
                hi = w[g * 32 + i] > hi ? w[g * 32 + i] : hi;
            }
            CHECKF(b[g] == (fabsf(lo) > fabsf(hi) ? lo : hi), "bits %d group %d bias %g", bits, g, b[g]);
        }
    }
}

/* Squared error of a row as a loader dequantizes it: scales and biases
 * rounded to bf16. */
static double stored_error(const float *w, int cols, int bits, int group, const uint8_t *p, const float *s,
                           const float *b) {
    double err = 0;
    for (int c = 0; c < cols; c++) {
        float sc = bf16_to_f32(f32_to_bf16(s[c / group])), bi = bf16_to_f32(f32_to_bf16(b[c / group]));
        double d = (double)sc * affine_get(p, c, bits) + bi - w[c];
        err += d * d;
    }
    return err;
}

/* The plain min/max map of each group (bias its minimum, scale its range
 * over the bins), as stored in bf16: the other rule --search tries. */
static double minmax_error(const float *w, int cols, int bits, int group) {
    double err = 0;
    float bins = (float)((1 << bits) - 1);
    for (int g0 = 0; g0 < cols; g0 += group) {
        float lo = w[g0], hi = w[g0];
        for (int i = 1; i < group; i++) lo = fminf(lo, w[g0 + i]), hi = fmaxf(hi, w[g0 + i]);
        float sc = bf16_to_f32(f32_to_bf16(fmaxf((hi - lo) / bins, 1e-7f))), bi = bf16_to_f32(f32_to_bf16(lo));
        for (int i = 0; i < group; i++) {
            float q = fminf(fmaxf(rintf((w[g0 + i] - bi) / sc), 0.0f), bins);
            double d = (double)sc * q + bi - w[g0 + i];
            err += d * d;
        }
    }
    return err;
}

/* --search never does worse than MLX's rounding or the plain min/max map on
 * any row, as stored in bf16 (its ladder starts at both), and does better
 * overall on Gaussian-like rows; its scales and biases are already bf16
 * values. */
static void search_not_worse(void) {
    enum { COLS = 256 };
    uint64_t r = 99;
    int worse = 0, groups = 0, not_bf16 = 0;
    double tot_rtn = 0, tot_search = 0;
    for (int bits = 2; bits <= 8; bits++) {
        if (bits == 7) continue;
        for (int group = 32; group <= 128; group *= 2)
            for (int rep = 0; rep < 20; rep++) {
                float w[COLS], s1[COLS / 32], b1[COLS / 32], s2[COLS / 32], b2[COLS / 32];
                for (int i = 0; i < COLS; i++) { /* sum of uniforms: near-Gaussian, one outlier sometimes */
                    float x = 0;
                    for (int k = 0; k < 4; k++) {
                        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                        x += (float)(r >> 40) / 16777216.0f - 0.5f;
                    }
                    w[i] = x * 0.05f + (i == rep * 7 % COLS && rep % 3 == 0 ? 0.4f : 0.0f);
                }
                uint8_t p1[COLS] = {0}, p2[COLS] = {0};
                rtn_quantize_row(w, COLS, bits, group, p1, s1, b1);
                rtn_search_row(w, COLS, bits, group, EM_BF16, p2, s2, b2);
                for (int g = 0; g < COLS / group; g++)
                    not_bf16 += s2[g] != bf16_to_f32(f32_to_bf16(s2[g])) || b2[g] != bf16_to_f32(f32_to_bf16(b2[g]));
                double e1 = stored_error(w, COLS, bits, group, p1, s1, b1);
                double e2 = stored_error(w, COLS, bits, group, p2, s2, b2);
                worse += e2 > e1 * (1 + 1e-9) || e2 > minmax_error(w, COLS, bits, group) * (1 + 1e-9);
                groups++;
                tot_rtn += e1;
                tot_search += e2;
            }
    }
    CHECKF(worse == 0, "search did worse than MLX's or the min/max rounding on %d of %d rows", worse, groups);
    CHECKF(not_bf16 == 0, "%d scales or biases are not bf16 values", not_bf16);
    CHECKF(tot_search < 0.9 * tot_rtn, "search error %g vs plain %g", tot_search, tot_rtn);
}

int main(void) {
    search_not_worse();
    hand_2bit();
    hand_3bit();
    zero_group();
    roundtrips();
    return test_summary();
}
