/* cli_model.h — model and sampling options shared by generate, bench,
 * serve and chat. */
#ifndef EMBER_CLI_MODEL_H
#define EMBER_CLI_MODEL_H

#include "cli/cli.h"
#include "ember/ember.h"

typedef struct cli_model_opts {
    em_open_options open;
    em_precision default_precision; /* the verb's, when EMBER_PRECISION is auto */
    double temperature, top_p, min_p, repetition_penalty; /* < 0: model default */
    long top_k;                                           /* < 0: model default */
    uint64_t seed;
    bool has_seed;
} cli_model_opts;

void cli_model_opts_init(cli_model_opts *o, em_precision default_precision);
/* 1: argv[*i] was a model/sampling option (consumed), 0: not one, -1: bad value. */
int cli_model_opt(cli_model_opts *o, int argc, char **argv, int *i, const char *verb);
em_sampling cli_model_sampling(const cli_model_opts *o, const em_model *m);
const char *cli_model_opts_help(void);
/* A rank > 0 of a multi-process tensor-parallel group (EMBER_WORLD_SIZE > 1,
 * EMBER_RANK > 0) does not run the verb: it opens the model with the same
 * options as rank 0 and runs the steps rank 0 sends until rank 0 stops.
 * True when this process is such a rank, with its exit code in *rc. */
bool cli_tp_follow(const char *verb, const char *dir, const em_open_options *o, int *rc);

#endif
