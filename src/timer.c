/* Timers (C3) on top of the heap and the ready queue.
 *
 * Owns: arming, re-arming, stopping and firing. A timer is in exactly one of
 * three places while armed: the heap (delay > 0, not yet due; or waiting
 * after it for its deadline, a deferred arm, below), the due list (expired
 * this iteration, run in (deadline, arm) order before ready tasks), or the
 * ready queue (delay 0: queued like a posted task, same order, same cost).
 * Only heap timers, deferred ones included, are counted for liveness.
 * Repeating timers keep their phase: the next deadline is the previous one
 * plus the period; periods the loop was too busy to see are skipped, one
 * fire each time (no burst). lull_loop_advance steps through every
 * deadline, so on the virtual clock nothing is ever skipped. Loop thread
 * only (lull_timer_start and lull_timer_stop assert it in debug builds).
 *
 * Never early (lull.h, lull_timer_start): on the real clock a timer never fires
 * before delay_ns has passed since its lull_timer_start call on
 * CLOCK_MONOTONIC. The cached "now" can be arbitrarily old at an arm (a
 * callback that ran long, set-up code before lull_loop_run); libuv and libev
 * count from it and fire early. lull counts from a reading taken at the call or
 * after it, never before:
 *
 *  - Inside a slice on the real clock (loop->defer_arms: a callback of a
 *    running loop), the first delayed arm of a callback reads
 *    CLOCK_MONOTONIC (the vDSO) and counts from it: exact, so a watchdog
 *    armed before long synchronous work, or a producer's one arm per
 *    task, is never stretched (deferring every arm to the next stride
 *    read cost a producer of 1 us tasks 14 us at the
 *    median, and milliseconds at p99.9 where the thread was preempted
 *    between the arm and that read). The reading also flushes the arms deferred
 * before it and refreshes the cached now (loop->arm_read_tasks says which
 * callback read, by tasks_run).
 *  - Deferred arms: a further delayed arm of that callback (a batch of
 *    request timeouts re-armed by one read callback) reads no clock
 *    (unless it finds the heap full: then it reads, so that the growth
 *    does not stretch it): it stores its delay in the heap's deferred
 *    area (heap.h), and the loop's next real-clock reading gives every
 *    deferred arm its deadline, reading + delay (lull__timers_flush;
 *    clock.c calls it at each reading). Why that is never early: the
 *    reading is taken on the loop's thread after the arm returned
 *    (program order), and CLOCK_MONOTONIC never goes back, on any CPU,
 *    so the reading is at least the time of the call. A batch of arms
 *    thus pays one read (~25-40 ns here, about an arm + cancel with 10^6
 *    armed). The lateness it costs is bounded: a deferral cuts the
 *    stride to its next slice check (defer_ends_soon), so the reading
 *    comes when the arming callback returns or at its next
 *    lull_loop_should_yield call, whichever is first, and at the latest
 *    when the slice ends, before the loop polls again (`lull-lab turns`
 *    measures these delays). Until its flush a deferred timer is armed
 *    (active, keeps the loop alive) but has no deadline:
 *    lull_timer_deadline and lull_loop_walk take a reading to give it
 *    one.
 *    Threads and processes: a deferred arm never outlives its slice (the
 *    slice's end asserts it), so a loop that moves to another thread
 *    between runs carries none; a child forked inside a callback holds a
 *    copy of the parent's slice, and its loop flushes the copy by its own
 *    readings when the callback returns.
 *    The five rows (README, "The contracts"), though nothing runs on its own:
 *    trigger: a real-clock reading the loop takes anyway (the slice check
 *    after the arming callback or at its next lull_loop_should_yield, the
 *    slice's end, lull_loop_now_exact, the next callback's first arm);
 *    source of truth: the deferred area (heap.pend); pending-work
 *    predicate: heap.pend > 0; next deadline or retry: none, the next
 *    slice check reads at the latest; quiet condition: always outside a
 *    slice.
 *  - Outside a slice (set-up code, another loop's callback) no reading is
 *    coming at a known time, so a delayed arm reads CLOCK_MONOTONIC (the
 *    vDSO) and counts from it, as lull_loop_now_exact does.
 *  - The virtual clock is exact, never read, and never deferred: a
 *    deadline is the virtual now + delay at the call.
 * A calibrated TSC (rdtsc, ~10 ns here where the kernel's clocksource is
 * tsc) would still be a read per arm, and would need a calibration kept on
 * the safe side of CLOCK_MONOTONIC's NTP slewing; deferring needs neither,
 * so lull does not read the TSC.
 *
 * Deadlines saturate at UINT64_MAX (a delay that would pass it never
 * fires, unless the clock itself is there: a virtual clock advanced by
 * UINT64_MAX fires every timer then armed at once) instead of wrapping into
 * the past, deferred or not. A delayed arm made when a virtual clock is at
 * UINT64_MAX arms nothing: its deadline is past the end, and saturated it
 * would be due at once, again at each re-arm (a spin). Zero-delay
 * arms read no clock either way (C3). Timers armed one after another by
 * their own readings get deadlines in arm order, and fire together when
 * they are due by the same expiry; arms one reading flushes with equal
 * delays get equal deadlines, and fire in arm order. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

/* The overrun table's first allocation: room for this many late fires in
 * one batch before it grows (384 bytes). */
