/* The quantum (C5, BRIEF 2.1 "Quantum"): a producer calling
 * lull_should_yield yields; when the slice is spent the loop runs ready fds
 * and due timers before the tasks already queued. The quantum is real time on
 * both clocks, so these cases spin on the real clock; they check order, not
 * where exactly a slice ends. */
#include "check.h"

#include <fcntl.h>
#include <lull.h>
#include <time.h>
#include <unistd.h>

#define US 1000ull
#define MS 1000000ull

static lull_loop *the_loop;

static lull_loop *new_loop(int clock, uint64_t quantum_ns) {
    lull_loop_options o = {.clock = clock, .quantum_ns = quantum_ns};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    check_trace_reset();
    return loop;
}

/* The thread's CPU time: a producer bounded by it does the same amount of
 * work however often a loaded machine preempts the test, whereas a bound on
 * the real clock would let one long preemption end the run in its first
 * slice (and every slice still lasts at least a quantum of real time). */
static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A producer: emits records until lull_should_yield, then re-posts itself
 * (a new slice), until `left` records are done or, with `until` set, until
 * the thread has spent that much CPU time (cpu_ns). Trace id 1000 +
 * slice. */
typedef struct producer {
    lull_task task;
    uint64_t left;    /* records still to emit */
    uint64_t until;   /* != 0: stop at this thread CPU time instead */
    int slices;       /* callbacks run */
    int yields;       /* slices that ended on lull_should_yield */
    uint64_t busy_ns; /* real time inside the callbacks */
    int write_fd;     /* >= 0: write a byte here during the first slice */
    volatile uint64_t sink;
} producer;

static producer prod;

static void produce(lull_task *t) {
    producer *p = LULL_CONTAINER_OF(t, producer, task);
    uint64_t start = check_clock_ns();
    p->slices++;
    check_trace(1000 + p->slices);
    if (p->slices == 1 && p->write_fd >= 0)
        CHECK_EQ(write(p->write_fd, "r", 1), 1); /* a request arrives */
    while (p->left > 0) {
        /* One record: a few hundred ns of work. */
        for (int i = 0; i < 64; i++)
            p->sink = p->sink * 31 + (uint64_t)i;
        p->left--;
        if (p->until && cpu_ns() >= p->until) p->left = 0;
        if (p->left && lull_should_yield(the_loop)) {
            p->yields++;
            lull_post(the_loop, t);
            break;
        }
    }
    p->busy_ns += check_clock_ns() - start;
}

static void producer_init(uint64_t records) {
    prod = (producer){.left = records, .write_fd = -1};
    lull_task_init(&prod.task, produce);
}

/* Runs the producer alone for about 20 ms of records. */
TEST(producer_yields) {
    CHECK_SKIP_IF_YIELD_OFTEN();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 50 * US);
    CHECK_U64_EQ(lull_loop_quantum(loop), 50 * US);
    producer_init(UINT64_MAX);
    prod.until = cpu_ns() + 20 * MS;
    lull_post(loop, &prod.task);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(prod.left, 0);
    CHECK_EQ(prod.slices, prod.yields + 1);
    /* 20 ms in 50 us slices: many slices, but slices are not cut short. */
    CHECK_LE(20, prod.yields);
    CHECK_LE(25 * US * (uint64_t)prod.yields, prod.busy_ns);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A pipe made readable during the producer's first slice is serviced before
 * the producer's next slice, and before a task that was already queued
 * behind the producer (BRIEF 2.1). Trace: 1001 P1, 1 io, 2 the queued task,
 * 1002 P2. */
static lull_io req_io;
static int req_fds[2];
static void on_request(lull_io *io, int events) {
    (void)events;
    char c;
    CHECK_EQ(read(req_fds[0], &c, 1), 1);
    check_trace(1);
    lull_io_stop(io);
}

static void queued_task(lull_task *t) {
    (void)t;
    check_trace(2);
}

