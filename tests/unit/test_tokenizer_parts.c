/* test_tokenizer_parts.c — the tokenizer's pieces on small hand-written
 * tokenizer.json files whose results follow from the reference's rules:
 * normalizers, pre-tokenizer split behaviors, BPE merge order, byte
 * fallback and fused unk, added-token lstrip/rstrip/single_word, the
 * template post-processor, decoders, streaming, malformed files, invalid
 * UTF-8, a 100 KB word without spaces, and concurrent use. */
#include "test.h"

#include "base/timer.h"
#include "tokenizer/tok_internal.h"

#include <pthread.h>

/* A SentencePiece-style BPE: Prepend + Replace normalizer, byte fallback,
 * fused unk, ByteFallback/Fuse/Strip decoder, BOS template. */
static const char *T1_HEAD =
    "{\"version\":\"1.0\",\"added_tokens\":["
    "{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":13,\"content\":\"<x>\",\"lstrip\":true,\"rstrip\":true,\"special\":false,\"normalized\":false},"
    "{\"id\":14,\"content\":\"ab!\",\"single_word\":true,\"special\":false,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],"
    "\"tokens\":[\"<s>\"]}}},";
static const char *T1_DEC =
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
    "\"start\":1,\"stop\":0}]},";
static const char *T1_MODEL =
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"\\u2581\":3,\"a\":4,\"b\":5,\"c\":6,\"\\u2581a\":7,\"ab\":8,"
    "\"\\u2581ab\":9,\"abc\":10,\"<0xC3>\":11,\"<0xA9>\":12},"
    "\"merges\":[\"\\u2581 a\",[\"a\",\"b\"],\"\\u2581a b\",\"ab c\"]}}";

static tokenizer *load_t1(const char *decoder) {
    char buf[8192];
    snprintf(buf, sizeof buf, "%s%s%s", T1_HEAD, decoder, T1_MODEL);
    tokenizer *t = NULL;
    em_status st = tok_load_json(buf, strlen(buf), NULL, 0, "t1", &t);
    CHECKF(st == EM_OK, "%s", em_last_error());
    REQUIRE(t);
    return t;
}

static void check_encode(const tokenizer *t, const char *text, bool special, const int32_t *want, size_t n_want) {
    int32_t *ids;
    size_t n;
    REQUIRE(tok_encode(t, text, strlen(text), special, &ids, &n) == EM_OK);
    bool same = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    CHECKF(same, "encode \"%s\": got %zu ids (first %d)", text, n, n ? ids[0] : -1);
    free(ids);
}

static void check_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip, const char *want) {
    char *s;
    REQUIRE(tok_decode(t, ids, n, skip, &s) == EM_OK);
    CHECK_STR(s, want);
    free(s);
    /* Streaming must agree, one id at a time. */
    tok_stream *st = tok_stream_new(t, skip);
    tok_buf acc = {0};
    for (size_t i = 0; i <= n; i++) {
        char *o;
        size_t ol;
        REQUIRE((i < n ? tok_stream_feed(st, ids[i], &o, &ol) : tok_stream_flush(st, &o, &ol)) == EM_OK);
        tok_buf_put(&acc, o, ol);
        free(o);
    }
    CHECK_STR(acc.p ? acc.p : "", want);
    tok_buf_free(&acc);
    tok_stream_free(st);
}

