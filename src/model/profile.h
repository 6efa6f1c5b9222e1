/* profile.h — model profiles: which models a profile covers and how they
 * are executed.
 *
 * A profile names models either by architecture (config.json
 * "architectures"[0]) or exactly, by artifact + config fingerprint, and
 * gives their execution composition: graph, generation loop, specialization
 * and — only for an exact match — a named implementation. Profiles ship
 * built in (profile.c) and can be added as *.json files in a directory
 * (--profiles DIR, EMBER_PROFILES_DIR). docs/profiles.md has the format. */
#ifndef EMBER_MODEL_PROFILE_H
#define EMBER_MODEL_PROFILE_H

#include "base/status.h"
#include "model/fingerprint.h"

#include <stdbool.h>
#include <stddef.h>

#define PROFILE_MAX_ARCHS 16

typedef struct profile {
    char *name;
    char *source;                       /* file path, or "built-in" */
    char *archs[PROFILE_MAX_ARCHS];     /* match by architecture ... */
    size_t n_archs;
    bool exact;                         /* ... or exactly by fingerprints */
    char artifact_fp[FP_HEX + 1];
    char config_fp[FP_HEX + 1];
    char *graph;
    char *loop;
    char *specialization;
    char *implementation;               /* NULL: chosen by graph/loop/specialization */
} profile;

typedef struct profile_set {
    profile *items;
    size_t n;
} profile_set;

/* Parses one profile. A malformed profile is EM_ERR_FORMAT naming `source`
 * and the field. On success *out owns its strings (profile_clear). */
em_status profile_parse(const char *json_text, size_t len, const char *source, profile *out);
void profile_clear(profile *p);

/* The built-in profiles, then every *.json in dir (sorted by name) when dir
 * is non-empty. A file that does not parse fails the whole load with its
 * path and field. *out is owned by the caller (profile_set_free). */
em_status profile_set_load(const char *dir, profile_set **out);
void profile_set_free(profile_set *s);

#endif
