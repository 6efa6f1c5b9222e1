/* cmd_generate.c — `ember generate MODEL (--ids 1,2,3 | "prompt")`: one-shot
 * generation; streams text, or prints the generated ids with --print-ids. */
#include "cli/cli_model.h"

#include "base/alloc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int gen_cancel;
static void on_sigint(int sig) {
    (void)sig;
    gen_cancel = 1;
}

typedef struct gen_out {
    bool print_ids;
    size_t n;
} gen_out;

static int on_token(void *user, const em_token_info *info) {
    gen_out *o = user;
    if (o->print_ids) { if (info->token >= 0) printf(o->n++ ? " %d" : "%d", info->token); }
    else if (info->text && info->text_len) fwrite(info->text, 1, info->text_len, stdout);
    fflush(stdout);
    return 0;
}

static void generate_help(void) {
    printf("usage: ember generate MODEL (--ids 1,2,3 | \"prompt\") [options]\n\n"
           "One-shot generation. With --ids the prompt is given as token ids.\n\n"
           "  --max-tokens N        tokens to generate (default 128)\n"
           "  --print-ids           print only the generated ids, space-separated, on one line\n"
           "  --ignore-eos          keep generating past end-of-sequence tokens\n"
           "  --stats               print prefill/decode speed to stderr\n%s", cli_model_opts_help());
}

static int run(em_model *m, const int32_t *ids, size_t n, long max_tokens, bool print_ids, bool ignore_eos,
               bool stats, const cli_model_opts *mo) {
    gen_out out = {print_ids, 0};
    em_generate_params p = {.prompt = ids, .n_prompt = n, .max_tokens = (int)max_tokens,
                            .sampling = cli_model_sampling(mo, m), .on_token = on_token, .user = &out,
                            .cancel = &gen_cancel, .ignore_eos = ignore_eos};
    em_generate_result r;
    signal(SIGINT, on_sigint);
    em_status s = em_generate(m, &p, &r);
    signal(SIGINT, SIG_DFL);
    printf("\n");
    if (s != EM_OK) {
        cli_error("generate", "%s", em_last_error());
        return CLI_FAIL;
    }
    if (stats)
        fprintf(stderr, "prompt %zu tokens in %.3fs (%.1f tok/s), generated %zu tokens in %.3fs (%.2f tok/s)\n",
                r.n_prompt, r.prefill_seconds, r.n_prompt / (r.prefill_seconds > 0 ? r.prefill_seconds : 1),
                r.n_generated, r.decode_seconds, r.n_generated / (r.decode_seconds > 0 ? r.decode_seconds : 1));
    return r.finish == EM_FINISH_CANCELLED ? 130 : CLI_OK;
}

static int prompt_to_ids(em_model *m, const char *prompt, int32_t **ids, size_t *n) {
    if (em_tokenize(m, prompt, strlen(prompt), 1, ids, n) != EM_OK) {
        cli_error("generate", "%s", em_last_error());
        return CLI_FAIL;
    }
    if (*n == 0) {
        cli_error("generate", "the prompt encodes to no tokens");
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int cmd_generate(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        generate_help();
        return CLI_OK;
    }
    cli_model_opts mo;
    cli_model_opts_init(&mo, EM_PRECISION_EXACT);
    const char *model = NULL, *ids_s = NULL, *prompt = NULL;
    long max_tokens = 128;
    bool print_ids = false, ignore_eos = false, stats = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_opt(&mo, argc, argv, &i, "generate");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--ids")) { if (!(ids_s = cli_take_value(argc, argv, &i, "generate"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--max-tokens")) {
            const char *v = cli_take_value(argc, argv, &i, "generate");
            if (!v || !cli_parse_int(v, 0, 1 << 24, &max_tokens)) { cli_error("generate", "--max-tokens needs a number >= 0"); return CLI_USAGE; }
        } else if (!strcmp(argv[i], "--print-ids")) print_ids = true;
        else if (!strcmp(argv[i], "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(argv[i], "--stats")) stats = true;
        else if (argv[i][0] == '-' && argv[i][1]) { cli_error("generate", "unknown option %s", argv[i]); return CLI_USAGE; }
        else if (!model) model = argv[i];
        else if (!prompt) prompt = argv[i];
        else { cli_error("generate", "unexpected argument %s", argv[i]); return CLI_USAGE; }
    }
    if (!model) { cli_error("generate", "MODEL is required (see --help)"); return CLI_USAGE; }
    if (!ids_s && !prompt) { cli_error("generate", "give --ids or a prompt"); return CLI_USAGE; }
    if (ids_s && prompt) { cli_error("generate", "give either --ids or a prompt, not both"); return CLI_USAGE; }
    int32_t *ids = NULL;
    size_t n = 0;
    if (ids_s && !cli_parse_ids(ids_s, &ids, &n)) {
        cli_error("generate", "--ids must be a comma-separated list of non-negative integers");
        return CLI_USAGE;
    }
    mo.open.max_sequences = 1;
    em_model *m;
    if (em_model_open(model, &mo.open, &m) != EM_OK) {
        cli_error("generate", "%s", em_last_error());
        free(ids);
        return CLI_FAIL;
    }
    if (prompt && prompt_to_ids(m, prompt, &ids, &n) != CLI_OK) {
        em_model_free(m);
        return CLI_FAIL;
    }
    int rc = run(m, ids, n, max_tokens, print_ids, ignore_eos, stats, &mo);
    free(ids);
    em_model_free(m);
    return rc;
}

EM_CLI_VERB("generate", "generate text (or token ids) from a prompt", cmd_generate)