#define OVERRUNS_MIN_CAP 16

static inline uint64_t saturating_add(uint64_t a, uint64_t b) {
    return a + b < a ? UINT64_MAX : a + b;
}

__attribute__((noinline, cold, noreturn)) static void heap_oom(void) {
    lull__assert_fail("lull: out of memory growing the timer heap", __FILE__,
                      __LINE__);
}

/* The next arm order, which breaks ties of equal deadlines (heap.c). */
static inline void arm_order(lull_loop *loop, lull_timer *t) {
    loop->arm_seq += 1u << LULL__SEQ_SHIFT;
    t->node.flags = (t->node.flags & ~LULL__SEQ_MASK) | loop->arm_seq;
}

/* Only timers in the heap, deferred ones included, are counted: one in the
 * due list or the ready queue is ready work, which keeps the loop alive by
 * itself. */
static inline void count_armed(lull_loop *loop, const lull_timer *t) {
    if (!(t->node.flags & LULL__NODE_UNREF)) loop->timers_ref++;
}

static inline void count_disarmed(lull_loop *loop, const lull_timer *t) {
    if (!(t->node.flags & LULL__NODE_UNREF)) loop->timers_ref--;
}

/* The insert that sifts or grows the heap (a quarter of random arms):
 * out of line, so that heap_add ends in it, a jump, and keeps no frame. */
__attribute__((noinline)) static void
heap_insert(lull_loop *loop, lull_timer *t, uint64_t deadline) {
    if (lull__heap_insert(&loop->heap, t, deadline) != 0) heap_oom();
}

LULL__HOT static void heap_add(lull_loop *loop, lull_timer *t,
                               uint64_t deadline) {
    arm_order(loop, t);
    /* Counted before the insert, which then ends the function: one that
     * fails stops the program (heap_oom). */
    count_armed(loop, t);
    if (!lull__heap_try_push(&loop->heap, t, deadline))
        heap_insert(loop, t, deadline);
}

/* A deferred arm (see the top of this file): its deadline comes with the
 * loop's next clock reading. Returns false, having done nothing, when the
 * heap must grow first (arm_delayed then reads the clock). */
static inline bool heap_try_defer(lull_loop *loop, lull_timer *t,
                                  uint64_t delay) {
    if (!lull__heap_try_defer(&loop->heap, t, delay)) return false;
    arm_order(loop, t);
    count_armed(loop, t);
    return true;
}

/* A deferred arm is flushed by the next slice check: the one after this
 * callback returns, or the callback's next lull_loop_should_yield call,
 * whichever comes first, not one stride of callbacks later. The stride
 * is cut to the calls it has counted so far, so the check plans the next
 * one from the right pace. Only the first arm deferred since the last
 * flush cuts it: every slice check flushes (clock.c), so while arms are
 * pending no check has planned a longer stride since the cut. */
static inline void defer_ends_soon(lull_loop *loop) {
    if (loop->heap.pend == 1 && loop->countdown > 1) {
        loop->stride -= loop->countdown - 1;
        loop->countdown = 1;
        loop->quantum_intact = false;
    }
}

static void heap_del(lull_loop *loop, lull_timer *t) {
    lull__heap_remove(&loop->heap, t);
    count_disarmed(loop, t);
}

