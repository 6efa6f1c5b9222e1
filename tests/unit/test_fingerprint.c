/* test_fingerprint.c — SHA-256 vectors; config fingerprints stable under key
 * order, formatting and irrelevant fields, changed by architecture fields;
 * artifact fingerprints stable under tensor order and the writer's format
 * tag, changed by dtype, shape, quantization and weight-transform metadata. */
#include "test.h"
#include "st_write.h"

#include "base/sha256.h"
#include "model/fingerprint.h"

static void sha_hex(const char *msg, size_t n, char out[65]) {
    em_sha256 s;
    uint8_t d[32];
    em_sha256_init(&s);
    /* fed in uneven pieces to exercise the buffering */
    for (size_t i = 0; i < n;) {
        size_t take = n - i < 7 ? n - i : 7;
        em_sha256_update(&s, msg + i, take);
        i += take;
    }
    em_sha256_final(&s, d);
    em_sha256_hex(d, 64, out);
}

static void test_sha256(void) {
    char h[65];
    sha_hex("", 0, h);
    CHECK_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_hex("abc", 3, h);
    CHECK_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha_hex(two, strlen(two), h);
    CHECK_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    static char million[1000000];
    memset(million, 'a', sizeof million);
    sha_hex(million, sizeof million, h);
    CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static const char *cfg_a =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"rope_theta\": 10000.0,"
    " \"rms_norm_eps\": 1e-06, \"transformers_version\": \"4.51.0\", \"torch_dtype\": \"bfloat16\","
    " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}, \"use_cache\": true}";
/* same model: keys reordered, whitespace, number spelling, and ignored fields changed */
static const char *cfg_b =
    "{\n  \"rope_scaling\": {\"factor\": 2, \"type\": \"linear\"},\n  \"rms_norm_eps\": 0.000001,\n"
    "  \"num_hidden_layers\": 2, \"hidden_size\": 64, \"model_type\": \"llama\", \"rope_theta\": 1e4,\n"
    "  \"_name_or_path\": \"/home/me/llama\", \"dtype\": \"float32\", \"use_cache\": false,\n"
    "  \"transformers_version\": \"5.17.0\", \"attention_dropout\": 0.1, \"eos_token_id\": [1, 2]\n}";
static const char *cfg_c =
    "{\"model_type\": \"llama\", \"hidden_size\": 128, \"num_hidden_layers\": 2, \"rope_theta\": 10000.0,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}";
static const char *cfg_d = /* a nested field changes */
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"rope_theta\": 10000.0,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}}";

static void test_config_fingerprint(void) {
    char a[FP_HEX + 1], b[FP_HEX + 1], c[FP_HEX + 1], d[FP_HEX + 1];
    REQUIRE(fingerprint_config(cfg_a, strlen(cfg_a), "a", a) == EM_OK);
    REQUIRE(fingerprint_config(cfg_b, strlen(cfg_b), "b", b) == EM_OK);
    REQUIRE(fingerprint_config(cfg_c, strlen(cfg_c), "c", c) == EM_OK);
    REQUIRE(fingerprint_config(cfg_d, strlen(cfg_d), "d", d) == EM_OK);
    CHECK(strlen(a) == FP_HEX);
    CHECK_STR(a, b);
    CHECK(strcmp(a, c) != 0);
    CHECK(strcmp(a, d) != 0);
    char *canon;
    REQUIRE(fingerprint_config_canonical(cfg_b, strlen(cfg_b), "b", &canon) == EM_OK);
    CHECK_STR(canon, "{\"hidden_size\":64,\"model_type\":\"llama\",\"num_hidden_layers\":2,"
                     "\"rms_norm_eps\":9.9999999999999995e-7,\"rope_scaling\":{\"factor\":2,\"type\":\"linear\"},"
                     "\"rope_theta\":10000}");
    free(canon);
    CHECK(fingerprint_config("[1]", 3, "x.json", a) == EM_ERR_FORMAT);
    CHECK(strstr(em_last_error(), "x.json") != NULL);
}

static void artifact_fp(const char *header, const char *config, char out[FP_HEX + 1]) {
    char dir[256];
    REQUIRE(tw_tempdir(dir, sizeof dir, "fp") == 0);
    REQUIRE(tw_safetensors(dir, "model.safetensors", header, 64) == 0);
    st_set *st;
    REQUIRE(st_open(dir, &st) == EM_OK);
    REQUIRE(fingerprint_artifact(st, config, config ? strlen(config) : 0, out) == EM_OK);
    st_close(st);
    tw_rmtree(dir);
}

static void test_artifact_fingerprint(void) {
    const char *h1 = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
                     "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]}}";
    const char *h2 = "{\"b.weight\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
                     "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[32,64]},"
                     "\"__metadata__\":{\"format\":\"mlx\"}}";
    const char *h_shape = "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[4,2],\"data_offsets\":[0,32]},"
                          "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]}}";
    const char *h_dtype = "{\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[4,4],\"data_offsets\":[0,32]},"
                          "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]}}";
    const char *h_meta = "{\"__metadata__\":{\"format\":\"pt\",\"ember.transform\":\"hadamard-64\"},"
                         "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
                         "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[32,64]}}";
    const char *quant = "{\"model_type\":\"llama\",\"quantization\":{\"group_size\":64,\"bits\":4}}";
    const char *quant8 = "{\"model_type\":\"llama\",\"quantization\":{\"group_size\":64,\"bits\":8}}";
    char f1[FP_HEX + 1], f2[FP_HEX + 1], f3[FP_HEX + 1], f4[FP_HEX + 1], f5[FP_HEX + 1], f6[FP_HEX + 1],
        f7[FP_HEX + 1], f8[FP_HEX + 1];
    artifact_fp(h1, cfg_a, f1);
    artifact_fp(h2, cfg_b, f2); /* other tensor order, other writer, config differences outside quantization */
    artifact_fp(h_shape, cfg_a, f3);
    artifact_fp(h_dtype, cfg_a, f4);
    artifact_fp(h_meta, cfg_a, f5);
    artifact_fp(h1, quant, f6);
    artifact_fp(h1, quant8, f7);
    artifact_fp(h1, NULL, f8);
    CHECK_STR(f1, f2);
    CHECK_STR(f1, f8);
    CHECK(strcmp(f1, f3) && strcmp(f1, f4) && strcmp(f1, f5) && strcmp(f1, f6) && strcmp(f6, f7));
}

int main(void) {
    test_sha256();
    test_config_fingerprint();
    test_artifact_fingerprint();
    return test_summary();
}
