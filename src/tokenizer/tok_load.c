/* tok_load.c — tokenizer.json (+ tokenizer_config.json) → struct tokenizer.
 * Every field read from the files is type-checked; an error names the
 * file and the JSON path. Also the small accessors of tokenizer.h. */
#include "tokenizer/tok_internal.h"

#include "base/alloc.h"
#include "base/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_MAX_FILE ((size_t)1 << 30)

void tok_free(tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; t->model_pieces && i < t->n_ids; i++) free(t->model_pieces[i]);
    free(t->model_pieces);
    free(t->pieces);
    free(t->piece_len);
    free(t->special);
    free(t->added);
    tok_strmap_free(&t->added_map);
    tok_strmap_free(&t->bpe.vocab);
    tok_u64map_free(&t->bpe.merges);
    free(t->bpe.cont_prefix);
    free(t->bpe.eow_suffix);
    tok_cache_free(t->bpe.cache);
    tok_cache_free(t->raw_cache);
    tok_added_free(&t->added_tokens);
    tok_norm_free(t->normalizer);
    tok_pretok_free(t->pretok);
    tok_post_free(t->post);
    tok_dec_free(t->decoder);
    free(t->bos_token);
    free(t->eos_token);
    free(t->pad_token);
    free(t->chat_template);
    free(t->name);
    free(t);
}

int32_t tok_lookup(const tokenizer *t, const char *s, size_t n) {
    int32_t id = tok_strmap_get(&t->added_map, s, n);
    return id >= 0 ? id : tok_strmap_get(&t->bpe.vocab, s, n);
}

/* Optional string field: absent/null → NULL; empty string kept as NULL. */
static em_status opt_string(json_t *o, const char *key, const char *path, char **out) {
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) return EM_OK;
    if (!json_is_string(v)) return em_fail(EM_ERR_FORMAT, "%s.%s: expected a string or null", path, key);
    if (json_string_length(v) == 0) return EM_OK;
    *out = em_strndup(json_string_value(v), json_string_length(v));
    return *out ? EM_OK : em_fail(EM_ERR_NOMEM, "%s: out of memory", path);
}

/* Sizes the id → piece table to cover the vocabulary and added tokens. */
static em_status size_tables(tokenizer *t, json_t *vocab, const char *name) {
    int32_t max = -1;
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= TOK_MAX_ID)
            return em_fail(EM_ERR_FORMAT, "%s: model.vocab[\"%s\"]: expected an integer id in [0, %d)", name, k, TOK_MAX_ID);
        if (json_integer_value(v) > max) max = (int32_t)json_integer_value(v);
    }
    for (size_t i = 0; i < t->added_tokens.n; i++)
        if (t->added_tokens.v[i].id > max) max = t->added_tokens.v[i].id;
    t->n_ids = max + 1;
    size_t n = (size_t)t->n_ids + 1;
    t->pieces = em_calloc(n, sizeof *t->pieces);
    t->model_pieces = em_calloc(n, sizeof *t->model_pieces);
    t->piece_len = em_calloc(n, sizeof *t->piece_len);
    t->special = em_calloc(n, sizeof *t->special);
    t->added = em_calloc(n, sizeof *t->added);
    if (!t->pieces || !t->model_pieces || !t->piece_len || !t->special || !t->added) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    return EM_OK;
}

static em_status load_vocab(tokenizer *t, json_t *vocab, const char *name) {
    if (!tok_strmap_init(&t->bpe.vocab, json_object_size(vocab))) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    void *it = json_object_iter(vocab);
    while (it) {
        const char *k = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        int32_t id = (int32_t)json_integer_value(json_object_iter_value(it));
        if (t->model_pieces[id]) return em_fail(EM_ERR_FORMAT, "%s: model.vocab: id %d is used twice", name, id);
        t->model_pieces[id] = em_strndup(k, klen);
        t->pieces[id] = t->model_pieces[id];
        t->piece_len[id] = (uint32_t)klen;
        if (!t->model_pieces[id] || !tok_strmap_put(&t->bpe.vocab, t->model_pieces[id], klen, id))
            return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
        it = json_object_iter_next(vocab, it);
    }
    return EM_OK;
}

