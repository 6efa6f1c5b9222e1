/* fuzz_json_read.c — em_json_loadb against jansson's json_loadb on
 * arbitrary bytes: both accept (with json_equal values) or both reject.
 * The first byte picks the flags. Any difference aborts. */
#include "base/json_read.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    size_t flags = (data[0] & 1 ? JSON_REJECT_DUPLICATES : 0) | (data[0] & 2 ? JSON_DECODE_ANY : 0);
    const char *s = (const char *)data + 1;
    json_t *a = json_loadb(s, size - 1, flags, NULL), *b = em_json_loadb(s, size - 1, flags, NULL);
    if ((a == NULL) != (b == NULL) || (a && !json_equal(a, b))) abort();
    json_decref(a);
    json_decref(b);
    return 0;
}
