/* weights_host.c — where the weights of a host-memory backend (the CPU)
 * live while it runs.
 *
 * Read in place, the weights are the checkpoint's mapped file pages, 4 KB
 * each: a decode step of the 1B shape at 4 bits streams 0.7 GB, about
 * 170,000 pages, every one a TLB miss and a page-table walk, and the
 * hardware prefetchers stop at each page's end. Copied once into anonymous
 * memory advised onto 2 MB pages, the same steps need a few hundred TLB
 * entries (2-core EPYC host, 1B decode, alternated runs: 4-bit median
 * 32.0 -> 36.8 tok/s, 8-bit 21.4 -> 22.8, bf16 10.0 -> 14.0).
 *
 * The copies share one arena reserved for all of the checkpoint's tensors
 * (untouched address space costs nothing); a tensor bound twice (a tied
 * head) is copied once; and a tensor's file pages leave the process as
 * soon as each slice of it is copied, so the resident peak stays the
 * weights plus a slice.
 *
 * A quantized weight is copied as one record a row, its scales, its biases
 * and its codes side by side (em_weight.row_stride), where MLX keeps three
 * arrays: a one-row product then reads one stream of memory instead of
 * three (per core, two 64-byte lines of scalars a row beside 1 KB of codes,
 * each its own stream of DRAM pages). On the 2-core EPYC host, alternated
 * runs of the 1B decode: 4-bit median 41.6 -> 52.0 tok/s (eight each, the
 * records faster in every pair), 8-bit 29.0 -> 34.2 (six each). The
 * kernels read rows through em_qrow_*, so every product, the int8 GEMM's
 * panels and the embedding lookup take either layout, with the same bits. */
#include "model/weights_host.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/hugepage.h"
#include "base/log.h"
#include "base/sysmem.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A tensor copied, and where its copy is. */
typedef struct placed {
    const st_tensor *src;
    const void *dst;
} placed;

struct host_weights {
    bool copy;
    uint8_t *base; /* the arena: cap bytes reserved, used written */
    size_t cap, used;
    placed *done; /* tensors copied so far */
    size_t n, n_cap;
};

/* Memory the copy must leave free beside it. */
#define HOST_WEIGHTS_HEADROOM ((uint64_t)1 << 30)

bool host_weights_copies(const char *mode, uint64_t bytes) {
    if (mode && !strcmp(mode, "copy")) return true;
    if ((mode && strcmp(mode, "auto")) || !em_thp_available()) return false;
    uint64_t avail = em_mem_available();
    return avail > HOST_WEIGHTS_HEADROOM && bytes <= avail - HOST_WEIGHTS_HEADROOM;
}

static em_status hw_open(em_model *m, struct host_weights **out) {
    struct host_weights *h = calloc(1, sizeof *h);
    if (!h) return em_fail(EM_ERR_NOMEM, "out of memory");
    size_t cap; /* every tensor, each rounded up to 64 bytes */
    const char *mode = m->config ? em_config_str(m->config, EMC_CPU_WEIGHTS) : NULL;
    if (em_mul(st_count(m->st), 64, &cap) && em_add(cap, (size_t)st_data_bytes(m->st), &cap) &&
        host_weights_copies(mode, cap)) {
        h->base = em_huge_reserve(cap);
        if (h->base) {
            h->cap = cap;
            h->copy = true;
        } else {
            EM_LOGW("%s: no address space for a %zu-byte copy of the weights; reading them in place", m->dir, cap);
        }
    }
    EM_LOGI("%s: CPU weights %s", m->dir, h->copy ? "copied onto huge pages" : "read in place from the mapped files");
    *out = h;
    return EM_OK;
}

/* Records that t now lives at p. */
static em_status remember(struct host_weights *h, const st_tensor *t, const void *p) {
    if (!em_grow((void **)&h->done, &h->n_cap, h->n + 1, sizeof *h->done))
        return em_fail(EM_ERR_NOMEM, "out of memory");
    h->done[h->n++] = (placed){t, p};
    return EM_OK;
}

/* Copies n bytes from the mapping at src, a slice at a time, dropping each
 * slice's file pages once copied: a large tensor (an embedding) is never
 * resident twice. */
static void copy_dropping(uint8_t *dst, const uint8_t *src, size_t n) {
    for (size_t o = 0; o < n;) {
        /* slices end on page boundaries (absolute, 4 KB or larger pages at
         * 8 MB multiples), so each drop takes all of its slice but the first */
        uintptr_t end = ((uintptr_t)(src + o) + HOST_WEIGHTS_SLICE) & ~(uintptr_t)(HOST_WEIGHTS_SLICE - 1);
        size_t len = end - (uintptr_t)(src + o);
        if (len > n - o) len = n - o;
        memcpy(dst + o, src + o, len);
        st_drop_range(src + o, len);
        o += len;
    }
}

/* The copy of t made earlier, if any (a tensor bound twice). */
static const void *hw_find(const struct host_weights *h, const st_tensor *t) {
    for (size_t i = 0; i < h->n; i++)
        if (h->done[i].src == t) return h->done[i].dst;
    return NULL;
}

