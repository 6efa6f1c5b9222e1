/* cmd_fit.c — `ember fit MODEL --ctx N`: the memory contract of a model on
 * the CPU or a GPU: weights, KV and recurrent state, transient, whether it
 * fits, the largest context that fits, the predicted peak, and with
 * --measure the measured one beside it. */
#include "cli/cli.h"

#include "backend/backend.h"
#include "base/config.h"
#include "cli/fit_measure.h"
#include "model/fit.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fit_help(void) {
    printf("usage: ember fit MODEL --ctx N [--batch B] [--device cpu|cuda[:N]] [--memory-budget BYTES]\n"
           "                [--precision exact|fast] [--threads N] [--measure] [--json]\n\n"
           "Predicts the peak memory of running MODEL with N positions in each of B\n"
           "sequences, from the headers alone.\n\n"
           "On the cpu: resident memory: weights (mmapped), f32 vectors, KV cache,\n"
           "recurrent state, prefill workspace and the process itself, against the budget\n"
           "(default: MemAvailable).\n\n"
           "On cuda: device memory: weights as uploaded, f32 vectors, KV cache,\n"
           "activations and logits, matmul scratch (it depends on --precision; default\n"
           "fast, as ember serve runs), staging arena and cuBLAS workspace, kernel code and\n"
           "the CUDA context. The capacity is the GPU's free memory (plus this process's\n"
           "context), or --memory-budget; without a GPU and without a budget the\n"
           "prediction is printed with the capacity unknown.\n\n"
           "--measure opens the model there, prefills every sequence to the end of its\n"
           "context, decodes one step, and prints the measured peak beside the prediction\n"
           "(cpu: peak resident set; cuda: the fall of the GPU's free memory, which never\n"
           "holds the context, so it is compared with the peak less the context).\n\n"
           "Exit status 0 when it fits (or the capacity is unknown), 1 when it does not.\n");
}

static void mib(const char *label, uint64_t b) { printf("  %-22s %12.1f MiB\n", label, (double)b / (1 << 20)); }

typedef struct fit_args {
    const char *model;
    long ctx, batch;
    uint64_t budget;
    bool json, measure;
} fit_args;

static int parse_args(int argc, char **argv, fit_args *a) {
    *a = (fit_args){.batch = 1};
    for (int i = 1; i < argc; i++) {
        if (cli_arg_is(argv[i], "--ctx") || cli_arg_is(argv[i], "--batch")) {
            bool is_ctx = cli_arg_is(argv[i], "--ctx");
            const char *v = cli_take_value(argc, argv, &i, "fit");
            if (!v || !cli_parse_int(v, 1, 1 << 26, is_ctx ? &a->ctx : &a->batch)) { cli_error("fit", "%s needs a positive number", is_ctx ? "--ctx" : "--batch"); return CLI_USAGE; }
            continue;
        }
        if (cli_arg_is(argv[i], "--memory-budget")) {
            const char *v = cli_take_value(argc, argv, &i, "fit");
            if (!v || !cli_parse_u64(v, &a->budget) || !a->budget) { cli_error("fit", "--memory-budget needs a byte count"); return CLI_USAGE; }
            continue;
        }
        int r = cli_config_opt(argc, argv, &i, "fit");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        if (!strcmp(argv[i], "--json")) a->json = true;
        else if (!strcmp(argv[i], "--measure")) a->measure = true;
        else if (argv[i][0] == '-') { cli_error("fit", "unknown option %s", argv[i]); return CLI_USAGE; }
        else if (!a->model) a->model = argv[i];
        else { cli_error("fit", "unexpected argument %s", argv[i]); return CLI_USAGE; }
    }
    if (!a->model || !a->ctx) { cli_error("fit", "MODEL and --ctx are required (see --help)"); return CLI_USAGE; }
    return CLI_OK;
}

/* The figure --measure is compared with: on a GPU the context is made before
 * the first reading, so it is never part of the measured fall. */
static uint64_t comparable(const fit_result *f, bool cuda) { return cuda ? f->total - f->context : f->total; }

