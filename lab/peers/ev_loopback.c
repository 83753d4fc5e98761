/* libev's rows of the `loopback` scenario (compiled when ev.h and libev are
 * found): the shared workload over lab/loopback.c's minimal loopback, each
 * turn a libev watcher:
 *   ev_timer 0.  a zero-delay timer
 *   ev_idle      the next-iteration callback (libev polls with a zero
 *                timeout while one is active), stopped in its callback */
#include "../lab.h"
#include "../loopback.h"

#include <errno.h>
#include <ev.h>
#include <stdio.h>
#include <string.h>

typedef struct ev_turn {
    lb_turn turn;
    ev_timer timer;
    ev_idle idle;
    struct ev_loop *loop;
} ev_turn;

static const char *version(void) {
    static char buf[16];
    snprintf(buf, sizeof buf, "%d.%d", ev_version_major(), ev_version_minor());
    return buf;
}

static void timer_fired(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop;
    (void)revents;
    lb_turn_run(&((ev_turn *)w->data)->turn);
}

static void idle_fired(struct ev_loop *loop, ev_idle *w, int revents) {
    (void)revents;
    ev_idle_stop(loop, w);
    lb_turn_run(&((ev_turn *)w->data)->turn);
}

static void arm_timer(lb_turn *t) {
    ev_turn *e = (ev_turn *)t;
    ev_timer_set(&e->timer, 0., 0.);
    ev_timer_start(e->loop, &e->timer);
}

static void arm_idle(lb_turn *t) {
    ev_turn *e = (ev_turn *)t;
    ev_idle_start(e->loop, &e->idle);
}

static void run(void *loop) {
    ev_run(loop, 0);
}

static void stop(void *loop) {
    ev_break(loop, EVBREAK_ALL);
}

static void never_ready(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
}

static int measure(const lb_params *p, lb_result *out, bool timer) {
    int fds[2];
    int rc = lb_idle_open(fds);
    if (rc < 0) return rc;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    if (!loop) {
        lb_idle_close(fds);
        return -ENOMEM;
    }
    ev_io idle_fd; /* one idle socket: the I/O check is real */
    ev_io_init(&idle_fd, never_ready, fds[0], EV_READ);
    ev_io_start(loop, &idle_fd);
    ev_turn t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 3; i++) {
        ev_timer_init(&t[i].timer, timer_fired, 0., 0.);
        ev_idle_init(&t[i].idle, idle_fired);
        t[i].timer.data = t[i].idle.data = &t[i];
        t[i].loop = loop;
        t[i].turn.arm = timer ? arm_timer : arm_idle;
        t[i].turn.is_timer = timer;
    }
    lb_loop l = {run, stop, loop};
    rc = lb_link_measure(p, &t[0].turn, &t[1].turn, &t[2].turn, &l, out);
    ev_io_stop(loop, &idle_fd);
    ev_loop_destroy(loop);
    lb_idle_close(fds);
    return rc;
}

static int timer0(const lb_params *p, lb_result *out) {
    return measure(p, out, true);
}

static int idle(const lb_params *p, lb_result *out) {
    return measure(p, out, false);
}

static const lb_entry entries[] = {
    {"timer0", "libev: ev_timer 0.", timer0, false, "every turn",
     LB_CLASS_EVERY_TURN},
    {"idle", "libev: ev_idle", idle, false, "every turn", LB_CLASS_EVERY_TURN},
};

const lb_peer lb_ev = {
    "libev", version, NULL, entries, (int)(sizeof entries / sizeof entries[0]),
};
