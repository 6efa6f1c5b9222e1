/* cli.h — the verb registry and shared helpers of the `ember` command.
 *
 * Each verb lives in its own cmd_<verb>.c and registers itself with
 * EM_CLI_VERB(name, summary, fn); main.c dispatches. Verbs return a process
 * exit code: 0 success, 1 runtime failure, 2 usage error. */
#ifndef EMBER_CLI_H
#define EMBER_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef int (*cli_verb_fn)(int argc, char **argv);

typedef struct cli_verb {
    const char *name;
    const char *summary;
    cli_verb_fn fn;
} cli_verb;

void cli_register(const cli_verb *v);

#define EM_CLI_VERB(NAME, SUMMARY, FN)                                          \
    static const cli_verb cli_verb_##FN = {NAME, SUMMARY, FN};                  \
    __attribute__((constructor)) static void cli_register_##FN(void) { cli_register(&cli_verb_##FN); }

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Option parsing helpers: cli_arg_is(argv[i], "--port") matches both
 * "--port 80" (value in argv[i+1]) and "--port=80". cli_take_value returns
 * the value and advances *i, or NULL (after printing an error) when the
 * value is missing. */
bool cli_arg_is(const char *arg, const char *name);
const char *cli_take_value(int argc, char **argv, int *i, const char *verb);
bool cli_parse_int(const char *s, long lo, long hi, long *out);
bool cli_parse_float(const char *s, double *out);
bool cli_parse_u64(const char *s, uint64_t *out);
/* Parses "1,2,3" into a malloc'd array (owned by caller). */
bool cli_parse_ids(const char *s, int32_t **ids, size_t *n);
/* Prints "ember VERB: message" to stderr. */
void cli_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True when argv holds -h or --help. */
bool cli_wants_help(int argc, char **argv);
/* Common flags every verb accepts: --verbose/-v, --quiet. Returns true and
 * consumes argv[*i] when it was one of them. */
bool cli_common_flag(int argc, char **argv, int *i);

/* Configuration flags (cli_config.c): when argv[*i] is the flag of a
 * configuration variable (--threads, --profiles, --port...), applies it to
 * the process snapshot as a flag-sourced value. 1: consumed, 0: not one,
 * -1: bad value (error printed). */
int cli_config_opt(int argc, char **argv, int *i, const char *verb);
/* Prints one help line per named variable that has a flag (NULL-ended). */
void cli_config_help(FILE *f, const char *const *names);
/* MODEL argument → snapshot directory: a path, or a name in the Hugging Face
 * cache (hf_resolve_model). *dir is malloc'd, owned by the caller. On
 * failure prints the error (with candidates when ambiguous) and returns
 * false. */
bool cli_resolve_model(const char *arg, char **dir, const char *verb);


#endif
