/* cmd_config.c — `ember config`: the effective configuration, each value
 * with its source (default, env or flag), and the warnings the environment
 * produced (unknown EMBER_* names, values that did not parse). */
#include "cli/cli.h"

#include "base/config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void config_help(void) {
    printf("usage: ember config [--json] [configuration flags]\n\n"
           "Prints every configuration variable with its effective value and where the\n"
           "value came from: default, env (the environment at start) or flag. Secrets\n"
           "are masked. Variables marked * may also be overridden by one request (the\n"
           "X-Ember-Config header of the server). Configuration flags (any verb that loads a model accepts them):\n\n");
    for (int k = 0; k < EMC_COUNT; k++) {
        const em_config_var *v = em_config_var_at((em_config_key)k);
        const char *names[] = {v->name, NULL};
        cli_config_help(stdout, names);
    }
    printf("\nThe variables are described in docs/configuration.md.\n");
}

static const char *shown(const em_config *c, em_config_key k) {
    const char *v = em_config_str(c, k);
    return em_config_var_at(k)->kind == EM_CFG_SECRET && *v ? "********" : v;
}

static int print_json(const em_config *c) {
    json_t *root = json_object(), *vars = json_object(), *warn = json_array();
    for (int k = 0; k < EMC_COUNT; k++) {
        const em_config_var *v = em_config_var_at((em_config_key)k);
        json_t *e = json_object();
        json_object_set_new(e, "value", json_string(shown(c, (em_config_key)k)));
        json_object_set_new(e, "source", json_string(em_config_source_name(em_config_source_of(c, (em_config_key)k))));
        json_object_set_new(e, "default", json_string(v->def));
        json_object_set_new(e, "per_request", json_boolean(em_config_per_request((em_config_key)k)));
        json_object_set_new(vars, v->name, e);
    }
    for (size_t i = 0; i < em_config_n_warnings(c); i++) json_array_append_new(warn, json_string(em_config_warning(c, i)));
    json_object_set_new(root, "variables", vars);
    json_object_set_new(root, "warnings", warn);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return CLI_FAIL;
    printf("%s\n", text);
    free(text);
    return CLI_OK;
}

static int cmd_config(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        config_help();
        return CLI_OK;
    }
    bool json = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_config_opt(argc, argv, &i, "config");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        if (!strcmp(argv[i], "--json")) json = true;
        else {
            cli_error("config", "unknown argument %s (see --help)", argv[i]);
            return CLI_USAGE;
        }
    }
    const em_config *c = em_config_global();
    if (json) return print_json(c);
    printf("%-24s %-24s %s\n", "VARIABLE", "VALUE", "SOURCE");
    for (int k = 0; k < EMC_COUNT; k++) {
        const char *v = shown(c, (em_config_key)k);
        printf("%-24s %-24s %s%s\n", em_config_var_at((em_config_key)k)->name, *v ? v : "(empty)",
               em_config_source_name(em_config_source_of(c, (em_config_key)k)),
               em_config_per_request((em_config_key)k) ? " *" : "");
    }
    printf("(* may be overridden per request)\n");
    for (size_t i = 0; i < em_config_n_warnings(c); i++) printf("warning: %s\n", em_config_warning(c, i));
    return CLI_OK;
}

EM_CLI_VERB("config", "print the effective configuration and where each value comes from", cmd_config)
