/* One loop per core: loops start on their own threads (pinned when asked),
 * take hand-offs of tasks and of a connection from other threads, finish
 * their work in flight when stopped, and are freed cleanly. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lull.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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
        lull_task_post_remote(lull_percore_loop(pc, i), &h[i].task);
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
    lull_task_post_remote(lull_percore_loop(pc, 1), &the_conn.adopt);
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
     * lull_task_post_remote), which the pool counts as completed. */
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
    lull_task_post_remote(lull_percore_loop(self_pc, 0), &self_task);
    lull_task_post_remote(lull_percore_loop(self_pc, 0), &h.task);
    sem_wait_10s(&ran); /* posted after the stop attempt: it has run */
    CHECK_EQ(self_rc, -EDEADLK);
    CHECK_EQ(lull_percore_stop(self_pc), 0);
    sem_destroy(&ran);
}

/* ----------------------------------------------- hand-offs while stopping */

/* A connection handed to a loop during lull_percore_stop. It runs after its
 * loop's stop function, so it closes the connection (docs/POOL.md), and it
 * may hand on another. */
typedef struct late {
    lull_task task;
    int target;        /* the loop it must run on */
    int fd;            /* closed by the hand-off */
    int runs;          /* written on the target's thread */
    bool saw_stopping; /* lull_percore_stopping when it ran */
    pthread_t ran_on;  /* the thread it ran on */
    struct late *then; /* handed on by this one, or NULL */
} late;

static lull_percore *late_pc;
static sem_t loop0_stopped; /* loop 0's stop function ran (posted twice) */
static sem_t blocker_started;
static late lates[3];
static lull_task blocker;

static void late_run(lull_task *t) {
    late *h = LULL_CONTAINER_OF(t, late, task);
    h->runs++;
    h->ran_on = pthread_self();
    h->saw_stopping = lull_percore_stopping(late_pc);
    if (h->saw_stopping) CHECK_EQ(close(h->fd), 0);
    if (h->then)
        lull_task_post_remote(lull_percore_loop(late_pc, h->then->target),
                              &h->then->task);
}

static void late_post(late *h) {
    lull_task_post_remote(lull_percore_loop(late_pc, h->target), &h->task);
}

/* Runs on loop 1 from before the stop: hands lates[0] to loop 0 once loop
 * 0's stop function has run (the hand-off of a task running on loop 1). */
static void blocker_run(lull_task *t) {
    (void)t;
    sem_post(&blocker_started);
    sem_wait_10s(&loop0_stopped);
    late_post(&lates[0]);
}

/* Loop 0 stops first; loop 1's stop function hands lates[1] to loop 0
 * after that, and lates[1] hands lates[2] back to loop 1, whose stop
 * function has run by then too. */
static void late_stop(lull_loop *loop, int index, void *arg) {
    on_stop(loop, index, arg);
    if (index == 0) {
        sem_post(&loop0_stopped); /* one for blocker_run, one for below */
        sem_post(&loop0_stopped);
    } else {
        sem_wait_10s(&loop0_stopped);
        late_post(&lates[1]);
    }
}

/* Every hand-off that a loop of the set posts while the set stops, from a
 * stop function or from a task, to a loop whose stop function has run (and
 * whose run had ended), runs once on its target's thread; stop then frees
 * every loop and returns 0, and no connection is left open. */
TEST_THREADED(percore_stop_runs_hand_offs_posted_while_stopping) {
    memset(seen_by, 0, sizeof seen_by);
    sem_init(&loop0_stopped, 0, 0);
    sem_init(&blocker_started, 0, 0);
    int peer[3];
    const int target[3] = {0, 0, 1};
    for (int i = 0; i < 3; i++) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        lates[i] = (late){.target = target[i], .fd = sv[0]};
        lull_task_init(&lates[i].task, late_run);
        peer[i] = sv[1];
    }
    lates[1].then = &lates[2];
    lull_percore_options o = {.loops = 2, .start = on_start, .stop = late_stop};
    CHECK_EQ(lull_percore_start(&late_pc, &o), 0);
    stopping_pc = late_pc;
    lull_task_init(&blocker, blocker_run);
    lull_task_post_remote(lull_percore_loop(late_pc, 1), &blocker);
    sem_wait_10s(&blocker_started);
    CHECK_EQ(lull_percore_stop(late_pc), 0);
    stopping_pc = NULL;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(lates[i].runs, 1);
        CHECK(pthread_equal(lates[i].ran_on, seen_by[target[i]].thread));
        CHECK(lates[i].saw_stopping);
        char c;
        CHECK_EQ(read(peer[i], &c, 1), 0); /* the hand-off closed it */
        close(peer[i]);
    }
    for (int i = 0; i < 2; i++)
        CHECK_EQ(seen_by[i].stops, 1);
    sem_destroy(&loop0_stopped);
    sem_destroy(&blocker_started);
}

