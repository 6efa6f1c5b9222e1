/* test_grammar.c — grammar engine: GBNF/regex/schema semantics by text
 * matching, clear errors for bad input, and (with the qwen3 tokenizer from
 * the npm cache) masks against accept, rollback, clone, end ids, and forced
 * tool calls that ember's own chat parser returns as tool calls. */
#include "test.h"

#include "chat/chat.h"
#include "engine/grammar/grammar.h"

#include <stdint.h>

static bool matches_g(const grammar *g, const char *text) {
    grammar_matcher *m;
    if (grammar_matcher_new(g, NULL, &m) != EM_OK) return false;
    bool ok = grammar_matcher_accept_bytes(m, text, strlen(text)) == EM_OK && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    return ok;
}

static bool gbnf_matches(const char *src, const char *text) {
    grammar *g;
    if (grammar_compile_gbnf(src, strlen(src), NULL, &g) != EM_OK) {
        fprintf(stderr, "compile failed: %s\n", em_last_error());
        return false;
    }
    bool ok = matches_g(g, text);
    grammar_free(g);
    return ok;
}

static bool regex_matches(const char *re, const char *text) {
    grammar *g;
    if (grammar_compile_regex(re, strlen(re), &g) != EM_OK) return false;
    bool ok = matches_g(g, text);
    grammar_free(g);
    return ok;
}

static bool schema_matches(const char *schema, const char *text) {
    json_t *j = json_loads(schema, 0, NULL);
    grammar *g;
    em_status s = grammar_compile_json_schema(j, &g);
    json_decref(j);
    if (s != EM_OK) {
        fprintf(stderr, "schema failed: %s\n", em_last_error());
        return false;
    }
    bool ok = matches_g(g, text);
    grammar_free(g);
    return ok;
}

/* The status of compiling; the message must hold `want`. */
static em_status gbnf_error(const char *src, const char *want) {
    grammar *g = NULL;
    em_status s = grammar_compile_gbnf(src, strlen(src), NULL, &g);
    grammar_free(g);
    CHECKF(s == EM_OK || strstr(em_last_error(), want), "'%s' lacks '%s'", em_last_error(), want);
    return s;
}

static em_status schema_error(const char *schema, const char *want) {
    json_t *j = json_loads(schema, 0, NULL);
    grammar *g = NULL;
    em_status s = j ? grammar_compile_json_schema(j, &g) : EM_ERR_FORMAT;
    grammar_free(g);
    json_decref(j);
    CHECKF(s == EM_OK || strstr(em_last_error(), want), "'%s' lacks '%s'", em_last_error(), want);
    return s;
}

static void test_gbnf(void) {
    const char *g = "root ::= \"x\" ( [a-z] | num )* \"!\"   # comment\nnum ::= [0-9]+\n";
    CHECK(gbnf_matches(g, "xab12c!"));
    CHECK(gbnf_matches(g, "x!"));
    CHECK(!gbnf_matches(g, "xab12c"));
    CHECK(!gbnf_matches(g, "xA!"));
    CHECK(gbnf_matches("root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,}", "aabbc"));
    CHECK(gbnf_matches("root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,}", "aaabbccc"));
    CHECK(!gbnf_matches("root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,}", "aaaabbc"));
    CHECK(gbnf_matches("root ::= [^a-z]+ .", "ÄÖ9é"));
    CHECK(!gbnf_matches("root ::= [^a-z]+ .", "Äb9"));
    CHECK(gbnf_matches("root ::= \"\\u00e9\\x41\\n\" [\\U0001F600-\\U0001F64F]", "éA\n😃"));
    CHECK(gbnf_matches("root ::= (\"a\" | )* \"b\"", "aab")); /* nullable repetition */
    CHECK(gbnf_matches("root ::= [] | \"a\"", "a")); /* an empty class matches nothing */
    CHECK(!gbnf_matches("root ::= [] \"a\"", "a"));
    CHECK(gbnf_matches("root ::= r\nr ::= \"(\" r \")\" | \"\"", "((()))"));
    CHECK(!gbnf_matches("root ::= r\nr ::= \"(\" r \")\" | \"\"", "(()"));
    CHECK(gbnf_error("root ::= r\nr ::= r \"a\" | \"b\"", "left-recursive") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= x", "'x' is used but not defined") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= \"a", "unterminated string") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= [a-", "unterminated") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= \"a\"{3,2}", "n < m") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= \"a\"{99999}", "repetition count") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= (\"a\"", "expected ')'") == EM_ERR_FORMAT);
    CHECK(gbnf_error("r ::= \"a\"", "no rule named 'root'") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice") == EM_ERR_FORMAT);
    CHECK(gbnf_error("root ::= \"\\q\"", "line 1 column") == EM_ERR_FORMAT);
}

