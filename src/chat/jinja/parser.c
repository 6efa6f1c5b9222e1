/* parser.c — recursive-descent parser from tokens to the node tree, with
 * jinja2's grammar and operator precedence:
 *   condexpr: or ("if" or ("else" condexpr)?)*
 *   or / and / not / compare (chained, in, not in)
 *   + -   then ~   then * / // %   then ** (left-assoc)   then unary - +
 *   postfix: .name [subscript] (call), then | filter, is test, (call) */
#include "chat/jinja/ast.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define JPARSE_MAX_DEPTH 200

typedef struct parser {
    const jtoks *t;
    size_t i;
    int depth;
    int loop_depth;
    jnode *macro; /* innermost macro or call block being parsed */
} parser;

static const jtok *cur(const parser *p) { return &p->t->v[p->i]; }
static const jtok *peek(const parser *p) { return &p->t->v[p->i + 1 < p->t->n ? p->i + 1 : p->i]; }
static void advance(parser *p) {
    if (p->i + 1 < p->t->n) p->i++;
}

static const char *tok_desc(const jtok *t) {
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template data";
    case JT_VAR_BEGIN: return "begin of print statement";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_BEGIN: return "begin of statement block";
    case JT_BLOCK_END: return "end of statement block";
    case JT_NAME: return t->text;
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    case JT_OP: return t->text;
    }
    return "token";
}

static em_status fail_at(const jtok *t, const char *fmt, const char *arg) {
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg);
    return em_fail(EM_ERR_FORMAT, "template syntax error at line %d, column %d: %s", t->line, t->col, msg);
}

static em_status fail_unexpected(const parser *p) { return fail_at(cur(p), "unexpected '%s'", tok_desc(cur(p))); }

static bool is_op(const parser *p, const char *op) { return cur(p)->kind == JT_OP && strcmp(cur(p)->text, op) == 0; }
static bool is_name(const parser *p, const char *name) { return cur(p)->kind == JT_NAME && strcmp(cur(p)->text, name) == 0; }

static bool skip_op(parser *p, const char *op) {
    if (!is_op(p, op)) return false;
    advance(p);
    return true;
}
static bool skip_name(parser *p, const char *name) {
    if (!is_name(p, name)) return false;
    advance(p);
    return true;
}

static em_status expect_op(parser *p, const char *op) {
    if (skip_op(p, op)) return EM_OK;
    char msg[64];
    snprintf(msg, sizeof msg, "expected '%s', got '%%s'", op);
    return fail_at(cur(p), msg, tok_desc(cur(p)));
}

static em_status expect_kind(parser *p, jtok_kind k, const char *what) {
    if (cur(p)->kind == k) {
        advance(p);
        return EM_OK;
    }
    char msg[80];
    snprintf(msg, sizeof msg, "expected %s, got '%%s'", what);
    return fail_at(cur(p), msg, tok_desc(cur(p)));
}

