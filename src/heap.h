/* The timer heap: a 4-ary min-heap of armed timers keyed by (deadline, arm
 * order). Each slot carries its timer's deadline, so comparisons read the
 * slot array only (a timer is touched on ties, and to record its new slot).
 * Four children are 64 contiguous bytes: one cache line per sift-down step.
 * Each timer remembers its slot (node.aux = slot + 1) so that cancel is
 * O(log n) without a search. */
#ifndef LULL_HEAP_H
#define LULL_HEAP_H

#include "lull.h"

typedef struct lull__slot {
    uint64_t deadline; /* absolute ns on the loop's clock */
    lull_timer *timer;
} lull__slot;

typedef struct lull__heap {
    lull__slot *slots; /* slots[0] is the earliest timer */
    uint32_t len;
    uint32_t cap;
} lull__heap;

/* 0, or -ENOMEM when the slot array cannot grow. */
int lull__heap_insert(lull__heap *h, lull_timer *t, uint64_t deadline);
void lull__heap_remove(lull__heap *h, lull_timer *t);
void lull__heap_free(lull__heap *h);

static inline lull_timer *lull__heap_min(const lull__heap *h) {
    return h->len ? h->slots[0].timer : NULL;
}

/* The earliest deadline; only with len > 0. */
static inline uint64_t lull__heap_min_deadline(const lull__heap *h) {
    return h->slots[0].deadline;
}

static inline bool lull__heap_contains(const lull_timer *t) {
    return t->node.aux != 0;
}

static inline uint64_t lull__heap_deadline_of(const lull__heap *h,
                                              const lull_timer *t) {
    return h->slots[t->node.aux - 1].deadline;
}

#endif
