/* Metrics (C8): callback, poll and wakeup counters, the sampled task-wait
 * and task-run histograms, histogram percentile math, busy/idle time, and
 * stalls attributed to a named callback. */
#include "check.h"

#include <fcntl.h>
#include <lull.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h" /* a loop's epoll fd and futex word, to see it asleep */

#define US 1000ull
#define MS 1000000ull

static lull_loop *the_loop;
static int calls;

static lull_loop *new_loop(int clock, uint64_t quantum_ns) {
    lull_loop_options o = {.clock = clock, .quantum_ns = quantum_ns};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    calls = 0;
    return loop;
}

static lull_metrics metrics(void) {
    lull_metrics m;
    memset(&m, 0xa5, sizeof m);
    lull_loop_metrics(the_loop, &m);
    return m;
}

static void count_task(lull_task *t) {
    (void)t;
    calls++;
}

static void count_timer(lull_timer *t) {
    (void)t;
    calls++;
}

static void count_io(lull_io *io, int events) {
    (void)events;
    calls++;
    lull_io_stop(io);
}

static void count_listener(lull_listener *l) {
    (void)l;
    calls++;
}

static int chain_left;
static void chain_hop(lull_task *t) {
    calls++;
    if (--chain_left > 0) lull_task_post(the_loop, t);
}

