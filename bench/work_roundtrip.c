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
 * `turns` shows the same in its cross-thread round trip). The program
 * defines sched_yield itself, counts, and forwards to the C library's;
 * libuv's shared library binds to it, as lull-lab's do (lab/turns_count.c).
 * Rows take turns: round r starts at row r mod N. */
#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lull.h"
#ifdef LAB_HAVE_UV
#include <uv.h>
#endif

static int trips = 20000;
static int warmup = 2000;

/* sched_yield calls of every thread of the process (atomic). */
static uint64_t yields;

int sched_yield(void) {
    static int (*next)(void);
    int (*fn)(void) = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = (int (*)(void))dlsym(RTLD_NEXT, "sched_yield");
        __atomic_store_n(&next, fn, __ATOMIC_RELEASE);
    }
    __atomic_fetch_add(&yields, 1, __ATOMIC_RELAXED);
    return fn();
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t percentile(uint64_t *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* One round's samples: trip k's duration in ns, warm-up trips dropped. */
typedef struct samples {
    uint64_t *v;
    int n;          /* trips recorded, warm-up included */
    uint64_t start; /* when the current trip began */
} samples;

static void sample(samples *s) {
    uint64_t t = now_ns();
    int k = s->n++ - warmup;
    if (k >= 0) s->v[k] = t - s->start;
    s->start = now_ns();
}

static bool more(const samples *s) {
    return s->n < warmup + trips;
}

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

static int run_futex(samples *s) {
    int n = warmup + trips;
    pthread_t t;
    futex_word = 0;
    if (pthread_create(&t, NULL, futex_pong, &n) != 0) return -EAGAIN;
    s->start = now_ns();
    while (more(s)) {
        futex_pass(1);
        futex_wait_for(0);
        sample(s);
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
    samples *s;
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
    sample(tr->s);
    if (more(tr->s)) {
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

static int run_remote(samples *s) {
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
    s->start = now_ns();
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
    samples *s;
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
    if (p->s->n == warmup) lull_loop_metrics_reset(p->loop);
    sample(p->s);
    if (more(p->s)) p->rc = lull_work_submit(p->loop, p->pool, w);
}

static int run_pool(samples *s, uint64_t *wakeups) {
    pooltrip p = {.s = s};
    int rc = lull_loop_new(&p.loop, NULL);
    if (rc < 0) return rc;
    if ((rc = lull_pool_new(&p.pool, &(lull_pool_options){.threads = 1})) < 0) {
        lull_loop_free(p.loop);
        return rc;
    }
    lull_work_init(&p.work, empty_work, work_back);
    s->start = now_ns();
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
    samples *s;
    int rc;
} uvtrip;

static void uv_empty(uv_work_t *req) {
    (void)req;
}

static void uv_back(uv_work_t *req, int status) {
    uvtrip *u = LULL_CONTAINER_OF(req, uvtrip, req);
    (void)status;
    sample(u->s);
    if (more(u->s)) u->rc = uv_queue_work(u->loop, req, uv_empty, uv_back);
}

static int run_uv(samples *s) {
    uvtrip u = {.s = s};
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) return rc;
    u.loop = &loop;
    s->start = now_ns();
    rc = uv_queue_work(&loop, &u.req, uv_empty, uv_back);
    if (rc == 0) rc = uv_run(&loop, UV_RUN_DEFAULT) < 0 ? -EIO : 0;
    if (rc == 0) rc = u.rc;
    uv_loop_close(&loop);
    return rc;
}
#endif

/* ------------------------------------------------------------ driver */

enum { ROW_FUTEX, ROW_REMOTE, ROW_POOL, ROW_UV, ROWS };
static const char *const row_names[ROWS] = {
    "futex ping-pong, no loop (floor)",
    "lull: lull_task_post_remote round trip",
    "lull: lull_work_submit -> done",
    "libuv: uv_queue_work -> after_work",
};

#define MAX_ROUNDS 101

typedef struct row {
    double p50[MAX_ROUNDS], p99[MAX_ROUNDS];
    int n;
    int error;
    uint64_t yields; /* sched_yield calls over its rounds */
} row;

static double median(double *v, int n, double *lo, double *hi) {
    double t[MAX_ROUNDS];
    memcpy(t, v, (size_t)n * sizeof *v);
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int k = i; k > 0 && t[k - 1] > t[k]; k--) {
            double x = t[k];
            t[k] = t[k - 1];
            t[k - 1] = x;
        }
    *lo = t[0];
    *hi = t[n - 1];
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int cpu = 0, rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-pin")) {
            cpu = -1;
        } else if (!strcmp(argv[i], "--cpu") && i + 1 < argc) {
            cpu = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--trips") && i + 1 < argc) {
            trips = atoi(argv[++i]);
            warmup = trips / 10;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr,
                    "usage: work_roundtrip [--cpu N | --no-pin] [--trips N] "
                    "[--rounds N]\n");
            return 2;
        }
    }
    if (trips < 10 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "work_roundtrip: trips >= 10, rounds 1..%d\n",
                MAX_ROUNDS);
        return 2;
    }
    /* libuv reads it when its threadpool starts: one thread, like the
     * lull pool measured beside it. */
    setenv("UV_THREADPOOL_SIZE", "1", 1);
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) {
            perror("work_roundtrip: sched_setaffinity");
            return 1;
        }
    }

    static row rows[ROWS];
    uint64_t *v = calloc((size_t)trips, sizeof *v);
    if (!v) return 1;
    uint64_t pool_wakeups = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < ROWS; i++) {
            int k = (i + r) % ROWS;
            samples s = {.v = v};
            int rc;
            uint64_t yields0 = __atomic_load_n(&yields, __ATOMIC_RELAXED);
            switch (k) {
            case ROW_FUTEX:
                rc = run_futex(&s);
                break;
            case ROW_REMOTE:
                rc = run_remote(&s);
                break;
            case ROW_POOL: {
                uint64_t w = 0;
                rc = run_pool(&s, &w);
                pool_wakeups += w;
                break;
            }
            default:
#ifdef LAB_HAVE_UV
                rc = run_uv(&s);
#else
                rc = 1; /* not built */
#endif
                break;
            }
            rows[k].yields +=
                __atomic_load_n(&yields, __ATOMIC_RELAXED) - yields0;
            if (rc != 0) {
                rows[k].error = rc;
                continue;
            }
            rows[k].p50[rows[k].n] = (double)percentile(v, trips, 0.50) / 1e3;
            rows[k].p99[rows[k].n] = (double)percentile(v, trips, 0.99) / 1e3;
            rows[k].n++;
        }
    }

    char where[64];
    if (cpu >= 0)
        snprintf(where, sizeof where, "every thread on CPU %d", cpu);
    else
        snprintf(where, sizeof where, "threads not pinned, %ld CPUs",
                 sysconf(_SC_NPROCESSORS_ONLN));
    printf("work_roundtrip: round trip to another thread and back, %s\n"
           "median of %d rounds [min - max], %d trips each (+%d warm-up)\n\n",
           where, rounds, trips, warmup);
    printf("%-38s %22s %22s  %s\n", "", "p50, us", "p99, us",
           "sched_yield/trip");
    double lo, hi;
    for (int k = 0; k < ROWS; k++) {
        const char *name = row_names[k];
        char label[64];
#ifdef LAB_HAVE_UV
        if (k == ROW_UV) {
            snprintf(label, sizeof label, "libuv %s: uv_queue_work -> after",
                     uv_version_string());
            name = label;
        }
#else
        (void)label;
        if (k == ROW_UV) {
            printf("%-38s skipped: libuv not found by pkg-config at build "
                   "time\n",
                   name);
            continue;
        }
#endif
        if (rows[k].n == 0) {
            printf("%-38s failed: %s\n", name, strerror(-rows[k].error));
            continue;
        }
        double m50 = median(rows[k].p50, rows[k].n, &lo, &hi);
        printf("%-38s %6.2f [%5.2f - %5.2f] ", name, m50, lo, hi);
        double m99 = median(rows[k].p99, rows[k].n, &lo, &hi);
        printf("%6.2f [%5.2f - %5.2f]  %.3g\n", m99, lo, hi,
               (double)rows[k].yields /
                   ((double)rows[k].n * (double)(trips + warmup)));
    }
    if (rows[ROW_POOL].n && rows[ROW_REMOTE].n) {
        double ratio[MAX_ROUNDS];
        int n = rows[ROW_POOL].n < rows[ROW_REMOTE].n ? rows[ROW_POOL].n
                                                      : rows[ROW_REMOTE].n;
        for (int i = 0; i < n; i++)
            ratio[i] = rows[ROW_POOL].p50[i] / rows[ROW_REMOTE].p50[i];
        double m = median(ratio, n, &lo, &hi);
        printf("\npool / remote-post p50, per round: %.2f [%.2f - %.2f]\n", m,
               lo, hi);
        printf("pool row: %.2f loop wakeups per trip\n",
               (double)pool_wakeups / ((double)rows[ROW_POOL].n * trips));
    }
    free(v);
    return 0;
}
