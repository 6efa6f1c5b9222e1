/* gemv_bench.c — the decode step's matrix products alone, by kind, against
 * the memory bandwidth of the backend they run on.
 *
 *   ember-gemv-bench [--device cpu|cuda[:N]] [--shape 1b|8b|qwen3.5-4b]
 *                    [--bits 0|4|8] [--group-size G] [--rows M] [--exact]
 *                    [--threads N] [--seconds S] [--only KIND] [--no-graphs]
 *
 * For one transformer layer of the shape (q/k/v as one group, o, gate and
 * up with SwiGLU, down) and the head, random weights of the format are made
 * in enough copies that one pass over them streams at least 256 MB (more
 * than any cache), and each kind's products run back to back over its
 * copies through the backend's operation table, as a decode step calls
 * them (on a backend with step graphs, one pass is recorded and replayed,
 * as a decode step is). Prints, per kind, microseconds a call, GB/s of
 * weight bytes read and the fraction of the backend's measured read
 * bandwidth. Weights are
 * random: the figures are of the kernels, not of a model. */
#include "backend/backend.h"
#include "backend/cpu/membw.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "tensor/dtype.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *name;
    int hidden, q_out, kv_out, o_in, ffn, vocab;
} shape;

static const shape SHAPES[] = {
    {"1b", 2048, 2048, 512, 2048, 8192, 128256},
    {"8b", 4096, 4096, 1024, 4096, 14336, 128256},
    /* Qwen3.5-4B's full-attention layer: q doubled by its output gate */
    {"qwen3.5-4b", 2560, 8192, 1024, 4096, 9216, 248320},
};

typedef struct opts {
    const char *device;
    const shape *sh;
    int bits, group, rows, threads;
    em_math math;
    double seconds;
    const char *only; /* one kind by name, or NULL for all */
    bool graphs;      /* each pass recorded once as a step graph and replayed, as decode runs */
} opts;

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float frand(void) { return (float)((next() >> 40) & 0xffffff) / 8388608.0f - 1.0f; }

static void *dev_copy(em_backend *be, const void *h, size_t bytes) {
    void *d = be->ops->alloc(be, bytes);
    if (!d || be->ops->upload(be, d, h, bytes) != EM_OK) {
        fprintf(stderr, "gemv_bench: cannot place %zu bytes on %s: %s\n", bytes, be->desc, em_last_error());
        exit(1);
    }
    return d;
}

/* A random [n, k] weight of the chosen format in backend memory. */
static em_weight make_weight(em_backend *be, const opts *o, int n, int k, const char *name) {
    em_weight w = {.rows = n, .cols = k, .name = name};
    if (o->bits == 0) {
        size_t count = (size_t)n * k;
        uint16_t *h = malloc(count * 2);
        for (size_t i = 0; i < count; i++) h[i] = f32_to_bf16(frand() * 0.05f);
        w.dtype = EM_BF16, w.data = dev_copy(be, h, count * 2);
        free(h);
        return w;
    }
    size_t words = (size_t)n * k / 32 * (size_t)o->bits, groups = (size_t)n * (size_t)(k / o->group);
    uint32_t *h = malloc(words * 4);
    for (size_t i = 0; i < words; i++) h[i] = (uint32_t)next();
    uint16_t *s = malloc(groups * 2), *b = malloc(groups * 2);
    for (size_t i = 0; i < groups; i++) s[i] = f32_to_bf16(frand() * 0.01f), b[i] = f32_to_bf16(frand() * 0.05f);
    w.dtype = EM_U32, w.bits = o->bits, w.group_size = o->group, w.scale_dtype = EM_BF16;
    w.data = dev_copy(be, h, words * 4), w.scales = dev_copy(be, s, groups * 2), w.biases = dev_copy(be, b, groups * 2);
    free(h), free(s), free(b);
    return w;
}

