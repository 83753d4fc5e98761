/* libuv's implementation of the `turns` figures (compiled when pkg-config
 * finds libuv). Written the way a libuv user would: the next-iteration
 * chain is a uv_idle_t callback, which makes the loop poll with a zero
 * timeout every iteration; the zero-delay chain is uv_timer_start(0). The
 * clocks and samples are lab/turns_util.c's, the same for every row. */
#include "../lab.h"
#include "../turns.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static const char *version(void) {
    return uv_version_string();
}

/* Closes every handle of a loop, runs the close callbacks, frees the loop's
 * own resources. */
static void close_walk(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static int close_loop(uv_loop_t *loop) {
    uv_walk(loop, close_walk, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    return uv_loop_close(loop);
}

static void never_ready(uv_poll_t *h, int status, int events) {
    (void)h;
    (void)status;
    (void)events;
}

/* ------------------------------------------------------------- chains */

typedef struct chain {
    uv_idle_t idle;
    uv_timer_t timer;
    uv_poll_t poll; /* one idle socket: the I/O check is real */
    uint64_t left;
} chain;

static void idle_hop(uv_idle_t *h) {
    chain *c = h->data;
    if (--c->left == 0) {
        uv_idle_stop(h);
        uv_poll_stop(&c->poll);
    }
}

static void timer_hop(uv_timer_t *h) {
    chain *c = h->data;
    if (--c->left > 0) {
        uv_timer_start(h, timer_hop, 0, 0);
    } else {
        uv_poll_stop(&c->poll);
    }
}

static int run_chain(const turns_params *p, turns_result *out, bool timer) {
    uv_loop_t loop;
    chain c;
    int fds[2];
    int rc = turns_open_sockets(fds, 2);
    if (rc < 0) return rc;
    rc = uv_loop_init(&loop);
    if (rc < 0) goto out_fds;
    uv_idle_init(&loop, &c.idle);
    uv_timer_init(&loop, &c.timer);
    uv_poll_init(&loop, &c.poll, fds[0]);
    c.idle.data = c.timer.data = c.poll.data = &c;
    uv_poll_start(&c.poll, UV_READABLE, never_ready);
    uv_run(&loop, UV_RUN_NOWAIT);
    c.left = p->hops;
    turns_chain_clock clk;
    turns_chain_begin(&clk);
    if (timer) {
        uv_timer_start(&c.timer, timer_hop, 0, 0);
    } else {
        uv_idle_start(&c.idle, idle_hop);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    turns_chain_end(&clk, p, out);
    rc = c.left == 0 ? 0 : -EPROTO;
    close_loop(&loop);
out_fds:
    turns_close_sockets(fds, 2);
    return rc;
}

static int chain_idle(const turns_params *p, turns_result *out) {
    return run_chain(p, out, false);
}

static int chain_timer0(const turns_params *p, turns_result *out) {
    return run_chain(p, out, true);
}

/* ----------------------------------------------------------- lateness */

typedef struct late {
    uv_timer_t timer;
    turns_late l;
} late;

static void late_fire(uv_timer_t *h) {
    late *x = h->data;
    if (turns_late_fired(&x->l)) uv_timer_start(h, late_fire, 1, 0);
}

static int lateness(const turns_params *p, turns_result *out) {
    late x;
    int rc = turns_late_open(&x.l, p);
    uv_loop_t loop;
    if (rc == 0) rc = uv_loop_init(&loop);
    if (rc == 0) {
        uv_timer_init(&loop, &x.timer);
        x.timer.data = &x;
        uv_update_time(&loop);
        turns_late_arm(&x.l);
        uv_timer_start(&x.timer, late_fire, 1, 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        close_loop(&loop);
    }
    return turns_late_close(&x.l, rc, out);
}

/* --------------------------------------------------------------- idle */

static void idle_end(uv_timer_t *h) {
    uv_stop(h->loop);
}

static void idle_timer(uv_timer_t *h) {
    (void)h; /* due in an hour or more: never fires in the window */
}

static int idle(const turns_params *p, turns_result *out) {
    int n = p->idle_handles;
    uv_poll_t *polls = calloc((size_t)n, sizeof *polls);
    uv_timer_t *timers = calloc((size_t)n, sizeof *timers);
    int *fds = calloc((size_t)n, sizeof *fds);
    uv_loop_t loop;
    uint64_t seed = p->seed;
    int rc = !polls || !timers || !fds ? -ENOMEM : turns_open_sockets(fds, n);
    if (rc < 0) goto out;
    rc = uv_loop_init(&loop);
    if (rc == 0) {
        for (int i = 0; i < n; i++) {
            uv_poll_init(&loop, &polls[i], fds[i]);
            uv_poll_start(&polls[i], UV_READABLE, never_ready);
            uv_timer_init(&loop, &timers[i]);
            uv_timer_start(&timers[i], idle_timer,
                           turns_idle_delay_ns(&seed) / 1000000, 0);
        }
        uv_timer_t end;
        uv_timer_init(&loop, &end);
        uv_run(&loop, UV_RUN_NOWAIT);
        turns_idle_clock clk;
        turns_idle_begin(&clk);
        uv_update_time(&loop);
        uv_timer_start(&end, idle_end, p->idle_window_ns / 1000000, 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        turns_idle_end(&clk, p, out);
        close_loop(&loop);
    }
    turns_close_sockets(fds, n);
out:
    free(polls);
    free(timers);
    free(fds);
    return rc;
}

/* -------------------------------------------------------- round trip */

typedef struct trip {
    uv_loop_t la, lb;
    uv_async_t aa, ab; /* aa wakes a (trip ended), ab wakes b */
    turns_trip_clock clk;
    volatile int stop; /* set by a before its last send to b */
} trip;

static void trip_on_a(uv_async_t *h) {
    trip *t = h->data;
    if (!turns_trip_arrived(&t->clk)) {
        __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
        uv_close((uv_handle_t *)h, NULL);
    }
    uv_async_send(&t->ab);
}

static void trip_on_b(uv_async_t *h) {
    trip *t = h->data;
    if (__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        uv_close((uv_handle_t *)h, NULL);
        return;
    }
    uv_async_send(&t->aa);
}

static void *trip_side_a(void *arg) {
    trip *t = arg;
    turns_pair_ready();
    turns_trip_send(&t->clk);
    uv_async_send(&t->ab);
    uv_run(&t->la, UV_RUN_DEFAULT);
    return NULL;
}

static void *trip_side_b(void *arg) {
    trip *t = arg;
    turns_pair_ready();
    uv_run(&t->lb, UV_RUN_DEFAULT);
    return NULL;
}

static int roundtrip(const turns_params *p, turns_result *out) {
    trip *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    int rc = turns_trip_open(&t->clk, p);
    /* Both loops and asyncs exist before either thread runs: uv_async_send
     * needs an initialised handle. */
    if (rc == 0) rc = uv_loop_init(&t->la);
    if (rc == 0) rc = uv_loop_init(&t->lb);
    if (rc == 0) {
        uv_async_init(&t->la, &t->aa, trip_on_a);
        uv_async_init(&t->lb, &t->ab, trip_on_b);
        t->aa.data = t->ab.data = t;
        rc = turns_pair_run(p, trip_side_a, trip_side_b, t);
        close_loop(&t->la);
        close_loop(&t->lb);
    }
    rc = turns_trip_close(&t->clk, rc, out);
    free(t);
    return rc;
}

/* ------------------------------------------------------------- timers */

static void never(uv_timer_t *h) {
    (void)h;
}

static int timers(const turns_params *p, turns_result *out) {
    size_t n = (size_t)p->timers, pairs = (size_t)p->timer_pairs;
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) return rc;
    uv_timer_t *extra = calloc(pairs, sizeof *extra);
    uint64_t *delays = calloc(pairs, sizeof *delays);
    uint64_t seed = p->seed;
    uint64_t heap0 = lab_heap_bytes();
    uv_timer_t *t = calloc(n, sizeof *t);
    if (!t || !extra || !delays) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uv_timer_init(&loop, &t[i]);
        uv_timer_start(
            &t[i], never,
            turns_random_delay(&seed, 1000000000, 1000000000000) / 1000000, 0);
    }
    uint64_t heap1 = lab_heap_bytes();
    for (size_t i = 0; i < pairs; i++) {
        uv_timer_init(&loop, &extra[i]);
        delays[i] =
            turns_random_delay(&seed, 1000000000, 1000000000000) / 1000000;
    }
    turns_timer_rounds tr = {0};
    for (int r = 0; r < TURNS_TIMER_ROUNDS; r++) {
        turns_timer_arms(&tr);
        for (size_t i = 0; i < pairs; i++)
            uv_timer_start(&extra[i], never, delays[i], 0);
        turns_timer_cancels(&tr);
        for (size_t i = 0; i < pairs; i++)
            uv_timer_stop(&extra[i]);
        turns_timer_done(&tr);
    }
    turns_timer_figures(out, &tr, n, pairs, (double)heap1 - (double)heap0);
out:
    close_loop(&loop); /* closes every timer handle first */
    free(t);
    free(extra);
    free(delays);
    return rc;
}

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "libuv: uv_idle", chain_idle, "every hop", 0,
     TURNS_CLASS_EVERY_HOP},
    {TURNS_CHAIN_TIMER0, "libuv: uv_timer_start(0)", chain_timer0,
     "none between hops (see note)", 0, TURNS_CLASS_NO_POLL},
    {TURNS_LATENESS, "libuv", lateness, NULL, TURNS_SLACK_BOTH, 0},
    {TURNS_IDLE, "libuv", idle, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "libuv: uv_async_send", roundtrip, NULL, 0, 0},
    {TURNS_TIMERS, "libuv", timers, NULL, 0, 0},
};

const turns_peer turns_uv = {
    "libuv",
    version,
    NULL,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
    "the distribution's shared library (libuv.so)",
};
