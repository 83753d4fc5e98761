/* The `turns` scenario (BRIEF §4): what one turn of the loop costs, lull
 * beside libuv, libev, libevent and Node on the same machine in one run.
 *
 * Figures: (1) posted-task (next-iteration) chain and (2) zero-delay timer
 * chain per hop, each row with the I/O policy it runs and the polls it made
 * per hop; (3) 1 ms timer lateness, every row at the same timer slack, the
 * peers again at the kernel's default, beside two floors (a bare thread in
 * clock_nanosleep and in epoll_pwait2); (4) an idle window with many idle
 * handles; (5) a cross-thread round trip with both threads on one CPU and
 * (5b) on two, beside a raw futex and eventfd+epoll ping-pong (the floors),
 * with the sched_yield calls each made; (6) arm + cancel with 1,000,000
 * timers armed, steady state and first (growth) round apart, and bytes per
 * timer.
 *
 * Each figure runs every implementation once per round and prints the
 * median of the rounds with [min–max] and lull's ratio to each row. Rows
 * rotate: round r starts at row r mod N, so no row always runs first (cold)
 * or right after the same neighbour. The idle windows run side by side
 * instead (they are seconds long and compete for nothing), and the timers
 * figure runs each measurement in its own forked process, so every
 * implementation starts from the same memory.
 *
 * This file owns the driver and the figure definitions; the helpers every
 * implementation shares are in turns_util.c, the poll and sched_yield
 * counters in turns_count.c, the measurements in turns_lull.c,
 * turns_lull_so.c, peers/<peer>.c and turns_node.c. Runs on the main
 * thread; the round-trip harness starts and joins its own two threads. */
#include "turns.h"
#include "lab.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The timer slack every lateness row runs at: the one lull sets for itself
 * while it waits for a deadline (src/loop.c), so no row wins by its slack. */
#define COMMON_SLACK_NS 1000

/* ------------------------------------------------------------- figures */

typedef struct figure {
    const char *key;    /* JSON key */
    const char *title;  /* table title */
    const char *method; /* how it is measured; NULL: print_method says */
    const char *policy; /* header of the per-row policy column, or NULL */
    const char *target; /* lull's target from BRIEF §5 */
    int nvalues;
    const char *names[TURNS_VALUES];   /* JSON names of the values */
    const char *columns[TURNS_VALUES]; /* column headers */
    int ratio_value;                   /* value compared with lull's; -1 */
    int rows_of;                       /* the figure whose entries it runs */
    bool forked;                       /* each measurement in a child */
} figure;

static const figure figures[TURNS_FIGURES] = {
    [TURNS_CHAIN_TASK] =
        {"chain_task",
         "(1) posted-task / next-iteration callback chain",
         "a callback that re-queues itself; every loop also watches one idle "
         "socket, so its I/O check is real. polls/hop: epoll calls counted in "
         "lull-lab for every C row; Node: libuv iterations (uvMetricsInfo)",
         "I/O checked",
         "cheaper than the best peer under the same I/O policy (libevent with "
         "a 500 µs max_dispatch_interval); the default policy's saving shown "
         "apart",
         2,
         {"ns_per_hop", "polls_per_hop"},
         {"ns/hop", "polls/hop"},
         CHAIN_NS_PER_HOP,
         TURNS_CHAIN_TASK,
         false},
    [TURNS_CHAIN_TIMER0] =
        {"chain_timer0",
         "(2) zero-delay timer chain",
         "a timer that re-arms itself with delay 0 from its callback; one "
         "idle socket watched; polls counted as in (1)",
         "I/O checked",
         "within 1.5× of the task chain; polls/hop shown for every row",
         2,
         {"ns_per_hop", "polls_per_hop"},
         {"ns/hop", "polls/hop"},
         CHAIN_NS_PER_HOP,
         TURNS_CHAIN_TIMER0,
         false},
    [TURNS_LATENESS] =
        {"lateness_1ms",
         "(3) 1 ms timer lateness, µs",
         NULL, /* printed by the driver: it names the slacks */
         "timer slack",
         "p99 within 1.1× of the clock_nanosleep(TIMER_ABSTIME) floor's in "
         "the same run, at the same slack; never early (min ≥ 0)",
         4,
         {"p50_us", "p99_us", "max_us", "min_us"},
         {"p50 µs", "p99 µs", "max µs", "min µs"},
         LATE_P99_US,
         TURNS_LATENESS,
         false},
    [TURNS_IDLE] =
        {"idle",
         "(4) idle window",
         NULL, /* printed by the driver: it depends on the parameters */
         NULL,
         "0 wakeups and < 0.1 ms CPU per second with 10,000 idle sessions "
         "(1 wakeup is the timer that ends the window)",
         4,
         {"wakeups", "voluntary_cs", "cpu_us", "cpu_us_per_s"},
         {"wakeups", "vol. cs", "CPU µs", "CPU µs/s"},
         -1,
         TURNS_IDLE,
         false},
    [TURNS_ROUNDTRIP] =
        {"roundtrip",
         "(5) cross-thread round trip, both threads on one CPU, µs",
         NULL, /* printed by the driver: it names the CPUs */
         NULL,
         "within 1.2× of the futex floor measured in the same run",
         4,
         {"p50_us", "p99_us", "mean_us", "sched_yield_per_trip"},
         {"p50 µs", "p99 µs", "mean µs", "sched_yield/trip"},
         TRIP_P50_US,
         TURNS_ROUNDTRIP,
         false},
    [TURNS_ROUNDTRIP_2CPU] =
        {"roundtrip_2cpu",
         "(5b) cross-thread round trip, the threads on two CPUs, µs",
         NULL,
         NULL,
         "none of its own: shows what (5) owes to sharing one CPU",
         4,
         {"p50_us", "p99_us", "mean_us", "sched_yield_per_trip"},
         {"p50 µs", "p99 µs", "mean µs", "sched_yield/trip"},
         TRIP_P50_US,
         TURNS_ROUNDTRIP,
         false},
    [TURNS_TIMERS] =
        {"timers",
         "(6) timers at scale",
         NULL, /* printed by the driver */
         NULL,
         "steady arm + cancel ≤ 80 ns together with 1,000,000 armed; ≤ 64 "
         "bytes per timer",
         6,
         {"arm_cancel_ns", "arm_ns", "cancel_ns", "first_round_ns",
          "first_round_faults", "bytes_per_timer"},
         {"arm+cancel ns", "arm ns", "cancel ns", "1st round ns",
          "1st round faults", "bytes/timer"},
         TIMERS_STEADY_NS,
         TURNS_TIMERS,
         true},
};

