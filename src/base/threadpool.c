/* threadpool.c — spin-then-sleep parallel-for pool.
 *
 * A job lives on the caller's stack; the pool publishes a pointer to it.
 * Tasks are claimed with an atomic counter and counted when finished, so the
 * caller never waits for a worker that did not join the job (a sleeping or
 * preempted worker cannot stall a step). Workers announce themselves in
 * `inside` before reading the job pointer; the caller unpublishes the job
 * and waits for `inside` to drain before its stack frame goes away. */
#include "base/threadpool.h"

#include "base/alloc.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_BEFORE_SLEEP 20000

typedef struct pool_job {
    em_pool_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next;
    atomic_int finished;
} pool_job;

struct em_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;
    _Atomic(pool_job *) current;
    atomic_int inside;
    atomic_int quit;
};

typedef struct {
    em_pool *pool;
    int index;
} worker_arg;

int em_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void run_tasks(pool_job *j, int thread) {
    for (;;) {
        int t = atomic_fetch_add(&j->next, 1);
        if (t >= j->n_tasks) break;
        j->fn(j->ctx, t, thread);
        atomic_fetch_add(&j->finished, 1);
    }
}

static void wait_for_work(em_pool *p, unsigned seen) {
    for (int spins = 0; atomic_load(&p->generation) == seen && !atomic_load(&p->quit);) {
        if (++spins < SPIN_BEFORE_SLEEP) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->generation) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    em_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        wait_for_work(p, seen);
        if (atomic_load(&p->quit)) return NULL;
        seen = atomic_load(&p->generation);
        atomic_fetch_add(&p->inside, 1);
        pool_job *j = atomic_load(&p->current);
        if (j) run_tasks(j, index);
        atomic_fetch_sub(&p->inside, 1);
    }
}

em_pool *em_pool_create(int n_threads) {
    if (n_threads <= 0) n_threads = em_cpu_count();
    em_pool *p = em_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->threads = em_calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!p->threads) {
            free(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) {
                wa->pool = p;
                wa->index = i;
            }
            if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                p->n_threads = i;
                break;
            }
        }
    }
    return p;
}

void em_pool_free(em_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int em_pool_threads(const em_pool *p) { return p ? p->n_threads : 1; }

static void wait_until(atomic_int *v, int target, int cmp_equal) {
    for (int spins = 0;; spins++) {
        int x = atomic_load(v);
        if (cmp_equal ? x == target : x >= target) return;
        if (spins < 4000) cpu_relax();
        else sched_yield();
    }
}

void em_pool_for(em_pool *p, int n_tasks, em_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pool_job j = {.fn = fn, .ctx = ctx, .n_tasks = n_tasks};
    atomic_init(&j.next, 0);
    atomic_init(&j.finished, 0);
    atomic_store(&p->current, &j);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_tasks(&j, 0);
    wait_until(&j.finished, n_tasks, 0);
    atomic_store(&p->current, NULL);
    wait_until(&p->inside, 0, 1);
}

/* ---- em_pool_for_runs ---------------------------------------------------
 * A run's next task (front) and end (back) share one 64-bit word, so the
 * owner taking the front and a thief taking the back never both get the
 * last task. */

#define RUNS_MAX 64

typedef struct runs_job {
    em_pool_fn fn;
    void *ctx;
    int n_runs;
    _Atomic unsigned long long run[RUNS_MAX]; /* front | back << 32 */
} runs_job;

static unsigned long long runs_pack(unsigned front, unsigned back) {
    return (unsigned long long)front | (unsigned long long)back << 32;
}

/* Takes run r's first task (front) or last (!front); -1 when it is empty. */
static int runs_take(runs_job *j, int r, int front) {
    unsigned long long w = atomic_load(&j->run[r]);
    for (;;) {
        unsigned f = (unsigned)w, b = (unsigned)(w >> 32);
        if (f >= b) return -1;
        unsigned long long next = front ? runs_pack(f + 1, b) : runs_pack(f, b - 1);
        if (atomic_compare_exchange_weak(&j->run[r], &w, next)) return front ? (int)f : (int)b - 1;
    }
}

/* The run with the most tasks left, or -1 when all are empty. */
static int runs_fullest(runs_job *j) {
    int best = -1;
    unsigned most = 0;
    for (int r = 0; r < j->n_runs; r++) {
        unsigned long long w = atomic_load(&j->run[r]);
        unsigned f = (unsigned)w, b = (unsigned)(w >> 32);
        if (b > f && b - f > most) most = b - f, best = r;
    }
    return best;
}

static void runs_task(void *ctx, int r, int thread) {
    runs_job *j = ctx;
    for (int t; (t = runs_take(j, r, 1)) >= 0;) j->fn(j->ctx, t, thread);
    for (int v; (v = runs_fullest(j)) >= 0;) {
        int t = runs_take(j, v, 0);
        if (t >= 0) j->fn(j->ctx, t, thread);
    }
}

void em_pool_for_runs(em_pool *p, int n_tasks, em_pool_fn fn, void *ctx) {
    int n = em_pool_threads(p);
    if (n > RUNS_MAX) n = RUNS_MAX;
    if (n > n_tasks) n = n_tasks;
    if (n <= 1) {
        em_pool_for(p, n_tasks, fn, ctx);
        return;
    }
    runs_job j = {.fn = fn, .ctx = ctx, .n_runs = n};
    for (int r = 0; r < n; r++)
        atomic_init(&j.run[r], runs_pack((unsigned)((long long)n_tasks * r / n),
                                         (unsigned)((long long)n_tasks * (r + 1) / n)));
    em_pool_for(p, n, runs_task, &j);
}

