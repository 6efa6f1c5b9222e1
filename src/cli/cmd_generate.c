/* cmd_generate.c — `ember generate MODEL (--ids 1,2,3 | "prompt")`: one-shot
 * generation; streams text, or prints the generated ids with --print-ids. */
#include "cli/cli_model.h"

#include "base/alloc.h"
#include "base/file.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "io/demo_model.h"
#include "base/sysmem.h"
#include "engine/grammar/grammar.h"

#include <limits.h>
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
    const int32_t *eos; /* end-of-sequence ids: their text is not printed */
    size_t n_eos;
    grammar_matcher *gm; /* NULL without a grammar */
    em_status gm_status;
} gen_out;

/* The grammar mask as a logit processor; a grammar failure stops the
 * generation through the token callback. */
static void on_logits(void *user, float *logits, int n_vocab, const int32_t *history, size_t n_history) {
    gen_out *o = user;
    if (o->gm_status == EM_OK) o->gm_status = grammar_matcher_process(o->gm, logits, n_vocab, history, n_history);
}

static int on_token(void *user, const em_token_info *info) {
    gen_out *o = user;
    if (o->gm_status != EM_OK) return 1;
    if (o->print_ids) { if (info->token >= 0) printf(o->n++ ? " %d" : "%d", info->token); }
    else if (info->text && info->text_len) {
        for (size_t i = 0; i < o->n_eos; i++)
            if (o->eos[i] == info->token) return 0;
        fwrite(info->text, 1, info->text_len, stdout);
    }
    fflush(stdout);
    return 0;
}

static void generate_help(void) {
    printf("usage: ember generate [MODEL] (--ids 1,2,3 | \"prompt\") [options]\n\n"
           "One-shot generation, streamed to stdout. With --ids the prompt is given as\n"
           "token ids. Without MODEL the demo model shipped with ember is used.\n\n"
           "  --chat                wrap the prompt in the model's chat template\n"
           "  --max-tokens N        tokens to generate (default 128)\n"
           "  --print-ids           print only the generated ids, space-separated, on one line\n"
           "  --ignore-eos          keep generating past end-of-sequence tokens\n"
           "  --stats               print prefill/decode speed and peak resident memory to stderr\n"
           "  --json-schema FILE    constrain the output to JSON valid under the schema\n"
           "  --grammar FILE        constrain the output to a GBNF grammar (start rule root)\n"
           "  --regex RE            constrain the output to a full match of RE\n"
           "  --spec mtp            speculative decoding with the model's multi-token-prediction head\n"
           "  --draft-tokens K      tokens drafted per trunk step with --spec (default 2)\n"
           "  --kv-store DIR        reuse prompt prefix blocks kept in DIR by earlier runs (and keep this\n"
           "                        prompt's there); --stats reports the cached tokens\n"
           "  --kv-store-bytes B    cap on the store's files for this model (default 4 GiB)\n%s", cli_model_opts_help());
}

static int run(em_model *m, const int32_t *ids, size_t n, long max_tokens, bool print_ids, bool ignore_eos,
               bool stats, int draft_tokens, const cli_model_opts *mo, grammar_matcher *gm) {
    gen_out out = {print_ids, 0, NULL, 0, gm, EM_OK};
    out.eos = em_model_eos_ids(m, &out.n_eos);
    em_generate_params p = {.prompt = ids, .n_prompt = n, .max_tokens = (int)max_tokens,
                            .sampling = cli_model_sampling(mo, m), .on_token = on_token, .user = &out,
                            .cancel = &gen_cancel, .ignore_eos = ignore_eos, .on_logits = gm ? on_logits : NULL,
                            .spec_draft_tokens = draft_tokens};
    em_generate_result r;
    signal(SIGINT, on_sigint);
    em_status s = em_generate(m, &p, &r);
    signal(SIGINT, SIG_DFL);
    printf("\n");
    if (s == EM_OK && out.gm_status != EM_OK) s = out.gm_status;
    if (s != EM_OK) {
        cli_error("generate", "%s", em_last_error());
        return CLI_FAIL;
    }
    if (stats && m->sched) fprintf(stderr, "prompt cache: %zu of %zu prompt tokens reused\n", r.n_cached, r.n_prompt);
    if (stats)
        fprintf(stderr, "prompt %zu tokens in %.3fs (%.1f tok/s), generated %zu tokens in %.3fs (%.2f tok/s)\n",
                r.n_prompt, r.prefill_seconds, r.n_prompt / (r.prefill_seconds > 0 ? r.prefill_seconds : 1),
                r.n_generated, r.decode_seconds, r.n_generated / (r.decode_seconds > 0 ? r.decode_seconds : 1));
    if (stats) fprintf(stderr, "peak resident memory %llu bytes\n", (unsigned long long)em_peak_rss());
    if (stats && r.spec_steps)
        fprintf(stderr, "speculative: %zu trunk steps, %zu/%zu drafts accepted (%.1f%%), %.2f tokens per trunk step\n",
                r.spec_steps, r.spec_accepted, r.spec_drafted,
                r.spec_drafted ? 100.0 * (double)r.spec_accepted / (double)r.spec_drafted : 0.0,
                (double)(r.spec_accepted + r.spec_steps) / (double)r.spec_steps);
    return r.finish == EM_FINISH_CANCELLED ? 130 : CLI_OK;
}