static em_status merge_side(tokenizer *t, const char *s, size_t n, const char *name, size_t i, int32_t *id) {
    *id = tok_strmap_get(&t->bpe.vocab, s, n);
    if (*id < 0) return em_fail(EM_ERR_FORMAT, "%s: model.merges[%zu]: token \"%.*s\" is not in model.vocab", name, i, (int)(n > 64 ? 64 : n), s);
    return EM_OK;
}

static em_status load_merges(tokenizer *t, json_t *merges, const char *name) {
    if (!json_is_array(merges)) return em_fail(EM_ERR_FORMAT, "%s: model.merges: expected an array", name);
    if (!tok_u64map_init(&t->bpe.merges, json_array_size(merges))) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    tok_buf nb = {0};
    em_status st = EM_OK;
    size_t plen = t->bpe.cont_prefix ? strlen(t->bpe.cont_prefix) : 0;
    for (size_t i = 0; st == EM_OK && i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) { /* "a b" */
            a = json_string_value(m);
            const char *sp = memchr(a, ' ', json_string_length(m));
            if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - a))) {
                st = em_fail(EM_ERR_FORMAT, "%s: model.merges[%zu]: expected \"left right\" with one space", name, i);
                break;
            }
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = json_string_length(m) - al - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            bl = json_string_length(json_array_get(m, 1));
        } else {
            st = em_fail(EM_ERR_FORMAT, "%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", name, i);
            break;
        }
        int32_t ia, ib, in;
        if ((st = merge_side(t, a, al, name, i, &ia)) != EM_OK || (st = merge_side(t, b, bl, name, i, &ib)) != EM_OK) break;
        if (bl < plen) {
            st = em_fail(EM_ERR_FORMAT, "%s: model.merges[%zu]: right side shorter than continuing_subword_prefix", name, i);
            break;
        }
        nb.n = 0;
        if (!tok_buf_put(&nb, a, al) || !tok_buf_put(&nb, b + plen, bl - plen)) {
            st = em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
            break;
        }
        if ((st = merge_side(t, nb.p, nb.n, name, i, &in)) != EM_OK) break;
        /* A repeated pair keeps its last rank, as the reference's map does. */
        if (!tok_u64map_put(&t->bpe.merges, ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib, ((uint64_t)i << 32) | (uint32_t)in))
            st = em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    }
    tok_buf_free(&nb);
    return st;
}

static em_status load_model_flags(tokenizer *t, json_t *model, const char *name) {
    static const char *flags[] = {"byte_fallback", "fuse_unk", "ignore_merges"};
    bool *dst[] = {&t->bpe.byte_fallback, &t->bpe.fuse_unk, &t->bpe.ignore_merges};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(model, flags[i]);
        if (v && !json_is_null(v) && !json_is_boolean(v)) return em_fail(EM_ERR_FORMAT, "%s: model.%s: expected a boolean", name, flags[i]);
        *dst[i] = json_is_true(v);
    }
    json_t *d = json_object_get(model, "dropout");
    if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0.0))
        return em_fail(EM_ERR_UNSUPPORTED, "%s: model.dropout: BPE dropout is not supported", name);
    EM_TRY(opt_string(model, "continuing_subword_prefix", name, &t->bpe.cont_prefix));
    EM_TRY(opt_string(model, "end_of_word_suffix", name, &t->bpe.eow_suffix));
    return EM_OK;
}

static em_status load_model(tokenizer *t, json_t *root, const char *name) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return em_fail(EM_ERR_FORMAT, "%s: model: expected an object", name);
    json_t *type = json_object_get(model, "type");
    if (type && !json_is_string(type)) return em_fail(EM_ERR_FORMAT, "%s: model.type: expected a string", name);
    if (type ? strcmp(json_string_value(type), "BPE") != 0 : !json_object_get(model, "merges"))
        return em_fail(EM_ERR_UNSUPPORTED, "%s: model.type: \"%s\" models are not supported (only BPE)", name,
                       type ? json_string_value(type) : "(untyped)");
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return em_fail(EM_ERR_FORMAT, "%s: model.vocab: expected an object", name);
    EM_TRY(load_model_flags(t, model, name));
    EM_TRY(size_tables(t, vocab, name));
    EM_TRY(load_vocab(t, vocab, name));
    EM_TRY(load_merges(t, json_object_get(model, "merges"), name));
    t->bpe.unk_id = -1;
    json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk)) return em_fail(EM_ERR_FORMAT, "%s: model.unk_token: expected a string or null", name);
        t->bpe.unk_id = tok_strmap_get(&t->bpe.vocab, json_string_value(unk), json_string_length(unk));
        if (t->bpe.unk_id < 0) return em_fail(EM_ERR_FORMAT, "%s: model.unk_token: \"%s\" is not in model.vocab", name, json_string_value(unk));
    }
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        t->bpe.byte_ids[b] = tok_strmap_get(&t->bpe.vocab, piece, 6);
    }
    return EM_OK;
}

