/* anthropic_stream.c — one choice's events as Anthropic content blocks.
 *
 * Reasoning, content and each tool call become thinking, text and
 * tool_use blocks, in the order they are generated; a change of kind
 * closes the open block. Streaming writes the SSE grammar as it goes:
 *
 *   content_block_start {index, content_block: {type, ...empty}}
 *   content_block_delta {index, delta: text_delta | thinking_delta |
 *                        input_json_delta}            (one or more)
 *   content_block_delta {index, delta: signature_delta} (thinking only)
 *   content_block_stop  {index}
 *   ...
 *   message_delta {delta: {stop_reason, stop_sequence}, usage}
 *   message_stop
 *
 * or an error event in place of the ending. A thinking block's signature
 * is a hash of its text: the protocol needs the field, and ember keeps no
 * secret to sign with, so it certifies nothing and is not checked when a
 * client replays the block. */
#include "server/anthropic.h"

#include "base/alloc.h"
#include "base/hash.h"
#include "server/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ant_tool_id(const char *engine_id, char *buf, size_t size) {
    const char *id = engine_id ? engine_id : "";
    if (!strncmp(id, "call_", 5)) id += 5;
    snprintf(buf, size, "toolu_%s", id);
}

void ant_signature(uint64_t hash, char *buf, size_t size) {
    snprintf(buf, size, "ember-%016llx", (unsigned long long)em_hash_finish(hash));
}

const char *ant_stop_reason(em_finish_reason reason, const char *stop) {
    switch (reason) {
    case EM_REASON_LENGTH: return "max_tokens";
    case EM_REASON_TOOL_CALLS: return "tool_use";
    case EM_REASON_STOP:
    case EM_REASON_CANCELLED: break;
    }
    return stop ? "stop_sequence" : "end_turn";
}

json_t *ant_usage_json(size_t prompt_tokens, size_t cached_tokens, size_t output_tokens) {
    if (cached_tokens > prompt_tokens) cached_tokens = prompt_tokens;
    return json_pack("{s:I, s:I, s:i, s:I}", "input_tokens", (json_int_t)(prompt_tokens - cached_tokens),
                     "output_tokens", (json_int_t)output_tokens, "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", (json_int_t)cached_tokens);
}

/* ---- SSE --------------------------------------------------------------- */

/* Sends {"type": name, ...fields} as event `name`; consumes fields. */
static bool send(ant_reply *r, const char *name, json_t *fields) {
    json_t *obj = json_pack("{s:s}", "type", name); /* "type" first, as the API writes it */
    bool ok = obj && fields && !json_object_update(obj, fields) && sse_send_named(r->job, name, obj);
    json_decref(fields);
    json_decref(obj);
    return ok;
}

static bool send_block_start(ant_reply *r, const ant_block *b) {
    json_t *blk;
    if (b->kind == ANT_TOOL_USE)
        blk = json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", b->id, "name", b->name, "input");
    else if (b->kind == ANT_THINKING) blk = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
    else blk = json_pack("{s:s, s:s}", "type", "text", "text", "");
    return send(r, "content_block_start", json_pack("{s:i, s:o}", "index", r->n_blocks - 1, "content_block", blk));
}

static bool send_delta(ant_reply *r, const char *type, const char *key, json_t *value) {
    json_t *delta = json_pack("{s:s, s:o}", "type", type, key, value);
    return send(r, "content_block_delta", json_pack("{s:i, s:o}", "index", r->n_blocks - 1, "delta", delta));
}

/* ---- blocks ------------------------------------------------------------ */

static bool close_block(ant_reply *r) {
    if (!r->open) return true;
    r->open = false;
    ant_block *b = &r->blocks[r->n_blocks - 1];
    if (!r->job) return true;
    if (b->kind == ANT_THINKING) {
        char sig[ANT_SIGNATURE_MAX];
        ant_signature(b->hash, sig, sizeof sig);
        if (!send_delta(r, "signature_delta", "signature", json_string(sig))) return false;
    }
    return send(r, "content_block_stop", json_pack("{s:i}", "index", r->n_blocks - 1));
}

/* Closes the open block and opens a new one of kind k. */
static bool open_block(ant_reply *r, ant_block_kind k, const char *engine_id, const char *name) {
    if (!close_block(r)) return false;
    ant_block *a = em_realloc(r->blocks, (size_t)(r->n_blocks + 1) * sizeof *a);
    if (!a) return false;
    r->blocks = a;
    ant_block *b = &a[r->n_blocks++];
    memset(b, 0, sizeof *b);
    b->kind = k;
    b->hash = EM_HASH_SEED;
    r->open = true;
    if (k == ANT_TOOL_USE) {
        char id[64];
        ant_tool_id(engine_id, id, sizeof id);
        if (!(b->id = em_strdup(id)) || !(b->name = em_strdup(name ? name : ""))) return false;
    }
    return !r->job || send_block_start(r, b);
}

