/* gen_seq.c — one sequence's sampling step and stop conditions. */
#include "engine/gen_seq.h"

#include "base/alloc.h"
#include "base/timer.h"
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

static em_status check_params(const em_model *m, const em_generate_params *p) {
    if (!p->prompt || p->n_prompt == 0) return em_fail(EM_ERR_INVALID, "the prompt is empty");
    if (p->max_tokens < 0) return em_fail(EM_ERR_INVALID, "max_tokens must not be negative");
    for (size_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= m->cfg.vocab)
            return em_fail(EM_ERR_INVALID, "prompt token %zu (id %d) is outside the vocabulary of %d", i, p->prompt[i],
                           m->cfg.vocab);
    if (p->n_prompt + (size_t)p->max_tokens > (size_t)m->max_ctx)
        return em_fail(EM_ERR_LIMIT, "prompt (%zu tokens) + max_tokens (%d) exceeds the context of %d tokens",
                       p->n_prompt, p->max_tokens, m->max_ctx);
    if (p->top_logprobs < 0 || p->top_logprobs > EM_MAX_TOP_LOGPROBS)
        return em_fail(EM_ERR_INVALID, "top_logprobs must be between 0 and %d", EM_MAX_TOP_LOGPROBS);
    if (p->precision != EM_PRECISION_AUTO && p->precision != EM_PRECISION_EXACT && p->precision != EM_PRECISION_FAST)
        return em_fail(EM_ERR_INVALID, "precision %d is not auto, exact or fast", (int)p->precision);
    if (p->spec_draft_tokens < 0 || p->spec_draft_tokens > 16)
        return em_fail(EM_ERR_INVALID, "spec_draft_tokens must be between 0 and 16");
    if (p->spec_draft_tokens > 0 && model_tp_size(m) > 1 && !em_model_has_mtp(m))
        return em_fail(EM_ERR_UNSUPPORTED, "%s: speculative decoding is not available with tensor parallelism (the "
                       "multi-token-prediction head is not split)", m->dir);
    if (p->spec_draft_tokens > 0 && !em_model_has_mtp(m))
        return em_fail(EM_ERR_UNSUPPORTED, "%s has no multi-token-prediction head for speculative decoding", m->dir);
    return EM_OK;
}

