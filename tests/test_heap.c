/* The timer heap through the public API, at scale and against a model:
 * timers fire in (deadline, arm order), each exactly once, none cancelled.
 * Virtual clock; pseudo-random with fixed seeds, so a failure replays. */
#include "check.h"

#include <lull.h>
#include <string.h>
#include <unistd.h>

#include "heap.h" /* the chunk size, to place timers at chunk edges */

typedef struct ht {
    lull_timer timer;
    uint64_t deadline; /* expected, relative to t0 */
    uint32_t seq;      /* expected arm order */
    bool armed;        /* the model's view */
    int fired;
} ht;

static lull_loop *the_loop;
static uint64_t t0;
static uint64_t rng;

static uint64_t next_rand(void) { /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static lull_loop *new_loop(uint64_t seed) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    t0 = lull_loop_now(loop);
    rng = seed;
    return loop;
}

/* ------------------------------------------------- 100,000 at scale */

#define N 100000

static ht *hs;
static uint64_t last_deadline;
static uint32_t last_seq;
static uint64_t fires;
static uint64_t errors;

static void note_error(const ht *h, const char *what) {
    if (errors++ < 5)
        fprintf(stderr, "timer %td (deadline %" PRIu64 ", seq %u): %s\n",
                h - hs, h->deadline, h->seq, what);
}

static void on_fire(lull_timer *t) {
    ht *h = LULL_CONTAINER_OF(t, ht, timer);
    uint64_t now = lull_loop_now(the_loop) - t0;
    if (!h->armed) note_error(h, "fired while cancelled or already fired");
    if (now != h->deadline) note_error(h, "fired at the wrong time");
    if (fires > 0 && (h->deadline < last_deadline ||
                      (h->deadline == last_deadline && h->seq <= last_seq)))
        note_error(h, "out of (deadline, arm order)");
    last_deadline = h->deadline;
    last_seq = h->seq;
    h->armed = false;
    h->fired++;
    fires++;
}

static void arm(ht *h, uint64_t delay, uint32_t seq) {
    h->deadline = lull_loop_now(the_loop) - t0 + delay;
    h->seq = seq;
    h->armed = true;
    lull_timer_start(&h->timer, delay, 0);
}

TEST(heap_100k_random_deadlines_fire_in_order) {
    lull_loop *loop = new_loop(0x9e3779b97f4a7c15ull);
    hs = calloc(N, sizeof *hs);
    CHECK(hs != NULL);
    fires = 0;
    errors = 0;
    uint32_t seq = 0;
    /* Deadlines in [1, 50000]: about two timers per instant, so arm order
     * decides often. */
    for (int i = 0; i < N; i++) {
        lull_timer_init(loop, &hs[i].timer, on_fire);
        arm(&hs[i], 1 + next_rand() % 50000, seq++);
    }
    /* Cancel a random third. */
    int *idx = malloc(N * sizeof *idx);
    CHECK(idx != NULL);
    for (int i = 0; i < N; i++)
        idx[i] = i;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(next_rand() % (uint64_t)(i + 1)), tmp = idx[i];
        idx[i] = idx[j];
        idx[j] = tmp;
    }
    for (int i = 0; i < N / 3; i++) {
        lull_timer_stop(&hs[idx[i]].timer);
        hs[idx[i]].armed = false;
    }
    /* Re-arm 1,000 of the survivors: new deadline, new (last) arm order. */
    for (int i = N / 3; i < N / 3 + 1000; i++)
        arm(&hs[idx[i]], 1 + next_rand() % 50000, seq++);
    int expected = N - N / 3;
    for (int i = 0; i < N; i++)
        CHECK_EQ(lull_timer_active(&hs[i].timer), hs[i].armed);

    /* Advance in uneven steps past the last deadline. */
    while (lull_loop_now(loop) - t0 <= 50000)
        lull_loop_advance(loop, 1 + next_rand() % 3000);
    CHECK_U64_EQ(errors, 0);
    CHECK_U64_EQ(fires, (uint64_t)expected);
    for (int i = 0; i < N; i++)
        CHECK(!lull_timer_active(&hs[i].timer));
    for (int i = 0; i < N / 3; i++)
        CHECK_EQ(hs[idx[i]].fired, 0);
    for (int i = N / 3; i < N; i++)
        CHECK_EQ(hs[idx[i]].fired, 1);
    free(idx);
    free(hs);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ----------------------------------------------- churn against a model */

