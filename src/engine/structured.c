/* structured.c — constrained decoding for requests: which grammar a request
 * needs (a forced tool call in the model's own syntax, a JSON Schema, any
 * JSON object), compiled once per request, and the per-model vocabulary
 * the matchers walk (built on first use, shared by all requests). */
#include "engine/structured.h"

#include "engine/engine.h"
#include "model/model.h"

#include <pthread.h>
#include <string.h>

/* One vocabulary per model: building it walks every token (a fraction of a
 * second for 150k tokens), so it is built once, on the first request that
 * needs it. */
static pthread_mutex_t vocab_mu = PTHREAD_MUTEX_INITIALIZER;

em_status structured_vocab(em_model *m, const grammar_vocab **out) {
    pthread_mutex_lock(&vocab_mu);
    em_status s = EM_OK;
    if (!m->grammar_vocab) {
        size_t n_eos;
        const int32_t *eos = em_model_eos_ids(m, &n_eos);
        s = grammar_vocab_new(em_model_tokenizer(m), eos, n_eos, em_model_vocab_size(m), &m->grammar_vocab);
    }
    *out = m->grammar_vocab;
    pthread_mutex_unlock(&vocab_mu);
    return s;
}

static bool tool_named(json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && !strcmp(n, name)) return true;
    }
    return false;
}

em_status structured_compile(const em_request *req, const em_prompt *p, grammar **out) {
    *out = NULL;
    if (req->tool_choice == EM_TOOL_CHOICE_REQUIRED || req->tool_choice == EM_TOOL_CHOICE_NAMED) {
        if (!req->tools || !json_array_size(req->tools))
            return em_fail(EM_ERR_INVALID, "tool_choice requires a tool call but the request has no tools");
        if (req->tool_choice == EM_TOOL_CHOICE_NAMED && !tool_named(req->tools, req->tool_choice_name))
            return em_fail(EM_ERR_INVALID, "tool_choice names '%s', which is not among the tools", req->tool_choice_name);
        if (!req->chat || p->format.tools == CHAT_TOOLS_NONE)
            return em_fail(EM_ERR_UNSUPPORTED, "this model's chat template has no tool-call format to force");
        grammar_tool_opts o = {.name = req->tool_choice == EM_TOOL_CHOICE_NAMED ? req->tool_choice_name : NULL,
                               .parallel = req->parallel_tool_calls,
                               .reasoning = p->format.reasoning,
                               .think_open = p->format.think_open_in_prompt};
        return grammar_compile_tool_call(p->format.tools, req->tools, &o, out);
    }
    if (req->response_schema) return grammar_compile_json_schema(req->response_schema, out);
    if (req->response_json) return grammar_compile_json_object(out);
    return EM_OK;
}
