/* gen_internal.h — the state of one em_generate call, shared by the plain
 * decode loop (generate.c) and speculative decoding (spec.c). */
#ifndef EMBER_ENGINE_GEN_INTERNAL_H
#define EMBER_ENGINE_GEN_INTERNAL_H

#include "engine/sampler.h"
#include "model/model.h"

#define PREFILL_CHUNK 512

typedef struct gen_state {
    em_model *m;
    const em_generate_params *p;
    int seq;
    sampler smp;
    float *logits;
    int32_t *history;
    size_t n_history;
    size_t n_emitted;
    tok_stream *detok; /* NULL without a tokenizer */
} gen_state;

/* Delivers a chosen token: history, detokenized text, the callback, stop
 * checks. *done is set (and r->finish) when the generation ends with it. */
em_status gen_emit(gen_state *g, int32_t tok, em_token_info *info, em_generate_result *r, bool *done);
/* Applies penalties, bias and the logit processor to logits in place (the
 * history so far). */
void gen_process_logits(gen_state *g, float *logits);
/* True (and r->finish set) when the generation must stop before another token. */
bool gen_should_stop(gen_state *g, em_generate_result *r);

/* spec.c: prefill and decode with MTP speculation. */
em_status spec_prefill(gen_state *g, void **spec);
em_status spec_decode(gen_state *g, void *spec, em_generate_result *r);
void spec_free(void *spec);

#endif
