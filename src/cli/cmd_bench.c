/* cmd_bench.c — `ember bench MODEL`: prefill and decode speed, time to first
 * token, and decode as a fraction of this machine's memory roofline
 * (weight bytes read per token / measured read bandwidth). */
#include "cli/cli_model.h"

#include "backend/cpu/membw.h"
#include "base/alloc.h"
#include "base/file.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "engine/sampler.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bench_help(void) {
    printf("usage: ember bench MODEL [--prompt-tokens 512] [--gen-tokens 128] [--repeat 1] [options]\n\n"
           "Measures prefill tokens/s, decode tokens/s and time to first token on random\n"
           "token ids, the machine's memory read bandwidth (probed before and after the runs;\n"
           "the higher reading counts), and decode as a fraction of the bandwidth roofline\n"
           "(bytes of weights read per token / bandwidth). With\n"
           "--tensor-parallel N it also reports the time spent in all-reduces per decode step.\n"
           "Decoding is greedy (the model chooses the ids where the logits are) unless\n"
           "--temperature T > 0 is given: each sequence then samples with its own seeded\n"
           "sampler (--top-p/--top-k/--min-p, else the model's generation_config.json) as a\n"
           "sampled request does: on a GPU where the logits are (only the ids reach the host;\n"
           "EMBER_DEVICE_SAMPLING=0 downloads the rows and samples on the host), on the CPU\n"
           "from the rows.\n\n%s"
           "  --prompt-file FILE    the prompt is FILE's text through the model's tokenizer (its first\n"
           "                        --prompt-tokens tokens, or all if fewer) instead of random ids;\n"
           "                        speculation's acceptance is only meaningful on real text\n"
           "  --spec mtp            decode with MTP speculation (greedy, through em_generate); reports\n"
           "                        the acceptance rate and tokens per trunk step\n"
           "  --draft-tokens K      tokens drafted per trunk step with --spec (default 2)\n"
           "  --cached N            prefill the prompt's first N tokens untimed (a prefix the\n"
           "                        server would find cached), then time the rest of --prompt-tokens\n"
           "                        as one forward: the time to first token of a request whose\n"
           "                        prefix is cached (default 0)\n"
           "  --prefill-chunk N     prompt tokens per prefill forward (default 512)\n"
           "  --batch B             decode B sequences together, one token each per step; decode\n"
           "                        tokens/s is then the aggregate of all B (default 1)\n"
           "  --warmup N            unmeasured runs first, the same prompt and at most 8 generated\n"
           "                        tokens (default 1: on a GPU the first run of a shape loads\n"
           "                        kernels, picks GEMM algorithms and records decode steps; on the\n"
           "                        CPU it faults in the mapped weights and the scratch buffers)\n"
           "  --repeat N            measured runs; the best of them is reported (default 1)\n"
           "  --json                machine-readable output\n", cli_model_opts_help());
}

/* Weight bytes one decode step reads: every matrix once; the embedding table
 * only as the head when tied (a lookup reads one row); an MTP head, unused
 * by plain decoding, not at all. */
static double decode_bytes(const em_model *m) {
    double total = (double)st_data_bytes(m->st);
    char buf[256];
    for (size_t i = 0; i < st_count(m->st); i++) {
        const st_tensor *t = st_at(m->st, i);
        if (strstr(t->name, "mtp.") || strstr(t->name, "visual.")) total -= (double)t->nbytes;
    }
    const st_tensor *emb = st_find(m->st, weight_resolve(m, "model.embed_tokens.weight", buf, sizeof buf));
    if (emb && !m->cfg.tied_embeddings) total -= (double)emb->nbytes - (double)emb->nbytes / (double)m->cfg.vocab;
    return total;
}

typedef struct bench_result {
    double prefill_tps, decode_tps, ttft, bw, bytes_per_token;
    double allreduce_ms;  /* per decode step (tensor parallelism) */
    double allreduce_calls;
    size_t spec_steps, spec_drafted, spec_accepted, spec_tokens;
} bench_result;

