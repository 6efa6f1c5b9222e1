/* sse.h — the byte pipe of a streaming job and Server-Sent Events framing.
 *
 * The worker writes whole events ("data: {...}\n\n"); the HTTP thread reads
 * them as the socket accepts them. A consumer that stops reading (client
 * gone) sets the job's cancel flag, after which writes are dropped. The
 * pipe is bounded: a client that reads far slower than tokens are made is
 * cut off instead of growing memory without limit. */
#ifndef EMBER_SERVER_SSE_H
#define EMBER_SERVER_SSE_H

#include "server/job.h"

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#define SSE_PIPE_MAX (16u << 20)

/* Appends bytes; false when the job is cancelled or the pipe is full
 * (which cancels the job). */
bool sse_write(srv_job *j, const char *data, size_t len);
/* Writes "data: <compact json>\n\n"; does not take ownership of obj. */
bool sse_send_json(srv_job *j, const json_t *obj);
/* Writes "event: <name>\ndata: <json>\n\n" (for protocols with named events). */
bool sse_send_named(srv_job *j, const char *event, const json_t *obj);
bool sse_send_done(srv_job *j); /* "data: [DONE]\n\n" */
/* Reads up to max bytes, waiting up to timeout_ms for some: >0 bytes read,
 * 0 nothing yet, -1 the job finished and everything was read. With spin_s
 * > 0 the wait polls for up to that long before sleeping (spin.h), where a
 * polling slot is free. */
ssize_t sse_read(srv_job *j, char *buf, size_t max, int timeout_ms, double spin_s);

#endif
