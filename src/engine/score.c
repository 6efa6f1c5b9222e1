/* score.c — teacher-forced scoring: the logits of every position of a token
 * sequence, for perplexity and distribution comparisons between models. */
#include "engine/engine.h"
#include "model/model.h"

#include <math.h>

em_status em_score_logits(em_model *m, const int32_t *ids, size_t n, float *logits) {
    if (n == 0) return EM_OK;
    if (n > (size_t)m->max_ctx) return em_fail(EM_ERR_LIMIT, "%zu tokens exceed the context of %d", n, m->max_ctx);
    int seq;
    EM_TRY(kv_seq_alloc(m->kv, &seq));
    em_span sp = {seq, ids, (int)n, LOGITS_ALL, SPAN_MATH_MODEL};
    em_batch b = {.spans = &sp, .n_spans = 1};
    em_status s = model_forward(m, &b, logits);
    kv_seq_release(m->kv, seq);
    return s;
}

double em_log_softmax_at(const float *logits, int n, int at, double *lse_out) {
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    if (lse_out) *lse_out = lse;
    return at >= 0 ? (double)logits[at] - lse : 0;
}
