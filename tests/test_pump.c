/* The pump (C4): a wake runs one pass in a later task,
 * shared by every wake before it; AGAIN continues in the next task; HELD
 * retries after *retry_ns only while held, and the retry timer runs the pass
 * itself; a wake while held cancels the retry and the pass re-decides;
 * close cancels everything; lull_pump_quiet is exactly "no task, no timer".
 * Time and order on the virtual clock. */
#include "check.h"
#include "internal.h" /* the pump registry's debug probe count */

#include <errno.h>
#include <lull.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull

typedef struct fixture {
    lull_pump pump;
    lull_loop *loop;
    int passes;
    int held;          /* items held back: the pass returns HELD while > 0 */
    uint64_t retry_ns; /* what a HELD pass asks for */
    int again;         /* the pass returns AGAIN this many more times */
    int wake_inside;   /* the pass wakes its own pump this many times */
    bool close_inside; /* the pass closes its pump */
    bool release_per_pass; /* each HELD pass releases one held item */
    uint64_t at[64];       /* lull_loop_now at each pass, relative to t0 */
    uint64_t t0;
    int depth; /* passes running: more than 1 means a pass ran inline */
} fixture;

static lull_pass_result pass(lull_pump *p, uint64_t *retry_ns) {
    fixture *f = LULL_CONTAINER_OF(p, fixture, pump);
    CHECK_EQ(++f->depth, 1);
    if (f->passes < 64) f->at[f->passes] = lull_loop_now(f->loop) - f->t0;
    f->passes++;
    check_trace(100 + f->passes);
    int status = LULL_PASS_QUIET;
    if (f->wake_inside > 0) {
        f->wake_inside--;
        int before = f->passes;
        lull_pump_wake(p);
        CHECK_EQ(f->passes, before); /* not inline */
    }
    if (f->close_inside) lull_pump_close(p);
    if (f->again > 0) {
        f->again--;
        status = LULL_PASS_AGAIN;
    } else if (f->held > 0) {
        *retry_ns = f->retry_ns;
        status = LULL_PASS_HELD;
        if (f->release_per_pass) f->held--;
    } else {
        lull_pump_delivered(p, 1);
    }
    f->depth--;
    return status;
}

static lull_loop *setup(fixture *f) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    *f = (fixture){.loop = loop, .retry_ns = 5 * MS, .t0 = lull_loop_now(loop)};
    lull_pump_init(loop, &f->pump, pass);
    check_trace_reset();
    return loop;
}

static void teardown(fixture *f) {
    lull_pump_close(&f->pump);
    CHECK(lull_pump_quiet(&f->pump));
    CHECK_EQ(lull_loop_free(f->loop), 0);
}

typedef struct marker {
    lull_task task;
    int id;
} marker;

static void mark(lull_task *t) {
    check_trace(LULL_CONTAINER_OF(t, marker, task)->id);
}

TEST(new_pump_is_quiet) {
    fixture f;
    lull_loop *loop = setup(&f);
    CHECK(lull_pump_quiet(&f.pump));
    CHECK(!lull_loop_alive(loop));
    lull_loop_advance(loop, 1000 * MS);
    CHECK_EQ(f.passes, 0);
    teardown(&f);
}

TEST(wake_runs_one_pass_in_a_later_task) {
    fixture f;
    lull_loop *loop = setup(&f);
    marker m = {.id = 1};
    lull_task_init(&m.task, mark);
    lull_task_post(loop, &m.task);
    lull_pump_wake(&f.pump);
    CHECK_EQ(f.passes, 0); /* never inside the wake */
    CHECK(!lull_pump_quiet(&f.pump));
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_TRACE(1, 101); /* queued behind the task posted before the wake */
    CHECK(lull_pump_quiet(&f.pump));
    CHECK_U64_EQ(f.pump.passes, 1);
    CHECK_U64_EQ(f.pump.delivered, 1);
    teardown(&f);
}

TEST(wakes_before_the_pass_share_it) {
    fixture f;
    lull_loop *loop = setup(&f);
    for (int i = 0; i < 10; i++)
        lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 1);
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 2);
    teardown(&f);
}

/* Raises of a notifier the pump listens to queue the pass itself: one hop,
 * several raises in one task, one pass. */
TEST(notifier_raises_in_one_task_cause_one_pass) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_pump_listen(&f.pump, &n, &l);
    for (int i = 0; i < 5; i++)
        lull_notifier_raise(&n);
    CHECK_EQ(f.passes, 0);
    CHECK_EQ(lull_loop_settle(loop), 1); /* the pass, no listener task first */
    CHECK_EQ(f.passes, 1);
    CHECK(lull_pump_quiet(&f.pump));
    teardown(&f); /* close unsubscribes l */
    CHECK(l.notifier == NULL);
}

typedef struct tagged {
    lull_listener l;
    int id;
} tagged;

