/* request.c — building, freeing and rendering the internal request. */
#include "engine/request.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/status.h"
#include "engine/events.h"

#include <stdlib.h>
#include <string.h>

void em_request_init(em_request *r) {
    memset(r, 0, sizeof *r);
    r->n = 1;
    r->parallel_tool_calls = true;
}

static void message_free(em_message *m) {
    free(m->content);
    free(m->reasoning);
    free(m->name);
    free(m->tool_call_id);
    for (size_t i = 0; i < m->n_tool_calls; i++) {
        free(m->tool_calls[i].id);
        free(m->tool_calls[i].name);
        free(m->tool_calls[i].arguments);
    }
    free(m->tool_calls);
}

void em_request_free(em_request *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_messages; i++) message_free(&r->messages[i]);
    free(r->messages);
    json_decref(r->tools);
    free(r->tool_choice_name);
    json_decref(r->response_schema);
    json_decref(r->template_kwargs);
    free(r->prompt);
    free(r->prompt_ids);
    free(r->bias_ids);
    free(r->bias_values);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    em_config_release(r->config);
    memset(r, 0, sizeof *r);
}

em_status em_request_add_message(em_request *r, em_role role, const char *content, em_message **out) {
    size_t cap = r->n_messages; /* grow by one: requests carry few messages */
    em_message *a = em_realloc(r->messages, (cap + 1) * sizeof *a);
    if (!a) return em_fail(EM_ERR_NOMEM, "request: out of memory adding message %zu", cap);
    r->messages = a;
    em_message *m = &a[r->n_messages];
    memset(m, 0, sizeof *m);
    m->role = role;
    if (content && !(m->content = em_strdup(content)))
        return em_fail(EM_ERR_NOMEM, "request: out of memory copying message %zu", cap);
    r->n_messages++;
    if (out) *out = m;
    return EM_OK;
}

em_status em_message_add_tool_call(em_message *m, const char *id, const char *name, const char *arguments) {
    em_tool_call *a = em_realloc(m->tool_calls, (m->n_tool_calls + 1) * sizeof *a);
    if (!a) return em_fail(EM_ERR_NOMEM, "request: out of memory adding a tool call");
    m->tool_calls = a;
    em_tool_call *c = &a[m->n_tool_calls];
    c->id = id ? em_strdup(id) : NULL;
    c->name = em_strdup(name ? name : "");
    c->arguments = em_strdup(arguments ? arguments : "{}");
    m->n_tool_calls++;
    if ((id && !c->id) || !c->name || !c->arguments)
        return em_fail(EM_ERR_NOMEM, "request: out of memory copying a tool call");
    return EM_OK;
}

em_status em_request_add_stop(em_request *r, const char *s, size_t len) {
    char **a = em_realloc(r->stop, (r->n_stop + 1) * sizeof *a);
    if (!a) return em_fail(EM_ERR_NOMEM, "request: out of memory adding a stop string");
    r->stop = a;
    if (!(a[r->n_stop] = em_strndup(s, len))) return em_fail(EM_ERR_NOMEM, "request: out of memory");
    r->n_stop++;
    return EM_OK;
}

em_sampling em_request_sampling(const em_request *r, em_sampling d) {
    const em_sampling *s = &r->sampling;
    if (r->set & EM_SET_TEMPERATURE) d.temperature = s->temperature;
    if (r->set & EM_SET_TOP_P) d.top_p = s->top_p;
    if (r->set & EM_SET_TOP_K) d.top_k = s->top_k;
    if (r->set & EM_SET_MIN_P) d.min_p = s->min_p;
    if (r->set & EM_SET_REPETITION) d.repetition_penalty = s->repetition_penalty;
    if (r->set & EM_SET_PRESENCE) d.presence_penalty = s->presence_penalty;
    if (r->set & EM_SET_FREQUENCY) d.frequency_penalty = s->frequency_penalty;
    if (r->set & EM_SET_SEED) {
        d.seed = s->seed;
        d.has_seed = 1;
    }
    return d;
}