/* Messages bouncing between the loops while the set stops: each run hands
 * the message on to a loop of its choosing until its hops are spent,
 * stopping or not, so hand-offs keep landing on loops whose stop function
 * ran and whose run ended. The stop functions add messages of their own:
 * one to their own loop, one to the next loop, and one from a pool thread
 * (a work item posts it). Bounded by the hops; the order is left to the
 * scheduler, and every outcome must satisfy the checks. */
#define RACE_LOOPS 4
#define RACE_START 16 /* messages per loop, posted by the test */
#define RACE_STOP  3  /* messages per loop, from its stop function */
#define RACE_MSGS  (RACE_LOOPS * (RACE_START + RACE_STOP))
#define RACE_HOPS  200

typedef struct msg {
    lull_task task;
    uint64_t rng; /* picks the next loop */
    int target;   /* the loop it was posted to */
    int hops;     /* hand-offs left */
    int posts;    /* posted so far; written by the poster */
    int runs;     /* runs so far; written on the target's thread */
} msg;

static lull_percore *race_pc;
static msg race_msgs[RACE_MSGS];
static lull_pool *race_pool;
static lull_work race_work[RACE_LOOPS];
static bool race_stopped[RACE_LOOPS];       /* each loop's own thread writes */
static uint64_t race_runs, race_after_stop; /* atomic */

static void msg_post(msg *m, int target) {
    m->target = target;
    m->posts++;
    lull_task_post_remote(lull_percore_loop(race_pc, target), &m->task);
}

static void msg_run(lull_task *t) {
    msg *m = LULL_CONTAINER_OF(t, msg, task);
    CHECK(pthread_equal(pthread_self(), seen_by[m->target].thread));
    m->runs++;
    CHECK_EQ(m->runs, m->posts); /* once per post */
    __atomic_fetch_add(&race_runs, 1, __ATOMIC_RELAXED);
    if (race_stopped[m->target])
        __atomic_fetch_add(&race_after_stop, 1, __ATOMIC_RELAXED);
    if (m->hops == 0) return;
    m->hops--;
    m->rng = m->rng * 6364136223846793005ull + 1442695040888963407ull;
    msg_post(m, (int)((m->rng >> 33) % RACE_LOOPS));
}

static msg *race_msg(int loop, int k) {
    return &race_msgs[loop * (RACE_START + RACE_STOP) + k];
}

static int race_work_run(lull_work *w) {
    int i = (int)(w - race_work);
    msg_post(race_msg(i, RACE_START + 2), (i + 1) % RACE_LOOPS);
    return 0;
}

static void race_work_done(lull_work *w, int status) {
    (void)w;
    CHECK_EQ(status, 0);
}

static void race_stop(lull_loop *loop, int index, void *arg) {
    on_stop(loop, index, arg);
    race_stopped[index] = true;
    msg_post(race_msg(index, RACE_START), index);
    msg_post(race_msg(index, RACE_START + 1), (index + 1) % RACE_LOOPS);
    lull_work_init(&race_work[index], race_work_run, race_work_done);
    CHECK_EQ(lull_work_submit(loop, race_pool, &race_work[index]), 0);
}

