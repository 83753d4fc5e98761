/* delivery: notification-driven delivery from a committed-event window to a
 * driver (docs/PUMP.md walks through it).
 *
 * A writer commits one event every 2 ms for a 10-event turn; events 4-6 are
 * committed behind a checkpoint and released together; the driver is not
 * ready until 5 ms (a pending turn start), so the pass holds what it has
 * and retries every 1 ms, only while something is held (before the first
 * commit, nothing is held and nothing is retried). Nothing polls: when
 * the turn is delivered and the writer is done, the loop has no timer and
 * no task, and lull_run returns by itself.
 *
 * Build: part of the lull build (examples/CMakeLists.txt), or
 *   cc -Iinclude -Ilab examples/delivery.c lab/window.c -Lbuild -llull */
#include <lull.h>
#include <stdio.h>

#include "window.h"

#define MS 1000000ull

typedef struct reader {
    lab_window_cursor cursor; /* what the driver has had */
    lull_pump pump;           /* runs pass() */
    lull_listener listener;   /* the pump on the window's notifier */
    lab_window *window;
    bool ready; /* the driver accepts events */
} reader;

/* A pass: look at the source of truth, hand on what is there, and say what
 * is left. It never waits and never arms a timer itself. */
static int pass(lull_pump *pump, uint64_t *retry_ns) {
    reader *r = LULL_CONTAINER_OF(pump, reader, pump);
    lull_loop *loop = r->window->loop;
    if (!r->ready) {
        if (lab_window_backlog(&r->cursor) == 0) return LULL_PASS_QUIET;
        printf("%5.1f ms  pass: driver not ready, %llu held, retry in 1 ms\n",
               (double)lull_now(loop) / 1e6,
               (unsigned long long)lab_window_backlog(&r->cursor));
        *retry_ns = 1 * MS; /* held: retried only while held */
        return LULL_PASS_HELD;
    }
    lab_window_event ev[4];
    int n = lab_window_read(r->window, &r->cursor, ev, 4);
    for (int i = 0; i < n; i++)
        printf("%5.1f ms  driver: event %llu (%s), readable for %llu ns\n",
               (double)lull_now(loop) / 1e6, (unsigned long long)ev[i].seq,
               ev[i].flags & LAB_EVENT_TERMINAL ? "terminal" : "delta",
               (unsigned long long)(lull_now_exact(loop) - ev[i].readable_ns));
    lull_pump_delivered(pump, (uint64_t)n);
    /* A full batch may have left more: continue in the next task, so other
     * work can run between batches. */
    return n == 4 ? LULL_PASS_AGAIN : LULL_PASS_QUIET;
}

typedef struct writer {
    lull_timer tick;
    lab_window *window;
    reader *reader;
    int sent;
} writer;

static void write_one(lull_timer *t) {
    writer *w = LULL_CONTAINER_OF(t, writer, tick);
    int k = ++w->sent;
    /* The driver turns ready; this commit's raise wakes the pump, which
     * cancels the pending retry: the pass re-decides at once. */
    if (k == 3) w->reader->ready = true;
    if (k == 4) lab_window_checkpoint_begin(w->window);
    lab_window_append(w->window, (uint64_t)k, k == 10 ? LAB_EVENT_TERMINAL : 0,
                      1);
    lab_window_commit(w->window); /* raises the notifier, if readable */
    if (k == 6) {
        printf("%5.1f ms  writer: checkpoint releases 4-6\n",
               (double)lull_now(t->loop) / 1e6);
        lab_window_checkpoint_end(w->window);
    }
    if (k == 10) lull_timer_stop(t);
}

int main(void) {
    lull_loop *loop;
    lull_loop_options opts = {.clock = LULL_CLOCK_VIRTUAL,
                              .flags = LULL_LOOP_AUTO_ADVANCE};
    if (lull_loop_new(&loop, &opts) < 0) return 1;
    lab_window window;
    if (lab_window_init(&window, loop, 64, 16) < 0) return 1;

    reader r = {.window = &window};
    lab_window_cursor_open(&window, &r.cursor, 1);
    lull_pump_init(loop, &r.pump, pass);
    lull_pump_listen(&r.pump, &window.notifier, &r.listener);

    writer w = {.window = &window, .reader = &r};
    lull_timer_init(loop, &w.tick, write_one);
    lull_timer_start(&w.tick, 1 * MS, 2 * MS);

    /* Virtual time jumps to each deadline; real time would do the same. */
    lull_run(loop, LULL_RUN_DEFAULT);
    printf("done: %llu passes, %llu empty, %llu delivered, %llu state reads; "
           "pump quiet: %s\n",
           (unsigned long long)r.pump.passes, (unsigned long long)r.pump.empty,
           (unsigned long long)r.pump.delivered,
           (unsigned long long)window.reads,
           lull_pump_quiet(&r.pump) ? "yes" : "no");

    lull_pump_close(&r.pump);
    lab_window_cursor_close(&r.cursor);
    lab_window_free(&window);
    return lull_loop_free(loop) == 0 ? 0 : 1;
}
