/* bytes.h: comparing and copying short byte strings without a call. A key
 * or value of 4 to 16 bytes, what nearly every request's is, is taken as
 * two words (of 4 or 8 bytes) that overlap where its length is not a
 * whole two; memcmp's and memcpy's calls cost more than such a compare
 * or copy (a GET's key compare cost about as much as its hash). */
#ifndef LULL_KV_BYTES_H
#define LULL_KV_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The word of w bytes (4 or 8) at p, in any alignment. */
static inline uint64_t bytes_word(const char *p, size_t w) {
    if (w == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline void bytes_put_word(char *p, uint64_t v, size_t w) {
    if (w == 8) {
        memcpy(p, &v, 8);
        return;
    }
    uint32_t x = (uint32_t)v;
    memcpy(p, &x, 4);
}

/* Whether a and b hold the same n bytes. */
static inline bool bytes_same(const char *a, const char *b, size_t n) {
    if (n < 4 || n > 16) return memcmp(a, b, n) == 0;
    size_t w = n >= 8 ? 8 : 4;
    return ((bytes_word(a, w) ^ bytes_word(b, w)) |
            (bytes_word(a + n - w, w) ^ bytes_word(b + n - w, w))) == 0;
}

/* Copies n bytes from s to d (not overlapping). */
static inline __attribute__((always_inline)) void
bytes_copy(char *d, const char *s, size_t n) {
    if (n > 16) {
        memcpy(d, s, n);
    } else if (n >= 4) {
        size_t w = n >= 8 ? 8 : 4;
        uint64_t first = bytes_word(s, w), last = bytes_word(s + n - w, w);
        bytes_put_word(d, first, w);
        bytes_put_word(d + n - w, last, w);
    } else if (n) { /* the first, middle and last byte: all of 1 to 3 */
        char first = s[0], mid = s[n / 2], last = s[n - 1];
        d[0] = first;
        d[n / 2] = mid;
        d[n - 1] = last;
    }
}

#endif
