/* The 4-ary timer heap (see heap.h). Single-threaded: the loop's own.
 *
 * Invariant: for every slot i > 0, slots[(i - 1) / 4] fires no later than
 * slots[i], and slots[i].timer->node.aux == i + 1. */
#include "heap.h"

#include <errno.h>
#include <stdlib.h>

#include "internal.h"

/* The first growth holds this many timers; a loop that arms any timer at all
 * usually arms a few, and 64 slots are one 1 KiB block. */
#define HEAP_MIN_CAP 64

/* Does slot a fire before slot b? Equal deadlines: the earlier arm (serial
 * order of the 30-bit sequence in the flags, see internal.h). */
static inline bool fires_before(const lull__slot *a, const lull__slot *b) {
    if (a->deadline != b->deadline) return a->deadline < b->deadline;
    uint32_t sa = a->timer->node.flags & LULL__SEQ_MASK;
    uint32_t sb = b->timer->node.flags & LULL__SEQ_MASK;
    return (int32_t)(sa - sb) < 0;
}

static inline void place(lull__heap *h, uint32_t i, lull__slot s) {
    h->slots[i] = s;
    s.timer->node.aux = i + 1;
}

static void sift_up(lull__heap *h, uint32_t i, lull__slot s) {
    while (i > 0) {
        uint32_t parent = (i - 1) / 4;
        if (!fires_before(&s, &h->slots[parent])) break;
        place(h, i, h->slots[parent]);
        i = parent;
    }
    place(h, i, s);
}

static void sift_down(lull__heap *h, uint32_t i, lull__slot s) {
    for (;;) {
        uint32_t first = 4 * i + 1;
        if (first >= h->len) break;
        uint32_t last = first + 4 < h->len ? first + 4 : h->len;
        uint32_t best = first;
        for (uint32_t c = first + 1; c < last; c++)
            if (fires_before(&h->slots[c], &h->slots[best])) best = c;
        if (!fires_before(&h->slots[best], &s)) break;
        place(h, i, h->slots[best]);
        i = best;
    }
    place(h, i, s);
}

int lull__heap_insert(lull__heap *h, lull_timer *t, uint64_t deadline) {
    if (h->len == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : HEAP_MIN_CAP;
        lull__slot *slots = realloc(h->slots, cap * sizeof *slots);
        if (!slots) return -ENOMEM;
        h->slots = slots;
        h->cap = cap;
    }
    sift_up(h, h->len++, (lull__slot){deadline, t});
    return 0;
}

void lull__heap_remove(lull__heap *h, lull_timer *t) {
    uint32_t i = t->node.aux - 1;
    t->node.aux = 0;
    lull__slot last = h->slots[--h->len];
    if (last.timer == t) return;
    /* The last slot fills the hole and moves whichever way restores order. */
    if (i > 0 && fires_before(&last, &h->slots[(i - 1) / 4]))
        sift_up(h, i, last);
    else
        sift_down(h, i, last);
}

void lull__heap_free(lull__heap *h) {
    free(h->slots);
    h->slots = NULL;
    h->len = h->cap = 0;
}
