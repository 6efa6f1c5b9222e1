/* test_cuda_fused.c — the CUDA backend's fused operations give the bits of
 * the operations they fuse: rope_kv_write_spans (rotary embeddings and the
 * KV cache write, over spans with scattered blocks and partial rotary),
 * rope_attention_spans (those and the attention of decode rows) and
 * matmul_swiglu (the gate and up GEMV and the SwiGLU, over float and 4-/8-bit
 * weights), matmul_mlp (those and the down projection, 4-/8-bit; over
 * prefill rows, its bf16 gate and up within rounding of the reference),
 * the norms and residual adds of decode products (float and 4-/8-bit
 * weights), and decline exactly
 * the shapes they leave to the separate operations; and the bf16 copies
 * that norms and swiglu write for the FAST matmul issued next give that
 * matmul the bits of its own rounding, and never a stale one. Skipped (77) when
 * ember is built without CUDA or the machine has no GPU. */
#include "test.h"

#include "backend/backend.h"
#include "base/config.h"

#ifndef EMBER_HAVE_CUDA
int main(void) {
    fprintf(stderr, "built without CUDA: skipped\n");
    return 77;
}
#else
#include "backend/cuda/cuda_backend.h"

#include "cuda_test_util.h"

#include <stdint.h>
#include <stdlib.h>

/* Block tables of blocks of bs positions for n_spans sequences of
 * prior[i] + rows[i] positions, over four pools of `blocks` blocks of
 * `block` floats (k, v of one cache; k, v of another), scattered by a prime
 * stride: va over pools 0 and 1, vb over 2 and 3, and pos the positions of
 * the new rows. Returns the 4 * n_spans tables (free_tables frees them). */
static float **scatter_views(int n_spans, const int *prior, const int *rows, int bs, size_t block, int blocks,
                             float *const *pools, em_kv_view *va, em_kv_view *vb, int32_t *pos) {
    float **tables = calloc((size_t)n_spans * 4, sizeof *tables);
    REQUIRE(tables);
    for (int i = 0, r = 0, slot = 0; i < n_spans; i++) {
        int nb = (prior[i] + rows[i] + bs - 1) / bs;
        float **t = (float **)tables + 4 * i;
        for (int j = 0; j < 4; j++) REQUIRE((t[j] = (float *)malloc((size_t)nb * sizeof(float *))));
        for (int b = 0; b < nb; b++, slot++) {
            size_t at = (size_t)(((long long)slot * 7919) % blocks) * block;
            for (int j = 0; j < 4; j++) ((float **)t[j])[b] = pools[j] + at;
        }
        va[i] = (em_kv_view){(float *const *)t[0], (float *const *)t[1], bs, nb};
        vb[i] = (em_kv_view){(float *const *)t[2], (float *const *)t[3], bs, nb};
        for (int j = 0; j < rows[i]; j++) pos[r++] = prior[i] + j;
    }
    return tables;
}

static void free_tables(float **tables, int n_spans) {
    for (int i = 0; i < n_spans * 4; i++) free(tables[i]);
    free(tables);
}

/* n_spans sequences with prior[i] cached tokens and rows[i] new ones, in a
 * pool of blocks of 16 scattered by a prime stride; the same rows written
 * twice, once through rope_qk + kv_write_spans and once through
 * rope_kv_write_spans into a second pool: q, k and both pools must agree
 * bit for bit. */
static void test_rope_kv_case(int n_heads, int n_kv, int hd, int rot, const int *prior, const int *rows, int n_spans) {
    const int bs = 16;
    size_t row = (size_t)n_kv * hd, block = (size_t)bs * row;
    int blocks = 0, n = 0;
    for (int i = 0; i < n_spans; i++) blocks += (prior[i] + rows[i] + bs - 1) / bs, n += rows[i];
    size_t pool = (size_t)blocks * block;
    float *pools[4]; /* k, v of the reference; k, v of the fused write */
    for (int i = 0; i < 4; i++) REQUIRE((pools[i] = gpu->ops->alloc(gpu, pool * 4)));
    em_kv_view *va = calloc((size_t)n_spans, sizeof *va), *vb = calloc((size_t)n_spans, sizeof *vb);
    int32_t *pos = malloc((size_t)n * 4);
    float **tables = scatter_views(n_spans, prior, rows, bs, block, blocks, pools, va, vb, pos);
    size_t qn = (size_t)n * n_heads * hd, kn = (size_t)n * row;
    float *q = rand_f32(qn, 2.0f), *k = rand_f32(kn, 2.0f), *v = rand_f32(kn, 1.0f);
    float *inv = malloc((size_t)(rot / 2) * 4);
    for (int i = 0; i < rot / 2; i++) inv[i] = powf(500000.0f, -2.0f * i / rot);
    float *qa = up(q, qn * 4), *ka = up(k, kn * 4), *vd = up(v, kn * 4), *qb = up(q, qn * 4), *kb = up(k, kn * 4);
    em_kv_spans sa = {va, rows, n_spans, EM_MATH_EXACT, 0}, sb = {vb, rows, n_spans, EM_MATH_EXACT, 0};
    gpu->ops->rope_qk(gpu, qa, ka, n, n_heads, n_kv, hd, rot, pos, inv, 1.0f);
    gpu->ops->kv_write_spans(gpu, &sa, ka, vd, pos, n_kv, hd);
    gpu->ops->rope_kv_write_spans(gpu, &sb, qb, kb, vd, pos, n_heads, n_kv, hd, rot, inv, 1.0f);
    float *h[4] = {down(qa, qn), down(qb, qn), down(ka, kn), down(kb, kn)};
    CHECKF(!memcmp(h[0], h[1], qn * 4) && !memcmp(h[2], h[3], kn * 4),
           "rope_kv_write_spans heads=%d kv=%d hd=%d rot=%d rows=%d: q or k differ from rope_qk", n_heads, n_kv, hd, rot,
           n);
    float *p[4];
    for (int i = 0; i < 4; i++) p[i] = down(pools[i], pool);
    CHECKF(!memcmp(p[0], p[2], pool * 4) && !memcmp(p[1], p[3], pool * 4),
           "rope_kv_write_spans heads=%d kv=%d hd=%d rot=%d rows=%d: the cache differs from kv_write_spans", n_heads,
           n_kv, hd, rot, n);
    /* and every row landed: the fused pools hold exactly n rows of keys and of values */
    size_t nz_k = 0, nz_v = 0;
    for (size_t i = 0; i < pool; i++) nz_k += p[2][i] != 0.0f, nz_v += p[3][i] != 0.0f;
    CHECKF(nz_k == kn && nz_v == kn, "rope_kv_write_spans: %zu keys and %zu values written, expected %zu", nz_k, nz_v, kn);
    for (int i = 0; i < 4; i++) free(h[i]), free(p[i]), gpu->ops->free(gpu, pools[i]);
    free_tables(tables, n_spans);
    gpu->ops->free(gpu, qa), gpu->ops->free(gpu, ka), gpu->ops->free(gpu, vd), gpu->ops->free(gpu, qb);
    gpu->ops->free(gpu, kb);
    free(va), free(vb), free(pos), free(q), free(k), free(v), free(inv);
}

static void test_rope_kv_write(void) {
    REQUIRE(gpu->ops->rope_kv_write_spans);
    int p1[] = {37}, r1[] = {1};
    test_rope_kv_case(32, 8, 64, 64, p1, r1, 1); /* a 1B decode step */
    int p7[] = {2047}, r7[] = {7};
    test_rope_kv_case(32, 8, 64, 64, p7, r7, 1); /* a cached prompt's tail */
    int pm[] = {0, 15, 100}, rm[] = {5, 1, 3};
    test_rope_kv_case(8, 2, 128, 32, pm, rm, 3); /* partial rotary, three spans */
    test_rope_kv_case(4, 4, 96, 96, pm, rm, 3);  /* head_dim not a power of two */
    test_rope_kv_case(6, 3, 32, 16, p1, r1, 1);
}

