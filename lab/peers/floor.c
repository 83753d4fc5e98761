/* The floors, measured in the same run as the loops: what the kernel gives
 * a bare thread, with no loop and no queue, so lull's targets can be ratios
 * to them rather than absolute numbers that differ between machines.
 *
 * Cross-thread round trip: two raw threads, pinned as the loops' threads
 * are, hand a turn back and forth.
 *  - futex: through one futex word, the cheapest block/wake there is.
 *  - eventfd+epoll: each thread blocks in epoll_wait on its own eventfd
 *    (edge-triggered, never read) and the other writes it: the kernel path
 *    every epoll loop's cross-thread wake-up takes, without the loop.
 *
 * 1 ms timer lateness: a thread sleeps until 1 ms after it started waiting,
 * 1 ms after 1 ms, at the timer slack the driver set on it (the same as
 * the loops' rows).
 *  - clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME): the kernel's own
 *    high-resolution timer, to the nanosecond;
 *  - epoll_pwait2 on an empty epoll set with the time left as its timeout:
 *    how an epoll loop sleeps for its next deadline.
 *
 * Idle: the idle window's sockets in one epoll set, one epoll_wait for
 * the window.
 *
 * A chain that checks I/O every hop: epoll_wait(.., 0) on a set watching
 * one idle socket (as every chain row's loop does) and one indirect call
 * per hop, and nothing else: no queue, no clock, no bookkeeping. What any
 * loop checking I/O every hop must at least pay. lull's every-hop policy
 * looks with epoll_wait (epoll_pwait2 only for timeouts a millisecond
 * cannot say, src/backend_epoll.c), so there is no epoll_pwait2 twin. */
#include "../lab.h"
#include "../turns.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { TURN_B = 1, TURN_A = 2, TURN_END = 3 };

typedef struct ping {
    int word; /* whose turn: TURN_B, TURN_A or TURN_END */
    turns_trip_clock clk;
} ping;

static void futex_wait(int *word, int expected) {
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(int *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void pass_to(ping *x, int turn) {
    __atomic_store_n(&x->word, turn, __ATOMIC_RELEASE);
    futex_wake(&x->word);
}

/* Waits until the word leaves `from`; returns the new value. */
static int wait_change(ping *x, int from) {
    int v;
    while ((v = __atomic_load_n(&x->word, __ATOMIC_ACQUIRE)) == from)
        futex_wait(&x->word, from);
    return v;
}

static void *side_a(void *arg) {
    ping *x = arg;
    turns_pair_ready();
    turns_trip_send(&x->clk);
    do {
        pass_to(x, TURN_B);
        wait_change(x, TURN_B);
    } while (turns_trip_arrived(&x->clk));
    pass_to(x, TURN_END);
    return NULL;
}

static void *side_b(void *arg) {
    ping *x = arg;
    turns_pair_ready();
    for (;;) {
        int v = wait_change(x, TURN_A);
        if (v == TURN_END) break;
        pass_to(x, TURN_A);
    }
    return NULL;
}

static int roundtrip(const turns_params *p, turns_result *out) {
    ping x = {.word = TURN_A};
    int rc = turns_trip_open(&x.clk, p);
    if (rc == 0) rc = turns_pair_run(p, side_a, side_b, &x);
    return turns_trip_close(&x.clk, rc, out);
}

/* ------------------------------------------------------ eventfd+epoll */

typedef struct efd_side {
    int efd;  /* written by the other side */
    int epfd; /* watches efd, edge-triggered */
} efd_side;

typedef struct efd_ping {
    efd_side a, b;
    int stop;
    turns_trip_clock clk;
} efd_ping;

static void efd_signal(efd_side *s) {
    uint64_t one = 1;
    ssize_t r = write(s->efd, &one, sizeof one);
    (void)r; /* a counter far from overflow: cannot fail here */
}

static void efd_wait(efd_side *s) {
    struct epoll_event ev;
    while (epoll_wait(s->epfd, &ev, 1, -1) < 0 && errno == EINTR) {
    }
}

static void *efd_side_a(void *arg) {
    efd_ping *x = arg;
    turns_pair_ready();
    turns_trip_send(&x->clk);
    do {
        efd_signal(&x->b);
        efd_wait(&x->a);
    } while (turns_trip_arrived(&x->clk));
    __atomic_store_n(&x->stop, 1, __ATOMIC_RELEASE);
    efd_signal(&x->b);
    return NULL;
}

static void *efd_side_b(void *arg) {
    efd_ping *x = arg;
    turns_pair_ready();
    for (;;) {
        efd_wait(&x->b);
        if (__atomic_load_n(&x->stop, __ATOMIC_ACQUIRE)) break;
        efd_signal(&x->a);
    }
    return NULL;
}

static int efd_open(efd_side *s) {
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->efd < 0 || s->epfd < 0) return -errno;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->efd, &ev) != 0) return -errno;
    return 0;
}

static void efd_close(efd_side *s) {
    if (s->efd >= 0) close(s->efd);
    if (s->epfd >= 0) close(s->epfd);
}

