/* test_qwen3_5_tp.c — the tensor-parallel graph of the Qwen3.5 hybrid
 * family (gated attention + Gated DeltaNet) against the one-device graph,
 * on CPU backends joined by host collectives (model_open_host_split):
 *  - every golden Qwen3.5 checkpoint that splits over 2 (and 4) ranks gives
 *    the unsplit logits within f32 summation-order tolerance — a prefill
 *    over several KV blocks, then batched decode steps of two sequences —
 *    and the shapes that do not split are refused (tp_compare.h);
 *  - the recurrent state each rank keeps for its heads follows a rollback
 *    (mark, a verified span, a cut back into it with its replay) and a
 *    snapshot restored, as the one-device graph does;
 *  - speculative decoding is refused under tensor parallelism (the
 *    multi-token-prediction head is not split), and so is one process per
 *    rank (the step descriptor carries no recurrent-state operations), and
 *    the on-disk prefix store (it would keep rank 0's KV heads only).
 *
 * `test_qwen3_5_tp --device cuda [--ranks N] [DIR...]` runs the same
 * comparisons on GPUs: one GPU against N (tests/cuda/test_tensor_parallel.sh
 * runs it where there are two). */
#include "tp_compare.h"

#include "base/config.h"
#include "engine/kv_store.h"

#include <glob.h>

/* Splits when the ranks divide the attention heads, the MLP features and
 * the linear-attention value heads, and the KV heads and the linear-
 * attention key heads split or replicate evenly. */
static bool q35_splits(const model_config *c, int n) {
    const qwen3_5_config *q = &c->q35;
    bool attn = c->n_heads % n == 0 && c->intermediate % n == 0 && (c->n_kv_heads % n == 0 || n % c->n_kv_heads == 0);
    bool lin = !q->n_linear || (q->lin_v_heads % n == 0 && (q->lin_k_heads % n == 0 || n % q->lin_k_heads == 0));
    return attn && lin;
}

enum { RB_PROMPT = 40, RB_SPAN = 5, RB_KEEP = 2, RB_MORE = 3, RB_SNAP = 4 };
enum { RB_ROWS = 1 + RB_SPAN + RB_MORE + 2 * RB_SNAP };

static em_status fwd(em_model *m, int seq, const int32_t *ids, int n, logits_mode mode, float *logits) {
    em_span sp = {seq, ids, n, mode, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    return model_forward(m, &b, logits);
}

/* Prefill; mark; a verified span of RB_SPAN tokens; a cut back to RB_KEEP
 * of them (the state rewound and replayed); RB_MORE tokens more; then a
 * snapshot of the state, RB_SNAP tokens, the snapshot restored with the
 * cache cut back, and the same RB_SNAP tokens again. Returns RB_ROWS rows
 * of logits (owned by the caller). */
static float *rollback_script(em_model *m) {
    int V = m->cfg.vocab;
    float *out = calloc((size_t)RB_ROWS * V, sizeof(float));
    REQUIRE(out);
    int32_t ids[RB_PROMPT + RB_SPAN + RB_MORE + RB_SNAP];
    for (int i = 0; i < (int)(sizeof ids / sizeof ids[0]); i++) ids[i] = (int32_t)((i * 31337 + 7) % V);
    int s;
    REQUIRE(kv_seq_alloc(m->kv, &s) == EM_OK);
    float *row = out;
    REQUIRE(fwd(m, s, ids, RB_PROMPT, LOGITS_LAST, row) == EM_OK);
    row += V;
    REQUIRE(model_seq_mark(m, s, 8) == EM_OK);
    REQUIRE(fwd(m, s, ids + RB_PROMPT, RB_SPAN, LOGITS_ALL, row) == EM_OK);
    row += (size_t)RB_SPAN * V;
    REQUIRE(model_seq_truncate(m, s, RB_PROMPT + RB_KEEP) == EM_OK);
    CHECK(m->kv->seqs[s].len == RB_PROMPT + RB_KEEP);
    const int32_t *more = ids + RB_PROMPT + RB_SPAN;
    REQUIRE(fwd(m, s, more, RB_MORE, LOGITS_ALL, row) == EM_OK);
    row += (size_t)RB_MORE * V;
    size_t bytes = m->family->state_bytes(m);
    REQUIRE(bytes > 0);
    void *snap = malloc(bytes);
    REQUIRE(snap);
    int len = m->kv->seqs[s].len;
    REQUIRE(m->family->state_save(m, s, snap) == EM_OK);
    const int32_t *tail = more + RB_MORE;
    REQUIRE(fwd(m, s, tail, RB_SNAP, LOGITS_ALL, row) == EM_OK);
    REQUIRE(m->family->state_load(m, s, snap) == EM_OK);
    kv_seq_truncate(m->kv, s, len);
    REQUIRE(fwd(m, s, tail, RB_SNAP, LOGITS_ALL, row + (size_t)RB_SNAP * V) == EM_OK);
    size_t n = (size_t)RB_SNAP * V;
    double worst = tpc_worst(row + n, row, n);
    CHECKF(worst == 0, "a restored snapshot gives other logits (max err %g)", worst);
    free(snap);
    kv_seq_release(m->kv, s);
    return out;
}

/* Speculative decoding asked of a split model: refused, saying why. */
static void spec_refused(em_model *m) {
    CHECK(!em_model_has_mtp(m));
    int32_t prompt[3] = {5, 6, 7};
    em_generate_params p = {.prompt = prompt, .n_prompt = 3, .max_tokens = 2, .spec_draft_tokens = 2};
    em_generate_result res;
    CHECK(em_generate(m, &p, &res) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "not available with tensor parallelism") != NULL);
}

