/* The loop: creation, the order of one iteration, run modes, liveness.
 *
 * One iteration:
 *   1. poll the kernel: block until the earliest deadline, fd readiness or a
 *      remote post when nothing is ready; otherwise do not block at all;
 *   2. a slice of busy work begins: ready fd callbacks run (then the flush
 *      tasks, lull__at_flush), then timers due by now (the due list), then
 *      ready tasks until the queue is empty or the quantum is spent;
 *   3. the slice ends (the flush tasks again); repeat while alive (DEFAULT),
 *      or return (ONCE/NOWAIT).
 * So when a producer spends its quantum, or a timer comes due during its
 * slice (src/clock.c), fd callbacks and due timers run before it continues
 * (C5), and with nothing ready the loop sleeps in the kernel with no timer
 * of its own (C1).
 *
 * Loop thread only, except where remote.c says otherwise. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>

#include "backend.h"

/* Role defaults of the quantum (C5): a shared loop also serves
 * requests, so it yields often; a dedicated one amortizes more per slice. */
#define QUANTUM_SHARED_NS    500000u
#define QUANTUM_DEDICATED_NS 2000000u
/* A slice this many quanta long counts as a stall by default. */
#define STALL_QUANTA 8
/* Timer slack while the loop may block. The kernel's default 50 us would
 * delay every timed wakeup by up to that much; 1 us keeps a 1 ms timer's
 * p99 lateness well under 100 us while still letting the kernel coalesce
 * wakeups that are within a microsecond of each other. */
#define LOOP_TIMER_SLACK_NS 1000
/* Only a wait shorter than this lowers the slack: the kernel's default
 * 50 us is 0.005% of a 1 s wait, and a loop that only ever sleeps that
 * long (an idle server between its timeouts) then makes none of the three
 * prctl calls (read, lower, put back) a lowered slack costs per run. */
#define PRECISE_BELOW_NS 1000000000

static int check_options(const lull_loop_options *o) {
    if (o->clock != LULL_CLOCK_MONOTONIC && o->clock != LULL_CLOCK_VIRTUAL)
        return -EINVAL;
    if (o->role != LULL_ROLE_SHARED && o->role != LULL_ROLE_DEDICATED)
        return -EINVAL;
    if (o->flags & ~LULL_LOOP_AUTO_ADVANCE) return -EINVAL;
    /* Unbounded, a quantum near UINT64_MAX wrapped the slice deadline (every
     * slice spent at once) and 8 x 2^61 wrapped the default stall to 0
     * (every slice a stall). */
    if (o->quantum_ns > LULL_QUANTUM_MAX_NS) return -EINVAL;
    if (o->stall_ns > LULL_STALL_MAX_NS) return -EINVAL;
    return 0;
}

int lull_loop_new(lull_loop **out, const lull_loop_options *opts) {
    static const lull_loop_options defaults;
    if (!out) return -EINVAL;
    *out = NULL;
    if (!opts) opts = &defaults;
    int err = check_options(opts);
    if (err) return err;

    lull_loop *loop = calloc(1, sizeof *loop);
    if (!loop) return -ENOMEM;
    lull__queue_init(&loop->ready);
    lull__queue_init(&loop->due);
    lull__queue_init(&loop->flush);
    loop->virtual_clock = opts->clock == LULL_CLOCK_VIRTUAL;
    loop->flags = opts->flags;
    loop->quantum_ns = opts->quantum_ns ? opts->quantum_ns
                       : opts->role == LULL_ROLE_DEDICATED
                           ? QUANTUM_DEDICATED_NS
                           : QUANTUM_SHARED_NS;
    loop->stall_ns =
        opts->stall_ns ? opts->stall_ns : loop->quantum_ns * STALL_QUANTA;
    loop->every_callback = loop->quantum_ns < LULL__EVERY_CALLBACK_NS;
    loop->countdown = LULL__COUNTDOWN_IDLE;
    loop->arm_read_tasks = UINT64_MAX;
    loop->now = loop->virtual_clock ? 0 : lull__clock_real();
    loop->backend_fd = -1;
    loop->host_fd = -1;
    loop->remote_fd = -1;
    loop->owner = pthread_self();
    loop->pid = getpid();

    if ((err = lull__audit_init(loop)) != 0 ||
        (err = lull__backend_init(loop)) != 0 ||
        (err = lull__remote_init(loop)) != 0) {
        lull__remote_close(loop);
        lull__backend_close(loop);
        lull__audit_free(loop);
        free(loop);
        return err;
    }
    *out = loop;
    return 0;
}

static bool ready_now(lull_loop *loop) {
    return !lull__queue_empty(&loop->ready) || !lull__queue_empty(&loop->due) ||
           !lull__queue_empty(&loop->flush);
}

static bool has_work_or_handles(lull_loop *loop) {
    return ready_now(loop) || loop->heap.len || loop->heap.pend ||
           loop->io_active || loop->refs || loop->listeners || loop->handles ||
           lull__remote_pending(loop);
}

