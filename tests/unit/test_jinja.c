/* test_jinja.c — the template engine's limits against hostile templates,
 * error positions, and chat template loading from a model directory. */
#include "test.h"

#include "chat/chat.h"
#include "chat/jinja/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static em_status render(const char *src, const jinja_limits *lim, char **out) {
    jinja_template *t = NULL;
    size_t len;
    *out = NULL;
    em_status st = jinja_parse(src, strlen(src), &t);
    if (st == EM_OK) st = jinja_render(t, NULL, lim, out, &len);
    jinja_free(t);
    return st;
}

static void expect_error(const char *src, em_status code, const char *needle) {
    char *out = NULL;
    jinja_limits lim = jinja_default_limits();
    lim.max_output = 1 << 20;
    lim.max_seconds = 5;
    lim.max_steps = 200000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    em_status st = render(src, &lim, &out);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    CHECKF(st == code, "%s: status %s (%s)", src, em_status_name(st), em_last_error());
    CHECKF(strstr(em_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", src, em_last_error(), needle);
    CHECKF(secs < 6.0, "%s: took %.1f s", src, secs);
    free(out);
}

static void test_hostile(void) {
    expect_error("{% for i in range(10**9) %}x{% endfor %}", EM_ERR_LIMIT, "Range too big");
    expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", EM_ERR_LIMIT, "nested deeper");
    expect_error("{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(1) }}", EM_ERR_LIMIT, "nested deeper");
    expect_error("{{ 'x' * 100000000 }}", EM_ERR_LIMIT, "output limit");
    expect_error("{% set s = namespace(v='ab') %}{% for i in range(40) %}{% set s.v = s.v ~ s.v %}{% endfor %}", EM_ERR_LIMIT, "output limit");
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", EM_ERR_LIMIT, "steps");
    expect_error("{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}", EM_ERR_LIMIT, "output limit");
    expect_error("{{ 2 ** 64 }}", EM_ERR_LIMIT, "overflow");
    expect_error("{{ raise_exception('custom failure') }}", EM_ERR_FORMAT, "custom failure");
    expect_error("{{ ''.__class__.__mro__ }}", EM_ERR_FORMAT, "unsafe");
    /* deep nesting is refused by the parser, not by the C stack */
    char deep[5000];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 2000; i++) deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 2000; i++) deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    expect_error(deep, EM_ERR_FORMAT, "nested too deeply");
}

/* Integers past 64 bits do not convert (jinja2's Python integers would):
 * `int` gives its default, from a string of digits, a float's text or a
 * float value alike, with no overflow on the way (the sanitizer run
 * checks the conversions). */
static void test_int_out_of_range(void) {
    static const char *const cases[][2] = {
        {"{{ '6.66666e63' | int }}", "0"},
        {"{{ '99999999999999999999' | int }}", "0"},
        {"{{ '-99999999999999999999' | int(7) }}", "7"},
        {"{{ 'ffffffffffffffffffff' | int(0, 16) }}", "0"},
        {"{{ 1e300 | int }}", "0"},
        {"{{ '9223372036854775807' | int }}", "9223372036854775807"},
        {"{{ '1e3' | int }}", "1000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        jinja_limits lim = jinja_default_limits();
        em_status st = render(cases[i][0], &lim, &out);
        CHECKF(st == EM_OK && out && !strcmp(out, cases[i][1]), "%s: %s '%s', want '%s'", cases[i][0],
               em_status_name(st), out ? out : "", cases[i][1]);
        free(out);
    }
}

static void test_time_limit(void) {
    jinja_limits lim = jinja_default_limits();
    lim.max_seconds = 0.2;
    lim.max_steps = UINT64_MAX;
    char *out = NULL;
    em_status st = render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", &lim, &out);
    CHECKF(st == EM_ERR_LIMIT && strstr(em_last_error(), "time limit"), "%s", em_last_error());
    free(out);
}

static void test_positions(void) {
    char *out = NULL;
    em_status st = render("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}", NULL, &out);
    CHECK(st == EM_ERR_FORMAT);
    CHECKF(strstr(em_last_error(), "line 3, column 10"), "%s", em_last_error());
    st = render("a\nb {% for %}", NULL, &out);
    CHECKF(st == EM_ERR_FORMAT && strstr(em_last_error(), "line 2"), "%s", em_last_error());
    st = render("{{ 'x' }}\n\n{{ x.y }}", NULL, &out);
    CHECKF(st == EM_ERR_FORMAT && strstr(em_last_error(), "line 3") && strstr(em_last_error(), "'x' is undefined"), "%s", em_last_error());
    free(out);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    fclose(f);
}

static char *render_dir(const char *dir, const char *vars_json) {
    chat_template *t = NULL;
    em_status st = chat_template_load(dir, &t);
    CHECKF(st == EM_OK, "load %s: %s", dir, em_last_error());
    if (st != EM_OK) return NULL;
    json_t *vars = json_loads(vars_json, 0, NULL);
    char *out = NULL;
    size_t len;
    st = chat_render(t, vars, &out, &len);
    CHECKF(st == EM_OK, "render: %s", em_last_error());
    json_decref(vars);
    chat_template_free(t);
    return out;
}

static void test_loading(void) {
    char dir[] = "/tmp/ember-jinja-XXXXXX";
    REQUIRE(mkdtemp(dir));
    chat_template *t = NULL;
    CHECK(chat_template_load(dir, &t) == EM_ERR_UNSUPPORTED);
    /* tokenizer_config: list of named templates, AddedToken bos */
    write_file(dir, "tokenizer_config.json",
               "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\","
               " \"model_max_length\": 1000000000000000019884624838656,"
               " \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": \"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\"}]}");
    char *out = render_dir(dir, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    CHECK(out && strcmp(out, "<s>hi</s>") == 0);
    free(out);
    /* vars win over the config's special tokens */
    out = render_dir(dir, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"bos_token\": \"B\"}");
    CHECK(out && strcmp(out, "Bhi</s>") == 0);
    free(out);
    write_file(dir, "chat_template.json", "{\"chat_template\": \"json:{{ add_generation_prompt }}\"}");
    out = render_dir(dir, "{}");
    CHECK(out && strcmp(out, "json:False") == 0);
    free(out);
    write_file(dir, "chat_template.jinja", "jinja:{{ tools }}\n");
    out = render_dir(dir, "{}");
    CHECK(out && strcmp(out, "jinja:None") == 0);
    if (chat_template_load(dir, &t) == EM_OK) {
        CHECK_STR(chat_template_source(t), "jinja:{{ tools }}\n");
        chat_template_free(t);
    }
    free(out);
    char path[600];
    const char *names[] = {"chat_template.jinja", "chat_template.json", "tokenizer_config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void) {
    test_hostile();
    test_int_out_of_range();
    test_time_limit();
    test_positions();
    test_loading();
    return test_summary();
}
