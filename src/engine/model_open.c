/* model_open.c — em_model_open / em_model_free and the model accessors:
 * resolve the directory, read the config, map the weights, create the
 * backend and KV cache, and hand the graph to its family. */
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "engine/grammar/grammar.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/tp_plan.h"

#include "backend/collective.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/file.h"
#include "base/log.h"
#include "base/threadpool.h"
#include "base/timer.h"

#include <stdlib.h>
#include <string.h>


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

/* Options left at 0 / AUTO take the configuration's value. */
static em_status resolve_options(em_model *m, em_open_options *o) {
    const em_config *c = m->config;
    if (!o->n_threads) o->n_threads = (int)em_config_int(c, EMC_THREADS);
    if (!o->max_context) o->max_context = (int)em_config_int(c, EMC_CTX);
    if (o->precision == EM_PRECISION_AUTO)
        o->precision = !strcmp(em_config_str(c, EMC_PRECISION), "fast") ? EM_PRECISION_FAST : EM_PRECISION_EXACT;
    if (!o->device) o->device = em_config_str(c, EMC_DEVICE);
    if (!o->tensor_parallel) o->tensor_parallel = (int)em_config_int(c, EMC_TENSOR_PARALLEL);
    if (o->tensor_parallel < 1 || o->tensor_parallel > 64)
        return em_fail(EM_ERR_INVALID, "tensor parallelism over %d GPUs: expected 1 to 64", o->tensor_parallel);
    bool cuda;
    int index;
    return em_device_parse(o->device, &cuda, &index);
}

/* Tensor parallelism is asked for: refuses what it cannot split, before
 * any weight is read, and switches the model to the split graph. */
static em_status tp_choose(em_model *m, const em_open_options *o, bool host_split) {
    int n = o->tensor_parallel;
    int world = (int)em_config_int(m->config, EMC_WORLD_SIZE), rank = (int)em_config_int(m->config, EMC_RANK);
    if (world > 1) {
        /* one process per rank: this process drives rank EMBER_RANK */
        if (n > 1 && n != world)
            return em_fail(EM_ERR_INVALID, "--tensor-parallel %d disagrees with EMBER_WORLD_SIZE=%d", n, world);
        if (rank >= world)
            return em_fail(EM_ERR_INVALID, "EMBER_RANK=%d is outside EMBER_WORLD_SIZE=%d", rank, world);
        n = world;
        m->tp_procs = true;
        m->tp_rank = rank;
    }
    bool cuda;
    int index;
    EM_TRY(em_device_parse(o->device, &cuda, &index));
    if (!cuda && !host_split)
        return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism (--tensor-parallel %d) needs --device cuda: it splits a "
                       "model over GPUs", n);
    bool q35 = m->family == &qwen3_5_family;
    if (m->family != &dense_family && !q35)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor parallelism runs the Llama family (implementation dense) and "
                       "the Qwen3.5 family only; this model uses %s, which runs on one GPU", m->dir,
                       m->identity.impl->name);
    if (q35 && m->tp_procs)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: the Qwen3.5 family splits over the GPUs of one process only "
                       "(--tensor-parallel %d without EMBER_WORLD_SIZE): the steps rank 0 sends other processes do "
                       "not carry its recurrent-state operations (rollback, prefix snapshots)", m->dir, n);
    if (m->qcfg.present)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor parallelism runs f32/f16/bf16 weights only; this checkpoint is "
                       "quantized", m->dir);
    tp_shard sh;
    EM_TRY(tp_plan_make(m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.intermediate, m->cfg.vocab, 0, n, &sh));
    if (q35 && m->cfg.q35.n_linear) EM_TRY(tp_plan_gdn(m->cfg.q35.lin_k_heads, m->cfg.q35.lin_v_heads, &sh));
    m->tp_size = n;
    m->tp_device0 = index;
    m->family = q35 ? &qwen3_5_tp_family : &dense_tp_family;
    return EM_OK;
}

