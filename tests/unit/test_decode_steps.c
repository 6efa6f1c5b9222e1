/* Step-by-step decode vs full-sequence forward on each checkpoint given on
 * the command line (default: every dense golden, and every quantized one,
 * whose few-row products on a GPU are the int8 GEMVs): feeding ids one at
 * a time through the KV cache must give (within f32 tolerance) the logits
 * rows of one prefill over all ids; and a prefill split into uneven chunks
 * must too, and short prefills after a prefix (a cached prompt's tail: on a
 * GPU recorded once per row count and replayed at other context lengths)
 * give the full prefill's rows. Set EMBER_DEVICE=cuda to run it on a GPU. */
#include "test.h"

#include "base/config.h"
#include "model/model.h"
#include "tensor/argmax.h"

#include <glob.h>

/* The checkpoint at dir with room for max_seq sequences, opened with
 * `cfg` (NULL: the environment's), or NULL (its error printed). */
static em_model *open_model(const char *dir, em_precision p, int max_seq, const em_config *cfg) {
    em_model *m;
    em_open_options o = {.n_threads = 2, .precision = p, .max_sequences = max_seq, .config = cfg};
    if (em_model_open(dir, &o, &m) == EM_OK) return m;
    fprintf(stderr, "%s\n", em_last_error());
    return NULL;
}

/* The same in EXACT, or NULL (a failed check). */
static em_model *open_exact(const char *dir, int max_seq) {
    em_model *m = open_model(dir, EM_PRECISION_EXACT, max_seq, NULL);
    CHECK(m != NULL);
    return m;
}

