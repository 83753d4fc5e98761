/* buf.c: growable byte buffers (see buf.h). */
#include "buf.h"

#include <stdlib.h>
#include <string.h>

bool buf_reserve(buf *b, size_t more) {
    if (b->cap - b->len >= more) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

void buf_put(buf *b, const void *p, size_t n) {
    if (!buf_reserve(b, n)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void buf_str(buf *b, const char *s) {
    buf_put(b, s, strlen(s));
}

/* By hand rather than snprintf: every GET reply has one (its "$len"), and
 * snprintf's format parsing cost more than the rest of the reply. */
void buf_int(buf *b, char tag, long long v) {
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

void buf_bulk(buf *b, const char *p, size_t n) {
    buf_int(b, '$', (long long)n);
    buf_put(b, p, n);
    buf_put(b, "\r\n", 2);
}

bool buf_reserve_upto(buf *b, size_t more, size_t want) {
    if (b->cap - b->len >= more) return true;
    /* The size the buffer will need, in one step: a large argument is
     * received into its final place, with no realloc moving it on the
     * way (the memory is only touched as the bytes arrive). */
    size_t cap = want > b->len + more ? want : b->len + more;
    if (cap < 4096) cap = 4096;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

void buf_consume(buf *b, size_t n) {
    if (n == 0) return;
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

void buf_shrink(buf *b, size_t keep) {
    if (b->cap <= keep || b->len > b->cap / 4) return;
    if (b->len == 0) {
        buf_free(b);
        return;
    }
    size_t cap = b->len * 2 > keep ? b->len * 2 : keep;
    char *p = realloc(b->p, cap);
    if (!p) return; /* it stays as it was: still correct */
    b->p = p;
    b->cap = cap;
}

void buf_free(buf *b) {
    free(b->p);
    *b = (buf){0};
}
