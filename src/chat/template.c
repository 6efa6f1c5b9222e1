/* template.c — finding and loading a model's chat template, and the
 * special-token variables (bos_token, eos_token...) transformers passes to
 * it from tokenizer_config.json. */
#include "chat/chat.h"
#include "chat/chat_template.h"

#include "base/alloc.h"
#include "base/file.h"

#include <stdlib.h>
#include <string.h>

#define CHAT_MAX_TEMPLATE_FILE (64u << 20)

static const char *const special_names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                            "pad_token", "cls_token", "mask_token", NULL};

/* A token entry is a string or an AddedToken-like {"content": ...}. */
static json_t *token_text(json_t *v) {
    if (json_is_string(v)) return v;
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return c;
    }
    return NULL;
}

static em_status special_tokens(json_t *config, json_t **out) {
    json_t *sp = json_object();
    if (!sp) return em_fail(EM_ERR_NOMEM, "chat template: out of memory");
    if (json_is_object(config)) {
        for (int i = 0; special_names[i]; i++) {
            json_t *t = token_text(json_object_get(config, special_names[i]));
            if (t && json_string_length(t) > 0) json_object_set(sp, special_names[i], t);
        }
        json_t *extra = json_object_get(config, "additional_special_tokens");
        if (json_is_array(extra)) {
            json_t *list = json_array();
            size_t i;
            json_t *e;
            json_array_foreach(extra, i, e) {
                json_t *t = token_text(e);
                if (t) json_array_append(list, t);
            }
            json_object_set_new(sp, "additional_special_tokens", list);
        }
    }
    *out = sp;
    return EM_OK;
}

/* The "chat_template" entry: a string, or a list of {name, template}
 * where the one named "default" is used. */
static em_status pick_template(json_t *entry, const char *where, const char **out) {
    if (json_is_string(entry)) {
        *out = json_string_value(entry);
        return EM_OK;
    }
    if (json_is_array(entry)) {
        size_t i;
        json_t *e;
        json_array_foreach(entry, i, e) {
            json_t *name = json_object_get(e, "name"), *tpl = json_object_get(e, "template");
            if (json_is_string(name) && json_is_string(tpl) && strcmp(json_string_value(name), "default") == 0) {
                *out = json_string_value(tpl);
                return EM_OK;
            }
        }
        return em_fail(EM_ERR_UNSUPPORTED, "%s: chat_template list has no template named \"default\"", where);
    }
    return em_fail(EM_ERR_FORMAT, "%s: chat_template must be a string or a list of {name, template}", where);
}

static em_status build(const char *source, json_t *config, chat_template **out) {
    chat_template *t = em_calloc(1, sizeof *t);
    if (!t) return em_fail(EM_ERR_NOMEM, "chat template: out of memory");
    t->source = em_strdup(source);
    em_status st = t->source ? EM_OK : em_fail(EM_ERR_NOMEM, "chat template: out of memory");
    if (st == EM_OK) st = jinja_parse(source, strlen(source), &t->tpl);
    if (st == EM_OK) st = special_tokens(config, &t->special);
    if (st != EM_OK) {
        chat_template_free(t);
        return st;
    }
    *out = t;
    return EM_OK;
}

em_status chat_template_from_string(const char *source, const char *config_json, chat_template **out) {
    json_t *config = NULL;
    if (config_json) {
        json_error_t err;
        config = json_loads(config_json, JSON_DECODE_INT_AS_REAL, &err);
        if (!config) return em_fail(EM_ERR_FORMAT, "tokenizer config: line %d: %s", err.line, err.text);
    }
    em_status st = build(source, config, out);
    json_decref(config);
    return st;
}

static em_status load_json(const char *path, json_t **out) {
    /* model_max_length can be 1e30 written as an integer: read ints as reals */
    char *data = NULL;
    size_t len = 0;
    EM_TRY(em_read_file(path, CHAT_MAX_TEMPLATE_FILE, &data, &len));
    json_error_t err;
    *out = json_loadb(data, len, JSON_DECODE_INT_AS_REAL, &err);
    free(data);
    if (!*out) return em_fail(EM_ERR_FORMAT, "%s: line %d: %s", path, err.line, err.text);
    return EM_OK;
}

em_status chat_template_load(const char *dir, chat_template **out) {
    char *p_jinja = em_path_join(dir, "chat_template.jinja");
    char *p_json = em_path_join(dir, "chat_template.json");
    char *p_cfg = em_path_join(dir, "tokenizer_config.json");
    json_t *config = NULL, *tj = NULL;
    char *text = NULL;
    em_status st = p_jinja && p_json && p_cfg ? EM_OK : em_fail(EM_ERR_NOMEM, "chat template: out of memory");
    if (st == EM_OK && em_file_exists(p_cfg)) st = load_json(p_cfg, &config);
    const char *source = NULL;
    if (st == EM_OK && em_file_exists(p_jinja)) {
        size_t len;
        st = em_read_file(p_jinja, CHAT_MAX_TEMPLATE_FILE, &text, &len);
        if (st == EM_OK && strlen(text) != len) st = em_fail(EM_ERR_FORMAT, "%s: template contains a NUL byte", p_jinja);
        source = text;
    } else if (st == EM_OK && em_file_exists(p_json)) {
        st = load_json(p_json, &tj);
        if (st == EM_OK) st = pick_template(json_object_get(tj, "chat_template"), p_json, &source);
    } else if (st == EM_OK && config && json_object_get(config, "chat_template")) {
        st = pick_template(json_object_get(config, "chat_template"), p_cfg, &source);
    } else if (st == EM_OK) {
        st = em_fail(EM_ERR_UNSUPPORTED, "%s: no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json)", dir);
    }
    if (st == EM_OK) {
        st = build(source, config, out);
        if (st != EM_OK) em_fail_prefix(st, "%s: chat template", dir);
    }
    free(text);
    json_decref(tj);
    json_decref(config);
    free(p_jinja);
    free(p_json);
    free(p_cfg);
    return st;
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    jinja_free(t->tpl);
    json_decref(t->special);
    free(t->source);
    free(t);
}

const char *chat_template_source(const chat_template *t) { return t->source; }
