/* grammar.h — grammar-constrained decoding.
 *
 * A grammar (compiled from GBNF text, a regex, a JSON Schema, generic JSON
 * or a forced tool call) is a set of rules over bytes. It is immutable and
 * may be shared by any number of matchers and threads.
 *
 * A grammar_vocab holds the bytes every token of a tokenizer contributes to
 * the text, arranged in a trie; build it once per model and share it.
 *
 * A grammar_matcher is the state of one sequence: which tokens may come
 * next (a bitmask, or logits set to -inf), advancing on the sampled token,
 * rolling back for speculative decoding, cloning for n > 1. Special tokens
 * are never allowed, except the end ids (EOS) and only where the grammar
 * accepts: after an end id nothing else is allowed.
 *
 * Errors: grammars, schemas and regexes that ember cannot honour exactly
 * fail with EM_ERR_FORMAT (malformed) or EM_ERR_UNSUPPORTED (a keyword or
 * construct ember does not enforce, named in the message); size limits are
 * EM_ERR_LIMIT. Nothing is silently ignored. */
#ifndef EMBER_GRAMMAR_H
#define EMBER_GRAMMAR_H

#include "base/status.h"
#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct grammar grammar;
typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_matcher grammar_matcher;

/* ---- compiling -------------------------------------------------------- */

/* GBNF text (llama.cpp style): `name ::= alternatives`, "literals", [classes],
 * [^negated], ., (groups), * + ? {m} {m,} {m,n}, # comments. `root` names the
 * start rule (NULL: "root"). *out owned by caller (grammar_free). */
em_status grammar_compile_gbnf(const char *text, size_t len, const char *root, grammar **out);
/* A regex matched in full (ECMAScript subset: literals, escapes \d \w \s
 * \D \W \S \xHH \uHHHH, classes, ., groups (?:), alternation, quantifiers
 * * + ? {m,n}; ^ and $ only at the ends). */
em_status grammar_compile_regex(const char *re, size_t len, grammar **out);
/* A JSON Schema (draft 2020-12 / 7 subset; see json_schema.c for the list
 * of keywords). The schema is borrowed. */
em_status grammar_compile_json_schema(json_t *schema, grammar **out);
/* Any JSON object (response_format json_object). */
em_status grammar_compile_json_object(grammar **out);

/* GBNF text equivalent of a JSON Schema (for inspection). *gbnf malloc'd. */
em_status grammar_schema_to_gbnf(json_t *schema, char **gbnf);
/* GBNF text of a regex as a full match, `root ::= ...`. *gbnf malloc'd. */
em_status grammar_regex_to_gbnf(const char *re, size_t len, char **gbnf);

/* Forced tool calls in the model's own syntax. tools: the request's tools
 * array (OpenAI shape: [{"type":"function","function":{name, parameters}}]),
 * borrowed. name: the function tool_choice names, or NULL for "required"
 * (any of the tools). parallel: allow more than one call. reasoning: the
 * model may think first (<think>...</think>), think_open: the prompt already
 * opened <think>. The text produced parses, with chat_parser in the same
 * format, into tool calls whose arguments validate against the schemas. */
typedef struct grammar_tool_opts {
    const char *name;
    bool parallel;
    bool reasoning;
    bool think_open;
} grammar_tool_opts;
em_status grammar_compile_tool_call(chat_tool_format fmt, json_t *tools, const grammar_tool_opts *opts,
                                    grammar **out);
em_status grammar_tool_call_to_gbnf(chat_tool_format fmt, json_t *tools, const grammar_tool_opts *opts,
                                    char **gbnf);

void grammar_free(grammar *g);
/* Counts of the compiled form, for diagnostics. */
size_t grammar_rule_count(const grammar *g);

/* ---- vocabulary ------------------------------------------------------- */

/* Token bytes and trie of a tokenizer. end_ids: the ids that end a
 * generation (e.g. em_model_eos_ids); NULL/0 uses the tokenizer's EOS.
 * n_vocab: the model's logit count (>= the tokenizer's; 0: the tokenizer's).
 * The tokenizer is only read during the call. *out owned by caller. */
em_status grammar_vocab_new(const tokenizer *t, const int32_t *end_ids, size_t n_end, int n_vocab,
                            grammar_vocab **out);
void grammar_vocab_free(grammar_vocab *v);
int grammar_vocab_size(const grammar_vocab *v);
/* Bytes token `id` adds to the text (NULL, *len 0 for special/unknown ids). */
const uint8_t *grammar_vocab_token(const grammar_vocab *v, int32_t id, size_t *len);
bool grammar_vocab_is_end(const grammar_vocab *v, int32_t id);

/* ---- matching ----------------------------------------------------------- */

/* g and v must outlive the matcher. v may be NULL for text matching only
 * (accept_bytes / is_accepting). *out owned by caller. */
em_status grammar_matcher_new(const grammar *g, const grammar_vocab *v, grammar_matcher **out);
/* An independent copy of the state (n > 1 choices, beam forks). */
em_status grammar_matcher_clone(const grammar_matcher *m, grammar_matcher **out);
void grammar_matcher_free(grammar_matcher *m);

/* Allowed next tokens: bit (id & 31) of mask[id >> 5], for ids < n_vocab
 * ((n_vocab + 31) / 32 words, written in full). */
em_status grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask, int n_vocab);
/* Sets the logits of disallowed tokens to -INFINITY. */
em_status grammar_matcher_apply(grammar_matcher *m, float *logits, int n_vocab);
/* Advances on a sampled token. A token the grammar does not allow is
 * EM_ERR_INVALID and leaves the state unchanged. */
em_status grammar_matcher_accept(grammar_matcher *m, int32_t token);
/* Advances on raw text (e.g. a forced prefix); not recorded for rollback
 * as tokens are, so use it before the first token. */
em_status grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes, size_t len);
/* Undoes the last n accepted tokens (speculative decoding). */
em_status grammar_matcher_rollback(grammar_matcher *m, size_t n);
/* The text so far is a complete sentence of the grammar. */
bool grammar_matcher_is_accepting(grammar_matcher *m);
/* An end id was accepted. */
bool grammar_matcher_is_terminated(const grammar_matcher *m);
/* Tokens accepted so far (what rollback can undo). */
size_t grammar_matcher_n_tokens(const grammar_matcher *m);

/* A logit processor for em_generate_params.on_logits: accepts the tokens
 * appended to `history` since the previous call (the first call only
 * records the prompt length), then applies the mask. Call it from the
 * on_logits callback with the same arguments. */
em_status grammar_matcher_process(grammar_matcher *m, float *logits, int n_vocab, const int32_t *history,
                                  size_t n_history);

#endif