TEST(tasks_run_counts_every_callback) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL, 0);
    lull_task tasks[10];
    lull_timer timers[5];
    for (int i = 0; i < 10; i++) {
        lull_task_init(&tasks[i], count_task);
        lull_task_post(loop, &tasks[i]);
    }
    for (int i = 0; i < 5; i++) {
        lull_timer_init(loop, &timers[i], count_timer);
        lull_timer_start(&timers[i], i < 2 ? 0 : (uint64_t)i, 0);
    }
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[0], count_io), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    CHECK_EQ(write(fds[1], "x", 1), 1);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);
    lull_listener_start(loop, &n, &l, count_listener);
    lull_notifier_raise(&n);
    lull_notifier_raise(&n); /* coalesced: one callback */

    CHECK_U64_EQ(metrics().tasks_run, 0);
    lull_loop_advance(loop, 10);
    CHECK_EQ(calls, 17); /* 10 tasks, 5 timers, 1 io, 1 listener */
    CHECK_U64_EQ(metrics().tasks_run, 17);
    /* The advance never blocks, so it polls exactly once per iteration and
     * wakes nothing; it needs an iteration at the start and one per
     * distinct deadline (2, 3 and 4) at least. */
    lull_metrics a = metrics();
    CHECK_U64_EQ(a.polls, a.iterations);
    CHECK_LE(4, a.iterations);
    CHECK_LE(a.empty_polls, a.polls - 1); /* the pipe's poll found it */
    CHECK_U64_EQ(a.wakeups, 0);

    lull_loop_metrics_reset(loop);
    lull_metrics m = metrics();
    CHECK_U64_EQ(m.tasks_run, 0);
    CHECK_U64_EQ(m.polls, 0);
    CHECK_U64_EQ(m.wakeups, 0);
    CHECK_U64_EQ(m.stalls, 0);
    CHECK_U64_EQ(m.task_wait.count, 0);
    CHECK_U64_EQ(m.task_run.count, 0);
    lull_task_post(loop, &tasks[0]);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_U64_EQ(metrics().tasks_run, 1);

    lull_listener_stop(&l);
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(polls_and_empty_polls) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 10000 * MS);
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[0], count_io), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    lull_loop_metrics_reset(loop);

    /* Nothing ready: every poll is empty. */
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    lull_metrics a = metrics();
    CHECK_LE(5, a.polls);
    CHECK_U64_EQ(a.empty_polls, a.polls);
    CHECK_U64_EQ(a.wakeups, 0);

    /* A readable pipe: at least one poll found something. */
    CHECK_EQ(write(fds[1], "x", 1), 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(calls, 1);
    lull_metrics b = metrics();
    CHECK_LE(a.polls + 1, b.polls);
    CHECK(b.empty_polls - a.empty_polls < b.polls - a.polls);

    /* A chain of posted tasks checks I/O only when the quantum (10 s here)
     * is spent or the queue drains: not once per hop. */
    lull_task t;
    lull_task_init(&t, chain_hop);
    chain_left = 10000;
    lull_task_post(loop, &t);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_metrics c = metrics();
    CHECK_EQ(chain_left, 0);
    if (!check_yield_often()) CHECK_LE(c.polls - b.polls, 3);
    CHECK_U64_EQ(c.tasks_run - b.tasks_run, 10000);
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A wakeup is a return from a wait allowed to block: non-blocking polls and
 * busy runs make none; a 20 ms timer makes exactly one (never an early
 * return followed by a second wait). A loop thread kept off the CPU past
 * the deadline before its poll (a loaded machine) makes no wait at all,
 * which says nothing about the count: that run is made again with twice
 * the delay (20 ms to 5.12 s). */
TEST(wakeups_count_only_blocking_returns) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    lull_timer far, near;
    lull_timer_init(loop, &far, count_timer);
    lull_timer_init(loop, &near, count_timer);
    lull_timer_start(&far, 100000 * MS, 0);
    lull_loop_metrics_reset(loop);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    lull_task t;
    lull_task_init(&t, chain_hop);
    chain_left = 10000;
    lull_task_post(loop, &t);
    lull_timer_unref(&far);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(calls, 10000);
    lull_metrics a = metrics();
    CHECK_U64_EQ(a.wakeups, 0);
    CHECK_LE(10, a.polls);

    lull_metrics b;
    for (uint64_t delay = 20 * MS;; delay *= 2) {
        lull_loop_metrics_reset(loop);
        calls = 0;
        lull_timer_start(&near, delay, 0);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(calls, 1);
        b = metrics();
        if (b.wakeups != 0 || delay >= 5120 * MS) break;
        printf("%" PRIu64 " ms timer due before the loop slept: again\n",
               (uint64_t)(delay / MS));
    }
    CHECK_U64_EQ(b.wakeups, 1);
    CHECK_U64_EQ(b.wakeups_timer, 1);
    CHECK_U64_EQ(b.wakeups_io, 0);
    CHECK_U64_EQ(b.wakeups_remote, 0);
    lull_timer_stop(&far);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void check_summary(const char *what, lull_latency l) {
    if (!(l.p50 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max))
        check_fail(__FILE__, __LINE__,
                   "%s: p50 %" PRIu64 " p95 %" PRIu64 " p99 %" PRIu64
                   " max %" PRIu64,
                   what, l.p50, l.p95, l.p99, l.max);
}

static int reposts_left;
static void shared_hop(lull_task *t) {
    calls++;
    if (reposts_left > 0) {
        reposts_left--;
        lull_task_post(the_loop, t);
    }
}

TEST(wait_and_run_histograms_after_workload) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    /* 100 tasks posted together, re-posting themselves 100,000 times in
     * all: 100,100 callbacks, each a sample candidate. */
    static lull_task tasks[100];
    reposts_left = 100000;
    for (int i = 0; i < 100; i++) {
        lull_task_init(&tasks[i], shared_hop);
        lull_task_post(loop, &tasks[i]);
    }
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(calls, 100000 + 100);
    lull_metrics m = metrics();
    CHECK_LE(1, m.task_wait.count);
    CHECK_LE(1, m.task_run.count);
    CHECK_LE(m.task_wait.count, 100100);
    CHECK_LE(m.task_run.count, 100100);
    CHECK_LE(1, m.task_wait.max); /* a wait is never 0 ns */
    check_summary("task_wait", m.task_wait);
    check_summary("task_run", m.task_run);
    CHECK_LE(m.busy_ns, 30000 * MS);
    CHECK_LE(1, m.busy_ns);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Within 1/16 of the true value (lull.h: 16 sub-buckets per power of 2). */
static void check_close(uint64_t got, uint64_t want) {
    uint64_t err = got > want ? got - want : want - got;
    if (err * 16 > want)
        check_fail(__FILE__, __LINE__,
                   "percentile %" PRIu64 " not within 1/16 of %" PRIu64, got,
                   want);
}

TEST(histogram_percentile_math) {
    static lull_histogram h;
    memset(&h, 0, sizeof h);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 0.5), 0);
    for (uint64_t v = 1; v <= 1000; v++)
        lull_histogram_record(&h, v);
    CHECK_U64_EQ(h.count, 1000);
    CHECK_U64_EQ(h.sum, 500500);
    CHECK_U64_EQ(h.max, 1000);
    check_close(lull_histogram_percentile(&h, 0.5), 500);
    check_close(lull_histogram_percentile(&h, 0.95), 950);
    check_close(lull_histogram_percentile(&h, 0.99), 990);
    check_close(lull_histogram_percentile(&h, 0.10), 100);
    check_close(lull_histogram_percentile(&h, 1.0), 1000);
    CHECK_LE(lull_histogram_percentile(&h, 0.0), 1);

    /* Small values are exact; big ones keep their relative precision. */
    memset(&h, 0, sizeof h);
    lull_histogram_record(&h, 7);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 0.5), 7);
    memset(&h, 0, sizeof h);
    lull_histogram_record(&h, 0);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 0.99), 0);
    memset(&h, 0, sizeof h);
    uint64_t big = 3ull << 40;
    lull_histogram_record(&h, big);
    check_close(lull_histogram_percentile(&h, 0.5), big);
    lull_histogram_record(&h, UINT64_MAX); /* the top bucket, no overflow */
    CHECK_U64_EQ(h.max, UINT64_MAX);
    CHECK_U64_EQ(h.count, 2);

    /* A skewed set: 990 at 1 us, 10 at 1 ms. */
    memset(&h, 0, sizeof h);
    for (int i = 0; i < 990; i++)
        lull_histogram_record(&h, 1000);
    for (int i = 0; i < 10; i++)
        lull_histogram_record(&h, 1000000);
    check_close(lull_histogram_percentile(&h, 0.5), 1000);
    check_close(lull_histogram_percentile(&h, 0.98), 1000);
    check_close(lull_histogram_percentile(&h, 0.999), 1000000);
}

