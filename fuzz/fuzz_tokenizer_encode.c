/* fuzz_tokenizer_encode.c — arbitrary text through a byte-level BPE
 * tokenizer (regex split, added tokens, template post-processor) or, when
 * EMBER_FUZZ_TOKENIZER names a tokenizer.json/model directory, through
 * that one. Checks: invalid UTF-8 is rejected, valid text encodes, the
 * ids decode back to the text (byte-level BPE is lossless), and streaming
 * the ids one by one yields the same text. The first input byte selects
 * add_special / skip_special. */
#include "tokenizer/tok_internal.h"

#include "base/utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tokenizer *tok;
static bool lossless;

static void put(tok_buf *b, const char *s) { tok_buf_put(b, s, strlen(s)); }

/* A byte-level vocabulary (the 256 byte characters) plus a few merges. */
static char *builtin_json(void) {
    tok_bytelevel table;
    tok_bytelevel_fill(&table);
    const tok_bytelevel *bl = &table;
    tok_buf b = {0};
    put(&b, "{\"added_tokens\":[{\"id\":300,\"content\":\"<|im_start|>\",\"special\":true,\"normalized\":false},"
                    "{\"id\":301,\"content\":\"<|im_end|>\",\"special\":true,\"normalized\":false,\"lstrip\":true},"
                    "{\"id\":302,\"content\":\"word\",\"special\":false,\"single_word\":true,\"rstrip\":true}],"
                    "\"normalizer\":{\"type\":\"NFC\"},"
                    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                    "{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?"
                    "[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":"
                    "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
                    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":"
                    "\"<|im_start|>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<|im_start|>\":{\"ids\":[300]}}},"
                    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int i = 0; i < 256; i++) {
        char e[32];
        int n = 0;
        const char *enc = bl->enc[i];
        /* JSON-escape the two characters that need it. */
        if (enc[0] == '"' || enc[0] == '\\') n = snprintf(e, sizeof e, "\"\\%c\":%d,", enc[0], i);
        else n = snprintf(e, sizeof e, "\"%.*s\":%d,", bl->enc_len[i], enc, i);
        tok_buf_put(&b, e, (size_t)n);
    }
    put(&b, "\"he\":256,\"ll\":257,\"hell\":258,\"hello\":259,\"\xC4\xA0w\":260,\"or\":261,\"\xC4\xA0wor\":262,"
                    "\"word\":263,\"wor\":264},\"merges\":[\"h e\",\"l l\",\"he ll\",\"hell o\",\"\xC4\xA0 w\",\"o r\",\"\xC4\xA0w or\","
                    "[\"w\",\"or\"],[\"wor\",\"d\"]]}}");
    return b.p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("EMBER_FUZZ_TOKENIZER");
    if (path) {
        if (tok_load(path, &tok) != EM_OK) {
            fprintf(stderr, "fuzz: %s\n", em_last_error());
            exit(1);
        }
        return 0;
    }
    char *json = builtin_json();
    if (!json || tok_load_json(json, strlen(json), NULL, 0, "builtin", &tok) != EM_OK) {
        fprintf(stderr, "fuzz: builtin tokenizer: %s\n", em_last_error());
        exit(1);
    }
    free(json);
    lossless = true;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool add_special = data[0] & 1, skip = data[0] & 2;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids;
    size_t n;
    em_status st = tok_encode(tok, text, len, add_special, &ids, &n);
    if (!utf8_valid(text, len)) {
        if (st == EM_OK) abort(); /* invalid UTF-8 must be rejected */
        return 0;
    }
    if (st != EM_OK) abort();
    char *full;
    size_t full_len;
    if (tok_decode_n(tok, ids, n, skip, &full, &full_len) != EM_OK) abort();
    /* NFC may recompose the text; compare only when it is unchanged. */
    /* lstrip/rstrip tokens swallow spaces: only other texts round-trip. */
    if (lossless && !add_special && !skip && !memmem(text, len, "word", 4) && !memmem(text, len, "<|im_end|>", 10)) {
        tok_buf nf = {0};
        if (tok_norm_apply(tok->normalizer, text, len, &nf) == EM_OK && nf.n == len && memcmp(nf.p, text, len) == 0 &&
            (full_len != len || memcmp(full, text, len) != 0))
            abort();
        tok_buf_free(&nf);
    }
    tok_stream *s = tok_stream_new(tok, skip);
    tok_buf acc = {0};
    for (size_t i = 0; i <= n; i++) {
        char *o;
        size_t ol;
        if ((i < n ? tok_stream_feed(s, ids[i], &o, &ol) : tok_stream_flush(s, &o, &ol)) != EM_OK) abort();
        tok_buf_put(&acc, o, ol);
        free(o);
    }
    if (acc.n != full_len || (full_len && memcmp(acc.p, full, full_len) != 0)) abort();
    tok_buf_free(&acc);
    tok_stream_free(s);
    free(full);
    free(ids);
    return 0;
}
