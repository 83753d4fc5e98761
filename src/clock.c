/* Clocks and the slice of busy work (C5, C7).
 *
 * Owns: the real clock read, the cached "now", and the quantum. A slice
 * begins when a poll returns and ends when the loop polls again; within it,
 * callbacks and lull_loop_should_yield count down loop->countdown, and only
 * when it reaches zero is the clock read (lull__slice_check). The stride
 * between reads restarts at 1 each slice and adapts to the pace of the work: it
 * may at most double per read, never exceeds STRIDE_MAX calls, and a read is
 * planned no later than half the remaining quantum (but at least quantum/32
 * ahead), so the slice overshoots by about quantum/32 at a steady pace and a
 * sudden slowdown costs at most one stride of the slow calls.
 *
 * A slice also ends when a timer comes due during it (a read finds the
 * heap's earliest deadline passed), once its first quantum/8 has run: the
 * timer then waits about one stride, not the rest of the quantum, for the
 * loop to run it before further ready tasks. Only on the real clock, only
 * heap timers (zero-delay timers are turns in the ready queue, C3), and not
 * in the fresh quantum tasks get after fds and timers ran a whole one.
 *
 * A quantum under LULL__EVERY_CALLBACK_NS (quantum_ns = 1: I/O checked on
 * every hop) is spent by any callback, whatever a reading after it says
 * (lull_loop_should_yield inside one still compares). Such a slice ends
 * after each callback without reading the clock
 * (end_unread), the end standing at the slice's newest reading; the loop
 * reads at every 64th end, at every end while a timer is armed or an arm
 * deferred, before it waits and when a run returns (lull__time_refresh),
 * so now, busy_ns, stalls and the latency samples lag by at most 64 hops
 * and no timer fires later for it. A poll then costs the loop its look
 * and no clock read (~40 ns here, a quarter of an epoll_wait(0)).
 *
 * The quantum is real elapsed time on both clocks: it bounds CPU work, not
 * timers. Loop thread only. */
#include <errno.h>
#include <time.h>

#include "internal.h"

/* Reads planned at most this fraction of the quantum apart near the end of
 * a slice: 1/32 keeps the overshoot near 3%, well inside the 10% target. */
#define SLICE_MIN_GAP_SHIFT 5
/* At most this many calls between clock reads, whatever the pace. The
 * stride is planned from the pace seen so far, so when cheap records are
 * followed by expensive ones, the overshoot is one stride of the expensive
 * kind: 32 calls of 1 us records is 32 us, 6% of a 0.5 ms quantum. A read
 * costs about 26 ns, so the cap adds under 1 ns per call. */
#define STRIDE_MAX 32
/* Latency samples start at most this often: 10,000 a second at ~80 ns each
 * (three clock reads and a histogram update) is under 0.1% of a core, and
 * a loop with tiny slices (one ping-pong per wake) is not taxed per hop. */
#define SAMPLE_GAP_NS 100000u

LULL__HOT uint64_t lull__clock_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void lull__assert_fail(const char *msg, const char *file, int line) {
    fprintf(stderr, "%s (%s:%d)\n", msg, file, line);
    abort();
}

bool lull__on_loop_thread(const lull_loop *loop) {
    return pthread_equal(loop->owner, pthread_self());
}

uint64_t lull_loop_now(lull_loop *loop) {
    return loop ? loop->now : 0;
}

uint64_t lull_loop_now_exact(lull_loop *loop) {
    if (!loop) return 0;
    if (!loop->virtual_clock) {
        loop->now = lull__clock_real();
        lull__timers_flush(loop, loop->now);
    }
    return loop->now;
}

uint64_t lull_loop_quantum(lull_loop *loop) {
    return loop ? loop->quantum_ns : 0;
}

/* Gives ready tasks a fresh quantum when fd callbacks and due timers spent
 * the slice: without it, a loop overloaded with timers would run one task
 * per iteration and starve the work already queued. When they ran the whole
 * quantum, timers coming due do not cut that fresh one short either: the
 * loop is overloaded, and tasks keep the whole quantum per iteration they
 * had before timers could end a slice, not an eighth of it. */
