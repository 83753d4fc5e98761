/* Timers (C3): deadline order, arm order for equal
 * deadlines, re-arm, repeat without drift, stop/restart from callbacks,
 * references. Order and time on the virtual clock, except where a case says
 * why it needs the real one. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ull

typedef struct item {
    lull_timer timer;
    lull_task task;
    int id;
    int runs;
    uint64_t fired_at; /* lull_loop_now at the last fire, relative to t0 */
} item;

static lull_loop *the_loop;
static uint64_t t0;

static lull_loop *new_loop(int clock) {
    lull_loop_options o = {.clock = clock};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    t0 = lull_loop_now(loop);
    check_trace_reset();
    return loop;
}

static void record_timer(lull_timer *t) {
    item *it = LULL_CONTAINER_OF(t, item, timer);
    it->runs++;
    it->fired_at = lull_loop_now(the_loop) - t0;
    check_trace(it->id);
}

static void record_task(lull_task *t) {
    item *it = LULL_CONTAINER_OF(t, item, task);
    it->runs++;
    check_trace(it->id);
}

static void items_init(item *v, int n) {
    for (int i = 0; i < n; i++) {
        v[i] = (item){.id = i};
        lull_timer_init(the_loop, &v[i].timer, record_timer);
        lull_task_init(&v[i].task, record_task);
    }
}

TEST(deadline_order) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[5];
    items_init(v, 5);
    uint64_t delay[5] = {30, 10, 50, 20, 40};
    for (int i = 0; i < 5; i++)
        lull_timer_start(&v[i].timer, delay[i], 0);
    for (int i = 0; i < 5; i++) {
        CHECK(lull_timer_active(&v[i].timer));
        CHECK_U64_EQ(lull_timer_deadline(&v[i].timer), t0 + delay[i]);
    }
    lull_loop_advance(loop, 9);
    CHECK_EQ(check_trace_len(), 0);
    lull_loop_advance(loop, 1);
    CHECK_TRACE(1);
    lull_loop_advance(loop, 100);
    CHECK_TRACE(1, 3, 0, 4, 2);
    for (int i = 0; i < 5; i++) {
        CHECK_U64_EQ(v[i].fired_at, delay[i]); /* fired at its deadline */
        CHECK_EQ(v[i].runs, 1);
        CHECK(!lull_timer_active(&v[i].timer));
        CHECK_U64_EQ(lull_timer_deadline(&v[i].timer), 0);
    }
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 110);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(equal_deadlines_fire_in_arm_order) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[7];
    items_init(v, 7);
    int arm[6] = {3, 1, 4, 0, 5, 2};
    for (int i = 0; i < 6; i++)
        lull_timer_start(&v[arm[i]].timer, 10 * MS, 0);
    lull_timer_start(&v[6].timer, 5 * MS, 0); /* armed last, due first */
    lull_loop_advance(loop, 10 * MS);
    CHECK_TRACE(6, 3, 1, 4, 0, 5, 2);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Timers due at the same instant are queued together, in arm order: a task
 * posted by the first runs after the others. */
static item *simul;
static void first_posts_task(lull_timer *t) {
    record_timer(t);
    lull_task_post(the_loop, &simul[3].task);
}

TEST(task_posted_by_simultaneous_timer_runs_after_them) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[4];
    items_init(v, 4);
    simul = v;
    lull_timer_init(loop, &v[0].timer, first_posts_task);
    for (int i = 0; i < 3; i++)
        lull_timer_start(&v[i].timer, 7, 0);
    lull_loop_advance(loop, 7);
    CHECK_TRACE(0, 1, 2, 3);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same on the real clock. The callback's first delayed arm reads the
 * clock, the others are flushed when it returns, so timers armed one after
 * another get deadlines in arm order; the next task then spins past all
 * three, so they are due together when the loop next looks, and the task
 * posted by the first still runs after the other two. */
static item *arm_these;
static void arm_three(lull_task *t) {
    (void)t;
    for (int i = 0; i < 3; i++)
        lull_timer_start(&arm_these[i].timer, 2 * MS, 0);
}

static void spin_3ms(lull_task *t) {
    (void)t;
    check_spin_ns(3 * MS);
}

TEST(task_posted_by_simultaneous_timer_runs_after_them_real_clock) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[4];
    items_init(v, 4);
    simul = v;
    lull_timer_init(loop, &v[0].timer, first_posts_task);
    arm_these = v;
    lull_task arm, spin;
    lull_task_init(&arm, arm_three);
    lull_task_init(&spin, spin_3ms);
    lull_task_post(loop, &arm);
    lull_task_post(loop, &spin);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_LE(lull_timer_deadline(&v[0].timer),
             lull_timer_deadline(&v[1].timer));
    CHECK_LE(lull_timer_deadline(&v[1].timer),
             lull_timer_deadline(&v[2].timer));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(0, 1, 2, 3);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Re-arming gives a new deadline and a new arm order. */
TEST(rearm_moves_to_tail) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[4];
    items_init(v, 4);
    for (int i = 0; i < 3; i++)
        lull_timer_start(&v[i].timer, 10, 0);
    lull_timer_start(&v[0].timer, 10, 0); /* same deadline, now last */
    lull_loop_advance(loop, 10);
    CHECK_TRACE(1, 2, 0);
    CHECK_EQ(v[0].runs, 1);

    /* Re-arm to an earlier and to a later deadline. */
    check_trace_reset();
    for (int i = 0; i < 3; i++)
        lull_timer_start(&v[i].timer, 10, 0);
    lull_timer_start(&v[0].timer, 30, 0);
    lull_timer_start(&v[2].timer, 5, 0);
    lull_loop_advance(loop, 100);
    CHECK_TRACE(2, 1, 0);
    CHECK_U64_EQ(v[0].fired_at, 40);
    CHECK_U64_EQ(v[2].fired_at, 15);

    /* A zero-delay timer re-armed goes to the tail, unlike a task re-post. */
    check_trace_reset();
    lull_task_post(loop, &v[0].task);
    lull_timer_start(&v[3].timer, 0, 0);
    lull_task_post(loop, &v[1].task);
    lull_timer_start(&v[3].timer, 0, 0);
    lull_task_post(loop, &v[0].task); /* pending: keeps its place */
    CHECK_EQ(lull_loop_settle(loop), 3);
    CHECK_TRACE(0, 1, 3);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A zero-delay timer re-armed with a real delay leaves the ready queue. */
TEST(zero_delay_rearmed_with_delay) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[2];
    items_init(v, 2);
    lull_timer_start(&v[0].timer, 0, 0);
    lull_task_post(loop, &v[1].task);
    lull_timer_start(&v[0].timer, 5, 0);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_TRACE(1);
    CHECK(lull_timer_active(&v[0].timer));
    lull_loop_advance(loop, 5);
    CHECK_TRACE(1, 0);
    CHECK_U64_EQ(v[0].fired_at, 5);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Repeat keeps its phase: fire k at exactly t0 + delay + (k-1) * period,
 * however time is advanced. */
static uint64_t period;
static uint64_t first_delay;
static int fires;
static bool drift_ok = true;
static void check_phase(lull_timer *t) {
    uint64_t want = t0 + first_delay + (uint64_t)fires * period;
    if (lull_loop_now(the_loop) != want) {
        fprintf(stderr, "fire %d at %" PRIu64 ", want %" PRIu64 "\n", fires,
                lull_loop_now(the_loop), want);
        drift_ok = false;
    }
    /* Already armed for the next period, exactly one period on. */
    if (lull_timer_deadline(t) != want + period) drift_ok = false;
    fires++;
}

TEST(repeat_without_drift) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_timer t;
    lull_timer_init(loop, &t, check_phase);
    period = 1000003; /* odd, so rounding anywhere would show */
    first_delay = period;
    fires = 0;
    lull_timer_start(&t, period, period);
    /* Uneven steps: some cross no deadline, some cross several. */
    uint64_t end = t0 + 1000 * period, step = 1;
    while (lull_loop_now(loop) < end) {
        uint64_t left = end - lull_loop_now(loop);
        lull_loop_advance(loop, step < left ? step : left);
        step = step * 7 % 2999993 + 1;
    }
    CHECK(drift_ok);
    CHECK_EQ(fires, 1000);
    CHECK(lull_timer_active(&t));
    lull_loop_advance(loop, period - 1);
    CHECK_EQ(fires, 1000);
    lull_loop_advance(loop, 1);
    CHECK_EQ(fires, 1001);
    lull_timer_stop(&t);
    CHECK(!lull_timer_active(&t));
    lull_loop_advance(loop, 10 * period);
    CHECK_EQ(fires, 1001);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A first delay different from the period: the phase follows the first
 * deadline. */