static void test_regex(void) {
    CHECK(regex_matches("^[A-Z]{3}-\\d{2,4}$", "ABC-123"));
    CHECK(!regex_matches("^[A-Z]{3}-\\d{2,4}$", "AB-123"));
    CHECK(regex_matches("(?:ab|c)+x?", "abcab"));
    CHECK(regex_matches("\\w+\\s\\S", "a_1 é"));
    CHECK(regex_matches("a.c", "a\xce\xbb" "c"));
    CHECK(!regex_matches("a.c", "a\nc"));
    CHECK(regex_matches("[^\\d]{2}", "xy"));
    CHECK(!regex_matches("[^\\d]{2}", "x1"));
    grammar *g = NULL;
    CHECK(grammar_compile_regex("(a)\\1", 6, &g) == EM_ERR_UNSUPPORTED && strstr(em_last_error(), "backreference"));
    CHECK(grammar_compile_regex("a(?=b)", 6, &g) == EM_ERR_UNSUPPORTED && strstr(em_last_error(), "lookaround"));
    CHECK(grammar_compile_regex("a\\bc", 4, &g) == EM_ERR_UNSUPPORTED);
    CHECK(grammar_compile_regex("a^b", 3, &g) == EM_ERR_UNSUPPORTED);
    CHECK(grammar_compile_regex("*a", 2, &g) == EM_ERR_FORMAT);
    CHECK(grammar_compile_regex("(a", 2, &g) == EM_ERR_FORMAT);
    CHECK(g == NULL);
}

