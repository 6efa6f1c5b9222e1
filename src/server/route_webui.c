/* route_webui.c — GET /: the chat page compiled into the binary (webui.h). */
#include "server/routes.h"

#include "base/alloc.h"
#include "server/webui.h"

#include <string.h>

void route_webui(srv_request *req, srv_response *resp) {
    (void)req;
    resp->body = em_malloc(webui_index_html_len ? webui_index_html_len : 1);
    if (!resp->body) {
        srv_reply_error(resp, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    memcpy(resp->body, webui_index_html, webui_index_html_len);
    resp->len = webui_index_html_len;
    resp->status = 200;
    resp->content_type = "text/html; charset=utf-8";
}