static void check_model(const char *dir) {
    em_model *m = open_exact(dir, 4);
    if (!m) return;
    enum { N = 20 };
    int32_t ids[N];
    int V = m->cfg.vocab;
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    float *full = malloc(sizeof(float) * N * V), *step = malloc(sizeof(float) * V), *chunk = malloc(sizeof(float) * N * V);
    int s1, s2, s3;
    REQUIRE(kv_seq_alloc(m->kv, &s1) == EM_OK && kv_seq_alloc(m->kv, &s2) == EM_OK && kv_seq_alloc(m->kv, &s3) == EM_OK);
    em_span sp = {s1, ids, N, LOGITS_ALL, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    REQUIRE(model_forward(m, &b, full) == EM_OK);
    double worst = 0, range = 0;
    int bad_ids = 0;
    for (int i = 0; i < N * V; i++) range = fmax(range, fabs(full[i]));
    for (int t = 0; t < N; t++) {
        em_span one = {s2, ids + t, 1, LOGITS_LAST, SPAN_MATH_MODEL};
        int32_t chosen = -1; /* the greedy id the model reports beside the row */
        em_batch bb = {.spans = &one, .n_spans = 1, .argmax = &chosen};
        REQUIRE(model_forward(m, &bb, step) == EM_OK);
        for (int v = 0; v < V; v++) worst = fmax(worst, fabs(step[v] - full[(size_t)t * V + v]));
        bad_ids += chosen != em_argmax_f32(step, V);
    }
    CHECKF(worst <= 1e-5 * range + 1e-5, "%s: decode vs prefill max err %g (range %g)", dir, worst, range);
    CHECKF(bad_ids == 0, "%s: %d steps whose reported argmax is not their row's", dir, bad_ids);
    /* uneven chunks: 3, 9, 8 — plus two sequences in one batch */
    int cuts[] = {0, 3, 12, N};
    double worst2 = 0;
    for (int c = 0; c < 3; c++) {
        em_span spans[2] = {{s3, ids + cuts[c], cuts[c + 1] - cuts[c], LOGITS_ALL, SPAN_MATH_MODEL},
                            {s1, ids, 0, LOGITS_NONE, SPAN_MATH_MODEL}};
        em_batch bb = {.spans = spans, .n_spans = 2};
        REQUIRE(model_forward(m, &bb, chunk + (size_t)cuts[c] * V) == EM_OK);
    }
    for (int i = 0; i < N * V; i++) worst2 = fmax(worst2, fabs(chunk[i] - full[i]));
    CHECKF(worst2 <= 1e-5 * range + 1e-5, "%s: chunked prefill max err %g", dir, worst2);
    /* tails of 8 rows after prefixes of 12, 4 and 0, then of 5 after 15 and
     * 3: the same row counts at other context lengths */
    int tails[][2] = {{12, 8}, {4, 8}, {0, 8}, {15, 5}, {3, 5}, {7, 5}};
    double worst3 = 0;
    for (int c = 0; c < 6; c++) {
        int pre = tails[c][0], n = tails[c][1], s4;
        REQUIRE(kv_seq_alloc(m->kv, &s4) == EM_OK);
        em_span head = {s4, ids, pre, LOGITS_NONE, SPAN_MATH_MODEL}, tail = {s4, ids + pre, n, LOGITS_LAST, SPAN_MATH_MODEL};
        em_batch bh = {.spans = &head, .n_spans = 1}, bt = {.spans = &tail, .n_spans = 1};
        if (pre) REQUIRE(model_forward(m, &bh, step) == EM_OK);
        REQUIRE(model_forward(m, &bt, step) == EM_OK);
        for (int v = 0; v < V; v++) worst3 = fmax(worst3, fabs(step[v] - full[(size_t)(pre + n - 1) * V + v]));
        kv_seq_release(m->kv, s4);
    }
    CHECKF(worst3 <= 1e-5 * range + 1e-5, "%s: prefilled tails max err %g", dir, worst3);
    free(full);
    free(step);
    free(chunk);
    em_model_free(m);
}

/* Runs FAST tails after prefixes of several lengths (the arithmetic the
 * server's cached prompts use) on a model opened with `cfg`; logits of
 * tail c at out + c * vocab. */
enum { FAST_TAILS = 7 };
static const int fast_tails[FAST_TAILS][2] = {{0, 7}, {300, 7}, {1200, 7}, {33, 2}, {700, 2}, {90, 15}, {1500, 15}};
static bool run_fast_tails(const char *dir, const em_config *cfg, float **out, int *vocab) {
    em_model *m = open_model(dir, EM_PRECISION_FAST, 2, cfg);
    if (!m) return false;
    enum { PRE = 1600 };
    int V = *vocab = m->cfg.vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (PRE + 16));
    *out = calloc((size_t)FAST_TAILS * V, sizeof(float));
    for (int i = 0; i < PRE + 16; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    bool ok = true;
    for (int c = 0; c < FAST_TAILS && ok; c++) {
        /* shorter prefixes where the context is short */
        int ctx = em_model_context_size(m), pre = fast_tails[c][0] % (ctx > 16 ? ctx - 15 : 1), n = fast_tails[c][1], s;
        ok = kv_seq_alloc(m->kv, &s) == EM_OK;
        em_span head = {s, ids, pre, LOGITS_NONE, SPAN_MATH_MODEL}, tail = {s, ids + pre, n, LOGITS_LAST, SPAN_MATH_MODEL};
        em_batch bh = {.spans = &head, .n_spans = 1}, bt = {.spans = &tail, .n_spans = 1};
        if (ok && pre) ok = model_forward(m, &bh, *out + (size_t)c * V) == EM_OK;
        if (ok) ok = model_forward(m, &bt, *out + (size_t)c * V) == EM_OK;
        if (ok) kv_seq_release(m->kv, s);
    }
    if (!ok) fprintf(stderr, "%s\n", em_last_error());
    free(ids);
    em_model_free(m);
    return ok;
}

/* The rows run() gives on a model opened with the default configuration
 * (steps recorded and replayed on a GPU) and with `eager`
 * (EMBER_CUDA_GRAPHS=0) are the same bits. */
typedef bool (*rows_run)(const char *dir, const em_config *cfg, float **out, int *vocab);
static void check_recorded_rows(const char *dir, const em_config *eager, rows_run run, int rows, const char *what) {
    float *a = NULL, *b = NULL;
    int va = 0, vb = 0;
    bool ok = run(dir, NULL, &a, &va) && run(dir, eager, &b, &vb);
    CHECKF(ok, "%s: %s did not run", dir, what);
    if (ok) {
        int differ = 0;
        for (int r = 0; r < rows; r++) differ += memcmp(a + (size_t)r * va, b + (size_t)r * va, sizeof(float) * va) != 0;
        CHECKF(differ == 0, "%s: %d of the %s differ recorded and eager", dir, differ, what);
    }
    free(a), free(b);
}

/* The environment's configuration with EMBER_CUDA_GRAPHS=0. */
static em_config *eager_config(void) {
    extern char **environ;
    size_t n_env = 0;
    while (environ[n_env]) n_env++;
    char **env = calloc(n_env + 2, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "EMBER_CUDA_GRAPHS=", 18)) env[k++] = environ[i];
    env[k++] = "EMBER_CUDA_GRAPHS=0";
    em_config *eager = NULL;
    REQUIRE(em_config_from_env(env, &eager) == EM_OK);
    free(env);
    return eager;
}

