/* fuzz_openai_request.c — request parsing on arbitrary bytes: JSON →
 * internal request (Chat Completions and Completions) → template context.
 * Any input must be accepted or rejected cleanly, with no leak or UB. */
#include "base/json_read.h"
#include "engine/request.h"
#include "server/openai_chat.h"
#include "server/openai_completions.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = em_json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!body) return 0;
    if (json_is_object(body)) {
        em_request req;
        em_request_init(&req);
        oai_stream_opts so = {0};
        oai_error e = {0};
        if (oai_chat_parse(body, "model", 1000, &req, &so, &e)) {
            json_t *vars = NULL;
            if (em_request_template_vars(&req, &vars) == EM_OK) json_decref(vars);
        }
        em_request_free(&req);
        em_request *reqs = NULL;
        size_t n = 0;
        oai_completions_parse(body, "model", 1000, &reqs, &n, &so, &e);
        for (size_t i = 0; i < n; i++) em_request_free(&reqs[i]);
        free(reqs);
    }
    json_decref(body);
    return 0;
}