int lull_loop_free(lull_loop *loop) {
    if (!loop) return -EINVAL;
    lull__signals_settle();
    if (__atomic_load_n(&loop->running, __ATOMIC_ACQUIRE) ||
        has_work_or_handles(loop))
        return -EBUSY;
    /* A poster still inside lull_task_post_remote may have just published. */
    lull__remote_quiesce(loop);
    if (has_work_or_handles(loop)) return -EBUSY;
    lull__remote_close(loop);
    lull__backend_close(loop);
    lull__heap_free(&loop->heap);
    lull__timers_free(loop);
    lull__names_free(loop);
    lull__audit_free(loop);
    lull__inuse_forget(&loop->pumps); /* pumps left open, quiet */
    if (loop->loopbacks_forget) loop->loopbacks_forget(loop); /* quiet pairs */
    lull__inuse_forget(&loop->loopbacks);                     /* ... detached */
    lull__inuse_forget(&loop->udps); /* udp handles without a socket */
    lull__registry_free(&loop->udps);
    lull__registry_free(&loop->loopbacks);
    lull__registry_free(&loop->pumps);
    lull__registry_free(&loop->sims); /* empty: each was a handle */
    free(loop);
    return 0;
}

int lull_loop_adopt(lull_loop *loop) {
    if (!loop) return -EINVAL;
    if (__atomic_load_n(&loop->running, __ATOMIC_ACQUIRE)) return -EBUSY;
    if (pthread_equal(loop->owner, pthread_self()))
        lull__signals_settle();
    else
        lull__signals_take(loop);
    __atomic_store_n(&loop->owner, pthread_self(), __ATOMIC_RELAXED);
    return 0;
}

void lull_loop_ref(lull_loop *loop) {
    if (!loop) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    loop->refs++;
}

void lull_loop_unref(lull_loop *loop) {
    if (!loop) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    LULL_ASSERT(loop->refs > 0, "lull: lull_loop_unref without a reference");
    if (loop->refs) loop->refs--;
}

/* Can waiting make progress? On the virtual clock, timers only move when
 * the test advances time, unless lull_loop_run may jump to them itself. */
static bool timers_can_fire(lull_loop *loop) {
    return !loop->virtual_clock || (loop->flags & LULL_LOOP_AUTO_ADVANCE);
}

void lull__at_flush(lull_loop *loop, lull_task *task) {
    LULL_ASSERT_LOOP_THREAD(loop);
    if (!lull__node_queued(&task->node)) {
        task->loop = loop; /* the loop it is queued on, as a post's */
        lull__queue_push(&loop->flush, &task->node);
    }
}

/* Runs the flush tasks queued before this flush point, each once. One
 * queued meanwhile (a frame re-sent from its release, a drain that writes)
 * waits for the next flush point: a writer kept busy by its own callbacks
 * would otherwise hold this pass, and the loop, for as long as its peer
 * keeps reading, with no quantum to stop it. A marker node ends the pass
 * (the loop's own, never run). */
static void run_flush_slow(lull_loop *loop) {
    lull__node *end = &loop->flush_end;
    lull__queue_push(&loop->flush, end);
    while (loop->flush.next != end) {
        lull__node *n = loop->flush.next;
        lull__queue_remove(n);
        lull__dispatch_node(loop, n);
        /* A flush task runs the user's code too (a frame's release, a
         * drain callback), but no slice check follows it: a timer arm it
         * deferred is flushed here, so that its delay counts from when
         * it returned (src/timer.c), not from after the flush tasks,
         * timers and tasks that run next. */
        if (LULL_UNLIKELY(loop->heap.pend)) lull__timers_flush_now(loop);
    }
    lull__queue_remove(end);
}

static inline void run_flush(lull_loop *loop) {
    if (!lull__queue_empty(&loop->flush)) run_flush_slow(loop);
}

bool lull_loop_alive(lull_loop *loop) {
    if (!loop) return false;
    return ready_now(loop) || loop->timers_ref || loop->io_ref || loop->refs;
}

LULL__HOT static bool alive_for_run(lull_loop *loop) {
    return ready_now(loop) || (loop->timers_ref && timers_can_fire(loop)) ||
           loop->io_ref || loop->refs;
}

/* How long the poll may block, in ns: 0 when there is work or nothing to
 * wait for, -1 when only an fd or a remote post can wake the loop. */
LULL__HOT static int64_t poll_timeout(lull_loop *loop, uint64_t real_now) {
    if (ready_now(loop) || loop->stop || !alive_for_run(loop)) return 0;
    if (loop->virtual_clock) {
        if (loop->io_ref || loop->refs) {
            /* Any armed timer, unreferenced too: it is served while the
             * reference or fd keeps the run going, as on the real clock,
             * so auto_advance must be able to jump to it. */
            if (loop->heap.len && timers_can_fire(loop)) return 0;
            return -1;
        }
        return 0;
    }
    return lull__timers_next_ns(loop, real_now);
}

/* Counts a wakeup and attributes it: to a signal that interrupted the
 * wait, to the first fd that was ready, to the oldest remote post (when the
 * drain runs), or to the first timer due (after expiry) when the wait
 * lasted its whole timeout. A wait that ended early with none of these (a
 * poster's FUTEX_WAKE that arrived after its post had run) is counted in
 * wakeups alone: no timer caused it. */
