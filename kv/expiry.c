/* expiry.c: the keyspace's expiry timer (see expiry.h). */
#include "expiry.h"

#include "repl.h" /* KV_PLANT_EXPIRE_EARLY */

#include <stdbool.h>
#include <string.h>

/* How long a due key whose DEL found no memory waits before the timer
 * tries again: often enough that memory freed is soon used, seldom
 * enough that a loop short of it stays idle (as a replica's first
 * reconnect, link.c). */
#define EXPIRE_RETRY_NS 100000000ull

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

/* KV_PLANT_EXPIRE_EARLY: the keys whose time the clock reads are
 * deleted (and their DELs logged) as if it were past. */
static size_t delete_early(kv *k) {
    size_t n = 0;
    dict_entry *e;
    buf out = {0};
    char key[256]; /* a copy: DEL frees the entry before it logs */
    while ((e = store_first_expiry(&k->db)) &&
           store_expire(&k->db, e) <= k->clock(k) && e->klen <= sizeof key) {
        memcpy(key, dict_key(&k->db.d, e), e->klen);
        resp_arg del[2] = {{"DEL", 3}, {key, e->klen}};
        k->cmd_now = 0;
        kv_exec(k, NULL, del, 2, &out);
        n++;
    }
    buf_free(&out);
    return n;
}

static void due(lull_timer *t) {
    kv_expiry *x = LULL_CONTAINER_OF(t, kv_expiry, timer);
    x->fired++;
    x->armed_at = 0;
    size_t n = x->k->plant & KV_PLANT_EXPIRE_EARLY ? delete_early(x->k) : 0;
    if ((kv_expire_due(x->k, slice_left, x) || n) && x->expired)
        x->expired(x->arg);
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
    int64_t at = store_expire(&k->db, e);
    if (at == x->armed_at && lull_timer_active(&x->timer)) return;
    x->armed_at = at;
    /* The loop time at which the clock reads `at` + 1, the first ms the
     * key is expired at (store_expired): the clock counts whole ms since
     * base_ns, so it reads that from then on, never before. */
    uint64_t now = lull_loop_now_exact(x->loop);
    uint64_t delay = 0;
    if (at >= x->base_ms) {
        uint64_t ms = (uint64_t)at - (uint64_t)x->base_ms +
                      !(k->plant & KV_PLANT_EXPIRE_EARLY);
        uint64_t target = ms > (UINT64_MAX - x->base_ns) / 1000000u
                              ? UINT64_MAX
                              : x->base_ns + ms * 1000000u;
        delay = target > now ? target - now : 0;
    }
    /* A due key left for want of memory (kv.expire_waits): at once would
     * spin the loop while memory stays short. */
    if (k->expire_waits && delay < EXPIRE_RETRY_NS) delay = EXPIRE_RETRY_NS;
    k->expire_waits = false;
    lull_timer_start(&x->timer, delay, 0);
}

void kv_expiry_stop(kv_expiry *x) {
    lull_timer_stop(&x->timer);
    x->armed_at = 0;
}
