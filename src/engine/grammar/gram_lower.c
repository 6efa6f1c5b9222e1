/* gram_lower.c — expression trees → the byte-level rule table the matcher
 * runs on. Character classes become alternatives of UTF-8 byte-range
 * sequences, repetitions become right-recursive rules (so the matcher's
 * stack stays flat), alternations inside a sequence become rules of their
 * own. The result is checked: every referenced rule is defined and no rule
 * can reach itself on the left with the stack growing (left recursion). */
#include "engine/grammar/grammar_internal.h"

#include "base/alloc.h"
#include "base/hash.h"

#include <stdlib.h>
#include <string.h>

typedef struct lrule {
    int32_t *el; /* alternatives, each ended by GR_END */
    size_t n, cap;
    int name_of; /* index of the named rule it came from */
} lrule;

typedef struct lower {
    const gx_rules *src;
    lrule *rules;
    size_t n_rules, cap_rules;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    int32_t *set_tab; /* open addressing: set index + 1, 0 empty */
    size_t tab_cap;
    size_t total_el;
    int depth;
} lower;

static em_status oom(void) { return em_fail(EM_ERR_NOMEM, "grammar: out of memory"); }

static em_status new_rule(lower *L, int name_of, int *out) {
    if (L->n_rules >= GR_MAX_RULES) return em_fail(EM_ERR_LIMIT, "grammar: more than %u rules", GR_MAX_RULES);
    if (!em_grow((void **)&L->rules, &L->cap_rules, L->n_rules + 1, sizeof(lrule))) return oom();
    memset(&L->rules[L->n_rules], 0, sizeof(lrule));
    L->rules[L->n_rules].name_of = name_of;
    *out = (int)L->n_rules++;
    return EM_OK;
}

static em_status emit(lower *L, int r, int32_t e) {
    if (++L->total_el > GR_MAX_ELEMENTS)
        return em_fail(EM_ERR_LIMIT, "grammar: more than %u elements after expansion", GR_MAX_ELEMENTS);
    lrule *R = &L->rules[r];
    if (!em_grow((void **)&R->el, &R->cap, R->n + 1, sizeof(int32_t))) return oom();
    R->el[R->n++] = e;
    return EM_OK;
}

static em_status set_id(lower *L, const uint8_t set[32], int32_t *out) {
    if (L->n_sets * 2 >= L->tab_cap) {
        size_t cap = L->tab_cap ? L->tab_cap * 2 : 256;
        int32_t *t = em_calloc(cap, sizeof(int32_t));
        if (!t) return oom();
        for (size_t i = 0; i < L->n_sets; i++) {
            size_t h = em_hash_finish(em_hash_bytes(EM_HASH_SEED, L->sets[i], 32)) & (cap - 1);
            while (t[h]) h = (h + 1) & (cap - 1);
            t[h] = (int32_t)i + 1;
        }
        free(L->set_tab);
        L->set_tab = t;
        L->tab_cap = cap;
    }
    size_t h = em_hash_finish(em_hash_bytes(EM_HASH_SEED, set, 32)) & (L->tab_cap - 1);
    while (L->set_tab[h]) {
        if (memcmp(L->sets[L->set_tab[h] - 1], set, 32) == 0) {
            *out = L->set_tab[h] - 1;
            return EM_OK;
        }
        h = (h + 1) & (L->tab_cap - 1);
    }
    if (!em_grow((void **)&L->sets, &L->cap_sets, L->n_sets + 1, 32)) return oom();
    memcpy(L->sets[L->n_sets], set, 32);
    L->set_tab[h] = (int32_t)L->n_sets + 1;
    *out = (int32_t)L->n_sets++;
    return EM_OK;
}

static em_status emit_range(lower *L, int r, uint8_t lo, uint8_t hi) {
    uint8_t set[32] = {0};
    for (unsigned b = lo; b <= hi; b++) set[b >> 3] |= (uint8_t)(1u << (b & 7));
    int32_t id;
    EM_TRY(set_id(L, set, &id));
    return emit(L, r, id);
}

/* ---- code point ranges → UTF-8 byte-range sequences ---- */

static int enc_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

static void enc(uint32_t cp, uint8_t *b) {
    switch (enc_len(cp)) {
    case 1: b[0] = (uint8_t)cp; break;
    case 2: b[0] = (uint8_t)(0xC0 | cp >> 6); b[1] = (uint8_t)(0x80 | (cp & 0x3F)); break;
    case 3:
        b[0] = (uint8_t)(0xE0 | cp >> 12); b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        break;
    default:
        b[0] = (uint8_t)(0xF0 | cp >> 18); b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (uint8_t)(0x80 | (cp & 0x3F));
    }
}

