/* lull's rows of the `loopback` scenario: the workload of lab/loopback.h on
 * lull's real loopback pair (src/loopback.c), through include/lull.h only.
 * Frames are handed over from a pool (lull_endpoint_send with a release
 * callback), as the peers' minimal loopback does, so no row allocates per
 * frame.
 *
 * Modes differ only in what carries a turn, for the deliveries (the pair's
 * LULL_DELIVER_* option) and for the server's refresh alike:
 *   task    lull_task_post
 *   timer0  lull_timer_start(0): by C3 the same queue, order and cost
 *   timer1  lull_timer_start(1 ms): a real wait per turn, the contrast
 *
 * lab_loopback_soak (lab/soak.h, for `lull-lab soak`) runs the workload at
 * random sizes with every frame wrapped in a sequence number and checksum
 * and checked on receipt, through callbacks of its own: the timed rows
 * keep their 16-byte frames and unchecked path. */
#include "lab.h"
#include "loopback.h"
#include "soak.h"
#include "turns.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lull.h>

enum { MODE_TASK, MODE_TIMER0, MODE_TIMER1 };

#define POOL 256

/* One idle socket a row's loop watches, so its I/O check is real (every
 * row of the scenario has one). */
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

typedef struct lrun lrun;
typedef struct vstate vstate;

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
    idle_fd idle; /* watched, unreferenced: never keeps a run going */
    lend end[2];
    lull_task refresh_task;
    lull_timer refresh_timer;
    int mode;
    uint64_t refresh_arms;
    lframe *free;
    int error;
    vstate *v; /* verify mode (the soak), else NULL */
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
    int rc = lull_endpoint_send(&r->end[side].lb.ep, &f->frame);
    if (rc < 0) r->error = rc;
}

static void run_refresh(lb_work *w) {
    lrun *r = LULL_CONTAINER_OF(w, lrun, w);
    if (r->mode == MODE_TASK) {
        if (lull_task_pending(&r->refresh_task)) return;
        lull_task_post(r->loop, &r->refresh_task);
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
    int rc = lull_loop_run(r->loop, LULL_RUN_DEFAULT);
    if (rc < 0) return rc;
    if (r->error) return r->error;
    if (!r->w.done || r->w.frames != lb_work_expected_frames(wl, p))
        return -EPROTO;
    return 0;
}

/* A loop, its loopback pair in `mode`, the frame pool and the refresh
 * step; each end's frames go to `frame_cb`. On success *out is the run
 * (lrun_close frees it). */
static int lrun_open(lrun **out, int mode, uint64_t quantum_ns,
                     lull_frame_fn frame_cb) {
    lrun *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->mode = mode;
    lull_loop_options lo = {.quantum_ns = quantum_ns};
    int rc = lull_loop_new(&r->loop, &lo);
    if (rc < 0) {
        free(r);
        return rc;
    }
    if ((rc = idle_fd_open(r->loop, &r->idle)) < 0) {
        lull_loop_free(r->loop);
        free(r);
        return rc;
    }
    lull_io_unref(&r->idle.io);
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
        lull_endpoint_set_callbacks(&r->end[i].lb.ep, frame_cb, NULL, NULL);
    }
    lull_task_init(&r->refresh_task, refresh_task);
    lull_timer_init(r->loop, &r->refresh_timer, refresh_timer);
    if (rc < 0) {
        idle_fd_close(&r->idle);
        lull_loop_free(r->loop);
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* Closes the pair and frees the loop and the run: the loop's status (a
 * handle left behind) or 0. */
static int lrun_close(lrun *r) {
    lull_endpoint_close(&r->end[0].lb.ep, 0);
    lull_endpoint_close(&r->end[1].lb.ep, 0);
    idle_fd_close(&r->idle);
    int rc = lull_loop_free(r->loop);
    free(r);
    return rc;
}

/* quantum_ns 0 is lull's default (0.5 ms: I/O checked once per quantum of
 * busy work); 1 ends a slice after every callback, so the loop checks I/O
 * on every turn, as the peers' next-iteration callbacks do. */
static int measure(const lb_params *p, lb_result *out, int mode,
                   uint64_t quantum_ns) {
    lrun *r;
    int rc = lrun_open(&r, mode, quantum_ns, on_frame);
    if (rc < 0) return rc;
    for (int wl = 0; wl < LB_WORKLOADS && rc == 0; wl++) {
        /* Repeated rows first run once unmeasured, as the peers do. */
        if (p->reps > 1) rc = run_once(r, wl, p);
        uint64_t turns0 = turns_taken(r);
        uint64_t polls0 = turns_polls();
        double dur[LB_MAX_REPS];
        int n = 0;
        for (int rep = 0; rep < p->reps && n < LB_MAX_REPS && rc == 0; rep++) {
            uint64_t t0 = lab_now_ns();
            rc = run_once(r, wl, p);
            dur[n++] = (double)(lab_now_ns() - t0);
        }
        double turns = (double)(turns_taken(r) - turns0) / p->reps;
        out->polls[wl] = (double)(turns_polls() - polls0) / p->reps;
        out->ms[wl] = lab_percentile(dur, (size_t)n, 0.5) / 1e6;
        out->frames[wl] = (double)r->w.frames;
        out->turns[wl] = turns;
        out->timers[wl] = mode == MODE_TASK ? 0 : turns;
    }
    int frc = lrun_close(r);
    return rc < 0 ? rc : frc;
}

static int task(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TASK, 0);
}

