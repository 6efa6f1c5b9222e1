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
#include "tp_compare.h"

#include <glob.h>

/* The Llama family splits when the ranks divide the attention heads and
 * the MLP features, and the KV heads split or replicate evenly. */
static bool dense_splits(const model_config *c, int n) {
    return c->n_heads % n == 0 && c->intermediate % n == 0 && (c->n_kv_heads % n == 0 || n % c->n_kv_heads == 0);
}

/* The policy: a user asking for tensor parallelism on the CPU is refused. */
static void cpu_refused(const char *dir) {
    em_open_options o = {.n_threads = 1, .device = "cpu", .tensor_parallel = 2};
    em_model *m;
    CHECK(em_model_open(dir, &o, &m) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "needs --device cuda") != NULL);
}

int main(int argc, char **argv) {
    int first = tpc_args(argc, argv);
    if (first < argc) {
        for (int i = first; i < argc; i++) tpc_check_model(argv[i], dense_splits);
        return test_summary();
    }
    char pat[4096];
    snprintf(pat, sizeof pat, "%s/tests/golden/dense/*/", test_src_dir());
    glob_t g;
    REQUIRE(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0);
    for (size_t i = 0; i < g.gl_pathc; i++) tpc_check_model(g.gl_pathv[i], dense_splits);
    /* the demo model: bf16 weights */
    snprintf(pat, sizeof pat, "%s/models/demo", test_src_dir());
    tpc_check_model(pat, dense_splits);
    if (!strcmp(tpc_device, "cpu")) cpu_refused(g.gl_pathv[0]);
    globfree(&g);
    return test_summary();
}
