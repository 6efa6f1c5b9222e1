/* tok_split_fast.c — the GPT-4-style split pattern of Llama 3 and Qwen
 * (contractions, letters with one leading mark, numbers, punctuation runs,
 * newline runs, whitespace), matched by hand over ASCII text.
 *
 * Every position of a text starts a match of these patterns (a letter, a
 * digit, whitespace or anything else each have an alternative), so the
 * match PCRE2 finds from `start` begins at `start`, and which alternative
 * wins and where it ends follows from the characters it reads. Over ASCII
 * the classes are plain: \p{L} is [A-Za-z], \p{N} [0-9], \s [\t\n\v\f\r ].
 * Whenever a byte that decides the match is not ASCII (it might be a
 * letter, a digit or a space of Unicode's, or fold to a contraction's
 * letter), the matcher gives up and the caller asks PCRE2, so the pieces
 * are always the regex's: text that is mostly ASCII skips the regex engine
 * for most pieces. */
#include "tokenizer/tok_internal.h"

#include <string.h>

static const char LLAMA3_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int tok_split_fast_kind(const char *src, size_t len) {
    if (len == sizeof LLAMA3_RE - 1 && !memcmp(src, LLAMA3_RE, len)) return 3;
    if (len == sizeof QWEN_RE - 1 && !memcmp(src, QWEN_RE, len)) return 1;
    return 0;
}

enum { C_OTHER, C_LETTER, C_DIGIT, C_SPACE, C_WIDE }; /* C_WIDE: not ASCII */

static int cls(unsigned char c) {
    if (c >= 0x80) return C_WIDE;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_LETTER;
    if (c >= '0' && c <= '9') return C_DIGIT;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return C_SPACE;
    return C_OTHER;
}

/* The class of s[i], C_OTHER past the end (where nothing more is read). */
static int at(const unsigned char *s, size_t n, size_t i) { return i < n ? cls(s[i]) : -1; }

/* End of the run of class c from i; -1 when a non-ASCII byte ends it (it
 * might continue the run). */
static long run_end(const unsigned char *s, size_t n, size_t i, int c) {
    while (i < n && cls(s[i]) == c) i++;
    return i < n && s[i] >= 0x80 ? -1 : (long)i;
}

static bool lower_is(unsigned char c, char want) { return (c | 0x20) == want; }

/* (?i:'s|'t|'re|'ve|'m|'ll|'d): its length, 0 when none, -1 when a
 * non-ASCII byte decides. */
static int contraction(const unsigned char *s, size_t n, size_t i) {
    if (s[i] != '\'' || i + 1 >= n) return 0;
    unsigned char a = s[i + 1];
    if (a >= 0x80) return -1; /* U+017F folds to s */
    if (lower_is(a, 's') || lower_is(a, 't') || lower_is(a, 'm') || lower_is(a, 'd')) return 2;
    if (!lower_is(a, 'r') && !lower_is(a, 'v') && !lower_is(a, 'l')) return 0;
    if (i + 2 >= n) return 0;
    unsigned char b = s[i + 2];
    if (b >= 0x80) return -1;
    return lower_is(b, lower_is(a, 'l') ? 'l' : 'e') ? 3 : 0;
}

long tok_split_fast(int kind, const char *text, size_t n, size_t i) {
    const unsigned char *s = (const unsigned char *)text;
    int c = cls(s[i]);
    if (c == C_WIDE) return -1;
    int k = contraction(s, n, i);
    if (k) return k < 0 ? -1 : (long)(i + (size_t)k);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c == C_LETTER) return run_end(s, n, i, C_LETTER);
    int c1 = at(s, n, i + 1);
    bool lead = c != C_DIGIT && s[i] != '\r' && s[i] != '\n';
    if (lead && c1 == C_WIDE) return -1;
    if (lead && c1 == C_LETTER) return run_end(s, n, i + 1, C_LETTER);
    /* \p{N}{1,kind} */
    if (c == C_DIGIT) {
        size_t j = i;
        while (j < n && j - i < (size_t)kind && cls(s[j]) == C_DIGIT) j++;
        return j - i < (size_t)kind && j < n && s[j] >= 0x80 ? -1 : (long)j;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = s[i] == ' ' && c1 == C_OTHER ? i + 1 : i;
    if (cls(s[j]) == C_OTHER) {
        long e = run_end(s, n, j, C_OTHER);
        if (e < 0) return -1;
        while ((size_t)e < n && (s[e] == '\r' || s[e] == '\n')) e++;
        return e;
    }
    /* c is a space: \s*[\r\n]+, \s+(?!\S), \s+ over the run i..e */
    long e = run_end(s, n, i, C_SPACE);
    if (e < 0) return -1;
    for (long q = e - 1; q >= (long)i; q--)
        if (s[q] == '\r' || s[q] == '\n') return q + 1; /* up to the run's last newline */
    if ((size_t)e == n) return e;
    return e - (long)i >= 2 ? e - 1 : e; /* all but the last space, which goes with what follows */
}
