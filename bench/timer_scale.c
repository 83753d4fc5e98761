/* Timers at scale: what arming and cancelling cost with 1,000,000 timers
 * armed, and what growing the timer heap costs the arm that grows it.
 *
 * Each implementation runs in a process of its own (forked), so none gets
 * memory another one touched and freed, and all get the same warm-up: every
 * handle is initialised (its memory touched) before anything is timed.
 * RUNS runs alternate the implementations (A B C D A B C D ...), and the
 * summary gives each figure's median [min-max] over the runs, and the
 * ratios to the peers taken run by run: the machine is shared, so a ratio
 * within one run is worth more than an absolute figure. Batches are timed
 * in the thread's CPU time, which leaves out time spent preempted (not the
 * caches other processes evict).
 *
 *  - rounds: arm BASE timers from inside a callback (the fill), then, for
 *    each pattern below, ROUNDS times arm EXTRA more and cancel them, the
 *    arms and the cancels timed apart as batches. Round 1 grows the heap
 *    past BASE and touches fresh memory; later rounds reuse it: the steady
 *    state is the median of rounds 2..N. The patterns:
 *      flushed       one callback arms the batch, the loop iteration ends,
 *                    a second callback cancels it: every arm is in the
 *                    heap before it is cancelled. Timed: the whole
 *                    iteration of each (lull_loop_run / ev_run / uv_run
 *                    NOWAIT), so the arms' share of the iteration, a poll
 *                    and, for lull, the flush that gives the pending arms
 *                    their deadlines, are all in. The like-for-like row.
 *      before-flush  one callback arms the batch and cancels it before the
 *                    loop reads the clock again (a request timeout
 *                    re-armed on every read): lull's arms are still
 *                    pending, so neither arm nor cancel touches its heap;
 *                    the peers do the same heap work as when flushed.
 *      outside       arms and cancels outside any run (set-up code): a lull
 *                    arm there reads the clock itself, since no loop read
 *                    is coming to flush it.
 *  - spike: another process per implementation arms BASE + EXTRA timers
 *    outside a run, timing every arm on its own (two clock reads around it,
 *    about 50 ns added to each), and notes the arms over 5 us during which
 *    the thread was not preempted. It runs SPIKE_RUNS times: an arm that is
 *    slow in every run at the same index is the structure's own cost (an arm
 *    that grows the heap), not noise, and is printed with its index and its
 *    least time over the runs.
 *
 * Delays are pseudo-random in [1 h, 2 h), so nothing fires and each timer
 * lands at a random place in the heap. lull runs twice: on the real clock,
 * where a delayed arm must never fire early (contract C3), and on the virtual
 * clock, which needs no reading at all. libev and libuv count from a cached
 * loop time and read no clock per arm.
 *
 *   timer_scale [options] [BASE [EXTRA [ROUNDS [NAMES]]]]
 *   defaults 1000000 100000 5, every implementation; NAMES is a comma-
 *   separated subset (lull,lull-virtual,libev,libuv). Options:
 *     --runs N       alternating runs (default 3)
 *     --no-spike     skip the spike pass
 *     --inline P     run the rounds of pattern P only, of the first
 *                    implementation named, in this process, and print
 *                    nothing but that: for callgrind
 *                    (bench/callgrind_timers.sh). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "lull.h"

#ifdef LAB_HAVE_EV
#include <ev.h>
#endif
#ifdef LAB_HAVE_UV
#include <uv.h>
#endif

#define MAX_ROUNDS 32
#define MAX_RUNS   32
/* Slow arms printed per implementation by the spike pass. */
#define TOP 5
/* Spike passes per implementation: noise rarely hits one index thrice. */
#define SPIKE_RUNS 3
/* Slow arms one spike pass keeps: far more than the structural ones. */
#define MAX_SLOW 4096
/* An arm slower than this is looked at by the spike pass: a clock read pair
 * costs ~50 ns and a minor page fault a few us, so 5 us is clear of both. */
#define SLOW_NS 5000

static uint32_t base_n = 1000000, extra_n = 100000, rounds = 5;
static uint32_t runs = 3;
static uint64_t *delays; /* ns, one per handle */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* This thread's CPU time: the batches are timed with it, so time the
 * thread spent preempted by other work on the shared machine is left out
 * (a batch takes milliseconds; the read, a system call, ~0.3 us). */
