/* test_cuda_ops.c — every CUDA operation against the CPU backend on random
 * inputs and edge shapes (odd widths, a single row, partial rotary, GQA,
 * sliding windows, scattered KV blocks). Skipped (77) when ember is built
 * without CUDA or the machine has no GPU. */
#include "test.h"

#include "backend/backend.h"

#ifndef EMBER_HAVE_CUDA
int main(void) {
    fprintf(stderr, "built without CUDA: skipped\n");
    return 77;
}
#else
#include "backend/cuda/cuda_backend.h"

#include <stdint.h>

static em_backend *cpu, *gpu;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static float *rand_f32(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

/* Device copy of host bytes (freed by the caller with gpu->ops->free). */
static void *up(const void *h, size_t bytes) {
    void *d = gpu->ops->alloc(gpu, bytes);
    REQUIRE(d);
    REQUIRE(gpu->ops->upload(gpu, d, h, bytes) == EM_OK);
    return d;
}

static float *down(const void *d, size_t n) {
    float *h = malloc(n * sizeof *h);
    REQUIRE(gpu->ops->download(gpu, h, d, n * sizeof *h) == EM_OK);
    return h;
}

/* Largest |a-b| relative to the largest |b| (at least 1e-30). */
static double rel_err(const float *a, const float *b, size_t n) {
    double err = 0, mag = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > err || d != d) err = d != d ? INFINITY : d;
        if (fabs(b[i]) > mag) mag = fabs(b[i]);
    }
    return err / mag;
}

static void *weight_data(em_dtype dt, size_t n) {
    if (dt == EM_F32) return rand_f32(n, 0.5f);
    uint16_t *w = malloc(n * 2);
    for (size_t i = 0; i < n; i++) w[i] = dt == EM_BF16 ? f32_to_bf16(frand() * 0.5f) : f32_to_f16(frand() * 0.5f);
    return w;
}

static void test_matmul_case(em_dtype dt, int M, int N, int K, bool with_bias, em_math math) {
    size_t wbytes = (size_t)N * K * dtype_size(dt);
    void *wh = weight_data(dt, (size_t)N * K);
    float *x = rand_f32((size_t)M * K, 1.0f), *bias = with_bias ? rand_f32((size_t)N, 1.0f) : NULL;
    em_weight wc = {.dtype = dt, .rows = N, .cols = K, .data = wh, .name = "w"};
    em_weight wg = wc;
    wg.data = up(wh, wbytes);
    float *xd = up(x, (size_t)M * K * 4), *bd = bias ? up(bias, (size_t)N * 4) : NULL;
    float *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4), *yc = malloc((size_t)M * N * 4);
    cpu->ops->matmul(cpu, yc, x, M, &wc, bias, math);
    gpu->ops->matmul(gpu, yd, xd, M, &wg, bd, math);
    float *yg = down(yd, (size_t)M * N);
    double tol = math == EM_MATH_FAST && dt == EM_BF16 && M >= 16 ? 2e-2 : 2e-5;
    double e = rel_err(yg, yc, (size_t)M * N);
    CHECKF(e <= tol, "matmul %s M=%d N=%d K=%d bias=%d %s: rel err %.3g", dtype_name(dt), M, N, K, with_bias,
           math == EM_MATH_FAST ? "fast" : "exact", e);
    gpu->ops->free(gpu, (void *)wg.data);
    gpu->ops->free(gpu, xd);
    gpu->ops->free(gpu, yd);
    if (bd) gpu->ops->free(gpu, bd);
    free(wh), free(x), free(bias), free(yc), free(yg);
}

static void test_matmul(void) {
    em_dtype dts[] = {EM_BF16, EM_F16, EM_F32};
    int shapes[][3] = {{1, 67, 64}, {3, 256, 512}, {8, 130, 136}, {9, 64, 37}, {1, 5, 1}, {33, 96, 64},
                       {64, 200, 128}, {17, 48, 2056}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int b = 0; b < 2; b++) {
                test_matmul_case(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], b, EM_MATH_EXACT);
                if (dts[d] == EM_BF16) test_matmul_case(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], b, EM_MATH_FAST);
            }
}

