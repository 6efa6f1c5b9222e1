/* added_tokens.c — the "added_tokens" of tokenizer.json (special tokens
 * such as <|im_start|>, and user-added words). They are cut out of the
 * text before the model runs: tokens with normalized=false on the raw
 * text, the others on the normalized text. Matching is leftmost-longest
 * over a byte trie, then lstrip/rstrip/single_word adjust or veto a match
 * exactly as the reference does. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tok_trie {
    tok_u64map edges;  /* (node << 8 | byte) → child node */
    int32_t *term;     /* node → index into tok_added.v, or -1 */
    size_t n_nodes, cap_nodes;
    bool first[256];   /* bytes that can start a token */
};

static void trie_free(tok_trie *t) {
    if (!t) return;
    tok_u64map_free(&t->edges);
    free(t->term);
    free(t);
}

static bool trie_node(tok_trie *t, size_t *out) {
    if (t->n_nodes == t->cap_nodes && !em_grow((void **)&t->term, &t->cap_nodes, t->n_nodes + 1, sizeof *t->term))
        return false;
    t->term[t->n_nodes] = -1;
    *out = t->n_nodes++;
    return true;
}

static bool trie_add(tok_trie *t, const char *s, size_t n, int32_t idx) {
    size_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = ((uint64_t)node << 8) | (unsigned char)s[i], child;
        if (!tok_u64map_get(&t->edges, key, &child)) {
            size_t c;
            if (!trie_node(t, &c) || !tok_u64map_put(&t->edges, key, c)) return false;
            child = c;
        }
        node = (size_t)child;
    }
    t->first[(unsigned char)s[0]] = true;
    t->term[node] = idx;
    return true;
}

static tok_trie *trie_new(void) {
    tok_trie *t = em_calloc(1, sizeof *t);
    size_t root;
    if (!t || !tok_u64map_init(&t->edges, 64) || !trie_node(t, &root)) {
        trie_free(t);
        return NULL;
    }
    return t;
}

void tok_added_free(tok_added *a) {
    for (size_t i = 0; i < a->n; i++) free(a->v[i].content);
    free(a->v);
    trie_free(a->raw);
    trie_free(a->norm);
    memset(a, 0, sizeof *a);
}

static em_status flag(json_t *o, const char *key, bool dflt, const char *path, bool *out) {
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = dflt;
        return EM_OK;
    }
    if (!json_is_boolean(v)) return em_fail(EM_ERR_FORMAT, "%s.%s: expected a boolean", path, key);
    *out = json_is_true(v);
    return EM_OK;
}

static em_status load_one(json_t *o, const char *path, tok_added_token *t) {
    if (!json_is_object(o)) return em_fail(EM_ERR_FORMAT, "%s: expected an object", path);
    json_t *id = json_object_get(o, "id"), *c = json_object_get(o, "content");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TOK_MAX_ID)
        return em_fail(EM_ERR_FORMAT, "%s.id: expected an integer in [0, %d)", path, TOK_MAX_ID);
    if (!json_is_string(c) || json_string_length(c) == 0)
        return em_fail(EM_ERR_FORMAT, "%s.content: expected a non-empty string", path);
    t->id = (int32_t)json_integer_value(id);
    t->len = json_string_length(c);
    EM_TRY(flag(o, "special", false, path, &t->special));
    EM_TRY(flag(o, "lstrip", false, path, &t->lstrip));
    EM_TRY(flag(o, "rstrip", false, path, &t->rstrip));
    EM_TRY(flag(o, "single_word", false, path, &t->single_word));
    EM_TRY(flag(o, "normalized", !t->special, path, &t->normalized));
    t->content = em_strndup(json_string_value(c), t->len);
    return t->content ? EM_OK : em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
}

