/* generate.c — em_generate. With a scheduler running on the model (the
 * server), the request joins its continuous batch; otherwise it runs here:
 * prefill the prompt in chunks, then decode one token per forward. */
#include "engine/engine.h"
#include "engine/gen_internal.h"
#include "engine/scheduler.h"

#include "base/alloc.h"
#include "base/timer.h"

#include <stdlib.h>


/* Feeds history[fed..n_history) in chunks; logits for the last id, or with
 * id non-NULL the model's choice alone: its argmax, or with draw non-NULL
 * that draw (em_batch.sample). */
static em_status feed(gen_seq *g, float *logits, int32_t *id, const em_sample_params *draw) {
    while (g->fed < g->n_history) {
        size_t n = g->n_history - g->fed < PREFILL_CHUNK ? g->n_history - g->fed : PREFILL_CHUNK;
        bool last = g->fed + n == g->n_history;
        em_span sp = {g->seq, g->history + g->fed, (int)n, last ? LOGITS_LAST : LOGITS_NONE, gen_seq_span_math(g)};
        em_batch b = {.spans = &sp, .n_spans = 1, .argmax = id, .argmax_only = id != NULL, .sample = last ? draw : NULL};
        EM_TRY(model_forward(g->m, &b, logits));
        g->fed += n;
        if (gen_seq_cancelled(g)) return em_fail(EM_ERR_CANCELLED, "cancelled");
    }
    return EM_OK;
}

static em_status run_alone(gen_seq *g) {
    em_model *m = g->m;
    float *logits = em_mallocn((size_t)m->cfg.vocab, sizeof(float));
    if (!logits) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = kv_seq_alloc(m->kv, &g->seq);
    double t_prefilled = 0;
    /* the model chooses the token where it can: greedy, or drawn on the device */
    bool greedy = gen_seq_greedy_id(g), draws = !greedy && model_device_samples(m) && gen_seq_device_draw(g);
    int32_t id = 0;
    em_sample_params draw;
    while (s == EM_OK && !g->finished) {
        if (draws) gen_seq_draw_params(g, &draw);
        s = feed(g, logits, greedy || draws ? &id : NULL, draws ? &draw : NULL);
        if (!t_prefilled) t_prefilled = em_now();
        if (s == EM_OK) s = greedy || draws ? gen_seq_take(g, id) : gen_seq_sample(g, logits);
    }
    if (s == EM_ERR_CANCELLED) {
        gen_seq_finish(g, EM_FINISH_CANCELLED);
        s = EM_OK;
    }
    g->r->prefill_seconds = (t_prefilled ? t_prefilled : em_now()) - g->t_start;
    g->r->decode_seconds = em_now() - (t_prefilled ? t_prefilled : g->t_start);
    if (g->seq >= 0) kv_seq_release(m->kv, g->seq);
    g->seq = -1;
    free(logits);
    return s;
}

/* Speculative decoding owns its forwards (draft + verify + rollback), so it
 * runs outside the batch scheduler, on a sequence of its own. */
static em_status run_speculative(gen_seq *g) {
    em_model *m = g->m;
    g->logits = em_mallocn((size_t)m->cfg.vocab, sizeof(float));
    if (!g->logits) return em_fail(EM_ERR_NOMEM, "out of memory");
    em_status s = kv_seq_alloc(m->kv, &g->seq);
    void *spec = NULL;
    if (s == EM_OK) s = spec_prefill(g, &spec);
    double t_prefilled = em_now();
    if (s == EM_OK) s = spec_decode(g, spec);
    spec_free(spec);
    if (s == EM_ERR_CANCELLED) {
        gen_seq_finish(g, EM_FINISH_CANCELLED);
        s = EM_OK;
    } else if (s == EM_OK && !g->finished) {
        gen_seq_should_stop(g);
    }
    g->r->prefill_seconds = t_prefilled - g->t_start;
    g->r->decode_seconds = em_now() - t_prefilled;
    if (g->seq >= 0) kv_seq_release(m->kv, g->seq);
    g->seq = -1;
    return s;
}

em_status em_generate(em_model *m, const em_generate_params *p, em_generate_result *result) {
    em_generate_result r;
    gen_seq g;
    em_status s = gen_seq_init(&g, m, p, &r);
    if (s == EM_OK && !g.finished)
        s = p->spec_draft_tokens > 0 ? run_speculative(&g) : m->sched ? sched_run(m->sched, &g) : run_alone(&g);
    gen_seq_free(&g);
    if (result) *result = r;
    return s;
}
