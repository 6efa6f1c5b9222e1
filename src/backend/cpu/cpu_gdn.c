/* cpu_gdn.c — the Gated DeltaNet operations on the CPU: the fused causal
 * conv1d + SiLU with its state tail, the decay/strength gates, the gated
 * delta rule (token-by-token and chunked), the gated RMSNorm, and the
 * sigmoid output gate of gated attention.
 *
 * The delta rule keeps per value head a state S [dk][dv]. For a token with
 * L2-normalised key k, query q (scaled by 1/sqrt(dk)), value v, decay
 * exp(g) and strength beta:
 *     S <- exp(g) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q.
 * The chunked form solves a chunk of L tokens at once from the state S0
 * before it. With G_t = exp(cum_t) (cum: running sum of g in the chunk),
 *     u_t = beta_t (v_t - G_t S0^T k_t) - sum_{s<t} beta_t e^{cum_t-cum_s} (k_t.k_s) u_s
 *     o_t = G_t S0^T q_t + sum_{s<=t} e^{cum_t-cum_s} (q_t.k_s) u_s
 *     S   = G_L S0 + sum_s e^{cum_L-cum_s} k_s u_s^T
 * (a unit lower-triangular system solved by forward substitution). It is
 * the same function as the recurrence, arranged as small dense products. */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

#define CONV_BLOCK 64
#define MAX_KERNEL 64

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

void cpu_sigmoid_mul(em_backend *be, float *y, const float *gate, int rows, int n, int ld_gate) {
    (void)be;
    for (int r = 0; r < rows; r++) {
        float *o = y + (size_t)r * (size_t)n;
        const float *g = gate + (size_t)r * (size_t)ld_gate;
        for (int i = 0; i < n; i++) o[i] *= 1.0f / (1.0f + expf(-g[i]));
    }
}

typedef struct conv_job {
    float *y;
    const float *x, *w;
    float *state;
    int n, C, ld, K;
} conv_job;

/* One block of channels: a window of the last K-1 inputs per channel. */
static void conv_block(void *ctx, int task, int thread) {
    (void)thread;
    const conv_job *j = ctx;
    int c0 = task * CONV_BLOCK, c1 = c0 + CONV_BLOCK < j->C ? c0 + CONV_BLOCK : j->C, K = j->K, nc = c1 - c0;
    float win[MAX_KERNEL][CONV_BLOCK]; /* [K-1][channels], oldest first */
    for (int r = 0; r < K - 1; r++) memcpy(win[r], j->state + (size_t)r * j->C + c0, (size_t)nc * sizeof(float));
    for (int t = 0; t < j->n; t++) {
        const float *x = j->x + (size_t)t * j->ld + c0;
        float *y = j->y + (size_t)t * j->ld + c0;
        for (int c = 0; c < nc; c++) {
            const float *w = j->w + (size_t)(c0 + c) * K;
            float cur = x[c], acc = 0;
            for (int r = 0; r < K - 1; r++) acc += w[r] * win[r][c];
            acc += w[K - 1] * cur;
            for (int r = 0; r + 1 < K - 1; r++) win[r][c] = win[r + 1][c];
            if (K > 1) win[K - 2][c] = cur;
            y[c] = silu(acc);
        }
    }
    for (int r = 0; r < K - 1; r++) memcpy(j->state + (size_t)r * j->C + c0, win[r], (size_t)nc * sizeof(float));
}

void cpu_conv1d_silu(em_backend *be, float *y, const float *x, int n, int C, int ld, const float *w, int K,
                     float *state) {
    conv_job j = {y, x, w, state, n, C, ld, K};
    if (K > MAX_KERNEL) return; /* the config parser bounds the kernel to 64 */
    em_pool_for(((cpu_backend *)be->impl)->pool, (C + CONV_BLOCK - 1) / CONV_BLOCK, conv_block, &j);
}

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void cpu_gdn_gates(em_backend *be, float *g, float *beta, const float *a, const float *b, int ld_in,
                   const float *A_log, const float *dt_bias, int n, int Hv) {
    (void)be;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hv; h++) {
            float av = a[(size_t)t * ld_in + h], bv = b[(size_t)t * ld_in + h];
            g[(size_t)t * Hv + h] = -expf(A_log[h]) * softplus(av + dt_bias[h]);
            beta[(size_t)t * Hv + h] = 1.0f / (1.0f + expf(-bv));
        }
}

