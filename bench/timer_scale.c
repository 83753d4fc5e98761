/* Timers at scale: what arming and cancelling cost with 1,000,000 timers
 * armed, and what growing the timer heap costs the arm that grows it.
 *
 * Each implementation runs in a process of its own (forked), so none gets
 * memory another one touched and freed, and all get the same warm-up: every
 * handle is initialised (its memory touched) before anything is timed.
 *
 *  - rounds: arm BASE timers (the fill), then ROUNDS times arm EXTRA more and
 *    cancel them, each batch timed as a whole. Round 1 grows the heap past
 *    BASE (past 2^20 slots at the default sizes) and touches fresh memory;
 *    later rounds reuse it: the steady state is the median of rounds 2..N.
 *  - spike: another process per implementation arms BASE + EXTRA timers,
 *    timing every arm on its own (two clock reads around it, about 50 ns
 *    added to each), and notes the arms over 5 us during which the thread
 *    was not preempted. It runs SPIKE_RUNS times: an arm that is slow in
 *    every run at the same index is the structure's own cost (an arm that
 *    grows the heap), not noise, and is printed with its index and its
 *    least time over the runs.
 *
 * Delays are pseudo-random in [1 h, 2 h), so nothing fires and each timer
 * lands at a random place in the heap. lull runs twice: on the real clock,
 * where a delayed arm reads the clock (never early, BRIEF 2.1), and on the
 * virtual clock, where it does not — the difference is the clock read.
 * libev and libuv count from a cached loop time and read no clock per arm.
 * The machine's load moves these numbers: run a few times, take medians.
 *
 *   timer_scale [BASE [EXTRA [ROUNDS [NAMES]]]]
 *   defaults 1000000 100000 5, every implementation; NAMES is a comma-
 *   separated subset (lull,lull-virtual,libev,libuv), e.g. to run one
 *   under valgrind. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lull.h"

#ifdef LAB_HAVE_EV
#include <ev.h>
#endif
#ifdef LAB_HAVE_UV
#include <uv.h>
#endif

#define MAX_ROUNDS 32
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
static uint64_t *delays; /* ns, one per handle */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
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
 * handle i. */
typedef struct impl {
    const char *name;
    void (*setup)(uint32_t n);
    void (*arm)(uint32_t i);
    void (*cancel)(uint32_t i);
} impl;

/* ------------------------------------------------------------------ lull */

static lull_loop *lloop;
static lull_timer *ltimers;

static void lull_cb(lull_timer *t) {
    (void)t;
}

