/* em_json_loadb (base/json_read.h) against jansson's json_loadb: the same
 * inputs accepted, with json_equal values, and the same rejected — on
 * hand-picked edges (escapes, surrogates, numbers, nesting depth, UTF-8,
 * duplicates, top-level scalars) and on 200,000 random strings of JSON's
 * pieces. */
#include "test.h"

#include "base/json_read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mismatches;

static void same(const char *s, size_t n, size_t flags) {
    json_error_t e1, e2;
    json_t *a = json_loadb(s, n, flags, &e1), *b = em_json_loadb(s, n, flags, &e2);
    bool ok = (a == NULL) == (b == NULL) && (!a || json_equal(a, b));
    if (!ok && mismatches++ < 10)
        fprintf(stderr, "mismatch (flags %zu) on [%.*s]: jansson %s, ours %s\n", flags, (int)n, s, a ? "ok" : e1.text,
                b ? "ok" : e2.text);
    CHECK(ok);
    if (!b) CHECK(e2.text[0] != 0); /* a failure says why */
    json_decref(a);
    json_decref(b);
}

static void both(const char *s) {
    for (size_t f = 0; f < 4; f++) same(s, strlen(s), (f & 1 ? JSON_REJECT_DUPLICATES : 0) | (f & 2 ? JSON_DECODE_ANY : 0));
}

static void nested(int depth, const char *inner) {
    size_t n = (size_t)depth * 2 + strlen(inner);
    char *s = malloc(n + 1);
    memset(s, '[', (size_t)depth);
    strcpy(s + depth, inner);
    memset(s + depth + strlen(inner), ']', (size_t)depth);
    s[n] = 0;
    both(s);
    free(s);
}

static const char *const pieces[] = {
    "{", "}", "[", "]", "\"", "\"", "\"", ":", ",", ",", " ", "\n", "\t", "a", "b", "key", "0", "1", "9", "-", ".",
    "e", "E", "+", "12345678901234567890", "1e400", "1e-400", "true", "false", "null", "nul", "\\", "\\n", "\\\"",
    "\\u00e9", "\\ud83d", "\\ude00", "\\u0000", "\\u12", "\\x", "\xc3\xa9", "\xc3", "\xa9", "\xff", "\xed\xa0\x80",
    "\x01", "\x7f", "\xf0\x9f\x98\x80", "/", "\\/",
};

int main(void) {
    const char *cases[] = {
        "{}", "[]", "", " ", "{\"a\":1}", "{\"a\":1,\"a\":2}", "{\"a\":1,}", "[1,]", "[,1]", "{\"a\" 1}", "{1:2}",
        "[1 2]", "[01]", "[-0]", "[-]", "[1.]", "[.5]", "[1e]", "[1e+]", "[1.5e-3]", "[9223372036854775807]",
        "[9223372036854775808]", "[-9223372036854775808]", "[-9223372036854775809]", "[1e309]", "[-1e309]",
        "[1e-400]", "[true]", "[truex]", "[tru]", "[nul]", "[null]", "[false, true, null]", "1", "\"s\"", "true",
        "{\"a\":[1,{\"b\":\"c\"}]} ", "{\"a\":1} x", "[\"\\u00e9\\ud83d\\ude00\"]", "[\"\\ud83d\"]", "[\"\\ude00\"]",
        "[\"\\ud83d\\u0041\"]", "[\"\\u0000\"]", "[\"a\\u0000b\"]", "[\"\\u00g0\"]", "[\"\\q\"]", "[\"\t\"]",
        "[\"\x7f\"]", "[\"\xc3\xa9\"]", "[\"\xc3\"]", "[\"\xed\xa0\x80\"]", "[\"\xf4\x90\x80\x80\"]",
        "{\"\\u0061\":1,\"a\":2}", "{\"\":0}", "[\"unterminated", "[\"esc\\", "\xef\xbb\xbf{}", "[1]\n\r\t ",
        "{\"k\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", "[-01]", "[0.0e0]", "[1E2]", "[2e-2]", "[\"\\uD83D\\uDE00\"]",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) both(cases[i]);
    same("[1]\0", 4, 0); /* a NUL byte after the value */
    same("[\"a\0b\"]", 7, 0);
    same("[1\0]", 4, 0); /* jansson loses a NUL right after a number or a literal */
    same("[1\0\0]", 5, 0);
    same("true\0", 5, JSON_DECODE_ANY);
    same("[\"a\"\0]", 6, 0);
    for (int d = 2045; d <= 2050; d++) nested(d, "");
    for (int d = 2045; d <= 2050; d++) nested(d, "1");
    /* random strings of JSON's pieces */
    uint64_t st = 0x9e3779b97f4a7c15ull;
    char buf[512];
    for (int it = 0; it < 200000; it++) {
        size_t n = 0;
        int k = 1 + (int)((st >> 33) % 24);
        for (int j = 0; j < k; j++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const char *p = pieces[(st >> 33) % (sizeof pieces / sizeof *pieces)];
            size_t l = strlen(p);
            if (n + l >= sizeof buf) break;
            memcpy(buf + n, p, l);
            n += l;
        }
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        same(buf, n, ((st >> 40) & 1 ? JSON_REJECT_DUPLICATES : 0) | ((st >> 41) & 1 ? JSON_DECODE_ANY : 0));
    }
    return test_summary();
}
