/* One parsed chat template rendered by many threads at once (what the server
 * does under load) gives every thread the single-threaded prompt; the
 * template's shared constants survive (their reference counts are atomic). */
#include "test.h"

#include "chat/chat.h"

#include <pthread.h>

enum { THREADS = 8, ROUNDS = 150 };

static chat_template *tpl;
static json_t *vars;
static char *expected;
static int mismatches;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        char *out = NULL;
        size_t len = 0;
        em_status s = chat_render(tpl, vars, &out, &len);
        if (s != EM_OK || strcmp(out, expected)) {
            pthread_mutex_lock(&mu);
            mismatches++;
            pthread_mutex_unlock(&mu);
        }
        free(out);
    }
    return NULL;
}

int main(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/demo", test_src_dir());
    REQUIRE(chat_template_load(dir, &tpl) == EM_OK);
    vars = json_loads("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                      "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
                      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
                      "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},"
                      "{\"role\":\"tool\",\"content\":\"18 C\"},{\"role\":\"user\",\"content\":\"Thanks\"}],"
                      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                      "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}],"
                      "\"add_generation_prompt\":true,\"enable_thinking\":true}",
                      0, NULL);
    REQUIRE(vars);
    size_t len;
    REQUIRE(chat_render(tpl, vars, &expected, &len) == EM_OK);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    CHECKF(mismatches == 0, "%d of %d concurrent renders differed", mismatches, THREADS * ROUNDS);
    free(expected);
    json_decref(vars);
    chat_template_free(tpl);
    return test_summary();
}