static int timer0(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TIMER0, 0);
}

static int task_every_turn(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TASK, 1);
}

static int timer0_every_turn(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TIMER0, 1);
}

static int timer1(const lb_params *p, lb_result *out) {
    return measure(p, out, MODE_TIMER1, 0);
}

/* The unit the loopback's round trip is compared with, and the round trip
 * alone, measured the same way: the `turns` chain's method (one idle
 * socket watched, so the loop's I/O check is real), each on a fresh loop,
 * in the same round. */
typedef struct chain {
    lull_task task;
    lull_loop *loop;
    idle_fd idle;
    uint64_t left;
} chain;

static void hop(lull_task *t) {
    chain *c = LULL_CONTAINER_OF(t, chain, task);
    if (--c->left > 0) {
        lull_task_post(c->loop, t);
    } else {
        lull_io_stop(&c->idle.io); /* nothing left: lull_loop_run returns */
    }
}

int lb_lull_task_hop(uint64_t hops, double *ns_per_hop) {
    chain c = {.left = hops};
    int rc = lull_loop_new(&c.loop, NULL);
    if (rc < 0) return rc;
    rc = idle_fd_open(c.loop, &c.idle);
    if (rc == 0) {
        lull_task_init(&c.task, hop);
        lull_loop_run(c.loop, LULL_RUN_NOWAIT); /* the registration */
        uint64_t t0 = lab_now_ns();
        lull_task_post(c.loop, &c.task);
        rc = lull_loop_run(c.loop, LULL_RUN_DEFAULT);
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
    lull_endpoint_send(ep, &b->frame[i]);
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
        lull_endpoint_set_callbacks(&b.end[i].ep, bounce_frame, NULL, NULL);
    }
    the_bounce = &b;
    b.left = 2 * trips - 1;
    lull_loop_run(loop, LULL_RUN_NOWAIT); /* the registration */
    uint64_t t0 = lab_now_ns();
    if (rc == 0) rc = lull_endpoint_send(&b.end[0].ep, &b.frame[0]);
    if (rc == 0) rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
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
    {"task", "lull: posted task", task, false, "every 0.5 ms (quantum)",
     LB_CLASS_QUANTUM},
    {"timer0", "lull: zero-delay timer", timer0, false,
     "every 0.5 ms (quantum)", LB_CLASS_QUANTUM},
    {"task_q1", "lull: posted task, quantum_ns = 1", task_every_turn, false,
     "every turn (quantum_ns 1)", LB_CLASS_EVERY_TURN},
    {"timer0_q1", "lull: zero-delay timer, quantum_ns = 1", timer0_every_turn,
     false, "every turn (quantum_ns 1)", LB_CLASS_EVERY_TURN},
    {"timer1ms", "lull: 1 ms timer", timer1, true, "a real wait each turn",
     LB_CLASS_QUANTUM},
};

