/* fit_internal.h — what the CPU (fit.c) and GPU (fit_cuda.c) memory
 * predictions share: the graph's shape numbers from config.json. */
#ifndef EMBER_MODEL_FIT_INTERNAL_H
#define EMBER_MODEL_FIT_INTERNAL_H

#include "io/model_config.h"
#include "model/fit.h"

/* Shape numbers of the graph, from config.json (Qwen3.5 hybrids keep theirs
 * in text_config and add the linear-attention fields). */
typedef struct fit_shape {
    int hidden, inter, layers, heads, kv_heads, head_dim, vocab, max_pos;
    bool tied;
    uint64_t embed_bytes, embed_row; /* the embedding table, when untied */
    uint64_t largest; /* bytes of the largest tensor but an untied embedding */
    int kv_layers, state_layers;
    uint64_t state_per_seq;
    /* Qwen3.5 hybrids on the GPU (fit_cuda.c): the Gated DeltaNet layers'
     * channels (q, k and v of the convolution), value width and value
     * heads, and the MTP head's KV layers that the cache holds beside the
     * trunk's */
    int lin_channels, lin_vd, lin_hv, mtp_kv_layers;
    bool layer_linear[MC_MAX_LAYERS];
} fit_shape;

em_status fit_read_shape(const char *dir, fit_shape *s);
/* The GPU prediction (fit_cuda.c); fit_predict calls it for r->cuda. */
em_status fit_predict_cuda(const char *dir, const fit_request *r, fit_result *o);

#endif
