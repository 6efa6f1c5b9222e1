/* anthropic_parse.c — Anthropic Messages JSON → the internal request.
 *
 * Content blocks map onto the internal messages the chat templates know:
 * text blocks are joined into a message's content, thinking blocks become
 * the assistant's earlier reasoning, tool_use blocks its tool calls, and
 * each tool_result block a "tool" message. Tools are translated to the
 * OpenAI function shape that templates expect. Unknown top-level fields
 * are refused, as the Anthropic API refuses them, so a feature this server
 * lacks (structured outputs, server tools, MCP...) is never silently
 * ignored. Errors carry the JSON path ("messages.2.content.0") in param. */
#include "server/anthropic.h"

#include "base/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANT_MAX_MESSAGES 8192
#define ANT_MAX_BLOCKS 4096
#define ANT_MAX_TOOLS 512
#define ANT_MAX_STOP 32
#define ANT_MAX_STOP_LEN 256
#define ANT_MIN_THINKING_BUDGET 1024

static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

__attribute__((format(printf, 3, 4))) static bool bad(oai_error *e, const char *path, const char *fmt, ...) {
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return oai_fail(e, 400, "invalid_request_error", path, "%s", msg);
}

static bool oom(oai_error *e, const char *path) { return oai_fail(e, 500, NULL, path, "out of memory"); }

/* Appends s to b, separated from earlier text by a newline (blocks of one
 * message read as paragraphs, not as one run-on word). */
static bool join(oai_buf *b, const char *s, size_t len) {
    if (b->len && !oai_buf_add(b, "\n", 1)) return false;
    return oai_buf_add(b, s, len);
}

static char *take(oai_buf *b) {
    char *s = b->data ? b->data : em_strdup("");
    memset(b, 0, sizeof *b);
    return s;
}

/* ---- blocks ------------------------------------------------------------ */

static bool block_text(json_t *blk, const char *path, oai_buf *out, oai_error *e) {
    json_t *text = json_object_get(blk, "text");
    if (!json_is_string(text)) return bad(e, path, "a text block needs a string 'text'");
    if (!join(out, json_string_value(text), json_string_length(text))) return oom(e, path);
    return true;
}

static bool no_vision(const char *path, oai_error *e) {
    return bad(e, path, "image blocks need a vision model; this model reads text only");
}

/* tool_result content: a string, or a list of text blocks (images refused). */
static bool tool_result_text(json_t *c, const char *path, oai_buf *out, oai_error *e) {
    if (!c) return true;
    if (json_is_string(c)) return oai_buf_add(out, json_string_value(c), json_string_length(c)) || oom(e, path);
    if (!json_is_array(c)) return bad(e, path, "'content' must be a string or a list of blocks");
    size_t i;
    json_t *blk;
    json_array_foreach(c, i, blk) {
        char p[128];
        snprintf(p, sizeof p, "%s.%zu", path, i);
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !type) return bad(e, p, "each block must be an object with a 'type'");
        if (!strcmp(type, "image")) return no_vision(p, e);
        if (strcmp(type, "text")) return bad(e, p, "a tool_result holds text blocks, not '%.40s'", type);
        if (!block_text(blk, p, out, e)) return false;
    }
    return true;
}

/* The name of the earlier tool_use with this id, or NULL when none. */
static const char *tool_use_name(const em_request *req, const char *id) {
    for (size_t i = req->n_messages; i-- > 0;)
        for (size_t k = 0; k < req->messages[i].n_tool_calls; k++) {
            const em_tool_call *c = &req->messages[i].tool_calls[k];
            if (c->id && !strcmp(c->id, id)) return c->name;
        }
    return NULL;
}

/* A tool_result block becomes a "tool" message. An error result is marked
 * "Error: " so the model can tell a failed call from a result: chat
 * templates have no field for it. */
