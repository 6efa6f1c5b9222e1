/* tok_internal.h — the tokenizer's internal structures, shared by the files
 * of src/tokenizer/ only.
 *
 * The pipeline mirrors the reference library: added tokens are split out of
 * the raw text, the remaining segments are normalized (then split again on
 * normalized added tokens), pre-tokenized into pieces, each piece goes
 * through the BPE model, and the post-processor adds BOS/EOS. Decoding maps
 * ids to pieces and runs the decoder chain.
 *
 * Everything hanging off `struct tokenizer` is immutable after loading
 * except the BPE cache, which has its own locks. */
#ifndef EMBER_TOK_INTERNAL_H
#define EMBER_TOK_INTERNAL_H

#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Most ids a tokenizer may declare; keeps id arithmetic far from overflow. */
#define TOK_MAX_ID (1 << 24)

/* ---- growable byte buffer and lists of string spans (tok_util.c) ---- */

typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

/* Room for `extra` more bytes and the terminating NUL; false on overflow or
 * out of memory. */
bool tok_buf_reserve(tok_buf *b, size_t extra);
bool tok_buf_put(tok_buf *b, const void *s, size_t n);
bool tok_buf_putc(tok_buf *b, char c);
void tok_buf_free(tok_buf *b);

/* A list of strings stored back to back in one arena: span i is
 * arena.p[off[i] .. off[i]+len[i]). at_start marks the piece that begins
 * the input text (Metaspace prepend_scheme "first" needs it). */
typedef struct tok_span {
    size_t off, len;
    bool at_start;
} tok_span;

typedef struct tok_list {
    tok_buf arena;
    tok_span *v;
    size_t n, cap;
} tok_list;

bool tok_list_push(tok_list *l, const char *s, size_t n, bool at_start);
/* Adds a span already stored in l->arena. */
bool tok_list_push_span(tok_list *l, size_t off, size_t n, bool at_start);
void tok_list_clear(tok_list *l);
void tok_list_free(tok_list *l);

/* Appends s to out the way Rust's String::from_utf8_lossy does: each
 * maximal invalid subpart becomes U+FFFD. */
bool tok_utf8_lossy(tok_buf *out, const char *s, size_t n);
/* Length of the UTF-8 character starting at s (1 for invalid bytes). */
size_t tok_utf8_len(const char *s, size_t n);
/* Decodes the (valid) character at s; returns its length. */
size_t tok_utf8_cp(const char *s, size_t n, uint32_t *cp);
/* Unicode predicates as Rust's char methods define them. */
bool tok_is_whitespace(uint32_t cp);
bool tok_is_alphanumeric(uint32_t cp);
bool tok_is_numeric(uint32_t cp);
bool tok_is_punctuation(uint32_t cp);

/* ---- hash maps (tok_map.c) ---- */

/* String → int32 map; keys are not copied and must outlive the map. */
typedef struct tok_strmap_slot {
    const char *key;
    uint32_t len;
    int32_t val;
    uint64_t hash;
} tok_strmap_slot;

typedef struct tok_strmap {
    tok_strmap_slot *slots;
    size_t mask, n;
} tok_strmap;

bool tok_strmap_init(tok_strmap *m, size_t expected);
/* Inserts or overwrites. False on allocation failure. */
bool tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val);
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len); /* -1 absent */
void tok_strmap_free(tok_strmap *m);

/* u64 → u64 map (key UINT64_MAX reserved). */
typedef struct tok_u64map {
    uint64_t *keys, *vals;
    size_t mask, n;
} tok_u64map;

bool tok_u64map_init(tok_u64map *m, size_t expected);
bool tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val);
bool tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val);
void tok_u64map_free(tok_u64map *m);

/* ---- patterns: a literal string or a PCRE2 regex (tok_pattern.c) ---- */

typedef struct tok_pattern {
    bool is_regex;
    char *str; /* literal (owned), or the regex source */
    size_t len;
    pcre2_code *re;
    bool jit; /* re is JIT-compiled: matched with pcre2_jit_match */
    int fast; /* tok_split_fast_kind of the source: 0, or matched by hand where ASCII */
} tok_pattern;
/* tok_split_fast.c: the GPT-4-style split pattern of Llama 3 (kind 3: up
 * to three digits a piece) and Qwen (kind 1), by hand. kind: which of them
 * the regex source is, else 0. tok_split_fast: the end of the match at i
 * (i < n; every position starts one), or -1 when a byte that decides it is
 * not ASCII (ask the regex). */
