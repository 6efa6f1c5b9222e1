/* bpe.c — the BPE model: one pre-tokenized piece → ids.
 *
 * The piece is cut into characters (with byte fallback or unk handling),
 * then adjacent pairs are merged lowest rank first, leftmost first on ties,
 * exactly as the reference orders them. A binary heap of candidate merges
 * over a doubly linked list of symbols keeps a long piece (a 100 KB run
 * without spaces) at O(n log n); stale heap entries are recognised and
 * skipped when popped. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define BPE_CACHE_MAX_LEN 256 /* longer pieces are not cached */
#define BPE_SMALL 64          /* symbols handled without heap allocation */

typedef struct sym {
    int32_t id, prev, next;
    uint32_t len; /* 0: merged into its left neighbour */
} sym;

typedef struct cand {
    uint32_t rank, pos;
    int32_t new_id;
} cand;

typedef struct work {
    sym *s;
    size_t n, cap;
    cand *h;
    size_t hn, hcap;
    sym s_small[BPE_SMALL];
    cand h_small[BPE_SMALL];
} work;

static bool cand_less(cand a, cand b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static bool heap_push(work *w, cand c) {
    if (w->hn == w->hcap) {
        size_t cap = w->hcap * 2;
        cand *h = w->h == w->h_small ? em_mallocn(cap, sizeof *h) : em_realloc(w->h, cap * sizeof *h);
        if (!h) return false;
        if (w->h == w->h_small) memcpy(h, w->h_small, sizeof w->h_small);
        w->h = h;
        w->hcap = cap;
    }
    size_t i = w->hn++;
    while (i > 0 && cand_less(c, w->h[(i - 1) / 2])) {
        w->h[i] = w->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->h[i] = c;
    return true;
}

static cand heap_pop(work *w) {
    cand top = w->h[0], last = w->h[--w->hn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        cand best = last;
        if (l < w->hn && cand_less(w->h[l], best)) { m = l; best = w->h[l]; }
        if (r < w->hn && cand_less(w->h[r], best)) m = r;
        if (m == i) break;
        w->h[i] = w->h[m];
        i = m;
    }
    if (w->hn) w->h[i] = last;
    return top;
}

static bool sym_push(work *w, int32_t id, size_t len) {
    if (w->n == w->cap) {
        size_t cap = w->cap * 2;
        sym *s = w->s == w->s_small ? em_mallocn(cap, sizeof *s) : em_realloc(w->s, cap * sizeof *s);
        if (!s) return false;
        if (w->s == w->s_small) memcpy(s, w->s_small, sizeof w->s_small);
        w->s = s;
        w->cap = cap;
    }
    int32_t i = (int32_t)w->n;
    w->s[w->n++] = (sym){id, i - 1, i + 1, (uint32_t)len};
    return true;
}

static bool pair(const tok_bpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    uint64_t v;
    if (!tok_u64map_get(&m->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, &v)) return false;
    *rank = (uint32_t)(v >> 32);
    *new_id = (int32_t)(uint32_t)v;
    return true;
}

/* Looks one character up, with the subword prefix/suffix when configured. */
static int32_t char_id(const tok_bpe *m, const char *c, size_t l, bool first, bool last, tok_buf *tmp) {
    if ((!m->cont_prefix || first) && (!m->eow_suffix || !last)) return tok_strmap_get(&m->vocab, c, l);
    tmp->n = 0;
    if (m->cont_prefix && !first && !tok_buf_put(tmp, m->cont_prefix, strlen(m->cont_prefix))) return -2;
    if (!tok_buf_put(tmp, c, l)) return -2;
    if (m->eow_suffix && last && !tok_buf_put(tmp, m->eow_suffix, strlen(m->eow_suffix))) return -2;
    return tok_strmap_get(&m->vocab, tmp->p, tmp->n);
}

/* The characters of the piece as initial symbols (the reference's
 * merge_word before merging, including its handling of a pending unk). */
static em_status split_chars(const tok_bpe *m, const char *s, size_t n, work *w) {
    tok_buf tmp = {0};
    int32_t unk = -1;
    size_t unk_len = 0;
    em_status st = EM_OK;
    for (size_t i = 0; i < n && st == EM_OK;) {
        size_t l = tok_utf8_len(s + i, n - i);
        int32_t id = char_id(m, s + i, l, i == 0, i + l == n, &tmp);
        if (id == -2) { st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory"); break; }
        if (id >= 0) {
            if (unk >= 0 && !sym_push(w, unk, unk_len)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
            unk = -1;
            if (!sym_push(w, id, l)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
            i += l;
            continue;
        }
        bool done = false;
        if (m->byte_fallback) {
            const unsigned char *u = (const unsigned char *)s + i;
            bool all = true;
            for (size_t k = 0; k < l; k++) all = all && m->byte_ids[u[k]] >= 0;
            for (size_t k = 0; all && k < l; k++)
                if (!sym_push(w, m->byte_ids[u[k]], 1)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
            done = all;
        }
        if (!done && m->unk_id >= 0) {
            if (unk >= 0 && m->fuse_unk) {
                unk_len += l;
            } else {
                if (unk >= 0 && !sym_push(w, unk, unk_len)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
                unk = m->unk_id;
                unk_len = l;
            }
        }
        i += l;
    }
    if (st == EM_OK && unk >= 0 && !sym_push(w, unk, unk_len)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    tok_buf_free(&tmp);
    if (w->n) w->s[w->n - 1].next = -1;
    return st;
}

static em_status merge_all(const tok_bpe *m, work *w) {
    uint32_t rank;
    int32_t nid;
    for (size_t i = 0; i + 1 < w->n; i++)
        if (pair(m, w->s[i].id, w->s[i + 1].id, &rank, &nid) && !heap_push(w, (cand){rank, (uint32_t)i, nid}))
            return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    while (w->hn) {
        cand top = heap_pop(w);
        sym *cur = &w->s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        sym *right = &w->s[cur->next];
        /* Stale entry: the pair at this position changed since it was queued. */
        if (!pair(m, cur->id, right->id, &rank, &nid) || nid != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += right->len;
        right->len = 0;
        cur->next = right->next;
        if (cur->next >= 0) w->s[cur->next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 && pair(m, w->s[cur->prev].id, cur->id, &rank, &nid) &&
            !heap_push(w, (cand){rank, (uint32_t)cur->prev, nid}))
            return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
        if (cur->next >= 0 && pair(m, cur->id, w->s[cur->next].id, &rank, &nid) &&
            !heap_push(w, (cand){rank, top.pos, nid}))
            return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    }
    return EM_OK;
}

static bool push_id(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
    if (*n == *cap && !em_grow((void **)ids, cap, *n + 1, sizeof **ids)) return false;
    (*ids)[(*n)++] = id;
    return true;
}

em_status tok_bpe_encode(const tok_bpe *m, const char *s, size_t n, int32_t **ids, size_t *n_ids, size_t *cap) {
    if (n == 0) return EM_OK;
    if (n > UINT32_MAX / 2) return em_fail(EM_ERR_LIMIT, "tokenizer: piece of %zu bytes is too long", n);
    bool oom = false;
    if (m->cache && n < BPE_CACHE_MAX_LEN && tok_cache_get(m->cache, s, n, ids, n_ids, cap, &oom)) return EM_OK;
    if (oom) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (m->ignore_merges) {
        int32_t id = tok_strmap_get(&m->vocab, s, n);
        if (id >= 0) return push_id(ids, n_ids, cap, id) ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    }
    work w;
    w.s = w.s_small;
    w.cap = BPE_SMALL;
    w.h = w.h_small;
    w.hcap = BPE_SMALL;
    w.n = w.hn = 0;
    em_status st = split_chars(m, s, n, &w);
    if (st == EM_OK) st = merge_all(m, &w);
    size_t first = *n_ids;
    for (size_t i = 0; st == EM_OK && w.n && i != (size_t)-1; i = w.s[i].next < 0 ? (size_t)-1 : (size_t)w.s[i].next)
        if (!push_id(ids, n_ids, cap, w.s[i].id)) st = em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    if (st == EM_OK && m->cache && n < BPE_CACHE_MAX_LEN)
        tok_cache_put(m->cache, s, n, *ids ? *ids + first : NULL, *n_ids - first);
    if (w.s != w.s_small) free(w.s);
    if (w.h != w.h_small) free(w.h);
    return st;
}
