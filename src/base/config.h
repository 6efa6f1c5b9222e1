/* config.h — the runtime configuration: every environment variable ember
 * reads, captured once into an immutable, reference-counted snapshot.
 *
 * Sources, weakest first: the built-in default, the environment (read once,
 * at start), command-line flags, and per-request overrides. A stronger
 * source never edits a snapshot in place: em_config_with_overrides builds a
 * new one, so a request's overrides reach that request alone while the
 * process snapshot and every other request keep theirs.
 *
 * Adding a variable is one line in EM_CONFIG_TABLE below (and a line in
 * docs/configuration.md); it then has a typed accessor key EMC_<ID>, shows
 * in `ember config`, and — when it names a flag — is accepted by every verb
 * that takes configuration flags.
 *
 * Kinds:
 *   VALUE   a string, used as written; with CHOICES, one of them
 *   SECRET  a string that `ember config` prints masked
 *   FLAG    "1" or "0" win over the default; anything else keeps it (warned)
 *   NUMBER  an integer in [LO, HI]
 * A value that does not fit its kind keeps the default (with a warning) when
 * it comes from the environment, and is an error when it comes from a flag
 * or a request.
 */
#ifndef EMBER_BASE_CONFIG_H
#define EMBER_BASE_CONFIG_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>

/* X(ID, NAME, KIND, DEFAULT, LO, HI, CHOICES, FLAG, HELP) — one line per variable.
 * NUMBER uses LO..HI; VALUE may restrict itself to CHOICES ("a|b|c"); a
 * choice "x:N" accepts x: followed by a decimal number. */
