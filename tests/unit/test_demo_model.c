/* test_demo_model.c — em_demo_model_dir(): the override, the search, and
 * that the shipped snapshot is complete. Each case runs in a child process
 * because the answer is fixed at the first call. */
#include "io/demo_model.h"
#include "test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn in a child; returns its exit status (0 = passed). */
static int in_child(int (*fn)(const char *), const char *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int file_in(const char *dir, const char *name) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int case_override(const char *dir) {
    setenv("EMBER_DEMO_MODEL", dir, 1);
    const char *got = em_demo_model_dir();
    char real[PATH_MAX];
    if (!got || !realpath(dir, real) || strcmp(got, real) != 0) return 1;
    return em_demo_model_dir() == got ? 0 : 2; /* same answer on later calls */
}

static int case_override_missing(const char *dir) {
    setenv("EMBER_DEMO_MODEL", dir, 1);
    return em_demo_model_dir() == NULL ? 0 : 1; /* no silent fall-back */
}

static int case_search(const char *unused) {
    (void)unused;
    unsetenv("EMBER_DEMO_MODEL");
    const char *got = em_demo_model_dir();
    if (!got) return 1;
    static const char *const need[] = {"config.json", "model.safetensors", "tokenizer.json",
                                       "tokenizer_config.json", "generation_config.json", "README.md"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!file_in(got, need[i])) {
            fprintf(stderr, "%s: missing %s\n", got, need[i]);
            return 2;
        }
    return 0;
}

int main(void) {
    char tmp[] = "/tmp/ember_demo_XXXXXX";
    REQUIRE(mkdtemp(tmp) != NULL);
    char cfg[PATH_MAX];
    snprintf(cfg, sizeof cfg, "%s/config.json", tmp);
    FILE *f = fopen(cfg, "w");
    REQUIRE(f != NULL);
    fputs("{}\n", f);
    fclose(f);

    CHECK(in_child(case_override, tmp) == 0);
    CHECK(in_child(case_search, NULL) == 0);
    remove(cfg);
    CHECK(in_child(case_override_missing, tmp) == 0); /* a dir without config.json */
    rmdir(tmp);
    CHECK(in_child(case_override_missing, "/nonexistent/ember-demo") == 0);
    return test_summary();
}
