/* spec.c — speculative decoding with the model's multi-token-prediction
 * (MTP) head: draft k tokens with the head, verify them in one trunk
 * forward over the appended span, keep the longest accepted prefix.
 *
 * A round starts with the trunk at length N and the next token x_N chosen
 * (and delivered). The head has pending (token, hidden) pairs whose tokens
 * are known, the last being (x_N, h_{N-1}); running it over them fills its
 * KV cache and yields the distribution q_1 of the first draft. Drafts
 * d_2..d_k come from further head steps on the head's own output. The trunk
 * then runs [x_N, d_1..d_k] at once (logits of every row). Draft d_j is
 * accepted with probability min(1, p_j(d_j) / q_j(d_j)) where p_j is the
 * distribution the sampler would draw from after the accepted prefix; at
 * the first rejection the token is drawn from the residual max(p_j - q_j, 0),
 * and when all are accepted the next token is drawn from p_{k+1}. This
 * standard rejection scheme leaves the output distribution exactly that of
 * plain sampling; with greedy sampling p and q are one-hot and it accepts
 * exactly the drafts equal to the trunk's argmax. The trunk is then cut
 * back to the accepted length: the KV cache by truncation, the recurrent
 * state by the family's rollback journal (model_seq_mark/truncate). */
#include "engine/gen_internal.h"

#include "base/alloc.h"
#include "engine/spec.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

typedef struct spec_state {
    int k, H, V;
    float *pair_h;    /* hidden rows of pending pairs: (max(k, chunk) + 1) x H */
    int32_t *pair_t;  /* their tokens */
    int n_pairs, pair_pos0;
    float *mh;        /* the head's output hidden row */
    float *dlogits;   /* head logits */
    float *q;         /* k x V draft distributions */
    float *p;         /* V: the target distribution */
    float *resid;     /* V */
    float *vlogits;   /* (k + 1) x V verify logits */
    int32_t *span;    /* [x_N, d_1..d_k] */
} spec_state;

void spec_free(void *v) {
    spec_state *s = v;
    if (!s) return;
    free(s->pair_h);
    free(s->pair_t);
    free(s->mh);
    free(s->dlogits);
    free(s->q);
    free(s->p);
    free(s->resid);
    free(s->vlogits);
    free(s->span);
    free(s);
}

static em_status spec_new(gen_seq *g, spec_state **out) {
    spec_state *s = em_calloc(1, sizeof *s);
    if (!s) return em_fail(EM_ERR_NOMEM, "out of memory");
    s->k = g->p->spec_draft_tokens;
    s->H = g->m->cfg.hidden;
    s->V = g->m->cfg.vocab;
    size_t rows = (size_t)(s->k > PREFILL_CHUNK ? s->k : PREFILL_CHUNK) + 1, H = (size_t)s->H, V = (size_t)s->V;
    s->pair_h = em_mallocn(rows * H, sizeof(float));
    s->pair_t = em_mallocn(rows, sizeof(int32_t));
    s->mh = em_mallocn(H, sizeof(float));
    s->dlogits = em_mallocn(V, sizeof(float));
    s->q = em_mallocn((size_t)s->k * V, sizeof(float));
    s->p = em_mallocn(V, sizeof(float));
    s->resid = em_mallocn(V, sizeof(float));
    s->vlogits = em_mallocn(((size_t)s->k + 1) * V, sizeof(float));
    s->span = em_mallocn((size_t)s->k + 1, sizeof(int32_t));
    if (!s->pair_h || !s->pair_t || !s->mh || !s->dlogits || !s->q || !s->p || !s->resid || !s->vlogits || !s->span) {
        spec_free(s);
        return em_fail(EM_ERR_NOMEM, "out of memory for speculative decoding");
    }
    *out = s;
    return EM_OK;
}

/* Pending pairs: hidden rows from position pair_pos0 on; the token of each
 * row (the one that follows it) is known for all but the last row. */