enum { K_QKV, K_O, K_GATE_UP, K_DOWN, K_HEAD, K_COUNT };
static const char *KIND_NAMES[K_COUNT] = {"q/k/v", "o", "gate+up+swiglu", "down", "head"};

/* The weights of one kind in one copy (up to 3: q/k/v). */
typedef struct unit {
    em_weight w[3];
    int n;
} unit;

static unit make_unit(em_backend *be, const opts *o, int kind) {
    const shape *s = o->sh;
    unit u = {.n = 1};
    switch (kind) {
    case K_QKV:
        u.n = 3, u.w[0] = make_weight(be, o, s->q_out, s->hidden, "q");
        u.w[1] = make_weight(be, o, s->kv_out, s->hidden, "k"), u.w[2] = make_weight(be, o, s->kv_out, s->hidden, "v");
        break;
    case K_O: u.w[0] = make_weight(be, o, s->hidden, s->o_in, "o"); break;
    case K_GATE_UP:
        u.n = 2, u.w[0] = make_weight(be, o, s->ffn, s->hidden, "gate"), u.w[1] = make_weight(be, o, s->ffn, s->hidden, "up");
        break;
    case K_DOWN: u.w[0] = make_weight(be, o, s->hidden, s->ffn, "down"); break;
    default: u.w[0] = make_weight(be, o, s->vocab, s->hidden, "head"); break;
    }
    return u;
}

static void free_unit(em_backend *be, unit *u) {
    for (int i = 0; i < u->n; i++) {
        be->ops->free(be, (void *)u->w[i].data);
        if (u->w[i].bits) be->ops->free(be, (void *)u->w[i].scales), be->ops->free(be, (void *)u->w[i].biases);
    }
}

static size_t unit_bytes(const unit *u) {
    size_t b = 0;
    for (int i = 0; i < u->n; i++) b += em_weight_bytes(&u->w[i]);
    return b;
}

/* One call of a kind, as the decode step makes it. */
static void run_unit(em_backend *be, const opts *o, int kind, const unit *u, float *const *ys, const float *x) {
    const em_weight *ws[3] = {&u->w[0], &u->w[1], &u->w[2]};
    if (kind == K_GATE_UP && be->ops->matmul_swiglu &&
        be->ops->matmul_swiglu(be, ys[0], x, o->rows, ws[0], ws[1], NULL, NULL, o->math))
        return;
    if (kind == K_GATE_UP) {
        const float *bs[2] = {NULL, NULL};
        if (be->ops->matmul_group) be->ops->matmul_group(be, 2, ys, x, o->rows, ws, bs, o->math);
        else
            for (int i = 0; i < 2; i++) be->ops->matmul(be, ys[i], x, o->rows, ws[i], NULL, o->math);
        be->ops->swiglu(be, ys[0], ys[0], ys[1], o->rows, (int)u->w[0].rows, (int)u->w[0].rows);
        return;
    }
    if (u->n > 1 && be->ops->matmul_group) {
        const float *bs[3] = {NULL, NULL, NULL};
        be->ops->matmul_group(be, u->n, ys, x, o->rows, ws, bs, o->math);
        return;
    }
    for (int i = 0; i < u->n; i++) be->ops->matmul(be, ys[i], x, o->rows, ws[i], NULL, o->math);
}

static double backend_bandwidth(em_backend *be) {
    if (be->ops->bandwidth) return be->ops->bandwidth(be);
    em_pool *pool = em_pool_create(be->n_threads);
    double bw = pool ? cpu_read_bandwidth(pool, (size_t)1 << 30) : 0;
    em_pool_free(pool);
    return bw;
}

/* Waits for the queued work (a download waits for it). */
static void drain(em_backend *be, const float *y) {
    float v;
    if (be->ops->download(be, &v, y, sizeof v) != EM_OK) {
        fprintf(stderr, "gemv_bench: %s\n", em_last_error());
        exit(1);
    }
}

/* One pass over the copies of a kind; with graphs, as a decode step runs
 * (recorded under key on the first pass, replayed after). */
