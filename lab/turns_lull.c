/* lull's implementation of every `turns` figure, through include/lull.h
 * only. Each entry creates its loop(s), measures once and frees everything;
 * a loop that cannot be freed is reported as -EBUSY (a leaked handle would
 * be a bug in this file or in lull). Runs on the driver's thread, except the
 * round trip, whose two loops run on the pair harness's threads.
 *
 * The same file is also built into lull-lab-so (lab/so/main.c) against
 * liblull.so, so the chains and timers can be measured with lull linked the
 * way the peers are (lab/turns_lull_so.c). */
#include "lab.h"
#include "turns.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lull.h"

#define MS 1000000ull
#define S  1000000000ull

/* ------------------------------------------------------------- chains */

typedef struct chain {
    lull_task task;
    lull_timer timer;
    lull_io io; /* one idle socket, so the loop's I/O check is real */
    lull_loop *loop;
    uint64_t left;
} chain;

static void chain_io(lull_io *io, int events) {
    (void)io;
    (void)events; /* never readable: nothing is ever written */
}

static void task_hop(lull_task *task) {
    chain *c = LULL_CONTAINER_OF(task, chain, task);
    if (--c->left > 0) {
        lull_task_post(c->loop, task);
    } else {
        lull_io_stop(&c->io); /* nothing left: lull_loop_run returns */
    }
}

static void timer_hop(lull_timer *timer) {
    chain *c = LULL_CONTAINER_OF(timer, chain, timer);
    if (--c->left > 0) {
        lull_timer_start(timer, 0, 0);
    } else {
        lull_io_stop(&c->io);
    }
}

/* quantum_ns 0 is lull's default (0.5 ms: one I/O check per quantum of
 * busy work); 1 makes every hop end a slice, so the loop polls per hop as
 * the peers' next-iteration callbacks do. */
static int run_chain(const turns_params *p, turns_result *out, bool timer,
                     uint64_t quantum_ns) {
    chain c;
    memset(&c, 0, sizeof c);
    int fds[2];
    int rc = turns_open_sockets(fds, 2);
    if (rc < 0) return rc;
    lull_loop_options opts = {.quantum_ns = quantum_ns};
    rc = lull_loop_new(&c.loop, &opts);
    if (rc < 0) goto out_fds;
    rc = lull_io_init(c.loop, &c.io, fds[0], chain_io);
    if (rc == 0) rc = lull_io_start(&c.io, LULL_READABLE);
    if (rc < 0) goto out_loop;
    lull_loop_run(c.loop, LULL_RUN_NOWAIT); /* the fd reaches the kernel */

    lull_task_init(&c.task, task_hop);
    lull_timer_init(c.loop, &c.timer, timer_hop);
    c.left = p->hops;
    turns_chain_clock clk;
    turns_chain_begin(&clk);
    if (timer) {
        lull_timer_start(&c.timer, 0, 0);
    } else {
        lull_task_post(c.loop, &c.task);
    }
    rc = lull_loop_run(c.loop, LULL_RUN_DEFAULT);
    turns_chain_end(&clk, p, out);
    if (rc == 0 && c.left != 0) rc = -EPROTO; /* returned before the end */
out_loop:
    lull_io_stop(&c.io);
    if (lull_loop_free(c.loop) < 0 && rc == 0) rc = -EBUSY;
out_fds:
    turns_close_sockets(fds, 2);
    return rc;
}

static int chain_task(const turns_params *p, turns_result *out) {
    return run_chain(p, out, false, 0);
}

static int chain_task_every_hop(const turns_params *p, turns_result *out) {
    return run_chain(p, out, false, 1);
}

static int chain_timer0(const turns_params *p, turns_result *out) {
    return run_chain(p, out, true, 0);
}

static int chain_timer0_every_hop(const turns_params *p, turns_result *out) {
    return run_chain(p, out, true, 1);
}

/* ----------------------------------------------------------- lateness */

typedef struct late {
    lull_timer timer;
    turns_late l;
} late;

static void late_fire(lull_timer *timer) {
    late *x = LULL_CONTAINER_OF(timer, late, timer);
    if (turns_late_fired(&x->l)) lull_timer_start(timer, MS, 0);
}