static bool block_tool_result(json_t *blk, const char *path, em_request *req, oai_error *e) {
    json_t *id = json_object_get(blk, "tool_use_id"), *is_error = field(blk, "is_error");
    if (!json_is_string(id)) return bad(e, path, "a tool_result block needs a string 'tool_use_id'");
    if (is_error && !json_is_boolean(is_error)) return bad(e, path, "'is_error' must be a boolean");
    const char *name = tool_use_name(req, json_string_value(id));
    if (!name)
        return bad(e, path, "tool_use_id '%.80s' does not match any earlier tool_use block", json_string_value(id));
    oai_buf result = {0}, text = {0};
    bool ok = tool_result_text(field(blk, "content"), path, &result, e);
    if (ok && json_is_true(is_error) && !oai_buf_add(&text, "Error: ", 7)) ok = oom(e, path);
    if (ok && !oai_buf_add(&text, result.data ? result.data : "", result.len)) ok = oom(e, path);
    oai_buf_free(&result);
    em_message *m = NULL;
    char *name_copy = ok ? em_strdup(name) : NULL; /* before adding: the add may move the messages */
    if (ok && (!name_copy || em_request_add_message(req, EM_ROLE_TOOL, text.data ? text.data : "", &m) != EM_OK))
        ok = oom(e, path);
    if (ok && !(m->tool_call_id = em_strdup(json_string_value(id)))) ok = oom(e, path);
    if (ok) {
        m->name = name_copy;
        name_copy = NULL;
    }
    free(name_copy);
    oai_buf_free(&text);
    return ok;
}

static bool block_tool_use(json_t *blk, const char *path, em_message *m, oai_error *e) {
    json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name"), *input = json_object_get(blk, "input");
    if (!json_is_string(id) || !json_is_string(name))
        return bad(e, path, "a tool_use block needs string 'id' and 'name'");
    if (!json_is_object(input)) return bad(e, path, "a tool_use block's 'input' must be an object");
    char *args = json_dumps(input, JSON_COMPACT);
    em_status st = args ? em_message_add_tool_call(m, json_string_value(id), json_string_value(name), args) : EM_ERR_NOMEM;
    free(args);
    return st == EM_OK || oom(e, path);
}

typedef struct msg_acc {
    oai_buf text, thinking;
} msg_acc;

/* One assistant block into m / acc. */
static bool assistant_block(json_t *blk, const char *type, const char *path, em_message *m, msg_acc *acc,
                            oai_error *e) {
    if (!strcmp(type, "text")) return block_text(blk, path, &acc->text, e);
    if (!strcmp(type, "tool_use")) return block_tool_use(blk, path, m, e);
    if (!strcmp(type, "thinking")) {
        json_t *t = json_object_get(blk, "thinking"), *sig = json_object_get(blk, "signature");
        if (!json_is_string(t) || !json_is_string(sig))
            return bad(e, path, "a thinking block needs string 'thinking' and 'signature'");
        return join(&acc->thinking, json_string_value(t), json_string_length(t)) || oom(e, path);
    }
    if (!strcmp(type, "redacted_thinking")) /* opaque data from another server: nothing to show the model */
        return json_is_string(json_object_get(blk, "data")) ||
               bad(e, path, "a redacted_thinking block needs a string 'data'");
    return bad(e, path, "assistant messages hold text, thinking, redacted_thinking and tool_use blocks, not '%.40s'",
               type);
}

static bool user_block(json_t *blk, const char *type, const char *path, em_request *req, msg_acc *acc, oai_error *e) {
    if (!strcmp(type, "text")) return block_text(blk, path, &acc->text, e);
    if (!strcmp(type, "tool_result")) return block_tool_result(blk, path, req, e);
    if (!strcmp(type, "image")) return no_vision(path, e);
    return bad(e, path, "user messages hold text, image and tool_result blocks; '%.40s' is not supported", type);
}

/* ---- messages ---------------------------------------------------------- */

