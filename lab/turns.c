/* The `turns` scenario: what one turn of the loop costs, lull
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
 * Each figure is one of the engine's (lab/engine.h): every implementation
 * is a row, measured once per round, round r starting at row r mod N; the
 * idle windows run side by side instead (they are seconds long and compete
 * for nothing), and the timers figure runs each measurement in its own
 * forked process, so every implementation starts from the same memory.
 *
 * This file owns the figures' definitions, their parameters and the
 * measure function that sets up each row's turn (its timer slack, its
 * sched_yield count); the helpers every implementation shares are in
 * turns_util.c, the poll and sched_yield counters in turns_count.c, the
 * measurements in turns_lull.c, turns_lull_so.c, peers/<peer>.c and
 * turns_node.c, and what the figures are judged by in turns_report.c.
 * Runs on the main thread; the round-trip harness starts and joins its own
 * two threads. */
#include "turns.h"
#include "engine.h"
#include "turns_report.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

/* ------------------------------------------------------------- figures */

static const lab_col chain_cols[] = {{"ns_per_hop", "ns/hop", 0},
                                     {"polls_per_hop", "polls/hop", 0}};
static const lab_col late_cols[] = {{"p50_us", "p50 µs", 0},
                                    {"p99_us", "p99 µs", 0},
                                    {"max_us", "max µs", 0},
                                    {"min_us", "min µs", 0}};
static const lab_col idle_cols[] = {
    {"wakeups", "wakeups", 0},
    {"voluntary_cs", "vol. cs", 0},
    {"cpu_us", "CPU µs", 0},
    {"cpu_us_per_s", "CPU µs/s", 0},
    {"cpu_ns_per_s_per_handle", "CPU ns/s/handle", 0}};
static const lab_col trip_cols[] = {
    {"p50_us", "p50 µs", 0},
    {"p99_us", "p99 µs", 0},
    {"mean_us", "mean µs", 0},
    {"sched_yield_per_trip", "sched_yield/trip", 0}};
static const lab_col timer_cols[] = {{"arm_cancel_ns", "arm+cancel ns", 0},
                                     {"arm_ns", "arm ns", 0},
                                     {"cancel_ns", "cancel ns", 0},
                                     {"first_round_ns", "1st round ns", 0},
                                     {"first_round_faults", "1st faults", 0},
                                     {"bytes_per_timer", "bytes/timer", 0}};

static const lab_col arm_cols[] = {{"p50_ns", "p50 ns", 0},
                                   {"p99_ns", "p99 ns", 0},
                                   {"p999_ns", "p99.9 ns", 0},
                                   {"max_ns", "max ns", 0}};

static const lab_col virtual_cols[] = {
    {"same_order", "same order (1 = yes)", 0},
    {"timers", "timers", 0},
    {"hour_real_ms", "1 h virtual, real ms", 0}};