static int lateness(const turns_params *p, turns_result *out) {
    late x;
    int rc = turns_late_open(&x.l, p);
    lull_loop *loop;
    if (rc == 0) rc = lull_loop_new(&loop, NULL);
    if (rc < 0) return turns_late_close(&x.l, rc, out);
    lull_timer_init(loop, &x.timer, late_fire);
    turns_late_arm(&x.l);
    lull_timer_start(&x.timer, MS, 0);
    rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    lull_timer_stop(&x.timer);
    if (lull_loop_free(loop) < 0 && rc == 0) rc = -EBUSY;
    return turns_late_close(&x.l, rc, out);
}

/* --------------------------------------------------------------- idle */

typedef struct idle_session { /* one idle session: socket, timer, pump */
    lull_io io;
    lull_timer timer;
    lull_pump pump;
    lull_notifier notifier;
    lull_listener listener;
} idle_session;

static void idle_io(lull_io *io, int events) {
    (void)io;
    (void)events;
}

static void idle_timer(lull_timer *timer) {
    (void)timer; /* due in an hour or more: never fires in the window */
}

static lull_pass_result idle_pass(lull_pump *pump, uint64_t *retry_ns) {
    (void)pump;
    (void)retry_ns;
    return LULL_PASS_QUIET;
}

static void idle_end(lull_timer *timer) {
    lull_loop_stop(timer->loop);
}

/* Sockets and far timers, as every peer's row holds; with_pumps adds a
 * pump listening on a notifier per session, as a server's sessions have. */
static int idle_run(const turns_params *p, turns_result *out, bool with_pumps) {
    int n = p->idle_handles;
    idle_session *s = calloc((size_t)n, sizeof *s);
    int *fds = calloc((size_t)n, sizeof *fds);
    if (!s || !fds) {
        free(s);
        free(fds);
        return -ENOMEM;
    }
    int rc = turns_open_sockets(fds, n);
    if (rc < 0) goto out_mem;
    lull_loop *loop;
    rc = lull_loop_new(&loop, NULL);
    if (rc < 0) goto out_fds;

    uint64_t seed = p->seed;
    int started = 0;
    for (; started < n; started++) {
        idle_session *x = &s[started];
        rc = lull_io_init(loop, &x->io, fds[started], idle_io);
        if (rc == 0) rc = lull_io_start(&x->io, LULL_READABLE);
        if (rc < 0) break;
        lull_timer_init(loop, &x->timer, idle_timer);
        lull_timer_start(&x->timer, turns_idle_delay_ns(&seed), 0);
        if (!with_pumps) continue;
        lull_notifier_init(&x->notifier);
        lull_pump_init(loop, &x->pump, idle_pass);
        lull_pump_listen(&x->pump, &x->notifier, &x->listener);
    }
    if (rc == 0) {
        lull_timer end;
        lull_timer_init(loop, &end, idle_end);
        lull_loop_run(loop,
                      LULL_RUN_NOWAIT); /* registrations reach the kernel */

        lull_metrics m0, m1;
        lull_loop_metrics(loop, &m0);
        turns_idle_clock clk;
        turns_idle_begin(&clk);
        lull_timer_start(&end, p->idle_window_ns, 0);
        rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
        turns_idle_end(&clk, p, out);
        lull_loop_metrics(loop, &m1);
        lull_timer_stop(&end);
        out->v[IDLE_WAKEUPS] = (double)(m1.wakeups - m0.wakeups);
    }
    for (int i = 0; i < started; i++) {
        if (with_pumps) {
            lull_listener_stop(&s[i].listener);
            lull_pump_close(&s[i].pump);
        }
        lull_timer_stop(&s[i].timer);
        lull_io_stop(&s[i].io);
    }
    if (lull_loop_free(loop) < 0 && rc == 0) rc = -EBUSY;
out_fds:
    turns_close_sockets(fds, n);
out_mem:
    free(fds);
    free(s);
    return rc;
}

static int idle(const turns_params *p, turns_result *out) {
    return idle_run(p, out, false);
}

