/* ast.h — tokens of the template lexer and nodes of the parsed template.
 *
 * The lexer applies jinja2's whitespace rules (trim_blocks, lstrip_blocks,
 * "-" and "+" markers) while it cuts the source into tokens, so the parser
 * and evaluator never see whitespace control. Every token and node carries
 * its 1-based line and column for error messages. */
#ifndef EMBER_JINJA_AST_H
#define EMBER_JINJA_AST_H

#include "base/status.h"
#include "chat/jinja/value.h"

#include <stddef.h>

typedef enum jtok_kind {
    JT_EOF,
    JT_DATA,        /* literal template text (text, len) */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING,      /* text/len: the decoded value */
    JT_INT,
    JT_FLOAT,
    JT_OP           /* text: the operator spelling */
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int line, col;
    char *text; /* owned, NUL-terminated: DATA, NAME, STRING, OP */
    size_t len;
    int64_t ival;
    double fval;
} jtok;

typedef struct jtoks {
    jtok *v;
    size_t n, cap;
} jtoks;

/* Tokenizes src (the template text, UTF-8). On failure the message names
 * the line and column. toks is owned by the caller (jtoks_free). */
em_status jlex(const char *src, size_t len, jtoks *toks);
void jtoks_free(jtoks *toks);

typedef enum jnode_kind {
    /* expressions */
    JN_CONST,   /* value */
    JN_NAME,    /* name */
    JN_LIST,    /* kids */
    JN_TUPLE,   /* kids */
    JN_DICT,    /* kids: key, value, key, value... */
    JN_GETATTR, /* a . name */
    JN_GETITEM, /* a [ b ] */
    JN_SLICE,   /* a:b:c, each may be NULL */
    JN_NEG,     /* - a */
    JN_POS,     /* + a */
    JN_NOT,     /* not a */
    JN_BINOP,   /* a op b (op: + - * / // % ** ~) */
    JN_AND,
    JN_OR,
    JN_COMPARE, /* a, then kids[i] compared with ops[i] (==, !=, <, <=, >, >=, in, notin) */
    JN_CONDEXPR, /* b if a else c (c may be NULL) */
    JN_CALL,    /* a ( args ) */
    JN_FILTER,  /* a | name ( args ); a NULL in filter blocks */
    JN_TEST,    /* a is name ( args ) */
    JN_NSREF,   /* name . attr as an assignment target (attr in name2) */
    /* statements */
    JN_BODY,    /* kids: statements */
    JN_DATA,    /* value: literal text */
    JN_OUTPUT,  /* {{ a }} */
    JN_IF,      /* if a: body; else: body2 (elif is a nested JN_IF) */
    JN_FOR,     /* for a in b if c: body else body2; flags & JN_RECURSIVE */
    JN_SET,     /* set a = b */
    JN_SETBLOCK, /* set a | c (filter chain) : body */
    JN_MACRO,   /* macro name(params) : body */
    JN_CALLBLOCK, /* call(params) a : body (a is a JN_CALL) */
    JN_FILTERBLOCK, /* filter c : body */
    JN_WITH,    /* with kids[i] = kids2[i] : body */
    JN_BREAK,
    JN_CONTINUE,
    JN_GENERATION /* generation : body (transformers' assistant-mask tag) */
} jnode_kind;

enum {
    JN_RECURSIVE = 1,
    JN_USES_CALLER = 2,
    JN_USES_VARARGS = 4,
    JN_USES_KWARGS = 8,
    JN_PRINT_EACH = 16 /* {% print a, b %}: a is a JN_TUPLE of expressions */
};

typedef struct jnode jnode;

/* Call arguments: positional, keyword, *args, **kwargs. */
typedef struct jargs {
    jnode **pos;
    size_t npos;
    char **kwnames;
    jnode **kwvals;
    size_t nkw;
    jnode *star, *starstar;
} jargs;

struct jnode {
    jnode_kind kind;
    int line, col;
    int flags;
    jv value;          /* JN_CONST, JN_DATA */
    char *name;        /* names, attributes, filter/test names, operators */
    char *name2;       /* JN_NSREF attribute */
    jnode *a, *b, *c;
    jnode **kids;      /* list items, statements, compare operands */
    size_t nkids;
    jnode **kids2;     /* else bodies / with values */
    size_t nkids2;
    char **ops;        /* JN_COMPARE operators (nkids of them) */
    jargs args;        /* JN_CALL, JN_FILTER, JN_TEST */
    jnode *body, *body2;
    /* JN_MACRO / JN_CALLBLOCK signature */
    char **params;
    jnode **defaults;  /* nparams entries, NULL where no default */
    size_t nparams;
};

/* Parses a token list into a JN_BODY tree (owned by the caller, jnode_free). */
em_status jparse(const jtoks *toks, jnode **out);
void jnode_free(jnode *n);

#endif