/* ------------------------------------------------------------ overruns
 *
 * A repeating timer's fire stands for every period that expired before it
 * was taken from the heap: one when the loop is on time, more when it was
 * late (the periods between are skipped, not fired: no burst), and
 * lull_timer_overrun tells the callback how many. The count lives outside
 * the timer, which stays 48 bytes (64 per armed timer with its heap
 * slot): only a fire that stands for more than one period gets an entry,
 * in a table indexed by the timer's address (below). The entry also keeps the
 * deadline of the first of those periods (lull_timer_fire_deadline), which is
 * otherwise worked out from the timer's next deadline; a fire whose next
 * deadline saturated at UINT64_MAX (or that has none: it fired there) gets an
 * entry for that alone, since UINT64_MAX minus the period is not its deadline.
 * The table empties whenever the due list drains, so it holds one batch's late
 * fires at most; an entry is dropped when its timer is stopped or
 * re-armed, so it never names a timer the caller may have freed. Entries
 * for a zero-delay turn still queued when its next period expires are never
 * taken (a turn has no deadline) and go with the table. */

/* The entries are found by the timer's address in overrun_index, an
 * open-addressed table of twice the entries' capacity (so at most half
 * full) with linear probing: a stop or re-arm of each of a million late
 * timers in one callback walked the entries before it, a quadratic
 * stop-all. A taken or dropped entry keeps its slot (its timer NULL: it
 * matches nothing) until the table empties. */
static inline uint32_t index_mask(const lull_loop *loop) {
    return loop->overruns_cap * 2 - 1; /* a power of two */
}

static inline uint32_t index_home(const lull_loop *loop, const lull_timer *t) {
    /* Fibonacci hashing: the product's high half mixes every address bit. */
    uint64_t h = (uint64_t)(uintptr_t)t * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32) & index_mask(loop);
}

static void index_insert(lull_loop *loop, uint32_t entry) {
    lull__overrun *o = &loop->overruns[entry];
    uint32_t s = index_home(loop, o->timer);
    while (loop->overrun_index[s])
        s = (s + 1) & index_mask(loop);
    loop->overrun_index[s] = entry + 1;
    o->slot = s;
}

static lull__overrun *find_overrun(lull_loop *loop, const lull_timer *t) {
    if (loop->overruns_head == loop->overruns_len) return NULL;
    for (uint32_t s = index_home(loop, t); loop->overrun_index[s];
         s = (s + 1) & index_mask(loop)) {
        lull__overrun *o = &loop->overruns[loop->overrun_index[s] - 1];
        if (o->timer == t) return o;
    }
    return NULL;
}

/* Room for one more entry: the entries and their index, twice as large,
 * the live entries indexed again. False, with nothing changed, out of
 * memory. */
static bool grow_overruns(lull_loop *loop) {
    uint32_t cap =
        loop->overruns_cap ? loop->overruns_cap * 2 : OVERRUNS_MIN_CAP;
    uint32_t *index = calloc((size_t)cap * 2, sizeof *index);
    if (!index) return false;
    lull__overrun *v =
        realloc(loop->overruns, (size_t)cap * sizeof *loop->overruns);
    if (!v) {
        free(index);
        return false;
    }
    free(loop->overrun_index);
    loop->overruns = v;
    loop->overruns_cap = cap;
    loop->overrun_index = index;
    for (uint32_t i = loop->overruns_head; i < loop->overruns_len; i++)
        if (v[i].timer) index_insert(loop, i);
    return true;
}

/* Empties the table: only the slots its entries hold are cleared, so a
 * batch with one late fire does not pay for a table a million once grew. */
static void clear_overruns(lull_loop *loop) {
    for (uint32_t i = 0; i < loop->overruns_len; i++)
        loop->overrun_index[loop->overruns[i].slot] = 0;
    loop->overruns_head = loop->overruns_len = 0;
}

/* t's fire, queued now or already (`queued`), stands for `periods` more,
 * the first of them due at `first` (a fire queued already keeps its own).
 * Out of memory, the count is lost (the fire reports fewer periods): a
 * diagnostic is not worth failing the loop for. */
