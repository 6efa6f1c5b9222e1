/* fold.c — planning and applying the rotation/norm-folding transforms. */
#include "quant/fold.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}
static bool starts_with(const char *s, const char *pre) { return !strncmp(s, pre, strlen(pre)); }

uint64_t plan_out_elements(const plan_out *e) {
    return e->ndim == 1 ? (uint64_t)e->shape[0] : (uint64_t)e->shape[0] * (uint64_t)e->shape[1]; /* ndim > 2: [d0, rest] */
}

/* An integer from config.json, or from its text_config (multimodal wrappers). */
static int64_t cfg_int(json_t *c, const char *key) {
    json_t *v = json_object_get(c, key);
    if (!json_is_integer(v)) {
        json_t *tc = json_object_get(c, "text_config");
        v = json_is_object(tc) ? json_object_get(tc, key) : NULL;
    }
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

static const char *cfg_str(json_t *c, const char *key) {
    json_t *v = json_object_get(c, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

static em_status push(fold_plan *p, size_t *cap, const char *name, const qsrc_tensor *src, plan_out **out) {
    if (!em_grow((void **)&p->outs, cap, p->n + 1, sizeof *p->outs)) return em_fail(EM_ERR_NOMEM, "out of memory");
    plan_out *e = &p->outs[p->n];
    *e = (plan_out){.src = src, .ndim = src->ndim, .layer = -1};
    e->shape[0] = src->shape[0];
    e->shape[1] = src->ndim > 1 ? src->shape[1] : 1;
    /* tensors of more dimensions (convolution kernels) are only copied: seen
     * as [d0, rest] */
    if (src->ndim > 2) e->shape[1] = (int64_t)(qsrc_elements(src) / (uint64_t)(src->shape[0] ? src->shape[0] : 1));
    if (!(e->name = em_strdup(name))) return em_fail(EM_ERR_NOMEM, "out of memory");
    p->n++;
    *out = e;
    return EM_OK;
}

/* ---- family choice ---- */

static bool has_substr(const qsrc *s, const char *sub) {
    for (size_t i = 0; i < s->n; i++)
        if (strstr(s->tensors[i].name, sub)) return true;
    return false;
}

static em_status choose_family(const qsrc *s, const char *want, char *out, size_t len) {
    const char *mt = cfg_str(s->config, "model_type");
    bool qwen35 = has_substr(s, ".linear_attn.") || starts_with(mt, "qwen3_5") || starts_with(mt, "qwen3_next");
    bool llama = !qwen35 && s->cfg_ok && s->cfg.family == FAMILY_DENSE;
    const char *found = qwen35 ? "qwen3_5" : llama ? "llama" : NULL;
    if (!want || !strcmp(want, "automatic")) {
        if (!found)
            return em_fail(EM_ERR_UNSUPPORTED,
                           "%s: no weight transform for model_type '%s' (rotation knows the Llama family and Qwen3.5)",
                           s->dir, mt);
        snprintf(out, len, "%s", found);
        return EM_OK;
    }
    if (strcmp(want, "llama") && strcmp(want, "qwen3_5"))
        return em_fail(EM_ERR_INVALID, "unknown transform family '%s' (automatic, llama, qwen3_5)", want);
    if (!found || strcmp(want, found))
        return em_fail(EM_ERR_INVALID, "%s: the checkpoint is %s, not %s", s->dir, found ? found : mt, want);
    snprintf(out, len, "%s", want);
    return EM_OK;
}

/* Qwen3.5 checkpoints store the residual gains as gamma - 1 unless they were
 * shifted by a conversion; the loader's rule (sanitize_qwen3_5.h): centred
 * iff any mtp.* tensor or a conv1d kernel not yet moved to [C, K, 1]. The
 * artifact keeps those tensors, so the loader decides the same way on it. */
static bool q35_gains_centred(const qsrc *s) {
    for (size_t i = 0; i < s->n; i++) {
        const qsrc_tensor *t = &s->tensors[i];
        if (strstr(t->name, "mtp.")) return true;
        if (strstr(t->name, "conv1d.weight") && t->ndim > 0 && t->shape[t->ndim - 1] != 1) return true;
    }
    return false;
}

/* ---- rotation plan ---- */

typedef struct ctx {
    const qsrc *s;
    fold_plan *p;
    size_t cap;
    char prefix[128];  /* text model prefix: "model." or "model.language_model." */
    float offset;      /* norm gain offset */
    int64_t keep;      /* channels to keep out of R1, at least */
} ctx;

static const qsrc_tensor *need(ctx *c, const char *name) {
    const qsrc_tensor *t = qsrc_find(c->s, name);
    if (!t) em_fail(EM_ERR_FORMAT, "%s: tensor %s is missing (the transform plan needs it)", c->s->dir, name);
    return t;
}

static em_status check_shape(ctx *c, const qsrc_tensor *t, int ndim, int64_t d0, int64_t d1, const char *role) {
    if (t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1)) return EM_OK;
    return em_fail(EM_ERR_FORMAT, "%s: tensor %s (%s) has shape [%lld%s%lld]; expected [%lld%s%lld]", c->s->dir,
                   t->name, role, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                   t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)d0, ndim > 1 ? ", " : "",
                   ndim > 1 ? (long long)d1 : 0LL);
}

static em_status find_prefix(ctx *c) {
    for (size_t i = 0; i < c->s->n; i++) {
        const char *n = c->s->tensors[i].name, *at = strstr(n, "layers.0.input_layernorm.weight");
        if (at && !starts_with(n, "mtp.") && (size_t)(at - n) < sizeof c->prefix) {
            memcpy(c->prefix, n, (size_t)(at - n));
            c->prefix[at - n] = 0;
            return EM_OK;
        }
    }
    return em_fail(EM_ERR_FORMAT, "%s: no layers.0.input_layernorm.weight: not a decoder checkpoint this plan knows",
                   c->s->dir);
}

/* Splits "<pre>layers.<i>.<rest>" for the trunk or "mtp.layers.<i>.<rest>". */
static bool layer_of(const ctx *c, const char *name, int *layer, const char **rest, bool *mtp) {
    const char *p;
    if (starts_with(name, c->prefix) && starts_with(name + strlen(c->prefix), "layers.")) {
        p = name + strlen(c->prefix) + 7;
        *mtp = false;
    } else if (starts_with(name, "mtp.layers.")) {
        p = name + 11;
        *mtp = true;
    } else {
        return false;
    }
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || *end != '.' || v < 0 || v > 100000) return false;
    *layer = (int)v;
    *rest = end + 1;
    return true;
}

