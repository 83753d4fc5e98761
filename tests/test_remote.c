/* Cross-thread posts: none lost under load, coalescing of a task queued
 * twice before the loop drains it, the loop reference that keeps lull_loop_run
 * waiting for an expected post, and lull_loop_free waiting for a poster
 * still inside lull_task_post_remote. Real threads and the real clock.
 *
 * write() and syscall() are wrapped at link time (tests/CMakeLists.txt) so
 * that a poster can be held inside its wake of the loop. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <lull.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h" /* loop->sleeping: is the loop blocked yet? */

/* 4 x 100,000 round trips: about 3 s in a debug build and 5 s under
 * ThreadSanitizer on the 2-vCPU machine. Each round trip is two cross-
 * thread wake-ups, whose cost a busy machine multiplies (27 s of the
 * case's 30 under ThreadSanitizer beside eight busy CPUs), so a thread
 * stops early once ROUNDS_BUDGET_S have passed, after at least
 * ROUNDS_MIN round trips; the case prints when it did. */
#define ROUNDS          100000
#define ROUNDS_MIN      10000
#define ROUNDS_BUDGET_S 10
#define THREADS         4

static lull_loop *the_loop;

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ------------------------------------------ ping-pong with a semaphore */

typedef struct peer {
    lull_task ping; /* posted to the loop by the peer's thread */
    sem_t reply;    /* the loop's answer */
    pthread_t thread;
    uint64_t received; /* loop thread only */
    uint64_t answered; /* peer thread only */
    bool last;         /* the ping in flight is the peer's last */
    lull_loop *loop;   /* a peer's own loop (second case) */
    lull_task pong;    /* posted to the peer's loop by the main loop */
    int rounds;
} peer;

static uint64_t total;      /* loop thread only */
static int finished;        /* loop thread only: peers whose last ping ran */
static uint64_t rounds_end; /* clock time of the budget's end */

static void on_ping(lull_task *t) {
    peer *p = LULL_CONTAINER_OF(t, peer, ping);
    p->received++;
    total++;
    if (p->last && ++finished == THREADS) lull_loop_unref(the_loop);
    sem_post(&p->reply); /* the last touch: the peer re-posts at once */
}

/* A lost post would leave the peer waiting: fail after 10 s with the round
 * instead of hanging until the case's timeout. */
static void wait_reply(peer *p, int round) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    while (sem_timedwait(&p->reply, &deadline) != 0) {
        if (errno == ETIMEDOUT)
            check_fail(__FILE__, __LINE__, "round %d: no reply in 10 s", round);
    }
}

static void *pinger(void *arg) {
    peer *p = arg;
    for (int i = 0; !p->last; i++) {
        p->last = i + 1 == ROUNDS ||
                  (i + 1 >= ROUNDS_MIN && check_clock_ns() > rounds_end);
        lull_task_post_remote(the_loop, &p->ping);
        wait_reply(p, i);
        p->answered++;
    }
    return NULL;
}

static void never_ready(lull_io *io, int events) {
    (void)io;
    (void)events;
    check_fail(__FILE__, __LINE__, "the idle pipe became readable");
}

/* A loop that watches no fd sleeps on a futex; one that watches an fd
 * sleeps in epoll and is woken through its eventfd. Both must lose no post. */
static void ping_pong_4_threads(bool watch_fd) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    int fds[2] = {-1, -1};
    lull_io idle;
    if (watch_fd) {
        CHECK_EQ(pipe(fds), 0);
        CHECK_EQ(lull_io_init(the_loop, &idle, fds[0], never_ready), 0);
        CHECK_EQ(lull_io_start(&idle, LULL_READABLE), 0);
        lull_io_unref(&idle);
    }
    static peer peers[THREADS];
    total = 0;
    finished = 0;
    rounds_end = check_clock_ns() + ROUNDS_BUDGET_S * 1000000000ull;
    lull_loop_ref(the_loop); /* until every peer's last ping has run */
    for (int i = 0; i < THREADS; i++) {
        peers[i] = (peer){0};
        lull_task_init(&peers[i].ping, on_ping);
        CHECK_EQ(sem_init(&peers[i].reply, 0, 0), 0);
        CHECK_EQ(pthread_create(&peers[i].thread, NULL, pinger, &peers[i]), 0);
    }
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    uint64_t sum = 0;
    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(pthread_join(peers[i].thread, NULL), 0);
        CHECK_LE(ROUNDS_MIN, peers[i].answered);
        CHECK_U64_EQ(peers[i].received, peers[i].answered);
        sum += peers[i].answered;
        sem_destroy(&peers[i].reply);
    }
    CHECK_U64_EQ(total, sum);
    if (sum < (uint64_t)THREADS * ROUNDS)
        printf("stopped at the %d s limit: %" PRIu64 " of %d round trips\n",
               ROUNDS_BUDGET_S, sum, THREADS * ROUNDS);
    lull_metrics m;
    lull_loop_metrics(the_loop, &m);
    CHECK_U64_EQ(m.tasks_run, sum);
    /* The loop slept (it was woken by posts), in the way its fds decide:
     * only an epoll sleep polls the kernel while it waits. */
    CHECK(m.wakeups_remote > 0);
    if (watch_fd) {
        CHECK(m.polls >= m.wakeups);
        lull_io_stop(&idle);
        close(fds[0]);
        close(fds[1]);
    } else {
        CHECK(m.polls < m.iterations);
    }
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

TEST_THREADED(remote_ping_pong_4_threads) {
    ping_pong_4_threads(false);
}

TEST_THREADED(remote_ping_pong_4_threads_loop_watching_an_fd) {
    ping_pong_4_threads(true);
}

/* ----------------------------- ping-pong between loops on both sides */

#define LOOP_THREADS 2
#define LOOP_ROUNDS  20000

static void on_loop_ping(lull_task *t) {
    peer *p = LULL_CONTAINER_OF(t, peer, ping);
    p->received++;
    if (++total == (uint64_t)LOOP_THREADS * LOOP_ROUNDS)
        lull_loop_unref(the_loop);
    lull_task_post_remote(p->loop, &p->pong);
}

static void on_pong(lull_task *t) {
    peer *p = LULL_CONTAINER_OF(t, peer, pong);
    p->answered++;
    if (++p->rounds < LOOP_ROUNDS)
        lull_task_post_remote(the_loop, &p->ping);
    else
        lull_loop_unref(p->loop);
}

static void *loop_peer(void *arg) {
    peer *p = arg;
    lull_task_post_remote(the_loop, &p->ping);
    CHECK_EQ(lull_loop_run(p->loop, LULL_RUN_DEFAULT), 0);
    return NULL;
}

TEST_THREADED(remote_ping_pong_between_loops) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    static peer peers[LOOP_THREADS];
    total = 0;
    lull_loop_ref(the_loop);
    for (int i = 0; i < LOOP_THREADS; i++) {
        peers[i] = (peer){0};
        lull_task_init(&peers[i].ping, on_loop_ping);
        lull_task_init(&peers[i].pong, on_pong);
        /* Created here, run and left by the peer thread, freed here after
         * the join. */
        CHECK_EQ(lull_loop_new(&peers[i].loop, NULL), 0);
        lull_loop_ref(peers[i].loop);
    }
    for (int i = 0; i < LOOP_THREADS; i++)
        CHECK_EQ(pthread_create(&peers[i].thread, NULL, loop_peer, &peers[i]),
                 0);
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    for (int i = 0; i < LOOP_THREADS; i++) {
        CHECK_EQ(pthread_join(peers[i].thread, NULL), 0);
        CHECK_U64_EQ(peers[i].received, LOOP_ROUNDS);
        CHECK_U64_EQ(peers[i].answered, LOOP_ROUNDS);
        CHECK_EQ(lull_loop_free(peers[i].loop), 0);
    }
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

