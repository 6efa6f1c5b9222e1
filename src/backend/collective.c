/* collective.c — collective.h: NCCL for GPUs (nccl_comm.h), and a host
 * implementation for backends whose memory is the host's. The host one
 * lets the split graph run in one process on CPU backends, so its
 * arithmetic is tested without GPUs; users cannot ask for it (tensor
 * parallelism is refused on --device cpu). */
#include "backend/collective.h"

#include "backend/nccl_comm.h"
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

struct em_comm {
    nccl_comm *nc; /* NULL: host collectives */
    int n;
    em_backend **bes;
    long calls;
};

static em_status wrap(nccl_comm *nc, em_comm **out) {
    em_comm *c = em_calloc(1, sizeof *c);
    if (!c) {
        nccl_comm_free(nc);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    c->nc = nc;
    c->n = nccl_comm_local(nc);
    *out = c;
    return EM_OK;
}

em_status em_comm_init_all(em_backend *const *bes, int n, int timeout_ms, em_comm **out) {
    *out = NULL;
    if (n < 1) return em_fail(EM_ERR_INVALID, "a communicator needs at least one rank");
    int host = 0;
    for (int i = 0; i < n; i++) host += bes[i]->ops->host_memory;
    if (host == 0) {
        nccl_comm *nc;
        EM_TRY(nccl_comm_init_all(bes, n, timeout_ms, &nc));
        return wrap(nc, out);
    }
    if (host != n) return em_fail(EM_ERR_UNSUPPORTED, "a communicator cannot mix host and device backends");
    em_comm *c = em_calloc(1, sizeof *c);
    if (c) c->bes = em_calloc((size_t)n, sizeof *c->bes);
    if (!c || !c->bes) {
        free(c);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    memcpy(c->bes, bes, (size_t)n * sizeof *bes);
    c->n = n;
    *out = c;
    return EM_OK;
}

em_status em_comm_unique_id(uint8_t id[EM_COMM_ID_BYTES]) { return nccl_comm_unique_id(id); }

em_status em_comm_init_rank(em_backend *be, int rank, int world, const uint8_t id[EM_COMM_ID_BYTES], int timeout_ms,
                            em_comm **out) {
    *out = NULL;
    nccl_comm *nc;
    EM_TRY(nccl_comm_init_rank(be, rank, world, id, timeout_ms, &nc));
    return wrap(nc, out);
}

void em_comm_free(em_comm *c) {
    if (!c) return;
    if (c->nc) nccl_comm_free(c->nc);
    free(c->bes);
    free(c);
}

int em_comm_world(const em_comm *c) { return c->nc ? nccl_comm_world(c->nc) : c->n; }
int em_comm_local(const em_comm *c) { return c->n; }

em_status em_comm_allreduce_sum(em_comm *c, float *const *bufs, size_t n) {
    if (c->nc) return nccl_comm_allreduce_sum(c->nc, bufs, n);
    for (int r = 0; r < c->n; r++)
        if (!bufs[r]) return em_fail(EM_ERR_INTERNAL, "host collectives run every rank's part together");
    /* rank order, then the sum copied back to every rank */
    for (int r = 1; r < c->n; r++)
        for (size_t i = 0; i < n; i++) bufs[0][i] += bufs[r][i];
    for (int r = 1; r < c->n; r++) memcpy(bufs[r], bufs[0], n * sizeof(float));
    c->calls++;
    return EM_OK;
}

em_status em_comm_allgather(em_comm *c, const float *const *send, float *const *recv, size_t n) {
    if (c->nc) return nccl_comm_allgather(c->nc, send, recv, n);
    for (int r = 0; r < c->n; r++)
        if (!recv[r]) return em_fail(EM_ERR_INTERNAL, "host collectives run every rank's part together");
    /* every rank's block first into rank 0's buffer (a send may alias a
     * recv block), then copied to the others */
    for (int r = 0; r < c->n; r++)
        if (recv[0] + (size_t)r * n != send[r]) memmove(recv[0] + (size_t)r * n, send[r], n * sizeof(float));
    for (int r = 1; r < c->n; r++) memcpy(recv[r], recv[0], (size_t)c->n * n * sizeof(float));
    return EM_OK;
}

em_status em_comm_wait(em_comm *c) { return c->nc ? nccl_comm_wait(c->nc) : EM_OK; }

void em_comm_set_timing(em_comm *c, bool on) {
    if (c->nc) nccl_comm_set_timing(c->nc, on);
}

double em_comm_take_time(em_comm *c, long *calls) {
    if (c->nc) return nccl_comm_take_time(c->nc, calls);
    if (calls) *calls = c->calls;
    c->calls = 0;
    return 0;
}