static jnode *nnew(jnode_kind kind, const jtok *t) {
    jnode *n = em_calloc(1, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    n->line = t->line;
    n->col = t->col;
    return n;
}

static em_status oom(void) { return em_fail(EM_ERR_NOMEM, "template: out of memory"); }

static em_status push_kid(jnode ***arr, size_t *n, jnode *k) {
    size_t cap = *n;
    if (!em_grow((void **)arr, &cap, *n + 1, sizeof(jnode *))) {
        jnode_free(k);
        return oom();
    }
    (*arr)[(*n)++] = k;
    return EM_OK;
}

void jnode_free(jnode *n) {
    if (!n) return;
    jv_release(n->value);
    free(n->name);
    free(n->name2);
    jnode_free(n->a);
    jnode_free(n->b);
    jnode_free(n->c);
    for (size_t i = 0; i < n->nkids; i++) jnode_free(n->kids[i]);
    free(n->kids);
    for (size_t i = 0; i < n->nkids2; i++) jnode_free(n->kids2[i]);
    free(n->kids2);
    if (n->ops)
        for (size_t i = 0; i < n->nkids; i++) free(n->ops[i]);
    free(n->ops);
    for (size_t i = 0; i < n->args.npos; i++) jnode_free(n->args.pos[i]);
    free(n->args.pos);
    for (size_t i = 0; i < n->args.nkw; i++) {
        free(n->args.kwnames[i]);
        jnode_free(n->args.kwvals[i]);
    }
    free(n->args.kwnames);
    free(n->args.kwvals);
    jnode_free(n->args.star);
    jnode_free(n->args.starstar);
    jnode_free(n->body);
    jnode_free(n->body2);
    for (size_t i = 0; i < n->nparams; i++) {
        free(n->params[i]);
        jnode_free(n->defaults[i]);
    }
    free(n->params);
    free(n->defaults);
    free(n);
}

static em_status parse_expr(parser *p, bool condexpr, jnode **out);
static em_status parse_unary(parser *p, bool with_filter, jnode **out);
static em_status parse_primary(parser *p, jnode **out);
static em_status parse_postfix(parser *p, jnode **node);
static em_status parse_tuple(parser *p, bool simplified, bool condexpr, const char *extra_end, bool explicit_parens, jnode **out);
static em_status subparse(parser *p, const char *const *end_names, jnode **out);

static em_status enter(parser *p) {
    if (++p->depth > JPARSE_MAX_DEPTH) return fail_at(cur(p), "%s", "expression nested too deeply");
    return EM_OK;
}

/* ---- expressions ---- */

static em_status parse_call_args(parser *p, jargs *a) {
    const jtok *open = cur(p);
    EM_TRY(expect_op(p, "("));
    bool need_comma = false;
    while (!is_op(p, ")")) {
        if (need_comma) {
            EM_TRY(expect_op(p, ","));
            if (is_op(p, ")")) break;
        }
        jnode *e = NULL;
        if (skip_op(p, "*")) {
            if (a->star || a->starstar) return fail_at(open, "%s", "invalid syntax for function call expression");
            EM_TRY(parse_expr(p, true, &a->star));
        } else if (skip_op(p, "**")) {
            if (a->starstar) return fail_at(open, "%s", "invalid syntax for function call expression");
            EM_TRY(parse_expr(p, true, &a->starstar));
        } else if (cur(p)->kind == JT_NAME && peek(p)->kind == JT_OP && strcmp(peek(p)->text, "=") == 0) {
            if (a->starstar) return fail_at(open, "%s", "invalid syntax for function call expression");
            char *key = em_strdup(cur(p)->text);
            if (!key) return oom();
            advance(p);
            advance(p);
            em_status st = parse_expr(p, true, &e);
            size_t cap = a->nkw, cap2 = a->nkw;
            if (st == EM_OK && (!em_grow((void **)&a->kwnames, &cap, a->nkw + 1, sizeof(char *)) ||
                                !em_grow((void **)&a->kwvals, &cap2, a->nkw + 1, sizeof(jnode *))))
                st = oom();
            if (st != EM_OK) {
                free(key);
                jnode_free(e);
                return st;
            }
            a->kwnames[a->nkw] = key;
            a->kwvals[a->nkw++] = e;
        } else {
            if (a->star || a->starstar || a->nkw) return fail_at(open, "%s", "invalid syntax for function call expression");
            EM_TRY(parse_expr(p, true, &e));
            EM_TRY(push_kid(&a->pos, &a->npos, e));
        }
        need_comma = true;
    }
    advance(p);
    return EM_OK;
}

/* Filter or test name, possibly dotted. */
static em_status parse_dotted_name(parser *p, char **out) {
    if (cur(p)->kind != JT_NAME) return fail_at(cur(p), "expected name, got '%s'", tok_desc(cur(p)));
    jbuf b = {0};
    jbuf_puts(&b, cur(p)->text);
    advance(p);
    while (is_op(p, ".") && peek(p)->kind == JT_NAME) {
        advance(p);
        jbuf_putc(&b, '.');
        jbuf_puts(&b, cur(p)->text);
        advance(p);
    }
    if (b.oom) {
        jbuf_free(&b);
        return oom();
    }
    *out = b.p;
    return EM_OK;
}

/* node | name(args) | name ... ; node may be NULL (filter blocks). */
static em_status parse_filter(parser *p, jnode **node, bool start_inline) {
    while (is_op(p, "|") || start_inline) {
        if (!start_inline) advance(p);
        start_inline = false;
        jnode *f = nnew(JN_FILTER, cur(p));
        if (!f) return oom();
        f->a = *node;
        *node = f;
        EM_TRY(parse_dotted_name(p, &f->name));
        if (is_op(p, "(")) EM_TRY(parse_call_args(p, &f->args));
    }
    return EM_OK;
}

static em_status parse_test(parser *p, jnode **node) {
    const jtok *is = cur(p);
    advance(p);
    bool negated = skip_name(p, "not");
    jnode *t = nnew(JN_TEST, is);
    if (!t) return oom();
    t->a = *node;
    *node = t;
    EM_TRY(parse_dotted_name(p, &t->name));
    const jtok *c = cur(p);
    if (is_op(p, "(")) {
        EM_TRY(parse_call_args(p, &t->args));
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT || is_op(p, "(") ||
                is_op(p, "[") || is_op(p, "{")) &&
               !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
        if (is_name(p, "is")) return fail_at(c, "%s", "You cannot chain multiple tests with is");
        jnode *arg = NULL;
        EM_TRY(parse_primary(p, &arg));
        em_status st = parse_postfix(p, &arg);
        if (st != EM_OK) {
            jnode_free(arg);
            return st;
        }
        EM_TRY(push_kid(&t->args.pos, &t->args.npos, arg));
    }
    if (negated) {
        jnode *n = nnew(JN_NOT, is);
        if (!n) return oom();
        n->a = *node;
        *node = n;
    }
    return EM_OK;
}

