/*
 * ember — local LLM runtime. The public C API.
 *
 * The library is small on purpose: open a model directory, turn text into
 * token ids and back, and run a generation that reports each token through
 * a callback and can be cancelled from another thread. Everything else
 * (protocols, the server, quantization) is built on top of this header.
 *
 * Errors: every function returning em_status sets a thread-local message
 * readable with em_last_error() when it fails.
 * Ownership: objects returned through an out-pointer belong to the caller
 * and are released with the matching *_free function.
 */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_VERSION_MAJOR 0
#define EMBER_VERSION_MINOR 1
#define EMBER_VERSION_PATCH 0
#define EMBER_VERSION_STRING "0.1.0"

typedef enum em_status {
    EM_OK = 0,
    EM_ERR_IO,          /* a file could not be opened, read, mapped or written */
    EM_ERR_FORMAT,      /* input bytes are malformed (bad header, bad JSON...) */
    EM_ERR_INVALID,     /* an argument or a value is out of its allowed range */
    EM_ERR_UNSUPPORTED, /* well-formed, but a feature ember does not handle */
    EM_ERR_NOMEM,       /* an allocation failed or a size overflowed */
    EM_ERR_LIMIT,       /* a configured limit (context, output size...) hit */
    EM_ERR_CANCELLED,   /* the caller asked to stop */
    EM_ERR_INTERNAL     /* a bug in ember */
} em_status;

/* Short name of a status ("io", "format", ...). Static string. */
const char *em_status_name(em_status s);
/* Message of the last failure on this thread; "" when none. Valid until the
 * next failing call on the same thread. */
const char *em_last_error(void);

typedef struct em_model em_model;

typedef enum em_precision {
    EM_PRECISION_AUTO = 0, /* per verb default */
    EM_PRECISION_EXACT,    /* f32 activations everywhere */
    EM_PRECISION_FAST      /* bf16 dot products for large prefill GEMMs */
} em_precision;

/* A runtime configuration snapshot (EMBER_* variables, flags, overrides):
 * immutable and reference-counted; see docs/configuration.md. */
typedef struct em_config em_config;

typedef struct em_open_options {
    int n_threads;          /* 0: EMBER_THREADS, else one per core */
    int max_context;        /* 0: EMBER_CTX, else the model's max_position_embeddings */
    em_precision precision; /* AUTO: EMBER_PRECISION, else EXACT */
    int verbose;            /* log progress to stderr */
    int max_sequences;      /* concurrent sequences in the KV cache; 0: 8 */
    size_t kv_cache_bytes;  /* cap on KV-cache memory; 0: room for every
                               sequence at full context */
    size_t memory_budget;   /* cap on weights + KV cache + workspace; the
                               model is refused when one full-context
                               sequence does not fit. 0: no cap */
    const em_config *config; /* NULL: the process snapshot (read from the
                                environment on first use); the model keeps
                                its own reference */
    const char *device;      /* "cpu", "cuda" or "cuda:N"; NULL: EMBER_DEVICE
                                (default cpu) */
    int tensor_parallel;     /* GPUs to split the model over (cuda:N..N+k-1);
                                0: EMBER_TENSOR_PARALLEL (default 1) */
} em_open_options;

/* Opens a model directory (config.json + *.safetensors [+ tokenizer.json]).
 * opts may be NULL. On success *out owns the model; free with em_model_free. */
em_status em_model_open(const char *path, const em_open_options *opts, em_model **out);
void em_model_free(em_model *m);

int em_model_vocab_size(const em_model *m);
int em_model_context_size(const em_model *m);
/* Human-readable architecture name ("llama", "qwen3", ...). Static to m. */
const char *em_model_arch(const em_model *m);

/* Tokenization (requires tokenizer.json in the model directory).
 * *ids is malloc'd and owned by the caller. */
em_status em_tokenize(const em_model *m, const char *text, size_t len, int add_special,
                      int32_t **ids, size_t *n_ids);
/* Decodes ids to UTF-8; *text is malloc'd, NUL-terminated, owned by caller. */
em_status em_detokenize(const em_model *m, const int32_t *ids, size_t n_ids, int skip_special,
                        char **text);

