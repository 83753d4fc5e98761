/* The `loopback` scenario's floor (declared in lab/loopback.h): the shared
 * workload over the peers' minimal loopback (lab/loopback_work.c), its
 * turns taken by no loop library at all. Each iteration checks I/O as the
 * every-turn rows do, epoll_wait(.., 0) on a set watching one idle socket,
 * then calls the turns claimed before it, one indirect call each: no
 * timer, no clock, no bookkeeping. What any loop that checks I/O on every
 * turn must at least pay here, so the target set against Node's every-turn
 * row can say whether a loop could meet it on this machine. One thread. */
#include "lab.h"
#include "loopback.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* The three turns of the link (two deliveries and the refresh), each
 * claimed at most once at a time: the queue never holds more. */
#define QUEUE 4

typedef struct floor_loop {
    int ep;
    bool stopped;
    lb_turn *queue[QUEUE]; /* claimed turns, oldest first */
    unsigned head, count;
} floor_loop;

typedef struct floor_turn {
    lb_turn turn; /* first: the link hands back its address */
    floor_loop *loop;
} floor_turn;

static void arm(lb_turn *t) {
    floor_loop *l = ((floor_turn *)t)->loop;
    l->queue[(l->head + l->count) % QUEUE] = t;
    l->count++;
}

/* Until stopped, or until no turn is claimed (the link then finds the
 * workload unfinished and reports it). */
static void run(void *loop) {
    floor_loop *l = loop;
    l->stopped = false;
    while (!l->stopped && l->count) {
        struct epoll_event ev;
        (void)epoll_wait(l->ep, &ev, 1, 0);
        for (unsigned n = l->count; n && !l->stopped; n--) {
            lb_turn *t = l->queue[l->head];
            l->head = (l->head + 1) % QUEUE;
            l->count--;
            lb_turn_run(t);
        }
    }
}

static void stop(void *loop) {
    ((floor_loop *)loop)->stopped = true;
}

static int epoll0(const lb_params *p, lb_result *out) {
    int fds[2];
    int rc = lb_idle_open(fds);
    if (rc < 0) return rc;
    floor_loop l;
    memset(&l, 0, sizeof l);
    l.ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (l.ep < 0 || epoll_ctl(l.ep, EPOLL_CTL_ADD, fds[0], &ev) < 0) {
        rc = -errno;
    } else {
        floor_turn t[3];
        memset(t, 0, sizeof t);
        for (int i = 0; i < 3; i++) {
            t[i].turn.arm = arm;
            t[i].loop = &l;
        }
        lb_loop loop = {run, stop, &l};
        rc = lb_link_measure(p, &t[0].turn, &t[1].turn, &t[2].turn, &loop, out);
    }
    if (l.ep >= 0) close(l.ep);
    lb_idle_close(fds);
    return rc;
}

static const lb_entry entries[] = {
    {"epoll0", "floor: epoll_wait(0) + a call a turn", epoll0, false,
     "every turn", LB_CLASS_EVERY_TURN},
};

const lb_peer lb_floor = {
    "floor", NULL, NULL, entries, (int)(sizeof entries / sizeof entries[0]),
};
