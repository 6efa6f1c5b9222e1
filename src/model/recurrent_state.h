/* recurrent_state.h — per-sequence state of the recurrent (Gated DeltaNet)
 * layers, kept beside the paged KV cache and indexed by the same sequence
 * slot: per linear layer a conv state (the last K-1 conv input rows) and a
 * delta-rule state [heads][dk][dv].
 *
 * Rollback (speculative decoding): after rstate_mark the state at that
 * point is kept, and the forward journals the per-token inputs of the
 * recurrence (conv input rows, decay and strength) of the tokens that follow;
 * cutting back to a length inside them restores the kept state and replays
 * the journaled tokens (the replay is the model's, rstate only stores).
 * Snapshot/restore copies a sequence's state to a caller buffer and back.
 *
 * The state, the kept state of a mark and the journal live in backend
 * memory (device memory on a GPU) and are moved with the backend's copy
 * operations, so a decode step never waits on a transfer; only snapshots
 * cross to the host. */
#ifndef EMBER_MODEL_RECURRENT_STATE_H
#define EMBER_MODEL_RECURRENT_STATE_H

#include "backend/backend.h"
#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct rs_journal {
    int cap;        /* tokens it can hold; 0: inactive */
    int base_len;   /* sequence length at the mark */
    int n;          /* tokens recorded since the mark */
    float *mark;    /* the state at the mark (one sequence's worth), backend memory */
    float *rows;    /* [layer][cap][row_floats], backend memory */
    int rows_cap;   /* tokens rows was allocated for */
} rs_journal;

typedef struct rstate {
    em_backend *be;
    int n_layers, max_seqs;
    int conv_rows, channels; /* K-1, conv channels */
    int heads, dk, dv;
    int row_floats;          /* journal row: channels + 2 * heads */
    size_t conv_floats, ssm_floats, layer_floats, seq_floats;
    float *data;             /* [seq][layer]{conv, ssm}, reserved backend memory */
    size_t data_bytes;
    float *zeros;            /* one sequence of zeros (device backends), for resets */
    rs_journal *journal;     /* per sequence */
} rstate;

/* The state lives in be's memory; be must outlive it. */
em_status rstate_create(em_backend *be, int n_layers, int max_seqs, int kernel, int channels, int heads, int dk, int dv, rstate **out);
void rstate_free(rstate *r);

float *rstate_conv(rstate *r, int seq, int layer); /* [K-1][channels] */
float *rstate_ssm(rstate *r, int seq, int layer);  /* [heads][dk][dv] */
/* Zeroes a sequence's state (a new sequence). */
void rstate_reset(rstate *r, int seq);

size_t rstate_seq_bytes(const rstate *r);
/* Copies a sequence's state to the host buffer buf (rstate_seq_bytes) and back. */
em_status rstate_save(const rstate *r, int seq, void *buf);
em_status rstate_load(rstate *r, int seq, const void *buf);

/* Keeps the state of seq (now at length len) and journals up to max_tokens
 * following tokens. */
em_status rstate_mark(rstate *r, int seq, int len, int max_tokens);
/* Before a forward of n tokens of seq (now at length len): *active tells
 * whether a journal records them, *first the journal index of the span's
 * first token (rows at rstate_journal_rows(r, seq, layer) + first *
 * row_floats). A journal not contiguous with len is dropped; a span that
 * overflows the journal is an error. */
em_status rstate_journal_span(rstate *r, int seq, int len, int n, int *first, bool *active);
float *rstate_journal_rows(rstate *r, int seq, int layer);
/* Restores the state kept at the mark and returns how many journaled tokens
 * must be replayed to reach length len; the journal is closed afterwards by
 * rstate_journal_close. len outside [base_len, base_len + n] is an error. */
em_status rstate_rewind(rstate *r, int seq, int len, int *replay);
void rstate_journal_close(rstate *r, int seq);

#endif
