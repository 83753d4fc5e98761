/* The timer heap: an 8-ary min-heap of armed timers keyed by (deadline, arm
 * order). Each slot carries its timer's deadline, so comparisons read the
 * slots only (a timer is touched on ties, and to record its new position).
 * Each timer remembers its position (node.aux; 0 = not in the heap), so
 * cancel is O(log n) without a search.
 *
 * Deferred arms (src/timer.c) wait after the heap, in the positions the
 * heap grows into: ROOT+len .. ROOT+len+pend-1, each slot holding the
 * timer's delay, until lull__heap_flush gives them deadlines from one clock
 * reading and sifts them in. They take no memory of their own, and a timer
 * cancelled before the flush leaves without touching the heap.
 *
 * Slots live in chunks of LULL__HEAP_CHUNK, found through a small table:
 * the heap grows by adding a chunk, never by copying what it holds, so no
 * arm pays for moving a large array (a doubling realloc of 2^20 slots took
 * 60-90 us here, and allocators without mremap copy all 16 MiB). Only
 * the first chunk grows by doubling, up to one chunk (a copy of at most
 * 32 KiB), so a loop with few timers holds 1 KiB, not 64.
 *
 * Eight children a node, not two or four: at 10^6 timers the heap is 7
 * levels deep instead of 10, and 7/8 of its positions are leaves, so most
 * removals fill a leaf without a loop and most inserts stay where they
 * land; a sift down compares 8 siblings, which share two adjacent cache
 * lines. (The 4-ary heap this was before took 14% more instructions per
 * arm + cancel with 10^6 armed: 274.5 against 240.3 on the real clock,
 * bench/callgrind_timers.sh.) The root is at
 * position LULL__HEAP_ROOT = 7, so the children of position p are
 * 8p-48 .. 8p-41: every group of siblings starts at a multiple of 8 and,
 * in 128-byte-aligned chunks, fills exactly two cache lines (and never
 * straddles two chunks). Positions 0..6 are unused. */
#ifndef LULL_HEAP_H
#define LULL_HEAP_H

#include "lull.h"

/* 4,096 slots a chunk: 64 KiB, below malloc's mmap threshold, and one
 * table entry per 4,096 timers (a 4 KiB table at 10^6). */
#define LULL__HEAP_CHUNK_SHIFT 12
#define LULL__HEAP_CHUNK       (1u << LULL__HEAP_CHUNK_SHIFT)
#define LULL__HEAP_ROOT        7u
#define LULL__HEAP_LIKELY(x)   __builtin_expect(!!(x), 1)

typedef struct lull__slot {
    uint64_t deadline; /* absolute ns on the loop's clock; a deferred arm's
                          delay until its flush */
    lull_timer *timer;
} lull__slot;

typedef struct lull__heap {
    uintptr_t *base;    /* base[c]: where chunk c's slots start, minus c * CHUNK
                           slots, so position p is at base[p >> SHIFT] + 16 p
                           (one load and an add: lull__heap_slot) */
    void **mem;         /* what malloc returned for each chunk, for free */
    uint32_t len;       /* timers in the heap: positions ROOT .. ROOT+len-1 */
    uint32_t pend;      /* deferred arms after them: ROOT+len ..
                           ROOT+len+pend-1 (lull__heap_flush) */
    uint32_t cap;       /* positions allocated, the unused 0..6 included */
    uint32_t chunks;    /* chunks allocated */
    uint32_t table_cap; /* entries of base[] and mem[] */
} lull__heap;

/* 0, or -ENOMEM when the heap cannot grow. (lull__heap_push is the same,
 * inline where it can be.) */
int lull__heap_insert(lull__heap *h, lull_timer *t, uint64_t deadline);
/* Gives every deferred arm the deadline now + its delay (saturated at
 * UINT64_MAX) and puts it in the heap, in arm order. */
void lull__heap_flush(lull__heap *h, uint64_t now);
/* The general removal: lull__heap_remove inline where it can. */
void lull__heap_remove_slow(lull__heap *h, lull_timer *t);
void lull__heap_free(lull__heap *h);
#ifndef NDEBUG
/* Checks positions and order of the first `max` slots (LULL_ASSERT). */
void lull__heap_verify(const lull__heap *h, const lull_loop *loop,
                       uint32_t max);