TEST_THREADED(percore_stop_runs_hand_offs_racing_it) {
    memset(seen_by, 0, sizeof seen_by);
    memset(race_stopped, 0, sizeof race_stopped);
    race_runs = race_after_stop = 0;
    for (int i = 0; i < RACE_MSGS; i++) {
        race_msgs[i] = (msg){.rng = (uint64_t)i + 1, .hops = RACE_HOPS};
        lull_task_init(&race_msgs[i].task, msg_run);
    }
    CHECK_EQ(lull_pool_new(&race_pool, &(lull_pool_options){.threads = 2}), 0);
    lull_percore_options o = {
        .loops = RACE_LOOPS, .start = on_start, .stop = race_stop};
    CHECK_EQ(lull_percore_start(&race_pc, &o), 0);
    for (int i = 0; i < RACE_LOOPS; i++)
        for (int k = 0; k < RACE_START; k++)
            msg_post(race_msg(i, k), i);
    CHECK_EQ(lull_percore_stop(race_pc), 0);
    CHECK_EQ(lull_pool_free(race_pool), 0);
    for (int i = 0; i < RACE_MSGS; i++) {
        CHECK_EQ(race_msgs[i].hops, 0);
        CHECK_EQ(race_msgs[i].posts, RACE_HOPS + 1);
        CHECK_EQ(race_msgs[i].runs, RACE_HOPS + 1);
    }
    CHECK_EQ(race_runs, (uint64_t)RACE_MSGS * (RACE_HOPS + 1));
    /* At least the hops of the messages each stop function posted to its
     * own loop ran there after it. */
    CHECK(race_after_stop >= (uint64_t)RACE_LOOPS);
    printf("%" PRIu64 " hand-offs, %" PRIu64 " on a loop whose stop had run\n",
           race_runs, race_after_stop);
    for (int i = 0; i < RACE_LOOPS; i++)
        CHECK_EQ(seen_by[i].stops, 1);
}

/* A lull_loop_stop on one of the loops ends that run only: the thread runs its
 * loop again, and a hand-off posted afterwards still runs there. */
static void stop_the_run(lull_task *t) {
    (void)t;
    lull_loop_stop(seen_by[0].loop);
}

TEST_THREADED(percore_lull_stop_ends_one_run_only) {
    memset(seen_by, 0, sizeof seen_by);
    lull_percore *pc;
    lull_percore_options o = {.loops = 1, .start = on_start, .stop = on_stop};
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    sem_t ran;
    sem_init(&ran, 0, 0);
    lull_task stopper;
    lull_task_init(&stopper, stop_the_run);
    lull_task_post_remote(lull_percore_loop(pc, 0), &stopper);
    hand h = {.ran = &ran};
    lull_task_init(&h.task, hand_run);
    lull_task_post_remote(lull_percore_loop(pc, 0), &h.task);
    sem_wait_10s(&ran);
    CHECK(pthread_equal(h.ran_on, seen_by[0].thread));
    CHECK_EQ(lull_percore_stop(pc), 0);
    CHECK_EQ(seen_by[0].stops, 1);
    sem_destroy(&ran);
}

/* ------------------------------------------------- stop misuse, bounces */

/* lull_percore_stop from a lull_work function on a pool: the work's loop,
 * one of the set's, holds a reference for it until its done runs, so the
 * stop would wait for the very thread it blocks. Refused like a stop from
 * a loop's own thread (-EDEADLK); the real stop then works. */
static lull_percore *pool_pc;
static lull_pool *pool_of_pc;
static lull_work pool_work;
static lull_task pool_submit;
static int pool_stop_rc = 1, pool_done_status = 1;
static sem_t pool_done;

static int stop_from_work(lull_work *w) {
    (void)w;
    pool_stop_rc = lull_percore_stop(pool_pc);
    return 0;
}

static void work_done(lull_work *w, int status) {
    (void)w;
    pool_done_status = status;
    sem_post(&pool_done);
}

static void submit_stopper(lull_task *t) {
    (void)t;
    lull_loop *loop = lull_percore_loop(pool_pc, 0);
    CHECK_EQ(lull_work_init(&pool_work, stop_from_work, work_done), 0);
    CHECK_EQ(lull_work_submit(loop, pool_of_pc, &pool_work), 0);
}

