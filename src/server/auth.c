/* auth.c — API key check (--api-key). The comparison takes the same time
 * wherever the first difference is, so response timing leaks nothing about
 * the key. */
#include "server/server.h"

#include <string.h>
#include <strings.h>

/* Constant-time over the expected key's length; lengths differ → false. */
static bool key_equal(const char *given, const char *key) {
    size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

bool srv_authorized(const srv_request *r) {
    const char *key = r->srv->cfg.api_key;
    if (!key || !*key) return true;
    const char *auth = http_header(r, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        const char *tok = auth + 7;
        while (*tok == ' ') tok++;
        return key_equal(tok, key);
    }
    const char *x = http_header(r, "x-api-key");
    return x && key_equal(x, key);
}
