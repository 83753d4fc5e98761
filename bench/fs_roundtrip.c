/* A 4 KiB pread's round trip through a pool: submitted from the loop's
 * thread, read on a pool thread, the result back on the loop, which
 * submits the next. Beside it, in the same run and under the same pinning:
 *
 *  - a bare thread pool on the same futex floor: one worker thread, one
 *    futex word each way, the pread between (no loop, no queue: the
 *    least any pool can do);
 *  - lull: lull_fs_read on a pool of one thread;
 *  - libuv: uv_fs_read with UV_THREADPOOL_SIZE=1 (when pkg-config found
 *    libuv at build time; skipped with a line otherwise).
 *
 * The file (1 MiB, in the page cache after the first round) is read at
 * offsets that walk through it, 4 KiB at a time. Rows run in turn, round
 * after round (round r starts at row r mod N), so drift on the machine
 * spreads over all of them. Each row reports the median over rounds of
 * the per-round p50 (and p99), with the min and max across rounds.
 *
 *   fs_roundtrip [--cpu N | --no-pin] [--trips N] [--rounds N]
 *
 * --cpu N (default 0) pins the process, and so every thread it starts, to
 * CPU N; --no-pin lets the threads float. libuv's pool threads keep the
 * pinning they were started with: run the program once per mode. */
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

enum { BLOCK = 4096, FILE_SIZE = 1 << 20 };

static int file_fd;
static char block[BLOCK];

static uint64_t offset_of(int n) {
    return (uint64_t)(n % (FILE_SIZE / BLOCK)) * BLOCK;
}

/* ------------------------------------------- bare pool on a futex */

static uint32_t to_worker, to_main; /* futex words: 1 when it is your turn */
static uint64_t bare_offset;
static ssize_t bare_result;