TEST_THREADED(percore_stop_from_a_pool_thread_is_refused) {
    CHECK_EQ(lull_pool_new(&pool_of_pc, &(lull_pool_options){.threads = 1}), 0);
    lull_percore_options o = {.loops = 1};
    CHECK_EQ(lull_percore_start(&pool_pc, &o), 0);
    sem_init(&pool_done, 0, 0);
    lull_task_init(&pool_submit, submit_stopper);
    lull_task_post_remote(lull_percore_loop(pool_pc, 0), &pool_submit);
    sem_wait_10s(&pool_done);
    CHECK_EQ(pool_stop_rc, -EDEADLK);
    CHECK_EQ(pool_done_status, 0);
    CHECK_EQ(lull_percore_stop(pool_pc), 0);
    CHECK_EQ(lull_pool_free(pool_of_pc), 0);
    sem_destroy(&pool_done);
}

/* A program that ignores lull_percore_stopping: a task handed back and
 * forth between two loops for ever. The stop waits, as it must, but after
 * a bounded number of rounds it names what is still being handed off, on
 * stderr, once. Here the bounce stops on its own a while after the message
 * (or, without one, after many more hops than the bound, so a missing
 * message fails the case rather than hanging it). */
#define BOUNCE_LIMIT 200000
#define BOUNCE_AFTER 5000

typedef struct bouncer {
    lull_task task;
    int at;      /* the loop it runs on */
    int hops;    /* hand-offs made */
    int after;   /* hand-offs made since the message appeared */
    int read_fd; /* the captured stderr's read end */
} bouncer;

static lull_percore *bounce_pc;
static bouncer bouncing;

static bool message_seen(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

static void bounce_run(lull_task *t) {
    bouncer *b = LULL_CONTAINER_OF(t, bouncer, task);
    if (b->after > 0 || message_seen(b->read_fd)) b->after++;
    if (b->after >= BOUNCE_AFTER || ++b->hops >= BOUNCE_LIMIT) return;
    b->at = 1 - b->at;
    lull_task_post_remote(lull_percore_loop(bounce_pc, b->at), t);
}

static void name_bouncer(lull_loop *loop, int index, void *arg) {
    (void)index;
    (void)arg;
    CHECK_EQ(lull_loop_name(loop, (lull_any_fn)bounce_run, "bounce_run"), 0);
}

TEST_THREADED(percore_stop_names_hand_offs_that_keep_bouncing) {
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    lull_percore_options o = {.loops = 2, .start = name_bouncer};
    CHECK_EQ(lull_percore_start(&bounce_pc, &o), 0);
    bouncing = (bouncer){.read_fd = p[0]};
    lull_task_init(&bouncing.task, bounce_run);
    fflush(stderr);
    int saved = dup(2);
    CHECK(saved >= 0);
    CHECK_EQ(dup2(p[1], 2), 2);
    lull_task_post_remote(lull_percore_loop(bounce_pc, 0), &bouncing.task);
    int rc = lull_percore_stop(bounce_pc);
    fflush(stderr);
    CHECK_EQ(dup2(saved, 2), 2);
    close(saved);
    CHECK_EQ(rc, 0);
    static char out[16384];
    ssize_t n = read(p[0], out, sizeof out - 1);
    CHECK(n > 0);
    out[n] = '\0';
    fputs(out, stderr);                  /* for whoever reads the log */
    CHECK(bouncing.hops < BOUNCE_LIMIT); /* the message came, and ended it */
    const char *what = "lull_percore_stop: hand-offs still going";
    const char *first = strstr(out, what);
    CHECK(first != NULL);
    CHECK(strstr(first + 1, what) == NULL); /* once */
    CHECK(strstr(out, "bounce_run") != NULL);
    printf("%d hand-offs, %d of them after the message\n", bouncing.hops,
           bouncing.after);
    close(p[0]);
    close(p[1]);
}

/* ------------------------------------------------------- bad arguments */

/* A loop count far past any machine (a negative number cast to int, an
 * uninitialised field) is refused up front, as a negative one is, rather
 * than allocating a slot per loop and starting threads until the system
 * refuses one. */
TEST_THREADED(percore_refuses_a_loop_count_past_any_machine) {
    const int counts[] = {INT_MAX, 1 << 20, CPU_SETSIZE + 1, -1, INT_MIN};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        lull_percore_options o = {.loops = counts[i]};
        lull_percore *pc = (lull_percore *)&o; /* must be cleared */
        CHECK_EQ(lull_percore_start(&pc, &o), -EINVAL);
        CHECK(pc == NULL);
    }
}