TEST(repeat_phase_follows_first_deadline) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_timer t;
    lull_timer_init(loop, &t, check_phase);
    period = 10;
    first_delay = 3;
    fires = 0;
    drift_ok = true;
    lull_timer_start(&t, 3, 10);
    lull_loop_advance(loop, 2);
    CHECK_EQ(fires, 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(fires, 1);
    lull_loop_advance(loop, 50); /* now 53: fires at 13, 23, 33, 43, 53 */
    CHECK_EQ(fires, 6);
    CHECK(drift_ok);
    lull_timer_stop(&t);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* On the real clock, periods missed while the loop was busy are skipped:
 * one late fire, phase kept, no burst. Period 2 ms; the third fire spins
 * 11 ms (5.5 periods). A burst would make the fourth fire the one for the
 * period right after the third, still in the past, and arm the fifth in the
 * past too; skipping makes the fourth fire the only one for all the missed
 * periods and arms the next one on the grid after the spin ended. What is
 * checked is an order of clock readings, so a loaded machine that preempts
 * the test only moves "now" later, which the rule allows. */
static uint64_t rt_first, rt_spin_end, rt_next_after_spin;
static int rt_fires;
static bool rt_phase_ok = true;
static void real_tick(lull_timer *t) {
    rt_fires++;
    if ((lull_timer_deadline(t) - rt_first) % t->repeat != 0)
        rt_phase_ok = false;
    if (rt_fires == 3) {
        check_spin_ns(11 * MS);
        rt_spin_end = check_clock_ns();
    }
    if (rt_fires == 4) rt_next_after_spin = lull_timer_deadline(t);
    if (rt_fires == 5) lull_timer_stop(t);
}

TEST(repeat_real_clock_skips_missed_periods) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_timer t;
    lull_timer_init(loop, &t, real_tick);
    lull_timer_start(&t, 2 * MS, 2 * MS);
    rt_first = lull_timer_deadline(&t);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(rt_phase_ok);
    CHECK_EQ(rt_fires, 5);
    CHECK_LE(1, rt_spin_end);
    /* The deadline armed at the fourth fire lies after the spin: the
     * missed periods were not replayed one fire each. */
    CHECK_LE(rt_spin_end, rt_next_after_spin);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Stop and restart from the timer's own callback. */
static int own_runs;
static void stop_self_on_third(lull_timer *t) {
    own_runs++;
    if (own_runs == 3) lull_timer_stop(t);
}

static void restart_self(lull_timer *t) {
    record_timer(t);
    if (LULL_CONTAINER_OF(t, item, timer)->runs < 3) lull_timer_start(t, 7, 0);
}

static void repeat_becomes_oneshot(lull_timer *t) {
    record_timer(t);
    if (LULL_CONTAINER_OF(t, item, timer)->runs == 1) lull_timer_start(t, 3, 0);
}

TEST(stop_and_restart_from_own_callback) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_timer rep;
    lull_timer_init(loop, &rep, stop_self_on_third);
    own_runs = 0;
    lull_timer_start(&rep, 10, 10);
    lull_loop_advance(loop, 1000);
    CHECK_EQ(own_runs, 3);
    CHECK(!lull_timer_active(&rep));

    item v[2];
    items_init(v, 2);
    t0 = lull_loop_now(loop);
    lull_timer_init(loop, &v[0].timer, restart_self);
    lull_timer_start(&v[0].timer, 10, 0);
    lull_loop_advance(loop, 20);
    CHECK_EQ(v[0].runs, 2);
    CHECK_U64_EQ(v[0].fired_at, 17);
    CHECK(lull_timer_active(&v[0].timer));
    lull_loop_advance(loop, 100);
    CHECK_EQ(v[0].runs, 3);
    CHECK_U64_EQ(v[0].fired_at, 24);
    CHECK(!lull_timer_active(&v[0].timer));

    /* A repeating timer restarted from its callback takes the new schedule:
     * the restart wins over the repeat. */
    t0 = lull_loop_now(loop);
    lull_timer_init(loop, &v[1].timer, repeat_becomes_oneshot);
    lull_timer_start(&v[1].timer, 10, 10);
    lull_loop_advance(loop, 100);
    CHECK_EQ(v[1].runs, 2);
    CHECK_U64_EQ(v[1].fired_at, 13);
    CHECK(!lull_timer_active(&v[1].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Stopping another timer due in the same batch: it does not fire. */
static item *others;
static void stop_others(lull_timer *t) {
    record_timer(t);
    lull_timer_stop(&others[1].timer); /* same deadline, later arm order */
    lull_timer_stop(&others[2].timer); /* later deadline, same advance */
    lull_timer_stop(&others[3].timer); /* zero-delay, queued */
}

TEST(stop_other_timer_in_same_batch) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[5];
    items_init(v, 5);
    others = v;
    lull_timer_init(loop, &v[0].timer, stop_others);
    lull_timer_start(&v[0].timer, 10, 0);
    lull_timer_start(&v[1].timer, 10, 0);
    lull_timer_start(&v[4].timer, 10, 0);
    lull_timer_start(&v[2].timer, 20, 0);
    lull_loop_advance(loop, 30);
    CHECK_TRACE(0, 4);
    CHECK_EQ(v[1].runs, 0);
    CHECK_EQ(v[2].runs, 0);

    /* The zero-delay form: the stopped timer was queued behind the task. */
    check_trace_reset();
    lull_timer_start(&v[0].timer, 0, 0);
    lull_timer_start(&v[3].timer, 0, 0);
    lull_timer_start(&v[4].timer, 0, 0);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_TRACE(0, 4);
    CHECK_EQ(v[3].runs, 0);
    for (int i = 0; i < 5; i++)
        CHECK(!lull_timer_active(&v[i].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An unreferenced timer does not keep lull_loop_run alive (real clock: a run
 * that waited for it would hang until the case's timeout). */
TEST(unref_timer_does_not_keep_run_alive) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[2];
    items_init(v, 2);
    lull_timer_start(&v[0].timer, 100000 * MS, 0);
    lull_timer_unref(&v[0].timer);
    CHECK(!lull_loop_alive(loop));
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    /* Returned without a wait that could block (a clock bound here would
     * measure the machine's load, not lull: a run that blocked for good
     * fails on the case's timeout, one that blocked at all counts a
     * wakeup). */
    CHECK_U64_EQ(m.wakeups, 0);
    CHECK_U64_EQ(m.iterations, 0);
    CHECK_EQ(v[0].runs, 0);
    CHECK(lull_timer_active(&v[0].timer));
    lull_timer_ref(&v[0].timer);
    CHECK(lull_loop_alive(loop));
    lull_timer_unref(&v[0].timer);
    CHECK(!lull_loop_alive(loop));
    /* Still armed: freeing is refused until it is stopped. */
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    lull_timer_stop(&v[0].timer);

    /* The reference flag is the handle's: it survives stop and re-arm. An
     * unreferenced timer still fires while something else keeps the loop
     * running. */
    lull_timer_start(&v[0].timer, 1 * MS, 0);
    CHECK(!lull_loop_alive(loop));
    lull_timer_start(&v[1].timer, 3 * MS, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(v[0].runs, 1);
    CHECK_EQ(v[1].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(unref_timer_fires_on_virtual_advance) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[1];
    items_init(v, 1);
    lull_timer_unref(&v[0].timer);
    lull_timer_start(&v[0].timer, 10, 10);
    CHECK(!lull_loop_alive(loop));
    lull_loop_advance(loop, 25);
    CHECK_EQ(v[0].runs, 2);
    lull_timer_stop(&v[0].timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Delay 0 is a turn: queued like a task, in post order, with time frozen. */
TEST(zero_delay_is_queued_like_a_task) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[4];
    items_init(v, 4);
    lull_timer_start(&v[0].timer, 0, 0);
    lull_task_post(loop, &v[1].task);
    lull_timer_start(&v[2].timer, 0, 0);
    lull_task_post(loop, &v[3].task);
    CHECK(lull_timer_active(&v[0].timer));
    CHECK_EQ(lull_loop_settle(loop), 4); /* no time needs to pass */
    CHECK_TRACE(0, 1, 2, 3);
    CHECK_U64_EQ(v[0].fired_at, 0);
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    CHECK(!lull_timer_active(&v[0].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Delay 0 with a repeat: first turn now, then every period from there. */
TEST(zero_delay_with_repeat) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[1];
    items_init(v, 1);
    lull_timer_start(&v[0].timer, 0, 10);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(v[0].runs, 1);
    CHECK(lull_timer_active(&v[0].timer));
    lull_loop_advance(loop, 9);
    CHECK_EQ(v[0].runs, 1);
    lull_loop_advance(loop, 1);
    CHECK_EQ(v[0].runs, 2);
    CHECK_U64_EQ(v[0].fired_at, 10);
    lull_loop_advance(loop, 20);
    CHECK_EQ(v[0].runs, 4);
    lull_timer_stop(&v[0].timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Stop of a never-started or stopped timer is a no-op; init on a stopped
 * timer is fine. */
TEST(stop_idempotent) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[1];
    items_init(v, 1);
    lull_timer_stop(&v[0].timer);
    CHECK(!lull_timer_active(&v[0].timer));
    lull_timer_start(&v[0].timer, 5, 0);
    lull_timer_stop(&v[0].timer);
    lull_timer_stop(&v[0].timer);
    CHECK(!lull_timer_active(&v[0].timer));
    lull_loop_advance(loop, 10);
    CHECK_EQ(v[0].runs, 0);
    lull_timer_init(loop, &v[0].timer, record_timer);
    lull_timer_start(&v[0].timer, 1, 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(v[0].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Huge delays and periods on the real clock: a deadline past the end of the
 * clock saturates at UINT64_MAX and never comes; a repeat whose next period
 * would pass it stays armed there. Neither spins the loop, and a poll whose
 * timeout is the largest one lull passes still returns on fd readiness. */
static int huge_ready_calls;
static void huge_ready(lull_io *io, int events) {
    (void)events;
    huge_ready_calls++;
    lull_io_stop(io);
}

TEST(huge_delays_on_the_real_clock) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[2];
    items_init(v, 2);
    lull_timer_start(&v[0].timer, UINT64_MAX, 1000 * MS);
    CHECK_U64_EQ(lull_timer_deadline(&v[0].timer), UINT64_MAX);
    lull_timer_start(&v[1].timer, 1, UINT64_MAX);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0); /* until v[1]'s 1 ns */
    CHECK_EQ(v[1].runs, 1);
    CHECK_U64_EQ(lull_timer_deadline(&v[1].timer), UINT64_MAX);
    CHECK_EQ(v[0].runs, 0);

    /* Only the saturated deadlines are left: the poll gets the largest
     * timeout, and a readable pipe ends it. */
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    CHECK_EQ(write(fds[1], "x", 1), 1);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[0], huge_ready), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    lull_metrics m;
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_loop_metrics(loop, &m);
    CHECK_EQ(huge_ready_calls, 1);
    CHECK_U64_EQ(m.polls, 1);
    CHECK(lull_timer_active(&v[0].timer));
    CHECK(lull_timer_active(&v[1].timer));
    lull_timer_stop(&v[0].timer);
    lull_timer_stop(&v[1].timer);
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------- never early
 * A delayed timer never fires before delay_ns has passed since its
 * lull_timer_start call, on CLOCK_MONOTONIC, however old the loop's cached
 * "now" is when it is armed. The cases make the cache stale on purpose (a
 * callback that runs for 5 ms, set-up work before lull_loop_run) and compare
 * clock_gettime readings: a fire time minus the time just before the call
 * is never less than the delay. Real clock by necessity; no speed is
 * asserted, only an order of two clock readings. */

typedef struct early {
    lull_timer timer;
    uint64_t delay;
    uint64_t called;   /* CLOCK_MONOTONIC just before lull_timer_start */
    uint64_t deadline; /* lull_timer_deadline right after it */
    uint64_t fired;    /* CLOCK_MONOTONIC in the callback */
} early;

static void early_fired(lull_timer *t) {
    LULL_CONTAINER_OF(t, early, timer)->fired = check_clock_ns();
}

static void early_arm(early *e) {
    e->called = check_clock_ns();
    lull_timer_start(&e->timer, e->delay, 0);
    e->deadline = lull_timer_deadline(&e->timer);
}

static void check_not_early(const early *e) {
    CHECK(e->fired != 0);
    CHECK_LE(e->called + e->delay, e->deadline);
    CHECK_LE(e->called + e->delay, e->fired);
}

/* An arm whose deadline is not asked for: inside a callback it stays
 * deferred until the loop's next reading (lull_timer_deadline would give
 * it one at once). */
static void early_arm_deferred(early *e) {
    e->called = check_clock_ns();
    lull_timer_start(&e->timer, e->delay, 0);
}

static void check_not_early_fired(const early *e) {
    CHECK(e->fired != 0);
    CHECK_LE(e->called + e->delay, e->fired);
}

/* The callback that makes the cache stale is a timer's, as when a timer
 * re-arms from its own callback: the loop has armed and fired a timer in
 * this run before the late arm. */
static lull_timer kick;

/* Delays from 1 us to 2 ms, armed at the end of a 5 ms callback: with a
 * deadline counted from the slice's cached now they would all be due at
 * once, up to 5 ms early. */
static early late_arms[4];
static void spin_then_arm(lull_timer *t) {
    (void)t;
    check_spin_ns(5 * MS);
    for (int i = 0; i < 4; i++)
        early_arm(&late_arms[i]);
}

TEST(delay_counts_from_the_call_in_a_long_callback) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    uint64_t delays[4] = {1000, 100000, 1 * MS, 2 * MS};
    for (int i = 0; i < 4; i++) {
        late_arms[i] = (early){.delay = delays[i]};
        lull_timer_init(loop, &late_arms[i].timer, early_fired);
    }
    lull_timer_init(loop, &kick, spin_then_arm);
    lull_timer_start(&kick, 1000, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    for (int i = 0; i < 4; i++)
        check_not_early(&late_arms[i]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Set-up code before lull_loop_run: the second arm comes 3 ms after the first.
 */
TEST(delay_counts_from_the_call_before_run) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    early e[2] = {{.delay = 1 * MS}, {.delay = 1 * MS}};
    for (int i = 0; i < 2; i++)
        lull_timer_init(loop, &e[i].timer, early_fired);
    early_arm(&e[0]);
    check_spin_ns(3 * MS);
    early_arm(&e[1]);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    check_not_early(&e[0]);
    check_not_early(&e[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A repeating timer armed late in a long callback: its first deadline
 * counts from the call, later ones keep the phase (previous deadline plus
 * the period), and a callback that overruns several periods gives one
 * fire, not a burst: the fire after it waits for the next phase point past
 * the overrun. Period 2 ms; the first fire spins 7 ms. */
static struct {
    lull_timer timer;
    uint64_t called, first, spin_end;
    uint64_t deadline[3]; /* lull_timer_deadline inside fire k: the next */
    uint64_t fired[3];
    int fires;
} rep;

static void rep_fired(lull_timer *t) {
    int k = rep.fires++;
    rep.fired[k] = check_clock_ns();
    rep.deadline[k] = lull_timer_deadline(t);
    if (k == 0) {
        check_spin_ns(7 * MS);
        rep.spin_end = check_clock_ns();
    }
    if (k == 2) lull_timer_stop(t);
}

static void spin_then_arm_repeat(lull_timer *t) {
    (void)t;
    check_spin_ns(5 * MS);
    rep.called = check_clock_ns();
    lull_timer_start(&rep.timer, 2 * MS, 2 * MS);
    rep.first = lull_timer_deadline(&rep.timer);
}

TEST(repeat_armed_late_keeps_phase_and_skips_missed_periods) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    memset(&rep, 0, sizeof rep);
    lull_timer_init(loop, &rep.timer, rep_fired);
    lull_timer_init(loop, &kick, spin_then_arm_repeat);
    lull_timer_start(&kick, 1000, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(rep.fires, 3);
    const uint64_t p = 2 * MS;
    /* Never early: the first deadline counts from the call. */
    CHECK_LE(rep.called + p, rep.first);
    CHECK_LE(rep.first, rep.fired[0]);
    /* Phase kept: re-armed on the grid before the first callback ran (one
     * period on, unless a loaded machine woke the loop later than that). */
    CHECK_LE(rep.first + p, rep.deadline[0]);
    CHECK_U64_EQ((rep.deadline[0] - rep.first) % p, 0);
    /* The overrun covered periods first+p .. at least first+3p: one fire
     * for them all, re-armed on the grid past the overrun's end... */
    CHECK_LE(rep.spin_end, rep.fired[1]);
    CHECK_U64_EQ((rep.deadline[1] - rep.first) % p, 0);
    CHECK_LE(rep.spin_end + 1, rep.deadline[1]);
    CHECK_LE(rep.first + 4 * p, rep.deadline[1]);
    /* ...and the next fire waited for that point: no burst. */
    CHECK_LE(rep.deadline[1], rep.fired[2]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A deferred arm (src/timer.c) counts from the loop's next reading after
 * the call, never from the stale cached now. The callback's first delayed
 * arm reads the clock itself (its deadline is known at once, counted from
 * the call); the three after it, armed at the start of a 3 ms callback
 * with no reading inside it, count from after the callback: later than
 * the call (never early), and exactly from a reading the loop took after
 * the callback returned (the deferral is real). Those leave lull_loop_now
 * as the first arm's reading left it, and every timer is active at once. */
static early first_arms[4];
static uint64_t first_spin_end, first_now_before, first_now_after;
static uint64_t first_deadline;
static bool first_active;
static void arm_then_spin(lull_timer *t) {
    (void)t;
    first_now_before = lull_loop_now(the_loop);
    for (int i = 0; i < 4; i++) {
        first_arms[i].called = check_clock_ns();
        lull_timer_start(&first_arms[i].timer, first_arms[i].delay, 0);
        if (i == 0) first_now_after = lull_loop_now(the_loop);
    }
    /* In the heap already: the query forces no reading. */
    first_deadline = lull_timer_deadline(&first_arms[0].timer);
    CHECK_U64_EQ(lull_loop_now(the_loop), first_now_after);
    first_active = true;
    for (int i = 0; i < 4; i++)
        first_active = first_active && lull_timer_active(&first_arms[i].timer);
    check_spin_ns(3 * MS);
    first_spin_end = check_clock_ns();
}

TEST(deferred_arm_counts_from_a_reading_after_the_call) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    uint64_t delays[4] = {1, 1000, 100000, 1 * MS};
    for (int i = 0; i < 4; i++) {
        first_arms[i] = (early){.delay = delays[i]};
        lull_timer_init(loop, &first_arms[i].timer, early_fired);
    }
    lull_timer_init(loop, &kick, arm_then_spin);
    lull_timer_start(&kick, 1000, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_LE(first_arms[0].called, first_now_after);
    CHECK_LE(first_now_before, first_now_after);
    CHECK_U64_EQ(first_deadline, first_now_after + delays[0]);
    CHECK_LE(first_deadline, first_arms[1].called + delays[0]);
    CHECK(first_active);
    for (int i = 0; i < 4; i++) {
        CHECK(first_arms[i].fired != 0);
        CHECK_LE(first_arms[i].called + delays[i], first_arms[i].fired);
        if (i > 0) CHECK_LE(first_spin_end + delays[i], first_arms[i].fired);
    }
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The readings inside a callback flush too: lull_loop_should_yield reads
 * the clock when its countdown runs out (the quantum is spent after a 1 ms
 * spin), and a deferred arm made before it counts from that reading, which
 * is also the new lull_loop_now. lull_timer_deadline on an arm still
 * deferred gives it its deadline from a reading of its own. (In the
 * yield-often build the slice may end without that reading.) */
static early lead_arm, mid_arm, late_arm;
static uint64_t mid_now, mid_deadline, late_deadline, late_after;
static bool mid_yielded;
static void arm_spin_yield(lull_timer *t) {
    (void)t;
    early_arm_deferred(&lead_arm); /* the first delayed arm reads */
    early_arm_deferred(&mid_arm);
    check_spin_ns(1 * MS);
    for (int i = 0; i < 64 && !mid_yielded; i++)
        mid_yielded = lull_loop_should_yield(the_loop);
    mid_now = lull_loop_now(the_loop);
    mid_deadline = lull_timer_deadline(&mid_arm.timer);
    early_arm_deferred(&late_arm);
    late_deadline = lull_timer_deadline(&late_arm.timer);
    late_after = check_clock_ns();
}

TEST(deferred_arm_flushed_by_a_reading_inside_the_callback) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lead_arm = (early){.delay = 2 * MS};
    mid_arm = (early){.delay = 2 * MS};
    late_arm = (early){.delay = 2 * MS};
    lull_timer_init(loop, &lead_arm.timer, early_fired);
    lull_timer_init(loop, &mid_arm.timer, early_fired);
    lull_timer_init(loop, &late_arm.timer, early_fired);
    lull_timer_init(loop, &kick, arm_spin_yield);
    lull_timer_start(&kick, 1000, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(mid_yielded);
    if (!check_yield_often()) {
        CHECK_U64_EQ(mid_deadline, mid_now + mid_arm.delay);
        CHECK_LE(mid_arm.called + 1 * MS, mid_now);
    } else {
        /* Slices end at random there, and a lull_loop_should_yield that
         * ends one reads no clock: the deadline query flushed. */
        CHECK_LE(mid_now + mid_arm.delay, mid_deadline);
    }
    CHECK_LE(late_arm.called + late_arm.delay, late_deadline);
    CHECK_LE(late_deadline, late_after + late_arm.delay);
    check_not_early_fired(&lead_arm);
    check_not_early_fired(&mid_arm);
    check_not_early_fired(&late_arm);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Arms deferred by one callback are flushed by one reading: equal delays
 * get equal deadlines and fire in arm order, a re-arm going to the tail,
 * as on the virtual clock. */
static item tie[4];
static void arm_ties(lull_task *t) {
    (void)t;
    for (int i = 0; i < 4; i++)
        lull_timer_start(&tie[i].timer, 1 * MS, 0);
    lull_timer_start(&tie[0].timer, 1 * MS, 0); /* re-arm: to the tail */
    lull_timer_stop(&tie[1].timer);
    lull_timer_start(&tie[1].timer, 1 * MS, 0); /* stopped, armed again */
    lull_timer_stop(&tie[3].timer);
}

TEST(deferred_arms_with_equal_delays_fire_in_arm_order) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    items_init(tie, 4);
    lull_task task;
    lull_task_init(&task, arm_ties);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_U64_EQ(lull_timer_deadline(&tie[0].timer),
                 lull_timer_deadline(&tie[2].timer));
    CHECK_U64_EQ(lull_timer_deadline(&tie[1].timer),
                 lull_timer_deadline(&tie[2].timer));
    CHECK(!lull_timer_active(&tie[3].timer));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(2, 0, 1);
    CHECK_EQ(tie[3].runs, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Never early with 1,000,000 timers armed: a callback arms a million far
 * timers (1-2 h, deferred, so the flush moves a million slots into the
 * heap), then a chain of tasks arms short probes (1 us - 1 ms) at stale
 * moments (after spinning up to 200 us, before and after readings inside
 * the callback) while it cancels and re-arms far timers, so probes are
 * deferred beside cancels of deferred arms and of heap timers, and the
 * flush finds a heap of 10^6. Every probe fires once, never before its
 * delay has passed since its call; no far timer fires. */
#define MILLION 1000000u
#define PROBES  2000
#define ROUNDS  400

static lull_timer *far_timers;
static early probes[PROBES];
static int probes_armed, probe_rounds, far_fired;
static lull_task probe_task;
static uint64_t probe_rng = 0x2545f4914f6cdd1dull;

static uint64_t probe_rand(void) {
    probe_rng ^= probe_rng >> 12;
    probe_rng ^= probe_rng << 25;
    probe_rng ^= probe_rng >> 27;
    return probe_rng * 2685821657736338717ull;
}

static void far_fired_fn(lull_timer *t) {
    (void)t;
    far_fired++;
}

static uint64_t far_delay(void) {
    return 3600000 * MS + probe_rand() % (3600000 * MS);
}

static void arm_million(lull_task *t) {
    (void)t;
    for (uint32_t i = 0; i < MILLION; i++)
        lull_timer_start(&far_timers[i], far_delay(), 0);
}

static void arm_probe(void) {
    if (probes_armed == PROBES) return;
    early *e = &probes[probes_armed++];
    e->delay = 1000 + probe_rand() % (1 * MS);
    early_arm_deferred(e);
}

static void probe_round(lull_task *t) {
    arm_probe();
    check_spin_ns(probe_rand() % 200000);
    arm_probe();
    for (int i = 0; i < 8; i++) { /* churn among the million */
        lull_timer *f = &far_timers[probe_rand() % MILLION];
        if (probe_rand() % 2)
            lull_timer_stop(f);
        else
            lull_timer_start(f, far_delay(), 0);
    }
    if (probe_rand() % 4 == 0) (void)lull_loop_should_yield(the_loop);
    arm_probe();
    if (++probe_rounds < ROUNDS) lull_task_post(the_loop, t);
}

TEST(never_early_with_a_million_timers_armed) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    far_timers = calloc(MILLION, sizeof *far_timers);
    CHECK(far_timers != NULL);
    for (uint32_t i = 0; i < MILLION; i++)
        lull_timer_init(loop, &far_timers[i], far_fired_fn);
    for (int i = 0; i < PROBES; i++) {
        probes[i] = (early){0};
        lull_timer_init(loop, &probes[i].timer, early_fired);
    }
    lull_task arm;
    lull_task_init(&arm, arm_million);
    lull_task_post(loop, &arm);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    uint32_t armed = 0;
    for (uint32_t i = 0; i < MILLION; i++)
        armed += lull_timer_active(&far_timers[i]);
    CHECK_EQ(armed, MILLION);
    lull_task_init(&probe_task, probe_round);
    lull_task_post(loop, &probe_task);
    /* The far timers are unreferenced: the run ends when the probes have
     * fired. */
    for (uint32_t i = 0; i < MILLION; i++)
        lull_timer_unref(&far_timers[i]);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(probes_armed, 3 * ROUNDS < PROBES ? 3 * ROUNDS : PROBES);
    for (int i = 0; i < probes_armed; i++)
        check_not_early_fired(&probes[i]);
    CHECK_EQ(far_fired, 0);
    for (uint32_t i = 0; i < MILLION; i++)
        lull_timer_stop(&far_timers[i]);
    CHECK_EQ(lull_loop_free(loop), 0);
    free(far_timers);
}

/* Huge delays deferred in a callback: the flush saturates reading + delay
 * at UINT64_MAX instead of wrapping into the past. A delay chosen so that
 * the arm's cached now + delay is exactly 2^64 (0 when wrapped: due at
 * once) and UINT64_MAX itself both end at UINT64_MAX; a zero-delay repeat
 * with the largest period fires once, as a turn; INT64_MAX counts from
 * after the call. None of the others fires while a guard timer runs. */
static item huge[5];
static uint64_t huge_called;
static void arm_huge(lull_task *t) {
    (void)t;
    huge_called = check_clock_ns();
    uint64_t now = lull_loop_now(the_loop);
    lull_timer_start(&huge[0].timer, UINT64_MAX, 0);
    lull_timer_start(&huge[1].timer, UINT64_MAX - now + 1, 0);
    lull_timer_start(&huge[2].timer, 0, UINT64_MAX);
    lull_timer_start(&huge[3].timer, (uint64_t)INT64_MAX, 0);
    lull_timer_start(&huge[4].timer, 2 * MS, 0); /* the guard */
}

static void huge_guard(lull_timer *t) {
    (void)t;
    check_trace(4);
    for (int i = 0; i < 4; i++)
        lull_timer_unref(&huge[i].timer);
}

TEST(huge_delays_deferred_in_a_callback_saturate) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    items_init(huge, 5);
    lull_timer_init(loop, &huge[4].timer, huge_guard);
    lull_task task;
    lull_task_init(&task, arm_huge);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(2, 4);
    for (int i = 0; i < 2; i++)
        CHECK_U64_EQ(lull_timer_deadline(&huge[i].timer), UINT64_MAX);
    CHECK_U64_EQ(lull_timer_deadline(&huge[2].timer), UINT64_MAX);
    CHECK_LE(huge_called + (uint64_t)INT64_MAX,
             lull_timer_deadline(&huge[3].timer));
    for (int i = 0; i < 4; i++)
        lull_timer_stop(&huge[i].timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* fork() inside a callback with arms deferred: the child's copy of the
 * loop is in the same slice, so after lull_loop_fork its own arms defer
 * too, and its loop flushes them when the callback returns. Neither
 * process fires early, and each fires only its own timers. Then a child
 * forked outside any run arms with a reading of its own. */
static early fork_parent_arm, fork_child_arm;
static pid_t fork_pid = -1;
static void arm_then_fork(lull_task *t) {
    (void)t;
    check_spin_ns(1 * MS); /* the cached now is 1 ms old at the arm */
    early_arm_deferred(&fork_parent_arm);
    fork_pid = fork();
    CHECK(fork_pid >= 0);
    if (fork_pid != 0) return;
    CHECK_EQ(lull_loop_fork(the_loop), 0);
    lull_timer_stop(&fork_parent_arm.timer); /* the parent's, in the copy */
    check_spin_ns(1 * MS);                   /* 2 ms old at the child's arm */
    early_arm_deferred(&fork_child_arm);
}

static void run_forked_child_outside(void *arg) {
    lull_loop *loop = arg;
    CHECK_EQ(lull_loop_fork(loop), 0);
    check_spin_ns(2 * MS);
    early e = {.delay = 1 * MS};
    lull_timer_init(loop, &e.timer, early_fired);
    early_arm_deferred(&e); /* outside a run: reads the clock */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    check_not_early_fired(&e);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(deferred_arms_across_fork) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    fork_parent_arm = (early){.delay = 3 * MS};
    fork_child_arm = (early){.delay = 1 * MS};
    lull_timer_init(loop, &fork_parent_arm.timer, early_fired);
    lull_timer_init(loop, &fork_child_arm.timer, early_fired);
    lull_task task;
    lull_task_init(&task, arm_then_fork);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    if (fork_pid == 0) {
        /* The child: its own arm fired, never early; the parent's did not. */
        check_not_early_fired(&fork_child_arm);
        CHECK_U64_EQ(fork_parent_arm.fired, 0);
        CHECK_EQ(lull_loop_free(loop), 0);
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(fork_pid, &status, 0), fork_pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    check_not_early_fired(&fork_parent_arm);
    CHECK_U64_EQ(fork_child_arm.fired, 0);
    CHECK(check_exits_cleanly(run_forked_child_outside, loop));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A loop moved between threads (each run adopts it): the arms a callback
 * defers on one thread are flushed by that thread's readings, before its
 * run returns, and the next thread starts with none deferred. */
typedef struct mover {
    lull_loop *loop;
    early e[3];
    int runs;
} mover;

static mover *the_mover;
static void mover_task(lull_task *t) {
    (void)t;
    early *e = &the_mover->e[the_mover->runs];
    check_spin_ns(1 * MS); /* the cached now is 1 ms old at the arm */
    early_arm_deferred(e);
}

static void *mover_run(void *arg) {
    mover *m = arg;
    CHECK_EQ(lull_loop_adopt(m->loop), 0);
    lull_task t;
    lull_task_init(&t, mover_task);
    lull_task_post(m->loop, &t);
    CHECK_EQ(lull_loop_run(m->loop, LULL_RUN_DEFAULT), 0);
    check_not_early_fired(&m->e[m->runs]);
    m->runs++;
    return NULL;
}

TEST_THREADED(deferred_arms_on_a_loop_moved_between_threads) {
    static mover m;
    m = (mover){.loop = new_loop(LULL_CLOCK_MONOTONIC)};
    the_mover = &m;
    for (int i = 0; i < 3; i++) {
        m.e[i] = (early){.delay = (uint64_t)(i + 1) * MS};
        lull_timer_init(m.loop, &m.e[i].timer, early_fired);
    }
    for (int i = 0; i < 3; i++) {
        pthread_t th;
        CHECK_EQ(pthread_create(&th, NULL, mover_run, &m), 0);
        CHECK_EQ(pthread_join(th, NULL), 0);
    }
    CHECK_EQ(m.runs, 3);
    CHECK_EQ(lull_loop_adopt(m.loop), 0);
    CHECK_EQ(lull_loop_free(m.loop), 0);
}

/* The virtual clock is untouched by real time: an arm after real work
 * still counts from the virtual now, exactly. */
static item virt[1];
static uint64_t virt_deadline, virt_now;
static void spin_then_arm_virtual(lull_task *t) {
    (void)t;
    check_spin_ns(1 * MS);
    lull_timer_start(&virt[0].timer, 10, 0);
    virt_deadline = lull_timer_deadline(&virt[0].timer);
    virt_now = lull_loop_now(the_loop);
}

TEST(virtual_arm_ignores_real_time) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_loop_advance(loop, 1000);
    items_init(virt, 1);
    lull_task task;
    lull_task_init(&task, spin_then_arm_virtual);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_U64_EQ(virt_now, t0 + 1000);
    CHECK_U64_EQ(virt_deadline, t0 + 1010);
    CHECK_U64_EQ(lull_loop_now(loop), t0 + 1000);
    lull_loop_advance(loop, 10);
    CHECK_EQ(virt[0].runs, 1);
    CHECK_U64_EQ(virt[0].fired_at, 1010);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Inside a callback a zero-delay arm reads no clock: it is a queue push
 * (C3: a task's cost), also when it re-arms an armed timer. The first
 * delayed arm of a callback reads the clock (its delay counts from the
 * call); a further one is deferred to the loop's next reading (src/timer.c)
 * and reads none. A read shows as a fresher lull_loop_now: inside one
 * callback nothing else refreshes it. */
static item zd[3];
static uint64_t zd_before, zd_after_zero, zd_after_rearm, zd_after_delay;
static uint64_t zd_after_second;
static void zero_delay_then_delayed(lull_task *t) {
    (void)t;
    zd_before = lull_loop_now(the_loop);
    check_spin_ns(1 * MS);
    lull_timer_start(&zd[0].timer, 0, 0);
    zd_after_zero = lull_loop_now(the_loop);
    lull_timer_start(&zd[0].timer, 0, 0); /* re-arm: the out-of-line path */
    zd_after_rearm = lull_loop_now(the_loop);
    lull_timer_start(&zd[1].timer, 1, 0);
    zd_after_delay = lull_loop_now(the_loop);
    check_spin_ns(1000);
    lull_timer_start(&zd[2].timer, 1, 0);
    zd_after_second = lull_loop_now(the_loop);
}

TEST(arms_in_a_callback_read_no_clock) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    items_init(zd, 3);
    lull_task task;
    lull_task_init(&task, zero_delay_then_delayed);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(zd_after_zero, zd_before);
    CHECK_U64_EQ(zd_after_rearm, zd_before);
    CHECK_LE(zd_before + 1 * MS, zd_after_delay);
    CHECK_U64_EQ(zd_after_second, zd_after_delay);
    CHECK_EQ(zd[0].runs, 1);
    CHECK_EQ(zd[1].runs, 1);
    CHECK_EQ(zd[2].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------------ deferral bound
 * How much later than its call a delayed arm made inside a callback may
 * start counting its delay (lull.h, lull_timer_start): not at all for the
 * callback's first delayed arm, which reads the clock; for a further one,
 * until the next slice check, which comes when the callback returns or at
 * its next lull_loop_should_yield call, whichever is first. Checked on a
 * fake CLOCK_MONOTONIC that moves only when the case moves it (the binary
 * is linked with -Wl,--wrap=clock_gettime, tests/CMakeLists.txt), so the
 * lateness is exact whatever the machine does. The timers are an hour
 * away and unreferenced: the run ends when the tasks do. */

static struct {
    bool on;
    uint64_t ns;
    uint64_t reads; /* CLOCK_MONOTONIC readings taken while on */
} fake_clock;

int __real_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts) {
    if (!fake_clock.on || id != CLOCK_MONOTONIC)
        return __real_clock_gettime(id, ts);
    fake_clock.reads++;
    ts->tv_sec = (time_t)(fake_clock.ns / 1000000000u);
    ts->tv_nsec = (long)(fake_clock.ns % 1000000000u);
    return 0;
}

#define US   1000ull
#define HOUR (3600ull * 1000 * MS)

typedef struct bound_arm {
    lull_timer timer;
    uint64_t called; /* the fake clock at the call */
} bound_arm;

static void bound_fired(lull_timer *t) {
    (void)t;
    CHECK(!"an hour-long timer fired");
}

static lull_loop *bound_loop(bound_arm *arms, int n) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    for (int i = 0; i < n; i++) {
        lull_timer_init(loop, &arms[i].timer, bound_fired);
        lull_timer_unref(&arms[i].timer);
    }
    return loop;
}

static void bound_arm_now(bound_arm *a) {
    a->called = fake_clock.ns;
    lull_timer_start(&a->timer, HOUR, 0);
}

/* Where the arm's delay counts from, minus its call. */
static uint64_t bound_late(bound_arm *a) {
    return lull_timer_deadline(&a->timer) - HOUR - a->called;
}

static void bound_end(lull_loop *loop, bound_arm *arms, int n) {
    for (int i = 0; i < n; i++)
        lull_timer_stop(&arms[i].timer);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A producer of 1 us tasks, each arming one timer: every arm is its
 * callback's first, so each counts from its own call. (Deferred to the
 * loop's next reading, one stride of 1 us callbacks later, they started up
 * to 32 us late here, and far later when the thread was preempted.) */
#define PRODUCER_TASKS 1000
static bound_arm producer_arms[PRODUCER_TASKS];
static int producer_next;
static void produce_1us(lull_task *t) {
    fake_clock.ns += 1 * US; /* the record's work */
    bound_arm_now(&producer_arms[producer_next]);
    fake_clock.ns += 100; /* the rest of the callback */
    if (++producer_next < PRODUCER_TASKS) lull_task_post(the_loop, t);
}

TEST(arm_in_a_1us_producer_counts_from_its_call) {
    lull_loop *loop = bound_loop(producer_arms, PRODUCER_TASKS);
    producer_next = 0;
    lull_task task;
    lull_task_init(&task, produce_1us);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(producer_next, PRODUCER_TASKS);
    for (int i = 0; i < PRODUCER_TASKS; i++)
        CHECK_U64_EQ(bound_late(&producer_arms[i]), 0);
    bound_end(loop, producer_arms, PRODUCER_TASKS);
}

/* A watchdog armed at the start of 10 ms of synchronous work that calls
 * nothing of lull's is not stretched by the work. */
static bound_arm watchdog;
static void arm_then_work(lull_task *t) {
    (void)t;
    bound_arm_now(&watchdog);
    fake_clock.ns += 10 * MS;
}

TEST(watchdog_armed_before_long_work_is_not_stretched) {
    lull_loop *loop = bound_loop(&watchdog, 1);
    lull_task task;
    lull_task_init(&task, arm_then_work);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(bound_late(&watchdog), 0);
    bound_end(loop, &watchdog, 1);
}

/* A further arm in a long callback that calls lull_loop_should_yield every
 * 5 us (as C5 asks of long work): its first call after the arm flushes
 * it, so it starts 5 us late, not 5 ms. */
static bound_arm yield_arms[2];
static void arm_twice_then_yielding_work(lull_task *t) {
    (void)t;
    bound_arm_now(&yield_arms[0]);
    fake_clock.ns += 1 * US;
    bound_arm_now(&yield_arms[1]);
    for (int i = 0; i < 1000; i++) {
        fake_clock.ns += 5 * US;
        (void)lull_loop_should_yield(the_loop);
    }
}

TEST(further_arm_in_a_long_callback_flushed_by_should_yield) {
    lull_loop *loop = bound_loop(yield_arms, 2);
    lull_task task;
    lull_task_init(&task, arm_twice_then_yielding_work);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(bound_late(&yield_arms[0]), 0);
    CHECK_U64_EQ(bound_late(&yield_arms[1]), 5 * US);
    bound_end(loop, yield_arms, 2);
}

/* A further arm that finds the heap full grows it inside its call (a
 * realloc with its copy and page faults: milliseconds with 10^6 timers
 * armed), so it reads the clock first, as the callback's first arm does:
 * the growth cannot stretch it. That reading flushes the arms deferred
 * before it; the arms after the last growth wait for the callback's end.
 * The arms are 1 us apart, then 1 ms of work. */
#define GROW_ARMS 5000
static bound_arm grow_arms[GROW_ARMS];
static bool grow_read[GROW_ARMS];
static void arm_many_then_work(lull_task *t) {
    (void)t;
    for (int i = 0; i < GROW_ARMS; i++) {
        uint64_t reads = fake_clock.reads;
        bound_arm_now(&grow_arms[i]);
        grow_read[i] = fake_clock.reads > reads;
        fake_clock.ns += 1 * US;
    }
    fake_clock.ns += 1 * MS;
}

TEST(further_arm_that_grows_the_heap_reads_the_clock_first) {
    lull_loop *loop = bound_loop(grow_arms, GROW_ARMS);
    lull_task task;
    lull_task_init(&task, arm_many_then_work);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(grow_read[0]); /* the callback's first delayed arm */
    int growths = 0, last = 0;
    for (int i = 1; i < GROW_ARMS; i++) {
        if (!grow_read[i]) continue;
        growths++;
        CHECK_U64_EQ(bound_late(&grow_arms[i]), 0);
        for (int j = last + 1; j < i; j++)
            CHECK_U64_EQ(bound_late(&grow_arms[j]), (uint64_t)(i - j) * US);
        last = i;
    }
    CHECK(growths > 0);
    for (int j = last + 1; j < GROW_ARMS; j++)
        CHECK_U64_EQ(bound_late(&grow_arms[j]),
                     (uint64_t)(GROW_ARMS - j) * US + 1 * MS);
    bound_end(loop, grow_arms, GROW_ARMS);
}

/* A further arm is flushed when its callback returns, even when the stride
 * between the loop's readings has grown (64 short tasks ran first): the
 * 1 ms task after it does not stretch it. */
static bound_arm return_arms[2];
static int short_left;
static lull_task short_task, arming_task, heavy_task;
static void heavy_work(lull_task *t) {
    (void)t;
    fake_clock.ns += 1 * MS;
}
static void arm_twice_and_return(lull_task *t) {
    (void)t;
    bound_arm_now(&return_arms[0]);
    bound_arm_now(&return_arms[1]);
    fake_clock.ns += 3 * US;
    lull_task_post(the_loop, &heavy_task);
}
static void short_work(lull_task *t) {
    fake_clock.ns += 100;
    if (--short_left > 0)
        lull_task_post(the_loop, t);
    else
        lull_task_post(the_loop, &arming_task);
}

TEST(further_arm_flushed_when_its_callback_returns) {
    lull_loop *loop = bound_loop(return_arms, 2);
    short_left = 64;
    lull_task_init(&short_task, short_work);
    lull_task_init(&arming_task, arm_twice_and_return);
    lull_task_init(&heavy_task, heavy_work);
    lull_task_post(loop, &short_task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(bound_late(&return_arms[0]), 0);
    CHECK_U64_EQ(bound_late(&return_arms[1]), 3 * US);
    bound_end(loop, return_arms, 2);
}

/* A further arm after lull_loop_stop: the callback's next
 * lull_loop_should_yield still flushes it, as it does once the quantum is
 * spent, so the 1 ms of work after that call does not stretch it (it
 * waited for the slice's end before). Both slice checks: the one that
 * reads every few callbacks and an every-hop loop's (quantum_ns = 1). */
static bound_arm stop_arms[2];
static void stop_then_arm_twice_and_yield(lull_task *t) {
    (void)t;
    lull_loop_stop(the_loop);
    bound_arm_now(&stop_arms[0]);
    fake_clock.ns += 1 * US;
    bound_arm_now(&stop_arms[1]);
    fake_clock.ns += 5 * US;
    CHECK(lull_loop_should_yield(the_loop));
    fake_clock.ns += 1 * MS;
}

static void further_arm_after_a_stop(uint64_t quantum_ns) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop_options o = {.quantum_ns = quantum_ns};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    for (int i = 0; i < 2; i++) {
        lull_timer_init(loop, &stop_arms[i].timer, bound_fired);
        lull_timer_unref(&stop_arms[i].timer);
    }
    lull_task task;
    lull_task_init(&task, stop_then_arm_twice_and_yield);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(bound_late(&stop_arms[0]), 0);
    CHECK_U64_EQ(bound_late(&stop_arms[1]), 5 * US);
    bound_end(loop, stop_arms, 2);
}

TEST(further_arm_after_a_stop_flushed_by_should_yield) {
    further_arm_after_a_stop(0);
}

TEST(further_arm_after_a_stop_flushed_by_should_yield_every_hop) {
    further_arm_after_a_stop(1);
}

/* Callbacks that run at a flush point (a frame's release, run by its
 * stream's write flush) are followed by no slice check: a further arm in
 * one is flushed when it returns all the same, so the next flush task's
 * 1 ms does not stretch it (it waited for the slice's end before). */
static bound_arm flush_arms[2];
static lull_stream flush_streams[2];
static lull_frame flush_frames[2];

static void release_arms_twice(lull_frame *f) {
    (void)f;
    bound_arm_now(&flush_arms[0]);
    fake_clock.ns += 1 * US;
    bound_arm_now(&flush_arms[1]);
}

static void release_after_work(lull_frame *f) {
    (void)f;
    fake_clock.ns += 1 * MS;
}

static void send_on_both_streams(lull_task *t) {
    (void)t;
    for (int i = 0; i < 2; i++)
        CHECK_EQ(lull_endpoint_send(&flush_streams[i].ep, &flush_frames[i]), 0);
}

TEST(further_arm_at_a_flush_point_flushed_when_its_callback_returns) {
    lull_loop *loop = bound_loop(flush_arms, 2);
    int sv[2][2];
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    lull_release_fn releases[2] = {release_arms_twice, release_after_work};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]), 0);
        CHECK_EQ(lull_stream_open(loop, &flush_streams[i], sv[i][0], &raw), 0);
        CHECK_EQ(lull_endpoint_read_stop(&flush_streams[i].ep), 0);
        flush_frames[i] =
            (lull_frame){.bytes = "x", .len = 1, .release = releases[i]};
    }
    lull_task task;
    lull_task_init(&task, send_on_both_streams);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(!flush_frames[0].in_flight && !flush_frames[1].in_flight);
    CHECK_U64_EQ(bound_late(&flush_arms[0]), 0);
    CHECK_U64_EQ(bound_late(&flush_arms[1]), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(lull_endpoint_close(&flush_streams[i].ep, 0), 0);
        close(sv[i][1]);
    }
    bound_end(loop, flush_arms, 2);
}

/* ------------------------------------------------------------ overrun */

/* The accessors a timer answers on its own, called on one whose loop was
 * freed (the timer is the caller's memory and outlives it): they read the
 * freed loop to ask whether the timer fires (ASan: a use after free). A
 * timer whose loop is gone is firing nowhere: 0, without the loop. */
static void note_fire(lull_timer *t) {
    (void)t;
}

TEST(accessors_after_the_loop_is_freed) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_timer t;
    CHECK_EQ(lull_timer_init(loop, &t, note_fire), 0);
    lull_timer_start(&t, MS, MS);
    lull_loop_advance(loop, 3 * MS);
    lull_timer_stop(&t);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_U64_EQ(lull_timer_overrun(&t), 0);
    CHECK_U64_EQ(lull_timer_fire_deadline(&t), 0);
    CHECK_U64_EQ(lull_timer_deadline(&t), 0);
    CHECK(!lull_timer_active(&t));
    lull_timer_stop(&t);
    lull_timer_ref(&t);
    lull_timer_unref(&t);
}

/* lull_timer_overrun: inside the callback, the periods this fire stands
 * for. Exact on the real clock whatever the machine's load: the deadline a
 * repeating timer is re-armed for is its first deadline plus (the periods
 * all its fires stood for) x period, so summing the overruns must land on
 * it. A callback that spins 5.5 periods guarantees a late fire. */
typedef struct overrun_probe {
    lull_timer timer;
    uint64_t period;
    uint64_t first;   /* the first deadline */
    uint64_t periods; /* sum of the overruns seen */
    uint64_t fires;
    uint64_t max;  /* the largest overrun seen */
    bool phase_ok; /* every re-armed deadline matched the sum */
    bool fire_ok;  /* every lull_timer_fire_deadline was the first period's */
    uint64_t stop_after;
} overrun_probe;

static void probe_tick(lull_timer *t) {
    overrun_probe *p = LULL_CONTAINER_OF(t, overrun_probe, timer);
    uint64_t k = lull_timer_overrun(t);
    CHECK_LE(1, k);
    /* The deadline this fire is for: the first of the k periods, which
     * follows the periods all earlier fires stood for; 0 for a one-shot. */
    uint64_t want = t->repeat ? p->first + p->periods * p->period : 0;
    if (lull_timer_fire_deadline(t) != want) p->fire_ok = false;
    p->periods += k;
    p->fires++;
    if (k > p->max) p->max = k;
    if (lull_timer_deadline(t) != p->first + p->periods * p->period)
        p->phase_ok = false;
    if (p->fires == 1) check_spin_ns(p->period * 11 / 2);
    if (p->fires == p->stop_after) lull_timer_stop(t);
    /* Kept whatever the callback did to the timer. */
    if (lull_timer_fire_deadline(t) != want) p->fire_ok = false;
}

TEST(overrun_counts_the_periods_a_late_fire_stands_for) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    overrun_probe p = {
        .period = 2 * MS, .phase_ok = true, .fire_ok = true, .stop_after = 4};
    lull_timer_init(loop, &p.timer, probe_tick);
    lull_timer_start(&p.timer, p.period, p.period);
    p.first = lull_timer_deadline(&p.timer);
    CHECK_U64_EQ(lull_timer_overrun(&p.timer), 0); /* not in its callback */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(p.fires, 4);
    CHECK(p.phase_ok);
    CHECK(p.fire_ok);
    CHECK_U64_EQ(lull_timer_fire_deadline(&p.timer), 0); /* outside */
    /* The fire after the spin stood for at least the 5 periods that ended
     * during it (deadlines 2 .. 6 periods after the first one). */
    CHECK_LE(5, p.max);
    CHECK_LE(p.fires + 4, p.periods);
    CHECK_U64_EQ(lull_timer_overrun(&p.timer), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A fire that waits in the due list (lull_loop_stop ended the run before it)
 * while more periods expire stands for those too. */
static void stop_the_run(lull_timer *t) {
    (void)t;
    lull_loop_stop(the_loop);
}

TEST(overrun_of_a_fire_left_waiting_by_lull_stop) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_timer stopper;
    overrun_probe p = {
        .period = 2 * MS, .phase_ok = true, .fire_ok = true, .stop_after = 1};
    lull_timer_init(loop, &stopper, stop_the_run);
    lull_timer_init(loop, &p.timer, probe_tick);
    /* Armed first with the same delay: the stopper is due no later and
     * runs first (arm order), stopping the run before the probe fires. */
    lull_timer_start(&stopper, p.period, 0);
    lull_timer_start(&p.timer, p.period, p.period);
    p.first = lull_timer_deadline(&p.timer);
    while (check_clock_ns() < p.first) {
    }
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_U64_EQ(p.fires, 0);
    CHECK(lull_timer_active(&p.timer)); /* due, waiting */
    check_spin_ns(3 * p.period);        /* three more periods expire */
    p.stop_after = 2;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_U64_EQ(p.fires, 1);
    CHECK(p.phase_ok);
    CHECK(p.fire_ok); /* the first of the periods the late fire stands for */
    CHECK_LE(4, p.periods); /* its own period and at least three more */
    lull_timer_stop(&p.timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* On the virtual clock lull_loop_advance fires once per period crossed: every
 * fire stands for one period. A one-shot timer's fire is one period too,
 * and a zero-delay turn (no deadline) reports 0. */
static uint64_t turn_overrun = 99, turn_fire_deadline = 99;
static void note_turn(lull_timer *t) {
    turn_overrun = lull_timer_overrun(t);
    turn_fire_deadline = lull_timer_fire_deadline(t);
}

TEST(overrun_is_one_per_period_on_the_virtual_clock) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    overrun_probe p = {
        .period = 10, .phase_ok = true, .fire_ok = true, .stop_after = 0};
    lull_timer_init(loop, &p.timer, probe_tick);
    lull_timer_start(&p.timer, 10, 10);
    p.first = lull_timer_deadline(&p.timer);
    /* probe_tick spins 5.5 periods of real time on its first fire: on the
     * virtual clock that moves nothing. */
    lull_loop_advance(loop, 1000);
    CHECK_U64_EQ(p.fires, 100);
    CHECK_U64_EQ(p.periods, 100);
    CHECK_U64_EQ(p.max, 1);
    CHECK(p.phase_ok);
    CHECK(p.fire_ok);
    lull_timer_stop(&p.timer);

    overrun_probe once = {.period = 0, .phase_ok = true, .fire_ok = true};
    lull_timer_init(loop, &once.timer, probe_tick);
    lull_timer_start(&once.timer, 5, 0);
    lull_loop_advance(loop, 5);
    CHECK_U64_EQ(once.fires, 1);
    CHECK_U64_EQ(once.periods, 1);
    CHECK(once.fire_ok); /* a one-shot: 0 */

    lull_timer turn;
    lull_timer_init(loop, &turn, note_turn);
    lull_timer_start(&turn, 0, 0);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_U64_EQ(turn_overrun, 0);
    CHECK_U64_EQ(turn_fire_deadline, 0);
    CHECK_U64_EQ(lull_timer_overrun(NULL), 0);
    CHECK_U64_EQ(lull_timer_fire_deadline(NULL), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_timer_fire_deadline where the next period's deadline saturates at
 * UINT64_MAX, so that the heap's deadline no longer gives the fire's: a
 * period past the end of the clock, and a timer near the end, whose last
 * fire is for UINT64_MAX itself (after which it stops). It said 5, then
 * UINT64_MAX - 20 and 0. */
static uint64_t sat_fire[4], sat_overrun[4];
static int sat_fires;
static void note_fire_deadline(lull_timer *t) {
    if (sat_fires < 4) {
        sat_fire[sat_fires] = lull_timer_fire_deadline(t);
        sat_overrun[sat_fires] = lull_timer_overrun(t);
    }
    sat_fires++;
}

TEST(fire_deadline_where_the_next_period_saturates) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_timer t;
    lull_timer_init(loop, &t, note_fire_deadline);
    sat_fires = 0;
    lull_timer_start(&t, 10, UINT64_MAX - 5);
    lull_loop_advance(loop, 10);
    CHECK_EQ(sat_fires, 1);
    CHECK_U64_EQ(sat_fire[0], 10);
    CHECK_U64_EQ(sat_overrun[0], 1);
    CHECK_U64_EQ(lull_timer_deadline(&t), UINT64_MAX);
    lull_timer_stop(&t);

    sat_fires = 0;
    uint64_t end = UINT64_MAX - 10;
    lull_timer_start(&t, end - lull_loop_now(loop), 20);
    CHECK_U64_EQ(lull_timer_deadline(&t), end);
    lull_loop_advance(loop, UINT64_MAX);
    CHECK_EQ(sat_fires, 2);
    CHECK_U64_EQ(sat_fire[0], end);
    CHECK_U64_EQ(sat_fire[1], UINT64_MAX);
    CHECK_U64_EQ(sat_overrun[0], 1);
    CHECK_U64_EQ(sat_overrun[1], 1);
    CHECK(!lull_timer_active(&t));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* LULL_S, LULL_MS and LULL_US give uint64_t ns, multiply after widening
 * (no int overflow), take any expression, and drive a timer as written. */
TEST(duration_macros) {
    CHECK_U64_EQ(LULL_S(1), 1000000000u);
    CHECK_U64_EQ(LULL_MS(1), 1000000u);
    CHECK_U64_EQ(LULL_US(1), 1000u);
    CHECK_U64_EQ(LULL_S(5), 5000000000ull); /* past INT_MAX */
    CHECK_U64_EQ(LULL_S(86400 * 365), 31536000000000000ull);
    CHECK_U64_EQ(LULL_MS(1 + 1), 2000000u); /* x parenthesized */
    CHECK_U64_EQ(LULL_US(1500), LULL_MS(1) + LULL_US(500));
    CHECK_EQ((int)sizeof(LULL_MS(1)), 8);
    int n = 3;
    CHECK_U64_EQ(LULL_MS(n), 3000000u);
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item it[1];
    items_init(it, 1);
    lull_timer_start(&it[0].timer, LULL_MS(250), 0);
    lull_loop_advance(loop, LULL_MS(250) - 1);
    CHECK_EQ(it[0].runs, 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(it[0].runs, 1);
    CHECK_U64_EQ(it[0].fired_at, LULL_MS(250));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A one-shot timer that re-arms itself with a delay from its own callback
 * (a heartbeat written the libuv way) near the end of virtual time: once
 * the clock is at UINT64_MAX, now + delay is past it, where no clock
 * goes, so the re-arm never fires, as a repeat that fires there has no
 * next period. It fired at every iteration instead, for ever:
 * lull_loop_advance and an auto-advancing lull_loop_run never returned.
 * The callback stops re-arming after 100 fires, so the old spin fails the
 * case rather than hang it. */
static int end_fires;
static uint64_t end_fired_at[2];
static void rearm_self_until_100(lull_timer *t) {
    if (end_fires < 2) end_fired_at[end_fires] = lull_loop_now(the_loop);
    if (++end_fires < 100) lull_timer_start(t, 5, 0);
}

TEST(rearm_at_the_end_of_virtual_time_does_not_spin) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_timer t;
    lull_timer_init(loop, &t, rearm_self_until_100);
    lull_loop_advance(loop, UINT64_MAX - 5 - lull_loop_now(loop));
    end_fires = 0;
    lull_timer_start(&t, 0, 0); /* fires at UINT64_MAX - 5, then at the end */
    lull_loop_advance(loop, UINT64_MAX);
    CHECK_EQ(end_fires, 2);
    CHECK_U64_EQ(end_fired_at[0], UINT64_MAX - 5);
    CHECK_U64_EQ(end_fired_at[1], UINT64_MAX);
    CHECK(!lull_timer_active(&t));

    /* At the end already, a delayed arm is never: not armed at all. */
    end_fires = 0;
    lull_timer_start(&t, 1, 0);
    CHECK(!lull_timer_active(&t));
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(end_fires, 0);
    CHECK_EQ(lull_loop_free(loop), 0);

    /* An auto-advancing run jumps to the saturated deadline, fires it once,
     * and returns. */
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL,
                           .flags = LULL_LOOP_AUTO_ADVANCE};
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    lull_timer_init(loop, &t, rearm_self_until_100);
    end_fires = 0;
    lull_timer_start(&t, UINT64_MAX, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(end_fires, 1);
    CHECK_U64_EQ(end_fired_at[0], UINT64_MAX);
    CHECK(!lull_timer_active(&t));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A million repeating timers fire late in one batch, so each fire stands
 * for several periods (an overrun entry each), and the first to run stops
 * them all: a stop finds its timer's entry without walking the others
 * (walking them was a quadratic stop-all, 5 x 10^11 compares here). On the
 * fake clock, so that every one of them is late by the same periods. */
static lull_timer *late_timers;
static uint64_t late_fires, late_overrun;
static void stop_all_late(lull_timer *t) {
    late_fires++;
    late_overrun = lull_timer_overrun(t);
    for (uint32_t i = 0; i < MILLION; i++)
        lull_timer_stop(&late_timers[i]);
}

TEST(stopping_a_million_late_repeating_timers_in_one_callback) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    late_timers = calloc(MILLION, sizeof *late_timers);
    CHECK(late_timers != NULL);
    for (uint32_t i = 0; i < MILLION; i++) {
        lull_timer_init(loop, &late_timers[i], stop_all_late);
        lull_timer_start(&late_timers[i], 1 * MS, 1 * MS);
    }
    fake_clock.ns += 10 * MS; /* ten periods expired: deadlines 1 .. 10 ms */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_U64_EQ(late_fires, 1);
    CHECK_U64_EQ(late_overrun, 10);
    for (uint32_t i = 0; i < MILLION; i++)
        CHECK(!lull_timer_active(&late_timers[i]));
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
    free(late_timers);
}

/* A timer freed while due (its memory reused: here overwritten by the
 * callback of a timer due before it at the same deadline) corrupts the due
 * list, which debug builds promise to catch (docs/API.md, Errors). The
 * walk at iteration boundaries comes too late for the same batch: the
 * runner unlinked the freed node through its scribbled links and crashed
 * (SIGSEGV, no message). Release builds do not check. */
static lull_timer *g_victim_timer;
static void scribble_on_victim_timer(lull_timer *t) {
    (void)t;
    memset(g_victim_timer, 0xab, sizeof *g_victim_timer);
}

static void free_a_due_timer(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    static lull_timer first, victim, last;
    g_victim_timer = &victim;
    lull_timer_init(loop, &first, scribble_on_victim_timer);
    lull_timer_init(loop, &victim, scribble_on_victim_timer);
    lull_timer_init(loop, &last, scribble_on_victim_timer);
    lull_timer_start(&first, 10, 0);
    lull_timer_start(&victim, 10, 0);
    lull_timer_start(&last, 10, 0);
    lull_loop_advance(loop, 10);
}

TEST(timer_freed_while_due_is_caught_in_debug_builds) {
    if (!check_debug_build()) return;
    CHECK(check_dies(free_a_due_timer, NULL,
                     "lull: due list corrupted (a timer freed or set up "
                     "again while armed?)"));
}

/* A repeating timer whose loop looks exactly one period late (the clock
 * reads its next deadline, to the nanosecond) fires once for both periods
 * and stays armed on its grid. Checked on the fake clock, where "exactly"
 * is certain. (A `next < now` for `next <= now` in next_deadline took the
 * next period as not yet missed, kept it as the next deadline, and then
 * found it not after now: the timer was dropped from the heap, and never
 * fired again.) */
static int exact_fires;
static uint64_t exact_overrun[2];
static void exact_tick(lull_timer *t) {
    exact_overrun[exact_fires++] = lull_timer_overrun(t);
    if (exact_fires == 1)
        fake_clock.ns = 1006 * MS; /* the next deadline, on time */
    else
        lull_timer_stop(t);
}

TEST(repeat_seen_exactly_one_period_late_stays_armed) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_timer t;
    lull_timer_init(loop, &t, exact_tick);
    exact_fires = 0;
    lull_timer_start(&t, 2 * MS, 2 * MS);
    CHECK_U64_EQ(lull_timer_deadline(&t), 1002 * MS);
    fake_clock.ns = 1004 * MS; /* the second deadline, exactly */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(exact_fires, 2);
    CHECK_U64_EQ(exact_overrun[0], 2); /* 1002 and 1004 */
    CHECK_U64_EQ(exact_overrun[1], 1);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A repeating fire left waiting in the due list by lull_loop_stop, while
 * three more periods expire, stands for them all, and its
 * lull_timer_fire_deadline is still the deadline it was queued for (the
 * first of the four), not the one expiry found it at. On the fake clock:
 * overrun_of_a_fire_left_waiting_by_lull_stop checks the same on the real
 * clock, where the run may find the probe not yet due and the check then
 * passes whatever the deadline kept. */
static uint64_t waited_overrun, waited_fire_deadline;
static int waited_fires;
static void note_waited(lull_timer *t) {
    waited_fires++;
    waited_overrun = lull_timer_overrun(t);
    waited_fire_deadline = lull_timer_fire_deadline(t);
    lull_timer_stop(t);
}

TEST(fire_left_waiting_keeps_the_deadline_it_was_queued_for) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_timer stopper, t;
    lull_timer_init(loop, &stopper, stop_the_run);
    lull_timer_init(loop, &t, note_waited);
    waited_fires = 0;
    lull_timer_start(&stopper, 2 * MS, 0); /* first: arm order */
    lull_timer_start(&t, 2 * MS, 2 * MS);
    fake_clock.ns = 1002 * MS;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(waited_fires, 0); /* due, waiting behind the stop */
    fake_clock.ns = 1008 * MS; /* 1004, 1006 and 1008 expire too */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(waited_fires, 1);
    CHECK_U64_EQ(waited_overrun, 4);
    CHECK_U64_EQ(waited_fire_deadline, 1002 * MS);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A timer stopped while its late fire waits in the due list loses that
 * fire's overrun entry: re-armed, and due again while the entry's batch
 * has not drained (lull_loop_stop left a timer in it), its next fire
 * stands for one period, not for the late fire's stale count. */
static lull_timer *stale_victim;
static void stop_victim_and_run(lull_timer *t) {
    (void)t;
    lull_timer_stop(stale_victim);
    lull_loop_stop(the_loop);
}

TEST(stopped_timer_forgets_its_overrun_before_firing_again) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_timer stopper, late, other;
    lull_timer_init(loop, &stopper, stop_victim_and_run);
    lull_timer_init(loop, &late, note_waited);
    lull_timer_init(loop, &other, note_fire);
    stale_victim = &late;
    waited_fires = 0;
    lull_timer_start(&stopper, 1 * MS, 0);
    lull_timer_start(&late, 2 * MS, 2 * MS);
    lull_timer_start(&other, 3 * MS, 0);
    /* late's first fire stands for 1002, 1004 and 1006: an entry. */
    fake_clock.ns = 1006 * MS;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(!lull_timer_active(&late));
    CHECK(lull_timer_active(&other)); /* still in the due list */
    lull_timer_start(&late, 1 * MS, 0);
    fake_clock.ns = 1007 * MS;
    /* Expiry queues late behind other; both run in this batch. */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(waited_fires, 1);
    CHECK_U64_EQ(waited_overrun, 1);
    CHECK(!lull_timer_active(&other));
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The overrun entry of a zero-delay repeating timer whose period expired
 * while its turn was still queued is never taken (a turn has no
 * deadline); it goes when the due list drains, so the timer's next fire
 * from the heap stands for its own period alone. (Kept, the entry was
 * taken by that fire: two periods, and the turn's deadline.) */
static int turn_then_due_fires;
static uint64_t turn_then_due_overrun, turn_then_due_deadline;
static void note_turn_then_due(lull_timer *t) {
    if (turn_then_due_fires++ == 0) return; /* the turn */
    turn_then_due_overrun = lull_timer_overrun(t);
    turn_then_due_deadline = lull_timer_fire_deadline(t);
    lull_timer_stop(t);
}

TEST(entry_of_a_queued_turn_is_not_taken_by_its_next_fire) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_timer t;
    lull_timer_init(loop, &t, note_turn_then_due);
    turn_then_due_fires = 0;
    lull_timer_start(&t, 0, 2 * MS); /* a turn now, then every 2 ms */
    fake_clock.ns = 1002 * MS;       /* expiry finds the turn queued */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(turn_then_due_fires, 1);
    fake_clock.ns = 1004 * MS;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(turn_then_due_fires, 2);
    CHECK_U64_EQ(turn_then_due_overrun, 1);
    CHECK_U64_EQ(turn_then_due_deadline, 1004 * MS);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_timer_init on an armed timer (its memory may be anything before its
 * first init, so the init cannot look) clears the heap position and links
 * its loop still holds: debug builds stop before the loop follows them,
 * wherever the timer was (in the heap, its restart on the same loop or on
 * another one; queued as a zero-delay turn; due in the batch running, re-
 * initialised by the callback before it); lull_loop_free meanwhile says
 * -EBUSY and leaves the loop as it was. Release builds do not check. */
enum {
    REINIT_IN_HEAP,
    REINIT_AND_RESTART,
    REINIT_ON_ANOTHER_LOOP,
    REINIT_TURN,
    REINIT_DUE_IN_BATCH,
    REINIT_THEN_FREE,
    REINIT_CASES
};
static const char *const reinit_message[REINIT_CASES] = {
    "lull: timer heap slot corrupted", "lull: timer heap slot corrupted",
    "lull: timer heap slot corrupted", "lull: ready queue corrupted",
    "lull: due list corrupted",        "lull: timer heap slot corrupted",
};
static item reinit_v[3];
static void reinit_the_next(lull_timer *t) {
    lull_timer_init(t->loop, &reinit_v[1].timer, record_timer);
}

static void reinit_an_armed_timer(void *arg) {
    int how = (int)(intptr_t)arg;
    lull_loop *b = new_loop(LULL_CLOCK_VIRTUAL);
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    for (int i = 0; i < 3; i++) {
        lull_timer_init(loop, &reinit_v[i].timer,
                        how == REINIT_DUE_IN_BATCH ? reinit_the_next
                                                   : record_timer);
        lull_timer_start(&reinit_v[i].timer, how == REINIT_TURN ? 0 : 10, 0);
    }
    lull_timer *victim = &reinit_v[1].timer;
    switch (how) {
    case REINIT_IN_HEAP:
    case REINIT_TURN:
        lull_timer_init(loop, victim, record_timer);
        break;
    case REINIT_AND_RESTART:
        lull_timer_init(loop, victim, record_timer);
        lull_timer_start(victim, 20, 0);
        break;
    case REINIT_ON_ANOTHER_LOOP:
        lull_timer_init(b, victim, record_timer);
        lull_timer_start(victim, 20, 0);
        lull_loop_advance(b, 100);
        break;
    case REINIT_THEN_FREE:
        lull_timer_init(loop, victim, record_timer);
        CHECK_EQ(lull_loop_free(loop), -EBUSY); /* armed: kept, unchanged */
        break;
    }
    lull_loop_advance(loop, 100);
}

TEST(timer_init_while_armed_is_caught_in_debug_builds) {
    if (!check_debug_build()) return;
    for (int how = 0; how < REINIT_CASES; how++)
        CHECK(check_dies(reinit_an_armed_timer, (void *)(intptr_t)how,
                         reinit_message[how]));
}