static void test_schema(void) {
    const char *p = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},"
                    "\"b\":{\"type\":\"string\",\"pattern\":\"^x\\\"y$\"}},\"required\":[\"a\"],"
                    "\"additionalProperties\":false}";
    CHECK(schema_matches(p, "{\"a\": 120}"));
    CHECK(schema_matches(p, "{\"a\":-5,\"b\":\"x\\\"y\"}"));
    CHECK(!schema_matches(p, "{\"a\":121}"));
    CHECK(!schema_matches(p, "{\"a\":-6}"));
    CHECK(!schema_matches(p, "{\"a\":007}"));
    CHECK(!schema_matches(p, "{\"b\":\"x\\\"y\"}"));
    CHECK(!schema_matches(p, "{\"a\":1,\"c\":2}"));
    const char *rec = "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"items\":"
                      "{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"k\"],\"additionalProperties\":false}},"
                      "\"$ref\":\"#/$defs/n\"}";
    CHECK(schema_matches(rec, "{\"k\":[{\"k\":[]},{\"k\":[{\"k\":[]}]}]}"));
    CHECK(!schema_matches(rec, "{\"k\":[{}]}"));
    CHECK(schema_matches("{\"enum\":[\"ab\",\"abc\",\"b\",3,null]}", "\"abc\""));
    CHECK(schema_matches("{\"enum\":[\"ab\",\"abc\",\"b\",3,null]}", "null"));
    CHECK(!schema_matches("{\"enum\":[\"ab\",\"abc\",\"b\",3,null]}", "\"a\""));
    CHECK(schema_matches("{\"type\":\"number\",\"exclusiveMinimum\":2,\"maximum\":3}", "2.5"));
    CHECK(!schema_matches("{\"type\":\"number\",\"exclusiveMinimum\":2,\"maximum\":3}", "2"));
    CHECK(!schema_matches("{\"type\":\"number\",\"exclusiveMinimum\":2,\"maximum\":3}", "3.1"));
    CHECK(schema_matches("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-28\""));
    CHECK(!schema_matches("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-30\""));
    CHECK(schema_error("{\"type\":\"string\",\"contentEncoding\":\"base64\"}", "contentEncoding") == EM_ERR_UNSUPPORTED);
    CHECK(schema_error("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems") == EM_ERR_UNSUPPORTED);
    CHECK(schema_error("{\"type\":\"string\",\"format\":\"iri\"}", "iri") == EM_ERR_UNSUPPORTED);
    CHECK(schema_error("{\"properties\":{\"a\":{\"not\":{}}}}", "/properties/a") == EM_ERR_UNSUPPORTED);
    CHECK(schema_error("{\"$ref\":\"#/$defs/missing\"}", "not found") == EM_ERR_FORMAT);
    CHECK(schema_error("{\"type\":\"wat\"}", "unknown type") == EM_ERR_FORMAT);
    CHECK(schema_error("{\"type\":\"string\",\"pattern\":\"(a\"}", "pattern") == EM_ERR_FORMAT);
    /* pathological: deep nesting is bounded, huge enums compile fast */
    char deep[8192] = "";
    for (int i = 0; i < 400; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 400; i++) strcat(deep, "}");
    CHECK(schema_error(deep, "nested too deeply") == EM_ERR_LIMIT);
    json_t *big = json_array();
    char w[32];
    for (int i = 0; i < 50000; i++) {
        snprintf(w, sizeof w, "v%d", i * 7919);
        json_array_append_new(big, json_string(w));
    }
    json_t *sch = json_pack("{s:o}", "enum", big);
    grammar *g;
    CHECK(grammar_compile_json_schema(sch, &g) == EM_OK);
    CHECK(matches_g(g, "\"v7919\""));
    CHECK(!matches_g(g, "\"v7918\""));
    grammar_free(g);
    json_decref(sch);
}

/* ---- with a real tokenizer ---- */

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static int32_t pick(const uint32_t *mask, int n, const grammar_vocab *v, bool prefer_punct) {
    int32_t ids[4096];
    int k = 0, seen = 0;
    for (int i = 0; i < n; i++)
        if ((mask[i >> 5] >> (i & 31)) & 1) {
            size_t len;
            const uint8_t *b = grammar_vocab_token(v, i, &len);
            bool punct = grammar_vocab_is_end(v, i) || (b && memchr(b, '"', len)) || (b && memchr(b, '}', len));
            if (prefer_punct && !punct && (rnd() % 8)) continue;
            seen++;
            if (k < 4096) ids[k++] = i;
            else if (rnd() % (uint32_t)seen < 4096) ids[rnd() % 4096] = i;
        }
    if (!k && prefer_punct) return pick(mask, n, v, false);
    return k ? ids[rnd() % (uint32_t)k] : -1;
}

typedef struct calls {
    int n;
    char name[64];
    char args[512];
} calls;

static void on_event(void *user, const chat_event *ev) {
    calls *c = user;
    if (ev->kind == CHAT_EV_TOOL_START) {
        c->n++;
        snprintf(c->name, sizeof c->name, "%s", ev->name);
    } else if (ev->kind == CHAT_EV_TOOL_ARGS) snprintf(c->args, sizeof c->args, "%.*s", (int)ev->len, ev->text);
}

