/* parse_internal.h — shared pieces of the output parsers (src/chat/parse_ files).
 *
 * The parser keeps the unconsumed tail of the reply in one buffer. A mode
 * step looks at that buffer and either consumes a prefix (emitting events)
 * or waits for more text. Every decision depends only on the text itself,
 * never on how it was chunked, so streaming and one-shot parsing agree.
 *
 * Tool-call extractors ("call handlers") are pure functions of the text
 * that starts at their marker: they answer NEED_MORE, OK (after emitting
 * the calls) or BAD (the first `consumed` bytes degrade to content). Once a
 * handler answers OK or BAD for some text, it answers the same for every
 * extension of that text. */
#ifndef EMBER_CHAT_PARSE_INTERNAL_H
#define EMBER_CHAT_PARSE_INTERNAL_H

#include "chat/chat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A tool call (from its marker to its end) longer than this is treated as
 * malformed: the parser never holds more than this much model text. */
#define PARSE_CALL_MAX ((size_t)1 << 20)
/* Whitespace held back at a section end (so it can be dropped before a
 * marker) is released once a run grows past this. */
#define PARSE_WS_MAX 4096
#define PARSE_NAME_MAX 256

/* Growable byte buffer; `oom` latches an allocation failure. */
typedef struct pbuf {
    char *p;
    size_t len, cap;
    bool oom;
} pbuf;

bool pbuf_put(pbuf *b, const void *s, size_t n);
bool pbuf_putc(pbuf *b, char c);
void pbuf_free(pbuf *b);
/* Appends s as a JSON string literal (quotes included); invalid UTF-8
 * bytes become U+FFFD. */
bool pbuf_put_json_string(pbuf *b, const char *s, size_t n);

typedef enum parse_result { PARSE_NEED_MORE, PARSE_OK, PARSE_BAD } parse_result;

/* Handler: s[0..n) starts with one of the format's markers; `final` means
 * no more text follows s. Sets *consumed on OK/BAD (BAD: > 0). */
typedef parse_result (*parse_call_fn)(chat_parser *p, const char *s, size_t n, bool final, size_t *consumed);

/* The tool-call syntax of one model family. */
typedef struct parse_tools {
    const char *const *markers; /* strings that open a call inside content */
    size_t n_markers;
    const char *const *closers; /* a pending call can only complete once one appears */
    size_t n_closers;
    parse_call_fn call;
} parse_tools;

extern const parse_tools parse_tools_hermes;
extern const parse_tools parse_tools_qwen_xml;
extern const parse_tools parse_tools_llama3;
extern const parse_tools parse_tools_deepseek;

typedef enum parse_mode { PARSE_MODE_START, PARSE_MODE_REASONING, PARSE_MODE_CONTENT } parse_mode;

/* Text-section state for one kind of text (content or reasoning). */
typedef struct parse_text {
    pbuf ws;        /* trailing whitespace not yet emitted */
    bool skip_ws;   /* drop leading whitespace (just after a marker) */
    bool ws_spill;  /* this whitespace run outgrew PARSE_WS_MAX: emit directly */
} parse_text;

struct chat_parser {
    chat_format fmt;
    json_t *tools; /* own reference, may be NULL */
    chat_event_fn fn;
    void *user;
    const parse_tools *tf; /* NULL: no tool calls */

    pbuf in;        /* unconsumed reply text */
    parse_mode mode;
    parse_text text[2]; /* [0] content, [1] reasoning */
    pbuf scratch;   /* event text assembly */

    bool bare_json; /* Llama 3: a bare JSON call may start here */
    size_t pending_seen;    /* bytes of a pending call its handler has seen */
    size_t pending_scanned; /* bytes of it already searched for closers */
    bool pending_ran;    /* handler ran at least once for the pending call */
    int n_calls;
    uint64_t id_state;
    bool broken; /* allocation failed: pass text through as content */
};

/* ---- parse_core.c --------------------------------------------------- */

/* Emits text of kind CHAT_EV_CONTENT or CHAT_EV_REASONING through the
 * section's whitespace handling. */
void parse_emit_text(chat_parser *p, chat_event_kind kind, const char *s, size_t n);
/* Ends the current section of `kind`: held whitespace is dropped (a
 * marker follows) or emitted (end of reply). */