static em_status parse_call(parser *p, jnode **node) {
    jnode *c = nnew(JN_CALL, cur(p));
    if (!c) return oom();
    c->a = *node;
    *node = c;
    return parse_call_args(p, &c->args);
}

static em_status parse_subscribed(parser *p, jnode **out) {
    const jtok *start = cur(p);
    jnode *parts[3] = {NULL, NULL, NULL};
    em_status st = EM_OK;
    if (!is_op(p, ":")) {
        st = parse_expr(p, true, &parts[0]);
        if (st != EM_OK) return st;
        if (!is_op(p, ":")) {
            *out = parts[0];
            return EM_OK;
        }
    }
    advance(p); /* ':' */
    if (!is_op(p, ":") && !is_op(p, "]") && !is_op(p, ",")) st = parse_expr(p, true, &parts[1]);
    if (st == EM_OK && skip_op(p, ":") && !is_op(p, "]") && !is_op(p, ",")) st = parse_expr(p, true, &parts[2]);
    jnode *s = st == EM_OK ? nnew(JN_SLICE, start) : NULL;
    if (!s) {
        for (int i = 0; i < 3; i++) jnode_free(parts[i]);
        return st != EM_OK ? st : oom();
    }
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    *out = s;
    return EM_OK;
}

static em_status parse_subscript(parser *p, jnode **node) {
    const jtok *t = cur(p);
    if (skip_op(p, ".")) {
        const jtok *attr = cur(p);
        if (attr->kind == JT_NAME) {
            jnode *g = nnew(JN_GETATTR, t);
            if (!g) return oom();
            g->a = *node;
            *node = g;
            g->name = em_strdup(attr->text);
            advance(p);
            return g->name ? EM_OK : oom();
        }
        if (attr->kind != JT_INT) return fail_at(attr, "%s", "expected name or number");
        jnode *g = nnew(JN_GETITEM, t);
        if (!g) return oom();
        g->a = *node;
        *node = g;
        if (!(g->b = nnew(JN_CONST, attr))) return oom();
        g->b->value = jv_int(attr->ival);
        advance(p);
        return EM_OK;
    }
    advance(p); /* '[' */
    jnode *g = nnew(JN_GETITEM, t);
    if (!g) return oom();
    g->a = *node;
    *node = g;
    jnode *tuple = NULL;
    while (!is_op(p, "]")) {
        if (g->b || tuple) {
            EM_TRY(expect_op(p, ","));
            if (!tuple) {
                if (!(tuple = nnew(JN_TUPLE, t))) return oom();
                tuple->kids = em_malloc(sizeof(jnode *));
                if (!tuple->kids) {
                    jnode_free(tuple);
                    return oom();
                }
                tuple->kids[tuple->nkids++] = g->b;
                g->b = tuple;
            }
        }
        jnode *e = NULL;
        EM_TRY(parse_subscribed(p, &e));
        if (tuple) EM_TRY(push_kid(&tuple->kids, &tuple->nkids, e));
        else g->b = e;
    }
    advance(p);
    if (!g->b) return fail_at(t, "%s", "expected subscript expression");
    return EM_OK;
}

static em_status parse_postfix(parser *p, jnode **node) {
    for (;;) {
        if (is_op(p, ".") || is_op(p, "[")) EM_TRY(parse_subscript(p, node));
        else if (is_op(p, "(")) EM_TRY(parse_call(p, node));
        else return EM_OK;
    }
}

static em_status parse_filter_expr(parser *p, jnode **node) {
    for (;;) {
        if (is_op(p, "|")) EM_TRY(parse_filter(p, node, false));
        else if (is_name(p, "is")) EM_TRY(parse_test(p, node));
        else if (is_op(p, "(")) EM_TRY(parse_call(p, node));
        else return EM_OK;
    }
}

