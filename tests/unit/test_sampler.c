/* Sampler: seeded determinism, greedy, and the sampled distribution after
 * temperature / top-k / top-p / min-p matches the analytic one (chi-square
 * style bound) on a small vocabulary; penalties and bias move logits as
 * specified. */
#include "test.h"

#include "engine/sampler.h"
#include "tensor/argmax.h"

#include <math.h>

enum { V = 8 };
static const float base_logits[V] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f};

static void expected(const em_sampling *p, double *q) {
    double pr[V], mx = -1e30;
    for (int i = 0; i < V; i++) mx = fmax(mx, base_logits[i]);
    double tot = 0;
    for (int i = 0; i < V; i++) tot += (pr[i] = exp((base_logits[i] - mx) / p->temperature));
    /* logits are already sorted descending */
    int keep = V;
    if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
    double ktot = 0;
    for (int i = 0; i < keep; i++) ktot += pr[i];
    if (p->top_p > 0 && p->top_p < 1) {
        double cum = 0;
        int k = 0;
        while (k < keep) { cum += pr[k++]; if (cum >= p->top_p * ktot) break; }
        keep = k;
    }
    int k2 = 0;
    for (int i = 0; i < keep; i++) if (pr[i] >= p->min_p * pr[0]) k2++;
    keep = p->min_p > 0 ? k2 : keep;
    double s = 0;
    for (int i = 0; i < V; i++) s += q[i] = i < keep ? pr[i] : 0;
    for (int i = 0; i < V; i++) q[i] /= s;
    (void)tot;
}

static void check_distribution(em_sampling p, const char *what) {
    p.has_seed = 1;
    p.seed = 42;
    sampler s;
    REQUIRE(sampler_init(&s, &p, V) == EM_OK);
    int counts[V] = {0};
    const int N = 40000;
    for (int n = 0; n < N; n++) {
        float l[V];
        memcpy(l, base_logits, sizeof l);
        em_token_info info;
        counts[sampler_pick(&s, l, 0, false, &info)]++;
    }
    double q[V], worst = 0;
    expected(&p, q);
    for (int i = 0; i < V; i++) {
        double sd = sqrt(N * q[i] * (1 - q[i])) + 1;
        double z = fabs(counts[i] - N * q[i]) / sd;
        if (z > worst) worst = z;
        if (q[i] == 0) CHECKF(counts[i] == 0, "%s: token %d excluded but drawn %d times", what, i, counts[i]);
    }
    CHECKF(worst < 5, "%s: deviation %.2f sigma", what, worst);
    sampler_free(&s);
}

/* The rule stated in tensor/argmax.h, written the obvious way. */
static int32_t argmax_ref(const float *x, int n) {
    int32_t best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i] && x[i] > -INFINITY && (best < 0 || x[i] > x[best])) best = i;
    if (best >= 0) return best;
    for (int i = 0; i < n; i++)
        if (x[i] == -INFINITY) return i;
    return 0;
}

/* The one-pass greedy scan: ties, NaN, -inf, rows of every length around
 * the 8 lanes, and random rows with many equal values. */
static void test_argmax(void) {
    enum { N = 70 };
    float x[N];
    uint64_t r = 12345;
    int bad = 0;
    for (int n = 1; n <= N; n++)
        for (int rep = 0; rep < 40; rep++) {
            for (int i = 0; i < n; i++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                int k = (int)(r % 11);
                x[i] = k == 0 ? NAN : k == 1 ? -INFINITY : k == 2 ? INFINITY * (rep & 1) : (float)(r >> 60);
                if (rep < 4) x[i] = rep == 0 ? NAN : rep == 1 ? -INFINITY : rep == 2 ? 3.0f : x[i];
            }
            bad += em_argmax_f32(x, n) != argmax_ref(x, n);
        }
    CHECKF(bad == 0, "%d rows where the one-pass argmax differs from the rule", bad);
    float ties[20] = {0};
    ties[17] = ties[9] = ties[13] = 5.0f;
    CHECK(em_argmax_f32(ties, 20) == 9);
    float nan_first[3] = {NAN, -1.0f, -2.0f};
    CHECK(em_argmax_f32(nan_first, 3) == 1);
}

