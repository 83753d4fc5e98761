/* File-system events against the number of watches: N directories under
 * a fresh temporary one, each watched; then rounds that make one file in
 * each of the first 3,000 (the kernel's queue holds 16,384 events) and run
 * the loop until every call came. Prints the wall time per event
 * delivered, median [min-max] over the rounds, for each N given.
 *
 *   build/release/bench/fsevent_scale [ROUNDS] [N ...]
 *   (defaults: 7 rounds; 100 1000 10000 watches)
 *
 * A batch finds each event's watch by its descriptor (src/fsevent.c); a
 * cost that grew with N would show here. */
#include "args.h"

#include <fcntl.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PER_ROUND_MAX 3000

static long calls;

static void on_event(lull_fsevent *w, unsigned events, const char *name,
                     const char *other) {
    (void)w;
    (void)events;
    (void)name;
    (void)other;
    calls++;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One N: 0, or -1 with a line on stderr. */
static int measure(int n, int rounds) {
    char base[] = "/tmp/lull-fsevent-scale-XXXXXX";
    if (!mkdtemp(base)) return perror("mkdtemp"), -1;
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) != 0) return -1;
    lull_fsevent *w = calloc((size_t)n, sizeof *w);
    double *us = calloc((size_t)rounds, sizeof *us);
    char p[256];
    int rc = w && us ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(p, sizeof p, "%s/%d", base, i);
        lull_fsevent_init(loop, &w[i]);
        if (mkdir(p, 0700) != 0 || lull_fsevent_start(&w[i], p, on_event)) {
            fprintf(stderr, "fsevent_scale: watch %d of %d failed\n", i, n);
            rc = -1;
        }
    }
    int per = n < PER_ROUND_MAX ? n : PER_ROUND_MAX;
    for (int r = 0; r < rounds && rc == 0; r++) {
        for (int i = 0; i < per; i++) {
            snprintf(p, sizeof p, "%s/%d/f%d", base, i, r);
            int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
            if (fd >= 0) close(fd);
        }
        calls = 0;
        double t0 = now_s();
        while (calls < per)
            lull_loop_run(loop, LULL_RUN_ONCE);
        us[r] = (now_s() - t0) / (double)per * 1e6;
    }
    if (rc == 0) {
        qsort(us, (size_t)rounds, sizeof *us, cmp);
        printf("  %6d watches  %6.2f us an event [%.2f-%.2f]\n", n,
               us[rounds / 2], us[0], us[rounds - 1]);
    }
    for (int i = 0; i < n; i++)
        lull_fsevent_stop(&w[i]);
    free(w);
    free(us);
    lull_loop_free(loop);
    snprintf(p, sizeof p, "rm -rf '%s'", base);
    if (system(p) != 0) rc = -1;
    return rc;
}

int main(int argc, char **argv) {
    unsigned long long v = 7;
    if (argc > 1 && !bench_count(argv[1], 1, 1000, &v)) {
        fprintf(stderr,
                "fsevent_scale: ROUNDS takes 1..1000, not '%s'\n"
                "usage: fsevent_scale [ROUNDS 1-1000] [N ...]\n",
                argv[1]);
        return 2;
    }
    int rounds = (int)v;
    for (int i = 2; i < argc; i++) /* every N, before any is measured */
        if (!bench_count(argv[i], 1, 1000000, &v)) {
            fprintf(stderr, "fsevent_scale: N takes 1..1000000, not '%s'\n",
                    argv[i]);
            return 2;
        }
    printf("file-system events: wall time per event delivered, median "
           "[min-max] of %d rounds\n",
           rounds);
    static const int defaults[] = {100, 1000, 10000};
    int rc = 0;
    if (argc > 2) {
        for (int i = 2; i < argc; i++) {
            rc |= measure(atoi(argv[i]), rounds); /* checked above */
        }
    } else {
        for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
            rc |= measure(defaults[i], rounds);
    }
    return rc ? 1 : 0;
}