/* Decode steps of one, two and three sequences, in changing sets and
 * orders, at growing contexts, on a model opened with `cfg` (FAST, the
 * server's arithmetic); the logits rows of every step, in order, at out
 * (DECODE_ROWS rows). */
enum { DECODE_STEPS = 12, DECODE_ROWS = 21 };
static bool run_decode_steps(const char *dir, const em_config *cfg, float **out, int *vocab) {
    em_model *m = open_model(dir, EM_PRECISION_FAST, 3, cfg);
    if (!m) return false;
    int V = *vocab = m->cfg.vocab, seq[3], pre[3] = {40, 17, 5};
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (int32_t)((i * 6421 + 5) % V);
    *out = calloc((size_t)DECODE_ROWS * V, sizeof(float));
    bool ok = true;
    for (int k = 0; k < 3 && ok; k++) {
        em_span sp = {-1, ids, pre[k], LOGITS_NONE, SPAN_MATH_MODEL};
        em_batch b = {.spans = &sp, .n_spans = 1};
        ok = kv_seq_alloc(m->kv, &seq[k]) == EM_OK;
        sp.seq = seq[k];
        if (ok) ok = model_forward(m, &b, *out) == EM_OK;
    }
    /* which sequences each step decodes: alone, in pairs and all three,
     * each set met again at a longer context */
    static const int sets[DECODE_STEPS][4] = {{1, 0},    {1, 0},    {2, 0, 1}, {2, 0, 1}, {3, 0, 1, 2}, {1, 2},
                                              {2, 2, 0}, {1, 0},    {3, 0, 1, 2}, {2, 0, 1}, {1, 2},    {2, 2, 0}};
    int rows = 0;
    for (int t = 0; t < DECODE_STEPS && ok; t++) {
        em_span sp[3];
        int n = sets[t][0];
        for (int i = 0; i < n; i++)
            sp[i] = (em_span){seq[sets[t][1 + i]], ids + (t * 5 + i) % 60, 1, LOGITS_LAST, SPAN_MATH_MODEL};
        em_batch b = {.spans = sp, .n_spans = n};
        ok = rows + n <= DECODE_ROWS && model_forward(m, &b, *out + (size_t)rows * V) == EM_OK;
        rows += n;
    }
    if (!ok) fprintf(stderr, "%s\n", em_last_error());
    em_model_free(m);
    return ok;
}

/* One EXACT decode step of a sequence gives the same bits alone, among 11
 * other decode rows (on a GPU: past the one-pass GEMV, through the staged
 * batch kernel) and beside a FAST prefill chunk of another sequence (a
 * batch of two runs): a request's numbers never depend on its batch. */
