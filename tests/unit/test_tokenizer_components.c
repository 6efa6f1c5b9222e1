/* test_tokenizer_components.c — normalizers, pre-tokenizers, decoders and
 * a small hand-made tokenizer against goldens from the reference library
 * (tests/golden/tokenizer/components.jsonl, made by
 * tools/oracle/tokenizer_components.py). Configurations the reference
 * rejects must be rejected here too. */
#include "test.h"

#include "tokenizer/tok_internal.h"

static bool eq_str(const char *a, size_t an, json_t *want) {
    return json_is_string(want) && an == json_string_length(want) && memcmp(a, json_string_value(want), an) == 0;
}

static void norm_cases(json_t *cfg, json_t *cases, int line) {
    tok_norm *nz;
    em_status st = tok_norm_load(cfg, "normalizer", &nz);
    CHECKF(st == EM_OK, "line %d: %s", line, em_last_error());
    if (st != EM_OK) return;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *in = json_object_get(c, "in");
        tok_buf out = {0};
        REQUIRE(tok_norm_apply(nz, json_string_value(in), json_string_length(in), &out) == EM_OK);
        CHECKF(eq_str(out.p ? out.p : "", out.n, json_object_get(c, "out")), "line %d case %zu: \"%s\" vs \"%s\"", line,
               i, out.p ? out.p : "", json_string_value(json_object_get(c, "out")));
        tok_buf_free(&out);
    }
    tok_norm_free(nz);
}

static void pretok_cases(json_t *cfg, json_t *cases, int line) {
    tok_pretok *p;
    em_status st = tok_pretok_load(cfg, "pre_tokenizer", &p);
    CHECKF(st == EM_OK, "line %d: %s", line, em_last_error());
    if (st != EM_OK) return;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *in = json_object_get(c, "in"), *want = json_object_get(c, "out");
        tok_list l = {0}, tmp = {0};
        tok_list_push(&l, json_string_value(in), json_string_length(in), true);
        REQUIRE(tok_pretok_apply(p, &l, &tmp) == EM_OK);
        bool ok = l.n == json_array_size(want);
        for (size_t k = 0; ok && k < l.n; k++) ok = eq_str(l.arena.p + l.v[k].off, l.v[k].len, json_array_get(want, k));
        CHECKF(ok, "line %d case %zu (\"%s\"): %zu pieces, want %zu", line, i, json_string_value(in), l.n,
               json_array_size(want));
        tok_list_free(&l);
        tok_list_free(&tmp);
    }
    tok_pretok_free(p);
}

static void decoder_cases(json_t *cfg, json_t *cases, int line) {
    tok_dec *d;
    em_status st = tok_dec_load(cfg, "decoder", &d);
    CHECKF(st == EM_OK, "line %d: %s", line, em_last_error());
    if (st != EM_OK) return;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *in = json_object_get(c, "in");
        tok_list l = {0};
        for (size_t k = 0; k < json_array_size(in); k++) {
            json_t *s = json_array_get(in, k);
            tok_list_push(&l, json_string_value(s), json_string_length(s), false);
        }
        tok_buf out = {0};
        REQUIRE(tok_dec_run(d, &l, true, &out) == EM_OK);
        CHECKF(eq_str(out.p ? out.p : "", out.n, json_object_get(c, "out")), "line %d case %zu: \"%s\" vs \"%s\"", line,
               i, out.p ? out.p : "", json_string_value(json_object_get(c, "out")));
        tok_buf_free(&out);
        tok_list_free(&l);
    }
    tok_dec_free(d);
}

static void tokenizer_cases(json_t *cfg, json_t *cases, int line) {
    char *text = json_dumps(cfg, 0);
    tokenizer *t;
    em_status st = tok_load_json(text, strlen(text), NULL, 0, "components", &t);
    free(text);
    CHECKF(st == EM_OK, "line %d: %s", line, em_last_error());
    if (st != EM_OK) return;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *in = json_object_get(c, "in"), *want = json_object_get(c, "out");
        json_t *s = json_object_get(in, "text");
        if (s) {
            int32_t *ids;
            size_t n;
            REQUIRE(tok_encode(t, json_string_value(s), json_string_length(s), json_is_true(json_object_get(in, "special")),
                               &ids, &n) == EM_OK);
            bool ok = n == json_array_size(want);
            for (size_t k = 0; ok && k < n; k++) ok = ids[k] == json_integer_value(json_array_get(want, k));
            CHECKF(ok, "line %d encode \"%s\": %zu ids, want %zu", line, json_string_value(s), n, json_array_size(want));
            free(ids);
        } else {
            json_t *ja = json_object_get(in, "ids");
            size_t n = json_array_size(ja);
            int32_t ids[64];
            REQUIRE(n <= 64);
            for (size_t k = 0; k < n; k++) ids[k] = (int32_t)json_integer_value(json_array_get(ja, k));
            char *out;
            size_t len;
            REQUIRE(tok_decode_n(t, ids, n, json_is_true(json_object_get(in, "skip")), &out, &len) == EM_OK);
            CHECKF(eq_str(out, len, want), "line %d decode case %zu: \"%s\" vs \"%s\"", line, i, out, json_string_value(want));
            free(out);
        }
    }
    tok_free(t);
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/golden/tokenizer/components.jsonl", test_src_dir());
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    json_error_t err;
    json_t *rec;
    int line = 0;
    while ((rec = json_loadf(f, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &err)) != NULL) {
        line++;
        const char *kind = json_string_value(json_object_get(rec, "kind"));
        json_t *cfg = json_object_get(rec, "config"), *cases = json_object_get(rec, "cases");
        REQUIRE(kind);
        if (json_object_get(rec, "error")) {
            fprintf(stderr, "line %d: the reference rejects this %s\n", line, kind);
        } else if (!strcmp(kind, "norm")) {
            norm_cases(cfg, cases, line);
        } else if (!strcmp(kind, "pretok")) {
            pretok_cases(cfg, cases, line);
        } else if (!strcmp(kind, "decoder")) {
            decoder_cases(cfg, cases, line);
        } else if (!strcmp(kind, "tokenizer")) {
            tokenizer_cases(cfg, cases, line);
        }
        json_decref(rec);
    }
    fclose(f);
    CHECK(line > 50);
    return test_summary();
}