/* Busy time counts callbacks, idle time counts the blocking wait. The
 * wait is ended by another thread 50 ms after it saw the loop asleep in
 * it, so it lasts that long however a loaded machine schedules the
 * loop's thread: a timer armed for 50 ms after the spin could come due
 * while the thread was kept off the CPU after the arm (its slice spent by
 * the spin), leaving no wait at all (idle 0, in 4 of about 2,000 runs
 * under load). */
typedef struct idler {
    lull_loop *loop;
    int tid;          /* the loop's thread */
    lull_timer far;   /* keeps the run going until `finish` */
    lull_task finish; /* posted by the thread: the run ends */
} idler;

static void spin_3ms(lull_task *t) {
    (void)t;
    check_spin_ns(3 * MS);
}

static void finish_idle(lull_task *t) {
    lull_timer_stop(&LULL_CONTAINER_OF(t, idler, finish)->far);
}

static void *end_idle_later(void *arg) {
    idler *id = arg;
    check_wait_blocked(id->tid, id->loop->backend_fd, &id->loop->sleeping);
    struct timespec ts = {0, 50 * MS};
    while (nanosleep(&ts, &ts) != 0) {
    }
    lull_task_post_remote(id->loop, &id->finish);
    return NULL;
}

TEST_THREADED(busy_and_idle_time) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    idler id = {.loop = loop, .tid = gettid()};
    lull_task t;
    lull_task_init(&t, spin_3ms);
    lull_task_init(&id.finish, finish_idle);
    lull_timer_init(loop, &id.far, count_timer);
    lull_timer_start(&id.far, 3600000 * MS, 0);
    lull_task_post(loop, &t);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, end_idle_later, &id), 0);
    uint64_t start = check_clock_ns();
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    uint64_t elapsed = check_clock_ns() - start;
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_metrics m = metrics();
    /* Under load the 3 ms spin may take longer in wall time (preemption),
     * which moves time from idle to busy; the sum is what must hold. Only
     * lull_loop_run's entry and exit fall outside both, hence the margin. */
    CHECK_LE(3 * MS, m.busy_ns);
    CHECK_LE(25 * MS, m.idle_ns);
    CHECK_LE(m.busy_ns + m.idle_ns, elapsed + 1 * MS);
    CHECK_LE(elapsed, m.busy_ns + m.idle_ns + 5 * MS);
    CHECK_EQ(calls, 0); /* the far timer never fired */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A callback far over the quantum is a stall, attributed by name. Each
 * run holds one callback, so each run is one slice, and the real-time spins
 * are sized from the measured worst so far: preemption on a loaded machine
 * can make a slice longer, never shorter. */
static uint64_t spin_ns;
static void spinner(lull_task *t) {
    (void)t;
    check_spin_ns(spin_ns);
}

static void slow_timer(lull_timer *t) {
    (void)t;
    check_spin_ns(spin_ns);
}

