/* cmd_chat.c — `ember chat [MODEL]`: an interactive terminal chat.
 *
 * The conversation is an internal request (engine/request.h) that grows by
 * one user and one assistant message per turn; each turn is rendered and
 * run in-process with em_prompt_build / em_session_run, the same driver the
 * HTTP server uses, so replies, reasoning and tool calls are parsed exactly
 * as the APIs parse them.
 *
 * Input: one line is one message; a line ending in "\" continues on the
 * next; a line holding only """ opens a block that runs to the next such
 * line. Commands: /reset, /system TEXT, /tool RESULT, /help, /exit.
 * Ctrl-C while a reply streams stops it (SIGINT sets the cancel flag the
 * generation loop polls); Ctrl-C twice at the prompt exits. Reasoning is
 * shown dimmed and statistics in grey when stdout is a terminal; otherwise
 * reasoning is framed by <think> lines and nothing is coloured. */
#include "cli/cli_model.h"

#include "base/alloc.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "io/demo_model.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Written by the SIGINT handler (signal handlers can reach nothing else). */
static volatile int chat_cancel;            /* stops the reply in progress */
static volatile sig_atomic_t chat_sigints;  /* Ctrl-C presses since the last input line */

static void on_sigint(int sig) {
    (void)sig;
    chat_cancel = 1;
    chat_sigints++;
}

typedef struct chat_state {
    em_model *model;
    em_request conv;  /* the conversation and its settings */
    bool tty;         /* stdout is a terminal: prompts, colour */
    bool in_tty;      /* stdin is a terminal: prompts */
    /* the reply being streamed */
    bool in_reasoning;
    char last;        /* the last byte written to stdout (0: none yet) */
    char *content, *reasoning;
    size_t content_len, reasoning_len;
    struct { char *id, *name, *args; size_t args_len; } calls[16];
    int n_calls;
    em_usage usage;
    em_finish_reason reason;
    bool failed;
} chat_state;

#define DIM "\033[2m"
#define GREY "\033[90m"
#define RESET "\033[0m"

static void chat_help(void) {
    printf("usage: ember chat [MODEL] [options]\n\n"
           "Interactive chat with MODEL (default: the demo model shipped with ember).\n"
           "Type a message and press Enter. A line ending in \\ continues on the next line;\n"
           "a line holding only \"\"\" starts a block that ends at the next \"\"\" line.\n\n"
           "Commands: /reset (new conversation), /system TEXT (set the system prompt),\n"
           "/tool RESULT (answer the last tool call), /help, /exit.\n"
           "Ctrl-C stops a reply; Ctrl-C twice at the prompt (or Ctrl-D) quits.\n\n"
           "  --system TEXT         system prompt\n"
           "  --max-tokens N        longest reply in tokens (default 1024)\n"
           "  --think / --no-think  ask the model to reason first (chat template enable_thinking)\n"
           "  --tools FILE          offer the tools in FILE (a JSON list, OpenAI Chat Completions shape)\n%s",
           cli_model_opts_help());
}

/* Appends len bytes to a growing string (*s may be NULL). */
static bool append(char **s, size_t *len, const char *t, size_t n) {
    char *p = em_realloc(*s, *len + n + 1);
    if (!p) return false;
    memcpy(p + *len, t, n);
    *len += n;
    p[*len] = 0;
    *s = p;
    return true;
}

static void reply_reset(chat_state *c) {
    free(c->content);
    free(c->reasoning);
    for (int i = 0; i < c->n_calls; i++) {
        free(c->calls[i].id);
        free(c->calls[i].name);
        free(c->calls[i].args);
    }
    c->content = c->reasoning = NULL;
    c->content_len = c->reasoning_len = 0;
    c->n_calls = 0;
    c->in_reasoning = false;
    c->last = 0;
    c->failed = false;
    memset(&c->usage, 0, sizeof c->usage);
}

/* Writes reply text to stdout, remembering where the line stands. */
static void out(chat_state *c, const char *s, size_t n) {
    if (!n) return;
    fwrite(s, 1, n, stdout);
    c->last = s[n - 1];
}

static void out_str(chat_state *c, const char *s) { out(c, s, strlen(s)); }

/* Leaves the reasoning display before other output follows it. */
static void end_reasoning(chat_state *c) {
    if (!c->in_reasoning) return;
    out_str(c, c->tty ? RESET "\n\n" : "\n</think>\n");
    c->in_reasoning = false;
}

