/* The quantum (C5): a producer calling
 * lull_loop_should_yield yields; when the slice is spent the loop runs ready
 * fds and due timers before the tasks already queued. The quantum is real time
 * on both clocks, so these cases spin on the real clock; they check order, not
 * where exactly a slice ends. */
#include "check.h"

#include <fcntl.h>
#include <lull.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

/* A producer: emits records until lull_loop_should_yield, then re-posts itself
 * (a new slice), until `left` records are done or, with `until` set, until
 * the thread has spent that much CPU time (cpu_ns). Trace id 1000 +
 * slice, for its first 64 slices: the cases read the first few, and one
 * running on CPU time ends thousands of slices in a yield-often build,
 * past the trace's room. */
typedef struct producer {
    lull_task task;
    uint64_t left;    /* records still to emit */
    uint64_t until;   /* != 0: stop at this thread CPU time instead */
    int slices;       /* callbacks run */
    int yields;       /* slices that ended on lull_loop_should_yield */
    uint64_t busy_ns; /* real time inside the callbacks */
    int write_fd;     /* >= 0: write a byte here during the first slice */
    volatile uint64_t sink;
} producer;

static producer prod;

static void produce(lull_task *t) {
    producer *p = LULL_CONTAINER_OF(t, producer, task);
    uint64_t start = check_clock_ns();
    p->slices++;
    if (p->slices <= 64) check_trace(1000 + p->slices);
    if (p->slices == 1 && p->write_fd >= 0)
        CHECK_EQ(write(p->write_fd, "r", 1), 1); /* a request arrives */
    while (p->left > 0) {
        /* One record: a few hundred ns of work. */
        for (int i = 0; i < 64; i++)
            p->sink = p->sink * 31 + (uint64_t)i;
        p->left--;
        if (p->until && cpu_ns() >= p->until) p->left = 0;
        if (p->left && lull_loop_should_yield(the_loop)) {
            p->yields++;
            lull_task_post(the_loop, t);
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
    lull_task_post(loop, &prod.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(prod.left, 0);
    CHECK_EQ(prod.slices, prod.yields + 1);
    /* 20 ms in 50 us slices: many slices, but slices are not cut short. */
    CHECK_LE(20, prod.yields);
    CHECK_LE(25 * US * (uint64_t)prod.yields, prod.busy_ns);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A pipe made readable during the producer's first slice is serviced before
 * the producer's next slice, and before a task that was already queued
 * behind the producer. Trace: 1001 P1, 1 io, 2 the queued task,
 * 1002 P2. */
/* An fd callback's part in these tests: takes the one byte written to
 * the watched pipe and stops watching it. */
static void take_byte_and_stop(lull_io *io) {
    char c;
    CHECK_EQ(read(io->fd, &c, 1), 1);
    lull_io_stop(io);
}

static lull_io req_io;
static int req_fds[2];
static void on_request(lull_io *io, int events) {
    (void)events;
    take_byte_and_stop(io);
    check_trace(1);
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
    lull_task_post(loop, &prod.task);
    lull_task_post(loop, &other);
    while (check_trace_len() < 4)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(check_trace_find(1001), 0);
    CHECK_EQ(check_trace_find(1), 1);
    CHECK_EQ(check_trace_find(2), 2);
    CHECK_EQ(check_trace_find(1002), 3);
    lull_task_cancel(&prod.task);
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
    lull_task_post(loop, &prod.task);
    while (prod.slices < 3)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    int io_at = check_trace_find(1);
    CHECK_LE(0, io_at);
    CHECK(io_at < check_trace_find(1002));
    lull_task_cancel(&prod.task);
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
    lull_task_post(loop, &prod.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(prod.left, 0);
    /* Fired (0: before the first slice, when a loaded machine held the
     * thread past the 1 ms deadline before the run began), and before the
     * producer's last slice: never left for the end of the run. */
    CHECK_LE(0, timer_fired_at_slice);
    CHECK(timer_fired_at_slice < prod.slices);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A timer that comes due during a long slice ends it: it fires before the
 * producer's next continuation but one, once its deadline and the slice's
 * first eighth (clock.c, SLICE_TIMER_SHIFT) have passed, not when the 40
 * ms quantum is spent. The producer re-posts itself after CUT_RECORDS
 * calls of lull_loop_should_yield, more than a stride (at most 32 calls
 * between clock reads), so a read made after continuation k ended comes
 * no later than continuation k + 1, and a slice holds many continuations.
 * The timer is armed inside the slice and repeats: a timer armed
 * mid-slice, and one re-armed for its next period, are both seen.
 *
 * The real clock is the test's here (fake_clock, below): it moves only by
 * CUT_RECORD_NS per record the producer emits, so every clock read, slice
 * end and fire lands on the same continuation on any machine, under
 * valgrind or a sanitizer. On the machine's clock, a preemption inside the
 * timer's callback made the loop look overloaded (lull__slice_renew) and
 * the fire wait a whole quantum. */
#define CUT_QUANTUM   (40 * MS)
#define CUT_PERIOD    (10 * MS)
#define CUT_RECORDS   64
#define CUT_RECORD_NS (10 * US) /* a continuation: 640 us of fake time */
#define CUT_MAX       400000
#define CUT_FIRES     2

/* The fake real clock: CLOCK_MONOTONIC while `on`, for the library and
 * check_clock_ns alike (the test binary is linked with
 * -Wl,--wrap=clock_gettime, tests/CMakeLists.txt); the machine's clock
 * otherwise, and for every other clock id. */
static struct {
    bool on;
    uint64_t ns;
    uint64_t reads; /* CLOCK_MONOTONIC reads while on */
} fake_clock;

int __real_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts) {
    if (!fake_clock.on || id != CLOCK_MONOTONIC)
        return __real_clock_gettime(id, ts);
    fake_clock.reads++;
    ts->tv_sec = (time_t)(fake_clock.ns / 1000000000u);
    ts->tv_nsec = (long)(fake_clock.ns % 1000000000u);
    return 0;
}

typedef struct cut_note {
    uint64_t iteration; /* lull_metrics.iterations when it started */
    uint64_t start, end;
} cut_note;

static struct {
    lull_task task;
    lull_timer timer;
    cut_note *notes;
    int len;                      /* continuations run so far */
    int fires;                    /* timer fires so far */
    int fired_after[CUT_FIRES];   /* continuations run before each fire */
    uint64_t deadline[CUT_FIRES]; /* each fire's deadline */
    volatile uint64_t sink;
} cut;

static void cut_produce(lull_task *t) {
    lull_metrics m;
    lull_loop_metrics(the_loop, &m);
    cut_note *n = &cut.notes[cut.len++];
    n->iteration = m.iterations;
    n->start = check_clock_ns();
    if (cut.len == 1) lull_timer_start(&cut.timer, CUT_PERIOD, CUT_PERIOD);
    for (int i = 0; i < CUT_RECORDS; i++) {
        for (int j = 0; j < 16; j++)
            cut.sink = cut.sink * 31 + (uint64_t)j;
        fake_clock.ns += CUT_RECORD_NS;
        if (lull_loop_should_yield(the_loop)) break;
    }
    n->end = check_clock_ns();
    /* Two continuations past the last fire: the case needs them to see
     * that the fire did not wait for the quantum. */
    bool done =
        cut.fires == CUT_FIRES && cut.len >= cut.fired_after[CUT_FIRES - 1] + 2;
    if (!done && cut.len < CUT_MAX) lull_task_post(the_loop, t);
}

static void cut_fire(lull_timer *t) {
    int f = cut.fires++;
    cut.fired_after[f] = cut.len;
    /* The deadline this fire had in the heap: periods skipped under load
     * moved the next one further (lull_timer_overrun). */
    cut.deadline[f] =
        lull_timer_deadline(t) - lull_timer_overrun(t) * CUT_PERIOD;
    if (cut.fires == CUT_FIRES) lull_timer_stop(t);
}

/* The first continuation that ended after both the deadline and the first
 * eighth of its slice (which began before the iteration's first
 * continuation started), or -1. */
static int cut_due_at(uint64_t deadline) {
    uint64_t first_start = 0, iteration = UINT64_MAX;
    for (int k = 0; k < cut.len; k++) {
        if (cut.notes[k].iteration != iteration) {
            iteration = cut.notes[k].iteration;
            first_start = cut.notes[k].start;
        }
        if (cut.notes[k].end >= deadline &&
            cut.notes[k].end >= first_start + CUT_QUANTUM / 8)
            return k;
    }
    return -1;
}

TEST(timer_coming_due_ends_the_slice) {
    fake_clock.ns = 1000 * MS; /* any start: 1 s */
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, CUT_QUANTUM);
    memset(&cut, 0, sizeof cut);
    cut.notes = calloc(CUT_MAX, sizeof *cut.notes);
    CHECK(cut.notes != NULL);
    lull_task_init(&cut.task, cut_produce);
    lull_timer_init(loop, &cut.timer, cut_fire);
    lull_task_post(loop, &cut.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(cut.fires, CUT_FIRES);
    for (int f = 0; f < CUT_FIRES; f++) {
        /* Continuations 0 .. k + 1 at most ran before the fire. With
         * no such k, every slice ended before its first eighth was over
         * (LULL_TEST_YIELD_OFTEN), and the fire came at a slice's end. */
        int k = cut_due_at(cut.deadline[f]);
        if (!check_yield_often()) CHECK_LE(0, k);
        if (k >= 0) CHECK_LE(cut.fired_after[f], k + 2);
        /* Not when the quantum was spent: the continuation before the
         * fire ended within a few of them (640 us each) of the deadline. */
        const cut_note *before = &cut.notes[cut.fired_after[f] - 1];
        CHECK(before->end < cut.deadline[f] + CUT_QUANTUM / 8);
    }
    free(cut.notes);
    CHECK_EQ(lull_loop_free(loop), 0);
    fake_clock.on = false;
}

/* When fd callbacks and due timers ran the whole quantum (an overloaded
 * loop), the fresh quantum ready tasks then get (lull__slice_renew) is not
 * cut short by a timer coming due: tasks keep the whole quantum per
 * iteration that they had before timers could end a slice. Timer A spins
 * past the 20 ms quantum and arms B 5 ms out; the producer then runs at
 * least half a quantum before B fires, where a slice ended by B would give
 * it about 5 ms. */
#define OVER_QUANTUM (20 * MS)

static struct {
    lull_task task;
    lull_timer a, b;
    int len;     /* continuations run so far */
    int after_a; /* continuations run before A fired, or -1 */
    bool b_fired;
    int before_b;         /* continuations run before B fired */
    uint64_t first_start; /* the first continuation after A */
    uint64_t last_end;    /* the last continuation so far */
    uint64_t span;        /* from first_start to the last end before B */
    volatile uint64_t sink;
} over;

static void over_produce(lull_task *t) {
    uint64_t start = check_clock_ns();
    if (over.len == over.after_a) over.first_start = start;
    over.len++;
    for (int i = 0; i < CUT_RECORDS; i++) {
        for (int j = 0; j < 16; j++)
            over.sink = over.sink * 31 + (uint64_t)j;
        if (lull_loop_should_yield(the_loop)) break;
    }
    over.last_end = check_clock_ns();
    if (!over.b_fired || over.len < over.before_b + 2)
        lull_task_post(the_loop, t);
}

static void over_a(lull_timer *t) {
    (void)t;
    over.after_a = over.len;
    check_spin_ns(OVER_QUANTUM + 5 * MS);
    lull_timer_start(&over.b, 5 * MS, 0);
}

static void over_b(lull_timer *t) {
    (void)t;
    over.b_fired = true;
    over.before_b = over.len;
    over.span = over.last_end - over.first_start;
}

TEST(overloaded_timers_leave_tasks_a_whole_quantum) {
    CHECK_SKIP_IF_YIELD_OFTEN();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, OVER_QUANTUM);
    memset(&over, 0, sizeof over);
    over.after_a = -1;
    lull_task_init(&over.task, over_produce);
    lull_timer_init(loop, &over.a, over_a);
    lull_timer_init(loop, &over.b, over_b);
    lull_timer_start(&over.a, 1 * MS, 0);
    lull_task_post(loop, &over.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(over.b_fired);
    CHECK(over.after_a < over.before_b);
    CHECK_LE(OVER_QUANTUM / 2, over.span);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A zero-delay timer armed inside a slice is a turn (C3): it has no
 * deadline to come due, so it does not end the slice; it runs in arm
 * order with the posted tasks. Ending the slice for it would not run it
 * any sooner than its place in the queue, and would make every zero-delay
 * hop cost a poll. A delayed timer far off does not end it either. Trace:
 * 1 the producer, 2 the zero-delay timer, 3 the task posted after it. */
static lull_timer zero_timer, far_timer;
static lull_task after_zero;
static int zero_yields;

static void on_zero_timer(lull_timer *t) {
    check_trace(t == &zero_timer ? 2 : 9);
}

static void after_zero_task(lull_task *t) {
    (void)t;
    check_trace(3);
}

static void arm_zero_then_produce(lull_task *t) {
    (void)t;
    check_trace(1);
    lull_timer_start(&zero_timer, 0, 0);
    lull_task_post(the_loop, &after_zero);
    for (int i = 0; i < 10000; i++)
        if (lull_loop_should_yield(the_loop)) zero_yields++;
}

TEST(zero_delay_timer_does_not_end_the_slice) {
    CHECK_SKIP_IF_YIELD_OFTEN();
    /* A 1 s quantum: 10,000 calls cannot spend it short of a preemption
     * that long. */
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 1000 * MS);
    zero_yields = 0;
    lull_timer_init(loop, &zero_timer, on_zero_timer);
    lull_timer_init(loop, &far_timer, on_zero_timer);
    lull_timer_start(&far_timer, 3600000 * MS, 0);
    lull_task_init(&after_zero, after_zero_task);
    lull_task producer_task;
    lull_task_init(&producer_task, arm_zero_then_produce);
    lull_task_post(loop, &producer_task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_TRACE(1, 2, 3);
    CHECK_EQ(zero_yields, 0);
    lull_timer_stop(&far_timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* On the virtual clock timers are in virtual time, which does not move
 * during a slice: a virtual deadline (1 ns, far below any real clock
 * reading) does not end the slice. The producer asks for 20 ms of real
 * time with an 80 ms quantum; a timer compared with the real clock would
 * end the slice after 10 ms. A yield is allowed only as the quantum's
 * (half of it measured from the task's start: the slice began a little
 * before). */
static uint64_t virtual_yield_after;
static void ask_for_20ms(lull_task *t) {
    (void)t;
    uint64_t start = check_clock_ns();
    virtual_yield_after = 0;
    while (check_clock_ns() - start < 20 * MS) {
        if (lull_loop_should_yield(the_loop)) {
            virtual_yield_after = check_clock_ns() - start;
            break;
        }
    }
}

TEST(virtual_timer_does_not_end_the_slice) {
    CHECK_SKIP_IF_YIELD_OFTEN();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL, 80 * MS);
    lull_timer_init(loop, &far_timer, on_zero_timer);
    lull_timer_start(&far_timer, 1, 0);
    lull_task t;
    lull_task_init(&t, ask_for_20ms);
    lull_task_post(loop, &t);
    lull_loop_settle(loop);
    if (virtual_yield_after) CHECK_LE(40 * MS, virtual_yield_after);
    CHECK(lull_timer_active(&far_timer)); /* virtual time did not move */
    lull_timer_stop(&far_timer);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Outside a callback there is no slice: never true, however long. */
static bool first_call_in_slice = true;
static void ask_at_start(lull_task *t) {
    (void)t;
    first_call_in_slice = lull_loop_should_yield(the_loop);
}

TEST(should_yield_outside_callback_is_false) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 50 * US);
    for (int i = 0; i < 1000; i++)
        CHECK(!lull_loop_should_yield(loop));
    check_spin_ns(1 * MS); /* 20 quanta of real time, outside a callback */
    for (int i = 0; i < 100000; i++)
        CHECK(!lull_loop_should_yield(loop));

    /* After a run, too. */
    lull_task t;
    lull_task_init(&t, ask_at_start);
    lull_task_post(loop, &t);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    check_spin_ns(1 * MS);
    for (int i = 0; i < 100000; i++)
        CHECK(!lull_loop_should_yield(loop));
    CHECK_EQ(lull_loop_free(loop), 0);

    /* A fresh slice with a 2 ms quantum is not spent at its first call. */
    lull_loop_options o = {.role = LULL_ROLE_DEDICATED};
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    lull_task_post(loop, &t);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(!first_call_in_slice);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Inside a callback it turns true after about the quantum, not before. */
static uint64_t yield_after_ns;
static void spin_until_yield(lull_task *t) {
    (void)t;
    uint64_t start = check_clock_ns();
    while (!lull_loop_should_yield(the_loop)) {
        if (check_clock_ns() - start > 1000 * MS) break; /* never true */
    }
    yield_after_ns = check_clock_ns() - start;
}

TEST(should_yield_turns_true_after_quantum) {
    CHECK_SKIP_IF_YIELD_OFTEN();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 200 * US);
    lull_task t;
    lull_task_init(&t, spin_until_yield);
    lull_task_post(loop, &t);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
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
    uint64_t t0 = lull_loop_now(loop);
    producer_init(UINT64_MAX);
    prod.until = cpu_ns() + 5 * MS;
    lull_task_post(loop, &prod.task);
    int ran = lull_loop_settle(loop);
    CHECK_U64_EQ(prod.left, 0);
    CHECK_LE(5, prod.yields);
    CHECK_EQ(ran, prod.slices);
    CHECK_U64_EQ(lull_loop_now(loop), t0);
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

/* ------------------------------------------------------------ every hop
 * A quantum under 1 us (quantum_ns = 1: I/O checked on every hop) ends the
 * slice after every callback, and the loop reads the clock only every 64th
 * hop while nothing needs the time (src/clock.c): no timer armed, no arm
 * deferred, no wait. The rest of what the readings feed stays whole: busy
 * time, a timer's expiry, the time a wait starts from. On the fake clock,
 * each hop takes 1 us. */

typedef struct hopper {
    lull_task task;
    int left;
    int hops;
    lull_timer timer; /* every_hop_timer_fires_on_time */
    int fired_at_hop; /* the hop count when it fired */
    int due_at_hop;   /* the hop in which its deadline passed */
    int pipe_fds[2];  /* every_hop_wait_starts_from_a_fresh_reading */
    lull_io io;
} hopper;

static hopper hop_state;

static void hop(lull_task *t) {
    hopper *h = LULL_CONTAINER_OF(t, hopper, task);
    fake_clock.ns += 1 * US;
    h->hops++;
    if (--h->left > 0) {
        lull_task_post(the_loop, t);
    } else if (h->pipe_fds[1] >= 0) {
        CHECK_EQ(write(h->pipe_fds[1], "x", 1), 1);
    }
}

static lull_loop *every_hop_loop(int hops) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    fake_clock.reads = 0;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 1);
    memset(&hop_state, 0, sizeof hop_state);
    hop_state.left = hops;
    hop_state.pipe_fds[0] = hop_state.pipe_fds[1] = -1;
    lull_task_init(&hop_state.task, hop);
    return loop;
}

TEST(every_hop_loop_reads_the_clock_every_64_hops) {
    lull_loop *loop = every_hop_loop(6400);
    lull_task_post(loop, &hop_state.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(hop_state.hops, 6400);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.polls, 6400); /* still one look per hop */
    /* 100 periodic reads, the run's start and its end, and the latency
     * samples (three reads each, at most one per 100 us: 64). Reading at
     * every slice end made 6,400 and more. */
    CHECK_LE(fake_clock.reads, 6400 / 64 + 3 * 64 + 4);
    /* Busy the whole time: nothing is lost between the readings. */
    CHECK_U64_EQ(m.busy_ns, 6400 * US);
    CHECK_U64_EQ(m.idle_ns, 0);
    CHECK_U64_EQ(lull_loop_now(loop), fake_clock.ns);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Unread hops that take no time end where they began and add nothing;
 * one long hop among them is still busy time and a stall, found at the
 * next reading. */
static int long_hop_at;

static void hop_once_long(lull_task *t) {
    hopper *h = LULL_CONTAINER_OF(t, hopper, task);
    if (++h->hops == long_hop_at) fake_clock.ns += 2 * MS;
    if (--h->left > 0) lull_task_post(the_loop, t);
}

TEST(every_hop_long_hop_among_unread_ones_is_a_stall) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    memset(&hop_state, 0, sizeof hop_state);
    lull_loop_options o = {.quantum_ns = 1, .stall_ns = 1 * MS};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    hop_state.left = 300;
    long_hop_at = 100;
    lull_task_init(&hop_state.task, hop_once_long);
    lull_task_post(loop, &hop_state.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(hop_state.hops, 300);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.stalls, 1);
    CHECK_U64_EQ(m.worst_stall_ns, 2 * MS);
    CHECK_U64_EQ(m.busy_ns, 2 * MS);
    CHECK_U64_EQ(lull_loop_now(loop), fake_clock.ns);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A timer armed: every slice end reads, so the timer fires in the
 * iteration after the hop that passed its deadline. */
static void hop_timer_fired(lull_timer *t) {
    hopper *h = LULL_CONTAINER_OF(t, hopper, timer);
    h->fired_at_hop = h->hops;
}

TEST(every_hop_timer_fires_on_time) {
    lull_loop *loop = every_hop_loop(500);
    lull_timer_init(loop, &hop_state.timer, hop_timer_fired);
    lull_timer_start(&hop_state.timer, 100 * US + 500, 0);
    lull_task_post(loop, &hop_state.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    /* Armed at the start: due during hop 101. */
    CHECK_EQ(hop_state.fired_at_hop, 101);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A wait after unread hops starts from a fresh reading: the hops are busy
 * time, not idle time, however few readings they made. */
static void hop_readable(lull_io *io, int events) {
    (void)events;
    take_byte_and_stop(io);
}

TEST(every_hop_wait_starts_from_a_fresh_reading) {
    lull_loop *loop = every_hop_loop(50);
    CHECK_EQ(pipe(hop_state.pipe_fds), 0);
    CHECK_EQ(
        lull_io_init(loop, &hop_state.io, hop_state.pipe_fds[0], hop_readable),
        0);
    CHECK_EQ(lull_io_start(&hop_state.io, LULL_READABLE), 0);
    lull_task_post(loop, &hop_state.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.busy_ns, 50 * US);
    CHECK_U64_EQ(m.idle_ns, 0); /* the fake clock stood still in the wait */
    CHECK_U64_EQ(m.wakeups, 1);
    fake_clock.on = false;
    close(hop_state.pipe_fds[0]);
    close(hop_state.pipe_fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------------------ plain hops
 * An every-hop loop runs its hops of one ready task with nothing found by
 * the look on a path of its own (src/loop.c, "plain hops"), and leaves it
 * for the general iteration wherever a hop asks for more. Each case below
 * asks for one thing in the middle of a chain, on the fake clock (a hop
 * takes 1 us), and checks it is served when the general iteration would
 * serve it, and that the chain goes on after. */

enum {
    ASK_FD,
    ASK_TIMER,
    ASK_STOP,
    ASK_YIELD,
    ASK_REMOTE,
    ASK_METRICS,
    ASK_SEND,
    ASK_RESET
};

typedef struct asker {
    lull_task task;
    int hops, left, at, ask;
    int fds[2];
    lull_io io;
    int io_at; /* hops done when the fd callback ran */
    lull_timer timer;
    int timer_at;
    lull_task other;
    int other_at;
    lull_metrics seen; /* read inside hop `at` */
    lull_stream stream;
    int peer;       /* the stream's other end */
    int peer_bytes; /* there when hop at + 1 began */
} asker;

static asker ask;

static void asker_io(lull_io *io, int events) {
    (void)events;
    take_byte_and_stop(io);
    ask.io_at = ask.hops;
}

static void asker_timer(lull_timer *t) {
    (void)t;
    ask.timer_at = ask.hops;
}

static void asker_other(lull_task *t) {
    (void)t;
    ask.other_at = ask.hops;
}

static void asker_hop(lull_task *t) {
    asker *a = LULL_CONTAINER_OF(t, asker, task);
    fake_clock.ns += 1 * US;
    a->hops++;
    if (a->ask == ASK_SEND && a->hops == a->at + 1) {
        char buf[16];
        a->peer_bytes = (int)recv(a->peer, buf, sizeof buf, MSG_DONTWAIT);
    }
    if (a->ask == ASK_YIELD) (void)lull_loop_should_yield(the_loop);
    if (--a->left > 0) lull_task_post(the_loop, t);
    if (a->hops != a->at) return;
    switch (a->ask) {
    case ASK_FD:
        CHECK_EQ(write(a->fds[1], "x", 1), 1);
        break;
    case ASK_TIMER:
        lull_timer_start(&a->timer, 10 * US, 0);
        break;
    case ASK_STOP:
        lull_loop_stop(the_loop);
        break;
    case ASK_REMOTE:
        lull_task_post_remote(the_loop, &a->other);
        break;
    case ASK_METRICS:
        lull_loop_metrics(the_loop, &a->seen);
        break;
    case ASK_RESET:
        lull_loop_metrics_reset(the_loop);
        break;
    case ASK_SEND:
        CHECK_EQ(lull_endpoint_send_copy(&a->stream.ep, "hello", 5), 0);
        break;
    }
}

static lull_loop *asker_loop(int ask_what, int hops, int at) {
    lull_loop *loop = every_hop_loop(0);
    memset(&ask, 0, sizeof ask);
    ask.ask = ask_what;
    ask.left = hops;
    ask.at = at;
    ask.fds[0] = ask.fds[1] = ask.peer = -1;
    lull_task_init(&ask.task, asker_hop);
    lull_task_init(&ask.other, asker_other);
    lull_timer_init(loop, &ask.timer, asker_timer);
    lull_task_post(loop, &ask.task);
    return loop;
}

static void asker_done(lull_loop *loop) {
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(plain_hops_serve_an_fd_made_ready_mid_chain_before_the_next_hop) {
    lull_loop *loop = asker_loop(ASK_FD, 300, 100);
    CHECK_EQ(pipe2(ask.fds, O_NONBLOCK | O_CLOEXEC), 0);
    CHECK_EQ(lull_io_init(loop, &ask.io, ask.fds[0], asker_io), 0);
    CHECK_EQ(lull_io_start(&ask.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 300);
    CHECK_EQ(ask.io_at, 100); /* the look after hop 100 found it */
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.polls, 300);
    CHECK_U64_EQ(m.empty_polls, 299);
    close(ask.fds[0]);
    close(ask.fds[1]);
    asker_done(loop);
}

TEST(plain_hops_fire_a_timer_armed_mid_chain_on_time) {
    lull_loop *loop = asker_loop(ASK_TIMER, 300, 100);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 300);
    /* Armed in hop 100, its delay counted from that hop's end: due when
     * hop 110 ends, fired before hop 111. */
    CHECK_EQ(ask.timer_at, 110);
    asker_done(loop);
}

TEST(plain_hops_stop_mid_chain_and_go_on_in_the_next_run) {
    lull_loop *loop = asker_loop(ASK_STOP, 300, 100);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 100);
    CHECK(lull_task_pending(&ask.task));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 300);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.iterations, 300);
    CHECK_U64_EQ(m.busy_ns, 300 * US);
    asker_done(loop);
}

TEST(plain_hops_give_way_to_should_yield_in_every_hop) {
    lull_loop *loop = asker_loop(ASK_YIELD, 1000, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 1000);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.iterations, 1000);
    CHECK_U64_EQ(m.polls, 1000);
    CHECK_U64_EQ(m.busy_ns, 1000 * US);
    CHECK_U64_EQ(lull_loop_now(loop), fake_clock.ns);
    asker_done(loop);
}

TEST(plain_hops_take_a_remote_post_made_mid_chain) {
    lull_loop *loop = asker_loop(ASK_REMOTE, 300, 100);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 300);
    /* The look after hop 100 takes it, behind the chain's own post. */
    CHECK_EQ(ask.other_at, 101);
    asker_done(loop);
}

TEST(plain_hops_count_every_hop_as_it_happens) {
    lull_loop *loop = asker_loop(ASK_METRICS, 1000, 700);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(ask.seen.iterations, 700);
    CHECK_U64_EQ(ask.seen.polls, 700);
    CHECK_U64_EQ(ask.seen.empty_polls, 700);
    CHECK_U64_EQ(ask.seen.tasks_run, 700); /* counted as it starts */
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.iterations, 1000);
    CHECK_U64_EQ(m.tasks_run, 1000);
    CHECK_U64_EQ(m.busy_ns, 1000 * US);
    asker_done(loop);
}

/* A reset inside hop 100 leaves the hops after it, every one counted.
 * (Not busy_ns: the time since the last reading, hop 64's, is added at
 * the next, after the reset.) */
TEST(plain_hops_count_from_a_reset_made_mid_chain) {
    lull_loop *loop = asker_loop(ASK_RESET, 300, 100);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 300);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.iterations, 200);
    CHECK_U64_EQ(m.polls, 200);
    CHECK_U64_EQ(m.empty_polls, 200);
    CHECK_U64_EQ(m.tasks_run, 200);
    asker_done(loop);
}

TEST(plain_hops_flush_a_write_at_the_end_of_its_hop) {
    lull_loop *loop = asker_loop(ASK_SEND, 300, 100);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &ask.stream, sv[0], &raw), 0);
    ask.peer = sv[1];
    CHECK_EQ(lull_endpoint_read_stop(&ask.stream.ep), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ask.hops, 300);
    CHECK_EQ(ask.peer_bytes, 5); /* written before hop 101 began */
    CHECK_EQ(lull_endpoint_close(&ask.stream.ep, 0), 0);
    close(sv[1]);
    asker_done(loop);
}

