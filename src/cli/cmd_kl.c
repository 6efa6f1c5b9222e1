/* cmd_kl.c — `ember kl REFERENCE CANDIDATE --text FILE`: how far a candidate
 * (a quantized artifact, say) moves the next-token distributions away from a
 * reference, over every position of a text: mean and max KL(ref || cand) per
 * token, top-1 agreement, and both perplexities. */
#include "cli/cli.h"
#include "cli/cli_eval.h"

#include "base/alloc.h"
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void kl_help(void) {
    printf("usage: ember kl REFERENCE CANDIDATE --text FILE [--ctx N] [--max-tokens N] [--threads N]\n\n"
           "Scores FILE (tokenized by REFERENCE) with both models in windows of --ctx tokens\n"
           "(default 512, f32 activations) and prints the mean and max per-token\n"
           "KL(reference || candidate) in nats, the top-1 agreement and both perplexities.\n");
}

typedef struct kl_acc {
    double kl_sum, kl_max, nll_ref, nll_cand;
    size_t n, agree, scored;
} kl_acc;

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = v[i] > v[b] ? i : b;
    return b;
}

static void kl_position(kl_acc *a, const float *p, const float *q, int V, int32_t next) {
    double lp, lq;
    em_log_softmax_at(p, V, -1, &lp);
    em_log_softmax_at(q, V, -1, &lq);
    double kl = 0;
    for (int i = 0; i < V; i++) {
        double a_ = (double)p[i] - lp, b_ = (double)q[i] - lq;
        kl += exp(a_) * (a_ - b_);
    }
    if (kl < 0) kl = 0; /* rounding on identical distributions */
    a->kl_sum += kl;
    a->kl_max = kl > a->kl_max ? kl : a->kl_max;
    a->agree += argmax(p, V) == argmax(q, V);
    a->n++;
    if (next >= 0) {
        a->nll_ref -= (double)p[next] - lp;
        a->nll_cand -= (double)q[next] - lq;
        a->scored++;
    }
}

static int parse(int argc, char **argv, const char **ref, const char **cand, const char **text, long *ctx,
                 long *max_tokens, long *threads) {
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--text")) {
            if (!(*text = cli_take_value(argc, argv, &i, "kl"))) return CLI_USAGE;
        } else if (cli_arg_is(argv[i], "--ctx") || cli_arg_is(argv[i], "--max-tokens") || cli_arg_is(argv[i], "--threads")) {
            long *dst = cli_arg_is(argv[i], "--ctx") ? ctx : cli_arg_is(argv[i], "--threads") ? threads : max_tokens;
            if (!(v = cli_take_value(argc, argv, &i, "kl")) || !cli_parse_int(v, dst == ctx ? 2 : 0, 1 << 24, dst)) {
                cli_error("kl", "%s needs a number", argv[i]);
                return CLI_USAGE;
            }
        } else if (argv[i][0] == '-') {
            cli_error("kl", "unknown option %s", argv[i]);
            return CLI_USAGE;
        } else if (!*ref) {
            *ref = argv[i];
        } else if (!*cand) {
            *cand = argv[i];
        } else {
            cli_error("kl", "unexpected argument %s", argv[i]);
            return CLI_USAGE;
        }
    }
    if (!*ref || !*cand || !*text) {
        cli_error("kl", "REFERENCE, CANDIDATE and --text are required (see --help)");
        return CLI_USAGE;
    }
    return CLI_OK;
}

static int cmd_kl(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        kl_help();
        return CLI_OK;
    }
    const char *ref = NULL, *cand = NULL, *text = NULL;
    long ctx = 512, max_tokens = 0, threads = 0;
    int rc = parse(argc, argv, &ref, &cand, &text, &ctx, &max_tokens, &threads);
    if (rc != CLI_OK) return rc;
    em_open_options o = {.n_threads = (int)threads, .precision = EM_PRECISION_EXACT, .max_sequences = 1,
                         .max_context = (int)ctx};
    em_model *mr = NULL, *mc = NULL;
    if (em_model_open(ref, &o, &mr) != EM_OK || em_model_open(cand, &o, &mc) != EM_OK) {
        cli_error("kl", "%s", em_last_error());
        em_model_free(mr);
        return CLI_FAIL;
    }
    int V = em_model_vocab_size(mr);
    int32_t *ids = NULL;
    size_t n = 0;
    if (em_model_vocab_size(mc) != V) {
        cli_error("kl", "vocabularies differ: %d vs %d", V, em_model_vocab_size(mc));
        rc = CLI_FAIL;
    } else {
        rc = cli_eval_tokens("kl", mr, text, max_tokens, &ids, &n);
    }
    int cctx = em_model_context_size(mr) < em_model_context_size(mc) ? em_model_context_size(mr) : em_model_context_size(mc);
    size_t win = (size_t)(ctx < cctx ? ctx : cctx);
    float *p = NULL, *q = NULL;
    if (rc == CLI_OK) {
        p = em_mallocn(win * (size_t)V, sizeof(float));
        q = em_mallocn(win * (size_t)V, sizeof(float));
        if (!p || !q) {
            cli_error("kl", "out of memory for %zu x %d logits", win, V);
            rc = CLI_FAIL;
        }
    }
    kl_acc a = {0};
    for (size_t start = 0; rc == CLI_OK && start < n; start += win) {
        size_t len = n - start < win ? n - start : win;
        if (em_score_logits(mr, ids + start, len, p) != EM_OK || em_score_logits(mc, ids + start, len, q) != EM_OK) {
            cli_error("kl", "%s", em_last_error());
            rc = CLI_FAIL;
            break;
        }
        for (size_t t = 0; t < len; t++)
            kl_position(&a, p + t * (size_t)V, q + t * (size_t)V, V, t + 1 < len ? ids[start + t + 1] : -1);
    }
    if (rc == CLI_OK)
        printf("kl mean %.6f max %.6f nats over %zu positions; top-1 agreement %.4f; ppl reference %.4f candidate "
               "%.4f\n",
               a.kl_sum / (double)a.n, a.kl_max, a.n, (double)a.agree / (double)a.n,
               exp(a.nll_ref / (double)a.scored), exp(a.nll_cand / (double)a.scored));
    free(p);
    free(q);
    free(ids);
    em_model_free(mr);
    em_model_free(mc);
    return rc;
}

EM_CLI_VERB("kl", "KL divergence and top-1 agreement of a candidate model against a reference", cmd_kl)
