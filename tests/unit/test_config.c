/* test_config.c — configuration snapshots: environment parsing (flags,
 * numbers, choices, fallbacks, unknown names with suggestions), overrides,
 * and concurrent requests each with their own overrides over one base. */
#include "test.h"

#include "base/config.h"

#include <pthread.h>
#include <stdio.h>

static void test_defaults_and_env(void) {
    char *env[] = {"EMBER_THREADS=3", "EMBER_PREFAULT=1", "EMBER_HOST=0.0.0.0", "HF_HOME=/tmp/hf",
                   "PATH=/usr/bin", "EMBER_SRC=/src", NULL};
    em_config *c;
    REQUIRE(em_config_from_env(env, &c) == EM_OK);
    CHECK(em_config_int(c, EMC_THREADS) == 3);
    CHECK(em_config_source_of(c, EMC_THREADS) == EM_CFG_SRC_ENV);
    CHECK(em_config_int(c, EMC_PORT) == 8080);
    CHECK(em_config_source_of(c, EMC_PORT) == EM_CFG_SRC_DEFAULT);
    CHECK(em_config_flag(c, EMC_PREFAULT));
    CHECK_STR(em_config_str(c, EMC_HOST), "0.0.0.0");
    CHECK_STR(em_config_str(c, EMC_HF_HOME), "/tmp/hf");
    CHECK_STR(em_config_str(c, EMC_PRECISION), "auto");
    CHECK(em_config_n_warnings(c) == 0); /* EMBER_SRC is the test suite's, PATH is not ours */
    em_config_release(c);
}

static bool has_warning(const em_config *c, const char *needle) {
    for (size_t i = 0; i < em_config_n_warnings(c); i++)
        if (strstr(em_config_warning(c, i), needle)) return true;
    return false;
}

static void test_bad_env_values_fall_back(void) {
    char *env[] = {"EMBER_THREADS=lots", "EMBER_PORT=70000", "EMBER_PREFAULT=yes", "EMBER_PRECISION=turbo",
                   "EMBER_THRAEDS=4", "EMBER_ZZZZZZZZZZZZZZZZ=1", "EMBER_CTX=", NULL};
    em_config *c;
    REQUIRE(em_config_from_env(env, &c) == EM_OK);
    CHECK(em_config_int(c, EMC_THREADS) == 0);
    CHECK(em_config_source_of(c, EMC_THREADS) == EM_CFG_SRC_DEFAULT);
    CHECK(em_config_int(c, EMC_PORT) == 8080);
    CHECK(!em_config_flag(c, EMC_PREFAULT));
    CHECK_STR(em_config_str(c, EMC_PRECISION), "auto");
    CHECK(em_config_int(c, EMC_CTX) == 0);
    CHECK(has_warning(c, "EMBER_THREADS=lots is not an integer"));
    CHECK(has_warning(c, "EMBER_PORT=70000 is outside [1, 65535]"));
    CHECK(has_warning(c, "EMBER_PREFAULT=yes"));
    CHECK(has_warning(c, "EMBER_PRECISION=turbo is not one of auto|exact|fast"));
    CHECK(has_warning(c, "unknown variable EMBER_THRAEDS (did you mean EMBER_THREADS?)"));
    CHECK(has_warning(c, "unknown variable EMBER_ZZZZZZZZZZZZZZZZ (`ember config`"));
    CHECKF(em_config_n_warnings(c) == 7, "%zu warnings", em_config_n_warnings(c));
    em_config_release(c);
}

static void test_flag_zero_beats_default(void) {
    char *on[] = {"EMBER_PREFAULT=1", NULL};
    em_config *a, *b;
    REQUIRE(em_config_from_env(on, &a) == EM_OK);
    em_config_override ov = {"EMBER_PREFAULT", "0"};
    REQUIRE(em_config_with_overrides(a, &ov, 1, EM_CFG_SRC_FLAG, &b) == EM_OK);
    CHECK(em_config_flag(a, EMC_PREFAULT));
    CHECK(!em_config_flag(b, EMC_PREFAULT));
    CHECK(em_config_source_of(b, EMC_PREFAULT) == EM_CFG_SRC_FLAG);
    em_config_release(a);
    em_config_release(b);
}

static void test_suggest(void) {
    CHECK_STR(em_config_suggest("EMBER_PORTT"), "EMBER_PORT");
    CHECK_STR(em_config_suggest("ember_threads"), "EMBER_THREADS");
    CHECK_STR(em_config_suggest("EMBER_MAX_CONCURENCY"), "EMBER_MAX_CONCURRENCY");
    CHECK(em_config_suggest("EMBER_SOMETHING_ELSE_ENTIRELY") == NULL);
    CHECK(em_config_find("EMBER_API_KEY") == EMC_API_KEY);
    CHECK(em_config_find("EMBER_NOPE") == -1);
}