/* One alternative per sequence, in rule r; [lo,hi] within one encoded length. */
static em_status utf8_seq(lower *L, int r, uint32_t lo, uint32_t hi) {
    int n = enc_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                EM_TRY(utf8_seq(L, r, lo, lo | m));
                return utf8_seq(L, r, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                EM_TRY(utf8_seq(L, r, lo, (hi & ~m) - 1));
                return utf8_seq(L, r, hi & ~m, hi);
            }
        }
    }
    uint8_t a[4], b[4];
    enc(lo, a);
    enc(hi, b);
    for (int i = 0; i < n; i++) EM_TRY(emit_range(L, r, a[i], b[i]));
    return emit(L, r, GR_END);
}

static em_status lower_class(lower *L, const gx *x, int r, int name_of) {
    uint8_t ascii[32] = {0};
    bool multi = false;
    for (size_t i = 0; i < x->n_ranges; i++) {
        uint32_t lo = x->ranges[2 * i], hi = x->ranges[2 * i + 1];
        for (uint32_t c = lo; c <= hi && c < 0x80; c++) ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
        if (hi >= 0x80) multi = true;
    }
    int32_t sid;
    EM_TRY(set_id(L, ascii, &sid));
    if (!multi) return emit(L, r, sid);
    int cr;
    EM_TRY(new_rule(L, name_of, &cr));
    bool any_ascii = false;
    for (int k = 0; k < 32; k++) any_ascii |= ascii[k] != 0;
    if (any_ascii) {
        EM_TRY(emit(L, cr, sid));
        EM_TRY(emit(L, cr, GR_END));
    }
    static const uint32_t bounds[4][2] = {{0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}, {0, 0}};
    for (size_t i = 0; i < x->n_ranges; i++) {
        for (int b = 0; b < 3; b++) {
            uint32_t lo = x->ranges[2 * i] > bounds[b][0] ? x->ranges[2 * i] : bounds[b][0];
            uint32_t hi = x->ranges[2 * i + 1] < bounds[b][1] ? x->ranges[2 * i + 1] : bounds[b][1];
            if (lo <= hi) EM_TRY(utf8_seq(L, cr, lo, hi));
        }
    }
    return emit(L, r, GR_REF(cr));
}

static em_status lower_node(lower *L, const gx *x, int r, int name_of);

static bool simple_unit(const gx *x) {
    if (x->kind == GX_REF) return true;
    if (x->kind == GX_BYTES) return x->len == 1;
    if (x->kind == GX_CLASS) return x->n_ranges == 0 || x->ranges[2 * x->n_ranges - 1] < 0x80;
    return false;
}

/* A repeatable unit: simple nodes inline, anything else as a rule. */
static em_status unit_of(lower *L, const gx *x, int name_of, int32_t *ref) {
    int ur;
    EM_TRY(new_rule(L, name_of, &ur));
    EM_TRY(lower_node(L, x, ur, name_of));
    EM_TRY(emit(L, ur, GR_END));
    *ref = GR_REF(ur);
    return EM_OK;
}

static em_status emit_unit(lower *L, const gx *x, int32_t ref, int r, int name_of) {
    return ref ? emit(L, r, ref) : lower_node(L, x, r, name_of);
}

static em_status lower_repeat(lower *L, const gx *x, int r, int name_of) {
    const gx *k = x->kids[0];
    int32_t ref = 0;
    if (!simple_unit(k) && (x->min > 1 || x->max != x->min)) EM_TRY(unit_of(L, k, name_of, &ref));
    for (int i = 0; i < x->min; i++) EM_TRY(emit_unit(L, k, ref, r, name_of));
    if (x->max == GR_UNBOUNDED) { /* star ::= unit star | ε */
        int sr;
        EM_TRY(new_rule(L, name_of, &sr));
        EM_TRY(emit_unit(L, k, ref, sr, name_of));
        EM_TRY(emit(L, sr, GR_REF(sr)));
        EM_TRY(emit(L, sr, GR_END));
        EM_TRY(emit(L, sr, GR_END));
        return emit(L, r, GR_REF(sr));
    }
    int prev = -1; /* opt_j ::= unit opt_{j-1} | ε */
    for (int j = x->min; j < x->max; j++) {
        int o;
        EM_TRY(new_rule(L, name_of, &o));
        EM_TRY(emit_unit(L, k, ref, o, name_of));
        if (prev >= 0) EM_TRY(emit(L, o, GR_REF(prev)));
        EM_TRY(emit(L, o, GR_END));
        EM_TRY(emit(L, o, GR_END));
        prev = o;
    }
    return prev >= 0 ? emit(L, r, GR_REF(prev)) : EM_OK;
}

