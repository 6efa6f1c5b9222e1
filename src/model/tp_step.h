/* tp_step.h — the step descriptor rank 0 of a multi-process
 * tensor-parallel group sends the other ranks before each forward.
 *
 * int32 words:
 *   magic "TPST", kind (RUN or STOP), n_spans, tokens
 *   per span: sequence slot, n tokens, start position, logits mode
 *             (low byte) and prefill math (next byte), n_blocks,
 *             block ids[n_blocks], token ids[n]
 * The receiving ranks trust nothing in it: tp_step_check bounds every
 * field by their own cache and vocabulary before any of it is used. */
#ifndef EMBER_MODEL_TP_STEP_H
#define EMBER_MODEL_TP_STEP_H

#include "model/model.h"

#define TP_STEP_MAGIC 0x54505354 /* "TPST" */
#define TP_STEP_RUN 1
#define TP_STEP_STOP 2
#define TP_STEP_HEADER 4
#define TP_STEP_MAX_SPANS 65536

typedef struct tp_step_limits {
    int max_seqs, max_ctx, block_size;
    int blocks; /* block ids are below this */
    int vocab;
} tp_step_limits;

typedef struct tp_step_span {
    int32_t seq, n, len0, logits, math, n_blocks;
    const int32_t *blocks, *tokens; /* into the descriptor */
} tp_step_span;

/* Writes the descriptor of batch b (len0[s]: span s's start position;
 * block tables from kv) into out, or only counts when out is NULL;
 * returns its length in words. */
size_t tp_step_encode(int32_t *out, const em_batch *b, const int *len0, const kv_cache *kv);
/* The stop descriptor (TP_STEP_HEADER words). */
void tp_step_stop(int32_t *out);
/* Checks a received descriptor of `words` words against lim: *n_spans and
 * *tokens on success (*tokens = -1 for a stop); EM_ERR_FORMAT naming what
 * is wrong otherwise. */
em_status tp_step_check(const int32_t *w, size_t words, const tp_step_limits *lim, int *n_spans, int *tokens);
/* Reads the span at word `at` of a checked descriptor (TP_STEP_HEADER for
 * the first); returns where the next one starts. */
size_t tp_step_span_at(const int32_t *w, size_t at, tp_step_span *out);

#endif