/* ------------------------------------------------------- coalescing */

static int once_runs;
static void count_once(lull_task *t) {
    (void)t;
    if (++once_runs == 1) lull_loop_unref(the_loop);
}

static lull_task shared_task;
static void *post_twice(void *arg) {
    (void)arg;
    lull_task_post_remote(the_loop, &shared_task);
    lull_task_post_remote(the_loop, &shared_task);
    return NULL;
}

TEST_THREADED(remote_post_twice_before_drain_runs_once) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    lull_task_init(&shared_task, count_once);
    once_runs = 0;
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, post_twice, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    /* Eight posts of one task, none drained yet: freeing is refused. */
    CHECK_EQ(lull_loop_free(the_loop), -EBUSY);
    lull_loop_ref(the_loop); /* count_once drops it */
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(once_runs, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(once_runs, 1);
    /* Drained: the task can be posted remotely again, and runs again. */
    lull_task_post_remote(the_loop, &shared_task);
    lull_task_post_remote(the_loop, &shared_task);
    lull_loop_ref(the_loop);
    once_runs = 0;
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(once_runs, 1);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

/* ------------------------------------------ loop reference, remote stop */

static int late_runs;
static void late_arrival(lull_task *t) {
    (void)t;
    late_runs++;
    lull_loop_unref(the_loop);
}

static lull_task late_task;
static int late_loop_tid;
static void *post_late(void *arg) {
    (void)arg;
    /* Once the loop sleeps in its wait (a fixed sleep here, 50 ms, could
     * end before a loaded machine let the loop reach it: no wakeup). */
    check_wait_blocked(late_loop_tid, the_loop->backend_fd,
                       &the_loop->sleeping);
    lull_task_post_remote(the_loop, &late_task);
    return NULL;
}

TEST_THREADED(loop_ref_keeps_run_alive_for_remote_post) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    CHECK(!lull_loop_alive(the_loop));
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT),
             0); /* nothing: returns */
    lull_task_init(&late_task, late_arrival);
    late_runs = 0;
    lull_loop_ref(the_loop);
    CHECK(lull_loop_alive(the_loop));
    CHECK_EQ(lull_loop_free(the_loop), -EBUSY);
    lull_loop_metrics_reset(the_loop);
    late_loop_tid = gettid();
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_late, NULL), 0);
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(late_runs, 1);
    CHECK(!lull_loop_alive(the_loop));
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_metrics m;
    lull_loop_metrics(the_loop, &m);
    CHECK_LE(1, m.wakeups);
    CHECK_LE(1, m.wakeups_remote);
    CHECK_U64_EQ(m.wakeups_timer, 0);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

static int stops_run;
static void stop_loop(lull_task *t) {
    (void)t;
    stops_run++;
    lull_loop_stop(the_loop);
}

static lull_task stop_task;
static void *post_stop(void *arg) {
    (void)arg;
    sleep_ms(20);
    lull_task_post_remote(the_loop, &stop_task);
    return NULL;
}

TEST_THREADED(stop_from_another_thread_through_a_post) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    lull_task_init(&stop_task, stop_loop);
    stops_run = 0;
    lull_loop_ref(the_loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_stop, NULL), 0);
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(stops_run, 1);
    CHECK(lull_loop_alive(the_loop)); /* stopped, not drained of refs */
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_loop_unref(the_loop);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

/* lull_task_post_remote is legal from the loop thread too, also inside a
 * callback; the task runs in a later turn. */
/* Posters that race onto an empty stack: each counts itself as the one
 * that will wake the loop, one push wins, and the others push onto the
 * winner's task and must take their count back, or lull_loop_free's wait
 * for posters inside their wake never ends. Each round two threads leave
 * a barrier together and post one task each onto the stack the loop has
 * just drained. Such a race is rare (a few in 100,000 rounds), so the
 * rounds go on for a time budget; when all are joined no poster is left
 * counted, and the free returns. */
#define RACE_ROUNDS   200000
#define RACE_BUDGET_S 5
#define RACE_THREADS  2 /* the machine's CPUs may be two */
static lull_task race_tasks[RACE_THREADS][RACE_ROUNDS], race_done;
static atomic_int race_runs, race_arrived, race_rounds;
static atomic_bool race_stop;
static void race_ran(lull_task *t) {
    (void)t;
    atomic_fetch_add(&race_runs, 1);
}

static void race_end(lull_task *t) {
    (void)t;
    lull_loop_unref(the_loop);
}

/* Poster 0 leads: it decides before each round whether the budget is
 * spent, and says so before it reaches the barrier, so both see it. */
static void *post_race(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t end = check_clock_ns() + RACE_BUDGET_S * 1000000000ull;
    int i;
    for (i = 0; i < RACE_ROUNDS; i++) {
        if (me == 0 && check_clock_ns() >= end) atomic_store(&race_stop, true);
        /* A spinning barrier: the posters leave it within nanoseconds
         * (it yields when the other poster is not on a CPU). */
        atomic_fetch_add(&race_arrived, 1);
        for (int spins = 0; atomic_load(&race_arrived) < (i + 1) * RACE_THREADS;
             spins++)
            if (spins > 1000) sched_yield();
        if (atomic_load(&race_stop)) break;
        lull_task_post_remote(the_loop, &race_tasks[me][i]);
        while (atomic_load(&race_runs) < (i + 1) * RACE_THREADS)
            sched_yield(); /* the stack drained before the next round */
    }
    if (me == 0) {
        atomic_store(&race_rounds, i);
        lull_task_post_remote(the_loop, &race_done);
    }
    return NULL;
}

TEST_THREADED(remote_posters_racing_on_an_empty_stack_leave_none_counted) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    for (int t = 0; t < RACE_THREADS; t++)
        for (int i = 0; i < RACE_ROUNDS; i++)
            lull_task_init(&race_tasks[t][i], race_ran);
    lull_task_init(&race_done, race_end);
    atomic_store(&race_runs, 0);
    atomic_store(&race_arrived, 0);
    atomic_store(&race_stop, false);
    lull_loop_ref(the_loop); /* race_end drops it */
    pthread_t th[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, post_race, (void *)(intptr_t)t),
                 0);
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    for (int t = 0; t < RACE_THREADS; t++)
        CHECK_EQ(pthread_join(th[t], NULL), 0);
    CHECK_LE(1000, atomic_load(&race_rounds));
    CHECK_EQ(atomic_load(&race_runs), RACE_THREADS * atomic_load(&race_rounds));
    CHECK_EQ(__atomic_load_n(&the_loop->posters, __ATOMIC_ACQUIRE), 0);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

/* ------------------------- a coalesced post still publishes its writes */

