/* fit.c — the memory prediction of fit.h. */
#include "model/fit.h"
#include "model/fit_internal.h"

#include "base/alloc.h"
#include "base/file.h"
#include "base/hugepage.h"
#include "base/sysmem.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/kv_cache.h"
#include "model/weights_host.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The binary, libraries, thread stacks and allocator arenas of an ember
 * process before any model is loaded (resident on x86-64 Debian 12: 6.9-7.3
 * MB on one host, 5.9-6.3 MB on another, varying run to run; between them),
 * and parsed-tokenizer bytes per byte of tokenizer.json (an estimate). A
 * constant, not this process's resident size: the contract must give the
 * same answer every time it is asked. */
#define FIT_RUNTIME_BASE (13u << 19)

static uint64_t runtime_base(void) { return FIT_RUNTIME_BASE; }
#define FIT_TOKENIZER_FACTOR 4

em_status fit_read_shape(const char *dir, fit_shape *s) {
    memset(s, 0, sizeof *s);
    model_config cfg;
    EM_TRY(model_config_load(dir, &cfg));
    *s = (fit_shape){.hidden = cfg.hidden, .inter = cfg.intermediate, .layers = cfg.n_layers, .heads = cfg.n_heads,
                     .kv_heads = cfg.n_kv_heads, .head_dim = cfg.head_dim, .vocab = cfg.vocab, .max_pos = cfg.max_pos,
                     .tied = cfg.tied_embeddings, .kv_layers = cfg.n_layers};
    if (cfg.family == FAMILY_QWEN3_5 && cfg.q35.n_linear) { /* Gated DeltaNet layers keep state, not KV */
        const qwen3_5_config *q = &cfg.q35;
        uint64_t conv_dim = (uint64_t)(2 * q->lin_k_heads * q->lin_k_dim + q->lin_v_heads * q->lin_v_dim);
        s->state_layers = q->n_linear;
        s->kv_layers = cfg.n_layers - q->n_linear;
        s->state_per_seq = ((uint64_t)(q->conv_kernel - 1) * conv_dim +
                            (uint64_t)q->lin_v_heads * (uint64_t)q->lin_k_dim * (uint64_t)q->lin_v_dim) * 4u;
        s->lin_channels = (int)conv_dim;
        s->lin_vd = q->lin_v_heads * q->lin_v_dim, s->lin_hv = q->lin_v_heads, s->mtp_kv_layers = q->mtp_layers;
        memcpy(s->layer_linear, q->layer_linear, sizeof s->layer_linear);
    }
    return EM_OK;
}

static uint64_t file_size(const char *dir, const char *name) {
    char *p = em_path_join(dir, name);
    struct stat st;
    uint64_t n = p && !stat(p, &st) ? (uint64_t)st.st_size : 0;
    free(p);
    return n;
}

/* Bytes of the weight files and of the f32 copies of 1-D tensors; notes the
 * embedding table of an untied model, of which a run touches only the rows
 * of the tokens it sees. */
static em_status weight_bytes(const char *dir, fit_shape *s, uint64_t *files, uint64_t *vectors) {
    st_set *st;
    EM_TRY(st_open(dir, &st));
    const st_tensor *e = st_find(st, "model.embed_tokens.weight");
    if (e && e->ndim == 2 && e->shape[0] > 0 && !s->tied && st_find(st, "lm_head.weight")) {
        s->embed_bytes = e->nbytes;
        s->embed_row = e->nbytes / (uint64_t)e->shape[0];
    }
    *files = 0;
    *vectors = 0;
    for (int f = 0; f < st_n_files(st); f++) {
        struct stat sb;
        if (!stat(st_file_path(st, f), &sb)) *files += (uint64_t)sb.st_size;
    }
    for (size_t i = 0; i < st_count(st); i++) {
        if (st_at(st, i)->ndim == 1) *vectors += st_at(st, i)->n_elements * 4u;
        bool kept_in_place = s->embed_bytes && st_at(st, i) == e; /* an untied embedding is never copied */
        if (st_at(st, i)->nbytes > s->largest && !kept_in_place) s->largest = st_at(st, i)->nbytes;
    }
    st_close(st);
    return EM_OK;
}

/* The dense graph's workspace for T tokens (dense.c ensure_workspace): x, h
 * (hidden), q, att (heads x head_dim), k, v (kv heads x head_dim), gate, up,
 * act (intermediate), each at least hidden wide; positions and ids. */
