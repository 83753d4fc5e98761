/* embed_libuv: lull inside a libuv program. libuv owns the thread and its
 * loop; lull's fd is a uv_poll_t, lull's next deadline a uv_timer_t, and a
 * uv_prepare_t (which runs just before libuv blocks) asks lull how long it
 * may wait. Whenever either fires, lull runs what is ready without blocking.
 * lull here runs a repeating timer and a task a worker thread posts; libuv
 * runs a timer of its own.
 *
 * Build (libuv1-dev):
 *   cc -O2 -pthread -o embed_libuv embed_libuv.c $(pkg-config --cflags --libs lull libuv)
 */
#define _POSIX_C_SOURCE 200809L
#include <lull.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <uv.h>

static lull_loop *lloop;
static uv_poll_t lull_fd;      /* lull's backend fd, readable = lull has work */
static uv_timer_t lull_wakeup; /* lull's next deadline */
static uv_prepare_t lull_ask;  /* asks lull for that deadline */
static uv_timer_t uv_own;      /* libuv's own work */

static lull_timer tick;
static lull_task from_worker;
static int ticks, posts, uv_ticks;

static void stop_all_when_done(void) {
    if (ticks < 5 || posts < 1 || uv_ticks < 3) return;
    uv_poll_stop(&lull_fd);
    uv_timer_stop(&lull_wakeup);
    uv_prepare_stop(&lull_ask);
}

static void run_lull(void) {
    lull_loop_run(lloop, LULL_RUN_NOWAIT);
    stop_all_when_done();
}

static void on_lull_fd(uv_poll_t *h, int status, int events) {
    (void)h, (void)status, (void)events;
    run_lull();
}

static void on_lull_deadline(uv_timer_t *h) {
    (void)h;
    run_lull();
}

/* Before libuv blocks: lull's timeout becomes lull_wakeup's (rounded up to
 * libuv's ms, so lull's timers are never early). */
static void on_prepare(uv_prepare_t *h) {
    (void)h;
    int64_t ns;
    lull_loop_backend_timeout(lloop, &ns);
    if (ns < 0)
        uv_timer_stop(&lull_wakeup);
    else
        uv_timer_start(&lull_wakeup, on_lull_deadline,
                       (uint64_t)ns / 1000000 + ((uint64_t)ns % 1000000 != 0),
                       0); /* rounded up without overflow near INT64_MAX */
}

static void on_tick(lull_timer *t) {
    if (++ticks == 5) lull_timer_stop(t);
}

static void on_post(lull_task *t) {
    (void)t;
    posts++;
}

static void on_uv_own(uv_timer_t *h) {
    if (++uv_ticks == 3) uv_timer_stop(h);
    stop_all_when_done();
}

static void *worker(void *arg) {
    (void)arg;
    nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL); /* 2 ms */
    lull_task_post_remote(lloop, &from_worker);
    return NULL;
}

int main(void) {
    /* The two loops and lull's fd in libuv's first: each can fail (out of
     * fds), and nothing has started yet to undo. */
    static uv_loop_t uv_main;
    uv_loop_t *uv = &uv_main;
    int rc = uv_loop_init(uv); /* libuv's errors are negative errnos too */
    if (rc < 0) {
        fprintf(stderr, "embed_libuv: libuv's loop: %s\n", lull_strerror(rc));
        return 1;
    }
    rc = lull_loop_new(&lloop, NULL);
    if (rc == 0) rc = lull_loop_backend_fd(lloop);
    if (rc >= 0) rc = uv_poll_init(uv, &lull_fd, rc);
    if (rc < 0) {
        fprintf(stderr, "embed_libuv: %s\n", lull_strerror(rc));
        if (lloop) lull_loop_free(lloop);
        uv_loop_close(uv);
        return 1;
    }
    lull_task_init(&from_worker, on_post); /* before the thread posts it */
    pthread_t th;
    if (pthread_create(&th, NULL, worker, NULL) != 0) {
        fprintf(stderr, "embed_libuv: no thread\n");
        uv_close((uv_handle_t *)&lull_fd, NULL);
        uv_run(uv, UV_RUN_DEFAULT);
        uv_loop_close(uv);
        lull_loop_free(lloop);
        return 1;
    }
    lull_timer_init(lloop, &tick, on_tick);
    lull_timer_start(&tick, 1000000ull, 1000000ull); /* every 1 ms, in ns */

    uv_poll_start(&lull_fd, UV_READABLE, on_lull_fd);
    uv_timer_init(uv, &lull_wakeup);
    uv_prepare_init(uv, &lull_ask);
    uv_prepare_start(&lull_ask, on_prepare);
    uv_timer_init(uv, &uv_own);
    uv_timer_start(&uv_own, on_uv_own, 1, 1);

    uv_run(uv, UV_RUN_DEFAULT); /* returns once every handle has stopped */
    pthread_join(th, NULL);
    printf("embed_libuv: %d lull ticks, %d post from a thread, %d libuv "
           "ticks\n",
           ticks, posts, uv_ticks);
    uv_close((uv_handle_t *)&lull_fd, NULL);
    uv_close((uv_handle_t *)&lull_wakeup, NULL);
    uv_close((uv_handle_t *)&lull_ask, NULL);
    uv_close((uv_handle_t *)&uv_own, NULL);
    uv_run(uv, UV_RUN_DEFAULT);
    uv_loop_close(uv);
    return lull_loop_free(lloop) == 0 ? 0 : 1;
}