static em_status parse_list_or_dict(parser *p, bool dict, jnode **out) {
    const jtok *open = cur(p);
    advance(p);
    jnode *n = nnew(dict ? JN_DICT : JN_LIST, open);
    if (!n) return oom();
    *out = n;
    const char *close = dict ? "}" : "]";
    while (!is_op(p, close)) {
        if (n->nkids) {
            EM_TRY(expect_op(p, ","));
            if (is_op(p, close)) break;
        }
        jnode *e = NULL;
        EM_TRY(parse_expr(p, true, &e));
        EM_TRY(push_kid(&n->kids, &n->nkids, e));
        if (dict) {
            EM_TRY(expect_op(p, ":"));
            EM_TRY(parse_expr(p, true, &e));
            EM_TRY(push_kid(&n->kids, &n->nkids, e));
        }
    }
    advance(p);
    return EM_OK;
}

static void note_special_name(parser *p, const char *name) {
    if (!p->macro) return;
    if (strcmp(name, "caller") == 0) p->macro->flags |= JN_USES_CALLER;
    else if (strcmp(name, "varargs") == 0) p->macro->flags |= JN_USES_VARARGS;
    else if (strcmp(name, "kwargs") == 0) p->macro->flags |= JN_USES_KWARGS;
}

static em_status parse_primary(parser *p, jnode **out) {
    const jtok *t = cur(p);
    jnode *n = NULL;
    if (t->kind == JT_NAME) {
        n = nnew(JN_CONST, t);
        if (!n) return oom();
        const char *v = t->text;
        if (!strcmp(v, "true") || !strcmp(v, "True")) n->value = jv_bool(true);
        else if (!strcmp(v, "false") || !strcmp(v, "False")) n->value = jv_bool(false);
        else if (!strcmp(v, "none") || !strcmp(v, "None")) n->value = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = em_strdup(v);
            note_special_name(p, v);
            if (!n->name) {
                jnode_free(n);
                return oom();
            }
        }
        advance(p);
    } else if (t->kind == JT_STRING) {
        jbuf b = {0};
        while (cur(p)->kind == JT_STRING) {
            jbuf_put(&b, cur(p)->text, cur(p)->len);
            advance(p);
        }
        n = nnew(JN_CONST, t);
        if (n) n->value = jv_str_new(b.p ? b.p : "", b.len);
        bool bad = b.oom || !n || jv_is_oom(n->value);
        jbuf_free(&b);
        if (bad) {
            jnode_free(n);
            return oom();
        }
    } else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        n = nnew(JN_CONST, t);
        if (!n) return oom();
        n->value = t->kind == JT_INT ? jv_int(t->ival) : jv_float(t->fval);
        advance(p);
    } else if (is_op(p, "(")) {
        advance(p);
        EM_TRY(parse_tuple(p, false, true, NULL, true, &n));
        em_status st = expect_op(p, ")");
        if (st != EM_OK) {
            jnode_free(n);
            return st;
        }
    } else if (is_op(p, "[") || is_op(p, "{")) {
        em_status st = parse_list_or_dict(p, is_op(p, "{"), &n);
        if (st != EM_OK) {
            jnode_free(n);
            return st;
        }
    } else {
        return fail_unexpected(p);
    }
    *out = n;
    return EM_OK;
}

static em_status parse_unary(parser *p, bool with_filter, jnode **out) {
    EM_TRY(enter(p));
    const jtok *t = cur(p);
    jnode *n = NULL;
    em_status st;
    if (is_op(p, "-") || is_op(p, "+")) {
        advance(p);
        n = nnew(strcmp(t->text, "-") == 0 ? JN_NEG : JN_POS, t);
        if (!n) return oom();
        st = parse_unary(p, false, &n->a);
    } else {
        st = parse_primary(p, &n);
    }
    if (st == EM_OK) st = parse_postfix(p, &n);
    if (st == EM_OK && with_filter) st = parse_filter_expr(p, &n);
    p->depth--;
    if (st != EM_OK) {
        jnode_free(n);
        return st;
    }
    *out = n;
    return EM_OK;
}

typedef em_status (*level_fn)(parser *p, jnode **out);