static void unnamed_spinner(lull_task *t) {
    (void)t;
    check_spin_ns(2 * MS);
}

TEST(stall_counted_and_named) {
    lull_loop_options o = {.quantum_ns = 100 * US, .stall_ns = 1 * MS};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    CHECK_EQ(LULL_NAME(loop, spinner, "spinner"), 0);
    CHECK_EQ(LULL_NAME(loop, slow_timer, "slow-timer"), 0);

    lull_metrics m = metrics();
    CHECK_U64_EQ(m.stalls, 0);
    CHECK(m.worst_stall == NULL);

    lull_task spin;
    lull_task_init(&spin, spinner);
    spin_ns = 5 * MS;
    lull_task_post(loop, &spin);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    m = metrics();
    CHECK_U64_EQ(m.stalls, 1);
    CHECK(m.worst_stall != NULL);
    CHECK_EQ(strcmp(m.worst_stall, "spinner"), 0);
    CHECK_LE(5 * MS, m.worst_stall_ns);
    CHECK_LE(m.worst_stall_ns, 1000 * MS);

    /* A worse stall from a timer takes over the name. */
    lull_timer t;
    lull_timer_init(loop, &t, slow_timer);
    spin_ns = m.worst_stall_ns + 3 * MS;
    lull_timer_start(&t, 0, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    m = metrics();
    CHECK_U64_EQ(m.stalls, 2);
    CHECK_EQ(strcmp(m.worst_stall, "slow-timer"), 0);
    CHECK_LE(spin_ns, m.worst_stall_ns);

    /* A shorter stall counts; the worst changes only with a longer one. */
    uint64_t worst = m.worst_stall_ns;
    spin_ns = 2 * MS;
    lull_task_post(loop, &spin);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    m = metrics();
    CHECK_U64_EQ(m.stalls, 3);
    if (m.worst_stall_ns == worst)
        CHECK_EQ(strcmp(m.worst_stall, "slow-timer"), 0);
    else
        CHECK_EQ(strcmp(m.worst_stall, "spinner"), 0);

    /* An unnamed callback's stall counts too. */
    lull_task anon;
    lull_task_init(&anon, unnamed_spinner);
    lull_task_post(loop, &anon);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(metrics().stalls, 4);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_loop_settle counts the callbacks it ran through a counter of its own: a
 * callback that resets the metrics in the middle does not change the count
 * (it counted through the metric, and returned the wrapped difference
 * clamped to INT32_MAX). */
static void reset_metrics_task(lull_task *t) {
    (void)t;
    calls++;
    lull_loop_metrics_reset(the_loop);
}

TEST(settle_counts_through_a_metrics_reset) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL, 0);
    lull_task a, b;
    lull_task_init(&a, count_task);
    lull_task_init(&b, reset_metrics_task);
    lull_task_post(loop, &a);
    CHECK_EQ(lull_loop_settle(loop), 1);
    lull_task_post(loop, &a);
    lull_task_post(loop, &b);
    CHECK_EQ(lull_loop_settle(loop), 2);
    CHECK_EQ(calls, 3);
    CHECK_U64_EQ(metrics().tasks_run, 0); /* reset by b, nothing ran after */
    lull_task_post(loop, &a);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_U64_EQ(metrics().tasks_run, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Signals that interrupt the loop's sleep are counted as their own cause,
 * with a row of their own in the audit, not as timer wakeups (56 signals
 * used to read as 56 timer wakeups for one real timer). Another thread
 * sends SIGUSR1 to the loop's thread five times, each time once the loop
 * sleeps in the kernel (check_wait_blocked) towards a timer an hour away:
 * once in epoll (an fd watcher is started), once on the futex (none is).
 * The handler has no SA_RESTART, so each signal ends the sleep with EINTR;
 * a post then ends the run. A signal sent only to a sleeping loop is one
 * wakeup however busy the machine is (signals from a timer of their own,
 * every 2 ms, could land before the loop slept or between its sleeps, and
 * a timer near enough to end the run could come due before it slept). */
static int sigs_seen; /* atomic: the handler's count */
static void on_sigusr1(int sig) {
    (void)sig;
    __atomic_fetch_add(&sigs_seen, 1, __ATOMIC_SEQ_CST);
}

typedef struct signaller {
    lull_loop *loop;
    int tid;          /* the loop's thread */
    pthread_t thread; /* ... for pthread_kill */
    lull_timer far;   /* what each sleep waits for */
    lull_task finish; /* stops it: the run ends */
} signaller;

static void finish_signals(lull_task *t) {
    lull_timer_stop(&LULL_CONTAINER_OF(t, signaller, finish)->far);
}

static void *signal_when_asleep(void *arg) {
    signaller *sg = arg;
    lull_loop *loop = sg->loop;
    for (int k = 1; k <= 5; k++) {
        check_wait_blocked(sg->tid, loop->backend_fd, &loop->sleeping);
        CHECK_EQ(pthread_kill(sg->thread, SIGUSR1), 0);
        /* The handler ran: the sleep it interrupted is over. */
        while (__atomic_load_n(&sigs_seen, __ATOMIC_SEQ_CST) < k)
            sched_yield();
    }
    check_wait_blocked(sg->tid, loop->backend_fd, &loop->sleeping);
    lull_task_post_remote(loop, &sg->finish);
    return NULL;
}

static void signals_while_sleeping(lull_loop *loop, bool watch_fd) {
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[0], count_io), 0);
    if (watch_fd) {
        CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
        lull_io_unref(&io);
    }
    signaller sg = {.loop = loop, .tid = gettid(), .thread = pthread_self()};
    lull_timer_init(loop, &sg.far, count_timer);
    lull_timer_start(&sg.far, 3600000 * MS, 0);
    lull_task_init(&sg.finish, finish_signals);
    lull_loop_metrics_reset(loop);
    lull_loop_audit_reset(loop);
    __atomic_store_n(&sigs_seen, 0, __ATOMIC_SEQ_CST);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, signal_when_asleep, &sg), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(__atomic_load_n(&sigs_seen, __ATOMIC_SEQ_CST), 5);
    lull_metrics m = metrics();
    CHECK_U64_EQ(m.wakeups_signal, 5);
    CHECK_U64_EQ(m.wakeups_timer, 0); /* a deadline was set in every sleep */
    CHECK_U64_EQ(m.wakeups_remote, 1);
    CHECK_U64_EQ(m.wakeups, 6);

    lull_audit_entry rows[8];
    int n = lull_loop_audit(loop, rows, 8, NULL);
    bool signal_row = false;
    uint64_t remote = 0;
    for (int i = 0; i < n && i < 8; i++) {
        if (rows[i].kind == LULL_SOURCE_SIGNAL) {
            CHECK(!signal_row);
            signal_row = true;
            CHECK_U64_EQ(rows[i].wakeups, 5);
            CHECK(strstr(rows[i].name, "signal") != NULL);
        } else if (rows[i].kind == LULL_SOURCE_REMOTE) {
            remote += rows[i].wakeups;
        } else {
            CHECK_U64_EQ(rows[i].wakeups, 0); /* the timer's row above all */
        }
    }
    CHECK(signal_row);
    CHECK_U64_EQ(remote, 1);
    if (watch_fd) lull_io_stop(&io);
    close(fds[0]);
    close(fds[1]);
}

