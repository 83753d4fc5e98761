/* One loop per core: loops start on their own threads (pinned when asked),
 * take hand-offs of tasks and of a connection from other threads, finish
 * their work in flight when stopped, and are freed cleanly. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_LOOPS 8

static void sem_wait_10s(sem_t *s) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    while (sem_timedwait(s, &deadline) != 0) {
        if (errno == ETIMEDOUT)
            check_fail(__FILE__, __LINE__, "not within 10 s");
    }
}

/* What each loop's start and stop saw (each written by its own thread,
 * read after lull_percore_start or lull_percore_stop returned). */
typedef struct seen {
    lull_loop *loop;
    pthread_t thread;
    int cpus;  /* CPUs the thread may run on */
    int cpu;   /* the first of them */
    int stops; /* stop calls */
} seen;

static seen seen_by[MAX_LOOPS];

static void on_start(lull_loop *loop, int index, void *arg) {
    (void)arg;
    seen *s = &seen_by[index];
    s->loop = loop;
    s->thread = pthread_self();
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    s->cpus = CPU_COUNT(&set);
    s->cpu = -1;
    for (int c = 0; c < CPU_SETSIZE && s->cpu < 0; c++)
        if (CPU_ISSET(c, &set)) s->cpu = c;
}

/* The set being stopped, for stop functions and hand-offs that ask
 * lull_percore_stopping (NULL where a test does not set it). */
static lull_percore *stopping_pc;

static void on_stop(lull_loop *loop, int index, void *arg) {
    (void)arg;
    CHECK(loop == seen_by[index].loop);
    CHECK(pthread_equal(pthread_self(), seen_by[index].thread));
    if (stopping_pc) CHECK(lull_percore_stopping(stopping_pc));
    seen_by[index].stops++;
}

/* A task handed to a loop from this thread. */
typedef struct hand {
    lull_task task;
    pthread_t ran_on;
    lull_loop *expected;
    sem_t *ran;
} hand;

static void hand_run(lull_task *t) {
    hand *h = LULL_CONTAINER_OF(t, hand, task);
    h->ran_on = pthread_self();
    sem_post(h->ran);
}

TEST_THREADED(percore_start_hand_off_stop) {
    memset(seen_by, 0, sizeof seen_by);
    lull_percore *pc;
    lull_percore_options o = {.loops = 3, .start = on_start, .stop = on_stop};
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    CHECK_EQ(lull_percore_count(pc), 3);
    CHECK(lull_percore_loop(pc, 3) == NULL);
    CHECK(lull_percore_loop(pc, -1) == NULL);
    sem_t ran;
    sem_init(&ran, 0, 0);
    hand h[3];
    for (int i = 0; i < 3; i++) {
        CHECK(lull_percore_loop(pc, i) == seen_by[i].loop);
        CHECK(!pthread_equal(seen_by[i].thread, pthread_self()));
        h[i] = (hand){.ran = &ran};
        lull_task_init(&h[i].task, hand_run);
        lull_post_remote(lull_percore_loop(pc, i), &h[i].task);
    }
    for (int i = 0; i < 3; i++)
        sem_wait_10s(&ran);
    for (int i = 0; i < 3; i++)
        CHECK(pthread_equal(h[i].ran_on, seen_by[i].thread));
    /* Round robin. */
    for (int i = 0; i < 7; i++)
        CHECK(lull_percore_next(pc) == seen_by[i % 3].loop);
    CHECK(!lull_percore_stopping(pc));
    CHECK(!lull_percore_stopping(NULL));
    stopping_pc = pc; /* every stop function sees it stopping */
    CHECK_EQ(lull_percore_stop(pc), 0);
    stopping_pc = NULL;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(seen_by[i].stops, 1);
    sem_destroy(&ran);
}

TEST_THREADED(percore_pins_each_loop_to_one_cpu) {
    memset(seen_by, 0, sizeof seen_by);
    cpu_set_t mine;
    CHECK_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
    int ncpu = CPU_COUNT(&mine);
    int loops = ncpu + 1; /* more loops than CPUs: wraps around */
    if (loops > MAX_LOOPS) loops = MAX_LOOPS;
    lull_percore *pc;
    lull_percore_options o = {.loops = loops, .pin = true, .start = on_start};
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    for (int i = 0; i < loops; i++) {
        CHECK_EQ(seen_by[i].cpus, 1);
        /* The i-th allowed CPU, wrapping around. */
        int want = -1, k = i % ncpu;
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &mine) && k-- == 0) {
                want = c;
                break;
            }
        CHECK_EQ(seen_by[i].cpu, want);
    }
    CHECK_EQ(lull_percore_stop(pc), 0);
}

TEST_THREADED(percore_defaults_to_one_loop_per_cpu) {
    memset(seen_by, 0, sizeof seen_by);
    cpu_set_t mine;
    CHECK_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
    lull_percore *pc;
    CHECK_EQ(lull_percore_start(&pc, NULL), 0);
    CHECK_EQ(lull_percore_count(pc), CPU_COUNT(&mine));
    CHECK_EQ(lull_percore_stop(pc), 0);
    CHECK_EQ(lull_percore_start(NULL, NULL), -EINVAL);
    CHECK_EQ(lull_percore_start(&pc, &(lull_percore_options){.loops = -1}),
             -EINVAL);
    CHECK_EQ(lull_percore_stop(NULL), -EINVAL);
}