em_precision em_request_precision(const em_request *r) {
    /* Only an override of this request counts: the process value was
     * already applied when the model was opened (and a verb's own
     * --precision may have replaced it there). */
    if (!r->config || em_config_source_of(r->config, EMC_PRECISION) != EM_CFG_SRC_REQUEST) return EM_PRECISION_AUTO;
    const char *p = em_config_str(r->config, EMC_PRECISION);
    return !strcmp(p, "exact") ? EM_PRECISION_EXACT : !strcmp(p, "fast") ? EM_PRECISION_FAST : EM_PRECISION_AUTO;
}

const char *em_role_name(em_role role) {
    switch (role) {
    case EM_ROLE_SYSTEM:
    case EM_ROLE_DEVELOPER: return "system";
    case EM_ROLE_USER: return "user";
    case EM_ROLE_ASSISTANT: return "assistant";
    case EM_ROLE_TOOL: return "tool";
    }
    return "user";
}

const char *em_finish_reason_name(em_finish_reason r) {
    switch (r) {
    case EM_REASON_STOP: return "stop";
    case EM_REASON_LENGTH: return "length";
    case EM_REASON_TOOL_CALLS: return "tool_calls";
    case EM_REASON_CANCELLED: return "cancelled";
    }
    return "stop";
}

/* Sets key to a new string value when s is non-NULL. */
static int set_str(json_t *o, const char *key, const char *s) {
    return s ? json_object_set_new(o, key, json_string(s)) : 0;
}

static json_t *tool_call_json(const em_tool_call *c) {
    json_t *args = json_loads(c->arguments, JSON_DECODE_ANY, NULL);
    if (!args || !json_is_object(args)) { /* keep the client's text as it was */
        json_decref(args);
        args = json_string(c->arguments);
    }
    json_t *fn = json_pack("{s:s?, s:o}", "name", c->name, "arguments", args);
    json_t *call = json_pack("{s:s, s:o}", "type", "function", "function", fn);
    if (call && c->id) json_object_set_new(call, "id", json_string(c->id));
    return call;
}

static json_t *message_json(const em_message *m) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = json_object_set_new(o, "role", json_string(em_role_name(m->role)));
    /* Templates test `message.content is string`; an absent content is
     * rendered as an empty string only when there are no tool calls. */
    if (m->content) bad |= set_str(o, "content", m->content);
    else if (!m->n_tool_calls) bad |= set_str(o, "content", "");
    else bad |= json_object_set_new(o, "content", json_null());
    bad |= set_str(o, "reasoning_content", m->reasoning);
    bad |= set_str(o, "name", m->name);
    bad |= set_str(o, "tool_call_id", m->tool_call_id);
    if (m->n_tool_calls) {
        json_t *calls = json_array();
        bad |= json_object_set_new(o, "tool_calls", calls);
        for (size_t i = 0; calls && i < m->n_tool_calls; i++)
            bad |= json_array_append_new(calls, tool_call_json(&m->tool_calls[i]));
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

em_status em_request_template_vars(const em_request *r, json_t **out) {
    json_t *vars = json_object(), *msgs = json_array();
    int bad = !vars || !msgs;
    if (!bad) bad |= json_object_set_new(vars, "messages", msgs);
    else json_decref(msgs);
    for (size_t i = 0; !bad && i < r->n_messages; i++)
        bad |= json_array_append_new(msgs, message_json(&r->messages[i]));
    if (!bad && r->tools && json_array_size(r->tools) && r->tool_choice != EM_TOOL_CHOICE_NONE)
        bad |= json_object_set(vars, "tools", r->tools);
    if (!bad) bad |= json_object_set_new(vars, "add_generation_prompt", json_true());
    /* Extra variables never replace the conversation itself. */
    const char *key;
    json_t *val;
    if (!bad && r->template_kwargs)
        json_object_foreach(r->template_kwargs, key, val) {
            if (strcmp(key, "messages") && strcmp(key, "tools")) bad |= json_object_set(vars, key, val);
        }
    if (bad) {
        json_decref(vars);
        return em_fail(EM_ERR_NOMEM, "request: out of memory building the template context");
    }
    *out = vars;
    return EM_OK;
}