/* Decode rows (one a span) after prior[i] cached tokens, in pools of
 * blocks of 16 scattered by a prime stride, attended twice from the same
 * cached keys: once through rope_kv_write_spans + attention_spans, once
 * through rope_attention_spans into a second pair of pools. The outputs
 * and the pools must agree bit for bit. */
static void test_rope_att_case(int n_heads, int n_kv, int hd, int rot, int window, const int *prior, int n_spans) {
    const int bs = 16;
    size_t row = (size_t)n_kv * hd, block = (size_t)bs * row;
    int blocks = 0, len_max = 0;
    for (int i = 0; i < n_spans; i++) {
        blocks += (prior[i] + 1 + bs - 1) / bs;
        len_max = prior[i] + 1 > len_max ? prior[i] + 1 : len_max;
    }
    size_t pool = (size_t)blocks * block;
    float *cache = rand_f32(pool, 1.0f), *pools[4]; /* k, v of the separate calls; k, v of the fused one */
    for (int i = 0; i < 4; i++) REQUIRE((pools[i] = up(cache, pool * 4)));
    em_kv_view *va = calloc((size_t)n_spans, sizeof *va), *vb = calloc((size_t)n_spans, sizeof *vb);
    int32_t *pos = malloc((size_t)n_spans * 4);
    int *rows = malloc((size_t)n_spans * sizeof *rows);
    for (int i = 0; i < n_spans; i++) rows[i] = 1;
    float **tables = scatter_views(n_spans, prior, rows, bs, block, blocks, pools, va, vb, pos);
    size_t qn = (size_t)n_spans * n_heads * hd, kn = (size_t)n_spans * row;
    float *q = rand_f32(qn, 2.0f), *k = rand_f32(kn, 2.0f), *v = rand_f32(kn, 1.0f);
    float *inv = malloc((size_t)(rot / 2) * 4);
    for (int i = 0; i < rot / 2; i++) inv[i] = powf(500000.0f, -2.0f * i / rot);
    float *qa = up(q, qn * 4), *ka = up(k, kn * 4), *vd = up(v, kn * 4), *qb = up(q, qn * 4), *kb = up(k, kn * 4);
    float *oa = gpu->ops->alloc(gpu, qn * 4), *ob = gpu->ops->alloc(gpu, qn * 4);
    em_kv_spans sa = {va, rows, n_spans, EM_MATH_FAST, 0}, sb = {vb, rows, n_spans, EM_MATH_FAST, 0};
    float scale = 1.0f / sqrtf((float)hd);
    gpu->ops->rope_kv_write_spans(gpu, &sa, qa, ka, vd, pos, n_heads, n_kv, hd, rot, inv, 1.0f);
    gpu->ops->attention_spans(gpu, oa, qa, &sa, pos, n_heads, n_kv, hd, scale, window);
    bool fused = gpu->ops->rope_attention_spans(gpu, ob, &sb, qb, kb, vd, pos, n_heads, n_kv, hd, rot, inv, 1.0f,
                                                 scale, window);
    CHECKF(fused, "rope_attention_spans heads=%d kv=%d hd=%d rot=%d spans=%d: declined a decode step", n_heads, n_kv,
           hd, rot, n_spans);
    if (fused) {
        float *a = down(oa, qn), *b = down(ob, qn);
        CHECKF(!memcmp(a, b, qn * 4),
               "rope_attention_spans heads=%d kv=%d hd=%d rot=%d window=%d spans=%d: out differs from the two calls",
               n_heads, n_kv, hd, rot, window, n_spans);
        float *p[4];
        for (int i = 0; i < 4; i++) p[i] = down(pools[i], pool);
        CHECKF(!memcmp(p[0], p[2], pool * 4) && !memcmp(p[1], p[3], pool * 4),
               "rope_attention_spans heads=%d kv=%d hd=%d rot=%d spans=%d: the cache differs from rope_kv_write_spans",
               n_heads, n_kv, hd, rot, n_spans);
        CHECKF(memcmp(p[0], cache, pool * 4) != 0, "rope_attention_spans: no key was written");
        for (int i = 0; i < 4; i++) free(p[i]);
        free(a), free(b);
    }
    for (int i = 0; i < 4; i++) gpu->ops->free(gpu, pools[i]);
    free_tables(tables, n_spans);
    gpu->ops->free(gpu, qa), gpu->ops->free(gpu, ka), gpu->ops->free(gpu, vd), gpu->ops->free(gpu, qb);
    gpu->ops->free(gpu, kb), gpu->ops->free(gpu, oa), gpu->ops->free(gpu, ob);
    free(va), free(vb), free(pos), free(rows), free(q), free(k), free(v), free(inv), free(cache);
}

/* A span of two rows is not a decode step: declined, nothing queued. */
static void test_rope_att_declines(void) {
    const int bs = 16, n_heads = 8, n_kv = 2, hd = 64;
    size_t block = (size_t)bs * n_kv * hd;
    float *kp = gpu->ops->alloc(gpu, block * 4), *vp = gpu->ops->alloc(gpu, block * 4);
    float *kt[1] = {kp}, *vt[1] = {vp};
    em_kv_view view = {kt, vt, bs, 1};
    int rows = 2;
    int32_t pos[2] = {3, 4};
    em_kv_spans sp = {&view, &rows, 1, EM_MATH_FAST, 0};
    float inv[32];
    for (int i = 0; i < 32; i++) inv[i] = 1.0f;
    float *q = gpu->ops->alloc(gpu, (size_t)2 * n_heads * hd * 4), *k = gpu->ops->alloc(gpu, (size_t)2 * n_kv * hd * 4);
    float *out = gpu->ops->alloc(gpu, (size_t)2 * n_heads * hd * 4);
    CHECKF(!gpu->ops->rope_attention_spans(gpu, out, &sp, q, k, k, pos, n_heads, n_kv, hd, hd, inv, 1.0f, 0.125f, 0),
           "rope_attention_spans fused a span of two rows");
    gpu->ops->free(gpu, kp), gpu->ops->free(gpu, vp), gpu->ops->free(gpu, q), gpu->ops->free(gpu, k);
    gpu->ops->free(gpu, out);
}

static void test_rope_attention(void) {
    REQUIRE(gpu->ops->rope_attention_spans);
    int p1[] = {37}, p0[] = {0}, pl[] = {2047};
    test_rope_att_case(32, 8, 64, 64, 0, p1, 1);    /* a 1B decode step */
    test_rope_att_case(32, 8, 128, 128, 0, pl, 1); /* an 8B decode step after 2,047 tokens */
    test_rope_att_case(32, 8, 128, 128, 0, p0, 1); /* the first token */
    int pm[] = {0, 15, 100, 300, 7};
    test_rope_att_case(8, 2, 128, 32, 0, pm, 5);   /* partial rotary, a batch of five */
    test_rope_att_case(16, 16, 64, 64, 0, pm, 5);  /* one query head a kv head */
    test_rope_att_case(64, 8, 32, 32, 0, pm, 5);   /* eight */
    test_rope_att_case(32, 8, 64, 64, 20, pm, 5);  /* a sliding window */
    test_rope_att_declines();
}

/* Runs matmul_group + swiglu and matmul_swiglu on the same inputs (x and
 * the biases on the host; no biases when bgh is NULL). Returns whether
 * matmul_swiglu fused; then *ref and *out hold the two results ([M, N], host,
 * the caller frees), else both are NULL. */