static bool is_trip(int f) {
    return figures[f].rows_of == TURNS_ROUNDTRIP;
}

/* ----------------------------------------------------------- the peers */

/* Every implementation the lab knows, in row order; a NULL peer was not
 * found when lull-lab was built. */
static const struct {
    const char *name;
    const turns_peer *peer;
} known[] = {
    {"lull", &turns_lull},       /* lab/turns_lull.c */
    {"lull.so", &turns_lull_so}, /* lab/turns_lull_so.c */
#ifdef LAB_HAVE_UV
    {"libuv", &turns_uv},
#else
    {"libuv", NULL},
#endif
#ifdef LAB_HAVE_EV
    {"libev", &turns_ev},
#else
    {"libev", NULL},
#endif
#ifdef LAB_HAVE_EVENT
    {"libevent", &turns_event},
#else
    {"libevent", NULL},
#endif
    {"node", &turns_node},   /* lab/turns_node.c */
    {"floor", &turns_floor}, /* lab/peers/floor.c */
};
#define KNOWN_COUNT (sizeof known / sizeof known[0])

static bool is_lull(const turns_peer *peer) {
    return peer == &turns_lull || peer == &turns_lull_so;
}

/* ------------------------------------------------------------- driver */

#define MAX_ROWS 20

typedef struct row {
    const turns_entry *entry;
    const turns_peer *peer;
    char label[96];
    long slack_ns; /* lateness: > 0 set by the driver; 0 the kernel's
                      default; -1 the implementation sets its own */
    lab_series values[TURNS_VALUES];
    int failures;
    int last_error;
} row;

/* The thread's timer slack when lull-lab started: the kernel's default
 * unless whoever started lull-lab changed it. */
static long default_slack_ns;

/* Runs the entry in a child process and reads its result back through a
 * pipe: the child's memory (page faults, heap growth) is its own, and every
 * row starts from the same parent. The driver is single threaded here, so
 * the child may allocate. */
static int run_forked(const turns_entry *e, const turns_params *p,
                      turns_result *res) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        return -err;
    }
    if (pid == 0) {
        close(fds[0]);
        int rc = e->fn(p, res);
        if (write(fds[1], &rc, sizeof rc) != (ssize_t)sizeof rc ||
            write(fds[1], res, sizeof *res) != (ssize_t)sizeof *res)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    int rc = -EPROTO;
    if (read(fds[0], &rc, sizeof rc) != (ssize_t)sizeof rc ||
        read(fds[0], res, sizeof *res) != (ssize_t)sizeof *res)
        rc = -EPROTO; /* the child died before it wrote */
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return rc;
}

static void run_one(row *rw, const turns_params *p, int f) {
    const figure *fig = &figures[f];
    turns_params rp = *p;
    turns_result res;
    turns_result_clear(&res);
    long old_slack = -1;
    rp.slack_ns = 0;
    if (f == TURNS_LATENESS && rw->slack_ns > 0) {
        old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
        if (prctl(PR_SET_TIMERSLACK, rw->slack_ns, 0, 0, 0) == 0)
            rp.slack_ns = rw->slack_ns;
    }
    uint64_t yields0 = turns_yields();
    uint64_t t0 = lab_now_ns();
    int rc = fig->forked ? run_forked(rw->entry, &rp, &res)
                         : rw->entry->fn(&rp, &res);
    uint64_t yields = turns_yields() - yields0;
    if (old_slack > 0) prctl(PR_SET_TIMERSLACK, old_slack, 0, 0, 0);
    /* Node runs in its own process: its yields are not seen here. */
    if (is_trip(f) && rw->peer != &turns_node)
        res.v[TRIP_YIELDS] =
            (double)yields / (double)(p->trips + p->warmup_trips);
    if (getenv("LAB_TRACE")) /* where a slow run spends its time */
        fprintf(stderr, "  [%s: %.3f s, rc %d]\n", rw->label,
                (double)(lab_now_ns() - t0) / 1e9, rc);
    if (rc < 0) {
        rw->failures++;
        rw->last_error = rc;
        return;
    }
    if (rc == TURNS_SKIPPED) return;
    for (int v = 0; v < fig->nvalues; v++)
        if (isfinite(res.v[v])) lab_series_add(&rw->values[v], res.v[v]);
}

