/* Continuous batching: with greedy sampling every request's output under
 * the scheduler (concurrent, staggered arrivals, mixed lengths, a cancelled
 * neighbour, a KV budget small enough to force preemption) equals serving
 * it alone; so does every seeded sampled request's, with the sampled rows
 * of each step chosen on several threads. */
#include "test.h"

#include "engine/scheduler.h"
#include "model/model.h"

#include <pthread.h>
#include <unistd.h>

enum { N_REQ = 10, MAX_NEW = 24 };

typedef struct job {
    em_model *m;
    int32_t prompt[64];
    int n_prompt, max_tokens, delay_us;
    int32_t out[MAX_NEW + 1];
    int n_out;
    volatile int cancel;
    int cancel_after;
    int sampled; /* seeded top-k/top-p sampling instead of greedy */
    float logprob_sum;
    em_status status;
    em_generate_result res;
} job;

static int collect(void *user, const em_token_info *t) {
    job *j = user;
    if (t->token >= 0 && j->n_out <= MAX_NEW) j->out[j->n_out++] = t->token;
    if (t->token >= 0) j->logprob_sum += t->logprob + (t->n_top ? t->top_logprobs[0] : 0.0f);
    if (j->cancel_after && j->n_out >= j->cancel_after) j->cancel = 1;
    return 0;
}

static void run_job(job *j) {
    j->n_out = 0;
    em_generate_params p = {.prompt = j->prompt, .n_prompt = (size_t)j->n_prompt, .max_tokens = j->max_tokens,
                            .on_token = collect, .user = j, .cancel = &j->cancel, .ignore_eos = 1};
    p.sampling.temperature = 0;
    j->logprob_sum = 0;
    if (j->sampled) {
        p.sampling = (em_sampling){.temperature = 0.9f, .top_p = 0.9f, .top_k = 20, .repetition_penalty = 1,
                                   .seed = 1000u + (uint64_t)j->n_prompt, .has_seed = 1};
        p.no_logprob = j->n_prompt % 2;
        p.top_logprobs = j->n_prompt % 3;
    }
    j->status = em_generate(j->m, &p, &j->res);
}

static void *thread_main(void *arg) {
    job *j = arg;
    usleep((useconds_t)j->delay_us);
    run_job(j);
    return NULL;
}

static void run_suite(const char *dir, size_t kv_bytes, int sampled) {
    em_open_options o = {.n_threads = 2, .precision = EM_PRECISION_EXACT, .max_sequences = 4, .max_context = 128,
                         .kv_cache_bytes = kv_bytes};
    em_model *m;
    REQUIRE(em_model_open(dir, &o, &m) == EM_OK);
    static job alone[N_REQ], batched[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        job *a = &alone[i];
        memset(a, 0, sizeof *a);
        a->m = m;
        a->n_prompt = 20 + (i * 7) % 40; /* some prompts cross the FAST threshold */
        for (int k = 0; k < a->n_prompt; k++) a->prompt[k] = (int32_t)((i * 131 + k * 17 + 5) % m->cfg.vocab);
        a->max_tokens = 4 + (i * 5) % (MAX_NEW - 4);
        a->sampled = sampled;
        run_job(a);
        REQUIRE(a->status == EM_OK);
        batched[i] = *a;
        batched[i].delay_us = (i % 3) * 500;
    }
    batched[3].cancel_after = 2; /* a neighbour that leaves early */
    REQUIRE(sched_start(m, &(sched_options){.max_batch = 4, .prefill_chunk = 16, .sample_threads = sampled ? 3 : 0}) ==
            EM_OK);
    pthread_t th[N_REQ];
    for (int i = 0; i < N_REQ; i++) pthread_create(&th[i], NULL, thread_main, &batched[i]);
    for (int i = 0; i < N_REQ; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N_REQ; i++) {
        CHECK(batched[i].status == EM_OK);
        if (i == 3) {
            CHECK(batched[i].res.finish == EM_FINISH_CANCELLED);
            continue;
        }
        CHECKF(batched[i].n_out == alone[i].n_out && !memcmp(batched[i].out, alone[i].out, sizeof(int32_t) * (size_t)alone[i].n_out),
               "%s request %d differs under batching (%d vs %d tokens, finish %d, prompt %d)", dir, i, batched[i].n_out, alone[i].n_out, (int)batched[i].res.finish, batched[i].n_prompt);
        /* the dense family's EXACT rows do not depend on the batch: the
         * logprobs delivered from the parallel choice are the same bits */
        if (sampled)
            CHECKF(batched[i].logprob_sum == alone[i].logprob_sum, "%s request %d: logprobs differ under batching", dir, i);
    }
    sched_stats st;
    sched_get_stats(m->sched, &st);
    fprintf(stderr, "  %s kv=%zu: %llu steps, %llu tokens, %llu preemptions\n", dir, kv_bytes, st.steps,
            st.batched_tokens, st.preemptions);
    CHECK(st.steps > 0 && st.batched_tokens > st.steps); /* batching happened */
    if (kv_bytes) CHECK(st.preemptions > 0);
    em_model_free(m); /* stops the scheduler */
}