static void count_wakeup(lull_loop *loop, int nevents, bool signalled,
                         bool timed_out) {
    loop->m.wakeups++;
    if (signalled) {
        /* Not a timer's doing, though no fd or post was ready either: the
         * audit must not blame a timer for a program's signals. */
        loop->m.wakeups_signal++;
        lull__audit_wakeup(loop, NULL, LULL_SOURCE_SIGNAL);
        return;
    }
    /* Nothing has been forgotten yet when this runs, right after the poll.
     * A stale registration (backend_epoll.c) counts as an fd wakeup that
     * no callback caused. */
    bool wake_fd = false;
    lull_io *first = nevents ? lull__backend_first(loop, &wake_fd) : NULL;
    bool remote = nevents ? wake_fd : lull__remote_pending(loop);
    if (nevents && !remote && !first) {
        loop->m.wakeups_io++;
    } else if (remote) {
        loop->m.wakeups_remote++;
        loop->audit_remote = true;
    } else if (first) {
        loop->m.wakeups_io++;
        lull__audit_wakeup(loop, (lull_any_fn)first->fn, LULL_SOURCE_IO);
    } else if (timed_out) {
        loop->m.wakeups_timer++;
        loop->audit_timer = true;
    }
}

/* Lowers the thread's timer slack (LOOP_TIMER_SLACK_NS) before the first
 * sleep of a run that has a deadline under PRECISE_BELOW_NS: slack only
 * stretches timed sleeps, so a run that never waits for a nearer timer
 * makes no prctl call. run_end puts the thread's own value back. */
static void precise_timers(lull_loop *loop) {
    loop->slack_checked = true;
    long old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (old <= LOOP_TIMER_SLACK_NS) return;
    if (prctl(PR_SET_TIMERSLACK, LOOP_TIMER_SLACK_NS, 0, 0, 0) == 0)
        loop->slack_restore = old;
}

/* The kernel refused to wait (the backend already fell back from
 * epoll_pwait2 where it could): retrying would spin on the same error, so
 * the run ends and returns it (lull_loop_run, lull_loop_settle). *timeout
 * becomes 0: the loop did not sleep, so this is no wakeup. */
static void poll_failed(lull_loop *loop, int err) {
    if (!loop->poll_error) loop->poll_error = err;
    loop->stop = true;
    loop->countdown = 0;
}

/* Waits (or just looks, with *timeout 0) for what can wake the loop. A loop
 * with no fd watchers has nothing for epoll to report, so it sleeps on a
 * futex instead (src/remote.c): a remote post then wakes it at futex cost.
 * *timeout becomes 0 if a post arrived before the loop could sleep.
 * Returns the number of fd events collected. */
LULL__HOT __attribute__((noinline)) static int
wait_for_work(lull_loop *loop, int64_t *timeout_io, uint64_t t0,
              bool *signalled) {
    int64_t timeout = *timeout_io;
    int how = timeout == 0                             ? LULL__AWAKE
              : loop->io_active || loop->futex_refused ? LULL__SLEEP_EPOLL
                                                       : LULL__SLEEP_FUTEX;
    if (how != LULL__AWAKE && !lull__remote_sleep(loop, how)) {
        *timeout_io = 0;
        *signalled = false;
        /* A post came before the sleep. A loop that would have slept on
         * its futex watches no fd: its epoll set holds only the wake-up
         * eventfd, so a look there finds nothing the drain after it would
         * not find. Skipping it saves the syscall on the path a
         * cross-thread ping-pong on one CPU takes about once per hop (the
         * reply lands while the poster, preempted by the thread it woke,
         * has not yet gone back to sleep). */
        if (how == LULL__SLEEP_FUTEX) {
            loop->events_len = loop->events_next = 0;
            return 0;
        }
        how = LULL__AWAKE;
        timeout = 0;
    }
    if (timeout > 0 && timeout < PRECISE_BELOW_NS && !loop->slack_checked)
        precise_timers(loop);
    int n = 0;
    if (how == LULL__SLEEP_FUTEX) {
        loop->events_len = loop->events_next = 0;
        int err = lull__remote_wait(loop, timeout, t0);
        *signalled = err == EINTR;
        /* Refused (a seccomp filter's EPERM or ENOSYS): every later sleep
         * would return at once and the loop would spin until its timer.
         * The epoll set holds the wake-up eventfd, so the loop sleeps
         * there from now on, as it does while it watches an fd. */
        if (err && err != EINTR && err != EAGAIN && err != ETIMEDOUT)
            loop->futex_refused = true;
    } else {
        n = lull__backend_poll(loop, timeout);
        loop->m.polls++;
        *signalled = n == -EINTR;
        if (n < 0 && n != -EINTR) {
            poll_failed(loop, n);
            *timeout_io = 0;
        }
        if (n < 0) n = 0;
        if (n == 0) loop->m.empty_polls++;
    }
    if (how != LULL__AWAKE) lull__remote_awake(loop);
    return n;
}

static void attribute_timer_wakeup(lull_loop *loop) {
    loop->audit_timer = false;
    lull__node *n = loop->due.next;
    if (n == &loop->due) return; /* EINTR, or a timer stopped meanwhile */
    lull__audit_timer_wakeup(loop, n);
}

/* After a wait that may have blocked: the time it ended, counted as idle,
 * and the wakeup counted. */
LULL__HOT __attribute__((noinline)) static uint64_t
woke(lull_loop *loop, int n, uint64_t t0, bool signalled, int64_t asked) {
    uint64_t t1 = lull__clock_real();
    loop->m.idle_ns += t1 - t0;
    /* t0 was read before the wait began, so a wait that ran out spans at
     * least its timeout from t0. */
    count_wakeup(loop, n, signalled, asked > 0 && t1 - t0 >= (uint64_t)asked);
    return t1;
}

/* Runs the callbacks of the fds the poll reported, until the slice ends
 * for lull_loop_stop. */
