/* config.c — the configuration table, snapshots built from the environment
 * or from a base plus overrides, and the process snapshot.
 *
 * A snapshot is never written after it is built, so any number of threads
 * may read one; only its reference count changes (atomically). */
#include "base/config.h"

#include "base/alloc.h"
#include "base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const em_config_var vars[EMC_COUNT] = {
#define EMC_ROW_(ID, NAME, KIND, DEF, LO, HI, CHOICES, FLAG, HELP) \
    [EMC_##ID] = {NAME, EM_CFG_##KIND, DEF, LO, HI, CHOICES, FLAG, HELP},
    EM_CONFIG_TABLE(EMC_ROW_)
#undef EMC_ROW_
};

/* Read by the test suite and scripts, not by ember. */
static const char *const reserved[] = {"EMBER_SRC", "EMBER_BIN", "EMBER_BUILD", "EMBER_SANITIZED",
                                       "EMBER_BENCH", "EMBER_BENCH_THREADS", "EMBER_TEST_CACHE",
                                       "EMBER_TEST_CUDA_DEVICE"};

typedef struct cfg_entry {
    char *str;
    long long num;
    bool flag;
    em_config_source src;
} cfg_entry;

struct em_config {
    atomic_int refs;
    cfg_entry e[EMC_COUNT];
    char **warnings;
    size_t n_warnings;
};

const em_config_var *em_config_var_at(em_config_key k) { return k < EMC_COUNT ? &vars[k] : NULL; }

int em_config_find(const char *name) {
    for (int k = 0; k < EMC_COUNT; k++)
        if (!strcmp(vars[k].name, name)) return k;
    return -1;
}

bool em_config_is_reserved(const char *name) {
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (!strcmp(reserved[i], name)) return true;
    return false;
}

/* Levenshtein distance, case-insensitive, with a cap: names are short. */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return (size_t)-1;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + ((a[i - 1] | 32) != (b[j - 1] | 32));
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof prev[0]);
    }
    return prev[lb];
}

const char *em_config_suggest(const char *name) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int k = 0; k < EMC_COUNT; k++) {
        size_t d = edit_distance(name, vars[k].name);
        if (d < best_d) {
            best_d = d;
            best = vars[k].name;
        }
    }
    /* Beyond a third of the name it is a different word, not a typo. */
    size_t limit = strlen(name) / 3 + 1;
    return best_d <= limit ? best : NULL;
}

static bool in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return true;
        /* "x:N": the prefix "x:" then one to three digits */
        if (len >= 2 && p[len - 1] == 'N' && p[len - 2] == ':' && n > len - 1 && n <= len + 2 &&
            !strncmp(p, v, len - 1) && strspn(v + len - 1, "0123456789") == n - (len - 1))
            return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

/* Parses v for variable k into *e (str is duplicated). On a value that does
 * not fit, writes the reason into why and returns false (e untouched). */
static bool parse_value(em_config_key k, const char *v, cfg_entry *e, char *why, size_t cap) {
    const em_config_var *var = &vars[k];
    long long num = 0;
    bool flag = false;
    if (var->kind == EM_CFG_NUMBER) {
        char *end;
        errno = 0;
        num = strtoll(v, &end, 10);
        if (!*v || *end || errno) {
            snprintf(why, cap, "%s=%.64s is not an integer", var->name, v);
            return false;
        }
        if (num < var->lo || num > var->hi) {
            snprintf(why, cap, "%s=%.64s is outside [%lld, %lld]", var->name, v, var->lo, var->hi);
            return false;
        }
    } else if (var->kind == EM_CFG_FLAG) {
        if (strcmp(v, "1") && strcmp(v, "0")) {
            snprintf(why, cap, "%s=%.64s: a flag is 1 or 0", var->name, v);
            return false;
        }
        flag = v[0] == '1';
    } else if (var->choices && !in_choices(var->choices, v)) {
        snprintf(why, cap, "%s=%.64s is not one of %s", var->name, v, var->choices);
        return false;
    }
    char *s = em_strdup(v);
    if (!s) {
        snprintf(why, cap, "out of memory");
        return false;
    }
    free(e->str);
    *e = (cfg_entry){.str = s, .num = num, .flag = flag, .src = e->src};
    return true;
}

