/* worker_pump: a worker thread feeds a pump on the loop thread through
 * lull_notifier_raise_remote, and ends the run cleanly when it is done.
 *
 * The worker pushes ITEMS numbered items into an inbox (worker_pump.h: a
 * ring under a mutex, a notifier, and a pump whose pass delivers them in
 * batches to the sink) and then calls inbox_finish. The loop thread only
 * runs lull_loop_run: the inbox holds a loop reference while the worker may
 * still post, and drops it when the last item is delivered, so lull_loop_run
 * returns by itself. Raises coalesce: many lull_notifier_raise_remote calls
 * reach the loop as far fewer raises, and those as fewer passes.
 *
 * Prints one summary line; exits 0 when every item arrived once, in order.
 *
 * Build (worker_pump.h sits beside it):
 *   cc -O2 -pthread -o worker_pump worker_pump.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "worker_pump.h"

#define ITEMS 100000ull

typedef struct app {
    inbox in;
    uint64_t expect;       /* the next item the sink should see */
    uint64_t received;     /* items the sink took */
    uint64_t out_of_order; /* items that were not the expected one */
} app;

/* The sink runs on the loop thread, inside the pass. */
static bool sink(inbox *in, uint64_t item) {
    app *a = LULL_CONTAINER_OF(in, app, in);
    if (item != a->expect) a->out_of_order++;
    a->expect = item + 1;
    a->received++;
    return true;
}

static void *worker(void *arg) {
    inbox *in = arg;
    for (uint64_t i = 0; i < ITEMS; i++)
        inbox_push(in, i);
    inbox_finish(in); /* the last call this thread makes on the inbox */
    return NULL;
}

int main(void) {
    lull_loop *loop;
    int err = lull_loop_new(&loop, NULL);
    if (err < 0) {
        fprintf(stderr, "worker_pump: %s\n", lull_strerror(err));
        return 1;
    }
    app a = {.expect = 0};
    err = inbox_open(&a.in, loop, sink);
    if (err < 0) {
        fprintf(stderr, "worker_pump: %s\n", lull_strerror(err));
        lull_loop_free(loop);
        return 1;
    }
    LULL_NAME(loop, inbox_pass, "inbox: delivery pass");

    pthread_t th;
    bool started = pthread_create(&th, NULL, worker, &a.in) == 0;
    if (!started) inbox_finish(&a.in); /* no producer: end the session */
    /* returns when the session has ended */
    int rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    if (started) pthread_join(th, NULL); /* before anything is freed */

    lull_metrics m;
    lull_loop_metrics(loop, &m);
    printf(
        "delivered %llu of %llu items, %llu out of order: %llu passes "
        "(%llu empty), %llu raises for %llu lull_notifier_raise_remote calls, "
        "%llu wakeups\n",
        (unsigned long long)a.received, ITEMS,
        (unsigned long long)a.out_of_order,
        (unsigned long long)a.in.pump.passes,
        (unsigned long long)a.in.pump.empty,
        (unsigned long long)a.in.pushed.raised, ITEMS,
        (unsigned long long)m.wakeups);
    inbox_destroy(&a.in);
    if (lull_loop_free(loop) != 0 || rc != 0) return 1;
    return a.received == ITEMS && a.out_of_order == 0 ? 0 : 1;
}
