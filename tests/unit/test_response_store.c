/* test_response_store.c — the Responses record store: put/get/delete, TTL
 * expiry on an injected clock, size-cap eviction in least-recently-used
 * order, persistence across reopen (atomic files, interrupted writes and
 * malformed files ignored, expired files dropped), and many threads at
 * once. */
#include "server/response_store.h"

#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static double fake_time = 1000.0;
static double fake_now(void) { return fake_time; }

static json_t *record(const char *id, size_t pad) {
    char *p = malloc(pad + 1);
    memset(p, 'x', pad);
    p[pad] = 0;
    json_t *r = json_pack("{s:{s:s, s:s}, s:s}", "response", "id", id, "object", "response", "pad", p);
    free(p);
    return r;
}

static bool has(resp_store *s, const char *id) {
    json_t *r = resp_store_get(s, id);
    bool ok = r && !strcmp(json_string_value(json_object_get(json_object_get(r, "response"), "id")), id);
    json_decref(r);
    return r != NULL && ok;
}

static void put(resp_store *s, const char *id, size_t pad) {
    json_t *r = record(id, pad);
    CHECKF(resp_store_put(s, id, r) == EM_OK, "put %s", id);
    json_decref(r);
}

static void test_basic(void) {
    resp_store_config cfg = {.ttl_s = 0, .max_bytes = 0, .now = fake_now};
    resp_store *s;
    REQUIRE(resp_store_open(&cfg, &s) == EM_OK);
    put(s, "resp_a", 10);
    CHECK(has(s, "resp_a"));
    CHECK(!has(s, "resp_b"));
    CHECK(resp_store_get(s, "../etc/passwd") == NULL);
    json_t *r = record("x", 1);
    CHECK(resp_store_put(s, "bad/id", r) == EM_ERR_INVALID);
    CHECK(resp_store_put(s, "", r) == EM_ERR_INVALID);
    json_decref(r);
    put(s, "resp_a", 20); /* replace */
    resp_store_stats st;
    resp_store_get_stats(s, &st);
    CHECK(st.count == 1);
    CHECK(st.hits == 1 && st.misses >= 1);
    CHECK(resp_store_delete(s, "resp_a"));
    CHECK(!resp_store_delete(s, "resp_a"));
    CHECK(!has(s, "resp_a"));
    resp_store_get_stats(s, &st);
    CHECK(st.count == 0 && st.bytes == 0);
    resp_store_free(s);
}

static void test_ttl(void) {
    fake_time = 1000;
    resp_store_config cfg = {.ttl_s = 60, .now = fake_now};
    resp_store *s;
    REQUIRE(resp_store_open(&cfg, &s) == EM_OK);
    put(s, "resp_old", 10);
    fake_time = 1030;
    put(s, "resp_new", 10);
    fake_time = 1059.9;
    CHECK(has(s, "resp_old"));
    fake_time = 1060; /* resp_old's 60 s are over, even though it was just read */
    CHECK(!has(s, "resp_old"));
    CHECK(has(s, "resp_new"));
    fake_time = 1095;
    resp_store_stats st;
    resp_store_get_stats(s, &st);
    CHECK(st.count == 0 && st.expired == 2);
    resp_store_free(s);
}

static void test_cap_lru(void) {
    fake_time = 1000;
    json_t *probe = record("resp_0", 100);
    char *text = json_dumps(probe, JSON_COMPACT);
    size_t one = strlen(text) + 40; /* plus "expires_at" */
    free(text);
    json_decref(probe);
    resp_store_config cfg = {.max_bytes = one * 3, .now = fake_now};
    resp_store *s;
    REQUIRE(resp_store_open(&cfg, &s) == EM_OK);
    put(s, "resp_0", 100);
    put(s, "resp_1", 100);
    put(s, "resp_2", 100);
    CHECK(has(s, "resp_0")); /* now resp_1 is the least recently used */
    put(s, "resp_3", 100);
    CHECK(!has(s, "resp_1"));
    CHECK(has(s, "resp_0") && has(s, "resp_2") && has(s, "resp_3"));
    put(s, "resp_4", 100); /* evicts resp_0 (used before 2 and 3 were last read) */
    CHECK(!has(s, "resp_0"));
    CHECK(has(s, "resp_4"));
    resp_store_stats st;
    resp_store_get_stats(s, &st);
    CHECK(st.evicted == 2 && st.count == 3 && st.bytes <= cfg.max_bytes);
    json_t *big = record("resp_big", one * 4);
    CHECK(resp_store_put(s, "resp_big", big) == EM_ERR_LIMIT);
    json_decref(big);
    CHECK(has(s, "resp_2")); /* nothing evicted for a record that cannot fit */
    resp_store_free(s);
}