TEST_THREADED(signals_are_their_own_wakeup_cause) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1; /* no SA_RESTART */
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    signals_while_sleeping(loop, true);
    signals_while_sleeping(loop, false);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------ remote raises in the wake audit */

/* A wakeup caused by lull_notifier_raise_remote is charged to what the raise
 * reaches: the first listener's callback, or the pump pass (in the pump's
 * own row, beside its passes), by name; never to lull's forwarding task,
 * which every notifier shares. A worker thread raises each notifier only
 * once the loop thread sleeps in the kernel in its wait (check_wait_blocked:
 * a state of S alone could be a thread on its way there), so each raise is
 * a wakeup. */
#define RAISE_ROUNDS 5

typedef struct raiser {
    lull_loop *loop;
    pid_t loop_tid;
    lull_notifier a, b;
    lull_listener la, lb;
    lull_pump pump;
    lull_task finish;
    sem_t seen; /* posted by the listener and by the pass */
} raiser;

static raiser *the_raiser;

static void on_a(lull_listener *l) {
    (void)l;
    sem_post(&the_raiser->seen);
}

static lull_pass_result pass_b(lull_pump *p, uint64_t *retry_ns) {
    (void)retry_ns;
    lull_pump_delivered(p, 1);
    sem_post(&the_raiser->seen);
    return LULL_PASS_QUIET;
}

