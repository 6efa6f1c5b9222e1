/* cmd_ls.c — `ember ls`: the models in the Hugging Face cache with their
 * size, family, quantization and whether ember can run them (headers only). */
#include "cli/cli.h"

#include "base/config.h"
#include "io/hf_cache.h"
#include "model/probe.h"
#include "model/registry.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ls_help(void) {
    printf("usage: ember ls [--json] [--profiles DIR]\n\n"
           "Lists the models in the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or\n"
           "~/.cache/huggingface/hub): name, size, family, quantization, and whether ember\n"
           "can run them (and why not). Any verb taking MODEL accepts a unique part of a\n"
           "name listed here.\n");
}

static void size_str(uint64_t b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) v /= 1024, i++;
    snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static json_t *entry(const hf_model *hm, const char *profiles) {
    model_probe p;
    em_status s = model_probe_open(hm->dir, profiles, &p);
    const em_impl *im = s == EM_OK ? p.id.impl : NULL;
    json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:b}", "name", hm->repo, "path", hm->dir, "revision", hm->revision,
                          "bytes", (json_int_t)hm->bytes, "family", p.model_type[0] ? p.model_type : "?",
                          "quantization", p.quant[0] ? p.quant : "none", "runnable", im != NULL);
    if (o && im) json_object_set_new(o, "implementation", json_string(im->name));
    if (o && !im) json_object_set_new(o, "reason", json_string(p.error));
    model_probe_close(&p);
    em_clear_error();
    return o;
}

static int cmd_ls(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        ls_help();
        return CLI_OK;
    }
    bool json = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_config_opt(argc, argv, &i, "ls");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        if (!strcmp(argv[i], "--json")) json = true;
        else { cli_error("ls", "unknown argument %s (see --help)", argv[i]); return CLI_USAGE; }
    }
    char *hub;
    hf_model *models;
    size_t n;
    if (hf_cache_dir(&hub) != EM_OK || hf_cache_list(hub, &models, &n) != EM_OK) {
        cli_error("ls", "%s", em_last_error());
        return CLI_FAIL;
    }
    const char *profiles = em_config_str(em_config_global(), EMC_PROFILES_DIR);
    json_t *all = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(all, entry(&models[i], profiles));
    if (json) {
        char *text = json_dumps(all, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) printf("%s\n", text);
        free(text);
    } else if (!n) {
        printf("no models in %s\n", hub);
    } else {
        printf("%-40s %10s  %-10s %-24s %s\n", "NAME", "SIZE", "FAMILY", "QUANTIZATION", "RUNS");
        size_t i;
        json_t *e;
        json_array_foreach(all, i, e) {
            char sz[32];
            size_str((uint64_t)json_integer_value(json_object_get(e, "bytes")), sz, sizeof sz);
            bool ok = json_is_true(json_object_get(e, "runnable"));
            printf("%-40s %10s  %-10s %-24s %s%s\n", json_string_value(json_object_get(e, "name")), sz,
                   json_string_value(json_object_get(e, "family")), json_string_value(json_object_get(e, "quantization")),
                   ok ? "yes" : "no: ", ok ? "" : json_string_value(json_object_get(e, "reason")));
        }
    }
    json_decref(all);
    hf_models_free(models, n);
    free(hub);
    return CLI_OK;
}

EM_CLI_VERB("ls", "list the models in the Hugging Face cache", cmd_ls)
