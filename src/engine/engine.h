/* engine.h — internal accessors on a loaded model for the layers above the
 * engine (chat, server). The public API (include/ember/ember.h) opens models
 * and runs generations; these expose the pieces a protocol needs. */
#ifndef EMBER_ENGINE_H
#define EMBER_ENGINE_H

#include "ember/ember.h"
#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

/* The model's tokenizer and chat template; NULL when the directory has
 * none. Owned by the model. */
const tokenizer *em_model_tokenizer(const em_model *m);
const chat_template *em_model_chat_template(const em_model *m);
/* config.json model_type ("llama", "qwen3", ...); owned by the model. */
const char *em_model_type(const em_model *m);
/* A name for /v1/models: the directory's base name (or the HF repo name
 * "org/name" when opened from the Hugging Face cache). Owned by the model. */
const char *em_model_name(const em_model *m);
/* End-of-sequence ids (config + generation_config), owned by the model. */
const int32_t *em_model_eos_ids(const em_model *m, size_t *n);
/* The continuous-batching scheduler running on m, or NULL. */
struct em_scheduler *em_model_scheduler(const em_model *m);
/* The configuration snapshot the model was opened with (the process's,
 * unless em_open_options.config named another). Owned by the model. */
const em_config *em_model_config(const em_model *m);
/* Bytes of weights resident (for /stats). */
size_t em_model_weight_bytes(const em_model *m);

/* Logits of every position of ids (a fresh sequence, released after):
 * logits[n, vocab], owned by the caller. n beyond the context: EM_ERR_LIMIT. */
em_status em_score_logits(em_model *m, const int32_t *ids, size_t n, float *logits);
/* log softmax(logits)[at] over n entries, in double; *lse_out (may be NULL)
 * gets the log-sum-exp. at < 0 only computes the log-sum-exp. */
double em_log_softmax_at(const float *logits, int n, int at, double *lse_out);

#endif
