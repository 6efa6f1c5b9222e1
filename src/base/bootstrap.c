/* bootstrap.c — the TCP rendezvous of a multi-process group (bootstrap.h). */
#include "base/bootstrap.h"

#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct boot_listener {
    int fd, port;
};

struct boot_group {
    int rank, world;
    int *peers; /* rank 0: fd of rank i at [i] (i >= 1); others: [0] = rank 0 */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int left_ms(double deadline) {
    if (deadline < 0) return -1;
    double l = deadline - now_ms();
    return l <= 0 ? 0 : l > 1e9 ? 1000000000 : (int)l + 1;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Writes all of buf before the deadline. */
static em_status send_all(int fd, const void *buf, size_t len, double deadline, const char *what) {
    const char *p = buf;
    while (len) {
        struct pollfd pf = {fd, POLLOUT, 0};
        int r = poll(&pf, 1, left_ms(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) return em_fail(EM_ERR_IO, "rendezvous: timed out sending %s", what);
        if (r < 0) return em_fail(EM_ERR_IO, "rendezvous: sending %s: %s", what, strerror(errno));
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n <= 0) return em_fail(EM_ERR_IO, "rendezvous: sending %s: %s", what, n < 0 ? strerror(errno) : "closed");
        p += n;
        len -= (size_t)n;
    }
    return EM_OK;
}

/* Reads exactly len bytes before the deadline (deadline < 0: none). */
static em_status recv_all(int fd, void *buf, size_t len, double deadline, const char *what) {
    char *p = buf;
    while (len) {
        struct pollfd pf = {fd, POLLIN, 0};
        int r = poll(&pf, 1, left_ms(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) return em_fail(EM_ERR_IO, "rendezvous: timed out waiting for %s", what);
        if (r < 0) return em_fail(EM_ERR_IO, "rendezvous: waiting for %s: %s", what, strerror(errno));
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n == 0) return em_fail(EM_ERR_IO, "rendezvous: the peer closed the connection while sending %s", what);
        if (n < 0) return em_fail(EM_ERR_IO, "rendezvous: reading %s: %s", what, strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return EM_OK;
}

static void set_options(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static em_status resolve(const char *addr, int port, bool passive, struct addrinfo **out) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int r = getaddrinfo(addr && *addr ? addr : NULL, ps, &hints, out);
    if (r) return em_fail(EM_ERR_INVALID, "rendezvous: cannot resolve %s: %s", addr ? addr : "(any)", gai_strerror(r));
    return EM_OK;
}

em_status boot_listen(const char *addr, int port, boot_listener **out) {
    *out = NULL;
    if (port < 0 || port > 65535) return em_fail(EM_ERR_INVALID, "rendezvous: port %d is out of range", port);
    struct addrinfo *ai;
    EM_TRY(resolve(addr, port, true, &ai));
    int fd = -1, err = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 64)) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return em_fail(EM_ERR_IO, "rendezvous: cannot listen on %s:%d: %s", addr ? addr : "*", port, strerror(err));
    set_options(fd);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int actual = port;
    if (!getsockname(fd, (struct sockaddr *)&ss, &sl))
        actual = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                          : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    boot_listener *l = em_calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    l->fd = fd;
    l->port = actual;
    *out = l;
    return EM_OK;
}

int boot_listener_port(const boot_listener *l) { return l->port; }

void boot_listener_close(boot_listener *l) {
    if (!l) return;
    close(l->fd);
    free(l);
}

static boot_group *group_new(int rank, int world) {
    boot_group *g = em_calloc(1, sizeof *g);
    if (!g) return NULL;
    g->rank = rank;
    g->world = world;
    g->peers = em_mallocn((size_t)world, sizeof *g->peers);
    if (!g->peers) {
        free(g);
        return NULL;
    }
    for (int i = 0; i < world; i++) g->peers[i] = -1;
    return g;
}

void boot_close(boot_group *g) {
    if (!g) return;
    for (int i = 0; i < g->world; i++)
        if (g->peers[i] >= 0) close(g->peers[i]);
    free(g->peers);
    free(g);
}

int boot_rank(const boot_group *g) { return g->rank; }
int boot_world(const boot_group *g) { return g->world; }

static void send_reply(int fd, uint32_t status, const void *payload, size_t len, double deadline) {
    uint8_t h[16];
    put32(h, BOOT_MAGIC), put32(h + 4, BOOT_VERSION), put32(h + 8, status), put32(h + 12, (uint32_t)len);
    if (send_all(fd, h, sizeof h, deadline, "a reply") == EM_OK && len) send_all(fd, payload, len, deadline, "a reply");
}

/* Reads one hello (a short deadline of its own: a silent connection must
 * not hold up the others for the whole wait); the peer's rank or -1 with
 * the reason in why. */
static int read_hello(int fd, int world, const boot_group *g, double deadline, char *why, size_t cap) {
    uint8_t h[16];
    double d = now_ms() + 2000;
    if (deadline >= 0 && deadline < d) d = deadline;
    if (recv_all(fd, h, sizeof h, d, "a hello") != EM_OK) {
        snprintf(why, cap, "%s", em_last_error());
        return -1;
    }
    uint32_t magic = get32(h), version = get32(h + 4), rank = get32(h + 8), w = get32(h + 12);
    if (magic != BOOT_MAGIC) snprintf(why, cap, "a connection that is not an ember rank (magic %08x)", magic);
    else if (version != BOOT_VERSION) snprintf(why, cap, "a rank speaking protocol version %u, not %u", version, BOOT_VERSION);
    else if ((int)w != world || w > 4096) snprintf(why, cap, "a rank started with a world size of %u, not %d", w, world);
    else if (rank < 1 || rank >= (uint32_t)world) snprintf(why, cap, "a hello from rank %u, outside 1..%d", rank, world - 1);
    else if (g->peers[rank] >= 0) snprintf(why, cap, "a second rank %u", rank);
    else return (int)rank;
    return -1;
}

em_status boot_accept(boot_listener *l, int world, const void *payload, size_t len, int timeout_ms, boot_group **out) {
    *out = NULL;
    if (world < 1 || world > 4096) return em_fail(EM_ERR_INVALID, "rendezvous: world size %d is out of range", world);
    if (len > BOOT_MAX_PAYLOAD) return em_fail(EM_ERR_INVALID, "rendezvous: payload of %zu bytes is too large", len);
    boot_group *g = group_new(0, world);
    if (!g) return em_fail(EM_ERR_NOMEM, "out of memory");
    double deadline = now_ms() + timeout_ms;
    char last[200] = "";
    int joined = 1;
    while (joined < world) {
        struct pollfd pf = {l->fd, POLLIN, 0};
        int r = poll(&pf, 1, left_ms(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int missing = -1;
            for (int i = 1; i < world && missing < 0; i++)
                if (g->peers[i] < 0) missing = i;
            em_status s = em_fail(EM_ERR_IO, "rendezvous: %d of %d ranks joined within %d ms on port %d (rank %d "
                                  "never came%s%s)", joined, world, timeout_ms, l->port, missing,
                                  *last ? "; refused " : "", last);
            boot_close(g);
            return s;
        }
        int fd = accept(l->fd, NULL, NULL);
        if (fd < 0) continue;
        set_options(fd);
        char why[160];
        int rank = read_hello(fd, world, g, deadline, why, sizeof why);
        if (rank < 0) {
            send_reply(fd, 1, NULL, 0, now_ms() + 500);
            close(fd);
            snprintf(last, sizeof last, "%s", why);
            continue;
        }
        g->peers[rank] = fd;
        joined++;
    }
    for (int i = 1; i < world; i++) {
        uint8_t h[16];
        put32(h, BOOT_MAGIC), put32(h + 4, BOOT_VERSION), put32(h + 8, 0), put32(h + 12, (uint32_t)len);
        em_status s = send_all(g->peers[i], h, sizeof h, deadline, "the rendezvous reply");
        if (s == EM_OK && len) s = send_all(g->peers[i], payload, len, deadline, "the rendezvous reply");
        if (s != EM_OK) {
            boot_close(g);
            return s;
        }
    }
    *out = g;
    return EM_OK;
}

/* One connection attempt; the socket or -1. */
static int try_connect(const struct addrinfo *ai, double deadline) {
    for (const struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        set_options(fd);
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r && errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int left = left_ms(deadline);
            if (poll(&pf, 1, left < 1000 ? left : 1000) == 1) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                r = err ? -1 : 0;
            }
        }
        if (r == 0) return fd;
        close(fd);
    }
    return -1;
}

em_status boot_join(const char *addr, int port, int rank, int world, void *payload, size_t cap, size_t *len,
                    int timeout_ms, boot_group **out) {
    *out = NULL;
    *len = 0;
    if (world < 2 || world > 4096 || rank < 1 || rank >= world)
        return em_fail(EM_ERR_INVALID, "rendezvous: rank %d of a world of %d cannot join (ranks 1..world-1 join)",
                       rank, world);
    if (port < 1 || port > 65535) return em_fail(EM_ERR_INVALID, "rendezvous: port %d is out of range", port);
    struct addrinfo *ai;
    EM_TRY(resolve(addr, port, false, &ai));
    double deadline = now_ms() + timeout_ms;
    int fd = -1;
    while ((fd = try_connect(ai, deadline)) < 0 && left_ms(deadline) > 0) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return em_fail(EM_ERR_IO, "rendezvous: rank %d could not reach rank 0 at %s:%d within %d ms", rank, addr, port,
                       timeout_ms);
    uint8_t h[16];
    put32(h, BOOT_MAGIC), put32(h + 4, BOOT_VERSION), put32(h + 8, (uint32_t)rank), put32(h + 12, (uint32_t)world);
    em_status s = send_all(fd, h, sizeof h, deadline, "the hello");
    if (s == EM_OK) s = recv_all(fd, h, sizeof h, deadline, "rank 0's reply (are all ranks started?)");
    if (s == EM_OK) {
        uint32_t n = get32(h + 12);
        if (get32(h) != BOOT_MAGIC || get32(h + 4) != BOOT_VERSION)
            s = em_fail(EM_ERR_FORMAT, "rendezvous: %s:%d is not an ember rank 0 of this version", addr, port);
        else if (get32(h + 8) != 0)
            s = em_fail(EM_ERR_INVALID, "rendezvous: rank 0 refused rank %d of %d (a different world size, or the "
                        "rank is taken)", rank, world);
        else if (n > BOOT_MAX_PAYLOAD || n > cap)
            s = em_fail(EM_ERR_FORMAT, "rendezvous: rank 0 sent a payload of %u bytes (room for %zu)", n, cap);
        else if (n)
            s = recv_all(fd, payload, n, deadline, "the rendezvous payload");
        if (s == EM_OK) *len = n;
    }
    boot_group *g = s == EM_OK ? group_new(rank, world) : NULL;
    if (s == EM_OK && !g) s = em_fail(EM_ERR_NOMEM, "out of memory");
    if (s != EM_OK) {
        close(fd);
        return s;
    }
    g->peers[0] = fd;
    *out = g;
    return EM_OK;
}

em_status boot_broadcast(boot_group *g, const void *buf, size_t len, int timeout_ms) {
    if (g->rank != 0) return em_fail(EM_ERR_INTERNAL, "rendezvous: only rank 0 broadcasts");
    if (len > BOOT_MAX_FRAME) return em_fail(EM_ERR_INVALID, "rendezvous: a frame of %zu bytes is too large", len);
    uint8_t h[12];
    put32(h, BOOT_MAGIC), put32(h + 4, BOOT_VERSION), put32(h + 8, (uint32_t)len);
    double deadline = now_ms() + timeout_ms;
    for (int i = 1; i < g->world; i++) {
        em_status s = send_all(g->peers[i], h, sizeof h, deadline, "a step");
        if (s == EM_OK && len) s = send_all(g->peers[i], buf, len, deadline, "a step");
        if (s != EM_OK) return em_fail_prefix(s, "rank %d", i);
    }
    return EM_OK;
}

em_status boot_receive(boot_group *g, void **buf, size_t *cap, size_t *len, int timeout_ms) {
    *len = 0;
    if (g->rank == 0) return em_fail(EM_ERR_INTERNAL, "rendezvous: rank 0 does not receive steps");
    uint8_t h[12];
    EM_TRY(recv_all(g->peers[0], h, sizeof h, timeout_ms < 0 ? -1 : now_ms() + timeout_ms, "the next step from rank 0"));
    uint32_t n = get32(h + 8);
    if (get32(h) != BOOT_MAGIC || get32(h + 4) != BOOT_VERSION || n > BOOT_MAX_FRAME)
        return em_fail(EM_ERR_FORMAT, "rendezvous: malformed step header from rank 0");
    if (n > *cap) {
        void *p = realloc(*buf, n);
        if (!p) return em_fail(EM_ERR_NOMEM, "out of memory for a step of %u bytes", n);
        *buf = p;
        *cap = n;
    }
    if (n) EM_TRY(recv_all(g->peers[0], *buf, n, now_ms() + (timeout_ms < 0 ? 60000 : timeout_ms), "a step"));
    *len = n;
    return EM_OK;
}
