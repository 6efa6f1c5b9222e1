/* workspace.c — the per-token buffers of a batch. */
#include "model/workspace.h"

#include "base/alloc.h"

#include <stdlib.h>

em_status ws_bufs_alloc(em_backend *be, const ws_buf *bufs, size_t n, int T) {
    /* recordings name the old buffers */
    if (be->ops->graph_reset) be->ops->graph_reset(be);
    for (size_t k = 0; k < n; k++) {
        if (*bufs[k].buf) be->ops->free(be, *bufs[k].buf);
        *bufs[k].buf = NULL;
    }
    for (size_t k = 0; k < n; k++) {
        size_t bytes;
        if (!bufs[k].width) continue;
        if (!em_mul(bufs[k].width * sizeof(float), (size_t)T, &bytes) || !(*bufs[k].buf = be->ops->alloc(be, bytes)))
            return em_fail(EM_ERR_NOMEM, "out of %s memory for a batch of %d tokens", be->desc, T);
    }
    return EM_OK;
}

em_status ws_tokens_alloc(int **pos, int **ids, int T) {
    free(*pos);
    free(*ids);
    *pos = em_mallocn((size_t)T, sizeof **pos);
    *ids = em_mallocn((size_t)T, sizeof **ids);
    if (!*pos || !*ids) return em_fail(EM_ERR_NOMEM, "out of memory for the positions of %d tokens", T);
    return EM_OK;
}