const turns_figure turns_figures[TURNS_FIGURES] = {
    [TURNS_CHAIN_TASK] =
        {{"chain_task", "(1) posted-task / next-iteration callback chain",
          "I/O checked", chain_cols, 2, CHAIN_NS_PER_HOP, 0},
         "a callback that re-queues itself; every loop also watches one idle "
         "socket, so its I/O check is real. polls/hop: epoll calls counted in "
         "lull-lab for every C row; Node: libuv iterations (uvMetricsInfo)",
         "cheaper than the best peer under the same I/O policy (libevent with "
         "a 500 µs max_dispatch_interval); the default policy's saving shown "
         "apart",
         TURNS_CHAIN_TASK},
    [TURNS_CHAIN_TIMER0] =
        {{"chain_timer0", "(2) zero-delay timer chain", "I/O checked",
          chain_cols, 2, CHAIN_NS_PER_HOP, 0},
         "a timer that re-arms itself with delay 0 from its callback; one "
         "idle socket watched; polls counted as in (1)",
         "within 1.5× of the task chain; polls/hop shown for every row",
         TURNS_CHAIN_TIMER0},
    [TURNS_LATENESS] =
        {{"lateness_1ms", "(3) 1 ms timer lateness, µs", "timer slack",
          late_cols, 4, LATE_P99_US, 0},
         NULL, /* printed by print_method: it names the slacks */
         "p99 within 1.1× of the clock_nanosleep(TIMER_ABSTIME) floor's in "
         "the same run, at the same slack; never early (min ≥ 0)",
         TURNS_LATENESS},
    [TURNS_IDLE] = {{"idle", "(4) idle window", NULL, idle_cols, 5,
                     IDLE_NS_PER_HANDLE, 0},
                    NULL,
                    "0 wakeups and < 0.1 ms CPU per second with 10,000 idle "
                    "sockets and timers (1 wakeup is the timer that ends the "
                    "window); CPU per handle ≤ every peer's",
                    TURNS_IDLE},
    [TURNS_ROUNDTRIP] =
        {{"roundtrip",
          "(5) cross-thread round trip, both threads on one CPU, µs", NULL,
          trip_cols, 4, TRIP_P50_US, 0},
         NULL,
         "within 1.2× of the futex floor measured in the same run",
         TURNS_ROUNDTRIP},
    [TURNS_ROUNDTRIP_2CPU] =
        {{"roundtrip_2cpu",
          "(5b) cross-thread round trip, the threads on two CPUs, µs", NULL,
          trip_cols, 4, TRIP_P50_US, 0},
         NULL,
         "none of its own: shows what (5) owes to sharing one CPU",
         TURNS_ROUNDTRIP},
    [TURNS_TIMERS] = {{"timers", "(6) timers at scale", NULL, timer_cols, 6,
                       TIMERS_STEADY_NS, LAB_FIG_FORKED},
                      NULL,
                      "steady arm + cancel ≤ 80 ns together with 1,000,000 "
                      "armed; ≤ 64 bytes per timer",
                      TURNS_TIMERS},
    [TURNS_VIRTUAL] = {{"virtual_clock", "(7) virtual clock", NULL,
                        virtual_cols, 3, -1, 0},
                       "200 timers, delays in 100 µs steps over 20 ms (many "
                       "share one), on the real clock and on the virtual one: "
                       "each must fire them by deadline, ties in arm order; "
                       "then 10,000 timers over an hour of virtual time, and "
                       "the real time lull_loop_advance takes",
                       "the same order on both clocks (C7); an hour of "
                       "virtual time in far less than an hour",
                       TURNS_VIRTUAL},
    [TURNS_LATENESS_BUSY] =
        {{"lateness_busy", "(8) 1 ms timer lateness beside CPU hogs, µs",
          "timer slack", late_cols, 4, LATE_P99_US, 0},
         NULL, /* printed by print_method */
         "lull's p99 ≤ every peer's in the same rounds, at the same slack",
         TURNS_LATENESS},
    [TURNS_ARM_DELAY] =
        {{"arm_delay", "(9) a delayed arm's start after its call, ns", NULL,
          arm_cols, 4, ARM_P999_NS, 0},
         "each arm reads the clock just before lull_timer_start; after the "
         "run, its deadline minus its delay (1 h) is the reading its delay "
         "counts from, minus the arm's reading: what the arm adds to the "
         "timer's lateness; 20,000 arms a row, after an untimed pass that "
         "grew the loop's timer heap (2,000 for the 1 ms timer); lull "
         "alone, on the real clock; full runs only",
         "≤ 20 µs at p99.9 for the ~1 µs task's arms, first and deferred",
         TURNS_ARM_DELAY},
};

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

/* The timer slack every lateness row runs at: the one lull sets for itself
 * while it waits for a deadline (src/loop.c), so no row wins by its slack. */
#define COMMON_SLACK_NS 1000

/* The thread's timer slack when lull-lab started: the kernel's default
 * unless whoever started lull-lab changed it. */
long turns_default_slack_ns;
int turns_idle_handles = 10000;

/* The short output's one line of its own, when --only roundtrip_2cpu
 * cannot run (lull-lab titles lists it: turns_headings). */
static const char turns_one_cpu_line[] =
    "  roundtrip_2cpu: not run, this process may run on one CPU only";

/* What a figure's measure function reads: the run's parameters and which
 * figure it is. */
typedef struct fig_ctx {
    int f;
    turns_params p;
} fig_ctx;