const lb_peer lb_lull = {
    "lull", NULL, NULL, entries, (int)(sizeof entries / sizeof entries[0]),
};

/* ------------------------------------------------- verify mode (soak) */

/* The soak runs the same workload with each message wrapped: a sequence
 * number per direction and a checksum ahead of it, random padding after
 * it (so frame lengths vary), from a pool of larger frames of its own.
 * The benchmark rows never see these callbacks. */
#define VHEAD    16 /* seq (8) + checksum (8) */
#define VMSG     16 /* the workload's message */
#define VPAD_MAX 96

typedef struct vframe {
    lull_frame frame;
    struct vframe *next_free;
    vstate *v;
    unsigned char bytes[VHEAD + VMSG + VPAD_MAX];
} vframe;

struct vstate {
    vframe *free;
    uint64_t rng;
    int pad_max;          /* pads drawn from 0..pad_max bytes */
    uint64_t sent[2];     /* by sending side: the next sequence number */
    uint64_t received[2]; /* by receiving side: the one it expects next */
    uint64_t verified;
    int faults;
    lab_soak_result *out;
    vframe pool[POOL];
};

/* A checksum of a frame's body, its direction and its sequence number. */
static uint64_t vsum(int from, uint64_t seq, const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)from << 63) ^ seq ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void vrelease(lull_frame *frame) {
    vframe *f = LULL_CONTAINER_OF(frame, vframe, frame);
    f->next_free = f->v->free;
    f->v->free = f;
}

