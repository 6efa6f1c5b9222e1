/* Qwen3.5 recurrent state and MTP speculative decoding, on the golden
 * checkpoint with an MTP head:
 *  - a verified span gives the logits of the same tokens fed one by one;
 *  - rolling a sequence back into a verified span (KV + recurrent state)
 *    continues exactly like a sequence that only saw the kept tokens;
 *  - snapshot / restore of the recurrent state;
 *  - speculative greedy decoding gives the ids of plain greedy decoding,
 *    with the model's own MTP head and with an "oracle" drafter (the trunk
 *    itself, run on a second instance, corrupted at some positions) that
 *    makes every acceptance path happen (all, some, none accepted);
 *  - with sampling, the output distribution is unchanged (two-sample
 *    chi-square over many seeds), and the acceptance rule alone turns
 *    drafts from q into draws from p (synthetic 6-token vocabulary). */
#include "test.h"

#include "engine/spec.h"
#include "model/model.h"

static char dir[1024];

static em_model *open_model(void) {
    em_model *m;
    em_open_options o = {.n_threads = 2, .precision = EM_PRECISION_EXACT, .max_sequences = 4, .max_context = 400};
    if (em_model_open(dir, &o, &m) != EM_OK) {
        fprintf(stderr, "%s\n", em_last_error());
        exit(1);
    }
    return m;
}

