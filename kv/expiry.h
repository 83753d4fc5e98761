/* expiry.h: the keyspace's expiry timer, and the clock expiry times are
 * kept in.
 *
 * One lull timer, armed for the earliest expiry in the keyspace (the
 * store's heap keeps it at hand), not one per key: 20 bytes per expiring
 * key in the heap and the key's entry, against 64 for a lull timer and
 * its heap slot (docs/KV.md has the figures). Its five rows (README, "The contracts"):
 *   trigger          a command or record that moved the earliest expiry
 *                    (kv.expiry_changed, looked at after each batch:
 *                    kv_expiry_rearm), and the timer itself
 *   source of truth  the store's expiry heap (store_first_expiry)
 *   pending work     a key with an expiry, on a primary
 *   next deadline    the earliest key's expiry time + 1 ms (a key
 *                    goes once the clock is past its time, as in
 *                    Redis); lull's timers never fire early, so no key
 *                    is deleted before its time; 100 ms on when a due
 *                    key's DEL found no memory in the log
 *   quiet            no key with an expiry, or a replica (its primary's
 *                    DELs expire its keys): no timer
 * Nothing samples keys on a period: an idle lull-kv holding a million
 * keys that expire tomorrow makes no wakeup until tomorrow. A run of due
 * keys is expired in slices (lull_loop_should_yield), so a million keys due
 * at once do not hold the loop.
 *
 * The clock: the loop's (monotonic, or virtual in tests), put on the Unix
 * epoch once at start, in ms, as Redis keeps expiry times (a replica on
 * the same machine reads the same times; another machine's replica is as
 * right as the two clocks agree, as with Redis). */
#ifndef LULL_KV_EXPIRY_H
#define LULL_KV_EXPIRY_H

#include <lull.h>
#include <stdint.h>

#include "cmd.h"

typedef struct kv_expiry {
    lull_loop *loop;
    kv *k;
    lull_timer timer;
    int64_t base_ms;  /* the clock's ms at base_ns */
    uint64_t base_ns; /* the loop's time at start */
    int64_t armed_at; /* the expiry time (ms) the timer is armed for */
    void (*expired)(void *arg); /* keys were expired (DELs logged) */
    void *arg;
    /* Where a run of due keys stops for the loop: NULL is
     * lull_loop_should_yield (a simulation brings a seeded one). */
    bool (*should_yield)(lull_loop *loop);
    uint64_t fired; /* times the timer ran: a measure of its wakeups */
} kv_expiry;

/* Sets k's clock to the loop's, reading base_ms at the loop's now (the
 * time of day in ms; tests pass what they like). */
void kv_expiry_init(kv_expiry *x, lull_loop *loop, kv *k, int64_t base_ms);
/* Arms the timer for the earliest expiry, or stops it; clears
 * k->expiry_changed. */
void kv_expiry_rearm(kv_expiry *x);
void kv_expiry_stop(kv_expiry *x);

#endif
