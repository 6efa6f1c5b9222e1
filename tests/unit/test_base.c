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
    em_pool_free(pool);
    return test_summary();
}
