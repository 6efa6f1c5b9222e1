/* parse_detect.c — which output parser a model needs, read from its chat
 * template (the markers it renders for assistant tool calls and thinking)
 * with the model type as a fall-back for templates that show none.
 *
 * Thinking: a template that mentions </think> makes replies start with
 * reasoning. If the generation prompt itself writes an opening <think>
 * that it does not close at once, the reply begins inside reasoning. If
 * the caller turned thinking off (enable_thinking=false, or `thinking`
 * unset for templates driven by that variable), the template writes an
 * empty <think></think> or nothing, and the reply is plain content. */
#include "chat/parse_internal.h"

#include <string.h>

static bool has(const char *src, const char *s) { return strstr(src, s) != NULL; }

static chat_tool_format tools_from_template(const char *src) {
    if (has(src, "<｜tool▁calls▁begin｜>") || has(src, "<｜tool▁call▁begin｜>")) return CHAT_TOOLS_DEEPSEEK;
    if (has(src, "<function=") && has(src, "<parameter=")) return CHAT_TOOLS_QWEN_XML;
    if (has(src, "<tool_call>")) return CHAT_TOOLS_HERMES;
    if (has(src, "<|python_tag|>")) return CHAT_TOOLS_LLAMA3;
    if (has(src, "<|start_header_id|>") && has(src, "\"parameters\"") && has(src, "tools")) return CHAT_TOOLS_LLAMA3;
    return CHAT_TOOLS_NONE;
}

/* Families whose tool syntax is fixed even when a template does not show
 * it (e.g. a template without a tools section). */
static chat_tool_format tools_from_model_type(const char *mt) {
    if (!mt) return CHAT_TOOLS_NONE;
    if (!strncmp(mt, "deepseek_v3", 11) || !strcmp(mt, "deepseek_v32")) return CHAT_TOOLS_DEEPSEEK;
    if (!strncmp(mt, "qwen3_5", 7) || !strncmp(mt, "qwen3_next", 10)) return CHAT_TOOLS_QWEN_XML;
    if (!strcmp(mt, "qwen2") || !strcmp(mt, "qwen3") || !strcmp(mt, "qwen3_moe")) return CHAT_TOOLS_HERMES;
    return CHAT_TOOLS_NONE;
}

/* After "<think>" in template source: only whitespace (raw or as \n
 * escapes) and then "</think>" means an empty, closed block. */
static bool closed_at_once(const char *s) {
    for (;;) {
        if (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
        else if (s[0] == '\\' && (s[1] == 'n' || s[1] == 'r' || s[1] == 't')) s += 2;
        else break;
    }
    return strncmp(s, "</think>", 8) == 0;
}

/* Whether the generation prompt (the template text after its last mention
 * of add_generation_prompt) can open a <think> block without closing it. */
static bool prompt_opens_think(const char *src) {
    const char *tail = NULL;
    for (const char *q = src; (q = strstr(q, "add_generation_prompt")); q++) tail = q;
    if (!tail) return false;
    for (const char *q = tail; (q = strstr(q, "<think>")); q += 7)
        if (!closed_at_once(q + 7)) return true;
    return false;
}

static bool var_false(json_t *vars, const char *key, bool absent) {
    json_t *v = json_object_get(vars, key);
    if (!v) return absent;
    return json_is_false(v) || json_is_null(v);
}

/* Whether the caller switched thinking off through a variable the
 * template actually reads. */
static bool thinking_off(const char *src, json_t *vars) {
    if (has(src, "enable_thinking")) return var_false(vars, "enable_thinking", false);
    if (has(src, "if thinking") || has(src, "if not thinking")) return var_false(vars, "thinking", true);
    return false;
}

chat_format chat_detect_format_source(const char *src, const char *model_type, json_t *vars) {
    chat_format f = {0};
    if (!src) src = "";
    f.tools = tools_from_template(src);
    if (f.tools == CHAT_TOOLS_NONE) f.tools = tools_from_model_type(model_type);
    if (has(src, "</think>") && !thinking_off(src, vars)) {
        f.reasoning = true;
        f.think_open_in_prompt = prompt_opens_think(src);
    }
    return f;
}