static bool swiglu_pair(const em_weight *wg, const em_weight *wu, const float *x, const float *bgh,
                        const float *buh, int M, em_math math, float **ref, float **out) {
    int N = (int)wg->rows, K = (int)wg->cols;
    float *xd = up(x, (size_t)M * K * 4), *bg = bgh ? up(bgh, (size_t)N * 4) : NULL, *bu = buh ? up(buh, (size_t)N * 4) : NULL;
    size_t on = (size_t)M * N;
    float *gate = gpu->ops->alloc(gpu, on * 4), *upd = gpu->ops->alloc(gpu, on * 4);
    float *refd = gpu->ops->alloc(gpu, on * 4), *outd = gpu->ops->alloc(gpu, on * 4);
    float *ys[2] = {gate, upd};
    const em_weight *ws[2] = {wg, wu};
    const float *bs[2] = {bg, bu};
    gpu->ops->matmul_group(gpu, 2, ys, xd, M, ws, bs, math);
    gpu->ops->swiglu(gpu, refd, gate, upd, M, N, N);
    bool fused = gpu->ops->matmul_swiglu(gpu, outd, xd, M, wg, wu, bg, bu, math);
    *ref = fused ? down(refd, on) : NULL, *out = fused ? down(outd, on) : NULL;
    gpu->ops->free(gpu, xd);
    if (bg) gpu->ops->free(gpu, bg), gpu->ops->free(gpu, bu);
    gpu->ops->free(gpu, gate), gpu->ops->free(gpu, upd), gpu->ops->free(gpu, refd), gpu->ops->free(gpu, outd);
    return fused;
}

/* matmul_swiglu against matmul_group + swiglu on the same device, bit for
 * bit, where it fuses; where it declines it must say so. */
static void test_swiglu_case(em_dtype dt, int M, int N, int K, bool with_bias, em_math math) {
    void *gh = weight_data(dt, (size_t)N * K), *uh = weight_data(dt, (size_t)N * K);
    size_t wb = (size_t)N * K * dtype_size(dt);
    float *x = rand_f32((size_t)M * K, 1.0f), *bgh = with_bias ? rand_f32(N, 0.5f) : NULL;
    float *buh = with_bias ? rand_f32(N, 0.5f) : NULL;
    em_weight wg = {.dtype = dt, .rows = N, .cols = K, .data = up(gh, wb), .name = "gate"};
    em_weight wu = {.dtype = dt, .rows = N, .cols = K, .data = up(uh, wb), .name = "up"};
    size_t on = (size_t)M * N;
    float *a, *b;
    bool fused = swiglu_pair(&wg, &wu, x, bgh, buh, M, math, &a, &b);
    bool want = M <= 8 && !(math == EM_MATH_FAST && M >= 3 && dt == EM_BF16);
    CHECKF(fused == want, "matmul_swiglu dt=%d M=%d math=%d: fused=%d, expected %d", (int)dt, M, (int)math, fused, want);
    if (fused) {
        CHECKF(!memcmp(a, b, on * 4), "matmul_swiglu dt=%d M=%d N=%d K=%d bias=%d: differs from matmul_group + swiglu",
               (int)dt, M, N, K, with_bias);
        if (math == EM_MATH_EXACT) { /* and both are the CPU's within f32 summation order */
            em_weight cg = wg, cu = wu;
            cg.data = gh, cu.data = uh;
            float *cgo = malloc(on * 4), *cuo = malloc(on * 4), *co = malloc(on * 4);
            cpu->ops->matmul(cpu, cgo, x, M, &cg, bgh, EM_MATH_EXACT);
            cpu->ops->matmul(cpu, cuo, x, M, &cu, buh, EM_MATH_EXACT);
            cpu->ops->swiglu(cpu, co, cgo, cuo, M, N, N);
            double e = rel_err(b, co, on);
            CHECKF(e <= 1e-5, "matmul_swiglu dt=%d M=%d: rel err %.3g against the CPU", (int)dt, M, e);
            free(cgo), free(cuo), free(co);
        }
        free(a), free(b);
    }
    gpu->ops->free(gpu, (void *)wg.data), gpu->ops->free(gpu, (void *)wu.data);
    free(gh), free(uh), free(x), free(bgh), free(buh);
}

static void test_matmul_swiglu(void) {
    REQUIRE(gpu->ops->matmul_swiglu);
    em_dtype dts[] = {EM_BF16, EM_F16, EM_F32};
    int ms[] = {1, 2, 3, 5, 8, 9};
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 6; i++) {
            test_swiglu_case(dts[d], ms[i], 96, 520, i % 2 == 0, EM_MATH_EXACT);
            test_swiglu_case(dts[d], ms[i], 64, 2048, i % 2 == 1, EM_MATH_FAST);
        }
    test_swiglu_case(EM_BF16, 1, 8192, 2048, false, EM_MATH_FAST); /* the 1B shape's MLP */
}

/* The same for 4- and 8-bit weights (group 64, bf16 scales and biases):
 * FAST decode rows (one or two) fuse in the streaming int8 kernel; more
 * rows, and EXACT ones, are declined. */
static void *rand_bytes(size_t n) {
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(frand() * 128.0f + 128.0f);
    return p;
}

static em_weight qweight_up(int N, int K, int bits, void **host) {
    size_t wb = (size_t)N * K * bits / 8, gn = (size_t)N * (K / 64);
    host[0] = rand_bytes(wb), host[1] = weight_data(EM_BF16, gn), host[2] = weight_data(EM_BF16, gn);
    return (em_weight){.dtype = EM_U32, .rows = N, .cols = K, .data = up(host[0], wb), .bits = bits, .group_size = 64,
                       .scales = up(host[1], gn * 2), .biases = up(host[2], gn * 2), .scale_dtype = EM_BF16,
                       .name = "qw"};
}

/* Frees a weight from qweight_up and its host copies. */
static void free_q(em_weight *w, void **host) {
    gpu->ops->free(gpu, (void *)w->data), gpu->ops->free(gpu, (void *)w->scales), gpu->ops->free(gpu, (void *)w->biases);
    for (int i = 0; i < 3; i++) free(host[i]);
}

static void test_qswiglu_case(int bits, int M, int N, int K, bool with_bias, em_math math) {
    void *gh[3], *uh[3];
    em_weight wg = qweight_up(N, K, bits, gh), wu = qweight_up(N, K, bits, uh);
    float *x = rand_f32((size_t)M * K, 1.0f), *bgh = with_bias ? rand_f32(N, 0.5f) : NULL;
    float *buh = with_bias ? rand_f32(N, 0.5f) : NULL;
    float *a, *b;
    bool fused = swiglu_pair(&wg, &wu, x, bgh, buh, M, math, &a, &b);
    bool want = math == EM_MATH_FAST && M <= 2;
    CHECKF(fused == want, "matmul_swiglu bits=%d M=%d math=%d: fused=%d, expected %d", bits, M, (int)math, fused, want);
    if (fused) {
        CHECKF(!memcmp(a, b, (size_t)M * N * 4),
               "matmul_swiglu bits=%d M=%d N=%d K=%d bias=%d: differs from matmul_group + swiglu", bits, M, N, K,
               with_bias);
        free(a), free(b);
    }
    free_q(&wg, gh), free_q(&wu, uh);
    free(x), free(bgh), free(buh);
}

static void test_matmul_swiglu_quantized(void) {
    REQUIRE(gpu->ops->matmul_swiglu);
    int bits[] = {4, 8};
    for (int b = 0; b < 2; b++)
        for (int M = 1; M <= 3; M++) {
            test_qswiglu_case(bits[b], M, 37, 4096, M % 2 == 1, EM_MATH_FAST);
            test_qswiglu_case(bits[b], M, 64, 6656, M % 2 == 0, EM_MATH_FAST); /* no multiple of a round of loads */
        }
    test_qswiglu_case(4, 1, 64, 4096, false, EM_MATH_EXACT);
}

/* matmul_mlp against matmul_swiglu then matmul on the same device, bit
 * for bit (the SwiGLU it leaves in act and the output), where it takes the
 * shape (FAST rows of 4- or 8-bit weights, one or two); twice in a row, so
 * the grid-wide barrier it uses is reused; `alias`: the output written over
 * the input, as the models call it. Declines must queue nothing. */
