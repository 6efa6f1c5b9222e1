/* fuzz_jinja_render.c — arbitrary template source rendered against a small
 * chat context, under tight limits: any template must render or fail
 * cleanly, within its limits. */
#include "chat/jinja/jinja.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jinja_template *t = NULL;
    if (jinja_parse((const char *)data, size, &t) != EM_OK) return 0;
    json_t *vars = json_loads(
        "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"},"
        " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"add_generation_prompt\": true,"
        " \"n\": 3, \"x\": 1.5, \"s\": \"text\"}",
        0, NULL);
    jinja_limits lim = jinja_default_limits();
    lim.max_output = 1 << 16;
    lim.max_steps = 20000;
    lim.max_depth = 32;
    lim.max_seconds = 1.0;
    lim.now = 1700000000;
    char *out = NULL;
    size_t len = 0;
    if (jinja_render(t, vars, &lim, &out, &len) == EM_OK) free(out);
    json_decref(vars);
    jinja_free(t);
    return 0;
}
