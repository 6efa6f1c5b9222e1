/* json_read.h — a fast reader of JSON text into jansson values.
 *
 * jansson's own reader takes its input a byte at a time through a stream
 * layer: 76 us for an 8 KB completion request on a 2-core x86 host, where
 * the whole cached-prompt request takes about 2 ms on a GPU. This reader
 * scans a string's bytes in one run (its UTF-8 checked once), builds the
 * same json_t values (jansson's object model and writer stay), and accepts
 * and rejects what jansson's json_loadb does with the same flags: the
 * values are json_equal, the failures the same inputs (fuzz_json_read.c
 * compares the two on arbitrary bytes). Error texts are this reader's own.
 *
 * Flags: JSON_REJECT_DUPLICATES, JSON_DECODE_ANY (any other flag is
 * refused: use json_loadb). */
#ifndef EMBER_BASE_JSON_READ_H
#define EMBER_BASE_JSON_READ_H

#include <jansson.h>
#include <stddef.h>

/* Parses buf[0..len); a new reference, or NULL with *err filled (err may
 * be NULL). Nesting deeper than jansson's 2,048 levels is an error, as
 * there. */
json_t *em_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *err);

#endif
