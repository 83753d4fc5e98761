/* The timer heap: a 4-ary min-heap of armed timers keyed by (deadline, arm
 * order). Each timer remembers its slot (node.aux = slot + 1) so that cancel
 * is O(log n) without a search. Four children share one 32-byte run of the
 * slot array, so a sift-down step reads one cache line of slots. */
#ifndef LULL_HEAP_H
#define LULL_HEAP_H

#include "lull.h"

typedef struct lull__heap {
    lull_timer **slots; /* slots[0] is the earliest timer */
    uint32_t len;
    uint32_t cap;
} lull__heap;

/* 0, or -ENOMEM when the slot array cannot grow. */
int lull__heap_insert(lull__heap *h, lull_timer *t);
void lull__heap_remove(lull__heap *h, lull_timer *t);
void lull__heap_free(lull__heap *h);

static inline lull_timer *lull__heap_min(const lull__heap *h) {
    return h->len ? h->slots[0] : NULL;
}

static inline bool lull__heap_contains(const lull_timer *t) {
    return t->node.aux != 0;
}

#endif