/* ---- prefix caching ---- */

typedef struct capture {
    float *first_logits;
    int have_logits;
    int n_vocab;
    int32_t out[8];
    int n_out;
} capture;

static void grab_logits(void *user, float *logits, int n_vocab, const int32_t *h, size_t nh) {
    (void)h;
    (void)nh;
    capture *c = user;
    if (!c->have_logits) {
        memcpy(c->first_logits, logits, sizeof(float) * (size_t)n_vocab);
        c->have_logits = 1;
    }
}

static int grab_token(void *user, const em_token_info *t) {
    capture *c = user;
    if (t->token >= 0 && c->n_out < 8) c->out[c->n_out++] = t->token;
    return 0;
}

static em_generate_result run_prompt(em_model *m, const int32_t *ids, size_t n, capture *c) {
    c->have_logits = 0;
    c->n_out = 0;
    em_generate_params p = {.prompt = ids, .n_prompt = n, .max_tokens = 6, .on_token = grab_token,
                            .on_logits = grab_logits, .user = c, .ignore_eos = 1};
    p.sampling.temperature = 0;
    em_generate_result r;
    REQUIRE(em_generate(m, &p, &r) == EM_OK);
    return r;
}

static void prefix_suite(const char *dir, size_t cache_bytes) {
    em_open_options o = {.n_threads = 2, .precision = EM_PRECISION_EXACT, .max_sequences = 2, .max_context = 256};
    em_model *m;
    REQUIRE(em_model_open(dir, &o, &m) == EM_OK);
    int V = m->cfg.vocab;
    int32_t a[100], b[100], c[40];
    for (int i = 0; i < 100; i++) a[i] = b[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 70; i < 100; i++) b[i] = (int32_t)((i * 53 + 3) % V); /* diverges inside block 2 */
    for (int i = 0; i < 40; i++) c[i] = i < 10 ? a[i] : (int32_t)((i * 29 + 7) % V); /* inside block 0 */
    capture cold_a = {calloc((size_t)V, 4), 0, V, {0}, 0}, cold_b = {calloc((size_t)V, 4), 0, V, {0}, 0};
    capture cold_c = {calloc((size_t)V, 4), 0, V, {0}, 0}, warm = {calloc((size_t)V, 4), 0, V, {0}, 0};
    run_prompt(m, a, 100, &cold_a); /* served alone: the reference */
    run_prompt(m, b, 100, &cold_b);
    run_prompt(m, c, 40, &cold_c);
    /* a conversation's next turn: d, its 6 generated ids (5 of them in the
     * cache when it ends), then new ids; the cached part ends inside d's
     * last, unfilled block */
    int32_t d[40], e[55];
    for (int i = 0; i < 40; i++) d[i] = (int32_t)((i * 61 + 17) % V);
    capture cold_d = {calloc((size_t)V, 4), 0, V, {0}, 0}, cold_e = {calloc((size_t)V, 4), 0, V, {0}, 0};
    run_prompt(m, d, 40, &cold_d);
    memcpy(e, d, sizeof d);
    memcpy(e + 40, cold_d.out, 5 * sizeof(int32_t));
    for (int i = 45; i < 55; i++) e[i] = (int32_t)((i * 13 + 1) % V);
    if (e[45] == cold_d.out[5]) e[45] = (e[45] + 1) % V;
    run_prompt(m, e, 55, &cold_e);
    REQUIRE(sched_start(m, &(sched_options){.prefill_chunk = 16, .prompt_cache_bytes = cache_bytes}) == EM_OK);
    em_generate_result r1 = run_prompt(m, a, 100, &warm);
    CHECK(r1.n_cached == 0);
    em_generate_result r2 = run_prompt(m, a, 100, &warm);
    double err = 0;
    for (int v = 0; v < V; v++) err = fmax(err, fabs(warm.first_logits[v] - cold_a.first_logits[v]));
    CHECKF(err <= 1e-6, "cached prefix changes logits by %g", err);
    CHECK(warm.n_out == cold_a.n_out && !memcmp(warm.out, cold_a.out, sizeof warm.out));
    /* b agrees with a for 2 blocks and 6 ids of the third, c for 10 ids of
     * the first: those positions are copied out of a's cached blocks */
    em_generate_result r3 = run_prompt(m, b, 100, &warm);
    CHECK(warm.n_out == cold_b.n_out && !memcmp(warm.out, cold_b.out, sizeof warm.out));
    err = 0;
    for (int v = 0; v < V; v++) err = fmax(err, fabs(warm.first_logits[v] - cold_b.first_logits[v]));
    CHECKF(err <= 1e-6, "a prefix reused inside a block changes logits by %g", err);
    em_generate_result r4 = run_prompt(m, c, 40, &warm);
    CHECK(warm.n_out == cold_c.n_out && !memcmp(warm.out, cold_c.out, sizeof warm.out));
    err = 0;
    for (int v = 0; v < V; v++) err = fmax(err, fabs(warm.first_logits[v] - cold_c.first_logits[v]));
    CHECKF(err <= 1e-6, "a prefix reused inside the first block changes logits by %g", err);
    em_generate_result r5 = run_prompt(m, a, 100, &warm); /* a's cached blocks are unchanged by the copies */
    err = 0;
    for (int v = 0; v < V; v++) err = fmax(err, fabs(warm.first_logits[v] - cold_a.first_logits[v]));
    CHECKF(err <= 1e-6, "reusing a again after partial copies changes logits by %g", err);
    run_prompt(m, d, 40, &warm);
    em_generate_result r6 = run_prompt(m, e, 55, &warm);
    CHECK(warm.n_out == cold_e.n_out && !memcmp(warm.out, cold_e.out, sizeof warm.out));
    err = 0;
    for (int v = 0; v < V; v++) err = fmax(err, fabs(warm.first_logits[v] - cold_e.first_logits[v]));
    CHECKF(err <= 1e-6, "a next turn reusing the last turn's unfilled block changes logits by %g", err);
    if (cache_bytes == 0) {
        CHECKF(r6.n_cached == 45, "a next turn reused %zu tokens", r6.n_cached);
        CHECKF(r2.n_cached == 96, "second run reused %zu tokens", r2.n_cached);
        CHECKF(r3.n_cached == 70, "shared-prefix run reused %zu tokens", r3.n_cached);
        CHECKF(r4.n_cached == 10, "a prompt sharing 10 ids reused %zu tokens", r4.n_cached);
        CHECKF(r5.n_cached == 96, "a's third run reused %zu tokens", r5.n_cached);
    } else {
        CHECK(r2.n_cached <= 96 && r3.n_cached <= 70 && r4.n_cached <= 10 && r6.n_cached <= 45);
    }
    sched_stats st;
    sched_get_stats(m->sched, &st);
    fprintf(stderr, "  prefix cache (cap %zu): %llu of %llu looked-up tokens hit, %llu evictions, %zu bytes cached\n",
            cache_bytes, st.prefix_hit_tokens, st.prefix_lookup_tokens, st.prefix_evictions, st.prefix_cached_bytes);
    free(cold_a.first_logits);
    free(cold_b.first_logits);
    free(cold_c.first_logits);
    free(cold_d.first_logits);
    free(cold_e.first_logits);
    free(warm.first_logits);
    em_model_free(m);
}

int main(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/golden/dense/qwen3_qknorm", test_src_dir());
    run_suite(dir, 0, 0);
    run_suite(dir, 0, 1); /* seeded sampling, rows chosen on 3 threads */
    /* 3 layers x 2 x 2 kv heads x 32 dim x 4 bytes = 1536 bytes/position:
     * room for 160 positions, enough for one full context of 128 but not
     * for four sequences at once. */
    run_suite(dir, 1536u * 160u, 0);
    /* the hybrid family: recurrent state per sequence under batching */
    char qdir[4096];
    snprintf(qdir, sizeof qdir, "%s/tests/golden/qwen3_5/q35_tied_ratio2", test_src_dir());
    run_suite(qdir, 0, 0);
    prefix_suite(dir, 0);
    prefix_suite(dir, 1536u * 32u); /* room for one cached block: evictions */
    return test_summary();
}
