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


static inline bool prob_before(int32_t a, int32_t b, const float *pr) {
    return pr[a] > pr[b] || (pr[a] == pr[b] && a < b);
}

/* Moves the k first candidates in cmp_prob_desc's order (a total order:
 * ties go to the lower id) to c[0..k), in no particular order (0 < k < n):
 * quickselect with a median-of-three pivot, expected O(n). */
static void select_first(int32_t *c, int n, int k, const float *pr) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int32_t t;
        if (prob_before(c[mid], c[lo], pr)) t = c[mid], c[mid] = c[lo], c[lo] = t;
        if (prob_before(c[hi], c[lo], pr)) t = c[hi], c[hi] = c[lo], c[lo] = t;
        if (prob_before(c[hi], c[mid], pr)) t = c[hi], c[hi] = c[mid], c[mid] = t;
        int32_t pivot = c[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (prob_before(c[i], pivot, pr)) i++;
            while (prob_before(pivot, c[j], pr)) j--;
            if (i <= j) {
                t = c[i], c[i] = c[j], c[j] = t;
                i++, j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break; /* c[want] is the pivot, in place */
    }
}

/* Sorts c[0..n) in cmp_prob_desc's order. Long runs go through an LSD
 * radix sort of 64-bit keys, which gives exactly the comparison sort's
 * order at a fraction of its cost: probabilities are positive floats, whose
 * bits order like their values, so a key is (largest bits - bits) above the
 * id, and only as many 11-bit digits as the run's span of bits and ids
 * needs are sorted on. Short runs, or when memory is short, go through
 * qsort_r. */
static void sort_cands(int32_t *c, int n, float *pr) {
    enum { RADIX_MIN = 1024, DIGIT = 11 };
    uint64_t *a = n >= RADIX_MIN ? malloc((size_t)n * sizeof *a) : NULL, *b = a ? malloc((size_t)n * sizeof *b) : NULL;
    if (!b) {
        free(a);
        qsort_r(c, (size_t)n, sizeof *c, cmp_prob_desc, pr);
        return;
    }
    uint32_t hi = 0, lo = UINT32_MAX, idmax = 0;
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &pr[c[i]], sizeof bits);
        hi = bits > hi ? bits : hi;
        lo = bits < lo ? bits : lo;
        idmax = (uint32_t)c[i] > idmax ? (uint32_t)c[i] : idmax;
    }
    int idbits = 1, spanbits = 1;
    while (idbits < 32 && (idmax >> idbits)) idbits++;
    while (spanbits < 32 && ((hi - lo) >> spanbits)) spanbits++;
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &pr[c[i]], sizeof bits);
        a[i] = (uint64_t)(hi - bits) << idbits | (uint32_t)c[i];
    }
    for (int shift = 0; shift < idbits + spanbits; shift += DIGIT) {
        uint32_t count[(1 << DIGIT) + 1];
        memset(count, 0, sizeof count);
        for (int i = 0; i < n; i++) count[((a[i] >> shift) & ((1 << DIGIT) - 1)) + 1]++;
        for (int d = 0; d < (1 << DIGIT); d++) count[d + 1] += count[d];
        for (int i = 0; i < n; i++) b[count[(a[i] >> shift) & ((1 << DIGIT) - 1)]++] = a[i];
        uint64_t *t = a;
        a = b, b = t;
    }
    uint64_t idmask = idbits >= 32 ? 0xffffffffull : ((1ull << idbits) - 1);
    for (int i = 0; i < n; i++) c[i] = (int32_t)(a[i] & idmask);
    free(a);
    free(b);
}

/* select_first for small k, in one pass: c[0..k) kept as a heap of the k
 * first so far with the last of them at its root, which most candidates
 * fail to beat with one comparison. */
enum { HEAP_SELECT_MAX = 256 };

static void heap_down(int32_t *h, int k, int i, const float *pr) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, last = i;
        if (l < k && prob_before(h[last], h[l], pr)) last = l;
        if (r < k && prob_before(h[last], h[r], pr)) last = r;
        if (last == i) return;
        int32_t t = h[i];
        h[i] = h[last], h[last] = t;
        i = last;
    }
}