static void on_tagged(lull_listener *l) {
    check_trace(LULL_CONTAINER_OF(l, tagged, l)->id);
}

/* Listeners and pump passes on one notifier run in subscription order. */
TEST(pump_and_listeners_run_in_subscription_order) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_notifier_init(&n);
    tagged a = {.id = 1}, b = {.id = 2};
    lull_listener pl;
    lull_listener_start(loop, &n, &a.l, on_tagged);
    lull_pump_listen(&f.pump, &n, &pl);
    lull_listener_start(loop, &n, &b.l, on_tagged);
    lull_notifier_raise(&n);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 3);
    CHECK_TRACE(1, 101, 2);
    lull_listener_stop(&a.l);
    lull_listener_stop(&b.l);
    teardown(&f);
}

TEST(again_continues_in_the_next_task) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.again = 2;
    marker m[2] = {{.id = 1}, {.id = 2}};
    lull_task_init(&m[0].task, mark);
    lull_task_init(&m[1].task, mark);
    lull_pump_wake(&f.pump);
    lull_task_post(loop, &m[0].task);
    lull_task_post(loop, &m[1].task);
    CHECK_EQ(lull_loop_settle(loop), 5);
    /* An AGAIN pass goes behind the work already queued. */
    CHECK_TRACE(101, 1, 2, 102, 103);
    CHECK(lull_pump_quiet(&f.pump));
    CHECK(!lull_loop_alive(loop));
    teardown(&f);
}

TEST(held_is_retried_only_while_held_then_quiet) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.held = 1;
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 1);
    CHECK(!lull_pump_quiet(&f.pump)); /* the retry timer is armed */
    lull_loop_advance(loop, 5 * MS - 1);
    CHECK_EQ(f.passes, 1);
    lull_loop_advance(loop, 1);
    CHECK_EQ(f.passes, 2); /* the retry timer ran the pass itself */
    lull_loop_advance(loop, 20 * MS);
    CHECK_EQ(f.passes, 6); /* every 5 ms while held */
    for (int i = 0; i < 6; i++)
        CHECK_U64_EQ(f.at[i], (uint64_t)i * 5 * MS);
    f.held = 0; /* released without a wake: the next retry finds it */
    lull_loop_advance(loop, 5 * MS);
    CHECK_EQ(f.passes, 7);
    CHECK(lull_pump_quiet(&f.pump));
    CHECK(!lull_loop_alive(loop)); /* no timer, no task */
    lull_loop_advance(loop, 1000 * MS);
    CHECK_EQ(f.passes, 7);
    CHECK_U64_EQ(f.pump.empty, 6); /* the held passes delivered nothing */
    teardown(&f);
}

TEST(held_with_zero_retry_means_again) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.held = 3;
    f.retry_ns = 0;
    f.release_per_pass = true;
    marker m = {.id = 1};
    lull_task_init(&m.task, mark);
    lull_pump_wake(&f.pump);
    lull_task_post(loop, &m.task);
    /* Queued as tasks, not timers: all four passes run with time frozen,
     * each behind the work queued before it. */
    CHECK_EQ(lull_loop_settle(loop), 5);
    CHECK_TRACE(101, 1, 102, 103, 104);
    for (int i = 0; i < 4; i++)
        CHECK_U64_EQ(f.at[i], 0);
    CHECK(lull_pump_quiet(&f.pump));
    teardown(&f);
}

TEST(wake_while_held_cancels_the_retry_and_the_pass_redecides) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.held = 1;
    lull_pump_wake(&f.pump);
    lull_loop_settle(loop);
    lull_loop_advance(loop, 2 * MS);
    CHECK_EQ(f.passes, 1);
    lull_pump_wake(&f.pump);
    CHECK(!lull_timer_active(&f.pump.retry)); /* cancelled by the wake */
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 2);
    CHECK_U64_EQ(f.at[1], 2 * MS); /* at once, not at the old retry */
    /* Still held: a new retry, counted from this pass. */
    lull_loop_advance(loop, 5 * MS - 1);
    CHECK_EQ(f.passes, 2);
    lull_loop_advance(loop, 1);
    CHECK_EQ(f.passes, 3);
    CHECK_U64_EQ(f.at[2], 7 * MS);
    /* A wake after release: the pass decides quiet, the retry is gone. */
    f.held = 0;
    lull_loop_advance(loop, 1 * MS);
    lull_pump_wake(&f.pump);
    lull_loop_settle(loop);
    CHECK_EQ(f.passes, 4);
    CHECK(lull_pump_quiet(&f.pump));
    lull_loop_advance(loop, 100 * MS);
    CHECK_EQ(f.passes, 4);
    teardown(&f);
}

/* The same through a notifier: the raise queues the pass, the pass cancels
 * the retry timer before it runs. */
