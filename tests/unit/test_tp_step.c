/* test_tp_step.c — the step descriptors rank 0 of a multi-process
 * tensor-parallel group sends the others: what is encoded is read back
 * unchanged, and the receiving side refuses every malformed descriptor
 * (each field out of range, every truncation, random corruption) without
 * reading outside it. */
#include "test.h"

#include "backend/backend.h"
#include "model/tp_step.h"

#include <stdint.h>

static void roundtrip_and_refusals(void) {
    em_backend *be;
    REQUIRE(cpu_backend_create(1, &be) == EM_OK);
    kv_cache *kv;
    REQUIRE(kv_cache_create(be, 2, 1, 4, 128, 3, 0, &kv) == EM_OK);
    int a, b;
    REQUIRE(kv_seq_alloc(kv, &a) == EM_OK && kv_seq_alloc(kv, &b) == EM_OK);
    REQUIRE(kv_seq_reserve(kv, a, 70) == EM_OK); /* 3 blocks of 32 */
    REQUIRE(kv_seq_reserve(kv, b, 5) == EM_OK);
    int32_t ta[4] = {7, 8, 9, 10}, tb[1] = {99};
    em_span spans[2] = {{a, ta, 4, LOGITS_ALL, SPAN_MATH_MODEL}, {b, tb, 1, LOGITS_LAST, SPAN_MATH_MODEL}};
    em_batch batch = {.spans = spans, .n_spans = 2};
    int len0[2] = {66, 4};
    size_t words = tp_step_encode(NULL, &batch, len0, kv);
    CHECK(words == TP_STEP_HEADER + (5 + 3 + 4) + (5 + 1 + 1));
    int32_t *w = calloc(words + 8, sizeof *w);
    REQUIRE(w);
    CHECK(tp_step_encode(w, &batch, len0, kv) == words);
    tp_step_limits lim = {kv->max_seqs, kv->max_ctx, kv->block_size, kv->max_blocks, 100};
    int n_spans = 0, tokens = 0;
    REQUIRE(tp_step_check(w, words, &lim, &n_spans, &tokens) == EM_OK);
    CHECK(n_spans == 2 && tokens == 5);
    tp_step_span sp;
    size_t at = tp_step_span_at(w, TP_STEP_HEADER, &sp);
    CHECK(sp.seq == a && sp.n == 4 && sp.len0 == 66 && sp.logits == LOGITS_ALL && sp.n_blocks == 3);
    for (int i = 0; i < 3; i++) CHECK(sp.blocks[i] == kv->seqs[a].blocks[i]);
    CHECK(!memcmp(sp.tokens, ta, sizeof ta));
    at = tp_step_span_at(w, at, &sp);
    CHECK(sp.seq == b && sp.n == 1 && sp.len0 == 4 && sp.logits == LOGITS_LAST && sp.n_blocks == 1 && sp.tokens[0] == 99);
    CHECK(at == words);

    /* one field at a time out of range */
    struct { size_t word; int32_t value; const char *why; } bad[] = {
        {0, 0x12345678, "bad header"},
        {1, 3, "bad counts"},
        {2, 0, "bad counts"},
        {2, 3, "cut short"},
        {3, 6, "token count mismatch"},
        {4, 3, "sequence slot"},          /* seq = max_seqs */
        {4, -1, "sequence slot"},
        {5, 0, "positions"},              /* n = 0 */
        {6, 125, "positions"},            /* 125 + 4 > 128 */
        {6, -2, "positions"},
        {7, 5, "logits mode"},
        {8, 2, "block table"},            /* 66 + 4 positions need 3 blocks */
        {8, 5, "block table"},            /* more than a context holds */
        {9, kv->max_blocks, "block id"},
        {10, -7, "block id"},
        {12, 100, "token id"},            /* = vocabulary */
        {15, -1, "token id"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int32_t keep = w[bad[k].word];
        w[bad[k].word] = bad[k].value;
        em_status s = tp_step_check(w, words, &lim, &n_spans, &tokens);
        CHECKF(s == EM_ERR_FORMAT && strstr(em_last_error(), bad[k].why), "word %zu = %d: %s", bad[k].word,
               bad[k].value, s == EM_OK ? "accepted" : em_last_error());
        w[bad[k].word] = keep;
    }
    /* every truncation, and trailing words */
    for (size_t n = 0; n < words; n++) CHECKF(tp_step_check(w, n, &lim, &n_spans, &tokens) == EM_ERR_FORMAT, "%zu words", n);
    CHECK(tp_step_check(w, words + 1, &lim, &n_spans, &tokens) == EM_ERR_FORMAT);
    /* random corruption never reads outside the words given (ASan) */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 20000; it++) {
        int32_t *c = malloc(words * sizeof *c);
        REQUIRE(c);
        memcpy(c, w, words * sizeof *c);
        for (int f = 0; f < 2; f++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            c[x % words] = (int32_t)(x >> 32) % 300 - 20;
        }
        size_t n = it % 7 == 0 ? (size_t)(x >> 40) % (words + 1) : words;
        if (tp_step_check(c, n, &lim, &n_spans, &tokens) == EM_OK && tokens < 0) {
            CHECK(n == TP_STEP_HEADER); /* a stop */
        } else if (tp_step_check(c, n, &lim, &n_spans, &tokens) == EM_OK) {
            /* accepted: every span lies inside the limits */
            size_t p = TP_STEP_HEADER;
            for (int s = 0; s < n_spans; s++) {
                p = tp_step_span_at(c, p, &sp);
                CHECK(sp.seq >= 0 && sp.seq < lim.max_seqs && sp.len0 + sp.n <= lim.max_ctx);
                CHECK((int64_t)sp.n_blocks * lim.block_size >= sp.len0 + sp.n);
            }
            CHECK(p == n);
        }
        free(c);
    }
    /* the stop descriptor */
    int32_t stop[TP_STEP_HEADER];
    tp_step_stop(stop);
    CHECK(tp_step_check(stop, TP_STEP_HEADER, &lim, &n_spans, &tokens) == EM_OK && tokens == -1);
    free(w);
    kv_cache_free(kv);
    em_backend_free(be);
}

/* The ranks of a group agree on the fewest blocks: the cache shrinks
 * before use, never below one full context, and never once in use. */
static void limit_blocks(void) {
    em_backend *be;
    REQUIRE(cpu_backend_create(1, &be) == EM_OK);
    kv_cache *kv;
    REQUIRE(kv_cache_create(be, 1, 1, 4, 64, 4, 0, &kv) == EM_OK);
    CHECK(kv->max_blocks == 8);
    CHECK(kv_cache_limit_blocks(kv, 1) == EM_ERR_LIMIT);
    REQUIRE(kv_cache_limit_blocks(kv, 3) == EM_OK);
    CHECK(kv->max_blocks == 3);
    int s;
    REQUIRE(kv_seq_alloc(kv, &s) == EM_OK);
    REQUIRE(kv_seq_reserve(kv, s, 64) == EM_OK);
    for (int i = 0; i < kv->seqs[s].n_blocks; i++) CHECK(kv->seqs[s].blocks[i] < 3);
    int s2;
    REQUIRE(kv_seq_alloc(kv, &s2) == EM_OK);
    CHECK(kv_seq_reserve(kv, s2, 64) == EM_ERR_LIMIT); /* only one block left */
    CHECK(kv_cache_limit_blocks(kv, 2) == EM_ERR_INTERNAL);
    kv_cache_free(kv);
    em_backend_free(be);
}

int main(void) {
    roundtrip_and_refusals();
    limit_blocks();
    return test_summary();
}