/* EXACT rows do not depend on the batch: every row of a batched matmul is
 * bit for bit the row computed alone (the decode GEMV and the staged batch
 * kernel share one summation order). */
static void test_matmul_batch_invariance(void) {
    int Ms[] = {2, 8, 9, 37, 64};
    int N = 96, K = 2048 + 512 + 8; /* several staged chunks and a partial one */
    size_t wbytes = (size_t)N * K * 2;
    void *wh = weight_data(EM_BF16, (size_t)N * K);
    em_weight wg = {.dtype = EM_BF16, .rows = N, .cols = K, .data = up(wh, wbytes), .name = "w"};
    for (size_t t = 0; t < sizeof Ms / sizeof Ms[0]; t++) {
        int M = Ms[t];
        float *x = rand_f32((size_t)M * K, 1.0f);
        float *xd = up(x, (size_t)M * K * 4), *yd = gpu->ops->alloc(gpu, (size_t)M * N * 4);
        gpu->ops->matmul(gpu, yd, xd, M, &wg, NULL, EM_MATH_EXACT);
        float *batch = down(yd, (size_t)M * N);
        int differ = 0;
        for (int m = 0; m < M; m++) {
            float *y1 = gpu->ops->alloc(gpu, (size_t)N * 4);
            gpu->ops->matmul(gpu, y1, xd + (size_t)m * K, 1, &wg, NULL, EM_MATH_EXACT);
            float *one = down(y1, (size_t)N);
            differ += memcmp(one, batch + (size_t)m * N, (size_t)N * 4) != 0;
            gpu->ops->free(gpu, y1);
            free(one);
        }
        CHECKF(differ == 0, "matmul exact M=%d: %d rows differ from the same rows computed alone", M, differ);
        gpu->ops->free(gpu, xd);
        gpu->ops->free(gpu, yd);
        free(x), free(batch);
    }
    gpu->ops->free(gpu, (void *)wg.data);
    free(wh);
}

static void test_rmsnorm(void) {
    int cases[][2] = {{1, 64}, {5, 37}, {3, 2048}, {130, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], n = cases[c][1];
        for (int off = 0; off < 2; off++) {
            float *x = rand_f32((size_t)rows * n, 3.0f), *g = rand_f32((size_t)n, 1.0f), *yc = malloc((size_t)rows * n * 4);
            float *xd = up(x, (size_t)rows * n * 4), *gd = up(g, (size_t)n * 4);
            cpu->ops->rmsnorm(cpu, yc, x, g, rows, n, 1e-6f, (float)off);
            gpu->ops->rmsnorm(gpu, xd, xd, gd, rows, n, 1e-6f, (float)off); /* in place */
            float *yg = down(xd, (size_t)rows * n);
            double e = rel_err(yg, yc, (size_t)rows * n);
            CHECKF(e <= 1e-6, "rmsnorm rows=%d n=%d offset=%d: rel err %.3g", rows, n, off, e);
            gpu->ops->free(gpu, xd), gpu->ops->free(gpu, gd);
            free(x), free(g), free(yc), free(yg);
        }
    }
}

/* add_rmsnorm equals add then rmsnorm; its output may be the h it adds. */
static void test_add_rmsnorm(void) {
    int cases[][2] = {{1, 2048}, {5, 37}, {70, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], n = cases[c][1];
        size_t N = (size_t)rows * n;
        float *x = rand_f32(N, 3.0f), *h = rand_f32(N, 3.0f), *g = rand_f32((size_t)n, 1.0f), *yc = malloc(N * 4);
        float *xd = up(x, N * 4), *hd = up(h, N * 4), *gd = up(g, (size_t)n * 4);
        cpu->ops->add(cpu, x, h, N);
        cpu->ops->rmsnorm(cpu, yc, x, g, rows, n, 1e-5f, 0.0f);
        gpu->ops->add_rmsnorm(gpu, xd, hd, hd, gd, rows, n, 1e-5f, 0.0f);
        float *xg = down(xd, N), *yg = down(hd, N);
        CHECKF(rel_err(xg, x, N) <= 1e-7, "add_rmsnorm rows=%d n=%d: residual differs", rows, n);
        double e = rel_err(yg, yc, N);
        CHECKF(e <= 1e-6, "add_rmsnorm rows=%d n=%d: rel err %.3g", rows, n, e);
        gpu->ops->free(gpu, xd), gpu->ops->free(gpu, hd), gpu->ops->free(gpu, gd);
        free(x), free(h), free(g), free(yc), free(xg), free(yg);
    }
}

