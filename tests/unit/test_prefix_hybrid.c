/* Prefix caching for the hybrid family (Qwen3.5: Gated-DeltaNet layers
 * with per-sequence recurrent state beside the paged KV cache), on the
 * golden checkpoints, f32 on the CPU:
 *  - a prefix hit (KV blocks + a recurrent-state snapshot) gives the logits
 *    and greedy ids of a cold prefill, for a repeated prompt and for one
 *    that shares only a preamble;
 *  - requests with a shared preamble, batched with staggered arrivals, give
 *    the greedy ids of each served alone, and some reuse the preamble;
 *  - under a tiny budget snapshots and blocks are evicted, the budget
 *    holds, and outputs stay those of cold prefills;
 *  - MTP speculative decoding next to restored prefixes keeps its ids;
 *  - a snapshot read back from the on-disk store (--kv-store) restores the
 *    logits of a cold prefill. */
#include "test.h"

#include "engine/prompt_cache.h"
#include "engine/scheduler.h"
#include "model/model.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

enum { MAX_NEW = 8 };

typedef struct run {
    em_model *m;
    const int32_t *prompt;
    int n_prompt, delay_us, spec;
    float *first_logits; /* optional */
    int have_logits;
    int32_t out[MAX_NEW];
    int n_out;
    em_status status;
    em_generate_result res;
} run;

static void grab_logits(void *user, float *logits, int n_vocab, const int32_t *h, size_t nh) {
    (void)h;
    (void)nh;
    run *r = user;
    if (r->first_logits && !r->have_logits) {
        memcpy(r->first_logits, logits, sizeof(float) * (size_t)n_vocab);
        r->have_logits = 1;
    }
}

static int grab_token(void *user, const em_token_info *t) {
    run *r = user;
    if (t->token >= 0 && r->n_out < MAX_NEW) r->out[r->n_out++] = t->token;
    return 0;
}

static void go(run *r) {
    r->have_logits = 0;
    r->n_out = 0;
    em_generate_params p = {.prompt = r->prompt, .n_prompt = (size_t)r->n_prompt, .max_tokens = MAX_NEW,
                            .on_token = grab_token, .on_logits = r->first_logits ? grab_logits : NULL, .user = r,
                            .ignore_eos = 1, .spec_draft_tokens = r->spec};
    p.sampling.temperature = 0;
    r->status = em_generate(r->m, &p, &r->res);
    if (r->status != EM_OK) fprintf(stderr, "generate: %s\n", em_last_error());
}

static void *thread_main(void *arg) {
    run *r = arg;
    usleep((useconds_t)r->delay_us);
    go(r);
    return NULL;
}

static em_model *open_model(const char *name, int seqs) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/golden/qwen3_5/%s", test_src_dir(), name);
    em_open_options o = {.n_threads = 2, .precision = EM_PRECISION_EXACT, .max_sequences = seqs, .max_context = 384};
    em_model *m;
    REQUIRE(em_model_open(dir, &o, &m) == EM_OK);
    return m;
}

static double max_diff(const float *a, const float *b, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - (double)b[i]));
    return e;
}

static bool same_ids(const run *a, const run *b) {
    return a->n_out == b->n_out && !memcmp(a->out, b->out, sizeof(int32_t) * (size_t)a->n_out);
}

/* A repeated prompt and a prompt sharing a preamble: logits and ids equal
 * cold prefills; reuse ends at the last snapshot the prefix covers. */
static void logits_suite(const char *name) {
    em_model *m = open_model(name, 2);
    int V = m->cfg.vocab;
    static int32_t a[300], b[300];
    for (int i = 0; i < 300; i++) a[i] = b[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 200; i < 300; i++) b[i] = (int32_t)((i * 53 + 3) % V); /* diverges inside block 6 */
    run cold_a = {.m = m, .prompt = a, .n_prompt = 300, .first_logits = calloc((size_t)V, 4)};
    run cold_b = {.m = m, .prompt = b, .n_prompt = 300, .first_logits = calloc((size_t)V, 4)};
    go(&cold_a); /* no scheduler: no prefix cache, the reference */
    go(&cold_b);
    REQUIRE(cold_a.status == EM_OK && cold_b.status == EM_OK);
    REQUIRE(sched_start(m, &(sched_options){.prefill_chunk = 48, .snapshot_every = 2}) == EM_OK);
    run warm = {.m = m, .prompt = a, .n_prompt = 300, .first_logits = calloc((size_t)V, 4)};
    go(&warm);
    CHECK(warm.status == EM_OK && warm.res.n_cached == 0);
    CHECKF(max_diff(warm.first_logits, cold_a.first_logits, V) <= 1e-5, "%s: snapshot-aligned prefill changes logits by %g",
           name, max_diff(warm.first_logits, cold_a.first_logits, V));
    CHECK(same_ids(&warm, &cold_a));
    go(&warm);
    CHECKF(warm.res.n_cached == 288, "%s: a repeated 300-token prompt reused %zu tokens", name, warm.res.n_cached);
    double e = max_diff(warm.first_logits, cold_a.first_logits, V);
    CHECKF(e <= 1e-5, "%s: restored prefix changes logits by %g", name, e);
    CHECK(same_ids(&warm, &cold_a));
    warm.prompt = b;
    go(&warm);
    /* blocks 0..5 match; every second boundary has a snapshot: 192 reused */
    CHECKF(warm.res.n_cached == 192, "%s: the shared preamble reused %zu tokens", name, warm.res.n_cached);
    e = max_diff(warm.first_logits, cold_b.first_logits, V);
    CHECKF(e <= 1e-5, "%s: restored preamble changes logits by %g", name, e);
    CHECK(same_ids(&warm, &cold_b));
    sched_stats st;
    sched_get_stats(m->sched, &st);
    CHECK(st.prefix_state_snapshots > 0 && st.prefix_state_bytes == (size_t)st.prefix_state_snapshots * m->kv->snap_bytes);
    CHECK(st.prefix_hit_tokens == 288 + 192);
    fprintf(stderr, "  %s: %d snapshots (%zu bytes), %zu cached bytes in all\n", name, st.prefix_state_snapshots,
            st.prefix_state_bytes, st.prefix_cached_bytes);
    free(cold_a.first_logits);
    free(cold_b.first_logits);
    free(warm.first_logits);
    em_model_free(m);
}

