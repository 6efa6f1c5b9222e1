/* openai_chat_parse.c — /v1/chat/completions JSON → the internal request.
 * Every field is type-checked; errors name the offending parameter the way
 * OpenAI does ("messages[2].content"). */
#include "server/openai_chat.h"

#include "base/alloc.h"
#include "engine/events.h"

#include <stdio.h>
#include <string.h>

#define OAI_MAX_MESSAGES 8192
#define OAI_MAX_TOOLS 512

static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/* Content: a string, or a list of parts whose text parts are joined. */
static bool parse_content(json_t *c, const char *param, char **out, oai_error *e) {
    *out = NULL;
    if (!c) return true;
    if (json_is_string(c)) {
        if (!(*out = em_strndup(json_string_value(c), json_string_length(c)))) return oai_fail(e, 500, NULL, param, "out of memory");
        return true;
    }
    if (!json_is_array(c)) return oai_fail(e, 400, "invalid_type", param, "'content' must be a string or a list of parts");
    size_t total = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return oai_fail(e, 400, "invalid_type", param, "content part %zu must be an object with a 'type'", i);
        const char *t = json_string_value(type);
        if (strcmp(t, "text") && strcmp(t, "input_text") && strcmp(t, "refusal"))
            return oai_fail(e, 400, "unsupported_content", param,
                            "content part %zu has type '%.40s'; this model accepts text only", i, t);
        if (!strcmp(t, "refusal")) text = json_object_get(part, "refusal");
        if (!json_is_string(text)) return oai_fail(e, 400, "invalid_type", param, "content part %zu needs a string 'text'", i);
        total += json_string_length(text);
    }
    char *s = em_malloc(total + 1);
    if (!s) return oai_fail(e, 500, NULL, param, "out of memory");
    size_t at = 0;
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) text = json_object_get(part, "refusal");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = 0;
    *out = s;
    return true;
}

static bool parse_role(json_t *r, const char *param, em_role *out, oai_error *e) {
    static const struct { const char *name; em_role role; } roles[] = {
        {"system", EM_ROLE_SYSTEM}, {"developer", EM_ROLE_DEVELOPER}, {"user", EM_ROLE_USER},
        {"assistant", EM_ROLE_ASSISTANT}, {"tool", EM_ROLE_TOOL}};
    if (!json_is_string(r)) return oai_fail(e, 400, "invalid_type", param, "each message needs a string 'role'");
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (!strcmp(json_string_value(r), roles[i].name)) {
            *out = roles[i].role;
            return true;
        }
    return oai_fail(e, 400, "invalid_value", param,
                    "role '%.40s' is not one of system, developer, user, assistant, tool", json_string_value(r));
}

static bool parse_tool_calls(json_t *calls, size_t mi, em_message *m, oai_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", mi);
    if (!json_is_array(calls)) return oai_fail(e, 400, "invalid_type", param, "'tool_calls' must be a list");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name"), *args = field(fn, "arguments"), *id = field(c, "id");
        if (!json_is_object(c) || !json_is_object(fn) || !json_is_string(name))
            return oai_fail(e, 400, "invalid_type", param, "tool call %zu needs function.name", i);
        if (id && !json_is_string(id)) return oai_fail(e, 400, "invalid_type", param, "tool call %zu: 'id' must be a string", i);
        char *args_text = NULL;
        if (json_is_string(args)) args_text = em_strdup(json_string_value(args));
        else if (json_is_object(args)) args_text = json_dumps(args, JSON_COMPACT);
        else if (args) return oai_fail(e, 400, "invalid_type", param, "tool call %zu: 'arguments' must be a JSON string", i);
        em_status st = em_message_add_tool_call(m, id ? json_string_value(id) : NULL, json_string_value(name),
                                                args_text ? args_text : "{}");
        free(args_text);
        if (st != EM_OK) return oai_fail(e, 500, NULL, param, "out of memory");
    }
    return true;
}