em_status tok_added_load(json_t *j, const char *path, const tok_norm *nz, tok_added *a) {
    memset(a, 0, sizeof *a);
    if (!j || json_is_null(j)) return EM_OK;
    if (!json_is_array(j)) return em_fail(EM_ERR_FORMAT, "%s: expected an array", path);
    a->v = em_calloc(json_array_size(j) + 1, sizeof *a->v);
    a->raw = trie_new();
    a->norm = trie_new();
    if (!a->v || !a->raw || !a->norm) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    tok_buf nb = {0};
    em_status st = EM_OK;
    for (size_t i = 0; st == EM_OK && i < json_array_size(j); i++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
        tok_added_token *t = &a->v[a->n];
        st = load_one(json_array_get(j, i), sub, t);
        if (st != EM_OK) {
            free(t->content);
            break;
        }
        a->n++;
        const char *key = t->content;
        size_t klen = t->len;
        if (t->normalized) {
            /* Normalized tokens are looked for in normalized text, so their
             * content is normalized the same way first. */
            nb.n = 0;
            st = tok_norm_apply(nz, t->content, t->len, &nb);
            if (st != EM_OK) break;
            key = nb.p;
            klen = nb.n;
        }
        if (klen && !trie_add(t->normalized ? a->norm : a->raw, key, klen, (int32_t)(a->n - 1)))
            st = em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    }
    tok_buf_free(&nb);
    return st;
}

/* Longest token starting at s[i]; returns its length, 0 when none. */
static size_t longest_at(const tok_trie *t, const char *s, size_t n, size_t i, int32_t *idx) {
    size_t node = 0, best = 0;
    for (size_t k = i; k < n; k++) {
        uint64_t child;
        if (!tok_u64map_get(&t->edges, ((uint64_t)node << 8) | (unsigned char)s[k], &child)) break;
        node = (size_t)child;
        if (t->term[node] >= 0) {
            best = k + 1 - i;
            *idx = t->term[node];
        }
    }
    return best;
}

static bool is_word_char(uint32_t cp) { return cp == '_' || tok_is_alphanumeric(cp); }

static bool ends_with_word(const char *s, size_t n) {
    if (n == 0) return false;
    size_t k = n - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    tok_utf8_cp(s + k, n - k, &cp);
    return is_word_char(cp);
}

static bool starts_with_word(const char *s, size_t n) {
    uint32_t cp;
    return n > 0 && (tok_utf8_cp(s, n, &cp), is_word_char(cp));
}

/* Start of the whitespace run that ends s[0..n) (n when there is none). */
static size_t space_start(const char *s, size_t n) {
    size_t k = n;
    while (k > 0) {
        size_t c = k - 1;
        while (c > 0 && ((unsigned char)s[c] & 0xC0) == 0x80) c--;
        uint32_t cp;
        tok_utf8_cp(s + c, k - c, &cp);
        if (!tok_is_whitespace(cp)) break;
        k = c;
    }
    return k;
}

static size_t space_len(const char *s, size_t n) {
    size_t k = 0;
    while (k < n) {
        uint32_t cp;
        size_t l = tok_utf8_cp(s + k, n - k, &cp);
        if (!tok_is_whitespace(cp)) break;
        k += l;
    }
    return k;
}

static bool seg_push(tok_seg **v, size_t *n, size_t *cap, size_t off, size_t len, int32_t id) {
    if (*n == *cap && !em_grow((void **)v, cap, *n + 1, sizeof **v)) return false;
    (*v)[(*n)++] = (tok_seg){off, len, id};
    return true;
}

em_status tok_added_split(const tok_added *a, const tok_trie *trie, const char *s, size_t n, tok_seg **segs,
                          size_t *n_segs) {
    size_t cap = 0, done = 0;
    *segs = NULL;
    *n_segs = 0;
    bool ok = true;
    if (trie && trie->n_nodes > 1) {
        for (size_t i = 0; ok && i < n;) {
            int32_t idx = -1;
            size_t len = trie->first[(unsigned char)s[i]] ? longest_at(trie, s, n, i, &idx) : 0;
            if (!len) {
                i++;
                continue;
            }
            const tok_added_token *t = &a->v[idx];
            size_t start = i, stop = i + len;
            i = stop; /* the scan resumes after the match, kept or not */
            if (t->single_word && (ends_with_word(s, start) || starts_with_word(s + stop, n - stop))) continue;
            if (t->lstrip) {
                size_t ns = space_start(s, start);
                start = ns > done ? ns : done;
            }
            if (t->rstrip) stop += space_len(s + stop, n - stop);
            if (done < start) ok = seg_push(segs, n_segs, &cap, done, start - done, -1);
            ok = ok && seg_push(segs, n_segs, &cap, start, stop - start, t->id);
            done = stop;
        }
    }
    if (ok && done < n) ok = seg_push(segs, n_segs, &cap, done, n - done, -1);
    if (!ok) {
        free(*segs);
        *segs = NULL;
        *n_segs = 0;
        return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    }
    return EM_OK;
}
