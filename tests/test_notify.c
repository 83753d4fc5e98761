/* Notifiers and listeners (C4): a raise never runs a listener inline; raises
 * before the listener runs coalesce into one call; listeners run in
 * subscription order; a listener removed before its task runs does not run;
 * lull_notifier_raise_remote delivers from another thread. Order on the virtual
 * clock with lull_loop_settle (time never moves here). Zero allocation per
 * raise is covered by test_alloc. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define BURST 100000 /* remote raises in the burst case */

typedef struct sub {
    lull_listener l;
    int id;
    int runs;
    lull_notifier *raise_again; /* raised from the callback while > 0 */
    int raise_left;
    struct sub *drop; /* unsubscribed from the callback */
} sub;

static lull_loop *new_loop(void) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    check_trace_reset();
    return loop;
}

static int depth; /* listeners running: more than 1 means one ran inline */

static void on_raise(lull_listener *l) {
    sub *s = LULL_CONTAINER_OF(l, sub, l);
    CHECK_EQ(++depth, 1);
    s->runs++;
    check_trace(s->id);
    if (s->drop) lull_listener_stop(&s->drop->l);
    if (s->raise_again && s->raise_left > 0) {
        int runs = s->runs;
        s->raise_left--;
        lull_notifier_raise(
            s->raise_again); /* queues a later call, never inline */
        CHECK_EQ(s->runs, runs);
    }
    depth--;
}

