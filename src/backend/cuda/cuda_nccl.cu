/* cuda_nccl.cu — collective operations over NCCL (collective.h).
 *
 * libnccl.so.2 is opened with dlopen when the first communicator is made,
 * as cuBLAS is: a build with CUDA runs on machines without NCCL, and only
 * tensor parallelism asks for it (with an error naming the library when it
 * is missing). Calls are queued on the CUDA backends' own streams, so they
 * order with the model's kernels without host synchronisation. */
#include "backend/cuda/cuda_internal.cuh"

#include <nccl.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "backend/collective.h"
#include "backend/nccl_comm.h"
#include "base/alloc.h"
#include "base/log.h"
}

#define NCCL_SONAME "libnccl.so.2"

/* The NCCL entry points ember uses, resolved once. */
typedef struct nccl_fns {
    void *lib;
    decltype(&ncclGetUniqueId) get_unique_id;
    decltype(&ncclCommInitAll) init_all;
    decltype(&ncclCommInitRankConfig) init_rank_config;
    decltype(&ncclCommDestroy) destroy;
    decltype(&ncclCommFinalize) finalize; /* optional: NCCL before 2.14 lacks it */
    decltype(&ncclCommAbort) abort;
    decltype(&ncclCommGetAsyncError) async_error;
    decltype(&ncclGetErrorString) error_string;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclAllGather) all_gather;
    decltype(&ncclGroupStart) group_start;
    decltype(&ncclGroupEnd) group_end;
} nccl_fns;

static nccl_fns g_nccl;
static pthread_mutex_t g_nccl_mu = PTHREAD_MUTEX_INITIALIZER;

template <typename F> static bool sym(void *lib, const char *name, F *out) {
    *out = (F)dlsym(lib, name);
    return *out != nullptr;
}

