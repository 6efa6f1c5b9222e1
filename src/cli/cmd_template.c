/* cmd_template.c — `ember template DIR --request FILE`: renders a chat
 * request through the model's chat template and prints the prompt byte for
 * byte. `--batch FILE` renders many (template, variables) pairs from a JSON
 * Lines file and prints one JSON result per line (used by the parity
 * tests against jinja2). */
#include "cli/cli.h"

#include "base/config.h"

#include "base/file.h"
#include "chat/chat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEMPLATE_MAX_REQUEST (256u << 20)

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember template DIR --request FILE [--now SECONDS]\n"
            "       ember template --batch FILE.jsonl [--now SECONDS]\n\n"
            "Renders a chat request with the chat template of the model directory DIR\n"
            "(chat_template.jinja, chat_template.json or tokenizer_config.json) and prints\n"
            "the prompt exactly, with no added newline.\n\n"
            "  --request FILE  JSON object: {\"messages\": [...], \"tools\": [...],\n"
            "                  \"add_generation_prompt\": bool, ...}; every key is a template\n"
            "                  variable (enable_thinking, reasoning_effort, ...)\n"
            "  --batch FILE    JSON Lines of {\"template\": str, \"vars\": {...}, \"config\": {...}};\n"
            "                  prints {\"ok\": true, \"output\": str} or {\"ok\": false, \"error\": str}\n"
            "                  per line\n"
            "  --now SECONDS   the clock strftime_now() sees (default: EMBER_TEMPLATE_NOW, or\n"
            "                  the current time)\n\n"
            "Template errors (syntax, raise_exception, limits) exit with status 1 and the\n"
            "message on stderr.\n");
}

static int render_request(const char *dir, const char *request, time_t now) {
    json_error_t err;
    json_t *vars = json_load_file(request, 0, &err);
    if (!vars) {
        cli_error("template", "%s: line %d: %s", request, err.line, err.text);
        return CLI_FAIL;
    }
    if (!json_is_object(vars)) {
        cli_error("template", "%s: the request must be a JSON object", request);
        json_decref(vars);
        return CLI_FAIL;
    }
    chat_template *t = NULL;
    char *out = NULL;
    size_t len = 0;
    em_status st = chat_template_load(dir, &t);
    if (st == EM_OK) st = chat_render_at(t, vars, now, &out, &len);
    int rc = CLI_OK;
    if (st != EM_OK) {
        cli_error("template", "%s", em_last_error());
        rc = CLI_FAIL;
    } else if (fwrite(out, 1, len, stdout) != len || fflush(stdout) != 0) {
        cli_error("template", "writing the prompt: %s", strerror(errno));
        rc = CLI_FAIL;
    }
    free(out);
    chat_template_free(t);
    json_decref(vars);
    return rc;
}

static json_t *render_case(json_t *c, time_t now) {
    json_t *tpl = json_object_get(c, "template"), *vars = json_object_get(c, "vars"), *cfg = json_object_get(c, "config");
    if (!json_is_string(tpl)) return json_pack("{s:b,s:s}", "ok", 0, "error", "case has no template string");
    char *cfg_text = cfg ? json_dumps(cfg, 0) : NULL;
    chat_template *t = NULL;
    char *out = NULL;
    size_t len = 0;
    em_status st = chat_template_from_string(json_string_value(tpl), cfg_text, &t);
    if (st == EM_OK) st = chat_render_at(t, vars ? vars : NULL, now, &out, &len);
    json_t *res = st == EM_OK ? json_pack("{s:b,s:s%}", "ok", 1, "output", out, len) : json_pack("{s:b,s:s}", "ok", 0, "error", em_last_error());
    free(out);
    free(cfg_text);
    chat_template_free(t);
    return res;
}

static int render_batch(const char *path, time_t now) {
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_error("template", "%s: %s", path, strerror(errno));
        return CLI_FAIL;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = CLI_OK, lineno = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (n <= 1) continue;
        json_error_t err;
        json_t *c = json_loadb(line, (size_t)n, 0, &err);
        json_t *res = c ? render_case(c, now) : json_pack("{s:b,s:s}", "ok", 0, "error", "malformed JSON line");
        char *text = res ? json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (!text) rc = CLI_FAIL;
        else printf("%s\n", text);
        free(text);
        json_decref(res);
        json_decref(c);
    }
    free(line);
    fclose(f);
    return rc;
}

static int cmd_template(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    const char *dir = NULL, *request = NULL, *batch = NULL, *now_text = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--request")) {
            if (!(request = cli_take_value(argc, argv, &i, "template"))) return CLI_USAGE;
        } else if (cli_arg_is(argv[i], "--batch")) {
            if (!(batch = cli_take_value(argc, argv, &i, "template"))) return CLI_USAGE;
        } else if (cli_arg_is(argv[i], "--now")) {
            if (!(now_text = cli_take_value(argc, argv, &i, "template"))) return CLI_USAGE;
        } else if (argv[i][0] == '-') {
            cli_error("template", "unknown option %s", argv[i]);
            return CLI_USAGE;
        } else if (!dir) {
            dir = argv[i];
        } else {
            cli_error("template", "unexpected argument %s", argv[i]);
            return CLI_USAGE;
        }
    }
    time_t now = (time_t)em_config_int(em_config_global(), EMC_TEMPLATE_NOW);
    if (now_text && *now_text) {
        long v;
        if (!cli_parse_int(now_text, 1, 253402300799L, &v)) {
            cli_error("template", "--now / EMBER_TEMPLATE_NOW must be seconds since the epoch, got '%s'", now_text);
            return CLI_USAGE;
        }
        now = (time_t)v;
    }
    if (batch) return render_batch(batch, now);
    if (!dir || !request) {
        usage(stderr);
        return CLI_USAGE;
    }
    return render_request(dir, request, now);
}

EM_CLI_VERB("template", "render a chat request through a model's chat template", cmd_template)