/* A post that finds its task already queued is coalesced into the run
 * that task gets anyway, and that run must see what the coalesced poster
 * wrote before its call (the contract: "memory written before the call is
 * visible to the task"), or its news is lost with no later run to carry
 * it. Nothing else orders the poster before the loop here: it reports
 * that it is done through a relaxed store, which orders nothing, so under
 * ThreadSanitizer only lull's own synchronisation can make the read below
 * race-free. */
static lull_task merged_task;
static int merged_news;       /* plain: published by the post alone */
static int merged_seen;       /* loop thread only */
static atomic_int merged_out; /* relaxed: the poster has returned */
static lull_notifier merged_notifier;
static lull_listener merged_listener;

static void merged_read(lull_task *t) {
    (void)t;
    merged_seen = merged_news;
}

static void merged_heard(lull_listener *l) {
    (void)l;
    merged_seen = merged_news;
}

static void *merged_post(void *arg) {
    merged_news = 42;
    if (arg)
        lull_notifier_raise_remote(the_loop, &merged_notifier);
    else
        lull_task_post_remote(the_loop, &merged_task);
    atomic_store_explicit(&merged_out, 1, memory_order_relaxed);
    return NULL;
}

static void coalesced_post_publishes(bool raise) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    merged_news = merged_seen = 0;
    atomic_store(&merged_out, 0);
    lull_task_init(&merged_task, merged_read);
    CHECK_EQ(lull_notifier_init(&merged_notifier), 0);
    CHECK_EQ(lull_listener_start(the_loop, &merged_notifier, &merged_listener,
                                 merged_heard),
             0);
    /* Queued remotely first, from this thread: the other thread's post
     * is then coalesced into it. */
    if (raise)
        lull_notifier_raise_remote(the_loop, &merged_notifier);
    else
        lull_task_post_remote(the_loop, &merged_task);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, merged_post, raise ? &th : NULL), 0);
    while (!atomic_load_explicit(&merged_out, memory_order_relaxed))
        sched_yield();
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(merged_seen, 42);
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_listener_stop(&merged_listener);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

TEST_THREADED(remote_post_coalesced_into_a_queued_one_publishes_its_writes) {
    coalesced_post_publishes(false);
}

TEST_THREADED(remote_raise_coalesced_into_a_queued_one_publishes_its_writes) {
    coalesced_post_publishes(true);
}

static lull_task inner;
static int inner_runs;
static void run_inner(lull_task *t) {
    (void)t;
    inner_runs++;
    lull_loop_unref(the_loop);
}
static void post_inner_remote(lull_task *t) {
    (void)t;
    lull_task_post_remote(the_loop, &inner);
    CHECK_EQ(inner_runs, 0);
}

TEST(remote_post_from_loop_thread) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    lull_task outer;
    lull_task_init(&outer, post_inner_remote);
    lull_task_init(&inner, run_inner);
    inner_runs = 0;
    lull_loop_ref(the_loop); /* run_inner drops it */
    lull_task_post(the_loop, &outer);
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(inner_runs, 1);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

/* ------------------------------- freeing a loop a poster is still waking */

/* A poster whose thread sets delay_wake is held inside its next wake of a
 * loop (the eventfd write, or the FUTEX_WAKE): it interrupts the loop's
 * sleep with a signal, so that the loop takes the post without that wake,
 * then waits until the loop has been freed, or HOLD_MS at most. If
 * lull_loop_free returns while the poster is held, the wake then lands on a
 * freed loop: `late` records it. */
#define HOLD_MS 500

static _Thread_local bool delay_wake;
/* The loop's futex waits that found the word no longer "asleep" (EAGAIN):
 * a poster swapped it between the loop's announce and its wait. */
static atomic_long futex_waits_beaten;
/* The futex waits lull made (FUTEX_WAIT_BITSET through syscall()). */
static atomic_long loop_futex_waits;
static pthread_t loop_thread;
static atomic_bool held;  /* a poster entered the held wake */
static atomic_bool freed; /* lull_loop_free has returned */
static atomic_bool late;  /* the held wake ran after the free */

static void hold_wake(void) {
    delay_wake = false;
    atomic_store(&held, true);
    pthread_kill(loop_thread, SIGUSR1);
    for (int i = 0; i < HOLD_MS && !atomic_load(&freed); i++)
        sleep_ms(1);
    if (atomic_load(&freed)) atomic_store(&late, true);
}

/* Set by a poster whose wake must land late: after the loop has run its
 * post and gone back to sleep (remote_late_wake_*, below). */
static _Thread_local bool late_wake;
static void late_hold(void);

ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n) {
    if (delay_wake) hold_wake();
    if (late_wake) late_hold();
    return __real_write(fd, buf, n);
}

/* Set on the loop thread: its next wait (futex or epoll_wait with no
 * limit) first has another thread post, and waits until that post, wake
 * included, is done. The loop has announced its sleep and found the stack
 * empty by then, so this is a post between the look and the wait. */
static _Thread_local bool post_before_wait;
static sem_t post_go, post_done;

static void post_now(void) {
    post_before_wait = false;
    sem_post(&post_go);
    while (sem_wait(&post_done) != 0) {
    }
}

int __real_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms);
int __wrap_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms);
int __wrap_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms) {
    if (post_before_wait && ms < 0) post_now();
    return __real_epoll_wait(epfd, ev, max, ms);
}

long __real_syscall(long nr, ...);
long __wrap_syscall(long nr, ...);
long __wrap_syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (delay_wake && nr == SYS_futex && a[1] == FUTEX_WAKE_PRIVATE)
        hold_wake();
    if (late_wake && nr == SYS_futex && a[1] == FUTEX_WAKE_PRIVATE) late_hold();
    if (post_before_wait && nr == SYS_futex &&
        a[1] == FUTEX_WAIT_BITSET_PRIVATE)
        post_now();
    if (nr == SYS_futex && a[1] == FUTEX_WAIT_BITSET_PRIVATE)
        atomic_fetch_add(&loop_futex_waits, 1);
    long rc = __real_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    if (nr == SYS_futex && a[1] == FUTEX_WAIT_BITSET_PRIVATE && rc < 0 &&
        errno == EAGAIN)
        atomic_fetch_add(&futex_waits_beaten, 1);
    return rc;
}

static void on_signal(int sig) {
    (void)sig; /* only interrupts the loop's sleep */
}

typedef struct held_case {
    lull_loop *loop;
    lull_task task;
    lull_io io; /* watched: the loop sleeps in epoll, woken by a write */
    int fds[2];
    bool watch_fd;
} held_case;

static void on_held_post(lull_task *t) {
    held_case *hc = LULL_CONTAINER_OF(t, held_case, task);
    if (hc->watch_fd) lull_io_stop(&hc->io);
    lull_loop_unref(hc->loop);
}

static void *post_held(void *arg) {
    held_case *hc = arg;
    int how = hc->watch_fd ? LULL__SLEEP_EPOLL : LULL__SLEEP_FUTEX;
    while (__atomic_load_n(&hc->loop->sleeping, __ATOMIC_SEQ_CST) != how)
        sleep_ms(1);
    delay_wake = true;
    lull_task_post_remote(hc->loop, &hc->task);
    return NULL;
}

