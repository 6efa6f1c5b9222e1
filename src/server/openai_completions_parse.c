/* openai_completions_parse.c — /v1/completions JSON → internal requests
 * (one per prompt; see openai_completions.h). */
#include "server/openai_completions.h"

#include "base/alloc.h"
#include "engine/events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OAI_MAX_PROMPTS 64

static bool is_id_list(json_t *v) {
    if (!json_is_array(v) || !json_array_size(v)) return false;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_integer(x)) return false;
    return true;
}

static bool set_prompt(em_request *r, json_t *p, size_t idx, int vocab, oai_error *e) {
    char param[32];
    snprintf(param, sizeof param, "prompt[%zu]", idx);
    if (json_is_string(p)) {
        if (!(r->prompt = em_strndup(json_string_value(p), json_string_length(p))))
            return oai_fail(e, 500, NULL, param, "out of memory");
        return true;
    }
    if (!is_id_list(p)) return oai_fail(e, 400, "invalid_type", param, "each prompt must be a string or a list of token ids");
    size_t n = json_array_size(p);
    if (!(r->prompt_ids = em_mallocn(n, sizeof *r->prompt_ids))) return oai_fail(e, 500, NULL, param, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_int_t id = json_integer_value(json_array_get(p, i));
        if (id < 0 || id >= vocab)
            return oai_fail(e, 400, "invalid_value", param, "token id %lld is outside the vocabulary (0..%d)", (long long)id, vocab - 1);
        r->prompt_ids[i] = (int32_t)id;
    }
    r->n_prompt_ids = n;
    return true;
}

/* Copies the shared fields of src into dst (a fresh request). */
static bool copy_shared(em_request *dst, const em_request *src) {
    em_request_init(dst);
    dst->sampling = src->sampling;
    dst->set = src->set;
    dst->max_tokens = src->max_tokens;
    dst->n = src->n;
    dst->logprobs = src->logprobs;
    dst->top_logprobs = src->top_logprobs;
    dst->echo = src->echo;
    dst->ignore_eos = src->ignore_eos;
    for (size_t i = 0; i < src->n_stop; i++)
        if (em_request_add_stop(dst, src->stop[i], strlen(src->stop[i])) != EM_OK) return false;
    if (src->n_bias) {
        dst->bias_ids = em_mallocn(src->n_bias, sizeof *dst->bias_ids);
        dst->bias_values = em_mallocn(src->n_bias, sizeof *dst->bias_values);
        if (!dst->bias_ids || !dst->bias_values) return false;
        memcpy(dst->bias_ids, src->bias_ids, src->n_bias * sizeof *dst->bias_ids);
        memcpy(dst->bias_values, src->bias_values, src->n_bias * sizeof *dst->bias_values);
        dst->n_bias = src->n_bias;
    }
    return true;
}

static bool parse_shared(json_t *body, const char *served_model, int vocab, em_request *r, oai_stream_opts *so,
                         oai_error *e) {
    if (!oai_parse_common(body, served_model, vocab, r, so, e)) return false;
    long long k;
    bool has;
    if (!oai_get_int(body, "max_tokens", 1, 1 << 30, &k, &has, e)) return false;
    r->max_tokens = has ? (int)k : 16; /* the Completions API's documented default */
    if (!oai_get_int(body, "logprobs", 0, EM_MAX_TOP_LOGPROBS, &k, &has, e)) return false;
    if (has) r->logprobs = true, r->top_logprobs = (int)k;
    if (!oai_get_bool(body, "echo", &r->echo, NULL, e)) return false;
    if (r->echo && r->logprobs)
        return oai_fail(e, 400, "unsupported_value", "echo", "echo together with logprobs (prompt logprobs) is not supported");
    json_t *suffix = json_object_get(body, "suffix");
    if (suffix && !json_is_null(suffix)) return oai_fail(e, 400, "unsupported_value", "suffix", "'suffix' is not supported");
    long long best_of;
    if (!oai_get_int(body, "best_of", 1, 16, &best_of, &has, e)) return false;
    if (has && best_of != r->n) return oai_fail(e, 400, "unsupported_value", "best_of", "best_of other than n is not supported");
    return true;
}

bool oai_completions_parse(json_t *body, const char *served_model, int vocab, em_request **reqs, size_t *n,
                           oai_stream_opts *so, oai_error *e) {
    *reqs = NULL;
    *n = 0;
    json_t *p = json_object_get(body, "prompt");
    if (!p || json_is_null(p)) return oai_fail(e, 400, "missing_required_parameter", "prompt", "'prompt' is required");
    /* One prompt (a string or one id list) or a list of them. */
    bool single = json_is_string(p) || is_id_list(p);
    if (!single && (!json_is_array(p) || !json_array_size(p)))
        return oai_fail(e, 400, "invalid_type", "prompt", "'prompt' must be a string, a list of strings or token ids");
    size_t count = single ? 1 : json_array_size(p);
    if (count > OAI_MAX_PROMPTS) return oai_fail(e, 400, "invalid_value", "prompt", "at most %d prompts are allowed", OAI_MAX_PROMPTS);
    em_request shared;
    em_request_init(&shared);
    bool ok = parse_shared(body, served_model, vocab, &shared, so, e);
    if (ok && (size_t)shared.n * count > OAI_MAX_PROMPTS)
        ok = oai_fail(e, 400, "invalid_value", "n", "n times the number of prompts is limited to %d", OAI_MAX_PROMPTS);
    if (ok && !(*reqs = em_calloc(count, sizeof **reqs))) ok = oai_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < count; i++) {
        ok = copy_shared(&(*reqs)[i], &shared) || oai_fail(e, 500, NULL, NULL, "out of memory");
        (*n)++;
        if (ok) ok = set_prompt(&(*reqs)[i], single ? p : json_array_get(p, i), i, vocab, e);
    }
    em_request_free(&shared);
    return ok;
}

