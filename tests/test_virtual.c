/* The virtual clock (C7): lull_loop_advance steps through deadlines running
 * ready work between them, lull_loop_settle runs ready work with time frozen
 * and counts callbacks, auto-advance lets lull_loop_run jump to the next
 * deadline. The start value of virtual time is not specified: cases check time
 * relative to the loop's first lull_loop_now. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h" /* a loop's epoll fd and futex word, to see it asleep */

#define MS  1000000ull
#define SEC 1000000000ull

typedef struct item {
    lull_timer timer;
    lull_task task;
    int id;
    int runs;
    uint64_t at; /* lull_loop_now at the last run, relative to t0 */
} item;

static lull_loop *the_loop;
static uint64_t t0;

static lull_loop *new_loop(unsigned flags) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL, .flags = flags};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    t0 = lull_loop_now(loop);
    check_trace_reset();
    return loop;
}

static void note(item *it) {
    it->runs++;
    it->at = lull_loop_now(the_loop) - t0;
    check_trace(it->id);
}

static void record_timer(lull_timer *t) {
    note(LULL_CONTAINER_OF(t, item, timer));
}

static void record_task(lull_task *t) {
    note(LULL_CONTAINER_OF(t, item, task));
}

static void items_init(item *v, int n) {
    for (int i = 0; i < n; i++) {
        v[i] = (item){.id = i};
        lull_timer_init(the_loop, &v[i].timer, record_timer);
        lull_task_init(&v[i].task, record_task);
    }
}

/* A timer at 10 posting a task: the task runs (at time 10) before the timer
 * at 20. */
static item *between;
static void post_between(lull_timer *t) {
    record_timer(t);
    lull_task_post(the_loop, &between[2].task);
}

TEST(advance_runs_ready_work_between_timers) {
    lull_loop *loop = new_loop(0);
    item v[3];
    items_init(v, 3);
    between = v;
    lull_timer_init(loop, &v[0].timer, post_between);
    lull_timer_start(&v[1].timer, 20, 0);
    lull_timer_start(&v[0].timer, 10, 0);
    lull_loop_advance(loop, 30);
    CHECK_TRACE(0, 2, 1);
    CHECK_U64_EQ(v[0].at, 10);
    CHECK_U64_EQ(v[2].at, 10);
    CHECK_U64_EQ(v[1].at, 20);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 30);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* advance first runs what is already ready, at the current time. */