static int idle_pumps(const turns_params *p, turns_result *out) {
    return idle_run(p, out, true);
}

/* -------------------------------------------------------- round trip */

typedef struct trip {
    lull_loop *a, *b; /* written by each side before the barrier */
    lull_task ping;   /* runs on a: a trip ended */
    lull_task pong;   /* runs on b: posts ping back */
    lull_task stop_b; /* runs on b: ends b's run */
    turns_trip_clock clk;
    int rc;
    bool watch_fd; /* each loop also watches an idle socket, so it sleeps
                      in epoll rather than on its futex */
    int fds[2][2]; /* [side][end] */
    lull_io io[2]; /* [side] */
} trip;

static void trip_never_ready(lull_io *io, int events) {
    (void)io;
    (void)events;
}

/* With watch_fd, side `s` watches one end of a fresh, silent socketpair. */
static int trip_watch(trip *t, int s, lull_loop *loop) {
    t->fds[s][0] = t->fds[s][1] = -1;
    if (!t->watch_fd) return 0;
    int rc = turns_open_sockets(t->fds[s], 2);
    if (rc < 0) return rc;
    rc = lull_io_init(loop, &t->io[s], t->fds[s][0], trip_never_ready);
    if (rc == 0) rc = lull_io_start(&t->io[s], LULL_READABLE);
    if (rc == 0) {
        lull_io_unref(&t->io[s]);
        return 0;
    }
    turns_close_sockets(t->fds[s], 2);
    t->fds[s][0] = t->fds[s][1] = -1;
    return rc;
}

static void trip_unwatch(trip *t, int s) {
    if (!t->watch_fd) return;
    lull_io_stop(&t->io[s]);
}

static void trip_pong(lull_task *task) {
    trip *t = LULL_CONTAINER_OF(task, trip, pong);
    lull_task_post_remote(t->a, &t->ping);
}

static void trip_ping(lull_task *task) {
    trip *t = LULL_CONTAINER_OF(task, trip, ping);
    if (turns_trip_arrived(&t->clk)) {
        lull_task_post_remote(t->b, &t->pong);
    } else {
        lull_task_post_remote(t->b, &t->stop_b);
        trip_unwatch(t, 0);
        lull_loop_unref(t->a); /* nothing else keeps a's run alive */
    }
}

static void trip_stop_b(lull_task *task) {
    trip *t = LULL_CONTAINER_OF(task, trip, stop_b);
    trip_unwatch(t, 1);
    lull_loop_unref(t->b);
}

static void *trip_side_a(void *arg) {
    trip *t = arg;
    int rc = lull_loop_new(&t->a, NULL);
    if (rc == 0 && (rc = trip_watch(t, 0, t->a)) < 0) {
        lull_loop_free(t->a);
        t->a = NULL;
    }
    if (rc == 0) lull_loop_ref(t->a); /* expects remote posts from b */
    turns_pair_ready();
    if (rc < 0 || !t->b) {
        t->rc = rc < 0 ? rc : -ENOMEM;
        if (rc == 0) {
            lull_loop_unref(t->a);
            lull_loop_free(t->a);
        }
        return NULL;
    }
    turns_trip_send(&t->clk);
    lull_task_post_remote(t->b, &t->pong);
    rc = lull_loop_run(t->a, LULL_RUN_DEFAULT);
    if (rc < 0) t->rc = rc;
    if (lull_loop_free(t->a) < 0 && t->rc == 0) t->rc = -EBUSY;
    return NULL;
}

static void *trip_side_b(void *arg) {
    trip *t = arg;
    lull_loop *b;
    int rc = lull_loop_new(&b, NULL);
    if (rc == 0 && (rc = trip_watch(t, 1, b)) < 0) lull_loop_free(b);
    if (rc == 0) {
        lull_loop_ref(b);
        t->b = b;
    }
    turns_pair_ready();
    if (rc < 0) return NULL;
    if (!t->a) { /* a failed: nothing will post here */
        lull_loop_unref(b);
        lull_loop_free(b);
        return NULL;
    }
    rc = lull_loop_run(b, LULL_RUN_DEFAULT);
    if (rc < 0) t->rc = rc;
    if (lull_loop_free(b) < 0 && t->rc == 0) t->rc = -EBUSY;
    return NULL;
}