TEST(raise_while_held_runs_the_pass_now) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_pump_listen(&f.pump, &n, &l);
    f.held = 1;
    lull_notifier_raise(&n);
    lull_loop_settle(loop);
    lull_loop_advance(loop, 3 * MS);
    f.held = 0;
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 2);
    CHECK_U64_EQ(f.at[1], 3 * MS);
    CHECK(lull_pump_quiet(&f.pump));
    CHECK(!lull_loop_alive(loop));
    lull_loop_advance(loop, 100 * MS);
    CHECK_EQ(f.passes, 2);
    teardown(&f);
}

TEST(wake_inside_the_pass_queues_the_next_one) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.wake_inside = 1;
    f.held = 1; /* HELD, but a wake arrived during the pass: no timer */
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_EQ(f.passes, 2);
    /* The second pass (no wake inside) armed the retry. */
    CHECK(lull_timer_active(&f.pump.retry));
    f.held = 0;
    lull_loop_advance(loop, 5 * MS);
    CHECK_EQ(f.passes, 3);
    CHECK(lull_pump_quiet(&f.pump));
    teardown(&f);
}

TEST(close_during_a_pending_wake_runs_nothing) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_pump_wake(&f.pump);
    lull_pump_close(&f.pump);
    CHECK(lull_pump_quiet(&f.pump));
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(f.passes, 0);
    lull_pump_wake(&f.pump); /* a closed pump ignores wakes */
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(f.passes, 0);
    teardown(&f);
}

TEST(close_during_a_pending_raise_runs_nothing) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_pump_listen(&f.pump, &n, &l);
    lull_notifier_raise(&n);
    lull_pump_close(&f.pump);
    CHECK(l.notifier == NULL);
    CHECK_EQ(lull_loop_settle(loop), 0);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(f.passes, 0);
    teardown(&f);
}

TEST(close_while_held_cancels_the_retry) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.held = 1;
    lull_pump_wake(&f.pump);
    lull_loop_settle(loop);
    CHECK(lull_timer_active(&f.pump.retry));
    lull_pump_close(&f.pump);
    CHECK(lull_pump_quiet(&f.pump));
    CHECK(!lull_loop_alive(loop));
    lull_loop_advance(loop, 100 * MS);
    CHECK_EQ(f.passes, 1);
    teardown(&f);
}

/* lull_pump_init over a pump in use (its pass queued, its retry armed, a
 * listener subscribed to it) would cut the queue, leave the timer in the
 * heap and lose the listeners its close must unsubscribe: -EBUSY, and the
 * pump goes on as it was. */
TEST(init_of_a_live_pump_is_refused) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_pump_wake(&f.pump); /* queued */
    CHECK_EQ(lull_pump_init(loop, &f.pump, pass), -EBUSY);
    lull_loop_settle(loop);
    CHECK_EQ(f.passes, 1);
    CHECK_EQ(lull_pump_init(loop, &f.pump, pass), 0); /* quiet: allowed */

    f.held = 1; /* the retry armed */
    lull_pump_wake(&f.pump);
    lull_loop_settle(loop);
    CHECK(lull_timer_active(&f.pump.retry));
    CHECK_EQ(lull_pump_init(loop, &f.pump, pass), -EBUSY);
    f.held = 0;
    lull_loop_advance(loop, 10 * MS);
    CHECK_EQ(f.passes, 3);
    CHECK(lull_pump_quiet(&f.pump));

    lull_notifier n;
    lull_listener l;
    CHECK_EQ(lull_notifier_init(&n), 0);
    lull_pump_listen(&f.pump, &n, &l); /* subscribed */
    CHECK_EQ(lull_pump_init(loop, &f.pump, pass), -EBUSY);
    lull_notifier_raise(&n);
    lull_loop_settle(loop);
    CHECK_EQ(f.passes, 4);
    teardown(&f); /* the close unsubscribes l */
}

TEST(close_inside_the_pass_ends_it) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.close_inside = true;
    f.again = 1; /* the status of a closed pump's pass is ignored */
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK(lull_pump_quiet(&f.pump));
    lull_loop_advance(loop, 100 * MS);
    CHECK_EQ(f.passes, 1);
    teardown(&f);
}

/* A pass that reports nothing delivered is counted as empty (the audit's
 * "passes that found nothing"). */
TEST(empty_passes_are_counted) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.again = 3; /* AGAIN passes do not call lull_pump_delivered */
    lull_pump_wake(&f.pump);
    lull_loop_settle(loop);
    CHECK_U64_EQ(f.pump.passes, 4);
    CHECK_U64_EQ(f.pump.empty, 3);
    CHECK_U64_EQ(f.pump.delivered, 1);
    teardown(&f);
}

/* lull_listener_stop on a pump's listener: later raises no longer wake the
 * pump. (A pass already queued stays queued: it may have been woken by other
 * means too; closing the pump is what cancels it.) */