/* Idle windows run side by side, one thread (or Node process) each: idle
 * loops do not compete for anything, every value is per loop thread, and a
 * window is seconds long, so running them in turn would cost the whole run
 * (implementations x rounds) windows. */
typedef struct idle_job {
    row *rw;
    const turns_params *p;
} idle_job;

static void *idle_thread(void *arg) {
    idle_job *job = arg;
    run_one(job->rw, job->p, TURNS_IDLE);
    return NULL;
}

static void run_side_by_side(row *rows, int nrows, const turns_params *p) {
    pthread_t threads[MAX_ROWS];
    idle_job jobs[MAX_ROWS];
    bool started[MAX_ROWS] = {false};
    for (int i = 0; i < nrows; i++) {
        jobs[i] = (idle_job){&rows[i], p};
        started[i] =
            pthread_create(&threads[i], NULL, idle_thread, &jobs[i]) == 0;
        if (!started[i]) run_one(&rows[i], p, TURNS_IDLE);
    }
    for (int i = 0; i < nrows; i++)
        if (started[i]) pthread_join(threads[i], NULL);
}

/* The CPU after `cpu` this process may run on, or -1. */
static int next_cpu(int cpu) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int c = cpu + 1; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) return c;
    return -1;
}

static void set_params(const lab_options *opts, turns_params *p) {
    memset(p, 0, sizeof *p);
    p->hops = opts->quick ? 200000 : 2000000;
    /* Node's zero-delay timer waits ~1 ms per hop: 500 hops is 0.5 s. */
    p->slow_hops = opts->quick ? 100 : 500;
    p->lateness_samples = opts->quick ? 100 : 500;
    p->idle_handles_lull = 10000;
    p->idle_handles_peer = 1000;
    p->idle_window_ns = (opts->quick ? 1 : 3) * 1000000000ull;
    p->trips = opts->quick ? 5000 : 20000;
    p->warmup_trips = 200;
    p->timers = 1000000;
    p->timer_pairs = opts->quick ? 50000 : 100000;
    p->cpu = lab_first_cpu();
    p->cpu_b = p->cpu;
    p->seed = 0x9E3779B97F4A7C15ULL; /* any odd constant; fixed per run */
    p->quick = opts->quick;
}

static void json_params(lab_json *j, const turns_params *p, int rounds) {
    lab_json_key(j, "params");
    lab_json_begin_object(j);
    lab_json_field(j, "rounds", rounds);
    lab_json_field(j, "hops", (double)p->hops);
    lab_json_field(j, "slow_hops", (double)p->slow_hops);
    lab_json_field(j, "lateness_samples", p->lateness_samples);
    lab_json_field(j, "common_slack_ns", COMMON_SLACK_NS);
    lab_json_field(j, "default_slack_ns", (double)default_slack_ns);
    lab_json_field(j, "idle_handles_lull", p->idle_handles_lull);
    lab_json_field(j, "idle_handles_peer", p->idle_handles_peer);
    lab_json_field(j, "idle_window_s", (double)p->idle_window_ns / 1e9);
    lab_json_field(j, "trips", p->trips);
    lab_json_field(j, "timers", p->timers);
    lab_json_field(j, "timer_pairs", p->timer_pairs);
    lab_json_field(j, "timer_rounds", TURNS_TIMER_ROUNDS);
    lab_json_field(j, "cpu", p->cpu);
    lab_json_field(j, "cpu_b", next_cpu(p->cpu));
    lab_json_end_object(j);
}

/* How the rows of figure f take turns, for its header and its JSON. */
static const char *order_of(int f) {
    if (f == TURNS_IDLE)
        return "all rows at once, each on its own thread, once per round";
    if (figures[f].forked)
        return "each row in its own process, forked before it allocates; "
               "round r starts at row r mod N";
    return "each row once per round; round r starts at row r mod N";
}