static em_status layer_norm(ctx *c, bool mtp, int layer, const char *which, const qsrc_tensor **out) {
    char name[256];
    if (mtp) snprintf(name, sizeof name, "mtp.layers.%d.%s", layer, which);
    else snprintf(name, sizeof name, "%slayers.%d.%s", c->prefix, layer, which);
    if (!(*out = need(c, name))) return EM_ERR_FORMAT;
    return check_shape(c, *out, 1, c->p->hidden, 0, "norm gain");
}

static bool is_writer(const char *rest) {
    return ends_with(rest, "o_proj.weight") || ends_with(rest, "out_proj.weight") || ends_with(rest, "down_proj.weight");
}
static bool is_writer_bias(const char *rest) {
    return ends_with(rest, "o_proj.bias") || ends_with(rest, "out_proj.bias") || ends_with(rest, "down_proj.bias");
}

/* One tensor of a decoder layer. */
static em_status plan_layer_tensor(ctx *c, const qsrc_tensor *t, int layer, const char *rest, bool mtp) {
    fold_plan *p = c->p;
    int64_t H = p->hidden;
    plan_out *e;
    bool attn = starts_with(rest, "self_attn.") || starts_with(rest, "linear_attn.");
    bool mlp = starts_with(rest, "mlp.");
    if (!strcmp(rest, "input_layernorm.weight") || !strcmp(rest, "post_attention_layernorm.weight")) {
        EM_TRY(check_shape(c, t, 1, H, 0, "norm gain"));
        EM_TRY(push(p, &c->cap, t->name, t, &e));
        e->set = c->offset != 0 ? FOLD_ZEROS : FOLD_ONES;
        return EM_OK;
    }
    if (!attn && !mlp)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s: the transform plan does not know where it sits", c->s->dir,
                       t->name);
    EM_TRY(push(p, &c->cap, t->name, t, &e));
    e->layer = layer;
    bool r2 = p->r2 && !mtp;
    if (is_writer(rest)) {
        if (t->ndim != 2 || t->shape[0] != H) return check_shape(c, t, 2, H, t->ndim > 1 ? t->shape[1] : 0, "stream writer");
        e->r1_out = true;
        e->r2_in = r2 && ends_with(rest, "o_proj.weight");
        if (e->r2_in && t->shape[1] % p->head_dim)
            return em_fail(EM_ERR_FORMAT, "%s: %s has %lld columns, not whole heads of %lld", c->s->dir, t->name,
                           (long long)t->shape[1], (long long)p->head_dim);
        e->linear = true;
        return EM_OK;
    }
    if (is_writer_bias(rest)) {
        EM_TRY(check_shape(c, t, 1, H, 0, "stream writer bias"));
        e->r1_out = true;
        return EM_OK;
    }
    if (t->ndim == 2 && ends_with(rest, ".weight")) {
        /* a reader of the stream: every other 2-D weight of the block */
        if (t->shape[1] != H)
            return em_fail(EM_ERR_FORMAT, "%s: tensor %s reads %lld inputs; a reader of the residual stream reads %lld",
                           c->s->dir, t->name, (long long)t->shape[1], (long long)H);
        EM_TRY(layer_norm(c, mtp, layer, attn ? "input_layernorm.weight" : "post_attention_layernorm.weight", &e->gain[0]));
        e->gain_split = H;
        e->gain_offset = c->offset;
        e->r1_in = true;
        e->linear = true;
        if (r2 && ends_with(rest, "v_proj.weight")) {
            if (t->shape[0] % p->head_dim)
                return em_fail(EM_ERR_FORMAT, "%s: %s has %lld rows, not whole heads of %lld", c->s->dir, t->name,
                               (long long)t->shape[0], (long long)p->head_dim);
            e->r2_out = true;
        }
        return EM_OK;
    }
    if (t->ndim >= 3 && mlp)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s: fused expert tensors are not supported by the transform plan",
                       c->s->dir, t->name);
    /* Biases of readers, per-head q/k norms, GDN conv/A_log/dt_bias/norm:
     * none sees the residual stream's basis. v_proj's bias follows R2. */
    e->r2_out = r2 && t->ndim == 1 && ends_with(rest, "v_proj.bias");
    return EM_OK;
}

