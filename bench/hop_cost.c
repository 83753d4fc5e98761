/* Runs N hops of a lull task chain or zero-delay timer chain and exits:
 * the program bench/callgrind_hops.sh counts instructions of at two N, so
 * the difference divided by the difference in N is the instructions one
 * hop costs (setup and teardown cancel out). Like lull-lab's chains, the
 * loop watches one idle socket, so its I/O check is real.
 *
 *   hop_cost task|timer0|task-every-hop|timer0-every-hop|loopback|
 *            loopback-timer0|floor N
 *
 * The -every-hop modes run the loop with quantum_ns = 1, so it checks I/O
 * after every hop, as the peers' next-iteration callbacks do; the others
 * run lull's default (one I/O check per 0.5 ms quantum). The loopback mode
 * runs N round trips of lull-lab's "round trip alone" instead: one frame
 * each way over a loopback pair, handed over and re-sent from the frame
 * callback (two delivery turns per round trip), so its figure compares
 * with two task hops; loopback-timer0 the same with both ends delivering
 * by zero-delay timer (LULL_DELIVER_TIMER). The floor mode runs no loop at all:
 * N times epoll_wait(.., 0) on the same one-socket epoll set and one indirect
 * call, what any loop that checks I/O every hop must at least do (lull-lab
 * turns' "floor: epoll_wait(0) + 1 indirect call" row). */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lull.h"

typedef struct chain {
    lull_task task;
    lull_timer timer;
    lull_io io;
    lull_loop *loop;
    unsigned long left;
} chain;

static void on_io(lull_io *io, int events) {
    (void)io;
    (void)events;
}

static void task_hop(lull_task *task) {
    chain *c = LULL_CONTAINER_OF(task, chain, task);
    if (--c->left > 0) {
        lull_task_post(c->loop, task);
    } else {
        lull_io_stop(&c->io);
    }
}

/* The loopback round trip: each end bounces its one frame back. */
typedef struct bounce {
    lull_loopback end[2];
    lull_frame frame[2];
    unsigned long payload[2];
    lull_io *io;
    unsigned long left; /* frames still to send */
} bounce;

static bounce *the_bounce;

static void bounce_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)bytes;
    (void)len;
    bounce *b = the_bounce;
    if (b->left == 0) {
        lull_io_stop(b->io);
        return;
    }
    b->left--;
    lull_endpoint_send(ep, &b->frame[ep == &b->end[0].ep ? 0 : 1]);
}

static void timer_hop(lull_timer *timer) {
    chain *c = LULL_CONTAINER_OF(timer, chain, timer);
    if (--c->left > 0) {
        lull_timer_start(timer, 0, 0);
    } else {
        lull_io_stop(&c->io);
    }
}

/* The floor's hop: what a loop's callback does at the least. */
typedef struct floor_hop {
    void (*fn)(struct floor_hop *h);
    unsigned long left;
} floor_hop;

__attribute__((noinline)) static void floor_step(floor_hop *h) {
    h->left--;
}

/* The callback is reached through a pointer the compiler cannot see
 * through (volatile), as a loop's is. */
static int run_floor(int fd, unsigned long hops) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        perror("epoll");
        return 1;
    }
    static struct epoll_event events[256]; /* lull's EVENTS_CAP */
    floor_hop h = {floor_step, hops};
    void (*volatile fn)(floor_hop *) = h.fn;
    while (h.left) {
        (void)epoll_wait(ep, events, 256, 0);
        fn(&h);
    }
    close(ep);
    return 0;
}

int main(int argc, char **argv) {
    static const char *const modes[] = {
        "task",     "timer0", "task-every-hop", "timer0-every-hop",
        "loopback", "floor",  "loopback-timer0"};
    int mode = -1;
    for (int i = 0; argc == 3 && i < 7; i++)
        if (strcmp(argv[1], modes[i]) == 0) mode = i;
    if (mode < 0) {
        fprintf(stderr, "usage: hop_cost "
                        "task|timer0|task-every-hop|timer0-every-hop|loopback|"
                        "loopback-timer0|floor N\n");
        return 2;
    }
    bool timer = mode == 1 || mode == 3;
    bool loopback = mode == 4 || mode == 6;
    lull_loop_options opts = {.quantum_ns = mode == 2 || mode == 3 ? 1 : 0};
    unsigned long hops;
    unsigned long long n;
    /* 10^12: an hour and more at a few ns a hop */
    if (!bench_count(argv[2], 1, 1000000000000ull, &n)) {
        fprintf(stderr, "hop_cost: N takes 1..1000000000000, not '%s'\n",
                argv[2]);
        return 2;
    }
    hops = (unsigned long)n;

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) {
        perror("socketpair");
        return 1;
    }
    if (mode == 5) return run_floor(sv[0], hops);
    chain c;
    memset(&c, 0, sizeof c);
    int rc = lull_loop_new(&c.loop, &opts);
    if (rc < 0) {
        fprintf(stderr, "lull_loop_new: %s\n", strerror(-rc));
        return 1;
    }
    lull_io_init(c.loop, &c.io, sv[0], on_io);
    lull_io_start(&c.io, LULL_READABLE);
    lull_task_init(&c.task, task_hop);
    lull_timer_init(c.loop, &c.timer, timer_hop);
    c.left = hops;
    static bounce b;
    if (loopback) {
        lull_loopback_options lo = {.deliver = mode == 6 ? LULL_DELIVER_TIMER
                                                         : LULL_DELIVER_TASK};
        rc = lull_loopback_pair(c.loop, &b.end[0], &b.end[1], &lo);
        if (rc < 0) {
            fprintf(stderr, "lull_loopback_pair: %s\n", strerror(-rc));
            return 1;
        }
        for (int i = 0; i < 2; i++) {
            b.frame[i] = (lull_frame){.bytes = &b.payload[i],
                                      .len = sizeof b.payload[i]};
            lull_endpoint_set_callbacks(&b.end[i].ep, bounce_frame, NULL, NULL);
        }
        b.io = &c.io;
        b.left = 2 * hops - 1;
        the_bounce = &b;
        c.left = 0;
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (loopback) {
        rc = lull_endpoint_send(&b.end[0].ep, &b.frame[0]);
        if (rc < 0) {
            fprintf(stderr, "lull_endpoint_send: %s\n", strerror(-rc));
            return 1;
        }
    } else if (timer) {
        lull_timer_start(&c.timer, 0, 0);
    } else {
        lull_task_post(c.loop, &c.task);
    }
    rc = lull_loop_run(c.loop, LULL_RUN_DEFAULT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 +
                (double)(t1.tv_nsec - t0.tv_nsec);

    lull_metrics m;
    lull_loop_metrics(c.loop, &m);
    fprintf(stderr, "lull %s: %lu hops, %.1f ns/hop, %.4f polls/hop\n", argv[1],
            hops, ns / (double)hops, (double)m.polls / (double)hops);
    if (loopback &&
        (b.left != 0 || b.end[0].delivered + b.end[1].delivered != 2 * hops))
        rc = -EPROTO;
    if (rc < 0 || c.left != 0) {
        fprintf(stderr, "lull_loop_run: %s (%lu hops left)\n", strerror(-rc),
                c.left);
        return 1;
    }
    if (loopback) {
        lull_endpoint_close(&b.end[0].ep, 0);
        lull_endpoint_close(&b.end[1].ep, 0);
    }
    rc = lull_loop_free(c.loop);
    close(sv[0]);
    close(sv[1]);
    return rc < 0 ? 1 : 0;
}