/* The hop whose end takes the every-64th reading (hop 64, 128, ... of a
 * run), and the hops around it, stay plain hops (src/loop.c,
 * plain_hop_turned): whatever one of them asks is served where the general
 * iteration serves it, and the counts, busy time, now and the clock reads
 * come out the same. LULL_LOOP_AUTO_ADVANCE, a no-op on the real clock,
 * keeps a loop on the general iteration. */
typedef struct ask_outcome {
    int hops, io_at, timer_at, other_at, runs;
    lull_metrics seen, end;
    uint64_t now, reads;
} ask_outcome;

static ask_outcome ask_run(int what, int at, unsigned flags) {
    lull_loop *loop = asker_loop(what, 300, at);
    if (flags) {
        /* asker_loop's loop again, with flags: nothing of it is armed yet
         * but the chain's first post. */
        lull_task_cancel(&ask.task);
        CHECK_EQ(lull_loop_free(loop), 0);
        lull_loop_options o = {.quantum_ns = 1, .flags = flags};
        fake_clock.reads = 0; /* as every_hop_loop's, before the new */
        CHECK_EQ(lull_loop_new(&loop, &o), 0);
        the_loop = loop;
        lull_timer_init(loop, &ask.timer, asker_timer);
        lull_task_post(loop, &ask.task);
    }
    if (what == ASK_FD) {
        CHECK_EQ(pipe2(ask.fds, O_NONBLOCK | O_CLOEXEC), 0);
        CHECK_EQ(lull_io_init(loop, &ask.io, ask.fds[0], asker_io), 0);
        CHECK_EQ(lull_io_start(&ask.io, LULL_READABLE), 0);
    }
    ask_outcome o;
    memset(&o, 0, sizeof o);
    while (lull_task_pending(&ask.task)) {
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        o.runs++;
    }
    o.hops = ask.hops;
    o.io_at = ask.io_at;
    o.timer_at = ask.timer_at;
    o.other_at = ask.other_at;
    o.seen = ask.seen;
    lull_loop_metrics(loop, &o.end);
    o.now = lull_loop_now(loop);
    o.reads = fake_clock.reads;
    if (what == ASK_FD) {
        close(ask.fds[0]);
        close(ask.fds[1]);
    }
    asker_done(loop);
    return o;
}

