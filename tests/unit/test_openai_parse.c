/* OpenAI request parsing: JSON bodies → the internal request, and the
 * error (status, param) for each kind of bad input. */
#include "test.h"

#include "engine/request.h"
#include "server/openai_chat.h"
#include "server/openai_completions.h"

static bool chat(const char *text, em_request *req, oai_stream_opts *so, oai_error *e) {
    json_t *body = json_loads(text, 0, NULL);
    REQUIRE(body);
    em_request_init(req);
    memset(so, 0, sizeof *so);
    memset(e, 0, sizeof *e);
    bool ok = oai_chat_parse(body, "m", 1000, req, so, e);
    json_decref(body);
    return ok;
}

/* Expects a failure with the given status and param; frees the request. */
static void bad(const char *text, int status, const char *param) {
    em_request req;
    oai_stream_opts so;
    oai_error e;
    bool ok = chat(text, &req, &so, &e);
    CHECKF(!ok, "accepted: %s", text);
    if (!ok) {
        CHECKF(e.status == status, "%s: status %d, want %d (%s)", text, e.status, status, e.message);
        CHECKF(!strcmp(e.param, param), "%s: param '%s', want '%s'", text, e.param, param);
    }
    em_request_free(&req);
}

int main(void) {
    em_request req;
    oai_stream_opts so;
    oai_error e;
    REQUIRE(chat("{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                 "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
                 "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"42\"}],"
                 "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0.5,\"seed\":7,"
                 "\"stop\":[\"x\",\"yy\"],\"max_completion_tokens\":12,\"n\":3,\"logprobs\":true,\"top_logprobs\":2,"
                 "\"logit_bias\":{\"5\":-100},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                 "\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,"
                 "\"reasoning_effort\":\"low\",\"chat_template_kwargs\":{\"enable_thinking\":false},"
                 "\"user\":\"u\",\"some_future_field\":1}",
                 &req, &so, &e));
    CHECK(req.chat && req.n_messages == 4);
    CHECK(req.messages[0].role == EM_ROLE_DEVELOPER);
    CHECK_STR(req.messages[1].content, "ab");
    CHECK(req.messages[2].content == NULL && req.messages[2].n_tool_calls == 1);
    CHECK_STR(req.messages[2].tool_calls[0].arguments, "{\"x\":1}");
    CHECK_STR(req.messages[3].tool_call_id, "call_1");
    CHECK(so.stream && so.include_usage);
    CHECK(req.set & EM_SET_TEMPERATURE);
    CHECK(!(req.set & EM_SET_TOP_P));
    CHECK(req.sampling.has_seed && req.sampling.seed == 7);
    CHECK(req.n_stop == 2 && !strcmp(req.stop[1], "yy"));
    CHECK(req.max_tokens == 12 && req.n == 3 && req.logprobs && req.top_logprobs == 2);
    CHECK(req.n_bias == 1 && req.bias_ids[0] == 5 && req.bias_values[0] == -100.0f);
    CHECK(json_array_size(req.tools) == 1 && !req.parallel_tool_calls);
    CHECK(json_is_false(json_object_get(req.template_kwargs, "enable_thinking")));
    CHECK_STR(json_string_value(json_object_get(req.template_kwargs, "reasoning_effort")), "low");

    /* Defaults for unset sampling fields come from the model. */
    em_sampling d = {.temperature = 0.7f, .top_p = 0.8f, .top_k = 20};
    em_sampling s = em_request_sampling(&req, d);
    CHECK(s.temperature == 0.5f && s.top_p == 0.8f && s.top_k == 20 && s.seed == 7);

    /* The template context: developer → system, arguments as an object. */
    json_t *vars;
    REQUIRE(em_request_template_vars(&req, &vars) == EM_OK);
    json_t *msgs = json_object_get(vars, "messages");
    CHECK_STR(json_string_value(json_object_get(json_array_get(msgs, 0), "role")), "system");
    json_t *args = json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(msgs, 2), "tool_calls"), 0),
                                                   "function"), "arguments");
    CHECK(json_is_object(args) && json_integer_value(json_object_get(args, "x")) == 1);
    CHECK(json_is_true(json_object_get(vars, "add_generation_prompt")));
    CHECK(json_array_size(json_object_get(vars, "tools")) == 1);
    json_decref(vars);
    em_request_free(&req);

    /* A single stop string. */
    REQUIRE(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"END\"}", &req, &so, &e));
    CHECK(req.n_stop == 1 && !strcmp(req.stop[0], "END") && req.n == 1 && !so.stream);
    em_request_free(&req);

    bad("{}", 400, "messages");
    bad("{\"messages\":[]}", 400, "messages");
    bad("{\"messages\":\"hi\"}", 400, "messages");
    bad("{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages[0].role");
    bad("{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages[0].content");
    bad("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "messages[0].tool_call_id");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"other\"}", 404, "model");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", 400, "temperature");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", 400, "temperature");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", 400, "n");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-1}", 400, "max_tokens");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}", 400, "stop[0]");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":7}", 400, "stop");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"99999\":1}}", 400, "logit_bias");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}", 400, "top_logprobs");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"sometimes\"}", 400, "tool_choice");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"function\"}}", 400, "tool_choice");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\"}}", 400,
        "response_format.json_schema");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}", 400,
        "response_format");
    {   /* structured outputs parse into the request (enforced later by a grammar) */
        em_request r;
        oai_stream_opts so;
        oai_error e;
        CHECK(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"function\","
                   "\"function\":{\"name\":\"f\"}},\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                   "{\"name\":\"s\",\"schema\":{\"type\":\"object\"}}}}", &r, &so, &e));
        CHECK(r.tool_choice == EM_TOOL_CHOICE_NAMED && r.tool_choice_name && !strcmp(r.tool_choice_name, "f"));
        CHECK(json_is_object(r.response_schema));
        em_request_free(&r);
        CHECK(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\","
                   "\"response_format\":{\"type\":\"json_object\"}}", &r, &so, &e));
        CHECK(r.tool_choice == EM_TOOL_CHOICE_REQUIRED && r.response_json);
        em_request_free(&r);
    }
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}", 400, "tools[0]");
    bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}", 400, "stream");

    /* Completions: several prompts become several requests. */
    json_t *body = json_loads("{\"prompt\":[\"a\",\"b\"],\"max_tokens\":4,\"logprobs\":2,\"stop\":\"z\"}", 0, NULL);
    em_request *reqs;
    size_t n;
    REQUIRE(oai_completions_parse(body, "m", 1000, &reqs, &n, &so, &e));
    CHECK(n == 2 && !reqs[0].chat && !strcmp(reqs[1].prompt, "b") && reqs[1].max_tokens == 4);
    CHECK(reqs[1].logprobs && reqs[1].top_logprobs == 2 && reqs[1].n_stop == 1);
    for (size_t i = 0; i < n; i++) em_request_free(&reqs[i]);
    free(reqs);
    json_decref(body);
    body = json_loads("{\"prompt\":[1,2,3]}", 0, NULL);
    REQUIRE(oai_completions_parse(body, "m", 1000, &reqs, &n, &so, &e));
    CHECK(n == 1 && reqs[0].n_prompt_ids == 3 && reqs[0].prompt_ids[2] == 3 && reqs[0].max_tokens == 16);
    for (size_t i = 0; i < n; i++) em_request_free(&reqs[i]);
    free(reqs);
    json_decref(body);
    body = json_loads("{\"prompt\":[1,5000]}", 0, NULL);
    CHECK(!oai_completions_parse(body, "m", 1000, &reqs, &n, &so, &e) && e.status == 400);
    for (size_t i = 0; i < n; i++) em_request_free(&reqs[i]);
    free(reqs);
    json_decref(body);
    return test_summary();
}
