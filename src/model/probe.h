/* probe.h — what can be learned about a model directory from its headers
 * alone (config.json, safetensors headers, tokenizer_config.json), without
 * reading weights: for `ember inspect` and `ember ls`. Each part records
 * its own failure, so a model ember cannot run is still described. */
#ifndef EMBER_MODEL_PROBE_H
#define EMBER_MODEL_PROBE_H

#include "model/model.h"

typedef struct model_probe {
    char model_type[64];      /* as written in config.json ("" if unreadable) */
    char architecture[64];
    bool config_ok;
    model_config cfg;         /* valid when config_ok */
    st_set *st;               /* owned; NULL when the weights did not open */
    bool identity_ok;         /* fingerprints computed and an implementation chosen */
    model_identity id;        /* fingerprints valid whenever st opened */
    char quant[64];           /* "4-bit affine, group 64", or "" */
    int quant_bits, quant_group;
    uint64_t n_params;        /* logical parameters (packed ones unpacked) */
    char error[768];          /* the first failure, when something failed */
} model_probe;

/* Fills *p for dir. Returns EM_OK when the model can run (config parsed,
 * weights opened, an implementation chosen); otherwise the status of the
 * first failure, whose message is also in p->error. profiles_dir may be
 * NULL. Release with model_probe_close. */
em_status model_probe_open(const char *dir, const char *profiles_dir, model_probe *p);
void model_probe_close(model_probe *p);

#endif
