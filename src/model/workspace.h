/* workspace.h — the per-token buffers of a batch, shared by the families.
 *
 * A family's forward keeps its activations in backend buffers of a width a
 * token, sized for the largest batch seen so far, and host arrays of the
 * batch's positions and token ids. Growing them is the same everywhere:
 * every buffer freed and made anew, the backend's recordings dropped (they
 * name the old buffers), sizes checked for overflow. */
#ifndef EMBER_MODEL_WORKSPACE_H
#define EMBER_MODEL_WORKSPACE_H

#include "backend/backend.h"

/* A buffer: where its pointer is kept and its floats a token (0: none,
 * the pointer left NULL). */
typedef struct ws_buf {
    float **buf;
    size_t width;
} ws_buf;

/* Drops be's recorded steps, then frees each of the n buffers and
 * allocates it anew for T tokens on be. On failure the error names be's
 * memory; buffers not yet made are NULL. */
em_status ws_bufs_alloc(em_backend *be, const ws_buf *bufs, size_t n, int T);

/* Frees *pos and *ids and allocates T of each on the host. */
em_status ws_tokens_alloc(int **pos, int **ids, int T);

#endif