static void print_json(const fit_args *a, const char *device, bool cuda, const fit_result *f, const fit_measured *m,
                       const char *capacity_note) {
    json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i}", "device", device, "ctx",
                          (json_int_t)a->ctx, "batch", (json_int_t)a->batch, "peak_bytes", (json_int_t)f->total,
                          "weights_bytes", (json_int_t)f->weights, "vectors_bytes", (json_int_t)f->vectors,
                          "kv_bytes", (json_int_t)f->kv, "kv_bytes_per_token", (json_int_t)f->kv_per_token,
                          "state_bytes", (json_int_t)f->state, "state_bytes_per_sequence", (json_int_t)f->state_per_seq,
                          "transient_bytes", (json_int_t)f->transient, "model_context", f->model_max_ctx, "kv_layers",
                          f->kv_layers);
    if (!o) return;
    if (cuda) {
        json_object_set_new(o, "scratch_bytes", json_integer((json_int_t)f->scratch));
        json_object_set_new(o, "backend_bytes", json_integer((json_int_t)f->backend));
        json_object_set_new(o, "code_bytes", json_integer((json_int_t)f->code));
        json_object_set_new(o, "context_bytes", json_integer((json_int_t)f->context));
    } else {
        json_object_set_new(o, "runtime_bytes", json_integer((json_int_t)f->runtime));
    }
    json_object_set_new(o, "fits", f->capacity_known ? json_boolean(f->fits) : json_null());
    json_object_set_new(o, "capacity_bytes", f->capacity_known ? json_integer((json_int_t)f->capacity) : json_null());
    json_object_set_new(o, "max_context", f->capacity_known ? json_integer(f->max_ctx) : json_null());
    if (capacity_note) json_object_set_new(o, "capacity_note", json_string(capacity_note));
    if (m) {
        json_object_set_new(o, "predicted_measurable_bytes", json_integer((json_int_t)comparable(f, cuda)));
        json_object_set_new(o, "measured_peak_bytes", json_integer((json_int_t)m->peak));
        if (cuda) {
            json_object_set_new(o, "measured_in_use_before_bytes", json_integer((json_int_t)m->in_use_before));
            json_object_set_new(o, "device_total_bytes", json_integer((json_int_t)m->device_total));
        }
    }
    char *t = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (t) printf("%s\n", t);
    free(t);
    json_decref(o);
}

static void print_text(const fit_args *a, const char *device, bool cuda, const fit_result *f, const fit_measured *m,
                       const char *capacity_note) {
    printf("%s: context %ld x %ld sequence%s on %s\n", a->model, a->ctx, a->batch, a->batch == 1 ? "" : "s", device);
    mib(cuda ? "weights (uploaded)" : "weights (mmapped)", f->weights);
    mib("f32 vectors", f->vectors);
    mib("KV cache", f->kv);
    printf("  %-22s %12.1f KiB/token over %d layers\n", "", (double)f->kv_per_token / 1024, f->kv_layers);
    if (f->state_layers) mib("recurrent state", f->state);
    if (cuda) {
        mib("activations, logits", f->transient);
        mib("matmul scratch", f->scratch);
        mib("staging, cuBLAS", f->backend);
        mib("kernel code", f->code);
        mib("CUDA context", f->context);
    } else {
        mib("transient (prefill)", f->transient);
        mib("runtime", f->runtime);
    }
    mib("predicted peak", f->total);
    if (m) {
        if (cuda) mib("predicted w/o context", comparable(f, true));
        mib(cuda ? "measured (device)" : "measured (peak RSS)", m->peak);
        printf("  %-22s %12.3f\n", "predicted / measured", m->peak ? (double)comparable(f, cuda) / (double)m->peak : 0.0);
        if (cuda) mib("in use before loading", m->in_use_before);
    }
    if (!f->capacity_known) {
        printf("capacity unknown (%s): pass --memory-budget BYTES to compare\n", capacity_note ? capacity_note : "no GPU");
        return;
    }
    mib(cuda && !a->budget ? "available (GPU)" : "available", f->capacity);
    printf("%s; the largest context that fits is %d (the model's is %d)\n", f->fits ? "fits" : "does NOT fit",
           f->max_ctx, f->model_max_ctx);
}

static int cmd_fit(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        fit_help();
        return CLI_OK;
    }
    fit_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK) return rc;
    const em_config *c = em_config_global();
    const char *device = em_config_str(c, EMC_DEVICE);
    bool cuda;
    int index;
    if (em_device_parse(device, &cuda, &index) != EM_OK) { cli_error("fit", "--device: %s", em_last_error()); return CLI_USAGE; }
    (void)index;
    /* auto: as ember serve runs, FAST prefill */
    bool fast = strcmp(em_config_str(c, EMC_PRECISION), "exact") != 0;
    fit_request rq = {(int)a.ctx, (int)a.batch, (int)em_config_int(c, EMC_THREADS), a.budget, cuda, fast, 0,
                      em_config_str(c, EMC_CPU_WEIGHTS)};
    char note[300] = "";
    if (cuda && !a.budget) {
        size_t free_b, total;
        if (em_device_memory(device, &free_b, &total) == EM_OK) rq.device_free = free_b;
        else snprintf(note, sizeof note, "%s", em_last_error());
    }
    char *dir;
    if (!cli_resolve_model(a.model, &dir, "fit")) return CLI_FAIL;
    fit_result f;
    em_status s = fit_predict(dir, &rq, &f);
    fit_measured m;
    if (s == EM_OK && a.measure) s = fit_measure(dir, device, (int)a.ctx, (int)a.batch, rq.threads, fast, &m);
    free(dir);
    if (s != EM_OK) { cli_error("fit", "%s", em_last_error()); return CLI_FAIL; }
    if (a.json) print_json(&a, device, cuda, &f, a.measure ? &m : NULL, note[0] ? note : NULL);
    else print_text(&a, device, cuda, &f, a.measure ? &m : NULL, note[0] ? note : NULL);
    return !f.capacity_known || f.fits ? CLI_OK : CLI_FAIL;
}

EM_CLI_VERB("fit", "predict the memory a model needs for a context, and whether it fits", cmd_fit)