__attribute__((noinline)) static void dispatch_io(lull_loop *loop) {
    lull_io *io;
    int events;
    while (lull__backend_next(loop, &io, &events)) {
        lull__io_dispatch(loop, io, events);
        if (lull__after_callback(loop) && loop->stop) break;
    }
}

/* Counts a look that did not block (ready work, or nothing to wait for):
 * a poll, an empty one, or a failure, which ends the run (poll_failed).
 * Returns the events it collected. A loop that checks I/O on every hop
 * looks once per hop, so this is inline. */
static inline int counted_look(lull_loop *loop, int n) {
    loop->m.polls++;
    if (LULL_UNLIKELY(n < 0)) {
        if (n != -EINTR) poll_failed(loop, n);
        n = 0;
    }
    if (n == 0) loop->m.empty_polls++;
    return n;
}

/* After a poll: the fd callbacks, then the cross-thread posts. */
static inline void take_io_and_posts(lull_loop *loop, int n) {
    if (n) dispatch_io(loop);
    /* The one place cross-thread posts are taken, however the loop woke:
     * posts made while it was awake wrote no eventfd. */
    if (lull__remote_pending(loop)) lull__remote_drain(loop);
}

/* The loop's now moves to t, a reading just taken, and never back: after
 * unread slice ends t can be older than one a callback took since
 * (lull_loop_now_exact). */
static inline void move_now(lull_loop *loop, uint64_t t) {
    if (!loop->virtual_clock && t > loop->now) loop->now = t;
}

/* Polls once, starts the slice, then runs fd callbacks. Returns the number
 * of events the poll collected. */
__attribute__((always_inline)) static inline int
poll_and_dispatch_io(lull_loop *loop, int64_t timeout, uint64_t t0) {
    bool signalled = false;
    int64_t asked = timeout;
    int n = timeout == 0 ? counted_look(loop, lull__backend_poll(loop, 0))
                         : wait_for_work(loop, &timeout, t0, &signalled);
    /* A look that did not block took a few hundred ns: t0 still serves as
     * "now" and as the slice's start (which then counts the look as busy
     * time), and a loop that polls on every hop saves a clock read per
     * hop. A wait that blocked needs the time it ended. */
    uint64_t t1 = timeout != 0 ? woke(loop, n, t0, signalled, asked) : t0;
    move_now(loop, t1);
    lull__slice_begin(loop, t1);
    take_io_and_posts(loop, n);
    return n;
}

/* On the virtual clock with auto-advance, jumps to the next deadline when
 * nothing else could run. */
static void auto_advance(lull_loop *loop) {
    if (!loop->virtual_clock || !(loop->flags & LULL_LOOP_AUTO_ADVANCE)) return;
    if (!loop->heap.len) return;
    uint64_t deadline = lull__heap_min_deadline(&loop->heap);
    if (deadline > loop->now) loop->now = deadline;
}

#ifndef NDEBUG
/* Slots of the heap, and links of each queue, checked per iteration in
 * debug builds: enough to catch corruption early without making a test
 * with 100,000 timers, or 200,000 tasks run one an iteration, quadratic. */
#define VERIFY_HEAP_SLOTS 1024

/* The first VERIFY_HEAP_SLOTS links from the head (where the next run
 * starts) and the last one (where the next post lands). Each node's back
 * link is checked against the node before it, which the walk has already
 * checked, before its forward link is followed: a node overwritten whole
 * (a task freed while pending, its memory reused) trips the message, not
 * a fault on the garbage it now points to. */
static void verify_queue(const lull__node *q, const char *msg) {
    const lull__node *prev = q, *n = q->next;
    for (int i = 0; n != q && i < VERIFY_HEAP_SLOTS; prev = n, n = n->next, i++)
        LULL_ASSERT(n && n->prev == prev, msg);
    LULL_ASSERT(n != q || q->prev == prev, msg);
    LULL_ASSERT(q->prev->next == q, msg);
}

/* Walks the loop's structures at an iteration boundary (libev's ev_verify):
 * a handle freed while armed, or memory scribbled over, trips here rather
 * than at some later, unrelated callback. */
static void loop_verify(const lull_loop *loop) {
    verify_queue(&loop->ready, "lull: ready queue corrupted (a task freed or "
                               "set up again while pending?)");
    verify_queue(&loop->due, "lull: due list corrupted (a timer freed or set "
                             "up again while armed?)");
    lull__heap_verify(&loop->heap, loop, VERIFY_HEAP_SLOTS);
    /* Started watchers (src/backend_epoll.c), as many slots as the heap. */
    uint32_t n = loop->io_slots_cap < VERIFY_HEAP_SLOTS ? loop->io_slots_cap
                                                        : VERIFY_HEAP_SLOTS;
    for (uint32_t i = 0; i < n; i++) {
        const lull_io *io = loop->io_slots[i].io;
        LULL_ASSERT(!io || (io->slot == i && io->loop == loop &&
                            (io->flags & LULL__IO_ACTIVE)),
                    "lull: fd watcher corrupted (freed while started?)");
    }
}
#endif

/* The last steps of every iteration: the flush tasks, then the slice ends.
 * Returns the reading that ends it. */
__attribute__((always_inline)) static inline uint64_t
end_iteration(lull_loop *loop) {
    run_flush(loop);
    uint64_t t_end = lull__slice_end_time(loop);
    lull__slice_end(loop, t_end);
#ifndef NDEBUG
    loop_verify(loop);
#endif
    return t_end;
}

