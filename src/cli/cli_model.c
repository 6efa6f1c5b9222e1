/* cli_model.c — options shared by the verbs that load a model and sample:
 * --threads, --ctx, --precision, sampling flags. */
#include "cli/cli_model.h"

#include <stdio.h>
#include <string.h>

void cli_model_opts_init(cli_model_opts *o, em_precision default_precision) {
    memset(o, 0, sizeof *o);
    o->open.precision = default_precision;
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
    if (cli_arg_is(a, "--threads")) { VALUE(); if (!cli_parse_int(v, 0, 1024, &l)) BAD("--threads needs a number"); o->open.n_threads = (int)l; }
    else if (cli_arg_is(a, "--ctx")) { VALUE(); if (!cli_parse_int(v, 1, 1 << 24, &l)) BAD("--ctx needs a positive number"); o->open.max_context = (int)l; }
    else if (cli_arg_is(a, "--precision")) {
        VALUE();
        if (!strcmp(v, "exact")) o->open.precision = EM_PRECISION_EXACT;
        else if (!strcmp(v, "fast")) o->open.precision = EM_PRECISION_FAST;
        else BAD("--precision is exact or fast");
    }
    else if (cli_arg_is(a, "--temperature")) { VALUE(); if (!cli_parse_float(v, &d) || d < 0) BAD("--temperature needs a number >= 0"); o->temperature = d; }
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
    return "  --threads N           compute threads (default: one per core)\n"
           "  --ctx N               context length (default: the model's)\n"
           "  --precision P         exact (f32 activations) or fast (bf16 dot products in prefill)\n"
           "  --temperature T       0 = greedy (default: generation_config.json, else 1)\n"
           "  --top-p P, --top-k K, --min-p P, --repetition-penalty R\n"
           "  --seed S              same seed, same tokens\n";
}