__attribute__((noinline)) static void
note_overrun(lull_loop *loop, lull_timer *t, uint64_t periods, bool queued,
             uint64_t first) {
    lull__overrun *o = queued ? find_overrun(loop, t) : NULL;
    if (o) {
        o->periods = saturating_add(o->periods, periods);
        return;
    }
    if (loop->overruns_len == loop->overruns_cap && !grow_overruns(loop))
        return;
    loop->overruns[loop->overruns_len] = (lull__overrun){
        .timer = t,
        .periods = queued ? saturating_add(periods, 1) : periods,
        .first = first,
    };
    index_insert(loop, loop->overruns_len++);
}

static void drop_overrun(lull_loop *loop, const lull_timer *t) {
    lull__overrun *o = find_overrun(loop, t);
    if (o) o->timer = NULL;
}

/* Takes t's entry: true with the periods its fire stands for and the
 * first one's deadline, or false (then 1, and the deadline is the one
 * before the timer's next). */
static bool take_overrun(lull_loop *loop, const lull_timer *t,
                         uint64_t *periods, uint64_t *first) {
    lull__overrun *o = find_overrun(loop, t);
    if (o) {
        *periods = o->periods;
        *first = o->first;
        o->timer = NULL;
    }
    while (loop->overruns_head < loop->overruns_len &&
           !loop->overruns[loop->overruns_head].timer)
        loop->overruns_head++;
    return o != NULL;
}

void lull__timers_free(lull_loop *loop) {
    free(loop->overruns);
    free(loop->overrun_index);
    loop->overruns = NULL;
    loop->overrun_index = NULL;
    loop->overruns_head = loop->overruns_len = loop->overruns_cap = 0;
}

/* Takes the timer out of wherever it is armed: a repeating timer can be
 * queued for this period and in the heap for the next at once. */
static void timer_unlink(lull_loop *loop, lull_timer *t) {
    if (lull__heap_contains(t)) heap_del(loop, t);
    if (lull__node_queued(&t->node)) lull__queue_remove(&t->node);
    if (LULL_UNLIKELY(loop->overruns_head < loop->overruns_len))
        drop_overrun(loop, t);
}

int lull_timer_init(lull_loop *loop, lull_timer *timer, lull_timer_fn fn) {
    if (!loop || !timer || !fn) return -EINVAL;
    timer->node.next = NULL;
    timer->node.prev = NULL;
    timer->node.fn.timer = fn;
    timer->node.flags = LULL__NODE_TIMER;
    timer->node.aux = 0;
    timer->loop = loop;
    timer->repeat = 0;
    return 0;
}

/* Can a delayed arm wait for the loop's next clock reading? Inside a
 * slice on the real clock: one is coming before the slice ends. */
static inline bool arm_deferred(const lull_loop *loop) {
    return loop->defer_arms; /* in_slice && !virtual_clock */
}

/* Has a delayed arm of the running callback read the clock already? Then
 * this one defers (a batch of arms pays one reading); else it reads. Only
 * ever true inside a slice on the real clock (arm_deferred): only such an
 * arm reads here, and the slice's end forgets it (lull__slice_end). */
static inline bool callback_has_read(const lull_loop *loop) {
    return loop->arm_read_tasks == loop->tasks_run;
}

/* The first delayed arm of a callback: a reading of its own, which also
 * flushes the arms deferred before it (they were made before it, so it
 * is never early for them either) and refreshes the cached now. */
static uint64_t arm_read(lull_loop *loop) {
    uint64_t t = lull__clock_real();
    loop->now = t;
    lull__timers_flush(loop, t);
    loop->arm_read_tasks = loop->tasks_run;
    return t;
}

/* A further arm of a callback that finds the heap full: the growth (a
 * realloc with its copy and page faults, milliseconds with 10^6 timers
 * armed) runs inside this call, so the arm reads the clock before it, as
 * the callback's first arm does, rather than count from a reading after
 * it. Rare: the heap doubles. */
__attribute__((noinline)) static void
arm_read_and_grow(lull_loop *loop, lull_timer *t, uint64_t delay) {
    heap_add(loop, t, saturating_add(arm_read(loop), delay));
}

/* The instant a delay counts from, for an arm that is not deferred: on the
 * real clock a fresh reading (vDSO, ~25 ns), because the cached "now" can
 * be any age here (set-up code before lull_loop_run); the reading also
 * refreshes the cache. The virtual clock is exact already. */
static inline uint64_t arm_time(lull_loop *loop) {
    if (!loop->virtual_clock) loop->now = lull__clock_real();
    return loop->now;
}

