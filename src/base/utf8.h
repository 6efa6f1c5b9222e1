/* utf8.h — UTF-8 validation and decoding helpers. */
#ifndef EMBER_BASE_UTF8_H
#define EMBER_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
bool utf8_valid(const char *s, size_t n);
/* Length of the longest prefix of s[0..n) that ends on a complete,
 * valid character boundary (for streaming). */
size_t utf8_complete_prefix(const char *s, size_t n);
/* Decodes one code point at s (n bytes available). Returns bytes consumed
 * (1..4) and stores the code point, or 0 for an invalid sequence. */
int utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encodes cp into out (4 bytes room); returns length, 0 if invalid. */
int utf8_encode(uint32_t cp, char *out);
/* The value of hexadecimal digit c (either case), or -1. */
int em_hex_digit(char c);

#endif
