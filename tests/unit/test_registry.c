/* test_registry.c — profiles and implementation selection: built-in and
 * file profiles, exact matches, and every way a profile can fail to be
 * realised (missing implementation, other graph / loop / specialization,
 * unbindable weights, wrong family), malformed profile files, ambiguity,
 * and em_model_open refusing a model whose profile does not fit. */
#include "test.h"
#include "st_write.h"

#include "base/config.h"
#include "model/registry.h"

static char model_dir[512];

static em_status identify(const char *profiles, model_identity *id) {
    model_config cfg;
    REQUIRE(model_config_load(model_dir, &cfg) == EM_OK);
    st_set *st;
    REQUIRE(st_open(model_dir, &st) == EM_OK);
    em_status s = registry_identify(model_dir, &cfg, st, profiles, id);
    st_close(st);
    return s;
}

/* Writes one profile file into a fresh directory (path in dir). */
static void one_profile(char *dir, size_t cap, const char *name, const char *json) {
    REQUIRE(tw_tempdir(dir, cap, "prof") == 0);
    REQUIRE(tw_text(dir, name, json) == 0);
}

static void expect_fail(const char *json, const char *needle) {
    char dir[256];
    model_identity id;
    one_profile(dir, sizeof dir, "p.json", json);
    em_status s = identify(dir, &id);
    CHECKF(s != EM_OK && strstr(em_last_error(), needle), "[%s] got: %s", needle, s ? em_last_error() : "success");
    tw_rmtree(dir);
}

static void test_builtin(model_identity *base) {
    REQUIRE(identify(NULL, base) == EM_OK);
    CHECK_STR(base->impl->name, "dense");
    CHECK(strstr(base->why, "llama-family (built-in) covers architecture LlamaForCausalLM") != NULL);
    CHECK(strlen(base->config_fp) == FP_HEX && strlen(base->artifact_fp) == FP_HEX);
}

static void test_exact_profile(const model_identity *base) {
    char json[512], dir[256];
    snprintf(json, sizeof json,
             "{\"name\": \"pinned\", \"match\": {\"artifact\": \"%s\", \"config\": \"%s\"}, \"graph\": \"dense\","
             " \"implementation\": \"dense\"}", base->artifact_fp, base->config_fp);
    one_profile(dir, sizeof dir, "pinned.json", json);
    model_identity id;
    REQUIRE(identify(dir, &id) == EM_OK);
    CHECK(strstr(id.why, "profile pinned") && strstr(id.why, "exact artifact"));
    tw_rmtree(dir);

    /* the same profile naming an implementation the build lacks */
    snprintf(json, sizeof json,
             "{\"name\": \"pinned\", \"match\": {\"artifact\": \"%s\", \"config\": \"%s\"}, \"graph\": \"dense\","
             " \"implementation\": \"dense-avx9\"}", base->artifact_fp, base->config_fp);
    expect_fail(json, "declares implementation dense-avx9, which this build does not have");
    snprintf(json, sizeof json,
             "{\"name\": \"pinned\", \"match\": {\"artifact\": \"%s\", \"config\": \"%s\"}, \"graph\": \"dense\","
             " \"loop\": \"speculative-mtp\", \"implementation\": \"dense\"}", base->artifact_fp, base->config_fp);
    expect_fail(json, "cannot run it: its generation loop is autoregressive, the profile asks for speculative-mtp");
    /* an exact profile for some other artifact does not match: the built-in one applies */
    snprintf(json, sizeof json,
             "{\"name\": \"other\", \"match\": {\"artifact\": \"0000000000000000\", \"config\": \"%s\"},"
             " \"graph\": \"dense\", \"implementation\": \"dense-avx9\"}", base->config_fp);
    one_profile(dir, sizeof dir, "other.json", json);
    REQUIRE(identify(dir, &id) == EM_OK);
    CHECK(strstr(id.why, "llama-family") != NULL);
    tw_rmtree(dir);
}

static void test_architecture_profiles(void) {
    expect_fail("{\"name\": \"x\", \"match\": {\"architectures\": [\"LlamaForCausalLM\"]}, \"graph\": \"moe\"}",
                "asks for graph moe, which this build does not have");
    expect_fail("{\"name\": \"x\", \"match\": {\"architectures\": [\"LlamaForCausalLM\"]}, \"graph\": \"dense\","
                " \"specialization\": \"int8-kv\"}",
                "no implementation can run LlamaForCausalLM: dense: it has no specialization int8-kv");
    char dir[256];
    REQUIRE(tw_tempdir(dir, sizeof dir, "prof") == 0);
    const char *p = "{\"name\": \"%s\", \"match\": {\"architectures\": [\"LlamaForCausalLM\"]}, \"graph\": \"dense\"}";
    char a[256], b[256];
    snprintf(a, sizeof a, p, "one");
    snprintf(b, sizeof b, p, "two");
    REQUIRE(tw_text(dir, "a.json", a) == 0 && tw_text(dir, "b.json", b) == 0);
    model_identity id;
    CHECK(identify(dir, &id) == EM_ERR_INVALID && strstr(em_last_error(), "both match LlamaForCausalLM"));
    tw_rmtree(dir);
    /* a file profile for the architecture wins over the built-in one */
    one_profile(dir, sizeof dir, "mine.json", a);
    REQUIRE(identify(dir, &id) == EM_OK);
    CHECK(strstr(id.why, "profile one") != NULL);
    tw_rmtree(dir);
}

