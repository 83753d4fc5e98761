/* libuv's rows of the `loopback` scenario (compiled when pkg-config finds
 * libuv): the shared workload over lab/loopback.c's minimal loopback, each
 * turn a libuv handle. Two kinds of turn, as a libuv user would write them:
 *   uv_timer_start(0)  a zero-delay timer
 *   uv_idle            the next-iteration callback (the loop polls with a
 *                      zero timeout while one is active), stopped in its
 *                      callback so it runs once per claim */
#include "../lab.h"
#include "../loopback.h"

#include <errno.h>
#include <string.h>
#include <uv.h>

typedef struct uv_turn {
    lb_turn turn;
    uv_timer_t timer;
    uv_idle_t idle;
} uv_turn;

static const char *version(void) {
    return uv_version_string();
}

static void timer_fired(uv_timer_t *h) {
    lb_turn_run(&((uv_turn *)h->data)->turn);
}

static void idle_fired(uv_idle_t *h) {
    uv_idle_stop(h);
    lb_turn_run(&((uv_turn *)h->data)->turn);
}

static void arm_timer(lb_turn *t) {
    uv_turn *u = (uv_turn *)t;
    uv_timer_start(&u->timer, timer_fired, 0, 0);
}

static void arm_idle(lb_turn *t) {
    uv_turn *u = (uv_turn *)t;
    uv_idle_start(&u->idle, idle_fired);
}

static void run(void *loop) {
    uv_run(loop, UV_RUN_DEFAULT);
}

static void stop(void *loop) {
    uv_stop(loop);
}

static void never_ready(uv_poll_t *h, int status, int events) {
    (void)h;
    (void)status;
    (void)events;
}

static void close_walk(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static int measure(const lb_params *p, lb_result *out, bool timer) {
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) return rc;
    int fds[2];
    if ((rc = lb_idle_open(fds)) < 0) {
        uv_loop_close(&loop);
        return rc;
    }
    uv_poll_t idle_fd; /* one idle socket: the I/O check is real */
    uv_poll_init(&loop, &idle_fd, fds[0]);
    uv_poll_start(&idle_fd, UV_READABLE, never_ready);
    uv_turn t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 3; i++) {
        uv_timer_init(&loop, &t[i].timer);
        uv_idle_init(&loop, &t[i].idle);
        t[i].timer.data = t[i].idle.data = &t[i];
        t[i].turn.arm = timer ? arm_timer : arm_idle;
        t[i].turn.is_timer = timer;
    }
    lb_loop l = {run, stop, &loop};
    rc = lb_link_measure(p, &t[0].turn, &t[1].turn, &t[2].turn, &l, out);
    uv_walk(&loop, close_walk, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    int crc = uv_loop_close(&loop);
    lb_idle_close(fds);
    return rc < 0 ? rc : crc;
}

static int timer0(const lb_params *p, lb_result *out) {
    return measure(p, out, true);
}

static int idle(const lb_params *p, lb_result *out) {
    return measure(p, out, false);
}

static const lb_entry entries[] = {
    {"timer0", "libuv: uv_timer_start(0)", timer0, false, "none between turns",
     LB_CLASS_NO_POLL},
    {"idle", "libuv: uv_idle", idle, false, "every turn", LB_CLASS_EVERY_TURN},
};

const lb_peer lb_uv = {
    "libuv", version, NULL, entries, (int)(sizeof entries / sizeof entries[0]),
};
