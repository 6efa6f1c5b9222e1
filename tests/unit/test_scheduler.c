/* Continuous batching: with greedy sampling every request's output under
 * the scheduler (concurrent, staggered arrivals, mixed lengths, a cancelled
 * neighbour, a KV budget small enough to force preemption) equals serving
 * it alone. */
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
    em_status status;
    em_generate_result res;
} job;

static int collect(void *user, const em_token_info *t) {
    job *j = user;
    if (t->token >= 0 && j->n_out <= MAX_NEW) j->out[j->n_out++] = t->token;
    if (j->cancel_after && j->n_out >= j->cancel_after) j->cancel = 1;
    return 0;
}

static void run_job(job *j) {
    j->n_out = 0;
    em_generate_params p = {.prompt = j->prompt, .n_prompt = (size_t)j->n_prompt, .max_tokens = j->max_tokens,
                            .on_token = collect, .user = j, .cancel = &j->cancel, .ignore_eos = 1};
    p.sampling.temperature = 0;
    j->status = em_generate(j->m, &p, &j->res);
}

static void *thread_main(void *arg) {
    job *j = arg;
    usleep((useconds_t)j->delay_us);
    run_job(j);
    return NULL;
}

static void run_suite(const char *dir, size_t kv_bytes) {
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
        run_job(a);
        REQUIRE(a->status == EM_OK);
        batched[i] = *a;
        batched[i].delay_us = (i % 3) * 500;
    }
    batched[3].cancel_after = 2; /* a neighbour that leaves early */
    REQUIRE(sched_start(m, &(sched_options){.max_batch = 4, .prefill_chunk = 16}) == EM_OK);
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
    }
    sched_stats st;
    sched_get_stats(m->sched, &st);
    fprintf(stderr, "  %s kv=%zu: %llu steps, %llu tokens, %llu preemptions\n", dir, kv_bytes, st.steps,
            st.batched_tokens, st.preemptions);
    CHECK(st.steps > 0 && st.batched_tokens > st.steps); /* batching happened */
    if (kv_bytes) CHECK(st.preemptions > 0);
    em_model_free(m); /* stops the scheduler */
}

int main(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/golden/dense/qwen3_qknorm", test_src_dir());
    run_suite(dir, 0);
    /* 3 layers x 2 x 2 kv heads x 32 dim x 4 bytes = 1536 bytes/position:
     * room for 160 positions, enough for one full context of 128 but not
     * for four sequences at once. */
    run_suite(dir, 1536u * 160u);
    return test_summary();
}
