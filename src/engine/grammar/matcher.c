/* matcher.c — the per-sequence grammar state and the token masks.
 *
 * The grammar is a pushdown automaton over bytes. A stack is a chain of
 * interned nodes (position in a rule alternative, parent node), so equal
 * stacks are one id; a matcher state is the set of stacks whose top is a
 * byte set (plus "accepting"). States are interned too and their byte
 * transitions computed lazily, which makes the automaton a lazily built
 * DFA: advancing on a byte is one table lookup once seen.
 *
 * The mask of a state walks the vocabulary trie from that state, skipping
 * every subtree whose prefix is dead, and is cached per state. Nodes,
 * states and masks live in a cache shared by a matcher and its clones
 * (guarded by a mutex); states and masks are dropped wholesale when the
 * cache is full, matchers keep their own copy of their node set. */
#include "engine/grammar/grammar_internal.h"
#include "engine/grammar/vocab_internal.h"

#include "base/alloc.h"
#include "base/hash.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define GM_MAX_NODES (1u << 22)
#define GM_MAX_STATES (1u << 14)
#define GM_MAX_SET 65536
#define GM_MASK_BYTES (8u << 20)
#define T_UNKNOWN (-2)
#define T_DEAD (-1)
#define T_FULL (-3) /* the state table is full: flush and retry */

typedef struct gm_state {
    uint32_t off, n; /* node ids in c->snodes */
    bool accept;
    int32_t mask_slot;
    int32_t *trans; /* 256, lazily */
} gm_state;

typedef struct gm_cache {
    pthread_mutex_t mu;
    int refs;
    const grammar *g;
    const grammar_vocab *v;
    /* stack nodes: never dropped */
    int32_t *npos, *npar;
    uint32_t *nmark;
    size_t n_nodes, cap_nodes;
    int32_t *ntab;
    size_t ntab_cap;
    uint32_t epoch;
    /* states: dropped when full */
    uint32_t *snodes;
    size_t n_snodes, cap_snodes;
    gm_state *states;
    size_t n_states, cap_states;
    int32_t *stab;
    size_t stab_cap;
    uint64_t gen;
    /* masks */
    uint32_t *masks;
    uint32_t *end_mask;
    int32_t *slot_owner;
    size_t mask_words;
    int n_slots, next_slot;
    /* scratch */
    uint32_t *work, *out;
    size_t n_work, cap_work, n_out, cap_out;
    int32_t *walk;
} gm_cache;

typedef struct gm_hist {
    size_t off, n;
    bool accept, terminated;
} gm_hist;

struct grammar_matcher {
    gm_cache *c;
    uint32_t *cur;
    size_t n_cur, cap_cur;
    bool accept, terminated;
    int32_t state;
    uint64_t gen;
    uint32_t *hn;
    size_t n_hn, cap_hn;
    gm_hist *he;
    size_t n_he, cap_he;
    bool synced;
    size_t n_synced;
};

static em_status oom(void) { return em_fail(EM_ERR_NOMEM, "grammar matcher: out of memory"); }

/* ---- stack nodes ---- */

static size_t node_hash(int32_t pos, int32_t par, size_t cap) {
    return em_hash_finish(((uint64_t)(uint32_t)pos << 32) ^ (uint32_t)par) & (cap - 1);
}

static em_status node_get(gm_cache *c, int32_t pos, int32_t par, uint32_t *id) {
    if (c->n_nodes * 2 >= c->ntab_cap) {
        size_t cap = c->ntab_cap ? c->ntab_cap * 2 : 1024;
        int32_t *t = em_calloc(cap, sizeof(int32_t));
        if (!t) return oom();
        for (size_t i = 0; i < c->n_nodes; i++) {
            size_t h = node_hash(c->npos[i], c->npar[i], cap);
            while (t[h]) h = (h + 1) & (cap - 1);
            t[h] = (int32_t)i + 1;
        }
        free(c->ntab);
        c->ntab = t;
        c->ntab_cap = cap;
    }
    size_t h = node_hash(pos, par, c->ntab_cap);
    for (; c->ntab[h]; h = (h + 1) & (c->ntab_cap - 1)) {
        int32_t k = c->ntab[h] - 1;
        if (c->npos[k] == pos && c->npar[k] == par) {
            *id = (uint32_t)k;
            return EM_OK;
        }
    }
    if (c->n_nodes >= GM_MAX_NODES)
        return em_fail(EM_ERR_LIMIT, "grammar: more than %u parser stack nodes (grammar too ambiguous or deep)",
                       GM_MAX_NODES);
    if (c->n_nodes == c->cap_nodes) {
        size_t cap = c->cap_nodes ? c->cap_nodes * 2 : 1024;
        int32_t *p = em_realloc(c->npos, cap * sizeof(int32_t));
        if (!p) return oom();
        c->npos = p;
        if (!(p = em_realloc(c->npar, cap * sizeof(int32_t)))) return oom();
        c->npar = p;
        uint32_t *m = em_realloc(c->nmark, cap * sizeof(uint32_t));
        if (!m) return oom();
        c->nmark = m;
        c->cap_nodes = cap;
    }
    c->npos[c->n_nodes] = pos;
    c->npar[c->n_nodes] = par;
    c->nmark[c->n_nodes] = 0;
    c->ntab[h] = (int32_t)c->n_nodes + 1;
    *id = (uint32_t)c->n_nodes++;
    return EM_OK;
}

