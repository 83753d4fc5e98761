/* expiry.c: the keyspace's expiry timer (see expiry.h). */
#include "expiry.h"

#include <stdbool.h>

static int64_t loop_clock(kv *k) {
    kv_expiry *x = k->owner;
    uint64_t ns = lull_loop_now_exact(x->loop) - x->base_ns;
    return x->base_ms + (int64_t)(ns / 1000000u);
}

/* Keys are expired while the loop's slice lasts; the rest in a later
 * turn, after the fd callbacks and timers that were waiting. */
static bool slice_left(void *arg) {
    kv_expiry *x = arg;
    if (x->should_yield) return !x->should_yield(x->loop);
    return !lull_loop_should_yield(x->loop);
}

static void due(lull_timer *t) {
    kv_expiry *x = LULL_CONTAINER_OF(t, kv_expiry, timer);
    x->fired++;
    x->armed_at = 0;
    if (kv_expire_due(x->k, slice_left, x) && x->expired) x->expired(x->arg);
    kv_expiry_rearm(x);
}

void kv_expiry_init(kv_expiry *x, lull_loop *loop, kv *k, int64_t base_ms) {
    *x = (kv_expiry){.loop = loop, .k = k, .base_ms = base_ms};
    x->base_ns = lull_loop_now_exact(loop);
    lull_timer_init(loop, &x->timer, due);
    k->clock = loop_clock;
    k->owner = x;
}

void kv_expiry_rearm(kv_expiry *x) {
    kv *k = x->k;
    k->expiry_changed = false;
    dict_entry *e = k->replica ? NULL : store_first_expiry(&k->db);
    if (!e) {
        kv_expiry_stop(x);
        return;
    }
    int64_t at = store_obj(e)->expire;
    if (at == x->armed_at && lull_timer_active(&x->timer)) return;
    x->armed_at = at;
    /* The loop time at which the clock reads `at` + 1, the first ms the
     * key is expired at (store_expired): the clock counts whole ms since
     * base_ns, so it reads that from then on, never before. */
    uint64_t now = lull_loop_now_exact(x->loop);
    uint64_t delay = 0;
    if (at >= x->base_ms) {
        uint64_t ms = (uint64_t)at - (uint64_t)x->base_ms + 1;
        uint64_t target = ms > (UINT64_MAX - x->base_ns) / 1000000u
                              ? UINT64_MAX
                              : x->base_ns + ms * 1000000u;
        delay = target > now ? target - now : 0;
    }
    lull_timer_start(&x->timer, delay, 0);
}

void kv_expiry_stop(kv_expiry *x) {
    lull_timer_stop(&x->timer);
    x->armed_at = 0;
}
