/* Base layer: status messages, overflow helpers, UTF-8, thread pool, hash. */
#include "test.h"

#include "base/alloc.h"
#include "base/hash.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "base/utf8.h"

#include <stdatomic.h>

static atomic_int counter;
static void count_task(void *ctx, int task, int thread) {
    int *marks = ctx;
    marks[task] += 1;
    (void)thread;
    atomic_fetch_add(&counter, 1);
}

typedef struct task_order {
    int *order, *next;
} task_order;

static void order_task(void *ctx, int task, int thread) {
    task_order *o = ctx;
    (void)thread;
    o->order[(*o->next)++] = task;
}

int main(void) {
    CHECK(em_fail(EM_ERR_FORMAT, "file %s: bad", "x") == EM_ERR_FORMAT);
    CHECK_STR(em_last_error(), "file x: bad");
    em_fail_prefix(EM_ERR_FORMAT, "outer");
    CHECK_STR(em_last_error(), "outer: file x: bad");

    size_t r;
    CHECK(!em_mul(SIZE_MAX / 2 + 1, 2, &r));
    CHECK(em_mul(3, 4, &r) && r == 12);
    CHECK(!em_add(SIZE_MAX, 1, &r));
    CHECK(em_calloc(SIZE_MAX / 4, 8) == NULL);

    CHECK(utf8_valid("h\xc3\xa9llo", 6));
    CHECK(!utf8_valid("\xc0\xaf", 2));         /* overlong */
    CHECK(!utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    CHECK(utf8_complete_prefix("ab\xe2\x82", 4) == 2);
    CHECK(utf8_complete_prefix("ab\xe2\x82\xac", 5) == 5);
    char buf[4];
    CHECK(utf8_encode(0x1F600, buf) == 4);
    uint32_t cp;
    CHECK(utf8_decode(buf, 4, &cp) == 4 && cp == 0x1F600);

    CHECK(em_hash_bytes(EM_HASH_SEED, "a", 1) != em_hash_bytes(EM_HASH_SEED, "b", 1));

    em_pool *pool = em_pool_create(4);
    REQUIRE(pool);
    for (int round = 0; round < 200; round++) {
        int marks[37] = {0};
        atomic_store(&counter, 0);
        em_pool_for(pool, 37, count_task, marks);
        int ok = atomic_load(&counter) == 37;
        for (int i = 0; i < 37; i++) ok &= marks[i] == 1;
        CHECK(ok);
    }
    /* runs: every task once, whatever the count against the threads */
    static const int counts[] = {0, 1, 2, 3, 4, 5, 37, 1000};
    for (int round = 0; round < 50; round++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            int n = counts[c], marks[1000] = {0};
            atomic_store(&counter, 0);
            em_pool_for_runs(pool, n, count_task, marks);
            int ok = atomic_load(&counter) == n;
            for (int i = 0; i < n; i++) ok &= marks[i] == 1;
            CHECK(ok);
        }
    em_pool_free(pool);
    /* one thread: the tasks in order */
    em_pool *one = em_pool_create(1);
    REQUIRE(one);
    int order[9], next = 0;
    task_order o = {order, &next};
    em_pool_for_runs(one, 9, order_task, &o);
    int in_order = next == 9;
    for (int i = 0; i < 9 && in_order; i++) in_order = order[i] == i;
    CHECK(in_order);
    em_pool_free(one);
    return test_summary();
}