void lull__slice_renew(lull_loop *loop) {
    if (!loop->slice_spent || loop->stop) return;
    uint64_t t = lull__clock_real();
    lull__timers_flush(loop, t);
    bool overrun = t >= loop->slice_deadline;
    if (t - loop->slice_start >= loop->stall_ns) lull__note_stall(loop, t);
    lull__start_quantum(loop, t);
    if (overrun) {
        loop->slice_timers_from = loop->slice_deadline;
        loop->quantum_intact = false;
    }
}

/* Counts a slice that ran past stall_ns once, and blames the callback that
 * was running when the clock was read: exact for the common case of one
 * long callback, a neighbour's name when a long one hides inside a stride. */
void lull__note_stall(lull_loop *loop, uint64_t t) {
    uint64_t len = t - loop->slice_start;
    loop->quantum_intact = false;
    if (!loop->slice_stalled) {
        loop->slice_stalled = true;
        loop->m.stalls++;
    }
    if (len > loop->m.worst_stall_ns) {
        loop->m.worst_stall_ns = len;
        loop->m.worst_stall = lull__name_of(loop, loop->current);
    }
}

/* Plans the next clock read from the pace seen since the last one. */
static void plan_next_read(lull_loop *loop, uint64_t t) {
    uint64_t gap = t - loop->last_check;
    /* No division where none is needed: a loop woken for each callback (a
     * cross-thread ping-pong) plans a read in every iteration, and a
     * 64-bit division is among the slowest instructions. A first read's
     * stride is 1, and a pace fast enough for the largest stride allowed
     * (the usual case) is found by a multiplication; the result is the
     * same as dividing. */
    uint64_t per_call = loop->stride == 1 ? gap : gap / (uint64_t)loop->stride;
    uint64_t remaining = loop->slice_deadline - t;
    uint64_t target = remaining / 2;
    uint64_t floor = loop->quantum_ns >> SLICE_MIN_GAP_SHIFT;
    if (target < floor) target = floor;
    int64_t cap = loop->stride * 2;
    if (cap > STRIDE_MAX) cap = STRIDE_MAX;
    uint64_t cap_ns;
    int64_t stride = cap;
    if (per_call && (__builtin_mul_overflow(per_call, (uint64_t)cap, &cap_ns) ||
                     cap_ns > target)) {
        stride = (int64_t)(target / per_call); /* < cap */
        if (stride < 1) stride = 1;
    }
    loop->stride = stride;
    loop->countdown = stride;
    loop->last_check = t;
    loop->quantum_intact = false;
}

#ifdef LULL_TEST_YIELD_OFTEN
/* Test builds only (cmake -DLULL_TEST_YIELD_OFTEN=ON): every slice check
 * ends the slice with probability 1/2, whatever the clock says, and checks
 * come after every callback, so the suite runs with the slice boundaries a
 * slow machine or a tiny quantum would give (Seastar's debug mode preempts
 * after every task the same way). Nothing the contracts order may change.
 * A fixed per-thread xorshift keeps a run reproducible. */
static bool yield_often(void) {
    static _Thread_local uint64_t x = 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x & 1;
}
#endif

/* A timer came due during the slice (its deadline passed since the loop
 * last expired timers): it runs before further ready tasks, as when the
 * quantum is spent. Only on the real clock: virtual time does not move
 * during a slice, so no virtual timer can come due inside one. Not before
 * slice_timers_from, so ready tasks keep a share of the loop however many
 * timers fire. Zero-delay timers are turns in the ready queue (C3), never
 * in the heap, so they do not end the slice. */
static inline bool timer_came_due(const lull_loop *loop, uint64_t t) {
    return !loop->virtual_clock && loop->heap.len &&
           t >= loop->slice_timers_from &&
           lull__heap_min_deadline(&loop->heap) <= t;
}

