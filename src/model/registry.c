/* registry.c — the implementation table and the selection of one for a
 * model through its profile. Adding an implementation is one entry in
 * `impls`; covering a new architecture is a profile (profile.c). */
#include "model/registry.h"

#include "base/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const generic_only[] = {"generic", NULL};

static const em_impl impls[] = {
    {.name = "dense", .graph = "dense", .family = FAMILY_DENSE, .loader = "safetensors",
     .weight_formats = IMPL_W_FLOAT, .loop = "autoregressive", .specializations = generic_only,
     .ops = &dense_family},
    {.name = "qwen3_5", .graph = "qwen3_5", .family = FAMILY_QWEN3_5, .loader = "safetensors",
     .weight_formats = IMPL_W_FLOAT, .loop = "autoregressive", .specializations = generic_only,
     .ops = &qwen3_5_family},
};

size_t registry_count(void) { return sizeof impls / sizeof impls[0]; }
const em_impl *registry_at(size_t i) { return i < registry_count() ? &impls[i] : NULL; }

const em_impl *registry_find(const char *name) {
    for (size_t i = 0; i < registry_count(); i++)
        if (!strcmp(impls[i].name, name)) return &impls[i];
    return NULL;
}

unsigned registry_weight_formats(const st_set *st) {
    unsigned f = 0;
    for (size_t i = 0; i < st_count(st); i++) {
        em_dtype d = st_at(st, i)->dtype;
        if (d == EM_U32) f |= IMPL_W_AFFINE;
        else if (d == EM_F32 || d == EM_F16 || d == EM_BF16) f |= IMPL_W_FLOAT;
    }
    return f;
}

static const char *family_name(model_family f) {
    switch (f) {
    case FAMILY_DENSE: return "dense";
    case FAMILY_QWEN3_5: return "qwen3_5";
    }
    return "?";
}

/* Match strength: 0 none, 1 architecture, 2 exact. */
static int match_of(const profile *p, const registry_query *q) {
    if (p->exact) return !strcmp(p->artifact_fp, q->artifact_fp) && !strcmp(p->config_fp, q->config_fp) ? 2 : 0;
    for (size_t i = 0; i < p->n_archs; i++)
        if (!strcmp(p->archs[i], q->cfg->architecture)) return 1;
    return 0;
}

static bool builtin(const profile *p) { return !strcmp(p->source, "built-in"); }

static em_status find_profile(const registry_query *q, const profile_set *ps, const profile **out) {
    const profile *best = NULL;
    int best_m = 0;
    for (size_t i = 0; i < ps->n; i++) {
        const profile *p = &ps->items[i];
        int m = match_of(p, q);
        if (!m || m < best_m) continue;
        if (m > best_m || (builtin(best) && !builtin(p))) {
            best = p;
            best_m = m;
        } else if (!builtin(p) && !builtin(best)) {
            return em_fail(EM_ERR_INVALID, "profiles %s (%s) and %s (%s) both match %s; remove one", best->source,
                           best->name, p->source, p->name, q->cfg->architecture);
        }
    }
    if (!best)
        return em_fail(EM_ERR_UNSUPPORTED, "no profile covers architecture %s (config %s, artifact %s); "
                       "`ember inspect` shows the fingerprints, docs/profiles.md how to add a profile",
                       q->cfg->architecture, q->config_fp, q->artifact_fp);
    *out = best;
    return EM_OK;
}

static bool has_spec(const em_impl *im, const char *spec) {
    for (const char *const *s = im->specializations; s && *s; s++)
        if (!strcmp(*s, spec)) return true;
    return false;
}

