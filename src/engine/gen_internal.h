/* gen_internal.h — the pieces of one generation that speculative decoding
 * (spec.c) drives itself: it chooses tokens by drafting and verifying
 * instead of one forward per token, but processes logits and delivers
 * tokens exactly as the plain loop does (gen_seq.h). */
#ifndef EMBER_ENGINE_GEN_INTERNAL_H
#define EMBER_ENGINE_GEN_INTERNAL_H

#include "engine/gen_seq.h"

#define PREFILL_CHUNK 512

/* spec.c: prefill and decode with MTP speculation; g->logits, g->seq held. */
em_status spec_prefill(gen_seq *g, void **spec);
em_status spec_decode(gen_seq *g, void *spec);
void spec_free(void *spec);

/* True when the generation must stop before another token (finishing g
 * with the reason). */
static inline bool gen_seq_should_stop(gen_seq *g) {
    if (g->finished) return true;
    if (gen_seq_cancelled(g)) {
        gen_seq_finish(g, EM_FINISH_CANCELLED);
        return true;
    }
    if (g->r->n_generated >= (size_t)g->p->max_tokens) {
        gen_seq_finish(g, EM_FINISH_LENGTH);
        return true;
    }
    return false;
}

#endif
