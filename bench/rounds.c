/* The round-trip benchmarks' shared frame (see rounds.h). Also the
 * program's sched_yield: libuv 1.44's uv_async_send, which its pool's
 * completion uses, spins in sched_yield when both threads share one CPU,
 * so each row reports the calls per trip. The program defines sched_yield
 * itself, counts, and forwards to the C library's; libuv's shared library
 * binds to it, as lull-lab's do (lab/turns_count.c). */
#include "rounds.h"
#include "args.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef LAB_HAVE_UV
#include <uv.h>
#endif

int bench_trips = 20000;
int bench_warmup = 2000;

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

uint64_t bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_sample(bench_samples *s) {
    uint64_t t = bench_now_ns();
    int k = s->n++ - bench_warmup;
    if (k >= 0) s->v[k] = t - s->start;
    s->start = bench_now_ns();
}

bool bench_more(const bench_samples *s) {
    return s->n < bench_warmup + bench_trips;
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

static double median(const double *v, int n, double *lo, double *hi) {
    double t[BENCH_MAX_ROUNDS];
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

void bench_uv_row(bench_row *row, const char *what) {
#ifdef LAB_HAVE_UV
    static char label[64]; /* one libuv row a program */
    snprintf(label, sizeof label, "libuv %s: %s", uv_version_string(), what);
    row->name = label;
#else
    (void)what;
    row->skipped = "libuv not found by pkg-config at build time";
#endif
}

/* A count option's value within [min, max]; else a line naming it. */
static bool count_option(const bench *b, const char *opt, const char *s,
                         unsigned long long min, unsigned long long max,
                         int *out) {
    unsigned long long v;
    if (bench_count(s, min, max, &v)) {
        *out = (int)v;
        return true;
    }
    fprintf(stderr, "%s: %s takes %llu..%llu, not '%s'\n", b->prog, opt, min,
            max, s);
    return false;
}

int bench_start(bench *b, int argc, char **argv) {
    b->cpu = 0;
    b->rounds = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-pin")) {
            b->cpu = -1;
        } else if (!strcmp(a, "--cpu") && i + 1 < argc) {
            if (!count_option(b, a, argv[++i], 0, CPU_SETSIZE - 1, &b->cpu))
                return 2;
        } else if (!strcmp(a, "--trips") && i + 1 < argc) {
            /* 10^8 trips: 800 MB of samples; warm-up + trips fit an int */
            if (!count_option(b, a, argv[++i], 10, 100000000, &bench_trips))
                return 2;
            bench_warmup = bench_trips / 10;
        } else if (!strcmp(a, "--rounds") && i + 1 < argc) {
            if (!count_option(b, a, argv[++i], 1, BENCH_MAX_ROUNDS, &b->rounds))
                return 2;
        } else {
            fprintf(stderr,
                    "usage: %s [--cpu N | --no-pin] [--trips N] "
                    "[--rounds N]\n",
                    b->prog);
            return 2;
        }
    }
    /* The percentiles want a few trips; a row has room for
     * BENCH_MAX_ROUNDS rounds. */
    if (bench_trips < 10 || b->rounds < 1 || b->rounds > BENCH_MAX_ROUNDS) {
        fprintf(stderr, "%s: trips >= 10, rounds 1..%d\n", b->prog,
                BENCH_MAX_ROUNDS);
        return 2;
    }
    if (b->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(b->cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) {
            fprintf(stderr, "%s: sched_setaffinity: %s\n", b->prog,
                    strerror(errno));
            return 1;
        }
    }
    return 0;
}

int bench_rounds(const bench *b, bench_row *rows, int nrows,
                 int (*run)(int k, bench_samples *s)) {
    uint64_t *v = calloc((size_t)bench_trips, sizeof *v);
    if (!v) return -ENOMEM;
    for (int r = 0; r < b->rounds; r++) {
        for (int i = 0; i < nrows; i++) {
            int k = (i + r) % nrows;
            if (rows[k].skipped) continue;
            bench_samples s = {.v = v};
            uint64_t yields0 = __atomic_load_n(&yields, __ATOMIC_RELAXED);
            int rc = run(k, &s);
            rows[k].yields +=
                __atomic_load_n(&yields, __ATOMIC_RELAXED) - yields0;
            if (rc != 0) {
                rows[k].error = rc;
                continue;
            }
            rows[k].p50[rows[k].n] =
                (double)percentile(v, bench_trips, 0.50) / 1e3;
            rows[k].p99[rows[k].n] =
                (double)percentile(v, bench_trips, 0.99) / 1e3;
            rows[k].n++;
        }
    }
    free(v);
    return 0;
}

void bench_print(const bench *b, const char *what, const bench_row *rows,
                 int nrows, int width) {
    char where[64];
    if (b->cpu >= 0)
        snprintf(where, sizeof where, "every thread on CPU %d", b->cpu);
    else
        snprintf(where, sizeof where, "threads not pinned, %ld CPUs",
                 sysconf(_SC_NPROCESSORS_ONLN));
    printf("%s: %s, %s\n"
           "median of %d rounds [min - max], %d trips each (+%d warm-up)\n\n",
           b->prog, what, where, b->rounds, bench_trips, bench_warmup);
    printf("%-*s %22s %22s  %s\n", width, "", "p50, us", "p99, us",
           "sched_yield/trip");
    for (int k = 0; k < nrows; k++) {
        const bench_row *row = &rows[k];
        if (row->skipped) {
            printf("%-*s skipped: %s\n", width, row->name, row->skipped);
            continue;
        }
        if (row->n == 0) {
            printf("%-*s failed: %s\n", width, row->name,
                   strerror(-row->error));
            continue;
        }
        double lo, hi;
        double m50 = median(row->p50, row->n, &lo, &hi);
        printf("%-*s %6.2f [%5.2f - %5.2f] ", width, row->name, m50, lo, hi);
        double m99 = median(row->p99, row->n, &lo, &hi);
        printf("%6.2f [%5.2f - %5.2f]  %.3g\n", m99, lo, hi,
               (double)row->yields /
                   ((double)row->n * (double)(bench_trips + bench_warmup)));
    }
}

bool bench_ratio(const bench_row *a, const bench_row *b, double *m, double *lo,
                 double *hi) {
    if (!a->n || !b->n) return false;
    double ratio[BENCH_MAX_ROUNDS];
    int n = a->n < b->n ? a->n : b->n;
    for (int i = 0; i < n; i++)
        ratio[i] = a->p50[i] / b->p50[i];
    *m = median(ratio, n, lo, hi);
    return true;
}