/* The head: lm_head (or the embedding when tied) with `norm` folded in. */
static em_status plan_head(ctx *c, const char *out_name, const qsrc_tensor *head, const qsrc_tensor *norm) {
    plan_out *e;
    EM_TRY(check_shape(c, norm, 1, c->p->hidden, 0, "final norm gain"));
    EM_TRY(check_shape(c, head, 2, head->shape[0], c->p->hidden, "head"));
    EM_TRY(push(c->p, &c->cap, out_name, head, &e));
    e->gain[0] = norm;
    e->gain_split = c->p->hidden;
    e->gain_offset = c->offset;
    e->r1_in = true;
    e->linear = true;
    return EM_OK;
}

static em_status plan_mtp_misc(ctx *c, const qsrc_tensor *t, const qsrc_tensor *head) {
    fold_plan *p = c->p;
    plan_out *e;
    int64_t H = p->hidden;
    if (!strcmp(t->name, "mtp.fc.weight")) {
        EM_TRY(check_shape(c, t, 2, H, 2 * H, "MTP fc"));
        EM_TRY(push(p, &c->cap, t->name, t, &e));
        /* input = concat(norm_embedding(embedding), norm_hidden(hidden)) */
        if (!(e->gain[0] = need(c, "mtp.pre_fc_norm_embedding.weight"))) return EM_ERR_FORMAT;
        if (!(e->gain[1] = need(c, "mtp.pre_fc_norm_hidden.weight"))) return EM_ERR_FORMAT;
        e->gain_split = H;
        e->gain_offset = c->offset;
        e->r1_in = e->r1_out = e->linear = true;
        return EM_OK;
    }
    if (!strcmp(t->name, "mtp.pre_fc_norm_embedding.weight") || !strcmp(t->name, "mtp.pre_fc_norm_hidden.weight") ||
        !strcmp(t->name, "mtp.norm.weight")) {
        EM_TRY(check_shape(c, t, 1, H, 0, "MTP norm gain"));
        EM_TRY(push(p, &c->cap, t->name, t, &e));
        e->set = c->offset != 0 ? FOLD_ZEROS : FOLD_ONES;
        if (!strcmp(t->name, "mtp.norm.weight")) return plan_head(c, "mtp.lm_head.weight", head, t);
        return EM_OK;
    }
    if (!strcmp(t->name, "mtp.fc.bias")) {
        EM_TRY(push(p, &c->cap, t->name, t, &e));
        e->r1_out = true;
        return EM_OK;
    }
    return em_fail(EM_ERR_UNSUPPORTED, "%s: tensor %s: the transform plan does not know where it sits", c->s->dir,
                   t->name);
}