em_status gen_seq_init(gen_seq *g, em_model *m, const em_generate_params *p, em_generate_result *r) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->p = p;
    g->r = r;
    g->seq = -1;
    memset(r, 0, sizeof *r);
    r->n_prompt = p->n_prompt;
    EM_TRY(check_params(m, p));
    g->math = p->precision == EM_PRECISION_EXACT ? EM_MATH_EXACT
            : p->precision == EM_PRECISION_FAST  ? EM_MATH_FAST
                                                 : m->prefill_math;
    EM_TRY(sampler_init(&g->smp, &p->sampling, m->cfg.vocab));
    g->history = em_mallocn(p->n_prompt + (size_t)p->max_tokens + 1, sizeof(int32_t));
    if (!g->history) {
        gen_seq_free(g);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    memcpy(g->history, p->prompt, p->n_prompt * sizeof(int32_t));
    g->n_history = p->n_prompt;
    if (m->tok && p->on_token && !p->skip_text && !(g->detok = tok_stream_new(m->tok, false))) {
        gen_seq_free(g);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    g->t_start = em_now();
    if (p->max_tokens == 0) gen_seq_finish(g, EM_FINISH_LENGTH);
    return EM_OK;
}

void gen_seq_free(gen_seq *g) {
    sampler_free(&g->smp);
    free(g->logits);
    g->logits = NULL;
    tok_stream_free(g->detok);
    free(g->history);
    g->detok = NULL;
    g->history = NULL;
}

bool gen_seq_cancelled(const gen_seq *g) { return g->p->cancel && *g->p->cancel; }

static bool is_stop_id(const gen_seq *g, int32_t t) {
    const em_generate_params *p = g->p;
    if (!p->ignore_eos)
        for (size_t i = 0; i < g->m->n_eos; i++)
            if (g->m->eos_ids[i] == t) return true;
    for (size_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == t) return true;
    return false;
}

/* Text the detokenizer still holds at the end (an incomplete character)
 * goes out in one last callback with token -1. */
static void flush_text(gen_seq *g) {
    char *text = NULL;
    size_t len = 0;
    if (!g->detok || tok_stream_flush(g->detok, &text, &len) != EM_OK) return;
    if (len) {
        em_token_info info = {.token = -1, .text = text, .text_len = len};
        g->p->on_token(g->p->user, &info);
    }
    free(text);
}

void gen_seq_finish(gen_seq *g, em_finish why) {
    if (g->finished) return;
    g->finished = true;
    g->r->finish = why;
    if (why != EM_FINISH_CANCELLED && why != EM_FINISH_CALLBACK) flush_text(g);
}

void gen_seq_process(gen_seq *g, float *logits) {
    const em_generate_params *p = g->p;
    sampler_process(&g->smp, logits, g->history, g->n_history, p->bias_ids, p->bias_values, p->n_bias);
    if (p->on_logits) p->on_logits(p->user, logits, g->m->cfg.vocab, g->history, g->n_history);
}

em_status gen_seq_emit(gen_seq *g, int32_t tok, em_token_info *info) {
    const em_generate_params *p = g->p;
    if (!g->t_first) g->t_first = em_now();
    g->history[g->n_history++] = tok;
    g->r->n_generated++;
    char *text = NULL;
    size_t text_len = 0;
    if (g->detok) EM_TRY(tok_stream_feed(g->detok, tok, &text, &text_len));
    info->text = text ? text : (g->detok ? "" : NULL);
    info->text_len = text_len;
    int want_stop = p->on_token ? p->on_token(p->user, info) : 0;
    free(text);
    info->text = NULL;
    if (want_stop) gen_seq_finish(g, EM_FINISH_CALLBACK);
    else if (is_stop_id(g, tok)) gen_seq_finish(g, EM_FINISH_STOP);
    else if (g->r->n_generated >= (size_t)p->max_tokens) gen_seq_finish(g, EM_FINISH_LENGTH);
    return EM_OK;
}

em_status gen_seq_sample(gen_seq *g, float *logits) {
    if (gen_seq_cancelled(g)) {
        gen_seq_finish(g, EM_FINISH_CANCELLED);
        return EM_OK;
    }
    int32_t tok;
    em_token_info info;
    gen_seq_pick(g, logits, &tok, &info);
    return gen_seq_emit(g, tok, &info);
}

bool gen_seq_has_processor(const gen_seq *g) { return g->p->on_logits != NULL; }

void gen_seq_pick(gen_seq *g, float *logits, int32_t *tok, em_token_info *info) {
    gen_seq_process(g, logits);
    memset(info, 0, sizeof *info);
    *tok = sampler_pick(&g->smp, logits, g->p->top_logprobs, !g->p->no_logprob, info);
}

em_status gen_seq_deliver(gen_seq *g, int32_t tok, em_token_info *info) {
    if (gen_seq_cancelled(g)) {
        gen_seq_finish(g, EM_FINISH_CANCELLED);
        return EM_OK;
    }
    return gen_seq_emit(g, tok, info);
}

/* The token depends on the model's logits row alone: no bias, logit
 * processor or logprobs to report. */
static bool row_alone(const gen_seq *g) {
    const em_generate_params *p = g->p;
    return p->n_bias == 0 && !p->on_logits && p->no_logprob && p->top_logprobs <= 0;
}

bool gen_seq_greedy_id(const gen_seq *g) { return sampler_plain_greedy(&g->smp) && row_alone(g); }

bool gen_seq_device_draw(const gen_seq *g) { return !sampler_has_penalty(&g->smp) && row_alone(g); }

void gen_seq_draw_params(gen_seq *g, em_sample_params *out) { sampler_device_params(&g->smp, out); }

em_status gen_seq_take(gen_seq *g, int32_t tok) {
    if (gen_seq_cancelled(g)) {
        gen_seq_finish(g, EM_FINISH_CANCELLED);
        return EM_OK;
    }
    em_token_info info = {0};
    info.token = tok;
    return gen_seq_emit(g, tok, &info);
}