static em_status run_head(gen_seq *g, spec_state *s, int n) {
    em_model *m = g->m;
    pthread_mutex_lock(&m->compute_mu);
    em_status st = m->family->mtp_forward(m, g->seq, s->pair_t, s->pair_h, s->pair_pos0, n, s->dlogits, s->mh);
    pthread_mutex_unlock(&m->compute_mu);
    return st;
}

/* Runs the head over the rows whose tokens are known; the open last row
 * moves to the front. */
static em_status flush_known(gen_seq *g, spec_state *s) {
    int known = s->n_pairs - 1;
    if (known <= 0) return EM_OK;
    EM_TRY(run_head(g, s, known));
    memmove(s->pair_h, s->pair_h + (size_t)known * s->H, (size_t)s->H * sizeof(float));
    s->pair_pos0 += known;
    s->n_pairs = 1;
    return EM_OK;
}

/* Gives the open row its token and runs the head over every pending row:
 * s->dlogits then holds the first draft's logits, s->mh its hidden row. */
static em_status close_and_flush(gen_seq *g, spec_state *s, int32_t next) {
    if (s->n_pairs == 0) return em_fail(EM_ERR_INTERNAL, "speculative decoding lost its pending hidden state");
    s->pair_t[s->n_pairs - 1] = next;
    EM_TRY(run_head(g, s, s->n_pairs));
    s->n_pairs = 0;
    return EM_OK;
}

/* Trunk forward of n tokens; appends their hidden rows to the pending pairs
 * (each row's token is the next one; the last row stays open). */
static em_status trunk(gen_seq *g, spec_state *s, const int32_t *tokens, int n, logits_mode mode, float *logits) {
    em_model *m = g->m;
    int pos0 = m->kv->seqs[g->seq].len;
    em_span sp = {g->seq, tokens, n, mode, gen_seq_span_math(g)};
    em_batch b = {.spans = &sp, .n_spans = 1};
    if (s->n_pairs == 0) s->pair_pos0 = pos0;
    else s->pair_t[s->n_pairs - 1] = tokens[0];
    pthread_mutex_lock(&m->compute_mu);
    em_status st = m->family->forward(m, &b, logits);
    if (st == EM_OK) st = m->family->hidden_rows(m, s->pair_h + (size_t)s->n_pairs * s->H, n);
    pthread_mutex_unlock(&m->compute_mu);
    if (st != EM_OK) return st;
    for (int i = 0; i + 1 < n; i++) s->pair_t[s->n_pairs + i] = tokens[i + 1];
    s->n_pairs += n;
    return EM_OK;
}

em_status spec_prefill(gen_seq *g, void **out) {
    const em_generate_params *p = g->p;
    spec_state *s = NULL;
    EM_TRY(spec_new(g, &s));
    *out = s;
    size_t done = 0;
    while (done < p->n_prompt) {
        size_t n = p->n_prompt - done < PREFILL_CHUNK ? p->n_prompt - done : PREFILL_CHUNK;
        bool last = done + n == p->n_prompt;
        EM_TRY(trunk(g, s, p->prompt + done, (int)n, last ? LOGITS_LAST : LOGITS_NONE, g->logits));
        EM_TRY(flush_known(g, s)); /* bounded memory: only the open row waits */
        done += n;
        if (p->cancel && *p->cancel) return em_fail(EM_ERR_CANCELLED, "cancelled during prefill");
    }
    return EM_OK;
}

int32_t spec_accept_token(sampler *smp, const float *p, const float *q, int32_t d, float *resid, bool *accepted) {
    double u = sampler_uniform(smp);
    *accepted = q[d] > 0 && u * q[d] < p[d];
    if (*accepted) return d;
    double mass = 0;
    for (int i = 0; i < smp->n_vocab; i++) {
        float r = p[i] - q[i];
        resid[i] = r > 0 ? r : 0;
        mass += resid[i];
    }
    /* p == q leaves no residual mass (and no rejection in exact arithmetic) */
    return sampler_draw(smp, mass > 0 ? resid : p);
}