/* ------------------------------------------------------------- hogs */

/* The lateness-beside-hogs figure: two threads that spin until told to
 * stop, one pinned to the measuring thread's CPU (the timer's thread must
 * win the CPU back from it when the timer fires) and one to another CPU
 * (what a busy neighbour does to caches and to the hypervisor's
 * scheduling). The measuring thread, and so a Node child, which inherits
 * its affinity and timer slack, is pinned to the first CPU meanwhile. */
typedef struct hogs {
    pthread_t th[2];
    bool started[2];
    int stop; /* atomic */
    int cpu[2];
    cpu_set_t saved; /* the measuring thread's affinity before */
} hogs;

static void *hog_spin(void *arg) {
    hogs *h = arg;
    while (!__atomic_load_n(&h->stop, __ATOMIC_RELAXED))
        __asm__ volatile("" ::: "memory");
    return NULL;
}

static int next_cpu(int cpu);

static void hogs_start(hogs *h, int cpu) {
    memset(h, 0, sizeof *h);
    pthread_getaffinity_np(pthread_self(), sizeof h->saved, &h->saved);
    lab_pin_cpu(cpu);
    h->cpu[0] = cpu;
    h->cpu[1] = next_cpu(cpu);
    for (int i = 0; i < 2; i++) {
        if (h->cpu[i] < 0) continue;
        pthread_attr_t a;
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(h->cpu[i], &set);
        pthread_attr_init(&a);
        pthread_attr_setaffinity_np(&a, sizeof set, &set);
        h->started[i] = pthread_create(&h->th[i], &a, hog_spin, h) == 0;
        pthread_attr_destroy(&a);
    }
}

static void hogs_stop(hogs *h) {
    __atomic_store_n(&h->stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 2; i++)
        if (h->started[i]) pthread_join(h->th[i], NULL);
    pthread_setaffinity_np(pthread_self(), sizeof h->saved, &h->saved);
}

/* One measurement of one row: the row's timer slack on the calling thread
 * (lateness), the entry, and the sched_yield calls it made (round trips).
 * row->tag is the slack: > 0 set here, 0 the kernel's default, -1 the
 * implementation sets its own. */
static int measure(lab_fig *fig, lab_row *row, int round, double *v) {
    const fig_ctx *c = fig->ctx;
    const turns_entry *e = row->arg;
    turns_params rp = c->p;
    rp.seed = c->p.seed + (uint64_t)round * 2 + 1;
    rp.round = round;
    rp.slack_ns = 0;
    turns_result res;
    turns_result_clear(&res);
    long old_slack = -1;
    bool busy = c->f == TURNS_LATENESS_BUSY;
    if ((c->f == TURNS_LATENESS || busy) && row->tag > 0) {
        old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
        if (prctl(PR_SET_TIMERSLACK, row->tag, 0, 0, 0) == 0)
            rp.slack_ns = row->tag;
    }
    hogs h;
    if (busy) hogs_start(&h, c->p.cpu);
    uint64_t yields0 = turns_yields();
    int rc = e->fn(&rp, &res);
    uint64_t yields = turns_yields() - yields0;
    if (busy) hogs_stop(&h);
    if (old_slack > 0) prctl(PR_SET_TIMERSLACK, old_slack, 0, 0, 0);
    /* Node runs in its own process: its yields are not seen here. */
    if (turns_is_trip(c->f) && strcmp(row->peer, "node") != 0)
        res.v[TRIP_YIELDS] =
            (double)yields / (double)(c->p.trips + c->p.warmup_trips);
    if (rc == TURNS_SKIPPED) return LAB_SKIPPED;
    /* Per idle socket or timer: every row holds as many of each. */
    if (c->f == TURNS_IDLE)
        res.v[IDLE_NS_PER_HANDLE] =
            res.v[IDLE_CPU_US_PER_S] * 1e3 / (2.0 * c->p.idle_handles);
    for (int i = 0; i < TURNS_VALUES; i++)
        v[i] = res.v[i];
    return rc;
}