/* The poster publishes its task and is held inside its wake; the loop,
 * interrupted, takes the post, the run ends, and the loop is freed.
 * lull_loop_free must not return before the poster has left
 * lull_task_post_remote. */
static void free_while_a_poster_is_held(bool watch_fd) {
    static held_case hc;
    hc = (held_case){.watch_fd = watch_fd};
    atomic_store(&held, false);
    atomic_store(&freed, false);
    atomic_store(&late, false);
    loop_thread = pthread_self();
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART */
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    CHECK_EQ(lull_loop_new(&hc.loop, NULL), 0);
    lull_task_init(&hc.task, on_held_post);
    if (watch_fd) {
        CHECK_EQ(pipe(hc.fds), 0);
        CHECK_EQ(lull_io_init(hc.loop, &hc.io, hc.fds[0], never_ready), 0);
        CHECK_EQ(lull_io_start(&hc.io, LULL_READABLE), 0);
        lull_io_unref(&hc.io);
    }
    lull_loop_ref(hc.loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_held, &hc), 0);
    CHECK_EQ(lull_loop_run(hc.loop, LULL_RUN_DEFAULT), 0);
    CHECK(atomic_load(&held)); /* the post did go through the held wake */
    if (watch_fd) {
        close(hc.fds[0]);
        close(hc.fds[1]);
    }
    CHECK_EQ(lull_loop_free(hc.loop), 0);
    atomic_store(&freed, true);
    /* A file opened now may take the freed eventfd's number: a late wake
     * would land its 8 bytes in it. */
    int q[2];
    CHECK_EQ(pipe2(q, O_NONBLOCK), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK(!atomic_load(&late));
    char byte;
    CHECK_EQ(read(q[0], &byte, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    close(q[0]);
    close(q[1]);
}

TEST_THREADED(loop_free_waits_for_a_poster_inside_its_eventfd_write) {
    free_while_a_poster_is_held(true);
}

TEST_THREADED(loop_free_waits_for_a_poster_inside_its_futex_wake) {
    free_while_a_poster_is_held(false);
}

/* The same for a notifier: a raiser held inside lull_notifier_raise_remote (in
 * its wake of the loop, after the raise was queued) while the listener runs;
 * lull_notifier_quiesce must not return before the raiser has left. */
typedef struct held_raise {
    lull_loop *loop;
    lull_notifier n;
    lull_listener l;
    int runs;
} held_raise;

static void on_held_raise(lull_listener *l) {
    held_raise *hr = LULL_CONTAINER_OF(l, held_raise, l);
    hr->runs++;
    lull_listener_stop(l);
    lull_loop_unref(hr->loop);
}

static void *raise_held(void *arg) {
    held_raise *hr = arg;
    while (__atomic_load_n(&hr->loop->sleeping, __ATOMIC_SEQ_CST) !=
           LULL__SLEEP_FUTEX)
        sleep_ms(1);
    delay_wake = true;
    lull_notifier_raise_remote(hr->loop, &hr->n);
    return NULL;
}

TEST_THREADED(notifier_quiesce_waits_for_a_raiser_inside_notify_remote) {
    static held_raise hr;
    hr = (held_raise){0};
    atomic_store(&held, false);
    atomic_store(&freed, false);
    atomic_store(&late, false);
    loop_thread = pthread_self();
    struct sigaction sa = {.sa_handler = on_signal};
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    CHECK_EQ(lull_loop_new(&hr.loop, NULL), 0);
    lull_notifier_init(&hr.n);
    lull_listener_start(hr.loop, &hr.n, &hr.l, on_held_raise);
    lull_loop_ref(hr.loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, raise_held, &hr), 0);
    CHECK_EQ(lull_loop_run(hr.loop, LULL_RUN_DEFAULT), 0);
    CHECK(atomic_load(&held));
    CHECK_EQ(hr.runs, 1);
    lull_notifier_quiesce(hr.loop, &hr.n);
    atomic_store(&freed, true); /* the notifier could be freed from here */
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK(!atomic_load(&late));
    CHECK_EQ(lull_loop_free(hr.loop), 0);
}

/* A fork in a listener while another thread is inside
 * lull_notifier_raise_remote (held in its wake): that thread does not exist
 * in the child, so nothing there will ever leave the raise. The child's
 * lull_notifier_quiesce must not wait for it (it span for ever), and a raise
 * of its own must reach its listener. How each child ends is its exit
 * status: 0 done, 2 the raise never arrived; a quiesce that spins is
 * killed by the child's alarm. */
typedef struct fork_raise {
    held_raise hr;
    lull_timer limit; /* the child's: the raise never arrived */
    bool child;
} fork_raise;

static fork_raise fr;

static void on_child_limit(lull_timer *t) {
    (void)t;
    _exit(2);
}

static void fork_in_listener(lull_listener *l);

/* The child's listener: its own raise arrived. */
static void child_heard(lull_listener *l) {
    lull_listener_stop(l);
    alarm(2);
    lull_notifier_quiesce(fr.hr.loop, &fr.hr.n);
    _exit(0);
}

static int fork_and_wait(void) {
    pid_t pid = fork();
    if (pid == 0) {
        alarm(2); /* SIGALRM's default action: a spinning child dies */
        fr.child = true;
        if (lull_loop_fork(fr.hr.loop) != 0) _exit(3);
        return -1;
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

static void fork_in_listener(lull_listener *l) {
    (void)l;
    fr.hr.runs++;
    int status = fork_and_wait();
    if (status < 0) { /* the child: quiesce, then a raise of its own */
        lull_notifier_quiesce(fr.hr.loop, &fr.hr.n);
        lull_listener_stop(&fr.hr.l);
        lull_listener_start(fr.hr.loop, &fr.hr.n, &fr.hr.l, child_heard);
        lull_timer_init(fr.hr.loop, &fr.limit, on_child_limit);
        lull_timer_start(&fr.limit, 1000000000ull, 0);
        lull_notifier_raise_remote(fr.hr.loop, &fr.hr.n);
        return;
    }
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    lull_listener_stop(&fr.hr.l);
    lull_loop_unref(fr.hr.loop);
}

TEST_THREADED(fork_amid_a_raise_leaves_the_child_a_usable_notifier) {
    fr = (fork_raise){0};
    atomic_store(&held, false);
    atomic_store(&freed, false);
    atomic_store(&late, false);
    loop_thread = pthread_self();
    struct sigaction sa = {.sa_handler = on_signal};
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    CHECK_EQ(lull_loop_new(&fr.hr.loop, NULL), 0);
    lull_notifier_init(&fr.hr.n);
    lull_listener_start(fr.hr.loop, &fr.hr.n, &fr.hr.l, fork_in_listener);
    lull_loop_ref(fr.hr.loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, raise_held, &fr.hr), 0);
    CHECK_EQ(lull_loop_run(fr.hr.loop, LULL_RUN_DEFAULT), 0);
    CHECK(atomic_load(&held)); /* the fork came while it was inside */
    CHECK_EQ(fr.hr.runs, 1);
    atomic_store(&freed, true); /* lets the raiser go */
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_notifier_quiesce(fr.hr.loop, &fr.hr.n);
    CHECK_EQ(lull_loop_free(fr.hr.loop), 0);
}

/* The narrower moment of the same fork: the raiser had claimed the
 * notifier's task (or linked it to the stack's head) and not yet pushed
 * it. In the child the task looks queued, yet is on no stack: every raise
 * there was taken as coalesced into one that never runs. No call can be
 * held between the claim and the push, so the child sets that state
 * itself (any non-NULL link that is not on the stack). */
static lull_task not_on_the_stack;

static void fork_with_a_claimed_raise(lull_listener *l) {
    (void)l;
    fr.hr.runs++;
    pid_t pid = fork();
    if (pid == 0) {
        alarm(2);
        __atomic_store_n(&fr.hr.n.remote.remote_next, &not_on_the_stack,
                         __ATOMIC_RELAXED);
        if (lull_loop_fork(fr.hr.loop) != 0) _exit(3);
        lull_listener_stop(&fr.hr.l);
        lull_listener_start(fr.hr.loop, &fr.hr.n, &fr.hr.l, child_heard);
        lull_timer_init(fr.hr.loop, &fr.limit, on_child_limit);
        lull_timer_start(&fr.limit, 1000000000ull, 0);
        lull_notifier_raise_remote(fr.hr.loop, &fr.hr.n);
        return;
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    lull_listener_stop(&fr.hr.l);
}

TEST(fork_with_a_raise_claimed_but_not_pushed_delivers_the_childs_raise) {
    fr = (fork_raise){0};
    CHECK_EQ(lull_loop_new(&fr.hr.loop, NULL), 0);
    lull_notifier_init(&fr.hr.n);
    lull_listener_start(fr.hr.loop, &fr.hr.n, &fr.hr.l,
                        fork_with_a_claimed_raise);
    lull_notifier_raise(&fr.hr.n);
    CHECK_EQ(lull_loop_run(fr.hr.loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(fr.hr.runs, 1);
    CHECK_EQ(lull_loop_free(fr.hr.loop), 0);
}

/* --------------------------------- a post exactly as the loop goes to sleep */

/* The poster watches loop->sleeping and posts the instant the loop
 * announces its sleep, after 0-63 spins (a different point of the window
 * each round): between the announce and the loop's look at the stack,
 * between that look and the futex wait or epoll_wait, or inside the wait.
 * Every post must run: a lost wake-up leaves the loop asleep and the poster
 * waiting, which fails the round after 10 s. The wrapped syscall counts
 * the loop's futex waits the poster's swap of the word beat (the kernel
 * found the word changed: the narrowest window), printed, not checked,
 * since how often a machine's scheduling lands there is its own. */
#define EDGE_ROUNDS    20000
#define EDGE_MIN       2000
#define EDGE_BUDGET_NS (5 * 1000000000ull)

typedef struct edge_case {
    lull_loop *loop;
    lull_task task;
    atomic_int runs; /* written by the loop thread, read by the poster */
    int rounds;      /* poster thread: rounds it will post */
    bool watch_fd;
} edge_case;

static void on_edge_post(lull_task *t) {
    edge_case *ec = LULL_CONTAINER_OF(t, edge_case, task);
    int runs = atomic_load_explicit(&ec->runs, memory_order_relaxed) + 1;
    /* Read before the store: from then on the poster may shorten it. */
    bool last = runs == ec->rounds;
    atomic_store_explicit(&ec->runs, runs, memory_order_release);
    if (last) lull_loop_unref(ec->loop);
}

static void *post_at_the_edge(void *arg) {
    edge_case *ec = arg;
    int how = ec->watch_fd ? LULL__SLEEP_EPOLL : LULL__SLEEP_FUTEX;
    uint64_t end = check_clock_ns() + EDGE_BUDGET_NS;
    for (int i = 0; i < ec->rounds; i++) {
        /* The loop is about to sleep, or already asleep. A spin sees the
         * announce within nanoseconds when the threads run on two CPUs (a
         * sched_yield between looks would take about a microsecond, longer
         * than the window); it yields now and then for one CPU. */
        for (unsigned n = 1;
             __atomic_load_n(&ec->loop->sleeping, __ATOMIC_SEQ_CST) != how; n++)
            if (n % 4096 == 0) sched_yield();
        for (int spin = 0; spin < (i * 7) % 64; spin++)
            __asm__ volatile("" ::: "memory");
        /* The last round is announced in the post itself (ec->rounds is
         * read by the loop only after the post's release). */
        if (i + 1 < ec->rounds && i + 1 >= EDGE_MIN && check_clock_ns() > end)
            ec->rounds = i + 1;
        lull_task_post_remote(ec->loop, &ec->task);
        uint64_t deadline = check_clock_ns() + 10 * 1000000000ull;
        while (atomic_load_explicit(&ec->runs, memory_order_acquire) <= i) {
            if (check_clock_ns() > deadline)
                check_fail(__FILE__, __LINE__,
                           "round %d: a post made as the loop went to sleep "
                           "did not run in 10 s (a lost wake-up)",
                           i);
            sched_yield();
        }
    }
    return NULL;
}

/* A FUTEX_WAKE with no post behind it (a poster's wake that arrives after
 * its post already ran) ends the loop's sleep early. It counts as a
 * wakeup, and as no timer's: the only timer is 10 s away. A
 * LULL_RUN_ONCE then waits again (nothing ran), so a real post, made once
 * the loop sleeps again, ends the run: two wakeups, the post's a remote
 * one, the empty one of no cause. */
static int empty_wake_tid;
static lull_task empty_wake_post;

static void empty_wake_posted(lull_task *t) {
    (void)t;
}

static void *wake_without_post(void *arg) {
    lull_loop *loop = arg;
    check_wait_blocked(empty_wake_tid, loop->backend_fd, &loop->sleeping);
    long waits = atomic_load(&loop_futex_waits);
    CHECK_EQ(syscall(SYS_futex, &loop->sleeping, FUTEX_WAKE_PRIVATE, 1, NULL,
                     NULL, 0),
             1);
    while (atomic_load(&loop_futex_waits) == waits) /* asleep again */
        sleep_ms(1);
    check_wait_blocked(empty_wake_tid, loop->backend_fd, &loop->sleeping);
    lull_task_post_remote(loop, &empty_wake_post);
    return NULL;
}

static void far_timer(lull_timer *t) {
    (void)t;
}

TEST_THREADED(early_empty_wake_is_no_timers_wakeup) {
    lull_loop *loop;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    lull_timer t;
    CHECK_EQ(lull_timer_init(loop, &t, far_timer), 0);
    lull_timer_start(&t, LULL_S(10), 0);
    lull_task_init(&empty_wake_post, empty_wake_posted);
    empty_wake_tid = gettid();
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, wake_without_post, loop), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.wakeups, 2);
    CHECK_U64_EQ(m.wakeups_timer, 0);
    CHECK_U64_EQ(m.wakeups_remote, 1); /* the post's */
    CHECK_U64_EQ(m.wakeups_io + m.wakeups_signal, 0);
    CHECK(lull_timer_active(&t)); /* not due: it did not fire */
    lull_timer_stop(&t);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void post_as_the_loop_sleeps(bool watch_fd) {
    static edge_case ec;
    ec = (edge_case){.watch_fd = watch_fd, .rounds = EDGE_ROUNDS};
    atomic_store(&futex_waits_beaten, 0);
    CHECK_EQ(lull_loop_new(&ec.loop, NULL), 0);
    lull_task_init(&ec.task, on_edge_post);
    int fds[2] = {-1, -1};
    lull_io idle;
    if (watch_fd) {
        CHECK_EQ(pipe(fds), 0);
        CHECK_EQ(lull_io_init(ec.loop, &idle, fds[0], never_ready), 0);
        CHECK_EQ(lull_io_start(&idle, LULL_READABLE), 0);
        lull_io_unref(&idle);
    }
    lull_loop_ref(ec.loop); /* dropped by the last round's task */
    loop_thread = pthread_self();
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_at_the_edge, &ec), 0);
    CHECK_EQ(lull_loop_run(ec.loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(atomic_load(&ec.runs), ec.rounds);
    lull_metrics m;
    lull_loop_metrics(ec.loop, &m);
    CHECK_U64_EQ(m.tasks_run, (uint64_t)ec.rounds);
    printf("%d rounds: %" PRIu64 " woke the loop from its sleep, %" PRIu64
           " found it awake (%ld futex waits beaten); "
           "wakeups: %" PRIu64 " remote, %" PRIu64 " timer, %" PRIu64
           " io, %" PRIu64 " signal\n",
           ec.rounds, m.wakeups, (uint64_t)ec.rounds - m.wakeups_remote,
           atomic_load(&futex_waits_beaten), m.wakeups_remote, m.wakeups_timer,
           m.wakeups_io, m.wakeups_signal);
    /* Every wake-up was a post's (no timer, no fd ever ready), but for
     * one kind of empty one: a poster that moved the futex word before the
     * loop's wait (which then returns at once, beaten) may make its
     * FUTEX_WAKE only after the loop, having run the post, went to sleep
     * again; that sleep ends with nothing to do. At most one such wake-up
     * per beaten wait, and no post lost (the runs above). */
    CHECK_U64_EQ(m.wakeups_io, 0);
    CHECK_U64_EQ(m.wakeups_signal, 0);
    CHECK_U64_EQ(m.wakeups_timer, 0); /* nor are those a timer's */
    CHECK(m.wakeups - m.wakeups_remote <=
          (uint64_t)atomic_load(&futex_waits_beaten));
    if (watch_fd) {
        lull_io_stop(&idle);
        close(fds[0]);
        close(fds[1]);
    }
    CHECK_EQ(lull_loop_free(ec.loop), 0);
}

TEST_THREADED(remote_post_as_the_loop_sleeps_on_its_futex_is_never_lost) {
    post_as_the_loop_sleeps(false);
}

TEST_THREADED(remote_post_as_the_loop_sleeps_in_epoll_is_never_lost) {
    post_as_the_loop_sleeps(true);
}

/* The same window made to happen every time: the wrapped wait of the loop
 * thread has the poster post first (post_before_wait). A futex wait must
 * then find its word swapped (EAGAIN) and an epoll wait the eventfd's edge,
 * so the loop runs the post at once instead of sleeping through it. */
#define WINDOW_ROUNDS 1000

typedef struct window_case {
    lull_loop *loop;
    lull_task task;
    int runs; /* loop thread */
} window_case;

static void on_window_post(lull_task *t) {
    window_case *wc = LULL_CONTAINER_OF(t, window_case, task);
    if (++wc->runs == WINDOW_ROUNDS) {
        lull_loop_unref(wc->loop);
        return;
    }
    post_before_wait = true; /* the loop's next wait */
}

static void *post_in_window(void *arg) {
    window_case *wc = arg;
    for (int i = 0; i < WINDOW_ROUNDS; i++) {
        while (sem_wait(&post_go) != 0) {
        }
        lull_task_post_remote(wc->loop, &wc->task);
        sem_post(&post_done);
    }
    return NULL;
}

static void post_between_look_and_wait(bool watch_fd) {
    static window_case wc;
    wc = (window_case){0};
    CHECK_EQ(sem_init(&post_go, 0, 0), 0);
    CHECK_EQ(sem_init(&post_done, 0, 0), 0);
    atomic_store(&futex_waits_beaten, 0);
    CHECK_EQ(lull_loop_new(&wc.loop, NULL), 0);
    lull_task_init(&wc.task, on_window_post);
    int fds[2] = {-1, -1};
    lull_io idle;
    if (watch_fd) {
        CHECK_EQ(pipe(fds), 0);
        CHECK_EQ(lull_io_init(wc.loop, &idle, fds[0], never_ready), 0);
        CHECK_EQ(lull_io_start(&idle, LULL_READABLE), 0);
        lull_io_unref(&idle);
    }
    lull_loop_ref(wc.loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_in_window, &wc), 0);
    post_before_wait = true;
    CHECK_EQ(lull_loop_run(wc.loop, LULL_RUN_DEFAULT), 0);
    post_before_wait = false;
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(wc.runs, WINDOW_ROUNDS);
    /* Every futex wait found the word swapped: none slept. */
    if (!watch_fd) CHECK_EQ(atomic_load(&futex_waits_beaten), WINDOW_ROUNDS);
    if (watch_fd) {
        lull_io_stop(&idle);
        close(fds[0]);
        close(fds[1]);
    }
    CHECK_EQ(lull_loop_free(wc.loop), 0);
    sem_destroy(&post_go);
    sem_destroy(&post_done);
}

TEST_THREADED(remote_post_between_the_look_and_the_futex_wait_wakes_it) {
    post_between_look_and_wait(false);
}

TEST_THREADED(remote_post_between_the_look_and_epoll_wait_wakes_it) {
    post_between_look_and_wait(true);
}

/* ---------------------------------------------------------- timer slack */

/* A loop lowers its thread's timer slack only for a wait shorter than a
 * second: a run whose only deadline is far leaves it as it was (no prctl
 * call), one with a near deadline lowers it while it runs and puts it
 * back. The far run is ended by a post once it sleeps. */
static long slack_seen;
static lull_task slack_task;

static void read_slack(lull_task *t) {
    (void)t;
    slack_seen = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    lull_loop_stop(the_loop);
}

static void read_slack_timer(lull_timer *t) {
    slack_seen = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    lull_loop_stop(t->loop);
}

static int slack_loop_tid;
static void *post_slack_read(void *arg) {
    (void)arg;
    check_wait_blocked(slack_loop_tid, the_loop->backend_fd,
                       &the_loop->sleeping);
    lull_task_post_remote(the_loop, &slack_task);
    return NULL;
}

TEST_THREADED(loop_lowers_timer_slack_only_for_a_wait_under_a_second) {
    CHECK_EQ(prctl(PR_SET_TIMERSLACK, 50000, 0, 0, 0), 0);
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    lull_timer far, near;
    lull_timer_init(the_loop, &far, read_slack_timer);
    lull_timer_init(the_loop, &near, read_slack_timer);
    lull_timer_start(&far, 3600ull * 1000000000ull, 0);
    lull_task_init(&slack_task, read_slack);
    slack_loop_tid = gettid();
    slack_seen = -1;
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_slack_read, NULL), 0);
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(slack_seen, 50000); /* an hour away: left as it was */
    /* 300 ms: under 1 s, and long enough that the loop still has a wait
     * to make when it gets there under valgrind (a 1 ms timer came due
     * first: no wait, no lowering). */
    lull_timer_start(&near, LULL_MS(300), 0);
    slack_seen = -1;
    CHECK_EQ(lull_loop_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(slack_seen, 1000); /* lowered while it waited */
    CHECK_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 50000); /* put back */
    lull_timer_stop(&far);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

/* ------------------------------------------------- a futex sleep refused */

/* A sandbox whose seccomp filter refuses futex (EPERM): a loop that watches
 * no fd sleeps on a futex, and a refused sleep returns at once, so the loop
 * spun on the clock until its timer came due (tens of thousands of
 * iterations over 20 ms) and would spin for ever on a loop reference. It
 * sleeps in epoll from then on, where its wake-up eventfd is, and a post
 * from another thread still wakes it. In a child (a filter stays for the
 * process's life), after the once-only set-ups lull_loop_free runs: glibc
 * ends a first pthread_once with a futex wake, and aborts when refused. */
static lull_task refused_task;
static int refused_runs;
static int refused_tid;
static lull_loop *refused_loop;

static void no_op_timer(lull_timer *t) {
    (void)t;
}

static void refused_ran(lull_task *t) {
    (void)t;
    refused_runs++;
    lull_loop_unref(refused_loop);
}

static void *post_to_refused(void *arg) {
    (void)arg;
    check_wait_blocked(refused_tid, refused_loop->backend_fd,
                       &refused_loop->sleeping);
    lull_task_post_remote(refused_loop, &refused_task);
    return NULL;
}

static void futex_refused(void *arg) {
    (void)arg;
    lull_loop *warm;
    CHECK_EQ(lull_loop_new(&warm, NULL), 0);
    CHECK_EQ(lull_loop_free(warm), 0);
    CHECK_EQ(lull_loop_new(&refused_loop, NULL), 0);
    check_deny_syscalls((const int[]){SYS_futex}, 1, EPERM);
    lull_timer t;
    lull_timer_init(refused_loop, &t, no_op_timer);
    lull_timer_start(&t, LULL_MS(20), 0);
    CHECK_EQ(lull_loop_run(refused_loop, LULL_RUN_DEFAULT), 0);
    lull_metrics m;
    lull_loop_metrics(refused_loop, &m);
    CHECK_LE(m.iterations, 8); /* the refused sleep, then epoll's */
    /* Asleep in epoll on a reference: a post wakes it. The poster is
     * detached, not joined (a join waits on a futex). */
    lull_task_init(&refused_task, refused_ran);
    lull_loop_ref(refused_loop);
    refused_tid = gettid();
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_to_refused, NULL), 0);
    CHECK_EQ(pthread_detach(th), 0);
    CHECK_EQ(lull_loop_run(refused_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(refused_runs, 1);
}

TEST_THREADED(loop_whose_futex_sleep_is_refused_sleeps_in_epoll) {
#ifdef CHECK_SANDBOX_ARCH
    CHECK(check_exits_cleanly(futex_refused, NULL));
#else
    printf("skipped: no seccomp architecture constant for this machine\n");
#endif
}

/* LULL_RUN_ONCE blocks until something runs: a sleep the kernel refused
 * at once with nothing run is taken again, now in epoll, as one a
 * signal interrupted is. It returned with the timer not run. */
static int once_refused_fires;

static void once_refused_timer(lull_timer *t) {
    (void)t;
    once_refused_fires++;
}

static void futex_refused_once(void *arg) {
    (void)arg;
    lull_loop *loop;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_loop_free(loop), 0); /* its pthread_once calls done */
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    check_deny_syscalls((const int[]){SYS_futex}, 1, EPERM);
    lull_timer t;
    lull_timer_init(loop, &t, once_refused_timer);
    lull_timer_start(&t, LULL_MS(20), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(once_refused_fires, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(run_once_waits_on_after_a_refused_futex_sleep) {
#ifdef CHECK_SANDBOX_ARCH
    CHECK(check_exits_cleanly(futex_refused_once, NULL));
#else
    printf("skipped: no seccomp architecture constant for this machine\n");
#endif
}

/* A stray close() in the program (a double close, a close-all after a
 * fork) can take the loop's wake-up eventfd: a poster's write then fails
 * with EBADF, and the loop, asleep in epoll, is never woken for the post.
 * Silence would be a hang with no clue to its cause (libuv aborts on the
 * same failed write); debug builds stop the poster with a message. The
 * loop watches a pipe so that it sleeps in epoll, where the eventfd is
 * what wakes it; a timer ends the run if the post went unnoticed. */
static lull_loop *closed_wake_loop;
static lull_task closed_wake_task;
static int closed_wake_tid;

static void closed_wake_ran(lull_task *t) {
    (void)t;
    lull_loop_unref(closed_wake_loop);
}

static void closed_wake_fd_cb(lull_io *io, int events) {
    (void)io;
    (void)events;
}

static void closed_wake_timeout(lull_timer *t) {
    (void)t;
    lull_loop_stop(closed_wake_loop);
}

static void *post_to_closed_wake(void *arg) {
    (void)arg;
    check_wait_blocked(closed_wake_tid, closed_wake_loop->backend_fd, NULL);
    lull_task_post_remote(closed_wake_loop, &closed_wake_task);
    return NULL;
}

static void post_with_wake_fd_closed(void *arg) {
    (void)arg;
    CHECK_EQ(lull_loop_new(&closed_wake_loop, NULL), 0);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(closed_wake_loop, &io, p[0], closed_wake_fd_cb), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    lull_timer timeout;
    lull_timer_init(closed_wake_loop, &timeout, closed_wake_timeout);
    lull_timer_start(&timeout, LULL_S(2), 0);
    lull_task_init(&closed_wake_task, closed_wake_ran);
    lull_loop_ref(closed_wake_loop);
    CHECK_EQ(close(closed_wake_loop->remote_fd), 0); /* the stray close */
    closed_wake_tid = gettid();
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_to_closed_wake, NULL), 0);
    CHECK_EQ(lull_loop_run(closed_wake_loop, LULL_RUN_DEFAULT), 0);
    CHECK(!"the post was lost without a word");
}

TEST_THREADED(remote_post_to_a_loop_whose_wake_fd_was_closed_asserts) {
    if (!check_debug_build()) {
        fprintf(stderr, "release build: no wake-up asserts to check\n");
        return;
    }
    CHECK(check_dies(post_with_wake_fd_closed, NULL,
                     "lull: the loop's wake-up eventfd is gone"));
}

/* LULL_RUN_ONCE and a wake-up that comes late. A poster wakes the loop
 * after its push, so its wake can land after the loop, woken by something
 * else, has already run the post: the next sleep then ends at once with
 * nothing to run. Held here inside its wake (the eventfd write, or the
 * FUTEX_WAKE after its swap of the word), the poster first interrupts the
 * loop with a signal, so that the loop takes the post without the wake, and
 * lets the wake go only once the loop sleeps again, in a LULL_RUN_ONCE
 * whose timer is due in 100 ms. Such a wake ends that run no more than a
 * signal does: the run waits again, and returns with the timer run. */
static lull_loop *late_loop;
static lull_task late_task;
static atomic_bool late_ran;
static int late_tid;
static int late_fires;

static void late_hold(void) {
    late_wake = false;
    /* The signal is sent again until the loop has run the post: one that
     * lands after the loop announced its sleep but before it entered the
     * wait is handled there and ends nothing, and the wait then blocks for
     * ever with this wake held. The window is a few instructions natively;
     * under valgrind, whose scheduler runs one thread at a time and hands
     * a signal to its thread at the next switch, it was hit in 4 of 6
     * runs. A signal that lands later, in the next run's wait, ends that
     * wait no more than the late wake does: the run waits again. */
    while (!atomic_load(&late_ran)) {
        pthread_kill(loop_thread, SIGUSR1);
        for (int i = 0; i < 20 && !atomic_load(&late_ran); i++)
            sleep_ms(1);
    }
    check_wait_blocked(late_tid, late_loop->backend_fd, &late_loop->sleeping);
}

static void late_task_ran(lull_task *t) {
    (void)t;
    atomic_store(&late_ran, true);
}

static void late_timer_fired(lull_timer *t) {
    (void)t;
    late_fires++;
}

static void *post_with_a_late_wake(void *arg) {
    int how = *(const int *)arg;
    while (__atomic_load_n(&late_loop->sleeping, __ATOMIC_SEQ_CST) != how)
        sleep_ms(1);
    late_wake = true;
    lull_task_post_remote(late_loop, &late_task);
    return NULL;
}

static void late_wake_in_run_once(bool watch_fd) {
    atomic_store(&late_ran, false);
    late_fires = 0;
    loop_thread = pthread_self();
    late_tid = gettid();
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART */
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    CHECK_EQ(lull_loop_new(&late_loop, NULL), 0);
    int fds[2];
    lull_io io;
    if (watch_fd) { /* the loop sleeps in epoll, else on its futex */
        CHECK_EQ(pipe(fds), 0);
        CHECK_EQ(lull_io_init(late_loop, &io, fds[0], never_ready), 0);
        CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    }
    lull_task_init(&late_task, late_task_ran);
    lull_loop_ref(late_loop); /* the expected post */
    int how = watch_fd ? LULL__SLEEP_EPOLL : LULL__SLEEP_FUTEX;
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_with_a_late_wake, &how), 0);
    CHECK_EQ(lull_loop_run(late_loop, LULL_RUN_ONCE), 0);
    CHECK(atomic_load(&late_ran)); /* taken without its wake */
    lull_timer timer;
    lull_timer_init(late_loop, &timer, late_timer_fired);
    lull_timer_start(&timer, LULL_MS(100), 0);
    CHECK_EQ(lull_loop_run(late_loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(late_fires, 1); /* not ended early by the late wake */
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_loop_unref(late_loop);
    if (watch_fd) {
        lull_io_stop(&io);
        close(fds[0]);
        close(fds[1]);
    }
    CHECK_EQ(lull_loop_free(late_loop), 0);
}

TEST_THREADED(remote_late_wake_does_not_end_a_run_once_in_epoll) {
    late_wake_in_run_once(true);
}

TEST_THREADED(remote_late_wake_does_not_end_a_run_once_on_its_futex) {
    late_wake_in_run_once(false);
}

/* lull_task_init on a task queued remotely and not yet taken clears the
 * link the loop's stack of remote posts goes on through: the loop's take
 * stopped there and dropped every older post with no word, and those
 * tasks, their links still set, took every later post as coalesced into
 * one that would never run. Debug builds now stop at the take. */
static int reinit_runs[3];
static lull_task reinit_tasks[3];
static void reinit_ran(lull_task *t) {
    reinit_runs[t - reinit_tasks]++;
}

static void init_a_task_queued_remotely(void *arg) {
    (void)arg;
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    for (int i = 0; i < 3; i++) {
        lull_task_init(&reinit_tasks[i], reinit_ran);
        lull_task_post_remote(loop, &reinit_tasks[i]);
    }
    lull_task_init(&reinit_tasks[1], reinit_ran);
    lull_loop_settle(loop);
    fprintf(stderr, "runs %d %d %d\n", reinit_runs[0], reinit_runs[1],
            reinit_runs[2]);
}

TEST(task_init_while_queued_remotely_is_caught_in_debug_builds) {
    if (!check_debug_build()) return;
    CHECK(check_dies(init_a_task_queued_remotely, NULL,
                     "lull: remote posts corrupted"));
}

/* lull_loop_free right after the loop ran the last post of each poster,
 * with the posters not joined yet: lull.h promises that free waits for a
 * poster whose post the loop took and that is still inside its
 * lull_task_post_remote (waking the loop). Each poster posts its own task
 * again once the loop ran it, so every post is taken and the last one of
 * each can race the free; run under ThreadSanitizer and ASan, a touch of
 * the freed loop is reported. */
#define FREE_RACE_POSTERS 3
#define FREE_RACE_ROUNDS  2000
static lull_loop *free_race_loop;
static lull_task free_race_tasks[FREE_RACE_POSTERS];
static atomic_int free_race_runs[FREE_RACE_POSTERS];
static int free_race_total;

static void free_race_ran(lull_task *t) {
    atomic_fetch_add(&free_race_runs[t - free_race_tasks], 1);
    if (++free_race_total == FREE_RACE_POSTERS * FREE_RACE_ROUNDS)
        lull_loop_unref(t->loop);
}

static void *free_race_poster(void *arg) {
    int i = (int)(intptr_t)arg;
    for (int r = 0; r < FREE_RACE_ROUNDS; r++) {
        lull_task_post_remote(free_race_loop, &free_race_tasks[i]);
        while (atomic_load(&free_race_runs[i]) == r)
            sched_yield();
    }
    return NULL;
}

TEST_THREADED(loop_free_after_the_last_posts_ran_waits_for_posters) {
    for (int watch_fd = 0; watch_fd < 2; watch_fd++) {
        CHECK_EQ(lull_loop_new(&free_race_loop, NULL), 0);
        int fds[2];
        lull_io io;
        if (watch_fd) { /* the posters wake it through the eventfd */
            CHECK_EQ(pipe(fds), 0);
            CHECK_EQ(lull_io_init(free_race_loop, &io, fds[0], never_ready), 0);
            CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
            lull_io_unref(&io);
        }
        free_race_total = 0;
        pthread_t th[FREE_RACE_POSTERS];
        for (int i = 0; i < FREE_RACE_POSTERS; i++) {
            atomic_store(&free_race_runs[i], 0);
            lull_task_init(&free_race_tasks[i], free_race_ran);
        }
        lull_loop_ref(free_race_loop);
        for (int i = 0; i < FREE_RACE_POSTERS; i++)
            CHECK_EQ(pthread_create(&th[i], NULL, free_race_poster,
                                    (void *)(intptr_t)i),
                     0);
        CHECK_EQ(lull_loop_run(free_race_loop, LULL_RUN_DEFAULT), 0);
        if (watch_fd) {
            lull_io_stop(&io);
            close(fds[0]);
            close(fds[1]);
        }
        CHECK_EQ(lull_loop_free(free_race_loop), 0); /* posters not joined */
        for (int i = 0; i < FREE_RACE_POSTERS; i++) {
            CHECK_EQ(pthread_join(th[i], NULL), 0);
            CHECK_EQ(atomic_load(&free_race_runs[i]), FREE_RACE_ROUNDS);
        }
    }
}