/* Left-associative binary level: operand (op operand)*. */
static em_status binary_level(parser *p, level_fn operand, const char *const *ops, jnode **out) {
    jnode *left = NULL;
    EM_TRY(operand(p, &left));
    for (;;) {
        const char *hit = NULL;
        for (int i = 0; ops[i] && !hit; i++)
            if (is_op(p, ops[i])) hit = ops[i];
        if (!hit) break;
        jnode *b = nnew(JN_BINOP, cur(p));
        if (!b || !(b->name = em_strdup(hit))) {
            jnode_free(b);
            jnode_free(left);
            return oom();
        }
        advance(p);
        b->a = left;
        left = b;
        em_status st = operand(p, &b->b);
        if (st != EM_OK) {
            jnode_free(left);
            return st;
        }
    }
    *out = left;
    return EM_OK;
}

static em_status parse_unary_f(parser *p, jnode **out) { return parse_unary(p, true, out); }
static em_status parse_pow(parser *p, jnode **out) {
    static const char *const ops[] = {"**", NULL};
    return binary_level(p, parse_unary_f, ops, out);
}
static em_status parse_math2(parser *p, jnode **out) {
    static const char *const ops[] = {"*", "/", "//", "%", NULL};
    return binary_level(p, parse_pow, ops, out);
}
static em_status parse_concat(parser *p, jnode **out) {
    static const char *const ops[] = {"~", NULL};
    return binary_level(p, parse_math2, ops, out);
}
static em_status parse_math1(parser *p, jnode **out) {
    static const char *const ops[] = {"+", "-", NULL};
    return binary_level(p, parse_concat, ops, out);
}

static em_status parse_compare(parser *p, jnode **out) {
    static const char *const cmp_ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
    jnode *left = NULL, *cmp = NULL;
    EM_TRY(parse_math1(p, &left));
    for (;;) {
        const char *op = NULL;
        for (int i = 0; cmp_ops[i] && !op; i++)
            if (is_op(p, cmp_ops[i])) op = cmp_ops[i];
        const jtok *t = cur(p);
        if (op) {
            advance(p);
        } else if (is_name(p, "in")) {
            op = "in";
            advance(p);
        } else if (is_name(p, "not") && peek(p)->kind == JT_NAME && strcmp(peek(p)->text, "in") == 0) {
            op = "notin";
            advance(p);
            advance(p);
        } else {
            break;
        }
        if (!cmp) {
            if (!(cmp = nnew(JN_COMPARE, t))) {
                jnode_free(left);
                return oom();
            }
            cmp->a = left;
        }
        jnode *rhs = NULL;
        em_status st = parse_math1(p, &rhs);
        size_t cap = cmp->nkids;
        if (st == EM_OK && !em_grow((void **)&cmp->ops, &cap, cmp->nkids + 1, sizeof(char *))) st = oom();
        char *opcopy = st == EM_OK ? em_strdup(op) : NULL;
        if (st == EM_OK && !opcopy) st = oom();
        if (st == EM_OK) {
            cmp->ops[cmp->nkids] = opcopy;
            st = push_kid(&cmp->kids, &cmp->nkids, rhs);
            if (st != EM_OK) { free(opcopy); cmp->ops[cmp->nkids] = NULL; }
            rhs = NULL;
        }
        if (st != EM_OK) {
            jnode_free(rhs);
            jnode_free(cmp);
            return st;
        }
    }
    *out = cmp ? cmp : left;
    return EM_OK;
}

static em_status parse_not(parser *p, jnode **out) {
    if (is_name(p, "not")) {
        jnode *n = nnew(JN_NOT, cur(p));
        if (!n) return oom();
        advance(p);
        EM_TRY(enter(p));
        em_status st = parse_not(p, &n->a);
        p->depth--;
        if (st != EM_OK) {
            jnode_free(n);
            return st;
        }
        *out = n;
        return EM_OK;
    }
    return parse_compare(p, out);
}

static em_status logic_level(parser *p, level_fn operand, const char *word, jnode_kind kind, jnode **out) {
    jnode *left = NULL;
    EM_TRY(operand(p, &left));
    while (is_name(p, word)) {
        jnode *n = nnew(kind, cur(p));
        if (!n) {
            jnode_free(left);
            return oom();
        }
        advance(p);
        n->a = left;
        left = n;
        em_status st = operand(p, &n->b);
        if (st != EM_OK) {
            jnode_free(left);
            return st;
        }
    }
    *out = left;
    return EM_OK;
}

static em_status parse_and(parser *p, jnode **out) { return logic_level(p, parse_not, "and", JN_AND, out); }
static em_status parse_or(parser *p, jnode **out) { return logic_level(p, parse_and, "or", JN_OR, out); }

