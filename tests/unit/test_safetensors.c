/* safetensors parser: well-formed files parse; every kind of lying header is
 * a clear error naming the file or tensor, never a crash. */
#include "test.h"

#include "io/safetensors.h"

#include <stdint.h>

static size_t build(uint8_t *buf, const char *header, size_t data_len) {
    size_t h = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(h >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, 0x11, data_len);
    return 8 + h + data_len;
}

static em_status parse(const char *header, size_t data_len, st_header *out) {
    static uint8_t buf[1 << 16];
    size_t n = build(buf, header, data_len);
    return st_parse(buf, n, "t.safetensors", out);
}

static void expect_error(const char *header, size_t data_len, const char *needle) {
    st_header h;
    em_status s = parse(header, data_len, &h);
    CHECKF(s != EM_OK, "accepted: %s", header);
    if (s != EM_OK) CHECKF(strstr(em_last_error(), needle) != NULL, "message '%s' lacks '%s'", em_last_error(), needle);
    else st_header_free(&h);
}

int main(void) {
    st_header h;
    REQUIRE(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                  "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                  "\"__metadata__\":{\"format\":\"pt\"}}", 32, &h) == EM_OK);
    CHECK(h.n_tensors == 2 && h.n_metadata == 1);
    CHECK(h.tensors[0].shape[1] == 3 && h.tensors[0].nbytes == 24);
    CHECK(!strcmp(h.metadata[0].value, "pt"));
    st_header_free(&h);
    /* scalar and empty tensors are legal */
    REQUIRE(parse("{\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
                  "\"e\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[8,8]}}", 8, &h) == EM_OK);
    st_header_free(&h);

    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 20, "outside the data area");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24, "needs 24");
    expect_error("{\"a\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, "overflow");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "outside");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap");
    expect_error("{\"a\":1}", 0, "not an object");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{}}", 4, "JSON");
    expect_error("[1,2]", 0, "not a JSON object");
    expect_error("{\"__metadata__\":{\"k\":5}}", 0, "not a string");
    expect_error("{\"a\xff\":{}}", 0, "JSON");

    /* header length larger than the file */
    uint8_t buf[64] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK(st_parse(buf, 10, "t", &h) == EM_ERR_FORMAT && strstr(em_last_error(), "exceeds"));
    CHECK(st_parse(buf, 4, "t", &h) == EM_ERR_FORMAT && strstr(em_last_error(), "too short"));

    /* a directory without safetensors / a missing path */
    st_set *set;
    CHECK(st_open("/nonexistent/ember", &set) == EM_ERR_IO);
    CHECK(st_open("/proc/self", &set) == EM_ERR_IO && strstr(em_last_error(), "no .safetensors"));
    return test_summary();
}
