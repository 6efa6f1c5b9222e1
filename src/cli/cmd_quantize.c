/* cmd_quantize.c — `ember quantize SRC DST`: MLX-compatible affine
 * quantization with optional rotation folding. */
#include "cli/cli.h"

#include "quant/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void quantize_help(void) {
    printf("usage: ember quantize SRC DST [options]\n\n"
           "Writes an MLX-layout quantized artifact (safetensors + config.json with a\n"
           "quantization block; tokenizer, templates and generation_config.json copied).\n"
           "SRC may itself be quantized (it is dequantized first). DST is assembled beside\n"
           "itself and renamed into place at the end.\n\n"
           "  --bits N           2, 3, 4, 5, 6 or 8 (default 4); 'none' writes float tensors\n"
           "  --group-size N     32, 64 or 128 (default 64)\n"
           "  --recipe FILE      mixed precision: {\"bits\": 4, \"group_size\": 64, \"rules\":\n"
           "                     [{\"match\": \"lm_head\", \"bits\": 8}, {\"match\": \"model.layers.*.mlp.down_proj\",\n"
           "                     \"bits\": 6}, {\"match\": \"...\", \"quantize\": false}]} (globs over module paths,\n"
           "                     first match wins; --bits/--group-size given after it override its defaults)\n"
           "  --rotate           fold norm gains and Hadamard rotations into the weights\n"
           "  --rotate-online    instead of --rotate: rotate each attention and MLP block's normed input\n"
           "                     at run time (Llama family; one Hadamard transform of the hidden state\n"
           "                     per block and token when the model runs)\n"
           "  --seed N           rotation seed (default 0)\n"
           "  --rotate-keep N    keep at least N residual channels out of R1: those whose norm gains are\n"
           "                     smallest (massive activations), which keep their basis and gains\n"
           "  --search           per group, pick the clipped range and refit the scale and bias that\n"
           "                     minimise the squared weight error as stored (MLX layout; slower)\n"
           "  --family NAME      automatic (default), llama or qwen3_5\n"
           "  --dtype T          float dtype of every float tensor: bf16, f16, f32 (default: each keeps its source dtype)\n"
           "  --shard-size GB    shard size (default 5)\n"
           "  --threads N        threads quantizing a tensor's rows (default: one per core)\n"
           "  --plan             print every output tensor with its source and exit\n"
           "  --force            replace an existing DST\n");
}

static int parse_bits(const char *v, int *bits) {
    long b;
    if (!strcmp(v, "none")) {
        *bits = 0;
        return 1;
    }
    if (!cli_parse_int(v, 2, 8, &b) || b == 7) return 0;
    *bits = (int)b;
    return 1;
}

static int cmd_quantize(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        quantize_help();
        return CLI_OK;
    }
    quant_job j = {.recipe = {.bits = 4, .group_size = 64}, .fold = {.family = "automatic"},
                   .out_dtype = EM_DTYPE_COUNT, .progress = isatty(2)};
    const char *recipe = NULL;
    int bits = -1;
    long group = -1;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_common_flag(argc, argv, &i)) continue;
