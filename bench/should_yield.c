/* What lull_loop_should_yield costs per call, and how far a slice runs past its
 * quantum (C5). A producer task calls it once per record and re-posts
 * itself when it says yield, for a fixed wall time per case.
 *
 *  - ns/call: the producer's busy time divided by its calls, beside the
 *    same loop without the call (the baseline): the difference is what the
 *    check costs amortized. Records are no-ops here.
 *  - overshoot: each slice is timed from the task's entry to the call that
 *    said yield, against the loop's quantum; (slice - quantum) / quantum.
 *    The loop's slice starts a little before the task runs, so a measured
 *    slice is, if anything, short. Slices during which the thread was
 *    preempted (its involuntary context switches moved) are left out and
 *    counted apart: on a busy machine they measure the scheduler.
 *  - change of pace: records that cost ~1 µs after fast ones, alternating
 *    by slice or switching mid-slice, check that the call does not trust a
 *    count calibrated on fast records.
 *
 *   should_yield [seconds per case, default 1] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "lull.h"

/* Involuntary context switches of this thread: a slice during which the
 * thread was preempted measures the scheduler, not lull. */
static long preemptions(void) {
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nivcsw;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

enum pace {
    PACE_NOOP,      /* every record free */
    PACE_SLOW,      /* every record ~1 µs */
    PACE_ALTERNATE, /* odd slices free, even slices ~1 µs */
    PACE_MIDSLICE,  /* free for 20,000 records, then ~1 µs, every slice */
};
static const char *const pace_names[] = {"no-op", "1us", "alternating",
                                         "mid-slice"};

static unsigned long spins_per_us; /* calibrated below */
static volatile unsigned long sink;

/* ~1 µs of work that reads no clock. */
static void slow_record(void) {
    for (unsigned long i = 0; i < spins_per_us; i++)
        sink += i;
}

static void calibrate(void) {
    spins_per_us = 1000;
    for (;;) {
        uint64_t t0 = now_ns();
        for (int r = 0; r < 1000; r++)
            slow_record();
        uint64_t dt = now_ns() - t0; /* ns for 1000 records */
        if (dt > 5000000) {          /* long enough to trust */
            spins_per_us = (unsigned long)((double)spins_per_us * 1e6 / dt);
            if (spins_per_us == 0) spins_per_us = 1;
            return;
        }
        spins_per_us *= 4;
    }
}

#define MAX_SLICES 200000

typedef struct producer {
    lull_task task;
    lull_loop *loop;
    enum pace pace;
    uint64_t deadline; /* stop re-posting after this */
    uint64_t calls;
    uint64_t busy_ns;
    double *slices; /* ns per slice, preempted slices left out */
    int nslices;    /* slices run */
    int nkept;      /* slices in `slices` */
} producer;

static void produce(lull_task *task) {
    producer *p = LULL_CONTAINER_OF(task, producer, task);
    long preempted = preemptions();
    uint64_t start = now_ns();
    uint64_t calls = 0;
    bool slow_slice =
        p->pace == PACE_SLOW || (p->pace == PACE_ALTERNATE && (p->nslices & 1));
    for (;;) {
        if (slow_slice || (p->pace == PACE_MIDSLICE && calls >= 20000)) {
            slow_record();
        } else {
            __asm__ volatile("" ::: "memory"); /* the no-op record */
        }
        calls++;
        if (lull_loop_should_yield(p->loop)) break;
    }
    uint64_t end = now_ns();
    p->calls += calls;
    p->busy_ns += end - start;
    bool clean = preemptions() == preempted;
    p->nslices++;
    if (clean && p->nkept < MAX_SLICES)
        p->slices[p->nkept++] = (double)(end - start);
    if (end < p->deadline) lull_task_post(p->loop, task);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct outcome {
    double ns_per_call;
    double median_pct, p99_pct, max_pct;
    int slices;
    int preempted;
    uint64_t calls;
    uint64_t quantum;
} outcome;

static int run_case(int role, enum pace pace, double seconds, outcome *o) {
    lull_loop_options opts = {.role = role};
    producer p;
    memset(&p, 0, sizeof p);
    p.pace = pace;
    p.slices = calloc(MAX_SLICES, sizeof *p.slices);
    if (!p.slices) return -ENOMEM;
    int rc = lull_loop_new(&p.loop, &opts);
    if (rc < 0) {
        free(p.slices);
        return rc;
    }
    lull_task_init(&p.task, produce);
    p.deadline = now_ns() + (uint64_t)(seconds * 1e9);
    lull_task_post(p.loop, &p.task);
    rc = lull_loop_run(p.loop, LULL_RUN_DEFAULT);
    o->ns_per_call = (double)p.busy_ns / (double)p.calls;
    o->calls = p.calls;
    o->quantum = lull_loop_quantum(p.loop);
    o->slices = p.nslices;
    o->preempted = p.nslices - p.nkept;
    /* The last slice was cut by the deadline, not by the quantum: the
     * cut slice is whichever is shortest, so drop the minimum. */
    int n = p.nkept;
    qsort(p.slices, (size_t)n, sizeof *p.slices, cmp);
    if (n > 1) {
        memmove(p.slices, p.slices + 1, sizeof *p.slices * (size_t)(n - 1));
        n--;
    }
    if (n == 0) {
        p.slices[0] = 0;
        n = 1;
    }
    double q = (double)o->quantum;
    o->median_pct = (p.slices[n / 2] - q) / q * 100;
    o->p99_pct = (p.slices[(size_t)((n - 1) * 0.99)] - q) / q * 100;
    o->max_pct = (p.slices[n - 1] - q) / q * 100;
    int frc = lull_loop_free(p.loop);
    free(p.slices);
    if (rc == 0 && frc < 0) rc = frc;
    return rc;
}

/* The same loop with the same no-op record and no call: ns per iteration. */
static double baseline_ns(uint64_t n) {
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++)
        __asm__ volatile("" ::: "memory");
    return (double)(now_ns() - t0) / (double)n;
}

/* Seconds per case: a plain decimal number in (0, 3600] (atof read "abc"
 * as 0 and "1e309" as infinity, both run as the default, with no word). */
static bool seconds_arg(const char *s, double *out) {
    if ((*s < '0' || *s > '9') && *s != '.') return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !(v > 0) || v > 3600) return false;
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    double seconds = 1.0;
    if (argc > 2 || (argc == 2 && !seconds_arg(argv[1], &seconds))) {
        fprintf(stderr,
                "should_yield: seconds per case takes a number "
                "above 0 and at most 3600, not '%s'\n",
                argv[argc - 1]);
        return 2;
    }
    calibrate();
    printf("lull_loop_should_yield: %.2f s per case; a slow record is ~1 µs "
           "(%lu spins)\n",
           seconds, spins_per_us);

    static const struct {
        int role;
        const char *name;
    } roles[] = {{LULL_ROLE_SHARED, "shared"},
                 {LULL_ROLE_DEDICATED, "dedicated"}};
    printf("\n  %-10s %-12s %8s %7s %10s %10s %10s %10s\n", "role", "records",
           "quantum", "slices", "preempted", "overshoot", "p99", "max");
    printf("  %-10s %-12s %8s %7s %10s %10s %10s %10s\n", "", "", "µs", "",
           "(left out)", "median %", "%", "%");
    outcome noop[2];
    memset(noop, 0, sizeof noop);
    for (int r = 0; r < 2; r++) {
        for (int pace = PACE_NOOP; pace <= PACE_MIDSLICE; pace++) {
            outcome o;
            memset(&o, 0, sizeof o);
            int rc = run_case(roles[r].role, (enum pace)pace, seconds, &o);
            if (rc < 0) {
                printf("  %-10s %-12s failed: %s\n", roles[r].name,
                       pace_names[pace], strerror(-rc));
                continue;
            }
            if (pace == PACE_NOOP) noop[r] = o;
            printf("  %-10s %-12s %8.0f %7d %10d %10.2f %10.2f %10.2f\n",
                   roles[r].name, pace_names[pace], (double)o.quantum / 1e3,
                   o.slices, o.preempted, o.median_pct, o.p99_pct, o.max_pct);
        }
    }

    printf("\n  cost per call with no-op records (producer busy time / "
           "calls):\n");
    for (int r = 0; r < 2; r++) {
        if (noop[r].calls == 0) continue;
        double base = baseline_ns(noop[r].calls);
        printf("  %-10s %.2f ns per record with the call, %.2f ns without: "
               "lull_loop_should_yield ≈ %.2f ns per call\n",
               roles[r].name, noop[r].ns_per_call, base,
               noop[r].ns_per_call - base);
    }
    printf("\n  target: ≤ 5 ns per call amortized; overshoot ≤ 10%%\n");
    return 0;
}
