/* sampler.c — penalties, truncation and seeded sampling. */
#include "engine/sampler.h"

#include "base/alloc.h"
#include "base/status.h"
#include "tensor/argmax.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** */
static uint64_t next_u64(sampler *s) {
    uint64_t *r = s->rng, out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

double sampler_uniform(sampler *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

em_status sampler_init(sampler *s, const em_sampling *p, int n_vocab) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t seed = p->has_seed ? p->seed : (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)s;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&seed);
    s->probs = em_mallocn((size_t)n_vocab, sizeof *s->probs);
    s->cand = em_mallocn((size_t)n_vocab, sizeof *s->cand);
    s->count = em_calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->probs || !s->cand || !s->count) {
        sampler_free(s);
        return em_fail(EM_ERR_NOMEM, "out of memory for the sampler");
    }
    return EM_OK;
}

void sampler_free(sampler *s) {
    free(s->probs);
    free(s->cand);
    free(s->count);
    memset(s, 0, sizeof *s);
}

void sampler_process(sampler *s, float *logits, const int32_t *history, size_t n_history,
                     const int32_t *bias_ids, const float *bias_values, size_t n_bias) {
    for (size_t i = 0; i < n_bias; i++)
        if (bias_ids[i] >= 0 && bias_ids[i] < s->n_vocab) logits[bias_ids[i]] += bias_values[i];
    const em_sampling *p = &s->p;
    bool rep = p->repetition_penalty > 0 && p->repetition_penalty != 1.0f;
    bool add = p->presence_penalty != 0 || p->frequency_penalty != 0;
    if (!rep && !add) return;
    size_t start = p->penalty_window > 0 && n_history > (size_t)p->penalty_window ? n_history - (size_t)p->penalty_window : 0;
    for (size_t i = start; i < n_history; i++)
        if (history[i] >= 0 && history[i] < s->n_vocab) s->count[history[i]]++;
    for (size_t i = start; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || t >= s->n_vocab || s->count[t] == 0) continue;
        float l = logits[t];
        if (rep) l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)s->count[t];
        logits[t] = l;
        s->count[t] = 0; /* applied once per distinct token; also resets the scratch */
    }
}

static int cmp_prob_desc(const void *a, const void *b, void *ctx) {
    const float *pr = ctx;
    float x = pr[*(const int32_t *)a], y = pr[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b; /* ties: lower id first, deterministic */
}

/* The largest logit, in 8 independent running maxima so the compiler can
 * keep them in one vector register (a scan of a 150k vocabulary is then
 * bound by memory, not by a chain of compares). NaN never wins. */
static float max_logit(const float *l, int n) {
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = l[i + j] > m[j] ? l[i + j] : m[j];
    float best = -INFINITY;
    for (int j = 0; j < 8; j++) best = m[j] > best ? m[j] : best;
    for (; i < n; i++) best = l[i] > best ? l[i] : best;
    return best;
}

/* The lowest id holding the largest logit (0 when every logit is NaN). */
static int32_t argmax_of(const float *l, int n, float mx) {
    for (int i = 0; i < n; i++)
        if (l[i] == mx) return i;
    return 0;
}


/* Log-softmax statistics of the processed logits: max and log-sum-exp. */
static void log_softmax_stats(const float *l, int n, float *mx, double *lse) {
    float m = max_logit(l, n);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(l[i] - m));
    *mx = m;
    *lse = log(sum);
}

static void fill_top(const float *l, int n, int top_n, float mx, double lse, em_token_info *info) {
    if (top_n > EM_MAX_TOP_LOGPROBS) top_n = EM_MAX_TOP_LOGPROBS;
    info->n_top = 0;
    for (int i = 0; i < n; i++) {
        int k = info->n_top;
        if (k == top_n && l[i] <= l[info->top_ids[k - 1]]) continue;
        if (k < top_n) info->n_top++;
        else k = top_n - 1;
        while (k > 0 && l[info->top_ids[k - 1]] < l[i]) {
            info->top_ids[k] = info->top_ids[k - 1];
            k--;
        }
        info->top_ids[k] = i;
    }
    for (int k = 0; k < info->n_top; k++) info->top_logprobs[k] = (float)((double)(l[info->top_ids[k]] - mx) - lse);
}


/* Candidates of tempered sampling in s->cand[0..*nc) with unnormalised
 * probabilities in s->probs (temperature, top-k, top-p, min-p in the
 * order transformers applies them); returns their total. Tokens more than
 * e^40 times less likely than the best are never candidates (their mass is
 * below float resolution). Sorting is avoided when it cannot change the
 * result: without top-k/top-p no order is needed, and top-p first tries the
 * candidates within 1e-4 of the best — when they hold the nucleus, it is
 * the same nucleus as over all candidates. */
