/* request_config.c — the X-Ember-Config header: configuration overrides
 * that apply to one request alone. The header's text is parsed and checked
 * by em_config_for_request (base/config.c), which builds a new snapshot on
 * top of the model's; the process snapshot and every other request keep
 * theirs. */
#include "server/server.h"

#include "base/config.h"
#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>

em_status srv_request_config(const srv_request *req, em_model *m, em_config **out) {
    *out = NULL;
    bool oom = false;
    char *text = req->conn ? http_header_joined(req, SRV_CONFIG_HEADER, &oom) : NULL;
    if (oom) return em_fail(EM_ERR_NOMEM, "out of memory reading the " SRV_CONFIG_HEADER " header");
    em_status st = em_config_for_request(em_model_config(m), text, out);
    free(text);
    if (st == EM_ERR_INVALID) {
        /* name the header: the message alone names only the variable */
        char msg[600];
        snprintf(msg, sizeof msg, "%s", em_last_error());
        return em_fail(EM_ERR_INVALID, SRV_CONFIG_HEADER ": %s", msg);
    }
    return st;
}