static em_status parse_condexpr(parser *p, jnode **out) {
    jnode *e1 = NULL;
    EM_TRY(parse_or(p, &e1));
    while (is_name(p, "if")) {
        jnode *c = nnew(JN_CONDEXPR, cur(p));
        if (!c) {
            jnode_free(e1);
            return oom();
        }
        advance(p);
        c->b = e1;
        e1 = c;
        em_status st = parse_or(p, &c->a);
        if (st == EM_OK && skip_name(p, "else")) st = parse_condexpr(p, &c->c);
        if (st != EM_OK) {
            jnode_free(e1);
            return st;
        }
    }
    *out = e1;
    return EM_OK;
}

static em_status parse_expr(parser *p, bool condexpr, jnode **out) {
    EM_TRY(enter(p));
    em_status st = condexpr ? parse_condexpr(p, out) : parse_or(p, out);
    p->depth--;
    return st;
}

static bool tuple_end(const parser *p, const char *extra_end) {
    const jtok *t = cur(p);
    if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || is_op(p, ")")) return true;
    return extra_end && is_name(p, extra_end);
}

static em_status parse_tuple(parser *p, bool simplified, bool condexpr, const char *extra_end, bool explicit_parens, jnode **out) {
    const jtok *start = cur(p);
    jnode *t = nnew(JN_TUPLE, start);
    if (!t) return oom();
    bool is_tuple = false;
    em_status st = EM_OK;
    for (;;) {
        if (t->nkids && (st = expect_op(p, ",")) != EM_OK) break;
        if (tuple_end(p, extra_end)) break;
        jnode *e = NULL;
        st = simplified ? parse_primary(p, &e) : parse_expr(p, condexpr, &e);
        if (st == EM_OK) st = push_kid(&t->kids, &t->nkids, e);
        if (st != EM_OK) break;
        if (is_op(p, ",")) is_tuple = true;
        else break;
    }
    if (st != EM_OK) {
        jnode_free(t);
        return st;
    }
    if (!is_tuple) {
        if (t->nkids) {
            *out = t->kids[0];
            t->nkids = 0;
            jnode_free(t);
            return EM_OK;
        }
        if (!explicit_parens) {
            jnode_free(t);
            return fail_at(cur(p), "Expected an expression, got '%s'", tok_desc(cur(p)));
        }
    }
    *out = t;
    return EM_OK;
}

/* ---- statements ---- */

static bool can_assign(const jnode *n) {
    if (n->kind == JN_NAME) return true;
    if (n->kind != JN_TUPLE) return false;
    for (size_t i = 0; i < n->nkids; i++)
        if (!can_assign(n->kids[i])) return false;
    return true;
}

static em_status parse_assign_target(parser *p, bool with_ns, const char *extra_end, jnode **out) {
    const jtok *t = cur(p);
    if (with_ns && t->kind == JT_NAME && peek(p)->kind == JT_OP && strcmp(peek(p)->text, ".") == 0) {
        jnode *n = nnew(JN_NSREF, t);
        if (!n || !(n->name = em_strdup(t->text))) {
            jnode_free(n);
            return oom();
        }
        advance(p);
        advance(p);
        if (cur(p)->kind != JT_NAME) {
            jnode_free(n);
            return fail_at(cur(p), "expected name, got '%s'", tok_desc(cur(p)));
        }
        n->name2 = em_strdup(cur(p)->text);
        advance(p);
        if (!n->name2) {
            jnode_free(n);
            return oom();
        }
        *out = n;
        return EM_OK;
    }
    jnode *n = NULL;
    EM_TRY(parse_tuple(p, true, true, extra_end, false, &n));
    if (!can_assign(n)) {
        jnode_free(n);
        return fail_at(t, "%s", "can't assign to this expression");
    }
    *out = n;
    return EM_OK;
}

static em_status parse_name_only(parser *p, char **out) {
    if (cur(p)->kind != JT_NAME) return fail_at(cur(p), "expected name, got '%s'", tok_desc(cur(p)));
    *out = em_strdup(cur(p)->text);
    advance(p);
    return *out ? EM_OK : oom();
}

/* Parses statements up to one of end_names; with drop_needle the end
 * name is consumed (the caller then expects the block end). */
static em_status parse_statements(parser *p, const char *const *end_names, bool drop_needle, jnode **out) {
    skip_op(p, ":");
    EM_TRY(expect_kind(p, JT_BLOCK_END, "end of statement block"));
    EM_TRY(subparse(p, end_names, out));
    if (cur(p)->kind == JT_EOF) {
        char msg[160];
        snprintf(msg, sizeof msg, "unexpected end of template, expected '%s'", end_names[0]);
        return fail_at(cur(p), "%s", msg);
    }
    if (drop_needle) advance(p);
    return EM_OK;
}

