/* cuda_backend.cu — the CUDA backend's life cycle and memory: device
 * selection, the stream and cuBLAS handle, allocation, transfers, the
 * staging arena for per-call host arrays, and the operation table. */
#include "backend/cuda/cuda_internal.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
}

#define STAGE_MIN_BYTES CUDA_STAGE_MIN_BYTES

cuda_backend *cuda_enter(em_backend *be) {
    cuda_backend *cb = (cuda_backend *)be->impl;
    cuda_note(cb, cudaSetDevice(cb->device), "selecting the device");
    cb->op_seq++; /* ends any earlier operation's bf16 twin (cuda_twin_ready) */
    return cb;
}

bool cuda_pdl_allowed = false;
thread_local bool cuda_pdl_now = false;

static bool scratch_grow(cuda_backend *cb, void **buf, size_t *cap, size_t bytes, bool recorded, bool note) {
    if (bytes <= *cap) return true;
    /* Recorded steps name the old buffer, and a replay's argument check
     * cannot see it (the scratch is not an argument): forget them all. A
     * step being recorded right now may have captured kernels that use the
     * old buffer before this operation, the first decode step of a batch
     * whose head is its largest product: that recording is dropped too (the
     * step then runs without a graph, and the next one records with the
     * buffer at its new size). */
    if (recorded && cb->graphs.n) {
        EM_LOGD("cuda:%d: a scratch buffer grows to %zu bytes: %d recorded steps forgotten", cb->device, bytes,
                cb->graphs.n);
        cuda_graphs_free(cb);
    }
    if (recorded && cb->graphs.mode == EM_GRAPH_RECORD) cb->graphs.broken = true;
    if (*buf) cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    size_t want = cuda_scratch_grow(bytes);
    cudaError_t e = cudaMalloc(buf, want);
    if (e != cudaSuccess) {
        *buf = NULL;
        if (note) cuda_note(cb, e, "allocating matmul scratch");
        else (void)cudaGetLastError(); /* a failed allocation is not sticky: leave no error for the next check */
        return false;
    }
    *cap = want;
    return true;
}

bool cuda_scratch(cuda_backend *cb, void **buf, size_t *cap, size_t bytes) {
    return scratch_grow(cb, buf, cap, bytes, true, true);
}

bool cuda_scratch_eager(cuda_backend *cb, void **buf, size_t *cap, size_t bytes) {
    return scratch_grow(cb, buf, cap, bytes, false, true);
}

bool cuda_scratch_try(cuda_backend *cb, void **buf, size_t *cap, size_t bytes) {
    return scratch_grow(cb, buf, cap, bytes, false, false);
}

/* ---- staging arena ---- */

static void stage_rewind(cuda_stage *s) {
    s->used = s->flushed = 0;
    s->n_recent = s->next_recent = 0;
}

static void stage_free(cuda_stage *s) {
    if (s->host) cudaFreeHost(s->host);
    if (s->dev) cudaFree(s->dev);
    s->host = s->dev = NULL;
    s->cap = 0;
    stage_rewind(s);
}

static bool stage_alloc(cuda_backend *cb, size_t cap) {
    cuda_stage *s = &cb->stage;
    stage_free(s);
    cudaError_t e = cudaMallocHost((void **)&s->host, cap);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->dev, cap);
    if (e != cudaSuccess) {
        cuda_note(cb, e, "allocating the staging arena");
        stage_free(s);
        return false;
    }
    s->cap = cap;
    return true;
}

void cuda_stage_flush(cuda_backend *cb) {
    cuda_stage *s = &cb->stage;
    if (s->used <= s->flushed) return;
    if (cb->graphs.mode != EM_GRAPH_NONE) { /* the step's one recorded copy moves these bytes (cuda_graph.cu) */
        s->flushed = s->used;
        return;
    }
    cuda_note(cb,
              cudaMemcpyAsync(s->dev + s->flushed, s->host + s->flushed, s->used - s->flushed, cudaMemcpyHostToDevice,
                              cb->stream),
              "staging call arguments");
    s->flushed = s->used;
}