/* The on-disk prefix store keeps the model's cache, one rank's KV heads:
 * refused for a split model. */
static void kv_store_refused(em_model *m) {
    kv_store *s = NULL;
    CHECK(kv_store_open(m, "/tmp/ember-tp-kv-store-never-made", 0, &s) == EM_ERR_UNSUPPORTED);
    CHECK(s == NULL && strstr(em_last_error(), "tensor parallelism") != NULL);
}

static void check_rollback(const char *dir) {
    em_open_options o = tpc_options();
    em_model *m;
    REQUIRE(em_model_open(dir, &o, &m) == EM_OK);
    if (!m->cfg.q35.n_linear) {
        em_model_free(m);
        return;
    }
    int V = m->cfg.vocab;
    float *want = rollback_script(m);
    model_config c = m->cfg;
    em_model_free(m);
    size_t n = (size_t)RB_ROWS * V;
    double range = tpc_range(want, n);
    for (int r = 2; r <= tpc_max_ranks; r *= 2) {
        if (!q35_splits(&c, r)) continue;
        REQUIRE(tpc_open_split(dir, r, &m) == EM_OK);
        spec_refused(m);
        kv_store_refused(m);
        float *got = rollback_script(m);
        double worst = tpc_worst(got, want, n);
        CHECKF(TPC_CLOSE(worst, range), "%s over %d ranks, rollback and snapshot: max err %g (range %g)", dir, r,
               worst, range);
        fprintf(stderr, "%s over %d ranks, rollback and snapshot: max err %.3g of range %.3g\n", dir, r, worst, range);
        free(got);
        em_model_free(m);
    }
    free(want);
}

/* One process per rank (EMBER_WORLD_SIZE) is refused for this family,
 * before any rendezvous, with the reason. */
static void procs_refused(const char *dir) {
    char *env[] = {"EMBER_WORLD_SIZE=2", "EMBER_RANK=0", NULL};
    em_config *cfg;
    REQUIRE(em_config_from_env(env, &cfg) == EM_OK);
    em_open_options o = tpc_options();
    o.config = cfg;
    em_model *m;
    CHECK(model_open_host_split(dir, &o, &m) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "one process only") != NULL);
    em_config_release(cfg);
}

int main(int argc, char **argv) {
    int first = tpc_args(argc, argv);
    if (first < argc) {
        for (int i = first; i < argc; i++) {
            tpc_check_model(argv[i], q35_splits);
            check_rollback(argv[i]);
        }
        return test_summary();
    }
    char pat[4096];
    snprintf(pat, sizeof pat, "%s/tests/golden/qwen3_5/*/", test_src_dir());
    glob_t g;
    REQUIRE(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        tpc_check_model(g.gl_pathv[i], q35_splits);
        check_rollback(g.gl_pathv[i]);
    }
    if (!strcmp(tpc_device, "cpu")) procs_refused(g.gl_pathv[0]);
    globfree(&g);
    return test_summary();
}