/* An iteration from its fd callbacks' end: timers due, then ready tasks. */
__attribute__((always_inline)) static inline uint64_t
iterate_rest(lull_loop *loop, bool may_block, int collected) {
    run_flush(loop); /* replies written by fd callbacks leave now */
    /* Only where the real clock would have waited: a loop nothing keeps
     * alive (unreferenced timers alone) does not wait, so a ONCE run must
     * not jump virtual time to such a timer either. */
    if (LULL_UNLIKELY(loop->flags & LULL_LOOP_AUTO_ADVANCE) && may_block &&
        collected == 0 && !loop->stop && !ready_now(loop) &&
        alive_for_run(loop))
        auto_advance(loop);
    if (!loop->stop) {
        /* A settle freezes time for timers (settle_loop). */
        if (loop->heap.len)
            lull__timers_expire(loop, LULL_UNLIKELY(loop->settling)
                                          ? loop->settle_now
                                          : loop->now);
        if (LULL_UNLIKELY(loop->audit_timer)) attribute_timer_wakeup(loop);
        /* run_due also empties the overrun table once the due list
         * drains (src/timer.c). */
        if (!lull__queue_empty(&loop->due) || loop->overruns_len)
            lull__timers_run_due(loop);
    }
    if (!loop->stop) {
        if (loop->slice_spent) lull__slice_renew(loop);
        lull__run_queue(loop, &loop->ready);
    }
    return end_iteration(loop);
}

/* One iteration. t0 is a clock reading taken just before (the previous
 * iteration's end, when they run back to back); returns the reading that
 * ends this one, so each iteration reads the clock twice in all. Inlined
 * into its callers' loops (iterate_once for single iterations): a loop
 * that checks I/O on every hop iterates once per hop, and the call's
 * saving and restoring of registers was a tenth of such a hop. */
__attribute__((always_inline)) static inline uint64_t
iterate(lull_loop *loop, bool may_block, uint64_t t0) {
    loop->m.iterations++;
    int64_t timeout = 0;
    if (may_block && !ready_now(loop)) { /* ready work: only a look */
        /* An every_callback slice that ended unread left t0 behind: a wait
         * needs the real time (the timeout, idle_ns). */
        if (LULL_UNLIKELY(loop->time_stale)) t0 = lull__time_refresh(loop, t0);
        timeout = poll_timeout(loop, t0);
    }
    int collected = poll_and_dispatch_io(loop, timeout, t0);
    return iterate_rest(loop, may_block, collected);
}

LULL__HOT __attribute__((noinline)) static uint64_t
iterate_once(lull_loop *loop, bool may_block, uint64_t t0) {
    return iterate(loop, may_block, t0);
}

/* ------------------------------------------------------------ plain hops
 * A loop that checks I/O on every hop (every_callback) spends nearly all
 * its iterations the same way: a look that finds nothing, one ready task,
 * a slice that ends unread (src/clock.c). Such hops run here, without the
 * general iteration's steps for what is not there. The slice the first of
 * them begins stays open from one to the next: nothing runs between one
 * hop's end and the next one's look, and an unread end and the next
 * intact begin leave everything else as it was, so only what a callback
 * may change is reset. Whatever else comes up leaves by the general
 * iteration's own remaining steps, from where it came up: readiness or a
 * post found by the look, a task that did not end its slice, a timer armed,
 * a flush task queued, a clock read, a stop. So plain hops and general
 * iterations leave the loop in the same states, hop for hop, and count the
 * same iterations, polls and callbacks. */

/* Nothing waits but ready tasks: no stop, timer, flush task, stale
 * registration or wakeup to attribute. */
static inline bool plain_hops_only_tasks(const lull_loop *loop) {
    return !loop->stop && !lull__queue_empty(&loop->ready) &&
           lull__queue_empty(&loop->due) && lull__queue_empty(&loop->flush) &&
           (loop->heap.len | loop->heap.pend) == 0 && !loop->overruns_len &&
           !loop->backend_stale && !loop->audit_timer;
}

/* The unread state, between hops: the previous slice ended unread at t,
 * its quantum still as its start left it, and nothing waits but tasks. */
static inline bool plain_hop_may_start(const lull_loop *loop, uint64_t t) {
    return loop->time_stale && loop->quantum_intact && t == loop->slice_start &&
           t == loop->read_time && plain_hops_only_tasks(loop);
}

/* After a hop's callback: it asked nothing of the slice (no
 * lull_loop_should_yield or lull_loop_stop, which move the countdown or
 * spend the slice; no timer armed; no flush task queued), and a task is
 * ready. */
static inline bool plain_hop_asked_nothing(const lull_loop *loop) {
    /* The hop began its slice's countdown at 1. A stop (lull_loop_stop, a
     * failed poll) puts it at 0, and so does every slice check (a
     * should_yield's unread end, or its read, which spends the slice or
     * plans the next read and clears time_stale): still 1, and neither
     * came. */
    return loop->countdown == 1 && (loop->heap.len | loop->heap.pend) == 0 &&
           !lull__queue_empty(&loop->ready) && lull__queue_empty(&loop->flush);
}

/* ... and the next unread end is not a read's turn. The slice's unread
 * end (lull__slice_check) and the next hop's begin would then together
 * leave everything as it was but the count of unread ends. */