/* Shared-preamble requests under batching equal each served alone. */
static void batching_suite(const char *name, size_t cap_bytes, bool cap_in_snapshots) {
    enum { N = 8 };
    em_model *m = open_model(name, 4);
    int V = m->cfg.vocab;
    static int32_t prompts[N][260];
    static run alone[N], batched[N];
    for (int i = 0; i < N; i++) {
        int n = 200 + 7 * i;
        for (int k = 0; k < n; k++)
            prompts[i][k] = k < 170 ? (int32_t)((k * 29 + 7) % V) : (int32_t)((i * 131 + k * 17 + 5) % V);
        alone[i] = (run){.m = m, .prompt = prompts[i], .n_prompt = n};
        go(&alone[i]);
        REQUIRE(alone[i].status == EM_OK);
        batched[i] = alone[i];
        batched[i].delay_us = i < 2 ? 0 : 20000 * i; /* the first two compute the preamble */
    }
    if (cap_in_snapshots) {
        /* snapshot size is known once the family is: budget in snapshots */
        cap_bytes *= m->family->state_bytes(m);
    }
    REQUIRE(sched_start(m, &(sched_options){.max_batch = 4, .prefill_chunk = 40, .snapshot_every = 2,
                                            .prompt_cache_bytes = cap_bytes}) == EM_OK);
    pthread_t th[N];
    for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, thread_main, &batched[i]);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    size_t reused = 0;
    for (int i = 0; i < N; i++) {
        CHECK(batched[i].status == EM_OK);
        CHECKF(same_ids(&batched[i], &alone[i]), "%s cap %zu: request %d differs under batching", name, cap_bytes, i);
        reused += batched[i].res.n_cached;
    }
    sched_stats st;
    sched_get_stats(m->sched, &st);
    fprintf(stderr, "  %s cap %zu: %zu tokens reused, %d snapshots, %llu evictions, %zu cached bytes\n", name,
            cap_bytes, reused, st.prefix_state_snapshots, st.prefix_evictions, st.prefix_cached_bytes);
    if (cap_bytes == 0 || cap_bytes >= 4 * m->kv->snap_bytes) CHECK(reused >= 160);
    if (cap_bytes) {
        CHECKF(st.prefix_cached_bytes <= cap_bytes, "cached %zu bytes over a cap of %zu", st.prefix_cached_bytes,
               cap_bytes);
        CHECK(st.prefix_evictions > 0 || st.prefix_state_bytes < st.prefix_cached_bytes);
    }
    em_model_free(m);
}

/* A tiny budget: a stream of distinct and repeated prompts keeps evicting;
 * outputs stay those of cold prefills and the budget holds throughout. */