#define EM_CONFIG_TABLE(X) \
    X(THREADS, "EMBER_THREADS", NUMBER, "0", 0, 1024, NULL, "--threads", "compute threads; 0 = one per core") \
    X(CTX, "EMBER_CTX", NUMBER, "0", 0, 1 << 24, NULL, "--ctx", "context length; 0 = the model's max_position_embeddings") \
    X(PRECISION, "EMBER_PRECISION", VALUE, "auto", 0, 0, "auto|exact|fast", "--precision", "activation precision; auto = the verb's default") \
    X(DEVICE, "EMBER_DEVICE", VALUE, "cpu", 0, 0, "cpu|cuda|cuda:N", "--device", "where models run: cpu, or the GPU cuda[:N]") \
    X(TENSOR_PARALLEL, "EMBER_TENSOR_PARALLEL", NUMBER, "1", 1, 64, NULL, "--tensor-parallel", "GPUs one model is split over (Llama family, --device cuda)") \
    X(TP_TIMEOUT, "EMBER_TP_TIMEOUT", NUMBER, "60", 1, 86400, NULL, NULL, "seconds a tensor-parallel step or rendezvous may wait for a peer rank") \
    X(RANK, "EMBER_RANK", NUMBER, "0", 0, 4095, NULL, NULL, "this process's rank in a multi-process tensor-parallel group") \
    X(WORLD_SIZE, "EMBER_WORLD_SIZE", NUMBER, "0", 0, 4096, NULL, NULL, "ranks (processes) of a multi-process tensor-parallel group; 0 = none") \
    X(MASTER_ADDR, "EMBER_MASTER_ADDR", VALUE, "127.0.0.1", 0, 0, NULL, NULL, "address of rank 0's rendezvous (multi-process tensor parallelism)") \
    X(MASTER_PORT, "EMBER_MASTER_PORT", NUMBER, "29500", 1, 65535, NULL, NULL, "port of rank 0's rendezvous (multi-process tensor parallelism)") \
    X(CUDA_GRAPHS, "EMBER_CUDA_GRAPHS", FLAG, "1", 0, 0, NULL, NULL, "record decode steps as CUDA graphs and replay them") \
    X(DEVICE_SAMPLING, "EMBER_DEVICE_SAMPLING", FLAG, "1", 0, 0, NULL, NULL, "draw sampled tokens on the GPU where the logits are (only their ids reach the host)") \
    X(CUDA_PDL, "EMBER_CUDA_PDL", FLAG, "1", 0, 0, NULL, NULL, "in recorded decode steps, let each CUDA kernel be scheduled while the one before it finishes (sm_90+)") \
    X(CUDA_SKINNY, "EMBER_CUDA_SKINNY", FLAG, "1", 0, 0, NULL, NULL, "FAST products of 3-32 rows over small bf16 matrices on the skinny tensor-core kernel instead of cuBLAS") \
    X(CUDA_QMMA, "EMBER_CUDA_QMMA", FLAG, "1", 0, 0, NULL, NULL, "FAST products of 16-32 rows over 4-/8-bit weights on the int8 tensor-core kernel instead of dequantizing the weights for the bf16 GEMM") \
    X(CUDA_QTC, "EMBER_CUDA_QTC", FLAG, "1", 0, 0, NULL, NULL, "of those, the products over 4-bit weights on bf16 tensor cores (codes turned into bf16 in registers, activations rounded to bf16) instead of int8 ones") \
    X(CUDA_QTC_SHARE, "EMBER_CUDA_QTC_SHARE", VALUE, "all", 0, 0, "0|1|all", NULL, "of those over 4-bit weights, products of 17-64 rows on the kernel that copies a stage's activations into shared memory once a block (sm_90): all, also where K is split over blocks; 1 only where a block takes all of K; 0 never") \
    X(CUDA_FUSED_ATTENTION, "EMBER_CUDA_FUSED_ATTENTION", FLAG, "1", 0, 0, NULL, NULL, "decode steps rotate queries and keys, write the cache and attend in one kernel instead of two") \
    X(CUDA_QPIPE, "EMBER_CUDA_QPIPE", FLAG, "1", 0, 0, NULL, NULL, "FAST 4-/8-bit decode products of one or two rows on the pipelined kernel (weights through shared memory) instead of the register-resident one") \
    X(CUDA_QMLP, "EMBER_CUDA_QMLP", VALUE, "auto", 0, 0, "auto|1|0", NULL, "a 4-/8-bit MLP of one or two decode rows (gate, up, SwiGLU, down) in one pipelined launch instead of two (sm_90+, with EMBER_CUDA_QPIPE): 1 wherever it applies, auto where the gate and up alone would not balance on the pipelined kernel") \
    X(SPIN_US, "EMBER_SPIN_US", NUMBER, "-1", -1, 1000000, NULL, NULL, "microseconds a server thread that expects work polls before it sleeps; -1 = 2000 on 4+ cores, else 0") \
    X(CPU_ISA, "EMBER_CPU_ISA", VALUE, "auto", 0, 0, "auto|portable|avx2|avx512|amx", NULL, "widest CPU kernels allowed") \
    X(PREFAULT, "EMBER_PREFAULT", FLAG, "0", 0, 0, NULL, "--prefault", "read every weight page while opening a model") \
    X(CPU_WEIGHTS, "EMBER_CPU_WEIGHTS", VALUE, "auto", 0, 0, "auto|copy|map", "--cpu-weights", "where CPU weights live: copy = anonymous memory on huge pages, map = read in place from the mapped files; auto = copy where the kernel has transparent huge pages and the weights fit in available memory") \
    X(LOG_LEVEL, "EMBER_LOG_LEVEL", VALUE, "warn", 0, 0, "error|warn|info|debug", "--log-level", "least severe messages logged") \
    X(HOST, "EMBER_HOST", VALUE, "127.0.0.1", 0, 0, NULL, "--host", "address the server listens on") \
    X(PORT, "EMBER_PORT", NUMBER, "8080", 1, 65535, NULL, "--port", "port the server listens on") \
    X(API_KEY, "EMBER_API_KEY", SECRET, "", 0, 0, NULL, "--api-key", "bearer key the server requires; empty = none") \
    X(MAX_CONCURRENCY, "EMBER_MAX_CONCURRENCY", NUMBER, "4", 1, 4096, NULL, "--max-concurrency", "requests the server runs at once") \
    X(DEMO_MODEL, "EMBER_DEMO_MODEL", VALUE, "", 0, 0, NULL, NULL, "demo model directory used when MODEL is omitted") \
    X(PROFILES_DIR, "EMBER_PROFILES_DIR", VALUE, "", 0, 0, NULL, "--profiles", "directory of extra model profiles (*.json)") \
    X(TEMPLATE_NOW, "EMBER_TEMPLATE_NOW", NUMBER, "0", 0, 253402300799LL, NULL, NULL, "seconds since the epoch chat templates see as now (strftime_now); 0 = the clock") \
    X(HF_HOME, "HF_HOME", VALUE, "", 0, 0, NULL, NULL, "Hugging Face home; the hub cache is $HF_HOME/hub") \
    X(HF_HUB_CACHE, "HF_HUB_CACHE", VALUE, "", 0, 0, NULL, NULL, "Hugging Face hub cache (wins over HF_HOME)") \
    X(XDG_CACHE_HOME, "XDG_CACHE_HOME", VALUE, "", 0, 0, NULL, NULL, "default HF_HOME is $XDG_CACHE_HOME/huggingface") \
    X(HOME, "HOME", VALUE, "", 0, 0, NULL, NULL, "default HF_HOME is ~/.cache/huggingface")

/* Variables one request may override (the X-Ember-Config header): they
 * change how that request is rendered or computed and nothing else. Never
 * what the process is built around: the listen address, the key, threads,
 * the device, the context the KV cache was sized for. */
