/* grammar_internal.h — the pieces behind grammar.h: the expression tree the
 * front ends build, the byte-level rule table it is lowered to, and a small
 * text buffer the schema and regex translators write GBNF into. */
#ifndef EMBER_GRAMMAR_INTERNAL_H
#define EMBER_GRAMMAR_INTERNAL_H

#include "engine/grammar/grammar.h"

#include <stdarg.h>

/* Limits that keep hostile grammars bounded in time and memory. */
#define GR_MAX_TEXT (4u << 20)      /* bytes of GBNF / regex source */
#define GR_MAX_DEPTH 200            /* nesting of groups and subschemas */
#define GR_MAX_REPEAT 10000         /* m and n of {m,n} */
#define GR_MAX_ELEMENTS (4u << 20)  /* lowered elements */
#define GR_MAX_RULES (1u << 20)
#define GR_UNBOUNDED (-1)
#define GR_MAX_CP 0x10FFFF

/* ---- expression tree (arena-allocated, freed all at once) ---- */
typedef enum gx_kind { GX_EMPTY, GX_BYTES, GX_CLASS, GX_REF, GX_SEQ, GX_ALT, GX_REPEAT } gx_kind;

typedef struct gx {
    gx_kind kind;
    int ref;                 /* GX_REF: rule index */
    int min, max;            /* GX_REPEAT; max GR_UNBOUNDED */
    const uint8_t *bytes;    /* GX_BYTES */
    size_t len;
    const uint32_t *ranges;  /* GX_CLASS: sorted disjoint [lo,hi] pairs */
    size_t n_ranges;
    struct gx **kids;        /* GX_SEQ / GX_ALT, or the one repeated kid */
    size_t n_kids;
} gx;

typedef struct gx_arena gx_arena;
gx_arena *gx_arena_new(void);
void gx_arena_free(gx_arena *a);
void *gx_alloc(gx_arena *a, size_t n);
gx *gx_node(gx_arena *a, gx_kind k);

/* A parsed grammar: named rules with bodies, before lowering. */
typedef struct gx_rules {
    gx_arena *arena;
    char **names;
    gx **bodies;    /* NULL while only referenced */
    size_t n, cap;
} gx_rules;

/* Index of rule `name` (created on first use). -1 when out of memory. */
int gx_rule_id(gx_rules *r, const char *name, size_t len);
void gx_rules_free(gx_rules *r);

/* A repetition count (decimal, 0..GR_MAX_REPEAT) at s[*i] of n bytes:
 * true with *v set and *i past it; false, *i unmoved, where there is no
 * digit or the count is too large. */
bool gr_read_count(const char *s, size_t n, size_t *i, int *v);

/* Parses GBNF text into rules. */
em_status gbnf_parse(const char *text, size_t len, gx_rules *out);

/* Code point set helpers (ranges are [lo,hi] pairs). */
typedef struct cp_set {
    uint32_t *r;
    size_t n, cap; /* n pairs */
} cp_set;
bool cp_set_add(cp_set *s, uint32_t lo, uint32_t hi);
/* Sorts and merges; negate complements over [0, 0x10FFFF] minus surrogates. */
bool cp_set_normalize(cp_set *s, bool negate);
void cp_set_free(cp_set *s);

/* ---- lowered grammar ----
 * Elements: >= 0 a byte set index (a terminal), GR_END ends an alternative,
 * GR_REF(r) a rule reference. Rule r's alternatives start at
 * el[alt[rule_alt[r]] .. ] for alt indexes rule_alt[r] .. rule_alt[r+1]-1. */
#define GR_END (-1)
#define GR_REF(r) (-2 - (int32_t)(r))
#define GR_IS_REF(e) ((e) <= -2)
#define GR_REF_RULE(e) (-2 - (e))

struct grammar {
    int32_t *el;
    size_t n_el;
    uint32_t *alt;      /* start offset in el of each alternative */
    size_t n_alt;
    uint32_t *rule_alt; /* n_rules + 1 */
    size_t n_rules;
    uint8_t (*sets)[32]; /* byte sets */
    size_t n_sets;
    uint32_t root;
    char **rule_names;  /* for messages */
};

/* Lowers parsed rules (root named `root`) to bytes and checks them (undefined
 * rules, left recursion). Consumes nothing; *out owned by caller. */
em_status grammar_lower(const gx_rules *rules, const char *root, grammar **out);

static inline bool gr_set_has(const grammar *g, int32_t set, uint8_t b) {
    return (g->sets[set][b >> 3] >> (b & 7)) & 1;
}

/* ---- text buffer ---- */
typedef struct gbuf {
    char *s;
    size_t len, cap;
    bool oom;
} gbuf;
void gb_put(gbuf *b, const char *s, size_t n);
void gb_puts(gbuf *b, const char *s);
void gb_printf(gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A GBNF string literal for the bytes (quoted, escaped). */
void gb_literal(gbuf *b, const char *s, size_t n);
/* One code point as a GBNF class member escape (\xHH / \uHHHH / \UHHHHHHHH). */
void gb_class_cp(gbuf *b, uint32_t cp);
/* A GBNF class "[...]" of the set (normalized). */
void gb_class(gbuf *b, const cp_set *s);
void gb_free(gbuf *b);

/* Regex → a GBNF expression (no rule names; groups inline). json_string:
 * the text is the inside of a JSON string, so characters that JSON must
 * escape are produced escaped. */
em_status regex_to_gbnf_expr(const char *re, size_t len, bool json_string, gbuf *out);



/* JSON Schema pieces shared with the tool-call grammars: the rules of a
 * schema (rule names start with prefix, its value rule is `root`) and the
 * base JSON rules (j-ws, j-value, j-string, ...) they reference. */
em_status json_schema_rules(json_t *schema, const char *prefix, const char *root, gbuf *out);
void json_schema_base(gbuf *out);
#endif