TEST(unlisten_of_a_pump_listener_stops_later_raises) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_pump_listen(&f.pump, &n, &l);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 1);
    lull_listener_stop(&l);
    CHECK(l.notifier == NULL);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(f.passes, 1);
    teardown(&f); /* close after unlisten is harmless */
    CHECK_EQ(f.passes, 1);
}

/* An unlistened pump listener is reusable anywhere: on the same
 * pump with another notifier (the pump's list used to become a cycle, so
 * lull_pump_close never returned), and as a plain listener (the list used
 * to be cut, so close missed the other listener and the closed pump's pass
 * was still queued by raises). */
TEST(pump_listener_reused_on_the_same_pump_after_unlisten) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n1, n2;
    lull_listener l;
    lull_notifier_init(&n1);
    lull_notifier_init(&n2);
    lull_pump_listen(&f.pump, &n1, &l);
    lull_listener_stop(&l);
    lull_pump_listen(&f.pump, &n2, &l);
    lull_notifier_raise(&n1);
    CHECK_EQ(lull_loop_settle(loop), 0);
    lull_notifier_raise(&n2);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 1);
    lull_pump_close(&f.pump);
    CHECK(l.notifier == NULL);
    CHECK(f.pump.listeners == NULL);
    teardown(&f);
}

static void plain_listener(lull_listener *l) {
    (void)l;
    check_trace(7);
}

TEST(pump_listener_reused_as_a_plain_listener_after_unlisten) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n, other;
    lull_listener a, b;
    lull_notifier_init(&n);
    lull_notifier_init(&other);
    lull_pump_listen(&f.pump, &n, &a);
    lull_pump_listen(&f.pump, &n, &b);
    lull_listener_stop(&b);
    lull_listener_start(loop, &other, &b, plain_listener);
    lull_pump_close(&f.pump);
    CHECK(a.notifier == NULL);   /* close reached a */
    CHECK(b.notifier == &other); /* and left b where it now is */
    lull_notifier_raise(&n);
    lull_notifier_raise(&other);
    CHECK_EQ(lull_loop_settle(loop),
             1); /* b's call; no pass of the closed pump */
    CHECK_TRACE(7);
    CHECK_EQ(f.passes, 0);
    lull_listener_stop(&b);
    teardown(&f);
}

/* Unlisten in any order, then close: nothing left behind. */
TEST(pump_listeners_unlistened_in_any_order) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_listener l[4];
    lull_notifier_init(&n);
    for (int i = 0; i < 4; i++)
        lull_pump_listen(&f.pump, &n, &l[i]);
    lull_listener_stop(&l[1]); /* middle */
    lull_listener_stop(&l[3]); /* head: the newest */
    lull_listener_stop(&l[0]); /* tail */
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 1); /* l[2] still wakes the pump */
    lull_pump_listen(&f.pump, &n, &l[1]);
    lull_pump_close(&f.pump);
    for (int i = 0; i < 4; i++)
        CHECK(l[i].notifier == NULL);
    CHECK(f.pump.listeners == NULL);
    teardown(&f);
}

/* A pass that closes and frees its own pump, the natural end of a session:
 * nothing may touch the pump after the pass returns (the memory is
 * poisoned before it is freed, so a read of it crashes even without ASan,
 * which reports it as a use after free). Reached by a wake, by a raise,
 * and by the retry timer. */
typedef struct session {
    lull_pump pump;
    lull_listener listener;
    int *passes;
    bool hold_first; /* the first pass returns HELD: the retry ends it */
} session;

static lull_pass_result pass_then_free(lull_pump *p, uint64_t *retry_ns) {
    session *s = LULL_CONTAINER_OF(p, session, pump);
    if ((*s->passes)++ == 0 && s->hold_first) {
        *retry_ns = 5 * MS;
        return LULL_PASS_HELD;
    }
    lull_pump_delivered(p, 1);
    lull_pump_close(p);
    CHECK_U64_EQ(p->passes, (uint64_t)*s->passes); /* counted at close */
    memset(s, 0xA5, sizeof *s);
    free(s);
    return LULL_PASS_AGAIN; /* ignored: the pump is closed */
}

TEST(pass_that_closes_and_frees_its_pump) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    lull_notifier n;
    lull_notifier_init(&n);
    for (int how = 0; how < 3; how++) { /* wake, raise, retry timer */
        int passes = 0;
        session *s = malloc(sizeof *s);
        CHECK(s != NULL);
        *s = (session){.passes = &passes, .hold_first = how == 2};
        lull_pump_init(loop, &s->pump, pass_then_free);
        lull_pump_listen(&s->pump, &n, &s->listener);
        if (how == 1)
            lull_notifier_raise(&n);
        else
            lull_pump_wake(&s->pump);
        lull_loop_settle(loop);
        lull_loop_advance(loop, 10 * MS);
        CHECK_EQ(passes, how == 2 ? 2 : 1);
        CHECK(!lull_loop_alive(loop));
        lull_notifier_raise(&n); /* the freed pump's listener is gone */
        CHECK_EQ(lull_loop_settle(loop), 0);
    }
    lull_audit_entry e[4];
    CHECK_EQ(lull_loop_audit(loop, e, 4, NULL), 1);
    CHECK_U64_EQ(e[0].passes, 4);
    CHECK_U64_EQ(e[0].empty_passes, 1); /* the HELD pass */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* HELD with the longest retry there is: the retry timer is armed (the
 * deadline saturates rather than wrapping into the past), so the pass does
 * not run again until a wake. */