/* Arms t for `delay` > 0 from now: inside a slice on the real clock, from
 * a reading of its own if it is the callback's first delayed arm, else
 * deferred; elsewhere counted from arm_time. */
static inline void arm_delayed(lull_loop *loop, lull_timer *t, uint64_t delay) {
    if (!arm_deferred(loop)) {
        uint64_t now = arm_time(loop);
        /* A virtual clock at its end: now + delay is past it and never
         * comes. Saturated to UINT64_MAX it would be due at once, and a
         * timer that re-arms itself would fire at every iteration. */
        if (LULL_UNLIKELY(now == UINT64_MAX)) return;
        heap_add(loop, t, saturating_add(now, delay));
    } else if (callback_has_read(loop)) {
        if (heap_try_defer(loop, t, delay))
            defer_ends_soon(loop);
        else
            arm_read_and_grow(loop, t, delay);
    } else {
        heap_add(loop, t, saturating_add(arm_read(loop), delay));
    }
}

/* Everything but the common zero-delay arm of an idle one-shot timer. Kept
 * out of line so the common arm needs no register saves: a zero-delay hop
 * must cost what a posted task costs (C3). It takes lull_timer_start's
 * arguments in their order, so the call is a bare jump, and the common
 * arm moves none of them out of the way. */
LULL__HOT __attribute__((noinline)) static void
timer_start_slow(lull_timer *timer, uint64_t delay_ns, uint64_t repeat_ns) {
    lull_loop *loop = timer->loop;
    timer_unlink(loop, timer);
    timer->repeat = repeat_ns;
    if (delay_ns == 0) {
        /* A re-arm is a new arm order: to the tail, even if it was queued.
         * A repeating one also waits in the heap for its next period. No
         * clock read for a turn: it has no deadline. */
        lull__queue_push(&loop->ready, &timer->node);
        if (!repeat_ns) return;
        delay_ns = repeat_ns;
    }
    arm_delayed(loop, timer, delay_ns);
}

/* A delayed one-shot arm of a timer that is not armed, other than a
 * callback's further arm with room to defer: arm_delayed without
 * timer_start_slow's unlink and zero-delay tests, which find nothing to do
 * (set-up code arming its timers, a callback's first arm). The real
 * clock's arms, which call for a reading, in one function; the virtual
 * clock's (never deferred, no reading) in another, which ends in heap_add
 * (a jump) and so saves no registers. */
LULL__HOT __attribute__((noinline)) static void
timer_arm_idle(lull_loop *loop, lull_timer *timer, uint64_t delay_ns) {
    arm_delayed(loop, timer, delay_ns);
}

LULL__HOT __attribute__((noinline)) static void
timer_arm_idle_virtual(lull_loop *loop, lull_timer *timer, uint64_t delay_ns) {
    uint64_t now = loop->now;
    /* At the virtual clock's end: as arm_delayed, nothing is armed. */
    if (LULL_UNLIKELY(now == UINT64_MAX)) return;
    heap_add(loop, timer, saturating_add(now, delay_ns));
}

LULL__HOT void lull_timer_start(lull_timer *timer, uint64_t delay_ns,
                                uint64_t repeat_ns) {
    if (LULL_UNLIKELY(!timer || !timer->loop)) return;
    lull_loop *loop = timer->loop;
    LULL_ASSERT_LOOP_THREAD(loop);
    LULL_ASSERT(timer->node.flags & LULL__NODE_TIMER,
                "lull: lull_timer_start on a handle that is not a timer");
    /* 0 for a one-shot arm of an idle timer (not in the heap, not
     * queued): its two common arms, zero-delay and deferred, are then
     * told apart with one branch each, where four separate tests cost a
     * zero-delay hop a seventh more than a posted task's (C3). */
    uint64_t other = lull__timer_armed_bits(timer) | repeat_ns;
    if (LULL_LIKELY((other | delay_ns) == 0)) {
        lull__timer_turn(timer);
        return;
    }
    if (other == 0) {
        /* A delayed one-shot arm (delay_ns > 0: other is 0) of an idle
         * timer: nothing to take it out of. */
        timer->repeat = 0;
        if (callback_has_read(loop) && heap_try_defer(loop, timer, delay_ns)) {
            /* A further delayed arm of a callback (a batch of request
             * timeouts): a few stores, where the heap has room. */
            defer_ends_soon(loop);
            return;
        }
        if (loop->virtual_clock)
            timer_arm_idle_virtual(loop, timer, delay_ns);
        else
            timer_arm_idle(loop, timer, delay_ns);
        return;
    }
    timer_start_slow(timer, delay_ns, repeat_ns);
}

