/* test_bootstrap.c — the TCP rendezvous of multi-process tensor
 * parallelism over loopback: ranks join and receive rank 0's id, steps
 * flow from rank 0 to the others, and every wait ends within its timeout
 * (a peer that never comes, a rank 0 that never listens, a closed peer,
 * strangers and misconfigured ranks refused). */
#include "test.h"

#include "base/bootstrap.h"
#include "base/status.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct joiner {
    int port, rank, world, timeout_ms;
    em_status st;
    uint8_t id[128];
    size_t len;
    char err[256];
    char step[64];
    size_t step_len;
    bool want_step;
} joiner;

static void *join_main(void *arg) {
    joiner *j = arg;
    boot_group *g;
    j->st = boot_join("127.0.0.1", j->port, j->rank, j->world, j->id, sizeof j->id, &j->len, j->timeout_ms, &g);
    if (j->st != EM_OK) {
        snprintf(j->err, sizeof j->err, "%s", em_last_error());
        return NULL;
    }
    if (j->want_step) {
        void *buf = NULL;
        size_t cap = 0;
        j->st = boot_receive(g, &buf, &cap, &j->step_len, 5000);
        if (j->st == EM_OK && j->step_len <= sizeof j->step) memcpy(j->step, buf, j->step_len);
        free(buf);
    }
    boot_close(g);
    return NULL;
}

/* Three ranks: both peers get the id, then one step each. */
static void three_ranks(void) {
    boot_listener *l;
    REQUIRE(boot_listen("127.0.0.1", 0, &l) == EM_OK);
    int port = boot_listener_port(l);
    CHECK(port > 0);
    joiner j[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        j[i] = (joiner){.port = port, .rank = 2 - i, .world = 3, .timeout_ms = 5000, .want_step = true};
        pthread_create(&th[i], NULL, join_main, &j[i]);
    }
    uint8_t id[128];
    for (int i = 0; i < 128; i++) id[i] = (uint8_t)(i * 37 + 1);
    boot_group *g;
    em_status s = boot_accept(l, 3, id, sizeof id, 5000, &g);
    CHECKF(s == EM_OK, "%s", em_last_error());
    if (s == EM_OK) {
        CHECK(boot_rank(g) == 0 && boot_world(g) == 3);
        CHECK(boot_broadcast(g, "step one", 8, 2000) == EM_OK);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECKF(j[i].st == EM_OK, "rank %d: %s", j[i].rank, j[i].err);
        CHECK(j[i].len == 128 && !memcmp(j[i].id, id, 128));
        CHECK(j[i].step_len == 8 && !memcmp(j[i].step, "step one", 8));
    }
    if (s == EM_OK) boot_close(g);
    boot_listener_close(l);
}

/* Rank 0 waits for a rank that never comes: a timely error naming it. */
static void peer_never_comes(void) {
    boot_listener *l;
    REQUIRE(boot_listen("127.0.0.1", 0, &l) == EM_OK);
    boot_group *g;
    double t0 = now_s();
    em_status s = boot_accept(l, 2, "x", 1, 300, &g);
    double dt = now_s() - t0;
    CHECK(s == EM_ERR_IO);
    CHECKF(strstr(em_last_error(), "rank 1 never came") != NULL, "%s", em_last_error());
    CHECKF(dt >= 0.25 && dt < 3, "waited %.2f s", dt);
    boot_listener_close(l);
}

/* A rank whose rank 0 never listens gives up after its timeout. */
static void nobody_listens(void) {
    boot_listener *l;
    REQUIRE(boot_listen("127.0.0.1", 0, &l) == EM_OK);
    int port = boot_listener_port(l);
    boot_listener_close(l); /* the port is now closed */
    boot_group *g;
    uint8_t id[128];
    size_t len;
    double t0 = now_s();
    em_status s = boot_join("127.0.0.1", port, 1, 2, id, sizeof id, &len, 400, &g);
    double dt = now_s() - t0;
    CHECK(s == EM_ERR_IO);
    CHECKF(strstr(em_last_error(), "could not reach rank 0") != NULL, "%s", em_last_error());
    CHECKF(dt >= 0.35 && dt < 3, "waited %.2f s", dt);
}