static void test_rope(void) {
    int cases[][4] = {{4, 8, 64, 64}, {3, 2, 48, 24}, {1, 32, 128, 128}, {7, 3, 80, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rows = cases[c][0], heads = cases[c][1], hd = cases[c][2], rot = cases[c][3];
        size_t n = (size_t)rows * heads * hd;
        float *x = rand_f32(n, 2.0f), *inv = malloc((size_t)rot / 2 * 4);
        for (int i = 0; i < rot / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / rot);
        int32_t *pos = malloc((size_t)rows * 4);
        for (int r = 0; r < rows; r++) pos[r] = r * 977 + 3; /* large angles too */
        float *xd = up(x, n * 4);
        cpu->ops->rope(cpu, x, rows, heads, hd, rot, pos, inv, 1.25f);
        gpu->ops->rope(gpu, xd, rows, heads, hd, rot, pos, inv, 1.25f);
        float *xg = down(xd, n);
        double e = rel_err(xg, x, n);
        CHECKF(e <= 2e-6, "rope rows=%d heads=%d hd=%d rot=%d: rel err %.3g", rows, heads, hd, rot, e);
        gpu->ops->free(gpu, xd);
        free(x), free(inv), free(pos), free(xg);
    }
}

static void test_elementwise(void) {
    int rows = 5, n = 77, ld = 100;
    float *g = rand_f32((size_t)rows * ld, 4.0f), *u = rand_f32((size_t)rows * ld, 2.0f), *oc = malloc((size_t)rows * n * 4);
    float *gd = up(g, (size_t)rows * ld * 4), *ud = up(u, (size_t)rows * ld * 4), *od = gpu->ops->alloc(gpu, (size_t)rows * n * 4);
    cpu->ops->swiglu(cpu, oc, g, u, rows, n, ld);
    gpu->ops->swiglu(gpu, od, gd, ud, rows, n, ld);
    float *og = down(od, (size_t)rows * n);
    double e = rel_err(og, oc, (size_t)rows * n);
    CHECKF(e <= 1e-5, "swiglu: rel err %.3g", e);
    size_t an = 100003;
    float *a = rand_f32(an, 1.0f), *b = rand_f32(an, 1.0f);
    float *ad = up(a, an * 4), *bd = up(b, an * 4);
    cpu->ops->add(cpu, a, b, an);
    gpu->ops->add(gpu, ad, bd, an);
    float *ag = down(ad, an);
    CHECKF(rel_err(ag, a, an) == 0, "add differs");
    /* copy, overlapping */
    gpu->ops->copy(gpu, ad + 1, ad, (an - 1) * 4);
    float *cg = down(ad, an);
    CHECK(cg[1] == a[0] && cg[an - 1] == a[an - 2]);
    gpu->ops->free(gpu, gd), gpu->ops->free(gpu, ud), gpu->ops->free(gpu, od);
    gpu->ops->free(gpu, ad), gpu->ops->free(gpu, bd);
    free(g), free(u), free(oc), free(og), free(a), free(b), free(ag), free(cg);
}

static void test_embed(void) {
    em_dtype dts[] = {EM_BF16, EM_F16, EM_F32};
    int V = 50, D = 36, n = 7;
    int32_t ids[] = {0, 49, 3, 3, 17, 8, 48};
    for (int d = 0; d < 3; d++) {
        void *th = weight_data(dts[d], (size_t)V * D);
        em_weight tc = {.dtype = dts[d], .rows = V, .cols = D, .data = th, .name = "embed"}, tg = tc;
        tg.data = up(th, (size_t)V * D * dtype_size(dts[d]));
        float *oc = malloc((size_t)n * D * 4), *od = gpu->ops->alloc(gpu, (size_t)n * D * 4);
        cpu->ops->embed(cpu, oc, &tc, ids, n);
        gpu->ops->embed(gpu, od, &tg, ids, n);
        float *og = down(od, (size_t)n * D);
        CHECKF(rel_err(og, oc, (size_t)n * D) == 0, "embed %s differs", dtype_name(dts[d]));
        gpu->ops->free(gpu, (void *)tg.data), gpu->ops->free(gpu, od);
        free(th), free(oc), free(og);
    }
}

/* A sequence of `len` positions in scattered blocks of a pool, written by
 * kv_write in two parts (a prefill, then single decode rows), then attended
 * by `nq` query rows at the end; CPU and GPU pools get the same layout. */
static void test_attention_case(int n_heads, int n_kv, int hd, int len, int nq, int window) {
    const int bs = 32, pool_blocks = (len + bs - 1) / bs + 3;
    size_t row = (size_t)n_kv * hd, block = (size_t)bs * row;
    float *kpool_c = calloc((size_t)pool_blocks * block, 4), *vpool_c = calloc((size_t)pool_blocks * block, 4);
    float *kpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    float *vpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    REQUIRE(kpool_g && vpool_g);
    int nb = (len + bs - 1) / bs;
    float **kc = malloc((size_t)nb * sizeof *kc), **vc = malloc((size_t)nb * sizeof *vc);
    float **kg = malloc((size_t)nb * sizeof *kg), **vg = malloc((size_t)nb * sizeof *vg);
    for (int b = 0; b < nb; b++) { /* blocks in reverse pool order */
        size_t at = (size_t)(pool_blocks - 1 - b) * block;
        kc[b] = kpool_c + at, vc[b] = vpool_c + at, kg[b] = kpool_g + at, vg[b] = vpool_g + at;
    }
    em_kv_view vc_ = {kc, vc, bs, nb}, vg_ = {kg, vg, bs, nb};
    float *k = rand_f32((size_t)len * row, 1.0f), *v = rand_f32((size_t)len * row, 1.0f);
    int32_t *pos = malloc((size_t)len * 4);
    for (int i = 0; i < len; i++) pos[i] = i;
    float *kd = up(k, (size_t)len * row * 4), *vd = up(v, (size_t)len * row * 4);
    int pre = len - nq > 0 ? len - nq : 0;
    if (pre) {
        cpu->ops->kv_write(cpu, &vc_, k, v, pos, pre, n_kv, hd);
        gpu->ops->kv_write(gpu, &vg_, kd, vd, pos, pre, n_kv, hd);
    }
    for (int i = pre; i < len; i++) {
        cpu->ops->kv_write(cpu, &vc_, k + (size_t)i * row, v + (size_t)i * row, pos + i, 1, n_kv, hd);
        gpu->ops->kv_write(gpu, &vg_, kd + (size_t)i * row, vd + (size_t)i * row, pos + i, 1, n_kv, hd);
    }
    size_t qn = (size_t)nq * n_heads * hd;
    float *q = rand_f32(qn, 1.0f), *oc = malloc(qn * 4);
    float *qd = up(q, qn * 4), *od = gpu->ops->alloc(gpu, qn * 4);
    float scale = 1.0f / sqrtf((float)hd);
    cpu->ops->attention(cpu, oc, q, &vc_, pos + (len - nq), nq, n_heads, n_kv, hd, scale, window);
    gpu->ops->attention(gpu, od, qd, &vg_, pos + (len - nq), nq, n_heads, n_kv, hd, scale, window);
    float *og = down(od, qn);
    double e = rel_err(og, oc, qn);
    CHECKF(e <= 1e-5, "attention heads=%d kv=%d hd=%d len=%d rows=%d window=%d: rel err %.3g", n_heads, n_kv, hd, len,
           nq, window, e);
    /* the cache itself: the last block's bytes */
    float *kb = down(kg[nb - 1], block);
    CHECKF(rel_err(kb, kc[nb - 1], (size_t)((len - 1) % bs + 1) * row) == 0, "kv_write differs");
    gpu->ops->release(gpu, kpool_g, 0), gpu->ops->release(gpu, vpool_g, 0);
    gpu->ops->free(gpu, kd), gpu->ops->free(gpu, vd), gpu->ops->free(gpu, qd), gpu->ops->free(gpu, od);
    free(kpool_c), free(vpool_c), free(kc), free(vc), free(kg), free(vg), free(k), free(v), free(pos), free(q);
    free(oc), free(og), free(kb);
}

static void test_attention(void) {
    test_attention_case(4, 2, 64, 1, 1, 0);      /* first token */
    test_attention_case(8, 2, 64, 45, 45, 0);    /* prefill, GQA 4 */
    test_attention_case(8, 8, 48, 70, 1, 0);     /* decode, MHA, odd-ish head_dim */
    test_attention_case(4, 1, 128, 300, 5, 0);   /* several key tiles */
    test_attention_case(6, 3, 36, 200, 20, 17);  /* sliding window, head_dim not /8 */
    test_attention_case(2, 2, 256, 129, 2, 0);   /* 2 dims per thread */
    test_attention_case(2, 1, 37, 33, 3, 0);     /* head_dim not /4: scalar path */
    test_attention_case(8, 2, 128, 400, 200, 0); /* one sequence, tiled path */
    test_attention_case(4, 4, 64, 97, 97, 31);   /* tiled path, window, whole prompt */
}

/* One sequence of a batch: `prior` tokens already cached, `rows` new ones. */
typedef struct span_case {
    int prior, rows;
} span_case;

/* A batch of several sequences, each with its own block table over one
 * shared pool (blocks interleaved between the sequences, in no order), is
 * written and attended in one kv_write_spans / attention_spans call on the
 * GPU and span by span on the CPU. More than 64 rows in all take the tiled
 * path. Also checks that a second run gives the same bits. */
static void test_attention_spans_case(int n_heads, int n_kv, int hd, int window, const span_case *sc, int n_spans) {
    const int bs = 16;
    size_t row = (size_t)n_kv * hd, block = (size_t)bs * row, qrow = (size_t)n_heads * hd;
    int total_blocks = 0, n = 0;
    for (int i = 0; i < n_spans; i++) {
        total_blocks += (sc[i].prior + sc[i].rows + bs - 1) / bs;
        n += sc[i].rows;
    }
    int pool_blocks = total_blocks + 2;
    float *kpool_c = calloc((size_t)pool_blocks * block, 4), *vpool_c = calloc((size_t)pool_blocks * block, 4);
    float *kpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    float *vpool_g = gpu->ops->reserve(gpu, (size_t)pool_blocks * block * 4);
    REQUIRE(kpool_c && vpool_c && kpool_g && vpool_g);
    em_kv_view *views_c = calloc((size_t)n_spans, sizeof *views_c), *views_g = calloc((size_t)n_spans, sizeof *views_g);
    float ***tables = calloc((size_t)n_spans * 4, sizeof *tables);
    int *rows = malloc((size_t)n_spans * sizeof *rows);
    int32_t *pos = malloc((size_t)n * 4);
    float *k = rand_f32((size_t)n * row, 1.0f), *v = rand_f32((size_t)n * row, 1.0f);
    float *kd = up(k, (size_t)n * row * 4), *vd = up(v, (size_t)n * row * 4);
    /* the sequences' blocks in pool slots scrambled by a prime stride (coprime to the pool's size) */
    for (int i = 0, r = 0, slot = 0; i < n_spans; i++) {
        int len = sc[i].prior + sc[i].rows, nb = (len + bs - 1) / bs;
        for (int t = 0; t < 4; t++) tables[4 * i + t] = malloc((size_t)nb * sizeof(float *));
        for (int b = 0; b < nb; b++, slot++) {
            size_t at = (size_t)(((long long)slot * 1000003) % pool_blocks) * block;
            tables[4 * i][b] = kpool_c + at, tables[4 * i + 1][b] = vpool_c + at;
            tables[4 * i + 2][b] = kpool_g + at, tables[4 * i + 3][b] = vpool_g + at;
        }
        views_c[i] = (em_kv_view){tables[4 * i], tables[4 * i + 1], bs, nb};
        views_g[i] = (em_kv_view){tables[4 * i + 2], tables[4 * i + 3], bs, nb};
        if (sc[i].prior) { /* the earlier tokens, as an earlier step wrote them */
            float *pk = rand_f32((size_t)sc[i].prior * row, 1.0f), *pv = rand_f32((size_t)sc[i].prior * row, 1.0f);
            int32_t *pp = malloc((size_t)sc[i].prior * 4);
            for (int j = 0; j < sc[i].prior; j++) pp[j] = j;
            float *pkd = up(pk, (size_t)sc[i].prior * row * 4), *pvd = up(pv, (size_t)sc[i].prior * row * 4);
            cpu->ops->kv_write(cpu, &views_c[i], pk, pv, pp, sc[i].prior, n_kv, hd);
            gpu->ops->kv_write(gpu, &views_g[i], pkd, pvd, pp, sc[i].prior, n_kv, hd);
            float sync;
            REQUIRE(gpu->ops->download(gpu, &sync, pkd, sizeof sync) == EM_OK);
            gpu->ops->free(gpu, pkd), gpu->ops->free(gpu, pvd);
            free(pk), free(pv), free(pp);
        }
        rows[i] = sc[i].rows;
        for (int j = 0; j < sc[i].rows; j++) pos[r++] = sc[i].prior + j;
    }
    em_kv_spans sg = {views_g, rows, n_spans};
    gpu->ops->kv_write_spans(gpu, &sg, kd, vd, pos, n_kv, hd);
    size_t qn = (size_t)n * qrow;
    float *q = rand_f32(qn, 1.0f), *oc = malloc(qn * 4);
    float *qd = up(q, qn * 4), *od = gpu->ops->alloc(gpu, qn * 4), *od2 = gpu->ops->alloc(gpu, qn * 4);
    float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0, r = 0; i < n_spans; r += rows[i++]) {
        cpu->ops->kv_write(cpu, &views_c[i], k + (size_t)r * row, v + (size_t)r * row, pos + r, rows[i], n_kv, hd);
        cpu->ops->attention(cpu, oc + (size_t)r * qrow, q + (size_t)r * qrow, &views_c[i], pos + r, rows[i], n_heads,
                            n_kv, hd, scale, window);
    }
    gpu->ops->attention_spans(gpu, od, qd, &sg, pos, n_heads, n_kv, hd, scale, window);
    gpu->ops->attention_spans(gpu, od2, qd, &sg, pos, n_heads, n_kv, hd, scale, window);
    float *og = down(od, qn), *og2 = down(od2, qn);
    double e = rel_err(og, oc, qn);
    CHECKF(e <= 1e-5, "attention spans=%d rows=%d heads=%d kv=%d hd=%d window=%d: rel err %.3g", n_spans, n, n_heads,
           n_kv, hd, window, e);
    /* per row too, looser (rows of many keys have small outputs): a wrong
     * row of small values must not hide behind the batch's large ones */
    double worst = 0;
    for (int r = 0; r < n; r++) {
        double er = rel_err(og + (size_t)r * qrow, oc + (size_t)r * qrow, qrow);
        if (er > worst || er != er) worst = er != er ? INFINITY : er;
    }
    CHECKF(worst <= 1e-4, "attention spans=%d rows=%d hd=%d window=%d: worst row rel err %.3g", n_spans, n, hd, window,
           worst);
    CHECKF(memcmp(og, og2, qn * 4) == 0, "attention spans=%d rows=%d hd=%d: two runs differ", n_spans, n, hd);
    gpu->ops->release(gpu, kpool_g, 0), gpu->ops->release(gpu, vpool_g, 0);
    gpu->ops->free(gpu, kd), gpu->ops->free(gpu, vd), gpu->ops->free(gpu, qd);
    gpu->ops->free(gpu, od), gpu->ops->free(gpu, od2);
    for (int t = 0; t < n_spans * 4; t++) free(tables[t]);
    free(tables), free(views_c), free(views_g), free(rows), free(pos), free(k), free(v), free(q), free(oc);
    free(og), free(og2), free(kpool_c), free(vpool_c);
}