static void test_sentencepiece_style(void) {
    tokenizer *t = load_t1(T1_DEC);
    /* "▁ab▁abc": ranks ▁a(0) < ab(1) < ▁ab(2) < abc(3), leftmost first. */
    check_encode(t, "ab abc", false, (int32_t[]){9, 9, 6}, 3);
    check_encode(t, "ab abc", true, (int32_t[]){1, 9, 9, 6}, 4);
    check_encode(t, "", true, (int32_t[]){1}, 1);
    /* é is not in the vocab: its bytes are. */
    check_encode(t, "\xC3\xA9", false, (int32_t[]){3, 11, 12}, 3);
    /* x and € have no byte pieces: one fused unk. */
    check_encode(t, "x\xE2\x82\xAC", false, (int32_t[]){3, 0}, 2);
    /* lstrip/rstrip take the spaces around <x>; Prepend applies per segment. */
    check_encode(t, "a <x> b", false, (int32_t[]){7, 13, 3, 5}, 4);
    /* single_word: the first ab! follows a word character and is skipped. */
    check_encode(t, "xab! ab!", false, (int32_t[]){3, 0, 8, 0, 3, 14}, 6);
    check_encode(t, "<s>ab</s>", false, (int32_t[]){1, 9, 2}, 3);

    check_decode(t, (int32_t[]){1, 9, 9, 6}, 4, false, "<s> ab abc");
    check_decode(t, (int32_t[]){1, 9, 9, 6}, 4, true, "ab abc");
    check_decode(t, (int32_t[]){3, 11, 12, 4}, 4, false, "\xC3\xA9" "a");
    /* A lone lead byte is one U+FFFD per byte; a later byte piece changes
     * how earlier ones decode, so the stream must hold them back. */
    check_decode(t, (int32_t[]){11}, 1, false, "\xEF\xBF\xBD");
    check_decode(t, (int32_t[]){4, 11, 11, 12, 4}, 5, false, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "a");
    check_decode(t, (int32_t[]){4, 11, 12}, 3, false, "a\xC3\xA9");
    check_decode(t, (int32_t[]){99, -5, 4}, 3, false, "a"); /* unknown ids are skipped */
    CHECK(tok_vocab_size(t) == 15);
    CHECK(tok_piece_to_id(t, "<x>") == 13);
    CHECK(tok_piece_to_id(t, "\xE2\x96\x81" "ab") == 9);
    CHECK(tok_piece_to_id(t, "zz") == -1);
    CHECK(tok_is_special(t, 1) && !tok_is_special(t, 13));
    CHECK_STR(tok_id_to_piece(t, 13), "<x>");
    CHECK(tok_id_to_piece(t, 15) == NULL);
    tok_free(t);

    t = load_t1("\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\"},");
    check_decode(t, (int32_t[]){9, 9, 6}, 3, false, "ab abc");
    tok_free(t);

    /* A Replace after Fuse sees the whole text: the stream holds everything
     * until flush, and still equals the full decode. */
    t = load_t1("\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Replace\","
                "\"pattern\":{\"String\":\"b\\u2581\"},\"content\":\"B_\"}]},");
    check_decode(t, (int32_t[]){9, 9, 6}, 3, false, "\xE2\x96\x81" "aB_abc");
    tok_free(t);

    /* No decoder: pieces joined with spaces, also across stream windows. */
    t = load_t1("\"decoder\":null,");
    check_decode(t, (int32_t[]){9, 4, 6}, 3, false, "\xE2\x96\x81" "ab a c");
    tok_free(t);
}

static void test_invalid_utf8(void) {
    tokenizer *t = load_t1(T1_DEC);
    int32_t *ids = NULL;
    size_t n;
    CHECK(tok_encode(t, "ab\xC3(", 4, false, &ids, &n) == EM_ERR_INVALID);
    CHECK(strstr(em_last_error(), "UTF-8") && strstr(em_last_error(), "offset 2"));
    CHECK(tok_encode(t, "\xED\xA0\x80", 3, false, &ids, &n) == EM_ERR_INVALID); /* surrogate */
    CHECK(ids == NULL);
    tok_free(t);
}

static void norm_case(const char *json, const char *in, const char *want) {
    json_error_t err;
    json_t *j = json_loads(json, 0, &err);
    REQUIRE(j);
    tok_norm *nz;
    REQUIRE(tok_norm_load(j, "normalizer", &nz) == EM_OK);
    tok_buf out = {0};
    REQUIRE(tok_norm_apply(nz, in, strlen(in), &out) == EM_OK);
    CHECKF(strcmp(out.p, want) == 0, "%s on \"%s\": \"%s\"", json, in, out.p);
    tok_buf_free(&out);
    tok_norm_free(nz);
    json_decref(j);
}

