/* safetensors.h — read-only access to .safetensors files, single or sharded.
 *
 * Files are mmapped; tensor data pointers point into the mapping and stay
 * valid until the set is closed. Every header field is validated against the
 * file size before use: offsets in range, byte counts equal to
 * shape x dtype size, no two tensors overlapping. */
#ifndef EMBER_IO_SAFETENSORS_H
#define EMBER_IO_SAFETENSORS_H

#include "base/status.h"
#include "tensor/dtype.h"

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
/* A header over this size is refused (real ones are a few MB at most). */
#define ST_MAX_HEADER (256u << 20)

typedef struct st_tensor {
    char *name;
    em_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t n_elements;
    const void *data; /* into the mapping (or the caller's buffer) */
    size_t nbytes;
    uint64_t offset;  /* byte offset in the file's data area (after the header) */
    int file_index;   /* which shard */
} st_tensor;

typedef struct st_kv {
    char *key;
    char *value;
} st_kv;

/* Parses a complete safetensors image held in memory (buf, len), without
 * taking ownership of it. `name` is used in messages. Fills the tensor and
 * metadata arrays (malloc'd; release with st_header_free). Used by the file
 * reader and by the fuzz harness. */
typedef struct st_header {
    st_tensor *tensors;
    size_t n_tensors;
    st_kv *metadata;
    size_t n_metadata;
    uint64_t header_len;
} st_header;
em_status st_parse(const uint8_t *buf, size_t len, const char *name, st_header *out);
void st_header_free(st_header *h);

typedef struct st_set st_set;

/* Opens DIR: model.safetensors.index.json when present (every shard it names
 * must exist and every tensor must be found in its declared shard), else
 * every *.safetensors in DIR (sorted). A file path opens that file alone. */
em_status st_open(const char *path, st_set **out);
void st_close(st_set *s);

size_t st_count(const st_set *s);
const st_tensor *st_at(const st_set *s, size_t i);
/* NULL when absent. */
const st_tensor *st_find(const st_set *s, const char *name);
/* __metadata__ value of the first file that has the key, or NULL. */
const char *st_metadata(const st_set *s, const char *key);
/* Total bytes of tensor data over all files. */
uint64_t st_data_bytes(const st_set *s);
const char *st_file_path(const st_set *s, int file_index);
/* Tells the kernel the pages of t's data may be dropped (they are re-read
 * from the file if touched again): keeps a streaming reader's memory flat. */
void st_drop_pages(const st_tensor *t);
/* The same for the whole pages of a range of a tensor's data. */
void st_drop_range(const void *p, size_t n);
/* Files of the set, and the parsed header of one (its __metadata__ entries
 * included); NULL for an index out of range. Owned by the set. */
int st_n_files(const st_set *s);
const st_header *st_file_header(const st_set *s, int file_index);

#endif
