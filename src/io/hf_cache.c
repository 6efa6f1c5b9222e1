/* hf_cache.c — listing the Hugging Face hub cache and resolving names. */
#include "io/hf_cache.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/file.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

em_status hf_cache_dir(char **out) {
    const em_config *c = em_config_global();
    const char *hub = em_config_str(c, EMC_HF_HUB_CACHE), *home = em_config_str(c, EMC_HF_HOME);
    const char *xdg = em_config_str(c, EMC_XDG_CACHE_HOME), *user = em_config_str(c, EMC_HOME);
    char buf[4096];
    if (*hub) snprintf(buf, sizeof buf, "%s", hub);
    else if (*home) snprintf(buf, sizeof buf, "%s/hub", home);
    else if (*xdg) snprintf(buf, sizeof buf, "%s/huggingface/hub", xdg);
    else if (*user) snprintf(buf, sizeof buf, "%s/.cache/huggingface/hub", user);
    else return em_fail(EM_ERR_IO, "cannot locate the Hugging Face cache: HF_HOME and HOME are unset");
    *out = em_strdup(buf);
    return *out ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
}

void hf_models_free(hf_model *m, size_t n) {
    for (size_t i = 0; m && i < n; i++) {
        free(m[i].repo);
        free(m[i].dir);
        free(m[i].revision);
    }
    free(m);
}

/* a/b/c into a malloc'd string; NULL on OOM. */
static char *join3(const char *a, const char *b, const char *c) {
    char *ab = em_path_join(a, b), *abc = ab && c ? em_path_join(ab, c) : NULL;
    if (!c) return ab;
    free(ab);
    return abc;
}

/* refs/main, trimmed, when it names an existing snapshot. */
static bool ref_main(const char *model_dir, char *rev, size_t cap) {
    char *path = join3(model_dir, "refs", "main"), *text = NULL;
    size_t len;
    bool ok = path && em_file_exists(path) && em_read_file(path, 256, &text, &len) == EM_OK;
    free(path);
    if (!ok) return false;
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\r')) text[--len] = 0;
    ok = len && len < cap && !strchr(text, '/');
    if (ok) {
        memcpy(rev, text, len + 1);
        char *snap = join3(model_dir, "snapshots", rev);
        ok = snap && em_dir_exists(snap);
        free(snap);
    }
    free(text);
    return ok;
}

static bool newest_snapshot(const char *model_dir, char *rev, size_t cap) {
    char *path = em_path_join(model_dir, "snapshots");
    DIR *d = path ? opendir(path) : NULL;
    if (!d) {
        free(path);
        return false;
    }
    struct dirent *e;
    time_t best = 0;
    bool found = false;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= cap) continue;
        char *sub = em_path_join(path, e->d_name);
        struct stat st;
        bool is_dir = sub && !stat(sub, &st) && S_ISDIR(st.st_mode);
        free(sub);
        if (!is_dir) continue;
        if (!found || st.st_mtime > best || (st.st_mtime == best && strcmp(e->d_name, rev) < 0)) {
            best = st.st_mtime;
            snprintf(rev, cap, "%s", e->d_name);
            found = true;
        }
    }
    closedir(d);
    free(path);
    return found;
}

static uint64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = em_path_join(dir, e->d_name);
        struct stat st;
        /* a dangling link (an interrupted download) counts nothing */
        if (p && !stat(p, &st)) {
            if (S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
            else if (S_ISDIR(st.st_mode)) total += dir_bytes(p);
        }
        free(p);
    }
    closedir(d);
    return total;
}

/* "models--org--name" → "org/name" (only the first "--" separates). */
static char *repo_of(const char *entry) {
    const char *rest = entry + strlen("models--");
    const char *sep = strstr(rest, "--");
    char *r = em_strdup(rest);
    if (r && sep) {
        size_t at = (size_t)(sep - rest);
        r[at] = '/';
        memmove(r + at + 1, r + at + 2, strlen(r + at + 2) + 1);
    }
    return r;
}

static int repo_cmp(const void *a, const void *b) { return strcmp(((const hf_model *)a)->repo, ((const hf_model *)b)->repo); }