static inline bool plain_hop_untouched(const lull_loop *loop) {
    return plain_hop_asked_nothing(loop) &&
           loop->unread_ends + 1 < LULL__EVERY_CALLBACK_READS;
}

/* The look found readiness, a post, or failed: the general iteration
 * from its poll on (poll_and_dispatch_io). */
__attribute__((noinline)) static uint64_t plain_hop_found(lull_loop *loop,
                                                          int n) {
    /* Counted as a plain hop, whose look found nothing: an iteration whose
     * look is counted here. */
    loop->plain_hops--;
    loop->m.iterations++;
    n = counted_look(loop, n);
    take_io_and_posts(loop, n);
    return iterate_rest(loop, true, n);
}

/* The callback left something else to do: the rest of the ready queue's
 * run (when it did not end the slice), then the iteration's end. */
LULL__HOT __attribute__((noinline)) static uint64_t
plain_hop_ends(lull_loop *loop, bool spent) {
    if (!spent) lull__run_queue(loop, &loop->ready);
    return end_iteration(loop);
}

/* A hop plain_hop_untouched turned away. One such hop comes in every
 * LULL__EVERY_CALLBACK_READS however little the callbacks ask: the one
 * whose end reads the clock. Its read and its slice's end are the general
 * steps (plain_hop_ends); the hops go on from there rather than leave for
 * the general iteration and come back, as they would the moment that
 * iteration's hop ended: the next hop begins its slice at the reading, as
 * poll_and_dispatch_io would, and it ends as a plain hop does. So
 * time_stale is set at that begin, not at the hop's end: only a slice's
 * end reads it, and every end writes it before (an unread end sets it, a
 * read clears it, and an end with neither reads). Anything a callback
 * asked for leaves, as from any hop. Returns true when the hops go on,
 * false when the general iteration takes over (*t: the end's reading). */
LULL__HOT __attribute__((noinline)) static bool
plain_hop_turned(lull_loop *loop, uint64_t *t) {
    /* plain_hop_untouched but for the reading's turn. */
    bool read_due = plain_hop_asked_nothing(loop) &&
                    loop->unread_ends + 1 >= LULL__EVERY_CALLBACK_READS;
    *t = plain_hop_ends(loop, lull__after_callback(loop));
    if (!read_due || !plain_hops_only_tasks(loop)) return false;
    move_now(loop, *t);
    lull__slice_begin(loop, *t);
    loop->time_stale = true;
    return true;
}

/* Runs plain hops from the unread state at t; returns the reading that
 * ends the last iteration, as iterate does. */
LULL__HOT __attribute__((noinline)) static uint64_t plain_hops(lull_loop *loop,
                                                               uint64_t t) {
    /* As poll_and_dispatch_io begins a slice, once for all the hops: now
     * moves to t (a renewed slice, lull__slice_renew, starts at a reading
     * now has not taken), and the begin takes its intact case. */
    move_now(loop, t);
    lull__slice_begin(loop, t);
    /* An empty look stores nothing: no event is left from before. */
    loop->events_len = loop->events_next = 0;
    for (;;) {
        /* The iteration, its look and that look's finding nothing, counted
         * at once (lull_loop_metrics): before the look, as the general
         * iteration counts it; plain_hop_found takes back what the look
         * did not find. */
        loop->plain_hops++;
        int n = lull__backend_look(loop);
        if (LULL_UNLIKELY(n != 0 || lull__remote_pending(loop)))
            return plain_hop_found(loop, n);
        lull__node *node = loop->ready.next;
        LULL_ASSERT(lull__queue_head_ok(&loop->ready, node),
                    "lull: ready queue corrupted (a task freed or set up again "
                    "while pending?)");
        lull__queue_remove(node);
        lull__dispatch_node(loop, node);
        if (LULL_UNLIKELY(!plain_hop_untouched(loop))) {
            if (!plain_hop_turned(loop, &t)) return t;
            continue;
        }
        loop->unread_ends++;
#ifndef NDEBUG
        loop_verify(loop);
#endif
    }
}

/* A run adopts the loop: the common way to give a loop to a thread is to
 * create and set it up, then start the thread that runs it, and that
 * thread must then be free to post between its own runs. The hand-over is
 * ordered by whatever started the thread. */