static void futex_wait_for(uint32_t *w) {
    while (!__atomic_load_n(w, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    __atomic_store_n(w, 0, __ATOMIC_RELAXED);
}

static void futex_pass(uint32_t *w) {
    __atomic_store_n(w, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *bare_worker(void *arg) {
    int n = *(int *)arg;
    for (int i = 0; i < n; i++) {
        futex_wait_for(&to_worker);
        bare_result = pread(file_fd, block, BLOCK, (off_t)bare_offset);
        futex_pass(&to_main);
    }
    return NULL;
}

static int run_bare(samples *s) {
    int n = warmup + trips;
    pthread_t t;
    to_worker = to_main = 0;
    if (pthread_create(&t, NULL, bare_worker, &n) != 0) return -EAGAIN;
    s->start = now_ns();
    int rc = 0;
    while (more(s)) {
        bare_offset = offset_of(s->n);
        futex_pass(&to_worker);
        futex_wait_for(&to_main);
        if (bare_result != BLOCK) rc = -EIO;
        sample(s);
    }
    pthread_join(t, NULL);
    return rc;
}

/* ------------------------------------------------------ lull_fs_read */

typedef struct lulltrip {
    lull_fs req;
    lull_loop *loop;
    lull_pool *pool;
    samples *s;
    int rc;
} lulltrip;

static void lull_back(lull_fs *req, int64_t result) {
    lulltrip *p = LULL_CONTAINER_OF(req, lulltrip, req);
    if (result != BLOCK) p->rc = result < 0 ? (int)result : -EIO;
    sample(p->s);
    if (more(p->s) && p->rc == 0)
        p->rc = lull_fs_read(p->loop, p->pool, req, file_fd, block, BLOCK,
                             offset_of(p->s->n), lull_back);
}

static int run_lull(samples *s) {
    lulltrip p = {.s = s};
    int rc = lull_loop_new(&p.loop, NULL);
    if (rc < 0) return rc;
    if ((rc = lull_pool_new(&p.pool, &(lull_pool_options){.threads = 1})) < 0) {
        lull_loop_free(p.loop);
        return rc;
    }
    s->start = now_ns();
    rc = lull_fs_read(p.loop, p.pool, &p.req, file_fd, block, BLOCK, 0,
                      lull_back);
    if (rc == 0) rc = lull_loop_run(p.loop, LULL_RUN_DEFAULT);
    if (rc == 0) rc = p.rc;
    lull_pool_free(p.pool);
    if (lull_loop_free(p.loop) < 0 && rc == 0) rc = -EBUSY;
    return rc;
}

/* ---------------------------------------------------------- libuv */

#ifdef LAB_HAVE_UV
typedef struct uvtrip {
    uv_fs_t req;
    uv_loop_t *loop;
    uv_buf_t buf;
    samples *s;
    int rc;
} uvtrip;

static void uv_back(uv_fs_t *req) {
    uvtrip *u = LULL_CONTAINER_OF(req, uvtrip, req);
    if (req->result != BLOCK) u->rc = req->result < 0 ? (int)req->result : -EIO;
    uv_fs_req_cleanup(req);
    sample(u->s);
    if (more(u->s) && u->rc == 0)
        u->rc = uv_fs_read(u->loop, req, file_fd, &u->buf, 1,
                           (int64_t)offset_of(u->s->n), uv_back);
}

static int run_uv(samples *s) {
    uvtrip u = {.s = s};
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) return rc;
    u.loop = &loop;
    u.buf = uv_buf_init(block, BLOCK);
    s->start = now_ns();
    rc = uv_fs_read(&loop, &u.req, file_fd, &u.buf, 1, 0, uv_back);
    if (rc == 0) rc = uv_run(&loop, UV_RUN_DEFAULT) < 0 ? -EIO : 0;
    if (rc == 0) rc = u.rc;
    uv_loop_close(&loop);
    return rc;
}
#endif

/* ------------------------------------------------------------ driver */

enum { ROW_BARE, ROW_LULL, ROW_UV, ROWS };
static const char *const row_names[ROWS] = {
    "bare pool: futex hand-off + pread",
    "lull: lull_fs_read -> cb",
    "libuv: uv_fs_read -> cb",
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
                    "usage: fs_roundtrip [--cpu N | --no-pin] [--trips N] "
                    "[--rounds N]\n");
            return 2;
        }
    }
    if (trips < 10 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "fs_roundtrip: trips >= 10, rounds 1..%d\n",
                MAX_ROUNDS);
        return 2;
    }
    setenv("UV_THREADPOOL_SIZE", "1", 1);
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) {
            perror("fs_roundtrip: sched_setaffinity");
            return 1;
        }
    }
    char path[] = "/tmp/fs_roundtrip-XXXXXX";
    file_fd = mkstemp(path);
    if (file_fd < 0) {
        perror("fs_roundtrip: mkstemp");
        return 1;
    }
    unlink(path);
    static char chunk[FILE_SIZE];
    memset(chunk, 'x', sizeof chunk);
    if (write(file_fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) {
        perror("fs_roundtrip: write");
        return 1;
    }

    static row rows[ROWS];
    uint64_t *v = calloc((size_t)trips, sizeof *v);
    if (!v) return 1;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < ROWS; i++) {
            int k = (i + r) % ROWS;
            samples s = {.v = v};
            int rc;
            uint64_t yields0 = __atomic_load_n(&yields, __ATOMIC_RELAXED);
            switch (k) {
            case ROW_BARE:
                rc = run_bare(&s);
                break;
            case ROW_LULL:
                rc = run_lull(&s);
                break;
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
    printf("fs_roundtrip: a 4 KiB pread through a pool and back, %s\n"
           "median of %d rounds [min - max], %d trips each (+%d warm-up)\n\n",
           where, rounds, trips, warmup);
    printf("%-36s %22s %22s  %s\n", "", "p50, us", "p99, us",
           "sched_yield/trip");
    double lo, hi;
    for (int k = 0; k < ROWS; k++) {
        const char *name = row_names[k];
        char label[64];
#ifdef LAB_HAVE_UV
        if (k == ROW_UV) {
            snprintf(label, sizeof label, "libuv %s: uv_fs_read -> cb",
                     uv_version_string());
            name = label;
        }
#else
        (void)label;
        if (k == ROW_UV) {
            printf("%-36s skipped: libuv not found by pkg-config at build "
                   "time\n",
                   name);
            continue;
        }
#endif
        if (rows[k].n == 0) {
            printf("%-36s failed: %s\n", name, strerror(-rows[k].error));
            continue;
        }
        double m50 = median(rows[k].p50, rows[k].n, &lo, &hi);
        printf("%-36s %6.2f [%5.2f - %5.2f] ", name, m50, lo, hi);
        double m99 = median(rows[k].p99, rows[k].n, &lo, &hi);
        printf("%6.2f [%5.2f - %5.2f]  %.3g\n", m99, lo, hi,
               (double)rows[k].yields /
                   ((double)rows[k].n * (double)(trips + warmup)));
    }
    for (int other = ROW_BARE; other < ROWS; other += ROW_UV - ROW_BARE) {
        if (!rows[ROW_LULL].n || !rows[other].n) continue;
        double ratio[MAX_ROUNDS];
        int n =
            rows[ROW_LULL].n < rows[other].n ? rows[ROW_LULL].n : rows[other].n;
        for (int i = 0; i < n; i++)
            ratio[i] = rows[ROW_LULL].p50[i] / rows[other].p50[i];
        double m = median(ratio, n, &lo, &hi);
        printf("%slull / %s p50, per round: %.2f [%.2f - %.2f]\n",
               other == ROW_BARE ? "\n" : "",
               other == ROW_BARE ? "bare pool" : "libuv", m, lo, hi);
    }
    free(v);
    close(file_fd);
    return 0;
}
