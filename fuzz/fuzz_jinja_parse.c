/* fuzz_jinja_parse.c — arbitrary bytes as template source: the lexer and
 * parser must accept or reject them without crashing or leaking. */
#include "chat/jinja/jinja.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jinja_template *t = NULL;
    if (jinja_parse((const char *)data, size, &t) == EM_OK) jinja_free(t);
    return 0;
}