/* The next `bytes` of the arena for t's copy, recorded as t's; *p = NULL
 * where the arena was not planned for them (t then stays in place). */
static em_status hw_claim(struct host_weights *h, const st_tensor *t, size_t bytes, uint8_t **p) {
    *p = NULL;
    size_t at = (h->used + 63) & ~(size_t)63;
    if (at > h->cap || bytes > h->cap - at) return EM_OK;
    EM_TRY(remember(h, t, h->base + at));
    h->used = at + bytes;
    *p = h->base + at;
    return EM_OK;
}

em_status host_weights_place(em_model *m, const st_tensor *t, const void **out, size_t *copied) {
    *copied = 0;
    if (!m->host_weights) EM_TRY(hw_open(m, &m->host_weights));
    struct host_weights *h = m->host_weights;
    *out = t->data;
    if (!h->copy || !t->nbytes) return EM_OK;
    const void *done = hw_find(h, t);
    if (done) {
        *out = done;
        return EM_OK;
    }
    uint8_t *p;
    EM_TRY(hw_claim(h, t, t->nbytes, &p));
    if (!p) return EM_OK;
    copy_dropping(p, t->data, t->nbytes);
    *out = p;
    *copied = t->nbytes;
    return EM_OK;
}

/* Drops the file pages from *from up to `upto` (the page holding upto
 * stays: the rest of it is still to be copied); *from moves to that page. */
static void drop_upto(const uint8_t **from, const uint8_t *upto) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t pg = page > 0 ? (uintptr_t)page : 4096u, to = (uintptr_t)upto / pg * pg;
    if (to > (uintptr_t)*from) {
        st_drop_range(*from, to - (uintptr_t)*from);
        *from = (const uint8_t *)to;
    }
}

/* Copies `rows` rows of codes (cb bytes each), scales and biases (sb each)
 * into records [scales | biases | codes] at dst, a slice of rows at a time,
 * dropping the file pages behind each slice. */
static void copy_records(uint8_t *dst, const st_tensor *t, const st_tensor *s, const st_tensor *b, size_t rows,
                         size_t cb, size_t sb) {
    const size_t rec = 2 * sb + cb, batch = HOST_WEIGHTS_SLICE / rec ? HOST_WEIGHTS_SLICE / rec : 1;
    const uint8_t *tc = t->data, *sc = s->data, *bc = b->data, *td = tc, *sd = sc, *bd = bc;
    for (size_t r0 = 0; r0 < rows; r0 += batch) {
        size_t r1 = r0 + batch < rows ? r0 + batch : rows;
        for (size_t r = r0; r < r1; r++) {
            uint8_t *p = dst + r * rec;
            memcpy(p, sc + r * sb, sb);
            memcpy(p + sb, bc + r * sb, sb);
            memcpy(p + 2 * sb, tc + r * cb, cb);
        }
        drop_upto(&td, tc + r1 * cb);
        drop_upto(&sd, sc + r1 * sb);
        drop_upto(&bd, bc + r1 * sb);
    }
    st_drop_range(td, (size_t)(tc + rows * cb - td));
    st_drop_range(sd, (size_t)(sc + rows * sb - sd));
    st_drop_range(bd, (size_t)(bc + rows * sb - bd));
}

/* Points w at its records at p (row stride rec, scales sb bytes a row). */
static void records_at(em_weight *w, const uint8_t *p, size_t sb, size_t rec) {
    w->scales = p;
    w->biases = p + sb;
    w->data = p + 2 * sb;
    w->row_stride = rec;
}

em_status host_weights_place_quant(em_model *m, const st_tensor *t, const st_tensor *s, const st_tensor *b,
                                   em_weight *w, size_t *copied) {
    *copied = 0;
    if (!m->host_weights) EM_TRY(hw_open(m, &m->host_weights));
    struct host_weights *h = m->host_weights;
    w->data = t->data;
    w->scales = s->data;
    w->biases = b->data;
    w->row_stride = 0;
    size_t rows = (size_t)w->rows;
    if (!h->copy || !rows || !t->nbytes) return EM_OK;
    size_t cb = t->nbytes / rows, sb = s->nbytes / rows, rec = 2 * sb + cb; /* shapes checked by the binder */
    const void *done = hw_find(h, t);
    if (done) {
        records_at(w, done, sb, rec);
        return EM_OK;
    }
    uint8_t *p;
    EM_TRY(hw_claim(h, t, rows * rec, &p));
    if (!p) return EM_OK;
    copy_records(p, t, s, b, rows, cb, sb);
    records_at(w, p, sb, rec);
    *copied = rows * rec;
    return EM_OK;
}

void host_weights_release(em_model *m) {
    struct host_weights *h = m->host_weights;
    if (!h) return;
    em_huge_release(h->base, h->cap);
    free(h->done);
    free(h);
    m->host_weights = NULL;
}