static int trip_run(const turns_params *p, turns_result *out, bool watch_fd) {
    trip t;
    memset(&t, 0, sizeof t);
    t.watch_fd = watch_fd;
    int rc = turns_trip_open(&t.clk, p);
    if (rc < 0) return rc;
    lull_task_init(&t.ping, trip_ping);
    lull_task_init(&t.pong, trip_pong);
    lull_task_init(&t.stop_b, trip_stop_b);
    rc = turns_pair_run(p, trip_side_a, trip_side_b, &t);
    if (rc == 0) rc = t.rc;
    for (int s = 0; watch_fd && s < 2; s++)
        if (t.fds[s][0] >= 0) turns_close_sockets(t.fds[s], 2);
    return turns_trip_close(&t.clk, rc, out);
}

/* Loops that watch no fd sleep on a futex; loops that do sleep in epoll.
 * Both are measured, since a server's loop has sockets. */
static int roundtrip(const turns_params *p, turns_result *out) {
    return trip_run(p, out, false);
}

static int roundtrip_fd(const turns_params *p, turns_result *out) {
    return trip_run(p, out, true);
}

/* ------------------------------------------------------------- timers */

static void never(lull_timer *timer) {
    (void)timer; /* deadlines are 1 s or more away; nothing runs the loop */
}

/* The same arm + cancel from callbacks, as a server arms its timeouts:
 * one posted task arms the batch, the loop iteration ends, a second task
 * cancels it. An arm inside a callback reads no clock (it counts from the
 * loop's next reading, src/timer.c), so this is the row a running program
 * pays; `timers` arms outside any run, where every arm reads it. */
typedef struct cb_timers {
    lull_task arm, cancel;
    lull_timer *extra;
    const uint64_t *delays;
    size_t pairs;
    turns_timer_rounds *tr;
} cb_timers;

static void cb_arm(lull_task *task) {
    cb_timers *c = LULL_CONTAINER_OF(task, cb_timers, arm);
    turns_timer_arms(c->tr);
    for (size_t i = 0; i < c->pairs; i++)
        lull_timer_start(&c->extra[i], c->delays[i], 0);
}

static void cb_cancel(lull_task *task) {
    cb_timers *c = LULL_CONTAINER_OF(task, cb_timers, cancel);
    turns_timer_cancels(c->tr);
    for (size_t i = 0; i < c->pairs; i++)
        lull_timer_stop(&c->extra[i]);
    turns_timer_done(c->tr);
}

/* Arms n timers, then measures TURNS_TIMER_ROUNDS rounds of arming and
 * cancelling `pairs` more: outside any run, or from two posted tasks. */
static int timers_run(const turns_params *p, turns_result *out,
                      bool in_callbacks) {
    size_t n = (size_t)p->timers, pairs = (size_t)p->timer_pairs;
    lull_loop *loop;
    int rc = lull_loop_new(&loop, NULL);
    if (rc < 0) return rc;
    lull_timer *extra = calloc(pairs, sizeof *extra);
    uint64_t *delays = calloc(pairs, sizeof *delays);
    uint64_t seed = p->seed;
    uint64_t heap0 = lab_heap_bytes();
    lull_timer *t = calloc(n, sizeof *t);
    if (!t || !extra || !delays) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        lull_timer_init(loop, &t[i], never);
        lull_timer_start(&t[i], turns_random_delay(&seed, 1 * S, 1000 * S), 0);
    }
    uint64_t heap1 = lab_heap_bytes();
    for (size_t i = 0; i < pairs; i++) {
        lull_timer_init(loop, &extra[i], never);
        delays[i] = turns_random_delay(&seed, 1 * S, 1000 * S);
    }
    turns_timer_rounds tr = {0};
    cb_timers c = {.extra = extra, .delays = delays, .pairs = pairs, .tr = &tr};
    lull_task_init(&c.arm, cb_arm);
    lull_task_init(&c.cancel, cb_cancel);
    for (int r = 0; r < TURNS_TIMER_ROUNDS && rc == 0; r++) {
        if (!in_callbacks) {
            cb_arm(&c.arm);
            cb_cancel(&c.cancel);
            continue;
        }
        lull_task_post(loop, &c.arm);
        rc = lull_loop_run(loop, LULL_RUN_NOWAIT);
        lull_task_post(loop, &c.cancel);
        if (rc == 0) rc = lull_loop_run(loop, LULL_RUN_NOWAIT);
    }
    if (rc > 0) rc = 0;
    turns_timer_figures(out, &tr, n, pairs, (double)heap1 - (double)heap0);
    for (size_t i = 0; i < n; i++)
        lull_timer_stop(&t[i]);
