/* postprocess.c — tokenizer.json "post_processor": what add_special_tokens
 * adds around an encoded single sequence. TemplateProcessing (its "single"
 * template), BertProcessing/RobertaProcessing ([CLS] A [SEP]), ByteLevel
 * (offsets only: no ids change) and Sequence. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct post_item {
    bool is_seq;     /* the encoded text itself */
    int32_t *ids;    /* else the special token's ids */
    size_t n;
} post_item;

typedef enum { PP_NONE, PP_TEMPLATE, PP_SEQ } pp_kind;

struct tok_post {
    pp_kind kind;
    post_item *items;
    size_t n_items;
    tok_post **kids;
    size_t n_kids;
};

void tok_post_free(tok_post *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_items; i++) free(p->items[i].ids);
    free(p->items);
    for (size_t i = 0; i < p->n_kids; i++) tok_post_free(p->kids[i]);
    free(p->kids);
    free(p);
}

static em_status check_id(json_int_t id, const char *path, const tokenizer *t) {
    if (id < 0 || id >= t->n_ids || !t->pieces[id])
        return em_fail(EM_ERR_FORMAT, "%s: token id %lld is not in the vocabulary", path, (long long)id);
    return EM_OK;
}

static em_status template_item(json_t *it, json_t *specials, const char *path, const tokenizer *t, post_item *out) {
    json_t *seq = json_object_get(it, "Sequence"), *sp = json_object_get(it, "SpecialToken");
    if (json_is_object(seq)) {
        out->is_seq = true;
        return EM_OK;
    }
    json_t *name = json_is_object(sp) ? json_object_get(sp, "id") : NULL;
    if (!json_is_string(name)) return em_fail(EM_ERR_FORMAT, "%s: expected {\"Sequence\"} or {\"SpecialToken\": {\"id\"}}", path);
    json_t *def = json_object_get(specials, json_string_value(name));
    json_t *ids = json_is_object(def) ? json_object_get(def, "ids") : NULL;
    if (!json_is_array(ids))
        return em_fail(EM_ERR_FORMAT, "%s: special token \"%s\" missing from special_tokens (or its ids)", path,
                       json_string_value(name));
    out->ids = em_calloc(json_array_size(ids) + 1, sizeof *out->ids);
    if (!out->ids) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v)) return em_fail(EM_ERR_FORMAT, "%s: special_tokens.%s.ids[%zu]: expected an integer", path, json_string_value(name), i);
        EM_TRY(check_id(json_integer_value(v), path, t));
        out->ids[out->n++] = (int32_t)json_integer_value(v);
    }
    return EM_OK;
}

static em_status load_template(json_t *j, const char *path, const tokenizer *t, tok_post *p) {
    json_t *single = json_object_get(j, "single"), *specials = json_object_get(j, "special_tokens");
    if (!json_is_array(single)) return em_fail(EM_ERR_FORMAT, "%s.single: expected an array", path);
    p->items = em_calloc(json_array_size(single) + 1, sizeof *p->items);
    if (!p->items) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < json_array_size(single); i++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.single[%zu]", path, i);
        EM_TRY(template_item(json_array_get(single, i), specials, sub, t, &p->items[p->n_items++]));
    }
    return EM_OK;
}

/* Bert/Roberta: {"cls": ["[CLS]", 101], "sep": ["[SEP]", 102]}. */
static em_status load_bert(json_t *j, const char *path, const tokenizer *t, tok_post *p) {
    p->items = em_calloc(3, sizeof *p->items);
    if (!p->items) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    p->n_items = 3; /* counted now, so that tok_post_free frees the cls's ids if the sep fails */
    const char *keys[2] = {"cls", "sep"};
    for (int k = 0; k < 2; k++) {
        json_t *pair = json_object_get(j, keys[k]);
        json_t *id = json_is_array(pair) ? json_array_get(pair, 1) : NULL;
        if (!json_is_integer(id)) return em_fail(EM_ERR_FORMAT, "%s.%s: expected [token, id]", path, keys[k]);
        EM_TRY(check_id(json_integer_value(id), path, t));
        post_item *it = &p->items[k == 0 ? 0 : 2];
        it->ids = em_malloc(sizeof *it->ids);
        if (!it->ids) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
        it->ids[0] = (int32_t)json_integer_value(id);
        it->n = 1;
    }
    p->items[1].is_seq = true;
    return EM_OK;
}

static em_status load_kind(json_t *j, const char *path, const char *type, const tokenizer *t, tok_post *p) {
    if (strcmp(type, "ByteLevel") == 0) return EM_OK;
    if (strcmp(type, "TemplateProcessing") == 0) {
        p->kind = PP_TEMPLATE;
        return load_template(j, path, t, p);
    }
    if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
        p->kind = PP_TEMPLATE;
        return load_bert(j, path, t, p);
    }
    if (strcmp(type, "Sequence") == 0) {
        p->kind = PP_SEQ;
        json_t *arr = json_object_get(j, "processors");
        if (!json_is_array(arr)) return em_fail(EM_ERR_FORMAT, "%s.processors: expected an array", path);
        p->kids = em_calloc(json_array_size(arr) + 1, sizeof *p->kids);
        if (!p->kids) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", path, i);
            EM_TRY(tok_post_load(json_array_get(arr, i), sub, t, &p->kids[p->n_kids]));
            if (p->kids[p->n_kids]) p->n_kids++;
        }
        return EM_OK;
    }
    return em_fail(EM_ERR_UNSUPPORTED, "%s.type: post-processor \"%s\" is not supported", path, type);
}

em_status tok_post_load(json_t *j, const char *path, const tokenizer *t, tok_post **out) {
    *out = NULL;
    if (!j || json_is_null(j)) return EM_OK;
    if (!json_is_object(j)) return em_fail(EM_ERR_FORMAT, "%s: expected an object or null", path);
    json_t *type = json_object_get(j, "type");
    if (!json_is_string(type)) return em_fail(EM_ERR_FORMAT, "%s.type: expected a string", path);
    tok_post *p = em_calloc(1, sizeof *p);
    if (!p) return em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
    em_status st = load_kind(j, path, json_string_value(type), t, p);
    if (st != EM_OK) {
        tok_post_free(p);
        return st;
    }
    *out = p;
    return EM_OK;
}

em_status tok_post_apply(const tok_post *p, int32_t **ids, size_t *n, size_t *cap) {
    if (!p) return EM_OK;
    if (p->kind == PP_SEQ) {
        for (size_t i = 0; i < p->n_kids; i++) EM_TRY(tok_post_apply(p->kids[i], ids, n, cap));
        return EM_OK;
    }
    if (p->kind != PP_TEMPLATE) return EM_OK;
    size_t total = 0;
    for (size_t i = 0; i < p->n_items; i++)
        if (!em_add(total, p->items[i].is_seq ? *n : p->items[i].n, &total)) return em_fail(EM_ERR_NOMEM, "tokenizer: too many ids");
    int32_t *out = em_mallocn(total + 1, sizeof *out);
    if (!out) return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < p->n_items; i++) {
        const int32_t *src = p->items[i].is_seq ? *ids : p->items[i].ids;
        size_t m = p->items[i].is_seq ? *n : p->items[i].n;
        if (m) memcpy(out + k, src, m * sizeof *out);
        k += m;
    }
    free(*ids);
    *ids = out;
    *n = k;
    *cap = total + 1;
    return EM_OK;
}
