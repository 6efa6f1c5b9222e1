/* test_chat_parser.c — output parsers over sample replies of each family.
 *
 * Each case states the events a reply must give. Every case is then
 * streamed again in random chunkings (chunk sizes 1..N, so splits land
 * inside markers and inside multi-byte characters) and must give the same
 * merged events; content and reasoning deltas must each be whole UTF-8.
 * Malformed replies must come back as content, byte for byte. Random
 * mutations of all cases check the streaming/one-shot agreement on text
 * no model would write. */
#include "chat_parse_harness.h"
#include "test.h"

#define TOOLS_JSON                                                                                      \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"                    \
    "\"metric\":{\"type\":\"boolean\"},\"coords\":{\"type\":\"array\"},\"opts\":{\"type\":\"object\"},"   \
    "\"note\":{\"type\":[\"string\",\"null\"]},\"scale\":{\"anyOf\":[{\"type\":\"number\"},"             \
    "{\"type\":\"string\"}]}}}}},"                                                                      \
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","      \
    "\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"number\"}}}}},"               \
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":\"object\"}}}]"

enum { T_NONE = 0, T_TOOLS = 1 };

typedef struct pcase {
    const char *name;
    chat_format fmt;
    int tools; /* T_TOOLS: pass TOOLS_JSON */
    const char *input;
    const char *expect; /* NULL: "[C]" + input (malformed, all content) */
} pcase;

#define F(t, r, o) ((chat_format){.tools = (t), .reasoning = (r), .think_open_in_prompt = (o)})
#define HERMES_R F(CHAT_TOOLS_HERMES, true, false)
#define XML_OPEN F(CHAT_TOOLS_QWEN_XML, true, true)
#define XML F(CHAT_TOOLS_QWEN_XML, false, false)
#define LLAMA F(CHAT_TOOLS_LLAMA3, false, false)
#define DS F(CHAT_TOOLS_DEEPSEEK, false, false)