static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void make_delays(uint32_t n) {
    delays = malloc(n * sizeof *delays);
    if (!delays) abort();
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < n; i++) {
        x ^= x >> 12; /* xorshift64* */
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t hour = 3600ull * 1000000000ull;
        delays[i] = hour + (x * 2685821657736338717ull) % hour;
    }
}

/* One implementation: init n handles, arm handle i with delays[i], cancel
 * handle i, and run fn inside one callback of one non-blocking iteration. */
typedef struct impl {
    const char *name;
    void (*setup)(uint32_t n);
    void (*arm)(uint32_t i);
    void (*cancel)(uint32_t i);
    void (*in_callback)(void (*fn)(void));
} impl;

static void (*callback_fn)(void); /* what in_callback runs */

/* ------------------------------------------------------------------ lull */

static lull_loop *lloop;
static lull_timer *ltimers;
static lull_task ltask;

static void lull_cb(lull_timer *t) {
    (void)t;
}

static void lull_task_cb(lull_task *t) {
    (void)t;
    callback_fn();
}

static void lull_setup(uint32_t n, int clock) {
    lull_loop_options o = {.clock = clock};
    if (lull_loop_new(&lloop, &o) != 0) abort();
    ltimers = malloc(n * sizeof *ltimers);
    if (!ltimers) abort();
    for (uint32_t i = 0; i < n; i++)
        lull_timer_init(lloop, &ltimers[i], lull_cb);
    lull_task_init(&ltask, lull_task_cb);
}

static void lull_real_setup(uint32_t n) {
    lull_setup(n, LULL_CLOCK_MONOTONIC);
}

static void lull_virtual_setup(uint32_t n) {
    lull_setup(n, LULL_CLOCK_VIRTUAL);
}

static void ll_arm(uint32_t i) {
    lull_timer_start(&ltimers[i], delays[i], 0);
}

static void ll_cancel(uint32_t i) {
    lull_timer_stop(&ltimers[i]);
}

static void ll_in_callback(void (*fn)(void)) {
    callback_fn = fn;
    lull_task_post(lloop, &ltask);
    lull_loop_run(lloop, LULL_RUN_NOWAIT);
}

/* ----------------------------------------------------------------- libev */

#ifdef LAB_HAVE_EV
static struct ev_loop *eloop;
static ev_timer *etimers;
static ev_idle eidle;

static void e_cb(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
}

static void e_idle_cb(struct ev_loop *loop, ev_idle *w, int revents) {
    (void)revents;
    ev_idle_stop(loop, w);
    callback_fn();
}

static void ev_setup(uint32_t n) {
    eloop = ev_loop_new(EVFLAG_AUTO);
    etimers = malloc(n * sizeof *etimers);
    if (!eloop || !etimers) abort();
    for (uint32_t i = 0; i < n; i++)
        ev_timer_init(&etimers[i], e_cb, (double)delays[i] * 1e-9, 0.);
    ev_idle_init(&eidle, e_idle_cb);
}

static void ev_arm(uint32_t i) {
    ev_timer_start(eloop, &etimers[i]);
}

static void ev_cancel(uint32_t i) {
    ev_timer_stop(eloop, &etimers[i]);
}

static void ev_in_callback(void (*fn)(void)) {
    callback_fn = fn;
    ev_idle_start(eloop, &eidle);
    ev_run(eloop, EVRUN_NOWAIT);
}
#endif

/* ----------------------------------------------------------------- libuv */

#ifdef LAB_HAVE_UV
static uv_loop_t uloop;
static uv_timer_t *utimers;
static uv_idle_t uidle;

static void uv_cb(uv_timer_t *t) {
    (void)t;
}

static void u_idle_cb(uv_idle_t *h) {
    uv_idle_stop(h);
    callback_fn();
}

static void uvl_setup(uint32_t n) {
    utimers = malloc(n * sizeof *utimers);
    if (!utimers || uv_loop_init(&uloop) != 0) abort();
    for (uint32_t i = 0; i < n; i++)
        uv_timer_init(&uloop, &utimers[i]);
    uv_idle_init(&uloop, &uidle);
}

/* libuv's delays are milliseconds. */
static void uvl_arm(uint32_t i) {
    uv_timer_start(&utimers[i], uv_cb, delays[i] / 1000000u, 0);
}

