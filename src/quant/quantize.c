/* quantize.c — the quantizer pipeline: plan, decide, stream, assemble. */
#include "quant/quantize.h"

#include "base/alloc.h"
#include "base/file.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "io/st_writer.h"
#include "quant/rtn.h"
#include "tensor/affine.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* What is written for one plan output. */
typedef struct out_choice {
    int bits, group;   /* bits 0: float */
    em_dtype fdt;      /* float dtype of the tensor, or of its scales/biases */
    size_t first;      /* index of its first written tensor */
    int shard;
} out_choice;

typedef struct run {
    const quant_job *job;
    quant_report *rep;
    qsrc src;
    fold_plan plan;
    out_choice *choice;
    st_wtensor *wt;    /* written tensors, in order */
    char **wnames;     /* their names (owned) */
    size_t n_wt;
    em_dtype fdt;      /* --dtype, or EM_DTYPE_COUNT: each tensor keeps its source's */
    int def_bits, def_group;
    char *tmp;         /* temporary artifact directory */
    em_pool *pool;     /* quantizes a tensor's rows in parallel */
    float *scratch;    /* the f32 values of the tensor being emitted, reused: */
    size_t scratch_cap; /* fresh pages for every tensor cost a fifth of the time */
} run;

static void module_of(const char *name, char *out, size_t len) {
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight")) n -= 7;
    snprintf(out, len, "%.*s", (int)n, name);
}

static em_status add_written(run *r, size_t *cap, const char *name, em_dtype dt, int ndim, const int64_t *shape) {
    if (!em_grow((void **)&r->wt, cap, r->n_wt + 1, sizeof *r->wt) ||
        !(r->wnames = em_realloc(r->wnames, (r->n_wt + 1) * sizeof *r->wnames)))
        return em_fail(EM_ERR_NOMEM, "out of memory");
    if (!(r->wnames[r->n_wt] = em_strdup(name))) return em_fail(EM_ERR_NOMEM, "out of memory");
    st_wtensor *t = &r->wt[r->n_wt++];
    *t = (st_wtensor){.dtype = dt, .ndim = ndim};
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    return EM_OK;
}

/* A tensor keeps its source's float dtype (a dequantized source: its scales'),
 * unless --dtype chose one for all. */
static em_dtype entry_dtype(const run *r, const plan_out *e) {
    if (r->fdt != EM_DTYPE_COUNT) return r->fdt;
    if (e->src->bits) return e->src->scales->dtype;
    em_dtype d = e->src->t->dtype;
    return d == EM_F32 || d == EM_F16 || d == EM_BF16 ? d : r->src.float_dtype;
}

/* Chooses bits per output and lists the tensors to write. */
static em_status decide(run *r) {
    const quant_recipe *rc = &r->job->recipe;
    r->choice = em_calloc(r->plan.n + 1, sizeof *r->choice);
    if (!r->choice) return em_fail(EM_ERR_NOMEM, "out of memory");
    size_t cap = 0;
    r->def_bits = rc->bits;
    r->def_group = rc->group_size;
    for (size_t i = 0; i < r->plan.n; i++) {
        const plan_out *e = &r->plan.outs[i];
        out_choice *c = &r->choice[i];
        char module[512], name[560];
        module_of(e->name, module, sizeof module);
        if (e->linear) quant_recipe_pick(rc, module, &c->bits, &c->group);
        /* as MLX does: a module whose width does not split into groups stays float */
        if (c->bits && (e->shape[1] % c->group || (e->shape[1] * c->bits) % 32)) c->bits = 0;
        if (c->bits && !r->def_bits) {
            r->def_bits = c->bits;
            r->def_group = c->group;
        }
        c->first = r->n_wt;
        c->fdt = entry_dtype(r, e);
        if (c->bits) {
            int64_t ws[2] = {e->shape[0], e->shape[1] * c->bits / 32}, ss[2] = {e->shape[0], e->shape[1] / c->group};
            EM_TRY(add_written(r, &cap, e->name, EM_U32, 2, ws));
            snprintf(name, sizeof name, "%s.scales", module);
            EM_TRY(add_written(r, &cap, name, c->fdt, 2, ss));
            snprintf(name, sizeof name, "%s.biases", module);
            EM_TRY(add_written(r, &cap, name, c->fdt, 2, ss));
        } else if (e->src->ndim > 2) {
            EM_TRY(add_written(r, &cap, e->name, c->fdt, e->src->ndim, e->src->shape));
        } else {
            EM_TRY(add_written(r, &cap, e->name, c->fdt, e->ndim, e->shape));
        }
    }
    for (size_t i = 0; i < r->n_wt; i++) r->wt[i].name = r->wnames[i];
    return EM_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}