/* The slack column of a lateness row. */
static const char *slack_text(long slack_ns) {
    static char own[32], common[32], dflt[32];
    if (slack_ns < 0) {
        snprintf(own, sizeof own, "%d µs (its own)", COMMON_SLACK_NS / 1000);
        return own;
    }
    if (slack_ns == 0) {
        snprintf(dflt, sizeof dflt, "%.0f µs (default)",
                 (double)turns_default_slack_ns / 1e3);
        return dflt;
    }
    snprintf(common, sizeof common, "%.0f µs", (double)slack_ns / 1e3);
    return common;
}

/* The rows of figure f: every entry of the figure it runs, in peer order;
 * lateness rows marked TURNS_SLACK_BOTH again at the default slack, after
 * all the others. */
static void add_rows(lab_fig *fig, int f, const turns_peer *const *peers,
                     int npeers) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < npeers; i++)
            for (int e = 0; e < peers[i]->count; e++) {
                const turns_entry *en = &peers[i]->entries[e];
                if (en->figure != turns_figures[f].rows_of) continue;
                bool lateness = f == TURNS_LATENESS;
                /* Beside the hogs, each row once, at the common slack. */
                if (f == TURNS_LATENESS_BUSY && pass == 1) continue;
                if (pass == 1 && !(lateness && (en->flags & TURNS_SLACK_BOTH)))
                    continue;
                unsigned flags =
                    (is_lull(peers[i]) ? LAB_ROW_LULL : 0) |
                    (peers[i] == &turns_floor ? LAB_ROW_FLOOR : 0) |
                    (peers[i] == &turns_lull && (en->flags & TURNS_BASE)
                         ? LAB_ROW_BASE
                         : 0);
                lab_row *rw =
                    lab_fig_add(fig, peers[i]->name, flags, "%s%s", en->label,
                                pass == 1 ? ", default slack" : "");
                if (!rw) return;
                rw->arg = en;
                /* Default-slack lateness rows are not like for like. */
                rw->cls = lateness && pass == 1 ? 1 : en->cls;
                rw->policy = en->policy;
                if (f == TURNS_LATENESS_BUSY) {
                    rw->tag = COMMON_SLACK_NS; /* every row, lull's too */
                    rw->policy = slack_text(rw->tag);
                }
                if (lateness) {
                    rw->tag = (en->flags & TURNS_OWN_SLACK) ? -1
                              : pass == 1                   ? 0
                                                            : COMMON_SLACK_NS;
                    rw->policy = slack_text(rw->tag);
                }
            }
}

/* The timers figure's arm and cancel are those of the round with the
 * median arm + cancel, so the three columns add up; medians taken apart
 * need not. (The rounds add the three values together or none.) */
static bool split_of_median(const lab_row *rw, int v) {
    return (v == TIMERS_ARM_NS || v == TIMERS_CANCEL_NS) &&
           rw->v[v].n == rw->v[TIMERS_STEADY_NS].n && rw->v[v].n > 1;
}

static bool timers_cell(const lab_fig *f, const lab_row *rw, int v, char *buf,
                        size_t size) {
    (void)f;
    if (!split_of_median(rw, v)) return false;
    char mid[24], lo[24], hi[24];
    int k = lab_series_median_index(&rw->v[TIMERS_STEADY_NS]);
    lab_format_value(mid, sizeof mid, rw->v[v].v[k]);
    lab_format_value(lo, sizeof lo, lab_series_min(&rw->v[v]));
    lab_format_value(hi, sizeof hi, lab_series_max(&rw->v[v]));
    snprintf(buf, size, "%s [%s–%s]", mid, lo, hi);
    return true;
}

