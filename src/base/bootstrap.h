/* bootstrap.h — the rendezvous of a multi-process group over TCP.
 *
 * Rank 0 listens on the master port and accepts the other world - 1 ranks;
 * each sends a hello (magic, version, its rank and the world size it was
 * started with), and once all have arrived rank 0 answers each with a
 * payload (the NCCL unique id). The connections stay open afterwards as the
 * group's control channel: rank 0 sends frames (one per step) that the
 * others receive; a closed connection tells a rank its peer is gone.
 *
 * Wire format, all integers little-endian u32:
 *   hello  : magic "EMBR", version, rank, world
 *   reply  : magic, version, status (0 ok, else refused), payload length,
 *            payload bytes (<= BOOT_MAX_PAYLOAD)
 *   frame  : magic, version, length, then length bytes (<= BOOT_MAX_FRAME)
 * Everything read is checked; every wait has a deadline. */
#ifndef EMBER_BASE_BOOTSTRAP_H
#define EMBER_BASE_BOOTSTRAP_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

#define BOOT_MAGIC 0x524d4245u /* "EMBR" */
#define BOOT_VERSION 1u
#define BOOT_MAX_PAYLOAD 4096u
#define BOOT_MAX_FRAME (64u << 20)

typedef struct boot_listener boot_listener;
typedef struct boot_group boot_group;

/* Rank 0: listens on addr:port (port 0: any free port, see
 * boot_listener_port). */
em_status boot_listen(const char *addr, int port, boot_listener **out);
int boot_listener_port(const boot_listener *l);
void boot_listener_close(boot_listener *l);

/* Rank 0: accepts world - 1 peers within timeout_ms, then sends each the
 * payload. Hellos that are malformed, from another world size, or repeat a
 * rank are answered with a refusal and dropped (the wait goes on). */
em_status boot_accept(boot_listener *l, int world, const void *payload, size_t len, int timeout_ms, boot_group **out);

/* Ranks 1..world-1: connect to addr:port, retrying until timeout_ms, send the
 * hello and receive the payload (up to cap bytes; *len its length). */
em_status boot_join(const char *addr, int port, int rank, int world, void *payload, size_t cap, size_t *len,
                    int timeout_ms, boot_group **out);

int boot_rank(const boot_group *g);
int boot_world(const boot_group *g);

/* Rank 0: sends one frame to every peer (each send within timeout_ms). */
em_status boot_broadcast(boot_group *g, const void *buf, size_t len, int timeout_ms);
/* Other ranks: receives the next frame from rank 0 into a buffer grown as
 * needed (*buf malloc'd, *cap its size). timeout_ms < 0 waits without a
 * deadline (an idle server), yet still ends when rank 0's connection
 * closes. */
em_status boot_receive(boot_group *g, void **buf, size_t *cap, size_t *len, int timeout_ms);

void boot_close(boot_group *g);

#endif
