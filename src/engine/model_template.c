/* model_template.c — the model's chat template, loaded when the directory
 * has one (chat_template.jinja, chat_template.json or tokenizer_config.json). */
#include "engine/engine.h"
#include "model/model.h"

#include "base/log.h"

em_status model_template_open(em_model *m) {
    em_status s = chat_template_load(m->dir, &m->tmpl);
    if (s == EM_ERR_UNSUPPORTED) { /* no template: fine for completion-only use */
        m->tmpl = NULL;
        EM_LOGD("%s: no chat template", m->dir);
        return EM_OK;
    }
    return s;
}

void model_template_close(em_model *m) {
    chat_template_free(m->tmpl);
    m->tmpl = NULL;
}

const chat_template *em_model_chat_template(const em_model *m) { return m->tmpl; }