static void uvl_cancel(uint32_t i) {
    uv_timer_stop(&utimers[i]);
}

static void uvl_in_callback(void (*fn)(void)) {
    callback_fn = fn;
    uv_idle_start(&uidle, u_idle_cb);
    uv_run(&uloop, UV_RUN_NOWAIT);
}
#endif

static const impl impls[] = {
    {"lull", lull_real_setup, ll_arm, ll_cancel, ll_in_callback},
    {"lull-virtual", lull_virtual_setup, ll_arm, ll_cancel, ll_in_callback},
#ifdef LAB_HAVE_EV
    {"libev", ev_setup, ev_arm, ev_cancel, ev_in_callback},
#endif
#ifdef LAB_HAVE_UV
    {"libuv", uvl_setup, uvl_arm, uvl_cancel, uvl_in_callback},
#endif
};
#define N_IMPLS (sizeof impls / sizeof impls[0])

/* ------------------------------------------------------------- measuring */

enum { P_FLUSHED, P_BEFORE_FLUSH, P_OUTSIDE, N_PATTERNS };
static const char *const pattern_name[N_PATTERNS] = {"flushed", "before-flush",
                                                     "outside"};
static const char *const pattern_text[N_PATTERNS] = {
    "flushed: armed in one callback, in the heap, cancelled in the next "
    "(like for like)",
    "before-flush: armed and cancelled in one callback, before the loop "
    "reads the clock",
    "outside: armed and cancelled outside any run (set-up code)"};

typedef struct result {
    double fill;                           /* ns per arm while filling */
    double arm[N_PATTERNS][MAX_ROUNDS];    /* ns per arm, per round */
    double cancel[N_PATTERNS][MAX_ROUNDS]; /* ns per cancel, per round */
    uint32_t slow;                         /* spike pass: arms over SLOW_NS */
    uint32_t preempted;         /* ... left out: the thread was preempted */
    uint32_t kept;              /* ... the first MAX_SLOW of them, in order: */
    uint32_t slow_at[MAX_SLOW]; /* index of the arm */
    uint32_t slow_ns[MAX_SLOW]; /* its time */
} result;

/* The batch the callbacks below work on, and what they time. */
static const impl *cur;
static uint32_t batch_from, batch_to;
static uint64_t mark[3];

static void arm_batch(void) {
    for (uint32_t i = batch_from; i < batch_to; i++)
        cur->arm(i);
}

static void cancel_batch(void) {
    for (uint32_t i = batch_from; i < batch_to; i++)
        cur->cancel(i);
}

static void arm_then_cancel(void) {
    mark[0] = cpu_ns();
    arm_batch();
    mark[1] = cpu_ns();
    cancel_batch();
    mark[2] = cpu_ns();
}

/* Rounds of one pattern; all of them when `only` is N_PATTERNS. */
static void run_rounds_of(const impl *im, result *r, int only) {
    uint32_t n = base_n + extra_n;
    cur = im;
    im->setup(n);
    batch_from = 0;
    batch_to = base_n;
    uint64_t t = cpu_ns();
    im->in_callback(arm_batch);
    r->fill = (double)(cpu_ns() - t) / base_n;
    batch_from = base_n;
    batch_to = n;
    for (int p = 0; p < N_PATTERNS; p++) {
        if (only != N_PATTERNS && p != only) continue;
        for (uint32_t k = 0; k < rounds; k++) {
            uint64_t t0 = cpu_ns(), t1, t2;
            if (p == P_FLUSHED) {
                im->in_callback(arm_batch);
                t1 = cpu_ns();
                im->in_callback(cancel_batch);
                t2 = cpu_ns();
            } else if (p == P_BEFORE_FLUSH) {
                im->in_callback(arm_then_cancel);
                t0 = mark[0];
                t1 = mark[1];
                t2 = mark[2];
            } else {
                arm_batch();
                t1 = cpu_ns();
                cancel_batch();
                t2 = cpu_ns();
            }
            r->arm[p][k] = (double)(t1 - t0) / extra_n;
            r->cancel[p][k] = (double)(t2 - t1) / extra_n;
        }
    }
}

static void run_rounds(const impl *im, result *r) {
    run_rounds_of(im, r, N_PATTERNS);
}

/* Involuntary context switches of this thread so far. */
static long preemptions(void) {
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nivcsw;
}