/* The grammar of --json-schema / --grammar / --regex over the model's
 * vocabulary; all three outputs owned by the caller. */
static em_status make_matcher(em_model *m, const char *schema, const char *gbnf, const char *regex, grammar **g,
                              grammar_vocab **gv, grammar_matcher **gm) {
    const tokenizer *t = em_model_tokenizer(m);
    if (!t) return em_fail(EM_ERR_UNSUPPORTED, "constrained generation needs the model's tokenizer.json");
    em_status s;
    if (regex) s = grammar_compile_regex(regex, strlen(regex), g);
    else if (gbnf) {
        char *text;
        size_t len;
        EM_TRY(em_read_file(gbnf, 16u << 20, &text, &len));
        s = grammar_compile_gbnf(text, len, "root", g);
        free(text);
    } else {
        json_error_t e;
        json_t *j = json_load_file(schema, JSON_DECODE_ANY, &e);
        if (!j) return em_fail(EM_ERR_FORMAT, "%s: line %d: %s", schema, e.line, e.text);
        s = grammar_compile_json_schema(j, g);
        json_decref(j);
    }
    if (s != EM_OK) return s;
    size_t n_end;
    const int32_t *end = em_model_eos_ids(m, &n_end);
    EM_TRY(grammar_vocab_new(t, end, n_end, em_model_vocab_size(m), gv));
    return grammar_matcher_new(*g, *gv, gm);
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

/* --chat: the prompt becomes one user turn through the model's chat
 * template (with the generation prompt); the template adds any BOS itself. */
static int chat_prompt_to_ids(em_model *m, const char *prompt, int32_t **ids, size_t *n) {
    const chat_template *t = em_model_chat_template(m);
    if (!t) {
        cli_error("generate", "--chat: the model has no chat template");
        return CLI_FAIL;
    }
    json_t *vars = json_pack("{s:[{s:s, s:s}], s:b}", "messages", "role", "user", "content", prompt,
                             "add_generation_prompt", 1);
    char *text = NULL;
    size_t len = 0;
    em_status s = vars ? chat_render(t, vars, &text, &len) : em_fail(EM_ERR_NOMEM, "out of memory");
    json_decref(vars);
    if (s == EM_OK) s = em_tokenize(m, text, len, 0, ids, n);
    free(text);
    if (s != EM_OK) {
        cli_error("generate", "%s", em_last_error());
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
    const char *model = NULL, *ids_s = NULL, *prompt = NULL, *schema = NULL, *gbnf = NULL, *regex = NULL;
    const char *kv_store = NULL;
    long kv_store_bytes = 0;
    long max_tokens = 128, draft_tokens = 2;
    bool print_ids = false, ignore_eos = false, stats = false, chat = false, spec = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_opt(&mo, argc, argv, &i, "generate");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--ids")) { if (!(ids_s = cli_take_value(argc, argv, &i, "generate"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--max-tokens")) {
            const char *v = cli_take_value(argc, argv, &i, "generate");
            if (!v || !cli_parse_int(v, 0, 1 << 24, &max_tokens)) { cli_error("generate", "--max-tokens needs a number >= 0"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--json-schema")) { if (!(schema = cli_take_value(argc, argv, &i, "generate"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--grammar")) { if (!(gbnf = cli_take_value(argc, argv, &i, "generate"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--regex")) { if (!(regex = cli_take_value(argc, argv, &i, "generate"))) return CLI_USAGE; }
        else if (cli_arg_is(argv[i], "--spec")) {
            const char *v = cli_take_value(argc, argv, &i, "generate");
            if (!v || strcmp(v, "mtp")) { cli_error("generate", "--spec takes 'mtp'"); return CLI_USAGE; }
            spec = true;
        } else if (cli_arg_is(argv[i], "--draft-tokens")) {
            const char *v = cli_take_value(argc, argv, &i, "generate");
            if (!v || !cli_parse_int(v, 1, 16, &draft_tokens)) { cli_error("generate", "--draft-tokens needs a number in 1..16"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--kv-store")) {
            if (!(kv_store = cli_take_value(argc, argv, &i, "generate"))) return CLI_USAGE;
        } else if (cli_arg_is(argv[i], "--kv-store-bytes")) {
            const char *v = cli_take_value(argc, argv, &i, "generate");
            if (!v || !cli_parse_int(v, 1, LONG_MAX, &kv_store_bytes)) { cli_error("generate", "--kv-store-bytes needs a number >= 1"); return CLI_USAGE; }
        } else if (!strcmp(argv[i], "--print-ids")) print_ids = true;
        else if (!strcmp(argv[i], "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(argv[i], "--stats")) stats = true;
        else if (!strcmp(argv[i], "--chat")) chat = true;
        else if (argv[i][0] == '-' && argv[i][1]) { cli_error("generate", "unknown option %s", argv[i]); return CLI_USAGE; }
        else if (!model) model = argv[i];
        else if (!prompt) prompt = argv[i];
        else { cli_error("generate", "unexpected argument %s", argv[i]); return CLI_USAGE; }
    }
    /* One positional argument without --ids is the prompt for the demo
     * model, unless it names a model directory. */
    if (model && !prompt && !ids_s && !em_dir_exists(model)) {
        prompt = model;
        model = NULL;
    }
    if (!model && !(model = em_demo_model_dir())) {
        cli_error("generate", "no MODEL given and the demo model was not found (set EMBER_DEMO_MODEL)");
        return CLI_USAGE;
    }
    if (!!schema + !!gbnf + !!regex > 1) { cli_error("generate", "give at most one of --json-schema, --grammar, --regex"); return CLI_USAGE; }
    if (!ids_s && !prompt) { cli_error("generate", "give --ids or a prompt"); return CLI_USAGE; }
    if (ids_s && chat) { cli_error("generate", "--chat takes a text prompt, not --ids"); return CLI_USAGE; }
    if (ids_s && prompt) { cli_error("generate", "give either --ids or a prompt, not both"); return CLI_USAGE; }
    if (kv_store && spec) { cli_error("generate", "--kv-store does not apply to --spec (speculative decoding prefills on its own)"); return CLI_USAGE; }
    int32_t *ids = NULL;
    size_t n = 0;
    if (ids_s && !cli_parse_ids(ids_s, &ids, &n)) {
        cli_error("generate", "--ids must be a comma-separated list of non-negative integers");
        return CLI_USAGE;
    }
    mo.open.max_sequences = 1;
    em_model *m;
    char *model_dir;
    if (!cli_resolve_model(model, &model_dir, "generate")) {
        free(ids);
        return CLI_FAIL;
    }
    int follow_rc;
    if (cli_tp_follow("generate", model_dir, &mo.open, &follow_rc)) {
        free(model_dir);
        free(ids);
        return follow_rc;
    }
    em_status open_s = em_model_open(model_dir, &mo.open, &m);
    free(model_dir);
    if (open_s != EM_OK) {
        cli_error("generate", "%s", em_last_error());
        free(ids);
        return CLI_FAIL;
    }
    if (prompt && (chat ? chat_prompt_to_ids(m, prompt, &ids, &n) : prompt_to_ids(m, prompt, &ids, &n)) != CLI_OK) {
        em_model_free(m);
        return CLI_FAIL;
    }
    grammar *g = NULL;
    grammar_vocab *gv = NULL;
    grammar_matcher *gm = NULL;
    if ((schema || gbnf || regex) && make_matcher(m, schema, gbnf, regex, &g, &gv, &gm) != EM_OK) {
        cli_error("generate", "%s", em_last_error());
        free(ids);
        em_model_free(m);
        return CLI_FAIL;
    }
    /* With a store the request goes through the scheduler, whose prefix
     * cache reads and writes it (speculative decoding runs outside it). */
    if (kv_store) {
        sched_options so = {.kv_store_dir = kv_store, .kv_store_bytes = (size_t)kv_store_bytes};
        if (sched_start(m, &so) != EM_OK) {
            cli_error("generate", "%s", em_last_error());
            grammar_matcher_free(gm);
            grammar_vocab_free(gv);
            grammar_free(g);
            free(ids);
            em_model_free(m);
            return CLI_FAIL;
        }
    }
    int rc = run(m, ids, n, max_tokens, print_ids, ignore_eos, stats, spec ? (int)draft_tokens : 0, &mo, gm);
    grammar_matcher_free(gm);
    grammar_vocab_free(gv);
    grammar_free(g);
    free(ids);
    em_model_free(m);
    return rc;
}

EM_CLI_VERB("generate", "generate text (or token ids) from a prompt", cmd_generate)