#define SPANS(...) (const span_case[]){__VA_ARGS__}, (int)(sizeof((span_case[]){__VA_ARGS__}) / sizeof(span_case))

static void test_attention_prefill(void) {
    /* GQA 1, 4, 8 at head_dim 64, 128, 256; spans of different lengths and starts */
    test_attention_spans_case(8, 8, 64, 0, SPANS({0, 70}, {37, 5}, {300, 120}));
    test_attention_spans_case(8, 2, 128, 0, SPANS({100, 200}, {0, 65}));
    test_attention_spans_case(16, 2, 64, 0, SPANS({0, 300}, {10, 1}, {500, 200}, {3, 99}));
    test_attention_spans_case(4, 1, 256, 0, SPANS({20, 90}, {0, 40}));
    test_attention_spans_case(32, 8, 64, 0, SPANS({0, 512}));               /* Llama-3.2-1B shape */
    test_attention_spans_case(8, 8, 128, 0, SPANS({5, 65}));                 /* smallest tiled batch */
    test_attention_spans_case(8, 1, 256, 0, SPANS({0, 130}, {64, 70}));
    /* sliding windows: shorter than a key tile, longer than the prompt */
    test_attention_spans_case(8, 1, 256, 50, SPANS({64, 130}));
    test_attention_spans_case(8, 2, 64, 33, SPANS({0, 150}, {200, 80}));
    test_attention_spans_case(4, 4, 128, 100, SPANS({7, 65}, {0, 3}));
    test_attention_spans_case(8, 2, 64, 4096, SPANS({40, 200}));
    /* head dims between specialisations, odd groups, a group of 16 */
    test_attention_spans_case(6, 2, 80, 0, SPANS({5, 70}, {0, 33}));
    test_attention_spans_case(4, 2, 37, 0, SPANS({0, 66}));                  /* not a multiple of 4: scalar loads */
    test_attention_spans_case(6, 2, 200, 17, SPANS({30, 100}));
    test_attention_spans_case(32, 2, 64, 0, SPANS({0, 90}, {77, 30}));
    /* short chunks of long sequences: few tiles, so their keys are split over
     * several blocks and merged (on GPUs of more multiprocessors than blocks) */
    test_attention_spans_case(8, 2, 64, 0, SPANS({3000, 70}));
    test_attention_spans_case(4, 4, 128, 1500, SPANS({2500, 80}));
    test_attention_spans_case(8, 1, 256, 0, SPANS({1500, 40}, {10, 1}));
    /* many decode rows in one large batch: the per-row kernel over a row map,
     * with splits (few such rows) and without (more than 64) */
    span_case many[71];
    for (int i = 0; i < 70; i++) many[i] = (span_case){(i * 37) % 300, 1 + (i % 3 == 0)};
    many[70] = (span_case){50, 100};
    test_attention_spans_case(8, 2, 64, 0, many, 71);
    test_attention_spans_case(4, 4, 128, 20, many + 40, 31);
    test_attention_spans_case(8, 2, 64, 0, many, 60);
    /* few rows: the split (decode) path over several spans */
    test_attention_spans_case(8, 2, 128, 0, SPANS({100, 1}, {0, 1}, {33, 1}, {400, 1}));
    test_attention_spans_case(8, 2, 64, 0, SPANS({10, 20}, {0, 44}));
}

int main(void) {
    if (cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    REQUIRE(cpu_backend_create(2, &cpu) == EM_OK);
    REQUIRE(cuda_backend_create(0, &gpu) == EM_OK);
    fprintf(stderr, "comparing %s against %s\n", gpu->desc, cpu->desc);
    test_matmul();
    test_matmul_batch_invariance();
    test_add_rmsnorm();
    test_rmsnorm();
    test_rope();
    test_elementwise();
    test_embed();
    test_attention();
    test_attention_prefill();
    em_backend_free(gpu);
    em_backend_free(cpu);
    return test_summary();
}
#endif