static void test_normalizers(void) {
    norm_case("{\"type\":\"NFD\"}", "\xC3\xA9", "e\xCC\x81");
    norm_case("{\"type\":\"NFC\"}", "e\xCC\x81", "\xC3\xA9");
    /* past an ASCII stretch: the character before the first non-ASCII one still combines */
    norm_case("{\"type\":\"NFC\"}", "plain cafe\xCC\x81 ok", "plain caf\xC3\xA9 ok");
    norm_case("{\"type\":\"NFC\"}", "only ascii", "only ascii");
    norm_case("{\"type\":\"NFKC\"}", "x\xEF\xAC\x81", "xfi");
    norm_case("{\"type\":\"NFD\"}", "ab\xC3\xA9", "abe\xCC\x81");
    norm_case("{\"type\":\"NFKC\"}", "\xEF\xAC\x81\xE2\x91\xA0", "fi1");
    norm_case("{\"type\":\"NFKD\"}", "\xC3\xA9\xEF\xAC\x81", "e\xCC\x81" "fi");
    norm_case("{\"type\":\"Lowercase\"}", "\xC3\x80\xC4\xB0" "B", "\xC3\xA0i\xCC\x87" "b");
    norm_case("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", " \t a b \n", "a b");
    norm_case("{\"type\":\"Strip\",\"strip_left\":false,\"strip_right\":true}", "  a  ", "  a");
    norm_case("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"_\"}", "a   b c", "a_b_c");
    norm_case("{\"type\":\"Prepend\",\"prepend\":\"X\"}", "", "");
    norm_case("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Lowercase\"}]}",
              "\xEF\xBC\xA1" "B", "ab");
}

static void pretok_case(const char *json, const char *in, bool at_start, const char *want) {
    json_error_t err;
    json_t *j = json_loads(json, 0, &err);
    REQUIRE(j);
    tok_pretok *p;
    REQUIRE(tok_pretok_load(j, "pre_tokenizer", &p) == EM_OK);
    tok_list l = {0}, tmp = {0};
    tok_list_push(&l, in, strlen(in), at_start);
    REQUIRE(tok_pretok_apply(p, &l, &tmp) == EM_OK);
    tok_buf got = {0};
    for (size_t i = 0; i < l.n; i++) {
        tok_buf_put(&got, "|", i ? 1 : 0);
        tok_buf_put(&got, l.arena.p + l.v[i].off, l.v[i].len);
    }
    CHECKF(strcmp(got.p ? got.p : "", want) == 0, "%s on \"%s\": \"%s\" vs \"%s\"", json, in, got.p, want);
    tok_buf_free(&got);
    tok_list_free(&l);
    tok_list_free(&tmp);
    tok_pretok_free(p);
    json_decref(j);
}

