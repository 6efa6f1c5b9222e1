/* render.c — rendering a chat request through the model's template, with
 * the context transformers builds: messages, tools (None when absent),
 * documents (None), add_generation_prompt (false by default), the extra
 * variables of the request and the special tokens of the tokenizer. */
#include "chat/chat.h"
#include "chat/chat_template.h"

#include <string.h>

em_status chat_render_at(const chat_template *t, json_t *vars, time_t now, char **out, size_t *out_len) {
    if (vars && !json_is_object(vars)) return em_fail(EM_ERR_INVALID, "chat render: variables must be a JSON object");
    json_t *ctx = json_object();
    if (!ctx) return em_fail(EM_ERR_NOMEM, "chat render: out of memory");
    json_object_set_new(ctx, "tools", json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_false());
    json_object_update(ctx, t->special);
    if (vars) json_object_update(ctx, vars);
    jinja_limits lim = jinja_default_limits();
    lim.now = now;
    em_status st = jinja_render(t->tpl, ctx, &lim, out, out_len);
    json_decref(ctx);
    return st;
}

em_status chat_render(const chat_template *t, json_t *vars, char **out, size_t *out_len) {
    return chat_render_at(t, vars, 0, out, out_len);
}
