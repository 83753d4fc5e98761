/* producer: a long job on the quantum, with a 10 ms timer beside it.
 *
 * The job mixes RECORDS records in one task that runs until
 * lull_loop_should_yield says its slice is spent (0.5 ms on a shared loop),
 * then posts itself again. Between two slices the loop polls fds and runs due
 * timers, so the 10 ms timer fires within about one quantum of its
 * deadline while the job runs flat out, and the job pays one turn per
 * slice, not one per record. When the job is done it stops the timer;
 * nothing is left and lull_loop_run returns.
 *
 * Prints one line per tick (how late it fired, how far the job is) and a
 * summary; exits 0 when every record was produced.
 *
 * Build:
 *   cc -O2 -o producer producer.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#include <lull.h>
#include <stdio.h>

#define RECORDS 10000000ull
#define TICK_NS 10000000ull /* 10 ms */

typedef struct job {
    lull_loop *loop;
    lull_task task;  /* one slice of the job */
    lull_timer tick; /* every 10 ms while the job runs */
    uint64_t next;   /* the next record to produce */
    uint64_t sum;    /* what the records add up to */
    uint64_t slices; /* times the task ran */
    uint64_t ticks, worst_late_ns;
} job;

/* One record's worth of work: a few rounds of a 64-bit mixer. */
static uint64_t mix(uint64_t h, uint64_t x) {
    for (int i = 0; i < 4; i++) {
        h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        x = x * 0xff51afd7ed558ccdull;
    }
    return h;
}

/* The core: produce until the quantum is spent, then let the loop breathe. */
static void produce(lull_task *t) {
    job *j = LULL_CONTAINER_OF(t, job, task);
    j->slices++;
    while (j->next < RECORDS) {
        j->sum = mix(j->sum, j->next++);
        if (lull_loop_should_yield(j->loop)) break; /* a few ns: per record */
    }
    if (j->next < RECORDS)
        lull_task_post(j->loop, t); /* behind the fds and timers that are due */
    else
        lull_timer_stop(&j->tick); /* done: nothing keeps the loop alive */
}

static void on_tick(lull_timer *t) {
    job *j = LULL_CONTAINER_OF(t, job, tick);
    /* A repeating timer is re-armed before its callback runs: the deadline
     * that fired is the next one minus the period. */
    uint64_t due = lull_timer_deadline(t) - TICK_NS;
    uint64_t now = lull_loop_now_exact(j->loop);
    uint64_t late = now > due ? now - due : 0;
    if (late > j->worst_late_ns) j->worst_late_ns = late;
    j->ticks++;
    printf("tick %llu: %.0f us after its deadline, job %.0f%% done\n",
           (unsigned long long)j->ticks, (double)late / 1e3,
           100.0 * (double)j->next / (double)RECORDS);
}

int main(void) {
    job j = {0};
    int err = lull_loop_new(&j.loop, NULL);
    if (err < 0) {
        fprintf(stderr, "producer: %s\n", lull_strerror(err));
        return 1;
    }
    lull_task_init(&j.task, produce);
    lull_task_post(j.loop, &j.task);
    lull_timer_init(j.loop, &j.tick, on_tick);
    lull_timer_start(&j.tick, TICK_NS, TICK_NS);
    LULL_NAME(j.loop, produce, "producer: job");

    lull_loop_run(j.loop, LULL_RUN_DEFAULT);

    printf("done: %llu records in %llu slices of %llu us (checksum %016llx); "
           "%llu ticks, the latest %.0f us after its deadline\n",
           (unsigned long long)j.next, (unsigned long long)j.slices,
           (unsigned long long)(lull_loop_quantum(j.loop) / 1000),
           (unsigned long long)j.sum, (unsigned long long)j.ticks,
           (double)j.worst_late_ns / 1e3);
    if (lull_loop_free(j.loop) != 0) return 1;
    return j.next == RECORDS ? 0 : 1;
}
