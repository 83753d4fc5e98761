/* The worker pool's round trip: an empty work item submitted from a loop,
 * run on a pool thread, its done function back on the loop, which submits
 * the next. Beside it, in the same run and under the same pinning:
 *
 *  - the futex floor: two bare threads ping-ponging on a futex word;
 *  - lull's remote-post round trip: two loops on two threads, each posting
 *    a task to the other with lull_task_post_remote (what `turns` measures as
 *    its cross-thread round trip);
 *  - libuv's uv_queue_work -> after_work_cb with UV_THREADPOOL_SIZE=1 (when
 *    pkg-config found libuv at build time; skipped with a line otherwise).
 *
 * The pool and libuv's threadpool each have one thread, so each trip is
 * one wake of the worker and one wake of the loop, like the remote-post
 * trip. Rows run in turn, round after round, so drift on the machine spreads
 * over all of them. Each row reports the median over rounds of the
 * per-round p50 (and p99), with the min and max across rounds.
 *
 *   work_roundtrip [--cpu N | --no-pin] [--trips N] [--rounds N]
 *
 * --cpu N (default 0) pins the process, and so every thread it starts, to
 * CPU N: each wake is then a switch on one CPU, the "on one CPU"
 * figure. --no-pin lets the threads float over every CPU. libuv's pool
 * threads are started once per process and keep the pinning they were
 * started with, so run the program once per mode.
 *
 * Each row also prints the sched_yield calls per trip of the whole
 * process: libuv 1.44's uv_async_send, which its pool's completion uses,
 * spins in sched_yield when both threads share one CPU (lull-lab's
 * `turns` shows the same in its cross-thread round trip); bench/rounds.c
 * counts them. Rows take turns: round r starts at row r mod N. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lull.h"
#include "rounds.h"
#ifdef LAB_HAVE_UV
#include <uv.h>
#endif

/* ---------------------------------------------------------- futex floor */

static uint32_t futex_word; /* 0: ping's turn, 1: pong's turn */