LULL__HOT static int run_begin(lull_loop *loop) {
    LULL_ASSERT_OWN_PROCESS(loop);
    /* Claimed with a compare-and-swap, not a test and a store: two threads
     * that called lull_loop_run at once both saw it false and ran the loop
     * together. A failed claim writes nothing, so a nested run (the owner,
     * inside a callback) costs no more than the test did; a claim refused
     * to another thread is misuse, which debug builds stop (the owner it
     * reads may be a step behind the run that won, never a wrong thread
     * passed as the owner). */
    bool idle = false;
    if (!__atomic_compare_exchange_n(&loop->running, &idle, true, false,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        LULL_ASSERT(
            pthread_equal(__atomic_load_n(&loop->owner, __ATOMIC_RELAXED),
                          pthread_self()),
            "lull: lull_loop_run on a thread while another runs the "
            "loop");
        return -EBUSY;
    }
    if (loop->embedded) {
        loop->embedded = false;
        lull__remote_awake(loop);
    }
    if (!pthread_equal(loop->owner, pthread_self())) lull__signals_take(loop);
    __atomic_store_n(&loop->owner, pthread_self(), __ATOMIC_RELAXED);
    loop->stop = false;
    loop->poll_error = 0;
    loop->slack_checked = false;
    loop->slack_restore = -1;
    return 0;
}

LULL__HOT static void run_end(lull_loop *loop) {
    /* The busy time an every_callback run has not read yet. */
    if (loop->time_stale) (void)lull__time_refresh(loop, loop->read_time);
    if (loop->slack_restore >= 0)
        prctl(PR_SET_TIMERSLACK, loop->slack_restore, 0, 0, 0);
    loop->stop = false;
    /* Last: a run another thread begins next sees this one finished. */
    __atomic_store_n(&loop->running, false, __ATOMIC_RELEASE);
}

/* LULL_RUN_ONCE: one iteration that may block. A wait a program's signal
 * handler interrupted (EINTR: SIGCHLD, a profiler's SIGPROF) with nothing
 * to run is taken again for the time left, as libuv's uv_run ONCE does:
 * otherwise any signal ended the run early, its timer not run. So is a
 * futex sleep the kernel refused at once (the loop sleeps in epoll from
 * then on, wait_for_work). So is a wake-up with no post behind it: a
 * poster's eventfd write or FUTEX_WAKE that lands after the loop, woken by
 * something else, already ran its post (remote.c wakes after the push).
 * Each such wake is used up (an eventfd edge, a futex wake), so waiting
 * again cannot spin. A wait ended by fd readiness still returns, as
 * before, whatever ran. */
static void run_once(lull_loop *loop, uint64_t t) {
    for (;;) {
        uint64_t ran = loop->tasks_run, wakeups = loop->m.wakeups;
        uint64_t io = loop->m.wakeups_io;
        bool refused = loop->futex_refused;
        t = iterate_once(loop, true, t);
        if (loop->stop || loop->tasks_run != ran || loop->m.wakeups_io != io ||
            (loop->m.wakeups == wakeups && loop->futex_refused == refused))
            return;
    }
}

LULL__HOT int lull_loop_run(lull_loop *loop, lull_run_mode mode) {
    if (!loop) return -EINVAL;
    if (mode != LULL_RUN_DEFAULT && mode != LULL_RUN_ONCE &&
        mode != LULL_RUN_NOWAIT)
        return -EINVAL;
    int err = run_begin(loop);
    if (err) return err;
    uint64_t t = lull__clock_real();
    if (mode == LULL_RUN_DEFAULT) {
        bool plain = loop->every_callback && !loop->virtual_clock &&
                     !(loop->flags & LULL_LOOP_AUTO_ADVANCE);
        while (!loop->stop && alive_for_run(loop)) {
            if (plain && plain_hop_may_start(loop, t))
                t = plain_hops(loop, t);
            else
                t = iterate(loop, true, t);
        }
    } else if (mode == LULL_RUN_ONCE) {
        run_once(loop, t);
    } else {
        iterate_once(loop, false, t);
    }
    run_end(loop);
    return loop->poll_error;
}

/* ------------------------------------------------------------ embedding */

int lull_loop_backend_fd(lull_loop *loop) {
    if (!loop) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    return lull__backend_host_fd(loop);
}

/* The host's wait is the loop's sleep, done elsewhere: it is announced as
 * an epoll sleep, so that a poster writes the eventfd (which the epoll fd
 * then reports) instead of counting on the loop to look before it sleeps.
 * A post that came first makes the timeout 0 (the same Dekker pair as the
 * loop's own sleep, src/remote.c). The next run starts awake. */
int lull_loop_backend_timeout(lull_loop *loop, int64_t *timeout_ns) {
    if (!loop || !timeout_ns) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    if (loop->running) return -EBUSY;
    uint64_t now = lull__clock_real();
    int64_t timeout = poll_timeout(loop, now);
    /* poll_timeout's 0 for "nothing to wait for" is, to a host, a wait for
     * the fd alone, or for the earliest timer: an unreferenced one does not
     * keep lull_loop_run going, but the host keeps going on its own, and
     * without this deadline the timer would fire only when the fd next
     * brought the host back. */
    if (timeout == 0 && !ready_now(loop) && !alive_for_run(loop))
        timeout = lull__timers_next_ns(loop, now);
    /* On the virtual clock time moves only by lull_loop_advance: a
     * NOWAIT run never jumps to a deadline, so only work ready now counts. */
    if (loop->virtual_clock && !ready_now(loop)) timeout = -1;
    /* A timer armed for ever (its deadline saturated at UINT64_MAX) or for
     * centuries: the rounding up to ms the contract gives the host,
     * ns + 999999, must not overflow. A host woken after 292 years asks
     * again. */
    if (timeout > INT64_MAX - 999999) timeout = INT64_MAX - 999999;
    if (timeout != 0) {
        loop->embedded = true;
        if (!lull__remote_sleep(loop, LULL__SLEEP_EPOLL)) timeout = 0;
    }
    *timeout_ns = timeout;
    return 0;
}

void lull_loop_stop(lull_loop *loop) {
    if (!loop) return;
    /* Before the test of `running`, which another thread's run writes: a
     * stop from the wrong thread is misuse whether or not a run is on. */
    LULL_ASSERT_LOOP_THREAD(loop);
    if (!loop->running) return;
    loop->stop = true;
    loop->countdown = 0;
}

/* Marks io as called in this settle round, and notes whether the round
 * before called it too. Called before the callback, which may free io. */
void lull__settle_note_io(lull_loop *loop, lull_io *io) {
    uint32_t round = loop->settle_round & LULL__IO_ROUND_MASK;
    uint32_t last = io->flags >> LULL__IO_ROUND_SHIFT;
    if (last != ((round - 1) & LULL__IO_ROUND_MASK)) loop->settle_fresh = true;
    io->flags = (io->flags & ((1u << LULL__IO_ROUND_SHIFT) - 1)) |
                round << LULL__IO_ROUND_SHIFT;
    loop->settle_fd_calls++;
}

/* Runs rounds (iterations that never block) until nothing more can come of
 * it: a round that ran no callback, or only fd callbacks of watchers the
 * round before also called, with nothing queued after it. Each round polls
 * fds once. Without the second condition a level-triggered fd that stays
 * ready (a writable pipe, a peer's EOF left unread) made settle spin
 * forever; with it, such a watcher runs in two rounds and settle returns,
 * while readiness that moves (an fd callback writes, another fd becomes
 * readable in the next round) still counts as progress. Stamps are 24 bits,
 * so a watcher last called exactly 2^24 rounds ago can pass for the round
 * before: settle would then end one round early, never run forever. */
static void settle_loop(lull_loop *loop) {
    uint64_t t = lull__clock_real();
    loop->settling = true;
    /* Time frozen for timers, on the real clock too: those due by now fire
     * (a repeating one once, for every period it missed); those that come
     * due during the rounds wait for the next run. A repeating timer with
     * a period shorter than a round was otherwise due in every round, and
     * settle never returned. */
    move_now(loop, t);
    loop->settle_now = loop->now;
    /* Skip a round number, so no stamp from an earlier settle reads as
     * "the round before" the first round of this one. */
    loop->settle_round += 2;
    for (;;) {
        uint64_t before = loop->tasks_run;
        loop->settle_round++;
        loop->settle_fd_calls = 0;
        loop->settle_fresh = false;
        t = iterate_once(loop, false, t);
        if (loop->stop) break;
        bool only_repeats = loop->tasks_run - before == loop->settle_fd_calls &&
                            !loop->settle_fresh;
        if (only_repeats && !ready_now(loop) && !lull__remote_pending(loop))
            break;
    }
    loop->settling = false;
}

int lull_loop_settle(lull_loop *loop) {
    if (!loop) return -EINVAL;
    int err = run_begin(loop);
    if (err) return err;
    uint64_t before = loop->tasks_run;
    settle_loop(loop);
    run_end(loop);
    if (loop->poll_error) return loop->poll_error;
    uint64_t ran = loop->tasks_run - before;
    return ran > INT32_MAX ? INT32_MAX : (int)ran;
}

void lull_loop_advance(lull_loop *loop, uint64_t ns) {
    if (!loop || !loop->virtual_clock) return;
    LULL_ASSERT(!loop->running, "lull: lull_loop_advance inside a callback");
    if (run_begin(loop) != 0) return;
    uint64_t target = loop->now + ns;
    if (target < loop->now) target = UINT64_MAX;
    settle_loop(loop);
    while (!loop->stop && loop->heap.len &&
           lull__heap_min_deadline(&loop->heap) <= target) {
        uint64_t deadline = lull__heap_min_deadline(&loop->heap);
        if (deadline > loop->now) loop->now = deadline;
        settle_loop(loop);
    }
    if (!loop->stop) {
        loop->now = target;
        settle_loop(loop);
    }
    run_end(loop);
}

/* ---------------------------------------------------------------- fork */

/* In a child after fork(): the epoll set and the wake-up eventfd are still
 * the parent's, shared through the fork, so anything the child registered
 * or removed would change what the parent's loop sees. The child gets a new
 * set holding every started watcher (the backend's rebuild, which also
 * drops readiness collected before the fork) and its own eventfd; the
 * parent's eventfd is left out of the new set, or the parent's posts would
 * wake the child. */
int lull_loop_fork(lull_loop *loop) {
    if (!loop) return -EINVAL;
    /* No fork since the loop's kernel state was made (or last remade) in
     * this process: what the steps below close and replace is this
     * process's own, in use by a host (its fd) and by posting threads. */
    if (loop->pid == getpid()) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* A failure at any step returns with loop->pid still the parent's, so
     * the child may call again (an fd freed): each step redoes what it
     * did, and none has touched the parent's state (test_faults,
     * fork_failing_midway_can_be_called_again). */
    /* Before the rebuild, which registers the inotify fd's number. */
    int err = lull__fsevents_fork(loop);
    if (err == 0) err = lull__signals_fork(loop);
    if (err) return err;
    /* The host's set is the parent's too: the rebuild must not add the
     * child's set to it. The child makes its own at its next call. */
    lull__backend_host_forget(loop);
    int wake_fd = loop->wake_fd;
    loop->wake_fd = -1;
    err = lull__backend_rebuild(loop);
    if (err) {
        loop->wake_fd = wake_fd;
        return err;
    }
    err = lull__remote_fork(loop);
    if (err) return err;
    loop->pid = getpid(); /* the kernel state is this one's */
    lull__notify_fork(loop);
    /* A host that asked lull_loop_backend_timeout before the fork and has
     * not run the loop since waits in the child as well, on the new fd
     * (lull_loop_fork is no run). */
    if (loop->embedded) lull__remote_fork_host(loop, ready_now(loop));
    return 0;
}
