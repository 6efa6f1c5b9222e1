/* job.c — reference counting and completion of generation jobs. */
#include "server/job.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

void srv_job_init(srv_job *j, void (*run)(srv_job *), void (*destroy)(srv_job *)) {
    j->run = run;
    j->destroy = destroy;
    j->cancel = 0;
    j->t_queued = 0;
    j->keepalive = NULL;
    j->keepalive_s = 0;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->done = false;
    atomic_init(&j->changes, 0);
    j->pipe = NULL;
    j->pipe_len = j->pipe_off = j->pipe_cap = 0;
    j->next = NULL;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->pipe);
    j->destroy(j);
}

/* Absolute CLOCK_REALTIME deadline timeout_ms from now (for cond waits). */
static struct timespec deadline_in(int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

bool srv_job_wait(srv_job *j, int timeout_ms) {
    struct timespec until = deadline_in(timeout_ms);
    pthread_mutex_lock(&j->mu);
    while (!j->done)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT) break;
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done;
}

void srv_job_finish(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    atomic_fetch_add_explicit(&j->changes, 1, memory_order_release);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}
