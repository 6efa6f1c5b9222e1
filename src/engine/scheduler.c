/* scheduler.c — the continuous-batching loop (see scheduler.h). */
#include "engine/scheduler.h"

#include "engine/prompt_cache.h"
#include "model/batch_rows.h"
#include "base/alloc.h"
#include "base/log.h"
#include "base/spin.h"
#include "base/threadpool.h"
#include "base/timer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct sched_req {
    gen_seq *g;
    em_status status;
    bool done;
    unsigned long long order; /* arrival order: preempt the newest */
    double t_admitted;
    bool in_batch; /* has a span in the step being built */
    prompt_blocks blocks; /* prefix-cache hash chain of the history */
    struct sched_req *next;
} sched_req;

struct em_scheduler {
    em_model *m;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    atomic_uint arrivals; /* bumped by every request and the stop: polled while idle */
    sched_req *wait_head, *wait_tail; /* FIFO, guarded by mu */
    sched_req **active;               /* owned by the loop thread */
    int n_active, max_batch, prefill_chunk;
    bool prefix_cache;
    int snapshot_every;
    kv_store *store; /* NULL: none */
    bool stop;
    unsigned long long next_order;
    sched_stats stats; /* guarded by mu */
    /* per-step buffers */
    em_span *spans;
    sched_req **span_req;
    float *logits;
    int32_t *argmax; /* ids chosen by the model, one per logits row */
    em_sample_params *sample; /* per logits row: the draw the model makes (em_batch.sample) */
    bool *row_dev;            /* per logits row: its id comes from the model */
    size_t logits_rows;
    /* sampled rows of a step, chosen in parallel on `pool` (NULL: serially) */
    em_pool *pool;
    int n_picks;
    int *pick_span, *pick_row;
    int32_t *pick_tok;
    em_token_info *pick_info;
};

static void push_front(em_scheduler *s, sched_req *r) {
    r->next = s->wait_head;
    s->wait_head = r;
    if (!s->wait_tail) s->wait_tail = r;
}

static sched_req *pop_front(em_scheduler *s) {
    sched_req *r = s->wait_head;
    if (r) {
        s->wait_head = r->next;
        if (!s->wait_head) s->wait_tail = NULL;
        r->next = NULL;
    }
    return r;
}

