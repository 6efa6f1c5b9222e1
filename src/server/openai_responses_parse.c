/* openai_responses_parse.c — /v1/responses JSON → the internal request.
 *
 * Input items are checked and normalised as they are read (a string input
 * becomes one user message item, string contents become one text part, and
 * every item gets an id), because the normalised items are what the store
 * keeps, what GET .../input_items returns and what a later request that
 * names this response replays. Errors name the parameter the way OpenAI
 * does ("input[2].content[0].type"). */
#include "server/openai_responses.h"

#include "base/alloc.h"
#include "server/server.h"

#include <stdio.h>
#include <string.h>

#define RESP_MAX_ITEMS 8192
#define RESP_MAX_TOOLS 512
#define RESP_MAX_METADATA 16

static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static bool oom(oai_error *e, const char *param) { return oai_fail(e, 500, NULL, param, "out of memory"); }

void oai_resp_opts_free(oai_resp_opts *o) {
    json_decref(o->input);
    free(o->previous_response_id);
    json_decref(o->instructions);
    json_decref(o->tools);
    json_decref(o->tool_choice);
    json_decref(o->metadata);
    json_decref(o->reasoning);
    json_decref(o->temperature);
    json_decref(o->top_p);
    json_decref(o->max_output_tokens);
    memset(o, 0, sizeof *o);
}

/* ---- input items ------------------------------------------------------------ */

/* A content list of text parts for one message, normalised. Assistant
 * messages hold output_text parts, the others input_text parts. */
static bool norm_content(json_t *c, const char *role, const char *param, json_t **out, oai_error *e) {
    bool assistant = !strcmp(role, "assistant");
    char p[128];
    if (json_is_string(c)) {
        *out = json_pack("[{s:s, s:O}]", "type", assistant ? "output_text" : "input_text", "text", c);
        if (*out && assistant) json_object_set_new(json_array_get(*out, 0), "annotations", json_array());
        return *out ? true : oom(e, param);
    }
    if (!json_is_array(c)) return oai_fail(e, 400, "invalid_type", param, "'content' must be a string or a list of parts");
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        json_t *type = json_object_get(part, "type");
        if (!json_is_object(part) || !json_is_string(type))
            return oai_fail(e, 400, "invalid_type", p, "each content part must be an object with a string 'type'");
        const char *t = json_string_value(type);
        if (!strcmp(t, "input_image") || !strcmp(t, "input_video") || !strcmp(t, "input_file") ||
            !strcmp(t, "input_audio"))
            return oai_fail(e, 400, "unsupported_content", p,
                            "content part type '%s' is not supported: this model accepts text only", t);
        if (!strcmp(t, "refusal")) {
            if (!json_is_string(json_object_get(part, "refusal")))
                return oai_fail(e, 400, "invalid_type", p, "a refusal part needs a string 'refusal'");
            continue;
        }
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text"))
            return oai_fail(e, 400, "invalid_value", p,
                            "unknown content part type '%.60s' (expected input_text or output_text)", t);
        if (!json_is_string(json_object_get(part, "text")))
            return oai_fail(e, 400, "invalid_type", p, "a '%s' part needs a string 'text'", t);
    }
    if (!(*out = json_deep_copy(c))) return oom(e, param);
    return true;
}

static bool parse_role(json_t *r, const char *param, const char **out, oai_error *e) {
    static const char *const roles[] = {"user", "assistant", "system", "developer"};
    if (!json_is_string(r)) return oai_fail(e, 400, "missing_required_parameter", param, "a message item needs a string 'role'");
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(json_string_value(r), roles[i])) {
            *out = roles[i];
            return true;
        }
    return oai_fail(e, 400, "invalid_value", param, "role '%.40s' is not one of user, assistant, system, developer",
                    json_string_value(r));
}