static int roundtrip_epoll(const turns_params *p, turns_result *out) {
    efd_ping x = {.a = {-1, -1}, .b = {-1, -1}};
    int rc = turns_trip_open(&x.clk, p);
    if (rc == 0) rc = efd_open(&x.a);
    if (rc == 0) rc = efd_open(&x.b);
    if (rc == 0) rc = turns_pair_run(p, efd_side_a, efd_side_b, &x);
    efd_close(&x.a);
    efd_close(&x.b);
    return turns_trip_close(&x.clk, rc, out);
}

/* ----------------------------------------------------------- lateness */

static struct timespec to_timespec(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    return ts;
}

static int late_nanosleep(const turns_params *p, turns_result *out) {
    turns_late l;
    int rc = turns_late_open(&l, p);
    if (rc < 0) return rc;
    turns_late_arm(&l);
    do {
        struct timespec ts = to_timespec(l.due);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
               EINTR) {
        }
    } while (turns_late_fired(&l));
    return turns_late_close(&l, 0, out);
}

static int late_epoll(const turns_params *p, turns_result *out) {
    turns_late l;
    int rc = turns_late_open(&l, p);
    if (rc < 0) return rc;
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    rc = epfd < 0 ? -errno : 0;
    turns_late_arm(&l);
    do {
        for (;;) { /* until due, as a loop would after an early return */
            uint64_t now = lab_now_ns();
            if (now >= l.due) break;
            struct timespec ts = to_timespec(l.due - now);
            struct epoll_event ev;
            if (epoll_pwait2(epfd, &ev, 1, &ts, NULL) < 0 && errno != EINTR) {
                rc = -errno; /* ENOSYS: a kernel before 5.11 */
                break;
            }
        }
    } while (rc == 0 && turns_late_fired(&l));
    if (epfd >= 0) close(epfd);
    return turns_late_close(&l, rc, out);
}

/* -------------------------------------------------------- idle floor */

/* The idle window with no loop: the same idle sockets in one epoll set,
 * one epoll_wait for the whole window (no timers: a sleeping loop's timers
 * cost nothing until one is due), so one wake-up at its end. What any
 * loop asleep in epoll with these sockets pays. */
static int idle_floor(const turns_params *p, turns_result *out) {
    int n = p->idle_handles;
    int *fds = calloc((size_t)n, sizeof *fds);
    int rc = fds ? turns_open_sockets(fds, n) : -ENOMEM;
    if (rc < 0) {
        free(fds);
        return rc;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) rc = -errno;
    for (int i = 0; rc == 0 && i < n; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0) rc = -errno;
    }
    if (rc == 0) {
        turns_idle_clock clk;
        int wakeups = 0;
        turns_idle_begin(&clk);
        uint64_t end = lab_now_ns() + p->idle_window_ns;
        for (uint64_t now = lab_now_ns(); now < end; now = lab_now_ns()) {
            struct epoll_event ev[64];
            int ms = (int)((end - now + 999999) / 1000000);
            (void)epoll_wait(ep, ev, 64, ms);
            wakeups++;
        }
        turns_idle_end(&clk, p, out);
        out->v[IDLE_WAKEUPS] = wakeups;
    }
    if (ep >= 0) close(ep);
    turns_close_sockets(fds, n);
    free(fds);
    return rc;
}

/* ------------------------------------------------------- chain floor */

typedef struct floor_chain {
    void (*fn)(struct floor_chain *c);
    uint64_t left;
} floor_chain;

/* The hop's callback: the least a callback that re-queues itself does. */
__attribute__((noinline)) static void floor_chain_step(floor_chain *c) {
    c->left--;
}

static int chain_floor(const turns_params *p, turns_result *out) {
    int fds[2];
    int rc = turns_open_sockets(fds, 2);
    if (rc < 0) return rc;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev) != 0) {
        rc = -errno;
        goto out;
    }
    /* lull's batch (EVENTS_CAP in src/backend_epoll.c). */
    struct epoll_event events[256];
    floor_chain c = {floor_chain_step, p->hops};
    /* volatile: the compiler cannot see through it, as through a loop's. */
    void (*volatile fn)(floor_chain *) = c.fn;
    turns_chain_clock clk;
    turns_chain_begin(&clk);
    while (c.left) {
        (void)epoll_wait(ep, events, 256, 0);
        fn(&c);
    }
    turns_chain_end(&clk, p, out);
out:
    if (ep >= 0) close(ep);
    turns_close_sockets(fds, 2);
    return rc;
}

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "floor: epoll_wait(0) + 1 indirect call", chain_floor,
     "every hop", 0, TURNS_CLASS_EVERY_HOP},
    {TURNS_CHAIN_TIMER0, "floor: epoll_wait(0) + 1 indirect call", chain_floor,
     "every hop", 0, TURNS_CLASS_EVERY_HOP},
    {TURNS_LATENESS, "floor: clock_nanosleep(TIMER_ABSTIME)", late_nanosleep,
     NULL, 0, 0},
    {TURNS_LATENESS, "floor: epoll_pwait2, empty set", late_epoll, NULL, 0, 0},
    {TURNS_IDLE, "floor: epoll_wait, the sockets", idle_floor, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "futex floor (no loop)", roundtrip, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "eventfd+epoll floor (no loop)", roundtrip_epoll, NULL, 0,
     0},
};

const turns_peer turns_floor = {
    "floor",
    NULL,
    NULL,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
    "bare threads and system calls, no loop",
};
