/* tp_compare.h — the comparison test_dense_tp and test_qwen3_5_tp make:
 * a model split over 2 (and 4) ranks against the one-device graph, on CPU
 * backends joined by host collectives (model_open_host_split), or on GPUs
 * (`--device cuda [--ranks N] [DIR...]`: NCCL, one GPU against N). A
 * prefill over several KV blocks, then batched decode steps of two
 * sequences, must give the unsplit logits within f32 summation-order
 * tolerance and the same greedy ids; a shape that does not split must be
 * refused. Test helper only. */
#ifndef EMBER_TEST_TP_COMPARE_H
#define EMBER_TEST_TP_COMPARE_H

#include "test.h"

#include "model/model.h"
#include "tensor/argmax.h"

enum { TPC_PROMPT = 45, TPC_STEPS = 6 }; /* 45 positions cross a 32-position KV block */

/* Runs the same script on a model: sequence A prefills TPC_PROMPT ids (all
 * logits), B prefills 20; then TPC_STEPS decode steps of both in one
 * batch. Returns the logits rows in order (owned by the caller). */
static float *tpc_run_script(em_model *m, int *rows_out) {
    int V = m->cfg.vocab;
    int rows = TPC_PROMPT + 1 + 2 * TPC_STEPS;
    float *out = calloc((size_t)rows * V, sizeof(float));
    REQUIRE(out);
    int32_t a[TPC_PROMPT + TPC_STEPS], b[20 + TPC_STEPS];
    for (int i = 0; i < TPC_PROMPT + TPC_STEPS; i++) a[i] = (int32_t)((i * 7919 + 13) % V);
    for (int i = 0; i < 20 + TPC_STEPS; i++) b[i] = (int32_t)((i * 104729 + 5) % V);
    int sa, sb;
    REQUIRE(kv_seq_alloc(m->kv, &sa) == EM_OK && kv_seq_alloc(m->kv, &sb) == EM_OK);
    em_span sp = {sa, a, TPC_PROMPT, LOGITS_ALL, SPAN_MATH_MODEL};
    em_batch bt = {.spans = &sp, .n_spans = 1};
    REQUIRE(model_forward(m, &bt, out) == EM_OK);
    em_span spb = {sb, b, 20, LOGITS_LAST, SPAN_MATH_MODEL};
    bt = (em_batch){.spans = &spb, .n_spans = 1};
    REQUIRE(model_forward(m, &bt, out + (size_t)TPC_PROMPT * V) == EM_OK);
    for (int t = 0; t < TPC_STEPS; t++) {
        em_span two[2] = {{sa, a + TPC_PROMPT + t, 1, LOGITS_LAST, SPAN_MATH_MODEL},
                          {sb, b + 20 + t, 1, LOGITS_LAST, SPAN_MATH_MODEL}};
        int32_t chosen[2] = {-1, -1}; /* the greedy ids, chosen where the logits are */
        bt = (em_batch){.spans = two, .n_spans = 2, .argmax = chosen};
        float *rows2 = out + (size_t)(TPC_PROMPT + 1 + 2 * t) * V;
        REQUIRE(model_forward(m, &bt, rows2) == EM_OK);
        CHECKF(chosen[0] == em_argmax_f32(rows2, V) && chosen[1] == em_argmax_f32(rows2 + V, V),
               "step %d: greedy ids %d %d are not the rows' argmax", t, chosen[0], chosen[1]);
    }
    kv_seq_release(m->kv, sa);
    kv_seq_release(m->kv, sb);
    *rows_out = rows;
    return out;
}

static const char *tpc_device = "cpu";
static int tpc_max_ranks = 4;

/* Reads `--device D` and `--ranks N`; returns the index of the first
 * other argument. */
static int tpc_args(int argc, char **argv) {
    int first = 1;
    while (first + 1 < argc && argv[first][0] == '-') {
        if (!strcmp(argv[first], "--device")) tpc_device = argv[first + 1];
        else if (!strcmp(argv[first], "--ranks")) tpc_max_ranks = atoi(argv[first + 1]);
        else break;
        first += 2;
    }
    return first;
}

static em_open_options tpc_options(void) {
    return (em_open_options){.n_threads = 1, .precision = EM_PRECISION_EXACT, .max_sequences = 2,
                             .device = tpc_device};
}

/* Opens dir split over n ranks: on GPUs as a user would, on the CPU through
 * the host collectives. */
static em_status tpc_open_split(const char *dir, int n, em_model **m) {
    em_open_options so = tpc_options();
    so.tensor_parallel = n;
    return strcmp(tpc_device, "cpu") ? em_model_open(dir, &so, m) : model_open_host_split(dir, &so, m);
}

/* The worst difference of n floats against a reference of magnitude range. */
static double tpc_worst(const float *got, const float *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]));
    return worst;
}

static double tpc_range(const float *x, size_t n) {
    double range = 0;
    for (size_t i = 0; i < n; i++) range = fmax(range, fabs(x[i]));
    return range;
}

#define TPC_CLOSE(worst, range) ((worst) <= 2e-5 * (range) + 1e-5)

/* The comparison over 2, 4, ... ranks; splits(c, n) says whether the
 * model's shape splits over n ranks (else it must be refused). */
static void tpc_check_model(const char *dir, bool (*splits)(const model_config *c, int n)) {
    bool cuda = strcmp(tpc_device, "cpu") != 0;
    em_open_options o = tpc_options();
    em_model *m;
    if (em_model_open(dir, &o, &m) != EM_OK) {
        fprintf(stderr, "%s: %s\n", dir, em_last_error());
        CHECK(0);
        return;
    }
    int rows, V = m->cfg.vocab;
    float *want = tpc_run_script(m, &rows);
    model_config c = m->cfg;
    em_model_free(m);
    size_t n_logits = (size_t)rows * V;
    double range = tpc_range(want, n_logits);
    for (int n = 2; n <= tpc_max_ranks; n *= 2) {
        em_status s = tpc_open_split(dir, n, &m);
        if (!splits(&c, n)) {
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
        CHECK(m->kv->n_kv == (c.n_kv_heads % n == 0 ? c.n_kv_heads / n : 1));
        int rows2;
        float *got = tpc_run_script(m, &rows2);
        long calls = 0;
        model_tp_take_time(m, &calls);
        if (!cuda) CHECKF(calls == 2L * c.n_layers * (2 + TPC_STEPS), "%ld all-reduces", calls);
        double worst = tpc_worst(got, want, n_logits);
        CHECKF(TPC_CLOSE(worst, range), "%s over %d ranks: max err %g (range %g)", dir, n, worst, range);
        fprintf(stderr, "%s over %d ranks: max err %.3g of range %.3g\n", dir, n, worst, range);
        free(got);
        em_model_free(m);
    }
    free(want);
}

#endif
