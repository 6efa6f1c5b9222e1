/* collective.h — collective operations between the GPUs of a
 * tensor-parallel group (NCCL, opened at run time like cuBLAS).
 *
 * A communicator spans `world` ranks; this process drives `n_local` of them
 * (all of them when one process runs every GPU of a host, one when each
 * rank is its own process). Operations take one buffer per local rank, in
 * backend memory, and are queued on each local backend's stream — the NCCL
 * calls of the local ranks are grouped (ncclGroupStart/End) so one thread
 * can drive several GPUs without deadlocking on the first call.
 *
 * Nothing here blocks without a deadline: em_comm_wait polls the streams and
 * NCCL's asynchronous error state, and aborts the communicator when a peer
 * does not answer in time, so a dead or hung rank becomes an error here
 * instead of a hang. NVLink multicast (NVLS) is kept off: the process
 * environment gets NCCL_NVLS_ENABLE=0 before NCCL starts unless the user set
 * it, and ember never creates multicast objects itself.
 *
 * A build without CUDA, or a machine without libnccl.so.2, gets errors that
 * say so from every NCCL constructor. Backends whose memory is the host's
 * (CPU) get a host implementation from em_comm_init_all, so the split graph
 * runs and is tested without GPUs. */
#ifndef EMBER_BACKEND_COLLECTIVE_H
#define EMBER_BACKEND_COLLECTIVE_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_COMM_ID_BYTES 128 /* an NCCL unique id */

typedef struct em_comm em_comm;

/* Usable GPUs on this machine (0 in a build without CUDA). */
int em_gpu_count(void);
/* Whether the backend is a CUDA backend (a communicator can use it). */
bool em_backend_is_cuda(const em_backend *be);

/* One process, n GPUs: a communicator over bes[0..n) (rank i on bes[i]),
 * made with ncclCommInitAll. The backends must outlive it. */
em_status em_comm_init_all(em_backend *const *bes, int n, int timeout_ms, em_comm **out);
/* A fresh unique id, made by rank 0 and handed to every rank. */
em_status em_comm_unique_id(uint8_t id[EM_COMM_ID_BYTES]);
/* One rank of a group spread over processes (ncclCommInitRank), joining
 * within timeout_ms or failing with the communicator aborted. */
em_status em_comm_init_rank(em_backend *be, int rank, int world, const uint8_t id[EM_COMM_ID_BYTES], int timeout_ms,
                            em_comm **out);
void em_comm_free(em_comm *c);

int em_comm_world(const em_comm *c);
int em_comm_local(const em_comm *c);

/* bufs[i] (n floats on local rank i) = the sum over every rank, in place.
 * A NULL bufs[i] (recv[i] below) leaves local rank i out of this call: its
 * part is queued already, inside a recorded step (CUDA only). */
em_status em_comm_allreduce_sum(em_comm *c, float *const *bufs, size_t n);
/* recv[i] (world * n floats on local rank i) = every rank's send (n floats),
 * in rank order. */
em_status em_comm_allgather(em_comm *c, const float *const *send, float *const *recv, size_t n);
/* Waits for every operation queued on the local ranks' streams, polling
 * NCCL's error state; past timeout_ms, aborts the communicator and fails.
 * After an abort every operation fails at once. */
em_status em_comm_wait(em_comm *c);

/* Timing of all-reduces (CUDA events around each grouped call), for bench
 * figures: on enables it; em_comm_take_time returns the milliseconds and
 * the number of all-reduces completed since the last take (valid after
 * em_comm_wait). */
void em_comm_set_timing(em_comm *c, bool on);
double em_comm_take_time(em_comm *c, long *calls);

#endif
