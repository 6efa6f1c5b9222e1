/* fold.h — weight-transform plans: which output tensors an artifact holds,
 * where each comes from, and what is folded into it.
 *
 * A plan is made from names, shapes and config only (nothing is read); it
 * validates the checkpoint (every tensor placed, every shape consistent) and
 * lists every output with its source. Applying computes one output at a
 * time, so a transform streams like plain quantization.
 *
 * With rotation (QuaRot-style, folded entirely into the weights):
 *   norms  each residual RMSNorm gain is multiplied into the input columns of
 *          the linears that read it (gain becomes ones, or zeros for the
 *          zero-centred norms of Qwen3.5, whose scale is 1 + gain);
 *   R1     Q = D·H/√n on the residual stream: embedding rows E·Q, every
 *          reader of the stream W·Q (q/k/v, gate/up, GDN in_proj_*, router,
 *          the head), every writer Qᵀ·W (o_proj, out_proj, down_proj and
 *          their biases);
 *   R2     (Llama family) a per-head Hadamard between v_proj (output rows)
 *          and o_proj (input columns), one per layer.
 * With fold_options.r1_keep > 0, R1 leaves the residual channels whose norm
 * gains are smallest (massive activations) unrotated: Q is the identity on
 * them and a Hadamard of order r1_n on the rest, their gains stay in the
 * norms (divided by the norm's median, which is folded). Choosing them reads
 * the residual norms' gains, the one read a plan makes.
 * The head is always an explicit output (untied): with the final gain folded
 * it no longer equals the embedding. Loading needs no flag: the graph is the
 * same, only the weights changed.
 *
 * With fold_options.online (Llama family), nothing is folded into the
 * residual stream: each attention and MLP block's normed input is rotated at
 * run time by H/√hidden (model_config's online rotations, which the artifact's
 * config.json names), the block's own seeded signs D are multiplied into its
 * norm gain and Q = D·H/√hidden into the input side of the weights that read
 * the norm (q/k/v; gate/up). The gains stay in the norms, so the readers'
 * columns keep their scale, and the embedding, the head, o_proj and
 * down_proj are copied unchanged. */
#ifndef EMBER_QUANT_FOLD_H
#define EMBER_QUANT_FOLD_H

#include "tensor/hadamard.h"
#include "quant/source.h"

#include <stdio.h>

typedef enum { FOLD_KEEP = 0, FOLD_ONES, FOLD_ZEROS } fold_set;

typedef struct plan_out {
    char *name;               /* output tensor (logical, before packing) */
    const qsrc_tensor *src;   /* its source tensor */
    int ndim;
    int64_t shape[2];
    const qsrc_tensor *gain[2]; /* folded into input columns [0,split) / [split,cols) */
    int64_t gain_split;
    float gain_offset;        /* scale = gain + offset (1 for zero-centred norms) */
    bool r1_in, r1_out;       /* W·Q per hidden-sized column segment / Qᵀ·W */
    bool r2_in, r2_out;       /* per-head: o_proj columns / v_proj rows */
    int layer;                /* R2 stream */
    fold_set set;             /* a folded norm gain, written as constants */
    bool linear;              /* the weight of a linear or embedding module */
    /* online rotations: a block's norm gain times the signs D of its
     * rotation, or a reader of that norm's output W·Q (Q = D·H/√hidden) */
    bool on_signs, on_in;
    uint64_t on_stream;       /* the rotation's seed stream: 2000 + 2·layer (+1: the MLP's) */
} plan_out;

typedef struct fold_options {
    bool rotate;
    uint64_t seed;
    const char *family; /* "automatic" (default), "llama" or "qwen3_5" */
    int64_t r1_keep;    /* residual channels kept out of R1, at least (0: R1 rotates all) */
    bool online;        /* instead: rotate each block's normed input at run time (--rotate-online) */
} fold_options;

typedef struct fold_plan {
    plan_out *outs;
    size_t n;
    char family[16];          /* "" when not rotating */
    bool rotate, r2;
    bool online;              /* online rotations instead of R1/R2 (rotate is set too) */
    uint64_t seed;
    int64_t hidden, head_dim;
    hadamard r1;              /* of order hidden, or of r1_n < hidden channels */
    int64_t r1_n;             /* channels of the residual stream R1 rotates */
    int32_t *r1_idx;          /* which (ascending; NULL: all), the rest keep their basis and gains */
    bool *r1_kept;            /* hidden flags: channel j kept out of R1 (NULL: none) */
    char transform_id[48];
    char deviations[1024];
    bool untie;               /* the head became an explicit output */
    bool visual_copied;       /* a vision tower was copied untransformed */
} fold_plan;

/* Builds the plan (identity copies when !o->rotate). Free with fold_plan_free. */
em_status fold_plan_build(const qsrc *src, const fold_options *o, fold_plan *out);
void fold_plan_free(fold_plan *p);
uint64_t plan_out_elements(const plan_out *e);
/* Computes output e into out (plan_out_elements floats, f32). Scratch is
 * allocated inside and freed before returning. */
em_status fold_apply(const fold_plan *p, const qsrc *src, const plan_out *e, float *out);
/* One line per output: name, shape, source and transforms. */
void fold_plan_print(const fold_plan *p, FILE *f);

#endif
