/* file.h — whole-file reads with a size cap, path helpers. */
#ifndef EMBER_BASE_FILE_H
#define EMBER_BASE_FILE_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>

/* Reads path into a malloc'd NUL-terminated buffer (owned by caller).
 * Files over max_bytes are an EM_ERR_LIMIT error naming the file. */
em_status em_read_file(const char *path, size_t max_bytes, char **data, size_t *len);
bool em_file_exists(const char *path);
bool em_dir_exists(const char *path);
/* dir + "/" + name into a malloc'd string (owned by caller); NULL on OOM. */
char *em_path_join(const char *dir, const char *name);

#endif
