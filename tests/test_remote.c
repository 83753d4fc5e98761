/* Cross-thread posts: none lost under load, coalescing of a task queued
 * twice before the loop drains it, and the loop reference that keeps
 * lull_run waiting for an expected post. Real threads and the real clock. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <pthread.h>
#include <semaphore.h>
#include <time.h>
#include <unistd.h>

/* 4 x 100,000 round trips, as the issue asks: about 3 s in a debug build
 * and 5 s under ThreadSanitizer on the 2-vCPU machine. */
#define ROUNDS  100000
#define THREADS 4

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
    lull_loop *loop;   /* a peer's own loop (second case) */
    lull_task pong;    /* posted to the peer's loop by the main loop */
    int rounds;
} peer;

static uint64_t total; /* loop thread only */

static void on_ping(lull_task *t) {
    peer *p = LULL_CONTAINER_OF(t, peer, ping);
    p->received++;
    if (++total == (uint64_t)THREADS * ROUNDS) lull_loop_unref(the_loop);
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
    for (int i = 0; i < ROUNDS; i++) {
        lull_post_remote(the_loop, &p->ping);
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
    lull_loop_ref(the_loop); /* until every round has arrived */
    for (int i = 0; i < THREADS; i++) {
        peers[i] = (peer){0};
        lull_task_init(&peers[i].ping, on_ping);
        CHECK_EQ(sem_init(&peers[i].reply, 0, 0), 0);
        CHECK_EQ(pthread_create(&peers[i].thread, NULL, pinger, &peers[i]), 0);
    }
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0);
    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(pthread_join(peers[i].thread, NULL), 0);
        CHECK_U64_EQ(peers[i].received, ROUNDS);
        CHECK_U64_EQ(peers[i].answered, ROUNDS);
        sem_destroy(&peers[i].reply);
    }
    CHECK_U64_EQ(total, (uint64_t)THREADS * ROUNDS);
    lull_metrics m;
    lull_loop_metrics(the_loop, &m);
    CHECK_U64_EQ(m.tasks_run, (uint64_t)THREADS * ROUNDS);
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
    lull_post_remote(p->loop, &p->pong);
}

static void on_pong(lull_task *t) {
    peer *p = LULL_CONTAINER_OF(t, peer, pong);
    p->answered++;
    if (++p->rounds < LOOP_ROUNDS)
        lull_post_remote(the_loop, &p->ping);
    else
        lull_loop_unref(p->loop);
}

static void *loop_peer(void *arg) {
    peer *p = arg;
    lull_post_remote(the_loop, &p->ping);
    CHECK_EQ(lull_run(p->loop, LULL_RUN_DEFAULT), 0);
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
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0);
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
    lull_post_remote(the_loop, &shared_task);
    lull_post_remote(the_loop, &shared_task);
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
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(once_runs, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_run(the_loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(once_runs, 1);
    /* Drained: the task can be posted remotely again, and runs again. */
    lull_post_remote(the_loop, &shared_task);
    lull_post_remote(the_loop, &shared_task);
    lull_loop_ref(the_loop);
    once_runs = 0;
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0);
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
static void *post_late(void *arg) {
    (void)arg;
    sleep_ms(50); /* the loop is blocked in the kernel by now */
    lull_post_remote(the_loop, &late_task);
    return NULL;
}

TEST_THREADED(loop_ref_keeps_run_alive_for_remote_post) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    CHECK(!lull_loop_alive(the_loop));
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0); /* nothing: returns */
    lull_task_init(&late_task, late_arrival);
    late_runs = 0;
    lull_loop_ref(the_loop);
    CHECK(lull_loop_alive(the_loop));
    CHECK_EQ(lull_loop_free(the_loop), -EBUSY);
    lull_loop_metrics_reset(the_loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_late, NULL), 0);
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0);
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
    lull_stop(the_loop);
}

static lull_task stop_task;
static void *post_stop(void *arg) {
    (void)arg;
    sleep_ms(20);
    lull_post_remote(the_loop, &stop_task);
    return NULL;
}

TEST_THREADED(stop_from_another_thread_through_a_post) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    lull_task_init(&stop_task, stop_loop);
    stops_run = 0;
    lull_loop_ref(the_loop);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_stop, NULL), 0);
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(stops_run, 1);
    CHECK(lull_loop_alive(the_loop)); /* stopped, not drained of refs */
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_loop_unref(the_loop);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}

/* lull_post_remote is legal from the loop thread too, also inside a
 * callback; the task runs in a later turn. */
static lull_task inner;
static int inner_runs;
static void run_inner(lull_task *t) {
    (void)t;
    inner_runs++;
    lull_loop_unref(the_loop);
}
static void post_inner_remote(lull_task *t) {
    (void)t;
    lull_post_remote(the_loop, &inner);
    CHECK_EQ(inner_runs, 0);
}

TEST(remote_post_from_loop_thread) {
    CHECK_EQ(lull_loop_new(&the_loop, NULL), 0);
    lull_task outer;
    lull_task_init(&outer, post_inner_remote);
    lull_task_init(&inner, run_inner);
    inner_runs = 0;
    lull_loop_ref(the_loop); /* run_inner drops it */
    lull_post(the_loop, &outer);
    CHECK_EQ(lull_run(the_loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(inner_runs, 1);
    CHECK_EQ(lull_loop_free(the_loop), 0);
}
