/* openai_models.c — GET /v1/models and /v1/models/{id}: the one loaded model. */
#include "server/routes.h"

#include "base/timer.h"
#include "engine/engine.h"

#include <string.h>
#include <time.h>

/* "created" is when this server started serving the model. */
static json_t *model_object(srv_server *s, em_model *m) {
    json_int_t created = (json_int_t)time(NULL) - (json_int_t)(em_now() - s->t_start);
    return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", em_model_name(m), "object", "model", "created", created,
                     "owned_by", "ember", "max_model_len", em_model_context_size(m));
}

void openai_models_list(srv_request *req, srv_response *resp) {
    em_model *m = srv_model(req->srv);
    json_t *data = json_array();
    if (data) json_array_append_new(data, model_object(req->srv, m));
    srv_reply_json(resp, 200, data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL);
}

void openai_models_get(srv_request *req, srv_response *resp) {
    em_model *m = srv_model(req->srv);
    const char *id = req->path + strlen("/v1/models/");
    if (strcmp(id, em_model_name(m))) {
        srv_reply_error(resp, 404, "invalid_request_error", "model", "model_not_found",
                        "the model '%s' does not exist; this server serves '%s'", id, em_model_name(m));
        return;
    }
    srv_reply_json(resp, 200, model_object(req->srv, m));
}