/* Text for a text or thinking block: opens one when the kind changes. */
static bool add_text(ant_reply *r, ant_block_kind k, const char *text, size_t len) {
    if (!len) return true;
    if ((!r->open || r->blocks[r->n_blocks - 1].kind != k) && !open_block(r, k, NULL, NULL)) return false;
    ant_block *b = &r->blocks[r->n_blocks - 1];
    b->hash = em_hash_bytes(b->hash, text, len);
    if (!r->job) return oai_buf_add(&b->text, text, len);
    return k == ANT_THINKING ? send_delta(r, "thinking_delta", "thinking", oai_json_text(text, len))
                             : send_delta(r, "text_delta", "text", oai_json_text(text, len));
}

static bool add_tool_args(ant_reply *r, const em_event *ev) {
    /* Arguments belong to the tool_use block opened by their TOOL_START. */
    if (!r->open || r->blocks[r->n_blocks - 1].kind != ANT_TOOL_USE || r->open_tool != ev->tool_index) return true;
    ant_block *b = &r->blocks[r->n_blocks - 1];
    if (!r->job) return oai_buf_add(&b->text, ev->text, ev->len);
    return send_delta(r, "input_json_delta", "partial_json", oai_json_text(ev->text, ev->len));
}

static bool finish(ant_reply *r, const em_event *ev) {
    r->finished = true;
    r->reason = ev->reason;
    r->output_tokens = ev->usage.completion_tokens;
    r->cached_tokens = ev->usage.cached_tokens;
    if (ev->stop && !(r->stop = em_strdup(ev->stop))) return false;
    if (!close_block(r)) return false;
    if (!r->job || ev->reason == EM_REASON_CANCELLED) return true;
    const char *reason = ant_stop_reason(ev->reason, r->stop);
    json_t *seq = !strcmp(reason, "stop_sequence") ? json_string(r->stop) : json_null();
    json_t *delta = json_pack("{s:s, s:o}", "stop_reason", reason, "stop_sequence", seq);
    if (!send(r, "message_delta",
              json_pack("{s:o, s:o}", "delta", delta, "usage", ant_usage_json(r->input_tokens, r->cached_tokens, r->output_tokens))))
        return false;
    return send(r, "message_stop", json_object());
}

static bool fail(ant_reply *r, const em_event *ev) {
    r->failed = true;
    snprintf(r->error, sizeof r->error, "%.*s", (int)(ev->len < 400 ? ev->len : 400), ev->text ? ev->text : "");
    if (!r->job) return true;
    json_t *err = ant_error_json(500, r->error);
    bool ok = err && sse_send_named(r->job, "error", err);
    json_decref(err);
    return ok;
}

bool ant_reply_event(ant_reply *r, const em_event *ev) {
    switch (ev->kind) {
    case EM_EVENT_REASONING: return add_text(r, ANT_THINKING, ev->text, ev->len);
    case EM_EVENT_CONTENT: return add_text(r, ANT_TEXT, ev->text, ev->len);
    case EM_EVENT_TOOL_START:
        r->open_tool = ev->tool_index;
        return open_block(r, ANT_TOOL_USE, ev->tool_id, ev->tool_name);
    case EM_EVENT_TOOL_ARGS: return add_tool_args(r, ev);
    case EM_EVENT_TOOL_END: return close_block(r);
    case EM_EVENT_FINISH: return finish(r, ev);
    case EM_EVENT_ERROR: return fail(r, ev);
    }
    return true;
}

void ant_reply_free(ant_reply *r) {
    for (int i = 0; i < r->n_blocks; i++) {
        oai_buf_free(&r->blocks[i].text);
        free(r->blocks[i].id);
        free(r->blocks[i].name);
    }
    free(r->blocks);
    free(r->stop);
    memset(r, 0, sizeof *r);
}

/* ---- the collected content array ---------------------------------------- */

/* A tool's input as an object: the engine's arguments are a validated JSON
 * object; anything else (never expected) is kept under "arguments" rather
 * than lost. */
static json_t *tool_input(const ant_block *b) {
    json_t *in = b->text.data ? json_loadb(b->text.data, b->text.len, 0, NULL) : json_object();
    if (json_is_object(in)) return in;
    json_decref(in);
    return json_pack("{s:o}", "arguments", oai_json_text(b->text.data ? b->text.data : "", b->text.len));
}

static json_t *block_json(const ant_block *b) {
    const char *t = b->text.data ? b->text.data : "";
    if (b->kind == ANT_TOOL_USE)
        return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", b->id, "name", b->name, "input", tool_input(b));
    if (b->kind == ANT_THINKING) {
        char sig[ANT_SIGNATURE_MAX];
        ant_signature(b->hash, sig, sizeof sig);
        return json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking", oai_json_text(t, b->text.len), "signature",
                         sig);
    }
    return json_pack("{s:s, s:o}", "type", "text", "text", oai_json_text(t, b->text.len));
}

json_t *ant_content_json(const ant_reply *r) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < r->n_blocks; i++)
        if (json_array_append_new(arr, block_json(&r->blocks[i]))) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}
