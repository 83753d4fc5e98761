/* No allocation on the hot path: malloc, calloc, realloc and free
 * are wrapped at link time (tests/CMakeLists.txt passes --wrap for this
 * binary, and links lull statically so the library's calls are wrapped too)
 * and counted while a measured region runs. Setup may allocate: loops,
 * names, a timer heap growing to its working size. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <stddef.h>
#include <sys/socket.h>
#include <unistd.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void __real_free(void *p);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void __wrap_free(void *p);

/* Relaxed atomics: the pool case counts its threads' calls too. */
static bool counting;
static uint64_t allocs, frees;

static bool counting_now(void) {
    return __atomic_load_n(&counting, __ATOMIC_RELAXED);
}

void *__wrap_malloc(size_t size) {
    if (counting_now()) __atomic_fetch_add(&allocs, 1, __ATOMIC_RELAXED);
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size) {
    if (counting_now()) __atomic_fetch_add(&allocs, 1, __ATOMIC_RELAXED);
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size) {
    if (counting_now()) __atomic_fetch_add(&allocs, 1, __ATOMIC_RELAXED);
    return __real_realloc(p, size);
}

void __wrap_free(void *p) {
    if (counting_now() && p) __atomic_fetch_add(&frees, 1, __ATOMIC_RELAXED);
    __real_free(p);
}

static void measure_begin(void) {
    allocs = frees = 0;
    __atomic_store_n(&counting, true, __ATOMIC_RELAXED);
}

static void measure_end(const char *what) {
    __atomic_store_n(&counting, false, __ATOMIC_RELAXED);
    if (allocs || frees)
        check_fail(__FILE__, __LINE__,
                   "%s: %" PRIu64 " allocations, %" PRIu64 " frees", what,
                   allocs, frees);
}

static lull_loop *the_loop;
static uint64_t calls;

static lull_loop *new_loop(int clock) {
    lull_loop_options o = {.clock = clock};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    calls = 0;
    return loop;
}

/* The wrap is live: a plain malloc is counted. */
TEST(wrap_counts) {
    /* Through volatile pointers, so the compiler cannot elide the pair. */
    void *(*volatile do_malloc)(size_t) = malloc;
    void (*volatile do_free)(void *) = free;
    measure_begin();
    void *p = do_malloc(16);
    do_free(p);
    counting = false;
    CHECK(p != NULL);
    CHECK_U64_EQ(allocs, 1);
    CHECK_U64_EQ(frees, 1);
}

static void count_task(lull_task *t) {
    (void)t;
    calls++;
}

static int chain_left;
static void chain_hop(lull_task *t) {
    calls++;
    if (--chain_left > 0) lull_task_post(the_loop, t);
}

