/* worker_pump.h: an inbox that any thread fills and a pump empties on the
 * loop thread; used by worker_pump.c (a worker thread feeding it) and
 * worker_pump_test.c (the same pipeline on the virtual clock).
 *
 * A producer pushes an item into a ring under a mutex, then raises the
 * inbox's notifier with lull_notifier_raise_remote, the thread-safe raise. The
 * pump listens to that notifier, so a raise queues one delivery pass on the
 * loop thread; raises that arrive before the pass runs share it. The pass
 * copies a batch out of the ring (one lock per pass, not per item) and hands
 * each item to the sink. Nothing polls: with the ring empty the pump has no
 * task and no timer.
 *
 * Ending the session (the "finish" pattern): the producer's last call,
 * inbox_finish, posts a task to the loop with lull_task_post_remote. That task
 * marks the inbox finishing and wakes the pump; the pass that finds the ring
 * and its batch empty then posts `end`, which closes the pump and drops the
 * loop reference inbox_open took. With nothing else on the loop, lull_loop_run
 * returns. The session is not ended from the pass itself: a task does it,
 * after the pass has returned.
 *
 * The pump's five-row contract:
 *
 *   trigger                  a push (lull_notifier_raise_remote of
 *                            `pushed`), the producer's finish, or the
 *                            retry timer while held
 *   source of truth          the ring (under the lock) and the pass's batch
 *   pending-work predicate   items in the batch or the ring
 *   next deadline or retry   only while the sink refuses an item: every
 *                            INBOX_RETRY_NS, until it takes it
 *   quiet condition          ring and batch empty: no task, no timer
 *
 * Lifetimes: a producer must not call into the inbox after inbox_finish,
 * and the inbox and its loop must outlive every producer's last call: join
 * the producer threads before inbox_destroy and lull_loop_free. */
#ifndef WORKER_PUMP_H
#define WORKER_PUMP_H

#include <lull.h>
#include <pthread.h>
#include <string.h>

/* A push waits while the ring is full. */
#define INBOX_CAP 1024
/* Items one pass takes: a longer backlog goes on in the next task, after
 * other queued work. */
#define INBOX_BATCH 64
/* While the sink refuses an item, the pass retries every 1 ms. */
#define INBOX_RETRY_NS 1000000

typedef struct inbox inbox;
/* Takes one item on the loop thread, or returns false when it cannot take
 * it now: the pass holds it and the rest, and retries. */
typedef bool (*inbox_sink_fn)(inbox *in, uint64_t item);

struct inbox {
    /* Shared with the producers, under `lock`. */
    pthread_mutex_t lock;
    pthread_cond_t not_full; /* signalled when a pass makes room */
    uint64_t ring[INBOX_CAP];
    uint64_t head, tail; /* pushed, taken: head - tail in the ring */

    /* The loop thread's. */
    lull_loop *loop;
    lull_notifier pushed;   /* raised from any thread after a push */
    lull_pump pump;         /* runs inbox_pass */
    lull_listener listener; /* the pump, subscribed to `pushed` */
    lull_task finish;       /* posted remotely by inbox_finish */
    lull_task end;          /* posted by the last pass: ends the session */
    inbox_sink_fn sink;
    uint64_t batch[INBOX_BATCH]; /* taken from the ring, not yet delivered */
    size_t len;                  /* items in batch */
    bool finishing;              /* the producer is done */
    bool open;                   /* until `end` has run */
};

/* Loop thread: tops the batch up from the ring. True if items are left in
 * the ring. */
static bool inbox_take(inbox *in) {
    pthread_mutex_lock(&in->lock);
    size_t before = in->len;
    while (in->len < INBOX_BATCH && in->tail != in->head)
        in->batch[in->len++] = in->ring[in->tail++ % INBOX_CAP];
    bool more = in->tail != in->head;
    if (in->len != before) pthread_cond_broadcast(&in->not_full);
    pthread_mutex_unlock(&in->lock);
    return more;
}