static int on_event(void *user, const em_event *ev) {
    chat_state *c = user;
    bool ok = true;
    switch (ev->kind) {
    case EM_EVENT_REASONING:
        if (!c->in_reasoning) out_str(c, c->tty ? DIM : "<think>\n");
        c->in_reasoning = true;
        out(c, ev->text, ev->len);
        ok = append(&c->reasoning, &c->reasoning_len, ev->text, ev->len);
        break;
    case EM_EVENT_CONTENT:
        end_reasoning(c);
        out(c, ev->text, ev->len);
        ok = append(&c->content, &c->content_len, ev->text, ev->len);
        break;
    case EM_EVENT_TOOL_START:
        end_reasoning(c);
        if (c->n_calls < (int)(sizeof c->calls / sizeof c->calls[0])) {
            c->calls[c->n_calls].id = em_strdup(ev->tool_id ? ev->tool_id : "");
            c->calls[c->n_calls].name = em_strdup(ev->tool_name ? ev->tool_name : "");
            c->calls[c->n_calls].args = NULL;
            c->calls[c->n_calls].args_len = 0;
            c->n_calls++;
        }
        if (c->last && c->last != '\n') out_str(c, "\n");
        out_str(c, "[tool call] ");
        out_str(c, ev->tool_name ? ev->tool_name : "");
        out_str(c, "(");
        break;
    case EM_EVENT_TOOL_ARGS:
        out(c, ev->text, ev->len);
        if (ev->tool_index < c->n_calls)
            ok = append(&c->calls[ev->tool_index].args, &c->calls[ev->tool_index].args_len, ev->text, ev->len);
        break;
    case EM_EVENT_TOOL_END: out_str(c, ")\n"); break;
    case EM_EVENT_FINISH:
        end_reasoning(c);
        c->reason = ev->reason;
        c->usage = ev->usage;
        c->usage.itl = NULL; /* valid only during the callback */
        c->usage.n_itl = 0;
        break;
    case EM_EVENT_ERROR:
        end_reasoning(c);
        fprintf(stderr, "\nember chat: %.*s\n", (int)ev->len, ev->text);
        c->failed = true;
        break;
    }
    fflush(stdout);
    if (!ok) {
        fprintf(stderr, "\nember chat: out of memory\n");
        c->failed = true;
        return 1;
    }
    return 0;
}

/* Removes the conversation's last message (a turn that could not run). */
static void pop_message(em_request *conv) {
    if (!conv->n_messages) return;
    em_request tmp;
    em_request_init(&tmp);
    tmp.messages = em_malloc(sizeof *tmp.messages);
    if (!tmp.messages) return;
    tmp.messages[0] = conv->messages[--conv->n_messages];
    tmp.n_messages = 1;
    em_request_free(&tmp);
}

/* Drops every message except a leading system prompt. */
static void reset_conversation(em_request *conv) {
    size_t keep = conv->n_messages && conv->messages[0].role == EM_ROLE_SYSTEM ? 1 : 0;
    while (conv->n_messages > keep) pop_message(conv);
}

static bool set_system(em_request *conv, const char *text) {
    if (conv->n_messages && conv->messages[0].role == EM_ROLE_SYSTEM) {
        char *t = em_strdup(text);
        if (!t) return false;
        free(conv->messages[0].content);
        conv->messages[0].content = t;
        return true;
    }
    if (em_request_add_message(conv, EM_ROLE_SYSTEM, text, NULL) != EM_OK) return false;
    /* The new message went last; move it to the front. */
    em_message sys = conv->messages[conv->n_messages - 1];
    memmove(&conv->messages[1], &conv->messages[0], (conv->n_messages - 1) * sizeof sys);
    conv->messages[0] = sys;
    return true;
}

/* Keeps the reply in the conversation (also a stopped one: what was shown
 * is what the model said). */
static void record_reply(chat_state *c) {
    if (!c->content_len && !c->n_calls && !c->reasoning_len) return;
    em_message *m;
    if (em_request_add_message(&c->conv, EM_ROLE_ASSISTANT, c->content ? c->content : "", &m) != EM_OK) return;
    if (c->reasoning && !(m->reasoning = em_strdup(c->reasoning))) return;
    for (int i = 0; i < c->n_calls; i++)
        em_message_add_tool_call(m, c->calls[i].id, c->calls[i].name, c->calls[i].args ? c->calls[i].args : "{}");
}

static void print_stats(const chat_state *c) {
    const em_usage *u = &c->usage;
    double tps = u->decode_seconds > 0 && u->completion_tokens > 1 ? (double)(u->completion_tokens - 1) / u->decode_seconds : 0;
    fprintf(stderr, "%s[%zu tokens, %.1f tokens/s, first token after %.2f s%s]%s\n", c->tty ? GREY : "",
            u->completion_tokens, tps, u->ttft_seconds,
            c->reason == EM_REASON_CANCELLED ? ", stopped" : c->reason == EM_REASON_LENGTH ? ", cut at --max-tokens" : "",
            c->tty ? RESET : "");
}