/* More loops than CPUs is fine (tests, oversubscribed containers), and so
 * are missing start and stop functions. */
TEST_THREADED(percore_more_loops_than_cpus_without_start_or_stop) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    lull_percore_options o = {.loops = CPU_COUNT(&set) + 2};
    lull_percore *pc = NULL;
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    CHECK_EQ(lull_percore_count(pc), CPU_COUNT(&set) + 2);
    CHECK_EQ(lull_percore_stop(pc), 0);
}

/* A set with a loop count of its own and no pinning needs no CPU mask: a
 * sandbox that denies sched_getaffinity (a seccomp filter), or a machine
 * with more CPUs than a cpu_set_t names (EINVAL), must not keep it from
 * starting. Pinning, and a count taken from the mask, still need it and
 * report its error. */
static void start_with_getaffinity_denied(void *arg) {
    (void)arg;
#ifdef CHECK_SANDBOX_ARCH
    /* ENOSYS, as newer runtimes answer a call they do not know: the
     * sanitizers' thread start reads the mask too, and glibc lets that
     * error alone pass (pthread_getattr_np). */
    check_deny_syscalls((const int[]){SYS_sched_getaffinity}, 1, ENOSYS);
    cpu_set_t set;
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), -1); /* in force */
    lull_percore_options o = {.loops = 2};
    lull_percore *pc = NULL;
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    CHECK_EQ(lull_percore_count(pc), 2);
    CHECK_EQ(lull_percore_stop(pc), 0);
    o.pin = true;
    CHECK_EQ(lull_percore_start(&pc, &o), -ENOSYS);
    CHECK(pc == NULL);
    o = (lull_percore_options){0};
    CHECK_EQ(lull_percore_start(&pc, &o), -ENOSYS);
    CHECK(pc == NULL);
#endif
}

TEST_THREADED(percore_unpinned_with_a_count_needs_no_cpu_mask) {
    CHECK(check_exits_cleanly(start_with_getaffinity_denied, NULL));
}

/* ------------------------------------------- thread creation that fails */

/* pthread_create, wrapped for this binary (tests/CMakeLists.txt): while
 * fail_create_at > 0, the call with that number (1-based, counted from
 * when it was set) fails with EAGAIN, as it does past RLIMIT_NPROC. */
static int fail_create_at;
static int creates_seen;
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a,
                          void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a,
                          void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a,
                          void *(*fn)(void *), void *arg) {
    if (fail_create_at > 0 && ++creates_seen == fail_create_at) return EAGAIN;
    return __real_pthread_create(t, a, fn, arg);
}

static int starts, stops_undone;
static void count_start(lull_loop *loop, int index, void *arg) {
    (void)loop;
    (void)index;
    (void)arg;
    __atomic_fetch_add(&starts, 1, __ATOMIC_RELAXED);
}
static void count_stop(lull_loop *loop, int index, void *arg) {
    (void)loop;
    (void)index;
    (void)arg;
    __atomic_fetch_add(&stops_undone, 1, __ATOMIC_RELAXED);
}

/* The k-th thread cannot be created: the loops already started are
 * stopped (their stop functions undo their start functions), joined and
 * freed, and the error is returned with *out NULL. */
TEST_THREADED(percore_start_undone_when_a_thread_cannot_be_created) {
    for (int at = 1; at <= 4; at++) {
        starts = stops_undone = 0;
        creates_seen = 0;
        fail_create_at = at;
        lull_percore_options o = {
            .loops = 4, .start = count_start, .stop = count_stop};
        lull_percore *pc = (lull_percore *)&o;
        CHECK_EQ(lull_percore_start(&pc, &o), -EAGAIN);
        fail_create_at = 0;
        CHECK(pc == NULL);
        CHECK_EQ(starts, at - 1);
        CHECK_EQ(stops_undone, at - 1);
    }
    lull_percore_options o = {.loops = 2};
    lull_percore *pc = NULL;
    CHECK_EQ(lull_percore_start(&pc, &o), 0); /* and works again after */
    CHECK_EQ(lull_percore_stop(pc), 0);
}

/* ----------------------------------------------------- out of memory */

/* malloc, calloc and realloc, wrapped for this binary (tests/CMakeLists.txt):
 * while fail_alloc_at > 0, the allocation with that number (1-based,
 * counted from when it was set, on any thread) fails. */