static void complete(em_scheduler *s, sched_req *r, em_status st) {
    gen_seq *g = r->g;
    if (s->prefix_cache && g->seq >= 0) prompt_cache_register_tail(s->m, g->seq, g->history, g->fed, &r->blocks);
    prompt_blocks_free(&r->blocks);
    if (g->seq >= 0) kv_seq_release(s->m->kv, g->seq);
    g->seq = -1;
    double now = em_now();
    g->r->prefill_seconds = (g->t_first ? g->t_first : now) - g->t_start;
    g->r->decode_seconds = now - (g->t_first ? g->t_first : now);
    pthread_mutex_lock(&s->mu);
    r->status = st;
    r->done = true;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Moves waiting requests into the active set while slots are free. */
static void admit(em_scheduler *s) {
    pthread_mutex_lock(&s->mu);
    while (s->n_active < s->max_batch && s->wait_head) {
        sched_req *r = s->wait_head;
        if (kv_seq_alloc(s->m->kv, &r->g->seq) != EM_OK) break;
        pop_front(s);
        r->g->fed = 0;
        if (s->prefix_cache) {
            r->blocks.snap_every = s->snapshot_every;
            /* EXACT keeps the chain of before per-request precision (seed 0). */
            r->blocks.seed = r->g->math == EM_MATH_FAST ? 0x9e3779b97f4a7c15ull : 0;
            int reused = prompt_cache_attach(s->m, s->store, r->g->seq, r->g->history, r->g->n_history, &r->blocks);
            r->g->fed = (size_t)reused;
            if (!r->g->r->n_generated) r->g->r->n_cached = (size_t)reused;
        }
        r->t_admitted = em_now();
        s->active[s->n_active++] = r;
    }
    s->stats.active = s->n_active;
    pthread_mutex_unlock(&s->mu);
}

static void remove_active(em_scheduler *s, int i) {
    memmove(&s->active[i], &s->active[i + 1], (size_t)(s->n_active - i - 1) * sizeof s->active[0]);
    s->n_active--;
}

/* Preempts the newest active request that has no span in the batch being
 * built: its blocks are freed and it goes back to the front of the queue,
 * to be recomputed from its history. Returns it, or NULL when none. */
static sched_req *preempt_newest(em_scheduler *s) {
    int victim = -1;
    for (int i = 0; i < s->n_active; i++)
        if (!s->active[i]->in_batch && (victim < 0 || s->active[i]->order > s->active[victim]->order)) victim = i;
    if (victim < 0) return NULL;
    sched_req *r = s->active[victim];
    kv_seq_release(s->m->kv, r->g->seq);
    r->g->seq = -1;
    r->g->fed = 0;
    prompt_blocks_free(&r->blocks);
    remove_active(s, victim);
    pthread_mutex_lock(&s->mu);
    push_front(s, r);
    s->stats.preemptions++;
    pthread_mutex_unlock(&s->mu);
    EM_LOGD("scheduler: KV cache full, preempted a sequence (%zu tokens to recompute)", r->g->n_history);
    return r;
}

/* Drops finished and cancelled requests. */
static void retire(em_scheduler *s) {
    for (int i = 0; i < s->n_active;) {
        sched_req *r = s->active[i];
        if (!r->g->finished && gen_seq_cancelled(r->g)) gen_seq_finish(r->g, EM_FINISH_CANCELLED);
        if (r->g->finished) {
            remove_active(s, i);
            complete(s, r, EM_OK);
        } else {
            i++;
        }
    }
}

/* Reserves KV room for r to reach `len` positions, preempting newer
 * requests outside the batch. False when r itself was preempted (it waits)
 * or cannot fit at all (then it is finished). */
static bool reserve(em_scheduler *s, sched_req *r, int len) {
    for (;;) {
        em_status st = kv_seq_reserve(s->m->kv, r->g->seq, len);
        if (st == EM_OK) return true;
        if (st == EM_ERR_LIMIT) {
            sched_req *v = preempt_newest(s);
            if (v == r) return false;
            if (v) continue;
        }
        EM_LOGW("scheduler: cannot grow a sequence to %d positions: %s", len, em_last_error());
        gen_seq_finish(r->g, EM_FINISH_LENGTH);
        return false;
    }
}

/* Builds this step's spans: one token per decoding sequence first, then
 * prompt chunks within the prefill budget. Reserves KV room for each. */
static int build_batch(em_scheduler *s, int *n_rows) {
    int n = 0, budget = s->prefill_chunk;
    *n_rows = 0;
    for (int i = 0; i < s->n_active; i++) s->active[i]->in_batch = false;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->n_active; i++) {
            sched_req *r = s->active[i];
            gen_seq *g = r->g;
            size_t pending = g->n_history - g->fed;
            bool decode = pending == 1;
            if ((pass == 0) != decode || pending == 0 || g->finished || r->in_batch) continue;
            int take = decode ? 1 : (int)(pending < (size_t)budget ? pending : (size_t)budget);
            if (s->prefix_cache && !decode) take = prompt_cache_span(s->m, &r->blocks, g->fed, take);
            if (take <= 0) continue;
            if (!reserve(s, r, (int)g->fed + take)) {
                i = -1; /* the active list changed: rescan (spans kept) */
                continue;
            }
            r->in_batch = true;
            if (!decode) budget -= take;
            bool last = g->fed + (size_t)take == g->n_history;
            s->spans[n] = (em_span){g->seq, g->history + g->fed, take, last ? LOGITS_LAST : LOGITS_NONE,
                                    gen_seq_span_math(g)};
            s->span_req[n++] = r;
            if (last) (*n_rows)++;
        }
    }
    return n;
}

/* Host logits of a step, in the backend's transfer memory where it has one
 * (pinned: a large batch's download runs at full speed). */
static void free_logits(em_scheduler *s) {
    em_backend *be = s->m->be;
    if (s->logits && be->ops->host_free) be->ops->host_free(be, s->logits);
    else free(s->logits);
    free(s->argmax);
    free(s->sample);
    free(s->row_dev);
    s->logits = NULL;
    s->argmax = NULL;
    s->sample = NULL;
    s->row_dev = NULL;
    s->logits_rows = 0;
}