static void print_method(int f, const turns_params *p) {
    if (f == TURNS_IDLE) {
        printf("  %.0f s window after one non-blocking iteration; lull: %d "
               "watched sockets + %d far timers + %d pumps listening; peers: "
               "%d watched sockets (Node: whole-process CPU)\n",
               (double)p->idle_window_ns / 1e9, p->idle_handles_lull,
               p->idle_handles_lull, p->idle_handles_lull,
               p->idle_handles_peer);
    } else if (f == TURNS_LATENESS) {
        printf("  a 1 ms one-shot timer re-armed from its callback; lateness "
               "= fire time - (arm time + 1 ms) on CLOCK_MONOTONIC, < 0: "
               "early\n"
               "  timer slack: every row at %d µs (PR_SET_TIMERSLACK on the "
               "measuring thread; Node inherits it), the value lull sets for "
               "itself while it waits; the rows marked \"default slack\" at "
               "the thread's default, %.0f µs here\n"
               "  floors: a bare thread sleeping 1 ms in clock_nanosleep"
               "(TIMER_ABSTIME), and in epoll_pwait2 on an empty set\n",
               COMMON_SLACK_NS / 1000, (double)default_slack_ns / 1e3);
        printf("  %d samples per round\n", p->lateness_samples);
    } else if (is_trip(f)) {
        if (f == TURNS_ROUNDTRIP)
            printf("  thread A posts to loop B, B posts back; both threads "
                   "pinned to CPU %d\n",
                   p->cpu);
        else
            printf("  the same as (5), thread A pinned to CPU %d and B to "
                   "CPU %d; %d trips; Node's process may run on both (it "
                   "cannot pin its threads one by one)\n",
                   p->cpu, p->cpu_b, p->trips);
        printf("  floors: two raw threads ping-ponging on a futex word, and "
               "on eventfds each watched by its own epoll (an epoll loop's "
               "wake-up path without the loop)\n"
               "  sched_yield/trip: sched_yield calls in the process per "
               "trip (counted in lull-lab; Node: its own process, not "
               "counted)\n");
    } else if (f == TURNS_TIMERS) {
        printf("  %d timers armed with random deadlines in [1 s, 1000 s), "
               "then %d rounds of arming %d more and cancelling them (timed "
               "apart)\n"
               "  arm+cancel, arm, cancel: the median of rounds 2-%d (steady "
               "state), across processes the process with the median "
               "arm+cancel; 1st round: what round 1 cost, paying for growth "
               "(fresh pages, array growth), and its minor page faults; "
               "bytes per timer = handle + heap growth (mallinfo2) / "
               "armed\n",
               p->timers, TURNS_TIMER_ROUNDS, p->timer_pairs,
               TURNS_TIMER_ROUNDS);
    } else {
        printf("  %s\n", figures[f].method);
    }
    if (f == TURNS_CHAIN_TASK || f == TURNS_CHAIN_TIMER0)
        printf("  %llu hops per round (Node's setTimeout(0): %llu)\n",
               (unsigned long long)p->hops, (unsigned long long)p->slow_hops);
    printf("  rows: %s\n", order_of(f));
}

/* The slack column of a lateness row. */
static void slack_text(char *buf, size_t size, const row *rw) {
    if (rw->slack_ns < 0) {
        snprintf(buf, size, "%d µs (its own)", COMMON_SLACK_NS / 1000);
    } else if (rw->slack_ns == 0) {
        snprintf(buf, size, "%.0f µs (default)",
                 (double)default_slack_ns / 1e3);
    } else {
        snprintf(buf, size, "%.0f µs", (double)rw->slack_ns / 1e3);
    }
}

/* The rows of figure f: every entry of the figure it runs, in peer order;
 * lateness rows marked TURNS_SLACK_BOTH again at the default slack, after
 * all the others. */
static int collect_rows(int f, row *rows, const turns_peer *const *peers,
                        int npeers) {
    int nrows = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < npeers; i++)
            for (int e = 0; e < peers[i]->count; e++) {
                const turns_entry *en = &peers[i]->entries[e];
                if (en->figure != figures[f].rows_of || nrows == MAX_ROWS)
                    continue;
                bool lateness = f == TURNS_LATENESS;
                if (pass == 1 && !(lateness && (en->flags & TURNS_SLACK_BOTH)))
                    continue;
                row *rw = &rows[nrows++];
                memset(rw, 0, sizeof *rw);
                rw->entry = en;
                rw->peer = peers[i];
                snprintf(rw->label, sizeof rw->label, "%s%s", en->label,
                         pass == 1 ? ", default slack" : "");
                rw->slack_ns = !lateness                       ? 0
                               : (en->flags & TURNS_OWN_SLACK) ? -1
                               : pass == 1                     ? 0
                                           : COMMON_SLACK_NS;
            }
    return nrows;
}

static double median_of(const row *rw, int v) {
    return rw && rw->values[v].n ? lab_series_median(&rw->values[v]) : NAN;
}

/* The round whose value is nearest the series' median (the median round
 * itself when the rounds are odd in number). */
static int median_index(const lab_series *s) {
    double m = lab_series_median(s);
    int k = 0;
    for (int i = 1; i < s->n; i++)
        if (fabs(s->v[i] - m) < fabs(s->v[k] - m)) k = i;
    return k;
}

/* lull's row for class cls of a figure: its TURNS_BASE row. */
static const row *base_row(const row *rows, int nrows, int cls) {
    for (int i = 0; i < nrows; i++)
        if (rows[i].peer == &turns_lull &&
            (rows[i].entry->flags & TURNS_BASE) && rows[i].entry->cls == cls)
            return &rows[i];
    return NULL;
}

static const row *find_row(const row *rows, int nrows, const turns_peer *peer,
                           const char *label_part) {
    for (int i = 0; i < nrows; i++)
        if ((!peer || rows[i].peer == peer) &&
            strstr(rows[i].label, label_part))
            return &rows[i];
    return NULL;
}

/* The row a row's ratio is taken against: lull's row of its class, else
 * lull's class 0 row. */
static const row *ratio_row(const row *rows, int nrows, const row *rw) {
    const row *b = base_row(rows, nrows, rw->entry->cls);
    return b ? b : base_row(rows, nrows, 0);
}

static double ratio_base(const row *rows, int nrows, const row *rw, int v) {
    return median_of(ratio_row(rows, nrows, rw), v);
}

/* A value as the tables print it; buf has LAB_CELL bytes. */
static const char *fmt(char *buf, double v) {
    lab_format_value(buf, LAB_CELL, v);
    return buf;
}

