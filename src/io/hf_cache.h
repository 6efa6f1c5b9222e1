/* hf_cache.h — models in the Hugging Face cache, and MODEL arguments that
 * name one.
 *
 * The cache ($HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub) holds
 * models--ORG--NAME/snapshots/REV/ directories whose files are symlinks into
 * ../../blobs/. A model's snapshot is the revision refs/main names, else the
 * most recently modified one. */
#ifndef EMBER_IO_HF_CACHE_H
#define EMBER_IO_HF_CACHE_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hf_model {
    char *repo;     /* "org/name" */
    char *dir;      /* the snapshot directory */
    char *revision;
    uint64_t bytes; /* size of the snapshot's files (blobs, links followed) */
} hf_model;

/* The hub cache directory from the process configuration (malloc'd, owned
 * by the caller); EM_ERR_IO when no home can be determined. */
em_status hf_cache_dir(char **out);
/* Models under hub, sorted by repo. A missing hub is an empty list. *out
 * is owned by the caller (hf_models_free). */
em_status hf_cache_list(const char *hub, hf_model **out, size_t *n);
void hf_models_free(hf_model *m, size_t n);

/* MODEL argument → directory: an existing directory is taken as is;
 * otherwise a cached model whose repo equals arg, or whose name part equals
 * it, or — when exactly one does — contains it (case-insensitive). No match
 * is EM_ERR_IO; several are EM_ERR_INVALID with the candidates listed.
 * *dir_out is malloc'd, owned by the caller. */
em_status hf_resolve_model(const char *arg, char **dir_out);
/* The same, within a given hub directory. */
em_status hf_resolve_in(const char *hub, const char *arg, char **dir_out);

#endif
