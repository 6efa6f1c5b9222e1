/* st_writer.h — streaming safetensors writer.
 *
 * The caller declares every tensor (name, dtype, shape) up front; the header
 * is written at open, then tensor bytes are appended in declaration order,
 * in as many pieces as the caller likes, so no tensor needs to be held whole
 * beyond what produces it. Close checks that every declared byte came. */
#ifndef EMBER_IO_ST_WRITER_H
#define EMBER_IO_ST_WRITER_H

#include "io/safetensors.h"

typedef struct st_wtensor {
    const char *name;
    em_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_wtensor;

typedef struct st_writer st_writer;

/* Creates path (truncating) and writes the header with the tensors and the
 * metadata pairs (may be NULL/0). Names and values are copied. */
em_status st_writer_open(const char *path, const st_wtensor *t, size_t n, const st_kv *meta, size_t n_meta,
                         st_writer **out);
/* Appends len bytes of the current tensor(s); more than declared is an error. */
em_status st_writer_write(st_writer *w, const void *data, size_t len);
/* Flushes and closes; fails when fewer bytes than declared were written.
 * Frees w in every case. */
em_status st_writer_close(st_writer *w);
/* Closes without checks (the file is left for the caller to remove). */
void st_writer_abort(st_writer *w);
/* Bytes of data a tensor declaration takes (0 on overflow). */
uint64_t st_wtensor_bytes(const st_wtensor *t);

#endif