static void fig_json(const lab_fig *fig, const lab_row *rw, lab_json *j) {
    const fig_ctx *c = fig->ctx;
    if (!rw) {
        lab_json_key(j, "target");
        lab_json_string(j, turns_figures[c->f].target);
        if (turns_is_trip(c->f)) {
            lab_json_field(j, "cpu_a", c->p.cpu);
            lab_json_field(j, "cpu_b", c->p.cpu_b);
            lab_json_field(j, "trips", c->p.trips);
        }
        if (c->f == TURNS_TIMERS)
            lab_json_field(j, "clock_read_ns", turns_clock_ns);
        return;
    }
    if (c->f == TURNS_LATENESS_BUSY)
        lab_json_field(j, "slack_ns", COMMON_SLACK_NS);
    if (c->f == TURNS_LATENESS) {
        lab_json_field(j, "slack_ns",
                       rw->tag < 0    ? COMMON_SLACK_NS
                       : rw->tag == 0 ? (double)turns_default_slack_ns
                                      : (double)rw->tag);
        lab_json_key(j, "slack");
        lab_json_string(j, rw->tag < 0    ? "set by itself"
                           : rw->tag == 0 ? "default"
                                          : "common");
    }
    if (c->f == TURNS_TIMERS && split_of_median(rw, TIMERS_ARM_NS)) {
        int k = lab_series_median_index(&rw->v[TIMERS_STEADY_NS]);
        lab_json_key(j, "median_process");
        lab_json_begin_object(j);
        lab_json_field(j, "arm_cancel_ns", rw->v[TIMERS_STEADY_NS].v[k]);
        lab_json_field(j, "arm_ns", rw->v[TIMERS_ARM_NS].v[k]);
        lab_json_field(j, "cancel_ns", rw->v[TIMERS_CANCEL_NS].v[k]);
        lab_json_end_object(j);
    }
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
    p->lateness_samples = opts->quick ? 100 : 2000;
    p->idle_handles = 10000;
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
    lab_json_field(j, "turns_default_slack_ns", (double)turns_default_slack_ns);
    lab_json_field(j, "idle_handles", p->idle_handles);
    lab_json_field(j, "idle_window_s", (double)p->idle_window_ns / 1e9);
    lab_json_field(j, "trips", p->trips);
    lab_json_field(j, "timers", p->timers);
    lab_json_field(j, "timer_pairs", p->timer_pairs);
    lab_json_field(j, "timer_rounds", TURNS_TIMER_ROUNDS);
    lab_json_field(j, "cpu", p->cpu);
    lab_json_field(j, "cpu_b", next_cpu(p->cpu));
    lab_json_end_object(j);
}

static void print_method(int f, const turns_params *p) {
    if (f == TURNS_IDLE) {
        lab_detail(
            "  %.0f s window after one non-blocking iteration; every row: %d "
            "watched sockets + %d timers due in 1-2 h (lull's second row "
            "adds %d pumps listening; Node: whole-process CPU; the floor: "
            "the sockets alone in one epoll_wait, no loop)\n"
            "  CPU ns/s/handle: CPU µs/s × 1000 ÷ (sockets + timers)\n",
            (double)p->idle_window_ns / 1e9, p->idle_handles, p->idle_handles,
            p->idle_handles);
    } else if (f == TURNS_LATENESS) {
        lab_detail(
            "  a 1 ms one-shot timer re-armed from its callback; lateness "
            "= fire time - (arm time + 1 ms) on CLOCK_MONOTONIC, < 0: "
            "early\n"
            "  timer slack: every row at %d µs (PR_SET_TIMERSLACK on the "
            "measuring thread; Node inherits it), the value lull sets for "
            "itself while it waits; the rows marked \"default slack\" at "
            "the thread's default, %.0f µs here\n"
            "  floors: a bare thread sleeping 1 ms in clock_nanosleep"
            "(TIMER_ABSTIME), and in epoll_pwait2 on an empty set\n",
            COMMON_SLACK_NS / 1000, (double)turns_default_slack_ns / 1e3);
        lab_detail("  %d samples per round\n", p->lateness_samples);
    } else if (f == TURNS_LATENESS_BUSY) {
        lab_detail(
            "  the rows of (3), each while two threads spin: one pinned to "
            "CPU %d with the measuring thread, one to CPU %d\n"
            "  timer slack: every row at %d µs (PR_SET_TIMERSLACK on the "
            "measuring thread, lull's too; Node inherits it and the "
            "pinning); %d samples per round; full runs only\n",
            p->cpu, next_cpu(p->cpu), COMMON_SLACK_NS / 1000,
            p->lateness_samples);
    } else if (turns_is_trip(f)) {
        if (f == TURNS_ROUNDTRIP)
            lab_detail("  thread A posts to loop B, B posts back; both threads "
                       "pinned to CPU %d\n",
                       p->cpu);
        else
            lab_detail("  the same as (5), thread A pinned to CPU %d and B to "
                       "CPU %d; %d trips; Node's process may run on both (it "
                       "cannot pin its threads one by one)\n",
                       p->cpu, p->cpu_b, p->trips);
        lab_detail(
            "  floors: two raw threads ping-ponging on a futex word, and "
            "on eventfds each watched by its own epoll (an epoll loop's "
            "wake-up path without the loop)\n"
            "  sched_yield/trip: sched_yield calls in the process per "
            "trip (counted in lull-lab; Node: its own process, not "
            "counted)\n");
    } else if (f == TURNS_TIMERS) {
        lab_detail(
            "  %d timers armed with random deadlines in [1 s, 1000 s), "
            "then %d rounds of arming %d more and cancelling them (timed "
            "apart)\n"
            "  arm+cancel, arm, cancel: the median of rounds 2-%d (steady "
            "state), across processes the process with the median "
            "arm+cancel; 1st round: what round 1 cost, paying for growth "
            "(fresh pages, array growth), and its minor page faults; "
            "bytes per timer = handle + heap growth (mallinfo2) / "
            "armed\n",
            p->timers, TURNS_TIMER_ROUNDS, p->timer_pairs, TURNS_TIMER_ROUNDS);
    } else {
        lab_detail("  %s\n", turns_figures[f].method);
    }
    if (f == TURNS_CHAIN_TASK || f == TURNS_CHAIN_TIMER0)
        lab_detail("  %llu hops per round (Node's setTimeout(0): %llu)\n",
                   (unsigned long long)p->hops,
                   (unsigned long long)p->slow_hops);
}