static void config_free(em_config *c) {
    for (int k = 0; k < EMC_COUNT; k++) free(c->e[k].str);
    for (size_t i = 0; i < c->n_warnings; i++) free(c->warnings[i]);
    free(c->warnings);
    free(c);
}

static em_config *config_new(void) {
    em_config *c = em_calloc(1, sizeof *c);
    if (!c) return NULL;
    atomic_init(&c->refs, 1);
    return c;
}

static bool add_warning(em_config *c, const char *text) {
    char **w = em_realloc(c->warnings, (c->n_warnings + 1) * sizeof *w);
    if (!w) return false;
    c->warnings = w;
    if (!(w[c->n_warnings] = em_strdup(text))) return false;
    c->n_warnings++;
    return true;
}

static em_status set_defaults(em_config *c) {
    char why[160];
    for (int k = 0; k < EMC_COUNT; k++)
        if (!parse_value((em_config_key)k, vars[k].def, &c->e[k], why, sizeof why))
            return em_fail(EM_ERR_INTERNAL, "config default: %s", why);
    return EM_OK;
}

/* One "NAME=value" of the environment. */
static em_status take_env(em_config *c, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv || (size_t)(eq - kv) >= 128) return EM_OK;
    char name[128], why[320];
    memcpy(name, kv, (size_t)(eq - kv));
    name[eq - kv] = 0;
    int k = em_config_find(name);
    if (k < 0) {
        if (strncmp(name, "EMBER_", 6) || em_config_is_reserved(name)) return EM_OK;
        const char *near = em_config_suggest(name);
        if (near) snprintf(why, sizeof why, "unknown variable %s (did you mean %s?)", name, near);
        else snprintf(why, sizeof why, "unknown variable %s (`ember config` lists the known ones)", name);
        return add_warning(c, why) ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
    }
    if (parse_value((em_config_key)k, eq + 1, &c->e[k], why, sizeof why)) {
        c->e[k].src = EM_CFG_SRC_ENV;
        return EM_OK;
    }
    char msg[400];
    snprintf(msg, sizeof msg, "%s; using the default %s", why, vars[k].def[0] ? vars[k].def : "(empty)");
    return add_warning(c, msg) ? EM_OK : em_fail(EM_ERR_NOMEM, "out of memory");
}

em_status em_config_from_env(char *const *envp, em_config **out) {
    *out = NULL;
    em_config *c = config_new();
    if (!c) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = set_defaults(c);
    for (size_t i = 0; s == EM_OK && envp && envp[i]; i++) s = take_env(c, envp[i]);
    if (s != EM_OK) {
        config_free(c);
        return s;
    }
    *out = c;
    return EM_OK;
}