void cuda_stage_begin(cuda_backend *cb, size_t bytes, int count) {
    cuda_stage *s = &cb->stage;
    size_t need = bytes + (size_t)count * 16;
    if (s->host && s->used + need <= s->cap) return;
    if (cb->graphs.mode != EM_GRAPH_NONE) { /* draining would break the recording: run this step eagerly */
        cb->graphs.broken = true;
        return;
    }
    /* Full: drain the stream so the arena's bytes are no longer read. */
    cuda_stage_flush(cb);
    cuda_note(cb, cudaStreamSynchronize(cb->stream), "draining the stream");
    stage_rewind(s);
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : STAGE_MIN_BYTES;
        while (cap < need) cap *= 2;
        stage_alloc(cb, cap);
    }
}

const void *cuda_stage_put(cuda_backend *cb, const void *src, size_t n) {
    cuda_stage *s = &cb->stage;
    if (!s->host) return NULL;
    bool graph = cb->graphs.mode != EM_GRAPH_NONE;
    /* reuse depends on the bytes' values, which a recorded step must not */
    for (int i = 0; !graph && i < s->n_recent; i++)
        if (s->recent[i].bytes == n && !memcmp(s->host + s->recent[i].off, src, n)) return s->dev + s->recent[i].off;
    size_t a = (n + 15) & ~(size_t)15;
    if (s->used + a > s->cap) {
        if (graph) cb->graphs.broken = true;
        else cuda_note(cb, cudaErrorInvalidValue, "staging more than announced"); /* cuda_stage_begin was told less */
        return NULL;
    }
    if (graph) {
        cuda_graph_mix(cb, s->used);
        cuda_graph_mix(cb, n);
    }
    size_t off = s->used;
    if (n) memcpy(s->host + off, src, n);
    s->used += a;
    s->recent[s->next_recent].off = off;
    s->recent[s->next_recent].bytes = n;
    s->next_recent = (s->next_recent + 1) % CUDA_STAGE_RECENT;
    if (s->n_recent < CUDA_STAGE_RECENT) s->n_recent++;
    return s->dev + off;
}

void cuda_stage_reset(cuda_backend *cb) {
    cuda_stage_flush(cb);
    cuda_note(cb, cudaStreamSynchronize(cb->stream), "draining the stream");
    stage_rewind(&cb->stage);
}

const void *cuda_stage_table(cuda_backend *cb, const void *src, size_t n, size_t cap) {
    if (cap <= n) return cuda_stage_put(cb, src, n * sizeof(void *));
    cuda_stage *s = &cb->stage;
    if (!s->host) return NULL;
    size_t bytes = cap * sizeof(void *), a = (bytes + 15) & ~(size_t)15;
    if (s->used + a > s->cap) {
        if (cb->graphs.mode != EM_GRAPH_NONE) cb->graphs.broken = true;
        else cuda_note(cb, cudaErrorInvalidValue, "staging more than announced");
        return NULL;
    }
    if (cb->graphs.mode != EM_GRAPH_NONE) {
        cuda_graph_mix(cb, s->used);
        cuda_graph_mix(cb, bytes);
    }
    size_t off = s->used;
    if (n) memcpy(s->host + off, src, n * sizeof(void *));
    memset(s->host + off + n * sizeof(void *), 0, (cap - n) * sizeof(void *));
    s->used += a;
    return s->dev + off;
}

/* ---- memory ---- */

static void *cuda_alloc(em_backend *be, size_t bytes) {
    cuda_backend *cb = cuda_enter(be);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError(); /* an allocation failure is not sticky: do not let it blame a later launch */
        return NULL;
    }
    cuda_note(cb, cudaMemsetAsync(p, 0, bytes, cb->stream), "clearing an allocation");
    return p;
}

