/* events.h — the semantic event stream of one generation.
 *
 * Every protocol (OpenAI Chat and Completions, Responses, Anthropic
 * Messages) consumes the same events from the generation driver
 * (session.h) and only formats them. A choice's stream is: any number of
 * REASONING / CONTENT / TOOL_* events, then exactly one FINISH or ERROR.
 * Tool calls arrive as TOOL_START (index, id, name), TOOL_ARGS fragments
 * (the JSON arguments text, in order) and TOOL_END. Pointers in an event
 * are valid only during the callback. */
#ifndef EMBER_ENGINE_EVENTS_H
#define EMBER_ENGINE_EVENTS_H

#include "ember/ember.h"

#include <stddef.h>
#include <stdint.h>

typedef enum em_event_kind {
    EM_EVENT_REASONING,  /* text: a reasoning ("thinking") delta */
    EM_EVENT_CONTENT,    /* text: an answer delta */
    EM_EVENT_TOOL_START, /* tool_index, tool_id, tool_name */
    EM_EVENT_TOOL_ARGS,  /* tool_index, text: a fragment of the JSON arguments */
    EM_EVENT_TOOL_END,   /* tool_index: the arguments are complete */
    EM_EVENT_FINISH,     /* reason, usage: the choice is over */
    EM_EVENT_ERROR       /* status, text: the choice failed (after output began) */
} em_event_kind;

typedef enum em_finish_reason {
    EM_REASON_STOP = 0,   /* end-of-sequence token or a stop string */
    EM_REASON_LENGTH,     /* max_tokens or the context ran out */
    EM_REASON_TOOL_CALLS, /* stopped after emitting tool calls */
    EM_REASON_CANCELLED   /* the caller cancelled (client gone, shutdown) */
} em_finish_reason;

/* The log-probability record of one generated token (logprobs requests). */
typedef struct em_token_logprob {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[EM_MAX_TOP_LOGPROBS];
    float top_logprobs[EM_MAX_TOP_LOGPROBS];
} em_token_logprob;

typedef struct em_usage {
    size_t prompt_tokens;
    size_t completion_tokens;
    size_t cached_tokens;    /* prompt tokens reused from the prefix cache */
    size_t reasoning_tokens; /* completion tokens spent inside reasoning */
    double ttft_seconds;     /* request start to first generated token */
    double decode_seconds;
    const float *itl;        /* seconds between consecutive tokens, n_itl entries */
    size_t n_itl;
} em_usage;

typedef struct em_event {
    em_event_kind kind;
    int choice;               /* index of the choice this event belongs to */
    const char *text;         /* REASONING, CONTENT, TOOL_ARGS, ERROR */
    size_t len;
    int tool_index;           /* TOOL_*: 0, 1, ... within the choice */
    const char *tool_id;      /* TOOL_START: "call_..." */
    const char *tool_name;    /* TOOL_START */
    /* Tokens whose text was released since the previous text event, in
     * order (only when the request asked for logprobs). Tokens whose text
     * is withheld (a matched stop string, markup) are never reported. */
    const em_token_logprob *logprobs;
    size_t n_logprobs;
    em_finish_reason reason;  /* FINISH */
    const char *stop;         /* FINISH: the client stop string that ended the reply; NULL otherwise */
    em_usage usage;           /* FINISH: this choice's usage */
    em_status status;         /* ERROR */
} em_event;

/* Receives events; return non-zero to cancel the generation. */
typedef int (*em_event_fn)(void *user, const em_event *ev);

const char *em_finish_reason_name(em_finish_reason r); /* "stop", "length", ... */

#endif
