/* jinja.h — a sandboxed implementation of the Jinja template language as
 * transformers runs it (jinja2's ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception
 * and strftime_now). Templates come from downloaded files: they cannot
 * reach files, the environment or any internals, and every render is
 * bounded in recursion depth, work, output size and time. */
#ifndef EMBER_JINJA_H
#define EMBER_JINJA_H

#include "base/status.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct jinja_template jinja_template;

typedef struct jinja_limits {
    size_t max_output;   /* bytes of output, and of any single string or list */
    int max_depth;       /* nested macro calls */
    uint64_t max_steps;  /* loop iterations + calls + filter applications */
    double max_seconds;  /* wall time of one render; 0 = no limit */
    time_t now;          /* strftime_now's clock; 0 = the real time */
} jinja_limits;

/* Limits used when none are given: 16 MiB output, depth 200, 10M steps,
 * 10 s. */
jinja_limits jinja_default_limits(void);

/* Parses a template. Syntax errors are EM_ERR_FORMAT with line and column.
 * *out is owned by the caller (jinja_free). */
em_status jinja_parse(const char *src, size_t len, jinja_template **out);
void jinja_free(jinja_template *t);

/* Renders with the keys of `vars` (a JSON object, borrowed) as variables.
 * lim may be NULL (defaults). *out is malloc'd and NUL-terminated (the
 * caller frees it); *out_len excludes the NUL. Errors: EM_ERR_FORMAT for
 * template errors (undefined values, type errors, raise_exception),
 * EM_ERR_LIMIT for limits, with the template line. Thread-safe: a parsed
 * template is read-only during renders. */
em_status jinja_render(const jinja_template *t, json_t *vars, const jinja_limits *lim, char **out, size_t *out_len);

#endif