static uint64_t workspace(const fit_shape *s, uint64_t T) {
    uint64_t qd = (uint64_t)s->heads * s->head_dim, kvd = (uint64_t)s->kv_heads * s->head_dim, H = (uint64_t)s->hidden;
    uint64_t w[] = {H, H, qd, kvd, kvd, qd, (uint64_t)s->inter, (uint64_t)s->inter, (uint64_t)s->inter}, sum = 0;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) sum += (w[i] > H ? w[i] : H);
    return sum * 4u * T + 8u * T;
}

static uint64_t predict_total(const fit_shape *s, const fit_request *r, int ctx, fit_result *o, uint64_t files) {
    uint64_t batch = (uint64_t)(r->batch > 0 ? r->batch : 1);
    /* every token may be a different one; a row costs at least its page */
    uint64_t rows = (uint64_t)ctx * batch * (s->embed_row > 4096 ? s->embed_row : 4096);
    o->weights = files - s->embed_bytes + (rows < s->embed_bytes ? rows : s->embed_bytes);
    uint64_t positions = ((uint64_t)ctx + FIT_KV_BLOCK - 1) / FIT_KV_BLOCK * FIT_KV_BLOCK;
    o->kv_per_token = kv_bytes_per_token(s->kv_layers, s->kv_heads, s->head_dim);
    o->kv = o->kv_per_token * positions * batch;
    /* The pool is address space (cpu_reserve): a page is committed when a
     * position in it is first written, so a sequence's last block holds
     * only the positions it reached. */
    uint64_t kv_committed = o->kv_per_token * (uint64_t)ctx * batch;
    o->state_per_seq = s->state_per_seq * (uint64_t)s->state_layers;
    o->state = o->state_per_seq * batch;
    uint64_t T = (uint64_t)ctx < FIT_PREFILL_CHUNK ? (uint64_t)ctx : FIT_PREFILL_CHUNK;
    if (batch > T) T = batch < FIT_PREFILL_CHUNK ? batch : FIT_PREFILL_CHUNK;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t threads = (uint64_t)(r->threads > 0 ? r->threads : cores > 0 ? cores : 1);
    /* per-thread attention scores grow to twice the keys seen */
    uint64_t scores = threads * 2u * (uint64_t)(ctx > 4096 ? ctx : 4096) * 4u;
    o->transient = workspace(s, T) + scores + (uint64_t)s->vocab * 4u * (batch + 1);
    uint64_t run = o->weights + o->vectors + kv_committed + o->state + o->transient + o->runtime;
    if (!host_weights_copies(r->cpu_weights, files)) return run;
    /* weights copied onto huge pages: the arena's last page is whole, and
     * while loading, one slice of a tensor is resident twice (before the
     * caches and the workspace exist) */
    uint64_t slice = s->largest < HOST_WEIGHTS_SLICE ? s->largest : HOST_WEIGHTS_SLICE;
    uint64_t load = o->weights + o->vectors + o->runtime + slice + EM_HUGE_PAGE;
    o->transient += EM_HUGE_PAGE;
    return run + EM_HUGE_PAGE > load ? run + EM_HUGE_PAGE : load;
}

em_status fit_predict(const char *dir, const fit_request *r, fit_result *o) {
    memset(o, 0, sizeof *o);
    if (r->ctx < 1) return em_fail(EM_ERR_INVALID, "fit: the context must be at least 1");
    if (r->cuda) return fit_predict_cuda(dir, r, o);
    fit_shape s;
    EM_TRY(fit_read_shape(dir, &s));
    uint64_t files;
    EM_TRY(weight_bytes(dir, &s, &files, &o->vectors));
    o->runtime = runtime_base() + FIT_TOKENIZER_FACTOR * file_size(dir, "tokenizer.json");
    o->kv_layers = s.kv_layers;
    o->state_layers = s.state_layers;
    o->model_max_ctx = s.max_pos;
    o->capacity = r->budget ? r->budget : em_mem_available();
    o->capacity_known = true;
    /* largest context (up to the model's) within the capacity: the total
     * grows with the context, so bisect */
    int lo = 0, hi = s.max_pos;
    fit_result scratch = *o;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (predict_total(&s, r, mid, &scratch, files) <= o->capacity) lo = mid;
        else hi = mid - 1;
    }
    o->max_ctx = lo;
    o->total = predict_total(&s, r, r->ctx, o, files);
    o->fits = o->total <= o->capacity && r->ctx <= s.max_pos;
    return EM_OK;
}
