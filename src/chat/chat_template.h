/* chat_template.h — the chat_template struct shared by template.c (loading)
 * and render.c (rendering). Internal to src/chat. */
#ifndef EMBER_CHAT_TEMPLATE_H
#define EMBER_CHAT_TEMPLATE_H

#include "chat/jinja/jinja.h"

#include <jansson.h>

struct chat_template {
    char *source;         /* template text, owned */
    jinja_template *tpl;  /* parsed, read-only after load */
    json_t *special;      /* {"bos_token": ..., ...} from the tokenizer config */
};

#endif