static void test_pretokenizers(void) {
    const char *sp = "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"invert\":false,\"behavior\":\"%s\"}";
    const char *bh[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    const char *want[] = {"a| | |b", "a|b", "a | |b", "a| | b", "a|  |b"};
    for (int i = 0; i < 5; i++) {
        char json[256];
        snprintf(json, sizeof json, sp, bh[i]);
        pretok_case(json, "a  b", true, want[i]);
    }
    pretok_case("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\d+\"},\"invert\":true,\"behavior\":\"Removed\"}",
                "ab12cd", true, "12");
    pretok_case("{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true}",
                "hello world", true, "\xE2\x96\x81hello|\xE2\x96\x81world");
    pretok_case("{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true}",
                "hello world", false, "hello|\xE2\x96\x81world");
    pretok_case("{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"never\",\"split\":false}",
                "a b", true, "a\xE2\x96\x81" "b");
    pretok_case("{\"type\":\"Digits\",\"individual_digits\":true}", "a123b", true, "a|1|2|3|b");
    pretok_case("{\"type\":\"Digits\",\"individual_digits\":false}", "a123b", true, "a|123|b");
    pretok_case("{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"}", "hi, there!", true, "hi|,| there|!");
    pretok_case("{\"type\":\"Whitespace\"}", "hi, there!", true, "hi|,|there|!");
    pretok_case("{\"type\":\"WhitespaceSplit\"}", "  hi  there ", true, "hi|there");
    pretok_case("{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", "hi there", true,
                "\xC4\xA0hi|\xC4\xA0there");
    pretok_case("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}", "a\n\xC3\xA9", true,
                "a\xC4\x8A\xC3\x83\xC2\xA9");
    pretok_case("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Digits\","
                "\"individual_digits\":true}]}", "x12 y", true, "x|1|2|y");
    /* Case-insensitive groups, \p{..} classes and lookahead through PCRE2. */
    pretok_case("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t)|\\\\p{L}+|\\\\s+(?!\\\\S)|\\\\s+\"},"
                "\"behavior\":\"Isolated\",\"invert\":false}", "IT'S  \xC3\xA9t\xC3\xA9", true,
                "IT|'S| | |\xC3\xA9t\xC3\xA9");
}

/* Malformed files fail with a message naming the field. */
static void bad_case(const char *json, em_status code, const char *needle) {
    tokenizer *t = NULL;
    em_status st = tok_load_json(json, strlen(json), NULL, 0, "bad.json", &t);
    CHECKF(st == code && strstr(em_last_error(), needle), "status %d, \"%s\" lacks \"%s\"", st, em_last_error(), needle);
    CHECK(t == NULL);
}

static void test_malformed(void) {
    bad_case("{\"model\": ", EM_ERR_FORMAT, "bad.json: line 1");
    bad_case("[]", EM_ERR_FORMAT, "expected a JSON object");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", EM_ERR_FORMAT, "model.vocab");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}", EM_ERR_FORMAT, "model.vocab[\"a\"]");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a zz\"]}}", EM_ERR_FORMAT,
             "model.merges[0]: token \"zz\" is not in model.vocab");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a\"]}}", EM_ERR_FORMAT,
             "model.merges[0]: token \"aa\"");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}", EM_ERR_FORMAT, "model.merges[0]");
    bad_case("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", EM_ERR_UNSUPPORTED, "\"Unigram\"");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
             "\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"}}", EM_ERR_FORMAT, "pre_tokenizer.pattern: invalid regex");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":\"1\","
             "\"content\":\"x\"}]}", EM_ERR_FORMAT, "added_tokens[0].id");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Precompiled\"}}",
             EM_ERR_UNSUPPORTED, "normalizer.type");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":"
             "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],\"special_tokens\":{}}}",
             EM_ERR_FORMAT, "post_processor.single[0]");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"unk_token\":\"<unk>\"}}", EM_ERR_FORMAT,
             "model.unk_token");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"decoder\":{\"type\":\"Strip\","
             "\"content\":\" \",\"start\":-1,\"stop\":0}}", EM_ERR_FORMAT, "decoder.start");
    /* a Bert post-processor whose cls loads and whose sep does not: what
     * the cls took is freed (the sanitizer run finds a leak otherwise) */
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":"
             "\"BertProcessing\",\"cls\":[\"a\",0],\"sep\":[\"b\",7]}}", EM_ERR_FORMAT, "token id 7");
    bad_case("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":"
             "\"RobertaProcessing\",\"cls\":[\"a\",0],\"sep\":\"b\"}}", EM_ERR_FORMAT, "post_processor.sep");
}

/* An added token may reuse the id of a different vocabulary entry: the
 * added content wins for decoding, the vocabulary string still encodes
 * (found by fuzzing: the vocabulary key was freed). */
static void test_added_id_collision(void) {
    const char *json = "{\"added_tokens\":[{\"id\":0,\"content\":\"<q>\",\"special\":true}],"
                       "\"model\":{\"type\":\"BPE\",\"vocab\":{\"z\":0,\"y\":1,\"zy\":2},\"merges\":[\"z y\"]}}";
    tokenizer *t;
    REQUIRE(tok_load_json(json, strlen(json), NULL, 0, "collide", &t) == EM_OK);
    check_encode(t, "zyz<q>y", false, (int32_t[]){2, 0, 0, 1}, 4);
    check_decode(t, (int32_t[]){2, 0}, 2, false, "zy <q>"); /* no decoder: joined with spaces */
    CHECK(tok_piece_to_id(t, "z") == 0 && tok_piece_to_id(t, "<q>") == 0);
    tok_free(t);
}

