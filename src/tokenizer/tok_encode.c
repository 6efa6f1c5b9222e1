/* tok_encode.c — text → ids: the whole encoding pipeline, and tok_decode.
 *
 *   raw text ─ split on raw added tokens ─┬─ token ids
 *                                         └─ text ─ normalize ─ split on
 *       normalized added tokens ─┬─ token ids
 *                                └─ text ─ pre-tokenize ─ BPE per piece
 *   then the post-processor when add_special is set. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

typedef struct enc_ctx {
    const tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    tok_list pieces, tmp;
} enc_ctx;

static em_status push_id(enc_ctx *c, int32_t id) {
    if (c->n == c->cap && !em_grow((void **)&c->ids, &c->cap, c->n + 1, sizeof *c->ids))
        return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    c->ids[c->n++] = id;
    return EM_OK;
}

/* One raw piece of a Split + ByteLevel pre-tokenizer (tok_pretok_fused):
 * its ids from the raw-piece memo, else byte-mapped and encoded by the model
 * (and remembered). The same ids as mapping every piece first: the memo
 * only skips the copies and the mapping of pieces seen before. */
#define RAW_CACHE_MAX_LEN 128 /* longer pieces are not remembered */
static em_status encode_raw(void *ctx, const char *s, size_t n) {
    enc_ctx *c = ctx;
    const tokenizer *t = c->t;
    bool oom = false, memo = t->raw_cache && n < RAW_CACHE_MAX_LEN;
    if (memo && tok_cache_get(t->raw_cache, s, n, &c->ids, &c->n, &c->cap, &oom)) return EM_OK;
    if (oom) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    char small[2 * RAW_CACHE_MAX_LEN] = {0}; /* (only misses get here) */
    char *m = n <= RAW_CACHE_MAX_LEN ? small : malloc(2 * n); /* a byte's char takes at most 2 bytes */
    if (!m) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    size_t len = tok_bytelevel_map(t->fused_bl, (const unsigned char *)s, n, m), first = c->n;
    em_status st = tok_bpe_encode(&t->bpe, m, len, &c->ids, &c->n, &c->cap);
    if (st == EM_OK && memo) tok_cache_put(t->raw_cache, s, n, c->ids ? c->ids + first : NULL, c->n - first);
    if (m != small) free(m);
    return st;
}

/* Pre-tokenizes one stretch of normalized text and runs the model. */
static em_status encode_text(enc_ctx *c, const char *s, size_t n, bool at_start) {
    if (c->t->fused_bl) return tok_pretok_each_raw(c->t->pretok, s, n, encode_raw, c);
    tok_list_clear(&c->pieces);
    if (!tok_list_push(&c->pieces, s, n, at_start)) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    EM_TRY(tok_pretok_apply(c->t->pretok, &c->pieces, &c->tmp));
    for (size_t i = 0; i < c->pieces.n; i++)
        EM_TRY(tok_bpe_encode(&c->t->bpe, c->pieces.arena.p + c->pieces.v[i].off, c->pieces.v[i].len, &c->ids, &c->n,
                              &c->cap));
    return EM_OK;
}

/* A stretch of raw text between raw added tokens. */
static em_status encode_segment(enc_ctx *c, const char *s, size_t n, bool at_start) {
    const tokenizer *t = c->t;
    tok_buf norm = {0};
    em_status st = tok_norm_apply(t->normalizer, s, n, &norm);
    if (st != EM_OK) {
        tok_buf_free(&norm);
        return st;
    }
    /* The normalized text is split again, on normalized added tokens. */
    char *text = norm.p;
    size_t len = norm.n;
    tok_seg *segs = NULL;
    size_t n_segs = 0;
    st = tok_added_split(&t->added_tokens, t->added_tokens.norm, text ? text : "", len, &segs, &n_segs);
    for (size_t i = 0; st == EM_OK && i < n_segs; i++) {
        if (segs[i].id >= 0) st = push_id(c, segs[i].id);
        else st = encode_text(c, text + segs[i].off, segs[i].len, at_start && segs[i].off == 0);
    }
    free(segs);
    free(text);
    return st;
}

em_status tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (len && !text) return em_fail(EM_ERR_INVALID, "tok_encode: NULL text");
    if (!utf8_valid(text, len)) {
        size_t ok = 0;
        while (ok < len) {
            uint32_t cp;
            int l = utf8_decode(text + ok, len - ok, &cp);
            if (!l) break;
            ok += (size_t)l;
        }
        return em_fail(EM_ERR_INVALID, "tok_encode: input text is not valid UTF-8 (byte offset %zu)", ok);
    }
    enc_ctx c = {.t = t};
    tok_seg *segs = NULL;
    size_t n_segs = 0;
    em_status st = tok_added_split(&t->added_tokens, t->added_tokens.raw, text ? text : "", len, &segs, &n_segs);
    for (size_t i = 0; st == EM_OK && i < n_segs; i++) {
        if (segs[i].id >= 0) st = push_id(&c, segs[i].id);
        else st = encode_segment(&c, text + segs[i].off, segs[i].len, segs[i].off == 0);
    }
    free(segs);
    if (st == EM_OK && add_special) st = tok_post_apply(t->post, &c.ids, &c.n, &c.cap);
    tok_list_free(&c.pieces);
    tok_list_free(&c.tmp);
    if (st != EM_OK) {
        free(c.ids);
        return st;
    }
    if (!c.ids && !(c.ids = em_malloc(sizeof *c.ids))) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    *ids = c.ids;
    *n_ids = c.n;
    return EM_OK;
}

em_status tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text) {
    size_t len;
    return tok_decode_n(t, ids, n, skip_special, text, &len);
}

em_status tok_decode_n(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text,
                       size_t *len) {
    *text = NULL;
    *len = 0;
    tok_buf out = {0};
    em_status st = tok_decode_into(t, ids, n, skip_special, true, &out);
    if (st == EM_OK && !out.p && !tok_buf_put(&out, "", 0)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (st != EM_OK) {
        tok_buf_free(&out);
        return st;
    }
    *text = out.p;
    *len = out.n;
    return EM_OK;
}
