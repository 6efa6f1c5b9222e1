/* st_set.c — a set of mmapped safetensors files (one model), with a name
 * index over all their tensors. Sharded checkpoints are resolved through
 * model.safetensors.index.json. */
#include "io/safetensors.h"

#include "base/alloc.h"
#include "base/file.h"
#include "base/hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_mapped {
    char *path;
    void *map;
    size_t size;
    st_header header;
} st_mapped;

struct st_set {
    st_mapped *files;
    int n_files;
    const st_tensor **index; /* open-addressing table of tensors by name */
    size_t index_cap;
    size_t n_tensors;
    const st_tensor **order; /* in file order */
};

static uint64_t name_hash(const char *s) { return em_hash_finish(em_hash_bytes(EM_HASH_SEED, s, strlen(s))); }

static em_status map_file(const char *path, st_mapped *f) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return em_fail(EM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return em_fail(EM_ERR_IO, "%s: not a regular file", path);
    }
    f->size = (size_t)st.st_size;
    f->map = NULL;
    if (f->size > 0) {
        f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            close(fd);
            f->map = NULL;
            return em_fail(EM_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        }
    }
    close(fd);
    f->path = em_strdup(path);
    if (!f->path) return em_fail(EM_ERR_NOMEM, "out of memory");
    return st_parse(f->map ? f->map : (const void *)"", f->size, path, &f->header);
}

static void unmap_file(st_mapped *f) {
    st_header_free(&f->header);
    if (f->map) munmap(f->map, f->size);
    free(f->path);
}

void st_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) unmap_file(&s->files[i]);
    free(s->files);
    free(s->index);
    free(s->order);
    free(s);
}

static const st_tensor **index_slot(const st_set *s, const char *name) {
    size_t mask = s->index_cap - 1, i = (size_t)name_hash(name) & mask;
    while (s->index[i] && strcmp(s->index[i]->name, name)) i = (i + 1) & mask;
    return (const st_tensor **)&s->index[i];
}

static em_status build_index(st_set *s) {
    size_t total = 0;
    for (int i = 0; i < s->n_files; i++) total += s->files[i].header.n_tensors;
    s->index_cap = 16;
    while (s->index_cap < total * 2) s->index_cap *= 2;
    s->index = em_calloc(s->index_cap, sizeof *s->index);
    s->order = em_calloc(total ? total : 1, sizeof *s->order);
    if (!s->index || !s->order) return em_fail(EM_ERR_NOMEM, "out of memory indexing tensors");
    for (int f = 0; f < s->n_files; f++) {
        st_header *h = &s->files[f].header;
        for (size_t i = 0; i < h->n_tensors; i++) {
            st_tensor *t = &h->tensors[i];
            t->file_index = f;
            const st_tensor **slot = index_slot(s, t->name);
            if (*slot)
                return em_fail(EM_ERR_FORMAT, "tensor %s appears in both %s and %s", t->name,
                               s->files[(*slot)->file_index].path, s->files[f].path);
            *slot = t;
            s->order[s->n_tensors++] = t;
        }
    }
    return EM_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Lists *.safetensors of dir, sorted; names malloc'd. */
static em_status list_shards(const char *dir, char ***names, int *n) {
    DIR *d = opendir(dir);
    if (!d) return em_fail(EM_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **v = NULL;
    size_t cap = 0, cnt = 0;
    struct dirent *e;
    em_status s = EM_OK;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        if (!em_grow((void **)&v, &cap, cnt + 1, sizeof *v) || !(v[cnt] = em_strdup(e->d_name))) {
            s = em_fail(EM_ERR_NOMEM, "out of memory");
            break;
        }
        cnt++;
    }
    closedir(d);
    if (cnt) qsort(v, cnt, sizeof *v, cmp_str);
    *names = v;
    *n = (int)cnt;
    return s;
}

/* Shard file names from the index's weight_map, de-duplicated in order. */
static em_status index_shards(const char *index_path, json_t **map_out, char ***names, int *n) {
    char *text;
    size_t len;
    EM_TRY(em_read_file(index_path, 64u << 20, &text, &len));
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root) return em_fail(EM_ERR_FORMAT, "%s: %s (line %d)", index_path, jerr.text, jerr.line);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return em_fail(EM_ERR_FORMAT, "%s: weight_map missing or not an object", index_path);
    }
    char **v = NULL;
    size_t cap = 0, cnt = 0;
    const char *k;
    json_t *val;
    json_object_foreach(map, k, val) {
        const char *f = json_string_value(val);
        if (!f || strchr(f, '/') || !strcmp(f, "..")) {
            for (size_t i = 0; i < cnt; i++) free(v[i]);
            free(v);
            json_decref(root);
            return em_fail(EM_ERR_FORMAT, "%s: weight_map[%s] is not a plain file name", index_path, k);
        }
        size_t i = 0;
        while (i < cnt && strcmp(v[i], f)) i++;
        if (i < cnt) continue;
        if (!em_grow((void **)&v, &cap, cnt + 1, sizeof *v) || !(v[cnt] = em_strdup(f))) {
            json_decref(root);
            return em_fail(EM_ERR_NOMEM, "out of memory");
        }
        cnt++;
    }
    *map_out = root;
    *names = v;
    *n = (int)cnt;
    return EM_OK;
}

