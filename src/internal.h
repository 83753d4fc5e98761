/* Private layout of the loop and the lull__ functions the modules share.
 *
 * Owned by the loop thread; only the fields marked "atomic" are touched from
 * other threads (src/remote.c). */
#ifndef LULL_INTERNAL_H
#define LULL_INTERNAL_H

#include "lull.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "heap.h"
#include "own_name.h"

struct epoll_event;

#define LULL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define LULL_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Marks a function every turn or every wake-up of the loop runs, or a
 * callback calls turn after turn (a post, an arm, a watcher's change). The
 * linker places them all together (its default script puts .text.hot.*
 * first in .text), so a loop waking after a long sleep, its code gone
 * from the caches and the TLB, reads four pages of code instead of one or
 * two in each module it passes through. The instructions are the same;
 * the user-space part of an idle loop's wake-up (4,000 sockets and
 * timers, the timer ending a 1.1 s sleep, from the arm to epoll and from
 * epoll's return to the callback, TSC-stamped) measured 16.2 us instead of
 * 18.9 (medians of 4 runs of 8 rounds, A B A B). */
#define LULL__HOT __attribute__((section(".text.hot.lull")))

/* Broken invariants and programming errors (wrong thread, use of a freed
 * handle) stop a debug build with a message; release builds trust the
 * caller. Cheap misuse is reported with -EINVAL instead. */
#ifdef NDEBUG
#define LULL_ASSERT(cond, msg) ((void)0)
#else
#define LULL_ASSERT(cond, msg)                                                 \
    ((cond) ? (void)0 : lull__assert_fail(msg, __FILE__, __LINE__))
#endif
void lull__assert_fail(const char *msg, const char *file, int line)
    __attribute__((noreturn));

#define LULL_ASSERT_LOOP_THREAD(loop)                                          \
    LULL_ASSERT(lull__on_loop_thread(loop),                                    \
                "lull: called from a thread that does not own the loop")

/* A forked child's copy of the loop holds the parent's epoll set and
 * wake-up fd until lull_loop_fork gives it its own (lull.h): a watcher it
 * started or stopped there would change the parent's loop (a stop makes
 * the parent's watcher deaf). Debug builds stop such a child at its first
 * run, or start or stop of a watcher, before it touches the kernel. */
#define LULL_ASSERT_OWN_PROCESS(loop)                                          \
    LULL_ASSERT((loop)->pid == getpid(),                                       \
                "lull: a forked child used the loop before lull_loop_fork")

/* lull__node.flags. A timer keeps its arm order in the bits above
 * LULL__SEQ_SHIFT: 30 bits, compared with serial-number arithmetic, so arm
 * order between two timers with the same deadline is exact as long as they
 * were armed fewer than 2^29 arms apart. */
#define LULL__NODE_TIMER 0x1u /* the node is a lull_timer, else a lull_task */
#define LULL__NODE_UNREF 0x2u /* timer: does not keep lull_loop_run alive */
#define LULL__SEQ_SHIFT  2
#define LULL__SEQ_MASK   (~0u << LULL__SEQ_SHIFT)

/* lull_io.flags */
#define LULL__IO_ACTIVE 0x1u /* started */
#define LULL__IO_UNREF  0x2u /* does not keep lull_loop_run alive */
/* set up by lull_io_init: in the process's set of handles in use while
 * started */
#define LULL__IO_USER 0x4u
/* Above the state bits: the settle round that last called the watcher
 * (lull__settle_note_io), 24 bits. */
#define LULL__IO_ROUND_SHIFT 8
#define LULL__IO_ROUND_MASK  0xffffffu

/* A quantum under this ends the slice after every callback: a poll and a
 * clock read alone take longer here (epoll_wait(0) ~140 ns, a read ~40 ns),
 * so reading the clock to find the quantum spent would only confirm it.
 * Such a loop (quantum_ns = 1: I/O checked every hop) reads the clock at
 * every LULL__EVERY_CALLBACK_READS-th slice end, and at every one while
 * timers are armed or arms deferred (clock.c). */
#define LULL__EVERY_CALLBACK_NS    1000u
#define LULL__EVERY_CALLBACK_READS 64u

/* "Not in a slice": should_yield counts down from here and never reaches 0. */
#define LULL__COUNTDOWN_IDLE (INT64_MAX / 2)

/* A row of the wake audit (src/audit.c). */
typedef struct lull__source {
    lull_any_fn fn;   /* the callback the row counts */
    int kind;         /* LULL_SOURCE_* */
    bool reported;    /* scratch for lull_loop_audit's selection */
    uint64_t wakeups; /* kernel wakeups it caused */
    uint64_t passes;  /* pump passes */
    uint64_t empty;   /* ... that delivered nothing */
    char label[48];   /* "<kind> callback <address>" for unnamed rows */
} lull__source;

/* A due fire that stands for more than one period, or whose deadline its
 * timer's next one cannot give (src/timer.c). */
typedef struct lull__overrun {
    lull_timer *timer; /* NULL once taken, or when the timer was stopped */
    uint64_t periods;
    uint64_t first; /* the deadline of the first of them */
    uint32_t slot;  /* its place in loop->overrun_index */
} lull__overrun;

/* A slot of the table of started fd watchers (src/backend_epoll.c). */
typedef struct lull__io_slot {
    lull_io *io;        /* the started watcher, NULL while free */
    uint32_t gen;       /* bumped at every release */
    uint32_t next_free; /* free list: next free slot + 1, 0 = end */
} lull__io_slot;

/* A loop's signal handles (src/signal.c): one signalfd, open while a
 * handle is started. */
typedef struct lull__signals {
    lull_io io;        /* the signalfd; set up while `watched` is not 0 */
    lull_signal *head; /* started handles, in start order */
    lull_signal *tail;
    lull_signal *next;  /* a delivery's next handle (a stop moves it on) */
    uint64_t watched;   /* bit n - 1: a started handle watches signal n */
    uint64_t blocked;   /* bit n - 1: signal n's block is lull's, not the
                           program's (src/signal.c) */
    uint64_t seq;       /* start order, for delivery snapshots */
    uint64_t releasing; /* bit n - 1: signal n's last handle stopped inside
                           a delivery: its block (still in `blocked`) is
                           given back when the read's deliveries end,
                           unless started again by then (src/signal.c) */
    bool delivering;    /* inside on_signalfd's deliveries */
    uint32_t refs;      /* started handles that keep the loop alive */
    struct lull__signals *loop_next; /* the process's loops with a started */
    struct lull__signals *loop_prev; /* handle (src/signal.c, under its lock) */
} lull__signals;

/* A set of handles keyed by address (src/registry.c): which handles of a
 * loop are in use, asked without reading the handle's memory. */
typedef struct lull__registry {
    const void **slots; /* cap of them, NULL where free */
    uint32_t cap;       /* 0, or a power of two */
    uint32_t len;       /* handles in the set: at most cap / 2 */
    uint64_t probes;    /* slots looked at by lookups, for the tests that
                           a registry's inits are O(1) */
} lull__registry;

typedef struct lull__name {
    lull_any_fn fn;
    const char *name;
} lull__name;

struct lull_loop {
    /* Hot: touched on every hop of a task chain. */
    lull__node ready; /* sentinel of the FIFO ready queue */
    /* Flush points (lull__at_flush): tasks run once when the fd callbacks
     * of an iteration end, or when its slice ends. Looked at every hop. */
    lull__node flush;
    lull__node flush_end; /* ends a flush pass (run_flush); never run */
    int64_t countdown;    /* callbacks (or should_yield calls) before the
                             next clock read; see lull__slice_check. A
                             slice begins it at 1 (0 when stopped), and a
                             check that leaves the next call to check
                             again leaves 0, never 1: so 1 after a
                             callback says no check and no stop came in
                             it (src/loop.c, plain hops) */
    uint64_t tasks_run;   /* every callback, of every kind */
    bool sample_armed;    /* the next lull_task_post starts a wait sample */
    lull_any_fn current;  /* callback running, for stall attribution */

    /* Time. */
    uint64_t now; /* cached ns: real or virtual */
    bool virtual_clock;
    bool defer_arms; /* in a slice on the real clock: delayed arms wait for
                        the loop's next clock reading (src/timer.c) */
    uint64_t arm_read_tasks; /* tasks_run when a delayed arm last read the
                                clock: later arms of that callback defer */
    unsigned flags;          /* LULL_LOOP_* */

    /* The slice of busy work (C5). All real-clock ns. */
    uint64_t quantum_ns;
    uint64_t stall_ns;
    uint64_t slice_start;
    uint64_t slice_deadline;
    uint64_t slice_timers_from; /* a timer that comes due from this real
                                   time on ends the slice (clock.c) */
    uint64_t last_check;  /* real time of the last clock read in a slice */
    uint64_t read_time;   /* the slice's newest reading: its start, a
                             renewal, or a read after a callback returned */
    uint64_t read_tasks;  /* tasks_run at that read, or UINT64_MAX: when
                             still equal at the slice's end, no callback ran
                             since, and read_time ends the slice */
    int64_t stride;       /* callbacks between clock reads, adaptive */
    bool quantum_intact;  /* slice_stalled, slice_deadline, slice_timers_from,
                             last_check and stride are as the quantum's
                             start left them (no stall, read plan, renewal
                             or cut stride since) */
    bool every_callback;  /* quantum under LULL__EVERY_CALLBACK_NS: each
                             callback ends the slice, mostly unread */
    bool time_stale;      /* read_time (and so now) is older than the last
                             slice's end: an every_callback slice ended
                             without reading (clock.c) */
    uint32_t unread_ends; /* every_callback slice ends since the last read */
    bool yield_check;     /* the slice check is lull_loop_should_yield's,
                             inside a callback (clock.c) */
    bool in_slice;
    bool slice_spent;
    bool slice_stalled;

    /* Run state. */
    bool running; /* atomic: inside a run (claimed by run_begin) */
    bool stop;
    bool settling;            /* inside settle_loop: fd calls are noted */
    bool settle_fresh;        /* this round called a watcher that the round
                                 before did not */
    uint32_t settle_round;    /* round number, LULL__IO_ROUND_MASK bits */
    uint64_t settle_fd_calls; /* fd callbacks this round */
    uint64_t settle_now;      /* now when settle_loop began: timers due by
                                 then fire in it, later ones wait */
    int poll_error;           /* this run's failed wait (-errno), or 0 */
    pid_t pid;                /* the process whose kernel state (epoll set,
                                 wake-up fd) the loop holds: its creator,
                                 or the child that called lull_loop_fork */
    pthread_t owner;          /* the thread that may use the loop: its creator,
                                 then the last thread that ran it or adopted it
                                 (lull.h, "Threads") */
    bool slack_checked;       /* this run has set the thread's timer slack */
    long slack_restore;       /* the slack to put back at the end, or -1 */

    /* Timers. */
    lull__node due;          /* timers expired this iteration, in order */
    lull__heap heap;         /* armed timers with delay > 0 */
    uint32_t arm_seq;        /* next arm order, in LULL__SEQ_SHIFT units */
    uint32_t timers_ref;     /* timers in the heap that are referenced */
    lull__overrun *overruns; /* due fires that stand for more than one
                                period, in due order (src/timer.c) */
    uint32_t overruns_head;  /* first entry not yet taken */
    uint32_t overruns_len;
    uint32_t overruns_cap;
    uint32_t *overrun_index;  /* 2 x overruns_cap slots: entry + 1 by the
                                 timer's address, 0 = empty (src/timer.c) */
    lull_timer *firing;       /* the timer whose callback runs from the due
                                 list, NULL otherwise */
    uint64_t firing_periods;  /* ... and the periods its fire stands for */
    uint64_t firing_deadline; /* ... and the deadline of the first of them
                                 (a repeating timer's; 0 otherwise) */

    /* File descriptors (src/io.c, src/backend_epoll.c). */
    uint32_t io_active;         /* started watchers */
    uint32_t io_ref;            /* ... and referenced */
    int backend_fd;             /* epoll instance */
    int host_fd;                /* lull_loop_backend_fd's set, holding
                                   backend_fd (backend_epoll.c), or -1 */
    bool have_pwait2;           /* epoll_pwait2 works: ns timeouts */
    struct epoll_event *events; /* EVENTS_CAP of them (backend_epoll.c) */
    int events_len;             /* readiness collected by the current poll */
    int events_next;            /* next one to dispatch */
    lull__io_slot *io_slots;    /* started watchers, by slot */
    uint32_t io_slots_cap;
    uint32_t *fd_owner; /* by fd number: the slot + 1 of the watcher
                           whose registration that number names, 0 for
                           none (src/backend_epoll.c) */
    uint32_t fd_owner_cap;
    uint32_t io_free;       /* first free slot + 1, 0 = none */
    int wake_fd;            /* the wake-up fd, registered again on a rebuild */
    bool backend_stale;     /* a registration nobody owns reported: rebuild
                               the epoll set before the next poll */
    bool shuffle;           /* lull_loop_shuffle: batches of fd readiness
                               in a seeded order (else epoll's) */
    uint64_t shuffle_state; /* ... its generator */

    /* Liveness and subscriptions. */
    uint32_t refs;    /* lull_loop_ref count */
    uint32_t handles; /* streams, servers and udp sockets set up and not closed
                         (src/stream.c): a paused stream holds an fd
                         but no started watcher; and loopback ends whose
                         close callback waits for a peer's inbox */
    uint32_t listeners;       /* subscribed listeners (src/notify.c) */
    lull_listener *listening; /* ... linked through loop_next, newest
                                 first: what lull_loop_walk reports */
    const lull_pump *passing; /* the pump whose pass is running, until it
                                 returns or closes its pump (src/pump.c) */
    lull__registry pumps;     /* pumps initialised and not closed since
                                 (src/pump.c) */
    lull__registry loopbacks; /* loopback ends paired here and not yet the
                                 caller's again (src/loopback.c) */
    /* lull_loop_free: detaches the loopback pairs left open, before it
     * forgets them. Set by the first lull_loopback_pair on this loop, so
     * that a program that never pairs does not link src/loopback.c (and,
     * through the frame interface, TLS) for lull_loop_free's sake. */
    void (*loopbacks_forget)(lull_loop *loop);
    /* The frame a loopback delivery hands over, from its frame callback
     * to its release: the delivery keeps it here rather than in a saved
     * register (src/loopback.c). Not next to `delivering`, which the
     * delivery stores at the same time: the compiler made the two stores
     * one vector store, four instructions instead of two. */
    lull_frame *delivering_frame;
    /* The journal whose completions run now (src/fs.c: journal_done), so
     * that an append in them tells it is still in use. The loop's, not
     * the thread's: an append then reads no thread-local. */
    struct lull__journal_turn *journal_turn;
    lull__registry udps; /* udp handles set up here and not yet the
                            caller's again (src/udp.c) */
    lull__registry sims; /* simulated connection ends not yet done and
                            servers listening, of every lull_simnet here
                            (src/sim.c) */
    void *delivering;    /* the turn (task or timer) of the loopback
                            end whose frame delivery runs; NULL once
                            a callback closed that end
                            (src/loopback.c) */

    /* Cross-thread posts (src/remote.c). */
    lull_task *remote_head; /* atomic: Treiber stack of remote posts */
    int sleeping;           /* atomic, a futex word: LULL__AWAKE, or how the
                               loop is blocked (src/remote.c) */
    bool embedded;          /* lull_loop_backend_timeout announced an epoll
                               sleep the host does for it: the next run
                               starts awake */
    bool futex_refused;     /* the kernel refused a futex sleep (a seccomp
                               filter): the loop sleeps in epoll from then
                               on */
    int remote_fd;          /* eventfd, written once per burst */
    unsigned posters;       /* atomic: posters that may still touch the
                               loop after publishing (lull_loop_free waits
                               for 0) */

    /* Metrics (C8). */
    lull_metrics m; /* counters; latency summaries filled on read */
    lull_histogram wait_hist;
    lull_histogram run_hist;
    uint64_t sample_posted; /* real ns at which the sampled task was posted */
    uint32_t sample_seq;    /* the tag of the task being timed (the newest) */
    uint64_t sample_last;   /* real ns the last sample was armed */
    uint64_t busy_start;    /* real ns the current slice began (busy_ns) */

    uint64_t tasks_run_base; /* tasks_run at the last metrics reset */
    uint64_t plain_hops;     /* hops run as plain hops (src/loop.c) since the
                                last metrics reset: each is one iteration,
                                poll and empty poll, which lull_loop_metrics
                                adds to m's counts (one store a hop, not
                                three) */

    /* Wake audit (src/audit.c). */
    lull__source *sources;
    int sources_len;
    int sources_cap;
    uint64_t audit_start;       /* real ns the audit window began */
    bool audit_remote;          /* the next remote drain caused a wakeup */
    lull_task_fn audit_task_fn; /* the plain task whose row a remote wakeup
                                   last went to ... */
    int audit_task_row;         /* ... and that row, or -1 (src/audit.c) */
    bool audit_timer;           /* the next expiry caused a wakeup */

    /* Signals (src/signal.c). */
    lull__signals signals;

    /* File-system watches (src/fsevent.c): the inotify fd and its started
     * watches, allocated with the first watch, freed with the last. */
    struct lull__fsevents *fsevents;

    /* Names for callbacks (lull_loop_name). */
    lull__name *names;
    int names_len;
    int names_cap;
};

/* queue.h needs the node type only. */
#include "queue.h"

/* A runner's check of the node n at the head of queue q, before it unlinks
 * it (debug builds): its back link is q and its successor's back link is
 * n. A node freed while queued (its memory reused) fails the first, before
 * its forward link is read; one set up again while queued (lull_task_init,
 * lull_timer_init clear the links the queue still follows) fails either:
 * at the head its back link is NULL, one further its predecessor's unlink
 * sets its back link to q but its forward link is NULL, and one set up and
 * queued again at the tail has cut the nodes behind it off the queue,
 * which the link from the node before it says. The successor read is the
 * one the unlink writes through anyway. */
static inline bool lull__queue_head_ok(const lull__node *q,
                                       const lull__node *n) {
    return n->prev == q && n->next && n->next->prev == n;
}

/* clock.c */
uint64_t lull__clock_real(void);
void lull__slice_renew(lull_loop *loop);
bool lull__slice_check_read(lull_loop *loop);
bool lull__on_loop_thread(const lull_loop *loop);
void lull__note_stall(lull_loop *loop, uint64_t t);
uint64_t lull__slice_read_and_flush(lull_loop *loop);

/* The slice's beginning, end and end time are clock.c's, here inline: the
 * loop takes each once per iteration, and a loop that checks I/O on every
 * hop iterates once per hop, where three calls were a tenth of its
 * instructions. */

/* A timer that comes due ends the slice once this fraction of the quantum
 * has run (1/8: 62.5 us shared, 250 us dedicated). Without a floor, timers
 * firing every few us (thousands of connections' timeouts) would end every
 * slice after a stride, and each early end costs a poll and a flush of the
 * stream writes (smaller writev batches); with it, at most 8 early ends per
 * quantum, and a due timer waits at most quantum/8 plus a stride. (A
 * producer beside 1,000 timers firing one per us lost a third of its
 * records with no floor, none with this one.) */
#define LULL__SLICE_TIMER_SHIFT 3

/* A full quantum from t, with the stride between clock reads back at 1. */
static inline void lull__start_quantum(lull_loop *loop, uint64_t t) {
    loop->slice_spent = false;
    loop->slice_stalled = false;
    loop->slice_start = t;
    loop->slice_deadline = t + loop->quantum_ns;
    loop->slice_timers_from = t + (loop->quantum_ns >> LULL__SLICE_TIMER_SHIFT);
    loop->last_check = t;
    loop->read_time = t; /* the newest reading: where an unread end ends */
    loop->read_tasks = UINT64_MAX;
    loop->stride = 1;
    loop->countdown = loop->stop ? 0 : 1;
    loop->quantum_intact = true;
}

static inline void lull__slice_begin(lull_loop *loop, uint64_t t) {
    loop->in_slice = true;
    loop->defer_arms = !loop->virtual_clock;
    loop->busy_start = t;
    if (loop->quantum_intact && t == loop->slice_start) {
        /* The last quantum started at this same reading and nothing has
         * changed it: a loop checking I/O on every hop, between its clock
         * reads. Only what a callback changes is reset. */
        loop->slice_spent = false;
        loop->read_time = t;
        loop->read_tasks = UINT64_MAX;
        loop->countdown = loop->stop ? 0 : 1;
        return;
    }
    lull__start_quantum(loop, t);
}

/* t: the real time the slice ended (the caller reads it anyway). A stall is
 * also caught here, for callbacks that never reach a clock read. */
static inline void lull__slice_end(lull_loop *loop, uint64_t t) {
    LULL_ASSERT(!loop->heap.pend,
                "lull: a slice ended with timer arms deferred");
    /* busy_start <= slice_start <= t: a slice that ends at the reading it
     * began at (an unread every-hop slice) adds no busy time and no stall. */
    if (t != loop->busy_start) {
        if (t - loop->slice_start >= loop->stall_ns) lull__note_stall(loop, t);
        loop->m.busy_ns += t - loop->busy_start;
    }
    loop->in_slice = false;
    loop->defer_arms = false;
    loop->arm_read_tasks = UINT64_MAX; /* no callback of this slice reads */
    loop->countdown = LULL__COUNTDOWN_IDLE;
}

/* The end of a slice: the clock read made after the last callback
 * returned, when no callback has run since (a loop that polls on every hop
 * then reads the clock once per hop, not twice; that read flushed every
 * deferred arm, and no callback could defer one since), or a fresh one,
 * which flushes the deferred arms: none outlives its slice. */
static inline uint64_t lull__slice_end_time(lull_loop *loop) {
    if (loop->in_slice && loop->read_tasks == loop->tasks_run &&
        LULL_LIKELY(!loop->heap.pend))
        return loop->read_time;
    return lull__slice_read_and_flush(loop);
}

/* An every_callback slice may end without a read when nothing needs the
 * time: no timer armed (its expiry compares with now), no arm deferred,
 * and fewer than LULL__EVERY_CALLBACK_READS unread ends since the last
 * read, which keeps now, busy_ns, stalls and the latency samples at most
 * that many hops behind. */
static inline bool lull__end_unread(lull_loop *loop) {
    return !loop->heap.len && !loop->heap.pend &&
           ++loop->unread_ends < LULL__EVERY_CALLBACK_READS;
}

/* The unread end (every_callback) first, inline: an every-hop loop takes
 * it after every callback. */
static inline bool lull__slice_check(lull_loop *loop) {
    if (loop->every_callback && loop->in_slice && !loop->stop &&
        lull__end_unread(loop)) {
        /* The slice ends at the last reading: read_time stands for the
         * end (lull__slice_end_time), and the next slice starts there. */
        loop->slice_spent = true;
        loop->countdown = 0;
        loop->read_tasks = loop->tasks_run;
        loop->time_stale = true;
        return true;
    }
    return lull__slice_check_read(loop);
}

/* A callback has returned: count it, and every `stride` callbacks read the
 * clock. True when the slice must end (quantum spent, or lull_loop_stop). */
static inline bool lull__after_callback(lull_loop *loop) {
    return --loop->countdown <= 0 && lull__slice_check(loop);
}

/* Calls an unlinked node's callback. (A repeating timer was already
 * re-armed for its next period when it expired.) */
static inline void lull__call_node(lull_loop *loop, lull__node *n) {
    if (n->flags & LULL__NODE_TIMER) {
        loop->current = (lull_any_fn)n->fn.timer;
        n->fn.timer((lull_timer *)n);
    } else {
        loop->current = (lull_any_fn)n->fn.task;
        n->fn.task((lull_task *)n);
    }
}

/* Counts and runs one unlinked node of a queue. A task's aux is a
 * wait-sample tag; a timer's is its heap slot (a repeating timer is armed
 * for its next period while queued). Either is rare on the ready queue,
 * so the two are told apart out of line (lull__dispatch_aux): a node
 * without costs the test of one word, not also a load of its flags. */
void lull__dispatch_aux(lull_loop *loop, lull__node *n);
static inline void lull__dispatch_node(lull_loop *loop, lull__node *n) {
    loop->tasks_run++;
    if (LULL_UNLIKELY(n->aux)) {
        lull__dispatch_aux(loop, n);
        return;
    }
    lull__call_node(loop, n);
}

/* Runs the nodes of queue q in order, each unlinked before its callback,
 * until the quantum is spent. Nodes a callback adds land behind the ones
 * already queued. (The due list has its own runner, which stops only for
 * lull_loop_stop: lull__timers_run_due.) */
static inline void lull__run_queue(lull_loop *loop, lull__node *q) {
    while (q->next != q) {
        lull__node *n = q->next;
        /* The walk at iteration boundaries comes too late for a task freed
         * by a callback of this batch: its links are checked against the
         * queue before they are used. */
        LULL_ASSERT(lull__queue_head_ok(q, n),
                    "lull: ready queue corrupted (a task freed or set up again "
                    "while pending?)");
        lull__queue_remove(n);
        lull__dispatch_node(loop, n);
        if (lull__after_callback(loop)) break;
    }
}

/* loop.c: flush points. The task runs once, at the next of: the end of the
 * fd callbacks of an iteration, the end of its slice (before the loop polls
 * again; a queued flush task makes that poll non-blocking). A writer queues
 * its flush here so that everything written in between leaves in one system
 * call (src/stream.c); lull_task_cancel unlinks it. */
void lull__at_flush(lull_loop *loop, lull_task *task);

/* A fresh reading for a loop whose last one may be stale (time_stale):
 * the time since it was busy time, and now moves on. */
uint64_t lull__time_refresh(lull_loop *loop, uint64_t stale);

/* timer.c */
/* Nonzero when t is armed: in the heap (or deferred after it) by its
 * position, or queued as a turn by its link. One word, so a hot arm tests
 * it together with its own conditions in one branch. */
static inline uintptr_t lull__timer_armed_bits(const lull_timer *t) {
    return (uintptr_t)t->node.next | t->node.aux;
}
/* The same, short-circuited: cheaper where nothing else is tested with it
 * (a cancel reads one word where the timer is in the heap). */
static inline bool lull__timer_armed(const lull_timer *t) {
    return lull__heap_contains(t) || lull__node_queued(&t->node);
}
/* The zero-delay arm of a timer that is not armed: a turn (C3), queued in
 * the ready queue like a posted task, at a posted task's cost. The common
 * case of lull_timer_start, inline for lull's own timers (a loopback end's
 * deliveries). */
static inline void lull__timer_turn(lull_timer *t) {
    t->repeat = 0;
    lull__queue_push(&t->loop->ready, &t->node);
}
/* The same for a timer only ever armed one-shot (lull's own: a loopback
 * end's delivery), whose `repeat` is still the 0 its set-up wrote: no
 * store for it on the round trip's path. */
static inline void lull__timer_turn_oneshot(lull_timer *t) {
    LULL_ASSERT(t->repeat == 0, "lull: a one-shot turn of a repeating timer");
    lull__queue_push(&t->loop->ready, &t->node);
}
/* t is a real-clock reading the loop just took: the deferred arms (made
 * before it, on this thread) get their deadlines from it. */
static inline void lull__timers_flush(lull_loop *loop, uint64_t t) {
    if (LULL_UNLIKELY(loop->heap.pend)) lull__heap_flush(&loop->heap, t);
}
/* The same with a reading of its own, for an answer that needs every
 * deadline now (lull_timer_deadline, lull_loop_walk). Real clock only. */
void lull__timers_flush_now(lull_loop *loop);
void lull__timers_expire(lull_loop *loop, uint64_t now);
/* Runs the due list (iteration step 5), noting which timer fires and the
 * periods its fire stands for (lull_timer_overrun). */
void lull__timers_run_due(lull_loop *loop);
void lull__timers_free(lull_loop *loop);
int64_t lull__timers_next_ns(lull_loop *loop, uint64_t now);

/* io.c and the backend */
/* lull_io_init without its check for a started watcher and without the
 * process's set of handles in use at start and stop: for lull's own
 * handles, whose own set-up checks answer for their watchers. */
void lull__io_setup(lull_loop *loop, lull_io *io, int fd, lull_io_fn fn);
void lull__io_dispatch(lull_loop *loop, lull_io *io, int events);
/* An fd lull keeps for itself (an epoll set, an eventfd, a signalfd, a
 * pidfd, a socket or pipe end it made, a copy of an fd queued to send),
 * moved above 2 if it took 0, 1 or 2: those are
 * free only because the program closed its stdin, stdout or stderr, and an
 * fd of lull's there would be what the program reads and writes as such,
 * and what every child spawned with its stdio inherited gets. Owns fd:
 * closed on failure. Returns the fd kept, or a negative errno. */
int lull__fd_above_stdio(int fd);
/* loop.c: an fd callback is about to run inside a settle round. */
void lull__settle_note_io(lull_loop *loop, lull_io *io);

/* remote.c */
int lull__remote_init(lull_loop *loop);
void lull__remote_close(lull_loop *loop);
/* Posts not yet taken (the loop looks after every poll): remote.c's,
 * inline because the every-hop loop looks once per hop. */
static inline bool lull__remote_pending(lull_loop *loop) {
    return __atomic_load_n(&loop->remote_head, __ATOMIC_ACQUIRE) != NULL;
}
void lull__remote_quiesce(lull_loop *loop);
/* lull_task_post_remote in two halves (src/remote.c): the push, and, when
 * it returns 1, the wake, which a caller may make after its own unlock. */
int lull__post_remote_push(lull_loop *loop, lull_task *task);
void lull__post_remote_wake(lull_loop *loop);
/* In a fork()ed child, before lull_loop_fork: the push alone. No wake is
 * needed (the child's one thread is not asleep in the loop, which looks at
 * the stack before it sleeps) nor allowed (the eventfd is still the
 * parent's: a wake would reach the parent's loop). */
void lull__post_remote_forked(lull_loop *loop, lull_task *task);
int lull__remote_fork(lull_loop *loop);
void lull__remote_fork_host(lull_loop *loop, bool ready);
void lull__notify_fork(lull_loop *loop);
/* lull_loop_fork, before the epoll set is rebuilt: the child's inotify
 * instance is its own, and its inherited watches end with GONE in a later
 * turn (src/fsevent.c). */
int lull__fsevents_fork(lull_loop *loop);
void lull__remote_drain(lull_loop *loop);
enum { LULL__AWAKE = 0, LULL__SLEEP_EPOLL = 1, LULL__SLEEP_FUTEX = 2 };
bool lull__remote_sleep(lull_loop *loop, int how);
int lull__remote_wait(lull_loop *loop, int64_t timeout_ns, uint64_t now_ns);
void lull__remote_awake(lull_loop *loop);

void lull__remote_each(lull_loop *loop, void (*fn)(lull_task *t, void *arg),
                       void *arg);

/* signal.c: the calling thread takes the loop over (a run on a new owner,
 * lull_loop_adopt), or may give back signal blocks no loop needs. */
void lull__signals_take(lull_loop *loop);
void lull__signals_settle(void);
/* lull_loop_fork, before the epoll set is rebuilt: the child's signalfd
 * is its own, under the same number, so that what its handles start and
 * stop leaves the parent's alone (src/signal.c). */
int lull__signals_fork(lull_loop *loop);
/* Sets the calling thread's mask to the one a thread of lull's own is
 * created with (every signal blocked but the faults), *old its own. */
void lull__block_for_thread(sigset_t *old);

/* pump.c */
void lull__pump_unlink_listener(lull_listener *l);

/* notify.c */
/* Is l subscribed to a notifier, on any loop? By address: l may be
 * uninitialised memory (src/notify.c). */
bool lull__listener_subscribed(const lull_listener *l);
void lull__listen_task(lull_loop *loop, lull_notifier *n, lull_listener *l,
                       lull_task *target);
/* For a node of lull's own (a listener's task, a notifier's remote raise),
 * fills out->kind, ->handle and ->fn with what it stands for (the user's
 * callback behind it) and returns true; false for any other node. */
bool lull__notify_describe(const lull__node *n, lull_live *out);
/* The user's callback a listener runs: its fn, or its pump's pass. */
lull_any_fn lull__listener_fn(const lull_listener *l);
/* What a raise of n reaches first, for the wake audit: its first
 * listener's callback (LULL_SOURCE_REMOTE) or that listener's pump's pass
 * (LULL_SOURCE_PUMP). False when n has no listener. */
bool lull__notify_reaches(const lull_notifier *n, lull_any_fn *fn, int *kind);
/* The function of a notifier's remote raise task (lull_notifier_raise_remote).
 */
lull_any_fn lull__notify_raise_fn(void);

/* pump.c: the same for a pump's pass task and retry timer. */
bool lull__pump_describe(const lull__node *n, lull_live *out);

/* audit.c */
int lull__audit_init(lull_loop *loop);
int lull__source_of(lull_loop *loop, lull_any_fn fn, int kind);
void lull__audit_wakeup(lull_loop *loop, lull_any_fn fn, int kind);
/* Charges a wakeup to the remote post that caused it (the oldest one). */
void lull__audit_remote_wakeup(lull_loop *loop, const lull_task *task);
/* Charges a wakeup to the timer that caused it (the first one due). */
void lull__audit_timer_wakeup(lull_loop *loop, const lull__node *n);
void lull__audit_pass(lull_loop *loop, int source, bool empty);
void lull__audit_free(lull_loop *loop);

/* live.c: fills the live_* fields of lull_metrics. */
void lull__live_count(lull_loop *loop, lull_metrics *m);
/* Fills e->kind, ->handle and ->fn for a queued or armed node: the handle
 * the user owns and the user's callback behind it. */
void lull__describe_node(const lull__node *n, lull_live *e);
/* live.c: whether io is a started watcher of loop or one of the n nodes is
 * queued on its ready or flush queue. Reads nothing of the handle (its
 * memory may be anything before its first use): only loop's own tables.
 * For calls that must refuse a handle still in use (a spawn, a dial's
 * stream); not a hot path. */
bool lull__live_on(const lull_loop *loop, const lull_io *io,
                   const lull__node *const *nodes, int n);

/* metrics.c */
void lull__wait_sample_begin(lull_loop *loop, lull__node *n);

/* lull_task_post's work, for modules that post on their own hot path (a
 * transport's delivery turn): the same queue push and wait sample, without
 * the call and the argument checks the caller has already made. The
 * _unqueued half is for a caller that knows the task is not queued; the
 * _owned one also for a task of lull's own that is only ever posted to one
 * loop, whose `loop` its set-up wrote once (a loopback end's turn), so
 * that its hot path spends no store on it. */
static inline void lull__post_owned(lull_loop *loop, lull_task *task) {
    LULL_ASSERT(task->loop == loop, "lull: an owned task of another loop");
    lull__queue_push(&loop->ready, &task->node);
    if (LULL_UNLIKELY(loop->sample_armed))
        lull__wait_sample_begin(loop, &task->node);
}
static inline void lull__post_unqueued(lull_loop *loop, lull_task *task) {
    task->loop = loop;
    lull__post_owned(loop, task);
}
static inline void lull__post(lull_loop *loop, lull_task *task) {
    if (lull__node_queued(&task->node)) {
        /* Coalesced: runs once, where it is queued. A post naming another
         * loop would run it there instead, on that loop's thread, with the
         * caller none the wiser (and, loops on two threads, read links
         * the other thread writes): a programming error, as libuv's
         * handles on two loops are. task->loop is the loop a queued task
         * is on (lull__at_flush writes it too). */
        LULL_ASSERT(task->loop == loop,
                    "lull: a task posted to a loop while pending on another");
        return;
    }
    lull__post_unqueued(loop, task);
}
/* The name given with lull_loop_name, else lull's own name for its own
 * callbacks (LULL__OWN_NAME), else NULL. */
const char *lull__name_lookup(lull_loop *loop, lull_any_fn fn);
/* The same, or "(unnamed callback)" for a function without one. */
const char *lull__name_of(lull_loop *loop, lull_any_fn fn);
void lull__names_free(lull_loop *loop);

/* registry.c: add is 1 when h was there already, 0 when it is now, or
 * -ENOMEM; remove of a handle not there does nothing. */
int lull__registry_add(lull__registry *r, const void *h);
bool lull__registry_has(lull__registry *r, const void *h);
void lull__registry_remove(lull__registry *r, const void *h);
void lull__registry_free(lull__registry *r);
/* ... and the process-wide set of pumps, UDP handles, processes, started
 * fs watches, started watchers of lull_io_init's, open servers, notifiers with
 * listeners, live loopback ends, and streams and TLS connections set up
 * whose on_close has not run, on any loop (thread-safe): add as above;
 * forget removes every handle of r (a loop's set, at lull_loop_free). */
int lull__inuse_add(const void *h);
bool lull__inuse_has(const void *h);
void lull__inuse_remove(const void *h);
void lull__inuse_forget(const lull__registry *r);

/* tcp.c: an interface by index or name (an IPv6 zone, a multicast
 * interface): 0, -EINVAL for an empty, zero or overflowing index,
 * -ENODEV for a name no interface has, or the errno of the socket the
 * lookup of a name needs (glibc's if_nametoindex says ENOENT for all of
 * those). */
int lull__if_index(const char *name, uint32_t *index);
/* tcp.c: a numeric IPv4 or IPv6 host ("[::1]" too; NULL is 127.0.0.1)
 * and port to a sockaddr; -EINVAL otherwise. Streams and UDP share it. */
struct sockaddr_storage;
int lull__inet_address(const char *host, int port, struct sockaddr_storage *ss,
                       socklen_t *len, int *family);

#endif