static bool norm_message(json_t *item, const char *param, json_t **out, oai_error *e) {
    char p[96];
    const char *role = "user";
    snprintf(p, sizeof p, "%s.role", param);
    if (!parse_role(json_object_get(item, "role"), p, &role, e)) return false;
    json_t *content = field(item, "content");
    snprintf(p, sizeof p, "%s.content", param);
    if (!content) return oai_fail(e, 400, "missing_required_parameter", p, "a message item needs 'content'");
    json_t *parts;
    if (!norm_content(content, role, p, &parts, e)) return false;
    json_t *id = field(item, "id");
    if (id && !json_is_string(id)) {
        json_decref(parts);
        return oai_fail(e, 400, "invalid_type", param, "'id' must be a string");
    }
    char gen[48];
    srv_random_id("msg_", gen, sizeof gen);
    *out = json_pack("{s:s, s:s, s:s, s:o}", "id", id ? json_string_value(id) : gen, "type", "message", "role", role,
                     "content", parts);
    if (*out && !strcmp(role, "assistant")) json_object_set_new(*out, "status", json_string("completed"));
    return *out ? true : oom(e, param);
}

static bool norm_function_call(json_t *item, const char *param, json_t **out, oai_error *e) {
    json_t *call_id = json_object_get(item, "call_id"), *name = json_object_get(item, "name");
    json_t *args = json_object_get(item, "arguments"), *id = field(item, "id");
    if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args))
        return oai_fail(e, 400, "missing_required_parameter", param,
                        "a function_call item needs string 'call_id', 'name' and 'arguments'");
    if (id && !json_is_string(id)) return oai_fail(e, 400, "invalid_type", param, "'id' must be a string");
    char gen[48];
    srv_random_id("fc_", gen, sizeof gen);
    *out = json_pack("{s:s, s:s, s:s, s:O, s:O, s:O}", "id", id ? json_string_value(id) : gen, "type", "function_call",
                     "status", "completed", "call_id", call_id, "name", name, "arguments", args);
    return *out ? true : oom(e, param);
}

/* function_call_output: output is a string or a list of input_text parts. */
static bool norm_function_output(json_t *item, const char *param, json_t **out, oai_error *e) {
    json_t *call_id = json_object_get(item, "call_id"), *output = json_object_get(item, "output"), *id = field(item, "id");
    char p[96];
    if (!json_is_string(call_id))
        return oai_fail(e, 400, "missing_required_parameter", param, "a function_call_output item needs a string 'call_id'");
    if (id && !json_is_string(id)) return oai_fail(e, 400, "invalid_type", param, "'id' must be a string");
    snprintf(p, sizeof p, "%s.output", param);
    json_t *norm;
    if (json_is_string(output)) norm = json_incref(output);
    else if (json_is_array(output)) {
        if (!norm_content(output, "tool", p, &norm, e)) return false;
    } else return oai_fail(e, 400, "invalid_type", p, "'output' must be a string or a list of input_text parts");
    char gen[48];
    srv_random_id("fco_", gen, sizeof gen);
    *out = json_pack("{s:s, s:s, s:s, s:O, s:o}", "id", id ? json_string_value(id) : gen, "type", "function_call_output",
                     "status", "completed", "call_id", call_id, "output", norm);
    return *out ? true : oom(e, param);
}

static bool norm_reasoning(json_t *item, const char *param, json_t **out, oai_error *e) {
    json_t *id = field(item, "id");
    if (id && !json_is_string(id)) return oai_fail(e, 400, "invalid_type", param, "'id' must be a string");
    if (!(*out = json_deep_copy(item))) return oom(e, param);
    if (!id) {
        char gen[48];
        srv_random_id("rs_", gen, sizeof gen);
        json_object_set_new(*out, "id", json_string(gen));
    }
    return true;
}

static bool norm_item(json_t *item, size_t i, json_t **out, oai_error *e) {
    char param[48];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(item)) return oai_fail(e, 400, "invalid_type", param, "each input item must be an object");
    json_t *type = field(item, "type");
    if (type && !json_is_string(type)) return oai_fail(e, 400, "invalid_type", param, "'type' must be a string");
    const char *t = type ? json_string_value(type) : "message"; /* {role, content} is a message */
    if (!strcmp(t, "message")) return norm_message(item, param, out, e);
    if (!strcmp(t, "function_call")) return norm_function_call(item, param, out, e);
    if (!strcmp(t, "function_call_output")) return norm_function_output(item, param, out, e);
    if (!strcmp(t, "reasoning")) return norm_reasoning(item, param, out, e);
    return oai_fail(e, 400, "invalid_value", param, "input item type '%.60s' is not supported", t);
}