static bool parse_message(json_t *msg, size_t i, em_request *req, oai_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(msg)) return oai_fail(e, 400, "invalid_type", param, "each message must be an object");
    em_role role = EM_ROLE_USER;
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!parse_role(json_object_get(msg, "role"), param, &role, e)) return false;
    em_message *m;
    if (em_request_add_message(req, role, NULL, &m) != EM_OK) return oai_fail(e, 500, NULL, param, "out of memory");
    snprintf(param, sizeof param, "messages[%zu].content", i);
    json_t *content = field(msg, "content");
    if (!content && role != EM_ROLE_ASSISTANT)
        return oai_fail(e, 400, "missing_required_parameter", param, "'content' is required for %s messages",
                        em_role_name(role));
    if (!parse_content(content, param, &m->content, e)) return false;
    json_t *name = field(msg, "name"), *reasoning = field(msg, "reasoning_content");
    if (!reasoning) reasoning = field(msg, "reasoning");
    snprintf(param, sizeof param, "messages[%zu].name", i);
    if (name && !json_is_string(name)) return oai_fail(e, 400, "invalid_type", param, "'name' must be a string");
    if (name && !(m->name = em_strdup(json_string_value(name)))) return oai_fail(e, 500, NULL, param, "out of memory");
    if (reasoning && json_is_string(reasoning) && role == EM_ROLE_ASSISTANT &&
        !(m->reasoning = em_strdup(json_string_value(reasoning))))
        return oai_fail(e, 500, NULL, param, "out of memory");
    json_t *calls = field(msg, "tool_calls");
    if (calls && role == EM_ROLE_ASSISTANT && !parse_tool_calls(calls, i, m, e)) return false;
    if (role == EM_ROLE_ASSISTANT && !m->content && !m->n_tool_calls) {
        snprintf(param, sizeof param, "messages[%zu].content", i);
        return oai_fail(e, 400, "missing_required_parameter", param, "an assistant message needs content or tool_calls");
    }
    if (role == EM_ROLE_TOOL) {
        json_t *id = field(msg, "tool_call_id");
        snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
        if (!json_is_string(id))
            return oai_fail(e, 400, "missing_required_parameter", param, "tool messages need a string 'tool_call_id'");
        if (!(m->tool_call_id = em_strdup(json_string_value(id)))) return oai_fail(e, 500, NULL, param, "out of memory");
    }
    return true;
}

static bool parse_tools(json_t *body, em_request *req, oai_error *e) {
    json_t *tools = field(body, "tools");
    if (!tools) return true;
    if (!json_is_array(tools)) return oai_fail(e, 400, "invalid_type", "tools", "'tools' must be a list");
    if (json_array_size(tools) > OAI_MAX_TOOLS)
        return oai_fail(e, 400, "invalid_value", "tools", "at most %d tools are allowed", OAI_MAX_TOOLS);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function"))
            return oai_fail(e, 400, "invalid_value", param, "tools must have type 'function'");
        json_t *name = json_object_get(fn, "name"), *params = field(fn, "parameters"), *desc = field(fn, "description");
        if (!json_is_object(fn) || !json_is_string(name) || !json_string_length(name))
            return oai_fail(e, 400, "missing_required_parameter", param, "a tool needs function.name");
        if (params && !json_is_object(params))
            return oai_fail(e, 400, "invalid_type", param, "function.parameters must be a JSON Schema object");
        if (desc && !json_is_string(desc)) return oai_fail(e, 400, "invalid_type", param, "function.description must be a string");
    }
    if (!(req->tools = json_deep_copy(tools))) return oai_fail(e, 500, NULL, "tools", "out of memory");
    return true;
}

static bool parse_tool_choice(json_t *body, em_request *req, oai_error *e) {
    json_t *tc = field(body, "tool_choice");
    if (!oai_get_bool(body, "parallel_tool_calls", &req->parallel_tool_calls, NULL, e)) return false;
    if (!tc) return true;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto")) req->tool_choice = EM_TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "none")) req->tool_choice = EM_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required")) req->tool_choice = EM_TOOL_CHOICE_REQUIRED;
        else return oai_fail(e, 400, "invalid_value", "tool_choice", "tool_choice must be 'auto', 'none', 'required' or an object");
        return true;
    }
    if (json_is_object(tc)) { /* {"type": "function", "function": {"name": ...}} */
        const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!name) return oai_fail(e, 400, "invalid_value", "tool_choice", "tool_choice.function.name must be a string");
        if (!(req->tool_choice_name = strdup(name))) return oai_fail(e, 500, NULL, "tool_choice", "out of memory");
        req->tool_choice = EM_TOOL_CHOICE_NAMED;
        return true;
    }
    return oai_fail(e, 400, "invalid_type", "tool_choice", "tool_choice must be a string or an object");
}

