/* profile.c — parsing and loading profiles (built-in and from a directory). */
#include "model/profile.h"

#include "base/alloc.h"
#include "base/file.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Built-in profiles: the Llama family on the dense graph, Qwen3.5 on its
 * hybrid graph. A family engineer adds a line. */
static const char *const builtin[] = {
    "{\"name\": \"llama-family\", \"match\": {\"architectures\": [\"LlamaForCausalLM\", \"MistralForCausalLM\","
    " \"Qwen2ForCausalLM\", \"Qwen3ForCausalLM\"]}, \"graph\": \"dense\", \"loop\": \"autoregressive\","
    " \"specialization\": \"generic\"}",
    "{\"name\": \"qwen3_5-family\", \"match\": {\"architectures\": [\"Qwen3_5ForCausalLM\","
    " \"Qwen3_5ForConditionalGeneration\"]}, \"graph\": \"qwen3_5\", \"loop\": \"autoregressive\","
    " \"specialization\": \"generic\"}",
};

void profile_clear(profile *p) {
    free(p->name);
    free(p->source);
    for (size_t i = 0; i < p->n_archs; i++) free(p->archs[i]);
    free(p->graph);
    free(p->loop);
    free(p->specialization);
    free(p->implementation);
    memset(p, 0, sizeof *p);
}

static bool is_fp(const char *s) {
    if (strlen(s) != FP_HEX) return false;
    for (const char *c = s; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
    return true;
}

/* Required (or optional) string field → malloc'd copy. */
static em_status take_str(json_t *o, const char *key, const char *src, bool required, char **out) {
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v) return required ? em_fail(EM_ERR_FORMAT, "%s: profile field '%s' is missing", src, key) : EM_OK;
    if (!json_is_string(v) || !json_string_length(v))
        return em_fail(EM_ERR_FORMAT, "%s: profile field '%s' must be a non-empty string", src, key);
    *out = em_strdup(json_string_value(v));
    return *out ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
}

static em_status parse_match(json_t *m, const char *src, profile *p) {
    if (!json_is_object(m)) return em_fail(EM_ERR_FORMAT, "%s: profile field 'match' must be an object", src);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (strcmp(k, "architectures") && strcmp(k, "artifact") && strcmp(k, "config"))
            return em_fail(EM_ERR_FORMAT, "%s: unknown field 'match.%s' (architectures, or artifact + config)", src, k);
    }
    json_t *archs = json_object_get(m, "architectures");
    json_t *art = json_object_get(m, "artifact"), *cfg = json_object_get(m, "config");
    if (archs && (art || cfg))
        return em_fail(EM_ERR_FORMAT, "%s: 'match' gives either architectures or artifact + config, not both", src);
    if (archs) {
        if (!json_is_array(archs) || !json_array_size(archs) || json_array_size(archs) > PROFILE_MAX_ARCHS)
            return em_fail(EM_ERR_FORMAT, "%s: 'match.architectures' must be a list of 1 to %d names", src,
                           PROFILE_MAX_ARCHS);
        size_t i;
        json_array_foreach(archs, i, v) {
            if (!json_is_string(v) || !json_string_length(v))
                return em_fail(EM_ERR_FORMAT, "%s: 'match.architectures[%zu]' must be a non-empty string", src, i);
            if (!(p->archs[p->n_archs] = em_strdup(json_string_value(v)))) return em_fail(EM_ERR_NOMEM, "out of memory");
            p->n_archs++;
        }
        return EM_OK;
    }
    const char *names[2] = {"artifact", "config"};
    json_t *vals[2] = {art, cfg};
    char *dst[2] = {p->artifact_fp, p->config_fp};
    for (int i = 0; i < 2; i++) {
        if (!vals[i]) return em_fail(EM_ERR_FORMAT, "%s: 'match.%s' is missing (an exact match needs both fingerprints)", src, names[i]);
        if (!json_is_string(vals[i]) || !is_fp(json_string_value(vals[i])))
            return em_fail(EM_ERR_FORMAT, "%s: 'match.%s' must be a fingerprint of %d lowercase hex digits (ember inspect shows it)",
                           src, names[i], FP_HEX);
        memcpy(dst[i], json_string_value(vals[i]), FP_HEX + 1);
    }
    p->exact = true;
    return EM_OK;
}