/* Added tokens override the model's piece for their id (for decoding). */
static em_status index_added(tokenizer *t, const char *name) {
    if (!tok_strmap_init(&t->added_map, t->added_tokens.n)) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < t->added_tokens.n; i++) {
        tok_added_token *a = &t->added_tokens.v[i];
        const char *p = a->content; /* owned by t->added_tokens */
        t->pieces[a->id] = p;
        t->piece_len[a->id] = (uint32_t)a->len;
        t->special[a->id] = a->special;
        t->added[a->id] = true;
        if (!tok_strmap_put(&t->added_map, p, a->len, a->id)) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    }
    return EM_OK;
}

/* bos_token etc. are strings or {"content": ...} objects. */
static em_status config_token(json_t *cfg, const char *key, char **out) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    *out = NULL;
    if (!v || json_is_null(v)) return EM_OK;
    if (!json_is_string(v)) return em_fail(EM_ERR_FORMAT, "tokenizer_config.json: %s: expected a string, object or null", key);
    *out = em_strndup(json_string_value(v), json_string_length(v));
    return *out ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer_config.json: out of memory");
}

static em_status config_template(json_t *cfg, char **out) {
    json_t *v = json_object_get(cfg, "chat_template");
    *out = NULL;
    if (json_is_array(v)) { /* [{"name": "default", "template": ...}, ...] */
        json_t *pick = NULL;
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *e = json_array_get(v, i), *nm = json_object_get(e, "name");
            if (json_is_string(nm) && strcmp(json_string_value(nm), "default") == 0) pick = json_object_get(e, "template");
        }
        v = pick;
    }
    if (!v || json_is_null(v)) return EM_OK;
    if (!json_is_string(v)) return em_fail(EM_ERR_FORMAT, "tokenizer_config.json: chat_template: expected a string");
    *out = em_strndup(json_string_value(v), json_string_length(v));
    return *out ? EM_OK : em_fail(EM_ERR_NOMEM, "tokenizer_config.json: out of memory");
}

static em_status load_config(tokenizer *t, const char *json, size_t len) {
    t->add_bos = t->add_eos = -1;
    t->bos_id = t->eos_id = -1;
    if (!json) return EM_OK;
    json_error_t err;
    json_t *cfg = json_loadb(json, len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &err);
    if (!cfg) return em_fail(EM_ERR_FORMAT, "tokenizer_config.json: line %d column %d: %s", err.line, err.column, err.text);
    em_status st = EM_OK;
    if (!json_is_object(cfg)) st = em_fail(EM_ERR_FORMAT, "tokenizer_config.json: expected an object");
    if (st == EM_OK) st = config_token(cfg, "bos_token", &t->bos_token);
    if (st == EM_OK) st = config_token(cfg, "eos_token", &t->eos_token);
    if (st == EM_OK) st = config_token(cfg, "pad_token", &t->pad_token);
    if (st == EM_OK) st = config_template(cfg, &t->chat_template);
    const char *flags[2] = {"add_bos_token", "add_eos_token"};
    int *dst[2] = {&t->add_bos, &t->add_eos};
    for (int i = 0; st == EM_OK && i < 2; i++) {
        json_t *v = json_object_get(cfg, flags[i]);
        if (v && !json_is_null(v) && !json_is_boolean(v)) st = em_fail(EM_ERR_FORMAT, "tokenizer_config.json: %s: expected a boolean", flags[i]);
        else if (v && !json_is_null(v)) *dst[i] = json_is_true(v);
    }
    json_decref(cfg);
    if (t->bos_token) t->bos_id = tok_lookup(t, t->bos_token, strlen(t->bos_token));
    if (t->eos_token) t->eos_id = tok_lookup(t, t->eos_token, strlen(t->eos_token));
    return st;
}