static bool parse_input(json_t *body, oai_resp_opts *o, oai_error *e) {
    json_t *in = field(body, "input");
    if (!in) return oai_fail(e, 400, "missing_required_parameter", "input", "'input' is required");
    if (json_is_string(in)) {
        char gen[48];
        srv_random_id("msg_", gen, sizeof gen);
        o->input = json_pack("[{s:s, s:s, s:s, s:[{s:s, s:O}]}]", "id", gen, "type", "message", "role", "user", "content",
                             "type", "input_text", "text", in);
        return o->input ? true : oom(e, "input");
    }
    if (!json_is_array(in)) return oai_fail(e, 400, "invalid_type", "input", "'input' must be a string or a list of items");
    if (json_array_size(in) > RESP_MAX_ITEMS)
        return oai_fail(e, 400, "invalid_value", "input", "at most %d input items are allowed", RESP_MAX_ITEMS);
    if (!(o->input = json_array())) return oom(e, "input");
    size_t i;
    json_t *item;
    json_array_foreach(in, i, item) {
        json_t *n;
        if (!norm_item(item, i, &n, e)) return false;
        if (json_array_append_new(o->input, n)) return oom(e, "input");
    }
    return true;
}

/* ---- tools and options -------------------------------------------------------- */

/* Responses tools {type, name, description, parameters} → the chat shape
 * the template sees {type, function: {name, description, parameters}}. */
static bool parse_tools(json_t *body, em_request *req, oai_resp_opts *o, oai_error *e) {
    json_t *tools = field(body, "tools");
    if (!tools) return (o->tools = json_array()) ? true : oom(e, "tools");
    if (!json_is_array(tools)) return oai_fail(e, 400, "invalid_type", "tools", "'tools' must be a list");
    if (json_array_size(tools) > RESP_MAX_TOOLS)
        return oai_fail(e, 400, "invalid_value", "tools", "at most %d tools are allowed", RESP_MAX_TOOLS);
    json_t *chat = json_array();
    if (!chat) return oom(e, "tools");
    req->tools = chat;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type");
        if (!json_is_object(t) || !json_is_string(type))
            return oai_fail(e, 400, "invalid_type", param, "each tool must be an object with a string 'type'");
        if (strcmp(json_string_value(type), "function"))
            return oai_fail(e, 400, "unsupported_value", param,
                            "tool type '%.60s' is not supported; this server runs function tools only",
                            json_string_value(type));
        json_t *name = json_object_get(t, "name"), *params = field(t, "parameters"), *desc = field(t, "description");
        if (!json_is_string(name) || !json_string_length(name))
            return oai_fail(e, 400, "missing_required_parameter", param, "a function tool needs a 'name'");
        if (params && !json_is_object(params))
            return oai_fail(e, 400, "invalid_type", param, "'parameters' must be a JSON Schema object");
        if (desc && !json_is_string(desc)) return oai_fail(e, 400, "invalid_type", param, "'description' must be a string");
        json_t *fn = json_pack("{s:O}", "name", name);
        if (fn && desc) json_object_set(fn, "description", desc);
        if (fn && params) json_object_set(fn, "parameters", params);
        if (!fn || json_array_append_new(chat, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
            return oom(e, param);
    }
    return (o->tools = json_deep_copy(tools)) ? true : oom(e, "tools");
}

static bool parse_tool_choice(json_t *body, em_request *req, oai_resp_opts *o, oai_error *e) {
    json_t *tc = field(body, "tool_choice");
    if (!oai_get_bool(body, "parallel_tool_calls", &req->parallel_tool_calls, NULL, e)) return false;
    if (!tc || (json_is_string(tc) && !strcmp(json_string_value(tc), "auto"))) {
        o->tool_choice = json_string("auto");
        return o->tool_choice ? true : oom(e, "tool_choice");
    }
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "none")) {
        req->tool_choice = EM_TOOL_CHOICE_NONE;
        o->tool_choice = json_string("none");
        return o->tool_choice ? true : oom(e, "tool_choice");
    }
    /* required / a named function: enforced by a grammar over the model's
     * tool-call syntax (engine/structured.c) */
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "required")) {
        req->tool_choice = EM_TOOL_CHOICE_REQUIRED;
        o->tool_choice = json_string("required");
        return o->tool_choice ? true : oom(e, "tool_choice");
    }
    if (json_is_object(tc)) { /* {"type": "function", "name": "..."} */
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name || strcmp(json_string_value(json_object_get(tc, "type")) ? json_string_value(json_object_get(tc, "type")) : "", "function"))
            return oai_fail(e, 400, "invalid_value", "tool_choice", "tool_choice must be {\"type\": \"function\", \"name\": ...}");
        if (!(req->tool_choice_name = strdup(name))) return oom(e, "tool_choice");
        req->tool_choice = EM_TOOL_CHOICE_NAMED;
        o->tool_choice = json_deep_copy(tc);
        return o->tool_choice ? true : oom(e, "tool_choice");
    }
    return oai_fail(e, 400, "invalid_value", "tool_choice", "tool_choice must be 'auto', 'none', 'required' or an object");
}