typedef struct em_sampling {
    float temperature;        /* 0: greedy */
    float top_p;              /* 1: off */
    int top_k;                /* 0: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    int penalty_window;       /* last N tokens considered by penalties; 0: all */
    uint64_t seed;
    int has_seed;             /* 0: seed from the clock */
} em_sampling;

/* Defaults of the model (generation_config.json), or neutral ones. */
em_sampling em_sampling_defaults(const em_model *m);

/* What the token callback sees for each generated token. */
#define EM_MAX_TOP_LOGPROBS 20
typedef struct em_token_info {
    int32_t token;
    const char *text;  /* newly completed UTF-8 (may be empty while a multi-byte
                          character is incomplete); NULL without a tokenizer */
    size_t text_len;
    float logprob;     /* log-probability of `token` under the sampling
                          distribution before truncation (raw softmax of the
                          processed logits) */
    int n_top;         /* entries filled in top_ids/top_logprobs */
    int32_t top_ids[EM_MAX_TOP_LOGPROBS];
    float top_logprobs[EM_MAX_TOP_LOGPROBS];
} em_token_info;

/* Return non-zero to stop the generation. When the detokenizer still holds
 * text at the end (an incomplete UTF-8 sequence, decoded as U+FFFD), one
 * last call with token -1 carries it. */
typedef int (*em_token_fn)(void *user, const em_token_info *info);
/* Optional logit processor, run after penalties and logit bias and before
 * sampling (e.g. a grammar mask). history: all ids so far (prompt+output). */
typedef void (*em_logits_fn)(void *user, float *logits, int n_vocab, const int32_t *history,
                             size_t n_history);

typedef enum em_finish {
    EM_FINISH_NONE = 0,
    EM_FINISH_STOP,     /* an end-of-sequence token */
    EM_FINISH_LENGTH,   /* max_tokens reached */
    EM_FINISH_CALLBACK, /* the callback asked to stop */
    EM_FINISH_CANCELLED /* *cancel became non-zero */
} em_finish;

typedef struct em_generate_params {
    const int32_t *prompt;
    size_t n_prompt;
    int max_tokens;
    em_sampling sampling;
    int top_logprobs;           /* 0..EM_MAX_TOP_LOGPROBS alternatives per token */
    int no_logprob;             /* leave em_token_info.logprob 0 unless top_logprobs > 0:
                                   saves a pass over the vocabulary per token */
    const int32_t *bias_ids;    /* logit_bias: added to the logits of these ids */
    const float *bias_values;
    size_t n_bias;
    const int32_t *stop_ids;    /* extra ids that end the generation (besides EOS) */
    size_t n_stop_ids;
    int ignore_eos;             /* don't stop on the model's EOS ids */
    int skip_text;              /* leave em_token_info.text NULL (the caller
                                   detokenizes itself) */
    em_token_fn on_token;       /* may be NULL */
    em_logits_fn on_logits;     /* may be NULL */
    void *user;
    const volatile int *cancel; /* may be NULL; polled between tokens */
    int spec_draft_tokens;      /* > 0: speculative decoding with the model's
                                   multi-token-prediction head, drafting this many
                                   tokens per trunk step (EM_ERR_UNSUPPORTED when
                                   the model has none). Lossless: greedy output is
                                   unchanged, sampled output keeps its distribution. */
    em_precision precision;     /* prefill arithmetic of this generation;
                                   AUTO: the model's (em_open_options) */
} em_generate_params;

typedef struct em_generate_result {
    em_finish finish;
    size_t n_prompt;
    size_t n_cached;      /* prompt tokens reused from the prefix cache */
    size_t n_generated;
    double prefill_seconds;
    double decode_seconds;
    size_t spec_steps;    /* speculative decoding: trunk verification forwards */
    size_t spec_drafted;  /* draft tokens proposed */
    size_t spec_accepted; /* draft tokens accepted */
} em_generate_result;

/* Whether the model has a multi-token-prediction head (spec_draft_tokens). */
int em_model_has_mtp(const em_model *m);

/* Runs one generation. Thread-safe: concurrent calls on one model each get
 * their own sequence in the model's paged KV cache and take turns on the
 * compute (one forward step at a time). A prompt + max_tokens beyond the
 * context is EM_ERR_LIMIT. */
em_status em_generate(em_model *m, const em_generate_params *p, em_generate_result *result);

#ifdef __cplusplus
}
#endif
#endif
