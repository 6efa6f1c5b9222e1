/* model.h — a loaded model: config, weights, backend, KV cache, and the
 * family implementation behind the one forward entry point.
 *
 * forward(model, batch, logits): a batch is a list of spans, each a run of
 * new tokens appended to one cache sequence. The same call serves prefill,
 * decode, batched decode, speculative verification and scoring. */
#ifndef EMBER_MODEL_MODEL_H
#define EMBER_MODEL_MODEL_H

#include "backend/backend.h"
#include "chat/chat.h"
#include "io/model_config.h"
#include "io/quant_config.h"
#include "io/safetensors.h"
#include "model/fingerprint.h"
#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>

typedef enum { LOGITS_NONE = 0, LOGITS_LAST, LOGITS_ALL } logits_mode;

/* The arithmetic a span's prefill rows may use: the model's (fixed at open)
 * or one generation's own (a request's EMBER_PRECISION override). */
typedef enum { SPAN_MATH_MODEL = 0, SPAN_MATH_EXACT, SPAN_MATH_FAST } span_math;

typedef struct em_span {
    int seq;               /* KV-cache sequence slot */
    const int32_t *tokens; /* appended at positions len.. of the sequence */
    int n;
    logits_mode logits;
    span_math math;        /* prefill arithmetic (short spans are EXACT anyway) */
} em_span;

typedef struct em_batch {
    const em_span *spans;
    int n_spans;
    /* Optional: argmax[r] (host) receives the greedy choice over logits row
     * r (tensor/argmax.h), made where the logits are (on a GPU, the device).
     * argmax_only: the float rows are not wanted; a family that chooses on
     * the device then leaves the logits array unwritten. */
    int32_t *argmax;
    bool argmax_only;
    /* Optional, with argmax, only where model_device_samples: how each
     * logits row's token is drawn where the logits are (backend
     * sample_rows; temperature 0: its argmax), so argmax receives every
     * row's token. A row the host samples itself gets temperature 0 here:
     * its logits are left as they are. */
    const em_sample_params *sample;
} em_batch;

typedef struct family_ops {
    const char *name;
    /* Binds weights and allocates the implementation state (m->impl). */
    em_status (*load)(em_model *m);
    /* Runs the batch; writes logits rows in span order (n rows for
     * LOGITS_ALL, 1 for LOGITS_LAST) into logits[rows, vocab]. Advances each
     * sequence's length by its span. */
    em_status (*forward)(em_model *m, const em_batch *b, float *logits);
    /* forward fills b->argmax itself (through model_logits_out); otherwise
     * model_forward scans the rows it wrote. */
    bool fills_argmax;
    /* forward honours b->sample too (through model_logits_out) */
    bool fills_sample;
    void (*free)(em_model *m);
    /* Optional: called once the KV cache exists (m->kv), before the first
     * forward (tensor parallelism gives its other ranks storage there). */
    em_status (*kv_ready)(em_model *m);

    /* Optional, for families with per-sequence recurrent state (NULL: the
     * KV cache is the whole state). mark: the next forwards of seq (up to
     * max_tokens tokens in all) keep what truncate needs to cut the sequence
     * back to any length >= its current one. truncate: drops positions >= len
     * (KV and recurrent state). state_*: copy a sequence's recurrent state
     * (excluding the KV cache) out to a buffer of state_bytes and back. */
    em_status (*seq_mark)(em_model *m, int seq, int max_tokens);
    em_status (*seq_truncate)(em_model *m, int seq, int len);
    size_t (*state_bytes)(const em_model *m);
    em_status (*state_save)(em_model *m, int seq, void *buf);
    em_status (*state_load)(em_model *m, int seq, const void *buf);

    /* Optional multi-token-prediction head (NULL/0: none). hidden_rows:
     * copies the final-normed hidden state of the first n tokens of the last
     * forward, in batch order, to the host array dst[n, hidden].
     * mtp_forward: runs the head over n (token, hidden) pairs of seq at
     * positions pos0.., writing its own KV there; logits of the last pair go
     * to logits[vocab], its output hidden row to hidden_out[hidden]. hidden,
     * logits and hidden_out are host arrays. */
    int (*mtp_layers)(const em_model *m);
    em_status (*hidden_rows)(em_model *m, float *dst, int n);
    em_status (*mtp_forward)(em_model *m, int seq, const int32_t *tokens, const float *hidden, int pos0, int n,
                             float *logits, float *hidden_out);
} family_ops;

extern const family_ops dense_family;
extern const family_ops qwen3_5_family;
/* The dense family split over GPUs (dense_tp.c), chosen by model_open when
 * tensor parallelism is asked for. */
extern const family_ops dense_tp_family;
/* The Qwen3.5 family split over GPUs (qwen3_5_tp.c), likewise. */
extern const family_ops qwen3_5_tp_family;

/* Everything the registry knows about a model directory: its fingerprints
 * and the implementation chosen for it, with the reason (registry.h). */
typedef struct model_identity {
    char config_fp[FP_HEX + 1];
    char artifact_fp[FP_HEX + 1];
    const struct em_impl *impl; /* NULL when the selection failed */
    char why[512];
} model_identity;

