/* cmd_logits.c — `ember logits MODEL --ids 1,2,3 --out FILE`: the logits of
 * every position, little-endian f32 [n_ids, vocab], f32 activations. */
#include "cli/cli_model.h"

#include "model/model.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void logits_help(void) {
    printf("usage: ember logits MODEL --ids 1,2,3 --out FILE [--threads N] [--device cpu|cuda[:N]]\n"
           "                   [--tensor-parallel N]\n\n"
           "Runs the model over the ids with f32 activations (on the CPU unless --device\n"
           "names a GPU) and writes the\n"
           "logits of every position to FILE as little-endian float32, row-major\n"
           "[n_ids, vocab]. For parity tests against reference implementations.\n"
           "--tensor-parallel N splits the model over N GPUs (EMBER_TENSOR_PARALLEL).\n");
}

static int write_all(const char *path, const float *data, size_t n) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, sizeof(float), n, f);
    int bad = w != n || fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

static int cmd_logits(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        logits_help();
        return CLI_OK;
    }
    const char *model = NULL, *out = NULL, *ids_s = NULL, *device = NULL;
    long threads = 0, tp = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--ids")) { if (!(ids_s = cli_take_value(argc, argv, &i, "logits"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--out")) { if (!(out = cli_take_value(argc, argv, &i, "logits"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--device")) { if (!(device = cli_take_value(argc, argv, &i, "logits"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--tensor-parallel")) {
            const char *v = cli_take_value(argc, argv, &i, "logits");
            if (!v || !cli_parse_int(v, 1, 64, &tp)) { cli_error("logits", "--tensor-parallel needs a number in [1, 64]"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--threads")) {
            const char *v = cli_take_value(argc, argv, &i, "logits");
            if (!v || !cli_parse_int(v, 0, 1024, &threads)) { cli_error("logits", "--threads needs a number"); return CLI_USAGE; }
        } else if (argv[i][0] == '-') { cli_error("logits", "unknown option %s", argv[i]); return CLI_USAGE; }
        else if (!model) model = argv[i];
        else { cli_error("logits", "unexpected argument %s", argv[i]); return CLI_USAGE; }
    }
    if (!model || !out || !ids_s) {
        cli_error("logits", "MODEL, --ids and --out are required (see --help)");
        return CLI_USAGE;
    }
    int32_t *ids;
    size_t n;
    if (!cli_parse_ids(ids_s, &ids, &n)) {
        cli_error("logits", "--ids must be a comma-separated list of non-negative integers");
        return CLI_USAGE;
    }
    em_open_options o = {.n_threads = (int)threads, .precision = EM_PRECISION_EXACT, .max_sequences = 1,
                         .device = device, .tensor_parallel = (int)tp};
    em_model *m;
    char *model_dir;
    if (!cli_resolve_model(model, &model_dir, "logits")) {
        free(ids);
        return CLI_FAIL;
    }
    int follow_rc;
    if (cli_tp_follow("logits", model_dir, &o, &follow_rc)) {
        free(model_dir);
        free(ids);
        return follow_rc;
    }
    em_status s = em_model_open(model_dir, &o, &m);
    free(model_dir);
    if (s != EM_OK) {
        cli_error("logits", "%s", em_last_error());
        free(ids);
        return CLI_FAIL;
    }
    int rc = CLI_OK;
    float *logits = em_mallocn(n * (size_t)m->cfg.vocab, sizeof(float));
    int seq = -1;
    if (!logits) s = em_fail(EM_ERR_NOMEM, "out of memory for %zu x %d logits", n, m->cfg.vocab);
    if (s == EM_OK && n > (size_t)m->max_ctx)
        s = em_fail(EM_ERR_LIMIT, "%zu ids exceed the context of %d", n, m->max_ctx);
    if (s == EM_OK) s = kv_seq_alloc(m->kv, &seq);
    if (s == EM_OK) {
        em_span sp = {seq, ids, (int)n, LOGITS_ALL, SPAN_MATH_MODEL};
        em_batch b = {.spans = &sp, .n_spans = 1};
        s = model_forward(m, &b, logits);
    }
    if (s != EM_OK) {
        cli_error("logits", "%s", em_last_error());
        rc = CLI_FAIL;
    } else if (write_all(out, logits, n * (size_t)m->cfg.vocab) != 0) {
        cli_error("logits", "%s: cannot write", out);
        rc = CLI_FAIL;
    }
    free(logits);
    free(ids);
    em_model_free(m);
    return rc;
}

EM_CLI_VERB("logits", "write the logits of every position of --ids (parity testing)", cmd_logits)