static void test_qmlp_case(int bits, int M, int F, int H, bool with_bias, bool alias, em_math math, bool want) {
    void *gh[3], *uh[3], *dh[3];
    em_weight wg = qweight_up(F, H, bits, gh), wu = qweight_up(F, H, bits, uh), wd = qweight_up(H, F, bits, dh);
    float *x = rand_f32((size_t)M * H, 1.0f);
    float *bh[3] = {NULL, NULL, NULL}, *bd[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3 && with_bias; i++) bh[i] = rand_f32(i < 2 ? F : H, 0.5f), bd[i] = up(bh[i], (i < 2 ? F : H) * 4);
    float *xd = up(x, (size_t)M * H * 4), *ya = gpu->ops->alloc(gpu, (size_t)M * H * 4);
    float *acta = gpu->ops->alloc(gpu, (size_t)M * F * 4), *actb = gpu->ops->alloc(gpu, (size_t)M * F * 4);
    float *yb = alias ? up(x, (size_t)M * H * 4) : gpu->ops->alloc(gpu, (size_t)M * H * 4);
    REQUIRE(gpu->ops->matmul_swiglu(gpu, acta, xd, M, &wg, &wu, bd[0], bd[1], EM_MATH_FAST) || M > 2);
    if (M <= 2) gpu->ops->matmul(gpu, ya, acta, M, &wd, bd[2], EM_MATH_FAST);
    bool fused = true;
    for (int rep = 0; rep < 2 && fused; rep++) {
        if (alias && rep) gpu->ops->upload(gpu, yb, x, (size_t)M * H * 4);
        fused = gpu->ops->matmul_mlp(gpu, yb, actb, alias ? yb : xd, M, &wg, &wu, &wd, bd[0], bd[1], bd[2], math, false);
        CHECKF(fused == want, "matmul_mlp bits=%d M=%d F=%d H=%d math=%d: fused=%d, expected %d", bits, M, F, H,
               (int)math, fused, want);
        if (!fused) break;
        float *a0 = down(acta, (size_t)M * F), *a1 = down(actb, (size_t)M * F);
        float *y0 = down(ya, (size_t)M * H), *y1 = down(yb, (size_t)M * H);
        CHECKF(!memcmp(a0, a1, (size_t)M * F * 4), "matmul_mlp bits=%d M=%d F=%d H=%d: its SwiGLU differs", bits, M, F,
               H);
        CHECKF(!memcmp(y0, y1, (size_t)M * H * 4),
               "matmul_mlp bits=%d M=%d F=%d H=%d bias=%d alias=%d rep=%d: differs from matmul_swiglu + matmul", bits,
               M, F, H, with_bias, alias, rep);
        free(a0), free(a1), free(y0), free(y1);
    }
    free_q(&wg, gh), free_q(&wu, uh), free_q(&wd, dh);
    for (int i = 0; i < 3 && with_bias; i++) free(bh[i]), gpu->ops->free(gpu, bd[i]);
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, ya), gpu->ops->free(gpu, yb);
    gpu->ops->free(gpu, acta), gpu->ops->free(gpu, actb);
    free(x);
}

/* Runs fn against a GPU backend made with EMBER_CUDA_QMLP=auto (the
 * default; this program sets 1 for the rest). */
static void with_qmlp_auto(void (*fn)(void)) { with_config("EMBER_CUDA_QMLP", "auto", fn); }

/* EMBER_CUDA_QMLP=auto leaves an MLP whose gate and up balance on their
 * own (here 1,024 rows: at most one a warp on any GPU of 32 or more
 * multiprocessors) to the separate launches. */
static void mlp_auto_case(void) { test_qmlp_case(4, 1, 1024, 512, false, false, EM_MATH_FAST, false); }
static void test_mlp_auto(void) { with_qmlp_auto(mlp_auto_case); }

static void test_matmul_mlp_quantized(void) {
    REQUIRE(gpu->ops->matmul_mlp);
    int bits[] = {4, 8};
    for (int b = 0; b < 2; b++)
        for (int M = 1; M <= 2; M++) {
            test_qmlp_case(bits[b], M, 2560, 1024, M == 1, false, EM_MATH_FAST, true); /* rows of partial lines */
            test_qmlp_case(bits[b], M, 8192, 2048, M == 2, true, EM_MATH_FAST, true);  /* the 1B shape */
        }
    test_qmlp_case(4, 1, 14336, 4096, false, true, EM_MATH_FAST, true); /* the 8B shape */
    test_qmlp_case(4, 3, 1024, 512, false, false, EM_MATH_FAST, false); /* three rows */
    test_qmlp_case(4, 1, 1024, 512, false, false, EM_MATH_EXACT, false);
    test_mlp_auto();
}

/* A weight for the prefill MLP tests: bf16 (bits 0) or 4-/8-bit codes. */
static em_weight mlp_weight_up(int N, int K, int bits, void **host) {
    if (bits) return qweight_up(N, K, bits, host);
    host[0] = weight_data(EM_BF16, (size_t)N * K), host[1] = host[2] = NULL;
    return (em_weight){.dtype = EM_BF16, .rows = N, .cols = K, .data = up(host[0], (size_t)N * K * 2), .name = "w"};
}

static void mlp_weight_free(em_weight *w, void **host) {
    if (w->bits) return free_q(w, host);
    gpu->ops->free(gpu, (void *)w->data), free(host[0]);
}

static float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }

/* matmul_mlp over FAST prefill rows (more than CUDA_SKINNY_MAX_M) rounds
 * the gate and up products to bf16 and feeds the down product the bf16
 * SwiGLU. Reference: the same products in f32 (matmul_group), rounded and
 * combined on the host, then the down product of that SwiGLU (exact in
 * bf16, so the GEMM reads it unchanged). Only roundings of sums that land
 * within an f32 ulp or so of a bf16 midpoint can differ. */
static void test_mlp_rows_case(int bits, int M, int F, int H, bool alias) {
    void *gh[3], *uh[3], *dh[3];
    em_weight wg = mlp_weight_up(F, H, bits, gh), wu = mlp_weight_up(F, H, bits, uh), wd = mlp_weight_up(H, F, bits, dh);
    const em_weight *wgu[2] = {&wg, &wu};
    size_t mf = (size_t)M * F, mh = (size_t)M * H;
    float *x = rand_f32(mh, 1.0f), *xd = up(x, mh * 4), *act = gpu->ops->alloc(gpu, mf * 4);
    float *gd = gpu->ops->alloc(gpu, mf * 4), *ud = gpu->ops->alloc(gpu, mf * 4), *yref = gpu->ops->alloc(gpu, mh * 4);
    float *gu[2] = {gd, ud};
    gpu->ops->matmul_group(gpu, 2, gu, xd, M, wgu, NULL, EM_MATH_FAST);
    float *g = down(gd, mf), *u = down(ud, mf);
    for (size_t i = 0; i < mf; i++) {
        float gv = bf16_round(g[i]), uv = bf16_round(u[i]);
        g[i] = bf16_round(gv / (1.0f + expf(-gv)) * uv);
    }
    REQUIRE(gpu->ops->upload(gpu, act, g, mf * 4) == EM_OK);
    gpu->ops->matmul(gpu, yref, act, M, &wd, NULL, EM_MATH_FAST);
    /* with add: into a residual stream r, before the plain call (which may write over x) */
    float *r = rand_f32(mh, 4.0f), *rd = up(r, mh * 4);
    bool fused = gpu->ops->matmul_mlp(gpu, rd, act, xd, M, &wg, &wu, &wd, NULL, NULL, NULL, EM_MATH_FAST, true);
    CHECKF(fused, "matmul_mlp bits=%d M=%d F=%d H=%d add: declined a FAST prefill batch", bits, M, F, H);
    float *y = alias ? xd : gpu->ops->alloc(gpu, mh * 4);
    fused = fused && gpu->ops->matmul_mlp(gpu, y, act, xd, M, &wg, &wu, &wd, NULL, NULL, NULL, EM_MATH_FAST, false);
    CHECKF(fused, "matmul_mlp bits=%d M=%d F=%d H=%d: declined a FAST prefill batch", bits, M, F, H);
    if (fused) {
        float *a = down(y, mh), *b = down(yref, mh), *s = down(rd, mh);
        double e = rel_err(a, b, mh);
        CHECKF(e < 1e-3, "matmul_mlp bits=%d M=%d F=%d H=%d alias=%d: %.3g from gate/up rounded to bf16", bits, M, F,
               H, alias, e);
        for (size_t i = 0; i < mh; i++) r[i] += a[i]; /* the plain output added on the host */
        e = rel_err(s, r, mh);
        CHECKF(e < 1e-5, "matmul_mlp bits=%d M=%d F=%d H=%d add: %.3g from the plain output added", bits, M, F, H, e);
        free(a), free(b), free(s);
    }
    /* a bias, too few rows, EXACT, or an add into its own input: left to the separate operations */
    float *bias = gpu->ops->alloc(gpu, (size_t)F * 4);
    CHECK(!gpu->ops->matmul_mlp(gpu, yref, act, xd, M, &wg, &wu, &wd, bias, NULL, NULL, EM_MATH_FAST, false));
    CHECK(!gpu->ops->matmul_mlp(gpu, yref, act, xd, 32, &wg, &wu, &wd, NULL, NULL, NULL, EM_MATH_FAST, false));
    CHECK(!gpu->ops->matmul_mlp(gpu, yref, act, xd, M, &wg, &wu, &wd, NULL, NULL, NULL, EM_MATH_EXACT, false));
    CHECK(!gpu->ops->matmul_mlp(gpu, xd, act, xd, M, &wg, &wu, &wd, NULL, NULL, NULL, EM_MATH_FAST, true));
    mlp_weight_free(&wg, gh), mlp_weight_free(&wu, uh), mlp_weight_free(&wd, dh);
    float *dev[] = {xd, act, gd, ud, yref, bias, rd, alias ? NULL : y};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i]) gpu->ops->free(gpu, dev[i]);
    free(x), free(g), free(u), free(r);
}

