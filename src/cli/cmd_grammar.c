/* cmd_grammar.c — `ember grammar`: compile a grammar (GBNF, regex, JSON
 * Schema, JSON object or a forced tool call), print it as GBNF, match a
 * text against it, or draw random token sequences under it with a real
 * tokenizer (uniform over the allowed tokens, so only the grammar makes
 * them valid) and time the token masks. */
#include "cli/cli.h"

#include "engine/grammar/grammar.h"

#include "base/alloc.h"
#include "base/file.h"
#include "base/timer.h"
#include "base/utf8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void grammar_help(void) {
    printf("usage: ember grammar SOURCE [--print] [--match TEXT] [--tokenizer DIR --sample N [options]]\n\n"
           "SOURCE is one of:\n"
           "  --gbnf FILE            GBNF grammar text (start rule \"root\")\n"
           "  --regex RE             a regex matched in full\n"
           "  --json-schema FILE     a JSON Schema\n"
           "  --json-object          any JSON object\n"
           "  --tools FILE --format F [--tool NAME] [--parallel]\n"
           "                         a forced call of one of the tools (OpenAI tools array) in format\n"
           "                         hermes, qwen-xml, llama3 or deepseek\n\n"
           "  --print                print the grammar as GBNF\n"
           "  --match TEXT           exit 0 when TEXT is a complete sentence of the grammar, 1 if not\n"
           "  --tokenizer DIR        tokenizer (tokenizer.json) for sampling\n"
           "  --sample N             N random samples, one JSON line each: {\"text\", \"complete\", \"tokens\"}\n"
           "  --seed S               random seed (default 1)\n"
           "  --max-tokens N         tokens per sample (default 256)\n"
           "  --punct-bias B         weight e^B for tokens holding \" { } [ ] , : so random samples end\n"
           "  --stats                print mask timing to stderr\n");
}

typedef struct gopts {
    const char *gbnf, *regex, *schema, *tools, *format, *tool, *match, *tokdir;
    bool json_object, print, parallel, stats;
    long samples, max_tokens;
    uint64_t seed;
    double punct_bias;
} gopts;

static chat_tool_format parse_format(const char *f) {
    if (!f) return CHAT_TOOLS_NONE;
    if (!strcmp(f, "hermes")) return CHAT_TOOLS_HERMES;
    if (!strcmp(f, "qwen-xml")) return CHAT_TOOLS_QWEN_XML;
    if (!strcmp(f, "llama3")) return CHAT_TOOLS_LLAMA3;
    if (!strcmp(f, "deepseek")) return CHAT_TOOLS_DEEPSEEK;
    return CHAT_TOOLS_NONE;
}

/* GBNF text of the source; *text malloc'd. */
static em_status source_text(const gopts *o, char **text) {
    json_t *j = NULL;
    em_status s;
    if (o->gbnf) {
        size_t len;
        return em_read_file(o->gbnf, 16u << 20, text, &len);
    }
    if (o->regex) return grammar_regex_to_gbnf(o->regex, strlen(o->regex), text);
    if (o->json_object) {
        json_t *schema = json_pack("{s:s}", "type", "object");
        s = grammar_schema_to_gbnf(schema, text);
        json_decref(schema);
        return s;
    }
    json_error_t e;
    j = json_load_file(o->schema ? o->schema : o->tools, JSON_DECODE_ANY, &e);
    if (!j) return em_fail(EM_ERR_FORMAT, "%s: line %d: %s", o->schema ? o->schema : o->tools, e.line, e.text);
    if (o->schema) s = grammar_schema_to_gbnf(j, text);
    else {
        grammar_tool_opts to = {.name = o->tool, .parallel = o->parallel};
        s = grammar_tool_call_to_gbnf(parse_format(o->format), j, &to, text);
    }
    json_decref(j);
    return s;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static bool is_punct_token(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strchr("\"{}[],:", b[i]) && b[i]) return true;
    return false;
}

typedef struct sampler_ctx {
    const grammar *g;
    const grammar_vocab *v;
    float *bias;
    uint32_t *mask;
    int n_vocab;
    double mask_seconds, mask_max;
    size_t steps;
} sampler_ctx;