/* The GPUs tensor parallelism needs are present (after the first opened). */
static em_status tp_check_gpus(const em_model *m) {
    int have = em_gpu_count(), last = m->tp_device0 + m->tp_size - 1;
    if (last >= have)
        return em_fail(EM_ERR_UNSUPPORTED, "tensor parallelism over %d GPUs needs cuda:%d..cuda:%d; %d GPU(s) found",
                       m->tp_size, m->tp_device0, last, have);
    return EM_OK;
}

/* KV room on a device with bounded memory: every sequence at full context
 * when that fits in what the weights left free (minus headroom for the
 * workspace), else what fits; the cache then shares blocks under pressure. */
static size_t device_kv_budget(const em_model *m, int kv_layers, int seqs) {
    if (!m->be->ops->mem_free) return 0;
    size_t avail = m->be->ops->mem_free(m->be), headroom = avail / 10, full;
    if (headroom < ((size_t)1 << 30)) headroom = (size_t)1 << 30;
    if (avail <= headroom) return 1; /* fails in kv_cache_create, with the sizes in its message */
    size_t per_tok = kv_bytes_per_token(kv_layers, m->kv_heads, m->cfg.head_dim);
    if (!em_mul(per_tok, (size_t)m->max_ctx, &full) || !em_mul(full, (size_t)seqs, &full)) return avail - headroom;
    return full <= avail - headroom ? 0 : avail - headroom;
}

/* EMBER_PREFAULT: read one byte per page of every tensor, so the weights are
 * resident before the first request instead of during it. */
static void prefault(const st_set *st) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        const volatile uint8_t *p = t->data;
        for (size_t o = 0; o < t->nbytes; o += 4096) sink ^= p[o];
    }
    (void)sink;
}

/* Workspace allowance under a memory budget: activations of one prefill
 * chunk and the logits rows, with room to spare. */
#define BUDGET_WORKSPACE_MARGIN ((size_t)64 << 20)

/* Turns a whole-model memory budget into a KV-cache budget: what is left
 * after the weights and the workspace. Too little for one full-context
 * sequence is an error naming the numbers. */
static em_status kv_budget_from_memory(const em_model *m, int kv_layers, size_t budget, size_t *kv_bytes) {
    if (!budget) return EM_OK;
    size_t weights = (size_t)st_data_bytes(m->st),
           need_one = kv_bytes_per_token(kv_layers, m->kv_heads, m->cfg.head_dim) * (size_t)m->max_ctx;
    size_t fixed = weights + BUDGET_WORKSPACE_MARGIN;
    if (budget < fixed + need_one)
        return em_fail(EM_ERR_LIMIT,
                       "%s: a memory budget of %zu bytes cannot serve one sequence of %d tokens: weights %zu + "
                       "workspace %zu + KV cache %zu bytes (lower --ctx or raise the budget)",
                       m->dir, budget, m->max_ctx, weights, (size_t)BUDGET_WORKSPACE_MARGIN, need_one);
    size_t left = budget - fixed;
    if (!*kv_bytes || left < *kv_bytes) *kv_bytes = left;
    return EM_OK;
}