out:
    if (lull_loop_free(loop) < 0 && rc == 0) rc = -EBUSY;
    free(t);
    free(extra);
    free(delays);
    return rc;
}

static int timers(const turns_params *p, turns_result *out) {
    return timers_run(p, out, false);
}

static int timers_in_callbacks(const turns_params *p, turns_result *out) {
    return timers_run(p, out, true);
}

/* ------------------------------------------------------ virtual clock */

/* C7: the same timers on the real clock and on the virtual one. Delays
 * are whole 100 µs steps in [0, 20 ms), so many share one (ties go in arm
 * order); both clocks must fire them sorted by (delay, arm order): the
 * real clock because their deadlines are taken microseconds apart, in arm
 * order, the virtual one by contract. Then 10,000 timers over an hour of
 * virtual time, in the real time lull_loop_advance takes. */
#define VT_TIMERS 200
#define VT_HOUR   10000

typedef struct vt_timer {
    lull_timer t;
    int id;
    int *log; /* ids in firing order */
    int *n;
} vt_timer;

static void vt_fire(lull_timer *t) {
    vt_timer *v = LULL_CONTAINER_OF(t, vt_timer, t);
    v->log[(*v->n)++] = v->id;
}

/* Arms n timers with delays (ns) on a loop of the given clock and runs
 * them to the end: advances the virtual clock past the last, or runs the
 * real one. Their ids in firing order go to log; *real_ns gets the real
 * time it took. */
static int vt_run(lull_clock clock, const uint64_t *delays, int n, int *log,
                  uint64_t *real_ns) {
    lull_loop_options o = {.clock = clock};
    lull_loop *loop;
    int rc = lull_loop_new(&loop, &o);
    if (rc < 0) return rc;
    vt_timer *v = calloc((size_t)n, sizeof *v);
    int fired = 0;
    uint64_t last = 0;
    if (!v) rc = -ENOMEM;
    uint64_t t0 = lab_now_ns();
    for (int i = 0; rc == 0 && i < n; i++) {
        v[i] = (vt_timer){.id = i, .log = log, .n = &fired};
        lull_timer_init(loop, &v[i].t, vt_fire);
        lull_timer_start(&v[i].t, delays[i], 0);
        if (delays[i] > last) last = delays[i];
    }
    if (rc == 0 && clock == LULL_CLOCK_VIRTUAL)
        lull_loop_advance(loop, last + 1);
    else if (rc == 0)
        rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    *real_ns = lab_now_ns() - t0;
    if (rc == 0 && fired != n) rc = -EPROTO;
    for (int i = 0; v && i < n; i++)
        lull_timer_stop(&v[i].t);
    if (lull_loop_free(loop) < 0 && rc == 0) rc = -EBUSY;
    free(v);
    return rc;
}

