/* The Gated DeltaNet backend operations: the chunked delta rule equals the
 * token-by-token recurrence (over several chunks, a partial last chunk, a
 * non-zero initial state, grouped value heads), a sequence split into spans
 * equals one span (states carried), the conv state tail continues a
 * sequence exactly, and a literal per-token formula checks the recurrence. */
#include "test.h"

#include "backend/backend.h"

static uint64_t rng = 0x243f6a8885a308d3ULL;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

enum { N = 150, HK = 2, HV = 4, DK = 16, DV = 8, C = 2 * HK * DK + HV * DV, K = 4 };

static double max_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

/* The recurrence written out for one token and head, in double. */
static void reference_rule(const float *qkv, const float *g, const float *beta, double *S, float *out) {
    for (int t = 0; t < N; t++)
        for (int h = 0; h < HV; h++) {
            int kh = h / (HV / HK);
            const float *q = qkv + (size_t)t * C + kh * DK, *k = qkv + (size_t)t * C + HK * DK + kh * DK;
            const float *v = qkv + (size_t)t * C + 2 * HK * DK + h * DV;
            double qn = 0, kn = 0;
            for (int i = 0; i < DK; i++) qn += (double)q[i] * q[i], kn += (double)k[i] * k[i];
            qn = 1.0 / sqrt(qn + 1e-6) / sqrt((double)DK);
            kn = 1.0 / sqrt(kn + 1e-6);
            double *Sh = S + (size_t)h * DK * DV, decay = exp(g[t * HV + h]);
            for (int c = 0; c < DV; c++) {
                double kv = 0;
                for (int i = 0; i < DK; i++) kv += Sh[i * DV + c] * decay * k[i] * kn;
                double u = beta[t * HV + h] * (v[c] - kv), o = 0;
                for (int i = 0; i < DK; i++) {
                    Sh[i * DV + c] = Sh[i * DV + c] * decay + k[i] * kn * u;
                    o += Sh[i * DV + c] * q[i] * qn;
                }
                out[((size_t)t * HV + h) * DV + c] = (float)o;
            }
        }
}

int main(void) {
    em_backend *be;
    REQUIRE(cpu_backend_create(2, &be) == EM_OK);
    const em_backend_ops *op = be->ops;
    static float qkv[N * C], g[N * HV], beta[N * HV], a[N * HV], b[N * HV];
    static float out_rec[N * HV * DV], out_chunk[N * HV * DV], out_split[N * HV * DV], out_ref[N * HV * DV];
    static float S0[HV * DK * DV], S_rec[HV * DK * DV], S_chunk[HV * DK * DV], S_split[HV * DK * DV];
    static double S_ref[HV * DK * DV];
    for (int i = 0; i < N * C; i++) qkv[i] = frand();
    for (int i = 0; i < N * HV; i++) a[i] = 2 * frand(), b[i] = 3 * frand();
    float A_log[HV] = {-2.0f, -0.5f, 0.3f, 1.0f}, dt_bias[HV] = {0.1f, -0.3f, 0.5f, 0.0f};
    op->gdn_gates(be, g, beta, a, b, HV, A_log, dt_bias, N, HV);
    for (int i = 0; i < N * HV; i++) CHECK(g[i] < 0 && beta[i] > 0 && beta[i] < 1);
    for (int i = 0; i < HV * DK * DV; i++) S0[i] = 0.3f * frand(), S_ref[i] = S0[i];

    memcpy(S_rec, S0, sizeof S0);
    op->gated_delta_rule(be, out_rec, qkv, C, g, beta, S_rec, N, HK, HV, DK, DV, 0);
    reference_rule(qkv, g, beta, S_ref, out_ref);
    CHECKF(max_diff(out_rec, out_ref, N * HV * DV) < 1e-4, "recurrent vs formula %g", max_diff(out_rec, out_ref, N * HV * DV));
    double ws = 0;
    for (int i = 0; i < HV * DK * DV; i++) ws = fmax(ws, fabs(S_rec[i] - S_ref[i]));
    CHECKF(ws < 1e-4, "recurrent state vs formula %g", ws);

    memcpy(S_chunk, S0, sizeof S0);
    op->gated_delta_rule(be, out_chunk, qkv, C, g, beta, S_chunk, N, HK, HV, DK, DV, 64);
    CHECKF(max_diff(out_chunk, out_rec, N * HV * DV) < 2e-5, "chunked vs recurrent out %g", max_diff(out_chunk, out_rec, N * HV * DV));
    CHECKF(max_diff(S_chunk, S_rec, HV * DK * DV) < 2e-5, "chunked vs recurrent state %g", max_diff(S_chunk, S_rec, HV * DK * DV));

    /* spans 70 (chunked, 64 + 6) then 3 (recurrent) then 77 (chunked) */
    memcpy(S_split, S0, sizeof S0);
    int cuts[] = {0, 70, 73, N};
    for (int s = 0; s < 3; s++) {
        int r0 = cuts[s], n = cuts[s + 1] - cuts[s];
        op->gated_delta_rule(be, out_split + (size_t)r0 * HV * DV, qkv + (size_t)r0 * C, C, g + r0 * HV, beta + r0 * HV,
                             S_split, n, HK, HV, DK, DV, n > 16 ? 64 : 0);
    }
    CHECKF(max_diff(out_split, out_rec, N * HV * DV) < 2e-5, "split spans vs one %g", max_diff(out_split, out_rec, N * HV * DV));

    /* conv: one call over N rows == calls over pieces, state carried */
    static float w[C * K], y1[N * C], y2[N * C], st1[(K - 1) * C], st2[(K - 1) * C];
    for (int i = 0; i < C * K; i++) w[i] = frand();
    for (int i = 0; i < (K - 1) * C; i++) st1[i] = st2[i] = frand();
    op->conv1d_silu(be, y1, qkv, N, C, C, w, K, st1);
    memcpy(y2, qkv, sizeof y2);
    int pieces[] = {0, 1, 2, 40, N};
    for (int s = 0; s < 4; s++) /* in place, as the model runs it */
        op->conv1d_silu(be, y2 + (size_t)pieces[s] * C, y2 + (size_t)pieces[s] * C, pieces[s + 1] - pieces[s], C, C, w, K, st2);
    CHECKF(max_diff(y1, y2, N * C) == 0, "conv pieces vs whole %g", max_diff(y1, y2, N * C));
    CHECKF(max_diff(st1, st2, (K - 1) * C) == 0, "conv state tails differ");
    for (int c = 0; c < C; c++) CHECK(st1[(size_t)(K - 2) * C + c] == qkv[(size_t)(N - 1) * C + c]);
    /* a literal output: channel 5 at t = 10 */
    double acc = 0;
    for (int j = 0; j < K; j++) acc += w[5 * K + j] * qkv[(size_t)(10 - (K - 1) + j) * C + 5];
    CHECK_NEAR(y1[10 * C + 5], acc / (1 + exp(-acc)), 1e-5);

    cpu_backend_free(be);
    return test_summary();
}
