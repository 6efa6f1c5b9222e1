/* webui.h — the chat page served at `/`, compiled into the binary
 * (generated from src/server/webui/ by cmake/assets.cmake). */
#ifndef EMBER_SERVER_WEBUI_H
#define EMBER_SERVER_WEBUI_H

#include <stddef.h>

extern const unsigned char webui_index_html[];
extern const size_t webui_index_html_len;

#endif