static em_status fwd(em_model *m, int seq, const int32_t *ids, int n, logits_mode mode, float *logits) {
    em_span sp = {seq, ids, n, mode, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    return model_forward(m, &b, logits);
}

static double range_of(const float *x, size_t n) {
    double lo = x[0], hi = x[0];
    for (size_t i = 0; i < n; i++) lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    return hi - lo;
}

static void test_rollback(em_model *m) {
    int V = m->cfg.vocab, A, B, C;
    enum { P = 70, S = 5, KEEP = 2 };
    int32_t ids[P + S + 1];
    for (int i = 0; i < P + S + 1; i++) ids[i] = (int32_t)((i * 131 + 7) % V);
    float *span = malloc(sizeof(float) * (S + 1) * V), *one = malloc(sizeof(float) * V), *ref = malloc(sizeof(float) * V);
    REQUIRE(kv_seq_alloc(m->kv, &A) == EM_OK && kv_seq_alloc(m->kv, &B) == EM_OK && kv_seq_alloc(m->kv, &C) == EM_OK);
    /* A: prompt, mark, a span of S, cut back to P + KEEP, one more token */
    REQUIRE(fwd(m, A, ids, P, LOGITS_NONE, NULL) == EM_OK);
    REQUIRE(model_seq_mark(m, A, S) == EM_OK);
    REQUIRE(fwd(m, A, ids + P, S, LOGITS_ALL, span) == EM_OK);
    /* C: the same tokens one at a time */
    REQUIRE(fwd(m, C, ids, P, LOGITS_NONE, NULL) == EM_OK);
    double worst = 0, rng = range_of(span, (size_t)S * V);
    for (int t = 0; t < S; t++) {
        REQUIRE(fwd(m, C, ids + P + t, 1, LOGITS_LAST, one) == EM_OK);
        for (int v = 0; v < V; v++) worst = fmax(worst, fabs(one[v] - span[(size_t)t * V + v]));
    }
    CHECKF(worst <= 1e-5 * rng, "verified span vs single steps: %g of range %g", worst, rng);
    REQUIRE(model_seq_truncate(m, A, P + KEEP) == EM_OK);
    CHECK(m->kv->seqs[A].len == P + KEEP);
    int32_t other = (ids[P + KEEP] + 1) % V; /* a token the span did not have there */
    REQUIRE(fwd(m, A, &other, 1, LOGITS_LAST, one) == EM_OK);
    /* B: only the kept tokens, then the same one */
    REQUIRE(fwd(m, B, ids, P + KEEP, LOGITS_NONE, NULL) == EM_OK);
    REQUIRE(fwd(m, B, &other, 1, LOGITS_LAST, ref) == EM_OK);
    worst = 0;
    for (int v = 0; v < V; v++) worst = fmax(worst, fabs(one[v] - ref[v]));
    CHECKF(worst <= 1e-5 * range_of(ref, V), "rolled back vs fresh: %g", worst);
    /* truncating without a mark, or before it, is refused */
    CHECK(model_seq_truncate(m, B, 3) != EM_OK);
    /* snapshot / restore: B's state at P + KEEP + 1, advance, restore */
    size_t nb = m->family->state_bytes(m);
    REQUIRE(nb > 0);
    void *snap = malloc(nb);
    int len = m->kv->seqs[B].len;
    REQUIRE(m->family->state_save(m, B, snap) == EM_OK);
    REQUIRE(fwd(m, B, ids, 4, LOGITS_NONE, NULL) == EM_OK);
    REQUIRE(m->family->state_load(m, B, snap) == EM_OK);
    kv_seq_truncate(m->kv, B, len);
    REQUIRE(fwd(m, B, ids + 9, 1, LOGITS_LAST, ref) == EM_OK);
    REQUIRE(fwd(m, A, ids + 9, 1, LOGITS_LAST, one) == EM_OK); /* A is at the same point */
    worst = 0;
    for (int v = 0; v < V; v++) worst = fmax(worst, fabs(one[v] - ref[v]));
    CHECKF(worst <= 1e-5 * range_of(ref, V), "restored snapshot: %g", worst);
    free(snap);
    kv_seq_release(m->kv, A);
    kv_seq_release(m->kv, B);
    kv_seq_release(m->kv, C);
    free(span);
    free(one);
    free(ref);
}

/* ---- generation helpers ---- */

typedef struct collect {
    int32_t ids[256];
    int n;
} collect;

static int on_tok(void *u, const em_token_info *info) {
    collect *c = u;
    if (info->token >= 0 && c->n < 256) c->ids[c->n++] = info->token;
    return 0;
}

static em_generate_result gen(em_model *m, const int32_t *prompt, int np, int max, em_sampling smp, int k, collect *c) {
    memset(c, 0, sizeof *c);
    em_generate_params p = {.prompt = prompt, .n_prompt = (size_t)np, .max_tokens = max, .sampling = smp,
                            .on_token = on_tok, .user = c, .ignore_eos = 1, .spec_draft_tokens = k};
    em_generate_result r;
    if (em_generate(m, &p, &r) != EM_OK) {
        fprintf(stderr, "%s\n", em_last_error());
        exit(1);
    }
    return r;
}

/* ---- the oracle drafter: the trunk itself on a second instance ---- */

static struct {
    em_model *oracle;
    int32_t hist[512];
    float scale;   /* draft logits scaled: q differs from p */
    int corrupt;   /* greedy: swap the argmax at every third position */
} D;

static em_status oracle_mtp(em_model *m, int seq, const int32_t *tokens, const float *hidden, int pos0, int n,
                            float *logits, float *hidden_out) {
    (void)seq;
    (void)hidden;
    for (int i = 0; i < n; i++) D.hist[pos0 + i + 1] = tokens[i];
    int len = pos0 + n + 1, s;
    if (hidden_out) memset(hidden_out, 0, sizeof(float) * (size_t)m->cfg.hidden);
    if (!logits) return EM_OK;
    EM_TRY(kv_seq_alloc(D.oracle->kv, &s));
    em_status st = fwd(D.oracle, s, D.hist, len, LOGITS_LAST, logits);
    kv_seq_release(D.oracle->kv, s);
    int V = m->cfg.vocab, best = 0;
    for (int v = 0; v < V; v++) {
        logits[v] *= D.scale;
        if (logits[v] > logits[best]) best = v;
    }
    if (D.corrupt && len % 3 == 0) logits[(best + 1) % V] = logits[best] + 1.0f;
    return st;
}

static void test_greedy(em_model *m) {
    int V = m->cfg.vocab;
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)((i * 37 + 11) % V);
    em_sampling greedy = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    collect plain, spec;
    gen(m, prompt, 40, 48, greedy, 0, &plain);
    for (int k = 1; k <= 3; k++) {
        em_generate_result r = gen(m, prompt, 40, 48, greedy, k, &spec);
        CHECKF(spec.n == plain.n && !memcmp(spec.ids, plain.ids, sizeof(int32_t) * (size_t)plain.n),
               "MTP head, k=%d: ids differ from plain greedy", k);
        CHECK(r.spec_steps > 0 && r.spec_drafted > 0);
    }
    /* a penalty makes each row depend on the accepted prefix */
    em_sampling pen = greedy;
    pen.repetition_penalty = 1.5f;
    gen(m, prompt, 40, 40, pen, 0, &plain);
    const family_ops *real = m->family;
    family_ops fake = *real;
    fake.mtp_forward = oracle_mtp;
    m->family = &fake;
    memcpy(D.hist, prompt, sizeof prompt);
    D.scale = 1.0f;
    D.corrupt = 1;
    em_generate_result r = gen(m, prompt, 40, 40, pen, 4, &spec);
    CHECKF(spec.n == plain.n && !memcmp(spec.ids, plain.ids, sizeof(int32_t) * (size_t)plain.n),
           "oracle drafter with repetition penalty: ids differ");
    CHECKF(r.spec_accepted > 0 && r.spec_accepted < r.spec_drafted, "accepted %zu of %zu", r.spec_accepted, r.spec_drafted);
    fprintf(stderr, "oracle drafter, greedy: %zu/%zu accepted in %zu trunk steps\n", r.spec_accepted, r.spec_drafted,
            r.spec_steps);
    m->family = real;
}

/* Two-sample chi-square over token counts a, b (n categories); categories
 * seen fewer than 10 times in all are pooled into one, as the test needs. */