/* ---- closure: expand to stacks whose top is a byte set ---- */

static void new_epoch(gm_cache *c) {
    if (++c->epoch == 0) {
        memset(c->nmark, 0, c->n_nodes * sizeof(uint32_t));
        c->epoch = 1;
    }
    c->n_work = c->n_out = 0;
}

static em_status push(gm_cache *c, uint32_t n) {
    if (c->nmark[n] == c->epoch) return EM_OK;
    c->nmark[n] = c->epoch;
    if (!em_grow((void **)&c->work, &c->cap_work, c->n_work + 1, sizeof(uint32_t))) return oom();
    c->work[c->n_work++] = n;
    return EM_OK;
}

static em_status push_new(gm_cache *c, int32_t pos, int32_t par) {
    uint32_t id;
    EM_TRY(node_get(c, pos, par, &id));
    return push(c, id);
}

static em_status closure(gm_cache *c, bool *accept) {
    const grammar *g = c->g;
    while (c->n_work) {
        uint32_t n = c->work[--c->n_work];
        int32_t pos = c->npos[n], par = c->npar[n], e = g->el[pos];
        if (e == GR_END) {
            if (par < 0) *accept = true;
            else EM_TRY(push(c, (uint32_t)par));
        } else if (e >= 0) {
            if (c->n_out >= GM_MAX_SET)
                return em_fail(EM_ERR_LIMIT, "grammar: more than %u simultaneous parses (grammar too ambiguous)",
                               GM_MAX_SET);
            if (!em_grow((void **)&c->out, &c->cap_out, c->n_out + 1, sizeof(uint32_t))) return oom();
            c->out[c->n_out++] = n;
        } else {
            uint32_t r = (uint32_t)GR_REF_RULE(e), cont;
            int32_t cpar = par;
            if (g->el[pos + 1] != GR_END) {
                EM_TRY(node_get(c, pos + 1, par, &cont));
                cpar = (int32_t)cont;
            }
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
                EM_TRY(push_new(c, (int32_t)g->alt[a], cpar));
        }
    }
    return EM_OK;
}

/* ---- states ---- */

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static size_t set_hash(const uint32_t *n, size_t len, bool accept, size_t cap) {
    return em_hash_finish(em_hash_bytes(EM_HASH_SEED + accept, n, len * sizeof(uint32_t))) & (cap - 1);
}

static void flush_states(gm_cache *c) {
    for (size_t i = 0; i < c->n_states; i++) free(c->states[i].trans);
    c->n_states = c->n_snodes = 0;
    if (c->stab) memset(c->stab, 0, c->stab_cap * sizeof(int32_t));
    for (int i = 0; c->slot_owner && i < c->n_slots; i++) c->slot_owner[i] = -1;
    c->gen++;
}

