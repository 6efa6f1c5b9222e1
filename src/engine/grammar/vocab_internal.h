/* vocab_internal.h — the grammar vocabulary: every token's bytes and a
 * preorder trie over them, shared read-only by all matchers of a model. */
#ifndef EMBER_GRAMMAR_VOCAB_INTERNAL_H
#define EMBER_GRAMMAR_VOCAB_INTERNAL_H

#include "engine/grammar/grammar.h"

typedef struct tb_ref {
    int32_t id; /* a token decoding to plain "a", or -1 */
    char text[4];
    size_t len;
} tb_ref;

em_status vocab_ref_init(const tokenizer *t, tb_ref *ref);
/* The bytes token id adds to decoded text; *out malloc'd (may be NULL when
 * *len is 0), owned by caller. */
em_status vocab_token_text(const tokenizer *t, int32_t id, const tb_ref *ref, uint8_t **out, size_t *len);

struct grammar_vocab {
    int n_vocab;        /* logits count */
    int n_tok;          /* ids with bytes: [0, n_tok) */
    uint32_t *tok_off;  /* n_tok + 1 offsets into bytes */
    uint8_t *bytes;
    uint8_t *usable;    /* per id < n_tok: in the trie */
    int32_t *end_ids;
    size_t n_end;
    /* trie, preorder; node 0 is the root (no byte) */
    uint32_t n_nodes;
    uint8_t *node_byte;
    uint16_t *node_depth;
    uint32_t *node_skip;    /* first node after the subtree */
    uint32_t *node_tok;     /* first index in ids_sorted of tokens ending here */
    uint32_t *node_ntok;
    int32_t *ids_sorted;
    uint32_t max_depth;
};

#endif
