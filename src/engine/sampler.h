/* sampler.h — from logits to the next token: logit bias, penalties over a
 * window of history, an optional logit processor, then greedy or
 * temperature / top-k / top-p / min-p sampling with a seeded generator.
 * The same seed and inputs always give the same tokens. */
#ifndef EMBER_ENGINE_SAMPLER_H
#define EMBER_ENGINE_SAMPLER_H

#include "backend/backend.h"
#include "ember/ember.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sampler {
    em_sampling p;
    uint64_t rng[4];
    int n_vocab;
    float *probs;   /* scratch: candidate probabilities */
    int32_t *cand;  /* scratch: candidate ids */
    int32_t *count; /* scratch: per-token counts for penalties */
} sampler;

/* Allocates scratch for n_vocab; seeds from p->seed (or the clock). */
em_status sampler_init(sampler *s, const em_sampling *p, int n_vocab);
void sampler_free(sampler *s);

/* True when the sampler takes the largest logit and applies no penalty:
 * its choice is the plain argmax of the model's row (tensor/argmax.h). */
bool sampler_plain_greedy(const sampler *s);
/* True when the sampler applies a repetition, presence or frequency penalty. */
bool sampler_has_penalty(const sampler *s);

/* Applies bias and penalties to logits in place (history = all ids so far,
 * prompt included). */
void sampler_process(sampler *s, float *logits, const int32_t *history, size_t n_history,
                     const int32_t *bias_ids, const float *bias_values, size_t n_bias);
/* Picks the next token from processed logits. Fills info->logprob when
 * `logprob` (else 0) and, when top_n > 0, the top_n alternatives
 * (log-softmax of the processed logits). */
int32_t sampler_pick(sampler *s, const float *logits, int top_n, bool logprob, em_token_info *info);

/* The draw sampler_pick would make, for a backend to make it where the
 * logits are (em_backend_ops.sample_rows): temperature 0 when greedy, else
 * the temperature and truncations with a uniform taken from the generator
 * as sampler_pick takes it. Penalties are no part of it (for samplers
 * without them). */
void sampler_device_params(sampler *s, em_sample_params *out);

/* Uniform double in [0, 1) from the sampler's generator. */
double sampler_uniform(sampler *s);

/* The distribution sampler_pick draws from, over the whole vocabulary
 * (temperature, top-k, min-p, top-p applied; one-hot on the argmax when
 * greedy), normalised, into probs[n_vocab]. */
void sampler_distribution(sampler *s, const float *logits, float *probs);
/* Draws a token from a normalised distribution with the sampler's generator. */
int32_t sampler_draw(sampler *s, const float *probs);
/* Fills info (token, logprob, top alternatives) for `tok` chosen from
 * processed logits, as sampler_pick does for its own choice. */
void sampler_describe(sampler *s, const float *logits, int32_t tok, int top_n, em_token_info *info);

#endif