/* Decode through em_generate with speculation (greedy, EOS ignored). */
static em_status run_spec(em_model *m, const int32_t *ids, int n_prompt, int n_gen, int k, bench_result *r) {
    em_generate_params p = {.prompt = ids, .n_prompt = (size_t)n_prompt, .max_tokens = n_gen,
                            .sampling = {.temperature = 0, .top_p = 1, .repetition_penalty = 1},
                            .ignore_eos = 1, .spec_draft_tokens = k};
    em_generate_result g;
    EM_TRY(em_generate(m, &p, &g));
    r->prefill_tps = n_prompt / g.prefill_seconds;
    r->decode_tps = (double)g.n_generated / g.decode_seconds;
    r->ttft = g.prefill_seconds;
    r->spec_steps = g.spec_steps;
    r->spec_drafted = g.spec_drafted;
    r->spec_accepted = g.spec_accepted;
    r->spec_tokens = g.n_generated;
    return EM_OK;
}

/* Prefills `batch` sequences with the same prompt, then decodes n_gen steps
 * of one token per sequence in one forward each (the serving engine's
 * decode step for greedy requests without its scheduling: the model
 * chooses each sequence's argmax where the logits are). Decode tokens/s count every
 * sequence's tokens. prompt: n_prompt ids, or NULL for random ones; decoding
 * feeds random ids either way (its speed does not depend on them). */
/* One decode step's tokens drawn by each sequence's sampler: where the
 * logits are when the model draws there (a GPU; only the ids come back),
 * else on the host from the downloaded rows. */
static em_status decode_sampled(em_model *m, em_span *spans, int batch, float *logits, sampler *smp,
                                em_sample_params *draws, int32_t *chosen) {
    if (model_device_samples(m)) {
        for (int q = 0; q < batch; q++) sampler_device_params(&smp[q], &draws[q]);
        em_batch b = {.spans = spans, .n_spans = batch, .argmax = chosen, .argmax_only = true, .sample = draws};
        return model_forward(m, &b, logits);
    }
    em_batch b = {.spans = spans, .n_spans = batch};
    em_status s = model_forward(m, &b, logits);
    for (int q = 0; s == EM_OK && q < batch; q++) {
        em_token_info info;
        sampler_pick(&smp[q], logits + (size_t)q * (size_t)m->cfg.vocab, 0, false, &info);
    }
    return s;
}

/* Feeds ids [from, to) of sequence seq in chunks of `chunk` with the last
 * position's logits; `whole` feeds them as one span whatever their count
 * (a cached prompt's tail, as the server feeds it). */
static em_status prefill(em_model *m, int seq, const int32_t *ids, int from, int to, bool whole, int chunk,
                         float *logits) {
    em_status s = EM_OK;
    for (int done = from; s == EM_OK && done < to;) {
        int n = whole || to - done < chunk ? to - done : chunk;
        em_span sp = {seq, ids + done, n, done + n == to ? LOGITS_LAST : LOGITS_NONE, SPAN_MATH_MODEL};
        em_batch b = {.spans = &sp, .n_spans = 1};
        s = model_forward(m, &b, logits);
        done += n;
    }
    return s;
}

/* Read bandwidth of the memory the weights live in, bytes/s (0: unknown). */
static double probe_bandwidth(em_model *m) {
    if (m->be->ops->bandwidth) return m->be->ops->bandwidth(m->be); /* the device's memory */
    em_pool *pool = em_pool_create(m->be->n_threads);
    double bw = pool ? cpu_read_bandwidth(pool, (size_t)1 << 30) : 0;
    em_pool_free(pool);
    return bw;
}