static int32_t draw(sampler_ctx *c, uint64_t *rng) {
    int32_t best = -1;
    double best_score = -INFINITY;
    for (int w = 0; w < (c->n_vocab + 31) / 32; w++) {
        uint32_t bits = c->mask[w];
        while (bits) {
            int b = __builtin_ctz(bits);
            bits &= bits - 1;
            int32_t id = w * 32 + b;
            double u = ((double)(rng_next(rng) >> 11) + 0.5) / 9007199254740992.0;
            double score = c->bias[id] - log(-log(u)); /* Gumbel-max: a draw from softmax(bias) */
            if (score > best_score) best_score = score, best = id;
        }
    }
    return best;
}

static int sample_one(sampler_ctx *c, long max_tokens, uint64_t *rng) {
    grammar_matcher *m;
    if (grammar_matcher_new(c->g, c->v, &m) != EM_OK) {
        cli_error("grammar", "%s", em_last_error());
        return CLI_FAIL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    long n = 0;
    bool complete = false;
    int rc = CLI_OK;
    for (; n < max_tokens; n++) {
        double t0 = em_now();
        em_status s = grammar_matcher_fill_mask(m, c->mask, c->n_vocab);
        double dt = em_now() - t0;
        c->mask_seconds += dt;
        c->mask_max = dt > c->mask_max ? dt : c->mask_max;
        c->steps++;
        int32_t tok = s == EM_OK ? draw(c, rng) : -1;
        if (s == EM_OK && tok < 0) s = em_fail(EM_ERR_INTERNAL, "grammar allows no token");
        if (s == EM_OK) s = grammar_matcher_accept(m, tok);
        if (s != EM_OK) {
            cli_error("grammar", "%s", em_last_error());
            rc = CLI_FAIL;
            break;
        }
        if (grammar_matcher_is_terminated(m)) {
            complete = true;
            n++;
            break;
        }
        size_t tl;
        const uint8_t *tb = grammar_vocab_token(c->v, tok, &tl);
        if (!em_grow((void **)&text, &cap, len + tl + 1, 1)) {
            rc = CLI_FAIL;
            break;
        }
        memcpy(text + len, tb, tl);
        len += tl;
    }
    if (rc == CLI_OK) {
        size_t ok = complete ? len : utf8_complete_prefix(text ? text : "", len);
        json_t *line = json_pack("{s:s%,s:b,s:i}", "text", text ? text : "", ok, "complete", complete, "tokens", (int)n);
        char *d = line ? json_dumps(line, JSON_COMPACT) : NULL;
        if (d) printf("%s\n", d);
        else rc = CLI_FAIL;
        free(d);
        json_decref(line);
    }
    free(text);
    grammar_matcher_free(m);
    return rc;
}

static int run_samples(const gopts *o, const grammar *g) {
    tokenizer *t;
    if (tok_load(o->tokdir, &t) != EM_OK) {
        cli_error("grammar", "%s", em_last_error());
        return CLI_FAIL;
    }
    double t0 = em_now();
    grammar_vocab *v;
    em_status s = grammar_vocab_new(t, NULL, 0, 0, &v);
    double t_vocab = em_now() - t0;
    if (s != EM_OK) {
        tok_free(t);
        cli_error("grammar", "%s", em_last_error());
        return CLI_FAIL;
    }
    sampler_ctx c = {g, v, NULL, NULL, grammar_vocab_size(v), 0, 0, 0};
    c.bias = em_calloc((size_t)c.n_vocab, sizeof(float));
    c.mask = em_calloc(((size_t)c.n_vocab + 31) / 32, sizeof(uint32_t));
    int rc = c.bias && c.mask ? CLI_OK : CLI_FAIL;
    for (int32_t id = 0; rc == CLI_OK && id < c.n_vocab; id++) {
        size_t n;
        const uint8_t *b = grammar_vocab_token(v, id, &n);
        if (b && is_punct_token(b, n)) c.bias[id] = (float)o->punct_bias;
    }
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 1;
    for (long i = 0; i < o->samples && rc == CLI_OK; i++) rc = sample_one(&c, o->max_tokens, &rng);
    if (o->stats && c.steps)
        fprintf(stderr, "vocabulary %d tokens built in %.3fs; masks: %zu steps, mean %.3f ms, max %.3f ms\n", c.n_vocab,
                t_vocab, c.steps, 1e3 * c.mask_seconds / (double)c.steps, 1e3 * c.mask_max);
    free(c.bias);
    free(c.mask);
    grammar_vocab_free(v);
    tok_free(t);
    return rc;
}

static int parse_args(int argc, char **argv, gopts *o) {
    for (int i = 1; i < argc; i++) {
        const char **dst = NULL;
        if (cli_common_flag(argc, argv, &i)) continue;
        if (cli_arg_is(argv[i], "--gbnf")) dst = &o->gbnf;
        else if (cli_arg_is(argv[i], "--regex")) dst = &o->regex;
        else if (cli_arg_is(argv[i], "--json-schema")) dst = &o->schema;
        else if (cli_arg_is(argv[i], "--tools")) dst = &o->tools;
        else if (cli_arg_is(argv[i], "--format")) dst = &o->format;
        else if (cli_arg_is(argv[i], "--tool")) dst = &o->tool;
        else if (cli_arg_is(argv[i], "--match")) dst = &o->match;
        else if (cli_arg_is(argv[i], "--tokenizer")) dst = &o->tokdir;
        if (dst) {
            if (!(*dst = cli_take_value(argc, argv, &i, "grammar"))) return CLI_USAGE;
            continue;
        }
        if (!strcmp(argv[i], "--json-object")) o->json_object = true;
        else if (!strcmp(argv[i], "--print")) o->print = true;
        else if (!strcmp(argv[i], "--parallel")) o->parallel = true;
        else if (!strcmp(argv[i], "--stats")) o->stats = true;
        else if (cli_arg_is(argv[i], "--sample") || cli_arg_is(argv[i], "--max-tokens")) {
            bool smp = cli_arg_is(argv[i], "--sample");
            const char *v = cli_take_value(argc, argv, &i, "grammar");
            if (!v || !cli_parse_int(v, 0, 1 << 20, smp ? &o->samples : &o->max_tokens)) {
                cli_error("grammar", "%s needs a number", smp ? "--sample" : "--max-tokens");
                return CLI_USAGE;
            }
        } else if (cli_arg_is(argv[i], "--seed")) {
            const char *v = cli_take_value(argc, argv, &i, "grammar");
            if (!v || !cli_parse_u64(v, &o->seed)) {
                cli_error("grammar", "--seed needs a number");
                return CLI_USAGE;
            }
        } else if (cli_arg_is(argv[i], "--punct-bias")) {
            const char *v = cli_take_value(argc, argv, &i, "grammar");
            if (!v || !cli_parse_float(v, &o->punct_bias)) {
                cli_error("grammar", "--punct-bias needs a number");
                return CLI_USAGE;
            }
        } else {
            cli_error("grammar", "unknown argument %s", argv[i]);
            return CLI_USAGE;
        }
    }
    int sources = !!o->gbnf + !!o->regex + !!o->schema + !!o->tools + o->json_object;
    if (sources != 1) {
        cli_error("grammar", "give exactly one of --gbnf, --regex, --json-schema, --json-object, --tools");
        return CLI_USAGE;
    }
    if (o->tools && parse_format(o->format) == CHAT_TOOLS_NONE) {
        cli_error("grammar", "--tools needs --format hermes|qwen-xml|llama3|deepseek");
        return CLI_USAGE;
    }
    if (o->samples && !o->tokdir) {
        cli_error("grammar", "--sample needs --tokenizer");
        return CLI_USAGE;
    }
    return CLI_OK;
}

static int cmd_grammar(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        grammar_help();
        return CLI_OK;
    }
    gopts o = {.max_tokens = 256, .seed = 1};
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_OK) return rc;
    char *text = NULL;
    grammar *g = NULL;
    em_status s = source_text(&o, &text);
    if (s == EM_OK) s = grammar_compile_gbnf(text, strlen(text), "root", &g);
    if (s != EM_OK) {
        cli_error("grammar", "%s", em_last_error());
        free(text);
        return CLI_FAIL;
    }
    if (o.print) fputs(text, stdout);
    free(text);
    if (o.match) {
        grammar_matcher *m = NULL;
        s = grammar_matcher_new(g, NULL, &m);
        if (s == EM_OK) s = grammar_matcher_accept_bytes(m, o.match, strlen(o.match));
        bool ok = s == EM_OK && grammar_matcher_is_accepting(m);
        if (s != EM_OK && s != EM_ERR_INVALID) {
            cli_error("grammar", "%s", em_last_error());
            rc = CLI_FAIL;
        } else {
            printf("%s\n", ok ? "match" : "no match");
            rc = ok ? CLI_OK : CLI_FAIL;
        }
        grammar_matcher_free(m);
    }
    if (rc == CLI_OK && o.samples) rc = run_samples(&o, g);
    grammar_free(g);
    return rc;
}

EM_CLI_VERB("grammar", "compile, print, match and sample grammars (GBNF, regex, JSON Schema, tool calls)", cmd_grammar)
