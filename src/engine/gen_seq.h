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
} gen_seq;

/* Validates p against the model and allocates the state (no KV slot yet). */
em_status gen_seq_init(gen_seq *g, em_model *m, const em_generate_params *p, em_generate_result *r);
void gen_seq_free(gen_seq *g);
/* Samples the next token from logits (the row for history's last id),
 * reports it, and decides whether the sequence is finished. */
em_status gen_seq_sample(gen_seq *g, float *logits);
/* Marks the sequence finished with `why` (no more tokens). */
void gen_seq_finish(gen_seq *g, em_finish why);
/* True when the caller's cancel flag is set. */
bool gen_seq_cancelled(const gen_seq *g);

#endif
