/* model_open.c — em_model_open / em_model_free and the model accessors:
 * resolve the directory, read the config, map the weights, create the
 * backend and KV cache, and hand the graph to its family. */
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "model/model.h"

#include "base/alloc.h"
#include "base/file.h"
#include "base/log.h"
#include "base/threadpool.h"
#include "base/timer.h"

#include <stdlib.h>
#include <string.h>

/* Family table: the config's family picks the implementation. */
static const family_ops *family_for(const model_config *c) {
    switch (c->family) {
    case FAMILY_DENSE: return &dense_family;
    default: return NULL;
    }
}

static char *base_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    return em_strndup(dir + b, n - b);
}

static void collect_eos(em_model *m) {
    m->n_eos = 0;
    for (int i = 0; i < m->cfg.n_eos; i++) m->eos_ids[m->n_eos++] = m->cfg.eos_ids[i];
    for (int i = 0; i < m->gen.n_eos; i++) {
        bool dup = false;
        for (size_t k = 0; k < m->n_eos; k++) dup |= m->eos_ids[k] == m->gen.eos_ids[i];
        if (!dup) m->eos_ids[m->n_eos++] = m->gen.eos_ids[i];
    }
}

static em_status open_parts(em_model *m, const em_open_options *o) {
    EM_TRY(model_config_load(m->dir, &m->cfg));
    EM_TRY(quant_config_load(m->dir, &m->qcfg));
    EM_TRY(generation_defaults_load(m->dir, &m->gen));
    collect_eos(m);
    m->family = family_for(&m->cfg);
    if (!m->family) return em_fail(EM_ERR_UNSUPPORTED, "%s: no implementation for model type %s", m->dir, m->cfg.model_type);
    double t0 = em_now();
    EM_TRY(st_open(m->dir, &m->st));
    EM_TRY(cpu_backend_create(o->n_threads, &m->be));
    m->max_ctx = o->max_context > 0 && o->max_context < m->cfg.max_pos ? o->max_context : m->cfg.max_pos;
    int seqs = o->max_sequences > 0 ? o->max_sequences : 8;
    EM_TRY(kv_cache_create(m->cfg.n_layers, m->cfg.n_kv_heads, m->cfg.head_dim, m->max_ctx, seqs, o->kv_cache_bytes, &m->kv));
    m->prefill_math = o->precision == EM_PRECISION_FAST ? EM_MATH_FAST : EM_MATH_EXACT;
    EM_TRY(m->family->load(m));
    EM_TRY(model_text_open(m));
    EM_LOGI("%s: %s, %d layers, hidden %d, vocab %d, loaded in %.2fs (%d threads)", m->dir, m->cfg.model_type,
            m->cfg.n_layers, m->cfg.hidden, m->cfg.vocab, em_now() - t0, m->be->n_threads);
    return EM_OK;
}

em_status em_model_open(const char *path, const em_open_options *opts, em_model **out) {
    em_open_options o = {0};
    if (opts) o = *opts;
    *out = NULL;
    if (!path || !*path) return em_fail(EM_ERR_INVALID, "no model path given");
    if (!em_dir_exists(path)) return em_fail(EM_ERR_IO, "%s: not a model directory", path);
    em_model *m = em_calloc(1, sizeof *m);
    if (!m) return em_fail(EM_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&m->compute_mu, NULL);
    m->dir = em_strdup(path);
    m->name = base_name(path);
    if (!m->dir || !m->name) {
        em_model_free(m);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    em_status s = open_parts(m, &o);
    if (s != EM_OK) {
        em_model_free(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

void em_model_free(em_model *m) {
    if (!m) return;
    sched_stop(m);
    if (m->family && m->family->free) m->family->free(m);
    model_text_close(m);
    kv_cache_free(m->kv);
    cpu_backend_free(m->be);
    st_close(m->st);
    quant_config_free(&m->qcfg);
    pthread_mutex_destroy(&m->compute_mu);
    free(m->dir);
    free(m->name);
    free(m);
}

int em_model_vocab_size(const em_model *m) { return m->cfg.vocab; }
int em_model_context_size(const em_model *m) { return m->max_ctx; }
const char *em_model_arch(const em_model *m) { return m->cfg.model_type; }
const char *em_model_type(const em_model *m) { return m->cfg.model_type; }
const char *em_model_name(const em_model *m) { return m->name; }

const int32_t *em_model_eos_ids(const em_model *m, size_t *n) {
    *n = m->n_eos;
    return m->eos_ids;
}

size_t em_model_weight_bytes(const em_model *m) { return (size_t)st_data_bytes(m->st); }

int batch_logit_rows(const em_batch *b) {
    int r = 0;
    for (int s = 0; s < b->n_spans; s++)
        r += b->spans[s].logits == LOGITS_ALL ? b->spans[s].n : b->spans[s].logits == LOGITS_LAST ? 1 : 0;
    return r;
}

em_status model_forward(em_model *m, const em_batch *b, float *logits) {
    pthread_mutex_lock(&m->compute_mu);
    em_status s = m->family->forward(m, b, logits);
    pthread_mutex_unlock(&m->compute_mu);
    return s;
}

em_sampling em_sampling_defaults(const em_model *m) {
    em_sampling s = {.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
    const generation_defaults *g = &m->gen;
    if (g->has_temperature) s.temperature = (float)g->temperature;
    if (g->has_top_p) s.top_p = (float)g->top_p;
    if (g->has_top_k) s.top_k = g->top_k;
    if (g->has_min_p) s.min_p = (float)g->min_p;
    if (g->has_repetition_penalty) s.repetition_penalty = (float)g->repetition_penalty;
    if (g->has_do_sample && !g->do_sample) s.temperature = 0; /* greedy by declaration */
    return s;
}
