/* kv_store.c — prefix blocks on disk (see kv_store.h).
 *
 * File layout (host byte order, checked by a marker): a kvs_header, then
 * block_size token ids (int32), then per layer the block's K and V (f32,
 * block_size x n_kv x head_dim each), then state_bytes of recurrent state.
 * The checksum covers the header (with the checksum field zero) and all
 * that follows. */
#include "engine/kv_store.h"

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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KVS_MAGIC "EMBERKV"
#define KVS_VERSION 1u
#define KVS_ENDIAN 0x01020304u
#define KVS_KEY 64
#define KVS_DEFAULT_BYTES ((size_t)4 << 30)
#define KVS_NAME 24 /* "<16 hex>.kvb" + NUL, padded */

typedef struct kvs_header {
    char magic[8];
    uint32_t version, endian;
    char key[KVS_KEY]; /* the model's identity, NUL-padded */
    uint64_t hash;     /* chained content hash of the prefix up to the block's end */
    uint32_t block_size, n_layers, n_kv, head_dim;
    uint64_t kv_bytes, state_bytes, checksum;
    uint32_t index; /* the block's place in its prefix (eviction order) */
    uint32_t reserved;
} kvs_header;
_Static_assert(sizeof(kvs_header) == 136, "kvs_header has no padding");

typedef struct kvs_file {
    char name[KVS_NAME];
    size_t bytes;
    time_t used;   /* seconds: blocks of one prompt tie... */
    uint32_t index; /* ...and then the deepest goes first (useless without its head) */
} kvs_file;

struct kv_store {
    em_model *m;
    char *dir; /* the model's folder */
    char key[KVS_KEY];
    size_t max_bytes, kv_bytes;
    kvs_file *files; /* index of the folder */
    int n_files, cap_files;
    unsigned long long tmp_counter;
    pthread_mutex_t mu; /* guards st and the index totals read by stats */
    kv_store_stats st;
};

/* ---- identity and checksum ---- */

/* Bytes from the start, middle and end of every tensor: checkpoints of one
 * architecture and shape (fine-tunes) share both fingerprints, not these. */
static uint64_t weight_sample(const st_set *st) {
    uint64_t h = EM_HASH_SEED;
    for (size_t i = 0; st && i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        if (!t->data || !t->nbytes) continue;
        const unsigned char *d = t->data;
        size_t n = t->nbytes < 64 ? t->nbytes : 64;
        h = em_hash_bytes(h, d, n);
        h = em_hash_bytes(h, d + (t->nbytes - n) / 2, n);
        h = em_hash_bytes(h, d + t->nbytes - n, n);
    }
    return h;
}

static void model_key(const em_model *m, char key[KVS_KEY]) {
    const kv_cache *c = m->kv;
    uint64_t h = weight_sample(m->st);
    h = em_hash_bytes(h, m->be->ops->name, strlen(m->be->ops->name));
    uint64_t geometry[] = {(uint64_t)m->prefill_math, (uint64_t)c->block_size, (uint64_t)c->n_layers,
                           (uint64_t)c->n_kv, (uint64_t)c->head_dim, (uint64_t)c->snap_bytes};
    h = em_hash_finish(em_hash_bytes(h, geometry, sizeof geometry));
    memset(key, 0, KVS_KEY);
    snprintf(key, KVS_KEY, "%.16s-%.16s-%016llx", m->identity.artifact_fp, m->identity.config_fp,
             (unsigned long long)h);
}

/* A word-at-a-time mixing hash: several GB/s, enough to catch corruption. */
static uint64_t checksum_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t file_checksum(const kvs_header *hd, const unsigned char *payload, size_t n) {
    kvs_header z = *hd;
    z.checksum = 0;
    return em_hash_finish(checksum_bytes(checksum_bytes(0x9e3779b97f4a7c15ULL, &z, sizeof z), payload, n));
}

/* ---- the folder index ---- */

static void file_name(uint64_t hash, char name[KVS_NAME]) {
    snprintf(name, KVS_NAME, "%016llx.kvb", (unsigned long long)hash);
}

static char *file_path(const kv_store *s, const char *name) { return em_path_join(s->dir, name); }

static int index_find(const kv_store *s, const char *name) {
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i].name, name)) return i;
    return -1;
}