static bool parse_message(json_t *msg, size_t i, em_request *req, oai_error *e) {
    char path[96];
    snprintf(path, sizeof path, "messages.%zu", i);
    if (!json_is_object(msg)) return bad(e, path, "each message must be an object");
    const char *role = json_string_value(json_object_get(msg, "role"));
    bool assistant = role && !strcmp(role, "assistant");
    if (!role || (!assistant && strcmp(role, "user")))
        return bad(e, path, "'role' must be 'user' or 'assistant' (the system prompt goes in 'system')");
    json_t *content = json_object_get(msg, "content");
    snprintf(path, sizeof path, "messages.%zu.content", i);
    if (!json_is_string(content) && !json_is_array(content))
        return bad(e, path, "'content' must be a string or a list of content blocks");
    if (json_is_array(content) && !json_array_size(content))
        return bad(e, path, "a message needs at least one content block");
    if (json_array_size(content) > ANT_MAX_BLOCKS) return bad(e, path, "too many content blocks");
    em_message *m = NULL;
    if (assistant && em_request_add_message(req, EM_ROLE_ASSISTANT, NULL, &m) != EM_OK) return oom(e, path);
    size_t at_assistant = req->n_messages - 1;
    msg_acc acc = {0};
    bool ok = true;
    if (json_is_string(content)) ok = oai_buf_add(&acc.text, json_string_value(content), json_string_length(content)) || oom(e, path);
    size_t k;
    json_t *blk;
    json_array_foreach(content, k, blk) {
        if (!ok) break;
        snprintf(path, sizeof path, "messages.%zu.content.%zu", i, k);
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !type) ok = bad(e, path, "each content block must be an object with a 'type'");
        else if (assistant) ok = assistant_block(blk, type, path, &req->messages[at_assistant], &acc, e);
        else ok = user_block(blk, type, path, req, &acc, e);
    }
    if (ok && assistant) {
        m = &req->messages[at_assistant];
        /* Always a string, "" beside tool calls: templates such as Qwen3's
         * call string methods on an assistant's content. */
        m->content = take(&acc.text);
        if (acc.thinking.data) m->reasoning = take(&acc.thinking);
        if (!m->content || (acc.thinking.data && !m->reasoning)) ok = oom(e, path);
    } else if (ok && (acc.text.data || json_is_string(content))) {
        /* tool results, already added, precede the user's words */
        ok = em_request_add_message(req, EM_ROLE_USER, acc.text.data ? acc.text.data : "", NULL) == EM_OK || oom(e, path);
    }
    oai_buf_free(&acc.text);
    oai_buf_free(&acc.thinking);
    return ok;
}

static bool parse_messages(json_t *body, em_request *req, oai_error *e) {
    json_t *msgs = json_object_get(body, "messages");
    if (!msgs) return bad(e, "messages", "field required");
    if (!json_is_array(msgs)) return bad(e, "messages", "'messages' must be a list");
    if (!json_array_size(msgs)) return bad(e, "messages", "at least one message is required");
    if (json_array_size(msgs) > ANT_MAX_MESSAGES) return bad(e, "messages", "too many messages");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if (!parse_message(m, i, req, e)) return false;
    const char *last = json_string_value(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "role"));
    if (!strcmp(last, "assistant"))
        return bad(e, "messages", "the last message must be a user message: continuing a prefilled assistant "
                                  "reply is not supported by this server");
    return true;
}

/* system: a string or a list of text blocks; becomes the first message. */
static bool parse_system(json_t *body, em_request *req, oai_error *e) {
    json_t *sys = field(body, "system");
    if (!sys) return true;
    oai_buf text = {0};
    bool ok = true;
    if (json_is_string(sys)) ok = oai_buf_add(&text, json_string_value(sys), json_string_length(sys)) || oom(e, "system");
    else if (!json_is_array(sys)) ok = bad(e, "system", "'system' must be a string or a list of text blocks");
    size_t i;
    json_t *blk;
    json_array_foreach(sys, i, blk) {
        if (!ok) break;
        char path[48];
        snprintf(path, sizeof path, "system.%zu", i);
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !type || strcmp(type, "text")) ok = bad(e, path, "system blocks must be text blocks");
        else ok = block_text(blk, path, &text, e);
    }
    if (ok && em_request_add_message(req, EM_ROLE_SYSTEM, text.data ? text.data : "", NULL) != EM_OK) ok = oom(e, "system");
    oai_buf_free(&text);
    return ok;
}

/* ---- tools ------------------------------------------------------------- */

static bool valid_tool_name(const char *s, size_t len) {
    if (!len || len > 64) return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* {name, description, input_schema} → {type: function, function: {name, description, parameters}}. */
static bool parse_tool(json_t *t, const char *path, json_t *out, oai_error *e) {
    if (!json_is_object(t)) return bad(e, path, "each tool must be an object");
    json_t *type = field(t, "type"), *name = json_object_get(t, "name"), *desc = field(t, "description");
    json_t *schema = json_object_get(t, "input_schema");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "custom")))
        return bad(e, path, "tool type '%.60s' is not supported: this server runs client tools (type 'custom') only",
                   json_is_string(type) ? json_string_value(type) : "?");
    if (!json_is_string(name) || !valid_tool_name(json_string_value(name), json_string_length(name)))
        return bad(e, path, "a tool needs a 'name' of 1-64 letters, digits, '_' or '-'");
    if (desc && !json_is_string(desc)) return bad(e, path, "'description' must be a string");
    if (!json_is_object(schema)) return bad(e, path, "a tool needs an 'input_schema' object (a JSON Schema)");
    json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
    if (fn && desc) json_object_set(fn, "description", desc);
    json_t *tool = fn ? json_pack("{s:s, s:o}", "type", "function", "function", fn) : NULL;
    if (!tool || json_array_append_new(out, tool)) return oom(e, path);
    return true;
}