static em_status lower_node(lower *L, const gx *x, int r, int name_of) {
    if (++L->depth > 4 * GR_MAX_DEPTH) return em_fail(EM_ERR_LIMIT, "grammar: expressions nested too deeply");
    em_status s = EM_OK;
    switch (x->kind) {
    case GX_EMPTY: break;
    case GX_BYTES:
        for (size_t i = 0; i < x->len && s == EM_OK; i++) s = emit_range(L, r, x->bytes[i], x->bytes[i]);
        break;
    case GX_CLASS: s = lower_class(L, x, r, name_of); break;
    case GX_REF: s = emit(L, r, GR_REF(x->ref)); break;
    case GX_SEQ:
        for (size_t i = 0; i < x->n_kids && s == EM_OK; i++) s = lower_node(L, x->kids[i], r, name_of);
        break;
    case GX_ALT: {
        int ar;
        s = new_rule(L, name_of, &ar);
        for (size_t i = 0; i < x->n_kids && s == EM_OK; i++) {
            s = lower_node(L, x->kids[i], ar, name_of);
            if (s == EM_OK) s = emit(L, ar, GR_END);
        }
        if (s == EM_OK) s = emit(L, r, GR_REF(ar));
        break;
    }
    case GX_REPEAT: s = lower_repeat(L, x, r, name_of); break;
    }
    L->depth--;
    return s;
}

/* ---- checks ---- */

static void compute_nullable(const grammar *g, bool *nullable) {
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !nullable[r]; a++) {
                const int32_t *e = g->el + g->alt[a];
                while (*e != GR_END && GR_IS_REF(*e) && nullable[GR_REF_RULE(*e)]) e++;
                if (*e == GR_END) nullable[r] = changed = true;
            }
        }
    }
}

typedef struct ledge {
    uint32_t to;
    bool tail;
} ledge;

/* Left-reach edges: r → s when s can be the first thing r matches. A cycle
 * through an edge that is not a tail call grows the stack without bound. */
static em_status check_left_recursion(const grammar *g) {
    size_t R = g->n_rules;
    bool *nullable = em_calloc(R, 1);
    uint32_t *eoff = em_calloc(R + 1, sizeof(uint32_t));
    ledge *edges = NULL;
    size_t ne = 0, cap = 0;
    int32_t *index = em_mallocn(R, sizeof(int32_t)), *low = em_mallocn(R, sizeof(int32_t));
    int32_t *comp = em_mallocn(R, sizeof(int32_t));
    uint32_t *stk = em_mallocn(R, sizeof(uint32_t)), *cs = em_mallocn(R, sizeof(uint32_t));
    uint32_t *ci = em_mallocn(R, sizeof(uint32_t));
    bool *on = em_calloc(R, 1);
    em_status s = EM_OK;
    if (!nullable || !eoff || !index || !low || !comp || !stk || !cs || !ci || !on) s = oom();
    if (s == EM_OK) compute_nullable(g, nullable);
    for (size_t r = 0; r < R && s == EM_OK; r++) {
        eoff[r] = (uint32_t)ne;
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && s == EM_OK; a++) {
            for (const int32_t *e = g->el + g->alt[a]; GR_IS_REF(*e); e++) {
                if (!em_grow((void **)&edges, &cap, ne + 1, sizeof(ledge))) {
                    s = oom();
                    break;
                }
                edges[ne++] = (ledge){(uint32_t)GR_REF_RULE(*e), e[1] == GR_END};
                if (!nullable[GR_REF_RULE(*e)]) break;
            }
        }
    }
    eoff[R] = (uint32_t)ne;
    /* Tarjan's strongly connected components, iteratively. */
    int32_t counter = 0, ncomp = 0;
    size_t sp = 0, csp = 0;
    if (s == EM_OK)
        for (size_t r = 0; r < R; r++) index[r] = -1;
    for (size_t root = 0; root < R && s == EM_OK; root++) {
        if (index[root] >= 0) continue;
        cs[csp] = (uint32_t)root;
        ci[csp++] = eoff[root];
        index[root] = low[root] = counter++;
        stk[sp++] = (uint32_t)root;
        on[root] = true;
        while (csp) {
            uint32_t v = cs[csp - 1];
            if (ci[csp - 1] < eoff[v + 1]) {
                uint32_t w = edges[ci[csp - 1]++].to;
                if (index[w] < 0) {
                    index[w] = low[w] = counter++;
                    stk[sp++] = w;
                    on[w] = true;
                    cs[csp] = w;
                    ci[csp++] = eoff[w];
                } else if (on[w] && index[w] < low[v]) low[v] = index[w];
                continue;
            }
            if (low[v] == index[v]) {
                uint32_t w;
                do {
                    w = stk[--sp];
                    on[w] = false;
                    comp[w] = ncomp;
                } while (w != v);
                ncomp++;
            }
            csp--;
            if (csp && low[v] < low[cs[csp - 1]]) low[cs[csp - 1]] = low[v];
        }
    }
    for (size_t r = 0; r < R && s == EM_OK; r++)
        for (uint32_t k = eoff[r]; k < eoff[r + 1]; k++)
            if (!edges[k].tail && comp[edges[k].to] == comp[r]) {
                s = em_fail(EM_ERR_FORMAT, "grammar: rule '%s' is left-recursive (it can reach itself before "
                            "matching any character)", g->rule_names[r]);
                break;
            }
    free(nullable);
    free(eoff);
    free(edges);
    free(index);
    free(low);
    free(comp);
    free(stk);
    free(cs);
    free(ci);
    free(on);
    return s;
}

