/* session.h — the generation driver: one internal request in, one stream of
 * semantic events out.
 *
 *   em_prompt_build: chat_render (chat requests) → tok_encode, checked
 *                    against the context; done once per request.
 *   em_session_run:  em_generate → incremental detokenizer → stop-string
 *                    matcher → chat output parser → events, for one choice.
 *
 * Protocol adapters call em_prompt_build on the request thread (so bad
 * requests fail before any byte of the reply is sent), then em_session_run
 * once per choice, formatting the events they receive. */
#ifndef EMBER_ENGINE_SESSION_H
#define EMBER_ENGINE_SESSION_H

#include "chat/chat.h"
#include "engine/events.h"
#include "engine/request.h"

typedef struct em_prompt {
    int32_t *ids;        /* the prompt's token ids (malloc'd) */
    size_t n_ids;
    char *text;          /* the rendered chat prompt, or the raw prompt text; NULL for id prompts */
    chat_format format;  /* how the reply is parsed (chat requests) */
    bool parse;          /* run the chat output parser */
    int max_tokens;      /* resolved: the request's, or up to the end of the context */
    struct grammar *grammar; /* constrained decoding (forced tool call, JSON), or NULL */
} em_prompt;

/* Renders and tokenizes req for model m, and compiles the grammar of a
 * forced tool call or a structured output (a schema ember cannot enforce
 * exactly is EM_ERR_UNSUPPORTED / EM_ERR_FORMAT naming the keyword: the
 * protocols answer 400). Errors: EM_ERR_INVALID (no chat
 * template / tokenizer, empty prompt, token id out of range), EM_ERR_LIMIT
 * (prompt + max_tokens beyond the context), template errors from
 * chat_render. On success *out owns its buffers; free with em_prompt_free. */
em_status em_prompt_build(em_model *m, const em_request *req, em_prompt *out);
void em_prompt_free(em_prompt *p);

typedef struct em_session_opts {
    int choice;                 /* index reported in events; the seed is offset by it */
    const volatile int *cancel; /* may be NULL; non-zero stops the generation */
    double t_start;             /* em_now() when the request arrived (TTFT); 0: now */
    em_event_fn on_event;
    void *user;
} em_session_opts;

/* Generates one choice of req from prompt p, delivering events to
 * opts->on_event and ending with exactly one FINISH or ERROR event.
 * Returns the status of the generation (EM_OK also when cancelled: the
 * FINISH event then says EM_REASON_CANCELLED). Thread-safe: concurrent
 * sessions on one model take turns on the compute. */
em_status em_session_run(em_model *m, const em_request *req, const em_prompt *p, const em_session_opts *opts);

/* The text of one token as the detokenizer would show it on its own
 * (malloc'd, caller frees; NULL on failure). For logprobs output. */
char *em_token_text(const em_model *m, int32_t id);

#endif