static void test_tool_calls(const grammar_vocab *v, int n_vocab, uint32_t *mask) {
    json_t *tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},\"days\":{\"type\":\"integer\",\"minimum\":1,"
        "\"maximum\":7}},\"required\":[\"city\",\"days\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"stop\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]",
        0, NULL);
    REQUIRE(tools);
    const chat_tool_format fmts[] = {CHAT_TOOLS_HERMES, CHAT_TOOLS_LLAMA3, CHAT_TOOLS_DEEPSEEK, CHAT_TOOLS_QWEN_XML};
    for (int f = 0; f < 4; f++)
        for (int named = 0; named < 2; named++) {
            grammar_tool_opts o = {.name = named ? "get_weather" : NULL};
            grammar *g;
            em_status s = grammar_compile_tool_call(fmts[f], tools, &o, &g);
            CHECKF(s == EM_OK, "format %d: %s", f, em_last_error());
            if (s != EM_OK) continue;
            for (int trial = 0; trial < 3; trial++) {
                grammar_matcher *m;
                REQUIRE(grammar_matcher_new(g, v, &m) == EM_OK);
                char text[8192];
                size_t len = 0;
                for (int step = 0; step < 300 && !grammar_matcher_is_terminated(m); step++) {
                    REQUIRE(grammar_matcher_fill_mask(m, mask, n_vocab) == EM_OK);
                    int32_t t = pick(mask, n_vocab, v, true);
                    REQUIRE(t >= 0);
                    REQUIRE(grammar_matcher_accept(m, t) == EM_OK);
                    size_t tl;
                    const uint8_t *b = grammar_vocab_token(v, t, &tl);
                    if (b && len + tl < sizeof text) memcpy(text + len, b, tl), len += tl;
                }
                CHECK(grammar_matcher_is_terminated(m));
                calls c = {0};
                chat_format cf = {.tools = fmts[f]};
                chat_parser *p = chat_parser_new(cf, tools, on_event, &c);
                chat_parser_feed(p, text, len);
                chat_parser_finish(p);
                chat_parser_free(p);
                CHECKF(c.n == 1, "format %d: %d calls in %.*s", f, c.n, (int)len, text);
                if (named) CHECK_STR(c.name, "get_weather");
                if (!strcmp(c.name, "get_weather")) {
                    json_t *a = json_loads(c.args, 0, NULL);
                    json_t *city = json_object_get(a, "city"), *days = json_object_get(a, "days");
                    CHECKF(json_is_string(city) && json_is_integer(days) && json_integer_value(days) >= 1 &&
                               json_integer_value(days) <= 7,
                           "format %d args %s", f, c.args);
                    json_decref(a);
                }
                grammar_matcher_free(m);
            }
            grammar_free(g);
        }
    json_decref(tools);
}