TEST(held_with_the_longest_retry_waits_for_a_wake) {
    fixture f;
    lull_loop *loop = setup(&f);
    f.held = 1;
    f.retry_ns = UINT64_MAX;
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK(!lull_pump_quiet(&f.pump));
    lull_loop_advance(loop, 1000000 * MS);
    CHECK_EQ(f.passes, 1);
    f.held = 0;
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 2);
    CHECK(lull_pump_quiet(&f.pump));
    teardown(&f);
}

/* A pass that wakes its own pump, then closes it, then frees it: the wake's
 * queued pass is withdrawn with the close, and nothing touches the memory
 * afterwards. */
static lull_pass_result pass_wake_close_free(lull_pump *p, uint64_t *retry_ns) {
    session *s = LULL_CONTAINER_OF(p, session, pump);
    (*s->passes)++;
    lull_pump_wake(p);
    lull_pump_close(p);
    lull_pump_close(p); /* idempotent */
    lull_pump_wake(p);  /* a no-op once closed */
    *retry_ns = 5 * MS;
    memset(s, 0xA5, sizeof *s);
    free(s);
    return LULL_PASS_HELD; /* ignored: the pump is closed */
}

TEST(pass_that_wakes_closes_and_frees_its_pump) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    int passes = 0;
    session *s = malloc(sizeof *s);
    CHECK(s != NULL);
    *s = (session){.passes = &passes};
    lull_pump_init(loop, &s->pump, pass_wake_close_free);
    lull_pump_wake(&s->pump);
    CHECK_EQ(lull_loop_settle(loop), 1);
    lull_loop_advance(loop, 100 * MS);
    CHECK_EQ(passes, 1);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The listener whose raise queued the pass is stopped and subscribed again
 * inside that pass: later raises reach the pump exactly once each, and the
 * close still unsubscribes it. */
static lull_notifier relisten_n;
static lull_listener relisten_l;
static int relisten_passes;
static lull_pass_result pass_relisten(lull_pump *p, uint64_t *retry_ns) {
    (void)retry_ns;
    relisten_passes++;
    lull_listener_stop(&relisten_l);
    lull_pump_listen(p, &relisten_n, &relisten_l);
    lull_pump_delivered(p, 1);
    return LULL_PASS_QUIET;
}

TEST(listener_restarted_inside_the_pass_it_queued) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    lull_pump pump;
    lull_pump_init(loop, &pump, pass_relisten);
    lull_notifier_init(&relisten_n);
    lull_pump_listen(&pump, &relisten_n, &relisten_l);
    for (int i = 1; i <= 3; i++) {
        lull_notifier_raise(&relisten_n);
        lull_notifier_raise(&relisten_n);
        CHECK_EQ(lull_loop_settle(loop), 1);
        CHECK_EQ(relisten_passes, i);
    }
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.live_listeners, 1);
    lull_pump_close(&pump);
    CHECK(relisten_n.head == NULL);
    CHECK(relisten_l.notifier == NULL);
    lull_notifier_raise(&relisten_n);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A pass that returns a value outside lull_pass_result is a programming
 * error (a flag word or a count returned by mistake): debug builds assert
 * rather than let the pump fall silent with work left. */
static lull_pass_result pass_out_of_range(lull_pump *p, uint64_t *retry_ns) {
    (void)p;
    (void)retry_ns;
    return (lull_pass_result)7;
}

