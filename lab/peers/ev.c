/* libev's implementation of the `turns` figures (compiled when ev.h and
 * libev are found). The next-iteration chain is an ev_idle watcher (libev
 * polls with a zero timeout while one is active); the zero-delay chain
 * re-arms an ev_timer with 0. from its callback. The clocks and samples
 * are lab/turns_util.c's, the same for every row. */
#include "../lab.h"
#include "../turns.h"

#include <errno.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *version(void) {
    static char buf[16];
    snprintf(buf, sizeof buf, "%d.%d", ev_version_major(), ev_version_minor());
    return buf;
}

/* ------------------------------------------------------------- chains */

typedef struct chain {
    ev_idle idle;
    ev_timer timer;
    ev_io io; /* one idle socket: the I/O check is real */
    uint64_t left;
} chain;

static void chain_io(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
}

static void idle_hop(struct ev_loop *loop, ev_idle *w, int revents) {
    (void)revents;
    chain *c = w->data;
    if (--c->left == 0) {
        ev_idle_stop(loop, w);
        ev_io_stop(loop, &c->io);
    }
}

static void timer_hop(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)revents;
    chain *c = w->data;
    if (--c->left > 0) {
        ev_timer_set(w, 0., 0.);
        ev_timer_start(loop, w);
    } else {
        ev_io_stop(loop, &c->io);
    }
}

static int run_chain(const turns_params *p, turns_result *out, bool timer) {
    int fds[2];
    int rc = turns_open_sockets(fds, 2);
    if (rc < 0) return rc;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    if (!loop) {
        turns_close_sockets(fds, 2);
        return -ENOMEM;
    }
    chain c;
    ev_idle_init(&c.idle, idle_hop);
    ev_timer_init(&c.timer, timer_hop, 0., 0.);
    ev_io_init(&c.io, chain_io, fds[0], EV_READ);
    c.idle.data = c.timer.data = c.io.data = &c;
    ev_io_start(loop, &c.io);
    ev_run(loop, EVRUN_NOWAIT);
    c.left = p->hops;
    turns_chain_clock clk;
    turns_chain_begin(&clk);
    if (timer) {
        ev_timer_start(loop, &c.timer);
    } else {
        ev_idle_start(loop, &c.idle);
    }
    ev_run(loop, 0);
    turns_chain_end(&clk, p, out);
    rc = c.left == 0 ? 0 : -EPROTO;
    ev_loop_destroy(loop);
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
    ev_timer timer;
    turns_late l;
} late;

static void late_fire(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)revents;
    late *x = w->data;
    if (turns_late_fired(&x->l)) {
        ev_timer_set(w, 0.001, 0.);
        ev_timer_start(loop, w);
    }
}

static int lateness(const turns_params *p, turns_result *out) {
    late x;
    int rc = turns_late_open(&x.l, p);
    struct ev_loop *loop = rc == 0 ? ev_loop_new(EVFLAG_AUTO) : NULL;
    if (rc == 0 && !loop) rc = -ENOMEM;
    if (rc == 0) {
        ev_timer_init(&x.timer, late_fire, 0.001, 0.);
        x.timer.data = &x;
        ev_now_update(loop);
        turns_late_arm(&x.l);
        ev_timer_start(loop, &x.timer);
        ev_run(loop, 0);
        ev_loop_destroy(loop);
    }
    return turns_late_close(&x.l, rc, out);
}

/* --------------------------------------------------------------- idle */

static void idle_io(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
}

static void idle_end(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void idle_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents; /* due in an hour or more: never fires in the window */
}

static int idle(const turns_params *p, turns_result *out) {
    int n = p->idle_handles;
    ev_io *ios = calloc((size_t)n, sizeof *ios);
    ev_timer *timers = calloc((size_t)n, sizeof *timers);
    int *fds = calloc((size_t)n, sizeof *fds);
    uint64_t seed = p->seed;
    int rc = !ios || !timers || !fds ? -ENOMEM : turns_open_sockets(fds, n);
    if (rc < 0) goto out;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    if (!loop) {
        rc = -ENOMEM;
    } else {
        for (int i = 0; i < n; i++) {
            ev_io_init(&ios[i], idle_io, fds[i], EV_READ);
            ev_io_start(loop, &ios[i]);
            ev_timer_init(&timers[i], idle_timer,
                          (double)turns_idle_delay_ns(&seed) / 1e9, 0.);
            ev_timer_start(loop, &timers[i]);
        }
        ev_timer end;
        ev_timer_init(&end, idle_end, (double)p->idle_window_ns / 1e9, 0.);
        ev_run(loop, EVRUN_NOWAIT);
        turns_idle_clock clk;
        turns_idle_begin(&clk);
        ev_now_update(loop);
        ev_timer_start(loop, &end);
        ev_run(loop, 0);
        turns_idle_end(&clk, p, out);
        for (int i = 0; i < n; i++) {
            ev_io_stop(loop, &ios[i]);
            ev_timer_stop(loop, &timers[i]);
        }
        ev_loop_destroy(loop);
    }
    turns_close_sockets(fds, n);
out:
    free(ios);
    free(timers);
    free(fds);
    return rc;
}