static void index_remove(kv_store *s, int i) {
    pthread_mutex_lock(&s->mu);
    s->st.bytes -= s->files[i].bytes;
    s->st.files--;
    pthread_mutex_unlock(&s->mu);
    s->files[i] = s->files[--s->n_files];
}

static void index_put(kv_store *s, const char *name, size_t bytes, time_t used, uint32_t index) {
    int i = index_find(s, name);
    if (i >= 0) index_remove(s, i);
    if (s->n_files == s->cap_files) {
        int cap = s->cap_files ? 2 * s->cap_files : 64;
        kvs_file *f = realloc(s->files, (size_t)cap * sizeof *f);
        if (!f) return; /* unindexed: not counted, never deleted by us */
        s->files = f;
        s->cap_files = cap;
    }
    kvs_file *f = &s->files[s->n_files++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->bytes = bytes;
    f->used = used;
    f->index = index;
    pthread_mutex_lock(&s->mu);
    s->st.bytes += bytes;
    s->st.files++;
    pthread_mutex_unlock(&s->mu);
}

static void delete_file(kv_store *s, int i) {
    char *path = file_path(s, s->files[i].name);
    if (path && unlink(path) != 0 && errno != ENOENT) EM_LOGW("kv store: cannot delete %s: %s", path, strerror(errno));
    free(path);
    index_remove(s, i);
    pthread_mutex_lock(&s->mu);
    s->st.files_deleted++;
    pthread_mutex_unlock(&s->mu);
}

static bool older(const kvs_file *a, const kvs_file *b) {
    return a->used < b->used || (a->used == b->used && a->index > b->index);
}

/* Deletes least recently used files until the folder fits. */
static void enforce_bound(kv_store *s) {
    while (s->st.bytes > s->max_bytes) {
        int oldest = -1;
        for (int i = 0; i < s->n_files; i++)
            if (oldest < 0 || older(&s->files[i], &s->files[oldest])) oldest = i;
        if (oldest < 0) return;
        delete_file(s, oldest);
    }
}

/* The block index a file's header announces (0 when unreadable: such a
 * file is rejected when looked up). */
static uint32_t header_index(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    kvs_header h;
    uint32_t index = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h ? h.index : 0;
    close(fd);
    return index;
}

/* False when a new file of `bytes` for block `index` would be the first
 * to go under the bound (a deeper block of a prefix whose head fills it). */
static bool worth_writing(const kv_store *s, size_t bytes, uint32_t index) {
    if (bytes > s->max_bytes) return false;
    if (s->st.bytes + bytes <= s->max_bytes) return true;
    kvs_file mine = {.used = time(NULL), .index = index};
    size_t freeable = 0;
    for (int i = 0; i < s->n_files; i++)
        if (older(&s->files[i], &mine)) freeable += s->files[i].bytes;
    return s->st.bytes + bytes - freeable <= s->max_bytes;
}

static bool is_block_name(const char *n) {
    size_t len = strlen(n);
    if (len != 20 || strcmp(n + 16, ".kvb")) return false;
    for (int i = 0; i < 16; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
    return true;
}

/* Indexes the folder's block files; removes temporary files a crashed
 * writer left (older than ten minutes: a live writer renames in far less). */
static void scan(kv_store *s) {
    DIR *d = opendir(s->dir);
    if (!d) return;
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d));) {
        bool tmp = !strncmp(e->d_name, ".tmp-", 5);
        if (!tmp && !is_block_name(e->d_name)) continue;
        char *path = file_path(s, e->d_name);
        struct stat sb;
        if (path && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (!tmp) index_put(s, e->d_name, (size_t)sb.st_size, sb.st_mtime, header_index(path));
            else if (now - sb.st_mtime > 600) unlink(path);
        }
        free(path);
    }
    closedir(d);
}

static em_status make_dir(const char *path) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return EM_OK;
        return em_fail(EM_ERR_IO, "kv store: %s is not a directory", path);
    }
    return em_fail(EM_ERR_IO, "kv store: cannot create %s: %s", path, strerror(errno));
}