static bool parse_text_and_reasoning(json_t *body, em_request *req, oai_resp_opts *o, oai_error *e) {
    json_t *text = field(body, "text");
    if (text && !json_is_object(text)) return oai_fail(e, 400, "invalid_type", "text", "'text' must be an object");
    json_t *fmt = text ? field(text, "format") : NULL;
    if (fmt) {
        json_t *type = json_object_get(fmt, "type");
        if (!json_is_object(fmt) || !json_is_string(type))
            return oai_fail(e, 400, "invalid_type", "text.format", "text.format must be an object with a 'type'");
        const char *t = json_string_value(type);
        if (!strcmp(t, "json_object")) {
            req->response_json = true;
        } else if (!strcmp(t, "json_schema")) { /* {"type", "name", "schema", "strict"} */
            json_t *schema = json_object_get(fmt, "schema");
            if (!json_is_object(schema))
                return oai_fail(e, 400, "invalid_value", "text.format.schema", "text.format json_schema needs a 'schema' object");
            if (!(req->response_schema = json_deep_copy(schema))) return oom(e, "text.format");
        } else if (strcmp(t, "text")) return oai_fail(e, 400, "invalid_value", "text.format", "unknown text.format type '%.40s'", t);
    }
    json_t *r = field(body, "reasoning");
    if (r && !json_is_object(r)) return oai_fail(e, 400, "invalid_type", "reasoning", "'reasoning' must be an object");
    json_t *effort = r ? field(r, "effort") : NULL;
    if (effort && !json_is_string(effort)) return oai_fail(e, 400, "invalid_type", "reasoning.effort", "reasoning.effort must be a string");
    if (effort) {
        const char *v = json_string_value(effort);
        static const char *const ok[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
        bool known = false;
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) known |= !strcmp(v, ok[i]);
        if (!known)
            return oai_fail(e, 400, "invalid_value", "reasoning.effort",
                            "reasoning.effort must be one of none, minimal, low, medium, high, xhigh");
        /* Templates switch thinking with enable_thinking; some also read reasoning_effort. */
        bool think = strcmp(v, "none") && strcmp(v, "minimal");
        req->template_kwargs = json_pack("{s:b, s:O}", "enable_thinking", think, "reasoning_effort", effort);
        if (!req->template_kwargs) return oom(e, "reasoning");
    }
    o->reasoning = json_pack("{s:O?, s:n}", "effort", effort, "summary");
    return o->reasoning ? true : oom(e, "reasoning");
}

