/* buf.c: growable byte buffers (see buf.h). */
#include "buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool buf_grow(buf *b, size_t more) {
    /* Past half the address space doubling would wrap: no such buffer. */
    if (more > SIZE_MAX / 2 - b->len) return false;
    if (b->max && b->len + more > b->max) {
        b->over = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more)
        cap *= 2;
    if (b->max && cap > b->max) cap = b->max;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

bool buf_reserve_upto(buf *b, size_t more, size_t want) {
    if (b->cap - b->len >= more) return true;
    if (more > SIZE_MAX / 2 - b->len) return false;
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
    *b = (buf){.max = b->max};
}
