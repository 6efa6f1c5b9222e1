/* scheduler.h — bounded concurrency for generation jobs.
 *
 * A fixed set of worker threads (--max-concurrency) runs jobs from a FIFO
 * queue of bounded length (--queue). The model's own em_generate already
 * interleaves concurrent generations step by step; the scheduler bounds how
 * many are in flight and how many may wait, so an overloaded server answers
 * "busy" at once instead of piling up work. */
#ifndef EMBER_SERVER_SCHEDULER_H
#define EMBER_SERVER_SCHEDULER_H

#include "base/status.h"
#include "server/job.h"

typedef struct srv_sched srv_sched;

/* Returns NULL on failure. workers >= 1, queue_cap >= 0. */
srv_sched *sched_new(int workers, int queue_cap);
/* Cancels what is left, joins the workers, frees. */
void sched_free(srv_sched *s);
/* Queues j (takes a reference). EM_ERR_LIMIT when the queue is full,
 * EM_ERR_CANCELLED when the scheduler is stopping. */
em_status sched_submit(srv_sched *s, srv_job *j);
int sched_queued(srv_sched *s);
int sched_running(srv_sched *s);
/* Refuses new jobs from now on. */
void sched_close(srv_sched *s);
/* Sets the cancel flag of every queued and running job. */
void sched_cancel_all(srv_sched *s);
/* Waits until no job is queued or running, up to timeout_s; true if idle. */
bool sched_wait_idle(srv_sched *s, double timeout_s);

#endif