static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void shard_name(int i, int n, char *buf, size_t len) {
    if (n == 1) snprintf(buf, len, "model.safetensors");
    else snprintf(buf, len, "model-%05d-of-%05d.safetensors", i + 1, n);
}

static em_status write_bytes(st_writer *w, const void *p, size_t n) { return st_writer_write(w, p, n); }

/* Converts f32 values in place to the float dtype (2-byte types shrink). */
static size_t to_dtype(float *v, size_t n, em_dtype dt) {
    if (dt == EM_F32) return n * 4;
    uint16_t *o = (uint16_t *)v;
    for (size_t i = 0; i < n; i++) o[i] = dt == EM_BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    return n * 2;
}

static void note_work(run *r, uint64_t bytes) {
    if (bytes > r->rep->work_peak_bytes) r->rep->work_peak_bytes = bytes;
}

/* A tensor's rows, quantized in parallel: each task takes per_task rows.
 * Every row is computed alone, so the artifact does not depend on the
 * number of threads. */
typedef struct rows_job {
    const float *v;
    uint8_t *packed;
    float *sc, *bi;
    int64_t rows, cols, per_task;
    int bits, group;
    em_dtype fdt;
    bool search;
} rows_job;

static void quantize_rows(void *ctx, int task, int thread) {
    (void)thread;
    const rows_job *q = ctx;
    int64_t groups = q->cols / q->group, r1 = ((int64_t)task + 1) * q->per_task;
    size_t row_bytes = (size_t)(q->cols * q->bits / 8);
    for (int64_t row = (int64_t)task * q->per_task; row < r1 && row < q->rows; row++) {
        const float *wr = q->v + (size_t)row * (size_t)q->cols;
        uint8_t *pr = q->packed + (size_t)row * row_bytes;
        float *sr = q->sc + (size_t)row * (size_t)groups, *br = q->bi + (size_t)row * (size_t)groups;
        if (q->search) rtn_search_row(wr, q->cols, q->bits, q->group, q->fdt, pr, sr, br);
        else rtn_quantize_row(wr, q->cols, q->bits, q->group, pr, sr, br);
    }
}

/* Computes and writes output i. */
static em_status emit(run *r, size_t i, st_writer *w) {
    const plan_out *e = &r->plan.outs[i];
    const out_choice *c = &r->choice[i];
    uint64_t n = plan_out_elements(e);
    size_t bytes;
    if (!em_mul((size_t)n, sizeof(float), &bytes)) return em_fail(EM_ERR_NOMEM, "%s: too large", e->name);
    if (bytes > r->rep->largest_tensor_bytes) r->rep->largest_tensor_bytes = bytes;
    size_t need = bytes ? bytes : 4;
    if (need > r->scratch_cap) {
        free(r->scratch);
        r->scratch_cap = 0;
        if (!(r->scratch = em_malloc(need))) return em_fail(EM_ERR_NOMEM, "out of memory for %s (%zu bytes)", e->name, bytes);
        r->scratch_cap = need;
    }
    float *v = r->scratch;
    em_status s = fold_apply(&r->plan, &r->src, e, v);
    if (s == EM_OK && !c->bits) {
        note_work(r, bytes);
        s = write_bytes(w, v, to_dtype(v, (size_t)n, c->fdt));
    } else if (s == EM_OK) {
        int64_t rows = e->shape[0], cols = e->shape[1], groups = cols / c->group;
        size_t row_bytes = (size_t)(cols * c->bits / 8), ng = (size_t)rows * (size_t)groups;
        uint8_t *packed = em_calloc((size_t)rows, row_bytes);
        float *sc = em_mallocn(ng, sizeof *sc), *bi = em_mallocn(ng, sizeof *bi);
        note_work(r, bytes + (uint64_t)rows * row_bytes + 2 * ng * sizeof(float));
        if (!packed || !sc || !bi) s = em_fail(EM_ERR_NOMEM, "out of memory quantizing %s", e->name);
        if (s == EM_OK) {
            rows_job q = {.v = v, .packed = packed, .sc = sc, .bi = bi, .rows = rows, .cols = cols, .bits = c->bits,
                          .group = c->group, .fdt = c->fdt, .search = r->job->search};
            int threads = em_pool_threads(r->pool), tasks = (int)(rows < 8 * threads ? rows : 8 * threads);
            if (tasks < 1) tasks = 1;
            q.per_task = (rows + tasks - 1) / tasks;
            em_pool_for(r->pool, tasks, quantize_rows, &q);
        }
        if (s == EM_OK) s = write_bytes(w, packed, (size_t)rows * row_bytes);
        if (s == EM_OK) s = write_bytes(w, sc, to_dtype(sc, ng, c->fdt));
        if (s == EM_OK) s = write_bytes(w, bi, to_dtype(bi, ng, c->fdt));
        free(packed);
        free(sc);
        free(bi);
    }
    st_drop_pages(e->src->t);
    return s;
}