TEST(advance_runs_ready_work_first) {
    lull_loop *loop = new_loop(0);
    item v[2];
    items_init(v, 2);
    lull_timer_start(&v[0].timer, 1, 0);
    lull_task_post(loop, &v[1].task);
    lull_loop_advance(loop, 5);
    CHECK_TRACE(1, 0);
    CHECK_U64_EQ(v[1].at, 0);
    CHECK_U64_EQ(v[0].at, 1);
    /* advance(0) runs ready work without moving time. */
    lull_task_post(loop, &v[1].task);
    lull_loop_advance(loop, 0);
    CHECK_EQ(v[1].runs, 2);
    CHECK_U64_EQ(v[1].at, 5);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 5);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(advance_fires_repeat_once_per_period_crossed) {
    lull_loop *loop = new_loop(0);
    item v[1];
    items_init(v, 1);
    lull_timer_start(&v[0].timer, 10, 10);
    lull_loop_advance(loop, 95); /* 10, 20, ..., 90 */
    CHECK_EQ(v[0].runs, 9);
    CHECK_U64_EQ(v[0].at, 90);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 95);
    lull_loop_advance(loop, 5);
    CHECK_EQ(v[0].runs, 10);
    CHECK_U64_EQ(v[0].at, 100);
    lull_loop_advance(loop, 1000 * 10); /* one big step, 1000 periods */
    CHECK_EQ(v[0].runs, 1010);
    lull_timer_stop(&v[0].timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Timers armed by callbacks during an advance: due inside the window fire in
 * it, later ones wait. */
static item *chain;
static void arm_more(lull_timer *t) {
    record_timer(t);
    lull_timer_start(&chain[1].timer, 5, 0);  /* 15: inside */
    lull_timer_start(&chain[2].timer, 25, 0); /* 35: outside */
}

TEST(timers_armed_during_advance) {
    lull_loop *loop = new_loop(0);
    item v[3];
    items_init(v, 3);
    chain = v;
    lull_timer_init(loop, &v[0].timer, arm_more);
    lull_timer_start(&v[0].timer, 10, 0);
    lull_loop_advance(loop, 30);
    CHECK_TRACE(0, 1);
    CHECK_U64_EQ(v[1].at, 15);
    CHECK(lull_timer_active(&v[2].timer));
    lull_loop_advance(loop, 4);
    CHECK_EQ(v[2].runs, 0);
    lull_loop_advance(loop, 1);
    CHECK_TRACE(0, 1, 2);
    CHECK_U64_EQ(v[2].at, 35);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* settle: ready work only, time frozen, returns the callbacks of every kind
 * it ran (tasks, zero-delay timers, work they queue, fds, remote posts). */
static item *settle_items;
static void post_follow_up(lull_task *t) {
    record_task(t);
    lull_task_post(the_loop, &settle_items[4].task);
}

static int io_calls;
static int io_fd;
static void on_readable(lull_io *io, int events) {
    (void)events;
    char c;
    CHECK_EQ(read(io_fd, &c, 1), 1);
    io_calls++;
    lull_io_stop(io);
}

TEST(settle_runs_ready_work_with_time_frozen) {
    lull_loop *loop = new_loop(0);
    item v[6];
    items_init(v, 6);
    settle_items = v;
    lull_task_init(&v[0].task, post_follow_up);
    lull_task_post(loop, &v[0].task);
    lull_task_post(loop, &v[1].task);
    lull_timer_start(&v[2].timer, 0, 0);
    lull_timer_start(&v[3].timer, 1, 0); /* needs time: not run */
    CHECK_EQ(lull_loop_settle(loop), 4);
    CHECK_TRACE(0, 1, 2, 4);
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    CHECK_EQ(v[3].runs, 0);
    CHECK_EQ(lull_loop_settle(loop), 0);

    /* A readable fd and a remote post (from this thread: allowed from any
     * thread) are collected without blocking. */
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    io_fd = fds[0];
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[0], on_readable), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    CHECK_EQ(write(fds[1], "x", 1), 1);
    lull_task_post_remote(loop, &v[5].task);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_EQ(io_calls, 1);
    CHECK_EQ(v[5].runs, 1);
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    /* Nothing ready, a watcher on an empty pipe: settle returns at once. */
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_settle(loop), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    /* Returned without a wait that could block (a clock bound here would
     * measure the machine's load, not lull: a run that blocked for good
     * fails on the case's timeout, one that blocked at all counts a
     * wakeup). */
    CHECK_U64_EQ(m.wakeups, 0);
    lull_io_stop(&io);
    close(fds[0]);
    close(fds[1]);
    lull_timer_stop(&v[3].timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Auto-advance: with nothing else to run, lull_loop_run jumps to the next
 * deadline; an hour of virtual time passes at once. */
static int auto_ticks;
static void tick_five(lull_timer *t) {
    if (++auto_ticks == 5) lull_timer_stop(t);
}

TEST(auto_advance_jumps_to_next_deadline) {
    lull_loop *loop = new_loop(LULL_LOOP_AUTO_ADVANCE);
    item v[4];
    items_init(v, 4);
    lull_timer_start(&v[0].timer, 3600 * SEC, 0);
    lull_timer_start(&v[1].timer, 2 * SEC, 0);
    lull_timer_start(&v[2].timer, 1 * SEC, 0);
    lull_task_post(loop, &v[3].task);
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    /* Returned without a wait that could block (a clock bound here would
     * measure the machine's load, not lull: a run that blocked for good
     * fails on the case's timeout, one that blocked at all counts a
     * wakeup). */
    CHECK_U64_EQ(m.wakeups, 0);
    CHECK_TRACE(3, 2, 1, 0);
    CHECK_U64_EQ(v[3].at, 0);
    CHECK_U64_EQ(v[2].at, 1 * SEC);
    CHECK_U64_EQ(v[1].at, 2 * SEC);
    CHECK_U64_EQ(v[0].at, 3600 * SEC);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 3600 * SEC);

    /* A repeating timer that stops itself after five periods. */
    lull_timer t;
    lull_timer_init(loop, &t, tick_five);
    lull_timer_start(&t, 7 * MS, 7 * MS);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(auto_ticks, 5);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 3600 * SEC + 35 * MS);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Auto-advance jumps only for what keeps the loop alive: once only an
 * unreferenced timer is left, the run ends instead of jumping to it. */
TEST(auto_advance_ignores_unreferenced_timer) {
    lull_loop *loop = new_loop(LULL_LOOP_AUTO_ADVANCE);
    item v[2];
    items_init(v, 2);
    lull_timer_start(&v[0].timer, 10 * SEC, 0);
    lull_timer_unref(&v[0].timer);
    lull_timer_start(&v[1].timer, 1 * SEC, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(v[1].runs, 1);
    CHECK_EQ(v[0].runs, 0);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 1 * SEC);
    lull_timer_stop(&v[0].timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Without auto-advance, lull_loop_run on a virtual loop with only timers
 * returns instead of waiting for time that only the test can move. */
TEST(no_auto_advance_run_returns) {
    lull_loop *loop = new_loop(0);
    item v[2];
    items_init(v, 2);
    lull_timer_start(&v[0].timer, 1 * SEC, 0);
    lull_task_post(loop, &v[1].task);
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    /* Returned without a wait that could block (a clock bound here would
     * measure the machine's load, not lull: a run that blocked for good
     * fails on the case's timeout, one that blocked at all counts a
     * wakeup). */
    CHECK_U64_EQ(m.wakeups, 0);
    CHECK_EQ(v[1].runs, 1); /* ready work still ran */
    CHECK_EQ(v[0].runs, 0);
    CHECK(lull_timer_active(&v[0].timer));
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    lull_loop_advance(loop, 1 * SEC);
    CHECK_EQ(v[0].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Without auto-advance a timer cannot fire by waiting, so it does not
 * stop a run from waiting for what can: a watched fd. LULL_RUN_ONCE with a
 * watcher and a timer armed sleeps until the fd is ready (another thread
 * writes it only once the loop sleeps in its wait), then runs the watcher;
 * the timer stays for lull_loop_advance. A run that looked instead of
 * waiting would return with nothing done. */
typedef struct fd_sleeper {
    lull_loop *loop;
    int tid; /* the loop's thread */
    int wfd;
} fd_sleeper;

static void *write_once_asleep(void *arg) {
    fd_sleeper *f = arg;
    check_wait_blocked(f->tid, f->loop->backend_fd, &f->loop->sleeping);
    CHECK_EQ(write(f->wfd, "x", 1), 1);
    return NULL;
}

static int fd_runs;

static void read_one(lull_io *io, int events) {
    (void)events;
    char c;
    CHECK_EQ(read(io->fd, &c, 1), 1);
    fd_runs++;
}

TEST_THREADED(no_auto_advance_run_once_waits_for_a_watched_fd_past_a_timer) {
    lull_loop *loop = new_loop(0);
    item v[1];
    items_init(v, 1);
    lull_timer_start(&v[0].timer, 1 * SEC, 0);
    int p[2];
    CHECK_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, p[0], read_one), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    fd_runs = 0;
    fd_sleeper f = {.loop = loop, .tid = gettid(), .wfd = p[1]};
    pthread_t writer;
    CHECK_EQ(pthread_create(&writer, NULL, write_once_asleep, &f), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(fd_runs, 1);
    CHECK_EQ(pthread_join(writer, NULL), 0);
    CHECK_EQ(v[0].runs, 0);
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    lull_io_stop(&io);
    lull_loop_advance(loop, 1 * SEC);
    CHECK_EQ(v[0].runs, 1);
    close(p[0]);
    close(p[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Virtual time moves only by advance (or auto-advance), exactly. */
TEST(virtual_now_moves_only_by_advance) {
    lull_loop *loop = new_loop(0);
    check_spin_ns(2 * MS);
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    CHECK_U64_EQ(lull_loop_now_exact(loop), t0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    lull_loop_advance(loop, 12345);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 12345);
    lull_loop_advance(loop, 1);
    CHECK_U64_EQ(lull_loop_now_exact(loop) - t0, 12346);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same in a loop that checks I/O after every callback (quantum_ns
 * under 1 us), whose slices end without a clock reading and which reads
 * the real clock for its busy time when a run ends or waits: the virtual
 * time is not that reading. */
TEST(virtual_now_stays_in_a_loop_that_checks_io_every_callback) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL, .quantum_ns = 1};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    t0 = lull_loop_now(loop);
    check_trace_reset();
    item v[4];
    items_init(v, 4);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 4; i++)
            lull_task_post(loop, &v[i].task);
        check_spin_ns(1 * MS);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(v[i].runs, round + 1);
            CHECK_U64_EQ(v[i].at, 0);
        }
        CHECK_U64_EQ(lull_loop_now(loop), t0);
    }
    lull_loop_advance(loop, 7);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 7);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_loop_advance is a no-op on a monotonic loop: it neither runs work nor
 * moves anything. */
TEST(advance_on_monotonic_loop_is_noop) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    the_loop = loop;
    t0 = lull_loop_now(loop);
    check_trace_reset();
    item v[1];
    items_init(v, 1);
    lull_task_post(loop, &v[0].task);
    lull_loop_advance(loop, 10 * SEC);
    CHECK_EQ(v[0].runs, 0);
    CHECK(lull_task_pending(&v[0].task));
    CHECK_LE(lull_loop_now(loop), t0 + 5 * SEC);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(v[0].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Under auto-advance too, timers due at one instant are queued together in
 * arm order: a task posted by the first runs after the others. */
static item *simul;
static void first_posts(lull_timer *t) {
    record_timer(t);
    lull_task_post(the_loop, &simul[3].task);
}

TEST(simultaneous_timers_queued_together) {
    lull_loop *loop = new_loop(LULL_LOOP_AUTO_ADVANCE);
    item v[4];
    items_init(v, 4);
    simul = v;
    lull_timer_init(loop, &v[0].timer, first_posts);
    for (int i = 0; i < 3; i++)
        lull_timer_start(&v[i].timer, 1 * MS, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_TRACE(0, 1, 2, 3);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Deadlines saturate at UINT64_MAX, the end of the clock: a timer due there
 * fires when virtual time gets there, and a repeating one then ends, having
 * no next period. (It used to be re-armed at UINT64_MAX, still due, forever:
 * lull_loop_advance never returned.) */
TEST(saturated_repeating_timer_fires_once_at_the_end_of_time) {
    lull_loop *loop = new_loop(0);
    item v[1];
    items_init(v, 1);
    lull_timer_start(&v[0].timer, UINT64_MAX, 1 * SEC);
    CHECK_U64_EQ(lull_timer_deadline(&v[0].timer), UINT64_MAX);
    lull_loop_advance(loop, UINT64_MAX);
    CHECK_EQ(v[0].runs, 1);
    CHECK_U64_EQ(lull_loop_now(loop), UINT64_MAX);
    CHECK(!lull_timer_active(&v[0].timer));
    /* At the end of time a delayed arm is past it: it arms nothing (it was
     * due at once, so a timer re-armed from its own callback fired for
     * ever: test_timer, rearm_at_the_end_of_virtual_time_does_not_spin).
     * A zero-delay repeat runs its turn and has no next period. */
    lull_timer_start(&v[0].timer, 5, 5);
    CHECK(!lull_timer_active(&v[0].timer));
    lull_loop_advance(loop, 10);
    CHECK_EQ(v[0].runs, 1);
    lull_timer_start(&v[0].timer, 0, 5);
    lull_loop_advance(loop, 10);
    CHECK_EQ(v[0].runs, 2);
    CHECK(!lull_timer_active(&v[0].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A period whose next deadline passes the end of the clock is cut there:
 * the fires at 10 and 10 + P, then one at UINT64_MAX, then none. */
TEST(repeat_period_past_the_end_of_time_is_cut_there) {
    lull_loop *loop = new_loop(0);
    item v[1];
    items_init(v, 1);
    uint64_t period = UINT64_MAX / 2;
    lull_timer_start(&v[0].timer, 10, period);
    lull_loop_advance(loop, UINT64_MAX);
    CHECK_EQ(v[0].runs, 3);
    CHECK_U64_EQ(v[0].at, UINT64_MAX - t0);
    CHECK(!lull_timer_active(&v[0].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same with auto-advance: lull_loop_run jumps to the end of time, fires the
 * timer once and returns. */
TEST(auto_advance_to_a_saturated_repeating_timer_returns) {
    lull_loop *loop = new_loop(LULL_LOOP_AUTO_ADVANCE);
    item v[1];
    items_init(v, 1);
    lull_timer_start(&v[0].timer, UINT64_MAX, 1 * SEC);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(v[0].runs, 1);
    CHECK(!lull_timer_active(&v[0].timer));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ---------------------------------------- settle and level-triggered fds */

/* A watched fd that stays ready (a pipe with room is always writable) is
 * reported by every poll. lull_loop_settle runs it, then returns: a round that
 * ran only watchers the round before also ran has nothing new to show. */
static int writable_calls;
static void on_writable(lull_io *io, int events) {
    (void)io;
    CHECK(events & LULL_WRITABLE);
    writable_calls++;
}

TEST(settle_returns_while_an_fd_stays_ready) {
    lull_loop *loop = new_loop(0);
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[1], on_writable), 0);
    CHECK_EQ(lull_io_start(&io, LULL_WRITABLE), 0);
    int ran = lull_loop_settle(loop);
    CHECK_LE(1, writable_calls);
    CHECK_EQ(ran, writable_calls);
    /* Every settle does the same: it runs the watcher and returns. */
    writable_calls = 0;
    CHECK_EQ(lull_loop_settle(loop), ran);
    CHECK_EQ(writable_calls, ran);
    /* With ready work beside it, the work runs to the end as well. */
    item v[3];
    items_init(v, 3);
    lull_task_post(loop, &v[0].task);
    lull_timer_start(&v[1].timer, 0, 0);
    lull_timer_start(&v[2].timer, 5, 0);
    CHECK_LE(2, lull_loop_settle(loop));
    CHECK_TRACE(0, 1);
    /* ... and lull_loop_advance, which settles at every deadline, returns too.
     */
    lull_loop_advance(loop, 5);
    CHECK_TRACE(0, 1, 2);
    lull_io_stop(&io);
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The bound does not cut progress short: two fds passing a token back and
 * forth are each ready in alternate rounds, and settle follows the whole
 * exchange. */
#define PING_PONG_ROUNDS 50

typedef struct ping_end {
    lull_io io;
    int fd;
    int received;
} ping_end;

static void on_token(lull_io *io, int events) {
    (void)events;
    ping_end *e = LULL_CONTAINER_OF(io, ping_end, io);
    char c;
    CHECK_EQ(read(e->fd, &c, 1), 1);
    if (++e->received < PING_PONG_ROUNDS) CHECK_EQ(write(e->fd, "t", 1), 1);
}

TEST(settle_follows_an_fd_ping_pong_to_the_end) {
    lull_loop *loop = new_loop(0);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    ping_end a = {.fd = sv[0]}, b = {.fd = sv[1]};
    CHECK_EQ(lull_io_init(loop, &a.io, a.fd, on_token), 0);
    CHECK_EQ(lull_io_init(loop, &b.io, b.fd, on_token), 0);
    CHECK_EQ(lull_io_start(&a.io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_start(&b.io, LULL_READABLE), 0);
    CHECK_EQ(write(a.fd, "t", 1), 1);
    CHECK_EQ(lull_loop_settle(loop), 2 * PING_PONG_ROUNDS - 1);
    CHECK_EQ(b.received, PING_PONG_ROUNDS);
    CHECK_EQ(a.received, PING_PONG_ROUNDS - 1);
    lull_io_stop(&a.io);
    lull_io_stop(&b.io);
    close(sv[0]);
    close(sv[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* With auto-advance, an unreferenced timer is served while something else
 * keeps the run going (a reference, a referenced fd), as on the real
 * clock: time jumps to it when nothing else can run, instead of the run
 * blocking for good with the timer never due. */
static void unref_timer_drops_the_loop_ref(lull_timer *t) {
    record_timer(t);
    lull_loop_unref(the_loop);
}

TEST(auto_advance_serves_unreferenced_timer_while_a_ref_keeps_running) {
    lull_loop *loop = new_loop(LULL_LOOP_AUTO_ADVANCE);
    item v[1];
    items_init(v, 1);
    lull_timer_init(loop, &v[0].timer, unref_timer_drops_the_loop_ref);
    lull_timer_start(&v[0].timer, 3 * SEC, 0);
    lull_timer_unref(&v[0].timer);
    lull_loop_ref(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(v[0].runs, 1);
    CHECK_U64_EQ(v[0].at, 3 * SEC);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A run of one iteration (ONCE) on the real clock, with only an unreferenced
 * timer armed, does not wait for it: nothing keeps the loop alive. Auto-
 * advance stands in for that wait, so it must not jump to the timer either:
 * the virtual run would otherwise move time (up to the whole of an idle
 * timeout's hour) and fire a timer the real clock would not have. */
TEST(auto_advance_once_does_not_jump_to_an_unreferenced_timer) {
    lull_loop *loop = new_loop(LULL_LOOP_AUTO_ADVANCE);
    item v[1];
    items_init(v, 1);
    lull_timer_start(&v[0].timer, 10 * SEC, 0);
    lull_timer_unref(&v[0].timer);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(v[0].runs, 0);
    CHECK_U64_EQ(lull_loop_now(loop) - t0, 0);
    CHECK(lull_timer_active(&v[0].timer));
    lull_loop_advance(loop, 10 * SEC);
    CHECK_EQ(v[0].runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}