static void run_pass(em_backend *be, const opts *o, int kind, const unit *us, int copies, float *const *ys,
                     const float *x) {
    em_graph_mode gm = o->graphs && be->ops->graph_begin ? be->ops->graph_begin(be, (uint64_t)kind + 1) : EM_GRAPH_NONE;
    for (int c = 0; c < copies; c++) run_unit(be, o, kind, &us[c], ys, x);
    if (gm == EM_GRAPH_NONE) return;
    bool ran = false;
    if (be->ops->graph_end(be, &ran) != EM_OK) {
        fprintf(stderr, "gemv_bench: %s\n", em_last_error());
        exit(1);
    }
    if (!ran)
        for (int c = 0; c < copies; c++) run_unit(be, o, kind, &us[c], ys, x);
}

/* Times one kind: copies enough for 256 MB a pass, a warm pass, then
 * passes until o->seconds have gone. Returns microseconds a call. */
static double time_kind(em_backend *be, const opts *o, int kind, float *const *ys, const float *x, size_t *bytes) {
    unit first = make_unit(be, o, kind);
    size_t per = unit_bytes(&first), want = (size_t)256 << 20;
    int copies = per >= want ? 1 : (int)((want + per - 1) / per);
    if (copies > 64) copies = 64;
    unit *us = malloc((size_t)copies * sizeof *us);
    us[0] = first;
    for (int c = 1; c < copies; c++) us[c] = make_unit(be, o, kind);
    run_pass(be, o, kind, us, copies, ys, x);
    drain(be, ys[0]);
    long calls = 0;
    double t0 = em_now(), t = 0;
    do {
        run_pass(be, o, kind, us, copies, ys, x);
        calls += copies;
        drain(be, ys[0]);
        t = em_now() - t0;
    } while (t < o->seconds);
    if (o->graphs && be->ops->graph_reset) be->ops->graph_reset(be);
    for (int c = 0; c < copies; c++) free_unit(be, &us[c]);
    free(us);
    *bytes = per;
    return t / (double)calls * 1e6;
}

/* A row of the table: bytes read in us microseconds against bandwidth bw. */
static void print_row(const char *name, double bytes, double us, double bw) {
    double gbs = bytes / us / 1e3;
    printf("%-16s %10.2f %10.2f %9.1f %8.1f%%\n", name, bytes / 1e6, us, gbs, bw > 0 ? 100 * gbs * 1e9 / bw : 0);
}

static void usage(void) {
    printf("usage: ember-gemv-bench [--device cpu|cuda[:N]] [--shape 1b|8b|qwen3.5-4b] [--bits 0|4|8]\n"
           "                        [--group-size G] [--rows M] [--exact] [--threads N] [--seconds S]\n"
           "                        [--only q/k/v|o|gate+up+swiglu|down|head] [--no-graphs]\n"
           "Times a decode step's matrix products (q/k/v, o, gate+up+SwiGLU, down, head) of one layer of\n"
           "the shape over random weights (bits 0: bf16), each kind back to back over copies that stream\n"
           "at least 256 MB, and prints microseconds a call, GB/s of weights read and the fraction of\n"
           "the backend's measured read bandwidth. Where the backend records step graphs (CUDA), each\n"
           "pass is recorded once and replayed, as a decode step runs; --no-graphs launches them plainly.\n");
}