static em_status ensure_logits(em_scheduler *s, int rows) {
    if ((size_t)rows <= s->logits_rows) return EM_OK;
    free_logits(s);
    em_backend *be = s->m->be;
    size_t bytes;
    if (!em_mul((size_t)rows * sizeof(float), (size_t)s->m->cfg.vocab, &bytes))
        return em_fail(EM_ERR_NOMEM, "%d logits rows overflow", rows);
    s->logits = be->ops->host_alloc ? be->ops->host_alloc(be, bytes) : em_mallocn(bytes, 1);
    s->argmax = em_mallocn((size_t)rows, sizeof *s->argmax);
    s->sample = em_mallocn((size_t)rows, sizeof *s->sample);
    s->row_dev = em_mallocn((size_t)rows, sizeof *s->row_dev);
    if (!s->logits || !s->argmax || !s->sample || !s->row_dev) {
        free_logits(s);
        return em_fail(EM_ERR_NOMEM, "out of memory for %d logits rows", rows);
    }
    s->logits_rows = (size_t)rows;
    return EM_OK;
}

static void fail_all(em_scheduler *s, em_status st) {
    while (s->n_active) {
        sched_req *r = s->active[0];
        remove_active(s, 0);
        gen_seq_finish(r->g, EM_FINISH_NONE);
        complete(s, r, st);
    }
}

static void pick_task(void *ctx, int task, int thread) {
    (void)thread;
    em_scheduler *s = ctx;
    gen_seq *g = s->span_req[s->pick_span[task]]->g;
    float *row = s->logits + (size_t)s->pick_row[task] * (size_t)s->m->cfg.vocab;
    gen_seq_pick(g, row, &s->pick_tok[task], &s->pick_info[task]);
}

/* Chooses the tokens of the step's sampled rows on the pool: each touches
 * only its own sequence's sampler, and a 128k-entry row takes milliseconds
 * on the host, which at batch 64 outlasted the device's step. Rows with a
 * logit processor (a callback) stay for the serial pass. Records the
 * picked spans in pick_span, in span order; returns how many. */
static int pick_parallel(em_scheduler *s, int n, const em_batch *b) {
    s->n_picks = 0;
    if (!s->pool) return 0;
    int row = 0;
    for (int i = 0; i < n; i++) {
        if (s->spans[i].logits != LOGITS_LAST) continue;
        gen_seq *g = s->span_req[i]->g;
        bool taken = b->argmax && s->row_dev[row];
        if (!taken && !gen_seq_has_processor(g) && !gen_seq_cancelled(g)) {
            s->pick_span[s->n_picks] = i;
            s->pick_row[s->n_picks++] = row;
        }
        row++;
    }
    if (s->n_picks < 2) return s->n_picks = 0; /* one row: no gain from the pool */
    em_pool_for(s->pool, s->n_picks, pick_task, s);
    return s->n_picks;
}

/* Where each logits row's token is chosen: greedy sequences take the
 * model's argmax, and sampled ones the model's draw where it draws (a GPU:
 * only their ids leave the device, and no host thread scans or sorts their
 * rows); the rest sample on the host. Fills s->row_dev and s->sample (the
 * draws take their uniforms from the sequences' generators now); returns
 * the rows the model chooses, *sampled whether any of them is a draw. */
static int plan_draws(em_scheduler *s, int n, bool *sampled) {
    bool dev = model_device_samples(s->m);
    int row = 0, chosen = 0;
    *sampled = false;
    for (int i = 0; i < n; i++) {
        if (s->spans[i].logits != LOGITS_LAST) continue;
        gen_seq *g = s->span_req[i]->g;
        bool greedy = gen_seq_greedy_id(g), draw = !greedy && dev && gen_seq_device_draw(g) && !gen_seq_cancelled(g);
        memset(&s->sample[row], 0, sizeof s->sample[row]);
        if (draw) gen_seq_draw_params(g, &s->sample[row]);
        s->row_dev[row] = greedy || draw;
        *sampled |= draw;
        chosen += greedy || draw;
        row++;
    }
    return chosen;
}

