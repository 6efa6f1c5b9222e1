/* bytelevel.c — the GPT-2 byte ↔ unicode table used by ByteLevel
 * pre-tokenizers and decoders: printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for U+0100 onwards, so every byte string
 * becomes printable text. Computed once; immutable afterwards. */
#include "tokenizer/tok_internal.h"

#include "base/utf8.h"

#include <pthread.h>

static tok_bytelevel table;
static int16_t rev[0x180]; /* code point → byte + 1 (0 = none) */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static bool printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

static void build(void) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = printable(b) ? (uint32_t)b : next++;
        table.enc_len[b] = (uint8_t)utf8_encode(cp, table.enc[b]);
        rev[cp] = (int16_t)(b + 1);
    }
}

const tok_bytelevel *tok_bytelevel_table(void) {
    pthread_once(&once, build);
    return &table;
}

int tok_bytelevel_byte(uint32_t cp) {
    pthread_once(&once, build);
    return cp < 0x180 ? rev[cp] - 1 : -1;
}