/* ---- channels kept out of R1 ----
 *
 * A residual channel that carries massive activations (a few channels whose
 * values are tens of times the rest, which the model tames with small norm
 * gains) is better left out of the rotation: rotated, it spreads into every
 * input of every reader, and its small gain, folded in, shrinks its columns
 * below the quantization step. Such channels keep their basis and their
 * gains (the norms keep those entries), so Q = I on them and a Hadamard of
 * order r1_n on the others. Which channels: those whose gain, relative to
 * its norm's median, is smallest in any residual norm (the gains are read
 * for this: a few vectors of `hidden`). */

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* *med = the median of |g| over n values (1 when it is 0). */
static em_status gain_median(const float *g, int64_t n, float *med) {
    float *c = em_mallocn((size_t)n, sizeof *c);
    if (!c) return em_fail(EM_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < n; j++) c[j] = fabsf(g[j]);
    qsort(c, (size_t)n, sizeof *c, cmp_f);
    *med = c[n / 2] > 0 ? c[n / 2] : 1.0f;
    free(c);
    return EM_OK;
}

/* score[j] = min over the residual norms of |gain_j + offset| / median. */
static em_status kept_scores(ctx *c, float *score) {
    int64_t H = c->p->hidden;
    float *g = em_mallocn((size_t)H, sizeof *g);
    if (!g) return em_fail(EM_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < H; j++) score[j] = 1e30f;
    em_status st = EM_OK;
    char fin[160];
    snprintf(fin, sizeof fin, "%snorm.weight", c->prefix);
    for (size_t i = 0; i < c->s->n && st == EM_OK; i++) {
        const qsrc_tensor *t = &c->s->tensors[i];
        int layer;
        const char *rest;
        bool mtp, res = !strcmp(t->name, fin) ||
                        (layer_of(c, t->name, &layer, &rest, &mtp) && !mtp &&
                         (!strcmp(rest, "input_layernorm.weight") || !strcmp(rest, "post_attention_layernorm.weight")));
        if (!res || t->ndim != 1 || t->shape[0] != H) continue;
        float med = 1.0f;
        if ((st = qsrc_read(c->s, t, g)) != EM_OK) break;
        for (int64_t j = 0; j < H; j++) g[j] = fabsf(g[j] + c->offset);
        if ((st = gain_median(g, H, &med)) != EM_OK) break;
        for (int64_t j = 0; j < H; j++)
            if (g[j] / med < score[j]) score[j] = g[j] / med;
    }
    free(g);
    return st;
}

typedef struct scored {
    float score;
    int32_t j;
} scored;

static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

/* The largest order the Hadamard construction takes, at most n. */
static int64_t r1_order_at_most(int64_t n) {
    while (n > 1 && !hadamard_order_ok(n)) n--;
    return n;
}

/* Keeps at least `keep` channels (the lowest scores) out of R1: r1_n is
 * the largest order that leaves them out. */
static em_status choose_kept(ctx *c, int64_t keep) {
    fold_plan *p = c->p;
    int64_t H = p->hidden;
    p->r1_n = r1_order_at_most(H - keep);
    if (p->r1_n < 2) return em_fail(EM_ERR_INVALID, "keeping %lld of %lld channels out of R1 leaves nothing to rotate",
                                    (long long)keep, (long long)H);
    float *score = em_mallocn((size_t)H, sizeof *score);
    scored *order = em_mallocn((size_t)H, sizeof *order);
    p->r1_kept = em_calloc((size_t)H, sizeof *p->r1_kept);
    p->r1_idx = em_mallocn((size_t)p->r1_n, sizeof *p->r1_idx);
    em_status st = score && order && p->r1_kept && p->r1_idx ? kept_scores(c, score) : em_fail(EM_ERR_NOMEM, "out of memory");
    if (st == EM_OK) {
        /* the H - r1_n lowest scores are kept (ties: the lower index) */
        for (int64_t j = 0; j < H; j++) order[j] = (scored){score[j], (int32_t)j};
        qsort(order, (size_t)H, sizeof *order, cmp_scored);
        for (int64_t k = 0; k < H - p->r1_n; k++) p->r1_kept[order[k].j] = true;
        for (int64_t j = 0, r = 0; j < H; j++)
            if (!p->r1_kept[j]) p->r1_idx[r++] = (int32_t)j;
    }
    free(score);
    free(order);
    return st;
}

