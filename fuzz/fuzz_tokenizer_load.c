/* fuzz_tokenizer_load.c — arbitrary bytes as tokenizer.json: loading must
 * either fail cleanly or give a tokenizer that encodes and decodes
 * without crashing. The input is split at the first NUL byte: before it
 * tokenizer.json, after it tokenizer_config.json. */
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    const char *nul = memchr(s, 0, size);
    size_t tj_len = nul ? (size_t)(nul - s) : size;
    const char *cfg = nul ? nul + 1 : NULL;
    size_t cfg_len = nul ? size - tj_len - 1 : 0;
    tokenizer *t;
    if (tok_load_json(s, tj_len, cfg, cfg_len, "fuzz.json", &t) != EM_OK) return 0;
    static const char *texts[] = {"", "Hello world! 123 <s> \xC3\xA9\xE4\xB8\xAD \n\n  x", "aaaaaaaaaaaaaaaa"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        int32_t *ids;
        size_t n;
        if (tok_encode(t, texts[k], strlen(texts[k]), k & 1, &ids, &n) != EM_OK) continue;
        char *back;
        if (tok_decode(t, ids, n, false, &back) == EM_OK) free(back);
        free(ids);
    }
    int32_t probe[] = {0, 1, 2, 3, 255, 256, 1000, -1, tok_vocab_size(t) - 1};
    char *back;
    if (tok_decode(t, probe, sizeof probe / sizeof probe[0], true, &back) == EM_OK) free(back);
    tok_free(t);
    return 0;
}
