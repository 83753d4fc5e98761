/* Posted tasks (C2): FIFO order, coalescing of a pending post, cancel inside
 * a batch, and the zero-delay timers that share the ready queue (C3). */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef struct item {
    lull_task task;
    lull_timer timer;
    int id;
    int runs;
} item;

static lull_loop *the_loop;

static lull_loop *new_loop(int clock) {
    lull_loop_options o = {.clock = clock};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    CHECK(loop != NULL);
    the_loop = loop;
    check_trace_reset();
    return loop;
}

static void record_task(lull_task *t) {
    item *it = LULL_CONTAINER_OF(t, item, task);
    it->runs++;
    check_trace(it->id);
}

static void record_timer(lull_timer *t) {
    item *it = LULL_CONTAINER_OF(t, item, timer);
    it->runs++;
    check_trace(it->id);
}

static void items_init(item *v, int n) {
    for (int i = 0; i < n; i++) {
        v[i] = (item){.id = i};
        lull_task_init(&v[i].task, record_task);
        lull_timer_init(the_loop, &v[i].timer, record_timer);
    }
}

TEST(fifo_order) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[8];
    items_init(v, 8);
    int order[8] = {3, 0, 7, 1, 6, 2, 5, 4};
    for (int i = 0; i < 8; i++)
        lull_task_post(loop, &v[order[i]].task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(3, 0, 7, 1, 6, 2, 5, 4);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(v[i].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(fifo_order_virtual_settle) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[5];
    items_init(v, 5);
    for (int i = 4; i >= 0; i--)
        lull_task_post(loop, &v[i].task);
    CHECK_EQ(lull_loop_settle(loop), 5);
    CHECK_TRACE(4, 3, 2, 1, 0);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* C3: a zero-delay timer is queued like a task, in the same order. */
TEST(tasks_and_zero_timers_interleaved) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[6];
    items_init(v, 6);
    lull_task_post(loop, &v[0].task);
    lull_timer_start(&v[1].timer, 0, 0);
    lull_task_post(loop, &v[2].task);
    lull_timer_start(&v[3].timer, 0, 0);
    lull_timer_start(&v[4].timer, 0, 0);
    lull_task_post(loop, &v[5].task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(0, 1, 2, 3, 4, 5);
    for (int i = 0; i < 6; i++)
        CHECK(!lull_timer_active(&v[i].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Work queued from inside a callback interleaves the same way. */
static item *cascade;
static void cascade_first(lull_task *t) {
    check_trace(LULL_CONTAINER_OF(t, item, task)->id);
    lull_timer_start(&cascade[1].timer, 0, 0);
    lull_task_post(the_loop, &cascade[2].task);
    lull_timer_start(&cascade[3].timer, 0, 0);
}

TEST(zero_timers_interleaved_from_callback) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[5];
    items_init(v, 5);
    cascade = v;
    lull_task_init(&v[0].task, cascade_first);
    lull_task_post(loop, &v[0].task);
    lull_task_post(loop, &v[4].task); /* queued before the cascade's work */
    CHECK_EQ(lull_loop_settle(loop), 5);
    CHECK_TRACE(0, 4, 1, 2, 3);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* C2: a posted task never runs inside lull_task_post, also not inside a
 * callback's cascade. */
static item *inline_target;
static bool inline_checked;
static void post_and_look(lull_task *t) {
    (void)t;
    lull_task_post(the_loop, &inline_target->task);
    CHECK_EQ(inline_target->runs, 0);
    CHECK(lull_task_pending(&inline_target->task));
    lull_timer_start(&inline_target->timer, 0, 0);
    CHECK_EQ(inline_target->runs, 0);
    inline_checked = true;
}

TEST(post_does_not_run_inline) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[1];
    items_init(v, 1);
    lull_task_post(loop, &v[0].task);
    CHECK_EQ(v[0].runs, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(v[0].runs, 1);

    lull_task poster;
    lull_task_init(&poster, post_and_look);
    inline_target = &v[0];
    v[0].runs = 0;
    lull_task_post(loop, &poster);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(inline_checked);
    CHECK_EQ(v[0].runs, 2); /* the task and the zero-delay timer */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Posting a pending task is a no-op: it keeps its place and runs once. */
TEST(double_post_runs_once) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[3];
    items_init(v, 3);
    lull_task_post(loop, &v[0].task);
    lull_task_post(loop, &v[1].task);
    lull_task_post(loop, &v[0].task);
    lull_task_post(loop, &v[2].task);
    lull_task_post(loop, &v[0].task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(0, 1, 2);
    CHECK_EQ(v[0].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A cancelled task does not run, also when it was due in the same batch as
 * the callback that cancelled it. */
static item *cancel_victims;
static void cancel_later(lull_task *t) {
    check_trace(LULL_CONTAINER_OF(t, item, task)->id);
    lull_task_cancel(&cancel_victims[2].task);
    lull_timer_stop(&cancel_victims[3].timer);
    CHECK(!lull_task_pending(&cancel_victims[2].task));
}

TEST(cancel_later_entry_in_same_batch) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[5];
    items_init(v, 5);
    cancel_victims = v;
    lull_task_init(&v[0].task, cancel_later);
    lull_task_post(loop, &v[0].task);
    lull_task_post(loop, &v[1].task);
    lull_task_post(loop, &v[2].task);
    lull_timer_start(&v[3].timer, 0, 0);
    lull_task_post(loop, &v[4].task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(0, 1, 4);
    CHECK_EQ(v[2].runs, 0);
    CHECK_EQ(v[3].runs, 0);
    CHECK(!lull_timer_active(&v[3].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(cancel_outside_run) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    item v[3];
    items_init(v, 3);
    lull_task_cancel(&v[0].task); /* never posted: a no-op */
    lull_task_post(loop, &v[0].task);
    lull_task_post(loop, &v[1].task);
    lull_task_post(loop, &v[2].task);
    lull_task_cancel(&v[1].task);
    lull_task_cancel(&v[1].task); /* twice: still a no-op */
    CHECK(!lull_task_pending(&v[1].task));
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_TRACE(0, 2);
    /* A loop with only a cancelled task is not alive. */
    lull_task_post(loop, &v[0].task);
    lull_task_cancel(&v[0].task);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(v[0].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Cancel then post puts the task at the tail, unlike a plain re-post. */
static item *move_items;
static void move_to_tail(lull_task *t) {
    check_trace(LULL_CONTAINER_OF(t, item, task)->id);
    lull_task_cancel(&move_items[1].task);
    lull_task_post(the_loop, &move_items[1].task);
}

TEST(cancel_then_repost_goes_to_tail) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[4];
    items_init(v, 4);
    lull_task_post(loop, &v[0].task);
    lull_task_post(loop, &v[1].task);
    lull_task_post(loop, &v[2].task);
    lull_task_cancel(&v[0].task);
    lull_task_post(loop, &v[0].task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(1, 2, 0);

    /* The same from inside a batch. */
    check_trace_reset();
    move_items = v;
    lull_task_init(&v[3].task, move_to_tail);
    lull_task_post(loop, &v[3].task);
    lull_task_post(loop, &v[1].task);
    lull_task_post(loop, &v[2].task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(3, 2, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A task re-posting itself runs once per post, behind the work already
 * queued, and a double re-post still runs once. */
static int self_runs;
static void repost_self(lull_task *t) {
    self_runs++;
    check_trace(100 + self_runs);
    CHECK(!lull_task_pending(t)); /* unlinked before its function runs */
    if (self_runs < 3) {
        lull_task_post(the_loop, t);
        CHECK(lull_task_pending(t));
        lull_task_post(the_loop, t);
    }
}

TEST(task_reposting_itself) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    item v[2];
    items_init(v, 2);
    lull_task self;
    lull_task_init(&self, repost_self);
    self_runs = 0;
    lull_task_post(loop, &self);
    lull_task_post(loop, &v[0].task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(101, 0, 102, 103);
    CHECK_EQ(self_runs, 3);
    CHECK(!lull_task_pending(&self));
    CHECK_EQ(lull_loop_free(loop), 0);
}

static bool seen_pending_in_callback = true;
static void look_at_self(lull_task *t) {
    seen_pending_in_callback = lull_task_pending(t);
}

TEST(task_pending_states) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_task t;
    lull_task_init(&t, look_at_self);
    CHECK(!lull_task_pending(&t));
    lull_task_post(loop, &t);
    CHECK(lull_task_pending(&t));
    lull_task_cancel(&t);
    CHECK(!lull_task_pending(&t));
    lull_task_post(loop, &t);
    CHECK(lull_task_pending(&t));
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK(!seen_pending_in_callback);
    CHECK(!lull_task_pending(&t));
    /* Re-init is allowed while not pending. */
    lull_task_init(&t, look_at_self);
    CHECK(!lull_task_pending(&t));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A long chain: one task re-posting itself 100,000 times, all in order. */
static int chain_left;
static void chain_hop(lull_task *t) {
    if (--chain_left > 0) lull_task_post(the_loop, t);
}

TEST(long_chain) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_task t;
    lull_task_init(&t, chain_hop);
    chain_left = 100000;
    lull_task_post(loop, &t);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(chain_left, 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.tasks_run, 100000);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_task.loop: the loop a task was last queued on, so its callback can
 * re-post it without keeping the loop in its own struct (as a timer's
 * callback uses timer->loop). A coalesced post changes nothing; a remote
 * post sets it when the loop takes it. */
static lull_loop *seen_loop;
static int hops_left;
static void hop_by_own_loop(lull_task *t) {
    seen_loop = t->loop;
    if (--hops_left > 0) lull_task_post(t->loop, t);
}

TEST(task_knows_its_loop) {
    lull_loop *a = new_loop(LULL_CLOCK_VIRTUAL);
    lull_loop *b = new_loop(LULL_CLOCK_VIRTUAL);
    lull_task t;
    lull_task_init(&t, hop_by_own_loop);
    CHECK(t.loop == NULL);
    hops_left = 3;
    lull_task_post(a, &t);
    CHECK(t.loop == a);
    CHECK_EQ(lull_loop_settle(a), 3);
    CHECK(seen_loop == a);
    hops_left = 1;
    lull_task_post(b, &t);
    CHECK(t.loop == b);
    if (!check_debug_build()) {
        /* Pending on b: coalesced, still b's (debug builds stop here:
         * task_posted_to_a_second_loop_while_pending_asserts). */
        lull_task_post(a, &t);
        CHECK(t.loop == b);
    }
    CHECK_EQ(lull_loop_settle(a), 0);
    CHECK_EQ(lull_loop_settle(b), 1);
    CHECK(seen_loop == b);
    hops_left = 1;
    lull_task_post_remote(a, &t);
    CHECK_EQ(lull_loop_settle(a), 1);
    CHECK(seen_loop == a);
    CHECK_EQ(lull_loop_free(a), 0);
    CHECK_EQ(lull_loop_free(b), 0);
}

/* A task without a function is refused at its init (-EINVAL), as a timer
 * or a watcher without one is: accepted, it crashed the loop that ran it
 * (a call through NULL) in release builds. */
TEST(task_init_without_a_function_is_einval) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_task t;
    CHECK_EQ(lull_task_init(&t, NULL), -EINVAL);
    CHECK_EQ(lull_task_init(NULL, record_task), -EINVAL);
    lull_timer tm;
    CHECK_EQ(lull_timer_init(loop, &tm, NULL), -EINVAL);
    item it = {.id = 7};
    CHECK_EQ(lull_task_init(&it.task, record_task), 0);
    lull_task_post(loop, &it.task);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(it.runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A task never set up (zeroed: lull_task_init skipped) is a programming
 * error: a debug build stops at the post, locally and from another thread.
 * A release build drops a remote one (the loop that ran it called through
 * NULL, far from the cause), and the loop frees cleanly. */
static void post_zeroed_task(void *arg) {
    bool remote = arg != NULL;
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_task t = {0};
    if (remote)
        lull_task_post_remote(loop, &t);
    else
        lull_task_post(loop, &t);
    CHECK(!lull_task_pending(&t));
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* (lull_task_post, on the hot path, is checked in debug builds only.) */
TEST(post_of_a_task_never_set_up) {
    for (int remote = 0; remote < 2; remote++) {
        void *arg = remote ? (void *)1 : NULL;
        if (check_debug_build())
            CHECK(check_dies(post_zeroed_task, arg,
                             "lull: posting a task with no function"));
        else if (remote)
            CHECK(check_exits_cleanly(post_zeroed_task, arg));
    }
}

/* A task freed while pending (its memory reused: here overwritten by the
 * callback of a task that ran before it in the same batch) corrupts the
 * ready queue, which debug builds promise to catch (docs/API.md, Errors).
 * The walk at iteration boundaries comes too late for the same batch: the
 * runner unlinked the freed node through its scribbled links and crashed
 * (SIGSEGV, no message). Each node is now checked against the queue
 * before it is unlinked. Release builds do not check (a use after free). */
static lull_task *g_victim;
static void scribble_on_victim(lull_task *t) {
    (void)t;
    memset(g_victim, 0xab, sizeof *g_victim);
}

static void free_a_pending_task(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    static lull_task first, victim, last;
    g_victim = &victim;
    lull_task_init(&first, scribble_on_victim);
    lull_task_init(&victim, scribble_on_victim);
    lull_task_init(&last, scribble_on_victim);
    lull_task_post(loop, &first);
    lull_task_post(loop, &victim);
    lull_task_post(loop, &last);
    lull_loop_settle(loop);
}

TEST(task_freed_while_pending_is_caught_in_debug_builds) {
    if (!check_debug_build()) return;
    CHECK(check_dies(free_a_pending_task, NULL,
                     "lull: ready queue corrupted (a task freed or set up "
                     "again while pending?)"));
}

/* A task pending on one loop, posted to another: it ran on the first, once,
 * where the caller asked for the second, and nothing said so (with the
 * loops on two threads the post also read links the other thread writes).
 * A programming error, as a libuv handle used on two loops is: debug
 * builds stop at the post, or, for a remote post, when the second loop
 * takes it. Release builds coalesce it into the pending post. */
static void post_to_a_second_loop(void *arg) {
    bool remote = arg != NULL;
    lull_loop *a = new_loop(LULL_CLOCK_VIRTUAL);
    lull_loop *b = new_loop(LULL_CLOCK_VIRTUAL);
    static item it = {.id = 1};
    CHECK_EQ(lull_task_init(&it.task, record_task), 0);
    lull_task_post(a, &it.task);
    if (remote)
        lull_task_post_remote(b, &it.task);
    else
        lull_task_post(b, &it.task);
    CHECK_EQ(lull_loop_settle(b), 0);
    CHECK(it.task.loop == a);
    CHECK_EQ(lull_loop_settle(a), 1);
    CHECK_EQ(it.runs, 1);
    CHECK_EQ(lull_loop_free(a), 0);
    CHECK_EQ(lull_loop_free(b), 0);
}

TEST(task_posted_to_a_second_loop_while_pending_asserts) {
    for (int remote = 0; remote < 2; remote++) {
        void *arg = remote ? (void *)1 : NULL;
        if (check_debug_build())
            CHECK(check_dies(post_to_a_second_loop, arg,
                             "lull: a task posted to a loop while pending "
                             "on another"));
        else
            CHECK(check_exits_cleanly(post_to_a_second_loop, arg));
    }
}

/* The same once the loop that has it queued took it: posted to a after it
 * ran on b, it runs on a. */
TEST(task_posted_to_a_second_loop_after_it_ran) {
    lull_loop *a = new_loop(LULL_CLOCK_VIRTUAL);
    lull_loop *b = new_loop(LULL_CLOCK_VIRTUAL);
    item it = {.id = 1};
    CHECK_EQ(lull_task_init(&it.task, record_task), 0);
    lull_task_post(b, &it.task);
    CHECK_EQ(lull_loop_settle(b), 1);
    lull_task_post(a, &it.task);
    CHECK(it.task.loop == a);
    CHECK_EQ(lull_loop_settle(b), 0);
    CHECK_EQ(lull_loop_settle(a), 1);
    lull_task_post(b, &it.task);
    lull_task_cancel(&it.task); /* cancelled: free for another loop */
    lull_task_post(a, &it.task);
    CHECK_EQ(lull_loop_settle(b), 0);
    CHECK_EQ(lull_loop_settle(a), 1);
    CHECK_EQ(it.runs, 3);
    CHECK_EQ(lull_loop_free(a), 0);
    CHECK_EQ(lull_loop_free(b), 0);
}

/* Posted remotely to a second loop while the first has not taken its
 * remote post yet: the poster cannot tell which loop the queued post is
 * for (that would cost every remote post a store), so it is coalesced
 * into the first one, in every build, as lull.h says. */
TEST(task_posted_remotely_to_two_loops_runs_on_the_first) {
    lull_loop *a = new_loop(LULL_CLOCK_VIRTUAL);
    lull_loop *b = new_loop(LULL_CLOCK_VIRTUAL);
    item it = {.id = 1};
    CHECK_EQ(lull_task_init(&it.task, record_task), 0);
    lull_task_post_remote(a, &it.task);
    lull_task_post_remote(b, &it.task);
    CHECK_EQ(lull_loop_settle(b), 0);
    CHECK_EQ(lull_loop_settle(a), 1);
    CHECK_EQ(it.runs, 1);
    CHECK(it.task.loop == a);
    CHECK_EQ(lull_loop_free(a), 0);
    CHECK_EQ(lull_loop_free(b), 0);
}

/* lull_task_init on a pending task (its memory may be anything before its
 * first init, so the init cannot look) clears links the ready queue still
 * follows: debug builds stop when the queue reaches it, before anything
 * runs through them, wherever it was queued, whether or not it was posted
 * again, and when the task before it in the batch is the one that set it
 * up again. A task in the middle used to pass the runner's check (the
 * unlink of the one before it repairs its back link) and crash on its
 * NULL forward link, or, posted again, cut the tasks behind it off the
 * queue: they never ran and stayed pending. */
enum { REINIT_HEAD, REINIT_MIDDLE, REINIT_REPOSTED, REINIT_BY_A_CALLBACK };
static item reinit_v[3];
static void reinit_the_next(lull_task *t) {
    (void)t;
    lull_task_init(&reinit_v[1].task, record_task);
}

static void init_a_pending_task(void *arg) {
    int how = (int)(intptr_t)arg;
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    items_init(reinit_v, 3);
    if (how == REINIT_BY_A_CALLBACK)
        lull_task_init(&reinit_v[0].task, reinit_the_next);
    for (int i = 0; i < 3; i++)
        lull_task_post(loop, &reinit_v[i].task);
    lull_task *victim = &reinit_v[how == REINIT_HEAD ? 0 : 1].task;
    if (how != REINIT_BY_A_CALLBACK) lull_task_init(victim, record_task);
    if (how == REINIT_REPOSTED) lull_task_post(loop, victim);
    lull_loop_settle(loop);
    /* Not caught: say what became of the tasks. */
    fprintf(stderr, "runs %d %d %d, pending %d %d %d\n", reinit_v[0].runs,
            reinit_v[1].runs, reinit_v[2].runs,
            lull_task_pending(&reinit_v[0].task),
            lull_task_pending(&reinit_v[1].task),
            lull_task_pending(&reinit_v[2].task));
}

TEST(task_init_while_pending_is_caught_in_debug_builds) {
    if (!check_debug_build()) return;
    for (int how = REINIT_HEAD; how <= REINIT_BY_A_CALLBACK; how++)
        CHECK(check_dies(init_a_pending_task, (void *)(intptr_t)how,
                         "lull: ready queue corrupted"));
}

/* lull_task_cancel of a task queued on a loop another thread owns unlinks
 * it under that loop's runner: debug builds stop it, as every call that
 * reaches a loop from the wrong thread (the task knows its loop once
 * queued). A task that is not queued is not looked at. */
static lull_task cancel_victim;
static void *cancel_elsewhere(void *arg) {
    (void)arg;
    lull_task_cancel(&cancel_victim);
    return NULL;
}

static void cancel_from_another_thread(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_task_init(&cancel_victim, record_task);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, cancel_elsewhere, NULL), 0);
    CHECK_EQ(pthread_join(th, NULL), 0); /* not queued: nothing to check */
    lull_task_post(loop, &cancel_victim);
    CHECK_EQ(pthread_create(&th, NULL, cancel_elsewhere, NULL), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
}

TEST_THREADED(task_cancel_from_a_thread_not_owning_its_loop_asserts) {
    if (!check_debug_build()) return;
    CHECK(check_dies(cancel_from_another_thread, NULL,
                     "lull: called from a thread that does not own the loop"));
}