/* A 100 KB piece without spaces must not take quadratic time. */
static void test_long_word(void) {
    tokenizer *t = load_t1(T1_DEC);
    size_t n = 100 * 1024;
    char *s = malloc(n + 1);
    uint32_t x = 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        s[i] = "abc"[(x >> 16) % 3];
    }
    s[n] = 0;
    double t0 = em_now();
    int32_t *ids;
    size_t m;
    REQUIRE(tok_encode(t, s, n, false, &ids, &m) == EM_OK);
    double dt = em_now() - t0;
    CHECKF(dt < 2.0, "100 KB word took %.2f s", dt);
    char *back;
    REQUIRE(tok_decode(t, ids, m, false, &back) == EM_OK);
    CHECK(strcmp(back, s) == 0); /* the Strip decoder removes the prepended space */
    free(back);
    free(ids);
    free(s);
    tok_free(t);
}

#define N_THR_TEXTS 5
static const char *THR_TEXTS[N_THR_TEXTS] = {"ab abc", "a <x> b", "xab! ab!", "abc abc abc ab", "c b a"};

typedef struct thr_arg {
    const tokenizer *t;
    char *want[N_THR_TEXTS]; /* single-threaded decode(encode(text)) */
    int bad;
} thr_arg;

static char *roundtrip(const tokenizer *t, const char *text) {
    int32_t *ids;
    size_t n;
    char *back = NULL;
    if (tok_encode(t, text, strlen(text), false, &ids, &n) != EM_OK) return NULL;
    if (tok_decode(t, ids, n, false, &back) != EM_OK) back = NULL;
    free(ids);
    return back;
}

static void *thr_main(void *p) {
    thr_arg *a = p;
    for (int r = 0; r < 500; r++) {
        for (int k = 0; k < N_THR_TEXTS; k++) {
            char *back = roundtrip(a->t, THR_TEXTS[k]);
            if (!back || strcmp(back, a->want[k]) != 0) a->bad++;
            free(back);
        }
    }
    return NULL;
}

static void test_threads(void) {
    tokenizer *t = load_t1(T1_DEC);
    char *want[N_THR_TEXTS];
    for (int k = 0; k < N_THR_TEXTS; k++) REQUIRE((want[k] = roundtrip(t, THR_TEXTS[k])) != NULL);
    CHECK_STR(want[1], "a<x> b"); /* lstrip/rstrip took the spaces */
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].t = t;
        args[i].bad = 0;
        memcpy(args[i].want, want, sizeof want);
        pthread_create(&th[i], NULL, thr_main, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0);
    }
    for (int k = 0; k < N_THR_TEXTS; k++) free(want[k]);
    tok_free(t);
}

/* The hand matcher of Llama 3's and Qwen's split pattern (tok_split_fast)
 * must find exactly the regex's matches: every text below is split with it
 * and with PCRE2 alone (the same pattern, fast off) and the pieces compared.
 * The texts: hand-picked edges (contractions in both cases and cut short,
 * digit runs, whitespace runs with and without newlines at the end and
 * before text, a leading space before punctuation, control characters),
 * then random strings over ASCII classes and non-ASCII letters, digits,
 * spaces, marks and a folding letter (U+017F, which 's matches). */
typedef struct pieces {
    size_t v[4096];
    size_t n;
} pieces;

static bool collect(void *ctx, size_t a, size_t b) {
    pieces *p = ctx;
    if (p->n + 2 > sizeof p->v / sizeof p->v[0]) return false;
    p->v[p->n++] = a, p->v[p->n++] = b;
    return true;
}

