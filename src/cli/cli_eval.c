/* cli_eval.c — evaluation text for the ppl and kl verbs. */
#include "cli/cli_eval.h"

#include "cli/cli.h"

#include "base/file.h"

#include <stdlib.h>

int cli_eval_tokens(const char *verb, const em_model *m, const char *path, long max_tokens, int32_t **ids, size_t *n) {
    char *text;
    size_t len;
    if (em_read_file(path, 256u << 20, &text, &len) != EM_OK) {
        cli_error(verb, "%s", em_last_error());
        return CLI_FAIL;
    }
    em_status s = em_tokenize(m, text, len, 0, ids, n);
    free(text);
    if (s != EM_OK) {
        cli_error(verb, "%s", em_last_error());
        return CLI_FAIL;
    }
    if (max_tokens > 0 && *n > (size_t)max_tokens) *n = (size_t)max_tokens;
    if (*n < 2) {
        cli_error(verb, "%s: fewer than 2 tokens to score", path);
        free(*ids);
        return CLI_FAIL;
    }
    return CLI_OK;
}
