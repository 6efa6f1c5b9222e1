/* cli_eval.h — shared pieces of the `ppl` and `kl` verbs: reading and
 * tokenizing an evaluation text, cutting it into context windows. */
#ifndef EMBER_CLI_EVAL_H
#define EMBER_CLI_EVAL_H

#include "ember/ember.h"

#include <stddef.h>
#include <stdint.h>

/* Tokenizes the file (no special tokens added), keeping at most max_tokens
 * (0: all). *ids is malloc'd, owned by the caller. Prints its own errors. */
int cli_eval_tokens(const char *verb, const em_model *m, const char *path, long max_tokens, int32_t **ids, size_t *n);

#endif
