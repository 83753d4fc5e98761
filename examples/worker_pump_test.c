/* worker_pump_test: the worker_pump pipeline under test on the virtual clock.
 *
 * On a loop made with LULL_CLOCK_VIRTUAL, time moves only when the test
 * calls lull_loop_advance, and lull_loop_settle runs everything that is ready,
 * cross-thread posts included, with time frozen. So the tests can say
 * exactly what happens when: that delivery needs no timer at all, that a
 * batch limit lets other work in, that a refused item is retried every
 * 1 ms and only while it is refused, and that the finish pattern ends
 * lull_loop_run. No test sleeps or measures speed.
 *
 * Prints "ok <test>" per test; exits 0 when all pass.
 *
 * Build (worker_pump.h sits beside it):
 *   cc -O2 -pthread -o worker_pump_test worker_pump_test.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples && ctest --test-dir build-examples */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "worker_pump.h"

#define MS 1000000ull

static const char *current_test;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: %s: failed: %s\n", __FILE__, __LINE__,     \
                    current_test, #cond);                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

typedef struct fixture {
    lull_loop *loop;
    inbox in;
    uint64_t ready_at; /* the sink refuses items before this time */
    uint64_t expect;   /* the next item the sink should see */
    uint64_t received;
    uint64_t out_of_order;
    lull_task probe;    /* posted by the sink at the first item */
    uint64_t probe_saw; /* items received when the probe ran */
    uint64_t produce;   /* items the producer thread pushes */
} fixture;

static bool sink(inbox *in, uint64_t item) {
    fixture *f = LULL_CONTAINER_OF(in, fixture, in);
    if (lull_loop_now(f->loop) < f->ready_at) return false;
    if (item != f->expect) f->out_of_order++;
    f->expect = item + 1;
    if (f->received++ == 0) lull_task_post(f->loop, &f->probe);
    return true;
}

static void on_probe(lull_task *t) {
    fixture *f = LULL_CONTAINER_OF(t, fixture, probe);
    f->probe_saw = f->received;
}

static void setup(fixture *f, const char *name) {
    current_test = name;
    memset(f, 0, sizeof *f);
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    CHECK(lull_loop_new(&f->loop, &o) == 0);
    CHECK(inbox_open(&f->in, f->loop, sink) == 0);
    lull_task_init(&f->probe, on_probe);
}

/* Ends the session as the producer would, and checks that everything can
 * be freed: nothing of the pipeline is left on the loop. */
static void teardown(fixture *f) {
    inbox_finish(&f->in);
    lull_loop_settle(f->loop);
    CHECK(!f->in.open);
    inbox_destroy(&f->in);
    CHECK(lull_loop_free(f->loop) == 0);
    printf("ok %s\n", current_test);
}

static void *producer(void *arg) {
    fixture *f = arg;
    for (uint64_t i = 0; i < f->produce; i++)
        inbox_push(&f->in, i);
    return NULL;
}

static void *producer_then_finish(void *arg) {
    producer(arg);
    inbox_finish(&((fixture *)arg)->in);
    return NULL;
}

/* Items pushed from another thread are delivered, in order, with time
 * frozen at 0: no timer is involved anywhere. 300 pushes before the loop
 * looked are one raise; the pass takes 64 at a time. */
static void delivers_with_time_frozen(void) {
    fixture f;
    setup(&f, "delivers_with_time_frozen");
    f.produce = 300;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, producer, &f) == 0);
    pthread_join(th, NULL);
    CHECK(f.received == 0); /* nothing runs on the producer's thread */

    lull_loop_settle(f.loop);
    CHECK(lull_loop_now(f.loop) == 0);
    CHECK(f.received == 300 && f.out_of_order == 0);
    CHECK(f.in.pushed.raised == 1);
    CHECK(f.in.pump.passes == 5 && f.in.pump.empty == 0); /* 4 x 64 + 44 */
    CHECK(lull_pump_quiet(&f.in.pump));
    teardown(&f);
}

/* A backlog longer than a batch continues in the next task, behind work
 * queued meanwhile: a task posted during the first batch runs before the
 * second one. */
static void batches_let_other_work_run(void) {
    fixture f;
    setup(&f, "batches_let_other_work_run");
    for (uint64_t i = 0; i < 200; i++)
        inbox_push(&f.in, i);
    lull_loop_settle(f.loop);
    CHECK(f.received == 200);
    CHECK(f.probe_saw == INBOX_BATCH);
    teardown(&f);
}

/* While the sink refuses, the pump holds the items and retries every 1 ms
 * (a retry that delivers nothing is an empty pass); once everything is
 * out it is quiet: no task, no timer, nothing more however long time
 * runs. */
static void held_items_are_retried_only_while_held(void) {
    fixture f;
    setup(&f, "held_items_are_retried_only_while_held");
    f.ready_at = 3 * MS;
    for (uint64_t i = 0; i < 10; i++)
        inbox_push(&f.in, i);
    lull_loop_settle(f.loop);
    CHECK(f.received == 0 && f.in.pump.passes == 1);
    CHECK(!lull_pump_quiet(&f.in.pump));
    CHECK(lull_timer_deadline(&f.in.pump.retry) == 1 * MS);

    lull_loop_advance(f.loop, 1 * MS - 1);
    CHECK(f.in.pump.passes == 1); /* not a nanosecond early */
    lull_loop_advance(f.loop, 1);
    CHECK(f.received == 0 && f.in.pump.passes == 2);

    lull_loop_advance(f.loop,
                      2 * MS); /* retries at 2 and 3 ms; 3 ms delivers */
    CHECK(f.received == 10 && f.out_of_order == 0);
    CHECK(f.in.pump.passes == 4 && f.in.pump.empty == 3);
    CHECK(lull_pump_quiet(&f.in.pump));

    lull_loop_advance(f.loop, 1000 * MS);
    CHECK(f.in.pump.passes == 4);
    teardown(&f);
}

/* The finish pattern, threaded: a producer pushes more than the ring holds
 * (it waits for the passes to make room) and then finishes; lull_loop_run on
 * the virtual loop sleeps until the producer's posts arrive and returns
 * once the session has ended, with virtual time still at 0. */
static void finish_ends_the_run(void) {
    fixture f;
    setup(&f, "finish_ends_the_run");
    f.produce = 10 * INBOX_CAP;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, producer_then_finish, &f) == 0);
    CHECK(lull_loop_run(f.loop, LULL_RUN_DEFAULT) == 0);
    pthread_join(th, NULL);
    CHECK(!f.in.open);
    CHECK(f.received == f.produce && f.out_of_order == 0);
    CHECK(f.in.pushed.raised <= f.produce);
    CHECK(lull_loop_now(f.loop) == 0);
    inbox_destroy(&f.in);
    CHECK(lull_loop_free(f.loop) == 0);
    printf("ok %s\n", current_test);
}

int main(void) {
    delivers_with_time_frozen();
    batches_let_other_work_run();
    held_items_are_retried_only_while_held();
    finish_ends_the_run();
    puts("worker_pump_test: all 4 tests passed");
    return 0;
}
