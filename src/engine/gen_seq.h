/* gen_seq.h — the state of one generating sequence and the per-token step
 * shared by the single-request loop and the batch scheduler: penalties and
 * bias, the logit processor, sampling, detokenization, the token callback
 * and the stop conditions. */
#ifndef EMBER_ENGINE_GEN_SEQ_H
#define EMBER_ENGINE_GEN_SEQ_H

#include "engine/sampler.h"
#include "model/model.h"

typedef struct gen_seq {
    em_model *m;
    const em_generate_params *p;
    em_generate_result *r;
    int seq;            /* KV-cache slot, -1 when none held */
    sampler smp;
    tok_stream *detok;  /* NULL without a tokenizer or callback */
    int32_t *history;   /* prompt + generated ids */
    size_t n_history;
    size_t fed;         /* ids of history already in the KV cache */
    bool finished;
    double t_start, t_first;
    float *logits;      /* one row, for the loops that own their forward */
    em_math math;       /* prefill arithmetic: the generation's precision, else the model's */
} gen_seq;

/* The span math that carries g's prefill arithmetic into a batch. */
static inline span_math gen_seq_span_math(const gen_seq *g) {
    return g->math == EM_MATH_FAST ? SPAN_MATH_FAST : SPAN_MATH_EXACT;
}

/* Validates p against the model and allocates the state (no KV slot yet). */
em_status gen_seq_init(gen_seq *g, em_model *m, const em_generate_params *p, em_generate_result *r);
void gen_seq_free(gen_seq *g);
/* Samples the next token from logits (the row for history's last id),
 * reports it, and decides whether the sequence is finished. */
em_status gen_seq_sample(gen_seq *g, float *logits);
/* True when g's next token is the plain argmax of the model's logits row
 * (greedy, no bias, penalty, logit processor or logprobs): a batch may then
 * ask the model for the id alone (em_batch.argmax) and pass it to
 * gen_seq_take. */
bool gen_seq_greedy_id(const gen_seq *g);
/* True when g's next token may be drawn where the logits are
 * (em_batch.sample): only the sampler's temperature and truncations apply
 * (no bias, penalty, logit processor or logprobs). gen_seq_draw_params
 * then describes the draw, taking its uniform from g's generator as
 * sampler_pick would (greedy: temperature 0, no uniform), and the token
 * comes back through gen_seq_take. */
bool gen_seq_device_draw(const gen_seq *g);
void gen_seq_draw_params(gen_seq *g, em_sample_params *out);
/* Delivers tok, the argmax chosen by the model, as gen_seq_sample would. */
em_status gen_seq_take(gen_seq *g, int32_t tok);
/* gen_seq_sample in two steps, so that the choices of several sequences can
 * run on several threads (each touches only its own sequence; not for a
 * sequence with a logit processor, whose callback may not be thread-safe)
 * while their deliveries stay in order on one: gen_seq_pick chooses the
 * token from logits into *tok and *info, gen_seq_deliver reports it as
 * gen_seq_sample would (or finishes a cancelled sequence). */
bool gen_seq_has_processor(const gen_seq *g);
void gen_seq_pick(gen_seq *g, float *logits, int32_t *tok, em_token_info *info);
em_status gen_seq_deliver(gen_seq *g, int32_t tok, em_token_info *info);
/* The two halves of gen_seq_sample, for loops that choose tokens another
 * way (speculative decoding): penalties, bias and the logit processor in
 * place; then delivery of a chosen token (history, text, callback, stop
 * checks; info->token/logprob filled by the caller). */
void gen_seq_process(gen_seq *g, float *logits);
em_status gen_seq_emit(gen_seq *g, int32_t tok, em_token_info *info);
/* Marks the sequence finished with `why` (no more tokens). */
void gen_seq_finish(gen_seq *g, em_finish why);
/* True when the caller's cancel flag is set. */
bool gen_seq_cancelled(const gen_seq *g);

#endif