static double candidates(sampler *s, const float *logits, float mx, int *nc_out) {
    const em_sampling *p = &s->p;
    float inv_t = 1.0f / p->temperature;
    int nc = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        float z = (logits[i] - mx) * inv_t;
        if (z > -40.0f) {
            s->cand[nc++] = i;
            s->probs[i] = expf(z);
        }
    }
    double total = 0;
    for (int i = 0; i < nc; i++) total += s->probs[s->cand[i]];
    bool top_p = p->top_p > 0 && p->top_p < 1, need_sort = p->top_k > 0 || top_p;
    if (top_p && p->top_k == 0) {
        double head = 0;
        int nh = 0;
        for (int i = 0; i < nc; i++)
            if (s->probs[s->cand[i]] >= 1e-4f) {
                head += s->probs[s->cand[i]];
                nh++;
            }
        if (head >= p->top_p * total && nh < nc) {
            int k = 0;
            for (int i = 0; i < nc; i++)
                if (s->probs[s->cand[i]] >= 1e-4f) s->cand[k++] = s->cand[i];
            nc = k; /* total keeps the full mass: the nucleus limit is unchanged */
        }
    }
    if (need_sort) qsort_r(s->cand, (size_t)nc, sizeof *s->cand, cmp_prob_desc, s->probs);
    if (p->top_k > 0 && nc > p->top_k) {
        nc = p->top_k;
        total = 0;
        for (int i = 0; i < nc; i++) total += s->probs[s->cand[i]];
    }
    if (top_p) {
        double cum = 0, limit = p->top_p * total;
        int keep = 0;
        while (keep < nc) {
            cum += s->probs[s->cand[keep++]];
            if (cum >= limit) break;
        }
        nc = keep;
    }
    if (p->min_p > 0) { /* relative to the most likely token (prob 1 here) */
        int keep = 0;
        for (int i = 0; i < nc; i++)
            if (s->probs[s->cand[i]] >= p->min_p) s->cand[keep++] = s->cand[i];
        nc = keep;
    }
    double sum = 0;
    for (int i = 0; i < nc; i++) sum += s->probs[s->cand[i]];
    *nc_out = nc;
    return sum;
}

static bool is_greedy(const em_sampling *p) { return p->temperature <= 0 || p->top_k == 1; }

bool sampler_plain_greedy(const sampler *s) {
    const em_sampling *p = &s->p;
    bool rep = p->repetition_penalty > 0 && p->repetition_penalty != 1.0f;
    return is_greedy(p) && !rep && p->presence_penalty == 0 && p->frequency_penalty == 0;
}

void sampler_distribution(sampler *s, const float *logits, float *probs) {
    int n = s->n_vocab;
    memset(probs, 0, (size_t)n * sizeof *probs);
    if (is_greedy(&s->p)) {
        probs[em_argmax_f32(logits, n)] = 1.0f;
        return;
    }
    float mx = max_logit(logits, n);
    int nc;
    double sum = candidates(s, logits, mx, &nc);
    for (int i = 0; i < nc; i++) probs[s->cand[i]] = (float)(s->probs[s->cand[i]] / sum);
}

int32_t sampler_draw(sampler *s, const float *probs) {
    double sum = 0;
    int32_t last = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (probs[i] > 0) {
            sum += probs[i];
            last = i;
        }
    double r = sampler_uniform(s) * sum, acc = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        acc += probs[i];
        if (probs[i] > 0 && r < acc) return i;
    }
    return last;
}

void sampler_describe(sampler *s, const float *logits, int32_t tok, int top_n, em_token_info *info) {
    float mx;
    double lse;
    log_softmax_stats(logits, s->n_vocab, &mx, &lse);
    if (top_n > 0) fill_top(logits, s->n_vocab, top_n, mx, lse, info);
    else info->n_top = 0;
    info->token = tok;
    info->logprob = (float)((double)(logits[tok] - mx) - lse);
}

int32_t sampler_pick(sampler *s, const float *logits, int top_n, bool logprob, em_token_info *info) {
    int n = s->n_vocab;
    if (is_greedy(&s->p) && !logprob && top_n <= 0) { /* one pass over the row */
        int32_t tok = em_argmax_f32(logits, n);
        info->n_top = 0;
        info->token = tok;
        info->logprob = 0.0f;
        return tok;
    }
    float mx = -INFINITY;
    double lse = 0;
    /* the log-softmax costs an exp per vocabulary entry: only when asked */
    if (logprob || top_n > 0) log_softmax_stats(logits, n, &mx, &lse);
    else mx = max_logit(logits, n);
    if (top_n > 0) fill_top(logits, n, top_n, mx, lse, info);
    else info->n_top = 0;
    int32_t tok;
    if (is_greedy(&s->p)) {
        tok = argmax_of(logits, n, mx);
    } else {
        int nc;
        double sum = candidates(s, logits, mx, &nc);
        double r = sampler_uniform(s) * sum, acc = 0;
        tok = s->cand[nc - 1];
        for (int i = 0; i < nc; i++) {
            acc += s->probs[s->cand[i]];
            if (r < acc) {
                tok = s->cand[i];
                break;
            }
        }
    }
    info->token = tok;
    info->logprob = logprob || top_n > 0 ? (float)((double)(logits[tok] - mx) - lse) : 0.0f;
    return tok;
}