static em_status parse_fields(json_t *root, const char *src, profile *p) {
    if (!json_is_object(root)) return em_fail(EM_ERR_FORMAT, "%s: a profile is a JSON object", src);
    static const char *const known[] = {"name", "match", "graph", "loop", "specialization", "implementation", "comment"};
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        size_t i = 0;
        while (i < sizeof known / sizeof known[0] && strcmp(known[i], k)) i++;
        if (i == sizeof known / sizeof known[0]) return em_fail(EM_ERR_FORMAT, "%s: unknown profile field '%s'", src, k);
    }
    EM_TRY(take_str(root, "name", src, true, &p->name));
    json_t *m = json_object_get(root, "match");
    if (!m) return em_fail(EM_ERR_FORMAT, "%s: profile field 'match' is missing", src);
    EM_TRY(parse_match(m, src, p));
    EM_TRY(take_str(root, "graph", src, true, &p->graph));
    EM_TRY(take_str(root, "loop", src, false, &p->loop));
    if (!p->loop && !(p->loop = em_strdup("autoregressive"))) return em_fail(EM_ERR_NOMEM, "out of memory");
    EM_TRY(take_str(root, "specialization", src, false, &p->specialization));
    if (!p->specialization && !(p->specialization = em_strdup("generic"))) return em_fail(EM_ERR_NOMEM, "out of memory");
    EM_TRY(take_str(root, "implementation", src, false, &p->implementation));
    if (p->implementation && !p->exact)
        return em_fail(EM_ERR_FORMAT, "%s: profile field 'implementation' is only allowed with an exact match "
                                      "(match.artifact + match.config)", src);
    return EM_OK;
}

em_status profile_parse(const char *text, size_t len, const char *source, profile *out) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return em_fail(EM_ERR_FORMAT, "%s: invalid JSON: %s (line %d)", source, jerr.text, jerr.line);
    em_status s = parse_fields(root, source, out);
    json_decref(root);
    if (s == EM_OK && !(out->source = em_strdup(source))) s = em_fail(EM_ERR_NOMEM, "out of memory");
    if (s != EM_OK) profile_clear(out);
    return s;
}

void profile_set_free(profile_set *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) profile_clear(&s->items[i]);
    free(s->items);
    free(s);
}

static em_status add(profile_set *s, size_t *cap, const char *text, size_t len, const char *source) {
    if (!em_grow((void **)&s->items, cap, s->n + 1, sizeof *s->items)) return em_fail(EM_ERR_NOMEM, "out of memory");
    EM_TRY(profile_parse(text, len, source, &s->items[s->n]));
    s->n++;
    return EM_OK;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static em_status list_json(const char *dir, char ***names, size_t *n) {
    DIR *d = opendir(dir);
    *names = NULL;
    *n = 0;
    if (!d) return em_fail(EM_ERR_IO, "%s: cannot open the profiles directory", dir);
    size_t cap = 0;
    em_status s = EM_OK;
    struct dirent *e;
    while (s == EM_OK && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || e->d_name[0] == '.' || strcmp(e->d_name + l - 5, ".json")) continue;
        if (!em_grow((void **)names, &cap, *n + 1, sizeof **names) || !((*names)[*n] = em_strdup(e->d_name)))
            s = em_fail(EM_ERR_NOMEM, "out of memory");
        else (*n)++;
    }
    closedir(d);
    if (*n) qsort(*names, *n, sizeof **names, name_cmp);
    return s;
}

static em_status load_dir(profile_set *s, size_t *cap, const char *dir) {
    char **names;
    size_t n;
    em_status st = list_json(dir, &names, &n);
    for (size_t i = 0; st == EM_OK && i < n; i++) {
        char *path = em_path_join(dir, names[i]), *text = NULL;
        size_t len;
        st = path ? em_read_file(path, 1u << 20, &text, &len) : em_fail(EM_ERR_NOMEM, "out of memory");
        if (st == EM_OK) st = add(s, cap, text, len, path);
        free(text);
        free(path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

em_status profile_set_load(const char *dir, profile_set **out) {
    *out = NULL;
    profile_set *s = em_calloc(1, sizeof *s);
    if (!s) return em_fail(EM_ERR_NOMEM, "out of memory");
    size_t cap = 0;
    em_status st = EM_OK;
    for (size_t i = 0; st == EM_OK && i < sizeof builtin / sizeof builtin[0]; i++)
        st = add(s, &cap, builtin[i], strlen(builtin[i]), "built-in");
    if (st == EM_OK && dir && *dir) st = load_dir(s, &cap, dir);
    if (st != EM_OK) {
        profile_set_free(s);
        return st;
    }
    *out = s;
    return EM_OK;
}