static void step(em_scheduler *s) {
    int rows;
    int n = build_batch(s, &rows);
    if (n == 0) return;
    double t0 = em_now();
    em_status st = ensure_logits(s, rows);
    bool sampled = false;
    int chosen = st == EM_OK ? plan_draws(s, n, &sampled) : 0;
    em_batch b = {s->spans, n, chosen ? s->argmax : NULL, chosen == rows, sampled ? s->sample : NULL};
    if (st == EM_OK) st = model_forward(s->m, &b, s->logits);
    double t1 = em_now();
    if (st != EM_OK) {
        EM_LOGE("scheduler: forward failed: %s", em_last_error());
        fail_all(s, st);
        return;
    }
    int picks = pick_parallel(s, n, &b), next_pick = 0;
    int row = 0, tokens = 0, prefill = 0, fast = 0;
    for (int i = 0; i < n; i++) {
        gen_seq *g = s->span_req[i]->g;
        g->fed += (size_t)s->spans[i].n;
        if (s->prefix_cache) prompt_cache_register(s->m, s->store, g->seq, g->history, g->fed, &s->span_req[i]->blocks);
        tokens += s->spans[i].n;
        if (s->spans[i].n > 1) prefill += s->spans[i].n;
        if (s->spans[i].n > 1 && span_prefill_math(&s->spans[i], s->m->prefill_math) == EM_MATH_FAST)
            fast += s->spans[i].n;
        if (s->spans[i].logits != LOGITS_LAST) continue;
        em_status ss;
        if (next_pick < picks && s->pick_span[next_pick] == i) {
            ss = gen_seq_deliver(g, s->pick_tok[next_pick], &s->pick_info[next_pick]);
            next_pick++;
        } else {
            ss = b.argmax && s->row_dev[row] ? gen_seq_take(g, s->argmax[row])
                                                  : gen_seq_sample(g, s->logits + (size_t)row * (size_t)s->m->cfg.vocab);
        }
        if (ss != EM_OK) gen_seq_finish(g, EM_FINISH_NONE);
        if (g->r->n_generated == 1)
            EM_LOGD("scheduler: first token %.2f ms after arrival (queued %.2f ms, step forward %.2f ms, sample "
                    "%.2f ms, %d rows fed of which %zu cached)",
                    (em_now() - g->t_start) * 1e3, (s->span_req[i]->t_admitted - g->t_start) * 1e3, (t1 - t0) * 1e3,
                    (em_now() - t1) * 1e3, s->spans[i].n, g->r->n_cached);
        row++;
    }
    pthread_mutex_lock(&s->mu);
    s->stats.steps++;
    s->stats.batched_tokens += (unsigned long long)tokens;
    s->stats.prefill_tokens += (unsigned long long)prefill;
    s->stats.prefill_fast_tokens += (unsigned long long)fast;
    s->stats.decode_tokens += (unsigned long long)(tokens - prefill);
    double t2 = em_now();
    s->stats.busy_seconds += t2 - t0;
    s->stats.forward_seconds += t1 - t0;
    s->stats.sample_seconds += t2 - t1;
    pthread_mutex_unlock(&s->mu);
}

/* Sleeps until there is work; first polls for it a while when idle, since
 * requests often follow each other closely (spin.h). */
static bool wait_for_work(em_scheduler *s) {
    pthread_mutex_lock(&s->mu);
    if (!s->stop && !s->wait_head && s->n_active == 0) em_spin_unlocked(&s->mu, &s->arrivals, em_spin_window(), false);
    while (!s->stop && !s->wait_head && s->n_active == 0) pthread_cond_wait(&s->work_cv, &s->mu);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    return !stop;
}

