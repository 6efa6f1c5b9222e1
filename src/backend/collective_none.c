/* collective_none.c — the NCCL side of collective.h in a build without
 * CUDA: no GPUs, and every attempt to make a communicator says why. */
#include "backend/nccl_comm.h"

#ifndef EMBER_HAVE_CUDA

static em_status no_cuda(void) {
    return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism needs CUDA GPUs, and this ember was built without CUDA "
                   "(rebuild with -DEMBER_CUDA=ON)");
}

int em_gpu_count(void) { return 0; }
bool em_backend_is_cuda(const em_backend *be) {
    (void)be;
    return false;
}
em_status nccl_comm_init_all(em_backend *const *bes, int n, int timeout_ms, nccl_comm **out) {
    (void)bes, (void)n, (void)timeout_ms;
    *out = NULL;
    return no_cuda();
}
em_status nccl_comm_unique_id(uint8_t id[EM_COMM_ID_BYTES]) {
    (void)id;
    return no_cuda();
}
em_status nccl_comm_init_rank(em_backend *be, int rank, int world, const uint8_t id[EM_COMM_ID_BYTES], int timeout_ms,
                            nccl_comm **out) {
    (void)be, (void)rank, (void)world, (void)id, (void)timeout_ms;
    *out = NULL;
    return no_cuda();
}
void nccl_comm_free(nccl_comm *c) { (void)c; }
int nccl_comm_world(const nccl_comm *c) {
    (void)c;
    return 0;
}
int nccl_comm_local(const nccl_comm *c) {
    (void)c;
    return 0;
}
em_status nccl_comm_allreduce_sum(nccl_comm *c, float *const *bufs, size_t n) {
    (void)c, (void)bufs, (void)n;
    return no_cuda();
}
em_status nccl_comm_allgather(nccl_comm *c, const float *const *send, float *const *recv, size_t n) {
    (void)c, (void)send, (void)recv, (void)n;
    return no_cuda();
}
em_status nccl_comm_wait(nccl_comm *c) {
    (void)c;
    return no_cuda();
}
void nccl_comm_set_timing(nccl_comm *c, bool on) { (void)c, (void)on; }
double nccl_comm_take_time(nccl_comm *c, long *calls) {
    (void)c;
    if (calls) *calls = 0;
    return 0;
}

#else
/* the CUDA build implements collective.h in backend/cuda/cuda_nccl.cu */
typedef int collective_none_unused;
#endif