struct em_model {
    char *dir;
    em_config *config; /* the snapshot the model was opened with (a reference) */
    char *name;
    model_config cfg;
    quant_config qcfg; /* MLX quantization block (present = false when none) */
    generation_defaults gen;
    st_set *st;
    em_backend *be;
    /* device copies of weight tensors (backends without host memory),
     * released by weights_release */
    void **weight_bufs;
    size_t n_weight_bufs, cap_weight_bufs;
    size_t weight_uploaded, weight_progress; /* bytes, for load progress */
    /* host-memory backends: the copies of the weights (weights_host.c);
     * NULL until the first weight is bound */
    struct host_weights *host_weights;
    kv_cache *kv;
    int kv_heads; /* KV heads per position the cache holds: the model's, or one rank's share */
    /* tensor parallelism: GPUs the model spans (1: none) and the first one;
     * tp_procs: one process per rank (EMBER_WORLD_SIZE), this one tp_rank */
    int tp_size, tp_device0, tp_rank;
    bool tp_procs;
    const family_ops *family;
    model_identity identity;
    void *impl;
    tokenizer *tok;
    chat_template *tmpl;
    em_math prefill_math;
    int max_ctx;
    int max_seqs; /* sequence slots of the KV cache (known before it exists) */
    int32_t eos_ids[2 * MC_MAX_EOS];
    size_t n_eos;
    pthread_mutex_t compute_mu; /* one forward at a time */
    struct em_scheduler *sched; /* continuous batching, when started */
    struct grammar_vocab *grammar_vocab; /* constrained decoding, built on first use */
    int32_t *argmax_dev; /* backend memory for a step's greedy ids (logits_out.c) */
    int argmax_cap;
    /* Optional canonical -> checkpoint tensor name mapping, set by a family
     * whose checkpoints come in several layouts (NULL: names as given). */
    const char *(*weight_name)(const em_model *m, const char *name, char *buf, size_t len);
};

/* Tensor parallelism (dense_tp.c, either family): GPUs the model spans (1 without);
 * all-reduce timing on or off; milliseconds spent in all-reduces and their
 * count since the last take. */
int model_tp_size(const em_model *m);
void model_tp_timing(em_model *m, bool on);
double model_tp_take_time(em_model *m, long *calls);
/* A rank > 0 of a multi-process group: it serves nothing itself, but runs
 * the steps rank 0 sends (model_tp_follow) until rank 0 stops (EM_OK) or
 * fails or goes away (an error saying so). */
bool model_tp_follower(const em_model *m);
em_status model_tp_follow(em_model *m);

/* Opens a model like em_model_open, except that opts->tensor_parallel > 1
 * with --device cpu splits it over that many CPU backends joined by host
 * collectives instead of being refused: the split graph's arithmetic,
 * tested without GPUs. Not for serving (nothing runs in parallel). */
em_status model_open_host_split(const char *path, const em_open_options *opts, em_model **out);

/* Rows of logits a batch produces. */
int batch_logit_rows(const em_batch *b);
/* Runs family->forward under the compute lock (logits_out.c); fills
 * b->argmax when asked, whatever the family. */
em_status model_forward(em_model *m, const em_batch *b, float *logits);
/* For families: the logits rows of a step leave the backend. src holds
 * rows x vocab floats in backend memory (on a host-memory backend it is
 * logits itself); b (may be NULL) says whether greedy ids are wanted and
 * whether the rows are. */
em_status model_logits_out(em_model *m, const em_batch *b, float *src, int rows, float *logits);
/* True when a batch may carry em_batch.sample: the family draws on the
 * backend (a GPU with sample_rows) and EMBER_DEVICE_SAMPLING allows it. */
bool model_device_samples(const em_model *m);
void model_argmax_free(em_model *m);
/* Rollback support for speculative decoding (see family_ops.seq_mark /
 * seq_truncate); for families without recurrent state, mark does nothing
 * and truncate cuts the KV cache. */
em_status model_seq_mark(em_model *m, int seq, int max_tokens);
em_status model_seq_truncate(em_model *m, int seq, int len);

/* Loads the tokenizer and chat template of m->dir when present (text.c);
 * model_text_close releases them. */
em_status model_text_open(em_model *m);
void model_text_close(em_model *m);
em_status model_template_open(em_model *m);
void model_template_close(em_model *m);

/* ---- weight binding (weights.c) ---- */

/* Binds a [rows, cols] linear weight `name`: F32/F16/BF16, or MLX affine
 * (`<module>.weight` U32 packed + `<module>.scales` + `<module>.biases`) when
 * m->qcfg quantizes the module or the checkpoint holds its scales. On a
 * host-memory backend copied onto huge pages or read in place
 * (weights_host.c), else uploaded once into backend memory owned by the
 * model (weights_release). A wrong shape, dtype or a missing tensor is an
 * error naming the tensor. */
em_status weight_bind(em_model *m, const char *name, int64_t rows, int64_t cols, em_weight *w);
/* weight_bind for a table only looked up by row (an untied embedding): on a
 * host-memory backend always read in place, since a run touches only the
 * rows of the tokens it sees and a copy would make all of it resident. */
em_status weight_bind_rows(em_model *m, const char *name, int64_t rows, int64_t cols, em_weight *w);
/* Frees the device copies weight_bind made. */
void weights_release(em_model *m);
/* Loads a 1-D tensor of n elements as f32 into backend memory (owned by the
 * caller, free with be->ops->free). optional: absent → *out NULL, EM_OK. */
em_status weight_load_vector(em_model *m, const char *name, int64_t n, bool optional, float **out);
/* The same with `shift` added to every element on the host, before the
 * vector enters backend memory (a norm gain stored as gamma - 1). */
em_status weight_load_vector_shifted(em_model *m, const char *name, int64_t n, bool optional, float shift,
                                     float **out);
/* Loads a tensor of exactly `shape` (ndim dims) as f32, flattened (owned by
 * the caller, free with be->ops->free). */
em_status weight_load_array(em_model *m, const char *name, int ndim, const int64_t *shape, float **out);
/* The checkpoint name of canonical tensor `name` (m->weight_name applied);
 * returns name itself or buf. */
const char *weight_resolve(const em_model *m, const char *name, char *buf, size_t len);

#endif