/* matmul_add: y += x · wᵀ by the product over FAST prefill rows, against
 * matmul and the add on the host (the GEMM's own sums may come from
 * another algorithm, so within a few f32 roundings); declines the rest. */
static void test_matmul_add_case(int bits, int M, int N, int K) {
    REQUIRE(gpu->ops->matmul_add);
    void *wh[3];
    em_weight w = mlp_weight_up(N, K, bits, wh);
    size_t mn = (size_t)M * N, rows = M > 32 ? (size_t)M : 32; /* the 32-row checks below read and add 32 */
    float *x = rand_f32(rows * K, 1.0f), *r = rand_f32(rows * N, 4.0f);
    float *xd = up(x, rows * K * 4), *rd = up(r, rows * N * 4), *yd = gpu->ops->alloc(gpu, mn * 4);
    gpu->ops->matmul(gpu, yd, xd, M, &w, NULL, EM_MATH_FAST);
    bool fused = gpu->ops->matmul_add(gpu, rd, xd, M, &w, EM_MATH_FAST);
    CHECKF(fused, "matmul_add bits=%d M=%d: declined a FAST prefill batch", bits, M);
    if (fused) {
        float *y = down(yd, mn), *s = down(rd, mn);
        for (size_t i = 0; i < mn; i++) r[i] += y[i];
        double e = rel_err(s, r, mn);
        CHECKF(e < 1e-5, "matmul_add bits=%d M=%d N=%d K=%d: %.3g from matmul and add", bits, M, N, K, e);
        free(y), free(s);
    }
    /* 32 rows: bf16 weights leave it to the skinny kernel's product and an
     * add; 4-/8-bit ones take the tensor-core kernels, which add */
    CHECK(gpu->ops->matmul_add(gpu, rd, xd, 32, &w, EM_MATH_FAST) == (bits != 0));
    /* EXACT rows: the GEMV's (unquantized weights, up to 64 rows), none past it */
    CHECK(gpu->ops->matmul_add(gpu, rd, xd, M, &w, EM_MATH_EXACT) == (bits == 0 && M <= 64));
    if (N == K) CHECK(!gpu->ops->matmul_add(gpu, xd, xd, M, &w, EM_MATH_FAST));
    mlp_weight_free(&w, wh);
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, rd), gpu->ops->free(gpu, yd);
    free(x), free(r);
}

static void test_matmul_mlp_rows(void) {
    test_mlp_rows_case(0, 33, 1024, 512, false);
    test_mlp_rows_case(0, 200, 8192, 2048, true); /* the 1B shape */
    test_mlp_rows_case(4, 65, 2560, 1024, false); /* past the bf16 tensor-core kernel's 64 rows */
    test_mlp_rows_case(8, 129, 1024, 512, true);
    test_matmul_add_case(0, 33, 512, 512);
    test_matmul_add_case(0, 300, 2048, 8192); /* the 1B down projection */
    test_matmul_add_case(4, 24, 1024, 2048); /* the bf16 tensor-core kernel */
    test_matmul_add_case(4, 5, 1024, 2048);  /* its one tile of 8 activation rows */
    test_matmul_add_case(4, 64, 1024, 2048);
    test_matmul_add_case(8, 80, 1024, 2048);
}

/* Decode rows of the GEMV: matmul_add adds the bits of matmul's product
 * (the add kernel's sum, bit for bit); norm_matmul_group and
 * norm_matmul_swiglu give rmsnorm then the products within f32 roundings,
 * and a row the same bits whichever rows share its batch. */
