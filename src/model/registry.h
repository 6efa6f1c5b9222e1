/* registry.h — the implementations ember has, and the choice of one for a
 * model.
 *
 * An implementation declares its graph (the family code that computes the
 * model), its loader (which weight formats it binds), its generation loop,
 * the specializations it provides, and the family operations that construct
 * and run the model. registry_select finds the profile that covers a model
 * and the implementation that realises that profile, validating the profile
 * every time: a profile whose named implementation is missing or does not
 * fit (another graph, loop or specialization, weights its loader cannot
 * bind, a model its graph does not compute) is an error that says so, never
 * a silent fall-back to another numerical path. */
#ifndef EMBER_MODEL_REGISTRY_H
#define EMBER_MODEL_REGISTRY_H

#include "io/model_config.h"
#include "model/model.h"
#include "model/profile.h"

/* Weight formats a loader binds. */
enum { IMPL_W_FLOAT = 1u << 0, /* F32 / F16 / BF16 tensors, in place */
       IMPL_W_AFFINE = 1u << 1 /* MLX affine quantization (packed U32 + scales, biases) */ };

typedef struct em_impl {
    const char *name;
    const char *graph;                   /* "dense", "qwen3_5" */
    model_family family;                 /* the configs the graph computes */
    const char *loader;
    unsigned weight_formats;             /* IMPL_W_* the loader binds */
    const char *loop;                    /* "autoregressive" */
    const char *const *specializations;  /* NULL-ended */
    const family_ops *ops;               /* constructs (load) and runs the model */
} em_impl;

/* What the selection looks at besides the config. */
typedef struct registry_query {
    const model_config *cfg;
    const char *artifact_fp;
    const char *config_fp;
    unsigned weight_formats; /* IMPL_W_* the checkpoint uses */
} registry_query;

typedef struct registry_choice {
    const em_impl *impl;
    const profile *profile; /* owned by the profile set */
    char why[512];          /* which profile matched and how, for inspect */
} registry_choice;

size_t registry_count(void);
const em_impl *registry_at(size_t i);
const em_impl *registry_find(const char *name);

/* The weight formats a checkpoint's tensors use (IMPL_W_*). */
unsigned registry_weight_formats(const st_set *st);

/* Chooses the implementation for q among the profiles of ps. An exact
 * profile (fingerprints) wins over an architecture profile; among equals, a
 * profile from a file wins over a built-in one; two files matching equally
 * are ambiguous (an error naming both). */
em_status registry_select(const registry_query *q, const profile_set *ps, registry_choice *out);

/* Fingerprints dir's config.json and st's headers, loads the profiles
 * (built in + profiles_dir, which may be NULL or empty) and selects. The
 * fingerprints are filled even when the selection fails. */
em_status registry_identify(const char *dir, const model_config *cfg, const st_set *st, const char *profiles_dir,
                            model_identity *out);

#endif