TEST(readable_fd_serviced_before_producer_next_task) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 50 * US);
    CHECK_EQ(pipe2(req_fds, O_NONBLOCK | O_CLOEXEC), 0);
    CHECK_EQ(lull_io_init(loop, &req_io, req_fds[0], on_request), 0);
    CHECK_EQ(lull_io_start(&req_io, LULL_READABLE), 0);
    producer_init(1000000000); /* far more than one slice */
    prod.write_fd = req_fds[1];
    lull_task other;
    lull_task_init(&other, queued_task);
    lull_post(loop, &prod.task);
    lull_post(loop, &other);
    while (check_trace_len() < 4)
        CHECK_EQ(lull_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(check_trace_find(1001), 0);
    CHECK_EQ(check_trace_find(1), 1);
    CHECK_EQ(check_trace_find(2), 2);
    CHECK_EQ(check_trace_find(1002), 3);
    lull_cancel(&prod.task);
    close(req_fds[0]);
    close(req_fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Written before the run: the loop may service it before the producer
 * starts, but never later than the producer's second slice. */
TEST(readable_before_run_serviced_within_one_slice) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 50 * US);
    CHECK_EQ(pipe2(req_fds, O_NONBLOCK | O_CLOEXEC), 0);
    CHECK_EQ(lull_io_init(loop, &req_io, req_fds[0], on_request), 0);
    CHECK_EQ(lull_io_start(&req_io, LULL_READABLE), 0);
    CHECK_EQ(write(req_fds[1], "r", 1), 1);
    producer_init(1000000000);
    lull_post(loop, &prod.task);
    while (prod.slices < 3)
        CHECK_EQ(lull_run(loop, LULL_RUN_ONCE), 0);
    int io_at = check_trace_find(1);
    CHECK_LE(0, io_at);
    CHECK(io_at < check_trace_find(1002));
    lull_cancel(&prod.task);
    close(req_fds[0]);
    close(req_fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A due timer fires while the producer is still running (each slice end
 * checks timers), not after it finishes. */
static int timer_fired_at_slice = -1;
static void on_timer(lull_timer *t) {
    (void)t;
    timer_fired_at_slice = prod.slices;
    check_trace(3);
}

TEST(due_timer_fires_during_long_producer) {
    CHECK_SKIP_IF_YIELD_OFTEN();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 50 * US);
    producer_init(UINT64_MAX);
    prod.until = cpu_ns() + 20 * MS;
    lull_timer t;
    lull_timer_init(loop, &t, on_timer);
    lull_timer_start(&t, 1 * MS, 0);
    lull_post(loop, &prod.task);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(prod.left, 0);
    CHECK_LE(1, timer_fired_at_slice);
    CHECK(timer_fired_at_slice < prod.slices);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Outside a callback there is no slice: never true, however long. */
static bool first_call_in_slice = true;
static void ask_at_start(lull_task *t) {
    (void)t;
    first_call_in_slice = lull_should_yield(the_loop);
}

TEST(should_yield_outside_callback_is_false) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 50 * US);
    for (int i = 0; i < 1000; i++)
        CHECK(!lull_should_yield(loop));
    check_spin_ns(1 * MS); /* 20 quanta of real time, outside a callback */
    for (int i = 0; i < 100000; i++)
        CHECK(!lull_should_yield(loop));

    /* After a run, too. */
    lull_task t;
    lull_task_init(&t, ask_at_start);
    lull_post(loop, &t);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    check_spin_ns(1 * MS);
    for (int i = 0; i < 100000; i++)
        CHECK(!lull_should_yield(loop));
    CHECK_EQ(lull_loop_free(loop), 0);

    /* A fresh slice with a 2 ms quantum is not spent at its first call. */
    lull_loop_options o = {.role = LULL_ROLE_DEDICATED};
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    lull_post(loop, &t);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(!first_call_in_slice);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Inside a callback it turns true after about the quantum, not before. */
static uint64_t yield_after_ns;
static void spin_until_yield(lull_task *t) {
    (void)t;
    uint64_t start = check_clock_ns();
    while (!lull_should_yield(the_loop)) {
        if (check_clock_ns() - start > 1000 * MS) break; /* never true */
    }
    yield_after_ns = check_clock_ns() - start;
}

TEST(should_yield_turns_true_after_quantum) {
    CHECK_SKIP_IF_YIELD_OFTEN();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 200 * US);
    lull_task t;
    lull_task_init(&t, spin_until_yield);
    lull_post(loop, &t);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    /* The slice began at or before the callback's start: at least the
     * quantum minus the time before the callback; at most a generous
     * overshoot (a preempted vCPU). */
    CHECK_LE(100 * US, yield_after_ns);
    CHECK_LE(yield_after_ns, 100 * MS);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The quantum is real time on the virtual clock too: settle with a
 * producer yields, and virtual time does not move. */
TEST(quantum_on_virtual_clock) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL, 50 * US);
    uint64_t t0 = lull_now(loop);
    producer_init(UINT64_MAX);
    prod.until = cpu_ns() + 5 * MS;
    lull_post(loop, &prod.task);
    int ran = lull_settle(loop);
    CHECK_U64_EQ(prod.left, 0);
    CHECK_LE(5, prod.yields);
    CHECK_EQ(ran, prod.slices);
    CHECK_U64_EQ(lull_now(loop), t0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(role_default_quantum) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_U64_EQ(lull_loop_quantum(loop), 500 * US);
    CHECK_EQ(lull_loop_free(loop), 0);

    lull_loop_options o = {.role = LULL_ROLE_SHARED};
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    CHECK_U64_EQ(lull_loop_quantum(loop), 500 * US);
    CHECK_EQ(lull_loop_free(loop), 0);

    o = (lull_loop_options){.role = LULL_ROLE_DEDICATED};
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    CHECK_U64_EQ(lull_loop_quantum(loop), 2 * MS);
    CHECK_EQ(lull_loop_free(loop), 0);

    o = (lull_loop_options){.role = LULL_ROLE_DEDICATED,
                            .clock = LULL_CLOCK_VIRTUAL};
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    CHECK_U64_EQ(lull_loop_quantum(loop), 2 * MS);
    CHECK_EQ(lull_loop_free(loop), 0);

    /* quantum_ns overrides either role. */
    for (int role = LULL_ROLE_SHARED; role <= LULL_ROLE_DEDICATED; role++) {
        o = (lull_loop_options){.role = role, .quantum_ns = 123457};
        CHECK_EQ(lull_loop_new(&loop, &o), 0);
        CHECK_U64_EQ(lull_loop_quantum(loop), 123457);
        CHECK_EQ(lull_loop_free(loop), 0);
    }
}