static int fail_alloc_at;
static int allocs_seen;
static bool alloc_fails(void) {
    return __atomic_load_n(&fail_alloc_at, __ATOMIC_RELAXED) > 0 &&
           __atomic_add_fetch(&allocs_seen, 1, __ATOMIC_RELAXED) ==
               __atomic_load_n(&fail_alloc_at, __ATOMIC_RELAXED);
}
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) {
    return alloc_fails() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t k, size_t n) {
    return alloc_fails() ? NULL : __real_calloc(k, n);
}
void *__wrap_realloc(void *p, size_t n) {
    return alloc_fails() ? NULL : __real_realloc(p, n);
}

/* Each allocation of a start in turn fails: the start either succeeds (the
 * allocation was not needed) or returns -ENOMEM with everything undone;
 * the sanitizer builds see any leak. */
TEST_THREADED(percore_start_undone_when_an_allocation_fails) {
    bool failed_once = false;
    for (int at = 1; at <= 200; at++) {
        starts = stops_undone = 0;
        __atomic_store_n(&allocs_seen, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&fail_alloc_at, at, __ATOMIC_RELAXED);
        lull_percore_options o = {
            .loops = 3, .start = count_start, .stop = count_stop};
        lull_percore *pc = (lull_percore *)&o;
        int rc = lull_percore_start(&pc, &o);
        __atomic_store_n(&fail_alloc_at, 0, __ATOMIC_RELAXED);
        if (rc == 0) {
            CHECK(pc != NULL);
            CHECK_EQ(lull_percore_stop(pc), 0);
            CHECK_EQ(starts, 3);
            CHECK_EQ(stops_undone, 3);
            if (__atomic_load_n(&allocs_seen, __ATOMIC_RELAXED) < at) break;
            continue;
        }
        failed_once = true;
        CHECK_EQ(rc, -ENOMEM);
        CHECK(pc == NULL);
        CHECK_EQ(stops_undone, starts);
    }
    CHECK(failed_once);
}

/* ------------------------------------- the set's reference dropped */

/* A start function that drops the reference its loop holds for the set (an
 * unref with no ref of its own): the loop no longer waits for remote posts,
 * so its thread spun on runs that returned at once, never took the stop
 * task, and lull_percore_stop never returned. The set takes its reference
 * back, says so on stderr, and stops normally. */
static void unref_at_start(lull_loop *loop, int index, void *arg) {
    (void)index;
    (void)arg;
    lull_loop_unref(loop);
}

typedef struct stopper {
    lull_percore *pc;
    int rc;
    sem_t done;
} stopper;

static void *stop_in_thread(void *arg) {
    stopper *st = arg;
    st->rc = lull_percore_stop(st->pc);
    sem_post(&st->done);
    return NULL;
}

TEST_THREADED(percore_start_that_drops_the_sets_reference_still_stops) {
    lull_percore_options o = {.loops = 2, .start = unref_at_start};
    stopper st = {0};
    CHECK_EQ(lull_percore_start(&st.pc, &o), 0);
    sem_t ran;
    sem_init(&ran, 0, 0);
    hand h = {.ran = &ran};
    lull_task_init(&h.task, hand_run);
    lull_task_post_remote(lull_percore_loop(st.pc, 1), &h.task);
    sem_wait_10s(&ran); /* hand-offs still run */
    sem_init(&st.done, 0, 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, stop_in_thread, &st), 0);
    sem_wait_10s(&st.done);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(st.rc, 0);
    sem_destroy(&st.done);
    sem_destroy(&ran);
}

/* A set of virtual-clock loops that may jump to their timers
 * (LULL_LOOP_AUTO_ADVANCE): a timer its stop function arms is runnable
 * work like a task, so a lull_loop_stop made with it armed ends one run
 * only, and the stop waits for the timer to fire. */
static lull_timer last_timer;
static int last_timer_runs;

static void last_timer_fired(lull_timer *t) {
    (void)t;
    last_timer_runs++;
}

static void arm_and_stop_the_run(lull_loop *loop, int index, void *arg) {
    (void)index, (void)arg;
    CHECK_EQ(lull_timer_init(loop, &last_timer, last_timer_fired), 0);
    lull_timer_start(&last_timer, LULL_S(3600), 0);
    lull_loop_stop(loop);
}