/* The truncation written the plain way (every candidate sorted, then top-k,
 * top-p, min-p in transformers' order): the sampler selects and sorts only
 * what it needs, and must give exactly these probabilities. */
static int cmp_ref(const void *a, const void *b, void *ctx) {
    const float *pr = ctx;
    float x = pr[*(const int32_t *)a], y = pr[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

static void distribution_ref(const em_sampling *p, const float *l, int n, float *out) {
    float mx = -INFINITY, inv_t = 1.0f / p->temperature, *pr = calloc((size_t)n, sizeof *pr);
    int32_t *c = malloc((size_t)n * sizeof *c);
    for (int i = 0; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        float z = (l[i] - mx) * inv_t;
        if (z > -40.0f) c[nc++] = i, pr[i] = expf(z);
    }
    double total = 0;
    for (int i = 0; i < nc; i++) total += pr[c[i]];
    qsort_r(c, (size_t)nc, sizeof *c, cmp_ref, pr);
    if (p->top_k > 0 && nc > p->top_k) {
        nc = p->top_k;
        total = 0;
        for (int i = 0; i < nc; i++) total += pr[c[i]];
    }
    if (p->top_p > 0 && p->top_p < 1) {
        double cum = 0, limit = p->top_p * total;
        int keep = 0;
        while (keep < nc) {
            cum += pr[c[keep++]];
            if (cum >= limit) break;
        }
        nc = keep;
    }
    if (p->min_p > 0) {
        int keep = 0;
        for (int i = 0; i < nc; i++)
            if (pr[c[i]] >= p->min_p) c[keep++] = c[i];
        nc = keep;
    }
    double sum = 0;
    for (int i = 0; i < nc; i++) sum += pr[c[i]];
    memset(out, 0, (size_t)n * sizeof *out);
    for (int i = 0; i < nc; i++) out[c[i]] = (float)(pr[c[i]] / sum);
    free(pr);
    free(c);
}

/* Large vocabularies, flat and peaked rows, rows of many equal logits
 * (ties go to the lower id), and every truncation, against the plain way:
 * the same probabilities, bit for bit. Top-p without top-k sorts only the
 * prefix it needs, so the checks span nuclei from a few tokens to most of
 * the vocabulary. */
static void test_truncation_exact(void) {
    const int sizes[] = {40, 3000, 70000};
    const float spreads[] = {0.5f, 4.0f, 30.0f};
    const em_sampling cases[] = {
        {.temperature = 1, .top_p = 0.9f},
        {.temperature = 0.7f, .top_p = 0.3f},
        {.temperature = 1.5f, .top_p = 0.999f},
        {.temperature = 0.7f, .top_k = 40, .top_p = 1},
        {.temperature = 1, .top_k = 2000, .top_p = 1},
        {.temperature = 1, .top_k = 50, .top_p = 0.95f, .min_p = 0.01f},
        {.temperature = 0.8f, .top_p = 0.6f, .min_p = 0.05f},
        {.temperature = 1, .top_k = 100000, .top_p = 0.5f},
    };
    uint64_t x = 12345;
    int bad = 0, runs = 0;
    for (int si = 0; si < 3; si++)
        for (int sp = 0; sp < 3; sp++)
            for (int ties = 0; ties < 2; ties++) {
                int n = sizes[si];
                float *l = malloc((size_t)n * sizeof *l), *a = malloc((size_t)n * sizeof *a),
                      *b = malloc((size_t)n * sizeof *b);
                for (int i = 0; i < n; i++) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    float u = (float)(x >> 40) / (float)(1 << 24);
                    l[i] = spreads[sp] * (u - 0.5f) * 2;
                    if (ties) l[i] = floorf(l[i] * 2) / 2; /* few distinct values */
                }
                for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                    em_sampling p = cases[ci];
                    p.repetition_penalty = 1;
                    sampler s;
                    REQUIRE(sampler_init(&s, &p, n) == EM_OK);
                    sampler_distribution(&s, l, a);
                    distribution_ref(&p, l, n, b);
                    runs++;
                    if (memcmp(a, b, (size_t)n * sizeof *a)) {
                        bad++;
                        fprintf(stderr, "truncation differs: n=%d spread=%g ties=%d case=%zu\n", n, spreads[sp], ties, ci);
                    }
                    sampler_free(&s);
                }
                free(l), free(a), free(b);
            }
    CHECKF(bad == 0, "%d of %d truncations differ from a full sort", bad, runs);
}

