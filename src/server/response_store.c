/* response_store.c — the Responses API record store (see response_store.h).
 *
 * Records live in a chained hash table keyed by id and on a doubly linked
 * list ordered by last use (head = most recent), which is the eviction
 * order. Each record is kept as its JSON text: the text is what the size
 * cap counts, what the persistence file holds, and what a lookup parses
 * back, so a caller never shares mutable JSON with another thread. */
#include "server/response_store.h"

#include "base/alloc.h"
#include "base/file.h"
#include "base/hash.h"
#include "base/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RS_MAX_FILE (256u << 20) /* a persisted record larger than this is not loaded */

typedef struct rs_entry {
    char id[72];
    char *text;              /* the record, serialised */
    size_t len;
    double expires;          /* wall clock; 0: never */
    struct rs_entry *next;   /* hash chain */
    struct rs_entry *prev_lru, *next_lru;
} rs_entry;

struct resp_store {
    resp_store_config cfg;
    char *dir;
    pthread_mutex_t mu;
    rs_entry **buckets;
    size_t n_buckets;
    rs_entry *lru_head, *lru_tail;
    resp_store_stats st;
};

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double store_now(const resp_store *s) { return s->cfg.now ? s->cfg.now() : wall_now(); }

bool resp_store_valid_id(const char *id) {
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- table and list ------------------------------------------------------- */

static size_t bucket_of(const resp_store *s, const char *id) {
    return (size_t)(em_hash_finish(em_hash_bytes(0, id, strlen(id))) & (s->n_buckets - 1));
}

static rs_entry *find(const resp_store *s, const char *id) {
    for (rs_entry *e = s->buckets[bucket_of(s, id)]; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

static void lru_unlink(resp_store *s, rs_entry *e) {
    if (e->prev_lru) e->prev_lru->next_lru = e->next_lru;
    else s->lru_head = e->next_lru;
    if (e->next_lru) e->next_lru->prev_lru = e->prev_lru;
    else s->lru_tail = e->prev_lru;
    e->prev_lru = e->next_lru = NULL;
}

static void lru_push_front(resp_store *s, rs_entry *e) {
    e->prev_lru = NULL;
    e->next_lru = s->lru_head;
    if (s->lru_head) s->lru_head->prev_lru = e;
    s->lru_head = e;
    if (!s->lru_tail) s->lru_tail = e;
}

/* Doubles the table when it gets crowded (a failed grow keeps the old one). */
static void maybe_grow(resp_store *s) {
    if (s->st.count < s->n_buckets) return;
    size_t n = s->n_buckets * 2;
    rs_entry **b = em_calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < s->n_buckets; i++)
        for (rs_entry *e = s->buckets[i], *next; e; e = next) {
            next = e->next;
            size_t h = (size_t)(em_hash_finish(em_hash_bytes(0, e->id, strlen(e->id))) & (n - 1));
            e->next = b[h];
            b[h] = e;
        }
    free(s->buckets);
    s->buckets = b;
    s->n_buckets = n;
}

static void insert(resp_store *s, rs_entry *e) {
    size_t h = bucket_of(s, e->id);
    e->next = s->buckets[h];
    s->buckets[h] = e;
    lru_push_front(s, e);
    s->st.count++;
    s->st.bytes += e->len;
    maybe_grow(s);
}

/* ---- persistence ------------------------------------------------------------ */

static char *record_path(const resp_store *s, const char *id, const char *suffix) {
    char name[96];
    snprintf(name, sizeof name, "%s%s", id, suffix);
    return em_path_join(s->dir, name);
}

static void unlink_record(const resp_store *s, const char *id) {
    if (!s->dir) return;
    char *p = record_path(s, id, ".json");
    if (p && unlink(p) && errno != ENOENT) EM_LOGW("response store: cannot remove %s: %s", p, strerror(errno));
    free(p);
}

/* Writes text to <dir>/<id>.json through a temporary file and a rename. */
static em_status persist(const resp_store *s, const char *id, const char *text, size_t len) {
    char *tmp = record_path(s, id, ".json.tmp"), *path = record_path(s, id, ".json");
    em_status st = EM_OK;
    int fd = tmp && path ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (fd < 0) st = em_fail(EM_ERR_IO, "response store: cannot create %s: %s", tmp ? tmp : id, strerror(errno));
    for (size_t off = 0; st == EM_OK && off < len;) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) st = em_fail(EM_ERR_IO, "response store: cannot write %s: %s", tmp, strerror(errno));
        else off += (size_t)n;
    }
    if (st == EM_OK && fsync(fd)) st = em_fail(EM_ERR_IO, "response store: cannot flush %s: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) && st == EM_OK) st = em_fail(EM_ERR_IO, "response store: cannot close %s", tmp);
    if (st == EM_OK && rename(tmp, path))
        st = em_fail(EM_ERR_IO, "response store: cannot rename %s: %s", tmp, strerror(errno));
    if (st != EM_OK && tmp) unlink(tmp);
    free(tmp);
    free(path);
    return st;
}

/* ---- removal ------------------------------------------------------------------ */

static void entry_free(rs_entry *e) {
    if (!e) return;
    free(e->text);
    free(e);
}

/* Unlinks e from the table and the list and frees it (and its file). */
static void drop(resp_store *s, rs_entry *e) {
    rs_entry **pp = &s->buckets[bucket_of(s, e->id)];
    while (*pp && *pp != e) pp = &(*pp)->next;
    if (*pp) *pp = e->next;
    lru_unlink(s, e);
    s->st.count--;
    s->st.bytes -= e->len;
    unlink_record(s, e->id);
    entry_free(e);
}

static bool expired(const resp_store *s, const rs_entry *e, double now) {
    (void)s;
    return e->expires > 0 && now >= e->expires;
}

/* Drops every expired record (from the least recently used end; a record
 * used recently may still be older, so the whole list is walked). */
static void sweep(resp_store *s, double now) {
    for (rs_entry *e = s->lru_tail, *prev; e; e = prev) {
        prev = e->prev_lru;
        if (expired(s, e, now)) {
            drop(s, e);
            s->st.expired++;
        }
    }
}

static void evict_to_cap(resp_store *s, const rs_entry *keep) {
    while (s->cfg.max_bytes && s->st.bytes > s->cfg.max_bytes && s->lru_tail && s->lru_tail != keep) {
        drop(s, s->lru_tail);
        s->st.evicted++;
    }
}

/* ---- open / load ------------------------------------------------------------------ */

static rs_entry *entry_new(const char *id, char *text, size_t len, double expires) {
    rs_entry *e = em_calloc(1, sizeof *e);
    if (!e) return NULL;
    snprintf(e->id, sizeof e->id, "%s", id);
    e->text = text;
    e->len = len;
    e->expires = expires;
    return e;
}

/* The expiry time a record carries ("expires_at"; absent: never). */
static double record_expiry(const json_t *rec) {
    json_t *x = json_object_get(rec, "expires_at");
    return json_is_number(x) ? json_number_value(x) : 0;
}

static void load_one(resp_store *s, const char *name, double now) {
    size_t n = strlen(name);
    if (n <= 5 || strcmp(name + n - 5, ".json")) {
        if (n > 9 && !strcmp(name + n - 9, ".json.tmp")) { /* an interrupted write: never acknowledged */
            char *p = em_path_join(s->dir, name);
            if (p) unlink(p);
            free(p);
        }
        return;
    }
    char id[72];
    snprintf(id, sizeof id, "%.*s", (int)(n - 5), name);
    if (!resp_store_valid_id(id) || find(s, id)) return;
    char *path = em_path_join(s->dir, name), *text = NULL;
    size_t len = 0;
    if (!path || em_read_file(path, RS_MAX_FILE, &text, &len) != EM_OK) {
        EM_LOGW("response store: skipping %s: %s", path ? path : name, em_last_error());
        free(path);
        return;
    }
    json_t *rec = json_loadb(text, len, 0, NULL);
    double exp = rec ? record_expiry(rec) : 0;
    if (!json_is_object(rec)) {
        EM_LOGW("response store: skipping %s: not a JSON object", path);
        free(text);
    } else if (exp > 0 && now >= exp) {
        unlink(path);
        free(text);
        s->st.expired++;
    } else {
        rs_entry *e = entry_new(id, text, len, exp);
        if (e) {
            insert(s, e);
            s->st.loaded++;
        } else free(text);
    }
    json_decref(rec);
    free(path);
}

static em_status load_dir(resp_store *s) {
    if (mkdir(s->dir, 0700) && errno != EEXIST)
        return em_fail(EM_ERR_IO, "response store: cannot create directory %s: %s", s->dir, strerror(errno));
    DIR *d = opendir(s->dir);
    if (!d) return em_fail(EM_ERR_IO, "response store: cannot open directory %s: %s", s->dir, strerror(errno));
    double now = store_now(s);
    struct dirent *de;
    while ((de = readdir(d))) load_one(s, de->d_name, now);
    closedir(d);
    evict_to_cap(s, NULL);
    return EM_OK;
}

em_status resp_store_open(const resp_store_config *cfg, resp_store **out) {
    resp_store *s = em_calloc(1, sizeof *s);
    if (!s) return em_fail(EM_ERR_NOMEM, "response store: out of memory");
    s->cfg = *cfg;
    s->n_buckets = 64;
    s->buckets = em_calloc(s->n_buckets, sizeof *s->buckets);
    s->dir = cfg->dir ? em_strdup(cfg->dir) : NULL;
    s->cfg.dir = s->dir;
    pthread_mutex_init(&s->mu, NULL);
    em_status st = !s->buckets || (cfg->dir && !s->dir) ? em_fail(EM_ERR_NOMEM, "response store: out of memory") : EM_OK;
    if (st == EM_OK && s->dir) st = load_dir(s);
    if (st != EM_OK) {
        resp_store_free(s);
        return st;
    }
    *out = s;
    return EM_OK;
}

void resp_store_free(resp_store *s) {
    if (!s) return;
    for (rs_entry *e = s->lru_head, *next; e; e = next) {
        next = e->next_lru;
        entry_free(e);
    }
    free(s->buckets);
    free(s->dir);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- operations --------------------------------------------------------------------- */

em_status resp_store_put(resp_store *s, const char *id, const json_t *record) {
    if (!resp_store_valid_id(id)) return em_fail(EM_ERR_INVALID, "response store: invalid id");
    double now = store_now(s);
    double exp = s->cfg.ttl_s > 0 ? now + s->cfg.ttl_s : 0;
    json_t *rec = json_copy((json_t *)record); /* shallow: only the top level gains a key */
    if (!rec || json_object_set_new(rec, "expires_at", exp > 0 ? json_real(exp) : json_null())) {
        json_decref(rec);
        return em_fail(EM_ERR_NOMEM, "response store: out of memory");
    }
    char *text = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    if (!text) return em_fail(EM_ERR_NOMEM, "response store: out of memory serialising %s", id);
    size_t len = strlen(text);
    if (s->cfg.max_bytes && len > s->cfg.max_bytes) {
        free(text);
        return em_fail(EM_ERR_LIMIT, "response store: the response is %zu bytes, more than the store holds (%zu)", len,
                       s->cfg.max_bytes);
    }
    pthread_mutex_lock(&s->mu);
    em_status st = s->dir ? persist(s, id, text, len) : EM_OK;
    rs_entry *e = st == EM_OK ? entry_new(id, text, len, exp) : NULL;
    if (st == EM_OK && !e) st = em_fail(EM_ERR_NOMEM, "response store: out of memory");
    if (st == EM_OK) {
        rs_entry *old = find(s, id);
        if (old) { /* replaced: its file now holds the new record */
            char *keep_dir = s->dir;
            s->dir = NULL;
            drop(s, old);
            s->dir = keep_dir;
        }
        insert(s, e);
        sweep(s, now);
        evict_to_cap(s, e);
    } else {
        free(text);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

json_t *resp_store_get(resp_store *s, const char *id) {
    if (!resp_store_valid_id(id)) return NULL;
    json_t *out = NULL;
    pthread_mutex_lock(&s->mu);
    rs_entry *e = find(s, id);
    if (e && expired(s, e, store_now(s))) {
        drop(s, e);
        s->st.expired++;
        e = NULL;
    }
    if (e) {
        lru_unlink(s, e);
        lru_push_front(s, e);
        out = json_loadb(e->text, e->len, 0, NULL);
        s->st.hits++;
    } else {
        s->st.misses++;
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

bool resp_store_delete(resp_store *s, const char *id) {
    if (!resp_store_valid_id(id)) return false;
    pthread_mutex_lock(&s->mu);
    rs_entry *e = find(s, id);
    bool live = e && !expired(s, e, store_now(s));
    if (e) drop(s, e);
    if (e && !live) s->st.expired++;
    pthread_mutex_unlock(&s->mu);
    return live;
}

void resp_store_get_stats(resp_store *s, resp_store_stats *out) {
    pthread_mutex_lock(&s->mu);
    sweep(s, store_now(s));
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}