static em_status add_model(const char *hub, const char *entry, hf_model **out, size_t *n, size_t *cap) {
    char rev[256];
    char *model_dir = em_path_join(hub, entry);
    if (!model_dir) return em_fail(EM_ERR_NOMEM, "out of memory");
    if (!ref_main(model_dir, rev, sizeof rev) && !newest_snapshot(model_dir, rev, sizeof rev)) {
        free(model_dir);
        return EM_OK; /* nothing downloaded yet */
    }
    if (!em_grow((void **)out, cap, *n + 1, sizeof **out)) {
        free(model_dir);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    hf_model *m = &(*out)[*n];
    char *snap = join3(model_dir, "snapshots", rev);
    free(model_dir);
    *m = (hf_model){repo_of(entry), snap, em_strdup(rev), snap ? dir_bytes(snap) : 0};
    (*n)++;
    return m->repo && m->dir && m->revision ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
}

em_status hf_cache_list(const char *hub, hf_model **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(hub);
    if (!d) return EM_OK;
    size_t cap = 0;
    em_status s = EM_OK;
    struct dirent *e;
    while (s == EM_OK && (e = readdir(d)))
        if (!strncmp(e->d_name, "models--", 8) && e->d_name[8]) s = add_model(hub, e->d_name, out, n, &cap);
    closedir(d);
    if (s != EM_OK) {
        hf_models_free(*out, *n);
        *out = NULL;
        *n = 0;
        return s;
    }
    if (*n) qsort(*out, *n, sizeof **out, repo_cmp);
    return EM_OK;
}

static bool contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n)) return true;
    return false;
}

static const char *name_part(const char *repo) {
    const char *s = strchr(repo, '/');
    return s ? s + 1 : repo;
}

/* Indexes of models matching by rule: 0 repo equal, 1 name equal, 2 substring. */
static size_t matches(const hf_model *m, size_t n, const char *arg, int rule, size_t *idx) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool hit = rule == 0 ? !strcasecmp(m[i].repo, arg)
                 : rule == 1 ? !strcasecmp(name_part(m[i].repo), arg)
                             : contains_ci(m[i].repo, arg);
        if (hit) idx[k++] = i;
    }
    return k;
}

em_status hf_resolve_in(const char *hub, const char *arg, char **dir_out) {
    *dir_out = NULL;
    hf_model *m;
    size_t n;
    EM_TRY(hf_cache_list(hub, &m, &n));
    size_t *idx = em_mallocn(n ? n : 1, sizeof *idx), k = 0;
    em_status s = idx ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
    for (int rule = 0; s == EM_OK && rule < 3 && !k; rule++) k = matches(m, n, arg, rule, idx);
    if (s != EM_OK) {
    } else if (k == 1) {
        if (!(*dir_out = em_strdup(m[idx[0]].dir))) s = em_fail(EM_ERR_NOMEM, "out of memory");
    } else if (k == 0) {
        s = em_fail(EM_ERR_IO, "%s: not a model directory, and no model in the Hugging Face cache (%s) matches it "
                    "(`ember ls` lists them)", arg, hub);
    } else {
        char list[1024];
        size_t o = 0;
        for (size_t i = 0; i < k && o < sizeof list - 64; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", m[idx[i]].repo);
        if (o >= sizeof list - 64) snprintf(list + o, sizeof list - o, ", ...");
        s = em_fail(EM_ERR_INVALID, "%s matches %zu cached models: %s; give more of the name", arg, k, list);
    }
    free(idx);
    hf_models_free(m, n);
    return s;
}

em_status hf_resolve_model(const char *arg, char **dir_out) {
    *dir_out = NULL;
    if (!arg || !*arg) return em_fail(EM_ERR_INVALID, "no model given");
    if (em_dir_exists(arg) || strchr(arg, '/') == arg || !strncmp(arg, "./", 2) || !strncmp(arg, "../", 3)) {
        /* A path: taken as written (a missing one fails when opened, with its name). */
        if (!(*dir_out = em_strdup(arg))) return em_fail(EM_ERR_NOMEM, "out of memory");
        return EM_OK;
    }
    char *hub;
    EM_TRY(hf_cache_dir(&hub));
    em_status s = hf_resolve_in(hub, arg, dir_out);
    free(hub);
    return s;
}
