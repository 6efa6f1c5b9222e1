/* cmd_inspect.c — `ember inspect MODEL`: what a checkpoint is and how ember
 * would run it, from its headers alone (no weight is read): family,
 * implementation and why, parameters, tensors by dtype, quantization,
 * tied head, context, chat template and tool-call format, fingerprints. */
#include "cli/cli.h"

#include "base/config.h"
#include "chat/chat.h"
#include "model/probe.h"
#include "model/registry.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void inspect_help(void) {
    printf("usage: ember inspect MODEL [--json] [--profiles DIR]\n\n"
           "Describes a checkpoint from its headers, without loading the weights:\n"
           "architecture, the implementation ember chooses and why, parameters, tensors\n"
           "by dtype, quantization, tied or untied head, context length, chat template\n"
           "and tool-call format, and the config and artifact fingerprints that\n"
           "profiles match on. MODEL is a directory or a name in the Hugging Face cache.\n");
}

static const char *tools_name(chat_tool_format f) {
    switch (f) {
    case CHAT_TOOLS_NONE: return "none";
    case CHAT_TOOLS_HERMES: return "hermes";
    case CHAT_TOOLS_QWEN_XML: return "qwen-xml";
    case CHAT_TOOLS_LLAMA3: return "llama3";
    case CHAT_TOOLS_DEEPSEEK: return "deepseek";
    }
    return "?";
}

/* Tensors and bytes per dtype, into a JSON object {dtype: {tensors, bytes}}. */
static json_t *dtype_table(const st_set *st) {
    json_t *o = json_object();
    for (size_t i = 0; i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        const char *d = dtype_name(t->dtype);
        json_t *e = json_object_get(o, d);
        if (!e) {
            e = json_pack("{s:I,s:I}", "tensors", (json_int_t)0, "bytes", (json_int_t)0);
            json_object_set_new(o, d, e);
        }
        json_object_set_new(e, "tensors", json_integer(json_integer_value(json_object_get(e, "tensors")) + 1));
        json_object_set_new(e, "bytes", json_integer(json_integer_value(json_object_get(e, "bytes")) + (json_int_t)t->nbytes));
    }
    return o;
}

static json_t *describe(const char *dir, const model_probe *p) {
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(dir));
    json_object_set_new(o, "model_type", json_string(p->model_type));
    json_object_set_new(o, "architecture", json_string(p->architecture));
    const em_impl *im = p->identity_ok ? p->id.impl : NULL;
    json_object_set_new(o, "runnable", json_boolean(im != NULL));
    json_object_set_new(o, "implementation", im ? json_string(im->name) : json_null());
    if (im) {
        json_object_set_new(o, "graph", json_string(im->graph));
        json_object_set_new(o, "loader", json_string(im->loader));
        json_object_set_new(o, "loop", json_string(im->loop));
        json_object_set_new(o, "selection", json_string(p->id.why));
    } else {
        json_object_set_new(o, "error", json_string(p->error));
    }
    if (p->st) {
        json_object_set_new(o, "parameters", json_integer((json_int_t)p->n_params));
        json_object_set_new(o, "tensors", json_integer((json_int_t)st_count(p->st)));
        json_object_set_new(o, "weight_bytes", json_integer((json_int_t)st_data_bytes(p->st)));
        json_object_set_new(o, "dtypes", dtype_table(p->st));
        json_object_set_new(o, "fingerprints", json_pack("{s:s,s:s}", "config", p->id.config_fp, "artifact", p->id.artifact_fp));
    }
    json_object_set_new(o, "quantization", p->quant[0] ? json_pack("{s:s,s:i,s:i}", "scheme", "affine", "bits",
                                                                   p->quant_bits, "group_size", p->quant_group)
                                                       : json_null());
    if (p->config_ok) {
        const model_config *c = &p->cfg;
        bool tied = c->tied_embeddings || (p->st && !st_find(p->st, "lm_head.weight"));
        json_object_set_new(o, "tied_embeddings", json_boolean(tied));
        json_object_set_new(o, "context_length", json_integer(c->max_pos));
        json_object_set_new(o, "layers", json_integer(c->n_layers));
        json_object_set_new(o, "hidden_size", json_integer(c->hidden));
        json_object_set_new(o, "attention_heads", json_integer(c->n_heads));
        json_object_set_new(o, "kv_heads", json_integer(c->n_kv_heads));
        json_object_set_new(o, "head_dim", json_integer(c->head_dim));
        json_object_set_new(o, "vocab_size", json_integer(c->vocab));
    }
    chat_template *t = NULL;
    bool has_tmpl = chat_template_load(dir, &t) == EM_OK && t;
    json_object_set_new(o, "chat_template", json_boolean(has_tmpl));
    chat_format f = chat_detect_format(has_tmpl ? t : NULL, p->model_type, NULL);
    json_object_set_new(o, "tool_calls", json_string(tools_name(f.tools)));
    json_object_set_new(o, "reasoning", json_boolean(f.reasoning));
    chat_template_free(t);
    em_clear_error();
    return o;
}

