/* The frame the round-trip benchmarks share (work_roundtrip, fs_roundtrip):
 * their command line, the pinning, one round's samples, the rows run in
 * turn round after round, and the table of medians they print.
 *
 * A program names its rows, gives a function that runs one row for one
 * round, and prints its own title and ratio lines; everything between is
 * here, so the two tables keep one shape. Single-threaded except
 * bench_sample and bench_more, which the thread that finishes a trip calls
 * (one at a time: a row's trips never overlap). */
#ifndef BENCH_ROUNDS_H
#define BENCH_ROUNDS_H

#include <stdbool.h>
#include <stdint.h>

/* Rounds a run may ask for: a row keeps one p50 and one p99 per round. */
#define BENCH_MAX_ROUNDS 101

extern int bench_trips;  /* measured trips per round (--trips) */
extern int bench_warmup; /* trips before them, not recorded */

uint64_t bench_now_ns(void);

/* One round's samples: trip k's duration in ns, warm-up trips dropped. */
typedef struct bench_samples {
    uint64_t *v;
    int n;          /* trips recorded, warm-up included */
    uint64_t start; /* when the current trip began */
} bench_samples;

/* A trip has ended: record it (after the warm-up) and start the next. */
void bench_sample(bench_samples *s);
/* Whether the round wants another trip. */
bool bench_more(const bench_samples *s);

typedef struct bench_row {
    const char *name;    /* first column */
    const char *skipped; /* why the row was not built, or NULL */
    double p50[BENCH_MAX_ROUNDS], p99[BENCH_MAX_ROUNDS]; /* per round, us */
    int n;                                               /* rounds measured */
    int error;       /* the last failed round's status */
    uint64_t yields; /* sched_yield calls over its rounds */
} bench_row;

typedef struct bench {
    const char *prog; /* for usage and error lines */
    int cpu;          /* the CPU every thread runs on, -1: not pinned */
    int rounds;
} bench;

/* The libuv row: named "libuv <version>: <what>" when libuv was found at
 * build time (LAB_HAVE_UV), else skipped with its name as it stands. */
void bench_uv_row(bench_row *row, const char *what);

/* Parses [--cpu N | --no-pin] [--trips N] [--rounds N] and pins the
 * process. Returns 0, or the exit status after saying why on stderr. */
int bench_start(bench *b, int argc, char **argv);

/* Runs every row not skipped once a round, round r starting at row
 * r mod nrows, so drift on the machine spreads over all of them. run(k, s)
 * measures row k into s and returns 0 or a negative errno. Returns 0 or
 * -ENOMEM. */
int bench_rounds(const bench *b, bench_row *rows, int nrows,
                 int (*run)(int k, bench_samples *s));

/* "<what>, <where>" and the header of the table, then a line per row:
 * median p50 and p99 over rounds [min - max] and sched_yield calls per
 * trip, the first column `width` wide. */
void bench_print(const bench *b, const char *what, const bench_row *rows,
                 int nrows, int width);

/* The median over the rounds both measured of a's p50 / b's p50, with
 * its min and max. False when either row has no round. */
bool bench_ratio(const bench_row *a, const bench_row *b, double *m, double *lo,
                 double *hi);

#endif