/* The read behind lull__slice_check (internal.h), which takes an
 * every_callback slice's unread end itself. */
LULL__HOT bool lull__slice_check_read(lull_loop *loop) {
    if (!loop->in_slice) {
        loop->countdown = LULL__COUNTDOWN_IDLE;
        return false;
    }
    if (loop->stop) {
        /* The slice ends here as a spent one does, and its check flushes
         * the deferred arms as that one does: a callback that stopped
         * the run and goes on working after its lull_loop_should_yield
         * call would otherwise stretch them to the slice's end. */
        if (LULL_UNLIKELY(loop->heap.pend)) lull__timers_flush_now(loop);
        loop->countdown = 0;
        return true;
    }
    if (loop->slice_spent) {
        /* Fd callbacks and due timers still run after the quantum is
         * spent: an arm one of them deferred is flushed here all the
         * same, so its delay counts from when its callback returned. */
        if (LULL_UNLIKELY(loop->heap.pend)) lull__timers_flush_now(loop);
        loop->countdown = 0;
        return true;
    }
#ifdef LULL_TEST_YIELD_OFTEN
    if (yield_often()) {
        if (loop->heap.pend) lull__timers_flush_now(loop);
        loop->slice_spent = true;
        loop->countdown = 0;
        return true;
    }
#endif
    uint64_t t = lull__clock_real();
    if (!loop->virtual_clock) loop->now = t;
    lull__timers_flush(loop, t); /* before a deferred arm could come due */
    loop->unread_ends = 0;
    loop->time_stale = false;
    loop->read_time = t;
    loop->read_tasks = loop->tasks_run;
    if (t - loop->sample_last >= SAMPLE_GAP_NS) {
        loop->sample_armed = true;
        loop->sample_last = t;
    }
    if (t - loop->slice_start >= loop->stall_ns) lull__note_stall(loop, t);
    /* An every-hop loop's slice ends after every callback, whatever the
     * reading says: a quantum under 1 us is not always shorter than the
     * look and the callback together (10 ns hops against a 500 ns
     * quantum), and an unspent read planned a stride of callbacks run
     * without a look between them. Only lull_loop_should_yield, asked
     * inside a callback, still hears whether the quantum is spent. */
    if (t >= loop->slice_deadline || timer_came_due(loop, t) ||
        (loop->every_callback && !loop->yield_check)) {
        loop->slice_spent = true;
        loop->countdown = 0;
        return true;
    }
    plan_next_read(loop, t);
    /* ... and its next slice check comes when that callback returns, if
     * not at its next lull_loop_should_yield call. */
    if (loop->every_callback) {
        loop->stride = 1;
        loop->countdown = 0;
    }
#ifdef LULL_TEST_YIELD_OFTEN
    loop->countdown = 0;
#endif
    return false;
}

/* A reading that flushes the deferred arms (lull__slice_end_time). */
LULL__HOT uint64_t lull__slice_read_and_flush(lull_loop *loop) {
    uint64_t t = lull__clock_real();
    lull__timers_flush(loop, t);
    loop->time_stale = false;
    loop->unread_ends = 0;
    loop->read_time = t;
    return t;
}

LULL__HOT uint64_t lull__time_refresh(lull_loop *loop, uint64_t stale) {
    uint64_t t = lull__clock_real();
    loop->m.busy_ns += t - stale;
    loop->time_stale = false;
    loop->unread_ends = 0;
    loop->read_time = t;
    if (!loop->virtual_clock) loop->now = t;
    return t;
}

/* A read made here is inside a callback that goes on running: it cannot
 * end the slice (lull__slice_end_time). */
static bool should_yield_check(lull_loop *loop) {
    loop->yield_check = true;
    bool spent = lull__slice_check(loop);
    loop->yield_check = false;
    loop->read_tasks = UINT64_MAX;
    return spent;
}

bool lull_loop_should_yield(lull_loop *loop) {
    if (LULL_UNLIKELY(!loop)) return false;
    return --loop->countdown <= 0 && should_yield_check(loop);
}
