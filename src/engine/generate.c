/* generate.c — em_generate: prefill the prompt in chunks, then decode one
 * token at a time through the sampler, reporting each token to the caller
 * until EOS, max_tokens, the callback or cancellation stops it. */
#include "engine/engine.h"
#include "engine/gen_internal.h"

#include "base/alloc.h"
#include "base/timer.h"

#include <stdlib.h>
#include <string.h>

static bool is_stop_id(const gen_state *g, int32_t t) {
    const em_generate_params *p = g->p;
    if (!p->ignore_eos)
        for (size_t i = 0; i < g->m->n_eos; i++)
            if (g->m->eos_ids[i] == t) return true;
    for (size_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == t) return true;
    return false;
}

static em_status prefill(gen_state *g) {
    const em_generate_params *p = g->p;
    size_t done = 0;
    while (done < p->n_prompt) {
        size_t n = p->n_prompt - done < PREFILL_CHUNK ? p->n_prompt - done : PREFILL_CHUNK;
        bool last = done + n == p->n_prompt;
        em_span sp = {g->seq, p->prompt + done, (int)n, last ? LOGITS_LAST : LOGITS_NONE};
        em_batch b = {&sp, 1};
        EM_TRY(model_forward(g->m, &b, g->logits));
        done += n;
        if (p->cancel && *p->cancel) return em_fail(EM_ERR_CANCELLED, "cancelled during prefill");
    }
    return EM_OK;
}

/* Text the detokenizer still holds at the end (an incomplete character)
 * goes out in one last callback with token -1. */
static void flush_text(gen_state *g) {
    char *text = NULL;
    size_t len = 0;
    if (!g->detok || !g->p->on_token || tok_stream_flush(g->detok, &text, &len) != EM_OK) return;
    if (len) {
        em_token_info info = {.token = -1, .text = text, .text_len = len};
        g->p->on_token(g->p->user, &info);
    }
    free(text);
}

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
    if (p->spec_draft_tokens < 0 || p->spec_draft_tokens > 16)
        return em_fail(EM_ERR_INVALID, "spec_draft_tokens must be between 0 and 16");
    if (p->spec_draft_tokens > 0 && !em_model_has_mtp(m))
        return em_fail(EM_ERR_UNSUPPORTED, "%s has no multi-token-prediction head for speculative decoding", m->dir);
    return EM_OK;
}

void gen_process_logits(gen_state *g, float *logits) {
    const em_generate_params *p = g->p;
    sampler_process(&g->smp, logits, g->history, g->n_history, p->bias_ids, p->bias_values, p->n_bias);
    if (p->on_logits) p->on_logits(p->user, logits, g->m->cfg.vocab, g->history, g->n_history);
}

bool gen_should_stop(gen_state *g, em_generate_result *r) {
    const em_generate_params *p = g->p;
    if (p->cancel && *p->cancel) {
        r->finish = EM_FINISH_CANCELLED;
        return true;
    }
    if (g->n_emitted >= (size_t)p->max_tokens) {
        r->finish = EM_FINISH_LENGTH;
        return true;
    }
    return false;
}

em_status gen_emit(gen_state *g, int32_t tok, em_token_info *info, em_generate_result *r, bool *done) {
    const em_generate_params *p = g->p;
    *done = false;
    g->history[g->n_history++] = tok;
    g->n_emitted++;
    r->n_generated++;
    bool stop = is_stop_id(g, tok);
    char *text = NULL;
    size_t text_len = 0;
    if (g->detok) EM_TRY(tok_stream_feed(g->detok, tok, &text, &text_len));
    info->text = text ? text : (g->detok ? "" : NULL);
    info->text_len = text_len;
    int want_stop = p->on_token ? p->on_token(p->user, info) : 0;
    free(text);
    info->text = NULL;
    if (want_stop) {
        r->finish = EM_FINISH_CALLBACK;
        *done = true;
    } else if (stop) {
        r->finish = EM_FINISH_STOP;
        *done = true;
    }
    return EM_OK;
}

static em_status decode_loop(gen_state *g, em_generate_result *r) {
    const em_generate_params *p = g->p;
    for (;;) {
        if (gen_should_stop(g, r)) return EM_OK;
        gen_process_logits(g, g->logits);
        em_token_info info = {0};
        int32_t tok = sampler_pick(&g->smp, g->logits, p->top_logprobs, &info);
        bool done;
        EM_TRY(gen_emit(g, tok, &info, r, &done));
        if (done) return EM_OK;
        if (g->n_emitted >= (size_t)p->max_tokens) continue; /* no forward for a token we won't sample after */
        em_span sp = {g->seq, &tok, 1, LOGITS_LAST};
        em_batch b = {&sp, 1};
        EM_TRY(model_forward(g->m, &b, g->logits));
    }
}

em_status em_generate(em_model *m, const em_generate_params *p, em_generate_result *result) {
    em_generate_result r = {.n_prompt = p->n_prompt};
    EM_TRY(check_params(m, p));
    gen_state g = {.m = m, .p = p, .seq = -1};
    em_status s = sampler_init(&g.smp, &p->sampling, m->cfg.vocab);
    if (s != EM_OK) return s;
    g.logits = em_mallocn((size_t)m->cfg.vocab, sizeof(float));
    g.history = em_mallocn(p->n_prompt + (size_t)p->max_tokens + 1, sizeof(int32_t));
    if (!g.logits || !g.history) s = em_fail(EM_ERR_NOMEM, "out of memory");
    if (s == EM_OK) s = kv_seq_alloc(m->kv, &g.seq);
    if (s == EM_OK && m->tok && p->on_token && !(g.detok = tok_stream_new(m->tok, false)))
        s = em_fail(EM_ERR_NOMEM, "out of memory");
    if (s == EM_OK) {
        memcpy(g.history, p->prompt, p->n_prompt * sizeof(int32_t));
        g.n_history = p->n_prompt;
        double t0 = em_now();
        void *spec = NULL;
        s = p->spec_draft_tokens > 0 ? spec_prefill(&g, &spec) : prefill(&g);
        double t1 = em_now();
        r.prefill_seconds = t1 - t0;
        if (s == EM_OK) s = spec ? spec_decode(&g, spec, &r) : decode_loop(&g, &r);
        spec_free(spec);
        if (s == EM_OK) flush_text(&g);
        else if (s == EM_ERR_CANCELLED) { r.finish = EM_FINISH_CANCELLED; s = EM_OK; }
        r.decode_seconds = em_now() - t1;
    }
    if (g.seq >= 0) kv_seq_release(m->kv, g.seq);
    tok_stream_free(g.detok);
    sampler_free(&g.smp);
    free(g.logits);
    free(g.history);
    if (result) *result = r;
    return s;
}