static void test_malformed(void) {
    expect_fail("{\"name\": \"x\", \"match\": {\"architectures\": [\"LlamaForCausalLM\"]}, \"graph\": \"dense\","
                " \"implementation\": \"dense\"}", "p.json: profile field 'implementation' is only allowed with an exact match");
    expect_fail("{\"name\": \"x\", \"match\": {\"architectures\": [\"LlamaForCausalLM\"]}}", "p.json: profile field 'graph' is missing");
    expect_fail("{\"name\": \"x\", \"match\": {\"artifact\": \"12ab\", \"config\": \"0000000000000000\"}, \"graph\": \"dense\"}",
                "p.json: 'match.artifact' must be a fingerprint");
    expect_fail("{\"name\": \"x\", \"match\": {\"architectures\": []}, \"graph\": \"dense\"}", "'match.architectures' must be a list");
    expect_fail("{\"name\": \"x\", \"match\": {\"architectures\": [\"A\"]}, \"graph\": \"dense\", \"grpah\": 1}",
                "unknown profile field 'grpah'");
    expect_fail("{\"name\": \"x\", \"match\": {\"architectures\": [\"A\"]}, \"graph\": 3}", "'graph' must be a non-empty string");
    expect_fail("{\"name\": \"x\", ", "p.json: invalid JSON");
    model_identity id;
    CHECK(identify("/nonexistent/profiles", &id) == EM_ERR_IO);
}

/* Selection on synthetic queries: weights the loader cannot bind, and a
 * profile that sends a model to a graph of another family. */
static void test_synthetic(void) {
    profile_set *ps;
    REQUIRE(profile_set_load(NULL, &ps) == EM_OK);
    model_config cfg = {0};
    snprintf(cfg.architecture, sizeof cfg.architecture, "Qwen3ForCausalLM");
    snprintf(cfg.model_type, sizeof cfg.model_type, "qwen3");
    registry_query q = {&cfg, "0123456789abcdef", "0123456789abcdef", IMPL_W_FLOAT | IMPL_W_AFFINE};
    registry_choice c;
    const em_impl *dense = registry_find("dense");
    REQUIRE(dense != NULL);
    if (!(dense->weight_formats & IMPL_W_AFFINE)) {
        CHECK(registry_select(&q, ps, &c) == EM_ERR_UNSUPPORTED);
        CHECK(strstr(em_last_error(), "cannot bind affine-quantized weights") != NULL);
    }
    q.weight_formats = IMPL_W_FLOAT;
    cfg.family = FAMILY_QWEN3_5; /* a profile mapping a hybrid model onto the dense graph */
    CHECK(registry_select(&q, ps, &c) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "graph dense computes the dense family, the model (qwen3) is qwen3_5") != NULL);
    cfg.family = FAMILY_DENSE;
    REQUIRE(registry_select(&q, ps, &c) == EM_OK);
    CHECK(c.impl == dense);
    snprintf(cfg.architecture, sizeof cfg.architecture, "GPT2LMHeadModel");
    CHECK(registry_select(&q, ps, &c) == EM_ERR_UNSUPPORTED && strstr(em_last_error(), "no profile covers architecture GPT2LMHeadModel"));
    profile_set_free(ps);
}

/* em_model_open validates the profile too: a model whose profile names a
 * missing implementation does not open. */
static void test_model_open(const model_identity *base) {
    char json[512], dir[256];
    snprintf(json, sizeof json,
             "{\"name\": \"pinned\", \"match\": {\"artifact\": \"%s\", \"config\": \"%s\"}, \"graph\": \"dense\","
             " \"implementation\": \"nope\"}", base->artifact_fp, base->config_fp);
    one_profile(dir, sizeof dir, "pinned.json", json);
    em_config_override ov = {"EMBER_PROFILES_DIR", dir};
    em_config *cfg;
    REQUIRE(em_config_with_overrides(em_config_global(), &ov, 1, EM_CFG_SRC_FLAG, &cfg) == EM_OK);
    em_open_options o = {.n_threads = 1, .max_sequences = 1, .config = cfg};
    em_model *m = NULL;
    CHECK(em_model_open(model_dir, &o, &m) == EM_ERR_UNSUPPORTED && m == NULL);
    CHECK(strstr(em_last_error(), "declares implementation nope") != NULL);
    em_config_release(cfg);
    tw_rmtree(dir);
    o.config = NULL;
    REQUIRE(em_model_open(model_dir, &o, &m) == EM_OK);
    CHECK_STR(m->identity.artifact_fp, base->artifact_fp);
    em_model_free(m);
}

int main(void) {
    snprintf(model_dir, sizeof model_dir, "%s/tests/golden/dense/llama_gqa_tied", test_src_dir());
    model_identity base;
    test_builtin(&base);
    test_exact_profile(&base);
    test_architecture_profiles();
    test_malformed();
    test_synthetic();
    test_model_open(&base);
    return test_summary();
}