static bool parse_format_and_template(json_t *body, em_request *req, oai_error *e) {
    json_t *rf = field(body, "response_format");
    if (rf) {
        json_t *type = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(type))
            return oai_fail(e, 400, "invalid_type", "response_format", "response_format must be an object with a 'type'");
        const char *t = json_string_value(type);
        if (!strcmp(t, "json_object")) {
            req->response_json = true;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema"), *schema = json_object_get(js, "schema");
            if (!json_is_object(js) || !json_is_object(schema))
                return oai_fail(e, 400, "invalid_value", "response_format.json_schema",
                                "response_format json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}");
            if (!(req->response_schema = json_deep_copy(schema)))
                return oai_fail(e, 500, NULL, "response_format", "out of memory");
        } else if (strcmp(t, "text")) return oai_fail(e, 400, "invalid_value", "response_format", "unknown response_format type '%.40s'", t);
    }
    json_t *kw = field(body, "chat_template_kwargs"), *effort = field(body, "reasoning_effort");
    if (kw && !json_is_object(kw))
        return oai_fail(e, 400, "invalid_type", "chat_template_kwargs", "chat_template_kwargs must be an object");
    if (effort && !json_is_string(effort))
        return oai_fail(e, 400, "invalid_type", "reasoning_effort", "reasoning_effort must be a string");
    if (!kw && !effort) return true;
    req->template_kwargs = kw ? json_deep_copy(kw) : json_object();
    if (!req->template_kwargs) return oai_fail(e, 500, NULL, "chat_template_kwargs", "out of memory");
    if (effort && !json_object_get(req->template_kwargs, "reasoning_effort"))
        json_object_set(req->template_kwargs, "reasoning_effort", effort);
    return true;
}

bool oai_chat_parse(json_t *body, const char *served_model, int vocab, em_request *req, oai_stream_opts *so,
                    oai_error *e) {
    req->chat = true;
    json_t *msgs = json_object_get(body, "messages");
    if (!msgs) return oai_fail(e, 400, "missing_required_parameter", "messages", "'messages' is required");
    if (!json_is_array(msgs)) return oai_fail(e, 400, "invalid_type", "messages", "'messages' must be a list");
    if (!json_array_size(msgs)) return oai_fail(e, 400, "invalid_value", "messages", "'messages' must not be empty");
    if (json_array_size(msgs) > OAI_MAX_MESSAGES)
        return oai_fail(e, 400, "invalid_value", "messages", "at most %d messages are allowed", OAI_MAX_MESSAGES);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if (!parse_message(m, i, req, e)) return false;
    if (!oai_parse_common(body, served_model, vocab, req, so, e)) return false;
    long long k;
    bool has;
    if (!oai_get_int(body, "max_tokens", 1, 1 << 30, &k, &has, e)) return false;
    if (has) req->max_tokens = (int)k;
    if (!oai_get_int(body, "max_completion_tokens", 1, 1 << 30, &k, &has, e)) return false;
    if (has) req->max_tokens = (int)k;
    if (!oai_get_bool(body, "logprobs", &req->logprobs, NULL, e)) return false;
    if (!oai_get_int(body, "top_logprobs", 0, EM_MAX_TOP_LOGPROBS, &k, &has, e)) return false;
    if (has && !req->logprobs)
        return oai_fail(e, 400, "invalid_value", "top_logprobs", "top_logprobs requires logprobs to be true");
    if (has) req->top_logprobs = (int)k;
    if (!parse_tools(body, req, e) || !parse_tool_choice(body, req, e)) return false;
    return parse_format_and_template(body, req, e);
}