int tok_split_fast_kind(const char *src, size_t len);
long tok_split_fast(int kind, const char *s, size_t n, size_t i);

/* Loads {"String": s} or {"Regex": r} at JSON path `path`. */
em_status tok_pattern_load(json_t *j, const char *path, tok_pattern *p);
/* Loads a bare regex source (compiled with UTF + Unicode properties + JIT). */
em_status tok_pattern_regex(const char *src, size_t len, const char *path, tok_pattern *p);
void tok_pattern_free(tok_pattern *p);

/* Matches of a pattern inside s[0..n), non-overlapping, left to right.
 * The callback gets each [start, end); returning false stops with an
 * allocation error. */
typedef bool (*tok_match_fn)(void *ctx, size_t start, size_t end);
em_status tok_pattern_each(const tok_pattern *p, const char *s, size_t n, tok_match_fn fn, void *ctx);
/* Appends s with every match replaced by `with` to out. */
em_status tok_pattern_replace(const tok_pattern *p, const char *s, size_t n, const char *with,
                              size_t with_len, tok_buf *out);

/* ---- normalizers (normalizer.c) ---- */

typedef struct tok_norm tok_norm;
/* j may be JSON null (*out = NULL: identity). */
em_status tok_norm_load(json_t *j, const char *path, tok_norm **out);
void tok_norm_free(tok_norm *n);
/* Replaces in[0..n) by its normalized form appended to out. */
em_status tok_norm_apply(const tok_norm *nz, const char *in, size_t n, tok_buf *out);

/* ---- pre-tokenizers (pretokenizer.c) ---- */

typedef struct tok_pretok tok_pretok;
em_status tok_pretok_load(json_t *j, const char *path, tok_pretok **out);
void tok_pretok_free(tok_pretok *p);
/* Splits every span of *l into pieces; *l is replaced (tmp is scratch). */
em_status tok_pretok_apply(const tok_pretok *p, tok_list *l, tok_list *tmp);
typedef struct tok_bytelevel tok_bytelevel;
/* The byte mapping of a pre-tokenizer that is a Split (isolated, not
 * inverted) then a ByteLevel that only maps bytes (no regex, no prefix
 * space) — the GPT-4-style tokenizers (Llama 3, Qwen): its pieces are the
 * Split's, each byte-mapped. NULL for any other pre-tokenizer. */
const tok_bytelevel *tok_pretok_fused(const tok_pretok *p);
/* For such a pre-tokenizer: fn(ctx, piece, len) for every non-empty piece
 * of t[0..n) in order, before byte mapping; stops at fn's first error and
 * returns it. */
typedef em_status (*tok_piece_fn)(void *ctx, const char *piece, size_t len);
em_status tok_pretok_each_raw(const tok_pretok *p, const char *t, size_t n, tok_piece_fn fn, void *ctx);

/* GPT-2 byte ↔ unicode mapping (bytelevel.c). */
struct tok_bytelevel {
    char enc[256][4];      /* UTF-8 of the char standing for each byte */
    uint8_t enc_len[256];
};
/* Code point standing for byte b. */
uint32_t tok_bytelevel_cp(uint8_t b);
/* Byte that the code point stands for, or -1. */
int tok_bytelevel_byte(uint32_t cp);
/* Fills the byte → UTF-8 table. */
void tok_bytelevel_fill(tok_bytelevel *t);
/* Writes the stand-in chars of s[0..n) to dst (room for 2n bytes); returns
 * the bytes written. */
size_t tok_bytelevel_map(const tok_bytelevel *t, const unsigned char *s, size_t n, char *dst);

/* ---- the BPE model (bpe.c) ---- */

typedef struct tok_cache tok_cache;

typedef struct tok_bpe {
    tok_strmap vocab;    /* model vocabulary: piece → id */
    tok_u64map merges;   /* (left id << 32 | right id) → (rank << 32 | merged id) */
    int32_t unk_id;      /* -1 when no unk_token */
    bool byte_fallback, fuse_unk, ignore_merges;
    char *cont_prefix;   /* continuing_subword_prefix, NULL when unset/empty */
    char *eow_suffix;    /* end_of_word_suffix, NULL when unset/empty */
    int32_t byte_ids[256]; /* ids of "<0xXX>" pieces (byte_fallback), -1 absent */
    tok_cache *cache;
} tok_bpe;

