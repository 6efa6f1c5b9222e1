/* fuzz_anthropic_request.c — Anthropic Messages parsing on arbitrary bytes:
 * JSON → internal request (both /v1/messages and count_tokens) → template
 * context, and a collected reply built from events whose text comes from
 * the input. Any input must be accepted or rejected cleanly, with no leak
 * or UB. */
#include "base/json_read.h"
#include "engine/request.h"
#include "server/anthropic.h"

#include <stdint.h>
#include <stdlib.h>

/* Drives the block builder with pieces of the input as event text. */
static void reply_from_bytes(const uint8_t *data, size_t size) {
    ant_reply r = {0};
    static const em_event_kind kinds[] = {EM_EVENT_REASONING, EM_EVENT_CONTENT, EM_EVENT_TOOL_START,
                                          EM_EVENT_TOOL_ARGS, EM_EVENT_TOOL_END};
    for (size_t i = 0; i + 2 <= size && i < 64; i += 2) {
        size_t len = data[i + 1] % 8;
        if (len > size - i - 2) len = size - i - 2;
        em_event ev = {.kind = kinds[data[i] % 5], .text = (const char *)data + i + 2, .len = len,
                       .tool_index = data[i] & 1, .tool_id = "call_x", .tool_name = "f"};
        ant_reply_event(&r, &ev);
    }
    em_event fin = {.kind = EM_EVENT_FINISH, .reason = size ? (em_finish_reason)(data[0] % 3) : EM_REASON_STOP};
    ant_reply_event(&r, &fin);
    json_decref(ant_content_json(&r));
    ant_reply_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reply_from_bytes(data, size);
    json_t *body = em_json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!body) return 0;
    if (json_is_object(body)) {
        for (int mode = ANT_MESSAGES; mode <= ANT_COUNT_TOKENS; mode++) {
            em_request req;
            em_request_init(&req);
            bool stream = false;
            oai_error e = {0};
            if (ant_parse(body, "model", (ant_mode)mode, &req, &stream, &e)) {
                json_t *vars = NULL;
                if (em_request_template_vars(&req, &vars) == EM_OK) json_decref(vars);
            }
            em_request_free(&req);
        }
    }
    json_decref(body);
    return 0;
}
