/* cuda_graph.cu — recorded decode steps.
 *
 * A decode step issues a few hundred small kernels; launching them one by
 * one costs more than running them. The first step of a given shape is
 * captured into a CUDA graph while it runs; later steps of that shape run
 * their host side only (each operation stages its per-call arrays — token
 * ids, positions, block tables — into the same arena offsets the recording
 * copies from) and launch the graph once.
 *
 * A replay is trusted only if it is the recorded step: every operation
 * folds the arguments that shape its launches (buffers, sizes, staged byte
 * counts and offsets) into a hash, and graph_end compares it with the
 * recording's. A mismatch, or anything that would break a recording (the
 * arena filling up), makes graph_end report that nothing ran, and the
 * caller runs the step again without a graph.
 *
 * The arguments a recorded step stages all go up in one copy at its start:
 * the recording begins with a copy of the staging arena, whose length is
 * set to what the step staged once its capture ends, and operations queue
 * no copies of their own meanwhile. (A copy per operation put three
 * transfers in each layer's chain of kernels, each a break in the
 * programmatic launches around it.) */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "base/log.h"
}

static void graph_drop(cuda_graphs *g, int i) {
    if (g->e[i].exec) cudaGraphExecDestroy(g->e[i].exec);
    g->e[i] = g->e[--g->n];
    memset(&g->e[g->n], 0, sizeof g->e[g->n]);
}

static int graph_find(const cuda_graphs *g, uint64_t key) {
    for (int i = 0; i < g->n; i++)
        if (g->e[i].key == key) return i;
    return -1;
}

em_graph_mode cuda_graph_begin(em_backend *be, uint64_t key) {
    cuda_backend *cb = cuda_enter(be);
    cuda_graphs *g = &cb->graphs;
    if (cb->err != cudaSuccess || cb->blas_err != CUBLAS_STATUS_SUCCESS || g->mode != EM_GRAPH_NONE)
        return EM_GRAPH_NONE;
    /* offsets in the arena must repeat step to step: start it empty */
    cuda_stage_reset(cb);
    g->key = key;
    g->args = 0x243f6a8885a308d3ull ^ key;
    g->broken = false;
    g->err_before = cb->err;
    g->slot = graph_find(g, key);
    if (g->slot >= 0) {
        g->mode = EM_GRAPH_REPLAY;
        return EM_GRAPH_REPLAY;
    }
    cuda_stage_begin(cb, 1, 0); /* the arena exists before its copy is recorded */
    if (!cb->stage.host || cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return EM_GRAPH_NONE;
    }
    g->mode = EM_GRAPH_RECORD;
    /* the step's upload, sized in record_end */
    if (cudaMemcpyAsync(cb->stage.dev, cb->stage.host, 16, cudaMemcpyHostToDevice, cb->stream) != cudaSuccess)
        g->broken = true;
    cuda_pdl_now = cuda_pdl_allowed;
    return EM_GRAPH_RECORD;
}

/* Sets the length of the recording's first node, the upload of the
 * staging arena, to the bytes the step staged. False if the graph does
 * not start with that one copy. */
static bool size_upload(cuda_backend *cb, cudaGraph_t graph) {
    cudaGraphNode_t root;
    size_t n = 0;
    if (cudaGraphGetRootNodes(graph, NULL, &n) != cudaSuccess || n != 1) return false;
    cudaGraphNodeType type;
    if (cudaGraphGetRootNodes(graph, &root, &n) != cudaSuccess || cudaGraphNodeGetType(root, &type) != cudaSuccess ||
        type != cudaGraphNodeTypeMemcpy)
        return false;
    size_t bytes = cb->stage.used > 16 ? cb->stage.used : 16;
    return cudaGraphMemcpyNodeSetParams1D(root, cb->stage.dev, cb->stage.host, bytes, cudaMemcpyHostToDevice) ==
           cudaSuccess;
}

/* Ends a recording; returns the instantiated graph or NULL. */
static cudaGraphExec_t record_end(cuda_backend *cb) {
    cuda_graphs *g = &cb->graphs;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(cb->stream, &graph);
    cuda_pdl_now = false;
    cudaGraphExec_t exec = NULL;
    bool ok = e == cudaSuccess && graph && !g->broken && cb->err == cudaSuccess &&
              cb->blas_err == CUBLAS_STATUS_SUCCESS && size_upload(cb, graph);
    if (ok && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = NULL;
    if (graph) cudaGraphDestroy(graph);
    if (!exec) {
        /* the failure belongs to the recording, not to the step: the eager
         * run that follows reports any real error again */
        cudaGetLastError();
        cb->err = g->err_before;
        cb->blas_err = CUBLAS_STATUS_SUCCESS;
    }
    return exec;
}

static void graph_store(cuda_graphs *g, cudaGraphExec_t exec) {
    if (g->n == CUDA_GRAPHS_MAX) { /* forget the least recently used shape */
        int old = 0;
        for (int i = 1; i < g->n; i++)
            if (g->e[i].last_used < g->e[old].last_used) old = i;
        graph_drop(g, old);
    }
    cuda_graph_entry *en = &g->e[g->n++];
    en->key = g->key;
    en->args = g->args;
    en->exec = exec;
    en->last_used = ++g->clock;
}

em_status cuda_graph_end(em_backend *be, bool *ran) {
    cuda_backend *cb = cuda_enter(be);
    cuda_graphs *g = &cb->graphs;
    int mode = g->mode;
    g->mode = EM_GRAPH_NONE;
    *ran = false;
    cudaGraphExec_t exec = NULL;
    if (mode == EM_GRAPH_RECORD) {
        exec = record_end(cb);
        if (!exec) {
            g->misses++;
            if (g->misses <= 3) EM_LOGD("%s: recording a decode step failed; it runs without a graph", be->desc);
            cuda_stage_reset(cb);
            return EM_OK;
        }
        graph_store(g, exec);
        g->records++;
    } else if (mode == EM_GRAPH_REPLAY) {
        cuda_graph_entry *en = &g->e[g->slot];
        if (g->broken || en->args != g->args) {
            /* not the recorded step (buffers moved, a table outgrew its
             * padding): forget the recording; the next step records anew */
            graph_drop(g, g->slot);
            g->misses++;
            if (g->misses <= 3)
                EM_LOGD("%s: a decode step differs from its recording (%s); recording again", be->desc,
                        g->broken ? "staging arena full" : "arguments changed");
            cuda_stage_reset(cb);
            return EM_OK;
        }
        en->last_used = ++g->clock;
        exec = en->exec;
        g->replays++;
    } else {
        return EM_OK;
    }
    cuda_note(cb, cudaGraphLaunch(exec, cb->stream), "launching a recorded step");
    *ran = true;
    return EM_OK;
}

void cuda_graph_reset(em_backend *be) {
    cuda_backend *cb = cuda_enter(be);
    cuda_graphs_free(cb);
}

void cuda_graphs_free(cuda_backend *cb) {
    cuda_graphs *g = &cb->graphs;
    while (g->n) graph_drop(g, g->n - 1);
}