#endif

static inline lull__slot *lull__heap_slot(const lull__heap *h, uint32_t pos) {
    return (lull__slot *)(h->base[pos >> LULL__HEAP_CHUNK_SHIFT] +
                          (uintptr_t)pos * sizeof(lull__slot));
}

static inline lull_timer *lull__heap_min(const lull__heap *h) {
    return h->len ? lull__heap_slot(h, LULL__HEAP_ROOT)->timer : NULL;
}

/* The earliest deadline; only with len > 0. */
static inline uint64_t lull__heap_min_deadline(const lull__heap *h) {
    return ((const lull__slot *)h->base[0])[LULL__HEAP_ROOT].deadline;
}

/* In the heap, or a deferred arm waiting after it. */
static inline bool lull__heap_contains(const lull_timer *t) {
    return t->node.aux != 0;
}

/* Only for a timer that lull__heap_contains. */
static inline bool lull__heap_deferred(const lull__heap *h,
                                       const lull_timer *t) {
    return t->node.aux >= LULL__HEAP_ROOT + h->len;
}

/* Only for a timer in the heap (not deferred). */
static inline uint64_t lull__heap_deadline_of(const lull__heap *h,
                                              const lull_timer *t) {
    return lull__heap_slot(h, t->node.aux)->deadline;
}

/* The common cases inline, where most arms and cancels end, the rest in
 * heap.c. With deadlines spread at random, most inserts stay where they
 * land (the parent fires earlier) and most removals fill a leaf (7/8 of
 * the positions are leaves): neither then needs a loop, nor the
 * arm order, which only breaks ties of equal deadlines. */
static inline bool lull__heap_try_push(lull__heap *h, lull_timer *t,
                                       uint64_t deadline) {
    uint32_t p = LULL__HEAP_ROOT + h->len;
    if (LULL__HEAP_LIKELY(p < h->cap && p > LULL__HEAP_ROOT && !h->pend) &&
        lull__heap_slot(h, p / 8 + 6)->deadline < deadline) {
        h->len++;
        *lull__heap_slot(h, p) = (lull__slot){deadline, t};
        t->node.aux = p;
        return true;
    }
    return false; /* lull__heap_insert's to do */
}

static inline int lull__heap_push(lull__heap *h, lull_timer *t,
                                  uint64_t deadline) {
    return lull__heap_try_push(h, t, deadline)
               ? 0
               : lull__heap_insert(h, t, deadline);
}

/* Appends a deferred arm where there is room (a few stores); false when
 * the heap must grow first (src/timer.c then arms it with a reading). */
static inline bool lull__heap_try_defer(lull__heap *h, lull_timer *t,
                                        uint64_t delay) {
    uint32_t p = LULL__HEAP_ROOT + h->len + h->pend;
    if (!LULL__HEAP_LIKELY(p < h->cap)) return false;
    h->pend++;
    *lull__heap_slot(h, p) = (lull__slot){delay, t};
    t->node.aux = p;
    return true;
}

static inline void lull__heap_remove(lull__heap *h, lull_timer *t) {
    uint32_t p = t->node.aux;
    uint32_t end = LULL__HEAP_ROOT + h->len - 1; /* the last position */
    if (LULL__HEAP_LIKELY(!h->pend) && p == end) {
        /* The last slot (the newest arm, where it stayed: a timeout
         * cancelled before any other arm): nothing moves. */
        h->len--;
        t->node.aux = 0;
        return;
    }
    if (LULL__HEAP_LIKELY(!h->pend && 8 * (uint64_t)p - 48 >= end)) {
        /* A leaf whose parent fires earlier than the last slot: the last
         * slot fills it and moves neither way. */
        lull__slot *last = lull__heap_slot(h, end);
        if (p == LULL__HEAP_ROOT ||
            lull__heap_slot(h, p / 8 + 6)->deadline < last->deadline) {
            lull__slot s = *last;
            h->len--;
            t->node.aux = 0;
            *lull__heap_slot(h, p) = s;
            s.timer->node.aux = p;
            return;
        }
    }
    lull__heap_remove_slow(h, t);
}

#endif