static const pcase cases[] = {
    {"plain utf-8", F(CHAT_TOOLS_NONE, false, false), T_NONE, "Hello, wörld! 😀 こんにちは <b>ok</b>\n",
     "[C]Hello, wörld! 😀 こんにちは <b>ok</b>\n"},
    {"qwen3 think + hermes call", HERMES_R, T_TOOLS,
     "<think>\nThe user wants the weather in 東京 for three days.\n</think>\n\nLet me check.\n<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"days\": 3}}\n</tool_call>",
     "[R]The user wants the weather in 東京 for three days.[C]Let me check.[S0:get_weather]"
     "[A0]{\"city\":\"東京\",\"days\":3}[E0]"},
    {"hermes two calls", F(CHAT_TOOLS_HERMES, false, false), T_TOOLS,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
     "{\"name\": \"search\", \"arguments\": {\"query\": \"Paris events\", \"limit\": 5}}\n</tool_call>",
     "[S0:get_weather][A0]{\"city\":\"Paris\"}[E0][S1:search][A1]{\"query\":\"Paris events\",\"limit\":5}[E1]"},
    {"hermes call then content", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n\nAnything else?",
     "[S0:ping][A0]{}[E0][C]Anything else?"},
    {"hermes exact numbers and escapes", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a\\u00e9\\\"b\", \"limit\": 0.1, "
     "\"big\": 123456789012345678901234567890, \"list\": [1, 2.5e3, true, null]}}\n</tool_call>",
     "[S0:search][A0]{\"query\":\"a\\u00e9\\\"b\",\"limit\":0.1,\"big\":123456789012345678901234567890,"
     "\"list\":[1,2.5e3,true,null]}[E0]"},
    {"hermes arguments as a string", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"x\\\"}\"}\n</tool_call>",
     "[S0:search][A0]{\"query\":\"x\"}[E0]"},
    {"hermes no arguments", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "<tool_call>{\"name\": \"ping\"}</tool_call>", "[S0:ping][A0]{}[E0]"},
    {"hermes invalid json", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "Sure <tool_call>\n{\"name\": \"x\", bad}\n</tool_call> ok", NULL},
    {"hermes unterminated", HERMES_R, T_TOOLS,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", NULL},
    {"hermes missing close tag", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n", NULL},
    {"hermes tag without json", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "Use the <tool_call> tag like this: <tool_call> hello", NULL},
    {"hermes arguments not an object", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "<tool_call>{\"name\": \"ping\", \"arguments\": [1]}</tool_call>", NULL},
    {"hermes bad call then good call", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "<tool_call>{\"nom\": 1}</tool_call><tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>",
     "[C]<tool_call>{\"nom\": 1}</tool_call>[S0:ping][A0]{}[E0]"},
    {"partial marker at the end", F(CHAT_TOOLS_HERMES, false, false), T_NONE, "a < b and <tool_ca",
     "[C]a < b and <tool_ca"},
    {"trailing whitespace kept at the end", F(CHAT_TOOLS_HERMES, false, false), T_NONE, "text  \n\n",
     "[C]text  \n\n"},
    {"think opened by the prompt", F(CHAT_TOOLS_HERMES, true, true), T_NONE,
     "I should just answer.\n</think>\n\nDone.", "[R]I should just answer.[C]Done."},
    {"thinking off: literal tags are content", F(CHAT_TOOLS_HERMES, false, false), T_NONE,
     "Plain answer mentioning <think> and </think>.", NULL},
    {"reasoning format, no think block", HERMES_R, T_NONE, "  Hi there", "[C]  Hi there"},
    {"unterminated reasoning", HERMES_R, T_NONE, "<think>\nstill thinking… 🤔", "[R]still thinking… 🤔"},
    {"think later in content is text", HERMES_R, T_NONE, "Answer <think>x</think>", NULL},
    {"qwen3-coder xml typed", XML, T_TOOLS,
     "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
     "<parameter=days>\n5\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=coords>\n"
     "[37.77, -122.42]\n</parameter>\n<parameter=opts>\n{\"units\": \"C\"}\n</parameter>\n"
     "<parameter=note>\nline1\nline2\n</parameter>\n<parameter=scale>\n1.5\n</parameter>\n</function>\n</tool_call>",
     "[C]I'll check.[S0:get_weather][A0]{\"city\":\"San Francisco\",\"days\":5,\"metric\":true,"
     "\"coords\":[37.77,-122.42],\"opts\":{\"units\":\"C\"},\"note\":\"line1\\nline2\",\"scale\":1.5}[E0]"},
    {"xml type mismatch and unknown parameter", XML, T_TOOLS,
     "<tool_call>\n<function=get_weather>\n<parameter=days>\nfive\n</parameter>\n<parameter=note>\nnull\n"
     "</parameter>\n<parameter=city>\n42\n</parameter>\n<parameter=extra>\n{\"a\": 1}\n</parameter>\n"
     "</function>\n</tool_call>",
     "[S0:get_weather][A0]{\"days\":\"five\",\"note\":null,\"city\":\"42\",\"extra\":\"{\\\"a\\\": 1}\"}[E0]"},
    {"qwen3.5 think open + two xml calls", XML_OPEN, T_TOOLS,
     "Need weather and events.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
     "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\n"
     "Paris \"events\"\t✓\n</parameter>\n<parameter=limit>\n10\n</parameter>\n</function>\n</tool_call>",
     "[R]Need weather and events.[S0:get_weather][A0]{\"city\":\"Paris\"}[E0][S1:search]"
     "[A1]{\"query\":\"Paris \\\"events\\\"\\t✓\",\"limit\":10}[E1]"},
    {"xml without tools: strings", XML, T_NONE,
     "<tool_call>\n<function=get_weather>\n<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>",
     "[S0:get_weather][A0]{\"days\":\"5\"}[E0]"},
    {"xml no parameters", XML, T_TOOLS, "<tool_call>\n<function=ping>\n</function>\n</tool_call>",
     "[S0:ping][A0]{}[E0]"},
    {"xml wrapper left open at the end", XML, T_TOOLS,
     "<tool_call>\n<function=search>\n<parameter=query>\nq\n</parameter>\n</function>\n",
     "[S0:search][A0]{\"query\":\"q\"}[E0]"},
    {"xml bare function", XML, T_TOOLS,
     "Calling.\n<function=search>\n<parameter=query>\nq\n</parameter>\n</function>",
     "[C]Calling.[S0:search][A0]{\"query\":\"q\"}[E0]"},
    {"xml unknown tags", XML, T_TOOLS, "<tool_call>\n<func=x>\n</func>\n</tool_call>", NULL},
    {"xml unterminated", XML, T_TOOLS, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", NULL},
    {"xml bad tag inside function", XML, T_TOOLS,
     "<tool_call>\n<function=search>\n<param=query>q</param>\n</function>\n</tool_call>", NULL},
    {"llama bare call", LLAMA, T_TOOLS, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
     "[S0:get_weather][A0]{\"city\":\"Oslo\"}[E0]"},
    {"llama two bare calls", LLAMA, T_TOOLS,
     "{\"type\": \"function\", \"name\": \"search\", \"parameters\": {\"query\": \"a\"}}; "
     "{\"name\": \"ping\", \"parameters\": {}}",
     "[S0:search][A0]{\"query\":\"a\"}[E0][S1:ping][A1]{}[E1]"},
    {"llama bare unknown function", LLAMA, T_TOOLS, "{\"name\": \"launch\", \"parameters\": {}}", NULL},
    {"llama bare without tools", LLAMA, T_NONE, "{\"name\": \"search\", \"parameters\": {}}", NULL},
    {"llama python tag", LLAMA, T_TOOLS,
     "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"llama 3\"}}",
     "[S0:search][A0]{\"query\":\"llama 3\"}[E0]"},
    {"llama python tag with code", LLAMA, T_TOOLS, "<|python_tag|>brave_search.call(query=\"x\")", NULL},
    {"llama text reply", LLAMA, T_TOOLS, "The forecast is {unknown}.", NULL},
    {"llama bare incomplete", LLAMA, T_TOOLS, "{\"name\": \"get_weather\", \"parameters\": {\"ci", NULL},
    {"llama json answer that is not a call", LLAMA, T_TOOLS, "{\"answer\": 42}\nThat is all.", NULL},
    {"deepseek v3 two calls", DS, T_NONE,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
     "{\"city\": \"Beijing\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n"
     "```json\n{\"query\": \"北京\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "[S0:get_weather][A0]{\"city\":\"Beijing\"}[E0][S1:search][A1]{\"query\":\"北京\"}[E1]"},
    {"deepseek content first", DS, T_NONE,
     "Let me look that up.\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>ping\n```json\n"
     "{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "[C]Let me look that up.[S0:ping][A0]{}[E0]"},
    {"deepseek v3.1 form", DS, T_NONE,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"x\"}<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>",
     "[S0:search][A0]{\"query\":\"x\"}[E0]"},
    {"deepseek r1 reasoning then call", F(CHAT_TOOLS_DEEPSEEK, true, false), T_NONE,
     "<think>\nI need the weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
     "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Hangzhou\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "[R]I need the weather.[S0:get_weather][A0]{\"city\":\"Hangzhou\"}[E0]"},
    {"deepseek invalid json", DS, T_NONE,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{query: x}\n```"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     NULL},
    {"deepseek stray block end", DS, T_NONE, "Done.<｜tool▁calls▁end｜>", NULL},
    {"xml parameter never closed", XML, T_TOOLS,
     "<tool_call>\n<function=search>\n<parameter=query>\nq\n</function>\n</tool_call>", NULL},
    {"deepseek unterminated", DS, T_NONE,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"query\": \"x\"}", NULL},
};

static char *expected_of(const pcase *c) {
    if (c->expect) return strdup(c->expect);
    size_t n = strlen(c->input);
    char *e = malloc(n + 4);
    memcpy(e, "[C]", 3);
    memcpy(e + 3, c->input, n + 1);
    return e;
}

static void test_case(const pcase *c, json_t *tools) {
    json_t *t = c->tools == T_TOOLS ? tools : NULL;
    size_t n = strlen(c->input);
    cph_sink info = {0};
    char *whole = cph_run(c->fmt, t, c->input, n, 0, 0, &info);
    char *want = expected_of(c);
    CHECKF(strcmp(whole, want) == 0, "%s:\n got  %s\n want %s", c->name, whole, want);
    CHECKF(info.problems == 0, "%s: %d event problems", c->name, info.problems);
    static const size_t max_chunks[] = {1, 2, 3, 4, 7, 16, 64};
    int mismatches = 0, problems = 0, splits = 0;
    for (size_t m = 0; m < sizeof max_chunks / sizeof max_chunks[0]; m++) {
        for (uint64_t seed = 1; seed <= 40; seed++) {
            char *got = cph_run(c->fmt, t, c->input, n, seed, max_chunks[m], &info);
            if (strcmp(got, whole) != 0) {
                if (!mismatches)
                    fprintf(stderr, "%s (chunk<=%zu seed %llu):\n got  %s\n want %s\n", c->name, max_chunks[m],
                            (unsigned long long)seed, got, whole);
                mismatches++;
            }
            problems += info.problems;
            splits += info.split_utf8;
            free(got);
        }
    }
    CHECKF(mismatches == 0, "%s: %d chunkings differ from one feed", c->name, mismatches);
    CHECKF(problems == 0, "%s: %d event problems when streamed", c->name, problems);
    CHECKF(splits == 0, "%s: %d deltas split a UTF-8 character", c->name, splits);
    free(whole);
    free(want);
}

/* Mutated replies: whatever the text, streaming must agree with one feed. */
static void test_mutations(json_t *tools) {
    cph_rng r = {12345};
    int mismatches = 0;
    size_t n_cases = sizeof cases / sizeof cases[0];
    for (int iter = 0; iter < 1500; iter++) {
        const pcase *c = &cases[cph_next(&r) % n_cases];
        size_t n = strlen(c->input);
        char *buf = malloc(n + 8);
        memcpy(buf, c->input, n);
        int edits = 1 + (int)(cph_next(&r) % 3);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t at = cph_next(&r) % n;
            switch (cph_next(&r) % 3) {
            case 0: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;   /* delete */
            case 1: buf[at] = (char)(cph_next(&r) & 0xff); break;               /* replace */
            default: n = at + (cph_next(&r) % (n - at + 1)); break;              /* truncate */
            }
        }
        chat_format fmt = c->fmt;
        if (iter % 5 == 0) fmt.reasoning = !fmt.reasoning;
        char *whole = cph_run(fmt, tools, buf, n, 0, 0, NULL);
        for (uint64_t seed = 1; seed <= 3; seed++) {
            char *got = cph_run(fmt, tools, buf, n, seed + (uint64_t)iter * 7, 1 + seed * 3, NULL);
            if (strcmp(got, whole) != 0) {
                if (!mismatches) fprintf(stderr, "mutation of %s:\n got  %s\n want %s\n", c->name, got, whole);
                mismatches++;
            }
            free(got);
        }
        free(whole);
        free(buf);
    }
    CHECKF(mismatches == 0, "%d mutated replies stream differently", mismatches);
}

/* Held-back text is bounded: a reply that never completes a marker
 * streams out as it arrives. */
static void test_streams_promptly(void) {
    cph_sink k = {.last_kind = -1};
    cph_put(&k, "", 0);
    chat_parser *p = chat_parser_new(F(CHAT_TOOLS_HERMES, true, false), NULL, cph_on_event, &k);
    REQUIRE(p);
    chat_parser_feed(p, "<think>", 7);
    chat_parser_feed(p, "abc <tool", 9);
    CHECK_STR(k.s, "[R]abc <tool");
    chat_parser_feed(p, "</thi", 5);
    CHECK_STR(k.s, "[R]abc <tool");
    chat_parser_feed(p, "nk>\n\nHello <tool_c", 18);
    CHECK_STR(k.s, "[R]abc <tool[C]Hello");
    chat_parser_feed(p, "x", 1);
    CHECK_STR(k.s, "[R]abc <tool[C]Hello <tool_cx");
    chat_parser_finish(p);
    chat_parser_free(p);
    free(k.s);
}

/* An empty or whitespace-only reply, in every configuration (whitespace
 * right after an opened <think> is not reasoning). */
static void test_empty(json_t *tools) {
    for (int t = 0; t < 5; t++) {
        for (int bits = 0; bits < 4; bits++) {
            chat_format f = F((chat_tool_format)t, bits & 1, (bits >> 1) & 1);
            char *e = cph_run(f, tools, "", 0, 0, 0, NULL);
            CHECK_STR(e, "");
            free(e);
            e = cph_run(f, tools, " \n", 2, 1, 1, NULL);
            CHECKF(strcmp(e, f.reasoning && f.think_open_in_prompt ? "" : "[C] \n") == 0, "%d/%d: %s", t, bits, e);
            free(e);
        }
    }
}

int main(void) {
    json_error_t err;
    json_t *tools = json_loads(TOOLS_JSON, 0, &err);
    REQUIRE(tools);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i], tools);
    test_mutations(tools);
    test_streams_promptly();
    test_empty(tools);
    json_decref(tools);
    return test_summary();
}
