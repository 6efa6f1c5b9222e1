/* tool_call.c — grammars that force a tool call in the model's own syntax
 * (tool_choice "required" or a named function): the call markers of the
 * chat format around the chosen tool's name and its argument schema, so
 * the reply always parses into tool_calls whose arguments validate.
 *
 *   Hermes    <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>
 *   Llama 3   {"name": "N", "parameters": ARGS}
 *   DeepSeek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *             ```json\nARGS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 *   Qwen XML  <tool_call>\n<function=N>\n<parameter=P>\nVALUE\n</parameter>\n
 *             </function>\n</tool_call>
 *
 * A reasoning model may think first: <think> ... </think> (text without
 * "</think>"), or only the closing part when the prompt opened it. */
#include "engine/grammar/grammar_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <string.h>

static em_status tc_fail(em_status code, const char *what, const char *name) {
    return em_fail(code, "tool_choice: %s%s%s", what, name ? name : "", name ? "'" : "");
}

/* rule `name` ::= any text that does not contain `stop`, then `stop`
 * (a KMP automaton over the stop string's characters). */
static void until_rules(gbuf *o, const char *name, const char *stop) {
    size_t L = strlen(stop);
    int fail[64] = {0};
    for (size_t i = 1, k = 0; i < L; i++) {
        while (k && stop[i] != stop[k]) k = (size_t)fail[k - 1];
        if (stop[i] == stop[k]) k++;
        fail[i] = (int)k;
    }
    cp_set others = {0};
    for (size_t i = 0; i < L; i++) cp_set_add(&others, (unsigned char)stop[i], (unsigned char)stop[i]);
    cp_set_normalize(&others, true);
    for (size_t i = 0; i < L; i++) {
        gb_printf(o, "%s-%zu ::= ", name, i);
        gb_class(o, &others);
        gb_printf(o, " %s-0", name);
        for (size_t j = 0; j < L; j++) {
            bool seen = false; /* each distinct character once */
            for (size_t q = 0; q < j; q++) seen |= stop[q] == stop[j];
            if (seen) continue;
            size_t k = i;
            while (k && stop[k] != stop[j]) k = (size_t)fail[k - 1];
            if (stop[k] == stop[j]) k++;
            gb_puts(o, " | ");
            gb_literal(o, &stop[j], 1);
            if (k < L) gb_printf(o, " %s-%zu", name, k);
        }
        gb_puts(o, "\n");
    }
    gb_printf(o, "%s ::= %s-0\n", name, name);
    cp_set_free(&others);
}

static json_t *tool_function(json_t *tool) {
    json_t *fn = json_object_get(tool, "function");
    return json_is_object(fn) ? fn : json_is_object(tool) && json_object_get(tool, "name") ? tool : NULL;
}

/* The schema of a Qwen XML parameter value: raw text for strings, JSON for
 * everything else (the parser keeps JSON when it parses as the type). */
static em_status xml_value(json_t *ps, const char *prefix, const char *rule, gbuf *o) {
    json_t *type = json_object_get(ps, "type"), *en = json_object_get(ps, "enum");
    if (json_is_string(type) && !strcmp(json_string_value(type), "string")) {
        const char *k;
        json_t *v;
        long lo = 0, hi = -1;
        json_object_foreach(ps, k, v) {
            if ((!strcmp(k, "minLength") || !strcmp(k, "maxLength")) && json_is_integer(v) && json_integer_value(v) >= 0 &&
                json_integer_value(v) <= 10000) {
                *(k[1] == 'i' ? &lo : &hi) = (long)json_integer_value(v);
                continue;
            }
            if (!strcmp(k, "type") || !strcmp(k, "description") || !strcmp(k, "title") || !strcmp(k, "enum") ||
                !strcmp(k, "default") || !strcmp(k, "examples"))
                continue;
            return tc_fail(EM_ERR_UNSUPPORTED, "string parameter keywords are not enforced in the XML tool format: '", k);
        }
        gb_printf(o, "%s ::= ", rule);
        if (hi >= 0 && hi < lo) return tc_fail(EM_ERR_UNSUPPORTED, "minLength is above maxLength", NULL);
        if (!json_is_array(en) && hi >= 0) gb_printf(o, "[^<]{%ld,%ld}", lo, hi);
        else if (!json_is_array(en)) gb_printf(o, "[^<]{%ld,}", lo);
        else {
            gb_puts(o, "(");
            for (size_t i = 0; i < json_array_size(en); i++) {
                const char *s = json_string_value(json_array_get(en, i));
                if (!s || strchr(s, '<')) return tc_fail(EM_ERR_UNSUPPORTED, "enum value not representable as XML text", NULL);
                if (i) gb_puts(o, " | ");
                gb_literal(o, s, strlen(s));
            }
            gb_puts(o, ")");
        }
        gb_puts(o, "\n");
        return EM_OK;
    }
    if (!json_is_string(type) && !json_is_array(en))
        return tc_fail(EM_ERR_UNSUPPORTED, "XML tool parameters need a single \"type\"", NULL);
    return json_schema_rules(ps, prefix, rule, o);
}