static void cuda_free(em_backend *be, void *p) {
    cuda_backend *cb = cuda_enter(be);
    if (p) cuda_note(cb, cudaFree(p), "freeing device memory");
}

static void *cuda_reserve(em_backend *be, size_t bytes) {
    cuda_enter(be);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void *cuda_host_alloc(em_backend *be, size_t bytes) {
    cuda_enter(be);
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(em_backend *be, void *p) {
    cuda_enter(be);
    if (p) cudaFreeHost(p);
}

static void cuda_release(em_backend *be, void *p, size_t bytes) {
    (void)bytes;
    cuda_free(be, p);
}

static em_status report(em_backend *be, const char *what) {
    cuda_backend *cb = (cuda_backend *)be->impl;
    if (cb->err != cudaSuccess)
        return em_fail(EM_ERR_INTERNAL, "%s: %s failed: %s (%s)", be->desc, cb->err_where ? cb->err_where : what,
                       cudaGetErrorString(cb->err), cudaGetErrorName(cb->err));
    if (cb->blas_err != CUBLAS_STATUS_SUCCESS)
        return em_fail(EM_ERR_INTERNAL, "%s: %s failed: cuBLAS status %d", be->desc,
                       cb->err_where ? cb->err_where : what, (int)cb->blas_err);
    return EM_OK;
}

static em_status cuda_upload(em_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = cuda_enter(be);
    /* From pageable memory the copy is staged before the call returns, so
     * src may be reused at once. */
    if (bytes) cuda_note(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream), "an upload");
    return report(be, "an upload");
}

static em_status cuda_download(em_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = cuda_enter(be);
    cuda_stage_flush(cb);
    if (bytes) cuda_note(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream), "a download");
    cuda_note(cb, cudaStreamSynchronize(cb->stream), "the queued operations");
    cuda_note(cb, cudaGetLastError(), "the queued operations");
    stage_rewind(&cb->stage); /* drained: the arena may be reused */
    return report(be, "a download");
}

static void cuda_copy(em_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = cuda_enter(be);
    if (cuda_graph_skip(cb, dst, src, bytes)) return;
    if (!bytes || dst == src) return;
    const char *d = (const char *)dst, *s = (const char *)src;
    if (d < s + bytes && s < d + bytes) { /* overlapping: through scratch */
        if (!cuda_scratch(cb, (void **)&cb->wide, &cb->wide_bytes, bytes)) return;
        cuda_note(cb, cudaMemcpyAsync(cb->wide, src, bytes, cudaMemcpyDeviceToDevice, cb->stream), "a copy");
        src = cb->wide;
    }
    cuda_note(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->stream), "a copy");
}

/* Block (x, y) copies every gridDim.x-th 16-byte word of copy y (bytes
 * at a time where a pointer or the size is not 16-byte aligned). */
__global__ void copy_many_kernel(void *const *dst, const void *const *src, size_t bytes) {
    cuda_pdl_enter();
    char *d = (char *)dst[blockIdx.y];
    const char *s = (const char *)src[blockIdx.y];
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    if ((((uintptr_t)d | (uintptr_t)s | bytes) & 15) == 0) {
        for (size_t i = t; i < bytes / 16; i += step) ((uint4 *)d)[i] = ((const uint4 *)s)[i];
    } else {
        for (size_t i = t; i < bytes; i += step) d[i] = s[i];
    }
}

