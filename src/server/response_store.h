/* response_store.h — stored Responses API objects, for GET /v1/responses/{id}
 * and for continuing a conversation with previous_response_id.
 *
 * A record is one JSON text (the response object, its own input items and
 * the conversation items that preceded them), kept in memory under the
 * response id. Records expire ttl seconds after they were stored; the total
 * size of the records is capped, and storing past the cap evicts the least
 * recently used records first. All operations are thread-safe (one mutex).
 *
 * Persistence (optional): with a directory, every stored record is also
 * written there as <id>.json — to a temporary file, flushed, then renamed
 * into place, so a file is either the whole record or absent — before
 * resp_store_put returns; records are loaded from it when the store opens,
 * and removed from it on delete, expiry and eviction. A response acknowledged
 * to a client is therefore on disk whatever happens to the process later. */
#ifndef EMBER_SERVER_RESPONSE_STORE_H
#define EMBER_SERVER_RESPONSE_STORE_H

#include "base/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct resp_store resp_store;

typedef struct resp_store_config {
    double ttl_s;         /* seconds a record lives; <= 0: forever */
    size_t max_bytes;     /* cap on the records' total size; 0: no cap */
    const char *dir;      /* persistence directory (created if absent), or NULL */
    double (*now)(void);  /* wall clock in seconds since the epoch; NULL: time() (tests inject one) */
} resp_store_config;

typedef struct resp_store_stats {
    size_t count, bytes;
    size_t hits, misses;       /* lookups that found / did not find a live record */
    size_t evicted, expired;   /* records dropped for the size cap / for age */
    size_t loaded;             /* records read from the directory at open */
} resp_store_stats;

/* Opens a store (loading the directory's records, skipping malformed or
 * expired files with a warning). *out owned by the caller: resp_store_free. */
em_status resp_store_open(const resp_store_config *cfg, resp_store **out);
void resp_store_free(resp_store *s);

/* True when id is acceptable as a record name (and file name):
 * 1..64 characters of [A-Za-z0-9_-]. */
bool resp_store_valid_id(const char *id);

/* Stores record (serialised; the caller keeps its reference) under id,
 * replacing a record of the same id. Evicts least recently used records
 * while the total exceeds the cap. EM_ERR_LIMIT when the record alone is
 * larger than the cap, EM_ERR_IO when it cannot be persisted (then nothing
 * is stored), EM_ERR_INVALID for a bad id. */
em_status resp_store_put(resp_store *s, const char *id, const json_t *record);

/* The record stored under id as a new JSON value (caller decrefs), or NULL
 * when there is none or it expired. Marks it most recently used. */
json_t *resp_store_get(resp_store *s, const char *id);

/* Removes id; false when there was no live record. */
bool resp_store_delete(resp_store *s, const char *id);

void resp_store_get_stats(resp_store *s, resp_store_stats *out);

#endif
