/* spec.h — the acceptance rule of speculative decoding, exposed for tests:
 * a draft token d drawn from q is kept with probability min(1, p(d)/q(d));
 * otherwise a token is drawn from the residual max(p - q, 0) (normalised),
 * so that the token returned is distributed exactly as p. */
#ifndef EMBER_ENGINE_SPEC_H
#define EMBER_ENGINE_SPEC_H

#include "engine/sampler.h"

#include <stdbool.h>

/* p, q: normalised distributions over smp->n_vocab; resid: scratch of the
 * same size. Returns d when accepted (*accepted true), else the replacement. */
int32_t spec_accept_token(sampler *smp, const float *p, const float *q, int32_t d, float *resid, bool *accepted);

#endif