void parse_end_text(chat_parser *p, chat_event_kind kind, bool drop);
/* Emits TOOL_START, TOOL_ARGS (args: compact JSON object text) and
 * TOOL_END for one complete call. */
void parse_emit_call(chat_parser *p, const char *name, size_t name_len, const char *args, size_t args_len);
/* The tool definition named name in p->tools (OpenAI {"type":"function",
 * "function":{...}} or a bare {"name":...}); NULL when absent. */
json_t *parse_tool_function(const chat_parser *p, const char *name);
void parse_seed_ids(chat_parser *p);

/* First occurrence of any marker in s[0..n): returns its offset and sets
 * *which, or returns n when none is complete. *safe is the length of the
 * prefix that cannot be part of a marker (not even of one cut at the end). */
size_t parse_find_marker(const char *s, size_t n, const char *const *markers, size_t n_markers,
                         size_t *which, size_t *safe);
/* True when s[0..n) is a proper prefix of m (m continues beyond n). */
bool parse_is_prefix(const char *s, size_t n, const char *m);
/* Compares s[i..] with m: 1 match (i advanced), 0 need more, -1 differs. */
int parse_expect(const char *s, size_t n, size_t *i, const char *m);
bool parse_is_ws(char c);
size_t parse_skip_ws(const char *s, size_t n, size_t i);

/* ---- parse_json.c --------------------------------------------------- */

/* s[0] == '{': finds the end (one past the matching '}') honouring strings.
 * 1 found, 0 need more, -1 not an object or nested too deep. */
int pj_object_end(const char *s, size_t n, size_t *end);
/* Validates that s[0..n) is exactly one JSON value (whitespace around
 * allowed) and appends its compact form to out (out may be NULL).
 * Numbers and string escapes are kept as written. false when invalid. */
bool pj_minify(const char *s, size_t n, pbuf *out);
/* In a valid JSON object s[0..n), finds the value of key (raw byte match
 * of the unescaped key text). Sets vs and vn to the value's span. */
bool pj_member(const char *s, size_t n, const char *key, size_t *vs, size_t *vn);
/* Decodes a valid JSON string literal s[0..n) into out (no NUL bytes
 * allowed). */
bool pj_string_value(const char *s, size_t n, pbuf *out);

/* JSON type classes of a valid value (by its first character). */
enum { PJ_STRING = 1, PJ_INTEGER = 2, PJ_NUMBER = 4, PJ_BOOLEAN = 8, PJ_OBJECT = 16, PJ_ARRAY = 32, PJ_NULL = 64 };
int pj_class(const char *s, size_t n);

/* Checks a function name: non-empty, at most PARSE_NAME_MAX bytes, valid
 * UTF-8, no control characters, no quotes or angle brackets. */
bool parse_name_ok(const char *s, size_t n);

/* ---- parse_hermes.c ------------------------------------------------- */

/* Checks a JSON call object {"name": .., "arguments"|"parameters": {..}}
 * (arguments may also be a string holding such an object) and, if `emit`,
 * emits it. false (nothing emitted) when it is not one. With
 * require_known the name must be one of the request's tools. */
bool parse_json_call(chat_parser *p, const char *s, size_t n, bool require_known, bool emit);

/* ---- parse_stream.c ------------------------------------------------- */

/* Drops the first n bytes of the unconsumed text. */
void parse_consume(chat_parser *p, size_t n);
/* Whether a pending call (or bare JSON) of `view` bytes is worth handing
 * to its handler again: on the first look, when one of `closers` arrived
 * in the new bytes, when the text grew by a quarter, or at the end. Keeps
 * re-parsing of long calls linear overall. */
bool parse_should_run(chat_parser *p, const char *s, size_t view, bool final,
                      const char *const *closers, size_t n_closers);
void parse_pending_reset(chat_parser *p);
/* Records that the handler saw `view` bytes and needs more. */
void parse_pending_wait(chat_parser *p, size_t view);

/* ---- parse_reasoning.c ---------------------------------------------- */

/* Mode steps: return true when they made progress. */
bool parse_step_start(chat_parser *p, bool final);
bool parse_step_reasoning(chat_parser *p, bool final);

/* ---- parse_llama3.c ------------------------------------------------- */

/* Content-mode hook for a bare JSON call at the start of the reply:
 * returns true when it consumed text or settled that none can follow. */
bool parse_llama3_bare_step(chat_parser *p, bool final, bool *progress);

#endif