static void run_figure(int f, const turns_params *p, int rounds,
                       const turns_peer *const *peers, int npeers,
                       const lab_options *opts, lab_json *json, lab_fig **out) {
    const turns_figure *tf = &turns_figures[f];
    fig_ctx ctx = {f, *p};
    lab_fig_spec spec = tf->spec;
    spec.measure = measure;
    spec.cell = f == TURNS_TIMERS ? timers_cell : NULL;
    spec.json = fig_json;
    spec.ctx = &ctx;
    lab_fig *fig = lab_fig_new(&spec);
    if (!fig) return;
    add_rows(fig, f, peers, npeers);

    lab_detail("\n%s\n", tf->spec.title);
    if (f == TURNS_ROUNDTRIP_2CPU) {
        ctx.p.cpu_b = next_cpu(p->cpu);
        if (ctx.p.cpu_b < 0) {
            /* Asked for by name: said in the short output too, which
             * would otherwise end in a verdict's "see above" with
             * nothing above. */
            if (opts->only && !opts->verbose)
                printf("%s\n", turns_one_cpu_line);
            lab_detail("  skipped: this process may run on one CPU only\n");
            lab_fig_free(fig);
            return;
        }
        /* Waking a thread on another, idle vCPU can take tens of µs (an
         * interrupt to a halted vCPU): fewer trips keep the figure's time
         * near (5)'s, still plenty for a p99. */
        ctx.p.trips = p->trips / 4;
    }
    print_method(f, &ctx.p);
    lab_detail("  rows: %s\n", f == TURNS_TIMERS
                                   ? "each in its own process, forked before "
                                     "it allocates; round r starts at row r "
                                     "mod N"
                                   : "each once per round; round r starts at "
                                     "row r mod N");
    fflush(stdout);
    lab_fig_run(fig, opts, rounds);
    lab_fig_print(fig);
    lab_fig_notes(fig);
    turns_report_figure(fig, f, &ctx.p);
    lab_detail("  target: %s\n", tf->target);
    lab_detail("  (%.1f s)\n", fig->seconds);
    char title[160];
    int v = tf->spec.ratio_col >= 0 ? tf->spec.ratio_col : tf->spec.ncols - 1;
    snprintf(title, sizeof title, "turns %s", tf->spec.title);
    lab_fig_plot(fig, opts->plot, v, title, tf->spec.cols[v].head);
    lab_fig_json(fig, json);
    fig->ctx = NULL; /* ctx lives on this stack */
    *out = fig;
}

