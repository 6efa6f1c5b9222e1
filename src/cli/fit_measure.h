/* fit_measure.h — measuring what `ember fit` predicts (fit_measure.c). */
#ifndef EMBER_CLI_FIT_MEASURE_H
#define EMBER_CLI_FIT_MEASURE_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct fit_measured {
    bool cuda;
    uint64_t peak;          /* cpu: peak resident set; cuda: device memory taken
                               after this process's CUDA context was made */
    uint64_t in_use_before; /* cuda: memory in use before loading (this context,
                               other processes) */
    uint64_t device_total;  /* cuda: the GPU's memory */
} fit_measured;

/* Opens dir on device with ctx positions for each of batch sequences (the
 * precision FAST or EXACT), prefills them all and decodes one step, and
 * measures the peak. Errors: the model's own, or a device that is not
 * there (EM_ERR_UNSUPPORTED). */
em_status fit_measure(const char *dir, const char *device, int ctx, int batch, int threads, bool fast,
                      fit_measured *out);

#endif