static void test_gemv_norm_case(em_dtype dt, int M, em_math math) {
    const int K = 1024, N[3] = {512, 128, 128}, F = 384;
    void *wh[3], *gh, *uh;
    em_weight w[3];
    const em_weight *wp[3];
    for (int i = 0; i < 3; i++) {
        size_t bytes = (size_t)N[i] * K * (dt == EM_F32 ? 4 : 2);
        wh[i] = weight_data(dt, (size_t)N[i] * K);
        w[i] = (em_weight){.dtype = dt, .rows = N[i], .cols = K, .data = up(wh[i], bytes), .name = "w"};
        wp[i] = &w[i];
    }
    size_t gbytes = (size_t)F * K * (dt == EM_F32 ? 4 : 2);
    gh = weight_data(dt, (size_t)F * K), uh = weight_data(dt, (size_t)F * K);
    em_weight wg = {.dtype = dt, .rows = F, .cols = K, .data = up(gh, gbytes), .name = "g"};
    em_weight wu = {.dtype = dt, .rows = F, .cols = K, .data = up(uh, gbytes), .name = "u"};
    float *x = rand_f32((size_t)M * K, 3.0f), *gain = rand_f32(K, 1.0f), *r = rand_f32((size_t)M * N[0], 2.0f);
    float *xd = up(x, (size_t)M * K * 4), *gd = up(gain, (size_t)K * 4), *hd = gpu->ops->alloc(gpu, (size_t)M * K * 4);
    float *ya[3], *yb[3], *sa = gpu->ops->alloc(gpu, (size_t)M * F * 4), *sb = gpu->ops->alloc(gpu, (size_t)M * F * 4);
    for (int i = 0; i < 3; i++)
        ya[i] = gpu->ops->alloc(gpu, (size_t)M * N[i] * 4), yb[i] = gpu->ops->alloc(gpu, (size_t)M * N[i] * 4);
    /* reference: the norm written, then the products */
    /* more than 8 rows: the staged batch kernel, whose SwiGLU is a kernel of its own */
    float *gate = gpu->ops->alloc(gpu, (size_t)M * F * 4), *upo = gpu->ops->alloc(gpu, (size_t)M * F * 4);
    const em_weight *gup[2] = {&wg, &wu};
    float *gus[2] = {gate, upo};
    gpu->ops->rmsnorm(gpu, hd, xd, gd, M, K, 1e-5f, 0.0f);
    gpu->ops->matmul_group(gpu, 3, ya, hd, M, wp, NULL, math);
    gpu->ops->matmul_group(gpu, 2, gus, hd, M, gup, NULL, math);
    gpu->ops->swiglu(gpu, sa, gate, upo, M, F, F);
    bool fused = gpu->ops->norm_matmul_group(gpu, 3, yb, xd, gd, 1e-5f, 0.0f, M, wp, NULL, math);
    bool one = gpu->ops->norm_matmul_swiglu(gpu, sb, xd, gd, 1e-5f, 0.0f, M, &wg, &wu, NULL, NULL, math);
    CHECKF(one == (M <= 8), "norm_matmul_swiglu dt=%d M=%d: took=%d", (int)dt, M, (int)one);
    if (!one) {
        fused = fused && gpu->ops->norm_matmul_group(gpu, 2, gus, xd, gd, 1e-5f, 0.0f, M, gup, NULL, math);
        gpu->ops->swiglu(gpu, sb, gate, upo, M, F, F);
    }
    CHECKF(fused, "norm_matmul dt=%d M=%d math=%d: declined decode rows", (int)dt, M, (int)math);
    for (int i = 0; i < 3 && fused; i++) {
        float *a = down(ya[i], (size_t)M * N[i]), *b = down(yb[i], (size_t)M * N[i]);
        double e = rel_err(b, a, (size_t)M * N[i]);
        CHECKF(e < 2e-5, "norm_matmul_group dt=%d M=%d product %d: %.3g from rmsnorm + matmul_group", (int)dt, M, i, e);
        if (M > 1) { /* row 0 alone gives row 0's bits */
            REQUIRE(gpu->ops->norm_matmul_group(gpu, 3, ya, xd, gd, 1e-5f, 0.0f, 1, wp, NULL, math));
            float *c = down(ya[i], (size_t)N[i]);
            CHECKF(!memcmp(c, b, (size_t)N[i] * 4), "norm_matmul_group dt=%d M=%d: row 0 differs alone", (int)dt, M);
            free(c);
        }
        free(a), free(b);
    }
    if (fused) {
        float *a = down(sa, (size_t)M * F), *b = down(sb, (size_t)M * F);
        double e = rel_err(b, a, (size_t)M * F);
        CHECKF(e < 2e-5, "norm_matmul_swiglu dt=%d M=%d: %.3g from rmsnorm + matmul_swiglu", (int)dt, M, e);
        if (M > 1) { /* row 0 alone, fused with its SwiGLU, gives row 0's bits */
            REQUIRE(gpu->ops->norm_matmul_swiglu(gpu, sa, xd, gd, 1e-5f, 0.0f, 1, &wg, &wu, NULL, NULL, math));
            float *c = down(sa, (size_t)F);
            CHECKF(!memcmp(c, b, (size_t)F * 4), "norm_matmul_swiglu dt=%d M=%d: row 0 differs alone", (int)dt, M);
            free(c);
        }
        free(a), free(b);
    }
    gpu->ops->free(gpu, gate), gpu->ops->free(gpu, upo);
    /* matmul_add through the GEMV: the stream plus matmul's product, bit for bit */
    float *rd = up(r, (size_t)M * N[0] * 4);
    gpu->ops->matmul(gpu, ya[0], xd, M, &w[0], NULL, math);
    bool added = gpu->ops->matmul_add(gpu, rd, xd, M, &w[0], math);
    CHECKF(added, "matmul_add dt=%d M=%d math=%d: declined decode rows", (int)dt, M, (int)math);
    if (added) {
        float *p = down(ya[0], (size_t)M * N[0]), *q = down(rd, (size_t)M * N[0]);
        for (size_t i = 0; i < (size_t)M * N[0]; i++) r[i] += p[i];
        CHECKF(!memcmp(q, r, (size_t)M * N[0] * 4), "matmul_add dt=%d M=%d: not the product added", (int)dt, M);
        free(p), free(q);
    }
    /* a misaligned gain is declined */
    CHECK(!gpu->ops->norm_matmul_group(gpu, 3, yb, xd, gd + 1, 1e-5f, 0.0f, M, wp, NULL, math));
    for (int i = 0; i < 3; i++) gpu->ops->free(gpu, (void *)w[i].data), gpu->ops->free(gpu, ya[i]),
                                 gpu->ops->free(gpu, yb[i]), free(wh[i]);
    gpu->ops->free(gpu, (void *)wg.data), gpu->ops->free(gpu, (void *)wu.data), free(gh), free(uh);
    float *dev[] = {xd, gd, hd, sa, sb, rd};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) gpu->ops->free(gpu, dev[i]);
    free(x), free(gain), free(r);
}

static void test_gemv_norm(void) {
    REQUIRE(gpu->ops->norm_matmul_group && gpu->ops->norm_matmul_swiglu && gpu->ops->matmul_add);
    test_gemv_norm_case(EM_BF16, 1, EM_MATH_FAST);
    test_gemv_norm_case(EM_BF16, 2, EM_MATH_FAST);
    test_gemv_norm_case(EM_BF16, 5, EM_MATH_EXACT);
    test_gemv_norm_case(EM_F32, 8, EM_MATH_EXACT);
    test_gemv_norm_case(EM_F16, 3, EM_MATH_FAST);
    test_gemv_norm_case(EM_BF16, 12, EM_MATH_EXACT);
    test_gemv_norm_case(EM_F32, 40, EM_MATH_EXACT);
    test_gemv_norm_case(EM_F16, 64, EM_MATH_FAST);
    /* FAST bf16 rows on tensor cores, and quantized weights past the int8
     * GEMV's two FAST rows, are left to the separate operations; matmul_add
     * of 4-bit weights takes them on the bf16 tensor-core kernel, which
     * adds (EMBER_CUDA_QTC) */
    void *qh[3];
    em_weight q = qweight_up(256, 512, 4, qh);
    float *x = gpu->ops->alloc(gpu, 65 * 512 * 4), *g = gpu->ops->alloc(gpu, 512 * 4), *y = gpu->ops->alloc(gpu, 65 * 256 * 4);
    const em_weight *qp = &q;
    CHECK(!gpu->ops->norm_matmul_group(gpu, 1, &y, x, g, 1e-5f, 0.0f, 3, &qp, NULL, EM_MATH_FAST));
    CHECK(!gpu->ops->norm_matmul_group(gpu, 1, &y, x, g, 1e-5f, 0.0f, 1, &qp, NULL, EM_MATH_EXACT));
    CHECK(gpu->ops->matmul_add(gpu, y, x, 3, &q, EM_MATH_FAST) == em_config_flag(em_config_global(), EMC_CUDA_QTC));
    CHECK(!gpu->ops->matmul_add(gpu, y, x, 1, &q, EM_MATH_EXACT));
    void *bh = weight_data(EM_BF16, 256 * 512);
    em_weight b = {.dtype = EM_BF16, .rows = 256, .cols = 512, .data = up(bh, 256 * 512 * 2), .name = "b"};
    const em_weight *bp = &b;
    CHECK(!gpu->ops->norm_matmul_group(gpu, 1, &y, x, g, 1e-5f, 0.0f, 3, &bp, NULL, EM_MATH_FAST));
    CHECK(!gpu->ops->matmul_add(gpu, y, x, 3, &b, EM_MATH_FAST));
    /* EXACT rows past the GEMV's 64 (cuBLAS SGEMM) */
    CHECK(!gpu->ops->norm_matmul_group(gpu, 1, &y, x, g, 1e-5f, 0.0f, 65, &bp, NULL, EM_MATH_EXACT));
    CHECK(gpu->ops->norm_matmul_group(gpu, 1, &y, x, g, 1e-5f, 0.0f, 64, &bp, NULL, EM_MATH_EXACT));
    free_q(&q, qh), gpu->ops->free(gpu, (void *)b.data), free(bh);
    gpu->ops->free(gpu, x), gpu->ops->free(gpu, g), gpu->ops->free(gpu, y);
}