static bool parse_tools(json_t *body, em_request *req, oai_error *e) {
    json_t *tools = field(body, "tools");
    if (!tools) return true;
    if (!json_is_array(tools)) return bad(e, "tools", "'tools' must be a list");
    if (json_array_size(tools) > ANT_MAX_TOOLS) return bad(e, "tools", "too many tools");
    if (!(req->tools = json_array())) return oom(e, "tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char path[32];
        snprintf(path, sizeof path, "tools.%zu", i);
        if (!parse_tool(t, path, req->tools, e)) return false;
    }
    return true;
}

/* auto, none; any and tool force a call through constrained decoding. */
static bool parse_tool_choice(json_t *body, em_request *req, oai_error *e) {
    json_t *tc = field(body, "tool_choice");
    if (!tc) return true;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type) return bad(e, "tool_choice", "'tool_choice' must be an object with a 'type'");
    bool disable = false;
    if (!oai_get_bool(tc, "disable_parallel_tool_use", &disable, NULL, e)) return false;
    req->parallel_tool_calls = !disable;
    if (!strcmp(type, "auto")) req->tool_choice = EM_TOOL_CHOICE_AUTO;
    else if (!strcmp(type, "none")) req->tool_choice = EM_TOOL_CHOICE_NONE;
    else if (!strcmp(type, "any") || !strcmp(type, "tool")) {
        if (!json_array_size(req->tools)) return bad(e, "tool_choice", "tool_choice '%s' needs tools", type);
        req->tool_choice = EM_TOOL_CHOICE_REQUIRED;
        if (!strcmp(type, "any")) return true;
        json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name)) return bad(e, "tool_choice.name", "tool_choice 'tool' needs the tool's 'name'");
        bool known = false;
        size_t i;
        json_t *t;
        json_array_foreach(req->tools, i, t) known |= json_equal(json_object_get(json_object_get(t, "function"), "name"), name);
        if (!known) return bad(e, "tool_choice.name", "no tool is named '%.64s'", json_string_value(name));
        if (!(req->tool_choice_name = em_strdup(json_string_value(name)))) return oom(e, "tool_choice");
        req->tool_choice = EM_TOOL_CHOICE_NAMED;
    } else return bad(e, "tool_choice", "tool_choice type '%.40s' is not one of auto, any, tool, none", type);
    return true;
}

/* ---- generation parameters --------------------------------------------- */

static bool template_flag(em_request *req, const char *key, bool value, oai_error *e) {
    if (!req->template_kwargs && !(req->template_kwargs = json_object())) return oom(e, "thinking");
    if (json_object_set_new(req->template_kwargs, key, json_boolean(value))) return oom(e, "thinking");
    return true;
}

/* thinking: enabled (with a budget) / adaptive → the template's
 * enable_thinking true; disabled → false; absent: the template's default.
 * The budget is checked as the API checks it; generation does not yet
 * enforce it (max_tokens bounds the whole reply). */
static bool parse_thinking(json_t *body, ant_mode mode, em_request *req, oai_error *e) {
    json_t *th = field(body, "thinking");
    if (!th) return true;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type) return bad(e, "thinking", "'thinking' must be an object with a 'type'");
    if (!strcmp(type, "disabled")) return template_flag(req, "enable_thinking", false, e);
    if (!strcmp(type, "adaptive")) return template_flag(req, "enable_thinking", true, e);
    if (strcmp(type, "enabled")) return bad(e, "thinking", "thinking type '%.40s' is not one of enabled, disabled, adaptive", type);
    long long budget;
    bool has;
    if (!oai_get_int(th, "budget_tokens", ANT_MIN_THINKING_BUDGET, 1 << 30, &budget, &has, e)) return false;
    if (!has) return bad(e, "thinking.budget_tokens", "field required when thinking is enabled");
    if (mode == ANT_MESSAGES && budget >= req->max_tokens)
        return bad(e, "thinking.budget_tokens", "'budget_tokens' must be less than max_tokens");
    return template_flag(req, "enable_thinking", true, e);
}