#define M 2000

static uint32_t model_seq;

/* The model: the fired timer must be the smallest (deadline, seq) armed. */
static void on_fire_model(lull_timer *t) {
    ht *h = LULL_CONTAINER_OF(t, ht, timer);
    uint64_t now = lull_loop_now(the_loop) - t0;
    if (!h->armed) note_error(h, "fired while not armed");
    if (now != h->deadline) note_error(h, "fired at the wrong time");
    for (int i = 0; i < M; i++) {
        const ht *o = &hs[i];
        if (o != h && o->armed &&
            (o->deadline < h->deadline ||
             (o->deadline == h->deadline && o->seq < h->seq))) {
            note_error(h, "fired before an earlier timer");
            break;
        }
    }
    h->armed = false;
    h->fired++;
    fires++;
    /* A quarter re-arm themselves from the callback, some with delay 0. */
    if (next_rand() % 4 == 0) arm(h, next_rand() % 50, model_seq++);
}

TEST(heap_churn_against_model) {
    lull_loop *loop = new_loop(12345);
    hs = calloc(M, sizeof *hs);
    CHECK(hs != NULL);
    fires = 0;
    errors = 0;
    model_seq = 0;
    for (int i = 0; i < M; i++)
        lull_timer_init(loop, &hs[i].timer, on_fire_model);
    for (int round = 0; round < 200; round++) {
        for (int op = 0; op < 200; op++) {
            ht *h = &hs[next_rand() % M];
            switch (next_rand() % 3) {
            case 0:
            case 1: /* start or re-arm */
                arm(h, next_rand() % 1000, model_seq++);
                break;
            default:
                lull_timer_stop(&h->timer);
                h->armed = false;
            }
        }
        lull_loop_advance(loop, next_rand() % 300);
        /* Nothing due was left behind. */
        uint64_t now = lull_loop_now(loop) - t0;
        for (int i = 0; i < M; i++) {
            if (hs[i].armed && hs[i].deadline <= now)
                note_error(&hs[i], "due but not fired");
            if (lull_timer_active(&hs[i].timer) != hs[i].armed)
                note_error(&hs[i], "lull_timer_active disagrees");
        }
        CHECK_U64_EQ(errors, 0);
    }
    CHECK_LE(10000, fires);
    for (int i = 0; i < M; i++)
        lull_timer_stop(&hs[i].timer);
    free(hs);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------- growth by chunks (heap.h) */

/* Timers in positions across several chunk boundaries: deadlines armed in
 * descending order (every arm climbs to the root, through every level and
 * so through several chunks), then the timers sitting at the edges of each
 * chunk are cancelled, survivors are re-armed onto deadlines other timers
 * already hold (ties decided by arm order across chunks), and armed and
 * cancelled at random while the heap's end moves back and forth across a
 * boundary. Everything then fires in (deadline, arm order), once. */
#define K ((int)(5 * LULL__HEAP_CHUNK + 100))

static bool at_chunk_edge(const lull_timer *t) {
    uint32_t in = t->node.aux % LULL__HEAP_CHUNK;
    return t->node.aux != 0 && (in < 2 || in >= LULL__HEAP_CHUNK - 3);
}

TEST(heap_order_across_chunk_boundaries) {
    lull_loop *loop = new_loop(0x5851f42d4c957f2dull);
    hs = calloc(K, sizeof *hs);
    CHECK(hs != NULL);
    fires = 0;
    errors = 0;
    uint32_t seq = 0;
    for (int i = 0; i < K; i++) {
        lull_timer_init(loop, &hs[i].timer, on_fire);
        arm(&hs[i], (uint64_t)(K - i) * 4, seq++);
    }
    /* Growing moved nothing: every deadline reads back as armed. */
    for (int i = 0; i < K; i++)
        CHECK_U64_EQ(lull_timer_deadline(&hs[i].timer), t0 + hs[i].deadline);

    int edges = 0;
    for (int i = 0; i < K; i++) {
        if (!at_chunk_edge(&hs[i].timer) && i % 7 != 0) continue;
        edges += at_chunk_edge(&hs[i].timer);
        lull_timer_stop(&hs[i].timer);
        hs[i].armed = false;
    }
    CHECK_LE(5 * 4, edges); /* at least the edges of the full chunks */

    /* Re-armed onto deadlines that others hold: later arm, fires after. */
    for (int i = 1; i < K; i += 13)
        if (hs[i].armed) arm(&hs[i], (uint64_t)(i % 50 + 1) * 4, seq++);

    /* Churn around the end of the heap, which now sits past 4 chunks. */
    for (int op = 0; op < 20000; op++) {
        ht *h = &hs[next_rand() % K];
        if (h->armed && next_rand() % 2) {
            lull_timer_stop(&h->timer);
            h->armed = false;
        } else {
            arm(h, 1 + next_rand() % (4 * K), seq++);
        }
    }
    uint64_t expected = 0;
    for (int i = 0; i < K; i++) {
        CHECK_EQ(lull_timer_active(&hs[i].timer), hs[i].armed);
        if (hs[i].armed) {
            CHECK_U64_EQ(lull_timer_deadline(&hs[i].timer),
                         t0 + hs[i].deadline);
            expected++;
        }
    }
    while (lull_loop_now(loop) - t0 <= 4 * (uint64_t)K)
        lull_loop_advance(loop, 1 + next_rand() % 5000);
    CHECK_U64_EQ(errors, 0);
    CHECK_U64_EQ(fires, expected);
    for (int i = 0; i < K; i++)
        CHECK(!lull_timer_active(&hs[i].timer));
    free(hs);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The first chunk grows by doubling (64, 128, ... slots) before chunks are
 * added: each doubling copies the slots, and a timer must read back its
 * deadline and be cancellable after every one of them. Cancel the earliest
 * timer after each arm past a growth point, so the root is refilled from
 * the freshly copied end. */
TEST(heap_first_chunk_doubling_keeps_timers) {
    lull_loop *loop = new_loop(777);
    const int n = 2 * (int)LULL__HEAP_CHUNK;
    hs = calloc(n, sizeof *hs);
    CHECK(hs != NULL);
    fires = 0;
    errors = 0;
    uint32_t seq = 0;
    int cancelled = 0;
    for (int i = 0; i < n; i++) {
        lull_timer_init(loop, &hs[i].timer, on_fire);
        arm(&hs[i], 1 + next_rand() % 100000, seq++);
        /* Positions ROOT+i: the arm that filled position 2^k - 1. */
        uint32_t end = LULL__HEAP_ROOT + (uint32_t)i + 1;
        if ((end & (end - 1)) != 0) continue;
        ht *first = NULL;
        for (int j = 0; j <= i; j++) {
            if (!hs[j].armed) continue;
            CHECK_U64_EQ(lull_timer_deadline(&hs[j].timer),
                         t0 + hs[j].deadline);
            if (!first || hs[j].deadline < first->deadline ||
                (hs[j].deadline == first->deadline && hs[j].seq < first->seq))
                first = &hs[j];
        }
        lull_timer_stop(&first->timer);
        first->armed = false;
        cancelled++;
    }
    /* Cancel a quarter from the middle, then fire the rest in order. */
    for (int i = n / 4; i < n / 2; i++) {
        if (hs[i].armed) cancelled++;
        lull_timer_stop(&hs[i].timer);
        hs[i].armed = false;
    }
    CHECK_LE(7, cancelled - n / 4); /* one per doubling, 64 .. 4096 */
    lull_loop_advance(loop, 100001);
    CHECK_U64_EQ(errors, 0);
    CHECK_U64_EQ(fires, (uint64_t)(n - cancelled));
    free(hs);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Request timeouts cancelled newest first (a reply that comes before the
 * next request's arm): the newest arm that stayed where it landed is the
 * heap's last slot, and its cancel moves nothing (heap.h). Deadlines in a
 * narrow range, so ties are common and arm order decides them; a slot
 * whose position is the largest of all armed ones is the last one, and the
 * test checks that many cancels took that path. The rest then fire in
 * (deadline, arm order), once. */
TEST(heap_cancel_newest_first_keeps_order) {
    lull_loop *loop = new_loop(0x2545f4914f6cdd1dull);
    const int n = 3 * (int)LULL__HEAP_CHUNK;
    hs = calloc(n, sizeof *hs);
    bool *stopped = calloc(n, sizeof *stopped);
    CHECK(hs != NULL && stopped != NULL);
    fires = 0;
    errors = 0;
    uint32_t seq = 0;
    int cancelled = 0, at_end = 0, top = 0; /* hs[0..top) armed so far */
    for (int i = 0; i < n; i++)
        lull_timer_init(loop, &hs[i].timer, on_fire);
    while (top < n) {
        /* Arm a few, then cancel the newest of them, newest first. */
        int burst = 1 + (int)(next_rand() % 8);
        int from = top;
        for (int k = 0; k < burst && top < n; k++, top++)
            arm(&hs[top], 1 + next_rand() % 500, seq++);
        int cancels = (int)(next_rand() % (uint64_t)(top - from + 1));
        for (int j = top - 1; j >= top - cancels; j--) {
            uint32_t max = 0;
            for (int m = 0; m < top; m++)
                if (hs[m].armed && hs[m].timer.node.aux > max)
                    max = hs[m].timer.node.aux;
            at_end += hs[j].timer.node.aux == max;
            lull_timer_stop(&hs[j].timer);
            hs[j].armed = false;
            stopped[j] = true;
            cancelled++;
        }
    }
    CHECK_LE(n / 8, at_end);
    for (int i = 0; i < n; i++)
        CHECK_EQ(lull_timer_active(&hs[i].timer), hs[i].armed);
    lull_loop_advance(loop, 501);
    CHECK_U64_EQ(errors, 0);
    CHECK_U64_EQ(fires, (uint64_t)(n - cancelled));
    for (int i = 0; i < n; i++)
        CHECK_EQ(hs[i].fired, stopped[i] ? 0 : 1);
    free(stopped);
    free(hs);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------ deferred arms (src/timer.c) ---
 * On the real clock a callback's delayed arms wait after the heap until the
 * loop's next reading, which gives each its deadline, reading + delay. Arms
 * made with no reading between them are flushed by the same reading, so
 * their deadlines differ exactly by their delays, and they fire in (delay,
 * arm order) whatever the machine's speed: the real clock, checked as
 * exactly as the virtual one. */

typedef struct dt {
    lull_timer timer;
    uint64_t delay;
    uint64_t called; /* CLOCK_MONOTONIC just before the last arm */
    uint32_t seq;    /* arm order, for the ones one reading flushes */
    int group;       /* which callback's arms (one reading each), or -1 */
    bool armed;      /* the model's view */
    bool expect;     /* armed when the arming callback returned */
    int fired;
} dt;

static dt *ds;
static int ds_n;
static uint32_t d_seq;
static const dt *d_last; /* the last fire of the group that is ordered */
static uint64_t d_fires;

static void d_error(const dt *d, const char *what) {
    if (errors++ < 5)
        fprintf(stderr, "timer %td (delay %" PRIu64 ", seq %u): %s\n", d - ds,
                d->delay, d->seq, what);
}

static void d_fired(lull_timer *t) {
    dt *d = LULL_CONTAINER_OF(t, dt, timer);
    if (!d->armed) d_error(d, "fired while not armed");
    if (check_clock_ns() < d->called + d->delay) d_error(d, "fired early");
    if (d->group == 0) {
        if (d_last && (d->delay < d_last->delay ||
                       (d->delay == d_last->delay && d->seq <= d_last->seq)))
            d_error(d, "out of (delay, arm order)");
        d_last = d;
    }
    d->armed = false;
    d->fired++;
    d_fires++;
}

static void d_arm(dt *d, uint64_t delay, int group) {
    d->delay = delay;
    d->seq = d_seq++;
    d->group = group;
    d->armed = true;
    d->called = check_clock_ns();
    lull_timer_start(&d->timer, delay, 0);
}

static void d_stop(dt *d) {
    lull_timer_stop(&d->timer);
    d->armed = false;
}

/* Asks for a deadline, which flushes the deferred arms, then checks the
 * heap's order, every position against its parent (heap.h), by the
 * deadline of the timer each position holds: the debug build's
 * loop_verify checks the first 1,024 slots only. */
static bool d_check_heap;
static lull_timer d_reader; /* takes the callback's reading (d_arm_all) */
static void d_reader_fired(lull_timer *t) {
    (void)t;
}

static void check_heap_order(void) {
    uint32_t end = d_reader.node.aux + 1;
    for (int i = 0; i < ds_n; i++) {
        if (!ds[i].armed) continue;
        CHECK(lull_timer_deadline(&ds[i].timer) != 0); /* flushes them all */
        if (ds[i].timer.node.aux >= end) end = ds[i].timer.node.aux + 1;
    }
    uint64_t *at = calloc(end, sizeof *at);
    CHECK(at != NULL);
    for (int i = 0; i < ds_n; i++)
        if (ds[i].armed)
            at[ds[i].timer.node.aux] = lull_timer_deadline(&ds[i].timer);
    if (d_reader.node.aux) /* the reading's own timer, in the heap too */
        at[d_reader.node.aux] = lull_timer_deadline(&d_reader);
    for (uint32_t p = LULL__HEAP_ROOT; p < end; p++) {
        CHECK(at[p] != 0); /* the heap has no gaps */
        if (p > LULL__HEAP_ROOT && at[p / 8 + 6] > at[p] && errors++ < 5)
            fprintf(stderr, "position %u fires before its parent\n", p);
    }
    free(at);
}

/* One callback: every timer armed (the deferred area spans chunk
 * boundaries), then 20,000 random stops and re-arms, all before any
 * reading: deferred slots leave from the middle and the end, and the ones
 * stopped and armed again go last. */
static void d_arm_all(lull_task *t) {
    (void)t;
    /* The callback's first delayed arm reads the clock for itself
     * (src/timer.c): with d_check_heap a timer outside the ordered group
     * takes that reading, so one reading flushes every timer checked. */
    if (d_check_heap) lull_timer_start(&d_reader, 1000000, 0);
    for (int i = 0; i < ds_n; i++)
        d_arm(&ds[i], 1 * 1000000 + (next_rand() % 200) * 5000, 0);
    for (int op = 0; op < 20000; op++) {
        dt *d = &ds[next_rand() % (uint64_t)ds_n];
        if (d->armed && next_rand() % 2)
            d_stop(d);
        else
            d_arm(d, 1 * 1000000 + (next_rand() % 200) * 5000, 0);
    }
    for (int i = 0; i < ds_n; i++) {
        if (lull_timer_active(&ds[i].timer) != ds[i].armed)
            d_error(&ds[i], "lull_timer_active disagrees");
        ds[i].expect = ds[i].armed;
    }
    if (d_check_heap) check_heap_order();
}

/* n timers, all armed by one callback after the heap was grown to hold
 * them (below). */
static void deferred_batch(int n, uint64_t seed) {
    lull_loop_options o = {.clock = LULL_CLOCK_MONOTONIC};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    rng = seed;
    ds_n = n;
    ds = calloc((size_t)ds_n, sizeof *ds);
    CHECK(ds != NULL);
    errors = d_fires = 0;
    d_seq = 0;
    d_last = NULL;
    for (int i = 0; i < ds_n; i++)
        lull_timer_init(loop, &ds[i].timer, d_fired);
    lull_timer_init(loop, &d_reader, d_reader_fired);
    /* The heap grown first (arms outside a run, then stopped; it never
     * shrinks): an arm that found it full would read the clock (a second
     * reading in the batch, tests/test_timer.c), and the exact order below
     * is that of the arms one reading flushes. */
    for (int i = 0; i < ds_n; i++)
        lull_timer_start(&ds[i].timer, 1 * 1000000, 0);
    for (int i = 0; i < ds_n; i++)
        lull_timer_stop(&ds[i].timer);
    lull_task task;
    lull_task_init(&task, d_arm_all);
    lull_task_post(loop, &task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(errors, 0);
    uint64_t expected = 0;
    for (int i = 0; i < ds_n; i++) {
        CHECK(!lull_timer_active(&ds[i].timer));
        CHECK_EQ(ds[i].fired, ds[i].expect ? 1 : 0);
        expected += ds[i].fired;
    }
    CHECK_U64_EQ(d_fires, expected);
    CHECK_LE((uint64_t)n / 2, d_fires);
    free(ds);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(deferred_arms_of_one_callback_fire_in_delay_and_arm_order) {
    deferred_batch(K, 0xdeadbeefcafef00dull);
}

/* The flush walks the deferred slots and their parents by pointer, and
 * looks a chunk up where either crosses into the next (src/heap.c): with
 * twelve chunks of timers (about 42,000 still armed after the callback's
 * stops) the parents, one position per eight arms, cross a chunk boundary
 * too (position 4,096 is the parent of 32,720 .. 32,727). */
TEST(deferred_arms_whose_parents_cross_a_chunk_fire_in_order) {
    d_check_heap = true;
    deferred_batch((int)(12 * LULL__HEAP_CHUNK + 100), 0x853c49e6748fea9bull);
}

/* Deferred arms beside a heap that moves: four always-readable pipes run
 * four fd callbacks an iteration, each stopping and arming random timers
 * (deferred, and stops of deferred and of heap timers), and a 200 us
 * repeating timer is re-armed by the expiry that follows them, often while
 * arms are still deferred (no reading between the later fd callbacks and
 * the expiry): an insert into the heap moves the first deferred slot, a
 * removal from it moves the last. For 2,000 fd callbacks (500 iterations,
 * a count, not a time: valgrind runs them 30 times slower); each fire is
 * of an armed timer and never early, every timer's state agrees with the
 * model, and the debug build's loop_verify walks heap and deferred area at
 * every iteration. */
#define D_POOL  3000
#define D_PIPES 4
#define D_CALLS 2000

static lull_timer d_tick;
static lull_io d_ios[D_PIPES];
static uint64_t d_ticks, d_calls;

static void d_on_tick(lull_timer *t) {
    (void)t;
    d_ticks++;
}

static void d_on_readable(lull_io *io, int events) {
    (void)io;
    (void)events;
    if (++d_calls == D_CALLS) {
        lull_timer_stop(&d_tick);
        for (int i = 0; i < D_PIPES; i++)
            lull_io_stop(&d_ios[i]);
        return;
    }
    for (int op = 0; op < 16; op++) {
        dt *d = &ds[next_rand() % D_POOL];
        if (d->armed && next_rand() % 3 == 0)
            d_stop(d);
        else
            d_arm(d, 100000 + next_rand() % 2000000, -1);
    }
}

TEST(deferred_arms_beside_a_moving_heap) {
    lull_loop_options o = {.clock = LULL_CLOCK_MONOTONIC};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    the_loop = loop;
    rng = 0x0123456789abcdefull;
    ds_n = D_POOL;
    ds = calloc(D_POOL, sizeof *ds);
    CHECK(ds != NULL);
    errors = d_fires = d_ticks = d_calls = 0;
    d_seq = 0;
    d_last = NULL;
    for (int i = 0; i < D_POOL; i++)
        lull_timer_init(loop, &ds[i].timer, d_fired);
    int fds[D_PIPES][2];
    for (int i = 0; i < D_PIPES; i++) {
        CHECK_EQ(pipe(fds[i]), 0);
        CHECK_EQ(write(fds[i][1], "x", 1), 1); /* readable until closed */
        CHECK_EQ(lull_io_init(loop, &d_ios[i], fds[i][0], d_on_readable), 0);
        CHECK_EQ(lull_io_start(&d_ios[i], LULL_READABLE), 0);
    }
    lull_timer_init(loop, &d_tick, d_on_tick);
    lull_timer_start(&d_tick, 200000, 200000);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(errors, 0);
    CHECK_LE(2, d_ticks);
    CHECK_LE(100, d_fires);
    for (int i = 0; i < D_POOL; i++) {
        if (lull_timer_active(&ds[i].timer) != ds[i].armed)
            d_error(&ds[i], "lull_timer_active disagrees");
        lull_timer_stop(&ds[i].timer);
    }
    CHECK_U64_EQ(errors, 0);
    for (int i = 0; i < D_PIPES; i++) {
        close(fds[i][0]);
        close(fds[i][1]);
    }
    free(ds);
    CHECK_EQ(lull_loop_free(loop), 0);
}