static em_status check_index(const st_set *s, json_t *root, const char *index_path) {
    json_t *map = json_object_get(root, "weight_map");
    const char *k;
    json_t *val;
    json_object_foreach(map, k, val) {
        const st_tensor *t = st_find(s, k);
        if (!t) return em_fail(EM_ERR_FORMAT, "%s: tensor %s is listed but not in %s", index_path, k, json_string_value(val));
        const char *path = s->files[t->file_index].path, *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (strcmp(base, json_string_value(val)))
            return em_fail(EM_ERR_FORMAT, "%s: tensor %s is listed in %s but found in %s", index_path, k,
                           json_string_value(val), base);
    }
    return EM_OK;
}

static em_status open_files(st_set *s, const char *dir, char **names, int n) {
    s->files = em_calloc((size_t)(n ? n : 1), sizeof *s->files);
    if (!s->files) return em_fail(EM_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        char *path = dir ? em_path_join(dir, names[i]) : em_strdup(names[i]);
        if (!path) return em_fail(EM_ERR_NOMEM, "out of memory");
        s->n_files = i + 1;
        em_status st = map_file(path, &s->files[i]);
        free(path);
        if (st != EM_OK) return st;
    }
    return build_index(s);
}

em_status st_open(const char *path, st_set **out) {
    *out = NULL;
    st_set *s = em_calloc(1, sizeof *s);
    if (!s) return em_fail(EM_ERR_NOMEM, "out of memory");
    char **names = NULL;
    int n = 0;
    json_t *index = NULL;
    char *index_path = NULL;
    em_status st = EM_OK;
    if (em_file_exists(path)) {
        char *one = (char *)path;
        st = open_files(s, NULL, &one, 1);
    } else if (!em_dir_exists(path)) {
        st = em_fail(EM_ERR_IO, "%s: no such file or directory", path);
    } else {
        index_path = em_path_join(path, "model.safetensors.index.json");
        if (!index_path) st = em_fail(EM_ERR_NOMEM, "out of memory");
        else if (em_file_exists(index_path)) st = index_shards(index_path, &index, &names, &n);
        else st = list_shards(path, &names, &n);
        if (st == EM_OK && n == 0) st = em_fail(EM_ERR_IO, "%s: no .safetensors files", path);
        if (st == EM_OK) st = open_files(s, path, names, n);
        if (st == EM_OK && index) st = check_index(s, index, index_path);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(index_path);
    json_decref(index);
    if (st != EM_OK) {
        st_close(s);
        return st;
    }
    *out = s;
    return EM_OK;
}

size_t st_count(const st_set *s) { return s->n_tensors; }
const st_tensor *st_at(const st_set *s, size_t i) { return i < s->n_tensors ? s->order[i] : NULL; }
const st_tensor *st_find(const st_set *s, const char *name) { return *index_slot(s, name); }

const char *st_metadata(const st_set *s, const char *key) {
    for (int f = 0; f < s->n_files; f++) {
        const st_header *h = &s->files[f].header;
        for (size_t i = 0; i < h->n_metadata; i++)
            if (!strcmp(h->metadata[i].key, key)) return h->metadata[i].value;
    }
    return NULL;
}

int st_n_files(const st_set *s) { return s->n_files; }

const st_header *st_file_header(const st_set *s, int file_index) {
    return file_index >= 0 && file_index < s->n_files ? &s->files[file_index].header : NULL;
}

uint64_t st_data_bytes(const st_set *s) {
    uint64_t total = 0;
    for (size_t i = 0; i < s->n_tensors; i++) total += s->order[i]->nbytes;
    return total;
}

const char *st_file_path(const st_set *s, int file_index) {
    return file_index >= 0 && file_index < s->n_files ? s->files[file_index].path : NULL;
}

void st_drop_range(const void *p, size_t n) {
    if (!n) return;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t b = (uintptr_t)p, e = b + n, pg = page > 0 ? (uintptr_t)page : 4096u;
    b = (b + pg - 1) / pg * pg; /* whole pages inside the range only */
    e = e / pg * pg;
    if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
}

void st_drop_pages(const st_tensor *t) { st_drop_range(t->data, t->nbytes); }
