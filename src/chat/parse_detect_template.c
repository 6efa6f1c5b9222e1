/* parse_detect_template.c — chat_detect_format over a loaded template. */
#include "chat/chat.h"

chat_format chat_detect_format(const chat_template *t, const char *model_type, json_t *vars) {
    return chat_detect_format_source(t ? chat_template_source(t) : NULL, model_type, vars);
}
