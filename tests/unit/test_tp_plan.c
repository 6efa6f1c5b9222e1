/* test_tp_plan.c — the tensor-parallel sharding plan (which rows, columns
 * and heads each rank reads) and the strided gather of column slices. No
 * GPU needed. */
#include "test.h"

#include "base/status.h"
#include "model/tp_plan.h"
#include "model/weights_shard.h"

#include <stdint.h>

/* Llama-3.1-8B: 32 heads, 8 KV heads, intermediate 14336, vocabulary 128256. */
static void llama8b_split(void) {
    for (int world = 1; world <= 8; world *= 2) {
        int64_t covered_ff = 0, covered_vocab = 0;
        int covered_q = 0, covered_kv = 0;
        for (int r = 0; r < world; r++) {
            tp_shard s;
            REQUIRE(tp_plan_make(32, 8, 14336, 128256, r, world, &s) == EM_OK);
            CHECK(s.n_q_heads == 32 / world);
            CHECK(s.q_head0 == r * (32 / world));
            CHECK(s.n_kv_heads == 8 / world);
            CHECK(s.kv_head0 == r * (8 / world));
            CHECK(!s.kv_replicated);
            CHECK(s.ff0 == covered_ff);
            CHECK(s.vocab0 == covered_vocab);
            CHECK(s.vocab_pad == 128256 / world);
            covered_ff += s.n_ff;
            covered_vocab += s.n_vocab;
            covered_q += s.n_q_heads;
            covered_kv += s.n_kv_heads;
            /* query heads of the rank read exactly its KV heads (GQA ratio) */
            int group = 32 / 8;
            CHECK(s.q_head0 / group == s.kv_head0);
            CHECK((s.q_head0 + s.n_q_heads - 1) / group == s.kv_head0 + s.n_kv_heads - 1);
        }
        CHECK(covered_ff == 14336);
        CHECK(covered_vocab == 128256);
        CHECK(covered_q == 32);
        CHECK(covered_kv == 8);
    }
}

/* Fewer KV heads than ranks: each rank holds the one KV head its query
 * heads read. */
static void kv_replicated(void) {
    tp_shard s;
    /* 32 heads, 2 KV heads (groups of 16), 4 ranks of 8 heads */
    int want[4] = {0, 0, 1, 1};
    for (int r = 0; r < 4; r++) {
        REQUIRE(tp_plan_make(32, 2, 256, 1000, r, 4, &s) == EM_OK);
        CHECK(s.n_kv_heads == 1);
        CHECK(s.kv_replicated);
        CHECKF(s.kv_head0 == want[r], "rank %d reads KV head %d", r, s.kv_head0);
    }
    /* multi-query attention: every rank holds the single KV head */
    for (int r = 0; r < 2; r++) {
        REQUIRE(tp_plan_make(4, 1, 256, 384, r, 2, &s) == EM_OK);
        CHECK(s.n_kv_heads == 1 && s.kv_head0 == 0 && s.kv_replicated);
        CHECK(s.n_q_heads == 2 && s.q_head0 == 2 * r);
    }
}

/* A vocabulary the ranks do not divide: every rank holds ceil(V/N) rows,
 * the last one reads fewer (the rest is padding). */
static void vocab_padding(void) {
    tp_shard s;
    int64_t sum = 0;
    for (int r = 0; r < 4; r++) {
        REQUIRE(tp_plan_make(8, 8, 64, 1001, r, 4, &s) == EM_OK);
        CHECK(s.vocab_pad == 251);
        CHECK(s.vocab0 == 251 * r);
        CHECK(s.n_vocab == (r < 3 ? 251 : 1001 - 753));
        sum += s.n_vocab;
    }
    CHECK(sum == 1001);
    /* more ranks than vocabulary rows left: an empty tail rank */
    REQUIRE(tp_plan_make(8, 8, 64, 5, 3, 4, &s) == EM_OK);
    CHECK(s.vocab_pad == 2 && s.vocab0 == 6 && s.n_vocab == 0);
}