static void lull_setup(uint32_t n, int clock) {
    lull_loop_options o = {.clock = clock};
    if (lull_loop_new(&lloop, &o) != 0) abort();
    ltimers = malloc(n * sizeof *ltimers);
    if (!ltimers) abort();
    for (uint32_t i = 0; i < n; i++)
        lull_timer_init(lloop, &ltimers[i], lull_cb);
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

/* ----------------------------------------------------------------- libev */

#ifdef LAB_HAVE_EV
static struct ev_loop *eloop;
static ev_timer *etimers;

static void e_cb(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
}

static void ev_setup(uint32_t n) {
    eloop = ev_loop_new(EVFLAG_AUTO);
    etimers = malloc(n * sizeof *etimers);
    if (!eloop || !etimers) abort();
    for (uint32_t i = 0; i < n; i++)
        ev_timer_init(&etimers[i], e_cb, (double)delays[i] * 1e-9, 0.);
}

static void ev_arm(uint32_t i) {
    ev_timer_start(eloop, &etimers[i]);
}

static void ev_cancel(uint32_t i) {
    ev_timer_stop(eloop, &etimers[i]);
}
#endif

/* ----------------------------------------------------------------- libuv */

#ifdef LAB_HAVE_UV
static uv_loop_t uloop;
static uv_timer_t *utimers;

static void uv_cb(uv_timer_t *t) {
    (void)t;
}

static void uvl_setup(uint32_t n) {
    utimers = malloc(n * sizeof *utimers);
    if (!utimers || uv_loop_init(&uloop) != 0) abort();
    for (uint32_t i = 0; i < n; i++)
        uv_timer_init(&uloop, &utimers[i]);
}

/* libuv's delays are milliseconds. */
static void uvl_arm(uint32_t i) {
    uv_timer_start(&utimers[i], uv_cb, delays[i] / 1000000u, 0);
}

static void uvl_cancel(uint32_t i) {
    uv_timer_stop(&utimers[i]);
}
#endif

static const impl impls[] = {
    {"lull", lull_real_setup, ll_arm, ll_cancel},
    {"lull-virtual", lull_virtual_setup, ll_arm, ll_cancel},
#ifdef LAB_HAVE_EV
    {"libev", ev_setup, ev_arm, ev_cancel},
#endif
#ifdef LAB_HAVE_UV
    {"libuv", uvl_setup, uvl_arm, uvl_cancel},
#endif
};
#define N_IMPLS (sizeof impls / sizeof impls[0])

/* ------------------------------------------------------------- measuring */

typedef struct result {
    double fill;                /* ns per arm while filling to base_n */
    double arm[MAX_ROUNDS];     /* ns per arm, per round */
    double cancel[MAX_ROUNDS];  /* ns per cancel, per round */
    uint32_t slow;              /* spike pass: arms over SLOW_NS */
    uint32_t preempted;         /* ... left out: the thread was preempted */
    uint32_t kept;              /* ... the first MAX_SLOW of them, in order: */
    uint32_t slow_at[MAX_SLOW]; /* index of the arm */
    uint32_t slow_ns[MAX_SLOW]; /* its time */
} result;

static void run_rounds(const impl *im, result *r) {
    uint32_t n = base_n + extra_n;
    im->setup(n);
    uint64_t t = now_ns();
    for (uint32_t i = 0; i < base_n; i++)
        im->arm(i);
    r->fill = (double)(now_ns() - t) / base_n;
    for (uint32_t k = 0; k < rounds; k++) {
        t = now_ns();
        for (uint32_t i = base_n; i < n; i++)
            im->arm(i);
        uint64_t t1 = now_ns();
        for (uint32_t i = base_n; i < n; i++)
            im->cancel(i);
        uint64_t t2 = now_ns();
        r->arm[k] = (double)(t1 - t) / extra_n;
        r->cancel[k] = (double)(t2 - t1) / extra_n;
    }
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
        result mine;
        memset(&mine, 0, sizeof mine);
        fn(im, &mine);
        ssize_t w = write(fds[1], &mine, sizeof mine);
        _exit(w == (ssize_t)sizeof mine ? 0 : 1);
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

/* The median of rounds 2..N (the steady state), of v[k] + w[k] if w. */
static double steady(const double *v, const double *w) {
    double s[MAX_ROUNDS];
    uint32_t m = 0;
    for (uint32_t k = 1; k < rounds; k++)
        s[m++] = v[k] + (w ? w[k] : 0);
    qsort(s, m, sizeof *s, cmp_double);
    return m % 2 ? s[m / 2] : (s[m / 2 - 1] + s[m / 2]) / 2;
}

int main(int argc, char **argv) {
    if (argc > 1) base_n = (uint32_t)strtoul(argv[1], NULL, 10);
    if (argc > 2) extra_n = (uint32_t)strtoul(argv[2], NULL, 10);
    if (argc > 3) rounds = (uint32_t)strtoul(argv[3], NULL, 10);
    if (base_n == 0 || extra_n == 0 || rounds < 2 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: timer_scale [BASE [EXTRA [ROUNDS 2..%d [NAMES]]]]\n",
                MAX_ROUNDS);
        return 2;
    }
    bool chosen[N_IMPLS];
    for (size_t i = 0; i < N_IMPLS; i++)
        chosen[i] = argc <= 4 || name_in(impls[i].name, argv[4]);
    make_delays(base_n + extra_n);
#ifndef LAB_HAVE_EV
    printf("libev: not found at build time, skipped\n");
#endif
#ifndef LAB_HAVE_UV
    printf("libuv: not found at build time, skipped\n");
#endif
    printf("timer_scale: %" PRIu32 " armed, then %" PRIu32
           " more armed and cancelled per round, %" PRIu32
           " rounds; ns per operation\n"
           "each implementation in its own process; steady = median of "
           "rounds 2..%" PRIu32 "\n\n",
           base_n, extra_n, rounds, rounds);
    printf("%-13s %7s", "", "fill");
    for (uint32_t k = 0; k < rounds; k++)
        printf("  r%-2" PRIu32 "arm/cancel", k + 1);
    printf("  %7s %7s %9s\n", "s.arm", "s.cancel", "s.arm+c");

    result res[N_IMPLS];
    in_child(warm_up, &impls[0], &res[0]);
    memset(res, 0, sizeof res);
    for (size_t i = 0; i < N_IMPLS; i++) {
        result *r = &res[i];
        if (!chosen[i]) continue;
        if (in_child(run_rounds, &impls[i], r) != 0) {
            printf("%-13s failed\n", impls[i].name);
            continue;
        }
        printf("%-13s %7.1f", impls[i].name, r->fill);
        for (uint32_t k = 0; k < rounds; k++)
            printf("  %6.1f/%-6.1f", r->arm[k], r->cancel[k]);
        printf("  %7.1f %7.1f %9.1f\n", steady(r->arm, NULL),
               steady(r->cancel, NULL), steady(r->arm, r->cancel));
    }

    printf("\nspike: every one of %" PRIu32
           " arms timed alone, %d runs; the arms over 5 us (not preempted) "
           "at the\nsame index in every run, worst first: least us over the "
           "runs @ index\n",
           base_n + extra_n, SPIKE_RUNS);
    static result sp[SPIKE_RUNS];
    for (size_t i = 0; i < N_IMPLS; i++) {
        if (!chosen[i]) continue;
        int ok = 0;
        for (int k = 0; k < SPIKE_RUNS; k++) {
            memset(&sp[k], 0, sizeof sp[k]);
            ok += in_child(run_spike, &impls[i], &sp[k]) == 0;
        }
        if (ok != SPIKE_RUNS) {
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

    /* lull against each peer, on both clocks: the real clock's arm reads
     * the clock (never early), which the peers' arms do not. */
    printf("\nsteady arm+cancel, lull / peer:");
    for (size_t i = 2; i < N_IMPLS; i++) {
        double peer = chosen[i] ? steady(res[i].arm, res[i].cancel) : 0;
        for (size_t l = 0; l < 2 && peer > 0; l++)
            if (chosen[l])
                printf("  %s/%s %.2f", impls[l].name, impls[i].name,
                       steady(res[l].arm, res[l].cancel) / peer);
    }
    printf("\n");
    return 0;
}