static em_status xml_args(json_t *params, const char *prefix, gbuf *o, gbuf *body) {
    json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    const char *key;
    json_t *ps;
    size_t i = 0;
    json_object_foreach(props, key, ps) {
        bool required = false;
        for (size_t k = 0; k < json_array_size(req); k++)
            required |= !strcmp(json_string_value(json_array_get(req, k)) ? json_string_value(json_array_get(req, k)) : "", key);
        char rule[64], pre[64];
        snprintf(rule, sizeof rule, "%sp%zu", prefix, i);
        snprintf(pre, sizeof pre, "%sp%zu-", prefix, i);
        EM_TRY(xml_value(ps, pre, rule, o));
        char open[300];
        if (strlen(key) > 200 || strpbrk(key, "<> \n")) return tc_fail(EM_ERR_UNSUPPORTED, "parameter name not usable in XML: '", key);
        snprintf(open, sizeof open, "<parameter=%s>\n", key);
        gb_puts(body, " (");
        gb_literal(body, open, strlen(open));
        gb_printf(body, " %s \"\\n</parameter>\\n\")%s", rule, required ? "" : "?");
        i++;
    }
    return EM_OK;
}

static bool name_ok(const char *n) {
    if (!n || !*n || strlen(n) > 128) return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-' || *p == '.'))
            return false;
    return true;
}

/* One alternative per tool: rule tN ::= (what follows the call's opening). */
static em_status tool_rule(chat_tool_format fmt, json_t *fn, size_t i, gbuf *o) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name_ok(name)) return tc_fail(EM_ERR_INVALID, "tool name must be [A-Za-z0-9_.-]{1,128}: '", name ? name : "");
    json_t *params = json_object_get(fn, "parameters");
    json_t *empty = NULL;
    if (!params) params = empty = json_pack("{s:s}", "type", "object");
    char prefix[32], args[40];
    snprintf(prefix, sizeof prefix, "t%zu-", i);
    snprintf(args, sizeof args, "t%zu-args", i);
    em_status s = EM_OK;
    char head[256];
    if (fmt == CHAT_TOOLS_QWEN_XML) {
        gbuf body = {0};
        s = xml_args(params, prefix, o, &body);
        snprintf(head, sizeof head, "<function=%s>\n", name);
        gb_printf(o, "t%zu ::= ", i);
        gb_literal(o, head, strlen(head));
        gb_put(o, body.s ? body.s : "", body.len);
        gb_puts(o, " \"</function>\"\n");
        gb_free(&body);
    } else {
        s = json_schema_rules(params, prefix, args, o);
        if (fmt == CHAT_TOOLS_HERMES) snprintf(head, sizeof head, "\"%s\", \"arguments\": ", name);
        else if (fmt == CHAT_TOOLS_LLAMA3) snprintf(head, sizeof head, "\"%s\", \"parameters\": ", name);
        else snprintf(head, sizeof head, "%s\n```json\n", name);
        gb_printf(o, "t%zu ::= ", i);
        gb_literal(o, head, strlen(head));
        gb_printf(o, " %s%s\n", args, fmt == CHAT_TOOLS_DEEPSEEK ? " \"\\n```\"" : "");
    }
    json_decref(empty);
    return s;
}

