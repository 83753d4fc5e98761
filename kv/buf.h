/* buf.h: a growable byte buffer: a connection's input, the replies it
 * has not sent yet, a value being built. A write that does not fit sets
 * `oom` rather than fail, so a run of writes is checked once at its end
 * (the connection is then dropped). */
#ifndef LULL_KV_BUF_H
#define LULL_KV_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom; /* a write did not fit: the connection is dropped */
} buf;

/* Makes room for `more` bytes (doubling); false when out of memory. The
 * common case, room already there, is inline: every reply goes through
 * here, and a call for it cost more than the copy. */
bool buf_grow(buf *b, size_t more);
static inline __attribute__((always_inline)) bool buf_reserve(buf *b,
                                                              size_t more) {
    return b->cap - b->len >= more || buf_grow(b, more);
}
static inline __attribute__((always_inline)) void buf_put(buf *b, const void *p,
                                                          size_t n) {
    if (!buf_reserve(b, n)) {
        b->oom = true;
        return;
    }
    if (n) memcpy(b->p + b->len, p, n); /* (b->p is NULL while empty) */
    b->len += n;
}
/* (inline: the length of a literal is known when compiling) */
static inline __attribute__((always_inline)) void buf_str(buf *b,
                                                          const char *s) {
    buf_put(b, s, strlen(s));
}
/* ":12\r\n", "*3\r\n", "$5\r\n" ... By hand rather than snprintf: every
 * GET reply has one (its "$len"), and snprintf's format parsing cost more
 * than the rest of the reply; inline with buf_bulk, as they are on every
 * reply's path. */
static inline __attribute__((always_inline)) void buf_int(buf *b, char tag,
                                                          long long v) {
    char tmp[24]; /* tag, sign, 19 digits, CRLF */
    char *e = tmp + sizeof tmp, *q = e;
    *--q = '\n';
    *--q = '\r';
    unsigned long long u =
        v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--q = '-';
    *--q = tag;
    buf_put(b, q, (size_t)(e - q));
}
static inline __attribute__((always_inline)) void
buf_bulk(buf *b, const char *p, size_t n) {
    buf_int(b, '$', (long long)n);
    buf_put(b, p, n);
    buf_put(b, "\r\n", 2);
}
/* buf_reserve when the final size is known (`want` bytes in all: the
 * command being received, as far as its parser knows): grows to it in
 * one step. */
bool buf_reserve_upto(buf *b, size_t more, size_t want);
/* Drops the first n bytes (the parsed ones). */
void buf_consume(buf *b, size_t n);
/* Gives memory back after a burst: a buffer over `keep` bytes that is at
 * most a quarter full shrinks (freed when empty). */
void buf_shrink(buf *b, size_t keep);
void buf_free(buf *b);

#endif