static bool split_same(const tok_pattern *fast, const tok_pattern *slow, const char *t, size_t n) {
    static pieces a, b;
    a.n = b.n = 0;
    REQUIRE(tok_pattern_each(fast, t, n, collect, &a) == EM_OK);
    REQUIRE(tok_pattern_each(slow, t, n, collect, &b) == EM_OK);
    return a.n == b.n && !memcmp(a.v, b.v, a.n * sizeof a.v[0]);
}

static void test_split_fast_kind(const char *src, int kind) {
    tok_pattern fast;
    REQUIRE(tok_pattern_regex(src, strlen(src), "test", &fast) == EM_OK);
    CHECKF(fast.fast == kind, "pattern recognised as kind %d, expected %d", fast.fast, kind);
    tok_pattern slow = fast;
    slow.fast = 0;
    static const char *edges[] = {
        "it's", "IT'S", "we'RE here", "they'Ve", "I'm", "we'LL", "he'd", "'", "'r", "'l", "'le", "'x", "x'", "''s",
        "12345678", "1 22 333 4444", "a1b22c333", "  hello", "hello  world", "   ", " \n", "a \n\n b", "x\t\ty",
        "\r\n\r\n", " ...", " ...\n\n", "... x", "a.b", ".hello", " .", "\x01\x1f\x7f", "\v\f x", "  \t\n  z",
        "end ", "end  ", "\n", " ", "é", "aé", "'\xc5\xbf", "'\xc5\xbfun", "1\xd9\xa3", "12\xd9\xa3",
        "123\xd9\xa3", " \xc2\xa0x", "x\xe2\x80\x83 y", ".\xe2\x80\x94.", "\xe4\xb8\xad\xe6\x96\x87 ok",
        "a\xcc\201b", "\xf0\x9f\x98\x80!", "  \xe3\x80\x80\n"};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        CHECKF(split_same(&fast, &slow, edges[i], strlen(edges[i])), "kind %d: \"%s\" splits differently", kind,
               edges[i]);
    static const char *alphabet[] = {"a", "Z", "q", "s", "S", "t", "T", "r", "e", "E", "v", "l", "L", "d", "m", "0",
                                     "7", "'", "'", " ", " ", " ", "\t", "\n", "\r", "\v", "\f", ".", ",", "-",
                                     "!", "\"", "\x01", "\x7f", "\xc3\xa9", "\xc5\xbf", "\xd9\xa3",
                                     "\xc2\xa0", "\xe2\x80\x83", "\xe2\x80\x94", "\xe4\xb8\xad",
                                     "\xcc\x81", "\xf0\x9f\x98\x80", "\xc2\x85"};
    const size_t n_alpha = sizeof alphabet / sizeof alphabet[0];
    uint32_t x = 99;
    int differ = 0;
    char text[512];
    for (int i = 0; i < 20000; i++) {
        size_t len = 0, want = 1 + (size_t)(i % 97);
        while (len < want && len < sizeof text - 8) {
            x = x * 1103515245u + 12345u;
            /* mostly ASCII: non-ASCII pieces one draw in four */
            size_t k = (x >> 16) % ((x >> 8) % 4 ? 34 : n_alpha);
            size_t al = strlen(alphabet[k]);
            memcpy(text + len, alphabet[k], al);
            len += al;
        }
        differ += !split_same(&fast, &slow, text, len);
    }
    CHECKF(differ == 0, "kind %d: %d of 20000 random texts split differently", kind, differ);
    tok_pattern_free(&fast);
}

static void test_split_fast(void) {
    test_split_fast_kind("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                         "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                         3);
    test_split_fast_kind("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                         "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                         1);
    /* any other pattern is left to the regex */
    tok_pattern other;
    REQUIRE(tok_pattern_regex("\\p{N}{1,3}", 11, "test", &other) == EM_OK);
    CHECK(other.fast == 0);
    tok_pattern_free(&other);
}

int main(void) {
    test_split_fast();
    test_sentencepiece_style();
    test_invalid_utf8();
    test_normalizers();
    test_pretokenizers();
    test_malformed();
    test_added_id_collision();
    test_long_word();
    test_threads();
    return test_summary();
}
