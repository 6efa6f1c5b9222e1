/* fingerprint.h — stable identities of a checkpoint, for profiles and
 * `ember inspect`.
 *
 * config fingerprint: SHA-256 of config.json reduced to the fields that
 *   shape the computation, canonicalised (keys sorted, numbers in one form),
 *   so key order, formatting, and fields such as transformers_version,
 *   _name_or_path, torch_dtype or use_cache do not change it.
 * artifact fingerprint: SHA-256 over the safetensors headers — every
 *   tensor's name, dtype and shape, sorted by name — plus the quantization
 *   settings of config.json and the files' __metadata__ (weight transforms),
 *   so re-sharding or re-ordering a checkpoint keeps it, and any change of
 *   layout, dtype or quantization changes it.
 * Both are shown as the first FP_HEX hex digits of the digest. */
#ifndef EMBER_MODEL_FINGERPRINT_H
#define EMBER_MODEL_FINGERPRINT_H

#include "base/status.h"
#include "io/safetensors.h"

#include <stddef.h>

#define FP_HEX 16

/* The canonical form hashed for the config fingerprint (malloc'd, owned by
 * the caller). `path` names the file in errors. */
em_status fingerprint_config_canonical(const char *json_text, size_t len, const char *path, char **out);
em_status fingerprint_config(const char *json_text, size_t len, const char *path, char out[FP_HEX + 1]);
/* config_text: the model's config.json (for its quantization settings). */
em_status fingerprint_artifact(const st_set *st, const char *config_text, size_t config_len, char out[FP_HEX + 1]);

#endif
