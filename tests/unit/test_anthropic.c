/* Anthropic Messages adapter: request JSON → the internal request (how
 * blocks map onto messages, tools and template flags), and events → the
 * collected content blocks, stop reasons and tool ids. */
#include "test.h"

#include "engine/request.h"
#include "server/anthropic.h"

static bool parse(const char *text, ant_mode mode, em_request *req, oai_error *e) {
    json_t *body = json_loads(text, 0, NULL);
    REQUIRE(body);
    em_request_init(req);
    memset(e, 0, sizeof *e);
    bool stream = false;
    bool ok = ant_parse(body, "m", mode, req, &stream, e);
    json_decref(body);
    return ok;
}

static void conversation(void) {
    em_request req;
    oai_error e;
    bool ok = parse("{\"model\":\"m\",\"max_tokens\":50,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"}],"
                    "\"messages\":["
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"s\"},"
                    "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"ping\",\"input\":{\"n\":1}}]},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"is_error\":true,"
                    "\"content\":[{\"type\":\"text\",\"text\":\"down\"}]},{\"type\":\"text\",\"text\":\"again\"}]}],"
                    "\"tools\":[{\"name\":\"ping\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
                    "\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":true},"
                    "\"thinking\":{\"type\":\"disabled\"},\"stop_sequences\":[\"X\"],\"temperature\":0.5,\"top_k\":3}",
                    ANT_MESSAGES, &req, &e);
    CHECKF(ok, "%s: %s", e.param, e.message);
    REQUIRE(ok);
    REQUIRE(req.n_messages == 5);
    CHECK(req.messages[0].role == EM_ROLE_SYSTEM);
    CHECK_STR(req.messages[0].content, "Be brief.");
    CHECK_STR(req.messages[1].content, "a\nb"); /* text blocks read as lines */
    CHECK(req.messages[2].role == EM_ROLE_ASSISTANT);
    CHECK_STR(req.messages[2].content, ""); /* a string beside the tool call, for the template */
    CHECK_STR(req.messages[2].reasoning, "hm");
    REQUIRE(req.messages[2].n_tool_calls == 1);
    CHECK_STR(req.messages[2].tool_calls[0].id, "toolu_1");
    CHECK_STR(req.messages[2].tool_calls[0].arguments, "{\"n\":1}");
    CHECK(req.messages[3].role == EM_ROLE_TOOL); /* the tool result precedes the user's words */
    CHECK_STR(req.messages[3].content, "Error: down");
    CHECK_STR(req.messages[3].tool_call_id, "toolu_1");
    CHECK_STR(req.messages[3].name, "ping");
    CHECK(req.messages[4].role == EM_ROLE_USER);
    CHECK_STR(req.messages[4].content, "again");
    CHECK(req.max_tokens == 50);
    CHECK(!req.parallel_tool_calls);
    CHECK(req.n_stop == 1 && !strcmp(req.stop[0], "X"));
    CHECK((req.set & EM_SET_TEMPERATURE) && req.sampling.temperature == 0.5f);
    CHECK((req.set & EM_SET_TOP_K) && req.sampling.top_k == 3);
    CHECK(json_is_false(json_object_get(req.template_kwargs, "enable_thinking")));
    json_t *fn = json_object_get(json_array_get(req.tools, 0), "function");
    CHECK_STR(json_string_value(json_object_get(json_array_get(req.tools, 0), "type")), "function");
    CHECK_STR(json_string_value(json_object_get(fn, "name")), "ping");
    CHECK_STR(json_string_value(json_object_get(fn, "description")), "d");
    CHECK(json_is_object(json_object_get(fn, "parameters")));
    em_request_free(&req);
}

static void bad(const char *text, ant_mode mode, int status, const char *param) {
    em_request req;
    oai_error e;
    bool ok = parse(text, mode, &req, &e);
    CHECKF(!ok, "accepted: %s", text);
    if (!ok) {
        CHECKF(e.status == status, "%s: status %d, want %d (%s)", text, e.status, status, e.message);
        CHECKF(!strcmp(e.param, param), "%s: param '%s', want '%s'", text, e.param, param);
    }
    em_request_free(&req);
}

static void errors(void) {
    const ant_mode M = ANT_MESSAGES;
    bad("{\"model\":\"x\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", M, 404, "model");
    bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", M, 400, "max_tokens");
    bad("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}", M, 400,
        "messages.0.content.0");
    bad("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":{\"type\":"
        "\"any\"}}",
        M, 400, "tool_choice"); /* no tools to choose from */
    bad("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":2}", M, 400, "n");
    bad("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", ANT_COUNT_TOKENS, 400,
        "max_tokens");
    /* count_tokens needs no max_tokens */
    em_request req;
    oai_error e;
    CHECK(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"thinking\":{\"type\":\"enabled\","
                "\"budget_tokens\":2048}}",
                ANT_COUNT_TOKENS, &req, &e));
    CHECK(json_is_true(json_object_get(req.template_kwargs, "enable_thinking")));
    em_request_free(&req);
}

static void event(ant_reply *r, em_event_kind kind, const char *text) {
    em_event ev = {.kind = kind, .text = text, .len = text ? strlen(text) : 0, .tool_id = "call_AB", .tool_name = "ping"};
    CHECK(ant_reply_event(r, &ev));
}

static void reply(void) {
    ant_reply r = {0};
    event(&r, EM_EVENT_REASONING, "let me ");
    event(&r, EM_EVENT_REASONING, "see");
    event(&r, EM_EVENT_CONTENT, "");
    event(&r, EM_EVENT_CONTENT, "Hi");
    event(&r, EM_EVENT_TOOL_START, NULL);
    event(&r, EM_EVENT_TOOL_ARGS, "{\"a\":1}");
    event(&r, EM_EVENT_TOOL_END, NULL);
    em_event fin = {.kind = EM_EVENT_FINISH, .reason = EM_REASON_TOOL_CALLS, .usage = {.completion_tokens = 9}};
    CHECK(ant_reply_event(&r, &fin));
    json_t *c = ant_content_json(&r);
    char *s = json_dumps(c, JSON_COMPACT);
    char sig[ANT_SIGNATURE_MAX];
    ant_signature(r.blocks[0].hash, sig, sizeof sig);
    char want[512];
    snprintf(want, sizeof want,
             "[{\"type\":\"thinking\",\"thinking\":\"let me see\",\"signature\":\"%s\"},{\"type\":\"text\",\"text\":\"Hi\"},"
             "{\"type\":\"tool_use\",\"id\":\"toolu_AB\",\"name\":\"ping\",\"input\":{\"a\":1}}]",
             sig);
    CHECK_STR(s, want);
    CHECK(r.output_tokens == 9);
    CHECK_STR(ant_stop_reason(r.reason, r.stop), "tool_use");
    free(s);
    json_decref(c);
    ant_reply_free(&r);

    CHECK_STR(ant_stop_reason(EM_REASON_STOP, NULL), "end_turn");
    CHECK_STR(ant_stop_reason(EM_REASON_STOP, "END"), "stop_sequence");
    CHECK_STR(ant_stop_reason(EM_REASON_LENGTH, NULL), "max_tokens");
    CHECK_STR(ant_error_type(529), "overloaded_error");
    CHECK_STR(ant_error_type(413), "request_too_large");
    CHECK_STR(ant_error_type(500), "api_error");
}

int main(void) {
    conversation();
    errors();
    reply();
    return test_summary();
}