static void select_first_heap(int32_t *c, int n, int k, const float *pr) {
    for (int i = k / 2 - 1; i >= 0; i--) heap_down(c, k, i, pr);
    for (int i = k; i < n; i++)
        if (prob_before(c[i], c[0], pr)) { /* swapped, so c stays a permutation of the candidates */
            int32_t t = c[0];
            c[0] = c[i], c[i] = t;
            heap_down(c, k, 0, pr);
        }
}

/* Sorts the first k candidates in cmp_prob_desc's order into c[0..k): the
 * same prefix a sort of all n gives, at the cost of a selection and a sort
 * of k. */
static void sort_first(int32_t *c, int n, int k, float *pr) {
    if (k < n && k <= HEAP_SELECT_MAX) select_first_heap(c, n, k, pr);
    else if (k < n) select_first(c, n, k, pr);
    sort_cands(c, k, pr);
}

/* The length of the shortest sorted prefix of c[0..n) whose mass reaches
 * limit (all n when none does), sorting only as much of c as it needs: the
 * first 256, then 4 times as many, until the mass is reached or a quarter
 * of n is in (then all of it is sorted). The prefix, its order and the sums
 * over it are those of a full sort. */
static int nucleus(int32_t *c, int n, float *pr, double limit) {
    /* A first guess from the mass per binary exponent: the candidates down
     * to the exponent where the mass reaches the limit. Its sums run in
     * another order than the sorted prefix's, so it only chooses how much
     * to sort first; the loop below still checks the prefix itself. */
    double mass[256] = {0};
    int count[256] = {0};
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &pr[c[i]], sizeof bits);
        mass[bits >> 23] += pr[c[i]];
        count[bits >> 23]++;
    }
    int m = 0;
    double guess = 0;
    for (int e = 255; e >= 0 && guess < limit; e--) guess += mass[e], m += count[e];
    if (m < 256) m = 256;
    for (;; m *= 4) {
        if (m >= n / 4) m = n;
        sort_first(c, n, m, pr);
        double cum = 0;
        for (int keep = 0; keep < m;) {
            cum += pr[c[keep++]];
            if (cum >= limit) return keep;
        }
        if (m == n) return n;
    }
}

/* Candidates of tempered sampling in s->cand[0..*nc) with unnormalised
 * probabilities in s->probs (temperature, top-k, top-p, min-p in the
 * order transformers applies them); returns their total. Tokens more than
 * e^40 times less likely than the best are never candidates (their mass is
 * below float resolution). Sorting is avoided when it cannot change the
 * result: without top-k/top-p no order is needed, and top-p first tries the
 * candidates within 1e-4 of the best — when they hold the nucleus, it is
 * the same nucleus as over all candidates. Top-k selects its k before
 * sorting them, and top-p sorts only the prefix it needs (a full sort of a
 * 128k vocabulary took 25 ms per token). */
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
    bool top_p = p->top_p > 0 && p->top_p < 1;
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
    if (p->top_k > 0) {
        int k = nc > p->top_k ? p->top_k : nc;
        if (k > 0) sort_first(s->cand, nc, k, s->probs);
        if (nc > k) {
            nc = k;
            total = 0;
            for (int i = 0; i < nc; i++) total += s->probs[s->cand[i]];
        }
    }
    if (top_p && nc > 0) {
        if (p->top_k > 0) { /* sorted already */
            double cum = 0, limit = p->top_p * total;
            int keep = 0;
            while (keep < nc) {
                cum += s->probs[s->cand[keep++]];
                if (cum >= limit) break;
            }
            nc = keep;
        } else {
            nc = nucleus(s->cand, nc, s->probs, p->top_p * total);
        }
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

bool sampler_has_penalty(const sampler *s) {
    const em_sampling *p = &s->p;
    bool rep = p->repetition_penalty > 0 && p->repetition_penalty != 1.0f;
    return rep || p->presence_penalty != 0 || p->frequency_penalty != 0;
}

bool sampler_plain_greedy(const sampler *s) { return is_greedy(&s->p) && !sampler_has_penalty(s); }

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

void sampler_device_params(sampler *s, em_sample_params *out) {
    memset(out, 0, sizeof *out);
    if (is_greedy(&s->p)) return; /* temperature 0: the argmax */
    out->u = sampler_uniform(s);
    out->temperature = s->p.temperature;
    out->top_p = s->p.top_p;
    out->top_k = s->p.top_k;
    out->min_p = s->p.min_p;
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
