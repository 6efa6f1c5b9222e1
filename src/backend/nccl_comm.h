/* nccl_comm.h — the NCCL side of collective.h (backend/cuda/cuda_nccl.cu;
 * stubs that say "built without CUDA" in collective_none.c). Internal to
 * backend/: callers use collective.h. */
#ifndef EMBER_BACKEND_NCCL_COMM_H
#define EMBER_BACKEND_NCCL_COMM_H

#include "backend/collective.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nccl_comm nccl_comm;

em_status nccl_comm_init_all(em_backend *const *bes, int n, int timeout_ms, nccl_comm **out);
em_status nccl_comm_unique_id(uint8_t id[EM_COMM_ID_BYTES]);
em_status nccl_comm_init_rank(em_backend *be, int rank, int world, const uint8_t id[EM_COMM_ID_BYTES], int timeout_ms,
                              nccl_comm **out);
void nccl_comm_free(nccl_comm *c);
int nccl_comm_world(const nccl_comm *c);
int nccl_comm_local(const nccl_comm *c);
em_status nccl_comm_allreduce_sum(nccl_comm *c, float *const *bufs, size_t n);
em_status nccl_comm_allgather(nccl_comm *c, const float *const *send, float *const *recv, size_t n);
em_status nccl_comm_wait(nccl_comm *c);
void nccl_comm_set_timing(nccl_comm *c, bool on);
double nccl_comm_take_time(nccl_comm *c, long *calls);

#ifdef __cplusplus
}
#endif

#endif