typedef struct gdn_job {
    cpu_backend *cb;
    float *out;
    const float *qkv, *g, *beta;
    float *state;
    int ld, n, Hk, Hv, dk, dv, chunk;
} gdn_job;

/* dst = src / sqrt(sum src^2 + 1e-6) * scale */
static void l2norm(float *dst, const float *src, int n, float scale) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += src[i] * src[i];
    float inv = scale / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) dst[i] = src[i] * inv;
}

typedef struct head_io {
    const float *q, *k, *v; /* token 0 of this head; rows ld apart */
    float *o;               /* rows Hv*dv apart */
    const float *g, *beta;  /* rows Hv apart */
} head_io;

static void head_recurrent(const gdn_job *j, const head_io *io, float *S, float *scratch) {
    int dk = j->dk, dv = j->dv;
    float *q = scratch, *k = q + dk, *u = k + dk, *kv = u + dv;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < j->n; t++) {
        l2norm(q, io->q + (size_t)t * j->ld, dk, qscale);
        l2norm(k, io->k + (size_t)t * j->ld, dk, 1.0f);
        const float *v = io->v + (size_t)t * j->ld;
        float decay = expf(io->g[(size_t)t * j->Hv]), beta = io->beta[(size_t)t * j->Hv];
        memset(kv, 0, (size_t)dv * sizeof *kv);
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv;
            for (int c = 0; c < dv; c++) {
                s[c] *= decay;
                kv[c] += s[c] * k[i];
            }
        }
        for (int c = 0; c < dv; c++) u[c] = beta * (v[c] - kv[c]);
        float *o = io->o + (size_t)t * j->Hv * dv;
        memset(o, 0, (size_t)dv * sizeof *o);
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv;
            for (int c = 0; c < dv; c++) {
                s[c] += k[i] * u[c];
                o[c] += s[c] * q[i];
            }
        }
    }
}

static double dotd(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* out[dv] = S^T x * scale, in double */
static void state_read_d(const float *S, const float *x, int dk, int dv, double scale, double *out) {
    memset(out, 0, (size_t)dv * sizeof *out);
    for (int i = 0; i < dk; i++) {
        const float *s = S + (size_t)i * dv;
        double xi = x[i] * scale;
        for (int c = 0; c < dv; c++) out[c] += s[c] * xi;
    }
}

/* The chunked (UT-transform) form works in double inside a chunk: its
 * forward substitution through (I + A) amplifies rounding where keys are
 * alike, and it must agree with the token-by-token recurrence to f32
 * precision whatever the inputs. The log-decay sums are kept in double as
 * well, since decays are applied as e^(cum_t - cum_s). */
static void head_chunked(const gdn_job *j, const head_io *io, float *S, float *scratch) {
    int dk = j->dk, dv = j->dv, C = j->chunk;
    double *cum = (double *)scratch, *u = cum + C, *tmp = u + (size_t)C * dv, *acc = tmp + (C > dv ? C : dv);
    float *qn = (float *)(acc + dv), *kn = qn + (size_t)C * dk;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int t0 = 0; t0 < j->n; t0 += C) {
        int L = j->n - t0 < C ? j->n - t0 : C;
        double run = 0;
        for (int t = 0; t < L; t++) {
            size_t row = (size_t)(t0 + t);
            l2norm(qn + (size_t)t * dk, io->q + row * j->ld, dk, qscale);
            l2norm(kn + (size_t)t * dk, io->k + row * j->ld, dk, 1.0f);
            run += io->g[row * j->Hv];
            cum[t] = run;
        }
        /* u_t = beta_t (v_t - G_t S0^T k_t) - sum_{s<t} beta_t e^{cum_t-cum_s} (k_t.k_s) u_s;
         * o_t = G_t S0^T q_t + sum_{s<=t} e^{cum_t-cum_s} (q_t.k_s) u_s. */
        for (int t = 0; t < L; t++) {
            size_t row = (size_t)(t0 + t);
            double G = exp(cum[t]), beta = io->beta[row * j->Hv];
            const float *v = io->v + row * j->ld;
            double *ut = u + (size_t)t * dv;
            state_read_d(S, kn + (size_t)t * dk, dk, dv, G, tmp);
            for (int c = 0; c < dv; c++) ut[c] = beta * (v[c] - tmp[c]);
            for (int s = 0; s < t; s++) {
                double a = beta * exp(cum[t] - cum[s]) * dotd(kn + (size_t)t * dk, kn + (size_t)s * dk, dk);
                const double *us = u + (size_t)s * dv;
                for (int c = 0; c < dv; c++) ut[c] -= a * us[c];
            }
        }
        for (int t = 0; t < L; t++) {
            state_read_d(S, qn + (size_t)t * dk, dk, dv, exp(cum[t]), acc);
            for (int s = 0; s <= t; s++) {
                double a = exp(cum[t] - cum[s]) * dotd(qn + (size_t)t * dk, kn + (size_t)s * dk, dk);
                const double *us = u + (size_t)s * dv;
                for (int c = 0; c < dv; c++) acc[c] += a * us[c];
            }
            float *o = io->o + (size_t)(t0 + t) * j->Hv * dv;
            for (int c = 0; c < dv; c++) o[c] = (float)acc[c];
        }
        /* S = G_L S0 + sum_s e^{cum_L-cum_s} k_s u_s^T */
        double GL = exp(cum[L - 1]);
        for (int s = 0; s < L; s++) tmp[s] = exp(cum[L - 1] - cum[s]);
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t)i * dv;
            for (int c = 0; c < dv; c++) acc[c] = Si[c] * GL;
            for (int s = 0; s < L; s++) {
                double a = tmp[s] * kn[(size_t)s * dk + i];
                const double *us = u + (size_t)s * dv;
                for (int c = 0; c < dv; c++) acc[c] += a * us[c];
            }
            for (int c = 0; c < dv; c++) Si[c] = (float)acc[c];
        }
    }
}

