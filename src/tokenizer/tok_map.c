/* tok_map.c — open-addressing hash maps for vocabularies (string → id) and
 * merge tables (id pair → rank and merged id). Linear probing, power-of-two
 * capacity kept under 50% load so lookups touch one or two slots. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"
#include "base/hash.h"

#include <stdlib.h>
#include <string.h>

static size_t table_size(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 2 && cap < ((size_t)1 << 40)) cap *= 2;
    return cap;
}

static uint64_t str_hash(const char *s, size_t n) { return em_hash_finish(em_hash_bytes(EM_HASH_SEED, s, n)); }

bool tok_strmap_init(tok_strmap *m, size_t expected) {
    size_t cap = table_size(expected);
    m->slots = em_calloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    m->n = 0;
    return m->slots != NULL;
}

static bool strmap_grow(tok_strmap *m) {
    size_t cap = (m->mask + 1) * 2;
    tok_strmap_slot *s = em_calloc(cap, sizeof *s);
    if (!s) return false;
    for (size_t i = 0; i <= m->mask; i++) {
        tok_strmap_slot *o = &m->slots[i];
        if (!o->key) continue;
        size_t j = o->hash & (cap - 1);
        while (s[j].key) j = (j + 1) & (cap - 1);
        s[j] = *o;
    }
    free(m->slots);
    m->slots = s;
    m->mask = cap - 1;
    return true;
}

bool tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val) {
    if (len > UINT32_MAX) return false;
    if ((m->n + 1) * 2 > m->mask + 1 && !strmap_grow(m)) return false;
    uint64_t h = str_hash(key, len);
    size_t i = h & m->mask;
    for (;; i = (i + 1) & m->mask) {
        tok_strmap_slot *s = &m->slots[i];
        if (!s->key) {
            *s = (tok_strmap_slot){key, (uint32_t)len, val, h};
            m->n++;
            return true;
        }
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            s->val = val;
            return true;
        }
    }
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    uint64_t h = str_hash(key, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const tok_strmap_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s->val;
    }
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

#define U64_EMPTY UINT64_MAX

bool tok_u64map_init(tok_u64map *m, size_t expected) {
    size_t cap = table_size(expected);
    m->keys = em_mallocn(cap, sizeof *m->keys);
    m->vals = em_mallocn(cap, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = m->vals = NULL;
        return false;
    }
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    m->mask = cap - 1;
    m->n = 0;
    return true;
}

static size_t u64_slot(uint64_t k, size_t mask) { return em_hash_finish(k) & mask; }

static bool u64map_grow(tok_u64map *m) {
    tok_u64map g;
    if (!tok_u64map_init(&g, m->mask + 1)) return false;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->keys[i] == U64_EMPTY) continue;
        size_t j = u64_slot(m->keys[i], g.mask);
        while (g.keys[j] != U64_EMPTY) j = (j + 1) & g.mask;
        g.keys[j] = m->keys[i];
        g.vals[j] = m->vals[i];
    }
    g.n = m->n;
    tok_u64map_free(m);
    *m = g;
    return true;
}

bool tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val) {
    if (key == U64_EMPTY) return false;
    if ((m->n + 1) * 2 > m->mask + 1 && !u64map_grow(m)) return false;
    for (size_t i = u64_slot(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return true;
        }
        if (m->keys[i] == U64_EMPTY) {
            m->keys[i] = key;
            m->vals[i] = val;
            m->n++;
            return true;
        }
    }
}

bool tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val) {
    if (!m->keys) return false;
    for (size_t i = u64_slot(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return true;
        }
        if (m->keys[i] == U64_EMPTY) return false;
    }
}

void tok_u64map_free(tok_u64map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