int main(void) {
    test_argmax();
    test_truncation_exact();
    em_sampling p = {.temperature = 1, .top_p = 1, .repetition_penalty = 1};
    check_distribution(p, "plain");
    p.temperature = 0.7f;
    check_distribution(p, "temperature");
    p.top_k = 3;
    check_distribution(p, "top-k");
    p.top_k = 0;
    p.top_p = 0.8f;
    check_distribution(p, "top-p");
    p.top_p = 1;
    p.min_p = 0.2f;
    check_distribution(p, "min-p");
    p.top_k = 5; p.top_p = 0.9f; p.min_p = 0.05f; p.temperature = 1.3f;
    check_distribution(p, "all");

    /* same seed, same tokens */
    em_sampling q = {.temperature = 1, .top_p = 1, .repetition_penalty = 1, .seed = 7, .has_seed = 1};
    sampler a, b;
    REQUIRE(sampler_init(&a, &q, V) == EM_OK && sampler_init(&b, &q, V) == EM_OK);
    int same = 1;
    for (int n = 0; n < 200; n++) {
        float l1[V], l2[V];
        memcpy(l1, base_logits, sizeof l1);
        memcpy(l2, base_logits, sizeof l2);
        em_token_info i1, i2;
        same &= sampler_pick(&a, l1, 3, true, &i1) == sampler_pick(&b, l2, 3, true, &i2);
        same &= i1.n_top == 3 && i1.top_ids[0] == 0 && i1.top_ids[1] == 1 && i1.top_ids[2] == 2;
    }
    CHECK(same);
    sampler_free(&a);
    sampler_free(&b);

    /* greedy + logprob */
    em_sampling g = {.temperature = 0, .repetition_penalty = 1};
    sampler gs;
    REQUIRE(sampler_init(&gs, &g, V) == EM_OK);
    float l[V];
    memcpy(l, base_logits, sizeof l);
    em_token_info info;
    CHECK(sampler_pick(&gs, l, 0, true, &info) == 0);
    double lse = 0;
    for (int i = 0; i < V; i++) lse += exp(base_logits[i] - 2.0);
    CHECK_NEAR(info.logprob, -log(lse), 1e-5);
    sampler_free(&gs);

    /* penalties: repetition divides positive / multiplies negative logits once
     * per distinct token; presence/frequency subtract; bias adds */
    em_sampling pen = {.temperature = 0, .repetition_penalty = 2, .presence_penalty = 0.5f, .frequency_penalty = 0.25f};
    sampler ps;
    REQUIRE(sampler_init(&ps, &pen, V) == EM_OK);
    memcpy(l, base_logits, sizeof l);
    int32_t hist[] = {0, 0, 6, 3};
    int32_t bias_ids[] = {7};
    float bias_vals[] = {10};
    sampler_process(&ps, l, hist, 4, bias_ids, bias_vals, 1);
    CHECK_NEAR(l[0], 2.0 / 2 - 0.5 - 0.25 * 2, 1e-6);
    CHECK_NEAR(l[6], -1.0 * 2 - 0.5 - 0.25, 1e-6);
    CHECK_NEAR(l[3], 0.5 / 2 - 0.5 - 0.25, 1e-6);
    CHECK_NEAR(l[7], -3.0 + 10, 1e-6);
    CHECK_NEAR(l[1], 1.5, 1e-6);
    sampler_free(&ps);
    return test_summary();
}
