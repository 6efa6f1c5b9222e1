/* tok_stream.c — incremental detokenizer for streaming generation.
 *
 * The stream decodes a short window of the latest ids and emits the part
 * of that text which later ids cannot change any more; the concatenation
 * of everything emitted therefore equals tok_decode of all ids. Held back:
 *   - trailing U+FFFD (bytes of a character still arriving through
 *     byte-level pieces),
 *   - the text of a trailing run of <0xXX> byte-fallback pieces (a run is
 *     decoded as a whole: valid UTF-8 or one U+FFFD per byte).
 * Once the whole window text is emitted, the window restarts empty; text
 * decoded from a later window is not "the start of the text" (Metaspace
 * and Strip treat that start specially). Decoder chains that look across
 * the whole text (a Replace or Strip-at-end after Fuse) are emitted at
 * flush. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

struct tok_stream {
    const tokenizer *t;
    bool skip_special, first, streamable, byte_fallback;
    int32_t *ids; /* the window */
    size_t n, cap;
    size_t emitted; /* bytes of the window's text already handed out */
};

tok_stream *tok_stream_new(const tokenizer *t, bool skip_special) {
    tok_stream *s = em_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip_special = skip_special;
    s->first = true;
    s->streamable = tok_dec_streamable(t->decoder);
    s->byte_fallback = tok_dec_has_byte_fallback(t->decoder);
    return s;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->ids);
    free(s);
}

/* True when the decoder will not see id (unknown, or a skipped special). */
static bool filtered(const tok_stream *s, int32_t id) {
    const tokenizer *t = s->t;
    return id < 0 || id >= t->n_ids || !t->pieces[id] || (s->skip_special && t->special[id]);
}

/* Window length without its trailing run of byte-fallback pieces. */
static size_t before_byte_run(const tok_stream *s) {
    size_t k = s->n;
    while (k > 0) {
        int32_t id = s->ids[k - 1];
        if (!filtered(s, id) && !tok_piece_is_byte(s->t->pieces[id], s->t->piece_len[id])) break;
        k--;
    }
    /* Filtered ids before the run stay with the run; they decode to nothing. */
    return k;
}

static size_t stable_len(const tok_stream *s, const tok_buf *full, em_status *st) {
    if (!s->streamable) return 0;
    size_t len = full->n;
    if (s->byte_fallback) {
        size_t k = before_byte_run(s);
        if (k < s->n) {
            tok_buf part = {0};
            *st = tok_decode_into(s->t, s->ids, k, s->skip_special, s->first, &part);
            len = part.n < len ? part.n : len;
            tok_buf_free(&part);
            if (*st != EM_OK) return 0;
        }
    }
    while (len >= 3 && memcmp(full->p + len - 3, "\xEF\xBF\xBD", 3) == 0) len -= 3;
    return len;
}

static em_status hand_out(const char *p, size_t n, char **out, size_t *out_len) {
    *out = em_malloc(n + 1);
    if (!*out) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (n) memcpy(*out, p, n);
    (*out)[n] = 0;
    *out_len = n;
    return EM_OK;
}

em_status tok_stream_feed(tok_stream *s, int32_t id, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (s->n == s->cap && !em_grow((void **)&s->ids, &s->cap, s->n + 1, sizeof *s->ids))
        return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    s->ids[s->n++] = id;
    tok_buf full = {0};
    em_status st = tok_decode_into(s->t, s->ids, s->n, s->skip_special, s->first, &full);
    size_t len = st == EM_OK ? stable_len(s, &full, &st) : 0;
    if (st == EM_OK) {
        size_t from = s->emitted < len ? s->emitted : len;
        st = hand_out(full.p ? full.p + from : "", len - from, out, out_len);
        if (len > s->emitted) s->emitted = len;
    }
    if (st == EM_OK && len == full.n && full.n > 0) { /* everything out: restart the window */
        s->n = 0;
        s->emitted = 0;
        s->first = false;
    }
    tok_buf_free(&full);
    return st;
}

em_status tok_stream_flush(tok_stream *s, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    tok_buf full = {0};
    em_status st = tok_decode_into(s->t, s->ids, s->n, s->skip_special, s->first, &full);
    if (st == EM_OK) {
        size_t from = s->emitted < full.n ? s->emitted : full.n;
        st = hand_out(full.p ? full.p + from : "", full.n - from, out, out_len);
    }
    if (st == EM_OK && full.n > 0) s->first = false;
    s->n = 0;
    s->emitted = 0;
    tok_buf_free(&full);
    return st;
}
