/* cmd_tokenize.c — `ember tokenize`: the tokenizer on its own, for parity
 * tests, debugging and benchmarks. */
#include "cli/cli.h"

#include "base/file.h"
#include "base/timer.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: ember tokenize DIR [TEXT] [options]\n\n"
           "Encodes or decodes with DIR/tokenizer.json (DIR may be a model directory or the\n"
           "path of a tokenizer.json; tokenizer_config.json next to it is read too).\n\n"
           "  TEXT                 encode TEXT, print the ids as a JSON array\n"
           "  --jsonl FILE         encode each line {\"text\": ..., \"add_special_tokens\": bool}\n"
           "                       of FILE (- for stdin); print one JSON array of ids per line\n"
           "  --decode             with --jsonl: each line is a JSON array of ids; print one\n"
           "                       JSON string per line (special tokens kept)\n"
           "  --skip-special       with --decode: drop special tokens\n"
           "  --no-special         with TEXT: do not add BOS/EOS (default: add them)\n"
           "  --bench FILE         encode FILE (one thread) and report MB/s, whole text and\n"
           "                       line by line\n"
           "  --repeat N           benchmark repetitions (default 3, best is reported)\n"
           "  -h, --help           this help\n");
}

static int print_ids(const int32_t *ids, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
    return CLI_OK;
}

static int encode_line(const tokenizer *t, const char *line, size_t lineno) {
    json_error_t err;
    json_t *j = json_loads(line, JSON_ALLOW_NUL, &err);
    json_t *text = json_is_object(j) ? json_object_get(j, "text") : NULL;
    json_t *sp = json_is_object(j) ? json_object_get(j, "add_special_tokens") : NULL;
    if (!json_is_string(text) || (sp && !json_is_boolean(sp))) {
        cli_error("tokenize", "line %zu: expected {\"text\": string, \"add_special_tokens\": bool}%s%s", lineno,
                  j ? "" : ": ", j ? "" : err.text);
        json_decref(j);
        return CLI_FAIL;
    }
    int32_t *ids;
    size_t n;
    em_status st = tok_encode(t, json_string_value(text), json_string_length(text), sp ? json_is_true(sp) : true, &ids, &n);
    json_decref(j);
    if (st != EM_OK) {
        cli_error("tokenize", "line %zu: %s", lineno, em_last_error());
        return CLI_FAIL;
    }
    print_ids(ids, n);
    free(ids);
    return CLI_OK;
}

static int decode_line(const tokenizer *t, const char *line, size_t lineno, bool skip) {
    json_error_t err;
    json_t *j = json_loads(line, 0, &err);
    if (!json_is_array(j)) {
        cli_error("tokenize", "line %zu: expected a JSON array of ids", lineno);
        json_decref(j);
        return CLI_FAIL;
    }
    size_t n = json_array_size(j);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    int rc = ids ? CLI_OK : CLI_FAIL;
    for (size_t i = 0; rc == CLI_OK && i < n; i++) {
        json_t *v = json_array_get(j, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            cli_error("tokenize", "line %zu: element %zu is not a token id", lineno, i);
            rc = CLI_FAIL;
        } else {
            ids[i] = (int32_t)json_integer_value(v);
        }
    }
    json_decref(j);
    char *text = NULL;
    size_t text_len = 0;
    if (rc == CLI_OK && tok_decode_n(t, ids, n, skip, &text, &text_len) != EM_OK) {
        cli_error("tokenize", "line %zu: %s", lineno, em_last_error());
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK) {
        json_t *s = json_stringn(text, text_len);
        char *out = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        if (out) printf("%s\n", out);
        else rc = CLI_FAIL;
        free(out);
        json_decref(s);
    }
    free(text);
    free(ids);
    return rc;
}

static int run_jsonl(const tokenizer *t, const char *path, bool decode, bool skip) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        cli_error("tokenize", "cannot open %s", path);
        return CLI_FAIL;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = CLI_OK;
    while (rc == CLI_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)len) continue;
        rc = decode ? decode_line(t, line, lineno, skip) : encode_line(t, line, lineno);
    }
    free(line);
    if (f != stdin) fclose(f);
    fflush(stdout);
    return rc;
}

