/* model_text.c — the text side of a model: its tokenizer and chat template,
 * loaded from the model directory when present, and the public tokenize /
 * detokenize calls. */
#include "engine/engine.h"
#include "model/model.h"

#include "base/file.h"
#include "base/log.h"

#include <stdlib.h>

em_status model_text_open(em_model *m) {
    char *tj = em_path_join(m->dir, "tokenizer.json");
    if (!tj) return em_fail(EM_ERR_NOMEM, "out of memory");
    bool has_tok = em_file_exists(tj);
    free(tj);
    if (has_tok) {
        EM_TRY(tok_load(m->dir, &m->tok));
        if (tok_vocab_size(m->tok) > m->cfg.vocab)
            EM_LOGW("%s: tokenizer has %d tokens, more than the model's vocabulary of %d", m->dir,
                    tok_vocab_size(m->tok), m->cfg.vocab);
    }
    return model_template_open(m);
}

void model_text_close(em_model *m) {
    model_template_close(m);
    tok_free(m->tok);
    m->tok = NULL;
}

const tokenizer *em_model_tokenizer(const em_model *m) { return m->tok; }

em_status em_tokenize(const em_model *m, const char *text, size_t len, int add_special, int32_t **ids, size_t *n_ids) {
    if (!m->tok) return em_fail(EM_ERR_UNSUPPORTED, "%s: the model has no tokenizer.json", m->dir);
    return tok_encode(m->tok, text, len, add_special != 0, ids, n_ids);
}

em_status em_detokenize(const em_model *m, const int32_t *ids, size_t n_ids, int skip_special, char **text) {
    if (!m->tok) return em_fail(EM_ERR_UNSUPPORTED, "%s: the model has no tokenizer.json", m->dir);
    return tok_decode(m->tok, ids, n_ids, skip_special != 0, text);
}
