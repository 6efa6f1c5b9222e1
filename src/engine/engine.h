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
/* Bytes of weights resident (for /stats). */
size_t em_model_weight_bytes(const em_model *m);

#endif
