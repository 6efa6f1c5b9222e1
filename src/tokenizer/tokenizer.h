/* tokenizer.h — Hugging Face tokenizer.json: encode and decode exactly as
 * the `tokenizers` library does, plus an incremental detokenizer.
 *
 * A loaded tokenizer is immutable and thread-safe: many requests may encode
 * and decode with it at once (internal caches are synchronised). */
#ifndef EMBER_TOKENIZER_H
#define EMBER_TOKENIZER_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
 * DIR may also be the path of a tokenizer.json file. *out owned by caller. */
em_status tok_load(const char *dir, tokenizer **out);
/* Loads from in-memory JSON texts (config_json may be NULL). `name` is used
 * in error messages. */
em_status tok_load_json(const char *tokenizer_json, size_t len, const char *config_json,
                        size_t config_len, const char *name, tokenizer **out);
void tok_free(tokenizer *t);

/* Encodes UTF-8 text. add_special applies the post-processor (BOS/EOS).
 * *ids is malloc'd, owned by caller. */
em_status tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     int32_t **ids, size_t *n_ids);
/* Decodes ids; *text malloc'd, NUL-terminated, owned by caller. Invalid
 * UTF-8 produced by byte-level pieces is replaced with U+FFFD as the
 * reference does. */
em_status tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text);
/* Same, also giving the length: decoded text may contain U+0000. */
em_status tok_decode_n(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text,
                       size_t *len);

int32_t tok_vocab_size(const tokenizer *t);       /* including added tokens */
/* Token text as stored in the vocabulary (not decoded); NULL if out of range. */
const char *tok_id_to_piece(const tokenizer *t, int32_t id);
/* -1 when the piece is not in the vocabulary / added tokens. */
int32_t tok_piece_to_id(const tokenizer *t, const char *piece);
bool tok_is_special(const tokenizer *t, int32_t id);
/* Special ids from tokenizer_config.json (bos_token, eos_token, pad_token),
 * -1 when absent; token strings NULL when absent. */
int32_t tok_bos_id(const tokenizer *t);
int32_t tok_eos_id(const tokenizer *t);
const char *tok_bos_token(const tokenizer *t);
const char *tok_eos_token(const tokenizer *t);
const char *tok_pad_token(const tokenizer *t);
/* The raw tokenizer_config.json chat_template string, or NULL. */
const char *tok_chat_template(const tokenizer *t);
/* tokenizer_config.json add_bos_token / add_eos_token: 1 or 0, -1 when the
 * file does not set them. tok_encode(add_special) follows tokenizer.json's
 * post_processor exactly as the reference `tokenizers` library does; these
 * flags let a caller apply the transformers convention where it differs
 * (e.g. DeepSeek V3 ships add_bos_token=true with a ByteLevel
 * post-processor that adds nothing). */
int tok_config_add_bos(const tokenizer *t);
int tok_config_add_eos(const tokenizer *t);

/* Incremental detokenizer for streaming. Feed ids one at a time; each call
 * appends newly completed UTF-8 text to *out (malloc'd, caller frees; may be
 * empty). The concatenation of all outputs plus tok_stream_flush equals
 * tok_decode of the same ids. */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tokenizer *t, bool skip_special);
void tok_stream_free(tok_stream *s);
em_status tok_stream_feed(tok_stream *s, int32_t id, char **out, size_t *out_len);
em_status tok_stream_flush(tok_stream *s, char **out, size_t *out_len);

#endif