static void test_persistence(void) {
    char dir[] = "/tmp/ember_rstore_XXXXXX";
    REQUIRE(mkdtemp(dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/store", dir);
    fake_time = 1000;
    resp_store_config cfg = {.ttl_s = 100, .dir = sub, .now = fake_now};
    resp_store *s;
    REQUIRE(resp_store_open(&cfg, &s) == EM_OK);
    put(s, "resp_keep", 10);
    put(s, "resp_gone", 10);
    put(s, "resp_late", 10);
    CHECK(resp_store_delete(s, "resp_gone"));
    resp_store_free(s);
    char path[256];
    snprintf(path, sizeof path, "%s/resp_keep.json", sub);
    CHECK(access(path, F_OK) == 0);
    snprintf(path, sizeof path, "%s/resp_gone.json", sub);
    CHECK(access(path, F_OK) != 0);
    /* an interrupted write and a malformed file are ignored */
    snprintf(path, sizeof path, "%s/resp_half.json.tmp", sub);
    FILE *f = fopen(path, "w");
    fputs("{\"resp", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/resp_bad.json", sub);
    f = fopen(path, "w");
    fputs("not json", f);
    fclose(f);

    fake_time = 1050;
    REQUIRE(resp_store_open(&cfg, &s) == EM_OK);
    CHECK(has(s, "resp_keep") && has(s, "resp_late"));
    CHECK(!has(s, "resp_gone") && !has(s, "resp_half") && !has(s, "resp_bad"));
    resp_store_stats st;
    resp_store_get_stats(s, &st);
    CHECK(st.loaded == 2);
    snprintf(path, sizeof path, "%s/resp_half.json.tmp", sub);
    CHECK(access(path, F_OK) != 0);
    resp_store_free(s);
    /* the TTL counts from when the record was stored, across restarts */
    fake_time = 1100;
    REQUIRE(resp_store_open(&cfg, &s) == EM_OK);
    CHECK(!has(s, "resp_keep"));
    snprintf(path, sizeof path, "%s/resp_keep.json", sub);
    CHECK(access(path, F_OK) != 0);
    resp_store_free(s);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    CHECK(system(path) == 0);
}

typedef struct worker {
    resp_store *s;
    int t;
    int errors;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    char id[32];
    for (int i = 0; i < 300; i++) {
        snprintf(id, sizeof id, "resp_%d_%d", w->t, i);
        json_t *r = record(id, (size_t)(i % 50));
        if (resp_store_put(w->s, id, r) != EM_OK) w->errors++;
        json_decref(r);
        json_t *g = resp_store_get(w->s, id);
        /* the cap may already have evicted it, but a record found is whole */
        if (g && strcmp(json_string_value(json_object_get(json_object_get(g, "response"), "id")), id)) w->errors++;
        json_decref(g);
        if (i % 3 == 0) resp_store_delete(w->s, id);
        snprintf(id, sizeof id, "resp_%d_%d", (w->t + 1) % 4, i);
        json_decref(resp_store_get(w->s, id));
    }
    return NULL;
}

static void test_threads(void) {
    resp_store_config cfg = {.max_bytes = 40000};
    resp_store *s;
    REQUIRE(resp_store_open(&cfg, &s) == EM_OK);
    pthread_t th[4];
    worker w[4];
    for (int t = 0; t < 4; t++) {
        w[t] = (worker){s, t, 0};
        pthread_create(&th[t], NULL, work, &w[t]);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK(w[t].errors == 0);
    }
    resp_store_stats st;
    resp_store_get_stats(s, &st);
    CHECK(st.bytes <= cfg.max_bytes);
    CHECK(st.count > 0);
    resp_store_free(s);
}

int main(void) {
    test_basic();
    test_ttl();
    test_cap_lru();
    test_persistence();
    test_threads();
    return test_summary();
}
