/* scheduler.c — worker threads over a bounded FIFO of jobs (see scheduler.h). */
#include "server/scheduler.h"

#include "base/alloc.h"
#include "base/spin.h"
#include "base/timer.h"

#include <stdlib.h>
#include <time.h>

struct srv_sched {
    pthread_mutex_t mu;
    pthread_cond_t work;  /* a job was queued, or stopping */
    pthread_cond_t idle;  /* a job finished */
    srv_job *head, *tail;
    atomic_uint submitted; /* bumped by every submission and the stop: polled by idle workers */
    int queued, running, queue_cap;
    srv_job **active;     /* running jobs, one slot per worker */
    pthread_t *threads;
    int n_threads;
    bool closed, stopping;
};

typedef struct worker_arg {
    srv_sched *s;
    int slot;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    srv_sched *s = wa->s;
    int slot = wa->slot;
    free(wa);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (!s->head && !s->stopping) /* the next request is often close behind */
            em_spin_unlocked(&s->mu, &s->submitted, em_spin_window(), true);
        while (!s->head && !s->stopping) pthread_cond_wait(&s->work, &s->mu);
        if (!s->head) break;
        srv_job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->queued--;
        s->running++;
        s->active[slot] = j;
        pthread_mutex_unlock(&s->mu);
        j->run(j);
        srv_job_finish(j);
        pthread_mutex_lock(&s->mu);
        s->active[slot] = NULL;
        s->running--;
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->mu);
        srv_job_unref(j);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

srv_sched *sched_new(int workers, int queue_cap) {
    if (workers < 1 || queue_cap < 0) return NULL;
    srv_sched *s = em_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->threads = em_calloc((size_t)workers, sizeof *s->threads);
    s->active = em_calloc((size_t)workers, sizeof *s->active);
    if (!s->threads || !s->active) {
        free(s->threads);
        free(s->active);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->queue_cap = queue_cap;
    for (int i = 0; i < workers; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) break;
        wa->s = s;
        wa->slot = i;
        if (pthread_create(&s->threads[i], NULL, worker_main, wa)) {
            free(wa);
            break;
        }
        s->n_threads++;
    }
    if (!s->n_threads) {
        sched_free(s);
        return NULL;
    }
    return s;
}

em_status sched_submit(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    em_status st = EM_OK;
    /* Idle workers take jobs at once; only the overflow waits in the queue. */
    if (s->closed) st = em_fail(EM_ERR_CANCELLED, "the server is shutting down");
    else if (s->queued + s->running >= s->n_threads + s->queue_cap)
        st = em_fail(EM_ERR_LIMIT, "the server is busy: %d requests running and %d queued", s->running, s->queued);
    if (st == EM_OK) {
        srv_job_ref(j);
        j->t_queued = em_now();
        j->next = NULL;
        if (s->tail) s->tail->next = j;
        else s->head = j;
        s->tail = j;
        s->queued++;
        atomic_fetch_add_explicit(&s->submitted, 1, memory_order_release);
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

int sched_queued(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->queued;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int sched_running(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->running;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void sched_close(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    pthread_mutex_unlock(&s->mu);
}

void sched_cancel_all(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    for (srv_job *j = s->head; j; j = j->next) j->cancel = 1;
    for (int i = 0; i < s->n_threads; i++)
        if (s->active[i]) s->active[i]->cancel = 1;
    pthread_mutex_unlock(&s->mu);
}

bool sched_wait_idle(srv_sched *s, double timeout_s) {
    double until = em_now() + timeout_s;
    pthread_mutex_lock(&s->mu);
    while (s->queued || s->running) {
        double left = until - em_now();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double ms = left < 0.1 ? left : 0.1;
        ts.tv_nsec += (long)(ms * 1e9);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&s->idle, &s->mu, &ts);
    }
    bool idle = !s->queued && !s->running;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void sched_free(srv_sched *s) {
    if (!s) return;
    sched_close(s);
    sched_cancel_all(s);
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    atomic_fetch_add_explicit(&s->submitted, 1, memory_order_release);
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    /* Workers drain the (cancelled) queue before they exit. */
    for (int i = 0; i < s->n_threads; i++) pthread_join(s->threads[i], NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->idle);
    free(s->threads);
    free(s->active);
    free(s);
}
