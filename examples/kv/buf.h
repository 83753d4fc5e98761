/* buf.h: a growable byte buffer: a connection's input, the replies it
 * has not sent yet, a value being built. A write that does not fit sets
 * `oom` rather than fail, so a run of writes is checked once at its end
 * (the connection is then dropped). */
#ifndef LULL_KV_BUF_H
#define LULL_KV_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom; /* a write did not fit: the connection is dropped */
} buf;

bool buf_reserve(buf *b, size_t more);
void buf_put(buf *b, const void *p, size_t n);
void buf_str(buf *b, const char *s);
void buf_int(buf *b, char tag, long long v); /* ":12\r\n", "*3\r\n", ... */
void buf_bulk(buf *b, const char *p, size_t n);
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