static void *loop(void *arg) {
    em_scheduler *s = arg;
    while (wait_for_work(s)) {
        admit(s);
        step(s);
        retire(s);
    }
    for (int i = 0; i < s->n_active; i++) gen_seq_finish(s->active[i]->g, EM_FINISH_CANCELLED);
    retire(s);
    pthread_mutex_lock(&s->mu);
    for (sched_req *r; (r = pop_front(s));) {
        gen_seq_finish(r->g, EM_FINISH_CANCELLED);
        r->done = true;
    }
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

em_status sched_run(em_scheduler *s, gen_seq *g) {
    sched_req r = {.g = g};
    pthread_mutex_lock(&s->mu);
    if (s->stop) {
        pthread_mutex_unlock(&s->mu);
        return em_fail(EM_ERR_CANCELLED, "the server is shutting down");
    }
    r.order = s->next_order++;
    if (s->wait_tail) s->wait_tail->next = &r;
    else s->wait_head = &r;
    s->wait_tail = &r;
    s->stats.waiting++;
    atomic_fetch_add_explicit(&s->arrivals, 1, memory_order_release);
    pthread_cond_signal(&s->work_cv);
    while (!r.done) pthread_cond_wait(&s->done_cv, &s->mu);
    s->stats.waiting--;
    pthread_mutex_unlock(&s->mu);
    return r.status;
}

void sched_get_stats(em_scheduler *s, sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
    kv_cache *c = s->m->kv;
    pthread_mutex_lock(&c->mu);
    out->prefix_lookup_tokens = c->prefix_lookup_tokens;
    out->prefix_hit_tokens = c->prefix_hit_tokens;
    out->prefix_evictions = c->prefix_evictions;
    out->prefix_cached_bytes = kv_prefix_cached_bytes(c);
    out->prefix_state_bytes = c->snap_total;
    out->prefix_state_snapshots = c->n_snaps;
    out->kv_blocks_total = c->max_blocks;
    out->kv_blocks_free = c->n_free + c->n_lru;
    pthread_mutex_unlock(&c->mu);
    out->kv_store = s->store != NULL;
    if (s->store) kv_store_get_stats(s->store, &out->store);
}

static void free_picks(em_scheduler *s) {
    em_pool_free(s->pool);
    free(s->pick_span);
    free(s->pick_row);
    free(s->pick_tok);
    free(s->pick_info);
    s->pool = NULL;
}

em_status sched_start(em_model *m, const sched_options *o) {
    em_scheduler *s = em_calloc(1, sizeof *s);
    if (!s) return em_fail(EM_ERR_NOMEM, "out of memory");
    s->m = m;
    /* Where the model computes decides whether waiting threads may poll:
     * a model on the device leaves the host's cores idle (spin.h). */
    em_spin_configure(!m->be->ops->host_memory);
    s->max_batch = o && o->max_batch > 0 && o->max_batch < m->kv->max_seqs ? o->max_batch : m->kv->max_seqs;
    s->prefill_chunk = o && o->prefill_chunk > 0 ? o->prefill_chunk : 512;
    /* A family with per-sequence recurrent state (Qwen3.5) resumes from
     * shared KV blocks plus a snapshot of that state (prompt_cache.h). */
    s->prefix_cache = !(o && o->no_prefix_cache);
    s->snapshot_every = o ? o->snapshot_every : 0;
    prompt_cache_configure(m, o ? o->prompt_cache_bytes : 0);
    if (s->prefix_cache && o && o->kv_store_dir) {
        em_status st = kv_store_open(m, o->kv_store_dir, o->kv_store_bytes, &s->store);
        if (st != EM_OK) {
            free(s);
            return st;
        }
    }
    s->active = em_calloc((size_t)s->max_batch, sizeof *s->active);
    s->spans = em_calloc((size_t)s->max_batch, sizeof *s->spans);
    s->span_req = em_calloc((size_t)s->max_batch, sizeof *s->span_req);
    int threads = o && o->sample_threads > 0 ? o->sample_threads : m->be->ops->host_memory ? 1 : em_cpu_count();
    if (threads > 16) threads = 16;
    if (threads > 1 && s->max_batch > 1) {
        s->pick_span = em_calloc((size_t)s->max_batch, sizeof *s->pick_span);
        s->pick_row = em_calloc((size_t)s->max_batch, sizeof *s->pick_row);
        s->pick_tok = em_calloc((size_t)s->max_batch, sizeof *s->pick_tok);
        s->pick_info = em_calloc((size_t)s->max_batch, sizeof *s->pick_info);
        /* without the pool the rows are simply chosen one by one */
        if (s->pick_span && s->pick_row && s->pick_tok && s->pick_info) s->pool = em_pool_create(threads);
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    if (!s->active || !s->spans || !s->span_req || pthread_create(&s->thread, NULL, loop, s) != 0) {
        free_picks(s);
        free(s->active);
        free(s->spans);
        free(s->span_req);
        kv_store_close(s->store);
        free(s);
        return em_fail(EM_ERR_NOMEM, "cannot start the scheduler");
    }
    m->sched = s;
    return EM_OK;
}

void sched_stop(em_model *m) {
    em_scheduler *s = m->sched;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    atomic_fetch_add_explicit(&s->arrivals, 1, memory_order_release);
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    m->sched = NULL;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free_picks(s);
    free(s->active);
    free(s->spans);
    free(s->span_req);
    free_logits(s);
    kv_store_close(s->store);
    free(s);
}