/* The delivery pass: read the source of truth, hand on what is there, and
 * say what is left. It never waits and never arms a timer itself. */
static lull_pass_result inbox_pass(lull_pump *pump, uint64_t *retry_ns) {
    inbox *in = LULL_CONTAINER_OF(pump, inbox, pump);
    bool more = inbox_take(in); /* one locked copy into in->batch */
    size_t n = 0;
    while (n < in->len && in->sink(in, in->batch[n]))
        n++;
    lull_pump_delivered(pump, n); /* a pass that delivers none is "empty" */
    in->len -= n;
    memmove(in->batch, in->batch + n, in->len * sizeof in->batch[0]);
    if (in->len > 0) { /* the sink refused one: held, retried while held */
        *retry_ns = INBOX_RETRY_NS;
        return LULL_PASS_HELD;
    }
    if (more) return LULL_PASS_AGAIN; /* a full batch: the rest later */
    if (in->finishing) lull_task_post(in->loop, &in->end);
    return LULL_PASS_QUIET;
}

/* Runs on the loop thread, after the producer's last push is visible. */
static void inbox_on_finish(lull_task *t) {
    inbox *in = LULL_CONTAINER_OF(t, inbox, finish);
    in->finishing = true;
    lull_pump_wake(&in->pump); /* the pass decides whether anything is left */
}

static void inbox_on_end(lull_task *t) {
    inbox *in = LULL_CONTAINER_OF(t, inbox, end);
    if (!in->open) return;
    in->open = false;
    lull_pump_close(&in->pump); /* unsubscribes the listener too */
    lull_loop_unref(in->loop);  /* lull_loop_run may return now */
}

/* Loop thread, before any producer starts. Takes a loop reference: the
 * loop stays alive waiting for the producer until the session ends. */
static int inbox_open(inbox *in, lull_loop *loop, inbox_sink_fn sink) {
    pthread_mutex_init(&in->lock, NULL);
    pthread_cond_init(&in->not_full, NULL);
    in->head = in->tail = 0;
    in->loop = loop;
    in->sink = sink;
    in->len = 0;
    in->finishing = false;
    in->open = true;
    lull_notifier_init(&in->pushed);
    int rc = lull_pump_init(loop, &in->pump, inbox_pass);
    if (rc == 0) {
        rc = lull_pump_listen(&in->pump, &in->pushed, &in->listener);
        if (rc < 0) lull_pump_close(&in->pump);
    }
    if (rc < 0) { /* -ENOMEM: nothing of the inbox is left on the loop */
        pthread_cond_destroy(&in->not_full);
        pthread_mutex_destroy(&in->lock);
        in->open = false;
        return rc;
    }
    lull_task_init(&in->finish, inbox_on_finish);
    lull_task_init(&in->end, inbox_on_end);
    lull_loop_ref(loop);
    return 0;
}

/* Any thread. Waits while the ring is full, so the loop thread itself may
 * push only when it knows there is room. */
static void inbox_push(inbox *in, uint64_t item) {
    pthread_mutex_lock(&in->lock);
    while (in->head - in->tail == INBOX_CAP)
        pthread_cond_wait(&in->not_full, &in->lock);
    in->ring[in->head++ % INBOX_CAP] = item;
    pthread_mutex_unlock(&in->lock);
    /* After the item is visible: a pass that runs for this raise sees it. A
     * raise already on its way to the loop absorbs this one. */
    lull_notifier_raise_remote(in->loop, &in->pushed);
}

/* Any thread: the producer's last call. */
static void inbox_finish(inbox *in) {
    lull_task_post_remote(in->loop, &in->finish);
}

/* After the session ended (in->open is false) and every producer thread
 * was joined. */
static void inbox_destroy(inbox *in) {
    pthread_cond_destroy(&in->not_full);
    pthread_mutex_destroy(&in->lock);
}

#endif