#define VALUE()                                                   \
    if (!(v = cli_take_value(argc, argv, &i, "quantize"))) return CLI_USAGE
        if (cli_arg_is(argv[i], "--bits")) {
            VALUE();
            if (!parse_bits(v, &bits)) { cli_error("quantize", "--bits must be 2, 3, 4, 5, 6, 8 or none"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--group-size")) {
            VALUE();
            if (!cli_parse_int(v, 32, 128, &group) || (group != 32 && group != 64 && group != 128)) {
                cli_error("quantize", "--group-size must be 32, 64 or 128");
                return CLI_USAGE;
            }
        } else if (cli_arg_is(argv[i], "--recipe")) {
            VALUE();
            recipe = v;
        } else if (!strcmp(argv[i], "--rotate")) {
            j.fold.rotate = true;
        } else if (!strcmp(argv[i], "--rotate-online")) {
            j.fold.online = true;
        } else if (!strcmp(argv[i], "--search")) {
            j.search = true;
        } else if (cli_arg_is(argv[i], "--seed")) {
            VALUE();
            if (!cli_parse_u64(v, &j.fold.seed)) { cli_error("quantize", "--seed needs a number"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--rotate-keep")) {
            VALUE();
            long k;
            if (!cli_parse_int(v, 0, 1 << 20, &k)) { cli_error("quantize", "--rotate-keep needs a channel count"); return CLI_USAGE; }
            j.fold.r1_keep = k;
        } else if (cli_arg_is(argv[i], "--family")) {
            VALUE();
            j.fold.family = v;
        } else if (cli_arg_is(argv[i], "--dtype")) {
            VALUE();
            if (!strcmp(v, "bf16")) j.out_dtype = EM_BF16;
            else if (!strcmp(v, "f16")) j.out_dtype = EM_F16;
            else if (!strcmp(v, "f32")) j.out_dtype = EM_F32;
            else { cli_error("quantize", "--dtype must be bf16, f16 or f32"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--shard-size")) {
            VALUE();
            double gb;
            if (!cli_parse_float(v, &gb) || gb <= 0 || gb > 1e6) { cli_error("quantize", "--shard-size needs GB > 0"); return CLI_USAGE; }
            j.shard_bytes = (uint64_t)(gb * 1e9);
        } else if (cli_arg_is(argv[i], "--threads")) {
            VALUE();
            long t;
            if (!cli_parse_int(v, 1, 1024, &t)) { cli_error("quantize", "--threads needs a number from 1 to 1024"); return CLI_USAGE; }
            j.threads = (int)t;
        } else if (!strcmp(argv[i], "--plan")) {
            j.plan_only = true;
        } else if (!strcmp(argv[i], "--force")) {
            j.force = true;
        } else if (argv[i][0] == '-') {
            cli_error("quantize", "unknown option %s", argv[i]);
            return CLI_USAGE;
        } else if (!j.src) {
            j.src = argv[i];
        } else if (!j.dst) {
            j.dst = argv[i];
        } else {
            cli_error("quantize", "unexpected argument %s", argv[i]);
            return CLI_USAGE;
        }
#undef VALUE
    }
    if (!j.src || (!j.dst && !j.plan_only)) {
        cli_error("quantize", "SRC and DST are required (see --help)");
        return CLI_USAGE;
    }
    if (j.fold.r1_keep > 0 && (!j.fold.rotate || j.fold.online)) {
        cli_error("quantize", "--rotate-keep applies to --rotate");
        return CLI_USAGE;
    }
    if (j.fold.rotate && j.fold.online) {
        cli_error("quantize", "--rotate and --rotate-online are alternatives; give one");
        return CLI_USAGE;
    }
    j.fold.rotate |= j.fold.online;
    if (recipe && quant_recipe_load(recipe, &j.recipe) != EM_OK) {
        cli_error("quantize", "%s", em_last_error());
        quant_recipe_free(&j.recipe);
        return CLI_USAGE;
    }
    if (bits >= 0) j.recipe.bits = bits;
    if (group > 0) j.recipe.group_size = (int)group;
    quant_report rep;
    em_status s = quant_run(&j, &rep);
    quant_recipe_free(&j.recipe);
    if (s != EM_OK) {
        cli_error("quantize", "%s", em_last_error());
        return CLI_FAIL;
    }
    if (!j.plan_only)
        fprintf(stderr,
                "quantize: %s -> %s: %zu tensors, %.1f MB -> %.1f MB in %d shard(s), %.1fs; largest tensor %.1f MB as "
                "f32, working set peak %.1f MB, max RSS %.1f MB\n",
                j.src, j.dst, rep.n_tensors, rep.bytes_in / 1e6, rep.bytes_out / 1e6, rep.shards, rep.seconds,
                rep.largest_tensor_bytes / 1e6, rep.work_peak_bytes / 1e6, rep.max_rss_kb / 1e3);
    return CLI_OK;
}

EM_CLI_VERB("quantize", "MLX affine quantization (mixed precision, rotation folding)", cmd_quantize)