static void test_with_tokenizer(const char *dir) {
    tokenizer *t;
    if (tok_load(dir, &t) != EM_OK) {
        fprintf(stderr, "skipping tokenizer tests: %s\n", em_last_error());
        return;
    }
    int32_t end = tok_piece_to_id(t, "<|im_end|>");
    REQUIRE(end >= 0);
    grammar_vocab *v;
    REQUIRE(grammar_vocab_new(t, &end, 1, 151936, &v) == EM_OK);
    int n = grammar_vocab_size(v);
    CHECK(n == 151936);
    size_t len;
    const uint8_t *b = grammar_vocab_token(v, tok_piece_to_id(t, "Ġhello"), &len);
    CHECK(b && len == 6 && !memcmp(b, " hello", 6));
    CHECK(grammar_vocab_token(v, end, &len) == NULL);
    uint32_t *mask = calloc((size_t)(n + 31) / 32, 4);
    json_t *sch = json_loads("{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"maxLength\":4},"
                             "\"n\":{\"type\":\"integer\"}},\"required\":[\"k\",\"n\"],\"additionalProperties\":false}",
                             0, NULL);
    grammar *g;
    REQUIRE(grammar_compile_json_schema(sch, &g) == EM_OK);
    json_decref(sch);
    grammar_matcher *m;
    REQUIRE(grammar_matcher_new(g, v, &m) == EM_OK);
    /* The mask agrees with accept: every allowed token is accepted, a sample
     * of disallowed ones is refused without changing the state. */
    for (int step = 0; step < 60 && !grammar_matcher_is_terminated(m); step++) {
        REQUIRE(grammar_matcher_fill_mask(m, mask, n) == EM_OK);
        CHECK(((mask[end >> 5] >> (end & 31)) & 1) == grammar_matcher_is_accepting(m));
        for (int k = 0; k < 40; k++) {
            int32_t id = (int32_t)(rnd() % (uint32_t)n);
            bool allowed = (mask[id >> 5] >> (id & 31)) & 1;
            grammar_matcher *c;
            REQUIRE(grammar_matcher_clone(m, &c) == EM_OK);
            em_status s = grammar_matcher_accept(c, id);
            CHECKF((s == EM_OK) == allowed, "token %d allowed %d accept %d", id, allowed, s);
            grammar_matcher_free(c);
        }
        int32_t tok = pick(mask, n, v, true);
        REQUIRE(tok >= 0);
        REQUIRE(grammar_matcher_accept(m, tok) == EM_OK);
    }
    CHECK(grammar_matcher_is_terminated(m));
    /* rollback to the start gives the start mask back */
    size_t nt = grammar_matcher_n_tokens(m);
    CHECK(grammar_matcher_rollback(m, nt + 1) == EM_ERR_INVALID);
    REQUIRE(grammar_matcher_rollback(m, nt) == EM_OK);
    CHECK(!grammar_matcher_is_terminated(m));
    uint32_t *m2 = calloc((size_t)(n + 31) / 32, 4);
    grammar_matcher *fresh;
    REQUIRE(grammar_matcher_new(g, v, &fresh) == EM_OK);
    REQUIRE(grammar_matcher_fill_mask(m, mask, n) == EM_OK);
    REQUIRE(grammar_matcher_fill_mask(fresh, m2, n) == EM_OK);
    CHECK(!memcmp(mask, m2, (size_t)(n + 31) / 32 * 4));
    CHECK(grammar_matcher_accept(fresh, tok_piece_to_id(t, "hello")) == EM_ERR_INVALID);
    CHECK(grammar_matcher_accept(fresh, end) == EM_ERR_INVALID);
    /* the logit processor syncs from the history and masks */
    float *logits = calloc((size_t)n, sizeof(float));
    int32_t hist[3] = {1, 2, tok_piece_to_id(t, "{\"")};
    REQUIRE(hist[2] >= 0);
    REQUIRE(grammar_matcher_process(fresh, logits, n, hist, 2) == EM_OK);
    memset(logits, 0, (size_t)n * sizeof(float));
    REQUIRE(grammar_matcher_process(fresh, logits, n, hist, 3) == EM_OK);
    CHECK(grammar_matcher_n_tokens(fresh) == 1);
    CHECK(isinf(logits[tok_piece_to_id(t, "{\"")]) && !isinf(logits[tok_piece_to_id(t, "k")]));
    grammar_matcher_free(fresh);
    grammar_matcher_free(m);
    grammar_free(g);
    test_tool_calls(v, n, mask);
    free(logits);
    free(m2);
    free(mask);
    grammar_vocab_free(v);
    tok_free(t);
}

int main(void) {
    test_gbnf();
    test_regex();
    test_schema();
    const char *dirs[] = {"/tmp/npmtok/qwen3", NULL};
    char cache[1024];
    const char *home = getenv("HOME");
    snprintf(cache, sizeof cache, "%s/.cache/ember-test/npm-tokenizers/qwen3", home ? home : "");
    dirs[1] = cache;
    FILE *f = NULL;
    for (int i = 0; i < 2 && !f; i++) {
        char p[1100];
        snprintf(p, sizeof p, "%s/tokenizer.json", dirs[i]);
        if ((f = fopen(p, "r"))) {
            fclose(f);
            test_with_tokenizer(dirs[i]);
        }
    }
    if (!f) fprintf(stderr, "qwen3 tokenizer not cached: tokenizer tests skipped\n");
    return test_summary();
}