/* -------------------------------------------------------- round trip */

typedef struct trip {
    struct ev_loop *la, *lb;
    ev_async aa, ab; /* aa wakes a (trip ended), ab wakes b */
    turns_trip_clock clk;
    volatile int stop;
} trip;

static void trip_on_a(struct ev_loop *loop, ev_async *w, int revents) {
    (void)revents;
    trip *t = w->data;
    if (!turns_trip_arrived(&t->clk)) {
        __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
        ev_break(loop, EVBREAK_ALL);
    }
    ev_async_send(t->lb, &t->ab);
}

static void trip_on_b(struct ev_loop *loop, ev_async *w, int revents) {
    (void)revents;
    trip *t = w->data;
    if (__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    ev_async_send(t->la, &t->aa);
}

static void *trip_side_a(void *arg) {
    trip *t = arg;
    turns_pair_ready();
    turns_trip_send(&t->clk);
    ev_async_send(t->lb, &t->ab);
    ev_run(t->la, 0);
    return NULL;
}

static void *trip_side_b(void *arg) {
    trip *t = arg;
    turns_pair_ready();
    ev_run(t->lb, 0);
    return NULL;
}

static int roundtrip(const turns_params *p, turns_result *out) {
    trip t;
    memset(&t, 0, sizeof t);
    int rc = turns_trip_open(&t.clk, p);
    t.la = ev_loop_new(EVFLAG_AUTO);
    t.lb = ev_loop_new(EVFLAG_AUTO);
    if (rc == 0 && (!t.la || !t.lb)) rc = -ENOMEM;
    if (rc == 0) {
        /* Both asyncs are started before either thread runs: a send to a
         * watcher that is not started is lost. */
        ev_async_init(&t.aa, trip_on_a);
        ev_async_init(&t.ab, trip_on_b);
        t.aa.data = t.ab.data = &t;
        ev_async_start(t.la, &t.aa);
        ev_async_start(t.lb, &t.ab);
        rc = turns_pair_run(p, trip_side_a, trip_side_b, &t);
        ev_async_stop(t.la, &t.aa);
        ev_async_stop(t.lb, &t.ab);
    }
    if (t.la) ev_loop_destroy(t.la);
    if (t.lb) ev_loop_destroy(t.lb);
    return turns_trip_close(&t.clk, rc, out);
}

/* ------------------------------------------------------------- timers */

static void never(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
}

static int timers(const turns_params *p, turns_result *out) {
    size_t n = (size_t)p->timers, pairs = (size_t)p->timer_pairs;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    if (!loop) return -ENOMEM;
    int rc = 0;
    ev_timer *extra = calloc(pairs, sizeof *extra);
    double *delays = calloc(pairs, sizeof *delays);
    uint64_t seed = p->seed;
    uint64_t heap0 = lab_heap_bytes();
    ev_timer *t = calloc(n, sizeof *t);
    if (!t || !extra || !delays) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        double d =
            (double)turns_random_delay(&seed, 1000000000, 1000000000000) / 1e9;
        ev_timer_init(&t[i], never, d, 0.);
        ev_timer_start(loop, &t[i]);
    }
    uint64_t heap1 = lab_heap_bytes();
    for (size_t i = 0; i < pairs; i++) {
        delays[i] =
            (double)turns_random_delay(&seed, 1000000000, 1000000000000) / 1e9;
        ev_timer_init(&extra[i], never, delays[i], 0.);
    }
    turns_timer_rounds tr = {0};
    for (int r = 0; r < TURNS_TIMER_ROUNDS; r++) {
        turns_timer_arms(&tr);
        for (size_t i = 0; i < pairs; i++)
            ev_timer_start(loop, &extra[i]);
        turns_timer_cancels(&tr);
        for (size_t i = 0; i < pairs; i++)
            ev_timer_stop(loop, &extra[i]);
        turns_timer_done(&tr);
    }
    turns_timer_figures(out, &tr, n, pairs, (double)heap1 - (double)heap0);
    for (size_t i = 0; i < n; i++)
        ev_timer_stop(loop, &t[i]);
out:
    ev_loop_destroy(loop);
    free(t);
    free(extra);
    free(delays);
    return rc;
}

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "libev: ev_idle", chain_idle, "every hop", 0,
     TURNS_CLASS_EVERY_HOP},
    {TURNS_CHAIN_TIMER0, "libev: ev_timer 0.", chain_timer0, "every hop", 0,
     TURNS_CLASS_EVERY_HOP},
    {TURNS_LATENESS, "libev", lateness, NULL, TURNS_SLACK_BOTH, 0},
    {TURNS_IDLE, "libev", idle, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "libev: ev_async_send", roundtrip, NULL, 0, 0},
    {TURNS_TIMERS, "libev", timers, NULL, 0, 0},
};

const turns_peer turns_ev = {
    "libev",
    version,
    NULL,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
#ifdef LAB_EV_STATIC
    "the distribution's static archive (libev.a; see lab/LullPeers.cmake)",
#else
    "the distribution's shared library (libev.so)",
#endif
};