static em_status write_index(run *r, int n_shards, uint64_t total) {
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", meta);
    for (size_t i = 0; i < r->plan.n; i++) {
        char fname[64];
        shard_name(r->choice[i].shard, n_shards, fname, sizeof fname);
        size_t end = i + 1 < r->plan.n ? r->choice[i + 1].first : r->n_wt;
        for (size_t k = r->choice[i].first; k < end; k++) json_object_set_new(map, r->wt[k].name, json_string(fname));
    }
    json_object_set_new(root, "weight_map", map);
    char *path = em_path_join(r->tmp, "model.safetensors.index.json");
    int rc = path ? json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : -1;
    free(path);
    json_decref(root);
    return rc == 0 ? EM_OK : em_fail(EM_ERR_IO, "%s: cannot write the shard index", r->tmp);
}

static em_status write_shards(run *r) {
    uint64_t limit = r->job->shard_bytes ? r->job->shard_bytes : 5ull << 30, acc = 0, total = 0;
    int shard = 0;
    for (size_t i = 0; i < r->plan.n; i++) {
        size_t end = i + 1 < r->plan.n ? r->choice[i + 1].first : r->n_wt;
        uint64_t b = 0;
        for (size_t k = r->choice[i].first; k < end; k++) b += st_wtensor_bytes(&r->wt[k]);
        if (acc && acc + b > limit) {
            shard++;
            acc = 0;
        }
        acc += b;
        total += b;
        r->choice[i].shard = shard;
    }
    int n_shards = shard + 1;
    r->rep->shards = n_shards;
    st_kv meta[6] = {{"format", "mlx"}};
    size_t n_meta = 1;
    if (r->job->search) meta[n_meta++] = (st_kv){"ember.rounding", "search: clipped range ladder, least-squares refit"};
    char seed[32];
    if (r->plan.rotate) {
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->plan.seed);
        meta[n_meta++] = (st_kv){"ember.transform", r->plan.transform_id};
        meta[n_meta++] = (st_kv){"ember.family", r->plan.family};
        meta[n_meta++] = (st_kv){"ember.seed", seed};
        meta[n_meta++] = (st_kv){"ember.deviations", r->plan.deviations};
    }
    size_t i = 0;
    for (int sh = 0; sh < n_shards; sh++) {
        size_t i0 = i;
        while (i < r->plan.n && r->choice[i].shard == sh) i++;
        size_t t0 = r->choice[i0].first, t1 = i < r->plan.n ? r->choice[i].first : r->n_wt;
        char fname[64];
        shard_name(sh, n_shards, fname, sizeof fname);
        char *path = em_path_join(r->tmp, fname);
        if (!path) return em_fail(EM_ERR_NOMEM, "out of memory");
        st_writer *w;
        em_status s = st_writer_open(path, r->wt + t0, t1 - t0, meta, n_meta, &w);
        free(path);
        EM_TRY(s);
        for (size_t k = i0; k < i && s == EM_OK; k++) {
            if (r->job->progress)
                fprintf(stderr, "\rquantize: [%zu/%zu] %-64.64s", k + 1, r->plan.n, r->plan.outs[k].name);
            s = emit(r, k, w);
        }
        if (s != EM_OK) {
            st_writer_abort(w);
            return s;
        }
        EM_TRY(st_writer_close(w));
    }
    if (r->job->progress) fprintf(stderr, "\n");
    r->rep->bytes_out = total;
    return n_shards > 1 ? write_index(r, n_shards, total) : EM_OK;
}