static const char *human(double v, const char *const *units, double step, char *buf, size_t cap) {
    int u = 0;
    while (v >= step && units[u + 1]) v /= step, u++;
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f%s", v, units[u]);
    return buf;
}

static void print_text(json_t *o) {
    static const char *const bytes_u[] = {" B", "KiB", "MiB", "GiB", "TiB", NULL};
    static const char *const count_u[] = {"", "K", "M", "B", "T", NULL};
    char a[32], b[32];
#define S(k) json_string_value(json_object_get(o, k))
#define I(k) (long long)json_integer_value(json_object_get(o, k))
    printf("model           %s\n", S("path"));
    printf("architecture    %s (model_type %s)\n", S("architecture")[0] ? S("architecture") : "?", S("model_type")[0] ? S("model_type") : "?");
    if (json_is_true(json_object_get(o, "runnable"))) {
        printf("implementation  %s (graph %s, loader %s, loop %s)\n", S("implementation"), S("graph"), S("loader"), S("loop"));
        printf("  chosen by     %s\n", S("selection"));
    } else {
        printf("implementation  none: %s\n", S("error"));
    }
    if (json_object_get(o, "parameters")) {
        printf("parameters      %s\n", human((double)I("parameters"), count_u, 1000, a, sizeof a));
        printf("weights         %s in %lld tensors\n", human((double)I("weight_bytes"), bytes_u, 1024, a, sizeof a), I("tensors"));
        const char *d;
        json_t *e;
        json_object_foreach(json_object_get(o, "dtypes"), d, e)
            printf("  %-13s %lld tensors, %s\n", d, (long long)json_integer_value(json_object_get(e, "tensors")),
                   human((double)json_integer_value(json_object_get(e, "bytes")), bytes_u, 1024, b, sizeof b));
    }
    json_t *q = json_object_get(o, "quantization");
    if (json_is_object(q)) printf("quantization    affine, %lld bits, group %lld\n", (long long)json_integer_value(json_object_get(q, "bits")),
                                  (long long)json_integer_value(json_object_get(q, "group_size")));
    else printf("quantization    none\n");
    if (json_object_get(o, "layers")) {
        printf("head            %s\n", json_is_true(json_object_get(o, "tied_embeddings")) ? "tied to the embeddings" : "untied");
        printf("shape           %lld layers, hidden %lld, %lld heads (%lld kv), head_dim %lld, vocab %lld\n", I("layers"),
               I("hidden_size"), I("attention_heads"), I("kv_heads"), I("head_dim"), I("vocab_size"));
        printf("context         %lld\n", I("context_length"));
    }
    printf("chat template   %s\n", json_is_true(json_object_get(o, "chat_template")) ? "present" : "absent");
    printf("tool calls      %s%s\n", S("tool_calls"), json_is_true(json_object_get(o, "reasoning")) ? " (reasoning: <think>)" : "");
    json_t *fp = json_object_get(o, "fingerprints");
    if (fp) printf("fingerprints    config %s  artifact %s\n", json_string_value(json_object_get(fp, "config")),
                   json_string_value(json_object_get(fp, "artifact")));
#undef S
#undef I
}

static int cmd_inspect(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        inspect_help();
        return CLI_OK;
    }
    const char *model = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_config_opt(argc, argv, &i, "inspect");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-') { cli_error("inspect", "unknown option %s", argv[i]); return CLI_USAGE; }
        else if (!model) model = argv[i];
        else { cli_error("inspect", "unexpected argument %s", argv[i]); return CLI_USAGE; }
    }
    if (!model) { cli_error("inspect", "MODEL is required (see --help)"); return CLI_USAGE; }
    char *dir;
    if (!cli_resolve_model(model, &dir, "inspect")) return CLI_FAIL;
    model_probe p;
    model_probe_open(dir, em_config_str(em_config_global(), EMC_PROFILES_DIR), &p);
    int rc = CLI_OK;
    if (!p.model_type[0] && !p.st) {
        cli_error("inspect", "%s", p.error);
        rc = CLI_FAIL;
    } else {
        json_t *o = describe(dir, &p);
        if (json) {
            char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            if (text) printf("%s\n", text);
            free(text);
        } else {
            print_text(o);
        }
        json_decref(o);
    }
    model_probe_close(&p);
    free(dir);
    return rc;
}

EM_CLI_VERB("inspect", "describe a model: architecture, implementation, tensors, fingerprints", cmd_inspect)