static void same_metrics(const lull_metrics *a, const lull_metrics *b) {
    CHECK_U64_EQ(a->iterations, b->iterations);
    CHECK_U64_EQ(a->polls, b->polls);
    CHECK_U64_EQ(a->empty_polls, b->empty_polls);
    CHECK_U64_EQ(a->tasks_run, b->tasks_run);
    CHECK_U64_EQ(a->busy_ns, b->busy_ns);
    CHECK_U64_EQ(a->idle_ns, b->idle_ns);
    CHECK_U64_EQ(a->wakeups, b->wakeups);
    CHECK_U64_EQ(a->stalls, b->stalls);
    CHECK_U64_EQ(a->task_wait.count, b->task_wait.count);
}

TEST(plain_hops_at_the_64th_reading_serve_what_a_hop_asks_as_ever) {
    /* Compares where slices end, which that build draws at random. */
    CHECK_SKIP_IF_YIELD_OFTEN();
    static const int asks[] = {ASK_FD,      ASK_TIMER, ASK_STOP, ASK_REMOTE,
                               ASK_METRICS, ASK_YIELD, ASK_RESET};
    static const int ats[] = {63, 64, 65, 66, 127, 128, 129};
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        for (size_t j = 0; j < sizeof ats / sizeof ats[0]; j++) {
            ask_outcome plain = ask_run(asks[i], ats[j], 0);
            ask_outcome general =
                ask_run(asks[i], ats[j], LULL_LOOP_AUTO_ADVANCE);
            CHECK_EQ(plain.hops, 300);
            CHECK_EQ(general.hops, 300);
            CHECK_EQ(plain.runs, general.runs);
            CHECK_EQ(plain.io_at, general.io_at);
            CHECK_EQ(plain.timer_at, general.timer_at);
            CHECK_EQ(plain.other_at, general.other_at);
            same_metrics(&plain.seen, &general.seen);
            same_metrics(&plain.end, &general.end);
            CHECK_U64_EQ(plain.now, general.now);
            CHECK_U64_EQ(plain.reads, general.reads);
        }
    }
    /* The cases asked what they were meant to: each was served. */
    CHECK_EQ(ask_run(ASK_FD, 64, 0).io_at, 64);
    CHECK_EQ(ask_run(ASK_TIMER, 64, 0).timer_at, 74);
    CHECK_EQ(ask_run(ASK_STOP, 64, 0).runs, 2);
    CHECK_EQ(ask_run(ASK_REMOTE, 64, 0).other_at, 65);
    CHECK_U64_EQ(ask_run(ASK_METRICS, 65, 0).seen.iterations, 65);
}