/* The head's drafts for this round: d_1..d_k into s->span[1..k], their
 * distributions into s->q. */
static em_status draft(gen_seq *g, spec_state *s, int k, int N) {
    em_model *m = g->m;
    for (int j = 0; j < k; j++) {
        if (j > 0) {
            pthread_mutex_lock(&m->compute_mu);
            em_status st = m->family->mtp_forward(m, g->seq, &s->span[j], s->mh, N + j - 1, 1, s->dlogits, s->mh);
            pthread_mutex_unlock(&m->compute_mu);
            EM_TRY(st);
        }
        float *q = s->q + (size_t)j * s->V;
        sampler_distribution(&g->smp, s->dlogits, q);
        s->span[j + 1] = sampler_draw(&g->smp, q);
    }
    return EM_OK;
}

/* One round; *next receives the token that starts the following one. */
/* Delivers a chosen token; *done when the generation ended with it. */
static em_status emit(gen_seq *g, int32_t tok, em_token_info *info, bool *done) {
    EM_TRY(gen_seq_emit(g, tok, info));
    *done = g->finished;
    return EM_OK;
}

static em_status round_once(gen_seq *g, spec_state *s, int32_t x, int32_t *next, bool *done) {
    const em_generate_params *p = g->p;
    em_generate_result *r = g->r;
    em_model *m = g->m;
    int N = m->kv->seqs[g->seq].len;
    EM_TRY(close_and_flush(g, s, x));
    size_t remaining = (size_t)p->max_tokens - g->r->n_generated;
    int k = (size_t)s->k < remaining - 1 ? s->k : (int)(remaining - 1);
    s->span[0] = x;
    EM_TRY(draft(g, s, k, N));
    EM_TRY(model_seq_mark(m, g->seq, k + 1));
    EM_TRY(trunk(g, s, s->span, k + 1, LOGITS_ALL, s->vlogits));
    r->spec_steps++;
    r->spec_drafted += (size_t)k;
    int a = 0;
    int32_t t = -1;
    em_token_info info = {0};
    for (int j = 0; j < k && !*done; j++) {
        float *L = s->vlogits + (size_t)j * s->V;
        gen_seq_process(g, L);
        sampler_distribution(&g->smp, L, s->p);
        bool ok;
        int32_t tok = spec_accept_token(&g->smp, s->p, s->q + (size_t)j * s->V, s->span[j + 1], s->resid, &ok);
        memset(&info, 0, sizeof info);
        sampler_describe(&g->smp, L, tok, p->top_logprobs, &info);
        if (!ok) {
            t = tok;
            break;
        }
        a++;
        r->spec_accepted++;
        EM_TRY(emit(g, tok, &info, done));
    }
    if (*done) return EM_OK;
    if (t < 0) { /* every draft accepted: the next token from the last row */
        float *L = s->vlogits + (size_t)k * s->V;
        gen_seq_process(g, L);
        memset(&info, 0, sizeof info);
        t = sampler_pick(&g->smp, L, p->top_logprobs, !p->no_logprob, &info);
    }
    /* keep x_N and the accepted drafts; their rows stay pending for the head */
    EM_TRY(model_seq_truncate(m, g->seq, N + a + 1));
    s->n_pairs = a + 1;
    *next = t;
    return emit(g, t, &info, done);
}

em_status spec_decode(gen_seq *g, void *v) {
    spec_state *s = v;
    const em_generate_params *p = g->p;
    if (gen_seq_should_stop(g)) return EM_OK;
    gen_seq_process(g, g->logits);
    em_token_info info = {0};
    int32_t x = sampler_pick(&g->smp, g->logits, p->top_logprobs, !p->no_logprob, &info);
    bool done = false;
    EM_TRY(emit(g, x, &info, &done));
    while (!done && !gen_seq_should_stop(g)) EM_TRY(round_once(g, s, x, &x, &done));
    return EM_OK;
}
