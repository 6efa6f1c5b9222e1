/* backend_open.c — choosing a backend from a device string ("cpu",
 * "cuda", "cuda:N"). CUDA support is decided when ember is built: without
 * it, asking for a GPU is an error that says so, never a silent CPU run. */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

#ifdef EMBER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

em_status em_device_parse(const char *device, bool *cuda, int *index) {
    *cuda = false;
    *index = 0;
    if (!device || !*device || !strcmp(device, "cpu")) return EM_OK;
    if (strncmp(device, "cuda", 4))
        return em_fail(EM_ERR_INVALID, "device %s: expected cpu, cuda or cuda:N", device);
    *cuda = true;
    const char *p = device + 4;
    if (!*p) return EM_OK;
    if (*p != ':' || !p[1]) return em_fail(EM_ERR_INVALID, "device %s: expected cpu, cuda or cuda:N", device);
    char *end;
    long n = strtol(p + 1, &end, 10);
    if (*end || n < 0 || n > 255 || p[1] < '0' || p[1] > '9')
        return em_fail(EM_ERR_INVALID, "device %s: the GPU number must be an integer in [0, 255]", device);
    *index = (int)n;
    return EM_OK;
}

em_status em_backend_open(const char *device, int n_threads, em_backend **out) {
    bool cuda;
    int index;
    *out = NULL;
    EM_TRY(em_device_parse(device, &cuda, &index));
    if (!cuda) return cpu_backend_create(n_threads, out);
#ifdef EMBER_HAVE_CUDA
    return cuda_backend_create(index, out);
#else
    return em_fail(EM_ERR_UNSUPPORTED, "device %s: this ember was built without CUDA (rebuild with -DEMBER_CUDA=ON)",
                   device);
#endif
}

em_status em_device_memory(const char *device, size_t *free_bytes, size_t *total_bytes) {
    bool cuda;
    int index;
    *free_bytes = *total_bytes = 0;
    EM_TRY(em_device_parse(device, &cuda, &index));
    if (!cuda) return em_fail(EM_ERR_UNSUPPORTED, "device %s has no memory of its own", device ? device : "cpu");
#ifdef EMBER_HAVE_CUDA
    return cuda_device_memory(index, free_bytes, total_bytes);
#else
    return em_fail(EM_ERR_UNSUPPORTED, "device %s: this ember was built without CUDA (rebuild with -DEMBER_CUDA=ON)",
                   device);
#endif
}

void em_backend_free(em_backend *be) {
    if (be) be->ops->destroy(be);
}
