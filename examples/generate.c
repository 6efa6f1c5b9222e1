/* generate.c — the smallest useful program on libember: open a model, turn a
 * prompt into ids (or take ids), stream the generated tokens.
 *
 *   cc generate.c $(pkg-config --cflags --libs --static ember) -o generate
 *   ./generate MODEL_DIR "Once upon a time"      # needs tokenizer.json
 *   ./generate MODEL_DIR 1,2,3                   # token ids
 */
#include <ember/ember.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_token(void *user, const em_token_info *t) {
    (void)user;
    if (t->text) fwrite(t->text, 1, t->text_len, stdout);
    else printf(" %d", t->token);
    fflush(stdout);
    return 0; /* keep going */
}

static int parse_ids(const char *s, int32_t **ids, size_t *n) {
    size_t cap = strlen(s) / 2 + 1, k = 0;
    *ids = malloc(cap * sizeof **ids);
    for (char *end; *s && *ids; s = *end ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || (*end && *end != ',')) return 0;
        (*ids)[k++] = (int32_t)v;
    }
    *n = k;
    return k > 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL_DIR (\"prompt\" | 1,2,3)\n", argv[0]);
        return 2;
    }
    em_model *m;
    if (em_model_open(argv[1], NULL, &m) != EM_OK) {
        fprintf(stderr, "%s\n", em_last_error());
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int is_ids = strspn(argv[2], "0123456789,") == strlen(argv[2]);
    if ((is_ids && !parse_ids(argv[2], &ids, &n)) ||
        (!is_ids && em_tokenize(m, argv[2], strlen(argv[2]), 1, &ids, &n) != EM_OK)) {
        fprintf(stderr, "cannot read the prompt: %s\n", em_last_error());
        free(ids);
        em_model_free(m);
        return 1;
    }
    em_generate_params p = {.prompt = ids, .n_prompt = n, .max_tokens = 32,
                            .sampling = em_sampling_defaults(m), .on_token = print_token};
    em_generate_result r;
    em_status s = em_generate(m, &p, &r);
    printf("\n");
    if (s != EM_OK) fprintf(stderr, "%s\n", em_last_error());
    free(ids);
    em_model_free(m);
    return s == EM_OK ? 0 : 1;
}
