/* structured.h — the grammar a request needs, and the model's grammar
 * vocabulary (see structured.c). */
#ifndef EMBER_ENGINE_STRUCTURED_H
#define EMBER_ENGINE_STRUCTURED_H

#include "engine/grammar/grammar.h"
#include "engine/request.h"
#include "engine/session.h"

/* Compiles the grammar of req (NULL when it needs none) against the
 * prompt's chat format. *out owned by the caller (grammar_free). */
em_status structured_compile(const em_request *req, const em_prompt *p, grammar **out);
/* The model's vocabulary for matchers, built on first use; owned by m. */
em_status structured_vocab(em_model *m, const grammar_vocab **out);

#endif