static void finish_raises(lull_task *t) {
    raiser *r = LULL_CONTAINER_OF(t, raiser, finish);
    lull_listener_stop(&r->la);
    lull_pump_close(&r->pump);
    lull_loop_unref(r->loop);
}

/* Waits until the loop's thread sleeps in the loop's own wait. */
static void wait_until_asleep(const raiser *r) {
    check_wait_blocked(r->loop_tid, r->loop->backend_fd, &r->loop->sleeping);
}

static void *raise_when_asleep(void *arg) {
    raiser *r = arg;
    for (int i = 0; i < RAISE_ROUNDS; i++) {
        wait_until_asleep(r);
        lull_notifier_raise_remote(r->loop, &r->a);
        while (sem_wait(&r->seen) != 0) {
        }
        wait_until_asleep(r);
        lull_notifier_raise_remote(r->loop, &r->b);
        while (sem_wait(&r->seen) != 0) {
        }
    }
    lull_task_post_remote(r->loop, &r->finish);
    return NULL;
}

static const lull_audit_entry *row_named(const lull_audit_entry *rows, int n,
                                         const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0) return &rows[i];
    return NULL;
}

TEST_THREADED(remote_raises_are_charged_to_what_they_reach) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    static raiser r;
    the_raiser = &r;
    r.loop = loop;
    r.loop_tid = gettid();
    CHECK_EQ(sem_init(&r.seen, 0, 0), 0);
    lull_notifier_init(&r.a);
    lull_notifier_init(&r.b);
    lull_listener_start(loop, &r.a, &r.la, on_a);
    lull_pump_init(loop, &r.pump, pass_b);
    lull_pump_listen(&r.pump, &r.b, &r.lb);
    lull_task_init(&r.finish, finish_raises);
    LULL_NAME(loop, on_a, "app.listener");
    LULL_NAME(loop, pass_b, "app.pass");
    LULL_NAME(loop, finish_raises, "app.finish");
    lull_loop_ref(loop);
    lull_loop_metrics_reset(loop);
    lull_loop_audit_reset(loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, raise_when_asleep, &r), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);

    lull_metrics m = metrics();
    lull_audit_entry rows[16];
    int n = lull_loop_audit(loop, rows, 16, NULL);
    CHECK_LE(n, 16);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        fprintf(stderr,
                "%-50s kind %d wakeups %" PRIu64 " passes %" PRIu64 "\n",
                rows[i].name, rows[i].kind, rows[i].wakeups, rows[i].passes);
        sum += rows[i].wakeups;
        /* No row for lull's own forwarder. */
        CHECK(strstr(rows[i].name, "remote callback") == NULL);
        CHECK(strstr(rows[i].name, "lull_notifier_raise_remote") == NULL);
    }
    CHECK_U64_EQ(sum, m.wakeups);
    const lull_audit_entry *la = row_named(rows, n, "app.listener");
    const lull_audit_entry *pb = row_named(rows, n, "app.pass");
    CHECK(la && pb);
    CHECK_EQ(la->kind, LULL_SOURCE_REMOTE);
    CHECK_EQ(pb->kind, LULL_SOURCE_PUMP); /* one row: wakeups and passes */
    CHECK_U64_EQ(la->wakeups, RAISE_ROUNDS);
    CHECK_U64_EQ(pb->wakeups, RAISE_ROUNDS);
    CHECK_U64_EQ(pb->passes, RAISE_ROUNDS);
    sem_destroy(&r.seen);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static lull_task plain_a, plain_b;

static void on_plain_a(lull_task *t) {
    (void)t;
    sem_post(&the_raiser->seen);
}

static void on_plain_b(lull_task *t) {
    (void)t;
    sem_post(&the_raiser->seen);
}

static void finish_plain(lull_task *t) {
    raiser *r = LULL_CONTAINER_OF(t, raiser, finish);
    lull_listener_stop(&r->la);
    lull_loop_unref(r->loop);
}

/* Wakes the sleeping loop with plain tasks, twice the same one in a row,
 * then another, a raise and the first again, so that every change of
 * cause follows a run of the same one (the audit remembers the last plain
 * task's row). */