em_status grammar_tool_call_to_gbnf(chat_tool_format fmt, json_t *tools, const grammar_tool_opts *opts, char **gbnf) {
    *gbnf = NULL;
    grammar_tool_opts none = {0};
    if (!opts) opts = &none;
    if (fmt == CHAT_TOOLS_NONE) return tc_fail(EM_ERR_UNSUPPORTED, "the model's chat format has no tool calls", NULL);
    if (!json_is_array(tools) || json_array_size(tools) == 0) return tc_fail(EM_ERR_INVALID, "no tools given", NULL);
    gbuf o = {0}, alts = {0};
    em_status s = EM_OK;
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(tools) && s == EM_OK; i++) {
        json_t *fn = tool_function(json_array_get(tools, i));
        if (!fn) {
            s = tc_fail(EM_ERR_INVALID, "a tool is not a function", NULL);
            break;
        }
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (opts->name && (!name || strcmp(name, opts->name))) continue;
        s = tool_rule(fmt, fn, i, &o);
        if (s != EM_OK) em_fail_prefix(s, "tool '%s'", name ? name : "?");
        gb_printf(&alts, "%st%zu", n++ ? " | " : "", i);
    }
    if (s == EM_OK && n == 0) s = tc_fail(EM_ERR_INVALID, "no tool named '", opts->name);
    if (s == EM_OK) {
        const char *think = "";
        if (opts->think_open) {
            until_rules(&o, "think-text", "</think>");
            think = "think-text [ \\n]{0,4} ";
        } else if (opts->reasoning) {
            until_rules(&o, "think-text", "</think>");
            think = "( \"<think>\" think-text [ \\n]{0,4} )? ";
        }
        gb_printf(&o, "tool ::= %s\n", alts.s);
        switch (fmt) {
        case CHAT_TOOLS_HERMES:
            gb_puts(&o, "call ::= \"<tool_call>\\n{\\\"name\\\": \" tool \"}\\n</tool_call>\"\n");
            gb_printf(&o, "root ::= %scall%s\n", think, opts->parallel ? " ( \"\\n\" call )*" : "");
            break;
        case CHAT_TOOLS_QWEN_XML:
            gb_puts(&o, "call ::= \"<tool_call>\\n\" tool \"\\n</tool_call>\"\n");
            gb_printf(&o, "root ::= %scall%s\n", think, opts->parallel ? " ( \"\\n\" call )*" : "");
            break;
        case CHAT_TOOLS_LLAMA3:
            gb_puts(&o, "call ::= \"{\\\"name\\\": \" tool \"}\"\n");
            gb_printf(&o, "root ::= %scall%s\n", think, opts->parallel ? " ( \"; \" call )*" : "");
            break;
        default:
            gb_puts(&o, "call ::= \"<｜tool▁call▁begin｜>function<｜tool▁sep｜>\" tool \"<｜tool▁call▁end｜>\"\n");
            gb_printf(&o, "root ::= %s\"<｜tool▁calls▁begin｜>\" call%s \"<｜tool▁calls▁end｜>\"\n", think,
                      opts->parallel ? " ( \"\\n\" call )*" : "");
            break;
        }
        json_schema_base(&o);
        if (o.oom || alts.oom) s = em_fail(EM_ERR_NOMEM, "tool_choice: out of memory");
    }
    gb_free(&alts);
    if (s != EM_OK) {
        gb_free(&o);
        return s;
    }
    *gbnf = o.s;
    return EM_OK;
}

em_status grammar_compile_tool_call(chat_tool_format fmt, json_t *tools, const grammar_tool_opts *opts, grammar **out) {
    *out = NULL;
    char *g;
    EM_TRY(grammar_tool_call_to_gbnf(fmt, tools, opts, &g));
    em_status s = grammar_compile_gbnf(g, strlen(g), "root", out);
    if (s != EM_OK) em_fail_prefix(s, "tool_choice: internal grammar");
    free(g);
    return s;
}