em_status em_config_with_overrides(const em_config *base, const em_config_override *ov, size_t n,
                                   em_config_source src, em_config **out) {
    *out = NULL;
    if (!base) return em_fail(EM_ERR_INVALID, "configuration overrides need a base snapshot");
    em_config *c = config_new();
    if (!c) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = EM_OK;
    for (int k = 0; k < EMC_COUNT && s == EM_OK; k++) {
        c->e[k] = base->e[k];
        c->e[k].str = em_strdup(base->e[k].str);
        if (!c->e[k].str) s = em_fail(EM_ERR_NOMEM, "out of memory");
    }
    /* The environment's warnings stay with every snapshot derived from it. */
    for (size_t i = 0; s == EM_OK && i < base->n_warnings; i++)
        if (!add_warning(c, base->warnings[i])) s = em_fail(EM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; s == EM_OK && i < n; i++) {
        int k = ov[i].name ? em_config_find(ov[i].name) : -1;
        char why[320];
        if (k < 0) {
            const char *near = ov[i].name ? em_config_suggest(ov[i].name) : NULL;
            s = em_fail(EM_ERR_INVALID, "unknown configuration variable %s%s%s%s", ov[i].name ? ov[i].name : "(null)",
                        near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
        } else if (!ov[i].value) {
            s = em_fail(EM_ERR_INVALID, "%s: no value given", ov[i].name);
        } else if (!parse_value((em_config_key)k, ov[i].value, &c->e[k], why, sizeof why)) {
            s = em_fail(EM_ERR_INVALID, "%s", why);
        } else {
            c->e[k].src = src;
        }
    }
    if (s != EM_OK) {
        config_free(c);
        return s;
    }
    *out = c;
    return EM_OK;
}

bool em_config_per_request(em_config_key k) {
#define EMC_PER_REQUEST_(ID) \
    if (k == EMC_##ID) return true;
    EM_CONFIG_PER_REQUEST(EMC_PER_REQUEST_)
#undef EMC_PER_REQUEST_
    return false;
}

/* [p, end) without the spaces and tabs around it. */
static void trim(const char **p, const char **end) {
    while (*p < *end && (**p == ' ' || **p == '\t')) (*p)++;
    while (*end > *p && ((*end)[-1] == ' ' || (*end)[-1] == '\t')) (*end)--;
}

/* Splits text into at most EM_CONFIG_REQUEST_MAX "NAME=value" items, copied
 * into buf (NUL-separated) and pointed to by ov. */
static em_status split_request(const char *text, char *buf, em_config_override *ov, size_t *n) {
    *n = 0;
    char *w = buf;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, ','), *next;
        if (!end) end = p + strlen(p);
        next = *end ? end + 1 : end;
        trim(&p, &end);
        if (p == end) {
            if (*next || *n) return em_fail(EM_ERR_INVALID, "an empty item in the configuration overrides");
            p = next;
            continue;
        }
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq) return em_fail(EM_ERR_INVALID, "configuration override '%.*s' is not NAME=value", (int)(end - p), p);
        if (*n == EM_CONFIG_REQUEST_MAX)
            return em_fail(EM_ERR_INVALID, "more than %d configuration overrides", EM_CONFIG_REQUEST_MAX);
        const char *ne = eq, *v = eq + 1;
        trim(&p, &ne);
        trim(&v, &end);
        ov[*n].name = w;
        memcpy(w, p, (size_t)(ne - p));
        w += ne - p;
        *w++ = 0;
        ov[*n].value = w;
        memcpy(w, v, (size_t)(end - v));
        w += end - v;
        *w++ = 0;
        (*n)++;
        p = next;
    }
    return EM_OK;
}

/* Each name known, overridable per request, and given once. */
static em_status check_request_names(const em_config_override *ov, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int k = em_config_find(ov[i].name);
        if (k < 0) {
            const char *near = em_config_suggest(ov[i].name);
            return em_fail(EM_ERR_INVALID, "unknown configuration variable %.64s%s%s%s", ov[i].name,
                           near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
        }
        if (!em_config_per_request((em_config_key)k))
            return em_fail(EM_ERR_INVALID, "%s cannot be overridden per request (only process-wide)", ov[i].name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(ov[j].name, ov[i].name))
                return em_fail(EM_ERR_INVALID, "%s is overridden twice in one request", ov[i].name);
    }
    return EM_OK;
}

em_status em_config_for_request(const em_config *base, const char *text, em_config **out) {
    *out = NULL;
    if (!base) return em_fail(EM_ERR_INVALID, "configuration overrides need a base snapshot");
    size_t len = text ? strlen(text) : 0;
    if (len > EM_CONFIG_REQUEST_MAX_BYTES)
        return em_fail(EM_ERR_INVALID, "the configuration overrides are %zu bytes, more than %d", len,
                       EM_CONFIG_REQUEST_MAX_BYTES);
    char buf[EM_CONFIG_REQUEST_MAX_BYTES + 2];
    em_config_override ov[EM_CONFIG_REQUEST_MAX];
    size_t n = 0;
    if (len) {
        EM_TRY(split_request(text, buf, ov, &n));
        EM_TRY(check_request_names(ov, n));
    }
    if (!n) {
        *out = em_config_retain(base);
        return EM_OK;
    }
    return em_config_with_overrides(base, ov, n, EM_CFG_SRC_REQUEST, out);
}

