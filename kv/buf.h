/* buf.h: a growable byte buffer: a connection's input, the replies it
 * has not sent yet, a value being built. A write that does not fit sets
 * `oom` rather than fail, so a run of writes is checked once at its end
 * (the connection is then dropped). */
#ifndef LULL_KV_BUF_H
#define LULL_KV_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bytes.h"

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom;  /* a write did not fit: the connection is dropped */
    bool over; /* ... because it would have passed `max` */
    /* 0, or the most the buffer may hold: a write past it fails as one
     * out of memory does, setting `over` too. A connection's replies are
     * capped so, at its output hard limit, while they are built: one
     * request may ask for a reply many times its size (EXEC, MGET). Kept
     * by buf_free. */
    size_t max;
} buf;

/* Makes room for `more` bytes (doubling, up to `max`); false when out of
 * memory or past `max`. The common case, room already there, is inline:
 * every reply goes through here, and a call for it cost more than the
 * copy. The growth itself never is: left to link-time optimisation's
 * whole-program heuristics, it was inlined into LRANGE's per-item loop
 * once code elsewhere grew, and that loop's registers cost 2 more
 * instructions an item (200 an LRANGE of 100). */
__attribute__((noinline)) bool buf_grow(buf *b, size_t more);
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
 * than the rest of the reply; every write the write log records has one
 * per argument. Written in place at w, which has room for BUF_INT_MAX
 * bytes (it writes only the header's own); returns the end. A
 * one- or two-digit number, what almost every bulk length, reply count
 * and log header is, takes no loop. */
#define BUF_INT_MAX 24 /* tag, sign, 20 digits, CRLF */
static inline __attribute__((always_inline)) char *buf_int_at(char *w, char tag,
                                                              long long v) {
    w[0] = tag;
    if (v >= 0 && v < 10) {
        w[1] = (char)('0' + v);
        w[2] = '\r';
        w[3] = '\n';
        return w + 4;
    }
    if (v >= 10 && v < 100) {
        w[1] = (char)('0' + v / 10);
        w[2] = (char)('0' + v % 10);
        w[3] = '\r';
        w[4] = '\n';
        return w + 5;
    }
    char tmp[BUF_INT_MAX];
    char *e = tmp + sizeof tmp, *q = e;
    unsigned long long u =
        v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--q = '-';
    size_t n = (size_t)(e - q);
    memcpy(w + 1, q, n);
    w[1 + n] = '\r';
    w[2 + n] = '\n';
    return w + 3 + n;
}
/* Inline with buf_bulk, as they are on every reply's path. */
static inline __attribute__((always_inline)) void buf_int(buf *b, char tag,
                                                          long long v) {
    if (!buf_reserve(b, BUF_INT_MAX)) {
        b->oom = true;
        return;
    }
    b->len = (size_t)(buf_int_at(b->p + b->len, tag, v) - b->p);
}
/* "$3\r\nabc\r\n": one reservation for the whole reply, and the value's
 * bytes copied once. */
static inline __attribute__((always_inline)) void
buf_bulk(buf *b, const char *p, size_t n) {
    if (n > SIZE_MAX - BUF_INT_MAX - 2 ||
        !buf_reserve(b, n + BUF_INT_MAX + 2)) {
        b->oom = true;
        return;
    }
    char *w = buf_int_at(b->p + b->len, '$', (long long)n);
    bytes_copy(w, p, n);
    w[n] = '\r';
    w[n + 1] = '\n';
    b->len = (size_t)(w + n + 2 - b->p);
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
