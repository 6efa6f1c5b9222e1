/* Poll-before-sleep waits (base/spin.h) and the stream pipe's polling read
 * (server/sse.h): a change is seen while polling, a window with no change
 * ends, polling slots are bounded, and a configured window of 0 never
 * polls. */
#include "test.h"

#include "base/spin.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "server/sse.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static atomic_uint word;

static void sleep_ms(int ms) {
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void *bump_later(void *arg) {
    (void)arg;
    sleep_ms(2);
    atomic_fetch_add(&word, 1);
    return NULL;
}

static void noop_job(srv_job *j) { (void)j; }

static void *write_later(void *arg) {
    sleep_ms(2);
    sse_write(arg, "data: x\n\n", 9);
    return NULL;
}

int main(void) {
    setenv("EMBER_SPIN_US", "20000", 1); /* read once, at the configuration's first use */
    CHECK(em_spin_window() == 0.0);       /* nothing polls before the window is configured */
    CHECK(!em_spin_claim());
    em_spin_configure(false); /* an explicit window holds wherever the model runs */
    CHECK(em_spin_window() > 0.0199 && em_spin_window() < 0.0201);

    /* no change: the window passes, and false */
    double t0 = em_now();
    CHECK(!em_spin_until_changed(&word, atomic_load(&word), 0.003));
    CHECK(em_now() - t0 >= 0.003);
    /* a change from another thread ends the poll early */
    pthread_t th;
    unsigned seen = atomic_load(&word);
    REQUIRE(pthread_create(&th, NULL, bump_later, NULL) == 0);
    t0 = em_now();
    CHECK(em_spin_until_changed(&word, seen, 5.0));
    CHECK(em_now() - t0 < 1.0);
    pthread_join(th, NULL);
    /* a window of 0 only looks */
    CHECK(em_spin_until_changed(&word, seen, 0.0));
    CHECK(!em_spin_until_changed(&word, atomic_load(&word), 0.0));

    /* at most a quarter of the cores (at least one) poll at once */
    int most = em_cpu_count() / 4 > 1 ? em_cpu_count() / 4 : 1, got = 0;
    while (got < 1000 && em_spin_claim()) got++;
    CHECK(got == most);
    for (int i = 0; i < got; i++) em_spin_release();
    CHECK(em_spin_claim());
    em_spin_release();

    /* the pipe's polling read returns what another thread writes meanwhile */
    srv_job j;
    srv_job_init(&j, noop_job, NULL);
    char buf[64];
    CHECK(sse_read(&j, buf, sizeof buf, 1, 0.001) == 0); /* nothing written: nothing read */
    REQUIRE(pthread_create(&th, NULL, write_later, &j) == 0);
    ssize_t n = 0;
    for (int i = 0; i < 50 && n == 0; i++) n = sse_read(&j, buf, sizeof buf, 100, 0.02);
    CHECK(n == 9);
    pthread_join(th, NULL);
    srv_job_finish(&j);
    CHECK(sse_read(&j, buf, sizeof buf, 1, 0.02) == -1); /* finished and drained */
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    free(j.pipe);
    return test_summary();
}
