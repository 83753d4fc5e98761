/* The timer heap: a 4-ary min-heap of armed timers keyed by (deadline, arm
 * order). Each slot carries its timer's deadline, so comparisons read the
 * slots only (a timer is touched on ties, and to record its new position).
 * Each timer remembers its position (node.aux; 0 = not in the heap), so
 * cancel is O(log n) without a search.
 *
 * Slots live in chunks of LULL__HEAP_CHUNK, found through a small table:
 * the heap grows by adding a chunk, never by copying what it holds, so no
 * arm pays for moving a large array (a doubling realloc of 2^20 slots took
 * 60-90 us here, and allocators without mremap copy all 16 MiB). Only
 * the first chunk grows by doubling, up to one chunk (a copy of at most
 * 32 KiB), so a loop with few timers holds 1 KiB, not 64.
 *
 * The root is at position LULL__HEAP_ROOT = 3, so the children of position
 * p are 4p-8 .. 4p-5: every group of siblings starts at a multiple of 4 and,
 * in 64-byte-aligned chunks, fills exactly one cache line (and never
 * straddles two chunks). Positions 0..2 are unused. */
#ifndef LULL_HEAP_H
#define LULL_HEAP_H

#include "lull.h"

/* 4,096 slots a chunk: 64 KiB, below malloc's mmap threshold, and one
 * table entry per 4,096 timers (a 4 KiB table at 10^6). */
#define LULL__HEAP_CHUNK_SHIFT 12
#define LULL__HEAP_CHUNK       (1u << LULL__HEAP_CHUNK_SHIFT)
#define LULL__HEAP_ROOT        3u

typedef struct lull__slot {
    uint64_t deadline; /* absolute ns on the loop's clock */
    lull_timer *timer;
} lull__slot;

typedef struct lull__chunk {
    lull__slot *slots; /* 64-byte aligned, inside mem */
    void *mem;         /* what malloc returned, for free */
} lull__chunk;

typedef struct lull__heap {
    lull__chunk *chunk; /* chunk[c] holds positions c * CHUNK + 0 .. CHUNK-1 */
    uint32_t len;       /* timers in the heap: positions ROOT .. ROOT+len-1 */
    uint32_t cap;       /* positions allocated, the unused 0..2 included */
    uint32_t chunks;    /* chunks allocated */
    uint32_t table_cap; /* entries of chunk[] */
} lull__heap;

/* 0, or -ENOMEM when the heap cannot grow. */
int lull__heap_insert(lull__heap *h, lull_timer *t, uint64_t deadline);
void lull__heap_remove(lull__heap *h, lull_timer *t);
void lull__heap_free(lull__heap *h);
#ifndef NDEBUG
/* Checks positions and order of the first `max` slots (LULL_ASSERT). */
void lull__heap_verify(const lull__heap *h, const lull_loop *loop,
                       uint32_t max);
#endif

static inline lull__slot *lull__heap_slot(const lull__heap *h, uint32_t pos) {
    return &h->chunk[pos >> LULL__HEAP_CHUNK_SHIFT]
                .slots[pos & (LULL__HEAP_CHUNK - 1)];
}

static inline lull_timer *lull__heap_min(const lull__heap *h) {
    return h->len ? h->chunk[0].slots[LULL__HEAP_ROOT].timer : NULL;
}

/* The earliest deadline; only with len > 0. */
static inline uint64_t lull__heap_min_deadline(const lull__heap *h) {
    return h->chunk[0].slots[LULL__HEAP_ROOT].deadline;
}

static inline bool lull__heap_contains(const lull_timer *t) {
    return t->node.aux != 0;
}

static inline uint64_t lull__heap_deadline_of(const lull__heap *h,
                                              const lull_timer *t) {
    return lull__heap_slot(h, t->node.aux)->deadline;
}

#endif
