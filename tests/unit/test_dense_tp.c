/* test_dense_tp.c — the tensor-parallel graph of the Llama family against
 * the one-device graph, on CPU backends joined by host collectives
 * (model_open_host_split): every golden dense checkpoint that splits over 2
 * (and 4) ranks must give the unsplit logits within f32 summation-order
 * tolerance — a prefill over several KV blocks, then batched decode steps of
 * two sequences — and the shapes that do not split must be refused.
 *
 * `test_dense_tp --device cuda [--ranks N] [DIR...]` runs the same
 * comparison on GPUs (NCCL, recorded decode steps): one GPU against N
 * (tests/cuda/test_tensor_parallel.sh runs it where there are two). */
#include "test.h"

#include "model/model.h"
#include "tensor/argmax.h"

#include <glob.h>

enum { N_PROMPT = 45, N_STEPS = 6 }; /* 45 positions cross a 32-position KV block */

/* Runs the same script on a model: sequence A prefills N_PROMPT ids (all
 * logits), B prefills 20; then N_STEPS decode steps of both in one batch.
 * out: [N_PROMPT + 20... ] rows in order (owned by caller). */
static float *run_script(em_model *m, int *rows_out) {
    int V = m->cfg.vocab;
    int rows = N_PROMPT + 1 + 2 * N_STEPS;
    float *out = calloc((size_t)rows * V, sizeof(float));
    REQUIRE(out);
    int32_t a[N_PROMPT + N_STEPS], b[20 + N_STEPS];
    for (int i = 0; i < N_PROMPT + N_STEPS; i++) a[i] = (int32_t)((i * 7919 + 13) % V);
    for (int i = 0; i < 20 + N_STEPS; i++) b[i] = (int32_t)((i * 104729 + 5) % V);
    int sa, sb;
    REQUIRE(kv_seq_alloc(m->kv, &sa) == EM_OK && kv_seq_alloc(m->kv, &sb) == EM_OK);
    em_span sp = {sa, a, N_PROMPT, LOGITS_ALL, SPAN_MATH_MODEL};
    em_batch bt = {.spans = &sp, .n_spans = 1};
    REQUIRE(model_forward(m, &bt, out) == EM_OK);
    em_span spb = {sb, b, 20, LOGITS_LAST, SPAN_MATH_MODEL};
    bt = (em_batch){.spans = &spb, .n_spans = 1};
    REQUIRE(model_forward(m, &bt, out + (size_t)N_PROMPT * V) == EM_OK);
    for (int t = 0; t < N_STEPS; t++) {
        em_span two[2] = {{sa, a + N_PROMPT + t, 1, LOGITS_LAST, SPAN_MATH_MODEL}, {sb, b + 20 + t, 1, LOGITS_LAST, SPAN_MATH_MODEL}};
        int32_t chosen[2] = {-1, -1}; /* the greedy ids, chosen where the logits are */
        bt = (em_batch){.spans = two, .n_spans = 2, .argmax = chosen};
        float *rows2 = out + (size_t)(N_PROMPT + 1 + 2 * t) * V;
        REQUIRE(model_forward(m, &bt, rows2) == EM_OK);
        CHECKF(chosen[0] == em_argmax_f32(rows2, V) && chosen[1] == em_argmax_f32(rows2 + V, V),
               "step %d: greedy ids %d %d are not the rows' argmax", t, chosen[0], chosen[1]);
    }
    kv_seq_release(m->kv, sa);
    kv_seq_release(m->kv, sb);
    *rows_out = rows;
    return out;
}

static const char *g_device = "cpu";
static int g_max_ranks = 4;

static void check_model(const char *dir) {
    bool cuda = strcmp(g_device, "cpu") != 0;
    em_open_options o = {.n_threads = 1, .precision = EM_PRECISION_EXACT, .max_sequences = 2, .device = g_device};
    em_model *m;
    if (em_model_open(dir, &o, &m) != EM_OK) {
        fprintf(stderr, "%s: %s\n", dir, em_last_error());
        CHECK(0);
        return;
    }
    int rows, V = m->cfg.vocab;
    float *want = run_script(m, &rows);
    int n_heads = m->cfg.n_heads, n_kv = m->cfg.n_kv_heads;
    long ff = m->cfg.intermediate;
    em_model_free(m);
    double range = 0;
    for (size_t i = 0; i < (size_t)rows * V; i++) range = fmax(range, fabs(want[i]));
    for (int n = 2; n <= g_max_ranks; n *= 2) {
        bool splits = n_heads % n == 0 && ff % n == 0 && (n_kv % n == 0 || n % n_kv == 0);
        em_open_options so = o;
        so.tensor_parallel = n;
        em_status s = cuda ? em_model_open(dir, &so, &m) : model_open_host_split(dir, &so, &m);
        if (!splits) {
            CHECKF(s == EM_ERR_UNSUPPORTED, "%s over %d ranks should be refused", dir, n);
            if (s == EM_OK) em_model_free(m);
            else fprintf(stderr, "refused as expected: %s\n", em_last_error());
            continue;
        }
        if (s != EM_OK) {
            fprintf(stderr, "%s over %d ranks: %s\n", dir, n, em_last_error());
            CHECK(0);
            continue;
        }
        CHECK(model_tp_size(m) == n);
        CHECK(m->kv->n_kv == (n_kv % n == 0 ? n_kv / n : 1));
        int rows2;
        float *got = run_script(m, &rows2);
        long calls = 0;
        model_tp_take_time(m, &calls);
        if (!cuda) CHECKF(calls == 2L * m->cfg.n_layers * (2 + N_STEPS), "%ld all-reduces", calls);
        double worst = 0;
        for (size_t i = 0; i < (size_t)rows * V; i++) worst = fmax(worst, fabs(got[i] - want[i]));
        CHECKF(worst <= 2e-5 * range + 1e-5, "%s over %d ranks: max err %g (range %g)", dir, n, worst, range);
        fprintf(stderr, "%s over %d ranks: max err %.3g of range %.3g\n", dir, n, worst, range);
        free(got);
        em_model_free(m);
    }
    free(want);
}

/* The policy: a user asking for tensor parallelism on the CPU is refused. */
static void cpu_refused(const char *dir) {
    em_open_options o = {.n_threads = 1, .device = "cpu", .tensor_parallel = 2};
    em_model *m;
    CHECK(em_model_open(dir, &o, &m) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "needs --device cuda") != NULL);
}

int main(int argc, char **argv) {
    int first = 1;
    while (first + 1 < argc && argv[first][0] == '-') {
        if (!strcmp(argv[first], "--device")) g_device = argv[first + 1];
        else if (!strcmp(argv[first], "--ranks")) g_max_ranks = atoi(argv[first + 1]);
        else break;
        first += 2;
    }
    if (first < argc) {
        for (int i = first; i < argc; i++) check_model(argv[i]);
        return test_summary();
    }
    char pat[4096];
    snprintf(pat, sizeof pat, "%s/tests/golden/dense/*/", test_src_dir());
    glob_t g;
    REQUIRE(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0);
    for (size_t i = 0; i < g.gl_pathc; i++) check_model(g.gl_pathv[i]);
    /* the demo model: bf16 weights */
    snprintf(pat, sizeof pat, "%s/models/demo", test_src_dir());
    check_model(pat);
    if (!strcmp(g_device, "cpu")) cpu_refused(g.gl_pathv[0]);
    globfree(&g);
    return test_summary();
}