/* Interns a sorted node set; *id T_FULL when the table is full. */
static em_status state_get(gm_cache *c, const uint32_t *nodes, size_t n, bool accept, int32_t *id) {
    if (c->stab_cap == 0) {
        c->stab_cap = 2 * GM_MAX_STATES;
        if (!(c->stab = em_calloc(c->stab_cap, sizeof(int32_t)))) return oom();
    }
    size_t h = set_hash(nodes, n, accept, c->stab_cap);
    for (; c->stab[h]; h = (h + 1) & (c->stab_cap - 1)) {
        const gm_state *s = &c->states[c->stab[h] - 1];
        if (s->n == n && s->accept == accept && (!n || !memcmp(c->snodes + s->off, nodes, n * sizeof(uint32_t)))) {
            *id = c->stab[h] - 1;
            return EM_OK;
        }
    }
    if (c->n_states >= GM_MAX_STATES) {
        *id = T_FULL;
        return EM_OK;
    }
    if (!em_grow((void **)&c->states, &c->cap_states, c->n_states + 1, sizeof(gm_state)) ||
        !em_grow((void **)&c->snodes, &c->cap_snodes, c->n_snodes + n + 1, sizeof(uint32_t)))
        return oom();
    if (n) memcpy(c->snodes + c->n_snodes, nodes, n * sizeof(uint32_t));
    c->states[c->n_states] = (gm_state){(uint32_t)c->n_snodes, (uint32_t)n, accept, -1, NULL};
    c->n_snodes += n;
    c->stab[h] = (int32_t)c->n_states + 1;
    *id = (int32_t)c->n_states++;
    return EM_OK;
}

static em_status advance(gm_cache *c, int32_t s, uint8_t b, int32_t *out) {
    const grammar *g = c->g;
    new_epoch(c);
    const gm_state *st = &c->states[s];
    for (uint32_t i = 0; i < st->n; i++) {
        uint32_t n = c->snodes[st->off + i];
        int32_t pos = c->npos[n];
        if (gr_set_has(g, g->el[pos], b)) EM_TRY(push_new(c, pos + 1, c->npar[n]));
        st = &c->states[s];
    }
    bool accept = false;
    EM_TRY(closure(c, &accept));
    if (!c->n_out && !accept) {
        *out = T_DEAD;
        return EM_OK;
    }
    if (c->n_out) qsort(c->out, c->n_out, sizeof(uint32_t), cmp_u32);
    return state_get(c, c->out, c->n_out, accept, out);
}

static em_status trans(gm_cache *c, int32_t s, uint8_t b, int32_t *out) {
    if (!c->states[s].trans) {
        int32_t *t = em_mallocn(256, sizeof(int32_t));
        if (!t) return oom();
        for (int i = 0; i < 256; i++) t[i] = T_UNKNOWN;
        c->states[s].trans = t;
    }
    int32_t t = c->states[s].trans[b];
    if (t == T_UNKNOWN) {
        EM_TRY(advance(c, s, b, &t));
        if (t != T_FULL) c->states[s].trans[b] = t;
    }
    *out = t;
    return EM_OK;
}

/* ---- matcher state ---- */

static em_status set_cur(grammar_matcher *m, const uint32_t *nodes, size_t n, bool accept) {
    if (!em_grow((void **)&m->cur, &m->cap_cur, n + 1, sizeof(uint32_t))) return oom();
    if (n) memmove(m->cur, nodes, n * sizeof(uint32_t));
    m->n_cur = n;
    m->accept = accept;
    return EM_OK;
}

/* The matcher's state id in the current cache generation. */
static em_status cur_state(grammar_matcher *m, int32_t *out) {
    gm_cache *c = m->c;
    if (m->gen != c->gen || m->state < 0) {
        int32_t id;
        EM_TRY(state_get(c, m->cur, m->n_cur, m->accept, &id));
        if (id == T_FULL) {
            flush_states(c);
            EM_TRY(state_get(c, m->cur, m->n_cur, m->accept, &id));
        }
        m->state = id;
        m->gen = c->gen;
    }
    *out = m->state;
    return EM_OK;
}

static void adopt(grammar_matcher *m, int32_t s) {
    const gm_state *st = &m->c->states[s];
    set_cur(m, m->c->snodes + st->off, st->n, st->accept); /* cap already fits: see advance_bytes */
    m->state = s;
    m->gen = m->c->gen;
}

/* Runs bytes from the current state; *ok false (state unchanged) when the
 * grammar rejects them. */
static em_status advance_bytes(grammar_matcher *m, const uint8_t *b, size_t n, bool *ok) {
    gm_cache *c = m->c;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t s;
        EM_TRY(cur_state(m, &s));
        size_t i = 0;
        for (; i < n && s >= 0; i++) EM_TRY(trans(c, s, b[i], &s));
        if (s == T_FULL) {
            flush_states(c);
            continue;
        }
        *ok = s >= 0;
        if (*ok) {
            size_t need = c->states[s].n + 1;
            if (!em_grow((void **)&m->cur, &m->cap_cur, need, sizeof(uint32_t))) return oom();
            adopt(m, s);
        }
        return EM_OK;
    }
    return em_fail(EM_ERR_LIMIT, "grammar: more than %u automaton states for one token", GM_MAX_STATES);
}