static bool parse(int argc, char **argv, opts *o) {
    *o = (opts){.device = "cpu", .sh = &SHAPES[0], .bits = 4, .group = 64, .rows = 1, .math = EM_MATH_FAST,
                .seconds = 0.5, .graphs = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), exit(0), false;
        if (!strcmp(a, "--exact")) { o->math = EM_MATH_EXACT; continue; }
        if (!strcmp(a, "--no-graphs")) { o->graphs = false; continue; }
        if (!v) return fprintf(stderr, "gemv_bench: %s needs a value\n", a), false;
        i++;
        if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--bits")) o->bits = atoi(v);
        else if (!strcmp(a, "--group-size")) o->group = atoi(v);
        else if (!strcmp(a, "--rows")) o->rows = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--seconds")) o->seconds = atof(v);
        else if (!strcmp(a, "--only")) o->only = v;
        else if (!strcmp(a, "--shape")) {
            o->sh = NULL;
            for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
                if (!strcmp(v, SHAPES[s].name)) o->sh = &SHAPES[s];
            if (!o->sh) return fprintf(stderr, "gemv_bench: unknown shape %s\n", v), false;
        } else return fprintf(stderr, "gemv_bench: unknown option %s\n", a), false;
    }
    if (o->bits != 0 && o->bits != 2 && o->bits != 3 && o->bits != 4 && o->bits != 5 && o->bits != 6 && o->bits != 8)
        return fprintf(stderr, "gemv_bench: --bits takes 0 (bf16), 2, 3, 4, 5, 6 or 8\n"), false;
    if (o->group != 32 && o->group != 64 && o->group != 128)
        return fprintf(stderr, "gemv_bench: --group-size takes 32, 64 or 128\n"), false;
    if (o->rows < 1 || o->rows > 64) return fprintf(stderr, "gemv_bench: --rows takes 1 to 64\n"), false;
    if (o->seconds <= 0 || o->seconds > 60) return fprintf(stderr, "gemv_bench: --seconds takes (0, 60]\n"), false;
    return true;
}

int main(int argc, char **argv) {
    opts o;
    if (!parse(argc, argv, &o)) return 2;
    em_backend *be;
    if (em_backend_open(o.device, o.threads, &be) != EM_OK) {
        fprintf(stderr, "gemv_bench: %s\n", em_last_error());
        return 1;
    }
    const shape *s = o.sh;
    int widest = s->vocab > 2 * s->ffn ? s->vocab : 2 * s->ffn, deepest = s->ffn > s->o_in ? s->ffn : s->o_in;
    float *ys[3], *x = be->ops->alloc(be, (size_t)o.rows * deepest * sizeof(float));
    float *xh = malloc((size_t)o.rows * deepest * sizeof *xh);
    for (size_t i = 0; i < (size_t)o.rows * deepest; i++) xh[i] = frand();
    if (!x || be->ops->upload(be, x, xh, (size_t)o.rows * deepest * sizeof *xh) != EM_OK) return 1;
    for (int i = 0; i < 3; i++)
        if (!(ys[i] = be->ops->alloc(be, (size_t)o.rows * widest * sizeof(float)))) return 1;
    double bw = backend_bandwidth(be);
    printf("%s, shape %s, %s, %d row%s, %s%s; read bandwidth %.1f GB/s\n", be->desc, s->name,
           o.bits ? "affine" : "bf16", o.rows, o.rows > 1 ? "s" : "", o.math == EM_MATH_FAST ? "FAST" : "EXACT",
           o.graphs && be->ops->graph_begin ? ", step graphs" : "", bw / 1e9);
    if (o.bits) printf("weights: %d-bit, group %d, bf16 scales and biases\n", o.bits, o.group);
    printf("%-16s %10s %10s %9s %9s\n", "kind", "MB", "us/call", "GB/s", "of bw");
    double layer_us = 0, layer_bytes = 0;
    for (int k = 0; k < K_COUNT; k++) {
        if (o.only && strcmp(o.only, KIND_NAMES[k])) continue;
        size_t bytes;
        double us = time_kind(be, &o, k, ys, x, &bytes);
        print_row(KIND_NAMES[k], (double)bytes, us, bw);
        if (k != K_HEAD) layer_us += us, layer_bytes += (double)bytes;
    }
    if (!o.only) print_row("layer", layer_bytes, layer_us, bw);
    for (int i = 0; i < 3; i++) be->ops->free(be, ys[i]);
    be->ops->free(be, x);
    free(xh);
    em_backend_free(be);
    return 0;
}