TEST(raise_never_runs_listener_inline) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub s = {.id = 1};
    lull_listener_start(loop, &n, &s.l, on_raise);
    lull_notifier_raise(&n);
    CHECK_EQ(s.runs, 0); /* not inside lull_notifier_raise */
    CHECK(lull_loop_alive(loop));
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(s.runs, 1);
    CHECK_U64_EQ(n.raised, 1);
    CHECK_EQ(lull_loop_settle(loop), 0); /* nothing re-arms itself */
    lull_listener_stop(&s.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(raises_before_the_task_runs_coalesce) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub s = {.id = 1};
    lull_listener_start(loop, &n, &s.l, on_raise);
    for (int i = 0; i < 7; i++)
        lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(s.runs, 1);
    /* After it ran, a new raise is a new call. */
    lull_notifier_raise(&n);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(s.runs, 2);
    CHECK_U64_EQ(n.raised, 9);
    lull_listener_stop(&s.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(raise_inside_listener_queues_a_later_call) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub s = {.id = 1, .raise_again = &n, .raise_left = 3};
    lull_listener_start(loop, &n, &s.l, on_raise);
    lull_notifier_raise(&n);
    /* Each run raised once more: 1 + 3 runs, one task each. */
    CHECK_EQ(lull_loop_settle(loop), 4);
    CHECK_EQ(s.runs, 4);
    lull_listener_stop(&s.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(listeners_run_in_subscription_order) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub s[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
    int order[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++)
        lull_listener_start(loop, &n, &s[order[i]].l, on_raise);
    lull_notifier_raise(&n);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 4);
    CHECK_TRACE(2, 0, 3, 1);
    /* Re-subscribing moves a listener to the end. */
    lull_listener_stop(&s[2].l);
    lull_listener_start(loop, &n, &s[2].l, on_raise);
    check_trace_reset();
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 4);
    CHECK_TRACE(0, 3, 1, 2);
    for (int i = 0; i < 4; i++)
        lull_listener_stop(&s[i].l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Listeners on two notifiers, raised alternately: each listener's task is
 * queued at its first raise, so the order is the order of first raises. */
TEST(listeners_of_two_notifiers_run_in_raise_order) {
    lull_loop *loop = new_loop();
    lull_notifier a, b;
    lull_notifier_init(&a);
    lull_notifier_init(&b);
    sub s[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
    lull_listener_start(loop, &a, &s[0].l, on_raise);
    lull_listener_start(loop, &b, &s[1].l, on_raise);
    lull_listener_start(loop, &a, &s[2].l, on_raise);
    lull_notifier_raise(&b);
    lull_notifier_raise(&a);
    lull_notifier_raise(&b);
    CHECK_EQ(lull_loop_settle(loop), 3);
    CHECK_TRACE(1, 0, 2);
    for (int i = 0; i < 3; i++)
        lull_listener_stop(&s[i].l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(listener_removed_before_its_task_runs_does_not_run) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub s[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
    for (int i = 0; i < 3; i++)
        lull_listener_start(loop, &n, &s[i].l, on_raise);
    lull_notifier_raise(&n);
    lull_listener_stop(&s[1].l); /* its task is queued: it must not run */
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_TRACE(0, 2);
    CHECK_EQ(s[1].runs, 0);
    /* Unsubscribed: later raises do not reach it either. */
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_EQ(s[1].runs, 0);
    lull_listener_stop(&s[0].l);
    lull_listener_stop(&s[2].l);
    lull_listener_stop(&s[1].l); /* twice is harmless */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same, from a listener of the same batch: an entry cleared by an
 * earlier callback must not run (the zero-delay timer's harness lesson: an
 * entry cleared by an earlier callback of the batch must not run). */
TEST(listener_removed_by_an_earlier_listener_of_the_batch) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub s[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
    s[0].drop = &s[2];
    for (int i = 0; i < 3; i++)
        lull_listener_start(loop, &n, &s[i].l, on_raise);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_TRACE(0, 1);
    lull_listener_stop(&s[0].l);
    lull_listener_stop(&s[1].l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(listener_subscribed_after_the_raise_is_not_called) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub early = {.id = 0}, late = {.id = 1};
    lull_listener_start(loop, &n, &early.l, on_raise);
    lull_notifier_raise(&n);
    lull_listener_start(loop, &n, &late.l, on_raise);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_TRACE(0);
    lull_listener_stop(&early.l);
    lull_listener_stop(&late.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(subscribed_listener_keeps_loop_from_freeing) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub s = {.id = 0};
    lull_notifier_raise(&n); /* no listeners: nothing queued */
    CHECK_EQ(lull_loop_settle(loop), 0);
    lull_listener_start(loop, &n, &s.l, on_raise);
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    lull_listener_stop(&s.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ---------------------------------------------------------- cross-thread */

typedef struct marker_task {
    lull_task task;
    lull_loop *loop;
} marker_task;

typedef struct remote_case {
    lull_loop *loop;
    lull_notifier n;
    sub s;
    int raises; /* how many lull_notifier_raise_remote calls the thread makes */
} remote_case;

static void *raise_from_thread(void *arg) {
    remote_case *rc = arg;
    for (int i = 0; i < rc->raises; i++)
        lull_notifier_raise_remote(rc->loop, &rc->n);
    return NULL;
}

static void on_remote_raise(lull_listener *l) {
    sub *s = LULL_CONTAINER_OF(l, sub, l);
    remote_case *rc = LULL_CONTAINER_OF(s, remote_case, s);
    s->runs++;
    /* Delivered on the loop thread: it may unsubscribe and drop the ref. */
    lull_listener_stop(l);
    lull_loop_unref(rc->loop);
}

TEST_THREADED(notify_remote_from_another_thread_delivers) {
    remote_case rc = {.raises = 1};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    rc.loop = loop;
    lull_notifier_init(&rc.n);
    lull_listener_start(loop, &rc.n, &rc.s.l, on_remote_raise);
    lull_loop_ref(loop); /* a remote raise is expected */
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, raise_from_thread, &rc), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(rc.s.runs, 1);
    CHECK_U64_EQ(rc.n.raised, 1); /* the raise happened on the loop thread */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The burst case: a thread raises BURST times while the loop runs, then
 * waits until everything those raises queued has run (a barrier: a remote
 * task that re-posts itself locally, so that it runs behind the listener
 * task the same drain queued), then sets `done` and raises once more. With
 * nothing else pending at that point, only the final raise can make the
 * listener run again: if it were lost, the listener would never see `done`
 * and the deadline timer fails the case. */
typedef struct burst_case {
    lull_loop *loop;
    lull_notifier n;
    lull_listener l;
    lull_task barrier;     /* posted remotely after the burst */
    lull_task behind;      /* posted by barrier: runs after the listener */
    sem_t settled;         /* behind ran: the burst has run its course */
    lull_timer deadline;   /* fails the case if the final raise is lost */
    int runs;              /* listener runs */
    int runs_before_final; /* ... when `behind` ran */
    atomic_bool done;      /* set by the thread before its final raise */
} burst_case;

static void *raise_burst(void *arg) {
    burst_case *bc = arg;
    for (int i = 0; i < BURST; i++)
        lull_notifier_raise_remote(bc->loop, &bc->n);
    lull_task_post_remote(bc->loop, &bc->barrier);
    while (sem_wait(&bc->settled) != 0) {
    }
    atomic_store(&bc->done, true);
    lull_notifier_raise_remote(bc->loop, &bc->n);
    return NULL;
}

static void burst_barrier(lull_task *t) {
    burst_case *bc = LULL_CONTAINER_OF(t, burst_case, barrier);
    lull_task_post(bc->loop, &bc->behind);
}

static void burst_behind(lull_task *t) {
    burst_case *bc = LULL_CONTAINER_OF(t, burst_case, behind);
    CHECK(!lull_task_pending(&bc->l.task));
    bc->runs_before_final = bc->runs;
    sem_post(&bc->settled);
}

static void final_raise_lost(lull_timer *t) {
    (void)t;
    check_fail(__FILE__, __LINE__, "the final remote raise never arrived");
}

static void on_burst(lull_listener *l) {
    burst_case *bc = LULL_CONTAINER_OF(l, burst_case, l);
    bc->runs++;
    if (atomic_load(&bc->done)) {
        lull_listener_stop(l);
        lull_timer_stop(&bc->deadline);
        lull_loop_unref(bc->loop);
    }
}

/* Raises from another thread while the loop runs: they coalesce (the
 * listener runs at least once, at most once per raise), and a final raise
 * after the burst is never lost. */
TEST_THREADED(notify_remote_burst_while_running) {
    static burst_case bc;
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    bc.loop = loop;
    atomic_init(&bc.done, false);
    CHECK_EQ(sem_init(&bc.settled, 0, 0), 0);
    lull_notifier_init(&bc.n);
    lull_listener_start(loop, &bc.n, &bc.l, on_burst);
    lull_task_init(&bc.barrier, burst_barrier);
    lull_task_init(&bc.behind, burst_behind);
    lull_timer_init(loop, &bc.deadline, final_raise_lost);
    lull_timer_start(&bc.deadline, 10 * 1000000000ull, 0);
    lull_timer_unref(&bc.deadline);
    lull_loop_ref(loop);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, raise_burst, &bc), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(bc.runs_before_final >= 1);
    CHECK(bc.runs_before_final <= BURST);
    CHECK_EQ(bc.runs, bc.runs_before_final + 1); /* the final raise's run */
    CHECK(bc.n.raised >= (uint64_t)bc.runs);
    sem_destroy(&bc.settled);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Four threads raise one notifier 250,000 times each (10^6 in all), so
 * that raisers race each other for its one remote task (one claims it,
 * the others are coalesced into that claim or into the queued post),
 * which a single raiser never does. Before each raise a thread stores how
 * far it got; the listener reads all four. Nothing is lost when a run
 * comes after every thread's last raise and sees its last store: the
 * listener then stops and lets the run end. A lost raise leaves it
 * waiting, and the guard timer fails the case. */
#define RAISERS     4
#define RAISES_EACH 250000

typedef struct many_case {
    lull_loop *loop;
    lull_notifier n;
    lull_listener l;
    lull_timer guard;
    atomic_int progress[RAISERS]; /* raises made, stored before each */
    int runs;
} many_case;

typedef struct raiser {
    many_case *mc;
    int index;
} raiser;

static void *raise_many(void *arg) {
    raiser *r = arg;
    for (int i = 1; i <= RAISES_EACH; i++) {
        atomic_store_explicit(&r->mc->progress[r->index], i,
                              memory_order_relaxed);
        lull_notifier_raise_remote(r->mc->loop, &r->mc->n);
    }
    return NULL;
}

static void many_raise_lost(lull_timer *t) {
    (void)t;
    check_fail(__FILE__, __LINE__, "a thread's last remote raise never ran");
}

static void on_many(lull_listener *l) {
    many_case *mc = LULL_CONTAINER_OF(l, many_case, l);
    mc->runs++;
    for (int i = 0; i < RAISERS; i++)
        if (atomic_load_explicit(&mc->progress[i], memory_order_relaxed) !=
            RAISES_EACH)
            return;
    lull_listener_stop(l);
    lull_timer_stop(&mc->guard);
    lull_loop_unref(mc->loop);
}

TEST_THREADED(notify_remote_from_four_threads_loses_nothing) {
    static many_case mc;
    CHECK_EQ(lull_loop_new(&mc.loop, NULL), 0);
    CHECK_EQ(lull_notifier_init(&mc.n), 0);
    CHECK_EQ(lull_listener_start(mc.loop, &mc.n, &mc.l, on_many), 0);
    lull_timer_init(mc.loop, &mc.guard, many_raise_lost);
    lull_timer_start(&mc.guard, 10 * 1000000000ull, 0);
    lull_timer_unref(&mc.guard);
    lull_loop_ref(mc.loop);
    pthread_t th[RAISERS];
    raiser r[RAISERS];
    for (int i = 0; i < RAISERS; i++) {
        r[i] = (raiser){&mc, i};
        CHECK_EQ(pthread_create(&th[i], NULL, raise_many, &r[i]), 0);
    }
    CHECK_EQ(lull_loop_run(mc.loop, LULL_RUN_DEFAULT), 0);
    for (int i = 0; i < RAISERS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    CHECK(mc.runs >= 1);
    CHECK(mc.runs <= RAISERS * RAISES_EACH);
    /* Each raise the loop took queued the listener once, ahead of the next
     * one taken; only a raise taken after the last run found it gone. */
    CHECK(mc.n.raised >= (uint64_t)mc.runs);
    CHECK(mc.n.raised <= (uint64_t)mc.runs + 1);
    /* A raise the last run absorbed may still sit on the stack. */
    lull_notifier_quiesce(mc.loop, &mc.n);
    CHECK_EQ(lull_loop_free(mc.loop), 0);
}

/* lull_notifier_quiesce withdraws remote raises that have not run, both one
 * still on the loop's cross-thread stack and one already queued locally, so
 * the notifier can be freed (poisoned first: a raise that ran anyway would
 * read garbage, and ASan reports the use after free). */
typedef struct raise_once {
    lull_loop *loop;
    lull_notifier *n;
} raise_once;

static void *raise_once_from_thread(void *arg) {
    raise_once *ro = arg;
    lull_notifier_raise_remote(ro->loop, ro->n);
    return NULL;
}

static lull_notifier *quiesce_target;
static void quiesce_and_free(lull_task *t) {
    (void)t;
    lull_notifier_quiesce(LULL_CONTAINER_OF(t, marker_task, task)->loop,
                          quiesce_target);
    memset(quiesce_target, 0xA5, sizeof *quiesce_target);
    free(quiesce_target);
}

TEST_THREADED(notifier_quiesce_withdraws_remote_raises_not_yet_run) {
    lull_loop *loop = new_loop();
    for (int queued_locally = 0; queued_locally < 2; queued_locally++) {
        lull_notifier *n = malloc(sizeof *n);
        CHECK(n != NULL);
        lull_notifier_init(n);
        sub s = {.id = 1};
        lull_listener_start(loop, n, &s.l, on_raise);
        raise_once ro = {loop, n};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, raise_once_from_thread, &ro), 0);
        CHECK_EQ(pthread_join(t, NULL), 0);
        lull_listener_stop(&s.l);
        if (!queued_locally) {
            /* The raise is still on the loop's cross-thread stack. */
            lull_notifier_quiesce(loop, n);
            memset(n, 0xA5, sizeof *n);
            free(n);
            CHECK_EQ(lull_loop_settle(loop), 0);
        } else {
            /* A task queued before the raise is taken runs first: by then
             * the poll has queued the raise behind it. */
            marker_task m = {.loop = loop};
            lull_task_init(&m.task, quiesce_and_free);
            lull_task_post(loop, &m.task);
            quiesce_target = n;
            CHECK_EQ(lull_loop_settle(loop), 1);
        }
        CHECK_EQ(s.runs, 0);
    }
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_listener_start judges nothing from the caller's listener, which may come
 * straight from uninitialised memory (valgrind checks that in `make
 * test-valgrind`) or hold stale bytes: here a by-value copy of a
 * subscribed listener, whose notifier and loop fields name the same
 * notifier and loop, is not mistaken for a second subscription. */
TEST(listen_needs_no_initialised_listener) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub a = {.id = 1}, b;
    lull_listener_start(loop, &n, &a.l, on_raise);
    b = a; /* stale copy: never subscribed itself */
    b.id = 2;
    lull_listener_start(loop, &n, &b.l, on_raise);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_TRACE(1, 2);
    lull_listener_stop(&a.l);
    lull_listener_stop(&b.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void subscribe_twice(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    sub a = {.id = 1};
    lull_listener_start(loop, &n, &a.l, on_raise);
    lull_listener_start(loop, &n, &a.l, on_raise);
}

TEST(listener_subscribed_twice_asserts_in_debug_builds) {
    if (!check_debug_build()) return;
    CHECK(check_dies(subscribe_twice, NULL, "listener subscribed twice"));
}

/* Subscribed to one notifier, then started on another of the same loop:
 * the second start would relink it into the second list while the first
 * still holds it, and thread it into the loop's list of listeners a
 * second time (a cycle that lull_loop_walk never leaves). */
static void subscribe_to_a_second_notifier(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    lull_notifier n1, n2;
    lull_notifier_init(&n1);
    lull_notifier_init(&n2);
    sub a = {.id = 1};
    lull_listener_start(loop, &n1, &a.l, on_raise);
    lull_listener_start(loop, &n2, &a.l, on_raise);
}

TEST(listener_subscribed_to_a_second_notifier_asserts_in_debug_builds) {
    if (!check_debug_build()) return;
    CHECK(check_dies(subscribe_to_a_second_notifier, NULL,
                     "listener subscribed twice"));
}

/* Started again while subscribed (to the same notifier, to another one, or
 * on another loop): a release build linked the listener into the lists a
 * second time, a cycle that a raise never left. Debug builds assert; a
 * release build refuses with -EBUSY and the subscription stays as it was. */
static void start_while_subscribed(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop(), *other = new_loop();
    lull_notifier n1, n2;
    lull_notifier_init(&n1);
    lull_notifier_init(&n2);
    sub a = {.id = 1}, b = {.id = 2};
    CHECK_EQ(lull_listener_start(loop, &n1, &a.l, on_raise), 0);
    CHECK_EQ(lull_listener_start(loop, &n1, &b.l, on_raise), 0);
    CHECK_EQ(lull_listener_start(loop, &n1, &b.l, on_raise), -EBUSY);
    CHECK_EQ(lull_listener_start(loop, &n2, &a.l, on_raise), -EBUSY);
    CHECK_EQ(lull_listener_start(other, &n2, &a.l, on_raise), -EBUSY);
    lull_notifier_raise(&n1);
    lull_notifier_raise(&n2);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_TRACE(1, 2);
    CHECK_EQ(lull_loop_settle(other), 0);
    lull_listener_stop(&a.l);
    lull_listener_stop(&b.l);
    /* Stopped: free to start anywhere again. */
    CHECK_EQ(lull_listener_start(other, &n2, &a.l, on_raise), 0);
    lull_listener_stop(&a.l);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(lull_loop_free(other), 0);
}

TEST(listener_started_while_subscribed_is_ebusy_without_asserts) {
    sub a = {.id = 1};
    lull_notifier n;
    lull_notifier_init(&n);
    lull_loop *loop = new_loop();
    CHECK_EQ(lull_listener_start(NULL, &n, &a.l, on_raise), -EINVAL);
    CHECK_EQ(lull_listener_start(loop, NULL, &a.l, on_raise), -EINVAL);
    CHECK_EQ(lull_listener_start(loop, &n, NULL, on_raise), -EINVAL);
    CHECK_EQ(lull_listener_start(loop, &n, &a.l, NULL), -EINVAL);
    CHECK_EQ(lull_loop_free(loop), 0);
    if (check_debug_build())
        CHECK(check_dies(start_while_subscribed, NULL,
                         "listener subscribed twice"));
    else
        CHECK(check_exits_cleanly(start_while_subscribed, NULL));
}

/* A notifier every connection listens to (one per server): 60,000
 * listeners on it, each run once by one raise, and all gone after their
 * stops. The double-subscription check asks a hash set by address, so
 * subscribing stays O(1) here (a walk of the whole list took this case
 * from 0.27 s to 6.5 s; a time is not asserted: the
 * case's timeout is what a quadratic walk would meet under valgrind). */
#define MANY_SUBSCRIBERS 60000

static int many_runs;

static void count_run(lull_listener *l) {
    (void)l;
    many_runs++;
}

TEST(many_listeners_on_one_notifier_each_run_once) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    lull_notifier_init(&n);
    lull_listener *ls = malloc(MANY_SUBSCRIBERS * sizeof *ls);
    CHECK(ls != NULL);
    for (int i = 0; i < MANY_SUBSCRIBERS; i++)
        lull_listener_start(loop, &n, &ls[i], count_run);
    many_runs = 0;
    lull_notifier_raise(&n);
    CHECK(lull_loop_settle(loop) > 0);
    CHECK_EQ(many_runs, MANY_SUBSCRIBERS);
    for (int i = 0; i < MANY_SUBSCRIBERS; i++)
        lull_listener_stop(&ls[i]);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_EQ(m.live_listeners, 0u);
    free(ls);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_notifier_init on a notifier with subscribers: clearing its list
 * would leave them on the loop's list, so the next raise would miss them
 * and their stops would walk a list that no longer holds them. -EBUSY,
 * the list intact; a copy of the live notifier (garbage that looks like
 * one) is set up as usual; once the last listener (a pump's too) has
 * stopped, the notifier is the caller's again. */
static lull_pass_result count_pass(lull_pump *pump, uint64_t *retry_ns) {
    (void)retry_ns;
    (*(int *)pump->data)++;
    return LULL_PASS_QUIET;
}

TEST(notifier_init_with_listeners_is_busy) {
    lull_loop *loop = new_loop();
    lull_notifier n, copy;
    CHECK_EQ(lull_notifier_init(&n), 0);
    sub a = {.id = 1}, b = {.id = 2};
    lull_listener_start(loop, &n, &a.l, on_raise);
    lull_listener_start(loop, &n, &b.l, on_raise);
    CHECK_EQ(lull_notifier_init(&n), -EBUSY);
    memcpy(&copy, &n, sizeof n);
    CHECK_EQ(lull_notifier_init(&copy), 0);
    CHECK(copy.head == NULL);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_EQ(a.runs, 1);
    CHECK_EQ(b.runs, 1);
    lull_listener_stop(&a.l);
    CHECK_EQ(lull_notifier_init(&n), -EBUSY); /* b is still subscribed */
    lull_listener_stop(&b.l);

    /* A pump's listener counts too, until the pump's close stops it. */
    lull_pump pump;
    lull_listener pl;
    int passes = 0;
    CHECK_EQ(lull_pump_init(loop, &pump, count_pass), 0);
    pump.data = &passes;
    lull_pump_listen(&pump, &n, &pl);
    CHECK_EQ(lull_notifier_init(&n), -EBUSY);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(passes, 1);
    lull_pump_close(&pump);
    CHECK_EQ(lull_notifier_init(&n), 0);
    lull_listener_start(loop, &n, &a.l, on_raise);
    lull_notifier_raise(&n);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(a.runs, 2);
    lull_listener_stop(&a.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_notifier_init while a remote raise of n is in flight (lull.h: not
 * allowed) clears the task that carries it, still on the loop's stack of
 * remote posts. With no listener the init cannot refuse (-EBUSY is for
 * listeners): the loop's take dropped the posts older than the raise (here
 * another task's) without a word. Debug builds now stop at the take. */
static lull_task around;
static int around_runs;
static void around_ran(lull_task *t) {
    (void)t;
    around_runs++;
}

static void init_with_a_raise_in_flight(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    static lull_notifier n;
    CHECK_EQ(lull_notifier_init(&n), 0);
    lull_task_init(&around, around_ran);
    lull_task_post_remote(loop, &around);
    lull_notifier_raise_remote(loop, &n);
    CHECK_EQ(lull_notifier_init(&n), 0);
    lull_loop_settle(loop);
    fprintf(stderr, "the older post ran %d times\n", around_runs);
}

TEST(notifier_init_with_a_remote_raise_in_flight_asserts) {
    if (!check_debug_build()) return;
    CHECK(check_dies(init_with_a_raise_in_flight, NULL,
                     "lull: remote posts corrupted"));
}

/* NULL handles do nothing, and zeroed ones (never set up) are not
 * followed: the void calls return, the int ones refuse, and a real
 * notifier and listener passed next to a NULL are left as they were. */
TEST(null_and_zeroed_handles_do_nothing) {
    lull_loop *loop = new_loop();
    lull_notifier n;
    CHECK_EQ(lull_notifier_init(NULL), -EINVAL);
    CHECK_EQ(lull_notifier_init(&n), 0);
    sub a = {.id = 1};
    CHECK_EQ(lull_listener_start(loop, &n, &a.l, on_raise), 0);
    lull_notifier_raise(NULL);
    lull_notifier_raise_remote(NULL, &n);
    lull_notifier_raise_remote(loop, NULL);
    lull_notifier_quiesce(NULL, &n);
    lull_notifier_quiesce(loop, NULL);
    lull_listener_stop(NULL);
    lull_listener zl;
    memset(&zl, 0, sizeof zl);
    lull_listener_stop(&zl); /* never subscribed */
    lull_notifier zn;
    memset(&zn, 0, sizeof zn);
    lull_notifier_raise(&zn); /* no listener to reach */
    CHECK_U64_EQ(n.raised, 0);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(a.runs, 0);
    CHECK(a.l.notifier == &n);
    lull_notifier_raise(&n); /* still subscribed, and heard */
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(a.runs, 1);
    lull_listener_stop(&a.l);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A zeroed notifier (static storage, calloc) that was never given to
 * lull_notifier_init takes listeners and a pump, and its local raises
 * reach them; its remote raise must too. It reached none: the task that
 * carries a remote raise is set up only by lull_notifier_init, so debug
 * builds stopped with "posting a task with no function" (a task the
 * caller never posted) and release builds dropped the raise: a listener
 * waiting for another thread's change never heard of it. A zeroed
 * notifier with no listener stays a no-op, as its local raise is. */
TEST(zeroed_notifier_carries_remote_raises) {
    lull_loop *loop = new_loop();
    static lull_notifier quiet, n, pn;        /* zeroed, never initialised */
    lull_notifier_raise_remote(loop, &quiet); /* nothing listens: nothing */
    CHECK_EQ(lull_loop_settle(loop), 0);
    sub a = {.id = 1};
    CHECK_EQ(lull_listener_start(loop, &n, &a.l, on_raise), 0);
    lull_pump pump;
    lull_listener pl;
    int passes = 0;
    CHECK_EQ(lull_pump_init(loop, &pump, count_pass), 0);
    pump.data = &passes;
    CHECK_EQ(lull_pump_listen(&pump, &pn, &pl), 0);
    lull_notifier_raise_remote(loop, &n);
    lull_notifier_raise_remote(loop, &pn);
    CHECK_EQ(lull_loop_settle(loop), 4); /* two carriers, then their raises */
    CHECK_EQ(a.runs, 1);
    CHECK_EQ(passes, 1);
    CHECK_U64_EQ(n.raised, 1);
    CHECK_U64_EQ(pn.raised, 1);
    lull_listener_stop(&a.l);
    lull_pump_close(&pump);
    lull_notifier_quiesce(loop, &n);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A thread raises a zeroed notifier while its first listener joins on the
 * owner's thread: the listener's join sets up the carrier the raise reads
 * (ThreadSanitizer: no race), and a raise after the join is heard. */
typedef struct zeroed_raiser {
    lull_loop *loop;
    lull_notifier *n;
    int joined; /* atomic: the listener is in */
} zeroed_raiser;

static void *raise_zeroed(void *arg) {
    zeroed_raiser *z = arg;
    while (!__atomic_load_n(&z->joined, __ATOMIC_ACQUIRE))
        lull_notifier_raise_remote(z->loop, z->n);
    lull_notifier_raise_remote(z->loop, z->n); /* after the join: heard */
    return NULL;
}

TEST_THREADED(zeroed_notifier_raised_while_its_first_listener_joins) {
    lull_loop *loop = new_loop();
    static lull_notifier n; /* zeroed, never initialised */
    zeroed_raiser z = {.loop = loop, .n = &n};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, raise_zeroed, &z), 0);
    sub a = {.id = 1};
    CHECK_EQ(lull_listener_start(loop, &n, &a.l, on_raise), 0);
    __atomic_store_n(&z.joined, 1, __ATOMIC_RELEASE);
    CHECK_EQ(pthread_join(t, NULL), 0);
    lull_loop_settle(loop);
    CHECK(a.runs >= 1);
    lull_listener_stop(&a.l);
    lull_notifier_quiesce(loop, &n);
    CHECK_EQ(lull_loop_free(loop), 0);
}