#define EM_CONFIG_PER_REQUEST(X) X(PRECISION) X(TEMPLATE_NOW)

typedef enum em_config_key {
#define EMC_ENUM_(ID, NAME, KIND, DEF, LO, HI, CHOICES, FLAG, HELP) EMC_##ID,
    EM_CONFIG_TABLE(EMC_ENUM_)
#undef EMC_ENUM_
    EMC_COUNT
} em_config_key;

typedef enum em_config_kind { EM_CFG_VALUE, EM_CFG_SECRET, EM_CFG_FLAG, EM_CFG_NUMBER } em_config_kind;

typedef enum em_config_source {
    EM_CFG_SRC_DEFAULT = 0,
    EM_CFG_SRC_ENV,
    EM_CFG_SRC_FLAG,
    EM_CFG_SRC_REQUEST
} em_config_source;

typedef struct em_config_var {
    const char *name;
    em_config_kind kind;
    const char *def;
    long long lo, hi;
    const char *choices; /* "a|b|c", or NULL for any string */
    const char *flag; /* command-line flag, or NULL */
    const char *help;
} em_config_var;

typedef struct em_config em_config;

typedef struct em_config_override {
    const char *name;  /* variable name ("EMBER_THREADS") */
    const char *value;
} em_config_override;

/* The variable table (static). */
const em_config_var *em_config_var_at(em_config_key k);
/* Key of a variable name; -1 when unknown. */
int em_config_find(const char *name);
/* The known name closest to `name` (edit distance), or NULL when none is
 * reasonably close. Static string. */
const char *em_config_suggest(const char *name);
/* Variables ember knows but does not read (the test suite's); naming them
 * in the environment is not warned about. */
bool em_config_is_reserved(const char *name);

/* Builds a snapshot from an environment array ("NAME=value", NULL-ended).
 * Lenient: bad values keep the default and add a warning. *out is owned by
 * the caller (em_config_release). */
em_status em_config_from_env(char *const *envp, em_config **out);

/* Builds a new snapshot: base with n overrides applied, each recorded with
 * source src (FLAG or REQUEST). Strict: an unknown name or a bad value is
 * EM_ERR_INVALID naming it. base is not modified; *out is a new reference
 * owned by the caller. Thread-safe (base may be shared). */
em_status em_config_with_overrides(const em_config *base, const em_config_override *ov, size_t n,
                                   em_config_source src, em_config **out);

/* Whether a request may override variable k (EM_CONFIG_PER_REQUEST). */
bool em_config_per_request(em_config_key k);

/* At most this many overrides per request, and this many bytes of text. */
#define EM_CONFIG_REQUEST_MAX 16
#define EM_CONFIG_REQUEST_MAX_BYTES 4096

/* Builds the snapshot of one request: base with the overrides written in
 * text as "NAME=value" items separated by commas ("EMBER_PRECISION=exact,
 * EMBER_TEMPLATE_NOW=1700000000"; spaces around items, names and values are
 * ignored). Each is recorded with source REQUEST. An empty text gives a new
 * reference to base. Errors (EM_ERR_INVALID, the message names the
 * variable): an item without '=', an unknown name (with the closest known
 * one), a name that cannot be overridden per request, a name given twice,
 * a value that does not fit, too many items or too much text. *out is a
 * new reference owned by the caller. Thread-safe. */
em_status em_config_for_request(const em_config *base, const char *text, em_config **out);

/* Reference counting; both thread-safe. release(NULL) is a no-op. */
em_config *em_config_retain(const em_config *c);
void em_config_release(em_config *c);

/* Typed reads. Strings are owned by the snapshot. */
const char *em_config_str(const em_config *c, em_config_key k);
long long em_config_int(const em_config *c, em_config_key k);
bool em_config_flag(const em_config *c, em_config_key k);
em_config_source em_config_source_of(const em_config *c, em_config_key k);
const char *em_config_source_name(em_config_source s);

/* Warnings gathered while building from the environment (unknown EMBER_*
 * names with their closest known name, bad values). Owned by the snapshot. */
size_t em_config_n_warnings(const em_config *c);
const char *em_config_warning(const em_config *c, size_t i);

/* The process snapshot. em_config_init builds it from the environment once
 * (the first call wins; later calls return EM_OK) and logs its warnings;
 * em_config_global calls it lazily for library users. The returned pointer
 * stays valid until exit. */
em_status em_config_init(void);
const em_config *em_config_global(void);
/* Replaces the process snapshot (the CLI, after its flags are parsed). Takes
 * a reference to c. Snapshots handed out before stay valid until exit. Call
 * before starting threads that read the global snapshot. */
void em_config_set_global(const em_config *c);

#endif