/* Appends the ids of one pre-tokenized piece to *ids. */
em_status tok_bpe_encode(const tok_bpe *m, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                         size_t *cap);

/* ---- the BPE cache (tok_cache.c) ---- */

tok_cache *tok_cache_new(void);
void tok_cache_free(tok_cache *c);
/* Copies the ids of a cached piece onto *ids; false when absent. */
bool tok_cache_get(tok_cache *c, const char *s, size_t n, int32_t **ids, size_t *n_ids, size_t *cap,
                   bool *oom);
void tok_cache_put(tok_cache *c, const char *s, size_t n, const int32_t *ids, size_t n_ids);

/* ---- added tokens (added_tokens.c) ---- */

typedef struct tok_added_token {
    char *content;
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} tok_added_token;

typedef struct tok_trie tok_trie;

typedef struct tok_added {
    tok_added_token *v;
    size_t n;
    tok_trie *raw;  /* tokens matched on the raw text (normalized=false) */
    tok_trie *norm; /* tokens matched on the normalized text */
} tok_added;

em_status tok_added_load(json_t *j, const char *path, const tok_norm *nz, tok_added *a);
void tok_added_free(tok_added *a);

/* One piece of the split text: an added token (id >= 0) or text [off, off+len). */
typedef struct tok_seg {
    size_t off, len;
    int32_t id;
} tok_seg;

/* Splits s[0..n) on the tokens of trie (may be NULL) the way the reference
 * does (leftmost-longest, with lstrip/rstrip/single_word). *segs malloc'd,
 * owned by the caller. */
em_status tok_added_split(const tok_added *a, const tok_trie *trie, const char *s, size_t n,
                          tok_seg **segs, size_t *n_segs);

/* ---- post-processor (postprocess.c) ---- */

typedef struct tok_post tok_post;
em_status tok_post_load(json_t *j, const char *path, const tokenizer *t, tok_post **out);
void tok_post_free(tok_post *p);
/* Replaces *ids with the processed sequence for add_special. */
em_status tok_post_apply(const tok_post *p, int32_t **ids, size_t *n, size_t *cap);

/* ---- decoders (decoder.c) ---- */

typedef struct tok_dec tok_dec;
em_status tok_dec_load(json_t *j, const char *path, tok_dec **out);
void tok_dec_free(tok_dec *d);
/* True when the chain contains a ByteFallback step. */
bool tok_dec_has_byte_fallback(const tok_dec *d);
/* True when the chain only changes characters token by token (no step that
 * needs to see the end of the text), so streaming can emit early. */
bool tok_dec_streamable(const tok_dec *d);
/* Decodes ids into out (appended, not NUL-terminated). `first` says the
 * list starts the text (Metaspace and Strip treat the start specially). */
em_status tok_decode_into(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, bool first,
                          tok_buf *out);
/* Runs the chain (d may be NULL) over pieces (consumed as scratch) and
 * appends the joined text to out. */
em_status tok_dec_run(const tok_dec *d, tok_list *pieces, bool first, tok_buf *out);
/* True when piece is "<0xXX>" (a byte-fallback token). */
bool tok_piece_is_byte(const char *s, size_t n);

/* ---- the tokenizer ---- */

struct tokenizer {
    char *name;
    tok_bpe bpe;
    const char **pieces;  /* id → token text: the added token's, else the model's */
    char **model_pieces;  /* id → model vocabulary string (owned; keys of bpe.vocab) */
    uint32_t *piece_len;
    int32_t n_ids;        /* 1 + largest id */
    bool *special;        /* per id: an added token marked special */
    bool *added;          /* per id: an added token */
    tok_strmap added_map; /* added token content → id */
    tok_added added_tokens;
    tok_norm *normalizer;
    tok_pretok *pretok;
    const tok_bytelevel *fused_bl; /* tok_pretok_fused(pretok): pieces encoded by encode_raw */
    tok_cache *raw_cache;          /* with it: raw piece → ids */
    tok_post *post;
    tok_dec *decoder;
    /* tokenizer_config.json */
    char *bos_token, *eos_token, *pad_token, *chat_template;
    int32_t bos_id, eos_id;
    int add_bos, add_eos; /* -1 unset, else 0/1 */
};

/* Length-aware lookup across added tokens and the model vocabulary. */
int32_t tok_lookup(const tokenizer *t, const char *s, size_t n);

#endif