static em_status parse_signature(parser *p, jnode *n) {
    EM_TRY(expect_op(p, "("));
    while (!is_op(p, ")")) {
        if (n->nparams) EM_TRY(expect_op(p, ","));
        char *name = NULL;
        EM_TRY(parse_name_only(p, &name));
        size_t c1 = n->nparams, c2 = n->nparams;
        if (!em_grow((void **)&n->params, &c1, n->nparams + 1, sizeof(char *)) ||
            !em_grow((void **)&n->defaults, &c2, n->nparams + 1, sizeof(jnode *))) {
            free(name);
            return oom();
        }
        n->params[n->nparams] = name;
        n->defaults[n->nparams] = NULL;
        n->nparams++;
        if (skip_op(p, "=")) {
            EM_TRY(parse_expr(p, true, &n->defaults[n->nparams - 1]));
        } else if (n->nparams > 1 && n->defaults[n->nparams - 2]) {
            return fail_at(cur(p), "%s", "non-default argument follows default argument");
        }
    }
    advance(p);
    return EM_OK;
}

static em_status parse_for(parser *p, jnode *n) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    EM_TRY(parse_assign_target(p, false, "in", &n->a));
    if (!skip_name(p, "in")) return fail_at(cur(p), "expected 'in', got '%s'", tok_desc(cur(p)));
    EM_TRY(parse_tuple(p, false, false, "recursive", false, &n->b));
    if (skip_name(p, "if")) EM_TRY(parse_expr(p, true, &n->c));
    if (skip_name(p, "recursive")) n->flags |= JN_RECURSIVE;
    p->loop_depth++;
    em_status st = parse_statements(p, ends, false, &n->body);
    p->loop_depth--;
    EM_TRY(st);
    bool has_else = is_name(p, "else");
    advance(p);
    if (has_else) EM_TRY(parse_statements(p, endfor, true, &n->body2));
    return EM_OK;
}

static em_status parse_if(parser *p, jnode *n) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    EM_TRY(parse_tuple(p, false, false, NULL, false, &n->a));
    EM_TRY(parse_statements(p, ends, false, &n->body));
    if (is_name(p, "elif")) {
        jnode *e = nnew(JN_IF, cur(p));
        if (!e) return oom();
        advance(p);
        if (!(n->body2 = nnew(JN_BODY, cur(p)))) {
            jnode_free(e);
            return oom();
        }
        EM_TRY(push_kid(&n->body2->kids, &n->body2->nkids, e));
        return parse_if(p, e);
    }
    bool has_else = is_name(p, "else");
    advance(p);
    if (has_else) EM_TRY(parse_statements(p, endif, true, &n->body2));
    return EM_OK;
}

static em_status parse_set(parser *p, jnode *n) {
    static const char *const ends[] = {"endset", NULL};
    EM_TRY(parse_assign_target(p, true, NULL, &n->a));
    if (skip_op(p, "=")) return parse_tuple(p, false, true, NULL, false, &n->b);
    n->kind = JN_SETBLOCK;
    EM_TRY(parse_filter(p, &n->c, false));
    return parse_statements(p, ends, true, &n->body);
}

static em_status parse_macro_like(parser *p, jnode *n, const char *endname) {
    const char *ends[] = {endname, NULL};
    jnode *outer = p->macro;
    int outer_loops = p->loop_depth;
    p->macro = n;
    p->loop_depth = 0;
    em_status st = parse_statements(p, ends, true, &n->body);
    p->macro = outer;
    p->loop_depth = outer_loops;
    return st;
}

