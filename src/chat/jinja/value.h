/* value.h — the values a template computes with.
 *
 * A jv is a small tagged union passed by value. Strings, lists, dicts and
 * objects live on the heap with a reference count: jv_retain takes a
 * reference, jv_release drops one. Functions that return a jv return a new
 * reference (the caller releases it); functions taking `const jv *` borrow.
 * Values mirror Python's: None, bool, int (64-bit, overflow is an error),
 * float, str (UTF-8, indexed by code point), list/tuple, dict (insertion
 * ordered), and Undefined, which renders empty and fails when used. */
#ifndef EMBER_JINJA_VALUE_H
#define EMBER_JINJA_VALUE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum jv_kind {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_OBJ
} jv_kind;

typedef struct jv_str {
    atomic_int rc; /* atomic: a parsed template's constants are shared by concurrent renders */
    size_t len;
    char data[]; /* NUL-terminated, valid UTF-8 */
} jv_str;

typedef struct jv jv;
typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jv_obj jv_obj;

struct jv {
    jv_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        jv_str *s; /* JV_STR; JV_UNDEF: the reason it is undefined (may be NULL) */
        jv_list *l;
        jv_dict *d;
        jv_obj *o;
    } u;
};

struct jv_list {
    atomic_int rc;
    bool tuple;
    size_t n, cap;
    jv *items;
};

struct jv_dict {
    atomic_int rc;
    size_t n, cap;
    jv *keys;
    jv *vals;
};

/* Objects: namespaces, macros, builtin functions, bound methods, loop
 * state. Their payload is defined by the evaluator (eval.h). */
typedef enum jo_kind { JO_NAMESPACE, JO_MACRO, JO_BUILTIN, JO_METHOD, JO_LOOP, JO_JOINER, JO_CYCLER } jo_kind;
typedef void (*jo_free_fn)(jv_obj *o);
struct jv_obj {
    atomic_int rc;
    jo_kind kind;
    jo_free_fn free_fn; /* releases the payload */
};

/* ---- constructors (new references; NULL heap parts mean out of memory:
 * check with jv_is_oom) ---- */
static inline jv jv_undef(void) { jv v = {.kind = JV_UNDEF}; v.u.s = NULL; return v; }
static inline jv jv_none(void) { jv v = {.kind = JV_NONE}; v.u.i = 0; return v; }
static inline jv jv_bool(bool b) { jv v = {.kind = JV_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.kind = JV_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.kind = JV_FLOAT}; v.u.f = f; return v; }
jv jv_str_new(const char *s, size_t len);
jv jv_cstr(const char *s);
/* Undefined carrying a reason ("'x' is undefined"), printf-style. */
jv jv_undef_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
jv jv_list_new(size_t cap);
jv jv_tuple_new(size_t cap);
jv jv_dict_new(void);
jv jv_obj_wrap(jv_obj *o);
/* True when a constructor failed to allocate. */
bool jv_is_oom(jv v);

static inline bool jv_is_heap(jv v) { return v.kind >= JV_STR || (v.kind == JV_UNDEF && v.u.s); }
jv jv_retain(jv v);
void jv_release(jv v);

/* ---- lists and dicts ---- */
/* Appends, taking ownership of item. false on OOM (item released). */
bool jv_list_push(jv list, jv item);
/* Sets key -> val (both owned by the dict afterwards); replaces an equal key. */
bool jv_dict_set(jv dict, jv key, jv val);
bool jv_dict_set_str(jv dict, const char *key, jv val);
/* Borrowed pointer to the value under key, or NULL. */
const jv *jv_dict_get(jv dict, const jv *key);
const jv *jv_dict_get_str(jv dict, const char *key);
jv jv_list_copy(jv list, bool tuple);
jv jv_dict_copy(jv dict);

/* ---- Python semantics ---- */
bool jv_truthy(const jv *v);
bool jv_is_number(const jv *v); /* int, float or bool */
double jv_as_double(const jv *v);
bool jv_equal(const jv *a, const jv *b);
/* Ordering for <, sort, min, max: returns false when the types cannot be
 * ordered (Python TypeError). *cmp is -1, 0 or 1. */
bool jv_compare(const jv *a, const jv *b, int *cmp);
const char *jv_type_name(const jv *v);
/* Hashable as a dict key (str, int, float, bool, None, tuples of those). */
bool jv_hashable(const jv *v);

/* ---- strings ---- */
/* Growable byte buffer. On allocation failure `oom` is set and further
 * appends are ignored. */
typedef struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
} jbuf;
void jbuf_put(jbuf *b, const char *s, size_t n);
void jbuf_puts(jbuf *b, const char *s);
void jbuf_putc(jbuf *b, char c);
void jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Moves the buffer into a string value and resets b. */
jv jbuf_take(jbuf *b);
void jbuf_free(jbuf *b);

/* str(v): what {{ v }} prints. Appends to b. */
void jv_to_str(jbuf *b, const jv *v);
/* repr(v), as Python writes it (used inside containers). */
void jv_repr(jbuf *b, const jv *v);
/* str(v) as a new string value. */
jv jv_stringify(const jv *v);
/* Python's float repr (shortest round-trip, "1.0", "1e+16", "inf"). */
void jv_float_repr(jbuf *b, double f);

/* Number of code points; byte offset of code point i (i <= count). */
size_t jv_utf8_count(const char *s, size_t len);
size_t jv_utf8_offset(const char *s, size_t len, size_t cp_index);
/* Python's str.isspace for one code point. */
bool jv_is_space(uint32_t cp);

/* ---- JSON ---- */
/* Converts a jansson value (borrowed) into a new jv. Integers that do not
 * fit int64 are not produced by jansson; reals become floats. */
jv jv_from_json(json_t *j);

#endif