static bool parse_metadata(json_t *body, oai_resp_opts *o, oai_error *e) {
    json_t *m = field(body, "metadata");
    if (!m) return (o->metadata = json_object()) ? true : oom(e, "metadata");
    if (!json_is_object(m)) return oai_fail(e, 400, "invalid_type", "metadata", "'metadata' must be an object");
    if (json_object_size(m) > RESP_MAX_METADATA)
        return oai_fail(e, 400, "invalid_value", "metadata", "metadata holds at most %d keys", RESP_MAX_METADATA);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (strlen(k) > 64) return oai_fail(e, 400, "invalid_value", "metadata", "metadata keys are at most 64 characters");
        if (!json_is_string(v) || json_string_length(v) > 512)
            return oai_fail(e, 400, "invalid_value", "metadata", "metadata values must be strings of at most 512 characters");
    }
    return (o->metadata = json_deep_copy(m)) ? true : oom(e, "metadata");
}

static bool parse_sampling(json_t *body, em_request *req, oai_resp_opts *o, oai_error *e) {
    double x;
    long long k;
    bool has;
    if (!oai_get_number(body, "temperature", 0, 2, &x, &has, e)) return false;
    if (has) req->sampling.temperature = (float)x, req->set |= EM_SET_TEMPERATURE;
    o->temperature = has ? json_real(x) : json_null();
    if (!oai_get_number(body, "top_p", 0, 1, &x, &has, e)) return false;
    if (has) req->sampling.top_p = x > 0 ? (float)x : 1e-6f, req->set |= EM_SET_TOP_P;
    o->top_p = has ? json_real(x) : json_null();
    if (!oai_get_int(body, "max_output_tokens", 1, 1 << 30, &k, &has, e)) return false;
    if (has) req->max_tokens = (int)k;
    o->max_output_tokens = has ? json_integer(k) : json_null();
    if (!oai_get_int(body, "seed", INT64_MIN, INT64_MAX, &k, &has, e)) return false; /* an ember extension */
    if (has) req->sampling.seed = (uint64_t)k, req->sampling.has_seed = 1, req->set |= EM_SET_SEED;
    return o->temperature && o->top_p && o->max_output_tokens ? true : oom(e, "temperature");
}

bool oai_responses_parse(json_t *body, const char *served_model, em_request *req, oai_resp_opts *o, oai_error *e) {
    req->chat = true;
    o->store = true;
    json_t *model = field(body, "model");
    if (model && !json_is_string(model)) return oai_fail(e, 400, "invalid_type", "model", "'model' must be a string");
    if (model && strcmp(json_string_value(model), served_model))
        return oai_fail(e, 404, "model_not_found", "model", "the model '%.200s' does not exist; this server serves '%s'",
                        json_string_value(model), served_model);
    if (!oai_get_bool(body, "stream", &o->stream, NULL, e) || !oai_get_bool(body, "store", &o->store, NULL, e))
        return false;
    bool bg = false;
    if (!oai_get_bool(body, "background", &bg, NULL, e)) return false;
    if (bg) return oai_fail(e, 400, "unsupported_value", "background", "background responses are not supported");
    if (field(body, "conversation"))
        return oai_fail(e, 400, "unsupported_parameter", "conversation",
                        "conversations are not supported; chain responses with previous_response_id");
    json_t *prev = field(body, "previous_response_id"), *ins = field(body, "instructions");
    if (prev && (!json_is_string(prev) || !json_string_length(prev)))
        return oai_fail(e, 400, "invalid_type", "previous_response_id", "'previous_response_id' must be a response id");
    if (prev && !(o->previous_response_id = em_strdup(json_string_value(prev)))) return oom(e, "previous_response_id");
    if (ins && !json_is_string(ins)) return oai_fail(e, 400, "invalid_type", "instructions", "'instructions' must be a string");
    o->instructions = ins ? json_incref(ins) : json_null();
    return parse_input(body, o, e) && parse_sampling(body, req, o, e) && parse_tools(body, req, o, e) &&
           parse_tool_choice(body, req, o, e) && parse_text_and_reasoning(body, req, o, e) && parse_metadata(body, o, e);
}

/* ---- items → messages ----------------------------------------------------------- */