static double bench_once(const tokenizer *t, const char *text, size_t len, bool by_line, size_t *n_tok) {
    double t0 = em_now();
    *n_tok = 0;
    for (size_t a = 0; a <= len;) {
        const char *nl = by_line ? memchr(text + a, '\n', len - a) : NULL;
        size_t b = nl ? (size_t)(nl - text) : len;
        int32_t *ids;
        size_t n;
        if (tok_encode(t, text + a, b - a, false, &ids, &n) != EM_OK) return -1;
        free(ids);
        *n_tok += n;
        a = b + 1;
    }
    return em_now() - t0;
}

static int run_bench(const tokenizer *t, const char *path, long repeat) {
    char *text;
    size_t len;
    if (em_read_file(path, (size_t)1 << 30, &text, &len) != EM_OK) {
        cli_error("tokenize", "%s", em_last_error());
        return CLI_FAIL;
    }
    for (int mode = 0; mode < 2; mode++) {
        double best = 0, first = 0;
        size_t n_tok = 0;
        for (long r = 0; r < repeat; r++) {
            double dt = bench_once(t, text, len, mode == 1, &n_tok);
            if (dt < 0) {
                cli_error("tokenize", "%s", em_last_error());
                free(text);
                return CLI_FAIL;
            }
            if (r == 0) first = best = dt;
            if (dt < best) best = dt;
        }
        printf("{\"mode\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"first_s\": %.4f, \"best_s\": %.4f, "
               "\"MBps_first\": %.2f, \"MBps_best\": %.2f}\n",
               mode ? "lines" : "whole", len, n_tok, first, best, (double)len / first / 1e6, (double)len / best / 1e6);
    }
    free(text);
    return CLI_OK;
}

static int cmd_tokenize(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        help();
        return CLI_OK;
    }
    const char *dir = NULL, *text = NULL, *jsonl = NULL, *bench = NULL;
    bool decode = false, skip = false, special = true;
    long repeat = 3;
    for (int i = 1; i < argc; i++) {
        if (cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--jsonl")) {
            if (!(jsonl = cli_take_value(argc, argv, &i, "tokenize"))) return CLI_USAGE;
        } else if (cli_arg_is(argv[i], "--bench")) {
            if (!(bench = cli_take_value(argc, argv, &i, "tokenize"))) return CLI_USAGE;
        } else if (cli_arg_is(argv[i], "--repeat")) {
            const char *v = cli_take_value(argc, argv, &i, "tokenize");
            if (!v || !cli_parse_int(v, 1, 1000, &repeat)) {
                cli_error("tokenize", "--repeat needs an integer in [1, 1000]");
                return CLI_USAGE;
            }
        } else if (!strcmp(argv[i], "--decode")) {
            decode = true;
        } else if (!strcmp(argv[i], "--skip-special")) {
            skip = true;
        } else if (!strcmp(argv[i], "--no-special")) {
            special = false;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_error("tokenize", "unknown option %s (see --help)", argv[i]);
            return CLI_USAGE;
        } else if (!dir) {
            dir = argv[i];
        } else if (!text) {
            text = argv[i];
        } else {
            cli_error("tokenize", "unexpected argument %s", argv[i]);
            return CLI_USAGE;
        }
    }
    if (!dir || (!text && !jsonl && !bench) || (decode && !jsonl)) {
        cli_error("tokenize", "usage: ember tokenize DIR [TEXT | --jsonl FILE [--decode] | --bench FILE]");
        return CLI_USAGE;
    }
    tokenizer *t;
    if (tok_load(dir, &t) != EM_OK) {
        cli_error("tokenize", "%s", em_last_error());
        return CLI_FAIL;
    }
    int rc = CLI_OK;
    if (jsonl) rc = run_jsonl(t, jsonl, decode, skip);
    else if (bench) rc = run_bench(t, bench, repeat);
    else {
        int32_t *ids;
        size_t n;
        if (tok_encode(t, text, strlen(text), special, &ids, &n) != EM_OK) {
            cli_error("tokenize", "%s", em_last_error());
            rc = CLI_FAIL;
        } else {
            print_ids(ids, n);
            free(ids);
        }
    }
    tok_free(t);
    return rc;
}

EM_CLI_VERB("tokenize", "encode/decode text with a model's tokenizer.json", cmd_tokenize)
