/* lull's rows of the `loopback` scenario: the workload of lab/loopback.h on
 * lull's real loopback pair (src/loopback.c), through include/lull.h only.
 * Frames are handed over from a pool (lull_send with a release callback),
 * as the peers' minimal loopback does, so no row allocates per frame.
 *
 * Modes differ only in what carries a turn, for the deliveries (the pair's
 * LULL_DELIVER_* option) and for the server's refresh alike:
 *   task    lull_post
 *   timer0  lull_timer_start(0): by C3 the same queue, order and cost
 *   timer1  lull_timer_start(1 ms): a real wait per turn, the contrast */
#include "lab.h"
#include "loopback.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lull.h>

enum { MODE_TASK, MODE_TIMER0, MODE_TIMER1 };

#define POOL 256

typedef struct lrun lrun;

typedef struct lframe {
    lull_frame frame;
    struct lframe *next_free;
    lrun *run;
    unsigned char bytes[16];
} lframe;

typedef struct lend {
    lull_loopback lb;
    lrun *run;
    int side; /* 0 client, 1 server */
} lend;

struct lrun {
    lb_work w;
    lull_loop *loop;
    lend end[2];
    lull_task refresh_task;
    lull_timer refresh_timer;
    int mode;
    uint64_t refresh_arms;
    lframe *free;
    int error;
    lframe pool[POOL];
};

static void release(lull_frame *frame) {
    lframe *f = LULL_CONTAINER_OF(frame, lframe, frame);
    f->next_free = f->run->free;
    f->run->free = f;
}

static void run_send(lb_work *w, int side, const void *bytes, size_t len) {
    lrun *r = LULL_CONTAINER_OF(w, lrun, w);
    lframe *f = r->free;
    if (!f || len > sizeof f->bytes) {
        r->error = -ENOSPC;
        return;
    }
    r->free = f->next_free;
    memcpy(f->bytes, bytes, len);
    f->frame.len = len;
    int rc = lull_send(&r->end[side].lb.ep, &f->frame);
    if (rc < 0) r->error = rc;
}

static void run_refresh(lb_work *w) {
    lrun *r = LULL_CONTAINER_OF(w, lrun, w);
    if (r->mode == MODE_TASK) {
        if (lull_task_pending(&r->refresh_task)) return;
        lull_post(r->loop, &r->refresh_task);
    } else {
        if (lull_timer_active(&r->refresh_timer)) return;
        lull_timer_start(&r->refresh_timer,
                         r->mode == MODE_TIMER1 ? 1000000 : 0, 0);
    }
    r->refresh_arms++;
}

static const lb_link_ops ops = {run_send, run_refresh};

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    lend *e = LULL_CONTAINER_OF(ep, lend, lb.ep);
    lb_work_frame(&e->run->w, e->side, bytes, len);
}

static void refresh_task(lull_task *t) {
    lb_work_refresh(&LULL_CONTAINER_OF(t, lrun, refresh_task)->w);
}

static void refresh_timer(lull_timer *t) {
    lb_work_refresh(&LULL_CONTAINER_OF(t, lrun, refresh_timer)->w);
}

static uint64_t turns_taken(const lrun *r) {
    return r->end[0].lb.turns + r->end[1].lb.turns + r->refresh_arms;
}

static int run_once(lrun *r, int wl, const lb_params *p) {
    lb_work_init(&r->w, &ops, wl, p);
    lb_work_start(&r->w);
    int rc = lull_run(r->loop, LULL_RUN_DEFAULT);
    if (rc < 0) return rc;
    if (r->error) return r->error;
    if (!r->w.done || r->w.frames != lb_work_expected_frames(wl, p))
        return -EPROTO;
    return 0;
}

static int measure(const lb_params *p, lb_result *out, int mode) {
    lrun *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->mode = mode;
    int rc = lull_loop_new(&r->loop, NULL);
    if (rc < 0) {
        free(r);
        return rc;
    }
    for (int i = 0; i < POOL; i++) {
        lframe *f = &r->pool[i];
        f->frame = (lull_frame){.bytes = f->bytes, .release = release};
        f->run = r;
        f->next_free = r->free;
        r->free = f;
    }
    lull_loopback_options o = {
        .deliver = mode == MODE_TASK ? LULL_DELIVER_TASK : LULL_DELIVER_TIMER,
        .delay_ns = mode == MODE_TIMER1 ? 1000000 : 0};
    rc = lull_loopback_pair(r->loop, &r->end[0].lb, &r->end[1].lb, &o);
    for (int i = 0; i < 2 && rc == 0; i++) {
        r->end[i].run = r;
        r->end[i].side = i;
        lull_endpoint_callbacks(&r->end[i].lb.ep, on_frame, NULL, NULL);
    }
    lull_task_init(&r->refresh_task, refresh_task);
    lull_timer_init(r->loop, &r->refresh_timer, refresh_timer);
    for (int wl = 0; wl < LB_WORKLOADS && rc == 0; wl++) {
        /* Repeated rows first run once unmeasured, as the peers do. */
        if (p->reps > 1) rc = run_once(r, wl, p);
        uint64_t turns0 = turns_taken(r);
        double dur[LB_MAX_REPS];
        int n = 0;
        for (int rep = 0; rep < p->reps && n < LB_MAX_REPS && rc == 0; rep++) {
            uint64_t t0 = lab_now_ns();
            rc = run_once(r, wl, p);
            dur[n++] = (double)(lab_now_ns() - t0);
        }
        double turns = (double)(turns_taken(r) - turns0) / p->reps;
        out->ms[wl] = lab_percentile(dur, (size_t)n, 0.5) / 1e6;
        out->frames[wl] = (double)r->w.frames;
        out->turns[wl] = turns;
        out->timers[wl] = mode == MODE_TASK ? 0 : turns;
    }
    lull_endpoint_close(&r->end[0].lb.ep, 0);
    lull_endpoint_close(&r->end[1].lb.ep, 0);
    int frc = lull_loop_free(r->loop);
    free(r);
    return rc < 0 ? rc : frc;
}