static em_status run_once(em_model *m, const int32_t *prompt, int n_prompt, int n_cached, int n_gen, int spec_k,
                          int batch, int chunk, const em_sampling *sampling, bench_result *r) {
    int32_t *ids = em_mallocn((size_t)n_prompt + (size_t)n_gen, sizeof *ids);
    float *logits = em_mallocn((size_t)m->cfg.vocab * (size_t)batch, sizeof *logits);
    int *seqs = em_mallocn((size_t)batch, sizeof *seqs);
    em_span *spans = em_mallocn((size_t)batch, sizeof *spans);
    int32_t *chosen = em_mallocn((size_t)batch, sizeof *chosen);
    sampler *smp = sampling ? em_calloc((size_t)batch, sizeof *smp) : NULL;
    em_sample_params *draws = sampling ? em_mallocn((size_t)batch, sizeof *draws) : NULL;
    em_status s = ids && logits && seqs && spans && chosen && ((smp && draws) || !sampling)
                      ? EM_OK
                      : em_fail(EM_ERR_NOMEM, "out of memory");
    int n_smp = 0;
    for (; s == EM_OK && sampling && n_smp < batch; n_smp++) s = sampler_init(&smp[n_smp], sampling, m->cfg.vocab);
    if (s != EM_OK && n_smp) n_smp--;
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; s == EM_OK && i < n_prompt + n_gen; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)m->cfg.vocab);
    }
    if (s == EM_OK && prompt) memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    if (s == EM_OK && spec_k > 0) {
        s = run_spec(m, ids, n_prompt, n_gen, spec_k, r);
        goto out;
    }
    int n_seqs = 0;
    for (; s == EM_OK && n_seqs < batch; n_seqs++) s = kv_seq_alloc(m->kv, &seqs[n_seqs]);
    if (s != EM_OK) n_seqs--;
    /* the cached prefix, prefilled before the clock starts (its last
     * chunk's logits come back to the host, so it has finished) */
    for (int q = 0; q < batch; q++) s = s == EM_OK ? prefill(m, seqs[q], ids, 0, n_cached, false, chunk, logits) : s;
    double t0 = em_now();
    for (int q = 0; s == EM_OK && q < batch; q++) {
        s = prefill(m, seqs[q], ids, n_cached, n_prompt, n_cached > 0, chunk, logits);
        if (q == 0) r->ttft = em_now() - t0;
    }
    double t1 = em_now();
    model_tp_take_time(m, NULL);
    model_tp_timing(m, true);
    for (int i = 0; s == EM_OK && i < n_gen; i++) {
        for (int q = 0; q < batch; q++)
            spans[q] = (em_span){seqs[q], ids + n_prompt + i, 1, LOGITS_LAST, SPAN_MATH_MODEL};
        if (smp) {
            s = decode_sampled(m, spans, batch, logits, smp, draws, chosen);
            continue;
        }
        em_batch b = {.spans = spans, .n_spans = batch, .argmax = chosen, .argmax_only = true};
        s = model_forward(m, &b, logits);
    }
    double t2 = em_now();
    model_tp_timing(m, false);
    long calls = 0;
    double ms = model_tp_take_time(m, &calls);
    r->allreduce_ms = n_gen ? ms / n_gen : 0;
    r->allreduce_calls = n_gen ? (double)calls / n_gen : 0;
    for (int q = 0; q < n_seqs; q++) kv_seq_release(m->kv, seqs[q]);
    r->prefill_tps = (double)(n_prompt - n_cached) * batch / (t1 - t0);
    r->decode_tps = (double)n_gen * batch / (t2 - t1);
out:
    for (int q = 0; q < n_smp; q++) sampler_free(&smp[q]);
    free(smp);
    free(draws);
    free(ids);
    free(logits);
    free(seqs);
    free(spans);
    free(chosen);
    return s;
}

/* --prompt-file: the file's text through the model's tokenizer (as `ember
 * generate` tokenizes a prompt), cut to *n_prompt tokens; *n_prompt becomes
 * the count used. False after reporting the error. */