em_status kv_store_open(em_model *m, const char *dir, size_t max_bytes, kv_store **out) {
    /* blocks are saved from and restored into the model's cache, which holds
     * only rank 0's KV heads of a split model: the other ranks' would be stale */
    if (model_tp_size(m) > 1)
        return em_fail(EM_ERR_UNSUPPORTED, "kv store %s: not available with tensor parallelism (it would keep one "
                       "rank's KV heads only)", dir);
    kv_store *s = em_calloc(1, sizeof *s);
    if (!s) return em_fail(EM_ERR_NOMEM, "out of memory");
    s->m = m;
    s->max_bytes = max_bytes ? max_bytes : KVS_DEFAULT_BYTES;
    s->kv_bytes = m->kv->block_floats * sizeof(float) * 2u * (size_t)m->kv->n_layers;
    pthread_mutex_init(&s->mu, NULL);
    model_key(m, s->key);
    em_status st = make_dir(dir);
    if (st == EM_OK && !(s->dir = em_path_join(dir, s->key))) st = em_fail(EM_ERR_NOMEM, "out of memory");
    if (st == EM_OK) st = make_dir(s->dir);
    if (st != EM_OK) {
        kv_store_close(s);
        return st;
    }
    scan(s);
    enforce_bound(s);
    EM_LOGI("kv store: %s (%d files, %zu bytes, at most %zu)", s->dir, s->st.files, s->st.bytes, s->max_bytes);
    *out = s;
    return EM_OK;
}

