/* st_write.h — writes small checkpoints for tests: a safetensors file from a
 * header JSON (the data section zero-filled to the offsets it declares) and
 * text files. Test helper only. */
#ifndef EMBER_TEST_ST_WRITE_H
#define EMBER_TEST_ST_WRITE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline int tw_text(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* header: the JSON header; data_len: bytes of tensor data after it. */
static inline int tw_safetensors(const char *dir, const char *name, const char *header, size_t data_len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t n = strlen(header);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    return fclose(f);
}

/* A fresh directory under /tmp; path written into buf. */
static inline int tw_tempdir(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "/tmp/ember-%s-XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}

static inline void tw_rmtree(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) { /* best effort */ }
}

#endif