/* The text of a normalised content list (text parts joined), malloc'd. */
static char *parts_text(json_t *parts) {
    if (json_is_string(parts)) return em_strdup(json_string_value(parts));
    size_t total = 0, i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        json_t *t = json_object_get(p, "text");
        if (!json_is_string(t)) t = json_object_get(p, "refusal");
        if (json_is_string(t)) total += json_string_length(t);
    }
    char *s = em_malloc(total + 1);
    if (!s) return NULL;
    size_t at = 0;
    json_array_foreach(parts, i, p) {
        json_t *t = json_object_get(p, "text");
        if (!json_is_string(t)) t = json_object_get(p, "refusal");
        if (!json_is_string(t)) continue;
        memcpy(s + at, json_string_value(t), json_string_length(t));
        at += json_string_length(t);
    }
    s[at] = 0;
    return s;
}

static em_role role_of(const char *r) {
    if (!strcmp(r, "system")) return EM_ROLE_SYSTEM;
    if (!strcmp(r, "developer")) return EM_ROLE_DEVELOPER;
    if (!strcmp(r, "assistant")) return EM_ROLE_ASSISTANT;
    return EM_ROLE_USER;
}

/* Adds one normalised item; `param` names it in errors. */
static bool add_item(json_t *item, const char *param, em_request *req, oai_error *e) {
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!type) return oai_fail(e, 400, "invalid_value", param, "an item has no type");
    if (!strcmp(type, "reasoning")) return true; /* not replayed: templates drop earlier reasoning */
    if (!strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(item, "role"));
        char *text = parts_text(json_object_get(item, "content"));
        if (!role || !text) {
            free(text);
            return oai_fail(e, 400, "invalid_value", param, "a message item needs a role and text content");
        }
        em_message *m;
        em_status st = em_request_add_message(req, role_of(role), NULL, &m);
        if (st == EM_OK) m->content = text;
        else free(text);
        return st == EM_OK ? true : oom(e, param);
    }
    if (!strcmp(type, "function_call")) {
        /* Calls made in one turn join the assistant message before them. */
        em_message *m = req->n_messages ? &req->messages[req->n_messages - 1] : NULL;
        if (m && m->role != EM_ROLE_ASSISTANT) m = NULL;
        if (!m && em_request_add_message(req, EM_ROLE_ASSISTANT, NULL, &m) != EM_OK) return oom(e, param);
        const char *call_id = json_string_value(json_object_get(item, "call_id"));
        const char *name = json_string_value(json_object_get(item, "name"));
        const char *args = json_string_value(json_object_get(item, "arguments"));
        if (!call_id || !name || !args) return oai_fail(e, 400, "invalid_value", param, "a function_call item is incomplete");
        return em_message_add_tool_call(m, call_id, name, args) == EM_OK ? true : oom(e, param);
    }
    if (!strcmp(type, "function_call_output")) {
        const char *call_id = json_string_value(json_object_get(item, "call_id"));
        char *text = parts_text(json_object_get(item, "output"));
        em_message *m;
        if (!call_id || !text) {
            free(text);
            return oai_fail(e, 400, "invalid_value", param, "a function_call_output item is incomplete");
        }
        em_status st = em_request_add_message(req, EM_ROLE_TOOL, NULL, &m);
        if (st == EM_OK) {
            m->content = text;
            m->tool_call_id = em_strdup(call_id);
        } else free(text);
        return st == EM_OK && m->tool_call_id ? true : oom(e, param);
    }
    return oai_fail(e, 400, "invalid_value", param, "item type '%.60s' cannot be replayed", type);
}

bool oai_responses_build_messages(const oai_resp_opts *o, json_t *earlier, em_request *req, oai_error *e) {
    if (json_is_string(o->instructions) &&
        em_request_add_message(req, EM_ROLE_SYSTEM, json_string_value(o->instructions), NULL) != EM_OK)
        return oom(e, "instructions");
    size_t i;
    json_t *item;
    char param[64];
    if (json_is_array(earlier))
        json_array_foreach(earlier, i, item) {
            snprintf(param, sizeof param, "previous_response_id");
            if (!add_item(item, param, req, e)) return false;
        }
    json_array_foreach(o->input, i, item) {
        snprintf(param, sizeof param, "input[%zu]", i);
        if (!add_item(item, param, req, e)) return false;
    }
    if (!req->n_messages) return oai_fail(e, 400, "invalid_value", "input", "the input holds no messages");
    return true;
}
