/* cli_config.c — configuration flags: every variable of the config table
 * that names a flag (--threads, --port, --profiles...) is accepted by the
 * verbs that call cli_config_opt. A flag builds a new process snapshot with
 * the value recorded as coming from a flag; verbs parse their arguments
 * before any thread starts, so replacing the process snapshot is safe. */
#include "cli/cli_model.h"

#include "base/config.h"
#include "io/hf_cache.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

int cli_config_opt(int argc, char **argv, int *i, const char *verb) {
    const char *a = argv[*i];
    for (int k = 0; k < EMC_COUNT; k++) {
        const em_config_var *var = em_config_var_at((em_config_key)k);
        if (!var->flag || !cli_arg_is(a, var->flag)) continue;
        const char *v = "1";
        if (var->kind != EM_CFG_FLAG && !(v = cli_take_value(argc, argv, i, verb))) return -1;
        em_config_override ov = {var->name, v};
        em_config *c;
        if (em_config_with_overrides(em_config_global(), &ov, 1, EM_CFG_SRC_FLAG, &c) != EM_OK) {
            cli_error(verb, "%s: %s", var->flag, em_last_error());
            return -1;
        }
        em_config_set_global(c);
        em_config_release(c);
        return 1;
    }
    return 0;
}

void cli_config_help(FILE *f, const char *const *names) {
    for (size_t n = 0; names[n]; n++) {
        int k = em_config_find(names[n]);
        if (k < 0) continue;
        const em_config_var *var = em_config_var_at((em_config_key)k);
        if (!var->flag) continue;
        char left[64];
        snprintf(left, sizeof left, "%s%s", var->flag, var->kind == EM_CFG_FLAG ? "" : " V");
        fprintf(f, "  %-21s %s (%s)\n", left, var->help, var->name);
    }
}

bool cli_resolve_model(const char *arg, char **dir, const char *verb) {
    if (hf_resolve_model(arg, dir) == EM_OK) return true;
    cli_error(verb, "%s", em_last_error());
    return false;
}

bool cli_tp_follow(const char *verb, const char *dir, const em_open_options *o, int *rc) {
    const em_config *c = em_config_global();
    if (em_config_int(c, EMC_WORLD_SIZE) <= 1 || em_config_int(c, EMC_RANK) == 0) return false;
    em_model *m;
    em_status s = em_model_open(dir, o, &m);
    if (s == EM_OK) {
        s = model_tp_follower(m) ? model_tp_follow(m)
                                 : em_fail(EM_ERR_INTERNAL, "the model did not open as a tensor-parallel rank");
        em_model_free(m);
    }
    if (s != EM_OK) cli_error(verb, "%s", em_last_error());
    *rc = s == EM_OK ? CLI_OK : CLI_FAIL;
    return true;
}