/* lull's task chain, ns/hop, for (2)'s target; NaN until (1) ran. */
static double lull_task_ns = NAN;

/* Like for like in the chains: lull's row beside the cheapest peer row
 * that checks I/O the same way. */
static void chain_checks(int f, const row *rows, int nrows) {
    static const char *const policy[TURNS_CLASSES] = {
        [TURNS_CLASS_QUANTUM] = "I/O every 0.5 ms",
        [TURNS_CLASS_EVERY_HOP] = "I/O every hop",
    };
    printf("  like for like, ns/hop (× = the peer's ÷ lull's; > 1: lull "
           "cheaper):\n");
    for (int cls = 0; cls < TURNS_CLASSES; cls++) {
        const row *b = base_row(rows, nrows, cls);
        if (!b) continue;
        const row *best = NULL;
        for (int i = 0; i < nrows; i++)
            if (!is_lull(rows[i].peer) && rows[i].entry->cls == cls &&
                isfinite(median_of(&rows[i], CHAIN_NS_PER_HOP)) &&
                (!best || median_of(&rows[i], CHAIN_NS_PER_HOP) <
                              median_of(best, CHAIN_NS_PER_HOP)))
                best = &rows[i];
        double lull = median_of(b, CHAIN_NS_PER_HOP);
        char a[LAB_CELL], c[LAB_CELL];
        if (!best) {
            printf("    %s: lull %s; no peer row runs this policy\n",
                   policy[cls], fmt(a, lull));
            continue;
        }
        double peer = median_of(best, CHAIN_NS_PER_HOP);
        printf("    %s: lull %s, cheapest peer %s (%s): %.2f×\n", policy[cls],
               fmt(a, lull), fmt(c, peer), best->label, peer / lull);
    }
    const row *q = base_row(rows, nrows, TURNS_CLASS_QUANTUM);
    const row *e = base_row(rows, nrows, TURNS_CLASS_EVERY_HOP);
    double dq = median_of(q, CHAIN_NS_PER_HOP);
    double de = median_of(e, CHAIN_NS_PER_HOP);
    char a[LAB_CELL], c[LAB_CELL];
    if (isfinite(dq) && isfinite(de))
        printf("  lull's default policy saves: %s ns/hop checking I/O every "
               "hop ÷ %s by default = %.3g×\n",
               fmt(a, de), fmt(c, dq), de / dq);
    for (int i = 0; i < nrows; i++)
        if (rows[i].entry->cls == TURNS_CLASS_NO_POLL)
            printf("  %s checks no I/O between hops; its ratio is to lull's "
                   "default row, which does\n",
                   rows[i].label);
    if (f == TURNS_CHAIN_TASK) {
        lull_task_ns = dq;
    } else if (isfinite(lull_task_ns) && isfinite(dq)) {
        printf("  lull's zero-delay timer ÷ its posted task: %.3g×\n",
               dq / lull_task_ns);
    }
    const row *uv = find_row(rows, nrows, NULL, "libuv: uv_timer_start(0)");
    if (f == TURNS_CHAIN_TIMER0 && uv)
        printf("  note: libuv 1.44 runs a timer armed from a timer callback "
               "again in the same iteration, without polling I/O (a "
               "starvation bug of that version)\n");
}

static void lateness_checks(const row *rows, int nrows) {
    const row *lull = base_row(rows, nrows, 0);
    const row *sleep = find_row(rows, nrows, &turns_floor, "clock_nanosleep");
    const row *epoll = find_row(rows, nrows, &turns_floor, "epoll_pwait2");
    double l99 = median_of(lull, LATE_P99_US);
    if (sleep)
        printf("  lull's p99 ÷ the clock_nanosleep floor's: %.3g (target "
               "≤ 1.1)\n",
               l99 / median_of(sleep, LATE_P99_US));
    if (epoll)
        printf("  lull's p99 ÷ the epoll_pwait2 floor's: %.3g\n",
               l99 / median_of(epoll, LATE_P99_US));
    if (lull && lull->values[LATE_MIN_US].n)
        printf("  lull's earliest fire over the rounds: %.3g µs (< 0: it "
               "fired early)\n",
               lab_series_min(&lull->values[LATE_MIN_US]));
}

static void trip_checks(int f, const row *rows, int nrows) {
    if (f == TURNS_ROUNDTRIP_2CPU && find_row(rows, nrows, &turns_node, ""))
        printf("  node's threads are not pinned: the scheduler may keep "
               "both on one CPU, so its row is not a two-CPU figure\n");
    const row *futex = find_row(rows, nrows, &turns_floor, "futex");
    const row *efd = find_row(rows, nrows, &turns_floor, "eventfd");
    const row *lf = find_row(rows, nrows, &turns_lull, "futex sleep");
    const row *le = find_row(rows, nrows, &turns_lull, "epoll sleep");
    if (f == TURNS_ROUNDTRIP && lf && futex)
        printf("  lull (futex sleep) ÷ futex floor: %.3g (target ≤ 1.2)\n",
               median_of(lf, TRIP_P50_US) / median_of(futex, TRIP_P50_US));
    if (le && efd)
        printf("  lull (epoll sleep) ÷ eventfd+epoll floor: %.3g\n",
               median_of(le, TRIP_P50_US) / median_of(efd, TRIP_P50_US));
    for (int i = 0; i < nrows; i++) {
        double y = median_of(&rows[i], TRIP_YIELDS);
        if (!(y > 0.1)) continue;
        printf("  %s: %.2g sched_yield per trip: a spin-wait inside the "
               "library\n",
               rows[i].label, y);
        if (strcmp(rows[i].peer->name, "libuv") == 0 && f == TURNS_ROUNDTRIP)
            printf("    libuv 1.44: uv_async_send's eventfd write wakes the "
                   "other loop, which preempts the sender on the shared CPU "
                   "before it marks the send done; the woken loop spins on "
                   "that mark and calls sched_yield until the sender runs "
                   "again. (5b) has no shared CPU.\n");
    }
}