/* A slow arm during which the thread was preempted measures the scheduler:
 * it is counted apart. The count is read after each slow arm only, so a
 * preemption between two timed arms since the last slow one is blamed on
 * this one: the filter errs towards leaving arms out. */
static void run_spike(const impl *im, result *r) {
    uint32_t n = base_n + extra_n;
    im->setup(n);
    long seen = preemptions();
    for (uint32_t i = 0; i < n; i++) {
        uint64_t t = now_ns();
        im->arm(i);
        uint64_t d = now_ns() - t;
        if (d <= SLOW_NS) continue;
        long p = preemptions();
        bool preempted = p != seen;
        seen = p;
        if (preempted) {
            r->preempted++;
            continue;
        }
        r->slow++;
        if (r->kept == MAX_SLOW) continue;
        r->slow_at[r->kept] = i;
        r->slow_ns[r->kept++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
    }
}

/* A process's first touch of memory the machine has not used since boot can
 * cost far more than a minor fault (on a VM, the host backs the page too):
 * whichever implementation ran first would pay it. So a child first touches
 * and frees WARM_MB, and every measured process starts from pages that have
 * been used before. */
#define WARM_MB 512

static void warm_up(const impl *im, result *r) {
    (void)im;
    (void)r;
    size_t len = (size_t)WARM_MB << 20;
    char *p = malloc(len);
    if (!p) return;
    memset(p, 1, len);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
}

/* Runs fn for im in a child process; its result comes back over a pipe. */
static int in_child(void (*fn)(const impl *, result *), const impl *im,
                    result *r) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fds[0]);
        result *mine = calloc(1, sizeof *mine);
        if (!mine) _exit(1);
        fn(im, mine);
        ssize_t w = write(fds[1], mine, sizeof *mine);
        _exit(w == (ssize_t)sizeof *mine ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t m = read(fds[0], (char *)r + got, sizeof *r - got);
        if (m <= 0) break;
        got += (size_t)m;
    }
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return got == sizeof *r && WIFEXITED(status) && !WEXITSTATUS(status) ? 0
                                                                         : -1;
}

/* Leaves in sp[0] the slow arms whose index is slow in every run, with
 * the least time over the runs, worst first; returns how many. */
static uint32_t every_run(result *sp) {
    result *r = &sp[0];
    for (int k = 1; k < SPIKE_RUNS; k++) {
        const result *o = &sp[k];
        uint32_t n = 0, j = 0;
        for (uint32_t i = 0; i < r->kept; i++) {
            while (j < o->kept && o->slow_at[j] < r->slow_at[i])
                j++;
            if (j == o->kept || o->slow_at[j] != r->slow_at[i]) continue;
            r->slow_at[n] = r->slow_at[i];
            r->slow_ns[n++] =
                r->slow_ns[i] < o->slow_ns[j] ? r->slow_ns[i] : o->slow_ns[j];
        }
        r->kept = n;
    }
    for (uint32_t i = 1; i < r->kept; i++) /* few: insertion sort */
        for (uint32_t j = i; j > 0 && r->slow_ns[j - 1] < r->slow_ns[j]; j--) {
            uint32_t at = r->slow_at[j], ns = r->slow_ns[j];
            r->slow_at[j] = r->slow_at[j - 1];
            r->slow_ns[j] = r->slow_ns[j - 1];
            r->slow_at[j - 1] = at;
            r->slow_ns[j - 1] = ns;
        }
    return r->kept;
}

/* Is name one of the comma-separated names in list? */
static bool name_in(const char *name, const char *list) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && strncmp(p, name, n) == 0) return true;
        p += m + (p[m] == ',');
    }
    return false;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *s, uint32_t m) {
    qsort(s, m, sizeof *s, cmp_double);
    return m % 2 ? s[m / 2] : (s[m / 2 - 1] + s[m / 2]) / 2;
}

/* The median of rounds 2..N (the steady state), of v[k] + w[k] if w. */
static double steady(const double *v, const double *w) {
    double s[MAX_ROUNDS];
    uint32_t m = 0;
    for (uint32_t k = 1; k < rounds; k++)
        s[m++] = v[k] + (w ? w[k] : 0);
    return median(s, m);
}