static void futex_wait_for(uint32_t want) {
    uint32_t v;
    while ((v = __atomic_load_n(&futex_word, __ATOMIC_ACQUIRE)) != want)
        syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_pass(uint32_t to) {
    __atomic_store_n(&futex_word, to, __ATOMIC_RELEASE);
    syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *futex_pong(void *arg) {
    int n = *(int *)arg;
    for (int i = 0; i < n; i++) {
        futex_wait_for(1);
        futex_pass(0);
    }
    return NULL;
}

static int run_futex(bench_samples *s) {
    int n = bench_warmup + bench_trips;
    pthread_t t;
    futex_word = 0;
    if (pthread_create(&t, NULL, futex_pong, &n) != 0) return -EAGAIN;
    s->start = bench_now_ns();
    while (bench_more(s)) {
        futex_pass(1);
        futex_wait_for(0);
        bench_sample(s);
    }
    pthread_join(t, NULL);
    return 0;
}

/* ------------------------------------------------ lull: remote posts */

typedef struct trip {
    lull_loop *a, *b;
    lull_task ping; /* runs on a */
    lull_task pong; /* runs on b */
    lull_task stop; /* runs on b */
    bench_samples *s;
} trip;

static void trip_pong(lull_task *t) {
    trip *tr = LULL_CONTAINER_OF(t, trip, pong);
    lull_task_post_remote(tr->a, &tr->ping);
}

static void trip_stop(lull_task *t) {
    trip *tr = LULL_CONTAINER_OF(t, trip, stop);
    lull_loop_unref(tr->b);
}

static void trip_ping(lull_task *t) {
    trip *tr = LULL_CONTAINER_OF(t, trip, ping);
    bench_sample(tr->s);
    if (bench_more(tr->s)) {
        lull_task_post_remote(tr->b, &tr->pong);
    } else {
        lull_task_post_remote(tr->b, &tr->stop);
        lull_loop_unref(tr->a);
    }
}

static void *trip_b(void *arg) {
    trip *tr = arg;
    lull_loop_run(tr->b, LULL_RUN_DEFAULT);
    return NULL;
}

static int run_remote(bench_samples *s) {
    trip tr = {.s = s};
    int rc = lull_loop_new(&tr.a, NULL);
    if (rc < 0) return rc;
    if ((rc = lull_loop_new(&tr.b, NULL)) < 0) {
        lull_loop_free(tr.a);
        return rc;
    }
    lull_task_init(&tr.ping, trip_ping);
    lull_task_init(&tr.pong, trip_pong);
    lull_task_init(&tr.stop, trip_stop);
    lull_loop_ref(tr.a);
    lull_loop_ref(tr.b); /* b is handed to its thread before it runs */
    pthread_t t;
    if (pthread_create(&t, NULL, trip_b, &tr) != 0) return -EAGAIN;
    s->start = bench_now_ns();
    lull_task_post_remote(tr.b, &tr.pong);
    rc = lull_loop_run(tr.a, LULL_RUN_DEFAULT);
    pthread_join(t, NULL);
    /* b's thread posted the last ping and has been joined: nobody is left
     * inside lull_task_post_remote for a. */
    if (lull_loop_free(tr.a) < 0 || lull_loop_free(tr.b) < 0) rc = -EBUSY;
    return rc;
}

/* ---------------------------------------------------- lull: the pool */

typedef struct pooltrip {
    lull_work work;
    lull_loop *loop;
    lull_pool *pool;
    bench_samples *s;
    int rc;
    uint64_t wakeups; /* the loop's, over the measured trips */
} pooltrip;

static int empty_work(lull_work *w) {
    (void)w;
    return 0;
}

static void work_back(lull_work *w, int status) {
    pooltrip *p = LULL_CONTAINER_OF(w, pooltrip, work);
    (void)status;
    if (p->s->n == bench_warmup) lull_loop_metrics_reset(p->loop);
    bench_sample(p->s);
    if (bench_more(p->s)) p->rc = lull_work_submit(p->loop, p->pool, w);
}

static int run_pool(bench_samples *s, uint64_t *wakeups) {
    pooltrip p = {.s = s};
    int rc = lull_loop_new(&p.loop, NULL);
    if (rc < 0) return rc;
    if ((rc = lull_pool_new(&p.pool, &(lull_pool_options){.threads = 1})) < 0) {
        lull_loop_free(p.loop);
        return rc;
    }
    lull_work_init(&p.work, empty_work, work_back);
    s->start = bench_now_ns();
    rc = lull_work_submit(p.loop, p.pool, &p.work);
    if (rc == 0) rc = lull_loop_run(p.loop, LULL_RUN_DEFAULT);
    if (rc == 0) rc = p.rc;
    lull_metrics m;
    lull_loop_metrics(p.loop, &m);
    *wakeups = m.wakeups;
    lull_pool_free(p.pool); /* joins the thread: it has left the loop */
    if (lull_loop_free(p.loop) < 0 && rc == 0) rc = -EBUSY;
    return rc;
}

/* ---------------------------------------------------------- libuv */

#ifdef LAB_HAVE_UV
typedef struct uvtrip {
    uv_work_t req;
    uv_loop_t *loop;
    bench_samples *s;
    int rc;
} uvtrip;

static void uv_empty(uv_work_t *req) {
    (void)req;
}

static void uv_back(uv_work_t *req, int status) {
    uvtrip *u = LULL_CONTAINER_OF(req, uvtrip, req);
    (void)status;
    bench_sample(u->s);
    if (bench_more(u->s))
        u->rc = uv_queue_work(u->loop, req, uv_empty, uv_back);
}

static int run_uv(bench_samples *s) {
    uvtrip u = {.s = s};
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) return rc;
    u.loop = &loop;
    s->start = bench_now_ns();
    rc = uv_queue_work(&loop, &u.req, uv_empty, uv_back);
    if (rc == 0) rc = uv_run(&loop, UV_RUN_DEFAULT) < 0 ? -EIO : 0;
    if (rc == 0) rc = u.rc;
    uv_loop_close(&loop);
    return rc;
}
#endif

/* ------------------------------------------------------------ driver */

enum { ROW_FUTEX, ROW_REMOTE, ROW_POOL, ROW_UV, ROWS };

static uint64_t pool_wakeups; /* the pool row's loop wakeups, all rounds */

static int run_row(int k, bench_samples *s) {
    switch (k) {
    case ROW_FUTEX:
        return run_futex(s);
    case ROW_REMOTE:
        return run_remote(s);
    case ROW_POOL: {
        uint64_t w = 0;
        int rc = run_pool(s, &w);
        pool_wakeups += w;
        return rc;
    }
#ifdef LAB_HAVE_UV
    case ROW_UV:
        return run_uv(s);
#endif
    }
    return -EINVAL;
}

int main(int argc, char **argv) {
    bench b = {.prog = "work_roundtrip"};
    int rc = bench_start(&b, argc, argv);
    if (rc != 0) return rc;
    /* libuv reads it when its threadpool starts: one thread, like the
     * lull pool measured beside it. */
    setenv("UV_THREADPOOL_SIZE", "1", 1);

    static bench_row rows[ROWS] = {
        [ROW_FUTEX] = {.name = "futex ping-pong, no loop (floor)"},
        [ROW_REMOTE] = {.name = "lull: lull_task_post_remote round trip"},
        [ROW_POOL] = {.name = "lull: lull_work_submit -> done"},
        [ROW_UV] = {.name = "libuv: uv_queue_work -> after_work"},
    };
    bench_uv_row(&rows[ROW_UV], "uv_queue_work -> after");
    if (bench_rounds(&b, rows, ROWS, run_row) < 0) return 1;
    bench_print(&b, "round trip to another thread and back", rows, ROWS, 38);
    double m, lo, hi;
    if (bench_ratio(&rows[ROW_POOL], &rows[ROW_REMOTE], &m, &lo, &hi)) {
        printf("\npool / remote-post p50, per round: %.2f [%.2f - %.2f]\n", m,
               lo, hi);
        printf("pool row: %.2f loop wakeups per trip\n",
               (double)pool_wakeups / ((double)rows[ROW_POOL].n * bench_trips));
    }
    return 0;
}
