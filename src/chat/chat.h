/* chat.h — chat templates (Jinja, rendered exactly as transformers does) and
 * the output parsers that turn model text back into reasoning, content and
 * tool calls.
 *
 * JSON values are jansson json_t; the caller keeps ownership of what it
 * passes in (functions take their own references when they keep them). */
#ifndef EMBER_CHAT_H
#define EMBER_CHAT_H

#include "base/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

typedef struct chat_template chat_template;

/* Finds the template of a model directory: chat_template.jinja, then
 * chat_template.json, then tokenizer_config.json "chat_template" (string, or
 * list of {name, template} where "default" is used). Also reads bos_token,
 * eos_token etc. from tokenizer_config.json for the render context.
 * EM_ERR_UNSUPPORTED ("no chat template") when the directory has none. */
em_status chat_template_load(const char *dir, chat_template **out);
/* From a template source string; special-token variables from config_json
 * (tokenizer_config.json text, may be NULL). */
em_status chat_template_from_string(const char *source, const char *config_json, chat_template **out);
void chat_template_free(chat_template *t);
/* The template's source text (owned by t). */
const char *chat_template_source(const chat_template *t);

/* Renders with `vars` as the template context (messages, tools,
 * add_generation_prompt, any extra keys) plus bos_token/eos_token/... from
 * the tokenizer config (keys in vars win). *out malloc'd, caller frees.
 * Template errors (syntax, raise_exception, limits) are EM_ERR_FORMAT or
 * EM_ERR_LIMIT with the message, line and column. Thread-safe. */
em_status chat_render(const chat_template *t, json_t *vars, char **out, size_t *out_len);
/* chat_render with strftime_now's clock pinned to `now` (seconds since the
 * epoch, local time zone); now == 0 means the current time. */
em_status chat_render_at(const chat_template *t, json_t *vars, time_t now, char **out, size_t *out_len);

/* ---- output parsing --------------------------------------------------- */

typedef enum chat_tool_format {
    CHAT_TOOLS_NONE = 0,
    CHAT_TOOLS_HERMES,   /* <tool_call>{"name":..,"arguments":..}</tool_call> (Qwen2.5/3) */
    CHAT_TOOLS_QWEN_XML, /* <tool_call><function=N><parameter=P>v</parameter></function></tool_call> */
    CHAT_TOOLS_LLAMA3,   /* <|python_tag|>{...} or a bare {"name":..,"parameters":..} */
    CHAT_TOOLS_DEEPSEEK  /* <｜tool▁calls▁begin｜>... */
} chat_tool_format;

typedef struct chat_format {
    chat_tool_format tools;
    bool reasoning;           /* model emits <think>...</think> */
    bool think_open_in_prompt; /* generation prompt already opened <think> */
} chat_format;

/* Chooses the parser configuration from the template source and model type
 * (e.g. "qwen3", "llama"); vars are the render variables (enable_thinking...). */
chat_format chat_detect_format(const chat_template *t, const char *model_type, json_t *vars);
/* The same from the template's source text (NULL: no template). */
chat_format chat_detect_format_source(const char *template_source, const char *model_type, json_t *vars);

typedef enum chat_event_kind {
    CHAT_EV_CONTENT,    /* text: content delta */
    CHAT_EV_REASONING,  /* text: reasoning delta */
    CHAT_EV_TOOL_START, /* index, name, id of a new tool call */
    CHAT_EV_TOOL_ARGS,  /* index, text: a fragment of the JSON arguments */
    CHAT_EV_TOOL_END    /* index: arguments complete (JSON object text) */
} chat_event_kind;

typedef struct chat_event {
    chat_event_kind kind;
    int index;         /* tool-call index within the reply */
    const char *text;  /* valid during the callback */
    size_t len;
    const char *name;  /* TOOL_START */
    const char *id;    /* TOOL_START: "call_..." */
} chat_event;

typedef void (*chat_event_fn)(void *user, const chat_event *ev);

typedef struct chat_parser chat_parser;

/* tools: the request's tools array (OpenAI function shape) used to type XML
 * parameter values and to recognise Llama 3 bare-JSON calls; may be NULL
 * (the parser takes its own reference). NULL when out of memory or fn is
 * NULL; free with chat_parser_free.
 *
 * Events: text deltas are whole UTF-8 characters (when the input is).
 * Whitespace next to a marker is not content: after <think> and </think>,
 * before </think>, and around a tool call it is dropped. Each tool call is
 * emitted once it is complete (TOOL_START, one TOOL_ARGS with the compact
 * JSON object, TOOL_END); text that only looked like a call is content,
 * byte for byte. */
chat_parser *chat_parser_new(chat_format fmt, json_t *tools, chat_event_fn fn, void *user);
void chat_parser_free(chat_parser *p);
/* Feeds streamed text; emits events for everything that can no longer be
 * the start of a marker. */
void chat_parser_feed(chat_parser *p, const char *text, size_t len);
/* End of reply: flushes held-back text; malformed tool calls become content. */
void chat_parser_finish(chat_parser *p);

#endif