static void test_overrides_are_strict(void) {
    em_config *base, *c;
    char *env[] = {NULL};
    REQUIRE(em_config_from_env(env, &base) == EM_OK);
    em_config_override bad_num = {"EMBER_CTX", "12k"};
    CHECK(em_config_with_overrides(base, &bad_num, 1, EM_CFG_SRC_REQUEST, &c) == EM_ERR_INVALID);
    CHECK(c == NULL && strstr(em_last_error(), "EMBER_CTX=12k"));
    em_config_override typo = {"EMBER_CXT", "100"};
    CHECK(em_config_with_overrides(base, &typo, 1, EM_CFG_SRC_REQUEST, &c) == EM_ERR_INVALID);
    CHECK(strstr(em_last_error(), "did you mean EMBER_CTX?") != NULL);
    em_config_override choice = {"EMBER_LOG_LEVEL", "loud"};
    CHECK(em_config_with_overrides(base, &choice, 1, EM_CFG_SRC_FLAG, &c) == EM_ERR_INVALID);
    em_config_override ok[] = {{"EMBER_CTX", "100"}, {"EMBER_API_KEY", "sk-1"}, {"EMBER_CTX", "200"}};
    REQUIRE(em_config_with_overrides(base, ok, 3, EM_CFG_SRC_FLAG, &c) == EM_OK);
    CHECK(em_config_int(c, EMC_CTX) == 200); /* the last one wins */
    CHECK_STR(em_config_str(c, EMC_API_KEY), "sk-1");
    CHECK(em_config_int(base, EMC_CTX) == 0);
    CHECK_STR(em_config_str(base, EMC_API_KEY), "");
    em_config_release(c);
    em_config_release(base);
}

/* Many "requests" at once, each with its own overrides over one shared base:
 * every request must see exactly its values, and the base must not move. */
typedef struct req_arg {
    const em_config *base;
    int id;
    int bad;
} req_arg;

static void *request_thread(void *p) {
    req_arg *a = p;
    char threads[16], ctx[16];
    for (int it = 0; it < 2000; it++) {
        snprintf(threads, sizeof threads, "%d", a->id + 1);
        snprintf(ctx, sizeof ctx, "%d", (a->id + 1) * 1000 + it);
        em_config_override ov[] = {{"EMBER_THREADS", threads}, {"EMBER_CTX", ctx}};
        em_config *c, *held;
        if (em_config_with_overrides(a->base, ov, 2, EM_CFG_SRC_REQUEST, &c) != EM_OK) {
            a->bad++;
            continue;
        }
        held = em_config_retain(a->base); /* the base is shared by all requests */
        if (em_config_int(c, EMC_THREADS) != a->id + 1 || em_config_int(c, EMC_CTX) != (a->id + 1) * 1000 + it ||
            em_config_source_of(c, EMC_CTX) != EM_CFG_SRC_REQUEST || em_config_int(c, EMC_PORT) != 9000 ||
            em_config_int(a->base, EMC_THREADS) != 7 || em_config_int(a->base, EMC_CTX) != 0)
            a->bad++;
        em_config_release(held);
        em_config_release(c);
    }
    return NULL;
}

static void test_concurrent_requests(void) {
    char *env[] = {"EMBER_THREADS=7", "EMBER_PORT=9000", NULL};
    em_config *base;
    REQUIRE(em_config_from_env(env, &base) == EM_OK);
    enum { N = 8 };
    pthread_t th[N];
    req_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (req_arg){base, i, 0};
        REQUIRE(pthread_create(&th[i], NULL, request_thread, &args[i]) == 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECKF(args[i].bad == 0, "request %d saw %d wrong values", i, args[i].bad);
    }
    CHECK(em_config_int(base, EMC_THREADS) == 7);
    em_config_release(base);
}

/* The X-Ember-Config text: "NAME=value" items, only per-request names,
 * each once, values checked; the message names the variable. */
static bool request_fails(const em_config *base, const char *text, const char *needle) {
    em_config *c = NULL;
    em_status st = em_config_for_request(base, text, &c);
    bool ok = st == EM_ERR_INVALID && c == NULL && strstr(em_last_error(), needle);
    if (!ok) fprintf(stderr, "'%s': status %d, message '%s' (wanted '%s')\n", text, (int)st, em_last_error(), needle);
    em_config_release(c);
    return ok;
}