/* One CLOCK_MONOTONIC read, ns: the cheapest of three runs of a million. */
static double clock_read_ns(void) {
    double best = INFINITY;
    for (int run = 0; run < 3; run++) {
        uint64_t sink = 0, t0 = lab_now_ns();
        for (int i = 0; i < 1000000; i++)
            sink += lab_now_ns();
        uint64_t t1 = lab_now_ns();
        __asm__ volatile("" : : "r"(sink));
        double ns = (double)(t1 - t0) / 1e6;
        if (ns < best) best = ns;
    }
    return best;
}

/* Measured by timer_checks, written to the timers figure's JSON. */
static double clock_ns = NAN;

static void timer_checks(const row *rows, int nrows) {
    const row *lull = base_row(rows, nrows, 0);
    const row *ev = NULL;
    for (int i = 0; i < nrows; i++)
        if (strcmp(rows[i].peer->name, "libev") == 0) ev = &rows[i];
    const row *so = find_row(rows, nrows, &turns_lull_so, "lull");
    clock_ns = clock_read_ns();
    if (lull && ev && lull->values[TIMERS_STEADY_NS].n &&
        ev->values[TIMERS_STEADY_NS].n) {
        int kl = median_index(&lull->values[TIMERS_STEADY_NS]);
        int ke = median_index(&ev->values[TIMERS_STEADY_NS]);
        printf(
            "  lull ÷ libev, steady arm+cancel: %.3g (arm %.3g vs %.3g "
            "ns, cancel %.3g vs %.3g)\n",
            median_of(lull, TIMERS_STEADY_NS) / median_of(ev, TIMERS_STEADY_NS),
            lull->values[TIMERS_ARM_NS].v[kl], ev->values[TIMERS_ARM_NS].v[ke],
            lull->values[TIMERS_CANCEL_NS].v[kl],
            ev->values[TIMERS_CANCEL_NS].v[ke]);
        printf("    these arms are made outside any run, where a lull arm, "
               "which must never fire early, reads the clock: one "
               "CLOCK_MONOTONIC read costs %.3g ns here (inside a callback "
               "it waits for the loop's next reading instead: "
               "bench/timer_scale); libev's ev_timer_start adds the delay "
               "to its cached ev_now() and reads no clock\n",
               clock_ns);
    }
    if (lull && so)
        printf("  lull linked shared ÷ static, steady arm+cancel: %.3g\n",
               median_of(so, TIMERS_STEADY_NS) /
                   median_of(lull, TIMERS_STEADY_NS));
}

/* One panel per figure: its ratio column (the figure's headline value), or
 * its last column where there is no ratio (idle: CPU per second). */
static void plot_figure(lab_plot *plot, const figure *fig, const row *rows,
                        int nrows) {
    if (!plot) return;
    int v = fig->ratio_value >= 0 ? fig->ratio_value : fig->nvalues - 1;
    char title[160];
    snprintf(title, sizeof title, "turns %s", fig->title);
    lab_plot_panel(plot, title, fig->columns[v]);
    for (int i = 0; i < nrows; i++)
        lab_plot_bar(plot, rows[i].label, &rows[i].values[v],
                     is_lull(rows[i].peer));
}

/* The timers figure's arm and cancel are those of the round with the
 * median arm + cancel, so the three columns add up; medians taken apart
 * need not. (The rounds add the three values together or none.) */
static bool split_of_median(int f, const row *rw, int v) {
    return f == TURNS_TIMERS && (v == TIMERS_ARM_NS || v == TIMERS_CANCEL_NS) &&
           rw->values[v].n == rw->values[TIMERS_STEADY_NS].n &&
           rw->values[v].n > 0;
}

