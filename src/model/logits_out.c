/* logits_out.c — how a forward's logits rows leave the backend.
 *
 * A request decoding greedily needs one id per step, not a row of 128k
 * floats: where the batch asks for it (em_batch.argmax), the greedy choice
 * is made where the logits are — by the backend's argmax_rows on a GPU, so
 * a step downloads a few bytes per sequence instead of half a megabyte, and
 * the host does not scan the rows. Sampled rows likewise (em_batch.sample):
 * the backend draws them with the sequence's own uniform, so a sampled
 * decode step sorts nothing on the host either. */
#include "model/model.h"

#include "base/alloc.h"
#include "base/config.h"
#include "tensor/argmax.h"

static void host_argmax(const em_model *m, const em_batch *b, const float *logits, int rows) {
    size_t V = (size_t)m->cfg.vocab;
    for (int r = 0; r < rows; r++) b->argmax[r] = em_argmax_f32(logits + (size_t)r * V, (int)V);
}

static em_status ensure_argmax_buf(em_model *m, int rows) {
    if (rows <= m->argmax_cap) return EM_OK;
    em_backend *be = m->be;
    if (m->argmax_dev) be->ops->free(be, m->argmax_dev);
    m->argmax_cap = 0;
    m->argmax_dev = be->ops->alloc(be, (size_t)rows * sizeof(int32_t));
    if (!m->argmax_dev) return em_fail(EM_ERR_NOMEM, "out of %s memory for %d token ids", be->desc, rows);
    m->argmax_cap = rows;
    return EM_OK;
}

/* Every row's token chosen on the backend (b->sample): greedy rows by
 * their argmax, sampled rows by the draw their parameters describe; the
 * float rows, when wanted, leave afterwards (sample_rows leaves a greedy
 * row's logits as they are, and the host samples only such rows). */
static em_status device_draws(em_model *m, const em_batch *b, float *src, int rows, float *logits) {
    em_backend *be = m->be;
    size_t V = (size_t)m->cfg.vocab;
    EM_TRY(ensure_argmax_buf(m, rows));
    be->ops->sample_rows(be, m->argmax_dev, src, rows, (int)V, (int)V, b->sample);
    EM_TRY(be->ops->download(be, b->argmax, m->argmax_dev, (size_t)rows * sizeof(int32_t)));
    if (b->argmax_only) return EM_OK;
    return be->ops->download(be, logits, src, (size_t)rows * V * sizeof(float));
}

bool model_device_samples(const em_model *m) {
    const em_backend *be = m->be;
    return m->family && m->family->fills_sample && be && !be->ops->host_memory && be->ops->sample_rows &&
           m->cfg.vocab <= EM_SAMPLE_MAX_N && em_config_flag(m->config, EMC_DEVICE_SAMPLING);
}

em_status model_logits_out(em_model *m, const em_batch *b, float *src, int rows, float *logits) {
    em_backend *be = m->be;
    size_t V = (size_t)m->cfg.vocab;
    if (rows <= 0) return EM_OK;
    if (be->ops->host_memory) { /* the head wrote straight into logits */
        if (b && b->argmax) host_argmax(m, b, logits, rows);
        return EM_OK;
    }
    if (b && b->argmax && b->sample && be->ops->sample_rows) return device_draws(m, b, src, rows, logits);
    bool scan = false;
    if (b && b->argmax) {
        if (be->ops->argmax_rows) {
            EM_TRY(ensure_argmax_buf(m, rows));
            be->ops->argmax_rows(be, m->argmax_dev, NULL, src, rows, (int)V, (int)V);
            EM_TRY(be->ops->download(be, b->argmax, m->argmax_dev, (size_t)rows * sizeof(int32_t)));
            if (b->argmax_only) return EM_OK;
        } else {
            scan = true;
        }
    }
    EM_TRY(be->ops->download(be, logits, src, (size_t)rows * V * sizeof(float)));
    if (scan) host_argmax(m, b, logits, rows);
    return EM_OK;
}

void model_argmax_free(em_model *m) {
    if (m->argmax_dev && m->be) m->be->ops->free(m->be, m->argmax_dev);
    m->argmax_dev = NULL;
    m->argmax_cap = 0;
}

em_status model_forward(em_model *m, const em_batch *b, float *logits) {
    pthread_mutex_lock(&m->compute_mu);
    em_status s = m->family->forward(m, b, logits);
    pthread_mutex_unlock(&m->compute_mu);
    /* a family that does not choose on the device wrote every row */
    if (s == EM_OK && b->argmax && !m->family->fills_argmax) host_argmax(m, b, logits, batch_logit_rows(b));
    return s;
}
