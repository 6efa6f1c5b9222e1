/* cmd_ppl.c — `ember ppl MODEL --text FILE`: perplexity of a text, scored
 * in non-overlapping windows of --ctx tokens (the first token of each window
 * is context only). */
#include "cli/cli.h"
#include "cli/cli_eval.h"

#include "base/alloc.h"
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ppl_help(void) {
    printf("usage: ember ppl MODEL --text FILE [--ctx N] [--max-tokens N] [--threads N]\n\n"
           "Perplexity of FILE under MODEL: exp(mean negative log-likelihood per token),\n"
           "scored with f32 activations in windows of --ctx tokens (default 512).\n");
}

static int cmd_ppl(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        ppl_help();
        return CLI_OK;
    }
    const char *model = NULL, *text = NULL;
    long ctx = 512, max_tokens = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--text")) {
            if (!(text = cli_take_value(argc, argv, &i, "ppl"))) return CLI_USAGE;
        } else if (cli_arg_is(argv[i], "--ctx") || cli_arg_is(argv[i], "--max-tokens") || cli_arg_is(argv[i], "--threads")) {
            long *dst = cli_arg_is(argv[i], "--ctx") ? &ctx : cli_arg_is(argv[i], "--threads") ? &threads : &max_tokens;
            if (!(v = cli_take_value(argc, argv, &i, "ppl")) || !cli_parse_int(v, dst == &ctx ? 2 : 0, 1 << 24, dst)) {
                cli_error("ppl", "%s needs a number", argv[i]);
                return CLI_USAGE;
            }
        } else if (argv[i][0] == '-') {
            cli_error("ppl", "unknown option %s", argv[i]);
            return CLI_USAGE;
        } else if (!model) {
            model = argv[i];
        } else {
            cli_error("ppl", "unexpected argument %s", argv[i]);
            return CLI_USAGE;
        }
    }
    if (!model || !text) {
        cli_error("ppl", "MODEL and --text are required (see --help)");
        return CLI_USAGE;
    }
    em_open_options o = {.n_threads = (int)threads, .precision = EM_PRECISION_EXACT, .max_sequences = 1,
                         .max_context = (int)ctx};
    em_model *m;
    if (em_model_open(model, &o, &m) != EM_OK) {
        cli_error("ppl", "%s", em_last_error());
        return CLI_FAIL;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = cli_eval_tokens("ppl", m, text, max_tokens, &ids, &n);
    int V = em_model_vocab_size(m);
    size_t win = (size_t)(ctx < em_model_context_size(m) ? ctx : em_model_context_size(m));
    float *logits = rc == CLI_OK ? em_mallocn(win * (size_t)V, sizeof(float)) : NULL;
    if (rc == CLI_OK && !logits) {
        cli_error("ppl", "out of memory for %zu x %d logits", win, V);
        rc = CLI_FAIL;
    }
    double nll = 0;
    size_t scored = 0;
    for (size_t start = 0; rc == CLI_OK && start + 1 < n; start += win) {
        size_t len = n - start < win ? n - start : win;
        if (em_score_logits(m, ids + start, len, logits) != EM_OK) {
            cli_error("ppl", "%s", em_last_error());
            rc = CLI_FAIL;
            break;
        }
        for (size_t t = 0; t + 1 < len; t++, scored++)
            nll -= em_log_softmax_at(logits + t * (size_t)V, V, ids[start + t + 1], NULL);
    }
    if (rc == CLI_OK)
        printf("ppl %.4f over %zu tokens (nll %.5f per token, windows of %zu)\n", exp(nll / (double)scored), scored,
               nll / (double)scored, win);
    free(logits);
    free(ids);
    em_model_free(m);
    return rc;
}

EM_CLI_VERB("ppl", "perplexity of a text file", cmd_ppl)