static void run_out_of_range_pass(void *arg) {
    (void)arg;
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    lull_pump pump;
    lull_pump_init(loop, &pump, pass_out_of_range);
    lull_pump_wake(&pump);
    lull_loop_settle(loop);
    lull_pump_close(&pump);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(pass_result_out_of_range_asserts_in_debug_builds) {
    if (!check_debug_build()) {
        fprintf(stderr, "release build: no pass asserts to check\n");
        return;
    }
    CHECK(check_dies(run_out_of_range_pass, NULL,
                     "lull: a pass returned a value that is not a "
                     "lull_pass_result"));
}

/* A zeroed pump that lull_pump_init never reached (its init failed, or an
 * error path ran first) may be closed by the owner's clean-up, as a
 * zeroed timer may be stopped: nothing happens. Waking or listening with it
 * does nothing either. */
TEST(zeroed_pump_never_initialised_is_inert) {
    lull_pump pump;
    memset(&pump, 0, sizeof pump);
    CHECK_EQ(lull_pump_init(NULL, &pump, pass), -EINVAL);
    CHECK(lull_pump_quiet(&pump));
    lull_pump_wake(&pump);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_pump_listen(&pump, &n, &l);
    CHECK(n.head == NULL);
    lull_pump_delivered(&pump, 1);
    lull_pump_close(&pump);
    lull_pump_close(&pump);
    CHECK(lull_pump_quiet(&pump));
}

/* One listener given to the same pump twice, on two notifiers, without a
 * lull_listener_stop between: the first notifier kept it on its list, so
 * after the pump was closed and freed a raise of it posted freed memory.
 * Debug builds assert, as for a listener subscribed twice to one notifier. */
static void listen_twice(void *arg) {
    (void)arg;
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    lull_pump pump;
    lull_pump_init(loop, &pump, pass);
    lull_notifier n1, n2;
    lull_notifier_init(&n1);
    lull_notifier_init(&n2);
    lull_listener l;
    lull_pump_listen(&pump, &n1, &l);
    lull_pump_listen(&pump, &n2, &l);
    lull_pump_close(&pump);
    CHECK(n1.head == NULL); /* not reached in debug builds */
}

TEST(listener_given_to_a_pump_twice_asserts_in_debug_builds) {
    if (!check_debug_build()) {
        fprintf(stderr, "release build: no listener asserts to check\n");
        return;
    }
    CHECK(check_dies(listen_twice, NULL, "lull: listener subscribed twice"));
}

static void on_plain(lull_listener *l) {
    (void)l;
}
/* A listener given to a pump while it is subscribed (to the pump already,
 * or by lull_listener_start): a release build linked it into the lists a
 * second time. Debug builds assert; a release build refuses with -EBUSY,
 * and one raise still makes one pass. */
static void listen_while_subscribed(void *arg) {
    (void)arg;
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n1, n2;
    lull_notifier_init(&n1);
    lull_notifier_init(&n2);
    lull_listener l, plain;
    CHECK_EQ(lull_pump_listen(&f.pump, &n1, &l), 0);
    CHECK_EQ(lull_pump_listen(&f.pump, &n2, &l), -EBUSY);
    CHECK_EQ(lull_pump_listen(&f.pump, &n1, &l), -EBUSY);
    lull_listener_start(loop, &n2, &plain, on_plain);
    CHECK_EQ(lull_pump_listen(&f.pump, &n1, &plain), -EBUSY);
    lull_notifier_raise(&n1);
    lull_loop_settle(loop);
    CHECK_EQ(f.passes, 1);
    lull_listener_stop(&plain);
    lull_pump_close(&f.pump);
    CHECK(n1.head == NULL && n2.head == NULL);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(pump_listen_while_subscribed_is_ebusy_without_asserts) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_notifier_init(&n);
    lull_listener l;
    CHECK_EQ(lull_pump_listen(NULL, &n, &l), -EINVAL);
    CHECK_EQ(lull_pump_listen(&f.pump, NULL, &l), -EINVAL);
    CHECK_EQ(lull_pump_listen(&f.pump, &n, NULL), -EINVAL);
    lull_pump_close(&f.pump);
    CHECK_EQ(lull_pump_listen(&f.pump, &n, &l), -EINVAL); /* closed */
    CHECK_EQ(lull_loop_free(loop), 0);
    if (check_debug_build())
        CHECK(check_dies(listen_while_subscribed, NULL,
                         "lull: listener subscribed twice"));
    else
        CHECK(check_exits_cleanly(listen_while_subscribed, NULL));
}

/* A pump listening to 60,000 notifiers (a fan-in of one per source): one
 * raise of each costs one pass, and its close leaves no listener. The
 * check that a listener is not subscribed already asks a hash set by
 * address, so subscribing stays O(1) (a walk of the whole list took
 * this case from 0.22 s to 4.6 s; a time is not asserted: the case's
 * timeout is what a quadratic walk would meet under valgrind). */
#define MANY_LISTENERS 60000

TEST(pump_listening_to_many_notifiers_passes_once) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier *ns = malloc(MANY_LISTENERS * sizeof *ns);
    lull_listener *ls = malloc(MANY_LISTENERS * sizeof *ls);
    CHECK(ns && ls);
    for (int i = 0; i < MANY_LISTENERS; i++)
        lull_notifier_init(&ns[i]);
    for (int i = 0; i < MANY_LISTENERS; i++)
        lull_pump_listen(&f.pump, &ns[i], &ls[i]);
    for (int i = 0; i < MANY_LISTENERS; i++)
        lull_notifier_raise(&ns[i]);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 1);
    lull_pump_close(&f.pump);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_EQ(m.live_listeners, 0u);
    free(ls);
    free(ns);
    teardown(&f);
}

/* A pump whose pass is running is in use: lull_pump_init over it inside
 * that pass is -EBUSY, like one queued or held (it would clear the pass's
 * bookkeeping, so a close and free later in the same pass went unnoticed
 * and the pass's end wrote to freed memory). After a close in the pass the
 * pump is the owner's again, and init may reuse it there. */