static void set_untied(json_t *cfg) {
    json_object_set_new(cfg, "tie_word_embeddings", json_false());
    json_t *tc = json_object_get(cfg, "text_config");
    if (json_is_object(tc)) json_object_set_new(tc, "tie_word_embeddings", json_false());
}

static em_status write_config(run *r) {
    json_t *cfg = json_deep_copy(r->src.config);
    if (!cfg) return em_fail(EM_ERR_NOMEM, "out of memory");
    json_object_del(cfg, "quantization");
    json_object_del(cfg, "quantization_config");
    bool any = false;
    for (size_t i = 0; i < r->plan.n; i++) any |= r->choice[i].bits > 0;
    if (any) {
        json_t *q = json_object();
        json_object_set_new(q, "group_size", json_integer(r->def_group));
        json_object_set_new(q, "bits", json_integer(r->def_bits));
        json_object_set_new(q, "mode", json_string("affine"));
        for (size_t i = 0; i < r->plan.n; i++) {
            const out_choice *c = &r->choice[i];
            if (!r->plan.outs[i].linear || (c->bits == r->def_bits && c->group == r->def_group)) continue;
            char module[512];
            module_of(r->plan.outs[i].name, module, sizeof module);
            json_t *o = json_false();
            if (c->bits) {
                o = json_object();
                json_object_set_new(o, "group_size", json_integer(c->group));
                json_object_set_new(o, "bits", json_integer(c->bits));
            }
            json_object_set_new(q, module, o);
        }
        json_object_set(cfg, "quantization", q);
        json_object_set_new(cfg, "quantization_config", q);
    }
    if (r->plan.untie) set_untied(cfg);
    if (r->plan.rotate) {
        json_t *t = json_object();
        json_object_set_new(t, "id", json_string(r->plan.transform_id));
        json_object_set_new(t, "family", json_string(r->plan.family));
        json_object_set_new(t, "seed", json_integer((json_int_t)r->plan.seed));
        json_object_set_new(t, "deviations", json_string(r->plan.deviations));
        if (r->plan.online) {
            json_t *on = json_array();
            json_array_append_new(on, json_string("attention_input"));
            json_array_append_new(on, json_string("mlp_input"));
            json_object_set_new(t, "online_rotations", on);
        }
        if (r->plan.r1_kept) {
            json_t *kept = json_array();
            for (int64_t j = 0; j < r->plan.hidden; j++)
                if (r->plan.r1_kept[j]) json_array_append_new(kept, json_integer(j));
            json_object_set_new(t, "r1_kept_channels", kept);
        }
        json_object_set_new(cfg, "ember_transform", t);
    }
    char *path = em_path_join(r->tmp, "config.json");
    int rc = path ? json_dump_file(cfg, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : -1;
    free(path);
    json_decref(cfg);
    return rc == 0 ? EM_OK : em_fail(EM_ERR_IO, "%s: cannot write config.json", r->tmp);
}

static em_status copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    if (!in || !out) {
        if (in) fclose(in);
        return em_fail(EM_ERR_IO, "cannot copy %s to %s: %s", from, to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    fclose(in);
    if (fclose(out) != 0) ok = false;
    return ok ? EM_OK : em_fail(EM_ERR_IO, "cannot copy %s to %s", from, to);
}

/* Tokenizer, templates, generation_config.json... every other regular file. */
static em_status copy_side_files(run *r) {
    DIR *d = opendir(r->job->src);
    if (!d) return em_fail(EM_ERR_IO, "%s: cannot list: %s", r->job->src, strerror(errno));
    struct dirent *ent;
    em_status s = EM_OK;
    while (s == EM_OK && (ent = readdir(d))) {
        const char *n = ent->d_name;
        size_t l = strlen(n);
        if (n[0] == '.' || !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
            (l > 12 && !strcmp(n + l - 12, ".safetensors")))
            continue;
        char *from = em_path_join(r->job->src, n), *to = em_path_join(r->tmp, n);
        struct stat st;
        if (!from || !to) s = em_fail(EM_ERR_NOMEM, "out of memory");
        else if (stat(from, &st) == 0 && S_ISREG(st.st_mode)) s = copy_file(from, to);
        free(from);
        free(to);
    }
    closedir(d);
    return s;
}

/* Moves the finished artifact into place (replacing DST under --force). */
static em_status publish(run *r) {
    const char *dst = r->job->dst;
    char *old = NULL;
    if (em_dir_exists(dst) || em_file_exists(dst)) {
        size_t n = strlen(dst) + 16;
        old = em_malloc(n);
        if (!old) return em_fail(EM_ERR_NOMEM, "out of memory");
        snprintf(old, n, "%s.old.XXXXXX", dst);
        if (!mkdtemp(old) || rmdir(old) != 0 || rename(dst, old) != 0) {
            free(old);
            return em_fail(EM_ERR_IO, "%s: cannot move the existing artifact aside: %s", dst, strerror(errno));
        }
    }
    if (rename(r->tmp, dst) != 0) {
        em_status s = em_fail(EM_ERR_IO, "%s: cannot rename %s into place: %s", dst, r->tmp, strerror(errno));
        if (old) rename(old, dst);
        free(old);
        return s;
    }
    free(r->tmp);
    r->tmp = NULL;
    if (old) rm_tree(old);
    free(old);
    return EM_OK;
}

static em_status make_tmp(run *r) {
    size_t n = strlen(r->job->dst) + 16;
    r->tmp = em_malloc(n);
    if (!r->tmp) return em_fail(EM_ERR_NOMEM, "out of memory");
    size_t l = strlen(r->job->dst);
    while (l > 1 && r->job->dst[l - 1] == '/') l--;
    snprintf(r->tmp, n, "%.*s.tmp.XXXXXX", (int)l, r->job->dst);
    if (!mkdtemp(r->tmp)) {
        em_status s = em_fail(EM_ERR_IO, "%s: cannot create a temporary directory beside it: %s", r->job->dst,
                              strerror(errno));
        free(r->tmp);
        r->tmp = NULL;
        return s;
    }
    /* mkdtemp makes it private; the artifact gets the usual permissions */
    mode_t mask = umask(0);
    umask(mask);
    chmod(r->tmp, 0777 & ~mask);
    return EM_OK;
}

static em_status run_all(run *r) {
    const quant_job *j = r->job;
    EM_TRY(qsrc_open(j->src, &r->src));
    r->rep->bytes_in = st_data_bytes(r->src.st);
    EM_TRY(fold_plan_build(&r->src, &j->fold, &r->plan));
    r->fdt = j->out_dtype;
    EM_TRY(decide(r));
    r->rep->n_tensors = r->n_wt;
    if (j->plan_only) {
        fold_plan_print(&r->plan, stdout);
        for (size_t i = 0; i < r->plan.n; i++)
            if (r->choice[i].bits)
                printf("quantize %s: %d bits, group %d\n", r->plan.outs[i].name, r->choice[i].bits, r->choice[i].group);
        return EM_OK;
    }
    if (!j->force && (em_dir_exists(j->dst) || em_file_exists(j->dst)))
        return em_fail(EM_ERR_INVALID, "%s already exists (use --force to replace it)", j->dst);
    EM_TRY(make_tmp(r));
    if (!(r->pool = em_pool_create(j->threads))) return em_fail(EM_ERR_NOMEM, "cannot start the quantizing threads");
    EM_TRY(write_shards(r));
    EM_TRY(write_config(r));
    EM_TRY(copy_side_files(r));
    return publish(r);
}

em_status quant_run(const quant_job *job, quant_report *rep) {
    memset(rep, 0, sizeof *rep);
    run r = {.job = job, .rep = rep};
    double t0 = em_now();
    em_status s = run_all(&r);
    if (r.tmp) rm_tree(r.tmp);
    free(r.tmp);
    for (size_t i = 0; i < r.n_wt; i++) free(r.wnames[i]);
    free(r.wnames);
    free(r.wt);
    free(r.choice);
    fold_plan_free(&r.plan);
    qsrc_close(&r.src);
    em_pool_free(r.pool);
    free(r.scratch);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) rep->max_rss_kb = ru.ru_maxrss;
    rep->seconds = em_now() - t0;
    return s;
}