static double chi2(const int *a, const int *b, int n, int *df) {
    double na = 0, nb = 0, x = 0, pa = 0, pb = 0;
    for (int i = 0; i < n; i++) na += a[i], nb += b[i];
    *df = -1;
    for (int i = 0; i <= n; i++) {
        double ca, cb;
        if (i < n) {
            if (a[i] + b[i] == 0) continue;
            if (a[i] + b[i] < 10) {
                pa += a[i], pb += b[i];
                continue;
            }
            ca = a[i], cb = b[i];
        } else {
            if (pa + pb == 0) continue;
            ca = pa, cb = pb;
        }
        (*df)++;
        double ea = (ca + cb) * na / (na + nb), eb = (ca + cb) * nb / (na + nb);
        x += (ca - ea) * (ca - ea) / ea + (cb - eb) * (cb - eb) / eb;
    }
    return x;
}

static void test_sampling(em_model *m) {
    int V = m->cfg.vocab;
    enum { GEN = 3 };
    /* fewer runs under the sanitizers (slow), still a two-sample test */
    int RUNS = getenv("EMBER_SANITIZED") ? 100 : 300;
    int32_t prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = (int32_t)((i * 53 + 5) % V);
    em_sampling smp = {.temperature = 1.0f, .top_p = 1, .top_k = 4, .repetition_penalty = 1, .has_seed = 1};
    int *cnt = calloc((size_t)4 * GEN * V, sizeof(int)); /* [plain|spec][position][token] */
    const family_ops *real = m->family;
    family_ops fake = *real;
    fake.mtp_forward = oracle_mtp;
    D.scale = 0.6f;
    D.corrupt = 0;
    size_t drafted = 0, accepted = 0;
    for (int mode = 0; mode < 2; mode++) {
        m->family = mode ? &fake : real;
        for (int r = 0; r < RUNS; r++) {
            collect c;
            smp.seed = 1000u + (uint64_t)r + (uint64_t)mode * 7777u;
            memcpy(D.hist, prompt, sizeof prompt);
            em_generate_result res = gen(m, prompt, 16, GEN, smp, mode ? 2 : 0, &c);
            drafted += res.spec_drafted;
            accepted += res.spec_accepted;
            REQUIRE(c.n == GEN);
            for (int t = 0; t < GEN; t++) cnt[((size_t)mode * GEN + t) * V + c.ids[t]]++;
        }
    }
    m->family = real;
    for (int t = 0; t < GEN; t++) {
        int df;
        double x = chi2(cnt + (size_t)t * V, cnt + ((size_t)GEN + t) * V, V, &df);
        /* 99.9% quantile of chi-square: df + 3.1 sqrt(2 df) + 3 is above it for df <= 64 */
        double limit = df + 3.1 * sqrt(2.0 * df) + 3;
        CHECKF(x < limit, "token %d: chi2 %.1f with %d df (limit %.1f)", t, x, df, limit);
        fprintf(stderr, "sampling, token %d: chi2 %.1f, %d df\n", t, x, df);
    }
    CHECKF(drafted > 0 && accepted > drafted / 4 && (accepted < drafted || RUNS < 300), "sampling: %zu of %zu drafts accepted",
           accepted, drafted);
    fprintf(stderr, "sampling: %zu of %zu drafts accepted\n", accepted, drafted);
    free(cnt);
}

static void test_accept_rule(void) {
    sampler smp;
    em_sampling sp = {.temperature = 1, .top_p = 1, .repetition_penalty = 1, .seed = 42, .has_seed = 1};
    REQUIRE(sampler_init(&smp, &sp, 6) == EM_OK);
    float p[6] = {0.05f, 0.4f, 0.0f, 0.25f, 0.2f, 0.1f}, q[6] = {0.3f, 0.1f, 0.2f, 0.3f, 0.0f, 0.1f}, resid[6];
    int counts[6] = {0}, n = 200000, acc = 0;
    for (int i = 0; i < n; i++) {
        int32_t d = sampler_draw(&smp, q);
        bool ok;
        int32_t t = spec_accept_token(&smp, p, q, d, resid, &ok);
        counts[t]++;
        acc += ok;
    }
    for (int i = 0; i < 6; i++) CHECKF(fabs(counts[i] / (double)n - p[i]) < 0.006, "token %d: %g vs %g", i, counts[i] / (double)n, p[i]);
    /* acceptance probability is sum min(p, q) = 0.05+0.1+0+0.25+0+0.1 */
    CHECK_NEAR(acc / (double)n, 0.5, 0.006);
    sampler_free(&smp);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tests/golden/qwen3_5/q35_mtp_ratio3", test_src_dir());
    test_accept_rule();
    em_model *m = open_model();
    D.oracle = open_model();
    REQUIRE(em_model_has_mtp(m));
    test_rollback(m);
    test_greedy(m);
    test_sampling(m);
    em_model_free(D.oracle);
    em_model_free(m);
    return test_summary();
}