/* "median [min-max]" of v[0..n), into buf. */
static const char *spread(char *buf, size_t len, const double *v, uint32_t n) {
    double s[MAX_RUNS];
    memcpy(s, v, n * sizeof *s);
    double med = median(s, n);
    snprintf(buf, len, "%.1f [%.1f-%.1f]", med, s[0], s[n - 1]);
    return buf;
}

static const char *spread2(char *buf, size_t len, const double *v, uint32_t n) {
    double s[MAX_RUNS];
    memcpy(s, v, n * sizeof *s);
    double med = median(s, n);
    snprintf(buf, len, "%.2f [%.2f-%.2f]", med, s[0], s[n - 1]);
    return buf;
}

/* ------------------------------------------------------------------ main */

static int usage(void) {
    fprintf(stderr,
            "usage: timer_scale [--runs N] [--no-spike] "
            "[--inline PATTERN]\n"
            "                   [BASE [EXTRA [ROUNDS 2..%d [NAMES]]]]\n",
            MAX_ROUNDS);
    return 2;
}

/* A count argument within [min, max] into *out, or a line naming it. */
static bool count_arg(const char *s, const char *what, uint32_t min,
                      uint32_t max, uint32_t *out) {
    unsigned long long v;
    if (!bench_count(s, min, max, &v)) {
        fprintf(stderr,
                "timer_scale: %s takes %" PRIu32 "..%" PRIu32 ", not '%s'\n",
                what, min, max, s);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

int main(int argc, char **argv) {
    bool spike = true;
    int inline_pattern = -1;
    const char *names = NULL;
    int pos = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--runs") == 0 && a + 1 < argc) {
            if (!count_arg(argv[++a], "--runs", 1, MAX_RUNS, &runs)) return 2;
        } else if (strcmp(argv[a], "--no-spike") == 0) {
            spike = false;
        } else if (strcmp(argv[a], "--inline") == 0 && a + 1 < argc) {
            a++;
            for (int p = 0; p < N_PATTERNS; p++)
                if (strcmp(argv[a], pattern_name[p]) == 0) inline_pattern = p;
            if (inline_pattern < 0) return usage();
        } else if (argv[a][0] == '-') {
            return usage();
        } else if (pos == 0) {
            if (!count_arg(argv[a], "BASE", 1, 100000000, &base_n)) return 2;
            pos++;
        } else if (pos == 1) {
            if (!count_arg(argv[a], "EXTRA", 1, 100000000, &extra_n)) return 2;
            pos++;
        } else if (pos == 2) {
            if (!count_arg(argv[a], "ROUNDS", 2, MAX_ROUNDS, &rounds)) return 2;
            pos++;
        } else if (pos == 3) {
            names = argv[a], pos++;
        } else {
            return usage();
        }
    }
    if (base_n == 0 || extra_n == 0 || rounds < 2 || rounds > MAX_ROUNDS ||
        runs < 1 || runs > MAX_RUNS)
        return usage();
    bool chosen[N_IMPLS];
    for (size_t i = 0; i < N_IMPLS; i++)
        chosen[i] = !names || name_in(impls[i].name, names);
    uint32_t delay_n = base_n + extra_n;
    make_delays(delay_n);

    if (inline_pattern >= 0) {
        for (size_t i = 0; i < N_IMPLS; i++) {
            if (!chosen[i]) continue;
            static result r;
            run_rounds_of(&impls[i], &r, inline_pattern);
            printf("%s %s steady arm+cancel %.1f ns\n", impls[i].name,
                   pattern_name[inline_pattern],
                   steady(r.arm[inline_pattern], r.cancel[inline_pattern]));
            return 0;
        }
        return usage();
    }

#ifndef LAB_HAVE_EV
    printf("libev: not found at build time, skipped\n");
#endif
#ifndef LAB_HAVE_UV
    printf("libuv: not found at build time, skipped\n");
#endif
    printf("timer_scale: %" PRIu32 " armed (from one callback), then %" PRIu32
           " more armed and cancelled per round, %" PRIu32
           " rounds per pattern;\nns per operation; each implementation in "
           "its own process, %" PRIu32
           " runs alternating; steady = median of rounds 2..%" PRIu32 "\n",
           base_n, extra_n, rounds, runs, rounds);

    static result res[MAX_RUNS][N_IMPLS];
    static bool ok[MAX_RUNS][N_IMPLS];
    in_child(warm_up, &impls[0], &res[0][0]);
    for (uint32_t run = 0; run < runs; run++) {
        printf("\nrun %" PRIu32 "\n%-13s %7s", run + 1, "", "fill");
        for (int p = 0; p < N_PATTERNS; p++)
            printf(" %20s", pattern_name[p]);
        printf("   (steady arm/cancel)\n");
        for (size_t i = 0; i < N_IMPLS; i++) {
            result *r = &res[run][i];
            memset(r, 0, sizeof *r);
            if (!chosen[i]) continue;
            if (in_child(run_rounds, &impls[i], r) != 0) {
                printf("%-13s failed\n", impls[i].name);
                continue;
            }
            ok[run][i] = true;
            printf("%-13s %7.1f", impls[i].name, r->fill);
            for (int p = 0; p < N_PATTERNS; p++) {
                char cell[32];
                snprintf(cell, sizeof cell, "%.1f/%.1f",
                         steady(r->arm[p], NULL), steady(r->cancel[p], NULL));
                printf(" %20s", cell);
            }
            printf("\n");
        }
    }

    /* The summary: per pattern, each implementation's steady figures over
     * the runs, then lull's ratios to each peer, run by run. */
    printf("\nsteady state over %" PRIu32 " runs: median [min-max], ns\n",
           runs);
    for (int p = 0; p < N_PATTERNS; p++) {
        printf("\n%s\n  %-13s %24s %24s %24s\n", pattern_text[p], "",
               "arm+cancel", "arm", "cancel");
        for (size_t i = 0; i < N_IMPLS; i++) {
            double ac[MAX_RUNS], a[MAX_RUNS], c[MAX_RUNS];
            uint32_t m = 0;
            for (uint32_t run = 0; run < runs; run++) {
                if (!ok[run][i]) continue;
                const result *r = &res[run][i];
                ac[m] = steady(r->arm[p], r->cancel[p]);
                a[m] = steady(r->arm[p], NULL);
                c[m++] = steady(r->cancel[p], NULL);
            }
            if (!m) continue;
            char b1[48], b2[48], b3[48];
            printf("  %-13s %24s %24s %24s\n", impls[i].name,
                   spread(b1, sizeof b1, ac, m), spread(b2, sizeof b2, a, m),
                   spread(b3, sizeof b3, c, m));
        }
        for (size_t l = 0; l < 2; l++) {
            for (size_t i = 2; i < N_IMPLS; i++) {
                double ratio[MAX_RUNS];
                uint32_t m = 0;
                for (uint32_t run = 0; run < runs; run++) {
                    if (!ok[run][l] || !ok[run][i]) continue;
                    const result *x = &res[run][l], *y = &res[run][i];
                    ratio[m++] = steady(x->arm[p], x->cancel[p]) /
                                 steady(y->arm[p], y->cancel[p]);
                }
                if (!m) continue;
                char b[48];
                printf("  %s / %s, same run: %s\n", impls[l].name,
                       impls[i].name, spread2(b, sizeof b, ratio, m));
            }
        }
    }

    if (spike) {
        printf("\nspike: every one of %" PRIu32
               " arms (outside a run) timed alone, %d runs; the arms over 5 us "
               "(not\npreempted) at the same index in every run, worst first: "
               "least us over the runs @ index\n",
               base_n + extra_n, SPIKE_RUNS);
        static result sp[SPIKE_RUNS];
        for (size_t i = 0; i < N_IMPLS; i++) {
            if (!chosen[i]) continue;
            int good = 0;
            for (int k = 0; k < SPIKE_RUNS; k++) {
                memset(&sp[k], 0, sizeof sp[k]);
                good += in_child(run_spike, &impls[i], &sp[k]) == 0;
            }
            if (good != SPIKE_RUNS) {
                printf("%-13s failed\n", impls[i].name);
                continue;
            }
            uint32_t n = every_run(sp);
            printf("%-13s", impls[i].name);
            for (uint32_t j = 0; j < TOP && j < n; j++)
                printf(" %7.1f @ %-7" PRIu32, sp[0].slow_ns[j] / 1e3,
                       sp[0].slow_at[j]);
            printf("  (%" PRIu32 " such arms; slow per run:", n);
            for (int k = 0; k < SPIKE_RUNS; k++)
                printf(" %" PRIu32, sp[k].slow);
            printf(")\n");
        }
    }

    return 0;
}