em_config *em_config_retain(const em_config *c) {
    em_config *m = (em_config *)c; /* the count is the one mutable field */
    if (m) atomic_fetch_add(&m->refs, 1);
    return m;
}

void em_config_release(em_config *c) {
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) config_free(c);
}

const char *em_config_str(const em_config *c, em_config_key k) { return c->e[k].str; }
long long em_config_int(const em_config *c, em_config_key k) { return c->e[k].num; }
bool em_config_flag(const em_config *c, em_config_key k) { return c->e[k].flag; }
em_config_source em_config_source_of(const em_config *c, em_config_key k) { return c->e[k].src; }
size_t em_config_n_warnings(const em_config *c) { return c->n_warnings; }
const char *em_config_warning(const em_config *c, size_t i) { return i < c->n_warnings ? c->warnings[i] : NULL; }

const char *em_config_source_name(em_config_source s) {
    switch (s) {
    case EM_CFG_SRC_DEFAULT: return "default";
    case EM_CFG_SRC_ENV: return "env";
    case EM_CFG_SRC_FLAG: return "flag";
    case EM_CFG_SRC_REQUEST: return "request";
    }
    return "?";
}

/* ---- the process snapshot ---- */

extern char **environ;

/* Every snapshot ever installed stays reachable here until exit, so a
 * pointer from em_config_global never dangles after em_config_set_global. */
typedef struct installed {
    em_config *cfg;
    struct installed *next;
} installed;

static _Atomic(em_config *) global_cfg;
static installed *history;
static pthread_mutex_t history_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static em_status init_status = EM_OK;

static void keep(em_config *c) {
    installed *n = em_calloc(1, sizeof *n);
    pthread_mutex_lock(&history_mu);
    if (n) {
        n->cfg = c;
        n->next = history;
        history = n;
    }
    /* Without the node the reference is simply never dropped: a few bytes,
     * still reachable through global_cfg or a caller. */
    pthread_mutex_unlock(&history_mu);
}

static em_log_level level_of(const char *s) {
    return !strcmp(s, "error") ? EM_LOG_ERROR : !strcmp(s, "info") ? EM_LOG_INFO
                                              : !strcmp(s, "debug") ? EM_LOG_DEBUG : EM_LOG_WARN;
}

/* Out of memory at start-up: the defaults, held in static storage. */
static em_config fallback;

static void init_fallback(void) {
    atomic_init(&fallback.refs, 1); /* never reaches 0: nothing to free */
    for (int k = 0; k < EMC_COUNT; k++) {
        fallback.e[k].str = (char *)vars[k].def;
        fallback.e[k].num = strtoll(vars[k].def, NULL, 10);
        fallback.e[k].flag = vars[k].def[0] == '1';
    }
}

static void init_process(void) {
    em_config *c = NULL;
    init_status = em_config_from_env(environ, &c);
    if (init_status != EM_OK) {
        init_fallback();
        atomic_store(&global_cfg, &fallback);
        return;
    }
    em_log_set_level(level_of(em_config_str(c, EMC_LOG_LEVEL)));
    for (size_t i = 0; i < c->n_warnings; i++) EM_LOGW("%s", c->warnings[i]);
    keep(c);
    atomic_store(&global_cfg, c);
}

em_status em_config_init(void) {
    pthread_once(&init_once, init_process);
    return init_status;
}

const em_config *em_config_global(void) {
    pthread_once(&init_once, init_process);
    return atomic_load(&global_cfg);
}

void em_config_set_global(const em_config *c) {
    pthread_once(&init_once, init_process);
    em_config *r = em_config_retain(c);
    keep(r);
    atomic_store(&global_cfg, r);
    /* -v / -q set the level directly while flags are parsed; only an
     * explicit --log-level replaces it here. */
    if (em_config_source_of(r, EMC_LOG_LEVEL) >= EM_CFG_SRC_FLAG)
        em_log_set_level(level_of(em_config_str(r, EMC_LOG_LEVEL)));
}