void kv_store_close(kv_store *s) {
    if (!s) return;
    free(s->dir);
    free(s->files);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void kv_store_get_stats(kv_store *s, kv_store_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

/* ---- writing ---- */

typedef struct kvs_map {
    unsigned char *base;
    size_t len;
    const kvs_header *h;
    char name[KVS_NAME];
} kvs_map;

static bool map_block(kv_store *s, uint64_t hash, const int32_t *tokens, kvs_map *out);

static bool write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

/* The file's bytes: header, tokens, KV of block b, state. */
static unsigned char *build(kv_store *s, int b, int index, uint64_t hash, const int32_t *tokens, const void *state,
                            size_t *len) {
    const kv_cache *c = s->m->kv;
    size_t tok = (size_t)c->block_size * sizeof(int32_t), st = state ? c->snap_bytes : 0;
    size_t payload = tok + s->kv_bytes + st, layer = c->block_floats * sizeof(float);
    unsigned char *buf = malloc(sizeof(kvs_header) + payload);
    if (!buf) return NULL;
    unsigned char *p = buf + sizeof(kvs_header);
    memcpy(p, tokens, tok);
    unsigned char *kv = p + tok;
    em_backend *be = s->m->be;
    for (int l = 0; l < c->n_layers; l++) {
        if (be->ops->download(be, kv + (2 * (size_t)l) * layer, c->k_layer[l] + (size_t)b * c->block_floats, layer) != EM_OK ||
            be->ops->download(be, kv + (2 * (size_t)l + 1) * layer, c->v_layer[l] + (size_t)b * c->block_floats, layer) != EM_OK) {
            free(buf);
            return NULL;
        }
    }
    if (st) memcpy(kv + s->kv_bytes, state, st);
    kvs_header h = {.version = KVS_VERSION, .endian = KVS_ENDIAN, .hash = hash, .block_size = (uint32_t)c->block_size,
                    .n_layers = (uint32_t)c->n_layers, .n_kv = (uint32_t)c->n_kv, .head_dim = (uint32_t)c->head_dim,
                    .kv_bytes = s->kv_bytes, .state_bytes = st, .index = (uint32_t)index};
    memcpy(h.magic, KVS_MAGIC, 8);
    memcpy(h.key, s->key, KVS_KEY);
    h.checksum = file_checksum(&h, p, payload);
    memcpy(buf, &h, sizeof h);
    *len = sizeof h + payload;
    return buf;
}

void kv_store_save(kv_store *s, int seq, int index, uint64_t hash, const int32_t *tokens, const void *state) {
    kv_cache *c = s->m->kv;
    if (index < 0 || index >= c->seqs[seq].n_blocks) return;
    char name[KVS_NAME];
    file_name(hash, name);
    char *path = file_path(s, name), *tmp = NULL;
    if (!path) return;
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        /* keep a valid file (with a state when we have one); a bad one is
         * deleted by the check and written anew */
        kvs_map f;
        if (map_block(s, hash, tokens, &f)) {
            bool keep = !state || f.h->state_bytes;
            munmap(f.base, f.len);
            if (keep) {
                free(path);
                return;
            }
        }
    }
    if (!worth_writing(s, sizeof(kvs_header) + (size_t)c->block_size * sizeof(int32_t) + s->kv_bytes +
                              (state ? c->snap_bytes : 0), (uint32_t)index)) {
        free(path);
        return;
    }
    size_t len = 0;
    unsigned char *buf = build(s, c->seqs[seq].blocks[index], index, hash, tokens, state, &len);
    char tname[64];
    snprintf(tname, sizeof tname, ".tmp-%ld-%llu", (long)getpid(), ++s->tmp_counter);
    tmp = buf ? file_path(s, tname) : NULL;
    int fd = tmp ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    bool ok = fd >= 0 && write_all(fd, buf, len);
    if (fd >= 0 && close(fd) != 0) ok = false;
    /* No fsync: a file cut short by a crash fails validation and is ignored. */
    if (ok && rename(tmp, path) != 0) ok = false;
    if (ok) {
        pthread_mutex_lock(&s->mu);
        s->st.files_written++;
        pthread_mutex_unlock(&s->mu);
        index_put(s, name, len, time(NULL), (uint32_t)index);
        enforce_bound(s);
    } else {
        if (fd >= 0) unlink(tmp);
        EM_LOGW("kv store: cannot write %s: %s", path, buf ? strerror(errno) : "out of memory");
    }
    free(buf);
    free(tmp);
    free(path);
}

/* ---- reading ---- */

static void reject(kv_store *s, const char *path, const char *why) {
    EM_LOGW("kv store: ignoring %s: %s", path, why);
    pthread_mutex_lock(&s->mu);
    s->st.files_rejected++;
    pthread_mutex_unlock(&s->mu);
}

/* Maps and validates the file of block `hash` holding `tokens`. A file that
 * fails is deleted (it would block rewriting) and reported. */
static bool map_block(kv_store *s, uint64_t hash, const int32_t *tokens, kvs_map *out) {
    const kv_cache *c = s->m->kv;
    file_name(hash, out->name);
    char *path = file_path(s, out->name);
    if (!path) return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno != ENOENT) reject(s, path, strerror(errno));
        free(path);
        return false;
    }
    struct stat sb;
    const char *why = NULL;
    size_t tok = (size_t)c->block_size * sizeof(int32_t);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) why = "not a regular file";
    else if ((size_t)sb.st_size < sizeof(kvs_header) + tok + s->kv_bytes) why = "truncated";
    else if ((size_t)sb.st_size > sizeof(kvs_header) + tok + s->kv_bytes + c->snap_bytes) why = "too large";
    void *map = why ? MAP_FAILED : mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (!why && map == MAP_FAILED) why = "cannot map it";
    const kvs_header *h = map != MAP_FAILED ? map : NULL;
    if (!why) {
        size_t payload = (size_t)sb.st_size - sizeof *h;
        if (memcmp(h->magic, KVS_MAGIC, 8) || h->version != KVS_VERSION || h->endian != KVS_ENDIAN)
            why = "not a block file of this version";
        else if (memcmp(h->key, s->key, KVS_KEY))
            why = "written for another model, backend or precision";
        else if (h->hash != hash || h->block_size != (uint32_t)c->block_size || h->n_layers != (uint32_t)c->n_layers ||
                 h->n_kv != (uint32_t)c->n_kv || h->head_dim != (uint32_t)c->head_dim || h->kv_bytes != s->kv_bytes)
            why = "geometry does not match the model";
        else if ((h->state_bytes != 0 && h->state_bytes != c->snap_bytes) || payload != tok + s->kv_bytes + h->state_bytes)
            why = "sizes do not add up";
        else if (file_checksum(h, (const unsigned char *)map + sizeof *h, payload) != h->checksum)
            why = "checksum mismatch";
        else if (memcmp((const unsigned char *)map + sizeof *h, tokens, tok))
            why = "different tokens under the same hash";
    }
    if (why) {
        reject(s, path, why);
        if (map != MAP_FAILED) munmap(map, (size_t)sb.st_size);
        unlink(path);
        int i = index_find(s, out->name);
        if (i >= 0) index_remove(s, i);
        free(path);
        return false;
    }
    free(path);
    out->base = map;
    out->len = (size_t)sb.st_size;
    out->h = h;
    return true;
}

