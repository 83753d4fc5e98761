/* libevent's implementation of the `turns` figures (compiled when
 * pkg-config finds libevent_core and libevent_pthreads).
 *
 * The next-iteration chain is an event with no fd that calls event_active()
 * on itself from its callback, under three I/O policies:
 *  - libevent's default runs such an event again in the same pass over the
 *    active queue, without looking at I/O ("drained in one pass");
 *  - event_config_set_max_dispatch_interval(cfg, {0, 500 us}, -1, 0) checks
 *    I/O once the callbacks have run for 0.5 ms: lull's default policy (its
 *    quantum), so this row and lull's default compare like for like;
 *  - event_config_set_max_dispatch_interval(cfg, NULL, 1, 0) checks I/O
 *    after every callback, like uv_idle, ev_idle and lull with
 *    quantum_ns = 1.
 * Lateness is measured with the default clock (CLOCK_MONOTONIC_COARSE) and
 * with EVENT_BASE_FLAG_PRECISE_TIMER. The clocks and samples are
 * lab/turns_util.c's, the same for every row. */
#include "../lab.h"
#include "../turns.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *version(void) {
    return event_get_version();
}

/* The I/O policy of a base: after how many callbacks, or how long running
 * them, the loop checks I/O again. */
typedef struct dispatch {
    int max_callbacks;   /* 0 = no limit */
    int max_interval_us; /* 0 = no limit */
} dispatch;

static const dispatch drain = {0, 0};     /* libevent's default */
static const dispatch quantum = {0, 500}; /* lull's default quantum */
static const dispatch every = {1, 0};     /* I/O after every callback */

/* A base with the given flags and I/O policy. Single-threaded figures pass
 * EVENT_BASE_FLAG_NOLOCK: once the round trip has called
 * evthread_use_pthreads(), later bases would otherwise take a lock on
 * every operation, and the figures would depend on the order they ran. */