/* lull_loop_now never goes back, though an every-hop loop's unread hops
 * keep an older reading than a callback's lull_loop_now_exact took. */
static uint64_t now_last;
static int now_back;

static void hop_exact(lull_task *t) {
    hopper *h = LULL_CONTAINER_OF(t, hopper, task);
    fake_clock.ns += 1 * US;
    if (lull_loop_now(the_loop) < now_last) now_back++;
    now_last = lull_loop_now_exact(the_loop);
    if (++h->hops < 300) lull_task_post(the_loop, t);
}

static void now_never_goes_back(unsigned flags) {
    lull_loop *loop = every_hop_loop(0);
    if (flags) {
        CHECK_EQ(lull_loop_free(loop), 0);
        lull_loop_options o = {.quantum_ns = 1, .flags = flags};
        CHECK_EQ(lull_loop_new(&loop, &o), 0);
        the_loop = loop;
    }
    lull_task_init(&hop_state.task, hop_exact);
    now_last = 0;
    now_back = 0;
    lull_task_post(loop, &hop_state.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(hop_state.hops, 300);
    CHECK_EQ(now_back, 0);
    CHECK_U64_EQ(lull_loop_now(loop), fake_clock.ns);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(every_hop_now_never_goes_back_after_now_exact) {
    now_never_goes_back(0);
}

/* The same through the general iteration alone: plain hops are never
 * taken by a loop with LULL_LOOP_AUTO_ADVANCE (a no-op on the real clock). */
TEST(every_hop_now_never_goes_back_after_now_exact_in_general_iterations) {
    now_never_goes_back(LULL_LOOP_AUTO_ADVANCE);
}

/* Two ways a plain hop once left the loop otherwise than the general
 * iteration would (quantum_ns under 1000, where every_callback holds too).
 */
/* A loop with quantum_ns under 1000 (every_callback, so plain hops) whose
 * fd callback ran in the iteration a look found it: that iteration's
 * lull__slice_renew starts a fresh, intact quantum at its own reading
 * without moving now. The next iteration's poll_and_dispatch_io would
 * raise now to that reading; plain_hops starts there without doing so. */
static struct {
    lull_task task;
    lull_io io;
    int fds[2];
    int hops, at;
    uint64_t io_clock; /* the fake clock when the fd callback ran */
    uint64_t now_seen; /* lull_loop_now in hop at + 2 */
} lag;

static void lag_io(lull_io *io, int events) {
    (void)events;
    take_byte_and_stop(io);
    lag.io_clock = fake_clock.ns;
}

static void lag_hop(lull_task *t) {
    fake_clock.ns += 1; /* quick hops: the renew is inside the quantum */
    lag.hops++;
    if (lag.hops == lag.at + 2) lag.now_seen = lull_loop_now(the_loop);
    if (lag.hops == lag.at) CHECK_EQ(write(lag.fds[1], "x", 1), 1);
    if (lag.hops < 300) lull_task_post(the_loop, t);
}

TEST(plain_hops_start_with_now_at_a_renewed_slices_reading) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 500);
    memset(&lag, 0, sizeof lag);
    lag.at = 100;
    CHECK_EQ(pipe2(lag.fds, O_NONBLOCK | O_CLOEXEC), 0);
    CHECK_EQ(lull_io_init(loop, &lag.io, lag.fds[0], lag_io), 0);
    CHECK_EQ(lull_io_start(&lag.io, LULL_READABLE), 0);
    lull_task_init(&lag.task, lag_hop);
    lull_task_post(loop, &lag.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lag.hops, 300);
    CHECK(lag.io_clock != 0);
    /* The general iteration: the renew's reading is now from hop at + 2. */
    CHECK_U64_EQ(lag.now_seen, lag.io_clock);
    fake_clock.on = false;
    close(lag.fds[0]);
    close(lag.fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A hop whose lull_loop_should_yield took the loop's periodic reading
 * inside the quantum (quantum_ns under 1000, or a clock that has not moved
 * since the slice began): the read plans a stride, the slice is not spent,
 * and a second call leaves the countdown at 1, so plain_hop_untouched lets
 * the hop end without its slice check. The general iteration ends the
 * slice there (busy time and stall counted to that reading, the next
 * quantum starting from it); plain hops keep the old slice open, with
 * time_stale false and quantum_intact false. */
static struct {
    lull_task task;
    int hops;
    uint64_t busy_after; /* busy_ns seen in the hop after the first */
    int first;           /* the first such hop */
} ys;

static void ys_hop(lull_task *t) {
    fake_clock.ns += 1;
    ys.hops++;
    if (ys.first && ys.hops == ys.first + 1) {
        lull_metrics m;
        lull_loop_metrics(the_loop, &m);
        ys.busy_after = m.busy_ns;
    }
    /* Two calls a hop until one is answered by an unspent read: three
     * unread ends a hop put the 64th on a hop's first call. */
    if (!ys.first) {
        bool first_call = lull_loop_should_yield(the_loop);
        (void)lull_loop_should_yield(the_loop);
        if (!first_call) ys.first = ys.hops;
    }
    if (ys.hops < 1000) lull_task_post(the_loop, t);
}

TEST(plain_hops_end_the_slice_at_an_unspent_read_in_a_hop) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop_options o = {.quantum_ns = 500, .stall_ns = 80};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    memset(&ys, 0, sizeof ys);
    lull_task_init(&ys.task, ys_hop);
    lull_task_post(loop, &ys.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ys.hops, 1000);
    CHECK(ys.first > 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    /* The general iteration: the slice ended at the read of hop `first`
     * (1 ns a hop from the run's start), so the hop after it sees that
     * busy time already. */
    CHECK_U64_EQ(ys.busy_after, (uint64_t)ys.first);
    /* No slice ran 80 ns: 64 hops of 1 ns between reads. Plain hops
     * measure the slice after the unspent read from the slice before. */
    CHECK_U64_EQ(m.stalls, 0);
    CHECK_U64_EQ(m.busy_ns, 1000);
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A single lull_loop_should_yield, in the hop whose check is the 64th
 * unread end: it reads the clock inside the quantum (500 ns; a hop takes
 * 1 ns), finds it unspent and plans the next read. The hop's end then ends
 * the slice at that reading, on plain hops as on the general iteration
 * (LULL_LOOP_AUTO_ADVANCE): the hop after it sees the busy time up to it,
 * not only 64 hops later. */
static struct {
    lull_task task;
    int hops, at, said;
    uint64_t busy_after; /* busy_ns seen in hop at + 1 */
} yo;

static void yo_hop(lull_task *t) {
    fake_clock.ns += 1;
    yo.hops++;
    if (yo.hops == yo.at + 1) {
        lull_metrics m;
        lull_loop_metrics(the_loop, &m);
        yo.busy_after = m.busy_ns;
    }
    if (yo.hops == yo.at) yo.said = lull_loop_should_yield(the_loop);
    if (yo.hops < 300) lull_task_post(the_loop, t);
}

static uint64_t yo_run(unsigned flags) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop_options o = {.quantum_ns = 500, .flags = flags};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    memset(&yo, 0, sizeof yo);
    yo.at = 64;
    yo.said = -1;
    lull_task_init(&yo.task, yo_hop);
    lull_task_post(loop, &yo.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(yo.hops, 300);
    CHECK_EQ(yo.said, 0); /* unspent: the read planned */
    fake_clock.on = false;
    CHECK_EQ(lull_loop_free(loop), 0);
    return yo.busy_after;
}

TEST(plain_hops_end_the_slice_at_a_single_unspent_read) {
    /* Compares where slices end, which that build draws at random. */
    CHECK_SKIP_IF_YIELD_OFTEN();
    uint64_t plain = yo_run(0);
    CHECK_U64_EQ(plain, yo_run(LULL_LOOP_AUTO_ADVANCE));
    CHECK_U64_EQ(plain, 64); /* 64 hops of 1 ns to hop 64's read */
}

/* The real clock, quantum_ns = 1: a signal, shuffled readiness, a fork,
 * a task freed by its own hop, and another thread's posts, each in the
 * middle of a chain of plain hops. */

static struct {
    lull_task task;
    int hops, at, last;
    int sig_at, io_calls, io_at[2];
    lull_signal sig;
    lull_io io[2];
    int fds[2][2];
    pid_t child;
    int remote_done, remote_n;
} rv;

/* A loop that looks on every hop, rv cleared: the chain's event comes in
 * hop `at`, and it ends at hop `last`. */
static lull_loop *rv_loop(int at, int last) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 1);
    memset(&rv, 0, sizeof rv);
    rv.at = at;
    rv.last = last;
    return loop;
}

static void rv_sig(lull_signal *s, int signum) {
    (void)s;
    CHECK_EQ(signum, SIGUSR1);
    rv.sig_at = rv.hops;
    lull_signal_stop(&rv.sig);
}

static void rv_sig_hop(lull_task *t) {
    rv.hops++;
    if (rv.hops == rv.at) CHECK_EQ(raise(SIGUSR1), 0);
    if (rv.hops < rv.last) lull_task_post(the_loop, t);
}

TEST(plain_hops_run_a_signal_before_the_next_hop) {
    lull_loop *loop = rv_loop(100, 300);
    CHECK_EQ(lull_signal_init(loop, &rv.sig, rv_sig), 0);
    CHECK_EQ(lull_signal_start(&rv.sig, SIGUSR1), 0);
    lull_task_init(&rv.task, rv_sig_hop);
    lull_task_post(loop, &rv.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(rv.hops, 300);
    CHECK_EQ(rv.sig_at, 100);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.iterations, 300);
    CHECK_U64_EQ(m.polls, 300);
    CHECK_U64_EQ(m.empty_polls, 299);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void rv_io(lull_io *io, int events) {
    (void)events;
    int i = io == &rv.io[0] ? 0 : 1;
    take_byte_and_stop(io);
    rv.io_at[i] = rv.hops;
    rv.io_calls++;
}

static void rv_shuffle_hop(lull_task *t) {
    rv.hops++;
    if (rv.hops == rv.at) {
        CHECK_EQ(lull_loop_shuffle(the_loop, true, 7), 0);
        CHECK_EQ(write(rv.fds[0][1], "x", 1), 1);
        CHECK_EQ(write(rv.fds[1][1], "x", 1), 1);
    }
    if (rv.hops < rv.last) lull_task_post(the_loop, t);
}

TEST(plain_hops_shuffle_turned_on_mid_chain) {
    lull_loop *loop = rv_loop(100, 300);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(pipe2(rv.fds[i], O_NONBLOCK | O_CLOEXEC), 0);
        CHECK_EQ(lull_io_init(loop, &rv.io[i], rv.fds[i][0], rv_io), 0);
        CHECK_EQ(lull_io_start(&rv.io[i], LULL_READABLE), 0);
    }
    lull_task_init(&rv.task, rv_shuffle_hop);
    lull_task_post(loop, &rv.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(rv.hops, 300);
    CHECK_EQ(rv.io_calls, 2);
    CHECK_EQ(rv.io_at[0], 100);
    CHECK_EQ(rv.io_at[1], 100);
    for (int i = 0; i < 2; i++) {
        close(rv.fds[i][0]);
        close(rv.fds[i][1]);
    }
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void rv_fork_hop(lull_task *t) {
    rv.hops++;
    if (rv.hops == rv.at) {
        rv.child = fork();
        CHECK(rv.child >= 0);
        if (rv.child == 0) CHECK_EQ(lull_loop_fork(the_loop), 0);
    }
    if (rv.hops < rv.last) lull_task_post(the_loop, t);
}

TEST(plain_hops_fork_mid_chain) {
    lull_loop *loop = rv_loop(100, 300);
    lull_task_init(&rv.task, rv_fork_hop);
    lull_task_post(loop, &rv.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    bool ok = rv.hops == 300 && m.iterations == 300 && m.polls == 300;
    if (rv.child == 0) _exit(ok && lull_loop_free(loop) == 0 ? 0 : 1);
    CHECK(ok);
    int status = 0;
    CHECK_EQ(waitpid(rv.child, &status, 0), rv.child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A hop frees its own task and posts a fresh one (ASan). */
static void rv_fresh_hop(lull_task *t) {
    free(t);
    rv.hops++;
    if (rv.hops >= rv.last) return;
    lull_task *n = malloc(sizeof *n);
    CHECK(n != NULL);
    lull_task_init(n, rv_fresh_hop);
    lull_task_post(the_loop, n);
}

TEST(plain_hops_free_their_task_and_post_a_new_one) {
    lull_loop *loop = rv_loop(0, 1000);
    lull_task *n = malloc(sizeof *n);
    CHECK(n != NULL);
    lull_task_init(n, rv_fresh_hop);
    lull_task_post(loop, n);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(rv.hops, 1000);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Another thread posts remotely in a tight loop while hops run (TSan). */
#define RV_REMOTE 20000
static lull_task rv_remote_tasks[RV_REMOTE];

static void rv_remote_ran(lull_task *t) {
    (void)t;
    rv.remote_done++;
}

static void *rv_poster(void *arg) {
    lull_loop *loop = arg;
    for (int i = 0; i < RV_REMOTE; i++)
        lull_task_post_remote(loop, &rv_remote_tasks[i]);
    return NULL;
}

static void rv_remote_hop(lull_task *t) {
    rv.hops++;
    if (rv.remote_done < RV_REMOTE) lull_task_post(the_loop, t);
}

TEST_THREADED(plain_hops_take_remote_posts_from_a_busy_thread) {
    lull_loop *loop = rv_loop(0, 0);
    for (int i = 0; i < RV_REMOTE; i++)
        lull_task_init(&rv_remote_tasks[i], rv_remote_ran);
    lull_task_init(&rv.task, rv_remote_hop);
    lull_task_post(loop, &rv.task);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, rv_poster, loop), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(rv.remote_done, RV_REMOTE);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.tasks_run, (uint64_t)(RV_REMOTE + rv.hops));
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Many tasks queued at once on a loop that checks I/O after every one: an
 * iteration each. A debug build's check of the loop at each iteration's
 * end walked the whole ready queue, so the run was quadratic in the
 * queue's length (200,000 tasks: 2 * 10^10 links followed, minutes; the
 * case above, whose 20,000 remote posts all land in the queue, took 17-57
 * s of its 30 under ThreadSanitizer on a busy machine). The check walks a
 * bounded part of each queue, as it does of the timer heap. */
#define LONG_QUEUE 200000

static int long_queue_ran;

static void long_queue_task(lull_task *t) {
    (void)t;
    long_queue_ran++;
}

TEST(every_hop_loop_with_a_long_ready_queue_is_not_quadratic) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, 1);
    lull_task *tasks = calloc(LONG_QUEUE, sizeof *tasks);
    CHECK(tasks != NULL);
    for (int i = 0; i < LONG_QUEUE; i++) {
        lull_task_init(&tasks[i], long_queue_task);
        lull_task_post(loop, &tasks[i]);
    }
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(long_queue_ran, LONG_QUEUE);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.tasks_run, LONG_QUEUE);
    CHECK(m.iterations >= LONG_QUEUE); /* one task an iteration */
    CHECK_EQ(lull_loop_free(loop), 0);
    free(tasks);
}

/* A quantum under 1 us checks I/O after every hop however quick the hops
 * are. The quantum is then shorter than the look and the callback, but not
 * always: hops of 10 ns against a 500 ns quantum, with a timer armed (so
 * every hop's end reads the clock), found it unspent and planned a stride
 * of up to 32 hops between slice checks, run without a look between them;
 * the 64th hop's reading in a loop with no timer did the same against a
 * 999 ns quantum. An fd made ready in hop 100 was then served hops later. */
static struct {
    lull_task task;
    lull_io io;
    lull_timer far;
    int fds[2];
    int hops, at, io_at;
} quick;

static void quick_io(lull_io *io, int events) {
    (void)events;
    take_byte_and_stop(io);
    quick.io_at = quick.hops;
}

static void quick_far(lull_timer *t) {
    (void)t;
    CHECK(!"an hour-long timer fired");
}

static void quick_hop(lull_task *t) {
    fake_clock.ns += 10;
    quick.hops++;
    if (quick.hops == quick.at) CHECK_EQ(write(quick.fds[1], "x", 1), 1);
    if (quick.hops < 300) lull_task_post(the_loop, t);
}

static void quick_hops_look_every_hop(uint64_t quantum_ns, bool timer) {
    fake_clock.ns = 1000 * MS;
    fake_clock.on = true;
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC, quantum_ns);
    memset(&quick, 0, sizeof quick);
    quick.at = 100;
    CHECK_EQ(pipe2(quick.fds, O_NONBLOCK | O_CLOEXEC), 0);
    CHECK_EQ(lull_io_init(loop, &quick.io, quick.fds[0], quick_io), 0);
    CHECK_EQ(lull_io_start(&quick.io, LULL_READABLE), 0);
    lull_timer_init(loop, &quick.far, quick_far);
    lull_timer_unref(&quick.far);
    if (timer) lull_timer_start(&quick.far, 3600 * 1000 * MS, 0);
    lull_task_init(&quick.task, quick_hop);
    lull_task_post(loop, &quick.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(quick.hops, 300);
    CHECK_EQ(quick.io_at, quick.at); /* the look after that hop found it */
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.iterations, 300);
    CHECK_U64_EQ(m.polls, 300);
    lull_timer_stop(&quick.far);
    fake_clock.on = false;
    close(quick.fds[0]);
    close(quick.fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(every_hop_quick_hops_look_every_hop_with_a_timer_armed) {
    quick_hops_look_every_hop(500, true);
}

TEST(every_hop_quick_hops_look_every_hop_at_the_64th_reading) {
    quick_hops_look_every_hop(999, false);
}