/* Copies a mapped block's KV into block b of the cache. */
static em_status upload_block(kv_store *s, const kvs_map *f, int b) {
    const kv_cache *c = s->m->kv;
    em_backend *be = s->m->be;
    size_t layer = c->block_floats * sizeof(float);
    const unsigned char *kv = f->base + sizeof(kvs_header) + (size_t)c->block_size * sizeof(int32_t);
    for (int l = 0; l < c->n_layers; l++) {
        EM_TRY(be->ops->upload(be, c->k_layer[l] + (size_t)b * c->block_floats, kv + 2 * (size_t)l * layer, layer));
        EM_TRY(be->ops->upload(be, c->v_layer[l] + (size_t)b * c->block_floats, kv + (2 * (size_t)l + 1) * layer, layer));
    }
    return EM_OK;
}

static void touch(kv_store *s, const char *name) {
    char *path = file_path(s, name);
    if (path) utimensat(AT_FDCWD, path, NULL, 0);
    free(path);
    int i = index_find(s, name);
    if (i >= 0) s->files[i].used = time(NULL);
}

/* Loads maps[0..end) into the sequence's blocks have.. (reserved). */
static bool load_run(kv_store *s, int seq, uint64_t seed, const uint64_t *hashes, const int32_t *tokens, int have,
                     kvs_map *maps, int end) {
    em_model *m = s->m;
    kv_cache *c = m->kv;
    if (kv_seq_reserve(c, seq, (have + end) * c->block_size) != EM_OK) return false;
    for (int j = 0; j < end; j++)
        if (upload_block(s, &maps[j], c->seqs[seq].blocks[have + j]) != EM_OK) return false;
    if (c->snap_bytes) {
        const unsigned char *state = maps[end - 1].base + maps[end - 1].len - c->snap_bytes;
        if (m->family->state_load(m, seq, state) != EM_OK) return false;
    }
    c->seqs[seq].len = (have + end) * c->block_size;
    for (int j = 0; j < end; j++) {
        int i = have + j;
        kv_prefix_register(c, seq, i, i ? hashes[i - 1] : seed, hashes[i], tokens + (size_t)i * c->block_size);
        touch(s, maps[j].name);
    }
    if (c->snap_bytes) { /* the memory cache keeps the state too */
        void *copy = malloc(c->snap_bytes);
        if (copy) {
            memcpy(copy, maps[end - 1].base + maps[end - 1].len - c->snap_bytes, c->snap_bytes);
            int i = have + end - 1;
            kv_prefix_put_state(c, hashes[i], tokens + (size_t)i * c->block_size, copy);
        }
    }
    pthread_mutex_lock(&c->mu);
    c->prefix_hit_tokens += (unsigned long long)end * (unsigned long long)c->block_size;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&s->mu);
    s->st.blocks_loaded += (unsigned long long)end;
    pthread_mutex_unlock(&s->mu);
    return true;
}

int kv_store_extend(kv_store *s, int seq, uint64_t seed, const uint64_t *hashes, const int32_t *tokens, int have,
                    int n) {
    kv_cache *c = s->m->kv;
    if (have >= n || c->seqs[seq].n_blocks != have) return c->seqs[seq].n_blocks;
    kvs_map *maps = em_calloc((size_t)(n - have), sizeof *maps);
    if (!maps) return have;
    int run = 0, end = 0;
    while (have + run < n) {
        int i = have + run;
        if (!map_block(s, hashes[i], tokens + (size_t)i * c->block_size, &maps[run])) break;
        run++;
        if (!c->snap_bytes || maps[run - 1].h->state_bytes) end = run; /* a hybrid run ends at a state */
    }
    int got = have;
    if (end > 0) {
        if (load_run(s, seq, seed, hashes, tokens, have, maps, end)) {
            got = have + end;
        } else { /* the sequence may hold half-written blocks: give them back */
            EM_LOGW("kv store: cannot load %d blocks: %s", end, em_last_error());
            pthread_mutex_lock(&c->mu);
            kv_seq *q = &c->seqs[seq];
            while (q->n_blocks > have) kv_block_drop_locked(c, q->blocks[--q->n_blocks]);
            q->len = have * c->block_size;
            pthread_mutex_unlock(&c->mu);
        }
    }
    for (int j = 0; j < run; j++) munmap(maps[j].base, maps[j].len);
    free(maps);
    return got;
}