static em_status plan_rotate(ctx *c) {
    fold_plan *p = c->p;
    const qsrc *s = c->s;
    EM_TRY(find_prefix(c));
    if (c->keep > 0) EM_TRY(choose_kept(c, c->keep));
    else p->r1_n = p->hidden;
    EM_TRY(hadamard_make(p->r1_n, p->seed, 1, "the hidden size (R1)", &p->r1));
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", c->prefix);
    /* the head: lm_head.weight, or language_model.lm_head.weight (mlx-lm) */
    const char *head_name = !strcmp(c->prefix, "language_model.model.") ? "language_model.lm_head.weight" : "lm_head.weight";
    const qsrc_tensor *emb = need(c, name), *head = qsrc_find(s, head_name);
    if (!emb) return EM_ERR_FORMAT;
    snprintf(name, sizeof name, "%snorm.weight", c->prefix);
    const qsrc_tensor *fnorm = need(c, name);
    if (!fnorm) return EM_ERR_FORMAT;
    EM_TRY(check_shape(c, emb, 2, emb->shape[0], p->hidden, "embedding"));
    p->untie = head == NULL;
    if (!head) head = emb;
    plan_out *e;
    for (size_t i = 0; i < s->n; i++) {
        const qsrc_tensor *t = &s->tensors[i];
        int layer;
        const char *rest;
        bool mtp;
        if (t == emb) {
            EM_TRY(push(p, &c->cap, t->name, t, &e));
            e->r1_in = e->linear = true;
            if (p->untie) EM_TRY(plan_head(c, head_name, emb, fnorm));
        } else if (t == fnorm) {
            EM_TRY(push(p, &c->cap, t->name, t, &e));
            e->set = c->offset != 0 ? FOLD_ZEROS : FOLD_ONES;
        } else if (t == head) {
            EM_TRY(plan_head(c, t->name, t, fnorm));
        } else if (layer_of(c, t->name, &layer, &rest, &mtp)) {
            EM_TRY(plan_layer_tensor(c, t, layer, rest, mtp));
        } else if (starts_with(t->name, "mtp.")) {
            EM_TRY(plan_mtp_misc(c, t, head));
        } else if (starts_with(t->name, "model.visual.") || starts_with(t->name, "visual.")) {
            /* the vision tower is copied as is (ember runs the text model) */
            EM_TRY(push(p, &c->cap, t->name, t, &e));
            p->visual_copied = true;
        } else {
            return em_fail(EM_ERR_UNSUPPORTED,
                           "%s: tensor %s is outside the decoder the transform plan knows; refusing to rotate", s->dir,
                           t->name);
        }
    }
    return EM_OK;
}

/* ---- online rotations ----
 *
 * Every tensor is copied; a block's norm gain gets its rotation's signs and
 * the 2-D weights that read the norm (every one of the block but its
 * writer, o_proj or down_proj) get Q on their input side. */

/* Which block of a layer a tensor belongs to: 0 attention, 1 MLP, -1 neither. */
static int online_block(const char *rest) {
    if (!strcmp(rest, "input_layernorm.weight") || starts_with(rest, "self_attn.")) return 0;
    if (!strcmp(rest, "post_attention_layernorm.weight") || starts_with(rest, "mlp.")) return 1;
    return -1;
}

static em_status plan_online_tensor(ctx *c, const qsrc_tensor *t) {
    fold_plan *p = c->p;
    plan_out *e;
    EM_TRY(push(p, &c->cap, t->name, t, &e));
    e->linear = t->ndim == 2 && ends_with(t->name, ".weight");
    int layer, blk;
    const char *rest;
    bool mtp;
    if (!layer_of(c, t->name, &layer, &rest, &mtp) || mtp || (blk = online_block(rest)) < 0) return EM_OK;
    e->layer = layer;
    e->on_stream = 2000 + 2 * (uint64_t)layer + (uint64_t)blk;
    if (ends_with(rest, "layernorm.weight")) {
        e->on_signs = true;
        return check_shape(c, t, 1, p->hidden, 0, "norm gain");
    }
    if (t->ndim != 2 || !ends_with(rest, ".weight") || is_writer(rest)) return EM_OK;
    if (t->shape[1] != p->hidden)
        return em_fail(EM_ERR_FORMAT, "%s: tensor %s reads %lld inputs; a reader of the block's norm reads %lld",
                       c->s->dir, t->name, (long long)t->shape[1], (long long)p->hidden);
    e->on_in = true;
    return EM_OK;
}