static int reinit_status = 1, reinit_after_close = 1;

static lull_pass_result pass_reinit_close_free(lull_pump *p, uint64_t *r) {
    (void)r;
    lull_loop *loop = p->loop;
    reinit_status = lull_pump_init(loop, p, pass_reinit_close_free);
    lull_pump_close(p);
    reinit_after_close = lull_pump_init(loop, p, pass_reinit_close_free);
    lull_pump_close(p);
    free(p);
    return LULL_PASS_AGAIN;
}

TEST(init_inside_its_own_pass_is_refused) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    lull_pump *p = malloc(sizeof *p);
    CHECK(p != NULL);
    CHECK_EQ(lull_pump_init(loop, p, pass_reinit_close_free), 0);
    lull_pump_wake(p);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(reinit_status, -EBUSY);
    CHECK_EQ(reinit_after_close, 0);
    lull_audit_entry e[4];
    CHECK_EQ(lull_loop_audit(loop, e, 4, NULL), 1);
    CHECK_U64_EQ(e[0].passes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* 40,000 pumps on one loop, each woken and listening while the next is
 * made: lull_pump_init's in-use check is O(1), so making them is linear.
 * It scanned the loop's ready queue, timers and listeners for the pump's
 * address (a pump is garbage before its first init): 3.2 s here. Now it
 * asks the loop's set of open pumps, by address. No time is asserted: the
 * loop counts the slots of the set its lookups look at. */
#define MANY_PUMPS 40000

static lull_pass_result quiet_pass(lull_pump *p, uint64_t *retry_ns) {
    (void)retry_ns;
    lull_pump_delivered(p, 1);
    return LULL_PASS_QUIET;
}

TEST(many_pumps_init_in_constant_checks) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    lull_pump *ps = malloc(MANY_PUMPS * sizeof *ps);
    lull_listener *ls = malloc(MANY_PUMPS * sizeof *ls);
    CHECK(ps && ls);
    lull_notifier n;
    lull_notifier_init(&n);
    for (int i = 0; i < MANY_PUMPS; i++) {
        CHECK_EQ(lull_pump_init(loop, &ps[i], quiet_pass), 0);
        lull_pump_listen(&ps[i], &n, &ls[i]);
        lull_pump_wake(&ps[i]);
    }
    /* About 2.5 slots an init (the set is at most half full); the scan
     * looked at every queued pass and listener, 8 * 10^8 in all. */
    CHECK(loop->pumps.probes < 8u * MANY_PUMPS);
    CHECK_EQ(lull_pump_init(loop, &ps[MANY_PUMPS / 2], quiet_pass), -EBUSY);
    CHECK_EQ(lull_loop_settle(loop), MANY_PUMPS);
    for (int i = 0; i < MANY_PUMPS; i++)
        CHECK_U64_EQ(ps[i].delivered, 1);
    for (int i = 0; i < MANY_PUMPS; i++)
        lull_pump_close(&ps[i]);
    CHECK_EQ(loop->pumps.len, 0u);
    free(ls);
    free(ps);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Memory that holds a copy of a live pump (stack garbage left by one, a
 * struct copied by mistake) is not that pump: its init is allowed and
 * leaves the live one as it was. The check asks the loop by address, never
 * the memory, whose fields say "queued, listening" here. */
TEST(init_over_a_copy_of_a_live_pump_is_allowed) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_pump_listen(&f.pump, &n, &l);
    lull_pump_wake(&f.pump);
    lull_pump copy;
    memcpy(&copy, &f.pump, sizeof copy);
    CHECK_EQ(lull_pump_init(loop, &copy, pass), 0);
    CHECK(lull_pump_quiet(&copy));
    CHECK_EQ(lull_pump_init(loop, &f.pump, pass), -EBUSY);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 1);
    lull_pump_close(&copy);
    teardown(&f);
}

/* A pump open on one loop is refused by another's init (close it first):
 * queued there, clearing it cut that loop's ready queue; quiet, it stayed
 * in that loop's set as a stale entry. A loop freed with a pump left open
 * (quiet: allowed) lets the pump be set up elsewhere. */
TEST(init_of_a_pump_open_on_another_loop_is_refused) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *other = NULL;
    CHECK_EQ(lull_loop_new(&other, &o), 0);
    lull_pump_wake(&f.pump); /* queued on loop */
    CHECK_EQ(lull_pump_init(other, &f.pump, pass), -EBUSY);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(f.passes, 1);
    CHECK_EQ(lull_pump_init(other, &f.pump, pass), -EBUSY); /* quiet, open */
    CHECK_EQ(lull_pump_init(loop, &f.pump, pass), 0);       /* its own loop */
    lull_pump_close(&f.pump);
    CHECK_EQ(lull_pump_init(other, &f.pump, pass), 0); /* closed: free */
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(other), 1);
    CHECK_EQ(f.passes, 2);
    CHECK_EQ(lull_loop_free(other), 0); /* the pump left open, quiet */
    CHECK_EQ(lull_pump_init(loop, &f.pump, pass), 0);
    teardown(&f);
}

