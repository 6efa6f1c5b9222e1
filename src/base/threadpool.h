/* threadpool.h — a fixed pool of workers running parallel-for jobs.
 *
 * Decode issues hundreds of small parallel loops per token, so workers spin
 * briefly on a generation counter before sleeping: waking a sleeping thread
 * costs tens of microseconds, a spin costs nothing on an otherwise idle core.
 * One job runs at a time; em_pool_for is called from a single thread. */
#ifndef EMBER_BASE_THREADPOOL_H
#define EMBER_BASE_THREADPOOL_H

typedef struct em_pool em_pool;

/* fn(ctx, task, thread): task in [0, n_tasks), thread in [0, n_threads). */
typedef void (*em_pool_fn)(void *ctx, int task, int thread);

/* n_threads counts the calling thread; 0 means one per online core.
 * Returns NULL on failure. */
em_pool *em_pool_create(int n_threads);
void em_pool_free(em_pool *p);
int em_pool_threads(const em_pool *p);
/* Runs fn for every task, tasks handed out dynamically; returns when all
 * are done. p may be NULL (runs serially). */
void em_pool_for(em_pool *p, int n_tasks, em_pool_fn fn, void *ctx);
/* Runs fn for every task like em_pool_for, but each thread walks tasks in
 * order through a run of its own: the tasks are split into one contiguous
 * run per thread, a thread takes its run's tasks from the front, and once
 * its run is done takes the last task of the run with the most left. For
 * tasks that each read the next stretch of one array (the row blocks of a
 * decode GEMV), every thread then reads one long stream, which the CPU's
 * prefetchers follow, while no thread waits on a slow one for more than a
 * task. */
void em_pool_for_runs(em_pool *p, int n_tasks, em_pool_fn fn, void *ctx);
/* Online cores of this machine. */
int em_cpu_count(void);

#endif