static void vfault(vstate *v, int side, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void vfault(vstate *v, int side, const char *fmt, ...) {
    if (v->faults++) return;
    char what[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(v->out->why, sizeof v->out->why,
             "loopback: frame to the %s: %s (%" PRIu64 " verified before)",
             side ? "server" : "client", what, v->verified);
}

static void verify_send(lb_work *w, int side, const void *bytes, size_t len) {
    lrun *r = LULL_CONTAINER_OF(w, lrun, w);
    vstate *v = r->v;
    vframe *f = v->free;
    if (!f || len != VMSG) {
        r->error = -ENOSPC;
        return;
    }
    v->free = f->next_free;
    size_t pad = (size_t)(lab_rand(&v->rng) % (uint64_t)(v->pad_max + 1));
    uint64_t seq = v->sent[side]++;
    memcpy(f->bytes + VHEAD, bytes, VMSG);
    for (size_t i = 0; i < pad; i++)
        f->bytes[VHEAD + VMSG + i] = (unsigned char)lab_rand(&v->rng);
    uint64_t sum = vsum(side, seq, f->bytes + VHEAD, VMSG + pad);
    memcpy(f->bytes, &seq, 8);
    memcpy(f->bytes + 8, &sum, 8);
    f->frame.len = VHEAD + VMSG + pad;
    int rc = lull_endpoint_send(&r->end[side].lb.ep, &f->frame);
    if (rc < 0) r->error = rc;
}

static const lb_link_ops verify_ops = {verify_send, run_refresh};

/* Each frame: the next sequence number of its direction (nothing lost,
 * repeated or reordered) and its checksum (nothing corrupt), then the
 * message to the workload. */
static void on_frame_verified(lull_endpoint *ep, const void *bytes,
                              size_t len) {
    lend *e = LULL_CONTAINER_OF(ep, lend, lb.ep);
    vstate *v = e->run->v;
    const unsigned char *b = bytes;
    if (len < VHEAD + VMSG || len > VHEAD + VMSG + VPAD_MAX) {
        vfault(v, e->side, "length %zu (sequence number %" PRIu64 " next)", len,
               v->received[e->side]);
        return;
    }
    uint64_t seq, sum;
    memcpy(&seq, b, 8);
    memcpy(&sum, b + 8, 8);
    if (seq != v->received[e->side])
        vfault(v, e->side, "sequence number %" PRIu64 ", %" PRIu64 " expected",
               seq, v->received[e->side]);
    else if (sum != vsum(1 - e->side, seq, b + VHEAD, len - VHEAD))
        vfault(v, e->side, "checksum wrong at sequence number %" PRIu64, seq);
    else
        v->verified++;
    v->received[e->side] = seq + 1;
    lb_work_frame(&e->run->w, e->side, b + VHEAD, VMSG);
}

/* One soak run (lab/soak.h): a mode, the workloads' sizes, repetitions
 * on the one pair and the padding drawn from *seed. */
int lab_loopback_soak(uint64_t *seed, lab_soak_result *out) {
    static const char *const names[] = {"task", "timer0", "timer1ms"};
    memset(out, 0, sizeof *out);
    int mode = (int)(lab_rand(seed) % 3);
    bool slow = mode == MODE_TIMER1; /* 1 ms per turn: small sizes */
    lb_params p = {0};
    p.commits = 1 + (int)(lab_rand(seed) % (slow ? 40 : 2000));
    p.effects = 1 + (int)(lab_rand(seed) % (slow ? 8 : LB_MAX_EFFECTS));
    p.graph_rounds = 1 + (int)(lab_rand(seed) % (slow ? 2 : 40));
    int reps = 1 + (int)(lab_rand(seed) % (slow ? 1 : 8));
    vstate *v = calloc(1, sizeof *v);
    if (!v) return -ENOMEM;
    v->out = out;
    v->rng = lab_rand(seed) | 1;
    v->pad_max = (int)(lab_rand(seed) % (VPAD_MAX + 1));
    snprintf(out->sizes, sizeof out->sizes,
             "%s, %d commits, graph %d effects x %d rounds, %d reps, "
             "padding 0-%d B",
             names[mode], p.commits, p.effects, p.graph_rounds, reps,
             v->pad_max);
    for (int i = 0; i < POOL; i++) {
        vframe *f = &v->pool[i];
        f->frame = (lull_frame){.bytes = f->bytes, .release = vrelease};
        f->v = v;
        f->next_free = v->free;
        v->free = f;
    }
    lrun *r;
    int rc = lrun_open(&r, mode, 0, on_frame_verified);
    if (rc < 0) {
        free(v);
        return rc;
    }
    r->v = v;
    for (int rep = 0; rep < reps && rc == 0 && !v->faults; rep++)
        for (int wl = 0; wl < LB_WORKLOADS && rc == 0 && !v->faults; wl++) {
            lb_work_init(&r->w, &verify_ops, wl, &p);
            lb_work_start(&r->w);
            rc = lull_loop_run(r->loop, LULL_RUN_DEFAULT);
            if (rc == 0 && r->error) rc = r->error;
            uint64_t want = lb_work_expected_frames(wl, &p);
            if (rc == 0 && !v->faults && (!r->w.done || r->w.frames != want))
                snprintf(out->why, sizeof out->why,
                         "loopback: the %s workload ended %s after %" PRIu64
                         " of %" PRIu64 " frames",
                         wl == LB_COMMITS ? "commits" : "graph",
                         r->w.done ? "done" : "unfinished", r->w.frames, want);
        }
    for (int side = 0; rc == 0 && side < 2 && !out->why[0]; side++)
        if (v->sent[side] != v->received[1 - side])
            snprintf(out->why, sizeof out->why,
                     "loopback: %" PRIu64 " frames sent by the %s, %" PRIu64
                     " received",
                     v->sent[side], side ? "server" : "client",
                     v->received[1 - side]);
    out->verified = v->verified;
    if (rc == 0 && (v->faults || out->why[0])) rc = -EPROTO;
    int frc = lrun_close(r);
    free(v);
    return rc < 0 ? rc : frc;
}