/* Decode rows over 4- and 8-bit weights (the int8 GEMV): norm_matmul_group
 * gives rmsnorm then matmul_group, and norm_matmul_swiglu rmsnorm then
 * matmul_swiglu, to within a code of the activations' int8 rounding (the
 * norm's factor is taken after the rounding, whose scale may then round
 * one value the other way: 2e-3 of the largest output, where a norm
 * missing or misapplied is off by tens of percent); matmul_add gives the
 * bits of matmul then the add. */
static void test_qnorm_case(int bits, int M) {
    const int K = 1024, N[3] = {512, 128, 128}, F = 384;
    void *wh[3][3], *gh[3], *uh[3];
    em_weight w[3];
    const em_weight *wp[3];
    for (int i = 0; i < 3; i++) w[i] = qweight_up(N[i], K, bits, wh[i]), wp[i] = &w[i];
    em_weight wg = qweight_up(F, K, bits, gh), wu = qweight_up(F, K, bits, uh);
    float *x = rand_f32((size_t)M * K, 3.0f), *gain = rand_f32(K, 1.0f), *r = rand_f32((size_t)M * N[0], 2.0f);
    float *xd = up(x, (size_t)M * K * 4), *gd = up(gain, (size_t)K * 4), *hd = gpu->ops->alloc(gpu, (size_t)M * K * 4);
    float *ya[3], *yb[3], *sa = gpu->ops->alloc(gpu, (size_t)M * F * 4), *sb = gpu->ops->alloc(gpu, (size_t)M * F * 4);
    for (int i = 0; i < 3; i++)
        ya[i] = gpu->ops->alloc(gpu, (size_t)M * N[i] * 4), yb[i] = gpu->ops->alloc(gpu, (size_t)M * N[i] * 4);
    gpu->ops->rmsnorm(gpu, hd, xd, gd, M, K, 1e-5f, 0.0f);
    gpu->ops->matmul_group(gpu, 3, ya, hd, M, wp, NULL, EM_MATH_FAST);
    REQUIRE(gpu->ops->matmul_swiglu(gpu, sa, hd, M, &wg, &wu, NULL, NULL, EM_MATH_FAST));
    bool fused = gpu->ops->norm_matmul_group(gpu, 3, yb, xd, gd, 1e-5f, 0.0f, M, wp, NULL, EM_MATH_FAST);
    bool one = gpu->ops->norm_matmul_swiglu(gpu, sb, xd, gd, 1e-5f, 0.0f, M, &wg, &wu, NULL, NULL, EM_MATH_FAST);
    CHECKF(fused && one, "bits=%d M=%d: norm_matmul_group %d, norm_matmul_swiglu %d: declined decode rows", bits, M,
           (int)fused, (int)one);
    for (int i = 0; i < 3 && fused; i++) {
        float *a = down(ya[i], (size_t)M * N[i]), *b = down(yb[i], (size_t)M * N[i]);
        double e = rel_err(b, a, (size_t)M * N[i]);
        CHECKF(e < 2e-3, "norm_matmul_group bits=%d M=%d product %d: %.3g from rmsnorm + matmul_group", bits, M, i, e);
        free(a), free(b);
    }
    if (one) {
        float *a = down(sa, (size_t)M * F), *b = down(sb, (size_t)M * F);
        double e = rel_err(b, a, (size_t)M * F);
        CHECKF(e < 2e-3, "norm_matmul_swiglu bits=%d M=%d: %.3g from rmsnorm + matmul_swiglu", bits, M, e);
        free(a), free(b);
    }
    /* matmul_add: the stream plus matmul's product, bit for bit */
    float *rd = up(r, (size_t)M * N[0] * 4);
    gpu->ops->matmul(gpu, ya[0], xd, M, &w[0], NULL, EM_MATH_FAST);
    bool added = gpu->ops->matmul_add(gpu, rd, xd, M, &w[0], EM_MATH_FAST);
    CHECKF(added, "matmul_add bits=%d M=%d: declined decode rows", bits, M);
    if (added) {
        float *p = down(ya[0], (size_t)M * N[0]), *q = down(rd, (size_t)M * N[0]);
        for (size_t i = 0; i < (size_t)M * N[0]; i++) r[i] += p[i];
        CHECKF(!memcmp(q, r, (size_t)M * N[0] * 4), "matmul_add bits=%d M=%d: not the product added", bits, M);
        free(p), free(q);
    }
    for (int i = 0; i < 3; i++) free_q(&w[i], wh[i]), gpu->ops->free(gpu, ya[i]), gpu->ops->free(gpu, yb[i]);
    free_q(&wg, gh), free_q(&wu, uh);
    float *dev[] = {xd, gd, hd, sa, sb, rd};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) gpu->ops->free(gpu, dev[i]);
    free(x), free(gain), free(r);
}

/* norm_matmul_swiglu leaves to matmul_mlp the MLPs it runs as one launch:
 * of gate rows that balance on their own (384) and of rows that do not on
 * an H100 or H200 (9,216 over 4,224 warps), exactly one of the two takes
 * the MLP of one FAST row. */
static void test_qnorm_or_mlp(int F) {
    const int H = 1024;
    void *gh[3], *uh[3], *dh[3];
    em_weight wg = qweight_up(F, H, 4, gh), wu = qweight_up(F, H, 4, uh), wd = qweight_up(H, F, 4, dh);
    float *x = rand_f32(H, 3.0f), *gain = rand_f32(H, 1.0f);
    float *xd = up(x, (size_t)H * 4), *gd = up(gain, (size_t)H * 4), *act = gpu->ops->alloc(gpu, (size_t)F * 4),
          *y = gpu->ops->alloc(gpu, (size_t)H * 4);
    bool normed = gpu->ops->norm_matmul_swiglu(gpu, act, xd, gd, 1e-5f, 0.0f, 1, &wg, &wu, NULL, NULL, EM_MATH_FAST);
    bool mlp = gpu->ops->matmul_mlp(gpu, y, act, xd, 1, &wg, &wu, &wd, NULL, NULL, NULL, EM_MATH_FAST, false);
    CHECKF(normed != mlp, "F=%d: norm_matmul_swiglu took=%d, matmul_mlp took=%d", F, (int)normed, (int)mlp);
    free_q(&wg, gh), free_q(&wu, uh), free_q(&wd, dh);
    gpu->ops->free(gpu, xd), gpu->ops->free(gpu, gd), gpu->ops->free(gpu, act), gpu->ops->free(gpu, y);
    free(x), free(gain);
}

static void qnorm_cases(void) {
    for (int bits = 4; bits <= 8; bits += 4)
        for (int M = 1; M <= 2; M++) test_qnorm_case(bits, M);
    test_qnorm_or_mlp(384);
    test_qnorm_or_mlp(9216);
}

static void test_qgemv_norm(void) {
    REQUIRE(gpu->ops->norm_matmul_group && gpu->ops->norm_matmul_swiglu && gpu->ops->matmul_add);
    with_qmlp_auto(qnorm_cases);
}

/* A norm or swiglu that writes its output's bf16 rounding for the FAST
 * matmul issued next: that matmul's bits are those of a matmul that rounds
 * the activations itself (here: after an unrelated operation in between,
 * which ends the twin), and an operation in between that changes the
 * activations is seen (the matmul rounds them afresh). */
/* act from xd (and hd, gd) by producer 0 (rmsnorm), 1 (add_rmsnorm) or 2 (swiglu) */
static void produce(int producer, float *act, float *xd, const float *hd, const float *gd, int M, int K) {
    if (producer == 0) gpu->ops->rmsnorm(gpu, act, xd, gd, M, K, 1e-5f, 0.0f);
    else if (producer == 1) gpu->ops->add_rmsnorm(gpu, xd, hd, act, gd, M, K, 1e-5f, 0.0f);
    else gpu->ops->swiglu(gpu, act, xd, hd, M, K, K);
}

