/* cmd_fit.c — `ember fit MODEL --ctx N`: the memory contract of a model on
 * this machine: weights, KV and recurrent state, transient, whether it fits,
 * the largest context that fits, and the predicted peak. */
#include "cli/cli.h"

#include "base/config.h"
#include "model/fit.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fit_help(void) {
    printf("usage: ember fit MODEL --ctx N [--batch B] [--device cpu] [--memory-budget BYTES]\n"
           "                [--threads N] [--json]\n\n"
           "Predicts the peak resident memory of running MODEL with N positions in each\n"
           "of B sequences, from the headers alone: weights (mmapped), f32 vectors, KV\n"
           "cache, recurrent state, prefill workspace and the process itself. Compares it\n"
           "with the budget (default: MemAvailable) and prints the largest context that\n"
           "fits. Exit status 0 when it fits, 1 when it does not.\n");
}

static void mib(const char *label, uint64_t b) { printf("  %-22s %12.1f MiB\n", label, (double)b / (1 << 20)); }

static int cmd_fit(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        fit_help();
        return CLI_OK;
    }
    const char *model = NULL;
    long ctx = 0, batch = 1;
    uint64_t budget = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (cli_arg_is(argv[i], "--ctx") || cli_arg_is(argv[i], "--batch")) {
            bool is_ctx = cli_arg_is(argv[i], "--ctx");
            const char *v = cli_take_value(argc, argv, &i, "fit");
            if (!v || !cli_parse_int(v, 1, 1 << 26, is_ctx ? &ctx : &batch)) { cli_error("fit", "%s needs a positive number", is_ctx ? "--ctx" : "--batch"); return CLI_USAGE; }
            continue;
        }
        if (cli_arg_is(argv[i], "--memory-budget")) {
            const char *v = cli_take_value(argc, argv, &i, "fit");
            if (!v || !cli_parse_u64(v, &budget) || !budget) { cli_error("fit", "--memory-budget needs a byte count"); return CLI_USAGE; }
            continue;
        }
        int r = cli_config_opt(argc, argv, &i, "fit");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-') { cli_error("fit", "unknown option %s", argv[i]); return CLI_USAGE; }
        else if (!model) model = argv[i];
        else { cli_error("fit", "unexpected argument %s", argv[i]); return CLI_USAGE; }
    }
    if (!model || !ctx) { cli_error("fit", "MODEL and --ctx are required (see --help)"); return CLI_USAGE; }
    const em_config *c = em_config_global();
    if (strcmp(em_config_str(c, EMC_DEVICE), "cpu")) { cli_error("fit", "--device: only cpu is supported"); return CLI_USAGE; }
    char *dir;
    if (!cli_resolve_model(model, &dir, "fit")) return CLI_FAIL;
    fit_request rq = {(int)ctx, (int)batch, (int)em_config_int(c, EMC_THREADS), budget};
    fit_result f;
    em_status s = fit_predict(dir, &rq, &f);
    free(dir);
    if (s != EM_OK) { cli_error("fit", "%s", em_last_error()); return CLI_FAIL; }
    if (json) {
        json_t *o = json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i}", "fits", f.fits,
                              "peak_bytes", (json_int_t)f.total, "capacity_bytes", (json_int_t)f.capacity,
                              "weights_bytes", (json_int_t)f.weights, "vectors_bytes", (json_int_t)f.vectors,
                              "kv_bytes", (json_int_t)f.kv, "kv_bytes_per_token", (json_int_t)f.kv_per_token,
                              "state_bytes", (json_int_t)f.state, "state_bytes_per_sequence", (json_int_t)f.state_per_seq,
                              "transient_bytes", (json_int_t)f.transient, "runtime_bytes", (json_int_t)f.runtime,
                              "max_context", (json_int_t)f.max_ctx, "model_context", f.model_max_ctx, "kv_layers", f.kv_layers);
        char *t = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        if (t) printf("%s\n", t);
        free(t);
        json_decref(o);
    } else {
        printf("%s: context %ld x %ld sequence%s on the cpu\n", model, ctx, batch, batch == 1 ? "" : "s");
        mib("weights (mmapped)", f.weights);
        mib("f32 vectors", f.vectors);
        mib("KV cache", f.kv);
        printf("  %-22s %12.1f KiB/token over %d layers\n", "", (double)f.kv_per_token / 1024, f.kv_layers);
        if (f.state_layers) mib("recurrent state", f.state);
        mib("transient (prefill)", f.transient);
        mib("runtime", f.runtime);
        mib("predicted peak", f.total);
        mib("available", f.capacity);
        printf("%s; the largest context that fits is %d (the model's is %d)\n", f.fits ? "fits" : "does NOT fit",
               f.max_ctx, f.model_max_ctx);
    }
    return f.fits ? CLI_OK : CLI_FAIL;
}

EM_CLI_VERB("fit", "predict the memory a model needs for a context, and whether it fits", cmd_fit)