static int run_turns(const lab_options *opts, lab_json *json) {
    turns_params p;
    set_params(opts, &p);
    turns_default_slack_ns = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    int rounds = lab_rounds(opts, 5, 3);
    long nofile = lab_raise_nofile();
    /* One row's idle sockets at a time (the rows take turns), and a margin
     * for the loops' own descriptors. */
    long spare = 256;
    if (nofile < p.idle_handles + spare) {
        while (p.idle_handles > 2 && nofile < p.idle_handles + spare)
            p.idle_handles /= 2;
        printf("  RLIMIT_NOFILE is %ld: idle uses %d sockets and timers\n",
               nofile, p.idle_handles);
    }
    turns_idle_handles = p.idle_handles;

    const turns_peer *peers[KNOWN_COUNT];
    int npeers = 0;
    lab_detail("implementations:");
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
    lab_detail("\n");
    for (int i = 0; i < nskipped; i++)
        lab_detail("%s\n", skipped[i]);
    lab_peers_not_run((const char(*)[160])skipped, nskipped);
    lab_detail("builds (lull is compiled with lull-lab and linked statically; "
               "the peers are the distribution's builds):\n");
    for (int i = 0; i < npeers; i++)
        if (peers[i]->build)
            lab_detail("  %-9s %s\n", peers[i]->name, peers[i]->build);
    lab_detail("polls and sched_yield calls: counted by lull-lab's own "
               "epoll_wait, epoll_pwait, epoll_pwait2 and sched_yield, which "
               "forward to the C library (lab/turns_count.c)\n");
    lab_detail("%d rounds per figure; median [min–max] over rounds\n", rounds);
    if (json) {
        lab_json_end_array(json);
        json_params(json, &p, rounds);
        lab_json_key(json, "figures");
        lab_json_begin_object(json);
    }

    lab_fig *figs[TURNS_FIGURES] = {NULL};
    int ran = 0;
    for (int f = 0; f < TURNS_FIGURES; f++) {
        if (opts->only && strcmp(opts->only, turns_figures[f].spec.key) != 0)
            continue;
        /* Seconds of spinning threads on every CPU, or of 1 ms timers for
         * a figure with no peer: not for a demo. */
        if ((f == TURNS_LATENESS_BUSY || f == TURNS_ARM_DELAY) && opts->quick) {
            if (opts->only)
                printf("%s: full runs only (not with --quick)\n",
                       turns_figures[f].spec.key);
            ran += opts->only != NULL;
            continue;
        }
        run_figure(f, &p, rounds, peers, npeers, opts, json, &figs[f]);
        ran++;
    }
    if (ran == 0) {
        printf("no figure named '%s'; figures:", opts->only);
        for (int f = 0; f < TURNS_FIGURES; f++)
            printf(" %s", turns_figures[f].spec.key);
        printf("\n");
    }
    if (json) lab_json_end_object(json);
    turns_report(figs, opts);
    for (int f = 0; f < TURNS_FIGURES; f++)
        lab_fig_free(figs[f]);
    return 0;
}

static const char *const turns_headings[] = {turns_one_cpu_line, NULL};

/* --only: turns_figures' keys (lull-lab turns --json lists them). */
static const char *const turns_only[] = {"chain_task",
                                         "chain_timer0",
                                         "lateness_1ms",
                                         "idle",
                                         "roundtrip",
                                         "roundtrip_2cpu",
                                         "timers",
                                         "virtual_clock",
                                         "lateness_busy",
                                         "arm_delay",
                                         NULL};
_Static_assert(sizeof turns_only / sizeof turns_only[0] == TURNS_FIGURES + 1,
               "turns_only lists every figure of turns_figures");

const lab_scenario lab_turns = {
    "turns",
    "per-turn cost, timer lateness, idle, cross-thread trips, timers at "
    "scale: lull beside libuv, libev, libevent, Node",
    run_turns,
    "turns: what a turn, a timer and an idle loop cost, beside libuv, libev, "
    "libevent and Node",
    "C1 C2 C3 C7",
    turns_headings,
    false,
    turns_only,
};