/* Opens NCCL once per process; keeps NVLink multicast off first. */
static em_status nccl_open(void) {
    pthread_mutex_lock(&g_nccl_mu);
    if (g_nccl.lib) {
        pthread_mutex_unlock(&g_nccl_mu);
        return EM_OK;
    }
    /* NCCL reads its environment when it initialises; multicast objects
     * (NVLS) are kept off on every host ember runs on. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    void *lib = dlopen(NCCL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        em_status s = em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism needs NCCL, and %s cannot be loaded: %s "
                              "(install NCCL or put it on the loader's path)", NCCL_SONAME, dlerror());
        pthread_mutex_unlock(&g_nccl_mu);
        return s;
    }
    nccl_fns f;
    memset(&f, 0, sizeof f);
    f.lib = lib;
    if (!sym(lib, "ncclGetUniqueId", &f.get_unique_id) || !sym(lib, "ncclCommInitAll", &f.init_all) ||
        !sym(lib, "ncclCommInitRankConfig", &f.init_rank_config) || !sym(lib, "ncclCommDestroy", &f.destroy) ||
        !sym(lib, "ncclCommAbort", &f.abort) || !sym(lib, "ncclCommGetAsyncError", &f.async_error) ||
        !sym(lib, "ncclGetErrorString", &f.error_string) || !sym(lib, "ncclAllReduce", &f.all_reduce) ||
        !sym(lib, "ncclAllGather", &f.all_gather) || !sym(lib, "ncclGroupStart", &f.group_start) ||
        !sym(lib, "ncclGroupEnd", &f.group_end)) {
        em_status s = em_fail(EM_ERR_UNSUPPORTED, "%s lacks a function ember needs: %s", NCCL_SONAME, dlerror());
        dlclose(lib);
        pthread_mutex_unlock(&g_nccl_mu);
        return s;
    }
    sym(lib, "ncclCommFinalize", &f.finalize);
    g_nccl = f;
    pthread_mutex_unlock(&g_nccl_mu);
    return EM_OK;
}

/* Events bracketing the timed all-reduces of one step, on local rank 0. */
#define COMM_TIMED_MAX 1024

struct nccl_comm {
    int world, n_local, rank0; /* rank0: the global rank of local rank 0 */
    em_backend **bes;
    ncclComm_t *comms;
    int timeout_ms;
    bool blocking; /* false: nonblocking comms (calls may return ncclInProgress) */
    bool dead;     /* aborted: every later call fails */
    char why[256];
    bool timing;
    cudaEvent_t ev[2 * COMM_TIMED_MAX];
    int n_timed;
    double time_ms;
    long calls;
    cudaEvent_t *done; /* per local rank, for nccl_comm_wait */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void pause_briefly(int spins) {
    if (spins < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* Aborts every local communicator; the group is unusable from here on. */
static void comm_abort(nccl_comm *c, const char *why) {
    if (c->dead) return;
    c->dead = true;
    snprintf(c->why, sizeof c->why, "%s", why);
    for (int i = 0; i < c->n_local; i++)
        if (c->comms[i]) g_nccl.abort(c->comms[i]);
    memset(c->comms, 0, (size_t)c->n_local * sizeof *c->comms);
    EM_LOGE("tensor parallelism: %s; communicator aborted", why);
}

static em_status dead_error(const nccl_comm *c) {
    return em_fail(EM_ERR_INTERNAL, "tensor parallelism stopped earlier: %s", c->why);
}

/* Polls NCCL's error state of every local comm until none is in progress
 * (nonblocking comms) or the deadline passes. */
static em_status settle(nccl_comm *c, const char *what) {
    double deadline = now_ms() + c->timeout_ms;
    for (int spins = 0;; spins++) {
        bool busy = false;
        for (int i = 0; i < c->n_local; i++) {
            ncclResult_t st = ncclSuccess;
            ncclResult_t r = g_nccl.async_error(c->comms[i], &st);
            if (r != ncclSuccess) st = r;
            if (st == ncclInProgress) {
                busy = true;
            } else if (st != ncclSuccess) {
                char why[200];
                snprintf(why, sizeof why, "%s failed on rank %d: %s", what, c->rank0 + i, g_nccl.error_string(st));
                comm_abort(c, why);
                return em_fail(EM_ERR_INTERNAL, "tensor parallelism: %s", why);
            }
        }
        if (!busy) return EM_OK;
        if (now_ms() > deadline) {
            char why[200];
            snprintf(why, sizeof why, "%s did not complete within %d ms (a peer rank is gone or hung)", what,
                     c->timeout_ms);
            comm_abort(c, why);
            return em_fail(EM_ERR_INTERNAL, "tensor parallelism: %s", why);
        }
        pause_briefly(spins);
    }
}

static em_status check_call(nccl_comm *c, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return EM_OK;
    if (r == ncclInProgress && !c->blocking) return settle(c, what);
    char why[200];
    snprintf(why, sizeof why, "%s failed: %s", what, g_nccl.error_string(r));
    comm_abort(c, why);
    return em_fail(EM_ERR_INTERNAL, "tensor parallelism: %s", why);
}

static em_status comm_new(em_backend *const *bes, int n_local, int world, int rank0, int timeout_ms, nccl_comm **out) {
    *out = NULL;
    for (int i = 0; i < n_local; i++)
        if (!em_backend_is_cuda(bes[i]))
            return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism runs on CUDA devices only (rank %d is on %s)",
                           rank0 + i, bes[i]->desc);
    EM_TRY(nccl_open());
    nccl_comm *c = (nccl_comm *)em_calloc(1, sizeof *c);
    if (!c) return em_fail(EM_ERR_NOMEM, "out of memory");
    c->world = world;
    c->n_local = n_local;
    c->rank0 = rank0;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
    c->blocking = true;
    c->bes = (em_backend **)em_calloc((size_t)n_local, sizeof *c->bes);
    c->comms = (ncclComm_t *)em_calloc((size_t)n_local, sizeof *c->comms);
    c->done = (cudaEvent_t *)em_calloc((size_t)n_local, sizeof *c->done);
    if (!c->bes || !c->comms || !c->done) {
        nccl_comm_free(c);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_local; i++) {
        c->bes[i] = bes[i];
        cuda_enter(bes[i]);
        if (cudaEventCreateWithFlags(&c->done[i], cudaEventDisableTiming) != cudaSuccess) {
            c->done[i] = NULL;
            nccl_comm_free(c);
            return em_fail(EM_ERR_INTERNAL, "tensor parallelism: cannot create a CUDA event on %s", bes[i]->desc);
        }
    }
    *out = c;
    return EM_OK;
}

extern "C" int em_gpu_count(void) { return cuda_device_count(); }

extern "C" bool em_backend_is_cuda(const em_backend *be) { return be && !strncmp(be->ops->name, "cuda", 4); }

extern "C" em_status nccl_comm_init_all(em_backend *const *bes, int n, int timeout_ms, nccl_comm **out) {
    nccl_comm *c;
    EM_TRY(comm_new(bes, n, n, 0, timeout_ms, &c));
    int *devs = (int *)em_calloc((size_t)n, sizeof *devs);
    if (!devs) {
        nccl_comm_free(c);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) devs[i] = ((cuda_backend *)bes[i]->impl)->device;
    ncclResult_t r = g_nccl.init_all(c->comms, n, devs);
    free(devs);
    if (r != ncclSuccess) {
        em_status s = em_fail(EM_ERR_INTERNAL, "tensor parallelism: NCCL could not join %d GPUs: %s", n,
                              g_nccl.error_string(r));
        memset(c->comms, 0, (size_t)n * sizeof *c->comms);
        nccl_comm_free(c);
        return s;
    }
    *out = c;
    return EM_OK;
}

extern "C" em_status nccl_comm_unique_id(uint8_t id[EM_COMM_ID_BYTES]) {
    EM_TRY(nccl_open());
    static_assert(sizeof(ncclUniqueId) == EM_COMM_ID_BYTES, "NCCL unique id size");
    ncclUniqueId u;
    ncclResult_t r = g_nccl.get_unique_id(&u);
    if (r != ncclSuccess)
        return em_fail(EM_ERR_INTERNAL, "tensor parallelism: NCCL could not make a unique id: %s",
                       g_nccl.error_string(r));
    memcpy(id, &u, EM_COMM_ID_BYTES);
    return EM_OK;
}

extern "C" em_status nccl_comm_init_rank(em_backend *be, int rank, int world, const uint8_t id[EM_COMM_ID_BYTES],
                                       int timeout_ms, nccl_comm **out) {
    nccl_comm *c;
    if (rank < 0 || rank >= world)
        return em_fail(EM_ERR_INVALID, "tensor parallelism: rank %d is outside a world of %d", rank, world);
    EM_TRY(comm_new(&be, 1, world, rank, timeout_ms, &c));
    /* nonblocking: a peer that never joins is a timeout, not a hang */
    c->blocking = false;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclUniqueId u;
    memcpy(&u, id, EM_COMM_ID_BYTES);
    cuda_enter(be);
    ncclResult_t r = g_nccl.init_rank_config(&c->comms[0], world, u, rank, &cfg);
    em_status s = EM_OK;
    if (r == ncclInProgress) s = settle(c, "joining the NCCL communicator");
    else if (r != ncclSuccess)
        s = em_fail(EM_ERR_INTERNAL, "tensor parallelism: rank %d could not join the NCCL communicator of %d: %s",
                    rank, world, g_nccl.error_string(r));
    if (s != EM_OK) {
        if (r != ncclInProgress) c->comms[0] = NULL;
        nccl_comm_free(c);
        return s;
    }
    *out = c;
    return EM_OK;
}

/* Flushes and quiesces every local communicator before it is destroyed.
 * Destroying is an intra-node collective: with one thread driving several
 * GPUs, destroying the first communicator alone would wait forever for the
 * others, so they are finalized together in one group first (then each
 * destroy only frees local memory). Nonblocking communicators (one per
 * process) are polled against the deadline and aborted past it. */
static void comm_finalize(nccl_comm *c) {
    if (!g_nccl.finalize || c->dead) return;
    if (g_nccl.group_start() != ncclSuccess) return;
    for (int i = 0; i < c->n_local; i++) {
        if (!c->comms[i]) continue;
        cuda_enter(c->bes[i]);
        g_nccl.finalize(c->comms[i]);
    }
    ncclResult_t r = g_nccl.group_end();
    if (r == ncclSuccess || r == ncclInProgress) {
        if (!c->blocking && settle(c, "closing the NCCL communicator") != EM_OK) EM_LOGW("%s", em_last_error());
    } else {
        comm_abort(c, "closing the NCCL communicator failed");
    }
}

extern "C" void nccl_comm_free(nccl_comm *c) {
    if (!c) return;
    if (c->comms) comm_finalize(c);
    for (int i = 0; c->comms && i < c->n_local; i++) {
        if (!c->comms[i]) continue;
        if (c->bes[i]) cuda_enter(c->bes[i]);
        g_nccl.destroy(c->comms[i]);
    }
    for (int i = 0; c->done && i < c->n_local; i++) {
        if (!c->done[i]) continue;
        cuda_enter(c->bes[i]);
        cudaEventDestroy(c->done[i]);
    }
    if (c->bes && c->bes[0]) {
        cuda_enter(c->bes[0]);
        for (int i = 0; i < 2 * COMM_TIMED_MAX; i++)
            if (c->ev[i]) cudaEventDestroy(c->ev[i]);
    }
    free(c->bes);
    free(c->comms);
    free(c->done);
    free(c);
}

extern "C" int nccl_comm_world(const nccl_comm *c) { return c->world; }
extern "C" int nccl_comm_local(const nccl_comm *c) { return c->n_local; }

/* Records a timing event on local rank 0's stream (first use creates the
 * events); false when timing is off or the step's slots are spent. */
static bool timed_mark(nccl_comm *c, int slot) {
    if (!c->timing || c->n_timed >= COMM_TIMED_MAX) return false;
    cuda_backend *cb = cuda_enter(c->bes[0]);
    if (cb->graphs.mode != EM_GRAPH_NONE) return false; /* a step being recorded: not timed */
    cudaEvent_t *e = &c->ev[2 * c->n_timed + slot];
    if (!*e && cudaEventCreate(e) != cudaSuccess) {
        *e = NULL;
        return false;
    }
    return cudaEventRecord(*e, cb->stream) == cudaSuccess;
}

/* Issues one grouped collective over the local ranks wants(i) names;
 * issue(i, comm, stream) queues rank i's call. A rank left out has its part
 * queued already (inside a recorded step). */
template <typename W, typename F>
static em_status grouped(nccl_comm *c, const char *what, bool timed, W wants, F issue) {
    if (c->dead) return dead_error(c);
    int n = 0;
    for (int i = 0; i < c->n_local; i++) n += wants(i);
    if (!n) return EM_OK;
    bool t = timed && wants(0) && timed_mark(c, 0);
    EM_TRY(check_call(c, g_nccl.group_start(), what));
    for (int i = 0; i < c->n_local; i++) {
        if (!wants(i)) continue;
        cuda_backend *cb = cuda_enter(c->bes[i]);
        cuda_stage_flush(cb);
        ncclResult_t r = issue(i, c->comms[i], cb->stream);
        if (r != ncclSuccess && r != ncclInProgress) {
            g_nccl.group_end();
            return check_call(c, r, what);
        }
    }
    EM_TRY(check_call(c, g_nccl.group_end(), what));
    if (t && timed_mark(c, 1)) c->n_timed++;
    return EM_OK;
}

extern "C" em_status nccl_comm_allreduce_sum(nccl_comm *c, float *const *bufs, size_t n) {
    return grouped(c, "an all-reduce", true, [&](int i) { return bufs[i] != NULL; },
                   [&](int i, ncclComm_t comm, cudaStream_t st) {
        return g_nccl.all_reduce(bufs[i], bufs[i], n, ncclFloat32, ncclSum, comm, st);
    });
}

extern "C" em_status nccl_comm_allgather(nccl_comm *c, const float *const *send, float *const *recv, size_t n) {
    return grouped(c, "an all-gather", false, [&](int i) { return recv[i] != NULL; },
                   [&](int i, ncclComm_t comm, cudaStream_t st) {
        return g_nccl.all_gather(send[i], recv[i], n, ncclFloat32, comm, st);
    });
}

/* Adds the elapsed time of the step's timed calls (their events are done). */
static void collect_timing(nccl_comm *c) {
    if (!c->n_timed) return;
    cuda_enter(c->bes[0]);
    for (int k = 0; k < c->n_timed; k++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, c->ev[2 * k], c->ev[2 * k + 1]) == cudaSuccess) {
            c->time_ms += ms;
            c->calls++;
        }
    }
    c->n_timed = 0;
}

extern "C" em_status nccl_comm_wait(nccl_comm *c) {
    if (c->dead) return dead_error(c);
    for (int i = 0; i < c->n_local; i++) {
        cuda_backend *cb = cuda_enter(c->bes[i]);
        cuda_stage_flush(cb);
        cudaError_t e = cudaEventRecord(c->done[i], cb->stream);
        if (e != cudaSuccess)
            return em_fail(EM_ERR_INTERNAL, "tensor parallelism: %s: %s", c->bes[i]->desc, cudaGetErrorString(e));
    }
    double deadline = now_ms() + c->timeout_ms;
    for (int i = 0, spins = 0; i < c->n_local;) {
        cuda_enter(c->bes[i]);
        cudaError_t e = cudaEventQuery(c->done[i]);
        if (e == cudaSuccess) {
            i++;
            continue;
        }
        if (e != cudaErrorNotReady)
            return em_fail(EM_ERR_INTERNAL, "tensor parallelism: %s: %s", c->bes[i]->desc, cudaGetErrorString(e));
        for (int k = 0; k < c->n_local; k++) {
            ncclResult_t st = ncclSuccess;
            if (g_nccl.async_error(c->comms[k], &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
                char why[200];
                snprintf(why, sizeof why, "rank %d: %s", c->rank0 + k, g_nccl.error_string(st));
                comm_abort(c, why);
                return em_fail(EM_ERR_INTERNAL, "tensor parallelism: %s", why);
            }
        }
        if (now_ms() > deadline) {
            char why[200];
            snprintf(why, sizeof why, "a step did not complete within %d ms on %s (a peer rank is gone or hung)",
                     c->timeout_ms, c->bes[i]->desc);
            comm_abort(c, why);
            return em_fail(EM_ERR_INTERNAL, "tensor parallelism: %s", why);
        }
        pause_briefly(spins++);
    }
    collect_timing(c);
    return EM_OK;
}

extern "C" void nccl_comm_set_timing(nccl_comm *c, bool on) {
    c->timing = on;
    c->n_timed = 0;
}

extern "C" double nccl_comm_take_time(nccl_comm *c, long *calls) {
    double t = c->time_ms;
    if (calls) *calls = c->calls;
    c->time_ms = 0;
    c->calls = 0;
    return t;
}
