/* cuda_blas.cu — opening cuBLAS at run time.
 *
 * The library is looked up by its soname (the loader's search path), then
 * at the toolkit path recorded when ember was built. */
#include "backend/cuda/cuda_internal.cuh"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define EM_STR2(x) #x
#define EM_STR(x) EM_STR2(x)
#define CUBLAS_SONAME "libcublas.so." EM_STR(CUBLAS_VER_MAJOR)

template <typename F> static bool sym(void *lib, const char *name, F *out) {
    *out = (F)dlsym(lib, name);
    return *out != nullptr;
}

bool cuda_blas_open(cuda_blas *b, char *why, size_t cap) {
    memset(b, 0, sizeof *b);
    const char *names[] = {CUBLAS_SONAME,
#ifdef EMBER_CUBLAS_PATH
                           EMBER_CUBLAS_PATH,
#endif
                           "libcublas.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !b->lib; i++) b->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!b->lib) {
        snprintf(why, cap, "cannot load cuBLAS (%s): %s", CUBLAS_SONAME, dlerror());
        return false;
    }
    if (!sym(b->lib, "cublasCreate_v2", &b->create) || !sym(b->lib, "cublasDestroy_v2", &b->destroy) ||
        !sym(b->lib, "cublasSetStream_v2", &b->set_stream) || !sym(b->lib, "cublasSetMathMode", &b->set_math_mode) ||
        !sym(b->lib, "cublasSgemm_v2", &b->sgemm) || !sym(b->lib, "cublasGemmEx", &b->gemm_ex)) {
        snprintf(why, cap, "%s lacks a function ember needs: %s", CUBLAS_SONAME, dlerror());
        cuda_blas_close(b);
        return false;
    }
    sym(b->lib, "cublasSetWorkspace_v2", &b->set_workspace); /* optional */
    return true;
}

void cuda_blas_close(cuda_blas *b) {
    if (b->lib) dlclose(b->lib);
    memset(b, 0, sizeof *b);
}