static void print_table(int f, const row *rows, int nrows, int rounds) {
    const figure *fig = &figures[f];
    const char *header[LAB_TABLE_COLS] = {"implementation"};
    int cols = 1;
    if (fig->policy) header[cols++] = fig->policy;
    int first_value = cols;
    for (int v = 0; v < fig->nvalues; v++)
        header[cols++] = fig->columns[v];
    if (fig->ratio_value >= 0) header[cols++] = "lull ÷ row";
    lab_table t;
    lab_table_init(&t, cols, header);
    for (int i = 0; i < nrows; i++) {
        const row *rw = &rows[i];
        int tr = lab_table_row(&t);
        lab_table_set(&t, tr, 0, "%s", rw->label);
        if (f == TURNS_LATENESS) {
            char buf[LAB_CELL];
            slack_text(buf, sizeof buf, rw);
            lab_table_set(&t, tr, 1, "%s", buf);
        } else if (fig->policy) {
            lab_table_set(&t, tr, 1, "%s",
                          rw->entry->policy ? rw->entry->policy : "-");
        }
        if (rw->failures == rounds) {
            for (int v = 0; v < fig->nvalues; v++)
                lab_table_set(&t, tr, first_value + v, "failed");
            continue;
        }
        for (int v = 0; v < fig->nvalues; v++) {
            char buf[3 * 24 + 8]; /* three values, as lab_format_series */
            const lab_series *sv = &rw->values[v];
            if (split_of_median(f, rw, v) && sv->n > 1) {
                char mid[24], lo[24], hi[24];
                int k = median_index(&rw->values[TIMERS_STEADY_NS]);
                lab_format_value(mid, sizeof mid, sv->v[k]);
                lab_format_value(lo, sizeof lo, lab_series_min(sv));
                lab_format_value(hi, sizeof hi, lab_series_max(sv));
                snprintf(buf, sizeof buf, "%s [%s–%s]", mid, lo, hi);
            } else {
                lab_format_series(buf, sizeof buf, sv);
            }
            lab_table_set(&t, tr, first_value + v, "%s", buf);
        }
        if (fig->ratio_value >= 0) {
            double base = ratio_base(rows, nrows, rw, fig->ratio_value);
            double m = median_of(rw, fig->ratio_value);
            if (isfinite(base) && isfinite(m) && m > 0) {
                lab_table_set(&t, tr, cols - 1, "%.3g", base / m);
            } else {
                lab_table_set(&t, tr, cols - 1, "-");
            }
        }
    }
    lab_table_print(&t, stdout);
}

static void json_figure(lab_json *json, int f, const row *rows, int nrows,
                        const turns_params *fp) {
    const figure *fig = &figures[f];
    lab_json_key(json, fig->key);
    lab_json_begin_object(json);
    lab_json_key(json, "title");
    lab_json_string(json, fig->title);
    lab_json_key(json, "order");
    lab_json_string(json, order_of(f));
    lab_json_key(json, "target");
    lab_json_string(json, fig->target);
    if (is_trip(f)) {
        lab_json_field(json, "cpu_a", fp->cpu);
        lab_json_field(json, "cpu_b", fp->cpu_b);
        lab_json_field(json, "trips", fp->trips);
    }
    if (f == TURNS_TIMERS) lab_json_field(json, "clock_read_ns", clock_ns);
    lab_json_key(json, "rows");
    lab_json_begin_array(json);
    for (int i = 0; i < nrows; i++) {
        const row *rw = &rows[i];
        lab_json_begin_object(json);
        lab_json_key(json, "label");
        lab_json_string(json, rw->label);
        lab_json_key(json, "peer");
        lab_json_string(json, rw->peer->name);
        if (fig->policy && rw->entry->policy) {
            lab_json_key(json, "policy");
            lab_json_string(json, rw->entry->policy);
        }
        if (f == TURNS_LATENESS) {
            lab_json_field(json, "slack_ns",
                           rw->slack_ns < 0    ? COMMON_SLACK_NS
                           : rw->slack_ns == 0 ? (double)default_slack_ns
                                               : (double)rw->slack_ns);
            lab_json_key(json, "slack");
            lab_json_string(json, rw->slack_ns < 0    ? "set by itself"
                                  : rw->slack_ns == 0 ? "default"
                                                      : "common");
        }
        lab_json_field(json, "failures", rw->failures);
        for (int v = 0; v < fig->nvalues; v++)
            if (rw->values[v].n > 0)
                lab_json_series(json, fig->names[v], &rw->values[v]);
        if (split_of_median(f, rw, TIMERS_ARM_NS)) {
            int k = median_index(&rw->values[TIMERS_STEADY_NS]);
            lab_json_key(json, "median_process");
            lab_json_begin_object(json);
            lab_json_field(json, "arm_cancel_ns",
                           rw->values[TIMERS_STEADY_NS].v[k]);
            lab_json_field(json, "arm_ns", rw->values[TIMERS_ARM_NS].v[k]);
            lab_json_field(json, "cancel_ns",
                           rw->values[TIMERS_CANCEL_NS].v[k]);
            lab_json_end_object(json);
        }
        if (fig->ratio_value >= 0 && rw->values[fig->ratio_value].n > 0) {
            lab_json_key(json, "lull_ratio");
            lab_json_number(json,
                            ratio_base(rows, nrows, rw, fig->ratio_value) /
                                median_of(rw, fig->ratio_value));
            const row *base = ratio_row(rows, nrows, rw);
            if (base) {
                lab_json_key(json, "lull_ratio_base");
                lab_json_string(json, base->label);
            }
        }
        lab_json_end_object(json);
    }
    lab_json_end_array(json);
    lab_json_end_object(json);
}

