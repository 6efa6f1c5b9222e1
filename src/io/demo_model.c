/* demo_model.c — finds the demo model directory (see demo_model.h).
 *
 * The answer is computed once under pthread_once and never changes after:
 * a write-once value, so callers on any thread may hold the pointer. This is
 * the one place that reads EMBER_DEMO_MODEL, because a model path is needed
 * before any runtime configuration exists (by the CLI's argument parsing). */
#include "io/demo_model.h"

#include "base/config.h"

#include "base/file.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t demo_once = PTHREAD_ONCE_INIT;
static char demo_dir[PATH_MAX];
static const char *demo_result; /* NULL or demo_dir */

/* True when dir holds a config.json; its canonical path goes to out. */
static int demo_try(const char *dir, char *out) {
    char cfg[PATH_MAX], real[PATH_MAX];
    int n = snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (n < 0 || (size_t)n >= sizeof cfg || !em_file_exists(cfg)) return 0;
    if (!realpath(dir, real)) return 0;
    snprintf(out, PATH_MAX, "%s", real);
    return 1;
}

/* <directory of the running executable>/rel, into buf; 0 when unknown. */
static int demo_exe_relative(const char *rel, char *buf, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    int m = snprintf(buf, cap, "%s/%s", exe, rel);
    return m > 0 && (size_t)m < cap;
}

static void demo_find(void) {
    const char *env = em_config_str(em_config_global(), EMC_DEMO_MODEL);
    if (env && env[0]) {
        if (demo_try(env, demo_dir)) demo_result = demo_dir;
        return;
    }
    static const char *const rel[] = {"../models/demo", "../share/ember/models/demo"};
    char cand[PATH_MAX];
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        if (demo_exe_relative(rel[i], cand, sizeof cand) && demo_try(cand, demo_dir)) {
            demo_result = demo_dir;
            return;
        }
    }
#ifdef EMBER_DEMO_MODEL_SRC_DIR
    if (demo_try(EMBER_DEMO_MODEL_SRC_DIR, demo_dir)) demo_result = demo_dir;
#endif
}

const char *em_demo_model_dir(void) {
    pthread_once(&demo_once, demo_find);
    return demo_result;
}