static void test_twin_case(int M, int N, int K, int producer) {
    void *wh = weight_data(EM_BF16, (size_t)N * K);
    em_weight w = {.dtype = EM_BF16, .rows = N, .cols = K, .data = up(wh, (size_t)N * K * 2), .name = "w"};
    float *x = rand_f32((size_t)M * K, 1.0f), *h = rand_f32((size_t)M * K, 1.0f), *g = rand_f32(K, 1.0f);
    float *xd = up(x, (size_t)M * K * 4), *hd = up(h, (size_t)M * K * 4), *gd = up(g, (size_t)K * 4);
    float *act = gpu->ops->alloc(gpu, (size_t)M * K * 4), *junk = gpu->ops->alloc(gpu, 64);
    float *y1 = gpu->ops->alloc(gpu, (size_t)M * N * 4), *y2 = gpu->ops->alloc(gpu, (size_t)M * N * 4);
    float *y3 = gpu->ops->alloc(gpu, (size_t)M * N * 4), *y4 = gpu->ops->alloc(gpu, (size_t)M * N * 4);
    /* produce act (with its twin), multiply at once */
    produce(producer, act, xd, hd, gd, M, K);
    gpu->ops->matmul(gpu, y1, act, M, &w, NULL, EM_MATH_FAST);
    /* the same activations rounded by the matmul itself */
    gpu->ops->add(gpu, junk, junk, 16);
    gpu->ops->matmul(gpu, y2, act, M, &w, NULL, EM_MATH_FAST);
    float *a = down(y1, (size_t)M * N), *b = down(y2, (size_t)M * N);
    CHECKF(!memcmp(a, b, (size_t)M * N * 4), "twin producer=%d M=%d: the matmul after it differs from one that rounds",
           producer, M);
    /* a change in between: act += h must be rounded afresh */
    produce(producer, act, xd, hd, gd, M, K);
    gpu->ops->add(gpu, act, hd, (size_t)M * K);
    gpu->ops->matmul(gpu, y3, act, M, &w, NULL, EM_MATH_FAST);
    gpu->ops->add(gpu, junk, junk, 16);
    gpu->ops->matmul(gpu, y4, act, M, &w, NULL, EM_MATH_FAST);
    float *c = down(y3, (size_t)M * N), *d = down(y4, (size_t)M * N);
    CHECKF(!memcmp(c, d, (size_t)M * N * 4), "twin producer=%d M=%d: a matmul took a stale rounding", producer, M);
    CHECKF(memcmp(a, c, (size_t)M * N * 4) != 0, "twin producer=%d M=%d: the change did not reach the product",
           producer, M);
    free(a), free(b), free(c), free(d), free(wh), free(x), free(h), free(g);
    gpu->ops->free(gpu, (void *)w.data), gpu->ops->free(gpu, xd), gpu->ops->free(gpu, hd), gpu->ops->free(gpu, gd);
    gpu->ops->free(gpu, act), gpu->ops->free(gpu, junk);
    gpu->ops->free(gpu, y1), gpu->ops->free(gpu, y2), gpu->ops->free(gpu, y3), gpu->ops->free(gpu, y4);
}

/* The attention of a few rows writes the bf16 twin of its output for the
 * output projection: the product is the one a matmul that rounds itself
 * gives. 7 rows after 300 cached positions, 32 heads of 64 over 8 kv heads;
 * EXACT attention takes the per-row kernel, FAST the tensor-core tail
 * (whose merges write the twin). */
static void test_twin_attention(em_math att_math) {
    const int bs = 32, n_heads = 32, n_kv = 8, hd = 64, prior = 300, rows = 7, K = n_heads * hd, N = 256;
    int len = prior + rows, nb = (len + bs - 1) / bs;
    size_t block = (size_t)bs * n_kv * hd, kvn = (size_t)len * n_kv * hd;
    float *kp = gpu->ops->alloc(gpu, (size_t)nb * block * 4), *vp = gpu->ops->alloc(gpu, (size_t)nb * block * 4);
    float **kt = malloc((size_t)nb * sizeof *kt), **vt = malloc((size_t)nb * sizeof *vt);
    for (int b = 0; b < nb; b++) kt[b] = kp + (size_t)b * block, vt[b] = vp + (size_t)b * block;
    em_kv_view view = {kt, vt, bs, nb};
    int32_t *pos = malloc((size_t)len * 4);
    for (int i = 0; i < len; i++) pos[i] = i;
    float *kh = rand_f32(kvn, 1.0f), *vh = rand_f32(kvn, 1.0f), *qh = rand_f32((size_t)rows * K, 1.0f);
    float *kd = up(kh, kvn * 4), *vd = up(vh, kvn * 4), *qd = up(qh, (size_t)rows * K * 4);
    gpu->ops->kv_write(gpu, &view, kd, vd, pos, len, n_kv, hd);
    void *wh = weight_data(EM_BF16, (size_t)N * K);
    em_weight w = {.dtype = EM_BF16, .rows = N, .cols = K, .data = up(wh, (size_t)N * K * 2), .name = "o"};
    float *att = gpu->ops->alloc(gpu, (size_t)rows * K * 4), *junk = gpu->ops->alloc(gpu, 64);
    float *y1 = gpu->ops->alloc(gpu, (size_t)rows * N * 4), *y2 = gpu->ops->alloc(gpu, (size_t)rows * N * 4);
    int r = rows;
    em_kv_spans sp = {&view, &r, 1, att_math, 0};
    gpu->ops->attention_spans(gpu, att, qd, &sp, pos + prior, n_heads, n_kv, hd, 0.125f, 0);
    gpu->ops->matmul(gpu, y1, att, rows, &w, NULL, EM_MATH_FAST);
    gpu->ops->add(gpu, junk, junk, 16);
    gpu->ops->matmul(gpu, y2, att, rows, &w, NULL, EM_MATH_FAST);
    float *a = down(y1, (size_t)rows * N), *b = down(y2, (size_t)rows * N);
    CHECKF(!memcmp(a, b, (size_t)rows * N * 4), "twin of %s attention: the product differs from one that rounds itself",
           att_math == EM_MATH_FAST ? "fast" : "exact");
    free(a), free(b), free(kt), free(vt), free(pos), free(kh), free(vh), free(qh), free(wh);
    gpu->ops->free(gpu, kp), gpu->ops->free(gpu, vp), gpu->ops->free(gpu, kd), gpu->ops->free(gpu, vd);
    gpu->ops->free(gpu, qd), gpu->ops->free(gpu, (void *)w.data), gpu->ops->free(gpu, att), gpu->ops->free(gpu, junk);
    gpu->ops->free(gpu, y1), gpu->ops->free(gpu, y2);
}

static void test_twin(void) {
    for (int p = 0; p < 3; p++) {
        test_twin_case(7, 256, 512, p);   /* the skinny kernel */
        test_twin_case(40, 512, 256, p);  /* cuBLAS */
        test_twin_case(3, 4096, 2048, p); /* a large matrix: cuBLAS at few rows */
    }
    test_twin_attention(EM_MATH_EXACT);
    test_twin_attention(EM_MATH_FAST);
}

int main(void) {
    if (cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    setenv("EMBER_CUDA_QMLP", "1", 1); /* the one-launch MLP wherever it applies (read at first use) */
    REQUIRE(cpu_backend_create(2, &cpu) == EM_OK);
    REQUIRE(cuda_backend_create(0, &gpu) == EM_OK);
    RUN(test_rope_kv_write);
    RUN(test_rope_attention);
    RUN(test_matmul_swiglu);
    RUN(test_matmul_swiglu_quantized);
    RUN(test_matmul_mlp_quantized);
    RUN(test_matmul_mlp_rows);
    RUN(test_gemv_norm);
    RUN(test_qgemv_norm);
    RUN(test_twin);
    em_backend_free(gpu);
    em_backend_free(cpu);
    return test_summary();
}
#endif