TEST_THREADED(percore_auto_advance_stop_waits_for_a_timer_armed_by_stop) {
    last_timer_runs = 0;
    lull_percore *pc;
    lull_percore_options o = {
        .loops = 1,
        .stop = arm_and_stop_the_run,
        .loop = {.clock = LULL_CLOCK_VIRTUAL, .flags = LULL_LOOP_AUTO_ADVANCE}};
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    CHECK_EQ(lull_percore_stop(pc), 0);
    CHECK_EQ(last_timer_runs, 1);
}

/* A second lull_percore_stop of a set already stopped (a clean-up path run
 * twice) read the freed set and joined threads long gone. It is refused
 * with -EINVAL without touching the memory (the sanitizer builds would see
 * the read). */
TEST_THREADED(percore_stop_twice_is_refused) {
    lull_percore_options o = {.loops = 2};
    lull_percore *pc = NULL;
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    lull_percore *other = NULL;
    CHECK_EQ(lull_percore_start(&other, &o), 0);
    CHECK_EQ(lull_percore_stop(pc), 0);
    CHECK_EQ(lull_percore_stop(pc), -EINVAL);
    CHECK_EQ(lull_percore_count(other), 2); /* the other set is untouched */
    CHECK_EQ(lull_percore_stop(other), 0);
    CHECK_EQ(lull_percore_stop(other), -EINVAL);
    int not_a_set;
    CHECK_EQ(lull_percore_stop((lull_percore *)&not_a_set), -EINVAL);
}

/* A forked child holds a copy of the set and none of its threads: a stop
 * there is refused (-EINVAL) at once, where it would post to loops nobody
 * runs and join threads that are not there; the parent's set is
 * untouched and stops as ever. */
TEST_THREADED(percore_stop_in_a_forked_child_is_refused) {
    lull_percore_options o = {.loops = 2};
    lull_percore *pc = NULL;
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        alarm(10); /* a hang fails the child, not the whole case's timeout */
        _exit(lull_percore_stop(pc) == -EINVAL ? 0 : 1);
    }
    int status = 0;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK_EQ(lull_percore_count(pc), 2);
    CHECK_EQ(lull_percore_stop(pc), 0);
}

/* A fork() made while another thread stops a set: the list of sets has a
 * lock, held for the stop's look-up, with no fork handlers at all, so the
 * copy could get it taken for good and its next lull_percore_start or
 * lull_percore_stop waited forever. The wrapped getpid (the look-up's
 * check that this process started the set) holds the stopping thread
 * inside the lock until the fork is made or waits for the lock (the main
 * thread asleep on a futex: a fork handler's). */
pid_t __real_getpid(void);
pid_t __wrap_getpid(void);

static struct {
    atomic_int tid;      /* the thread to hold in getpid; 0: none */
    atomic_int main_tid; /* the thread that forks */
    atomic_bool entered; /* the held thread is inside the lock */
    atomic_bool forked;  /* the fork is made: let it go on */
} stop_hold;

pid_t __wrap_getpid(void) {
    if (atomic_load(&stop_hold.tid) == (int)syscall(SYS_gettid)) {
        atomic_store(&stop_hold.entered, true);
        uint64_t give_up = check_clock_ns() + 10000000000u;
        while (!atomic_load(&stop_hold.forked) &&
               !check_in_futex_wait(atomic_load(&stop_hold.main_tid)) &&
               check_clock_ns() < give_up)
            usleep(100);
        atomic_store(&stop_hold.tid, 0);
    }
    return __real_getpid();
}

static void stop_hold_forked(void) {
    atomic_store(&stop_hold.forked, true);
}

/* The stopper outlives the fork: a thread that had ended, unjoined, when
 * the fork was made (the stop done while the fork waited for the lock) is
 * one the copy never joins, and ThreadSanitizer fails the copy's exit for
 * that leak (a fifth of the runs under load); a thread still running at
 * the fork is not reported. */