/* A wake of a pump whose loop was freed (left open, quiet: allowed) is a
 * use after free: it read the freed loop's owner and posted its task
 * there (AddressSanitizer: heap-use-after-free in lull_pump_wake). Debug
 * builds stop at it before touching the loop; only a close may follow. */
static void wake_after_free(void *arg) {
    (void)arg;
    fixture f;
    lull_loop *loop = setup(&f);
    CHECK_EQ(lull_loop_free(loop), 0); /* the pump left open */
    lull_pump_wake(&f.pump);
}

static void listen_after_free(void *arg) {
    (void)arg;
    fixture f;
    lull_loop *loop = setup(&f);
    CHECK_EQ(lull_loop_free(loop), 0);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_pump_listen(&f.pump, &n, &l);
}

TEST(pump_used_after_its_loop_free_asserts_in_debug_builds) {
    if (!check_debug_build()) {
        fprintf(stderr, "release build: no pump asserts to check\n");
        return;
    }
    CHECK(check_dies(wake_after_free, NULL,
                     "lull: a pump used after its loop's free"));
    CHECK(check_dies(listen_after_free, NULL,
                     "lull: a pump used after its loop's free"));
}

/* A loop freed with a pump left open (quiet: allowed) is gone, and the
 * pump's close in a clean-up that runs after the loop's teardown must not
 * touch it: it read the freed loop's owner for its thread check and took
 * the pump out of the freed loop's set (AddressSanitizer: a use after
 * free). As a stopped timer's stop after its loop's free, it does nothing
 * but mark the pump closed; the pump can then be set up on another loop. */
TEST(close_after_its_loop_was_freed_touches_no_loop) {
    fixture f;
    lull_loop *loop = setup(&f);
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(loop), 1); /* a pass ran: quiet again */
    CHECK_EQ(lull_loop_free(loop), 0);   /* the pump left open */
    lull_pump_close(&f.pump);
    lull_pump_close(&f.pump);
    CHECK(lull_pump_quiet(&f.pump));
    lull_pump_wake(&f.pump); /* closed: a no-op, as after any close */
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    CHECK_EQ(lull_loop_new(&f.loop, &o), 0);
    CHECK_EQ(lull_pump_init(f.loop, &f.pump, pass), 0);
    lull_pump_wake(&f.pump);
    CHECK_EQ(lull_loop_settle(f.loop), 1);
    CHECK_EQ(f.passes, 2);
    teardown(&f);
}

/* NULL pumps do nothing and say the neutral thing (quiet); a zeroed pump
 * (never set up) is not followed: wake and close return (delivered only
 * counts in the struct), listen refuses it, and nothing reaches a loop. */
TEST(null_and_zeroed_pumps_do_nothing) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    lull_notifier n;
    CHECK_EQ(lull_notifier_init(&n), 0);
    lull_listener l;
    memset(&l, 0, sizeof l);
    lull_pump_wake(NULL);
    lull_pump_delivered(NULL, 1);
    lull_pump_close(NULL);
    CHECK(lull_pump_quiet(NULL));
    CHECK_EQ(lull_pump_listen(NULL, &n, &l), -EINVAL);
    CHECK_EQ(lull_pump_init(NULL, &(lull_pump){0}, pass), -EINVAL);
    lull_pump z;
    memset(&z, 0, sizeof z);
    CHECK_EQ(lull_pump_init(loop, &z, NULL), -EINVAL);
    lull_pump_wake(&z);
    lull_pump_delivered(&z, 1);
    CHECK(lull_pump_quiet(&z));
    CHECK_EQ(lull_pump_listen(&z, &n, &l), -EINVAL);
    CHECK(l.notifier == NULL);
    lull_pump_close(&z);
    CHECK_U64_EQ(z.passes, 0);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An open pump is known by its address (the process's set of handles in
 * use), so a copy of one (memcpy: a struct moved after init) is not it: a
 * wake or listen of the copy stops a debug build, as one of a pump whose
 * loop was freed does, before it posts the copy's task into the loop. */
static void wake_a_copy(void *arg) {
    (void)arg;
    fixture f;
    lull_loop *loop = setup(&f);
    static lull_pump copy;
    memcpy(&copy, &f.pump, sizeof copy);
    lull_pump_wake(&copy);
    (void)loop;
}

TEST(a_copy_of_an_open_pump_stops_a_debug_build) {
    if (!check_debug_build()) {
        printf("skipped: asserts are compiled out of this build\n");
        return;
    }
    CHECK(check_dies(wake_a_copy, NULL, "or a copy of one"));
}