static void refusals(void) {
    tp_shard s;
    CHECK(tp_plan_make(3, 3, 192, 300, 0, 2, &s) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "3 attention heads are not divisible by 2") != NULL);
    CHECK(tp_plan_make(4, 2, 250, 300, 0, 4, &s) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "intermediate size 250") != NULL);
    /* 24 heads, 6 KV heads over 4 ranks: a rank's 6 heads straddle KV heads */
    CHECK(tp_plan_make(24, 6, 256, 300, 0, 4, &s) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "6 KV heads") != NULL);
    CHECK(tp_plan_make(4, 2, 256, 300, 2, 2, &s) == EM_ERR_INVALID);
    CHECK(tp_plan_make(4, 2, 256, 300, -1, 2, &s) == EM_ERR_INVALID);
    CHECK(tp_plan_make(4, 3, 256, 300, 0, 2, &s) == EM_ERR_INVALID); /* heads not a multiple of KV heads */
    CHECK(tp_plan_make(4, 2, 256, 0, 0, 2, &s) == EM_ERR_INVALID);
}

/* Gated DeltaNet heads: 16 key heads, 32 value heads (2 value heads per
 * key head) split over 1..16 ranks, then over 32 ranks with key heads
 * replicated; every rank's value heads read exactly its key heads. */
static void gdn_split(void) {
    for (int world = 1; world <= 32; world *= 2) {
        int covered_v = 0, covered_k = 0;
        for (int r = 0; r < world; r++) {
            tp_shard s;
            REQUIRE(tp_plan_make(32, 8, 256, 1000, r, world, &s) == EM_OK);
            REQUIRE(tp_plan_gdn(16, 32, &s) == EM_OK);
            CHECK(s.n_lin_v_heads == 32 / world);
            CHECK(s.lin_v_head0 == covered_v);
            CHECK(s.lin_k_replicated == (world > 16));
            if (!s.lin_k_replicated) CHECK(s.lin_k_head0 == covered_k);
            CHECK(s.lin_v_head0 / 2 == s.lin_k_head0);
            CHECK((s.lin_v_head0 + s.n_lin_v_heads - 1) / 2 == s.lin_k_head0 + s.n_lin_k_heads - 1);
            covered_v += s.n_lin_v_heads;
            covered_k += s.n_lin_k_heads;
        }
        CHECK(covered_v == 32);
        CHECK(covered_k == (world > 16 ? world : 16));
    }
    /* 2 key heads, 4 value heads over 4 ranks: one value head each */
    int want[4] = {0, 0, 1, 1};
    for (int r = 0; r < 4; r++) {
        tp_shard s;
        REQUIRE(tp_plan_make(4, 2, 128, 256, r, 4, &s) == EM_OK);
        REQUIRE(tp_plan_gdn(2, 4, &s) == EM_OK);
        CHECK(s.n_lin_v_heads == 1 && s.lin_v_head0 == r);
        CHECK(s.n_lin_k_heads == 1 && s.lin_k_replicated);
        CHECKF(s.lin_k_head0 == want[r], "rank %d reads key head %d", r, s.lin_k_head0);
    }
}

static void gdn_refusals(void) {
    tp_shard s;
    REQUIRE(tp_plan_make(2, 1, 192, 320, 0, 2, &s) == EM_OK);
    CHECK(tp_plan_gdn(1, 3, &s) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "3 linear-attention value heads are not divisible by 2") != NULL);
    /* 3 key heads, 6 value heads over 2 ranks: a rank's 3 value heads straddle key heads */
    CHECK(tp_plan_gdn(3, 6, &s) == EM_ERR_UNSUPPORTED);
    CHECK(strstr(em_last_error(), "3 linear-attention key heads") != NULL);
    CHECK(tp_plan_gdn(2, 3, &s) == EM_ERR_INVALID); /* value heads not a multiple of key heads */
    CHECK(tp_plan_gdn(0, 4, &s) == EM_ERR_INVALID);
}

/* Column slices of a row-major matrix, as o_proj and down_proj are read. */
static void gather_columns(void) {
    enum { R = 5, C = 12 };
    uint16_t src[R * C], dst[R * 4];
    for (int i = 0; i < R * C; i++) src[i] = (uint16_t)i;
    shard_gather_rows(dst, src, C, sizeof(uint16_t), 1, 3, 8, 4);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) CHECK(dst[r * 4 + c] == (uint16_t)((1 + r) * C + 8 + c));
    float fs[R * C], fd[R * 6];
    for (int i = 0; i < R * C; i++) fs[i] = (float)i * 0.5f;
    shard_gather_rows(fd, fs, C, sizeof(float), 0, R, 6, 6);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 6; c++) CHECK(fd[r * 6 + c] == fs[r * C + 6 + c]);
}

int main(void) {
    llama8b_split();
    kv_replicated();
    vocab_padding();
    refusals();
    gdn_split();
    gdn_refusals();
    gather_columns();
    return test_summary();
}
