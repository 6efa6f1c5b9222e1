/* fuzz_responses_request.c — Responses API request parsing on arbitrary
 * bytes: JSON → options and normalised input items → messages (alone, and
 * replayed after themselves as a stored conversation would be) → template
 * context. Any input must be accepted or rejected cleanly, with no leak or
 * UB. */
#include "base/json_read.h"
#include "engine/request.h"
#include "server/openai_responses.h"

#include <stdint.h>
#include <stdlib.h>

static void build(json_t *body, bool replay) {
    em_request req;
    em_request_init(&req);
    oai_resp_opts o = {0};
    oai_error e = {0};
    if (oai_responses_parse(body, "model", &req, &o, &e) &&
        oai_responses_build_messages(&o, replay ? o.input : NULL, &req, &e)) {
        json_t *vars = NULL;
        if (em_request_template_vars(&req, &vars) == EM_OK) json_decref(vars);
    }
    oai_resp_opts_free(&o);
    em_request_free(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = em_json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!body) return 0;
    if (json_is_object(body)) {
        build(body, false);
        build(body, true);
    }
    json_decref(body);
    return 0;
}
