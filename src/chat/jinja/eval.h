/* eval.h — the evaluator's context and the interface between the
 * evaluator and its builtins (filters.c, tests.c, methods.c, tojson.c).
 *
 * A render owns one jctx. Scopes are frames (a dict of variables and a
 * parent); for-loop iterations, macro calls and with-blocks push frames,
 * so assignments there do not leak out, as in jinja2. Every builtin takes
 * the context first so that errors carry the template line and limits
 * (output size, steps, time) are enforced everywhere. */
#ifndef EMBER_JINJA_EVAL_H
#define EMBER_JINJA_EVAL_H

#include "chat/jinja/ast.h"
#include "chat/jinja/jinja.h"
#include "chat/jinja/value.h"

#include <time.h>

typedef struct jframe {
    int rc;
    struct jframe *parent;
    jv vars; /* dict */
} jframe;

/* Evaluated call arguments. Values and keyword names are owned. */
typedef struct jcallargs {
    jv *pos;
    size_t npos, cappos;
    jv *kwnames; /* strings */
    jv *kwvals;
    size_t nkw, capkw;
} jcallargs;

typedef struct jctx {
    const jinja_limits *lim;
    jframe *root;
    int line; /* line of the node being evaluated, for messages */
    int depth; /* macro-call nesting */
    uint64_t steps;
    struct timespec deadline;
    bool has_deadline;
    bool brk, cont; /* pending break / continue */
    jv tracked; /* list of objects whose references are cut at the end (cycles) */
    time_t now;
} jctx;

/* Object payloads. */
typedef struct jo_ns {
    jv_obj base;
    jv dict;
} jo_ns;

typedef struct jo_macro {
    jv_obj base;
    const jnode *def; /* JN_MACRO or JN_CALLBLOCK, owned by the template */
    jframe *closure;  /* counted reference; cut at the end of the render */
    const char *name;
} jo_macro;

typedef enum jbuiltin_id {
    JB_RANGE,
    JB_NAMESPACE,
    JB_DICT,
    JB_RAISE_EXCEPTION,
    JB_STRFTIME_NOW,
    JB_CYCLER,
    JB_JOINER
} jbuiltin_id;

typedef struct jo_builtin {
    jv_obj base;
    jbuiltin_id id;
} jo_builtin;

typedef struct jo_method {
    jv_obj base;
    jv self;
    char name[24];
} jo_method;

typedef struct jo_loop {
    jv_obj base;
    jv items; /* list being iterated */
    size_t index0;
    jv last_changed; /* loop.changed() state */
    bool has_changed;
} jo_loop;

typedef struct jo_joiner {
    jv_obj base;
    jv sep;
    bool used;
} jo_joiner;

typedef struct jo_cycler {
    jv_obj base;
    jv items;
    size_t pos;
} jo_cycler;

/* ---- errors and limits ---- */
/* Records "template error at line N: <message>" and returns code. */
em_status jx_fail(jctx *c, em_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The error of using an Undefined value. */
em_status jx_undefined(jctx *c, const jv *u);
/* Counts one unit of work and checks the step and time limits. */
em_status jx_step(jctx *c);
/* Checks that a string or container of n bytes/items is within limits. */
em_status jx_check_size(jctx *c, size_t n);
em_status jx_oom(jctx *c);

/* ---- call arguments ---- */
void jx_args_free(jcallargs *a);
bool jx_args_push(jcallargs *a, jv v);
bool jx_args_push_kw(jcallargs *a, const char *name, jv v);
/* Binds arguments to the named parameters (NULL-terminated) of the
 * builtin `what`; slots[i] is a borrowed pointer or NULL when absent.
 * Unknown keywords and extra positionals are errors. */
em_status jx_bind(jctx *c, const char *what, const jcallargs *a, const char *const *params, const jv **slots);

/* ---- operations shared with builtins ---- */
em_status jx_getattr(jctx *c, const jv *obj, const char *name, jv *out);
em_status jx_getitem(jctx *c, const jv *obj, const jv *key, jv *out);
/* Materializes an iterable as a list (new reference): lists and tuples
 * themselves, dict keys, the characters of a string; Undefined is empty. */
em_status jx_iter(jctx *c, const jv *v, jv *out);
/* Calls a callable value (macro, builtin, bound method). */
em_status jx_call(jctx *c, const jv *fn, jcallargs *a, jv *out);
em_status jx_filter(jctx *c, const char *name, const jv *value, jcallargs *a, jv *out);
em_status jx_test(jctx *c, const char *name, const jv *value, jcallargs *a, bool *out);
bool jx_filter_exists(const char *name);
bool jx_test_exists(const char *name);
/* Bound-method lookup: returns true when `name` is a method of obj's
 * type; *unsafe when calling it would mutate (refused by the sandbox). */
bool jx_has_method(const jv *obj, const char *name, bool *unsafe);
em_status jx_method(jctx *c, const jv *self, const char *name, jcallargs *a, jv *out);
/* Python's str % args. */
em_status jx_percent_format(jctx *c, const jv *fmt, const jv *args, jv *out);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). */
em_status jx_tojson(jctx *c, const jv *v, const jv *indent, const jv *separators, bool sort_keys, jbuf *out);
/* Builtin globals (range, namespace, ...): returns true and a new value. */
bool jx_global(jctx *c, const char *name, jv *out);
em_status jx_call_builtin(jctx *c, jbuiltin_id id, jcallargs *a, jv *out);
/* Registers an object whose references must be cut at the end. */
bool jx_track(jctx *c, jv obj);
/* str.lower/upper/title/capitalize on UTF-8 (new string). */
jv jx_str_case(const jv *s, char mode);
/* Python str.splitlines() (keepends false) as a new list. */
em_status jx_splitlines(jctx *c, const jv *s, jv *out);
/* Python str.strip family; chars NULL for whitespace. mode 'l', 'r', 'b'. */
jv jx_str_strip(const jv *s, const jv *chars, char mode);

#endif