static em_status load_root(tokenizer *t, json_t *root, const char *name) {
    char path[512];
    if (!json_is_object(root)) return em_fail(EM_ERR_FORMAT, "%s: expected a JSON object", name);
    snprintf(path, sizeof path, "%s: normalizer", name);
    EM_TRY(tok_norm_load(json_object_get(root, "normalizer"), path, &t->normalizer));
    snprintf(path, sizeof path, "%s: added_tokens", name);
    EM_TRY(tok_added_load(json_object_get(root, "added_tokens"), path, t->normalizer, &t->added_tokens));
    EM_TRY(load_model(t, root, name));
    EM_TRY(index_added(t, name));
    snprintf(path, sizeof path, "%s: pre_tokenizer", name);
    EM_TRY(tok_pretok_load(json_object_get(root, "pre_tokenizer"), path, &t->pretok));
    snprintf(path, sizeof path, "%s: post_processor", name);
    EM_TRY(tok_post_load(json_object_get(root, "post_processor"), path, t, &t->post));
    snprintf(path, sizeof path, "%s: decoder", name);
    EM_TRY(tok_dec_load(json_object_get(root, "decoder"), path, &t->decoder));
    t->bpe.cache = tok_cache_new();
    if (!t->bpe.cache) return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    if ((t->fused_bl = tok_pretok_fused(t->pretok)) && !(t->raw_cache = tok_cache_new()))
        return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    return EM_OK;
}

em_status tok_load_json(const char *tokenizer_json, size_t len, const char *config_json, size_t config_len,
                        const char *name, tokenizer **out) {
    *out = NULL;
    if (!name) name = "tokenizer.json";
    tokenizer *t = em_calloc(1, sizeof *t);
    if (!t || !(t->name = em_strdup(name))) {
        free(t);
        return em_fail(EM_ERR_NOMEM, "%s: out of memory", name);
    }
    json_error_t err;
    json_t *root = json_loadb(tokenizer_json, len, JSON_ALLOW_NUL, &err);
    em_status st = root ? load_root(t, root, name)
                        : em_fail(EM_ERR_FORMAT, "%s: line %d column %d: %s", name, err.line, err.column, err.text);
    json_decref(root);
    if (st == EM_OK) st = load_config(t, config_json, config_len);
    if (st != EM_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return EM_OK;
}

em_status tok_load(const char *dir, tokenizer **out) {
    *out = NULL;
    struct stat sb;
    char *tj, *cj;
    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) { /* a tokenizer.json path */
        tj = em_strdup(dir);
        const char *slash = strrchr(dir, '/');
        char *d = slash ? em_strndup(dir, (size_t)(slash - dir)) : em_strdup(".");
        cj = d ? em_path_join(d, "tokenizer_config.json") : NULL;
        free(d);
    } else {
        tj = em_path_join(dir, "tokenizer.json");
        cj = em_path_join(dir, "tokenizer_config.json");
    }
    if (!tj || !cj) {
        free(tj);
        free(cj);
        return em_fail(EM_ERR_NOMEM, "tokenizer: out of memory");
    }
    char *td = NULL, *cd = NULL;
    size_t tl = 0, cl = 0;
    em_status st = em_read_file(tj, TOK_MAX_FILE, &td, &tl);
    if (st == EM_OK && em_file_exists(cj)) st = em_read_file(cj, TOK_MAX_FILE, &cd, &cl);
    if (st == EM_OK) st = tok_load_json(td, tl, cd, cl, tj, out);
    free(td);
    free(cd);
    free(tj);
    free(cj);
    return st;
}

int32_t tok_vocab_size(const tokenizer *t) { return t->n_ids; }

const char *tok_id_to_piece(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids ? t->pieces[id] : NULL;
}

int32_t tok_piece_to_id(const tokenizer *t, const char *piece) { return tok_lookup(t, piece, strlen(piece)); }

bool tok_is_special(const tokenizer *t, int32_t id) { return id >= 0 && id < t->n_ids && t->special[id]; }
int32_t tok_bos_id(const tokenizer *t) { return t->bos_id; }
int32_t tok_eos_id(const tokenizer *t) { return t->eos_id; }
const char *tok_bos_token(const tokenizer *t) { return t->bos_token; }
const char *tok_eos_token(const tokenizer *t) { return t->eos_token; }
const char *tok_pad_token(const tokenizer *t) { return t->pad_token; }
const char *tok_chat_template(const tokenizer *t) { return t->chat_template; }
int tok_config_add_bos(const tokenizer *t) { return t->add_bos; }
int tok_config_add_eos(const tokenizer *t) { return t->add_eos; }
