/* tp_step.c — step descriptors of multi-process tensor parallelism
 * (tp_step.h). */
#include "model/tp_step.h"

#include <string.h>

size_t tp_step_encode(int32_t *out, const em_batch *b, const int *len0, const kv_cache *kv) {
    size_t words = TP_STEP_HEADER, tokens = 0;
    for (int s = 0; s < b->n_spans; s++) {
        words += 5 + (size_t)kv->seqs[b->spans[s].seq].n_blocks + (size_t)b->spans[s].n;
        tokens += (size_t)b->spans[s].n;
    }
    if (!out) return words;
    int32_t *w = out;
    *w++ = TP_STEP_MAGIC, *w++ = TP_STEP_RUN, *w++ = b->n_spans, *w++ = (int32_t)tokens;
    for (int s = 0; s < b->n_spans; s++) {
        const em_span *sp = &b->spans[s];
        const kv_seq *q = &kv->seqs[sp->seq];
        *w++ = sp->seq, *w++ = sp->n, *w++ = len0[s], *w++ = (int32_t)sp->logits | (int32_t)sp->math << 8, *w++ = q->n_blocks;
        memcpy(w, q->blocks, (size_t)q->n_blocks * sizeof *w);
        w += q->n_blocks;
        memcpy(w, sp->tokens, (size_t)sp->n * sizeof *w);
        w += sp->n;
    }
    return words;
}

void tp_step_stop(int32_t *out) {
    out[0] = TP_STEP_MAGIC, out[1] = TP_STEP_STOP, out[2] = 0, out[3] = 0;
}

static em_status bad(const char *what) { return em_fail(EM_ERR_FORMAT, "malformed step from rank 0: %s", what); }

em_status tp_step_check(const int32_t *w, size_t words, const tp_step_limits *lim, int *n_spans, int *tokens) {
    if (words < TP_STEP_HEADER || w[0] != TP_STEP_MAGIC) return bad("bad header");
    if (w[1] == TP_STEP_STOP) {
        if (words != TP_STEP_HEADER) return bad("trailing words");
        *n_spans = 0;
        *tokens = -1;
        return EM_OK;
    }
    if (w[1] != TP_STEP_RUN || w[2] < 1 || w[2] > TP_STEP_MAX_SPANS || w[3] < 1) return bad("bad counts");
    int bs = lim->block_size, per_seq = (lim->max_ctx + bs - 1) / bs;
    size_t at = TP_STEP_HEADER;
    int64_t total = 0;
    for (int s = 0; s < w[2]; s++) {
        if (words - at < 5) return bad("a span is cut short");
        int32_t seq = w[at], n = w[at + 1], len0 = w[at + 2], lg = w[at + 3], nb = w[at + 4];
        if (seq < 0 || seq >= lim->max_seqs) return bad("sequence slot out of range");
        if (n < 1 || len0 < 0 || n > lim->max_ctx || len0 > lim->max_ctx - n) return bad("positions out of range");
        if ((lg & 0xff) < LOGITS_NONE || (lg & 0xff) > LOGITS_ALL) return bad("unknown logits mode");
        if (lg >> 8 < SPAN_MATH_MODEL || lg >> 8 > SPAN_MATH_FAST) return bad("unknown span math");
        if (nb < (len0 + n + bs - 1) / bs || nb > per_seq) return bad("block table of the wrong size");
        at += 5;
        if (words - at < (size_t)nb + (size_t)n) return bad("a span is cut short");
        for (int i = 0; i < nb; i++)
            if (w[at + i] < 0 || w[at + i] >= lim->blocks) return bad("block id out of range");
        at += (size_t)nb;
        for (int i = 0; i < n; i++)
            if (w[at + i] < 0 || w[at + i] >= lim->vocab) return bad("token id out of range");
        at += (size_t)n;
        total += n;
    }
    if (at != words) return bad("trailing words");
    if (total != w[3]) return bad("token count mismatch");
    *n_spans = w[2];
    *tokens = w[3];
    return EM_OK;
}

size_t tp_step_span_at(const int32_t *w, size_t at, tp_step_span *out) {
    out->seq = w[at], out->n = w[at + 1], out->len0 = w[at + 2], out->logits = w[at + 3] & 0xff;
    out->math = w[at + 3] >> 8, out->n_blocks = w[at + 4];
    out->blocks = w + at + 5;
    out->tokens = out->blocks + out->n_blocks;
    return at + 5 + (size_t)out->n_blocks + (size_t)out->n;
}
