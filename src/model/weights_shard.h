/* weights_shard.h — binding a slice of a checkpoint tensor onto one rank's
 * backend, for tensor parallelism.
 *
 * Each rank reads only its own slice from the mmapped safetensors: a run of
 * rows is one contiguous upload; a run of columns is gathered row by row
 * into a bounded host buffer and uploaded piece by piece, so a column slice
 * never materialises the whole tensor a second time. */
#ifndef EMBER_MODEL_WEIGHTS_SHARD_H
#define EMBER_MODEL_WEIGHTS_SHARD_H

#include "model/model.h"

/* Device buffers a rank owns, freed together on its backend. */
typedef struct dev_list {
    em_backend *be;
    void **p;
    size_t n, cap;
} dev_list;

em_status dev_list_add(dev_list *l, void *p);
void dev_list_free(dev_list *l);

/* Rows [row0, row0 + nrows) and columns [col0, col0 + ncols) of a [rows,
 * cols] tensor, held as pad_rows rows (>= nrows; the rows past nrows are
 * zero). */
typedef struct tp_slice {
    int64_t row0, nrows, col0, ncols, pad_rows;
} tp_slice;

/* Bytes of host memory a column gather uses at most. */
#define SHARD_GATHER_BYTES ((size_t)16 << 20)

/* Copies rows [r0, r0 + n) of columns [col0, col0 + ncols) of a row-major
 * tensor of `cols` columns and `esize`-byte elements into dst (rows of
 * ncols). Pure memory movement; exposed for tests. */
void shard_gather_rows(void *dst, const void *src, int64_t cols, size_t esize, int64_t r0, int64_t n, int64_t col0,
                       int64_t ncols);

/* Binds the slice s of the [rows, cols] float weight `name` (checked against
 * the checkpoint) into l->be's memory as a [s->pad_rows, s->ncols] weight.
 * Quantized modules are refused. */
em_status weight_bind_shard(em_model *m, dev_list *l, const char *name, int64_t rows, int64_t cols, const tp_slice *s,
                            em_weight *w);
/* The same for n slices of one tensor stacked in order (each held as its
 * pad_rows rows; all of the same columns): a projection whose output has
 * parts split separately, as in_proj_qkv's q, k and v. */
em_status weight_bind_shard_pieces(em_model *m, dev_list *l, const char *name, int64_t rows, int64_t cols,
                                   const tp_slice *s, int n, em_weight *w);
/* Loads elements [off, off + n) of the 1-D tensor `name` of n_full elements
 * as f32 into be's memory (owned by the caller). */
em_status weight_load_vector_shard(em_model *m, em_backend *be, const char *name, int64_t n_full, int64_t off,
                                   int64_t n, float **out);
/* Rows [row0, row0 + nrows) of a tensor, along its first dimension. */
typedef struct tp_rows {
    int64_t row0, nrows;
} tp_rows;
/* Loads n row ranges (stacked in order) of the tensor `name` of exactly
 * `shape` (ndim dims, a row being everything after the first) as f32 into
 * be's memory, `shift` added to every element (a norm gain stored as
 * gamma - 1); owned by the caller. */
em_status weight_load_rows_shard(em_model *m, em_backend *be, const char *name, int ndim, const int64_t *shape,
                                 const tp_rows *rows, int n, float shift, float **out);

#endif