static void *plain_posts_and_a_raise(void *arg) {
    raiser *r = arg;
    lull_task *order[] = {&plain_a, &plain_a, &plain_b, NULL, &plain_a};
    for (int i = 0; i < RAISE_ROUNDS; i++) {
        for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
            wait_until_asleep(r);
            if (order[k])
                lull_task_post_remote(r->loop, order[k]);
            else
                lull_notifier_raise_remote(r->loop, &r->a);
            while (sem_wait(&r->seen) != 0) {
            }
        }
    }
    lull_task_post_remote(r->loop, &r->finish);
    return NULL;
}

TEST_THREADED(remote_wakeups_by_plain_tasks_and_raises_keep_their_rows) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    static raiser r;
    the_raiser = &r;
    r.loop = loop;
    r.loop_tid = gettid();
    CHECK_EQ(sem_init(&r.seen, 0, 0), 0);
    lull_notifier_init(&r.a);
    lull_listener_start(loop, &r.a, &r.la, on_a);
    lull_task_init(&plain_a, on_plain_a);
    lull_task_init(&plain_b, on_plain_b);
    lull_task_init(&r.finish, finish_plain);
    LULL_NAME(loop, on_a, "app.listener");
    LULL_NAME(loop, on_plain_a, "app.a");
    LULL_NAME(loop, on_plain_b, "app.b");
    lull_loop_ref(loop);
    lull_loop_audit_reset(loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, plain_posts_and_a_raise, &r), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);

    lull_audit_entry rows[16];
    int n = lull_loop_audit(loop, rows, 16, NULL);
    const lull_audit_entry *a = row_named(rows, n, "app.a");
    const lull_audit_entry *b = row_named(rows, n, "app.b");
    const lull_audit_entry *la = row_named(rows, n, "app.listener");
    CHECK(a && b && la);
    CHECK_EQ(a->kind, LULL_SOURCE_REMOTE);
    CHECK_EQ(b->kind, LULL_SOURCE_REMOTE);
    CHECK_EQ(la->kind, LULL_SOURCE_REMOTE);
    CHECK_U64_EQ(a->wakeups, 3 * RAISE_ROUNDS);
    CHECK_U64_EQ(b->wakeups, RAISE_ROUNDS);
    CHECK_U64_EQ(la->wakeups, RAISE_ROUNDS);
    sem_destroy(&r.seen);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void *lone_raise(void *arg) {
    raiser *r = arg;
    wait_until_asleep(r);
    lull_notifier_raise_remote(r->loop, &r->a);
    return NULL;
}

/* A raise of a notifier with no listener still has a row, named so. */
TEST_THREADED(remote_raise_without_listener_has_its_own_row) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    static raiser r;
    the_raiser = &r;
    r.loop = loop;
    r.loop_tid = gettid();
    lull_notifier_init(&r.a);
    lull_task_init(&r.finish, count_task);
    lull_loop_ref(loop);
    lull_loop_audit_reset(loop);
    /* The raise reaches the loop on its own (no listener), then the finish
     * post ends the run. */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, lone_raise, &r), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_audit_entry rows[8];
    int n = lull_loop_audit(loop, rows, 8, NULL);
    const lull_audit_entry *row = row_named(
        rows, n, "lull_notifier_raise_remote (a notifier with no listener)");
    CHECK(row != NULL);
    CHECK_U64_EQ(row->wakeups, 1);
    CHECK_EQ(row->kind, LULL_SOURCE_REMOTE);
    lull_loop_unref(loop);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A held pump's retry timer that wakes the loop is charged to the pump's
 * own row, under its pass's name, beside its passes, as a remote raise
 * that reaches it is: it was charged to lull's internal retry callback,
 * one anonymous "timer callback 0x..." row shared by every pump of the
 * loop, so a pump polling through HELD could not be told by its name. */
static int held_left;

static lull_pass_result held_pass(lull_pump *p, uint64_t *retry_ns) {
    (void)p;
    if (held_left-- == 0) return LULL_PASS_QUIET;
    *retry_ns = 2 * MS;
    return LULL_PASS_HELD;
}

