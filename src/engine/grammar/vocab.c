/* vocab.c — grammar_vocab: token bytes for every id of a tokenizer and the
 * preorder trie the mask computation walks (one walk visits each shared
 * prefix once, and a dead prefix skips its whole subtree). */
#include "engine/grammar/grammar_internal.h"
#include "engine/grammar/vocab_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define VOCAB_MAX_TOKEN 65535 /* bytes; longer tokens are never allowed */

typedef struct tok_key {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tok_key;

static int cmp_key(const void *a, const void *b) {
    const tok_key *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static em_status build_trie(grammar_vocab *v, tok_key *keys, size_t nk) {
    size_t cap = 1;
    for (size_t i = 0; i < nk; i++) cap += keys[i].len;
    v->node_byte = em_malloc(cap);
    v->node_depth = em_mallocn(cap, sizeof(uint16_t));
    v->node_skip = em_mallocn(cap, sizeof(uint32_t));
    v->node_tok = em_calloc(cap, sizeof(uint32_t));
    v->node_ntok = em_calloc(cap, sizeof(uint32_t));
    v->ids_sorted = em_mallocn(nk + 1, sizeof(int32_t));
    uint32_t *path = em_mallocn(VOCAB_MAX_TOKEN + 2, sizeof(uint32_t));
    if (!v->node_byte || !v->node_depth || !v->node_skip || !v->node_tok || !v->node_ntok || !v->ids_sorted || !path) {
        free(path);
        return em_fail(EM_ERR_NOMEM, "grammar vocabulary: out of memory");
    }
    uint32_t n = 1, depth = 0;
    v->node_byte[0] = 0;
    v->node_depth[0] = 0;
    path[0] = 0;
    const tok_key *prev = NULL;
    for (size_t i = 0; i < nk; i++) {
        const tok_key *k = &keys[i];
        uint32_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < k->len && prev->p[lcp] == k->p[lcp]) lcp++;
        for (; depth > lcp; depth--) v->node_skip[path[depth]] = n;
        for (; depth < k->len; depth++) {
            v->node_byte[n] = k->p[depth];
            v->node_depth[n] = (uint16_t)(depth + 1);
            path[depth + 1] = n++;
        }
        uint32_t at = path[k->len];
        if (!v->node_ntok[at]) v->node_tok[at] = (uint32_t)i;
        v->node_ntok[at]++;
        v->ids_sorted[i] = k->id;
        if (k->len > v->max_depth) v->max_depth = k->len;
        prev = k;
    }
    for (; depth > 0; depth--) v->node_skip[path[depth]] = n;
    v->node_skip[0] = n;
    v->n_nodes = n;
    free(path);
    return EM_OK;
}

static em_status collect(grammar_vocab *v, const tokenizer *t) {
    tb_ref ref;
    EM_TRY(vocab_ref_init(t, &ref));
    size_t total = 0, cap = 1 << 20;
    v->bytes = em_malloc(cap);
    v->tok_off = em_mallocn((size_t)v->n_tok + 1, sizeof(uint32_t));
    v->usable = em_calloc((size_t)v->n_tok + 1, 1);
    if (!v->bytes || !v->tok_off || !v->usable) return em_fail(EM_ERR_NOMEM, "grammar vocabulary: out of memory");
    for (int32_t id = 0; id < v->n_tok; id++) {
        v->tok_off[id] = (uint32_t)total;
        if (tok_is_special(t, id) || !tok_id_to_piece(t, id)) continue;
        uint8_t *b;
        size_t len;
        EM_TRY(vocab_token_text(t, id, &ref, &b, &len));
        if (len && len <= VOCAB_MAX_TOKEN && total + len < UINT32_MAX) {
            if (!em_grow((void **)&v->bytes, &cap, total + len, 1)) {
                free(b);
                return em_fail(EM_ERR_NOMEM, "grammar vocabulary: out of memory");
            }
            memcpy(v->bytes + total, b, len);
            total += len;
            v->usable[id] = 1;
        }
        free(b);
    }
    v->tok_off[v->n_tok] = (uint32_t)total;
    return EM_OK;
}

em_status grammar_vocab_new(const tokenizer *t, const int32_t *end_ids, size_t n_end, int n_vocab,
                            grammar_vocab **out) {
    *out = NULL;
    grammar_vocab *v = em_calloc(1, sizeof(grammar_vocab));
    if (!v) return em_fail(EM_ERR_NOMEM, "grammar vocabulary: out of memory");
    v->n_tok = tok_vocab_size(t);
    v->n_vocab = n_vocab > v->n_tok ? n_vocab : v->n_tok;
    int32_t eos = tok_eos_id(t);
    if (!end_ids || !n_end) {
        end_ids = &eos;
        n_end = eos >= 0;
    }
    em_status s = EM_OK;
    v->end_ids = em_mallocn(n_end + 1, sizeof(int32_t));
    if (!v->end_ids) s = em_fail(EM_ERR_NOMEM, "grammar vocabulary: out of memory");
    for (size_t i = 0; i < n_end && s == EM_OK; i++) {
        if (end_ids[i] < 0 || end_ids[i] >= v->n_vocab)
            s = em_fail(EM_ERR_INVALID, "grammar vocabulary: end id %d is outside the vocabulary", end_ids[i]);
        v->end_ids[v->n_end++] = end_ids[i];
    }
    if (s == EM_OK) s = collect(v, t);
    tok_key *keys = NULL;
    size_t nk = 0;
    if (s == EM_OK && !(keys = em_mallocn((size_t)v->n_tok + 1, sizeof(tok_key))))
        s = em_fail(EM_ERR_NOMEM, "grammar vocabulary: out of memory");
    for (int32_t id = 0; s == EM_OK && id < v->n_tok; id++) {
        if (!v->usable[id] || grammar_vocab_is_end(v, id)) {
            v->usable[id] = 0;
            continue;
        }
        keys[nk++] = (tok_key){v->bytes + v->tok_off[id], v->tok_off[id + 1] - v->tok_off[id], id};
    }
    if (s == EM_OK) {
        qsort(keys, nk, sizeof(tok_key), cmp_key);
        s = build_trie(v, keys, nk);
    }
    free(keys);
    if (s != EM_OK) {
        grammar_vocab_free(v);
        return s;
    }
    *out = v;
    return EM_OK;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->tok_off);
    free(v->bytes);
    free(v->usable);
    free(v->end_ids);
    free(v->node_byte);
    free(v->node_depth);
    free(v->node_skip);
    free(v->node_tok);
    free(v->node_ntok);
    free(v->ids_sorted);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n_vocab; }

const uint8_t *grammar_vocab_token(const grammar_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_tok || !v->usable[id]) {
        *len = 0;
        return NULL;
    }
    *len = v->tok_off[id + 1] - v->tok_off[id];
    return v->bytes + v->tok_off[id];
}

bool grammar_vocab_is_end(const grammar_vocab *v, int32_t id) {
    for (size_t i = 0; i < v->n_end; i++)
        if (v->end_ids[i] == id) return true;
    return false;
}
