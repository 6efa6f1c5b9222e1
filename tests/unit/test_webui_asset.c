/* test_webui_asset.c — the chat page compiled into the binary is the file in
 * src/server/webui/, whole, and self-contained (no external fetches). */
#include "server/webui.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int contains(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0) return 1;
    return 0;
}

int main(void) {
    const char *page = (const char *)webui_index_html;
    size_t n = webui_index_html_len;
    REQUIRE(n > 1000);
    CHECK(page[n] == '\0'); /* usable as a C string */
    CHECK(strlen(page) == n);
    CHECK(strncmp(page, "<!doctype html>", 15) == 0);
    CHECK(contains(page, n, "/v1/chat/completions"));
    CHECK(contains(page, n, "/v1/models"));
    CHECK(contains(page, n, "</html>"));
    /* Self-contained: nothing is loaded from another origin. */
    CHECK(!contains(page, n, "http://"));
    CHECK(!contains(page, n, "https://"));
    CHECK(!contains(page, n, "<script src"));
    CHECK(!contains(page, n, "<link "));

    /* Byte-for-byte the source file. */
    char path[4096];
    snprintf(path, sizeof path, "%s/src/server/webui/index.html", test_src_dir());
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    char *buf = malloc(n + 2);
    REQUIRE(buf != NULL);
    size_t got = fread(buf, 1, n + 1, f);
    fclose(f);
    CHECK(got == n);
    CHECK(got == n && memcmp(buf, page, n) == 0);
    free(buf);
    return test_summary();
}
