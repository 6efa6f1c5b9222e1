/* request.h — the internal generation request every protocol translates to.
 *
 * A request is either a chat (messages [+ tools], rendered with the model's
 * chat template) or a raw prompt (text or token ids, no template). Sampling
 * fields the client left out are taken from the model's defaults
 * (em_sampling_defaults) by em_request_sampling.
 *
 * Ownership: an em_request owns every string, array and json_t it points to;
 * em_request_free releases them. Build one with em_request_init and the
 * em_request_add_* helpers, or fill the fields directly with malloc'd memory. */
#ifndef EMBER_ENGINE_REQUEST_H
#define EMBER_ENGINE_REQUEST_H

#include "ember/ember.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum em_role {
    EM_ROLE_SYSTEM = 0,
    EM_ROLE_DEVELOPER, /* rendered as "system": templates know no other */
    EM_ROLE_USER,
    EM_ROLE_ASSISTANT,
    EM_ROLE_TOOL
} em_role;

typedef struct em_tool_call {
    char *id;        /* "call_..."; may be NULL */
    char *name;
    char *arguments; /* JSON text of the arguments object */
} em_tool_call;

typedef struct em_message {
    em_role role;
    char *content;      /* text; NULL when absent (assistant with tool calls) */
    char *reasoning;    /* assistant: earlier reasoning; NULL when absent */
    char *name;         /* optional participant / tool name */
    char *tool_call_id; /* tool: the call this message answers */
    em_tool_call *tool_calls; /* assistant */
    size_t n_tool_calls;
} em_message;

typedef enum em_tool_choice {
    EM_TOOL_CHOICE_AUTO = 0,
    EM_TOOL_CHOICE_NONE,
    EM_TOOL_CHOICE_REQUIRED, /* enforced by a grammar over the model's tool-call syntax */
    EM_TOOL_CHOICE_NAMED     /* the same, for the one named function */
} em_tool_choice;

/* Which sampling fields the client set (the others come from the model). */
enum {
    EM_SET_TEMPERATURE = 1 << 0,
    EM_SET_TOP_P = 1 << 1,
    EM_SET_TOP_K = 1 << 2,
    EM_SET_MIN_P = 1 << 3,
    EM_SET_REPETITION = 1 << 4,
    EM_SET_PRESENCE = 1 << 5,
    EM_SET_FREQUENCY = 1 << 6,
    EM_SET_SEED = 1 << 7
};

typedef struct em_request {
    /* chat */
    bool chat;
    em_message *messages;
    size_t n_messages;
    json_t *tools;            /* OpenAI shape [{type:"function",function:{name,description,parameters}}] or NULL */
    em_tool_choice tool_choice;
    char *tool_choice_name;   /* NAMED */
    bool parallel_tool_calls; /* false: only the first tool call is kept */
    json_t *template_kwargs;  /* extra chat-template variables (enable_thinking, reasoning_effort...) or NULL */
    /* structured output, enforced by constrained decoding */
    bool response_json;       /* any JSON object (response_format json_object) */
    json_t *response_schema;  /* a JSON Schema the reply must satisfy (json_schema), or NULL */
    /* raw prompt (chat == false): text, or token ids when prompt_ids != NULL */
    char *prompt;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    bool echo;                /* completions: the prompt text precedes the output */

    /* sampling: fields flagged in `set` override the model's defaults */
    em_sampling sampling;
    unsigned set;
    int32_t *bias_ids;        /* logit_bias */
    float *bias_values;
    size_t n_bias;

    /* limits and shape of the output */
    int max_tokens;           /* 0: up to the end of the context */
    char **stop;              /* stop strings, matched on decoded text, excluded from output */
    size_t n_stop;
    int n;                    /* choices per prompt, >= 1 */
    bool logprobs;
    int top_logprobs;         /* 0..EM_MAX_TOP_LOGPROBS */
    bool ignore_eos;

    /* This request's configuration: the model's snapshot with the
     * request's overrides (X-Ember-Config), or NULL for the model's own.
     * One reference owned (released by em_request_free). Read for the
     * template clock (EMBER_TEMPLATE_NOW) and, when the request set it, the
     * prefill precision (EMBER_PRECISION). */
    struct em_config *config;
} em_request;

void em_request_init(em_request *r);
void em_request_free(em_request *r);

/* Appends a message (copies the strings; content/name may be NULL).
 * Returns a pointer to the stored message for adding tool calls. */
em_status em_request_add_message(em_request *r, em_role role, const char *content, em_message **out);
/* Appends a tool call to m (copies the strings). */
em_status em_message_add_tool_call(em_message *m, const char *id, const char *name, const char *arguments);
/* Adds a stop string (copied). */
em_status em_request_add_stop(em_request *r, const char *s, size_t len);

/* The sampling parameters of this request: the model defaults `defaults`
 * with the fields the client set replaced. */
em_sampling em_request_sampling(const em_request *r, em_sampling defaults);

/* The chat-template context: {"messages": [...], "tools": [...],
 * "add_generation_prompt": true, ...template_kwargs}. Assistant tool-call
 * arguments are given as objects (as transformers templates expect) when
 * they parse as JSON. Tools are left out under tool_choice "none".
 * *out is a new reference owned by the caller. */
em_status em_request_template_vars(const em_request *r, json_t **out);

const char *em_role_name(em_role role); /* as the chat template sees it */

/* The prefill precision the request asked for: EM_PRECISION_EXACT / FAST
 * when its configuration overrides EMBER_PRECISION with exact / fast, else
 * AUTO (the model's). */
em_precision em_request_precision(const em_request *r);

#endif
