/* fuzz_chat_parser.c — chat output parsers on arbitrary model text.
 *
 * Input: byte 0 picks the format (tool syntax, reasoning, think opened by
 * the prompt, tools offered or not), byte 1 the chunking; the rest is the
 * reply. Checks: no crash, leak or UB, and streaming in chunks gives the
 * same merged events as one feed. */
#include "../tests/unit/chat_parse_harness.h"

#include <stdint.h>

#define FUZZ_TOOLS                                                                                      \
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","          \
    "\"properties\":{\"n\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"}," \
    "\"s\":{\"type\":\"string\"},\"a\":{\"anyOf\":[{\"type\":\"array\"},{\"type\":\"null\"}]}}}}},"         \
    "{\"name\":\"g\",\"parameters\":{}}]"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    chat_format fmt = {
        .tools = (chat_tool_format)(data[0] % 5),
        .reasoning = (data[0] >> 3) & 1,
        .think_open_in_prompt = (data[0] >> 4) & 1,
    };
    json_t *tools = (data[0] >> 5) & 1 ? json_loads(FUZZ_TOOLS, 0, NULL) : NULL;
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    cph_sink a = {0}, b = {0};
    char *whole = cph_run(fmt, tools, text, len, 0, 0, &a);
    char *streamed = cph_run(fmt, tools, text, len, data[1], 1 + data[1] % 17, &b);
    if (a.len != b.len || memcmp(whole, streamed, a.len) != 0 || a.problems || b.problems) {
        fprintf(stderr, "streamed events differ:\n one feed: %s\n streamed: %s\n", whole, streamed);
        abort();
    }
    free(whole);
    free(streamed);
    json_decref(tools);
    return 0;
}
