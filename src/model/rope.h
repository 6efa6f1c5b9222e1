/* rope.h — rotary embedding frequency tables for every supported rope type,
 * computed as transformers computes them (f32 inv_freq, f64 intermediates). */
#ifndef EMBER_MODEL_ROPE_H
#define EMBER_MODEL_ROPE_H

#include "io/model_config.h"

/* Fills inv_freq[rot_dim/2] and *attn_factor for a head of rot_dim rotated
 * dimensions. max_pos is config.max_position_embeddings. */
void rope_inv_freq(const rope_config *r, int rot_dim, int max_pos, float *inv_freq, float *attn_factor);

#endif