TEST(post_and_run_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_task t, chain;
    lull_task_init(&t, count_task);
    lull_task_init(&chain, chain_hop);
    lull_task_post(loop, &t); /* warm up: the first run's lazy setup */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);

    measure_begin();
    for (int i = 0; i < 100000; i++) {
        lull_task_post(loop, &t);
        lull_loop_run(loop, LULL_RUN_DEFAULT);
    }
    measure_end("100,000 posts + runs");
    CHECK_U64_EQ(calls, 100001);

    measure_begin();
    chain_left = 100000;
    lull_task_post(loop, &chain);
    lull_loop_run(loop, LULL_RUN_DEFAULT);
    lull_task_post(loop, &t);
    lull_task_cancel(&t);
    measure_end("a 100,000-hop chain, post + cancel");
    CHECK_EQ(chain_left, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(remote_post_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_task t;
    lull_task_init(&t, count_task);
    lull_task_post_remote(loop, &t);
    CHECK_EQ(lull_loop_settle(loop), 1);

    measure_begin();
    for (int i = 0; i < 10000; i++) {
        lull_task_post_remote(loop, &t);
        lull_loop_settle(loop);
    }
    measure_end("10,000 remote posts + settles");
    CHECK_U64_EQ(calls, 10001);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Timers: the heap is warmed to its working size (11,000 armed), then
 * 100,000 starts and stops with 10,000 staying armed, zero-delay ones, and
 * advances that fire some. */
#define WARM 11000
#define STAY 10000

static void count_timer(lull_timer *t) {
    (void)t;
    calls++;
}

TEST(timer_start_stop_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_timer *timers = calloc(WARM, sizeof *timers);
    CHECK(timers != NULL);
    for (int i = 0; i < WARM; i++) {
        lull_timer_init(loop, &timers[i], count_timer);
        lull_timer_start(&timers[i], 1000000000 + (uint64_t)i, 0);
    }
    for (int i = STAY; i < WARM; i++)
        lull_timer_stop(&timers[i]);

    uint64_t r = 88172645463325252ull;
    measure_begin();
    for (int i = 0; i < 100000; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        lull_timer *t = &timers[STAY + (int)(r % (WARM - STAY))];
        lull_timer_start(t, 1 + r % 1000000, (i & 7) == 0 ? 1000 : 0);
        if (i & 1) lull_timer_stop(t);
        if ((i & 1023) == 0) lull_loop_advance(loop, 100);
    }
    for (int i = STAY; i < WARM; i++) {
        lull_timer_start(&timers[i], 0, 0); /* zero delay: the ready queue */
        lull_timer_stop(&timers[i]);
        lull_timer_start(&timers[i], 0, 0);
    }
    lull_loop_settle(loop);
    for (int i = 0; i < WARM; i++)
        lull_timer_stop(&timers[i]);
    measure_end("100,000 timer starts and stops");
    CHECK_LE(WARM - STAY, calls);
    free(timers);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Loop iterations: non-blocking and blocking polls, fd callbacks, timers
 * firing on the real clock, metrics reads. */
static int rfd;
static void drain_io(lull_io *io, int events) {
    (void)io;
    (void)events;
    char buf[64];
    while (read(rfd, buf, sizeof buf) > 0) {
    }
    calls++;
}

TEST(run_iterations_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    rfd = fds[0];
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[0], drain_io), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    lull_timer zero, tick;
    lull_timer_init(loop, &zero, count_timer);
    lull_timer_init(loop, &tick, count_timer);
    CHECK_EQ(write(fds[1], "x", 1), 1);
    lull_timer_start(&tick, 100000, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0); /* warm up */
    lull_metrics m;

    measure_begin();
    for (int i = 0; i < 1000; i++) {
        if (write(fds[1], "x", 1) != 1) break;
        lull_timer_start(&zero, 0, 0);
        lull_loop_run(loop, LULL_RUN_NOWAIT);
        lull_loop_metrics(loop, &m);
    }
    for (int i = 0; i < 20; i++) { /* blocking waits for a real timer */
        lull_timer_start(&tick, 200000, 0);
        lull_loop_run(loop, LULL_RUN_ONCE);
    }
    lull_loop_metrics_reset(loop);
    measure_end("1,000 NOWAIT and 20 blocking iterations");
    CHECK_LE(2000, calls);
    lull_timer_stop(&tick);
    lull_io_stop(&io);
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Notifier, listeners and the pump: raise, deliver, hold, retry. */
static void count_listener(lull_listener *l) {
    (void)l;
    calls++;
}

static int pass_mode; /* what the next pass reports */
static uint64_t passes;
static lull_pass_result pass_fn(lull_pump *pump, uint64_t *retry_ns) {
    (void)pump;
    passes++;
    int mode = pass_mode;
    pass_mode = LULL_PASS_QUIET;
    if (mode == LULL_PASS_HELD) *retry_ns = 100;
    return mode;
}

TEST(notify_and_pump_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_notifier n;
    lull_listener ls[3], pl;
    lull_pump pump;
    lull_notifier_init(&n);
    for (int i = 0; i < 3; i++)
        lull_listener_start(loop, &n, &ls[i], count_listener);
    lull_pump_init(loop, &pump, pass_fn);
    lull_pump_listen(&pump, &n, &pl);
    /* Warm up, with a held pass: the first retry timer creates the timer
     * heap (setup, not the hot path). */
    pass_mode = LULL_PASS_HELD;
    lull_notifier_raise(&n);
    lull_loop_settle(loop);
    CHECK(!lull_pump_quiet(&pump));
    lull_loop_advance(loop, 100);
    CHECK(lull_pump_quiet(&pump));
    CHECK_EQ(calls, 3);
    CHECK_U64_EQ(passes, 2);

    measure_begin();
    for (int i = 0; i < 10000; i++) {
        lull_notifier_raise(&n);
        lull_notifier_raise(&n);
        pass_mode = i % 3; /* quiet, again, held */
        lull_loop_settle(loop);
        lull_pump_wake(&pump);
        lull_loop_advance(loop, 100); /* a held pass retries */
    }
    measure_end("10,000 notify + pump passes");
    CHECK_U64_EQ(calls, 3 + 3 * 10000);
    CHECK_LE(20000, passes);
    CHECK(lull_pump_quiet(&pump));
    for (int i = 0; i < 3; i++)
        lull_listener_stop(&ls[i]);
    lull_listener_stop(&pl);
    lull_pump_close(&pump);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The loopback's hand-over path: caller-owned frames sent both ways,
 * delivered one per task and released, with drains (a high-water mark of
 * one frame) and a close and a new pair every 1,000 frames. The copy path
 * allocates by contract and is not measured. */
typedef struct lb_end {
    lull_loopback lb;
    lull_frame frame; /* this end's one frame, re-sent when released */
    uint64_t payload;
    uint64_t got;
} lb_end;

static lb_end lb_ends[2];
static uint64_t lb_left;

static void lb_on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    lb_end *e = LULL_CONTAINER_OF(ep, lb_end, lb.ep);
    (void)bytes;
    (void)len;
    e->got++;
    calls++;
}

static void lb_send_back(lull_endpoint *ep) {
    lb_end *e = LULL_CONTAINER_OF(ep, lb_end, lb.ep);
    if (lb_left == 0) return;
    lb_left--;
    lull_endpoint_send(ep, &e->frame);
}

static void lb_release(lull_frame *f) {
    (void)f;
}

static void lb_pair(lull_loop *loop) {
    lull_loopback_options o = {.high_water = sizeof(uint64_t)};
    CHECK_EQ(lull_loopback_pair(loop, &lb_ends[0].lb, &lb_ends[1].lb, &o), 0);
    for (int i = 0; i < 2; i++) {
        lb_end *e = &lb_ends[i];
        e->frame = (lull_frame){.bytes = &e->payload,
                                .len = sizeof e->payload,
                                .release = lb_release};
        /* Each frame fills its sender to the mark: every delivery is a
         * crossing, and the drain sends the next one. */
        lull_endpoint_set_callbacks(&e->lb.ep, lb_on_frame, lb_send_back, NULL);
    }
}

TEST(loopback_handover_no_alloc) {
    for (int clock = 0; clock < 2; clock++) {
        lull_loop *loop = new_loop(clock);
        lb_pair(loop);
        lb_left = 10;
        lb_send_back(&lb_ends[0].lb.ep); /* warm up */
        lb_send_back(&lb_ends[1].lb.ep);
        if (clock == LULL_CLOCK_VIRTUAL) {
            lull_loop_settle(loop);
        } else {
            lull_loop_run(loop, LULL_RUN_DEFAULT);
        }
        calls = 0;

        measure_begin();
        for (int round = 0; round < 100; round++) {
            lb_left = 1000;
            lb_send_back(&lb_ends[0].lb.ep);
            lb_send_back(&lb_ends[1].lb.ep);
            if (clock == LULL_CLOCK_VIRTUAL) {
                lull_loop_settle(loop);
            } else {
                lull_loop_run(loop, LULL_RUN_DEFAULT);
            }
            lull_endpoint_close(&lb_ends[0].lb.ep, 0);
            lull_endpoint_close(&lb_ends[1].lb.ep, 0);
            lb_pair(loop);
        }
        measure_end("100,000 frames handed over through a loopback pair");
        CHECK_U64_EQ(calls, 100 * 1000);
        lull_endpoint_close(&lb_ends[0].lb.ep, 0);
        lull_endpoint_close(&lb_ends[1].lb.ep, 0);
        CHECK_EQ(lull_loop_free(loop), 0);
    }
}

/* Streams: a frame handed over with a release callback is queued, written,
 * released, read and delivered without an allocation (the read buffer is
 * allocated once, when the stream is set up). */
typedef struct st_end {
    lull_stream s;
    lull_frame frame;
    uint64_t payload;
    int left;
} st_end;

static st_end st_ends[2];

static void st_on_frame(lull_endpoint *ep, const void *b, size_t n) {
    (void)b;
    (void)n;
    st_end *e = LULL_CONTAINER_OF(ep, st_end, s.ep);
    calls++;
    if (e->left > 0 && !e->frame.in_flight) {
        e->left--;
        lull_endpoint_send(ep, &e->frame);
    }
}

TEST(stream_handover_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    for (int i = 0; i < 2; i++) {
        st_end *e = &st_ends[i];
        CHECK_EQ(lull_stream_open(loop, &e->s, sv[i], NULL), 0);
        e->frame = (lull_frame){.bytes = &e->payload, .len = sizeof e->payload};
        lull_endpoint_set_callbacks(&e->s.ep, st_on_frame, NULL, NULL);
    }
    st_ends[0].left = 5; /* warm up */
    st_ends[1].left = 5;
    lull_endpoint_send(&st_ends[0].s.ep, &st_ends[0].frame);
    while (calls < 11)
        lull_loop_run(loop, LULL_RUN_ONCE);

    calls = 0;
    measure_begin();
    st_ends[0].left = 5000;
    st_ends[1].left = 5000;
    lull_endpoint_send(&st_ends[0].s.ep, &st_ends[0].frame);
    while (calls < 10001)
        lull_loop_run(loop, LULL_RUN_ONCE);
    measure_end("10,000 frames over a socket stream");
    lull_endpoint_close(&st_ends[0].s.ep, 0);
    lull_endpoint_close(&st_ends[1].s.ep, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The worker pool: a submission, its run on a pool thread and its done on
 * the loop allocate nothing, on either thread (the lull_work is the
 * caller's; threads and the pool were made before). */
static lull_pool *alloc_pool;
static int work_left;

static int empty_work(lull_work *w) {
    (void)w;
    return 0;
}

static void work_again(lull_work *w, int status) {
    CHECK(status == 0 || status == -ECANCELED);
    calls++;
    if (--work_left > 0) CHECK_EQ(lull_work_submit(the_loop, alloc_pool, w), 0);
}

TEST_THREADED(pool_submit_run_done_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    CHECK_EQ(lull_pool_new(&alloc_pool, &(lull_pool_options){.threads = 2}), 0);
    lull_work w[4];
    for (int i = 0; i < 4; i++)
        lull_work_init(&w[i], empty_work, work_again);
    work_left = 1; /* warm up: every lazy first use */
    CHECK_EQ(lull_work_submit(loop, alloc_pool, &w[0]), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);

    measure_begin();
    work_left = 10000;
    for (int i = 0; i < 4; i++)
        CHECK_EQ(lull_work_submit(loop, alloc_pool, &w[i]), 0);
    lull_loop_run(loop, LULL_RUN_DEFAULT);
    CHECK_EQ(lull_work_submit(loop, alloc_pool, &w[0]), 0);
    int rc = lull_work_cancel(&w[0]); /* 0, or -EBUSY: it already ran */
    CHECK(rc == 0 || rc == -EBUSY);
    lull_loop_run(loop, LULL_RUN_DEFAULT);
    measure_end("10,000 pool round trips, a cancel");
    CHECK_EQ(lull_pool_free(alloc_pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A spawn and its exit: once the process's set of live handles and the
 * loop's watcher table have grown to hold the children at once, a child
 * without streams allocates nothing, in the parent or in the child (which
 * runs in the parent's memory until it execs). A stream asked for
 * allocates its read buffer, as lull_stream_open does (docs/API.md). */
static int spawn_exits;

static void spawn_exit(lull_process *p, int status, int sig) {
    (void)p;
    CHECK_EQ(status, 0);
    CHECK_EQ(sig, 0);
    spawn_exits++;
}

static void spawn_batch(lull_loop *loop, lull_process *p, int n) {
    lull_process_options o = {.argv = (char *[]){"/bin/true", NULL}};
    spawn_exits = 0;
    for (int i = 0; i < n; i++)
        CHECK_EQ(lull_process_spawn(loop, &p[i], &o, spawn_exit), 0);
    while (spawn_exits < n)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
}

TEST(spawn_and_exit_no_alloc) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_process p[8];
    spawn_batch(loop, p, 8); /* warm up: the tables' growth */
    measure_begin();
    for (int round = 0; round < 5; round++)
        spawn_batch(loop, p, 8);
    measure_end("5 rounds of 8 spawns and exits");
    CHECK_EQ(lull_loop_free(loop), 0);
}
