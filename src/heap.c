/* The 8-ary timer heap (see heap.h). Single-threaded: the loop's own.
 *
 * Invariant: for every position p in ROOT+1 .. ROOT+len-1, the slot at
 * parent(p) = p/8 + 6 fires no later than the slot at p, and the slot's
 * timer has node.aux == p. The deferred arms fill ROOT+len ..
 * ROOT+len+pend-1 with no order among them, each with node.aux == its
 * position. Chunks are only ever added; memory is returned when the loop is
 * freed (as with the single array before, and libev). */
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
/* Positions stay below 2^30: a billion timers, 64 GiB of handles and
 * slots, before -ENOMEM. A first child, 8p - 48, can pass 2^32 then, so
 * it is computed in 64 bits. */
#define HEAP_MAX_POS (1u << 30)
/* Siblings fill two cache lines of a chunk aligned to this (see heap.h). */
#define LINE 128

static inline uint32_t parent_of(uint32_t p) {
    return p / 8 + 6;
}

static inline uint64_t first_child(uint32_t p) {
    return 8 * (uint64_t)p - 48;
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
LULL__HOT static void sift_up(lull__heap *h, uint32_t p, lull__slot s) {
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

/* The child of a full group of four (eight) that fires first: a
 * tournament, so the first compares do not wait for each other. */
static inline lull__slot *least_of_four(lull__slot *c) {
    lull__slot *a = fires_before(&c[1], &c[0]) ? &c[1] : &c[0];
    lull__slot *b = fires_before(&c[3], &c[2]) ? &c[3] : &c[2];
    return fires_before(b, a) ? b : a;
}

static inline lull__slot *least_of_eight(lull__slot *c) {
    lull__slot *a = least_of_four(c), *b = least_of_four(c + 4);
    return fires_before(b, a) ? b : a;
}

/* Moves the hole at p down until s fits. The eight children of a
 * position are one aligned group of slots in one chunk: two cache lines a
 * level. */
LULL__HOT static void sift_down(lull__heap *h, uint32_t p, lull__slot s) {
    uint32_t end = ROOT + h->len;
    lull__slot *hole = lull__heap_slot(h, p);
    for (;;) {
        if (first_child(p) >= end) break;
        uint32_t first = (uint32_t)first_child(p);
        lull__slot *c = lull__heap_slot(h, first), *best;
        if (LULL_LIKELY(end - first >= 8)) {
            best = least_of_eight(c);
        } else {
            best = c;
            for (uint32_t j = 1; j < end - first; j++)
                if (fires_before(&c[j], best)) best = &c[j];
        }
        if (!fires_before(best, &s)) break;
        *hole = *best;
        hole->timer->node.aux = p;
        hole = best;
        p = first + (uint32_t)(best - c);
    }
    *hole = s;
    s.timer->node.aux = p;
}

/* n slots, LINE-aligned, from plain malloc (so test_alloc sees it):
 * *mem gets what malloc returned, and the aligned start is returned. */
static lull__slot *chunk_alloc(void **mem, uint32_t n) {
    *mem = malloc((size_t)n * sizeof(lull__slot) + LINE - 1);
    if (!*mem) return NULL;
    uintptr_t at = ((uintptr_t)*mem + LINE - 1) & ~(uintptr_t)(LINE - 1);
    return (lull__slot *)at;
}

/* Room for one more position. The
 * first chunk doubles up to CHUNK slots (a copy of at most 32 KiB); after
 * that each growth adds a chunk, and the table of chunks, 16 bytes per
 * 4,096 timers, is all that is ever copied. */
__attribute__((noinline, cold)) static int grow(lull__heap *h) {
    if (h->cap >= HEAP_MAX_POS) return -ENOMEM;
    if (!h->base) {
        h->base = malloc(sizeof *h->base);
        h->mem = malloc(sizeof *h->mem);
        if (!h->base || !h->mem) {
            free(h->base);
            free(h->mem);
            h->base = NULL;
            h->mem = NULL;
            return -ENOMEM;
        }
        h->table_cap = 1;
    }
    if (h->cap < CHUNK) {
        uint32_t cap = h->cap ? h->cap * 2 : HEAP_MIN_CAP;
        void *mem;
        lull__slot *slots = chunk_alloc(&mem, cap);
        if (!slots) return -ENOMEM;
        if (h->chunks) {
            memcpy(slots, (void *)h->base[0], h->cap * sizeof(lull__slot));
            free(h->mem[0]);
        }
        h->base[0] = (uintptr_t)slots;
        h->mem[0] = mem;
        h->chunks = 1;
        h->cap = cap;
        return 0;
    }
    if (h->chunks == h->table_cap) {
        uint32_t n = h->table_cap * 2;
        uintptr_t *b = realloc(h->base, n * sizeof *b);
        if (!b) return -ENOMEM;
        h->base = b;
        void **m = realloc(h->mem, n * sizeof *m);
        if (!m) return -ENOMEM; /* base[] is merely larger: harmless */
        h->mem = m;
        h->table_cap = n;
    }
    void *mem;
    lull__slot *slots = chunk_alloc(&mem, CHUNK);
    if (!slots) return -ENOMEM;
    uint32_t c = h->chunks++;
    h->base[c] = (uintptr_t)slots - (uintptr_t)c * CHUNK * sizeof(lull__slot);
    h->mem[c] = mem;
    h->cap += CHUNK;
    return 0;
}

/* Moves the slot at `from` to `to`, which is free. */
static inline void move_slot(lull__heap *h, uint32_t from, uint32_t to) {
    lull__slot *s = lull__heap_slot(h, to);
    *s = *lull__heap_slot(h, from);
    s->timer->node.aux = to;
}

LULL__HOT int lull__heap_insert(lull__heap *h, lull_timer *t,
                                uint64_t deadline) {
    uint32_t p = ROOT + h->len;
    /* Also the first insert: cap 0. Out of line, so the common insert
     * saves no registers for it. */
    if (LULL_UNLIKELY(p + h->pend >= h->cap) && grow(h) != 0) return -ENOMEM;
    /* The first deferred arm makes room: it moves behind the last. */
    if (h->pend) move_slot(h, p, p + h->pend);
    h->len++;
    sift_up(h, p, (lull__slot){deadline, t});
    return 0;
}

static inline uint64_t saturating_add(uint64_t a, uint64_t b) {
    return a + b < a ? UINT64_MAX : a + b;
}

/* Each deferred arm is in the place an insert would take (the end of the
 * heap) already: it gets its deadline there and sifts up, in arm order.
 * The arms are consecutive positions, so the walk steps its slot and its
 * parent's by pointer, looking a chunk up only where it crosses into
 * the next one (a parent changes every eight positions: siblings start at
 * multiples of 8, heap.h). */
LULL__HOT void lull__heap_flush(lull__heap *h, uint64_t now) {
    uint32_t p = ROOT + h->len, end = p + h->pend;
    /* The heap takes them all at once: a sift up reads and moves only the
     * positions up to its own, which are in order already, so the length
     * is not needed one by one (a store per arm). */
    h->len += h->pend;
    h->pend = 0;
    if (p == end) return;
    lull__slot *s = lull__heap_slot(h, p);
    if (p == ROOT) {
        /* The first timer of an empty heap: the root, no parent. */
        s->deadline = saturating_add(now, s->deadline);
        if (++p == end) return;
        s = lull__heap_slot(h, p);
    }
    uint32_t q = parent_of(p);
    const lull__slot *up = lull__heap_slot(h, q);
    for (;;) {
        uint64_t deadline = saturating_add(now, s->deadline);
        /* Most stay where they are (heap.h): a store. */
        if (LULL_LIKELY(up->deadline < deadline))
            s->deadline = deadline;
        else
            sift_up(h, p, (lull__slot){deadline, s->timer});
        if (++p == end) break;
        s = p % CHUNK ? s + 1 : lull__heap_slot(h, p);
        if (p % 8 == 0) {
            q++;
            up = q % CHUNK ? up + 1 : lull__heap_slot(h, q);
        }
    }
}

LULL__HOT void lull__heap_remove_slow(lull__heap *h, lull_timer *t) {
    uint32_t p = t->node.aux;
    t->node.aux = 0;
    if (p >= ROOT + h->len) {
        /* A deferred arm: the last one takes its place. */
        uint32_t last = ROOT + h->len + --h->pend;
        if (p != last) move_slot(h, last, p);
        return;
    }
    uint32_t end = ROOT + --h->len; /* the last position: now free */
    if (p != end) {
        /* The last slot fills the hole and moves whichever way restores
         * order (within the heap, which now ends before `end`). */
        lull__slot last = *lull__heap_slot(h, end);
        if (p > ROOT && fires_before(&last, lull__heap_slot(h, parent_of(p))))
            sift_up(h, p, last);
        else
            sift_down(h, p, last);
    }
    /* The deferred arms start right after the heap: the last moves into
     * the position it gave up. */
    if (h->pend) move_slot(h, end + h->pend, end);
}

void lull__heap_free(lull__heap *h) {
    for (uint32_t c = 0; c < h->chunks; c++)
        free(h->mem[c]);
    free(h->base);
    free(h->mem);
    memset(h, 0, sizeof *h);
}

#ifndef NDEBUG
void lull__heap_verify(const lull__heap *h, const lull_loop *loop,
                       uint32_t max) {
    uint32_t n = h->len < max ? h->len : max;
    for (uint32_t p = ROOT; p < ROOT + n; p++) {
        const lull__slot *s = lull__heap_slot(h, p);
        LULL_ASSERT(
            s->timer->node.aux == p && s->timer->loop == loop,
            "lull: timer heap slot corrupted (a timer freed or set up again?)");
        LULL_ASSERT(p == ROOT || lull__heap_slot(h, parent_of(p))->deadline <=
                                     s->deadline,
                    "lull: timer heap out of order");
    }
    uint32_t d = h->pend < max ? h->pend : max;
    for (uint32_t p = ROOT + h->len; p < ROOT + h->len + d; p++) {
        const lull__slot *s = lull__heap_slot(h, p);
        LULL_ASSERT(s->timer->node.aux == p && s->timer->loop == loop,
                    "lull: deferred timer arm corrupted (a timer freed or set "
                    "up again?)");
    }
}
#endif
