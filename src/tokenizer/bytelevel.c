/* bytelevel.c — the GPT-2 byte ↔ unicode mapping used by ByteLevel
 * pre-tokenizers and decoders: printable Latin-1 bytes stand for
 * themselves, the 68 others (0x00-0x20, 0x7F-0xA0, 0xAD, in that order)
 * for U+0100 onwards, so every byte string becomes printable text.
 * Pure functions: nothing global to initialise. */
#include "tokenizer/tok_internal.h"

#include <string.h>

#include "base/utf8.h"

uint32_t tok_bytelevel_cp(uint8_t b) {
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
    if (b == 0xAD) return 256u + 67u;
    return b;
}

int tok_bytelevel_byte(uint32_t cp) {
    if (cp < 256) return (cp > 0x20 && !(cp >= 0x7F && cp <= 0xA0) && cp != 0xAD) ? (int)cp : -1;
    if (cp <= 256 + 32) return (int)(cp - 256);
    if (cp <= 256 + 66) return (int)(0x7F + cp - 256 - 33);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

void tok_bytelevel_fill(tok_bytelevel *t) {
    for (int b = 0; b < 256; b++) t->enc_len[b] = (uint8_t)utf8_encode(tok_bytelevel_cp((uint8_t)b), t->enc[b]);
}

size_t tok_bytelevel_map(const tok_bytelevel *t, const unsigned char *s, size_t n, char *dst) {
    size_t len = 0;
    for (size_t k = 0; k < n; k++) {
        memcpy(dst + len, t->enc[s[k]], 2); /* the stand-ins are 1 or 2 bytes */
        len += t->enc_len[s[k]];
    }
    return len;
}