static void cuda_copy_many(em_backend *be, int n, void *const *dst, const void *const *src, size_t bytes) {
    cuda_backend *cb = cuda_enter(be);
    if (n <= 0 || !bytes) return;
    if (cb->graphs.mode || n > 65535) { /* a recording keys its copies one by one */
        for (int i = 0; i < n; i++) cuda_copy(be, dst[i], src[i], bytes);
        return;
    }
    size_t pb = (size_t)n * sizeof(void *);
    cuda_stage_begin(cb, 2 * pb, 2);
    const void *dd = cuda_stage_put(cb, dst, pb), *ds = cuda_stage_put(cb, src, pb);
    if (!dd || !ds) return; /* noted */
    cuda_stage_flush(cb);
    size_t words = (bytes + 15) / 16;
    unsigned chunks = (unsigned)(words / 256 + 1 < 64 ? words / 256 + 1 : 64);
    cuda_launch(copy_many_kernel, dim3(chunks, (unsigned)n), 256, 0, cb->stream, (void *const *)dd,
                (const void *const *)ds, bytes);
    CUDA_LAUNCHED(cb, "copies within the device");
}

void cuda_copy_rows(em_backend *be, float *dst, int ld_dst, const float *src, int ld_src, int rows, int n) {
    cuda_backend *cb = cuda_enter(be);
    if (rows <= 0 || n <= 0) return;
    if (cuda_graph_skip(cb, dst, ld_dst, src, ld_src, rows, n)) return;
    cuda_note(cb,
              cudaMemcpy2DAsync(dst, (size_t)ld_dst * sizeof(float), src, (size_t)ld_src * sizeof(float),
                                (size_t)n * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice, cb->stream),
              "a strided copy");
}

static size_t cuda_mem_free(em_backend *be) {
    cuda_backend *cb = cuda_enter(be);
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    (void)cb;
    return free_b;
}

/* The rate a weight stream can reach: the streaming-read probe. */
static double cuda_bandwidth(em_backend *be) { return cuda_read_bandwidth(cuda_enter(be)); }

/* ---- life cycle ---- */

static void cuda_destroy(em_backend *be) {
    if (!be) return;
    cuda_backend *cb = (cuda_backend *)be->impl;
    if (cb) {
        cudaSetDevice(cb->device);
        if (cb->stream) cudaStreamSynchronize(cb->stream);
        if (cb->graphs.records)
            EM_LOGD("%s: decode steps: %zu recorded, %zu replayed, %zu run without a graph", be->desc,
                    cb->graphs.records, cb->graphs.replays, cb->graphs.misses);
        cuda_graphs_free(cb);
        stage_free(&cb->stage);
        if (cb->xconv) cudaFree(cb->xconv);
        if (cb->wide) cudaFree(cb->wide);
        if (cb->q8x) cudaFree(cb->q8x);
        if (cb->att_part) cudaFree(cb->att_part);
        if (cb->att_count) cudaFree(cb->att_count);
        if (cb->qtc_count) cudaFree(cb->qtc_count);
        if (cb->qtc_part) cudaFree(cb->qtc_part);
        if (cb->grid_bar) cudaFree(cb->grid_bar);
        if (cb->amax_part) cudaFree(cb->amax_part);
        if (cb->att_tile_part) cudaFree(cb->att_tile_part);
        if (cb->att_kv16) cudaFree(cb->att_kv16);
        if (cb->wconv) cudaFree(cb->wconv);
        if (cb->blas) cb->fn.destroy(cb->blas);
        if (cb->blas_ws) cudaFree(cb->blas_ws);
        cuda_blas_close(&cb->fn);
        if (cb->stream) cudaStreamDestroy(cb->stream);
        free(cb);
    }
    free(be);
}