static em_status plan_online(ctx *c) {
    fold_plan *p = c->p;
    EM_TRY(find_prefix(c));
    /* the order check (and its message); r1 is unused otherwise */
    EM_TRY(hadamard_make(p->hidden, p->seed, 0, "the hidden size (online rotation)", &p->r1));
    for (size_t i = 0; i < c->s->n; i++) EM_TRY(plan_online_tensor(c, &c->s->tensors[i]));
    snprintf(p->transform_id, sizeof p->transform_id, "%s", "ember-rotate-v1:online-inputs");
    snprintf(p->deviations, sizeof p->deviations, "%s",
             "no rotation folded into the residual stream (no R1, R2): the normed input of every attention and MLP "
             "block is rotated at run time by H/sqrt(hidden) (ember_transform.online_rotations), each block's "
             "seeded signs multiplied into its norm gain and Q = D.H/sqrt(hidden) into the input side of the "
             "weights that read it; embedding, head, o_proj and down_proj unchanged");
    return EM_OK;
}

static em_status plan_identity(fold_plan *p, const qsrc *s) {
    size_t cap = 0;
    plan_out *e;
    for (size_t i = 0; i < s->n; i++) {
        const qsrc_tensor *t = &s->tensors[i];
        EM_TRY(push(p, &cap, t->name, t, &e));
        e->linear = t->ndim == 2 && ends_with(t->name, ".weight");
    }
    return EM_OK;
}

em_status fold_plan_build(const qsrc *s, const fold_options *o, fold_plan *p) {
    memset(p, 0, sizeof *p);
    p->rotate = o->rotate;
    p->seed = o->seed;
    em_status st;
    if (!o->rotate) {
        st = plan_identity(p, s);
        if (st != EM_OK) fold_plan_free(p);
        return st;
    }
    ctx c = {.s = s, .p = p};
    st = choose_family(s, o->family, p->family, sizeof p->family);
    if (st == EM_OK && o->online) {
        p->online = true;
        p->hidden = cfg_int(s->config, "hidden_size");
        if (strcmp(p->family, "llama"))
            st = em_fail(EM_ERR_UNSUPPORTED, "%s: online rotations are applied by the Llama-family graph only, not %s",
                         s->dir, p->family);
        else if (p->hidden <= 0) st = em_fail(EM_ERR_FORMAT, "%s: config.json has no hidden_size", s->dir);
        else st = plan_online(&c);
    } else if (st == EM_OK) {
        bool qwen = !strcmp(p->family, "qwen3_5");
        p->hidden = cfg_int(s->config, "hidden_size");
        p->head_dim = cfg_int(s->config, "head_dim");
        int64_t nh = cfg_int(s->config, "num_attention_heads");
        if (!p->head_dim && nh > 0) p->head_dim = p->hidden / nh;
        p->r2 = !qwen;
        c.offset = qwen && q35_gains_centred(s) ? 1.0f : 0.0f;
        if (p->hidden <= 0) st = em_fail(EM_ERR_FORMAT, "%s: config.json has no hidden_size", s->dir);
        else if (p->r2 && p->head_dim <= 0) st = em_fail(EM_ERR_FORMAT, "%s: config.json gives no head_dim", s->dir);
        c.keep = o->r1_keep;
        if (st == EM_OK && p->r2 && !hadamard_order_ok(p->head_dim))
            st = em_fail(EM_ERR_UNSUPPORTED, "head_dim is %lld: R2 needs 2^k, 12*2^k or 20*2^k", (long long)p->head_dim);
        snprintf(p->transform_id, sizeof p->transform_id, "%s", qwen ? "ember-rotate-v1:norms+r1" : "ember-rotate-v1:norms+r1+r2");
        snprintf(p->deviations, sizeof p->deviations, "%s",
                 qwen ? "R1 only (the attention output gate forbids R2); no online rotations (R3, R4); GDN in_proj_*/out_proj "
                        "rotated with the residual stream; head untied; an MTP head becomes its own tensor mtp.lm_head.weight "
                        "with mtp.norm folded in"
                      : "randomized Hadamard R1 and per-head R2 (not learned); no online rotations (R3, R4); head untied");
        if (st == EM_OK) st = plan_rotate(&c);
        if (st == EM_OK && p->r1_kept) {
            size_t used = strlen(p->deviations);
            snprintf(p->deviations + used, sizeof p->deviations - used,
                     "; R1 over %lld of the %lld residual channels: the %lld whose norm gains are smallest relative to "
                     "their norm's median kept out (ember_transform.r1_kept_channels), their gains kept in the norms "
                     "divided by the median, which is folded",
                     (long long)p->r1_n, (long long)p->hidden, (long long)(p->hidden - p->r1_n));
            snprintf(p->transform_id + strlen(p->transform_id), sizeof p->transform_id - strlen(p->transform_id),
                     "+kept");
        }
        if (st == EM_OK && p->visual_copied)
            snprintf(p->deviations + strlen(p->deviations), sizeof p->deviations - strlen(p->deviations), "%s",
                     "; vision tower copied unrotated (image features entering the stream would need R1)");
    }
    if (st != EM_OK) fold_plan_free(p);
    return st;
}