static bool load_prompt(em_model *m, const char *path, int32_t **out, long *n_prompt) {
    char *text = NULL;
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    em_status s = em_read_file(path, (size_t)64 << 20, &text, &len);
    if (s == EM_OK) s = em_tokenize(m, text, len, 1, &ids, &n);
    free(text);
    if (s != EM_OK) {
        cli_error("bench", "--prompt-file %s: %s", path, em_last_error());
        return false;
    }
    if (n == 0) {
        cli_error("bench", "--prompt-file %s: the text encodes to no tokens", path);
        free(ids);
        return false;
    }
    if ((long)n < *n_prompt) *n_prompt = (long)n;
    *out = ids;
    return true;
}

static int cmd_bench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        bench_help();
        return CLI_OK;
    }
    cli_model_opts mo;
    cli_model_opts_init(&mo, EM_PRECISION_FAST);
    const char *model = NULL, *prompt_file = NULL;
    long n_prompt = 512, n_gen = 128, repeat = 1, draft_tokens = 2, batch = 1, warmup = 1, n_cached = 0, chunk = 0;
    bool json = false, spec = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_opt(&mo, argc, argv, &i, "bench");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        long *target = cli_arg_is(argv[i], "--prompt-tokens") ? &n_prompt
                     : cli_arg_is(argv[i], "--gen-tokens")    ? &n_gen
                     : cli_arg_is(argv[i], "--repeat")        ? &repeat
                     : cli_arg_is(argv[i], "--batch")         ? &batch
                     : cli_arg_is(argv[i], "--prefill-chunk") ? &chunk
                                                              : NULL;
        if (cli_arg_is(argv[i], "--cached")) {
            const char *v = cli_take_value(argc, argv, &i, "bench");
            if (!v || !cli_parse_int(v, 0, 1 << 22, &n_cached)) { cli_error("bench", "--cached needs a number of tokens"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--warmup")) {
            const char *v = cli_take_value(argc, argv, &i, "bench");
            if (!v || !cli_parse_int(v, 0, 100, &warmup)) { cli_error("bench", "--warmup needs a number in 0..100"); return CLI_USAGE; }
        } else if (target) {
            const char *opt = argv[i], *v = cli_take_value(argc, argv, &i, "bench");
            if (!v || !cli_parse_int(v, 1, 1 << 22, target)) { cli_error("bench", "%s needs a positive number", opt); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--spec")) {
            const char *v = cli_take_value(argc, argv, &i, "bench");
            if (!v || strcmp(v, "mtp")) { cli_error("bench", "--spec takes 'mtp'"); return CLI_USAGE; }
            spec = true;
        } else if (cli_arg_is(argv[i], "--draft-tokens")) {
            const char *v = cli_take_value(argc, argv, &i, "bench");
            if (!v || !cli_parse_int(v, 1, 16, &draft_tokens)) { cli_error("bench", "--draft-tokens needs a number in 1..16"); return CLI_USAGE; }
        } else if (cli_arg_is(argv[i], "--prompt-file")) {
            if (!(prompt_file = cli_take_value(argc, argv, &i, "bench"))) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-') { cli_error("bench", "unknown option %s", argv[i]); return CLI_USAGE; }
        else if (!model) model = argv[i];
        else { cli_error("bench", "unexpected argument %s", argv[i]); return CLI_USAGE; }
    }
    if (!model) { cli_error("bench", "MODEL is required (see --help)"); return CLI_USAGE; }
    if (n_cached >= n_prompt) { cli_error("bench", "--cached %ld leaves no token of --prompt-tokens %ld to time", n_cached, n_prompt); return CLI_USAGE; }
    if (spec && n_cached) { cli_error("bench", "--spec measures decoding: leave out --cached"); return CLI_USAGE; }
    if (spec && batch > 1) { cli_error("bench", "--spec measures one sequence: leave out --batch"); return CLI_USAGE; }
    /* greedy unless --temperature > 0 is given (a model's generation_config.json does not turn it on) */
    bool sampled = mo.temperature > 0;
    if (spec && sampled) { cli_error("bench", "--spec decodes greedily: leave out --temperature"); return CLI_USAGE; }
    if (batch > 4096) { cli_error("bench", "--batch is at most 4096"); return CLI_USAGE; }
    mo.open.max_sequences = (int)batch;
    if (!mo.open.max_context) mo.open.max_context = (int)(n_prompt + n_gen + 1);
    em_model *m;
    char *model_dir;
    if (!cli_resolve_model(model, &model_dir, "bench")) {
        return CLI_FAIL;
    }
    em_status open_s = em_model_open(model_dir, &mo.open, &m);
    free(model_dir);
    if (open_s != EM_OK) {
        cli_error("bench", "%s", em_last_error());
        return CLI_FAIL;
    }
    if (n_prompt + n_gen > m->max_ctx) {
        cli_error("bench", "prompt + gen tokens (%ld) exceed the context of %d", n_prompt + n_gen, m->max_ctx);
        em_model_free(m);
        return CLI_USAGE;
    }
    if (!chunk) chunk = 512;
    int32_t *prompt = NULL;
    if (prompt_file && !load_prompt(m, prompt_file, &prompt, &n_prompt)) {
        em_model_free(m);
        return CLI_FAIL;
    }
    double bw_before = probe_bandwidth(m);
    bench_result best = {0}, r = {0};
    em_status s = EM_OK;
    em_sampling sampling = cli_model_sampling(&mo, m);
    sampling.seed = 1, sampling.has_seed = 1;
    for (long k = 0; k < warmup && s == EM_OK; k++)
        s = run_once(m, prompt, (int)n_prompt, (int)n_cached, n_gen < 8 ? (int)n_gen : 8, spec ? (int)draft_tokens : 0, (int)batch,
                     (int)chunk, sampled ? &sampling : NULL, &r);
    for (long k = 0; k < repeat && s == EM_OK; k++) {
        s = run_once(m, prompt, (int)n_prompt, (int)n_cached, (int)n_gen, spec ? (int)draft_tokens : 0, (int)batch,
                     (int)chunk, sampled ? &sampling : NULL, &r);
        if (r.decode_tps > best.decode_tps) {
            best.decode_tps = r.decode_tps;
            best.allreduce_ms = r.allreduce_ms, best.allreduce_calls = r.allreduce_calls;
            best.spec_steps = r.spec_steps, best.spec_drafted = r.spec_drafted;
            best.spec_accepted = r.spec_accepted, best.spec_tokens = r.spec_tokens;
        }
        if (r.prefill_tps > best.prefill_tps) { best.prefill_tps = r.prefill_tps; best.ttft = r.ttft; }
    }
    /* the roofline takes the higher of two probes: on a shared host the
     * bandwidth moves between runs, and one low reading made decode look
     * faster than memory (over 100 % of its roofline) */
    double bw_after = s == EM_OK ? probe_bandwidth(m) : 0, bw = bw_before > bw_after ? bw_before : bw_after;
    int rc = CLI_OK;
    if (s != EM_OK) {
        cli_error("bench", "%s", em_last_error());
        rc = CLI_FAIL;
    } else {
        /* a step reads the weights once whatever the batch: the roofline
         * bounds steps per second; every GPU of a tensor-parallel group
         * reads its share of the weights */
        int tp = model_tp_size(m);
        double bpt = decode_bytes(m), roof = bw > 0 ? bw * tp / bpt : 0, steps = best.decode_tps / (double)batch;
        const char *prec = m->prefill_math == EM_MATH_FAST ? "fast" : "exact";
        const char *where = !sampled ? "" : model_device_samples(m) ? "device" : "host";
        char cached_note[64] = "";
        if (n_cached) snprintf(cached_note, sizeof cached_note, " after %ld cached", n_cached);
        if (json)
            printf("{\"model\":\"%s\",\"device\":\"%s\",\"threads\":%d,\"precision\":\"%s\",\"batch\":%ld,\"prompt\":\"%s\",\"prompt_tokens\":%ld,\"cached_tokens\":%ld,\"prefill_chunk\":%ld,\"gen_tokens\":%ld,"
                   "\"prefill_tps\":%.2f,\"decode_tps\":%.3f,\"ttft_s\":%.4f,\"bandwidth_gbs\":%.2f,"
                   "\"bandwidth_probes_gbs\":[%.2f,%.2f],"
                   "\"bytes_per_token\":%.0f,\"roofline_tps\":%.3f,\"roofline_fraction\":%.4f,"
                   "\"tensor_parallel\":%d,\"allreduce_ms_per_step\":%.4f,\"allreduces_per_step\":%.1f,\"sampled\":%s,"
                   "\"sampled_on\":\"%s\"}\n",
                   m->name, m->be->ops->name, m->be->n_threads, prec, batch, prompt ? "file" : "random", n_prompt, n_cached, chunk, n_gen,
                   best.prefill_tps, best.decode_tps, best.ttft, bw / 1e9, bw_before / 1e9, bw_after / 1e9, bpt, roof, roof > 0 ? steps / roof : 0, tp,
                   best.allreduce_ms, best.allreduce_calls, sampled ? "true" : "false", where);
        else
            printf("model %s (%s) on %s, precision %s\n"
                   "prefill: %ld tokens%s at %.1f tokens/s (time to first token %.3f s)\n"
                   "decode:  %ld tokens x %ld sequences at %.2f tokens/s%s%s\n"
                   "memory:  %.1f GB/s read bandwidth (the higher of %.1f before and %.1f after), %.2f GB read per "
                   "token, roofline %.2f tokens/s\n"
                   "decode steps reach %.1f%% of the memory roofline\n",
                   m->name, m->cfg.model_type, m->be->desc, prec, n_prompt - n_cached, cached_note, best.prefill_tps, best.ttft, n_gen, batch,
                   best.decode_tps, sampled ? ", sampled on the " : "", where, bw / 1e9, bw_before / 1e9, bw_after / 1e9,
                   bpt / 1e9, roof,
                   roof > 0 ? 100 * steps / roof : 0);
        if (!json && tp > 1 && best.allreduce_calls > 0)
            printf("tensor parallel: %d GPUs (bandwidth per GPU; roofline over all), all-reduce %.3f ms per decode "
                   "step (%.0f calls)\n", tp, best.allreduce_ms, best.allreduce_calls);
        else if (!json && tp > 1)
            printf("tensor parallel: %d GPUs (bandwidth per GPU; roofline over all); all-reduces inside recorded "
                   "decode steps are not timed (EMBER_CUDA_GRAPHS=0 times them)\n", tp);
        if (spec && best.spec_steps) {
            double rate = best.spec_drafted ? (double)best.spec_accepted / (double)best.spec_drafted : 0;
            double per_step = (double)best.spec_tokens / (double)best.spec_steps;
            if (json)
                printf("{\"spec\":\"mtp\",\"draft_tokens\":%ld,\"trunk_steps\":%zu,\"acceptance_rate\":%.4f,"
                       "\"tokens_per_trunk_step\":%.3f}\n", draft_tokens, best.spec_steps, rate, per_step);
            else
                printf("speculative (mtp, %ld drafts): acceptance %.1f%%, %.2f tokens per trunk step (%zu steps)\n",
                       draft_tokens, 100 * rate, per_step, best.spec_steps);
        }
    }
    free(prompt);
    em_model_free(m);
    return rc;
}

EM_CLI_VERB("bench", "measure prefill/decode tokens/s against the memory roofline", cmd_bench)