typedef struct acceptor {
    boot_listener *l;
    boot_group *g;
    em_status st;
} acceptor;

static void *accept_main(void *arg) {
    acceptor *a = arg;
    a->st = boot_accept(a->l, 2, "id", 2, 3000, &a->g);
    return NULL;
}

/* A stranger (wrong magic) and a rank with another world size are refused;
 * the rank that belongs still joins. */
static void strangers_refused(void) {
    boot_listener *l;
    REQUIRE(boot_listen("127.0.0.1", 0, &l) == EM_OK);
    int port = boot_listener_port(l);
    acceptor acc = {.l = l};
    pthread_t ta;
    pthread_create(&ta, NULL, accept_main, &acc);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    REQUIRE(write(fd, "GET / HTTP/1.0\r\n\r\n", 18) == 18);
    joiner wrong = {.port = port, .rank = 1, .world = 4, .timeout_ms = 3000};
    pthread_t tw;
    pthread_create(&tw, NULL, join_main, &wrong);
    pthread_join(tw, NULL); /* refused before the good rank comes */
    CHECK(wrong.st == EM_ERR_INVALID);
    CHECKF(strstr(wrong.err, "refused") != NULL, "%s", wrong.err);
    joiner good = {.port = port, .rank = 1, .world = 2, .timeout_ms = 3000};
    pthread_t tg;
    pthread_create(&tg, NULL, join_main, &good);
    pthread_join(tg, NULL);
    pthread_join(ta, NULL);
    CHECKF(acc.st == EM_OK, "%s", em_last_error());
    CHECK(good.st == EM_OK && good.len == 2 && !memcmp(good.id, "id", 2));
    if (acc.st == EM_OK) boot_close(acc.g);
    close(fd);
    boot_listener_close(l);
}

/* Rank 0 goes away: the other rank's wait for the next step ends at once
 * (even without a deadline), and a quiet rank 0 is a timeout. */
static void rank0_gone(void) {
    boot_listener *l;
    REQUIRE(boot_listen("127.0.0.1", 0, &l) == EM_OK);
    acceptor acc = {.l = l};
    pthread_t ta;
    pthread_create(&ta, NULL, accept_main, &acc);
    boot_group *g;
    uint8_t id[16];
    size_t len;
    REQUIRE(boot_join("127.0.0.1", boot_listener_port(l), 1, 2, id, sizeof id, &len, 3000, &g) == EM_OK);
    pthread_join(ta, NULL);
    REQUIRE(acc.st == EM_OK);
    void *buf = NULL;
    size_t cap = 0, n;
    double t0 = now_s();
    CHECK(boot_receive(g, &buf, &cap, &n, 200) == EM_ERR_IO); /* quiet rank 0 */
    CHECK(strstr(em_last_error(), "timed out") != NULL);
    CHECK(now_s() - t0 < 2);
    boot_close(acc.g); /* rank 0 exits */
    t0 = now_s();
    CHECK(boot_receive(g, &buf, &cap, &n, -1) == EM_ERR_IO);
    CHECKF(strstr(em_last_error(), "closed") != NULL, "%s", em_last_error());
    CHECK(now_s() - t0 < 2);
    free(buf);
    boot_close(g);
    boot_listener_close(l);
}

static void bad_arguments(void) {
    boot_group *g;
    uint8_t id[4];
    size_t len;
    CHECK(boot_join("127.0.0.1", 1, 0, 2, id, sizeof id, &len, 10, &g) == EM_ERR_INVALID);
    CHECK(boot_join("127.0.0.1", 1, 2, 2, id, sizeof id, &len, 10, &g) == EM_ERR_INVALID);
    CHECK(boot_join("127.0.0.1", 0, 1, 2, id, sizeof id, &len, 10, &g) == EM_ERR_INVALID);
    boot_listener *l;
    CHECK(boot_listen("127.0.0.1", 70000, &l) == EM_ERR_INVALID);
}

int main(void) {
    three_ranks();
    peer_never_comes();
    nobody_listens();
    strangers_refused();
    rank0_gone();
    bad_arguments();
    return test_summary();
}