static struct event_base *new_base(int flags, dispatch d) {
    struct event_config *cfg = event_config_new();
    if (!cfg) return NULL;
    event_config_set_flag(cfg, flags);
    if (d.max_callbacks > 0 || d.max_interval_us > 0) {
        struct timeval tv = {0, d.max_interval_us};
        event_config_set_max_dispatch_interval(
            cfg, d.max_interval_us > 0 ? &tv : NULL,
            d.max_callbacks > 0 ? d.max_callbacks : -1, 0);
    }
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

/* ------------------------------------------------------------- chains */

typedef struct chain {
    struct event hop;
    struct event io; /* one idle socket: the I/O check is real */
    uint64_t left;
    bool timer;
} chain;

static void chain_io(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
}

static void hop(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    chain *c = arg;
    if (--c->left == 0) {
        event_del(&c->io);
    } else if (c->timer) {
        static const struct timeval zero = {0, 0};
        evtimer_add(&c->hop, &zero);
    } else {
        event_active(&c->hop, EV_TIMEOUT, 0);
    }
}

static int run_chain(const turns_params *p, turns_result *out, bool timer,
                     dispatch d) {
    int fds[2];
    int rc = turns_open_sockets(fds, 2);
    if (rc < 0) return rc;
    struct event_base *base = new_base(EVENT_BASE_FLAG_NOLOCK, d);
    if (!base) {
        turns_close_sockets(fds, 2);
        return -ENOMEM;
    }
    chain c;
    memset(&c, 0, sizeof c);
    c.timer = timer;
    event_assign(&c.hop, base, -1, 0, hop, &c);
    event_assign(&c.io, base, fds[0], EV_READ | EV_PERSIST, chain_io, &c);
    event_add(&c.io, NULL);
    event_base_loop(base, EVLOOP_NONBLOCK);
    c.left = p->hops;
    turns_chain_clock clk;
    turns_chain_begin(&clk);
    if (timer) {
        static const struct timeval zero = {0, 0};
        evtimer_add(&c.hop, &zero);
    } else {
        event_active(&c.hop, EV_TIMEOUT, 0);
    }
    event_base_loop(base, 0);
    turns_chain_end(&clk, p, out);
    rc = c.left == 0 ? 0 : -EPROTO;
    event_del(&c.hop);
    event_del(&c.io);
    event_base_free(base);
    turns_close_sockets(fds, 2);
    return rc;
}

static int chain_drained(const turns_params *p, turns_result *out) {
    return run_chain(p, out, false, drain);
}

static int chain_quantum(const turns_params *p, turns_result *out) {
    return run_chain(p, out, false, quantum);
}

static int chain_checked(const turns_params *p, turns_result *out) {
    return run_chain(p, out, false, every);
}

static int chain_timer0(const turns_params *p, turns_result *out) {
    return run_chain(p, out, true, drain);
}

/* ----------------------------------------------------------- lateness */

typedef struct late {
    struct event timer;
    turns_late l;
} late;

static const struct timeval one_ms = {0, 1000};

static void late_fire(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    late *x = arg;
    if (turns_late_fired(&x->l)) evtimer_add(&x->timer, &one_ms);
}

static int run_lateness(const turns_params *p, turns_result *out, int flags) {
    late x;
    int rc = turns_late_open(&x.l, p);
    struct event_base *base =
        rc == 0 ? new_base(EVENT_BASE_FLAG_NOLOCK | flags, drain) : NULL;
    if (rc == 0 && !base) rc = -ENOMEM;
    if (rc == 0) {
        evtimer_assign(&x.timer, base, late_fire, &x);
        event_base_update_cache_time(base);
        turns_late_arm(&x.l);
        evtimer_add(&x.timer, &one_ms);
        event_base_loop(base, 0);
        event_base_free(base);
    }
    return turns_late_close(&x.l, rc, out);
}

static int lateness_default(const turns_params *p, turns_result *out) {
    return run_lateness(p, out, 0);
}

static int lateness_precise(const turns_params *p, turns_result *out) {
    return run_lateness(p, out, EVENT_BASE_FLAG_PRECISE_TIMER);
}

/* --------------------------------------------------------------- idle */

static void idle_io(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
}

static void idle_end(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static int idle(const turns_params *p, turns_result *out) {
    int n = p->idle_handles;
    struct event *evs = calloc((size_t)n, sizeof *evs);
    struct event *timers = calloc((size_t)n, sizeof *timers);
    int *fds = calloc((size_t)n, sizeof *fds);
    uint64_t seed = p->seed;
    int rc = !evs || !timers || !fds ? -ENOMEM : turns_open_sockets(fds, n);
    if (rc < 0) goto out;
    struct event_base *base = new_base(EVENT_BASE_FLAG_NOLOCK, drain);
    if (!base) {
        rc = -ENOMEM;
    } else {
        for (int i = 0; i < n; i++) {
            event_assign(&evs[i], base, fds[i], EV_READ | EV_PERSIST, idle_io,
                         NULL);
            event_add(&evs[i], NULL);
            /* due in an hour or more: never fires in the window */
            uint64_t d = turns_idle_delay_ns(&seed);
            struct timeval tv = {(time_t)(d / 1000000000),
                                 (suseconds_t)(d % 1000000000 / 1000)};
            evtimer_assign(&timers[i], base, idle_io, NULL);
            evtimer_add(&timers[i], &tv);
        }
        struct event end;
        evtimer_assign(&end, base, idle_end, base);
        event_base_loop(base, EVLOOP_NONBLOCK);
        turns_idle_clock clk;
        turns_idle_begin(&clk);
        struct timeval window = {
            (time_t)(p->idle_window_ns / 1000000000),
            (suseconds_t)(p->idle_window_ns % 1000000000 / 1000)};
        evtimer_add(&end, &window);
        event_base_loop(base, 0);
        turns_idle_end(&clk, p, out);
        for (int i = 0; i < n; i++) {
            event_del(&evs[i]);
            event_del(&timers[i]);
        }
        event_del(&end);
        event_base_free(base);
    }
    turns_close_sockets(fds, n);
out:
    free(evs);
    free(timers);
    free(fds);
    return rc;
}

/* -------------------------------------------------------- round trip */

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_rc;

static void use_threads(void) {
    threads_rc = evthread_use_pthreads();
}

typedef struct trip {
    struct event_base *ba, *bb;
    struct event ea, eb; /* ea wakes a (trip ended), eb wakes b */
    turns_trip_clock clk;
    volatile int stop;
} trip;

static void trip_on_a(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    trip *t = arg;
    if (!turns_trip_arrived(&t->clk)) {
        __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
        event_base_loopbreak(t->ba);
    }
    event_active(&t->eb, EV_READ, 0);
}

static void trip_on_b(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    trip *t = arg;
    if (__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        event_base_loopbreak(t->bb);
        return;
    }
    event_active(&t->ea, EV_READ, 0);
}

static void *trip_side_a(void *arg) {
    trip *t = arg;
    turns_pair_ready();
    turns_trip_send(&t->clk);
    event_active(&t->eb, EV_READ, 0);
    event_base_loop(t->ba, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void *trip_side_b(void *arg) {
    trip *t = arg;
    turns_pair_ready();
    event_base_loop(t->bb, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static int roundtrip(const turns_params *p, turns_result *out) {
    pthread_once(&threads_once, use_threads);
    if (threads_rc != 0) return -ENOSYS;
    trip t;
    memset(&t, 0, sizeof t);
    int rc = turns_trip_open(&t.clk, p);
    /* With threads enabled, a new base is notifiable: event_active from
     * another thread writes its eventfd. */
    t.ba = new_base(0, drain);
    t.bb = new_base(0, drain);
    if (rc == 0 && (!t.ba || !t.bb)) rc = -ENOMEM;
    if (rc == 0) {
        event_assign(&t.ea, t.ba, -1, 0, trip_on_a, &t);
        event_assign(&t.eb, t.bb, -1, 0, trip_on_b, &t);
        rc = turns_pair_run(p, trip_side_a, trip_side_b, &t);
        event_del(&t.ea);
        event_del(&t.eb);
    }
    if (t.ba) event_base_free(t.ba);
    if (t.bb) event_base_free(t.bb);
    return turns_trip_close(&t.clk, rc, out);
}

/* ------------------------------------------------------------- timers */

static void never(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
}

static struct timeval to_tv(uint64_t ns) {
    struct timeval tv = {(time_t)(ns / 1000000000),
                         (suseconds_t)(ns % 1000000000 / 1000)};
    return tv;
}

static int timers(const turns_params *p, turns_result *out) {
    size_t n = (size_t)p->timers, pairs = (size_t)p->timer_pairs;
    struct event_base *base = new_base(EVENT_BASE_FLAG_NOLOCK, drain);
    if (!base) return -ENOMEM;
    int rc = 0;
    struct event *extra = calloc(pairs, sizeof *extra);
    struct timeval *delays = calloc(pairs, sizeof *delays);
    uint64_t seed = p->seed;
    uint64_t heap0 = lab_heap_bytes();
    struct event *t = calloc(n, sizeof *t);
    if (!t || !extra || !delays) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct timeval tv =
            to_tv(turns_random_delay(&seed, 1000000000, 1000000000000));
        evtimer_assign(&t[i], base, never, NULL);
        evtimer_add(&t[i], &tv);
    }
    uint64_t heap1 = lab_heap_bytes();
    for (size_t i = 0; i < pairs; i++) {
        delays[i] = to_tv(turns_random_delay(&seed, 1000000000, 1000000000000));
        evtimer_assign(&extra[i], base, never, NULL);
    }
    turns_timer_rounds tr = {0};
    for (int r = 0; r < TURNS_TIMER_ROUNDS; r++) {
        turns_timer_arms(&tr);
        for (size_t i = 0; i < pairs; i++)
            evtimer_add(&extra[i], &delays[i]);
        turns_timer_cancels(&tr);
        for (size_t i = 0; i < pairs; i++)
            evtimer_del(&extra[i]);
        turns_timer_done(&tr);
    }
    turns_timer_figures(out, &tr, n, pairs, (double)heap1 - (double)heap0);
    for (size_t i = 0; i < n; i++)
        evtimer_del(&t[i]);
out:
    event_base_free(base);
    free(t);
    free(extra);
    free(delays);
    return rc;
}

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "libevent: event_active, drained in one pass",
     chain_drained, "not while work is queued", 0, TURNS_CLASS_NO_POLL},
    {TURNS_CHAIN_TASK, "libevent: event_active, max_dispatch_interval 500 µs",
     chain_quantum, "every 0.5 ms (max_dispatch)", 0, TURNS_CLASS_QUANTUM},
    {TURNS_CHAIN_TASK, "libevent: event_active, I/O checked per callback",
     chain_checked, "every hop (max_callbacks 1)", 0, TURNS_CLASS_EVERY_HOP},
    {TURNS_CHAIN_TIMER0, "libevent: evtimer_add {0,0}", chain_timer0,
     "every hop", 0, TURNS_CLASS_EVERY_HOP},
    {TURNS_LATENESS, "libevent (default clock)", lateness_default, NULL,
     TURNS_SLACK_BOTH, 0},
    {TURNS_LATENESS, "libevent (PRECISE_TIMER)", lateness_precise, NULL,
     TURNS_SLACK_BOTH, 0},
    {TURNS_IDLE, "libevent", idle, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "libevent: event_active (evthread)", roundtrip, NULL, 0,
     0},
    {TURNS_TIMERS, "libevent", timers, NULL, 0, 0},
};

const turns_peer turns_event = {
    "libevent",
    version,
    NULL,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
    "the distribution's shared libraries (libevent_core.so, "
    "libevent_pthreads.so)",
};
