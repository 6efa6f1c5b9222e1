/* fuzz_grammar.c — libFuzzer harness for the grammar front ends: the first
 * byte picks GBNF, regex or JSON Schema; whatever compiles is then matched
 * against the rest of the input as text (bounded work per input). */
#include "engine/grammar/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    uint8_t mode = data[0] % 3;
    const char *src = (const char *)data + 1;
    size_t n = size - 1;
    const char *sep = memchr(src, 0, n); /* source NUL text-to-match */
    size_t sn = sep ? (size_t)(sep - src) : n;
    grammar *g = NULL;
    if (mode == 0) grammar_compile_gbnf(src, sn, NULL, &g);
    else if (mode == 1) grammar_compile_regex(src, sn, &g);
    else {
        json_t *j = json_loadb(src, sn, JSON_DECODE_ANY, NULL);
        if (j) grammar_compile_json_schema(j, &g);
        json_decref(j);
    }
    if (g && sep) {
        grammar_matcher *m;
        if (grammar_matcher_new(g, NULL, &m) == EM_OK) {
            grammar_matcher_accept_bytes(m, sep + 1, n - sn - 1);
            (void)grammar_matcher_is_accepting(m);
            grammar_matcher_free(m);
        }
    }
    grammar_free(g);
    return 0;
}