static void run_figure(int f, const turns_params *p, int rounds,
                       const turns_peer *const *peers, int npeers,
                       lab_json *json, lab_plot *plot) {
    const figure *fig = &figures[f];
    static row rows[MAX_ROWS]; /* ~30 KiB: kept off the stack */
    int nrows = collect_rows(f, rows, peers, npeers);

    printf("\n%s\n", fig->title);
    turns_params fp = *p;
    if (f == TURNS_ROUNDTRIP_2CPU) {
        fp.cpu_b = next_cpu(p->cpu);
        if (fp.cpu_b < 0) {
            printf("  skipped: this process may run on one CPU only\n");
            return;
        }
        /* Waking a thread on another, idle vCPU can take tens of µs (an
         * interrupt to a halted vCPU): fewer trips keep the figure's time
         * near (5)'s, still plenty for a p99. */
        fp.trips = p->trips / 4;
    }
    print_method(f, &fp);
    fflush(stdout);

    uint64_t started = lab_now_ns();
    for (int r = 0; r < rounds; r++) {
        turns_params rp = fp;
        rp.seed = p->seed + (uint64_t)r * 2 + 1;
        rp.round = r;
        if (f == TURNS_IDLE) {
            run_side_by_side(rows, nrows, &rp);
            continue;
        }
        for (int k = 0; k < nrows; k++)
            run_one(&rows[(k + r) % nrows], &rp, f);
    }
    double took = (double)(lab_now_ns() - started) / 1e9;

    print_table(f, rows, nrows, rounds);
    for (int i = 0; i < nrows; i++)
        if (rows[i].failures > 0)
            printf("  note: %s failed %d of %d rounds (%s)\n", rows[i].label,
                   rows[i].failures, rounds, strerror(-rows[i].last_error));
    if (fig->ratio_value >= 0)
        printf("  lull ÷ row: lull's median %s over the row's (< 1: lull "
               "lower)%s\n",
               fig->columns[fig->ratio_value],
               f == TURNS_CHAIN_TASK || f == TURNS_CHAIN_TIMER0
                   ? "; lull's row with the same I/O policy, or its default "
                     "row for rows that check none"
               : is_trip(f) ? "; lull's row whose loops sleep in epoll, as "
                              "the peers' do"
                            : "");
    if (f == TURNS_CHAIN_TASK || f == TURNS_CHAIN_TIMER0)
        chain_checks(f, rows, nrows);
    else if (f == TURNS_LATENESS)
        lateness_checks(rows, nrows);
    else if (is_trip(f))
        trip_checks(f, rows, nrows);
    else if (f == TURNS_TIMERS)
        timer_checks(rows, nrows);
    printf("  target: %s\n", fig->target);
    printf("  (%.1f s)\n", took);
    plot_figure(plot, fig, rows, nrows);
    if (json) json_figure(json, f, rows, nrows, &fp);
}

static int run_turns(const lab_options *opts, lab_json *json) {
    turns_params p;
    set_params(opts, &p);
    default_slack_ns = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    int rounds = lab_rounds(opts, 5, 3);
    long nofile = lab_raise_nofile();
    /* lull's idle sockets, the peers' (their windows run side by side) and
     * a margin for the loops' own descriptors. */
    long spare = 4L * p.idle_handles_peer + 256;
    if (nofile < p.idle_handles_lull + spare) {
        while (p.idle_handles_lull > 2 && nofile < p.idle_handles_lull + spare)
            p.idle_handles_lull /= 2;
        printf("  RLIMIT_NOFILE is %ld: idle uses %d lull handles\n", nofile,
               p.idle_handles_lull);
    }

    const turns_peer *peers[KNOWN_COUNT];
    int npeers = 0;
    printf("implementations:");
    if (json) {
        lab_json_key(json, "peers");
        lab_json_begin_array(json);
    }
    char skipped[KNOWN_COUNT][160];
    int nskipped = 0;
    for (size_t i = 0; i < KNOWN_COUNT; i++) {
        const turns_peer *peer = known[i].peer;
        if (lab_peer_probe(json, known[i].name, peer != NULL,
                           peer ? peer->available : NULL,
                           peer ? peer->version : NULL,
                           peer ? peer->build : NULL, skipped[nskipped],
                           sizeof skipped[0]))
            peers[npeers++] = peer;
        else
            nskipped++;
    }
    printf("\n");
    for (int i = 0; i < nskipped; i++)
        printf("%s\n", skipped[i]);
    printf("builds (lull is compiled with lull-lab and linked statically; "
           "the peers are the distribution's builds):\n");
    for (int i = 0; i < npeers; i++)
        if (peers[i]->build)
            printf("  %-9s %s\n", peers[i]->name, peers[i]->build);
    printf("polls and sched_yield calls: counted by lull-lab's own "
           "epoll_wait, epoll_pwait, epoll_pwait2 and sched_yield, which "
           "forward to the C library (lab/turns_count.c)\n");
    printf("%d rounds per figure; median [min–max] over rounds\n", rounds);
    if (json) {
        lab_json_end_array(json);
        json_params(json, &p, rounds);
        lab_json_key(json, "figures");
        lab_json_begin_object(json);
    }

    int ran = 0;
    for (int f = 0; f < TURNS_FIGURES; f++) {
        if (opts->only && strcmp(opts->only, figures[f].key) != 0) continue;
        run_figure(f, &p, rounds, peers, npeers, json, opts->plot);
        ran++;
    }
    if (ran == 0) {
        printf("no figure named '%s'; figures:", opts->only);
        for (int f = 0; f < TURNS_FIGURES; f++)
            printf(" %s", figures[f].key);
        printf("\n");
    }

    if (json) lab_json_end_object(json);
    return 0;
}

const lab_scenario lab_turns = {
    "turns",
    "per-turn cost, timer lateness, idle, cross-thread trips, timers at "
    "scale: lull beside libuv, libev, libevent, Node",
    run_turns,
};