static int virtual_order(const turns_params *p, turns_result *out) {
    uint64_t delays[VT_TIMERS];
    int expect[VT_TIMERS], real[VT_TIMERS], virt[VT_TIMERS];
    uint64_t seed = p->seed;
    for (int i = 0; i < VT_TIMERS; i++)
        delays[i] = (lab_rand(&seed) % 200) * 100000;
    /* Sorted by (delay, arm order): an insertion sort keeps ties stable. */
    for (int i = 0; i < VT_TIMERS; i++) {
        int k = i;
        while (k > 0 && delays[expect[k - 1]] > delays[i]) {
            expect[k] = expect[k - 1];
            k--;
        }
        expect[k] = i;
    }
    uint64_t real_ns;
    int rc = vt_run(LULL_CLOCK_MONOTONIC, delays, VT_TIMERS, real, &real_ns);
    if (rc == 0)
        rc = vt_run(LULL_CLOCK_VIRTUAL, delays, VT_TIMERS, virt, &real_ns);
    if (rc < 0) return rc;
    bool same = memcmp(real, expect, sizeof expect) == 0 &&
                memcmp(virt, expect, sizeof expect) == 0;
    uint64_t *hour = calloc(VT_HOUR, sizeof *hour);
    int *log = calloc(VT_HOUR, sizeof *log);
    if (!hour || !log) rc = -ENOMEM;
    for (int i = 0; rc == 0 && i < VT_HOUR; i++)
        hour[i] = lab_rand(&seed) % (3600 * S);
    if (rc == 0) rc = vt_run(LULL_CLOCK_VIRTUAL, hour, VT_HOUR, log, &real_ns);
    free(hour);
    free(log);
    if (rc < 0) return rc;
    out->v[VIRTUAL_SAME_ORDER] = same ? 1 : 0;
    out->v[VIRTUAL_TIMERS] = VT_TIMERS;
    out->v[VIRTUAL_HOUR_MS] = (double)real_ns / 1e6;
    return 0;
}

#define EVERY_QUANTUM "every 0.5 ms (quantum)"

#ifndef LAB_LULL_BUILD
#define LAB_LULL_BUILD "build flags unknown"
#endif

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "lull: lull_task_post", chain_task, EVERY_QUANTUM,
     TURNS_BASE, TURNS_CLASS_QUANTUM},
    {TURNS_CHAIN_TASK, "lull: lull_task_post, quantum_ns = 1",
     chain_task_every_hop, "every hop (quantum_ns 1)", TURNS_BASE,
     TURNS_CLASS_EVERY_HOP},
    {TURNS_CHAIN_TIMER0, "lull: lull_timer_start(0)", chain_timer0,
     EVERY_QUANTUM, TURNS_BASE, TURNS_CLASS_QUANTUM},
    {TURNS_CHAIN_TIMER0, "lull: lull_timer_start(0), quantum_ns = 1",
     chain_timer0_every_hop, "every hop (quantum_ns 1)", TURNS_BASE,
     TURNS_CLASS_EVERY_HOP},
    {TURNS_LATENESS, "lull", lateness, NULL, TURNS_BASE | TURNS_OWN_SLACK, 0},
    {TURNS_IDLE, "lull: sockets+timers", idle, NULL, TURNS_BASE, 0},
    {TURNS_IDLE, "lull: sockets+timers+pumps", idle_pumps, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "lull: loops without fds (futex sleep)", roundtrip, NULL,
     0, 0},
    /* The base: the peers' loops sleep in epoll, as this one does. */
    {TURNS_ROUNDTRIP, "lull: loops watching a socket (epoll sleep)",
     roundtrip_fd, NULL, TURNS_BASE, 0},
    {TURNS_TIMERS, "lull: armed in callbacks", timers_in_callbacks, NULL,
     TURNS_BASE, 0},
    {TURNS_TIMERS, "lull: armed outside a run (a clock read each)", timers,
     NULL, 0, 0},
    {TURNS_VIRTUAL, "lull: real and virtual clock", virtual_order, NULL,
     TURNS_BASE, 0},
    /* lab/turns_arm.c */
    {TURNS_ARM_DELAY, "lull: one arm per task, no work", turns_arm_plain, NULL,
     0, 0},
    {TURNS_ARM_DELAY, "lull: one arm per ~1 µs task", turns_arm_worked, NULL,
     TURNS_BASE, 0},
    {TURNS_ARM_DELAY, "lull: a ~1 µs task's second arm (deferred)",
     turns_arm_second, NULL, 0, 0},
    {TURNS_ARM_DELAY, "lull: 1 ms timer re-armed in its callback, idle",
     turns_arm_rearm, NULL, 0, 0},
};

const turns_peer turns_lull = {
    "lull",
    NULL,
    NULL,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
    "static library (liblull.a) of this build, " LAB_LULL_BUILD,
};