static void test_request_overrides(void) {
    char *env[] = {"EMBER_PRECISION=fast", "EMBER_THREADS=3", NULL};
    em_config *base, *c;
    REQUIRE(em_config_from_env(env, &base) == EM_OK);
    CHECK(em_config_per_request(EMC_PRECISION) && em_config_per_request(EMC_TEMPLATE_NOW));
    CHECK(!em_config_per_request(EMC_THREADS) && !em_config_per_request(EMC_HOST) &&
          !em_config_per_request(EMC_PORT) && !em_config_per_request(EMC_API_KEY) &&
          !em_config_per_request(EMC_DEVICE) && !em_config_per_request(EMC_CTX));

    REQUIRE(em_config_for_request(base, " EMBER_PRECISION = exact ,EMBER_TEMPLATE_NOW=1700000000 ", &c) == EM_OK);
    CHECK_STR(em_config_str(c, EMC_PRECISION), "exact");
    CHECK(em_config_source_of(c, EMC_PRECISION) == EM_CFG_SRC_REQUEST);
    CHECK(em_config_int(c, EMC_TEMPLATE_NOW) == 1700000000);
    CHECK(em_config_int(c, EMC_THREADS) == 3 && em_config_source_of(c, EMC_THREADS) == EM_CFG_SRC_ENV);
    CHECK_STR(em_config_str(base, EMC_PRECISION), "fast"); /* the base is untouched */
    CHECK(em_config_int(base, EMC_TEMPLATE_NOW) == 0);
    em_config_release(c);

    /* nothing to override: the base itself, one more reference */
    REQUIRE(em_config_for_request(base, NULL, &c) == EM_OK);
    CHECK(c == base);
    em_config_release(c);
    REQUIRE(em_config_for_request(base, "  ", &c) == EM_OK);
    CHECK(c == base);
    em_config_release(c);
    REQUIRE(em_config_for_request(base, "EMBER_PRECISION=auto,", &c) == EM_OK); /* a trailing comma */
    CHECK(em_config_source_of(c, EMC_PRECISION) == EM_CFG_SRC_REQUEST);
    em_config_release(c);

    CHECK(request_fails(base, "EMBER_THREADS=2", "EMBER_THREADS cannot be overridden per request"));
    CHECK(request_fails(base, "EMBER_API_KEY=x", "EMBER_API_KEY cannot be overridden"));
    CHECK(request_fails(base, "EMBER_PORT=1", "EMBER_PORT cannot be overridden"));
    CHECK(request_fails(base, "EMBER_PRECISON=exact", "did you mean EMBER_PRECISION"));
    CHECK(request_fails(base, "NOPE=1", "unknown configuration variable NOPE"));
    CHECK(request_fails(base, "EMBER_PRECISION=turbo", "EMBER_PRECISION=turbo is not one of auto|exact|fast"));
    CHECK(request_fails(base, "EMBER_PRECISION=", "EMBER_PRECISION= is not one of"));
    CHECK(request_fails(base, "EMBER_TEMPLATE_NOW=yesterday", "EMBER_TEMPLATE_NOW=yesterday is not an integer"));
    CHECK(request_fails(base, "EMBER_TEMPLATE_NOW=-5", "EMBER_TEMPLATE_NOW=-5 is outside"));
    CHECK(request_fails(base, "EMBER_PRECISION", "'EMBER_PRECISION' is not NAME=value"));
    CHECK(request_fails(base, "EMBER_PRECISION=exact,EMBER_PRECISION=fast", "EMBER_PRECISION is overridden twice"));
    CHECK(request_fails(base, "EMBER_PRECISION=exact,,EMBER_TEMPLATE_NOW=1", "empty item"));
    CHECK(request_fails(base, "=exact", "unknown configuration variable"));
    char many[1024] = "";
    for (int i = 0; i <= EM_CONFIG_REQUEST_MAX; i++) strcat(many, "EMBER_PRECISION=exact,");
    CHECK(request_fails(base, many, "more than 16 configuration overrides"));
    char *big = malloc(EM_CONFIG_REQUEST_MAX_BYTES + 64);
    REQUIRE(big);
    memset(big, 'A', EM_CONFIG_REQUEST_MAX_BYTES + 10);
    big[EM_CONFIG_REQUEST_MAX_BYTES + 10] = 0;
    CHECK(request_fails(base, big, "bytes, more than"));
    memcpy(big, "EMBER_TEMPLATE_NOW=", 19); /* a value as long as the limit allows */
    big[EM_CONFIG_REQUEST_MAX_BYTES] = 0;
    CHECK(request_fails(base, big, "is not an integer"));
    free(big);
    em_config_release(base);
}

static void test_global(void) {
    REQUIRE(em_config_init() == EM_OK);
    const em_config *g = em_config_global();
    REQUIRE(g != NULL);
    em_config_override ov = {"EMBER_PORT", "1234"};
    em_config *c;
    REQUIRE(em_config_with_overrides(g, &ov, 1, EM_CFG_SRC_FLAG, &c) == EM_OK);
    em_config_set_global(c);
    em_config_release(c);
    CHECK(em_config_int(em_config_global(), EMC_PORT) == 1234);
    CHECK(em_config_source_of(em_config_global(), EMC_PORT) == EM_CFG_SRC_FLAG);
    /* the snapshot handed out before is still readable */
    CHECK(em_config_source_of(g, EMC_PORT) != EM_CFG_SRC_FLAG);
}

int main(void) {
    test_defaults_and_env();
    test_bad_env_values_fall_back();
    test_flag_zero_beats_default();
    test_suggest();
    test_overrides_are_strict();
    test_concurrent_requests();
    test_request_overrides();
    test_global();
    return test_summary();
}
