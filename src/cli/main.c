/* main.c — `ember VERB ...`: finds the verb in the registry and runs it. */
#include "cli/cli.h"

#include "base/config.h"
#include "base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLI_MAX_VERBS 64
static const cli_verb *verbs[CLI_MAX_VERBS];
static int n_verbs;

void cli_register(const cli_verb *v) {
    if (n_verbs < CLI_MAX_VERBS) verbs[n_verbs++] = v;
}

static int verb_cmp(const void *a, const void *b) {
    const cli_verb *x = *(const cli_verb *const *)a, *y = *(const cli_verb *const *)b;
    return strcmp(x->name, y->name);
}

static void usage(FILE *f) {
    fprintf(f, "ember %s — local LLM runtime\n\nusage: ember VERB [options]\n\nverbs:\n", EMBER_VERSION_STRING);
    qsort(verbs, (size_t)n_verbs, sizeof verbs[0], verb_cmp);
    for (int i = 0; i < n_verbs; i++) fprintf(f, "  %-10s %s\n", verbs[i]->name, verbs[i]->summary);
    fprintf(f, "\n`ember VERB --help` describes a verb. MODEL is a model directory (config.json,\n"
               "*.safetensors, tokenizer.json).\n");
}

bool cli_arg_is(const char *arg, const char *name) {
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == 0 || arg[n] == '=');
}

const char *cli_take_value(int argc, char **argv, int *i, const char *verb) {
    const char *eq = strchr(argv[*i], '=');
    if (eq && argv[*i][0] == '-') return eq + 1;
    if (*i + 1 >= argc) {
        cli_error(verb, "option %s needs a value", argv[*i]);
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

bool cli_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool cli_parse_float(const char *s, double *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || v != v) return false;
    *out = v;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16, cnt = 0;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) { free(a); return false; }
        if (cnt == cap) {
            cap *= 2;
            int32_t *b = realloc(a, cap * sizeof *a);
            if (!b) { free(a); return false; }
            a = b;
        }
        a[cnt++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) { free(a); return false; }
    }
    if (!cnt) { free(a); return false; }
    *ids = a;
    *n = cnt;
    return true;
}

void cli_error(const char *verb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ember %s: ", verb);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return true;
    return false;
}

bool cli_common_flag(int argc, char **argv, int *i) {
    (void)argc;
    if (!strcmp(argv[*i], "-v") || !strcmp(argv[*i], "--verbose")) {
        em_log_set_level(EM_LOG_DEBUG);
        return true;
    }
    if (!strcmp(argv[*i], "-q") || !strcmp(argv[*i], "--quiet")) {
        em_log_set_level(EM_LOG_ERROR);
        return true;
    }
    return false;
}

int main(int argc, char **argv) {
    /* The environment is read here, once; nothing reads it afterwards. */
    if (em_config_init() != EM_OK) {
        fprintf(stderr, "ember: %s\n", em_last_error());
        return CLI_FAIL;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("ember %s\n", EMBER_VERSION_STRING);
        return CLI_OK;
    }
    for (int i = 0; i < n_verbs; i++)
        if (!strcmp(verbs[i]->name, argv[1])) return verbs[i]->fn(argc - 1, argv + 1);
    fprintf(stderr, "ember: unknown verb '%s'\n\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}
