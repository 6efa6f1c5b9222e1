/* source.h — a checkpoint seen as logical float tensors, for the quantizer:
 * a quantized module's packed weight, scales and biases appear as one
 * [rows, cols] tensor `<module>.weight` that reads back dequantized. */
#ifndef EMBER_QUANT_SOURCE_H
#define EMBER_QUANT_SOURCE_H

#include "io/model_config.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

typedef struct qsrc_tensor {
    const char *name;        /* owned by the st_set */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const st_tensor *t;      /* the stored tensor (packed when quantized) */
    int bits, group;         /* > 0: quantized module */
    const st_tensor *scales, *biases;
} qsrc_tensor;

typedef struct qsrc {
    char *dir;
    st_set *st;
    quant_config qc;
    json_t *config;          /* config.json, parsed */
    model_config cfg;        /* when the family parser knows it (cfg_ok) */
    bool cfg_ok;
    em_dtype float_dtype;    /* dtype of the float tensors (BF16, F16, F32) */
    qsrc_tensor *tensors;    /* logical tensors in checkpoint order */
    size_t n;
} qsrc;

/* Opens DIR. Quantized modules are validated like the loader does. */
em_status qsrc_open(const char *dir, qsrc *out);
void qsrc_close(qsrc *s);
const qsrc_tensor *qsrc_find(const qsrc *s, const char *name);
/* Reads the tensor as f32 (dequantized when quantized) into out, which holds
 * its element count. */
em_status qsrc_read(const qsrc *s, const qsrc_tensor *t, float *out);
uint64_t qsrc_elements(const qsrc_tensor *t);

#endif
