/* job.h — one unit of generation work, run by the scheduler's workers.
 *
 * A protocol embeds srv_job as the first member of its own job struct and
 * sets run (executed once on a worker thread) and destroy (frees the
 * enclosing struct when the last reference goes). Streaming jobs write
 * bytes into the job's pipe (sse.h), which the HTTP thread drains; the
 * HTTP side sets `cancel` when the client goes away. Reference counting:
 * srv_job_init gives the creator one reference; the scheduler holds its own
 * while the job is queued or running. */
#ifndef EMBER_SERVER_JOB_H
#define EMBER_SERVER_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_job srv_job;
struct srv_job {
    void (*run)(srv_job *job);
    void (*destroy)(srv_job *job);
    volatile int cancel;  /* read by the generation loop between tokens */
    double t_queued;      /* em_now() at submission */
    /* Streaming: bytes the HTTP side sends on its own after keepalive_s
     * seconds without output (an SSE ping or comment, so proxies and
     * clients keep the connection during a long prefill); NULL: none.
     * Set before submission; static storage. */
    const char *keepalive;
    double keepalive_s;
    /* private: */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool done;            /* run returned (and the pipe is closed) */
    atomic_uint changes;  /* bumped by every write and by the finish: polled by a reader (spin.h) */
    char *pipe;           /* streamed bytes not yet read */
    size_t pipe_len, pipe_off, pipe_cap;
    srv_job *next;        /* scheduler queue link */
};

void srv_job_init(srv_job *j, void (*run)(srv_job *), void (*destroy)(srv_job *));
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
/* Waits up to timeout_ms for run to finish; true when it has. */
bool srv_job_wait(srv_job *j, int timeout_ms);
/* Marks the job finished and wakes waiters and the pipe reader (scheduler). */
void srv_job_finish(srv_job *j);

#endif