static bool parse_stop_sequences(json_t *body, em_request *req, oai_error *e) {
    json_t *v = field(body, "stop_sequences");
    if (!v) return true;
    if (!json_is_array(v)) return bad(e, "stop_sequences", "'stop_sequences' must be a list of strings");
    if (json_array_size(v) > ANT_MAX_STOP) return bad(e, "stop_sequences", "too many stop sequences");
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        char path[40];
        snprintf(path, sizeof path, "stop_sequences.%zu", i);
        size_t len = json_string_length(s);
        if (!json_is_string(s) || !len) return bad(e, path, "stop sequences must be non-empty strings");
        if (len > ANT_MAX_STOP_LEN || memchr(json_string_value(s), 0, len))
            return bad(e, path, "stop sequences are at most 256 bytes, without NUL");
        if (em_request_add_stop(req, json_string_value(s), len) != EM_OK) return oom(e, path);
    }
    return true;
}

static bool parse_sampling(json_t *body, em_request *req, oai_error *e) {
    double x;
    long long k;
    bool has;
    if (!oai_get_number(body, "temperature", 0, 1, &x, &has, e)) return false;
    if (has) req->sampling.temperature = (float)x, req->set |= EM_SET_TEMPERATURE;
    if (!oai_get_number(body, "top_p", 0, 1, &x, &has, e)) return false;
    if (has) req->sampling.top_p = x > 0 ? (float)x : 1e-6f, req->set |= EM_SET_TOP_P;
    if (!oai_get_int(body, "top_k", 0, 1 << 30, &k, &has, e)) return false;
    if (has) req->sampling.top_k = (int)k, req->set |= EM_SET_TOP_K;
    return true;
}

static bool parse_metadata(json_t *body, oai_error *e) {
    json_t *md = field(body, "metadata");
    if (!md) return true;
    if (!json_is_object(md)) return bad(e, "metadata", "'metadata' must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(md, key, v) {
        if (strcmp(key, "user_id")) return bad(e, "metadata", "unknown metadata field '%.40s'", key);
        if (!json_is_null(v) && (!json_is_string(v) || json_string_length(v) > 256))
            return bad(e, "metadata.user_id", "'user_id' must be a string of at most 256 characters");
    }
    return true;
}

/* Fields each endpoint accepts; anything else is refused by name. */
static bool known_fields(json_t *body, ant_mode mode, oai_error *e) {
    static const char *const common[] = {"model", "messages", "system", "tools", "tool_choice", "thinking"};
    static const char *const gen[] = {"max_tokens", "stop_sequences", "temperature", "top_p", "top_k",
                                      "metadata", "stream", "service_tier"};
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof common / sizeof common[0] && !known; i++) known = !strcmp(key, common[i]);
        for (size_t i = 0; mode == ANT_MESSAGES && i < sizeof gen / sizeof gen[0] && !known; i++)
            known = !strcmp(key, gen[i]);
        if (!known) return bad(e, key, "extra inputs are not permitted ('%.60s' is not a field this server accepts)", key);
    }
    return true;
}

static bool parse_model(json_t *body, const char *served_model, oai_error *e) {
    json_t *model = json_object_get(body, "model");
    if (!model) return bad(e, "model", "field required");
    if (!json_is_string(model)) return bad(e, "model", "'model' must be a string");
    if (strcmp(json_string_value(model), served_model))
        return oai_fail(e, 404, "not_found_error", "model", "model '%.200s' does not exist; this server serves '%s'",
                        json_string_value(model), served_model);
    return true;
}

static bool parse_generation(json_t *body, em_request *req, bool *stream, oai_error *e) {
    long long k;
    bool has;
    if (!oai_get_int(body, "max_tokens", 1, 1 << 30, &k, &has, e)) return false;
    if (!has) return bad(e, "max_tokens", "field required");
    req->max_tokens = (int)k;
    if (!oai_get_bool(body, "stream", stream, NULL, e)) return false;
    json_t *tier = field(body, "service_tier");
    if (tier && (!json_is_string(tier) ||
                 (strcmp(json_string_value(tier), "auto") && strcmp(json_string_value(tier), "standard_only"))))
        return bad(e, "service_tier", "'service_tier' must be 'auto' or 'standard_only'");
    return parse_sampling(body, req, e) && parse_stop_sequences(body, req, e) && parse_metadata(body, e);
}

bool ant_parse(json_t *body, const char *served_model, ant_mode mode, em_request *req, bool *stream, oai_error *e) {
    req->chat = true;
    *stream = false;
    if (!known_fields(body, mode, e) || !parse_model(body, served_model, e)) return false;
    if (mode == ANT_MESSAGES && !parse_generation(body, req, stream, e)) return false;
    return parse_system(body, req, e) && parse_messages(body, req, e) && parse_tools(body, req, e) &&
           parse_tool_choice(body, req, e) && parse_thinking(body, mode, req, e);
}