TEST(held_pump_retry_wakeups_are_charged_to_its_pass) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    lull_pump pump;
    CHECK_EQ(lull_pump_init(loop, &pump, held_pass), 0);
    LULL_NAME(loop, held_pass, "app.held");
    held_left = 5;
    lull_loop_audit_reset(loop);
    lull_loop_metrics_reset(loop);
    lull_pump_wake(&pump);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(lull_pump_quiet(&pump));
    lull_metrics m = metrics();
    CHECK(m.wakeups_timer >= 1);
    lull_audit_entry rows[8];
    int n = lull_loop_audit(loop, rows, 8, NULL);
    CHECK_LE(n, 8);
    for (int i = 0; i < n; i++)
        fprintf(stderr,
                "%-40s kind %d wakeups %" PRIu64 " passes %" PRIu64 "\n",
                rows[i].name, rows[i].kind, rows[i].wakeups, rows[i].passes);
    const lull_audit_entry *row = row_named(rows, n, "app.held");
    CHECK(row != NULL);
    CHECK_EQ(row->kind, LULL_SOURCE_PUMP);
    CHECK_U64_EQ(row->passes, 6);
    CHECK_U64_EQ(row->wakeups, m.wakeups_timer);
    lull_pump_close(&pump);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A bucket that reaches the top of its 32-bit count (4.3 billion records
 * of one value: a long-lived tool, or a loop's samples over weeks) must
 * not wrap to zero, which moved every percentile to the maximum. The
 * histogram halves its buckets instead, keeping their proportions. */
TEST(histogram_full_bucket_keeps_its_percentiles) {
    static lull_histogram h;
    memset(&h, 0, sizeof h);
    h.buckets[5] = UINT32_MAX; /* as if 5 had been recorded that often */
    h.count = UINT32_MAX;
    h.sum = 5ull * UINT32_MAX;
    h.max = 5;
    lull_histogram_record(&h, 5);
    lull_histogram_record(&h, 1000);
    CHECK_U64_EQ(h.count, (uint64_t)UINT32_MAX + 2);
    CHECK_U64_EQ(h.max, 1000);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 0.5), 5);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 0.99), 5);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 0.0), 5);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 1.0), 1000);
    for (int i = 0; i < 1000; i++) /* still counting after the halving */
        lull_histogram_record(&h, 1000);
    CHECK(h.buckets[5] > 0);
}

/* The sum saturates rather than wrapping (its mean would come out
 * arbitrarily small). */
TEST(histogram_sum_saturates) {
    static lull_histogram h;
    memset(&h, 0, sizeof h);
    lull_histogram_record(&h, UINT64_MAX - 1);
    lull_histogram_record(&h, 10);
    CHECK_U64_EQ(h.sum, UINT64_MAX);
    CHECK_U64_EQ(h.count, 2);
}

/* p outside [0, 1] is clamped to it; NaN (a 0/0 computed by the caller)
 * reads as 0, rather than an undefined conversion to an integer rank. */
TEST(histogram_percentile_of_nan_or_out_of_range) {
    static lull_histogram h;
    memset(&h, 0, sizeof h);
    lull_histogram_record(&h, 1);
    lull_histogram_record(&h, 1000);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 0.0 / 0.0), 1);
    CHECK_U64_EQ(lull_histogram_percentile(&h, -1e300), 1);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 1e300), 1000);
    CHECK_U64_EQ(lull_histogram_percentile(&h, 1.0 / 0.0), 1000);
    CHECK_U64_EQ(lull_histogram_percentile(&h, -1.0 / 0.0), 1);
}

/* A wait sample dies with the post it timed: a task posted (and tagged
 * for a sample), cancelled, and posted again 60 ms later is not recorded
 * as having waited 60 ms (a wait that long otherwise needs the process
 * off its CPU for 60 ms). Each round, a repeating task posts b, cancels
 * it, spins 60 ms (so the next slice check arms a sample, 100 us apart),
 * then posts b again; the only post a sample can tag is b's first. (With
 * the tag left on a cancelled task, its run was timed from the cancelled
 * post.) */
static lull_task cancel_b;
static int cancel_rounds;
static void post_cancel_repost(lull_task *t) {
    lull_task_post(the_loop, &cancel_b);
    lull_task_cancel(&cancel_b);
    check_spin_ns(60 * MS);
    lull_task_post(the_loop, &cancel_b);
    if (++cancel_rounds < 4) lull_task_post(the_loop, t);
}

TEST(cancelled_post_is_not_a_wait_sample) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 0);
    lull_task a;
    lull_task_init(&a, post_cancel_repost);
    lull_task_init(&cancel_b, count_task);
    cancel_rounds = 0;
    lull_task_post(loop, &a);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(calls, 4);
    lull_metrics m = metrics();
    CHECK_LE(m.task_wait.max, 60 * MS - 1); /* 0 with no sample */
    CHECK_EQ(lull_loop_free(loop), 0);
}