/* Why im cannot realise profile p for q, into why; true when it can. */
static bool fits(const em_impl *im, const profile *p, const registry_query *q, char *why, size_t cap) {
    if (strcmp(im->graph, p->graph))
        snprintf(why, cap, "its graph is %s, the profile asks for %s", im->graph, p->graph);
    else if (im->family != q->cfg->family)
        snprintf(why, cap, "graph %s computes the %s family, the model (%s) is %s", im->graph, family_name(im->family),
                 q->cfg->model_type, family_name(q->cfg->family));
    else if (strcmp(im->loop, p->loop))
        snprintf(why, cap, "its generation loop is %s, the profile asks for %s", im->loop, p->loop);
    else if (!has_spec(im, p->specialization))
        snprintf(why, cap, "it has no specialization %s", p->specialization);
    else if (q->weight_formats & ~im->weight_formats)
        snprintf(why, cap, "its loader %s cannot bind %s weights", im->loader,
                 (q->weight_formats & ~im->weight_formats) & IMPL_W_AFFINE ? "affine-quantized" : "these");
    else
        return true;
    return false;
}

em_status registry_select(const registry_query *q, const profile_set *ps, registry_choice *out) {
    memset(out, 0, sizeof *out);
    const profile *p = NULL;
    EM_TRY(find_profile(q, ps, &p));
    char why[256];
    const em_impl *im = NULL;
    if (p->implementation) {
        im = registry_find(p->implementation);
        if (!im)
            return em_fail(EM_ERR_UNSUPPORTED, "%s: profile %s declares implementation %s, which this build does not have",
                           p->source, p->name, p->implementation);
        if (!fits(im, p, q, why, sizeof why))
            return em_fail(EM_ERR_UNSUPPORTED, "%s: profile %s declares implementation %s, which cannot run it: %s",
                           p->source, p->name, im->name, why);
    } else {
        for (size_t i = 0; i < registry_count() && !im; i++)
            if (fits(&impls[i], p, q, why, sizeof why)) im = &impls[i];
        if (!im) {
            /* Report against the implementation of the profile's graph when
             * there is one: that is the reason a reader can act on. */
            const em_impl *g = NULL;
            for (size_t i = 0; i < registry_count() && !g; i++)
                if (!strcmp(impls[i].graph, p->graph)) g = &impls[i];
            if (!g)
                return em_fail(EM_ERR_UNSUPPORTED, "%s: profile %s asks for graph %s, which this build does not have",
                               p->source, p->name, p->graph);
            fits(g, p, q, why, sizeof why);
            return em_fail(EM_ERR_UNSUPPORTED, "%s: profile %s (graph %s, loop %s, specialization %s): no implementation "
                           "can run %s: %s: %s", p->source, p->name, p->graph, p->loop, p->specialization,
                           q->cfg->architecture, g->name, why);
        }
    }
    out->impl = im;
    out->profile = p;
    if (p->exact)
        snprintf(out->why, sizeof out->why, "profile %s (%s) matches this exact artifact %s and config %s%s", p->name,
                 p->source, p->artifact_fp, p->config_fp, p->implementation ? " and names its implementation" : "");
    else
        snprintf(out->why, sizeof out->why, "profile %s (%s) covers architecture %s: graph %s, loop %s, specialization %s",
                 p->name, p->source, q->cfg->architecture, p->graph, p->loop, p->specialization);
    return EM_OK;
}

em_status registry_identify(const char *dir, const model_config *cfg, const st_set *st, const char *profiles_dir,
                            model_identity *out) {
    memset(out, 0, sizeof *out);
    char *path = em_path_join(dir, "config.json"), *text = NULL;
    size_t len = 0;
    if (!path) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = em_read_file(path, 16u << 20, &text, &len);
    if (s == EM_OK) s = fingerprint_config(text, len, path, out->config_fp);
    if (s == EM_OK) s = fingerprint_artifact(st, text, len, out->artifact_fp);
    free(text);
    free(path);
    EM_TRY(s);
    profile_set *ps;
    EM_TRY(profile_set_load(profiles_dir, &ps));
    registry_query q = {cfg, out->artifact_fp, out->config_fp, registry_weight_formats(st)};
    registry_choice c;
    s = registry_select(&q, ps, &c);
    if (s == EM_OK) {
        out->impl = c.impl;
        memcpy(out->why, c.why, sizeof out->why);
    }
    profile_set_free(ps);
    return s;
}
