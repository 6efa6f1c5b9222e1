/* recurrent_state.c — storage, reset, snapshot and the rollback journal of
 * the recurrent layers' per-sequence state. */
#include "model/recurrent_state.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

em_status rstate_create(em_backend *be, int n_layers, int max_seqs, int kernel, int channels, int heads, int dk, int dv,
                        rstate **out) {
    rstate *r = em_calloc(1, sizeof *r);
    if (!r) return em_fail(EM_ERR_NOMEM, "out of memory");
    r->be = be;
    r->n_layers = n_layers;
    r->max_seqs = max_seqs;
    r->conv_rows = kernel - 1;
    r->channels = channels;
    r->heads = heads;
    r->dk = dk;
    r->dv = dv;
    r->row_floats = channels + 2 * heads;
    r->conv_floats = (size_t)r->conv_rows * (size_t)channels;
    r->ssm_floats = (size_t)heads * (size_t)dk * (size_t)dv;
    r->layer_floats = r->conv_floats + r->ssm_floats;
    size_t bytes;
    if (!em_mul(r->layer_floats, (size_t)n_layers, &r->seq_floats) ||
        !em_mul(r->seq_floats * sizeof(float), (size_t)max_seqs, &bytes)) {
        free(r);
        return em_fail(EM_ERR_LIMIT, "recurrent state of %d sequences is too large", max_seqs);
    }
    r->journal = em_calloc((size_t)max_seqs, sizeof *r->journal);
    /* Reserved: on the CPU committed by the OS as sequences touch it. */
    void *p = bytes ? be->ops->reserve(be, bytes) : NULL;
    if (!be->ops->host_memory && r->seq_floats) r->zeros = be->ops->alloc(be, r->seq_floats * sizeof(float));
    if (!r->journal || (bytes && !p) || (!be->ops->host_memory && r->seq_floats && !r->zeros)) {
        if (p) be->ops->release(be, p, bytes);
        if (r->zeros) be->ops->free(be, r->zeros);
        free(r->journal);
        free(r);
        return em_fail(EM_ERR_NOMEM, "cannot reserve %zu bytes of recurrent state in %s memory", bytes, be->desc);
    }
    r->data = p;
    r->data_bytes = bytes;
    *out = r;
    return EM_OK;
}

void rstate_free(rstate *r) {
    if (!r) return;
    em_backend *be = r->be;
    if (r->data) be->ops->release(be, r->data, r->data_bytes);
    if (r->zeros) be->ops->free(be, r->zeros);
    for (int s = 0; s < r->max_seqs; s++) {
        if (r->journal[s].mark) be->ops->free(be, r->journal[s].mark);
        if (r->journal[s].rows) be->ops->free(be, r->journal[s].rows);
    }
    free(r->journal);
    free(r);
}

static float *seq_base(const rstate *r, int seq) { return r->data + (size_t)seq * r->seq_floats; }

float *rstate_conv(rstate *r, int seq, int layer) { return seq_base(r, seq) + (size_t)layer * r->layer_floats; }

float *rstate_ssm(rstate *r, int seq, int layer) { return rstate_conv(r, seq, layer) + r->conv_floats; }

void rstate_journal_close(rstate *r, int seq) { r->journal[seq].cap = 0; }

size_t rstate_seq_bytes(const rstate *r) { return r->seq_floats * sizeof(float); }

void rstate_reset(rstate *r, int seq) {
    if (r->be->ops->host_memory) memset(seq_base(r, seq), 0, rstate_seq_bytes(r));
    else r->be->ops->copy(r->be, seq_base(r, seq), r->zeros, rstate_seq_bytes(r));
}

em_status rstate_save(const rstate *r, int seq, void *buf) {
    return r->be->ops->download(r->be, buf, seq_base(r, seq), rstate_seq_bytes(r));
}

em_status rstate_load(rstate *r, int seq, const void *buf) {
    rstate_journal_close(r, seq);
    return r->be->ops->upload(r->be, seq_base(r, seq), buf, rstate_seq_bytes(r));
}

em_status rstate_mark(rstate *r, int seq, int len, int max_tokens) {
    rs_journal *j = &r->journal[seq];
    em_backend *be = r->be;
    if (max_tokens <= 0) return em_fail(EM_ERR_INVALID, "a rollback mark needs a positive token budget");
    if (!j->mark && !(j->mark = be->ops->alloc(be, rstate_seq_bytes(r))))
        return em_fail(EM_ERR_NOMEM, "out of %s memory for a rollback mark", be->desc);
    if (max_tokens > j->rows_cap) {
        /* kept across marks; grown here (its contents are dead between marks) */
        size_t n;
        if (!em_mul((size_t)r->n_layers * (size_t)max_tokens, (size_t)r->row_floats * sizeof(float), &n))
            return em_fail(EM_ERR_LIMIT, "rollback journal too large");
        if (j->rows) be->ops->free(be, j->rows);
        j->rows_cap = 0;
        j->cap = 0;
        if (!(j->rows = be->ops->alloc(be, n ? n : 1)))
            return em_fail(EM_ERR_NOMEM, "out of %s memory for the rollback journal", be->desc);
        j->rows_cap = max_tokens;
    }
    j->cap = max_tokens;
    j->base_len = len;
    j->n = 0;
    be->ops->copy(be, j->mark, seq_base(r, seq), rstate_seq_bytes(r));
    return EM_OK;
}

em_status rstate_journal_span(rstate *r, int seq, int len, int n, int *first, bool *active) {
    rs_journal *j = &r->journal[seq];
    if (j->cap > 0 && j->base_len + j->n != len) j->cap = 0; /* stale: the sequence moved on without it */
    *active = j->cap > 0;
    *first = 0;
    if (!*active) return EM_OK;
    if (n > j->cap - j->n)
        return em_fail(EM_ERR_LIMIT, "a span of %d tokens overflows the rollback journal (%d of %d used)", n, j->n, j->cap);
    *first = j->n;
    j->n += n;
    return EM_OK;
}

float *rstate_journal_rows(rstate *r, int seq, int layer) {
    rs_journal *j = &r->journal[seq];
    return j->rows + (size_t)layer * (size_t)j->cap * (size_t)r->row_floats;
}

em_status rstate_rewind(rstate *r, int seq, int len, int *replay) {
    rs_journal *j = &r->journal[seq];
    *replay = 0;
    if (j->cap == 0) return em_fail(EM_ERR_UNSUPPORTED, "sequence %d has no rollback mark; cannot cut it back to %d", seq, len);
    if (len < j->base_len || len > j->base_len + j->n)
        return em_fail(EM_ERR_INVALID, "cannot roll sequence %d back to %d: the mark covers %d..%d", seq, len,
                       j->base_len, j->base_len + j->n);
    r->be->ops->copy(r->be, seq_base(r, seq), j->mark, rstate_seq_bytes(r));
    *replay = len - j->base_len;
    return EM_OK;
}