static em_backend_ops make_ops(void) {
    em_backend_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.host_memory = false;
    o.destroy = cuda_destroy;
    o.alloc = cuda_alloc;
    o.free = cuda_free;
    o.reserve = cuda_reserve;
    o.release = cuda_release;
    o.host_alloc = cuda_host_alloc;
    o.host_free = cuda_host_free;
    o.upload = cuda_upload;
    o.download = cuda_download;
    o.copy = cuda_copy;
    o.copy_many = cuda_copy_many;
    o.mem_free = cuda_mem_free;
    o.bandwidth = cuda_bandwidth;
    o.matmul = cuda_matmul;
    o.matmul_group = cuda_matmul_group;
    o.matmul_swiglu = cuda_matmul_swiglu;
    o.matmul_mlp = cuda_matmul_mlp;
    o.matmul_add = cuda_matmul_add;
    o.norm_matmul_group = cuda_norm_matmul_group;
    o.norm_matmul_swiglu = cuda_norm_matmul_swiglu;
    o.rmsnorm = cuda_rmsnorm;
    o.hadamard = cuda_hadamard;
    o.add_rmsnorm = cuda_add_rmsnorm;
    o.rope = cuda_rope;
    o.rope_qk = cuda_rope_qk;
    o.swiglu = cuda_swiglu;
    o.add = cuda_add;
    o.embed = cuda_embed;
    o.kv_write = cuda_kv_write;
    o.attention = cuda_attention;
    o.kv_write_spans = cuda_kv_write_spans;
    o.rope_kv_write_spans = cuda_rope_kv_write_spans;
    o.attention_spans = cuda_attention_spans;
    o.rope_attention_spans = cuda_rope_attention_spans;
    o.graph_begin = cuda_graph_begin;
    o.graph_end = cuda_graph_end;
    o.graph_reset = cuda_graph_reset;
    o.copy_rows = cuda_copy_rows;
    o.argmax_rows = cuda_argmax_rows;
    o.sample_rows = cuda_sample_rows;
    o.sigmoid_mul = cuda_sigmoid_mul;
    o.conv1d_silu = cuda_conv1d_silu;
    o.gdn_gates = cuda_gdn_gates;
    o.gated_delta_rule = cuda_gated_delta_rule;
    o.gdn_mix_rows = cuda_gdn_mix_rows;
    o.rmsnorm_gated = cuda_rmsnorm_gated;
    return o;
}

static const em_backend_ops cuda_ops = make_ops();

/* A workspace of known size for cuBLAS (after set_stream, which resets it
 * to cuBLAS's own pool), so the device memory cuBLAS takes is counted and
 * predictable (ember fit). Without the entry point cuBLAS keeps its pool. */