/* Every other cancel of an armed timer: queued (a turn, a due fire), or
 * with overrun entries to look through. Out of line, so that the common
 * cancel saves no registers. */
__attribute__((noinline)) static void timer_stop_slow(lull_loop *loop,
                                                      lull_timer *timer) {
    LULL_ASSERT_LOOP_THREAD(loop);
    timer_unlink(loop, timer);
}

LULL__HOT void lull_timer_stop(lull_timer *timer) {
    if (!timer || !timer->loop) return;
    lull_loop *loop = timer->loop;
    if (LULL_LIKELY(lull__heap_contains(timer) &&
                    !lull__node_queued(&timer->node) &&
                    loop->overruns_head == loop->overruns_len)) {
        /* The common cancel: in the heap only, with no overrun entry to
         * drop (the table is empty). The heap's removal comes last, so
         * its slow path is a jump, and this function keeps no frame. */
        LULL_ASSERT_LOOP_THREAD(loop);
        count_disarmed(loop, timer);
        lull__heap_remove(&loop->heap, timer);
        return;
    }
    if (lull__timer_armed(timer)) timer_stop_slow(loop, timer);
}

bool lull_timer_active(const lull_timer *timer) {
    return timer && lull__timer_armed(timer);
}

uint64_t lull_timer_deadline(const lull_timer *timer) {
    if (!timer || !timer->loop || !lull__heap_contains(timer)) return 0;
    lull_loop *loop = timer->loop;
    if (LULL_UNLIKELY(lull__heap_deferred(&loop->heap, timer))) {
        /* A deferred arm has no deadline yet: a reading now gives it one,
         * counted from after the call like the loop's own reading would. */
        LULL_ASSERT_LOOP_THREAD(loop);
        lull__timers_flush_now(loop);
    }
    return lull__heap_deadline_of(&loop->heap, timer);
}

void lull__timers_flush_now(lull_loop *loop) {
    uint64_t t = lull__clock_real();
    loop->now = t; /* only deferred on the real clock */
    lull__heap_flush(&loop->heap, t);
}

static void set_unref(lull_timer *timer, bool unref) {
    if (!timer || !timer->loop) return;
    bool was = timer->node.flags & LULL__NODE_UNREF;
    if (was == unref) return;
    if (lull__heap_contains(timer)) timer->loop->timers_ref += unref ? -1 : 1;
    if (unref)
        timer->node.flags |= LULL__NODE_UNREF;
    else
        timer->node.flags &= ~LULL__NODE_UNREF;
}

void lull_timer_ref(lull_timer *timer) {
    set_unref(timer, false);
}

void lull_timer_unref(lull_timer *timer) {
    set_unref(timer, true);
}

/* The first deadline after `now` on the phase of `deadline`, saturated at
 * UINT64_MAX like every deadline. Only a clock at UINT64_MAX gets an answer
 * that is not after `now`. *periods gets the deadlines of the phase from
 * `deadline` up to `now`: 1, plus the periods skipped. */
static uint64_t next_deadline(uint64_t deadline, uint64_t period, uint64_t now,
                              uint64_t *periods) {
    uint64_t next = saturating_add(deadline, period);
    *periods = 1;
    if (next <= now && next != UINT64_MAX) {
        uint64_t missed = (now - next) / period + 1, skip;
        *periods = saturating_add(missed, 1);
        if (__builtin_mul_overflow(missed, period, &skip)) return UINT64_MAX;
        next = saturating_add(next, skip);
    }
    return next;
}

/* Moves every timer due at `now` from the heap to the due list, in
 * (deadline, arm) order. A repeating timer is re-armed for its next period
 * at once; if its last fire has not run yet it is not queued twice, which
 * is how periods missed while the loop was busy are skipped. A repeat that
 * fired at the end of the clock (UINT64_MAX, where deadlines saturate) has
 * no next period and ends: re-armed there, it would be due again at once,
 * and this loop would never finish. */