void fold_plan_free(fold_plan *p) {
    for (size_t i = 0; i < p->n; i++) free(p->outs[i].name);
    free(p->outs);
    hadamard_free(&p->r1);
    free(p->r1_idx);
    free(p->r1_kept);
    memset(p, 0, sizeof *p);
}

/* ---- apply ---- */

static em_status fold_gains(const fold_plan *p, const qsrc *src, const plan_out *e, float *w) {
    int64_t rows = e->shape[0], cols = e->shape[1];
    float *g = em_mallocn((size_t)cols, sizeof *g);
    if (!g) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status st = EM_OK;
    for (int k = 0; k < 2 && st == EM_OK; k++) {
        if (!e->gain[k]) continue;
        st = qsrc_read(src, e->gain[k], g + (k ? e->gain_split : 0));
    }
    for (int64_t j = 0; st == EM_OK && j < cols; j++) g[j] += e->gain_offset;
    /* channels kept out of R1 keep their gains in the norm, divided by the
     * norm's median, which is folded (so their columns keep the scale of
     * the others in a quantization group) */
    for (int64_t s0 = 0; st == EM_OK && p->r1_kept && s0 < cols; s0 += p->hidden) {
        float med = 1.0f;
        st = gain_median(g + s0, p->hidden, &med);
        for (int64_t j = 0; st == EM_OK && j < p->hidden; j++)
            if (p->r1_kept[j]) g[s0 + j] = med;
    }
    for (int64_t r = 0; st == EM_OK && r < rows; r++)
        for (int64_t j = 0; j < cols; j++) w[r * cols + j] *= g[j];
    free(g);
    return st;
}

/* v (hidden values) <- v Q: the rotated channels gathered, rotated,
 * scattered back; tmp holds HADAMARD_TMP_ROWS * hidden + hidden floats. */
static void r1_right(const fold_plan *p, float *v, float *tmp) {
    if (!p->r1_idx) return hadamard_right(&p->r1, v, tmp);
    float *g = tmp + HADAMARD_TMP_ROWS * p->hidden;
    for (int64_t k = 0; k < p->r1_n; k++) g[k] = v[p->r1_idx[k]];
    hadamard_right(&p->r1, g, tmp);
    for (int64_t k = 0; k < p->r1_n; k++) v[p->r1_idx[k]] = g[k];
}

/* a ([hidden, width]) <- Q^T a: the rotated rows gathered into a copy. */
static em_status r1_left_t(const fold_plan *p, float *a, int64_t width, float *tmp) {
    if (!p->r1_idx) {
        hadamard_left_t(&p->r1, a, width, tmp);
        return EM_OK;
    }
    float *g = em_mallocn((size_t)(p->r1_n * width), sizeof *g);
    if (!g) return em_fail(EM_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; k < p->r1_n; k++) memcpy(g + k * width, a + (int64_t)p->r1_idx[k] * width, (size_t)width * sizeof *g);
    hadamard_left_t(&p->r1, g, width, tmp);
    for (int64_t k = 0; k < p->r1_n; k++) memcpy(a + (int64_t)p->r1_idx[k] * width, g + k * width, (size_t)width * sizeof *g);
    free(g);
    return EM_OK;
}

/* An online rotation's part of output e (plan_online): the signs into a
 * norm gain, or Q into each row of a reader. */