static void eviction_suite(const char *name) {
    em_model *m = open_model(name, 2);
    int V = m->cfg.vocab;
    enum { P = 5 };
    static int32_t prompts[P][200];
    static run cold[P];
    for (int i = 0; i < P; i++) {
        for (int k = 0; k < 200; k++) prompts[i][k] = (int32_t)((k * (31 + 2 * i) + i) % V);
        cold[i] = (run){.m = m, .prompt = prompts[i], .n_prompt = 200};
        go(&cold[i]);
    }
    size_t snap = m->family->state_bytes(m);
    size_t block = m->kv->block_floats * sizeof(float) * 2u * (size_t)m->kv->n_layers;
    size_t cap = 2 * snap + 5 * block;
    REQUIRE(sched_start(m, &(sched_options){.prefill_chunk = 64, .snapshot_every = 2, .prompt_cache_bytes = cap}) == EM_OK);
    int hits = 0;
    for (int round = 0; round < 3; round++)
        for (int j = 0; j < P; j++) {
            int i = (j * 3 + round) % P;
            run w = {.m = m, .prompt = prompts[i], .n_prompt = 200};
            go(&w);
            CHECK(w.status == EM_OK);
            CHECKF(same_ids(&w, &cold[i]), "%s: prompt %d round %d differs under a tiny cache", name, i, round);
            hits += w.res.n_cached > 0;
            sched_stats st;
            sched_get_stats(m->sched, &st);
            CHECKF(st.prefix_cached_bytes <= cap, "cached %zu > cap %zu", st.prefix_cached_bytes, cap);
            CHECK(st.prefix_state_snapshots <= 2);
        }
    /* the same prompt twice in a row reuses what the budget kept */
    run w = {.m = m, .prompt = prompts[0], .n_prompt = 200};
    go(&w);
    go(&w);
    CHECK(w.res.n_cached > 0 && same_ids(&w, &cold[0]));
    sched_stats st;
    sched_get_stats(m->sched, &st);
    fprintf(stderr, "  %s tiny cache (%zu bytes): %d hits, %llu evictions\n", name, cap, hits, st.prefix_evictions);
    CHECK(st.prefix_evictions > 0);
    /* a budget below one snapshot: no snapshots, so no reuse, still correct */
    sched_stop(m);
    REQUIRE(sched_start(m, &(sched_options){.prompt_cache_bytes = snap / 2}) == EM_OK);
    go(&w);
    go(&w);
    CHECK(w.res.n_cached == 0 && same_ids(&w, &cold[0]));
    em_model_free(m);
}

/* Speculative decoding (own forwards, rollback journal) on a model whose
 * scheduler restores prefixes: the sequence slots and recurrent state are
 * shared between both paths; ids equal plain greedy decoding. */
static void mtp_suite(void) {
    em_model *m = open_model("q35_mtp_ratio3", 2);
    REQUIRE(em_model_has_mtp(m));
    int V = m->cfg.vocab;
    static int32_t a[150];
    for (int i = 0; i < 150; i++) a[i] = (int32_t)((i * 41 + 9) % V);
    run plain = {.m = m, .prompt = a, .n_prompt = 150};
    go(&plain);
    REQUIRE(sched_start(m, &(sched_options){.prefill_chunk = 32, .snapshot_every = 2}) == EM_OK);
    run r = plain;
    go(&r);
    go(&r);
    CHECK(r.res.n_cached == 128 && same_ids(&r, &plain));
    run s = plain;
    s.spec = 3;
    go(&s);
    CHECK(s.status == EM_OK && s.res.spec_steps > 0);
    CHECKF(same_ids(&s, &plain), "speculative ids differ next to a restored prefix");
    go(&r); /* and the slot the speculative run used resumes from a snapshot */
    CHECK(r.res.n_cached == 128 && same_ids(&r, &plain));
    em_model_free(m);
}

/* The on-disk store inside one process: a budget too small for any
 * snapshot in memory leaves only the files to resume from; the restored
 * state (read back from disk) gives the logits of a cold prefill. */
static void store_suite(void) {
    em_model *m = open_model("q35_tied_ratio2", 2);
    int V = m->cfg.vocab;
    static int32_t a[300];
    for (int i = 0; i < 300; i++) a[i] = (int32_t)((i * 43 + 7) % V);
    run cold = {.m = m, .prompt = a, .n_prompt = 300, .first_logits = calloc((size_t)V, 4)};
    go(&cold);
    char dir[] = "/tmp/ember-kvstore-XXXXXX";
    REQUIRE(mkdtemp(dir));
    size_t block = m->kv->block_floats * sizeof(float) * 2u * (size_t)m->kv->n_layers;
    REQUIRE(sched_start(m, &(sched_options){.prefill_chunk = 48, .snapshot_every = 2, .prompt_cache_bytes = block,
                                            .kv_store_dir = dir}) == EM_OK);
    run warm = {.m = m, .prompt = a, .n_prompt = 300, .first_logits = calloc((size_t)V, 4)};
    go(&warm);
    CHECK(warm.res.n_cached == 0 && same_ids(&warm, &cold));
    go(&warm);
    CHECKF(warm.res.n_cached == 288, "reused %zu tokens from the store", warm.res.n_cached);
    double e = max_diff(warm.first_logits, cold.first_logits, V);
    CHECKF(e <= 1e-5, "state restored from disk changes logits by %g", e);
    CHECK(same_ids(&warm, &cold));
    sched_stats st;
    sched_get_stats(m->sched, &st);
    CHECK(st.kv_store && st.store.blocks_loaded >= 9 && st.store.files == 9 && st.store.files_rejected == 0);
    fprintf(stderr, "  store: %d files, %zu bytes, %llu blocks loaded\n", st.store.files, st.store.bytes,
            st.store.blocks_loaded);
    em_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    free(cold.first_logits);
    free(warm.first_logits);
}

int main(void) {
    const char *names[] = {"q35_tied_ratio2", "q35_equal_heads_bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) logits_suite(names[i]);
    batching_suite("q35_tied_ratio2", 0, false);
    batching_suite("q35_tied_ratio2", 3, true); /* three snapshots' worth */
    eviction_suite("q35_tied_ratio2");
    mtp_suite();
    store_suite();
    return test_summary();
}
