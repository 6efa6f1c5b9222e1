/* kv_store.h — cached prefix blocks persisted on disk (--kv-store DIR), so
 * a standard preamble is prefilled once across restarts.
 *
 * One file per full prompt block, named by the block's chained content hash
 * (the hash of every token up to the block's end), inside a folder named by
 * the model's identity: artifact and config fingerprints, a sample of the
 * weight bytes (checkpoints of one shape share the fingerprints), the
 * backend and the precision. A file holds the block's tokens, its KV for
 * every layer and, where the prefix cache snapshotted one (hybrid families),
 * the recurrent state at the block's end.
 *
 * Files are written to a temporary name and renamed, so a reader sees a
 * whole file or none; the folder's total size is bounded, the least recently
 * used files deleted first (a loaded file is touched). Files are read
 * lazily: on a lookup the next blocks' files are mapped, validated (magic,
 * version, model key, geometry, sizes, tokens, a checksum) and copied into
 * fresh KV blocks, which then join the in-memory prefix cache. A missing,
 * truncated, corrupt or foreign file ends the run with a warning; it never
 * fails a request.
 *
 * Used by the scheduler thread only (stats may be read from any thread). */
#ifndef EMBER_ENGINE_KV_STORE_H
#define EMBER_ENGINE_KV_STORE_H

#include "model/model.h"

#include <stdint.h>

typedef struct kv_store kv_store;

typedef struct kv_store_stats {
    unsigned long long files_written, blocks_loaded, files_rejected, files_deleted;
    size_t bytes; /* on disk, in this store's folder */
    int files;
} kv_store_stats;

/* Opens (creating) the store of m under dir, holding at most max_bytes
 * (0: 4 GiB). The prefix cache must be configured on m first
 * (prompt_cache_configure: the snapshot size is part of the file layout). */
em_status kv_store_open(em_model *m, const char *dir, size_t max_bytes, kv_store **out);
void kv_store_close(kv_store *s);
/* Writes block `index` of seq (full, registered under hash, holding tokens)
 * unless its file exists; state (NULL: none) is the recurrent state at the
 * block's end, and replaces a file without one. */
void kv_store_save(kv_store *s, int seq, int index, uint64_t hash, const int32_t *tokens, const void *state);
/* Extends seq, which holds blocks [0, have) (and, for a hybrid family, the
 * state at their end), with blocks have.. of hashes[0..n) read from disk:
 * the longest run of valid files, ending for a hybrid family at one with a
 * state, which is restored into the sequence. Loaded blocks (and the
 * state) are registered in the memory cache (seed: the chain's, which
 * block 0 extends). Returns the blocks the sequence now holds. */
int kv_store_extend(kv_store *s, int seq, uint64_t seed, const uint64_t *hashes, const int32_t *tokens, int have,
                    int n);
void kv_store_get_stats(kv_store *s, kv_store_stats *out);

#endif