static em_status online_apply(const fold_plan *p, const plan_out *e, float *out) {
    hadamard q;
    EM_TRY(hadamard_make(p->hidden, p->seed, e->on_stream, "the hidden size (online rotation)", &q));
    float tmp[HADAMARD_TMP_ROWS];
    if (e->on_signs)
        for (int64_t j = 0; j < p->hidden; j++) out[j] *= (float)q.sign[j];
    if (e->on_in)
        for (int64_t r = 0; r < e->shape[0]; r++) hadamard_right(&q, out + r * p->hidden, tmp);
    hadamard_free(&q);
    return EM_OK;
}

em_status fold_apply(const fold_plan *p, const qsrc *src, const plan_out *e, float *out) {
    uint64_t n = plan_out_elements(e);
    if (e->on_signs || e->on_in) {
        EM_TRY(qsrc_read(src, e->src, out));
        return online_apply(p, e, out);
    }
    if (e->set != FOLD_KEEP) {
        float off = e->set == FOLD_ZEROS ? 1.0f : 0.0f, med = 1.0f;
        if (p->r1_kept) { /* kept channels keep their gains over the median fold_gains folds */
            EM_TRY(qsrc_read(src, e->src, out));
            for (uint64_t i = 0; i < n; i++) out[i] += off;
            EM_TRY(gain_median(out, (int64_t)n, &med));
        }
        for (uint64_t i = 0; i < n; i++) out[i] = (p->r1_kept && p->r1_kept[i] ? out[i] / med : 1.0f) - off;
        return EM_OK;
    }
    EM_TRY(qsrc_read(src, e->src, out));
    if (e->gain[0]) EM_TRY(fold_gains(p, src, e, out));
    int64_t rows = e->shape[0], cols = e->ndim == 1 ? 1 : e->shape[1], H = p->hidden, hd = p->head_dim;
    hadamard r2 = {0};
    if (e->r2_in || e->r2_out) EM_TRY(hadamard_make(hd, p->seed, 1000 + (uint64_t)e->layer, "head_dim (R2)", &r2));
    int64_t tmp_n = HADAMARD_TMP_ROWS * (cols > H ? cols : H) + H;
    float *tmp = em_mallocn((size_t)tmp_n, sizeof *tmp);
    if (!tmp) {
        hadamard_free(&r2);
        return em_fail(EM_ERR_NOMEM, "out of memory");
    }
    if (e->r1_in)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t s = 0; s < cols; s += H) r1_right(p, out + r * cols + s, tmp);
    if (e->r2_in)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t s = 0; s < cols; s += hd) hadamard_right(&r2, out + r * cols + s, tmp);
    em_status st = e->r1_out ? r1_left_t(p, out, cols, tmp) : EM_OK;
    if (st == EM_OK && e->r2_out)
        for (int64_t b = 0; b < rows; b += hd) hadamard_left_t(&r2, out + b * cols, cols, tmp);
    free(tmp);
    hadamard_free(&r2);
    return st;
}

void fold_plan_print(const fold_plan *p, FILE *f) {
    for (size_t i = 0; i < p->n; i++) {
        const plan_out *e = &p->outs[i];
        fprintf(f, "%s [%lld", e->name, (long long)e->shape[0]);
        if (e->ndim > 1) fprintf(f, ", %lld", (long long)e->shape[1]);
        fprintf(f, "] <- %s", e->set == FOLD_ONES ? "ones" : e->set == FOLD_ZEROS ? "zeros" : e->src->name);
        if (e->gain[0]) fprintf(f, " * gain(%s%s%s%s)", e->gain[0]->name, e->gain[1] ? ", " : "",
                                e->gain[1] ? e->gain[1]->name : "", e->gain_offset != 0 ? " + 1" : "");
        if (e->set != FOLD_KEEP && p->r1_kept)
            fprintf(f, " (%lld kept channels: gain / median)", (long long)(p->hidden - p->r1_n));
        if (e->r1_in) fprintf(f, " . R1");
        if (e->r2_in) fprintf(f, " . R2[layer %d]", e->layer);
        if (e->r1_out) fprintf(f, " R1^T .");
        if ((e->r1_in || e->r1_out) && p->r1_kept) fprintf(f, " [R1 over %lld of %lld]", (long long)p->r1_n, (long long)p->hidden);
        if (e->r2_out) fprintf(f, " R2[layer %d]^T .", e->layer);
        if (e->on_signs) fprintf(f, " * D[layer %d %s]", e->layer, e->on_stream % 2 ? "mlp" : "attention");
        if (e->on_in) fprintf(f, " . Q[layer %d %s] (online)", e->layer, e->on_stream % 2 ? "mlp" : "attention");
        fputc('\n', f);
    }
}