static void gdn_head(void *ctx, int h, int thread) {
    const gdn_job *j = ctx;
    int kh = h / (j->Hv / j->Hk);
    head_io io = {
        .q = j->qkv + (size_t)kh * j->dk,
        .k = j->qkv + (size_t)j->Hk * j->dk + (size_t)kh * j->dk,
        .v = j->qkv + (size_t)2 * j->Hk * j->dk + (size_t)h * j->dv,
        .o = j->out + (size_t)h * j->dv,
        .g = j->g + h,
        .beta = j->beta + h,
    };
    float *S = j->state + (size_t)h * j->dk * j->dv;
    if (j->chunk > 0) {
        /* doubles: cum (C), u (C*dv), tmp (max(C, dv)), acc (dv); then floats: q, k rows (C*dk each) */
        size_t C = (size_t)j->chunk, dv = (size_t)j->dv;
        size_t doubles = C + C * dv + (C > dv ? C : dv) + dv, need = 2 * doubles + 2 * C * (size_t)j->dk;
        head_chunked(j, &io, S, cpu_scratch(j->cb, thread, need));
    } else {
        head_recurrent(j, &io, S, cpu_scratch(j->cb, thread, 2 * (size_t)j->dk + 2 * (size_t)j->dv));
    }
}

void cpu_gated_delta_rule(em_backend *be, float *out, const float *qkv, int ld, const float *g, const float *beta,
                          float *state, int n, int Hk, int Hv, int dk, int dv, int chunk) {
    if (n <= 0) return;
    gdn_job j = {be->impl, out, qkv, g, beta, state, ld, n, Hk, Hv, dk, dv, chunk};
    em_pool_for(((cpu_backend *)be->impl)->pool, Hv, gdn_head, &j);
}

typedef struct gnorm_job {
    float *y;
    const float *x, *z, *gain;
    int n;
    float eps;
} gnorm_job;

static void gnorm_row(void *ctx, int r, int thread) {
    (void)thread;
    const gnorm_job *j = ctx;
    const float *x = j->x + (size_t)r * j->n, *z = j->z + (size_t)r * j->n;
    float *y = j->y + (size_t)r * j->n;
    double ss = 0;
    for (int i = 0; i < j->n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / j->n + j->eps));
    for (int i = 0; i < j->n; i++) y[i] = x[i] * inv * j->gain[i] * silu(z[i]);
}

void cpu_rmsnorm_gated(em_backend *be, float *y, const float *x, const float *z, const float *gain, int rows, int n,
                       float eps) {
    gnorm_job j = {y, x, z, gain, n, eps};
    em_pool_for(((cpu_backend *)be->impl)->pool, rows, gnorm_row, &j);
}