static em_status open_parts(em_model *m, const em_open_options *o, bool host_split) {
    EM_TRY(model_config_load(m->dir, &m->cfg));
    EM_TRY(quant_config_load(m->dir, &m->qcfg));
    EM_TRY(generation_defaults_load(m->dir, &m->gen));
    collect_eos(m);
    double t0 = em_now();
    EM_TRY(st_open(m->dir, &m->st));
    /* The registry picks the implementation through the model's profile;
     * an unknown or inconsistent model stops here with the reason. */
    EM_TRY(registry_identify(m->dir, &m->cfg, m->st, em_config_str(m->config, EMC_PROFILES_DIR), &m->identity));
    m->family = m->identity.impl->ops;
    EM_LOGI("%s: implementation %s: %s", m->dir, m->identity.impl->name, m->identity.why);
    m->tp_size = 1;
    if (o->tensor_parallel > 1 || em_config_int(m->config, EMC_WORLD_SIZE) > 1) EM_TRY(tp_choose(m, o, host_split));
    if (em_config_flag(m->config, EMC_PREFAULT)) prefault(m->st);
    EM_TRY(em_backend_open(o->device, o->n_threads, &m->be));
    if (m->tp_size > 1 && !m->tp_procs && !m->be->ops->host_memory) EM_TRY(tp_check_gpus(m));
    m->max_ctx = o->max_context > 0 && o->max_context < m->cfg.max_pos ? o->max_context : m->cfg.max_pos;
    int seqs = o->max_sequences > 0 ? o->max_sequences : 8;
    m->max_seqs = seqs;
    /* hybrid families keep KV only for their attention layers */
    int kv_layers = m->cfg.n_kv_layers > 0 ? m->cfg.n_kv_layers : m->cfg.n_layers;
    m->prefill_math = o->precision == EM_PRECISION_FAST ? EM_MATH_FAST : EM_MATH_EXACT;
    m->kv_heads = m->cfg.n_kv_heads;
    /* weights first: on a GPU the KV cache takes what they leave free */
    EM_TRY(m->family->load(m));
    size_t kv_bytes = o->kv_cache_bytes ? o->kv_cache_bytes : device_kv_budget(m, kv_layers, seqs);
    EM_TRY(kv_budget_from_memory(m, kv_layers, o->memory_budget, &kv_bytes));
    EM_TRY(kv_cache_create(m->be, kv_layers, m->kv_heads, m->cfg.head_dim, m->max_ctx, seqs, kv_bytes, &m->kv));
    if (m->family->kv_ready) EM_TRY(m->family->kv_ready(m));
    EM_TRY(model_text_open(m));
    EM_LOGI("%s: %s, %d layers, hidden %d, vocab %d, loaded in %.2fs on %s", m->dir, m->cfg.model_type,
            m->cfg.n_layers, m->cfg.hidden, m->cfg.vocab, em_now() - t0, m->be->desc);
    return EM_OK;
}

static em_status model_open_as(const char *path, const em_open_options *opts, bool host_split, em_model **out) {
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
    m->config = em_config_retain(o.config ? o.config : em_config_global());
    em_status s = resolve_options(m, &o);
    if (s == EM_OK) s = open_parts(m, &o, host_split);
    if (s != EM_OK) {
        em_model_free(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

em_status em_model_open(const char *path, const em_open_options *opts, em_model **out) {
    return model_open_as(path, opts, false, out);
}

em_status model_open_host_split(const char *path, const em_open_options *opts, em_model **out) {
    return model_open_as(path, opts, true, out);
}

void em_model_free(em_model *m) {
    if (!m) return;
    sched_stop(m);
    grammar_vocab_free(m->grammar_vocab);
    if (m->family && m->family->free) m->family->free(m);
    model_text_close(m);
    kv_cache_free(m->kv);
    model_argmax_free(m);
    if (m->be) weights_release(m);
    em_backend_free(m->be);
    st_close(m->st);
    quant_config_free(&m->qcfg);
    pthread_mutex_destroy(&m->compute_mu);
    em_config_release(m->config);
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

struct em_scheduler *em_model_scheduler(const em_model *m) { return m->sched; }

const em_config *em_model_config(const em_model *m) { return m->config; }

size_t em_model_weight_bytes(const em_model *m) { return (size_t)st_data_bytes(m->st); }

int batch_logit_rows(const em_batch *b) {
    int r = 0;
    for (int s = 0; s < b->n_spans; s++)
        r += b->spans[s].logits == LOGITS_ALL ? b->spans[s].n : b->spans[s].logits == LOGITS_LAST ? 1 : 0;
    return r;
}

em_status model_seq_mark(em_model *m, int seq, int max_tokens) {
    return m->family->seq_mark ? m->family->seq_mark(m, seq, max_tokens) : EM_OK;
}

em_status model_seq_truncate(em_model *m, int seq, int len) {
    if (m->family->seq_truncate) {
        pthread_mutex_lock(&m->compute_mu); /* a rollback may replay recurrent steps */
        em_status s = m->family->seq_truncate(m, seq, len);
        pthread_mutex_unlock(&m->compute_mu);
        return s;
    }
    kv_seq_truncate(m->kv, seq, len);
    return EM_OK;
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

int em_model_has_mtp(const em_model *m) {
    return m->family->mtp_layers && m->family->hidden_rows && m->family->mtp_forward && m->family->mtp_layers(m) > 0;
}