/* Runs one assistant turn over the conversation. */
static void run_turn(chat_state *c) {
    em_prompt p;
    reply_reset(c);
    if (em_prompt_build(c->model, &c->conv, &p) != EM_OK) {
        fprintf(stderr, "ember chat: %s\n", em_last_error());
        pop_message(&c->conv);
        return;
    }
    chat_cancel = 0;
    em_session_opts o = {.choice = 0, .cancel = &chat_cancel, .on_event = on_event, .user = c};
    em_status st = em_session_run(c->model, &c->conv, &p, &o);
    em_prompt_free(&p);
    if (c->last != '\n') out_str(c, "\n");
    fflush(stdout);
    if (st != EM_OK || c->failed) {
        pop_message(&c->conv);
        return;
    }
    record_reply(c);
    print_stats(c);
    if (c->n_calls) fprintf(stderr, "(answer the tool call with /tool RESULT)\n");
    chat_sigints = 0;
}

/* ---- input -------------------------------------------------------------- */

typedef enum { IN_LINE, IN_EOF, IN_INTERRUPT } input_kind;

/* Reads one line without its newline into *line (malloc'd by getline). */
static input_kind read_line(char **line, size_t *cap) {
    errno = 0;
    ssize_t n = getline(line, cap, stdin);
    if (n < 0) {
        bool intr = errno == EINTR;
        clearerr(stdin);
        return intr ? IN_INTERRUPT : IN_EOF;
    }
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = 0;
    return IN_LINE;
}

/* Reads one message (continuation lines and """ blocks joined) into
 * *msg (malloc'd, caller frees). */
static input_kind read_message(const chat_state *c, char **msg) {
    char *line = NULL, *buf = NULL;
    size_t cap = 0, len = 0;
    bool block = false, more = true;
    input_kind k = IN_LINE;
    *msg = NULL;
    if (c->in_tty) fputs(">>> ", stdout);
    fflush(stdout);
    while (more) {
        k = read_line(&line, &cap);
        if (k != IN_LINE) break;
        size_t n = strlen(line);
        if (!strcmp(line, "\"\"\"")) {
            block = !block;
            more = block;
        } else if (block) {
            if ((len && !append(&buf, &len, "\n", 1)) || !append(&buf, &len, line, n)) break;
        } else if (n && line[n - 1] == '\\') {
            if ((len && !append(&buf, &len, "\n", 1)) || !append(&buf, &len, line, n - 1)) break;
        } else {
            if ((len && !append(&buf, &len, "\n", 1)) || !append(&buf, &len, line, n)) break;
            more = false;
        }
        if (more && c->in_tty) fputs("... ", stdout);
        fflush(stdout);
    }
    free(line);
    if (k != IN_LINE) {
        free(buf);
        return k;
    }
    *msg = buf ? buf : em_strdup("");
    return IN_LINE;
}

/* ---- commands ----------------------------------------------------------- */

/* Handles a /command; false when the chat should end. */
static bool command(chat_state *c, const char *line) {
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit") || !strcmp(line, "/bye")) return false;
    if (!strcmp(line, "/reset") || !strcmp(line, "/clear")) {
        reset_conversation(&c->conv);
        fprintf(stderr, "(new conversation)\n");
    } else if (!strncmp(line, "/system", 7) && (!line[7] || line[7] == ' ')) {
        const char *t = line[7] ? line + 8 : "";
        if (!set_system(&c->conv, t)) fprintf(stderr, "ember chat: out of memory\n");
        else fprintf(stderr, "(system prompt set)\n");
    } else if (!strncmp(line, "/tool ", 6)) {
        const em_message *last = c->conv.n_messages ? &c->conv.messages[c->conv.n_messages - 1] : NULL;
        if (!last || last->role != EM_ROLE_ASSISTANT || !last->n_tool_calls) {
            fprintf(stderr, "(no tool call to answer)\n");
            return true;
        }
        /* Copied first: adding a message may move the array `last` points into. */
        char *call_id = em_strdup(last->tool_calls[0].id ? last->tool_calls[0].id : "");
        em_message *m;
        if (!call_id || em_request_add_message(&c->conv, EM_ROLE_TOOL, line + 6, &m) != EM_OK) {
            free(call_id);
            fprintf(stderr, "ember chat: out of memory\n");
            return true;
        }
        m->tool_call_id = call_id;
        run_turn(c);
    } else if (!strcmp(line, "/help")) {
        fprintf(stderr, "/reset  /system TEXT  /tool RESULT  /exit — Ctrl-C stops a reply\n");
    } else {
        fprintf(stderr, "(unknown command %s; /help lists them)\n", line);
    }
    return true;
}

