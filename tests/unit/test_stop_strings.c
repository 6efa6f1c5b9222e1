/* Stop-string matcher: matches across piece boundaries, holds back only a
 * possible prefix, drops the stop string and everything after it. */
#include "test.h"

#include "engine/stop_strings.h"

#include <stdbool.h>

/* Feeds pieces one by one; returns everything released, sets *hit. */
static int last_match; /* the matcher's `match` after the last run */

static void run(const char *const *stops, size_t n_stops, const char *const *pieces, size_t n, char *out,
                bool *hit, size_t *max_held) {
    stop_matcher m;
    stop_matcher_init(&m, stops, n_stops);
    out[0] = 0;
    *hit = false;
    *max_held = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e;
        size_t el;
        bool matched;
        REQUIRE(stop_matcher_feed(&m, pieces[i], strlen(pieces[i]), &e, &el, &matched) == EM_OK);
        strncat(out, e, el);
        if (m.held_len > *max_held) *max_held = m.held_len;
        if (matched) *hit = true;
    }
    const char *e;
    size_t el;
    REQUIRE(stop_matcher_flush(&m, &e, &el) == EM_OK);
    strncat(out, e, el);
    last_match = m.match;
    stop_matcher_free(&m);
}

int main(void) {
    char out[256];
    bool hit;
    size_t held;
    const char *stops[] = {"END", "\n\n"};

    const char *a[] = {"Hello E", "N", "D world"};
    run(stops, 2, a, 3, out, &hit, &held);
    CHECK(hit);
    CHECK_STR(out, "Hello ");
    CHECK(last_match == 0);

    /* A false start is released once it can no longer match. */
    const char *b[] = {"an E", "NTRY", "."};
    run(stops, 2, b, 3, out, &hit, &held);
    CHECK(!hit);
    CHECK_STR(out, "an ENTRY.");
    CHECK(last_match == -1);
    CHECK(held <= 2); /* "E" held, never more than len("END")-1 */

    /* Earliest of two stop strings wins; text before it survives. */
    const char *c[] = {"x\n", "\nyEND"};
    run(stops, 2, c, 2, out, &hit, &held);
    CHECK(hit);
    CHECK_STR(out, "x");
    CHECK(last_match == 1); /* which string matched is reported (Anthropic's stop_sequence) */

    /* No stops: everything passes through with nothing held. */
    const char *d[] = {"abc", "def"};
    run(NULL, 0, d, 2, out, &hit, &held);
    CHECK(!hit);
    CHECK_STR(out, "abcdef");
    CHECK(held == 0);

    /* A trailing possible prefix is released at the end. */
    const char *e[] = {"the EN"};
    run(stops, 2, e, 1, out, &hit, &held);
    CHECK(!hit);
    CHECK_STR(out, "the EN");

    /* Stop string spread over many single-byte pieces. */
    const char *f[] = {"a", "<", "/", "s", ">", "b"};
    const char *stops2[] = {"</s>"};
    run(stops2, 1, f, 6, out, &hit, &held);
    CHECK(hit);
    CHECK_STR(out, "a");

    /* Empty stop strings are ignored. */
    const char *stops3[] = {""};
    const char *g[] = {"xyz"};
    run(stops3, 1, g, 1, out, &hit, &held);
    CHECK(!hit);
    CHECK_STR(out, "xyz");
    return test_summary();
}