static em_status hist_push(grammar_matcher *m) {
    if (!em_grow((void **)&m->he, &m->cap_he, m->n_he + 1, sizeof(gm_hist)) ||
        !em_grow((void **)&m->hn, &m->cap_hn, m->n_hn + m->n_cur + 1, sizeof(uint32_t)))
        return oom();
    if (m->n_cur) memcpy(m->hn + m->n_hn, m->cur, m->n_cur * sizeof(uint32_t));
    m->he[m->n_he++] = (gm_hist){m->n_hn, m->n_cur, m->accept, m->terminated};
    m->n_hn += m->n_cur;
    return EM_OK;
}

/* ---- masks ---- */

static em_status walk(gm_cache *c, int32_t s, uint32_t *mask, bool *full) {
    const grammar_vocab *v = c->v;
    memset(mask, 0, c->mask_words * sizeof(uint32_t));
    int32_t *ws = c->walk;
    ws[0] = s;
    *full = false;
    for (uint32_t i = 1; i < v->n_nodes;) {
        uint32_t d = v->node_depth[i];
        int32_t t;
        EM_TRY(trans(c, ws[d - 1], v->node_byte[i], &t));
        if (t == T_FULL) {
            *full = true;
            return EM_OK;
        }
        if (t < 0) {
            i = v->node_skip[i];
            continue;
        }
        ws[d] = t;
        for (uint32_t k = 0; k < v->node_ntok[i]; k++) {
            int32_t id = v->ids_sorted[v->node_tok[i] + k];
            mask[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
    if (c->states[s].accept)
        for (size_t k = 0; k < v->n_end; k++) mask[v->end_ids[k] >> 5] |= 1u << (v->end_ids[k] & 31);
    return EM_OK;
}

/* The cached mask of the matcher's state (valid until the next call). */
static em_status state_mask(grammar_matcher *m, const uint32_t **out) {
    gm_cache *c = m->c;
    if (!c->v) return em_fail(EM_ERR_INVALID, "grammar: this matcher has no vocabulary (text matching only)");
    if (m->terminated) { /* only an end id may follow an end id */
        *out = c->end_mask;
        return EM_OK;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t s;
        EM_TRY(cur_state(m, &s));
        if (c->states[s].mask_slot >= 0) {
            *out = c->masks + (size_t)c->states[s].mask_slot * c->mask_words;
            return EM_OK;
        }
        int slot = c->next_slot;
        c->next_slot = (c->next_slot + 1) % c->n_slots;
        if (c->slot_owner[slot] >= 0) c->states[c->slot_owner[slot]].mask_slot = -1;
        c->slot_owner[slot] = -1;
        uint32_t *mask = c->masks + (size_t)slot * c->mask_words;
        bool full;
        EM_TRY(walk(c, s, mask, &full));
        if (full) {
            flush_states(c);
            continue;
        }
        c->states[s].mask_slot = slot;
        c->slot_owner[slot] = s;
        *out = mask;
        return EM_OK;
    }
    return em_fail(EM_ERR_LIMIT, "grammar: more than %u automaton states for one token mask", GM_MAX_STATES);
}

/* ---- public ---- */

static void cache_unref(gm_cache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left) return;
    flush_states(c);
    pthread_mutex_destroy(&c->mu);
    free(c->npos);
    free(c->npar);
    free(c->nmark);
    free(c->ntab);
    free(c->snodes);
    free(c->states);
    free(c->stab);
    free(c->masks);
    free(c->end_mask);
    free(c->slot_owner);
    free(c->work);
    free(c->out);
    free(c->walk);
    free(c);
}

static em_status cache_new(const grammar *g, const grammar_vocab *v, gm_cache **out) {
    gm_cache *c = em_calloc(1, sizeof(gm_cache));
    if (!c) return oom();
    pthread_mutex_init(&c->mu, NULL);
    c->refs = 1;
    c->g = g;
    c->v = v;
    if (!v) { /* text matching only: no masks */
        *out = c;
        return EM_OK;
    }
    c->mask_words = ((size_t)v->n_vocab + 31) / 32;
    size_t slots = GM_MASK_BYTES / (c->mask_words * 4 + 1);
    c->n_slots = slots < 4 ? 4 : slots > 512 ? 512 : (int)slots;
    c->masks = em_mallocn((size_t)c->n_slots * c->mask_words, sizeof(uint32_t));
    c->slot_owner = em_mallocn((size_t)c->n_slots, sizeof(int32_t));
    c->walk = em_mallocn((size_t)v->max_depth + 2, sizeof(int32_t));
    c->end_mask = em_calloc(c->mask_words, sizeof(uint32_t));
    if (!c->masks || !c->slot_owner || !c->walk || !c->end_mask) {
        cache_unref(c);
        return oom();
    }
    for (int i = 0; i < c->n_slots; i++) c->slot_owner[i] = -1;
    for (size_t k = 0; k < v->n_end; k++) c->end_mask[v->end_ids[k] >> 5] |= 1u << (v->end_ids[k] & 31);
    *out = c;
    return EM_OK;
}

void grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    cache_unref(m->c);
    free(m->cur);
    free(m->hn);
    free(m->he);
    free(m);
}

em_status grammar_matcher_new(const grammar *g, const grammar_vocab *v, grammar_matcher **out) {
    *out = NULL;
    grammar_matcher *m = em_calloc(1, sizeof(grammar_matcher));
    if (!m) return oom();
    m->state = -1;
    em_status s = cache_new(g, v, &m->c);
    if (s == EM_OK) {
        gm_cache *c = m->c;
        new_epoch(c);
        uint32_t r = g->root;
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && s == EM_OK; a++)
            s = push_new(c, (int32_t)g->alt[a], -1);
        bool accept = false;
        if (s == EM_OK) s = closure(c, &accept);
        if (s == EM_OK) {
            if (c->n_out) qsort(c->out, c->n_out, sizeof(uint32_t), cmp_u32);
            s = set_cur(m, c->out, c->n_out, accept);
        }
    }
    if (s != EM_OK) {
        grammar_matcher_free(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

em_status grammar_matcher_clone(const grammar_matcher *src, grammar_matcher **out) {
    *out = NULL;
    grammar_matcher *m = em_calloc(1, sizeof(grammar_matcher));
    if (!m) return oom();
    *m = *src;
    m->cur = em_mallocn(src->n_cur + 1, sizeof(uint32_t));
    m->hn = em_mallocn(src->n_hn + 1, sizeof(uint32_t));
    m->he = em_mallocn(src->n_he + 1, sizeof(gm_hist));
    m->cap_cur = src->n_cur + 1;
    m->cap_hn = src->n_hn + 1;
    m->cap_he = src->n_he + 1;
    if (!m->cur || !m->hn || !m->he) {
        free(m->cur);
        free(m->hn);
        free(m->he);
        free(m);
        return oom();
    }
    if (src->n_cur) memcpy(m->cur, src->cur, src->n_cur * sizeof(uint32_t));
    if (src->n_hn) memcpy(m->hn, src->hn, src->n_hn * sizeof(uint32_t));
    if (src->n_he) memcpy(m->he, src->he, src->n_he * sizeof(gm_hist));
    pthread_mutex_lock(&src->c->mu);
    src->c->refs++;
    pthread_mutex_unlock(&src->c->mu);
    *out = m;
    return EM_OK;
}

static void mask_copy(const uint32_t *mask, size_t have_words, uint32_t *out, int n_vocab) {
    size_t words = ((size_t)n_vocab + 31) / 32;
    size_t n = words < have_words ? words : have_words;
    memcpy(out, mask, n * sizeof(uint32_t));
    if (words > n) memset(out + n, 0, (words - n) * sizeof(uint32_t));
    if (n_vocab & 31) out[words - 1] &= (1u << (n_vocab & 31)) - 1;
}

em_status grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask, int n_vocab) {
    if (n_vocab <= 0) return em_fail(EM_ERR_INVALID, "grammar mask: n_vocab must be positive");
    pthread_mutex_lock(&m->c->mu);
    const uint32_t *cm;
    em_status s = state_mask(m, &cm);
    if (s == EM_OK) mask_copy(cm, m->c->mask_words, mask, n_vocab);
    pthread_mutex_unlock(&m->c->mu);
    return s;
}

static void apply_mask(const uint32_t *mask, size_t words, float *logits, int n_vocab) {
    for (int i = 0; i < n_vocab; i += 32) {
        size_t w = (size_t)i >> 5;
        uint32_t bits = w < words ? mask[w] : 0;
        int end = i + 32 < n_vocab ? i + 32 : n_vocab;
        if (bits == 0xFFFFFFFFu) continue;
        for (int k = i; k < end; k++)
            if (!((bits >> (k - i)) & 1)) logits[k] = -INFINITY;
    }
}

em_status grammar_matcher_apply(grammar_matcher *m, float *logits, int n_vocab) {
    if (n_vocab <= 0) return em_fail(EM_ERR_INVALID, "grammar mask: n_vocab must be positive");
    pthread_mutex_lock(&m->c->mu);
    const uint32_t *cm;
    em_status s = state_mask(m, &cm);
    if (s == EM_OK) apply_mask(cm, m->c->mask_words, logits, n_vocab);
    pthread_mutex_unlock(&m->c->mu);
    return s;
}

static em_status accept_locked(grammar_matcher *m, int32_t token) {
    const grammar_vocab *v = m->c->v;
    if (!v) return em_fail(EM_ERR_INVALID, "grammar: this matcher has no vocabulary (text matching only)");
    if (m->terminated) return em_fail(EM_ERR_INVALID, "grammar: token %d after the end of the text", token);
    if (grammar_vocab_is_end(v, token)) {
        if (!m->accept) return em_fail(EM_ERR_INVALID, "grammar: end of text (token %d) before the grammar is complete", token);
        EM_TRY(hist_push(m));
        m->terminated = true;
        return EM_OK;
    }
    size_t len;
    const uint8_t *b = grammar_vocab_token(v, token, &len);
    if (!b) return em_fail(EM_ERR_INVALID, "grammar: token %d is special or has no text", token);
    EM_TRY(hist_push(m));
    bool ok;
    em_status s = advance_bytes(m, b, len, &ok);
    if (s == EM_OK && !ok) s = em_fail(EM_ERR_INVALID, "grammar: token %d is not allowed here", token);
    if (s != EM_OK) m->n_hn -= m->he[--m->n_he].n;
    return s;
}

em_status grammar_matcher_accept(grammar_matcher *m, int32_t token) {
    pthread_mutex_lock(&m->c->mu);
    em_status s = accept_locked(m, token);
    pthread_mutex_unlock(&m->c->mu);
    return s;
}

em_status grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes, size_t len) {
    pthread_mutex_lock(&m->c->mu);
    bool ok = false;
    em_status s = m->terminated ? em_fail(EM_ERR_INVALID, "grammar: text after the end") : EM_OK;
    if (s == EM_OK) s = advance_bytes(m, bytes, len, &ok);
    if (s == EM_OK && !ok) s = em_fail(EM_ERR_INVALID, "grammar: the text does not match the grammar");
    pthread_mutex_unlock(&m->c->mu);
    return s;
}

static em_status rollback_locked(grammar_matcher *m, size_t n) {
    if (n > m->n_he) return em_fail(EM_ERR_INVALID, "grammar: cannot roll back %zu tokens, only %zu accepted", n, m->n_he);
    if (!n) return EM_OK;
    const gm_hist *h = &m->he[m->n_he - n];
    EM_TRY(set_cur(m, m->hn + h->off, h->n, h->accept));
    m->terminated = h->terminated;
    m->n_hn = h->off;
    m->n_he -= n;
    m->state = -1;
    return EM_OK;
}

em_status grammar_matcher_rollback(grammar_matcher *m, size_t n) {
    pthread_mutex_lock(&m->c->mu);
    em_status s = rollback_locked(m, n);
    pthread_mutex_unlock(&m->c->mu);
    return s;
}

bool grammar_matcher_is_accepting(grammar_matcher *m) { return m->accept; }
bool grammar_matcher_is_terminated(const grammar_matcher *m) { return m->terminated; }
size_t grammar_matcher_n_tokens(const grammar_matcher *m) { return m->n_he; }

em_status grammar_matcher_process(grammar_matcher *m, float *logits, int n_vocab, const int32_t *history,
                                  size_t n_history) {
    pthread_mutex_lock(&m->c->mu);
    em_status s = EM_OK;
    if (!m->synced) {
        m->synced = true;
        m->n_synced = n_history;
    } else if (n_history < m->n_synced) {
        s = rollback_locked(m, m->n_synced - n_history);
        if (s == EM_OK) m->n_synced = n_history;
    }
    for (; s == EM_OK && m->n_synced < n_history; m->n_synced++) s = accept_locked(m, history[m->n_synced]);
    const uint32_t *cm;
    if (s == EM_OK) s = state_mask(m, &cm);
    if (s == EM_OK) apply_mask(cm, m->c->mask_words, logits, n_vocab);
    pthread_mutex_unlock(&m->c->mu);
    return s;
}