static int task(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TASK);
}

static int timer0(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TIMER0);
}

static int timer1(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TIMER1);
}

/* The unit the loopback's round trip is compared with, and the round trip
 * alone, measured the same way: the `turns` chain's method (one idle
 * socket watched, so the loop's I/O check is real), each on a fresh loop,
 * in the same round. */
typedef struct idle_fd {
    lull_io io;
    int fds[2];
} idle_fd;

static void never_readable(lull_io *io, int events) {
    (void)io;
    (void)events;
}

static int idle_fd_open(lull_loop *loop, idle_fd *f) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   f->fds) != 0)
        return -errno;
    int rc = lull_io_init(loop, &f->io, f->fds[0], never_readable);
    if (rc == 0) rc = lull_io_start(&f->io, LULL_READABLE);
    if (rc < 0) {
        close(f->fds[0]);
        close(f->fds[1]);
    }
    return rc;
}

static void idle_fd_close(idle_fd *f) {
    lull_io_stop(&f->io);
    close(f->fds[0]);
    close(f->fds[1]);
}

typedef struct chain {
    lull_task task;
    lull_loop *loop;
    idle_fd idle;
    uint64_t left;
} chain;

static void hop(lull_task *t) {
    chain *c = LULL_CONTAINER_OF(t, chain, task);
    if (--c->left > 0) {
        lull_post(c->loop, t);
    } else {
        lull_io_stop(&c->idle.io); /* nothing left: lull_run returns */
    }
}

int lb_lull_task_hop(uint64_t hops, double *ns_per_hop) {
    chain c = {.left = hops};
    int rc = lull_loop_new(&c.loop, NULL);
    if (rc < 0) return rc;
    rc = idle_fd_open(c.loop, &c.idle);
    if (rc == 0) {
        lull_task_init(&c.task, hop);
        lull_run(c.loop, LULL_RUN_NOWAIT); /* the registration */
        uint64_t t0 = lab_now_ns();
        lull_post(c.loop, &c.task);
        rc = lull_run(c.loop, LULL_RUN_DEFAULT);
        uint64_t t1 = lab_now_ns();
        *ns_per_hop = (double)(t1 - t0) / (double)hops;
        idle_fd_close(&c.idle);
    }
    int frc = lull_loop_free(c.loop);
    return rc < 0 ? rc : frc;
}

/* The transport alone: one frame each way per round trip, handed over and
 * re-sent from the frame callback, nothing else (two turns, two frames). */
typedef struct bounce {
    lull_loopback end[2];
    lull_frame frame[2]; /* each end's one frame */
    uint64_t payload[2];
    idle_fd idle;
    uint64_t left; /* frames still to send */
} bounce;

static bounce *the_bounce; /* one measurement at a time */

static void bounce_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)bytes;
    (void)len;
    bounce *b = the_bounce;
    int i = ep == &b->end[0].ep ? 0 : 1;
    if (b->left == 0) {
        lull_io_stop(&b->idle.io);
        return;
    }
    b->left--;
    lull_send(ep, &b->frame[i]);
}

int lb_lull_round_trip(uint64_t trips, double *ns_per_trip) {
    bounce b;
    memset(&b, 0, sizeof b);
    lull_loop *loop;
    int rc = lull_loop_new(&loop, NULL);
    if (rc < 0) return rc;
    rc = idle_fd_open(loop, &b.idle);
    if (rc < 0) {
        lull_loop_free(loop);
        return rc;
    }
    rc = lull_loopback_pair(loop, &b.end[0], &b.end[1], NULL);
    for (int i = 0; i < 2 && rc == 0; i++) {
        b.frame[i] =
            (lull_frame){.bytes = &b.payload[i], .len = sizeof b.payload[i]};
        lull_endpoint_callbacks(&b.end[i].ep, bounce_frame, NULL, NULL);
    }
    the_bounce = &b;
    b.left = 2 * trips - 1;
    lull_run(loop, LULL_RUN_NOWAIT); /* the registration */
    uint64_t t0 = lab_now_ns();
    if (rc == 0) rc = lull_send(&b.end[0].ep, &b.frame[0]);
    if (rc == 0) rc = lull_run(loop, LULL_RUN_DEFAULT);
    uint64_t t1 = lab_now_ns();
    *ns_per_trip = (double)(t1 - t0) / (double)trips;
    if (rc == 0 &&
        (b.left != 0 || b.end[0].delivered + b.end[1].delivered != 2 * trips))
        rc = -EPROTO;
    lull_endpoint_close(&b.end[0].ep, 0);
    lull_endpoint_close(&b.end[1].ep, 0);
    idle_fd_close(&b.idle);
    the_bounce = NULL;
    int frc = lull_loop_free(loop);
    return rc < 0 ? rc : frc;
}

static const lb_entry entries[] = {
    {"task", "lull: posted task", task, false},
    {"timer0", "lull: zero-delay timer", timer0, false},
    {"timer1ms", "lull: 1 ms timer", timer1, true},
};

const lb_peer lb_lull = {
    "lull", NULL, NULL, entries, (int)(sizeof entries / sizeof entries[0]),
};