static void *stopper_run(void *arg) {
    atomic_store(&stop_hold.tid, (int)syscall(SYS_gettid));
    CHECK_EQ(lull_percore_stop(arg), 0);
    uint64_t give_up = check_clock_ns() + 10000000000u;
    while (!atomic_load(&stop_hold.forked) && check_clock_ns() < give_up)
        usleep(100);
    return NULL;
}

static void stop_in_copy(void *arg) {
    alarm(10); /* a copy that waits on a lock taken for good fails */
    /* Refused either way: the set is the parent's, or already off the
     * list when the fork waited for the stop to leave the lock. */
    CHECK_EQ(lull_percore_stop(arg), -EINVAL);
    alarm(0);
}

TEST_THREADED(percore_fork_while_another_thread_stops_a_set) {
    CHECK_EQ(pthread_atfork(NULL, stop_hold_forked, NULL), 0);
    atomic_store(&stop_hold.main_tid, (int)syscall(SYS_gettid));
    lull_percore_options o = {.loops = 1};
    lull_percore *pc = NULL;
    CHECK_EQ(lull_percore_start(&pc, &o), 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, stopper_run, pc), 0);
    for (int i = 0; i < 100000 && !atomic_load(&stop_hold.entered); i++)
        usleep(100);
    CHECK(atomic_load(&stop_hold.entered));
    bool copy_ok = check_exits_cleanly(stop_in_copy, pc);
    atomic_store(&stop_hold.forked, true);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(copy_ok);
}

/* ------------------------------------------------ out of fds at start */

/* RLIMIT_NOFILE lowered to leave n fds free, n from none up: a start whose
 * loops cannot all make their epoll set and eventfd returns -EMFILE with
 * everything undone (the loops that were made freed, their start
 * functions' work stopped, the threads joined, no fd left open), and the
 * first n that suffices starts the set, which then stops cleanly. */
static int open_fd_count(void) {
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) >= 0) n++;
    return n;
}

TEST_THREADED(percore_start_out_of_fds_is_undone_then_works) {
    struct rlimit old;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    int before = open_fd_count();
    bool failed_once = false, started = false;
    for (int n = 0; n <= 32 && !started; n++) {
        starts = stops_undone = 0;
        lull_percore_options o = {
            .loops = 3, .start = count_start, .stop = count_stop};
        lull_percore *pc = NULL;
        int probe = dup(0);
        CHECK(probe >= 0);
        close(probe);
        struct rlimit low = old;
        low.rlim_cur = (rlim_t)(probe + n);
        CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
        int rc = lull_percore_start(&pc, &o);
        CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
        if (rc == 0) {
            started = true;
            CHECK_EQ(starts, 3);
            CHECK_EQ(lull_percore_stop(pc), 0);
            CHECK_EQ(stops_undone, 3);
        } else {
            failed_once = true;
            CHECK_EQ(rc, -EMFILE);
            CHECK(pc == NULL);
            CHECK_EQ(stops_undone, starts);
        }
        CHECK_EQ(open_fd_count(), before);
    }
    CHECK(failed_once);
    CHECK(started);
}

/* NULL sets: a count of 0, no loop, not stopping, stop refused; a set's
 * loop asked out of range at either end is NULL. */
TEST_THREADED(percore_null_and_out_of_range_arguments) {
    CHECK_EQ(lull_percore_count(NULL), 0);
    CHECK(lull_percore_loop(NULL, 0) == NULL);
    CHECK(lull_percore_next(NULL) == NULL);
    CHECK(!lull_percore_stopping(NULL));
    CHECK_EQ(lull_percore_stop(NULL), -EINVAL);
    CHECK_EQ(lull_percore_start(NULL, NULL), -EINVAL);
    lull_percore *pc = NULL;
    CHECK_EQ(lull_percore_start(&pc, &(lull_percore_options){.loops = -1}),
             -EINVAL);
    CHECK(pc == NULL);
    CHECK_EQ(lull_percore_start(&pc, &(lull_percore_options){.loops = 1}), 0);
    CHECK(lull_percore_loop(pc, INT_MAX) == NULL);
    CHECK(lull_percore_loop(pc, INT_MIN) == NULL);
    CHECK(lull_percore_loop(pc, 0) != NULL);
    CHECK(lull_percore_next(pc) == lull_percore_loop(pc, 0));
    CHECK_EQ(lull_percore_stop(pc), 0);
}