/* ----------------------------------------- handing off a connection */

/* A connection accepted on one thread, handed to a loop: the loop starts
 * watching it, echoes what it reads, and its stop function closes it. */
typedef struct conn {
    lull_task adopt; /* posted to the target loop with the fd */
    lull_io io;
    int fd;
    lull_loop *loop; /* set by adopt, on the loop's thread */
    bool watching;
} conn;

static conn the_conn;

static void conn_readable(lull_io *io, int events) {
    conn *c = LULL_CONTAINER_OF(io, conn, io);
    (void)events;
    char buf[64];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n > 0) CHECK_EQ(write(c->fd, buf, (size_t)n), n);
}

static void conn_adopt(lull_task *t) {
    conn *c = LULL_CONTAINER_OF(t, conn, adopt);
    c->loop = seen_by[1].loop;
    CHECK(pthread_equal(pthread_self(), seen_by[1].thread));
    CHECK_EQ(lull_io_init(c->loop, &c->io, c->fd, conn_readable), 0);
    CHECK_EQ(lull_io_start(&c->io, LULL_READABLE), 0);
    c->watching = true;
}

static void conn_stop(lull_loop *loop, int index, void *arg) {
    (void)arg;
    on_stop(loop, index, NULL);
    if (index == 1 && the_conn.watching) {
        lull_io_stop(&the_conn.io);
        close(the_conn.fd);
        the_conn.watching = false;
    }
}

TEST_THREADED(percore_hands_a_connection_to_another_loop) {
    memset(seen_by, 0, sizeof seen_by);
    lull_percore *pc;
    lull_percore_options o = {.loops = 2, .start = on_start, .stop = conn_stop};
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    the_conn = (conn){.fd = sv[0]};
    lull_task_init(&the_conn.adopt, conn_adopt);
    lull_post_remote(lull_percore_loop(pc, 1), &the_conn.adopt);
    CHECK_EQ(write(sv[1], "ping", 4), 4);
    char buf[8] = "";
    size_t got = 0;
    while (got < 4) {
        ssize_t n = read(sv[1], buf + got, 4 - got); /* blocking */
        CHECK(n > 0);
        got += (size_t)n;
    }
    CHECK(memcmp(buf, "ping", 4) == 0);
    CHECK_EQ(lull_percore_stop(pc), 0); /* the stop function closed it */
    CHECK_EQ(read(sv[1], buf, 1), 0);   /* the peer sees the close */
    close(sv[1]);
}

/* ---------------------------------------- stopping with work in flight */

static lull_pool *stop_pool;
static sem_t stop_release;
static int stop_dones[MAX_LOOPS];
static lull_work stop_work[MAX_LOOPS];

static int stop_work_run(lull_work *w) {
    (void)w;
    sem_wait_10s(&stop_release);
    return 0;
}

static void stop_work_done(lull_work *w, int status) {
    CHECK_EQ(status, 0);
    stop_dones[w - stop_work]++;
    /* lull_percore_stop frees this loop soon after: wait until every pool
     * thread has finished handing its completion over (left
     * lull_post_remote), which the pool counts as completed. */
    lull_pool_stats st;
    do {
        lull_pool_get_stats(stop_pool, &st);
    } while (st.completed < 3);
}

/* The stop function submits work; the loop must wait for its done. */
static void submit_on_stop(lull_loop *loop, int index, void *arg) {
    (void)arg;
    lull_work_init(&stop_work[index], stop_work_run, stop_work_done);
    CHECK_EQ(lull_work_submit(loop, stop_pool, &stop_work[index]), 0);
    sem_post(&stop_release); /* one release per loop's item */
}

TEST_THREADED(percore_stop_lets_work_in_flight_come_home) {
    memset(stop_dones, 0, sizeof stop_dones);
    sem_init(&stop_release, 0, 0);
    CHECK_EQ(lull_pool_new(&stop_pool, &(lull_pool_options){.threads = 2}), 0);
    lull_percore *pc;
    lull_percore_options o = {.loops = 3, .stop = submit_on_stop};
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    CHECK_EQ(lull_percore_stop(pc), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(stop_dones[i], 1);
    CHECK_EQ(lull_pool_free(stop_pool), 0);
    sem_destroy(&stop_release);
}

/* ------------------------------------------------------- misuse */

static lull_percore *self_pc;
static int self_rc = 1;
static lull_task self_task;

static void stop_from_inside(lull_task *t) {
    (void)t;
    self_rc = lull_percore_stop(self_pc);
}

TEST_THREADED(percore_stop_from_its_own_loop_is_refused) {
    lull_percore_options o = {.loops = 1};
    CHECK_EQ(lull_percore_start(&self_pc, &o), 0);
    sem_t ran;
    sem_init(&ran, 0, 0);
    lull_task_init(&self_task, stop_from_inside);
    hand h = {.ran = &ran};
    lull_task_init(&h.task, hand_run);
    lull_post_remote(lull_percore_loop(self_pc, 0), &self_task);
    lull_post_remote(lull_percore_loop(self_pc, 0), &h.task);
    sem_wait_10s(&ran); /* posted after the stop attempt: it has run */
    CHECK_EQ(self_rc, -EDEADLK);
    CHECK_EQ(lull_percore_stop(self_pc), 0);
    sem_destroy(&ran);
}
