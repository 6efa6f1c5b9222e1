/* token_bytes.c — the exact bytes each token adds to the decoded text, and
 * the grammar vocabulary built from them (a trie in preorder).
 *
 * tok_decode of a single id is not enough: a byte-level token may hold half
 * a UTF-8 character (decoded as U+FFFD), and decoders strip a leading space
 * from the first token. So a token's text is decode([ref, id]) minus
 * decode([ref]) for a plain reference token, and where that still holds
 * U+FFFD the piece itself is read: <0xHH> byte-fallback pieces as the byte,
 * byte-level pieces through the inverse of the GPT-2 byte alphabet. */
#include "engine/grammar/grammar_internal.h"
#include "engine/grammar/vocab_internal.h"

#include "base/alloc.h"
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

/* The GPT-2 byte-level alphabet: printable bytes stand for themselves,
 * the other 68 are shifted to U+0100.. in order. Returns the byte or -1. */
static int bytelevel_byte(uint32_t cp) {
    static const struct { uint32_t lo, hi; } keep[] = {{0x21, 0x7E}, {0xA1, 0xAC}, {0xAE, 0xFF}};
    for (int i = 0; i < 3; i++)
        if (cp >= keep[i].lo && cp <= keep[i].hi) return (int)cp;
    if (cp < 0x100 || cp >= 0x100 + 68) return -1;
    uint32_t k = cp - 0x100; /* k-th byte outside the kept ranges */
    for (int b = 0; b < 256; b++) {
        bool kept = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (!kept && k-- == 0) return b;
    }
    return -1;
}

static bool piece_bytelevel(const char *piece, uint8_t *out, size_t *len) {
    size_t n = strlen(piece), k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_decode(piece + i, n - i, &cp);
        int b = l > 0 ? bytelevel_byte(cp) : -1;
        if (b < 0) return false;
        out[k++] = (uint8_t)b;
        i += (size_t)l;
    }
    *len = k;
    return true;
}

static bool has_replacement(const char *s, size_t n) {
    for (size_t i = 0; i + 2 < n; i++)
        if ((uint8_t)s[i] == 0xEF && (uint8_t)s[i + 1] == 0xBF && (uint8_t)s[i + 2] == 0xBD) return true;
    return false;
}

em_status vocab_token_text(const tokenizer *t, int32_t id, const tb_ref *ref, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    char *text = NULL;
    size_t tl = 0;
    if (ref->id >= 0) {
        int32_t pair[2] = {ref->id, id};
        EM_TRY(tok_decode_n(t, pair, 2, false, &text, &tl));
        if (tl >= ref->len && memcmp(text, ref->text, ref->len) == 0) {
            memmove(text, text + ref->len, tl - ref->len);
            tl -= ref->len;
        } else {
            free(text);
            text = NULL;
        }
    }
    if (!text) EM_TRY(tok_decode_n(t, &id, 1, false, &text, &tl));
    if (has_replacement(text, tl)) {
        const char *piece = tok_id_to_piece(t, id);
        size_t pn = piece ? strlen(piece) : 0;
        if (pn == 6 && piece[0] == '<' && piece[1] == '0' && piece[2] == 'x' && piece[5] == '>' && em_hex_digit(piece[3]) >= 0 &&
            em_hex_digit(piece[4]) >= 0) {
            text[0] = (char)(em_hex_digit(piece[3]) * 16 + em_hex_digit(piece[4]));
            tl = 1;
        } else if (pn) {
            uint8_t *buf = em_malloc(pn);
            size_t bl;
            if (!buf) {
                free(text);
                return em_fail(EM_ERR_NOMEM, "out of memory");
            }
            if (piece_bytelevel(piece, buf, &bl)) {
                free(text);
                *out = buf;
                *len = bl;
                return EM_OK;
            }
            free(buf);
        }
    }
    *out = (uint8_t *)text;
    *len = tl;
    return EM_OK;
}

em_status vocab_ref_init(const tokenizer *t, tb_ref *ref) {
    memset(ref, 0, sizeof *ref);
    ref->id = -1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, "a", 1, false, &ids, &n) == EM_OK && n == 1) {
        char *text = NULL;
        size_t tl = 0;
        if (tok_decode_n(t, ids, 1, false, &text, &tl) == EM_OK && tl == 1 && text[0] == 'a') {
            ref->id = ids[0];
            ref->text[0] = 'a';
            ref->len = 1;
        }
        free(text);
    }
    free(ids);
    em_clear_error();
    return EM_OK;
}
