/* libevent's rows of the `loopback` scenario (compiled when pkg-config finds
 * libevent_core): the shared workload over lab/loopback.c's minimal
 * loopback, each turn an event with no fd:
 *   evtimer_add(0)  a zero-delay timer
 *   event_active    the next-iteration callback, on a base that checks I/O
 *                   at least every 500 µs (max_dispatch_interval): the poll
 *                   policy lull's shared-loop quantum keeps, where
 *                   libevent's default would run activations without end;
 *                   so this is the row lull's default compares with
 * Each base also watches one idle socket, as every row's loop does. */
#include "../lab.h"
#include "../loopback.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <string.h>

typedef struct ev_turn {
    lb_turn turn;
    struct event ev;
} ev_turn;

static const char *version(void) {
    return event_get_version();
}

static void fired(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    lb_turn_run(&((ev_turn *)arg)->turn);
}

static void arm_timer(lb_turn *t) {
    static const struct timeval zero = {0, 0};
    evtimer_add(&((ev_turn *)t)->ev, &zero);
}

static void arm_active(lb_turn *t) {
    event_active(&((ev_turn *)t)->ev, EV_TIMEOUT, 0);
}

static void run(void *base) {
    event_base_loop(base, 0);
}

static void stop(void *base) {
    event_base_loopbreak(base);
}

static void never_ready(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
}

static int measure(const lb_params *p, lb_result *out, bool timer) {
    struct event_config *cfg = event_config_new();
    if (!cfg) return -ENOMEM;
    /* Single-threaded: no locks (see lab/peers/event.c). */
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    static const struct timeval quantum = {0, 500};
    if (!timer) event_config_set_max_dispatch_interval(cfg, &quantum, -1, 0);
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (!base) return -ENOMEM;
    int fds[2];
    int rc = lb_idle_open(fds);
    if (rc < 0) {
        event_base_free(base);
        return rc;
    }
    struct event idle_fd; /* one idle socket: the I/O check is real */
    event_assign(&idle_fd, base, fds[0], EV_READ | EV_PERSIST, never_ready,
                 NULL);
    event_add(&idle_fd, NULL);
    ev_turn t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 3; i++) {
        event_assign(&t[i].ev, base, -1, 0, fired, &t[i]);
        t[i].turn.arm = timer ? arm_timer : arm_active;
        t[i].turn.is_timer = timer;
    }
    lb_loop l = {run, stop, base};
    rc = lb_link_measure(p, &t[0].turn, &t[1].turn, &t[2].turn, &l, out);
    for (int i = 0; i < 3; i++)
        event_del(&t[i].ev);
    event_del(&idle_fd);
    event_base_free(base);
    lb_idle_close(fds);
    return rc;
}

static int timer0(const lb_params *p, lb_result *out) {
    return measure(p, out, true);
}

static int active(const lb_params *p, lb_result *out) {
    return measure(p, out, false);
}

static const lb_entry entries[] = {
    {"timer0", "libevent: evtimer_add(0)", timer0, false, "every turn",
     LB_CLASS_EVERY_TURN},
    /* The like-for-like row of lull's default: the same 0.5 ms policy. */
    {"active", "libevent: event_active, max_dispatch 500 µs", active, false,
     "every 0.5 ms (max_dispatch)", LB_CLASS_QUANTUM},
};

const lb_peer lb_event = {
    "libevent",
    version,
    NULL,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
};
