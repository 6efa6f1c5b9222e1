/* cli_model.c — options shared by the verbs that load a model and sample:
 * --threads, --ctx, --precision, sampling flags. */
#include "cli/cli_model.h"

#include "base/config.h"

#include <stdio.h>
#include <string.h>

/* --threads, --ctx and --precision are configuration flags: the open
 * options follow the process snapshot (defaults < environment < flags). */
static void sync_from_config(cli_model_opts *o) {
    const em_config *c = em_config_global();
    o->open.n_threads = (int)em_config_int(c, EMC_THREADS);
    o->open.max_context = (int)em_config_int(c, EMC_CTX);
    const char *p = em_config_str(c, EMC_PRECISION);
    o->open.precision = !strcmp(p, "exact") ? EM_PRECISION_EXACT
                        : !strcmp(p, "fast") ? EM_PRECISION_FAST
                                             : o->default_precision;
    o->open.config = c;
}

void cli_model_opts_init(cli_model_opts *o, em_precision default_precision) {
    memset(o, 0, sizeof *o);
    o->default_precision = default_precision;
    sync_from_config(o);
    o->temperature = -1;
    o->top_p = -1;
    o->top_k = -1;
    o->min_p = -1;
    o->repetition_penalty = -1;
}

int cli_model_opt(cli_model_opts *o, int argc, char **argv, int *i, const char *verb) {
    const char *a = argv[*i], *v;
    double d;
    long l;
    uint64_t u;
#define VALUE() do { if (!(v = cli_take_value(argc, argv, i, verb))) return -1; } while (0)
#define BAD(msg) do { cli_error(verb, "%s", msg); return -1; } while (0)
    int r = cli_config_opt(argc, argv, i, verb);
    if (r) {
        if (r > 0) sync_from_config(o);
        return r;
    }
    if (cli_arg_is(a, "--temperature")) { VALUE(); if (!cli_parse_float(v, &d) || d < 0) BAD("--temperature needs a number >= 0"); o->temperature = d; }
    else if (cli_arg_is(a, "--top-p")) { VALUE(); if (!cli_parse_float(v, &d) || d <= 0 || d > 1) BAD("--top-p is in (0, 1]"); o->top_p = d; }
    else if (cli_arg_is(a, "--top-k")) { VALUE(); if (!cli_parse_int(v, 0, 1 << 24, &l)) BAD("--top-k needs a number >= 0"); o->top_k = l; }
    else if (cli_arg_is(a, "--min-p")) { VALUE(); if (!cli_parse_float(v, &d) || d < 0 || d > 1) BAD("--min-p is in [0, 1]"); o->min_p = d; }
    else if (cli_arg_is(a, "--repetition-penalty")) { VALUE(); if (!cli_parse_float(v, &d) || d <= 0) BAD("--repetition-penalty must be > 0"); o->repetition_penalty = d; }
    else if (cli_arg_is(a, "--seed")) { VALUE(); if (!cli_parse_u64(v, &u)) BAD("--seed needs a non-negative integer"); o->seed = u; o->has_seed = true; }
    else return 0;
    return 1;
#undef VALUE
#undef BAD
}

em_sampling cli_model_sampling(const cli_model_opts *o, const em_model *m) {
    em_sampling s = em_sampling_defaults(m);
    if (o->temperature >= 0) s.temperature = (float)o->temperature;
    if (o->top_p > 0) s.top_p = (float)o->top_p;
    if (o->top_k >= 0) s.top_k = (int)o->top_k;
    if (o->min_p >= 0) s.min_p = (float)o->min_p;
    if (o->repetition_penalty > 0) s.repetition_penalty = (float)o->repetition_penalty;
    if (o->has_seed) {
        s.seed = o->seed;
        s.has_seed = 1;
    }
    return s;
}

const char *cli_model_opts_help(void) {
    return "  --threads N           compute threads (default: one per core; EMBER_THREADS)\n"
           "  --ctx N               context length (default: the model's; EMBER_CTX)\n"
           "  --precision P         exact (f32 activations) or fast (bf16 dot products in prefill)\n"
           "  --device D            cpu (default), cuda or cuda:N (EMBER_DEVICE)\n"
           "  --tensor-parallel N   split the model over N GPUs, cuda:D..D+N-1 (Llama and\n"
           "                        Qwen3.5 families; EMBER_TENSOR_PARALLEL, default 1)\n"
           "  --profiles DIR        extra model profiles (EMBER_PROFILES_DIR); see `ember config`\n"
           "  --temperature T       0 = greedy (default: generation_config.json, else 1)\n"
           "  --top-p P, --top-k K, --min-p P, --repetition-penalty R\n"
           "  --seed S              same seed, same tokens\n";
}