static void chat_loop(chat_state *c) {
    for (;;) {
        char *msg = NULL;
        input_kind k = read_message(c, &msg);
        if (k == IN_EOF) {
            if (c->in_tty) putchar('\n');
            break;
        }
        if (k == IN_INTERRUPT) {
            if (chat_sigints >= 2) {
                putchar('\n');
                break;
            }
            fprintf(stderr, "\n(Ctrl-C again or /exit to quit)\n");
            continue;
        }
        chat_sigints = 0;
        bool go = true;
        if (msg[0] == '/') go = command(c, msg);
        else if (msg[0]) {
            if (em_request_add_message(&c->conv, EM_ROLE_USER, msg, NULL) == EM_OK) run_turn(c);
            else fprintf(stderr, "ember chat: out of memory\n");
        }
        free(msg);
        if (!go) break;
    }
}

/* ---- setup -------------------------------------------------------------- */

static bool load_tools(const char *path, em_request *conv) {
    json_error_t err;
    json_t *t = json_load_file(path, 0, &err);
    if (!t || !json_is_array(t)) {
        cli_error("chat", "--tools %s: %s", path, t ? "expected a JSON list of tools" : err.text);
        json_decref(t);
        return false;
    }
    conv->tools = t;
    return true;
}

static int cmd_chat(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        chat_help();
        return CLI_OK;
    }
    cli_model_opts mo;
    cli_model_opts_init(&mo, EM_PRECISION_EXACT);
    const char *model = NULL, *system = NULL, *tools = NULL;
    long max_tokens = 1024;
    int think = -1;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_opt(&mo, argc, argv, &i, "chat");
        if (r < 0) return CLI_USAGE;
        if (r > 0 || cli_common_flag(argc, argv, &i)) continue;
        const char *a = argv[i];
        if (cli_arg_is(a, "--system")) { if (!(system = cli_take_value(argc, argv, &i, "chat"))) return CLI_USAGE; }
        else if (cli_arg_is(a, "--tools")) { if (!(tools = cli_take_value(argc, argv, &i, "chat"))) return CLI_USAGE; }
        else if (cli_arg_is(a, "--max-tokens")) {
            const char *v = cli_take_value(argc, argv, &i, "chat");
            if (!v || !cli_parse_int(v, 1, 1 << 24, &max_tokens)) { cli_error("chat", "--max-tokens needs a number >= 1"); return CLI_USAGE; }
        } else if (!strcmp(a, "--think")) think = 1;
        else if (!strcmp(a, "--no-think")) think = 0;
        else if (a[0] == '-' && a[1]) { cli_error("chat", "unknown option %s", a); return CLI_USAGE; }
        else if (!model) model = a;
        else { cli_error("chat", "unexpected argument %s", a); return CLI_USAGE; }
    }
    if (!model && !(model = em_demo_model_dir())) {
        cli_error("chat", "no MODEL given and the demo model is not installed");
        return CLI_USAGE;
    }
    chat_state c = {.tty = isatty(STDOUT_FILENO), .in_tty = isatty(STDIN_FILENO)};
    em_request_init(&c.conv);
    c.conv.chat = true;
    if (tools && !load_tools(tools, &c.conv)) return CLI_USAGE;
    mo.open.max_sequences = 1;
    if (em_model_open(model, &mo.open, &c.model) != EM_OK) {
        cli_error("chat", "%s", em_last_error());
        em_request_free(&c.conv);
        return CLI_FAIL;
    }
    c.conv.sampling = cli_model_sampling(&mo, c.model);
    c.conv.set = EM_SET_TEMPERATURE | EM_SET_TOP_P | EM_SET_TOP_K | EM_SET_MIN_P | EM_SET_REPETITION |
                 (mo.has_seed ? EM_SET_SEED : 0);
    c.conv.max_tokens = (int)max_tokens;
    if (max_tokens >= em_model_context_size(c.model)) c.conv.max_tokens = 0; /* up to the end of the context */
    int rc = CLI_OK;
    if ((think >= 0 && !(c.conv.template_kwargs = json_pack("{s:b}", "enable_thinking", think))) ||
        (system && !set_system(&c.conv, system))) {
        cli_error("chat", "out of memory");
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK) {
        if (c.in_tty)
            fprintf(stderr, "%s%s (context %d). /help for commands, Ctrl-C stops a reply, /exit quits.%s\n",
                    c.tty ? GREY : "", em_model_name(c.model), em_model_context_size(c.model), c.tty ? RESET : "");
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C interrupts a read at the prompt */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old);
        chat_loop(&c);
        sigaction(SIGINT, &old, NULL);
    }
    reply_reset(&c);
    em_request_free(&c.conv);
    em_model_free(c.model);
    return rc;
}

EM_CLI_VERB("chat", "interactive chat in the terminal", cmd_chat)
