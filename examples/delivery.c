/* delivery: a pump that delivers events from a log to a driver, woken by
 * the log's notifier, holding events while the driver is not ready.
 *
 * The log is the source of truth: events are written, and become readable
 * when committed; events written inside a checkpoint become readable
 * together when it ends. The log raises its notifier in exactly the two
 * places where `readable` grows, after storing it. The reader's pump
 * listens to that notifier; its pass reads what is readable past its cursor
 * and hands it to the driver.
 *
 * A writer commits one event every 2 ms, ten in all; events 4-6 are
 * committed inside a checkpoint and released together. The driver is not
 * ready until the third commit (a pending turn start), so the pass holds
 * what it has and retries every 1 ms, only while something is held: before
 * the first commit nothing is held and nothing is retried. When the turn is
 * delivered and the writer is done, the loop has no timer and no task, and
 * lull_loop_run returns by itself. It runs on the virtual clock with
 * LULL_LOOP_AUTO_ADVANCE, so the times printed are exact.
 *
 * Build:
 *   cc -O2 -o delivery delivery.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#include <lull.h>
#include <stdio.h>

#define MS     1000000ull
#define EVENTS 10

typedef struct event_log {
    uint64_t events[EVENTS]; /* the values written */
    int written;             /* events written */
    int readable;            /* events a reader may read: [0, readable) */
    int checkpoints;         /* open checkpoints hold commits back */
    lull_notifier changed;   /* raised after `readable` grows */
    uint64_t reads;          /* state reads, to show that idle costs none */
} event_log;

static void log_release(event_log *log) {
    if (log->checkpoints > 0 || log->readable == log->written) return;
    log->readable = log->written;       /* store first ... */
    lull_notifier_raise(&log->changed); /* ... then raise */
}

static void log_commit(event_log *log, uint64_t value) {
    log->events[log->written++] = value;
    log_release(log);
}

static void log_checkpoint_end(event_log *log) {
    log->checkpoints--;
    log_release(log);
}

typedef struct reader {
    event_log *log;
    int cursor;             /* events the driver has had */
    lull_pump pump;         /* runs pass() */
    lull_listener listener; /* the pump on the log's notifier */
    bool ready;             /* the driver accepts events */
} reader;

/* A pass: look at the source of truth, hand on what is there, and say what
 * is left. It never waits and never arms a timer itself. */
static lull_pass_result pass(lull_pump *pump, uint64_t *retry_ns) {
    reader *r = LULL_CONTAINER_OF(pump, reader, pump);
    lull_loop *loop = pump->loop;
    int backlog = r->log->readable - r->cursor; /* no state read needed */
    if (backlog == 0) return LULL_PASS_QUIET;
    if (!r->ready) {
        printf("%5.1f ms  pass: driver not ready, %d held, retry in 1 ms\n",
               (double)lull_loop_now(loop) / 1e6, backlog);
        *retry_ns = 1 * MS; /* held: retried only while held */
        return LULL_PASS_HELD;
    }
    r->log->reads++;
    int n = 0;
    for (; n < 4 && r->cursor < r->log->readable; n++, r->cursor++)
        printf("%5.1f ms  driver: event %llu\n",
               (double)lull_loop_now(loop) / 1e6,
               (unsigned long long)r->log->events[r->cursor]);
    lull_pump_delivered(pump, (uint64_t)n);
    /* A full batch may have left more: continue in the next task, so other
     * work can run between batches. */
    return r->cursor < r->log->readable ? LULL_PASS_AGAIN : LULL_PASS_QUIET;
}

typedef struct writer {
    lull_timer tick;
    event_log *log;
    reader *reader;
    int sent;
} writer;

static void write_one(lull_timer *t) {
    writer *w = LULL_CONTAINER_OF(t, writer, tick);
    int k = ++w->sent;
    /* The driver turns ready. That is an event, not something to wait
     * for: wake the pump, which cancels the pending retry. */
    if (k == 3) {
        w->reader->ready = true;
        lull_pump_wake(&w->reader->pump);
    }
    if (k == 4) w->log->checkpoints++;
    log_commit(w->log, (uint64_t)k); /* raises the notifier, if readable */
    if (k == 6) {
        printf("%5.1f ms  writer: checkpoint releases 4-6\n",
               (double)lull_loop_now(t->loop) / 1e6);
        log_checkpoint_end(w->log);
    }
    if (k == EVENTS) lull_timer_stop(t);
}

int main(void) {
    lull_loop *loop;
    lull_loop_options opts = {.clock = LULL_CLOCK_VIRTUAL,
                              .flags = LULL_LOOP_AUTO_ADVANCE};
    int err = lull_loop_new(&loop, &opts);
    if (err < 0) {
        fprintf(stderr, "delivery: %s\n", lull_strerror(err));
        return 1;
    }
    event_log log = {.written = 0};
    lull_notifier_init(&log.changed);

    reader r = {.log = &log};
    int rc = lull_pump_init(loop, &r.pump, pass);
    if (rc == 0 &&
        (rc = lull_pump_listen(&r.pump, &log.changed, &r.listener)) < 0)
        lull_pump_close(&r.pump);
    if (rc < 0) {
        fprintf(stderr, "delivery: %s\n", lull_strerror(rc));
        lull_loop_free(loop);
        return 1;
    }

    writer w = {.log = &log, .reader = &r};
    lull_timer_init(loop, &w.tick, write_one);
    lull_timer_start(&w.tick, 1 * MS, 2 * MS);

    /* Virtual time jumps to each deadline; real time would do the same. */
    lull_loop_run(loop, LULL_RUN_DEFAULT);
    printf("done: %d delivered in %llu passes (%llu empty), %llu state "
           "reads; pump quiet: %s\n",
           r.cursor, (unsigned long long)r.pump.passes,
           (unsigned long long)r.pump.empty, (unsigned long long)log.reads,
           lull_pump_quiet(&r.pump) ? "yes" : "no");

    lull_pump_close(&r.pump);
    if (lull_loop_free(loop) != 0) return 1;
    return r.cursor == EVENTS ? 0 : 1;
}