static em_status parse_statement(parser *p, jnode **out) {
    const jtok *t = cur(p);
    if (t->kind != JT_NAME) return fail_at(t, "%s", "tag name expected");
    const char *w = t->text;
    jnode *n = nnew(JN_BODY, t);
    if (!n) return oom();
    *out = n;
    advance(p);
    if (!strcmp(w, "for")) {
        n->kind = JN_FOR;
        return parse_for(p, n);
    }
    if (!strcmp(w, "if")) {
        n->kind = JN_IF;
        return parse_if(p, n);
    }
    if (!strcmp(w, "set")) {
        n->kind = JN_SET;
        return parse_set(p, n);
    }
    if (!strcmp(w, "macro")) {
        n->kind = JN_MACRO;
        EM_TRY(parse_name_only(p, &n->name));
        EM_TRY(parse_signature(p, n));
        return parse_macro_like(p, n, "endmacro");
    }
    if (!strcmp(w, "call")) {
        n->kind = JN_CALLBLOCK;
        if (is_op(p, "(")) EM_TRY(parse_signature(p, n));
        EM_TRY(parse_expr(p, true, &n->a));
        if (n->a->kind != JN_CALL) return fail_at(t, "%s", "expected call");
        return parse_macro_like(p, n, "endcall");
    }
    if (!strcmp(w, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        n->kind = JN_FILTERBLOCK;
        EM_TRY(parse_filter(p, &n->c, true));
        return parse_statements(p, ends, true, &n->body);
    }
    if (!strcmp(w, "with")) {
        static const char *const ends[] = {"endwith", NULL};
        n->kind = JN_WITH;
        while (cur(p)->kind != JT_BLOCK_END) {
            if (n->nkids) EM_TRY(expect_op(p, ","));
            jnode *target = NULL, *value = NULL;
            EM_TRY(parse_assign_target(p, false, NULL, &target));
            EM_TRY(push_kid(&n->kids, &n->nkids, target));
            EM_TRY(expect_op(p, "="));
            EM_TRY(parse_expr(p, true, &value));
            EM_TRY(push_kid(&n->kids2, &n->nkids2, value));
        }
        return parse_statements(p, ends, true, &n->body);
    }
    if (!strcmp(w, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        n->kind = JN_GENERATION;
        return parse_statements(p, ends, true, &n->body);
    }
    if (!strcmp(w, "print")) {
        n->kind = JN_OUTPUT;
        n->flags |= JN_PRINT_EACH;
        if (!(n->a = nnew(JN_TUPLE, t))) return oom();
        while (cur(p)->kind != JT_BLOCK_END) {
            if (n->a->nkids) EM_TRY(expect_op(p, ","));
            jnode *e = NULL;
            EM_TRY(parse_expr(p, true, &e));
            EM_TRY(push_kid(&n->a->kids, &n->a->nkids, e));
        }
        return EM_OK;
    }
    if (!strcmp(w, "break") || !strcmp(w, "continue")) {
        if (p->loop_depth == 0) return fail_at(t, "'%s' outside of a loop", w);
        n->kind = w[0] == 'b' ? JN_BREAK : JN_CONTINUE;
        return EM_OK;
    }
    if (!strcmp(w, "extends") || !strcmp(w, "include") || !strcmp(w, "import") || !strcmp(w, "from"))
        return fail_at(t, "'%s': a chat template cannot load other templates", w);
    return fail_at(t, "Encountered unknown tag '%s'", w);
}

static bool is_end_name(const parser *p, const char *const *end_names) {
    if (!end_names || cur(p)->kind != JT_NAME) return false;
    for (int i = 0; end_names[i]; i++)
        if (strcmp(cur(p)->text, end_names[i]) == 0) return true;
    return false;
}

static em_status subparse(parser *p, const char *const *end_names, jnode **out) {
    jnode *body = nnew(JN_BODY, cur(p));
    if (!body) return oom();
    *out = body;
    for (;;) {
        const jtok *t = cur(p);
        jnode *n = NULL;
        if (t->kind == JT_EOF) return EM_OK;
        if (t->kind == JT_DATA) {
            if (!(n = nnew(JN_DATA, t))) return oom();
            n->value = jv_str_new(t->text, t->len);
            advance(p);
            if (jv_is_oom(n->value)) {
                jnode_free(n);
                return oom();
            }
        } else if (t->kind == JT_VAR_BEGIN) {
            advance(p);
            if (!(n = nnew(JN_OUTPUT, t))) return oom();
            em_status st = parse_tuple(p, false, true, NULL, false, &n->a);
            if (st == EM_OK) st = expect_kind(p, JT_VAR_END, "end of print statement");
            if (st != EM_OK) {
                jnode_free(n);
                return st;
            }
        } else if (t->kind == JT_BLOCK_BEGIN) {
            advance(p);
            if (is_end_name(p, end_names)) return EM_OK;
            EM_TRY(enter(p));
            em_status st = parse_statement(p, &n);
            p->depth--;
            if (st == EM_OK) st = expect_kind(p, JT_BLOCK_END, "end of statement block");
            if (st != EM_OK) {
                jnode_free(n);
                return st;
            }
        } else {
            return fail_unexpected(p);
        }
        EM_TRY(push_kid(&body->kids, &body->nkids, n));
    }
}

em_status jparse(const jtoks *toks, jnode **out) {
    parser p = {.t = toks};
    jnode *body = NULL;
    em_status st = subparse(&p, NULL, &body);
    if (st != EM_OK) {
        jnode_free(body);
        return st;
    }
    *out = body;
    return EM_OK;
}