static void check_batch_invariance(const char *dir) {
    em_model *m = open_exact(dir, 16);
    if (!m) return;
    enum { PRE = 9, FILL = 11, CHUNK = 20 };
    int V = m->cfg.vocab, seq[3], fill[FILL];
    int32_t ids[CHUNK + 1];
    for (int i = 0; i <= CHUNK; i++) ids[i] = (int32_t)((i * 104729 + 7) % V);
    float *alone = malloc(sizeof(float) * V), *other = malloc(sizeof(float) * V);
    for (int k = 0; k < 3; k++) {
        REQUIRE(kv_seq_alloc(m->kv, &seq[k]) == EM_OK);
        em_span pre = {seq[k], ids, PRE, LOGITS_NONE, SPAN_MATH_MODEL};
        em_batch bp = {.spans = &pre, .n_spans = 1};
        REQUIRE(model_forward(m, &bp, alone) == EM_OK);
    }
    for (int f = 0; f < FILL; f++) REQUIRE(kv_seq_alloc(m->kv, &fill[f]) == EM_OK);
    em_span one = {seq[0], ids + PRE, 1, LOGITS_LAST, SPAN_MATH_MODEL};
    em_batch b1 = {.spans = &one, .n_spans = 1};
    REQUIRE(model_forward(m, &b1, alone) == EM_OK);
    /* among other decode rows, the sequence in the middle of the batch */
    em_span rows[FILL + 1];
    for (int f = 0, r = 0; r <= FILL; r++)
        rows[r] = r == FILL / 2 ? (em_span){seq[1], ids + PRE, 1, LOGITS_LAST, SPAN_MATH_MODEL}
                                : (em_span){fill[f++], ids + r, 1, LOGITS_NONE, SPAN_MATH_MODEL};
    em_batch b2 = {.spans = rows, .n_spans = FILL + 1};
    REQUIRE(model_forward(m, &b2, other) == EM_OK);
    CHECKF(!memcmp(alone, other, sizeof(float) * V), "%s: an EXACT decode row differs among 12 rows", dir);
    /* after a FAST chunk of another sequence */
    int s;
    REQUIRE(kv_seq_alloc(m->kv, &s) == EM_OK);
    em_span mixed[2] = {{s, ids, CHUNK, LOGITS_NONE, SPAN_MATH_FAST}, {seq[2], ids + PRE, 1, LOGITS_LAST, SPAN_MATH_MODEL}};
    em_batch b3 = {.spans = mixed, .n_spans = 2};
    REQUIRE(model_forward(m, &b3, other) == EM_OK);
    CHECKF(!memcmp(alone, other, sizeof(float) * V), "%s: an EXACT decode row differs beside a FAST chunk", dir);
    free(alone), free(other);
    em_model_free(m);
}

static void check_all(const char *dir, const em_config *eager) {
    check_model(dir);
    check_batch_invariance(dir);
    /* FAST tails recorded once per row count and replayed at other context
     * lengths: a recording never depends on the context */
    check_recorded_rows(dir, eager, run_fast_tails, FAST_TAILS, "FAST tails");
    /* decode steps recorded once per set of sequences and replayed at
     * longer contexts: nor does a replay of one set of sequences touch
     * another's state */
    check_recorded_rows(dir, eager, run_decode_steps, DECODE_ROWS, "decode rows");
}

int main(int argc, char **argv) {
    em_config *eager = eager_config();
    if (argc >= 2) {
        for (int i = 1; i < argc; i++) check_all(argv[i], eager);
    } else { /* default: every dense, quantized and Qwen3.5 golden checkpoint */
        const char *sets[] = {"dense/*/", "quant/*/quant/", "qwen3_5/*/"};
        for (int k = 0; k < 3; k++) {
            char pattern[4096];
            snprintf(pattern, sizeof pattern, "%s/tests/golden/%s", test_src_dir(), sets[k]);
            glob_t g;
            REQUIRE(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0);
            for (size_t i = 0; i < g.gl_pathc; i++) check_all(g.gl_pathv[i], eager);
            globfree(&g);
        }
    }
    em_config_release(eager);
    return test_summary();
}