/* ---- assembly ---- */

static em_status flatten(lower *L, grammar *g) {
    size_t n_el = 0, n_alt = 0;
    for (size_t r = 0; r < L->n_rules; r++) {
        n_el += L->rules[r].n;
        for (size_t i = 0; i < L->rules[r].n; i++) n_alt += L->rules[r].el[i] == GR_END;
    }
    g->el = em_mallocn(n_el + 1, sizeof(int32_t));
    g->alt = em_mallocn(n_alt + 1, sizeof(uint32_t));
    g->rule_alt = em_mallocn(L->n_rules + 1, sizeof(uint32_t));
    g->rule_names = em_calloc(L->n_rules + 1, sizeof(char *));
    if (!g->el || !g->alt || !g->rule_alt || !g->rule_names) return oom();
    g->n_rules = L->n_rules;
    size_t e = 0, a = 0;
    for (size_t r = 0; r < L->n_rules; r++) {
        g->rule_alt[r] = (uint32_t)a;
        const lrule *R = &L->rules[r];
        for (size_t i = 0; i < R->n; i++) {
            if (i == 0 || R->el[i - 1] == GR_END) g->alt[a++] = (uint32_t)e;
            g->el[e++] = R->el[i];
        }
        const char *nm = L->src->names[R->name_of];
        if (!(g->rule_names[r] = em_strdup(nm))) return oom();
    }
    g->rule_alt[L->n_rules] = (uint32_t)a;
    g->el[e] = GR_END;
    g->n_el = e;
    g->n_alt = a;
    g->n_rules = L->n_rules;
    g->sets = L->sets;
    g->n_sets = L->n_sets;
    L->sets = NULL;
    return EM_OK;
}

em_status grammar_lower(const gx_rules *src, const char *root, grammar **out) {
    *out = NULL;
    lower L = {.src = src};
    grammar *g = em_calloc(1, sizeof(grammar));
    em_status s = g ? EM_OK : oom();
    int root_id = -1;
    for (size_t i = 0; i < src->n; i++)
        if (!strcmp(src->names[i], root)) root_id = (int)i;
    if (s == EM_OK && root_id < 0) s = em_fail(EM_ERR_FORMAT, "grammar: no rule named '%s' (the start rule)", root);
    for (size_t i = 0; i < src->n && s == EM_OK; i++) {
        int r;
        s = new_rule(&L, (int)i, &r);
    }
    for (size_t i = 0; i < src->n && s == EM_OK; i++) {
        if (!src->bodies[i]) {
            s = em_fail(EM_ERR_FORMAT, "grammar: rule '%s' is used but not defined", src->names[i]);
            break;
        }
        s = lower_node(&L, src->bodies[i], (int)i, (int)i);
        if (s == EM_OK) s = emit(&L, (int)i, GR_END);
    }
    if (s == EM_OK) s = flatten(&L, g);
    if (s == EM_OK) {
        g->root = (uint32_t)root_id;
        s = check_left_recursion(g);
    }
    for (size_t r = 0; r < L.n_rules; r++) free(L.rules[r].el);
    free(L.rules);
    free(L.sets);
    free(L.set_tab);
    if (s != EM_OK) {
        grammar_free(g);
        return s;
    }
    *out = g;
    return EM_OK;
}

void grammar_free(grammar *g) {
    if (!g) return;
    if (g->rule_names)
        for (size_t r = 0; r < g->n_rules; r++) free(g->rule_names[r]);
    free(g->rule_names);
    free(g->el);
    free(g->alt);
    free(g->rule_alt);
    free(g->sets);
    free(g);
}

size_t grammar_rule_count(const grammar *g) { return g->n_rules; }

em_status grammar_compile_gbnf(const char *text, size_t len, const char *root, grammar **out) {
    *out = NULL;
    gx_rules rules;
    EM_TRY(gbnf_parse(text, len, &rules));
    em_status s = grammar_lower(&rules, root ? root : "root", out);
    gx_rules_free(&rules);
    return s;
}