static cublasStatus_t set_workspace(cuda_backend *cb) {
    if (!cb->fn.set_workspace) return CUBLAS_STATUS_SUCCESS;
    if (cudaMalloc(&cb->blas_ws, CUDA_BLAS_WORKSPACE_BYTES) != cudaSuccess) {
        cudaGetLastError();
        cb->blas_ws = NULL;
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    return cb->fn.set_workspace(cb->blas, cb->blas_ws, CUDA_BLAS_WORKSPACE_BYTES);
}

extern "C" em_status cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return em_fail(EM_ERR_UNSUPPORTED, "cuda:%d: no CUDA device is available (%s)", device,
                       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    }
    if (device >= n) return em_fail(EM_ERR_INVALID, "cuda:%d: no such GPU (%d found: cuda:0..cuda:%d)", device, n, n - 1);
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaMemGetInfo(free_bytes, total_bytes)) != cudaSuccess) {
        cudaGetLastError();
        return em_fail(EM_ERR_IO, "cuda:%d: cannot read the memory of the GPU: %s", device, cudaGetErrorString(e));
    }
    return EM_OK;
}

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" em_status cuda_backend_create(int device, em_backend **out) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return em_fail(EM_ERR_UNSUPPORTED, "cuda:%d: no CUDA device is available (%s)", device,
                       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    }
    if (device >= n) return em_fail(EM_ERR_INVALID, "cuda:%d: no such GPU (%d found: cuda:0..cuda:%d)", device, n, n - 1);
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return em_fail(EM_ERR_IO, "cuda:%d: cannot open the GPU: %s", device, cudaGetErrorString(e));
    em_backend *be = (em_backend *)em_calloc(1, sizeof *be);
    cuda_backend *cb = (cuda_backend *)em_calloc(1, sizeof *cb);
    if (!be || !cb) {
        free(be);
        free(cb);
        return em_fail(EM_ERR_NOMEM, "out of memory creating the CUDA backend");
    }
    be->ops = &cuda_ops;
    be->impl = cb;
    be->n_threads = 1;
    cb->device = device;
    cb->n_sm = prop.multiProcessorCount;
    cb->smem_optin = (int)prop.sharedMemPerBlockOptin;
    cuda_pdl_allowed = prop.major >= 9 && em_config_flag(em_config_global(), EMC_CUDA_PDL);
    cb->skinny_on = prop.major >= 8 && em_config_flag(em_config_global(), EMC_CUDA_SKINNY); /* mma.sync bf16 */
    cb->qmma_on = prop.major >= 8 && em_config_flag(em_config_global(), EMC_CUDA_QMMA);     /* mma.sync int8 */
    cb->qtc_on = prop.major >= 8 && em_config_flag(em_config_global(), EMC_CUDA_QTC);       /* mma.sync bf16 */
    const char *share = em_config_str(em_config_global(), EMC_CUDA_QTC_SHARE);
    cb->qtc_share = !cb->qtc_on ? 0 : !strcmp(share, "all") ? 2 : !strcmp(share, "1") ? 1 : 0;
    cb->qpipe_on = prop.major >= 9 && em_config_flag(em_config_global(), EMC_CUDA_QPIPE); /* bulk copies */
    const char *qmlp = em_config_str(em_config_global(), EMC_CUDA_QMLP);
    cb->qmlp = !strcmp(qmlp, "1") ? 1 : !strcmp(qmlp, "0") ? 0 : 2;
    cb->fused_att = em_config_flag(em_config_global(), EMC_CUDA_FUSED_ATTENTION);
    snprintf(be->desc, sizeof be->desc, "cuda:%d (%.48s, %.0f GiB)", device, prop.name,
             (double)prop.totalGlobalMem / 1073741824.0);
    char why[256];
    if (!cuda_blas_open(&cb->fn, why, sizeof why)) {
        em_status st = em_fail(EM_ERR_UNSUPPORTED, "%s: %s", be->desc, why);
        cuda_destroy(be);
        return st;
    }
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    const size_t qtc_counts = (size_t)cb->n_sm * EM_MATMUL_GROUP_MAX; /* a split matrix has fewer 128-row blocks than SMs */
    if ((e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (bs = cb->fn.create(&cb->blas)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cb->fn.set_stream(cb->blas, cb->stream)) != CUBLAS_STATUS_SUCCESS ||
        /* default math: f32 GEMMs stay f32 (no TF32 rounding) */
        (bs = cb->fn.set_math_mode(cb->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS ||
        (bs = set_workspace(cb)) != CUBLAS_STATUS_SUCCESS || !stage_alloc(cb, STAGE_MIN_BYTES) ||
        (e = cudaMalloc((void **)&cb->att_count, CUDA_ATT_COUNT_CAP * sizeof(int))) != cudaSuccess ||
        (e = cudaMemset(cb->att_count, 0, CUDA_ATT_COUNT_CAP * sizeof(int))) != cudaSuccess ||
        (e = cudaMalloc((void **)&cb->qtc_count, qtc_counts * sizeof(unsigned))) != cudaSuccess ||
        (e = cudaMemset(cb->qtc_count, 0, qtc_counts * sizeof(unsigned))) != cudaSuccess ||
        (e = cudaMalloc((void **)&cb->grid_bar, 2 * sizeof(unsigned))) != cudaSuccess ||
        (e = cudaMemset(cb->grid_bar, 0, 2 * sizeof(unsigned))) != cudaSuccess) {
        em_status st = em_fail(EM_ERR_IO, "%s: cannot set up the stream and cuBLAS: %s", be->desc,
                               e != cudaSuccess ? cudaGetErrorString(e)
                               : bs != CUBLAS_STATUS_SUCCESS ? "cuBLAS initialisation failed"
                                                             : "no room for the staging arena");
        cuda_destroy(be);
        return st;
    }
    *out = be;
    return EM_OK;
}