LULL__HOT void lull__timers_expire(lull_loop *loop, uint64_t now) {
    lull__heap *h = &loop->heap;
    while (h->len && lull__heap_min_deadline(h) <= now) {
        uint64_t deadline = lull__heap_min_deadline(h);
        lull_timer *t = lull__heap_min(h);
        heap_del(loop, t);
        uint64_t periods = 1;
        uint64_t next =
            t->repeat ? next_deadline(deadline, t->repeat, now, &periods) : now;
        if (next > now) heap_add(loop, t, next);
        bool queued = lull__node_queued(&t->node);
        /* Saturated, the next deadline no longer tells this fire's: the
         * entry keeps it. A fire queued already (with no entry: it stood
         * for one period) was for the period before this one. */
        bool saturated = t->repeat && next == UINT64_MAX;
        if (LULL_UNLIKELY(periods > 1 || queued || saturated))
            note_overrun(loop, t, periods, queued,
                         queued ? deadline - t->repeat : deadline);
        if (!queued) lull__queue_push(&loop->due, &t->node);
    }
}

/* The loop whose due list this thread runs, if any: lull_timer_overrun and
 * lull_timer_fire_deadline read a timer's loop only when it is this one, so
 * a timer whose loop was freed (the timer is the caller's memory and may
 * outlive it) answers 0 without reading freed memory. Set once per batch of
 * due timers, not per fire; saved and restored, for a callback that runs
 * another loop. Initial-exec: read through %fs as in the static library,
 * where liblull.so's default model called __tls_get_addr (some 22
 * instructions a batch, tests/hot_tls_check.sh); 8 bytes of the static
 * TLS glibc keeps spare for a library loaded by dlopen. */
static _Thread_local const lull_loop *due_loop
    __attribute__((tls_model("initial-exec")));

/* Like lull__run_queue on the due list (stopping only for lull_loop_stop), and
 * tells lull_timer_overrun which timer fires and for how many periods. */
LULL__HOT void lull__timers_run_due(lull_loop *loop) {
    lull__node *q = &loop->due;
    const lull_loop *outer = due_loop;
    due_loop = loop;
    while (q->next != q) {
        lull__node *n = q->next;
        LULL_ASSERT(lull__queue_head_ok(q, n),
                    "lull: due list corrupted (a timer freed or set up again "
                    "while armed?)");
        lull__queue_remove(n);
        lull_timer *t = (lull_timer *)n;
        loop->firing = t;
        loop->firing_periods = 1;
        uint64_t first = 0;
        bool noted = LULL_UNLIKELY(loop->overruns_head < loop->overruns_len) &&
                     take_overrun(loop, t, &loop->firing_periods, &first);
        /* A repeating timer is armed for its next period already: the
         * deadline this fire is for is the one before it (its entry's,
         * with one), read now, before the callback may re-arm or stop
         * it. */
        loop->firing_deadline = 0;
        if (t->repeat && noted)
            loop->firing_deadline = first;
        else if (t->repeat && lull__heap_contains(t) &&
                 !lull__heap_deferred(&loop->heap, t))
            loop->firing_deadline =
                lull__heap_deadline_of(&loop->heap, t) - t->repeat;
        /* lull__dispatch_node without its test of aux: a timer's is its
         * heap slot, never a sample tag. */
        loop->tasks_run++;
        lull__call_node(loop, n);
        if (lull__after_callback(loop) && loop->stop) break;
    }
    loop->firing = NULL;
    due_loop = outer;
    if (q->next == q) clear_overruns(loop);
}

uint64_t lull_timer_overrun(const lull_timer *timer) {
    if (!timer || !timer->loop || timer->loop != due_loop ||
        due_loop->firing != timer)
        return 0;
    return due_loop->firing_periods;
}

uint64_t lull_timer_fire_deadline(const lull_timer *timer) {
    if (!timer || !timer->loop || timer->loop != due_loop ||
        due_loop->firing != timer)
        return 0;
    return due_loop->firing_deadline;
}

/* ns until the earliest deadline (0 if due), or -1 with no timer. */
LULL__HOT int64_t lull__timers_next_ns(lull_loop *loop, uint64_t now) {
    if (!loop->heap.len) return -1;
    uint64_t deadline = lull__heap_min_deadline(&loop->heap);
    if (deadline <= now) return 0;
    uint64_t d = deadline - now;
    return d > INT64_MAX ? INT64_MAX : (int64_t)d;
}
