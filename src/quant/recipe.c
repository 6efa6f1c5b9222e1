/* recipe.c — mixed-precision recipes for the quantizer. */
#include "quant/quantize.h"

#include "base/alloc.h"
#include "base/file.h"
#include "tensor/affine.h"

#include <fnmatch.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static em_status rule_params(json_t *o, const char *path, const char *where, int *bits, int *group) {
    json_t *b = json_object_get(o, "bits"), *g = json_object_get(o, "group_size");
    if (b && (!json_is_integer(b) || !affine_bits_ok((int)json_integer_value(b))))
        return em_fail(EM_ERR_INVALID, "%s: %s.bits must be one of 2, 3, 4, 5, 6, 8", path, where);
    if (g && (!json_is_integer(g) || !affine_group_ok((int)json_integer_value(g))))
        return em_fail(EM_ERR_INVALID, "%s: %s.group_size must be 32, 64 or 128", path, where);
    if (b) *bits = (int)json_integer_value(b);
    if (g) *group = (int)json_integer_value(g);
    return EM_OK;
}

static em_status parse_rules(json_t *rules, const char *path, quant_recipe *r) {
    if (!json_is_array(rules)) return em_fail(EM_ERR_INVALID, "%s: rules must be a list", path);
    r->rules = em_calloc(json_array_size(rules) + 1, sizeof *r->rules);
    if (!r->rules) return em_fail(EM_ERR_NOMEM, "out of memory");
    size_t i;
    json_t *o;
    json_array_foreach(rules, i, o) {
        char where[32];
        snprintf(where, sizeof where, "rules[%zu]", i);
        json_t *m = json_object_get(o, "match"), *q = json_object_get(o, "quantize");
        if (!json_is_object(o) || !json_is_string(m))
            return em_fail(EM_ERR_INVALID, "%s: %s needs a \"match\" pattern", path, where);
        if (q && !json_is_boolean(q)) return em_fail(EM_ERR_INVALID, "%s: %s.quantize must be true or false", path, where);
        quant_rule *ru = &r->rules[r->n_rules];
        ru->quantize = !q || json_is_true(q);
        ru->bits = r->bits ? r->bits : 4;
        ru->group_size = r->group_size;
        EM_TRY(rule_params(o, path, where, &ru->bits, &ru->group_size));
        if (!(ru->match = em_strdup(json_string_value(m)))) return em_fail(EM_ERR_NOMEM, "out of memory");
        r->n_rules++;
    }
    return EM_OK;
}

em_status quant_recipe_load(const char *path, quant_recipe *r) {
    char *text;
    size_t len;
    EM_TRY(em_read_file(path, 1u << 20, &text, &len));
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root) return em_fail(EM_ERR_FORMAT, "%s: %s (line %d)", path, jerr.text, jerr.line);
    em_status s = json_is_object(root) ? EM_OK : em_fail(EM_ERR_FORMAT, "%s: a recipe is a JSON object", path);
    if (s == EM_OK) s = rule_params(root, path, "recipe", &r->bits, &r->group_size);
    json_t *rules = json_object_get(root, "rules");
    if (s == EM_OK && rules) s = parse_rules(rules, path, r);
    json_decref(root);
    return s;
}

void quant_recipe_free(quant_recipe *r) {
    for (size_t i = 0; i < r->n_rules; i++) free(r->rules[i].match);
    free(r->rules);
    r->rules = NULL;
    r->n_rules = 0;
}

void quant_recipe_pick(const quant_recipe *r, const char *module, int *bits, int *group) {
    for (size_t i = 0; i < r->n_rules; i++) {
        if (fnmatch(r->rules[i].match, module, 0) != 0) continue;
        *bits = r->rules[i].quantize ? r->rules[i].bits : 0;
        *group = r->rules[i].group_size;
        return;
    }
    *bits = r->bits;
    *group = r->group_size;
}
