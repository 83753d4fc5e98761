/* The 4-ary timer heap (see heap.h). Single-threaded: the loop's own.
 *
 * Invariant: for every position p in ROOT+1 .. ROOT+len-1, the slot at
 * parent(p) = p/4 + 2 fires no later than the slot at p, and the slot's
 * timer has node.aux == p. Chunks are only ever added; memory is returned
 * when the loop is freed (as with the single array before, and libev). */
#include "heap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define ROOT  LULL__HEAP_ROOT
#define CHUNK LULL__HEAP_CHUNK
/* The first chunk starts this small: a loop that arms any timer at all
 * usually arms a few, and 64 slots are one 1 KiB block. */
#define HEAP_MIN_CAP 64
/* Positions stay below 2^30, so 4p - 5 (the last child) fits in 32 bits:
 * a billion timers, 64 GiB of handles and slots, before -ENOMEM. */
#define HEAP_MAX_POS (1u << 30)
/* Siblings share a cache line (see heap.h). */
#define LINE 64

static inline uint32_t parent_of(uint32_t p) {
    return p / 4 + 2;
}

static inline uint32_t first_child(uint32_t p) {
    return 4 * p - 8;
}

/* Does slot a fire before slot b? Equal deadlines: the earlier arm (serial
 * order of the 30-bit sequence in the flags, see internal.h). */
static inline bool fires_before(const lull__slot *a, const lull__slot *b) {
    if (a->deadline != b->deadline) return a->deadline < b->deadline;
    uint32_t sa = a->timer->node.flags & LULL__SEQ_MASK;
    uint32_t sb = b->timer->node.flags & LULL__SEQ_MASK;
    return (int32_t)(sa - sb) < 0;
}

/* Moves the hole at p up until s fits, then fills it with s. */
static void sift_up(lull__heap *h, uint32_t p, lull__slot s) {
    lull__slot *hole = lull__heap_slot(h, p);
    while (p > ROOT) {
        uint32_t q = parent_of(p);
        lull__slot *up = lull__heap_slot(h, q);
        if (!fires_before(&s, up)) break;
        *hole = *up;
        hole->timer->node.aux = p;
        hole = up;
        p = q;
    }
    *hole = s;
    s.timer->node.aux = p;
}

/* Moves the hole at p down until s fits. The four children of a position
 * are one aligned group of slots in one chunk: one cache line a level. */
static void sift_down(lull__heap *h, uint32_t p, lull__slot s) {
    uint32_t end = ROOT + h->len;
    lull__slot *hole = lull__heap_slot(h, p);
    for (;;) {
        uint32_t first = first_child(p);
        if (first >= end) break;
        lull__slot *c = lull__heap_slot(h, first);
        uint32_t n = end - first < 4 ? end - first : 4;
        uint32_t best = 0;
        for (uint32_t j = 1; j < n; j++)
            if (fires_before(&c[j], &c[best])) best = j;
        if (!fires_before(&c[best], &s)) break;
        *hole = c[best];
        hole->timer->node.aux = p;
        hole = &c[best];
        p = first + best;
    }
    *hole = s;
    s.timer->node.aux = p;
}

/* n slots, 64-byte aligned, from plain malloc (so test_alloc sees it). */
static int chunk_alloc(lull__chunk *c, uint32_t n) {
    void *mem = malloc((size_t)n * sizeof(lull__slot) + LINE - 1);
    if (!mem) return -ENOMEM;
    uintptr_t at = ((uintptr_t)mem + LINE - 1) & ~(uintptr_t)(LINE - 1);
    c->mem = mem;
    c->slots = (lull__slot *)at;
    return 0;
}

/* Room for one more position. The first chunk doubles up to CHUNK slots
 * (a copy of at most 32 KiB); after that each growth adds a chunk, and the
 * table of chunks, 16 bytes per 4,096 timers, is all that is ever copied. */
__attribute__((noinline, cold)) static int grow(lull__heap *h) {
    if (h->cap >= HEAP_MAX_POS) return -ENOMEM;
    if (h->cap < CHUNK) {
        if (!h->chunk) {
            h->chunk = malloc(sizeof *h->chunk);
            if (!h->chunk) return -ENOMEM;
            h->table_cap = 1;
        }
        uint32_t cap = h->cap ? h->cap * 2 : HEAP_MIN_CAP;
        lull__chunk c;
        if (chunk_alloc(&c, cap) != 0) return -ENOMEM;
        if (h->chunks) {
            memcpy(c.slots, h->chunk[0].slots, h->cap * sizeof(lull__slot));
            free(h->chunk[0].mem);
        }
        h->chunk[0] = c;
        h->chunks = 1;
        h->cap = cap;
        return 0;
    }
    if (h->chunks == h->table_cap) {
        uint32_t n = h->table_cap * 2;
        lull__chunk *t = realloc(h->chunk, n * sizeof *t);
        if (!t) return -ENOMEM;
        h->chunk = t;
        h->table_cap = n;
    }
    if (chunk_alloc(&h->chunk[h->chunks], CHUNK) != 0) return -ENOMEM;
    h->chunks++;
    h->cap += CHUNK;
    return 0;
}

int lull__heap_insert(lull__heap *h, lull_timer *t, uint64_t deadline) {
    uint32_t p = ROOT + h->len;
    /* Also the first insert: cap 0. Out of line, so the common insert
     * saves no registers for it. */
    if (LULL_UNLIKELY(p >= h->cap) && grow(h) != 0) return -ENOMEM;
    h->len++;
    sift_up(h, p, (lull__slot){deadline, t});
    return 0;
}

void lull__heap_remove(lull__heap *h, lull_timer *t) {
    uint32_t p = t->node.aux;
    t->node.aux = 0;
    lull__slot last = *lull__heap_slot(h, ROOT + --h->len);
    if (last.timer == t) return;
    /* The last slot fills the hole and moves whichever way restores order. */
    if (p > ROOT && fires_before(&last, lull__heap_slot(h, parent_of(p))))
        sift_up(h, p, last);
    else
        sift_down(h, p, last);
}

void lull__heap_free(lull__heap *h) {
    for (uint32_t c = 0; c < h->chunks; c++)
        free(h->chunk[c].mem);
    free(h->chunk);
    memset(h, 0, sizeof *h);
}

#ifndef NDEBUG
void lull__heap_verify(const lull__heap *h, const lull_loop *loop,
                       uint32_t max) {
    uint32_t n = h->len < max ? h->len : max;
    for (uint32_t p = ROOT; p < ROOT + n; p++) {
        const lull__slot *s = lull__heap_slot(h, p);
        LULL_ASSERT(s->timer->node.aux == p && s->timer->loop == loop,
                    "lull: timer heap slot corrupted (a timer freed?)");
        LULL_ASSERT(p == ROOT || lull__heap_slot(h, parent_of(p))->deadline <=
                                     s->deadline,
                    "lull: timer heap out of order");
    }
}
#endif
