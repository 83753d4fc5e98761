/* The `turns` scenario (BRIEF §4): what one turn of the loop costs, lull
 * beside libuv, libev, libevent and Node on the same machine in one run.
 *
 * Figures: posted-task (next-iteration) chain and zero-delay timer chain per
 * hop; 1 ms timer lateness; an idle window with many idle handles; a
 * cross-thread round trip with both threads on one CPU, beside a raw futex
 * ping-pong (the floor); arm + cancel with 1,000,000 timers armed, and bytes
 * per timer. Each figure runs every implementation once per round, in the
 * same order every round (A B C, A B C, ...), and prints the median of the
 * rounds with [min–max] and lull's ratio to each row.
 *
 * This file owns the driver, the figure definitions and the helpers every
 * implementation shares; the measurements themselves live in turns_lull.c,
 * peers/<peer>.c and turns_node.c. Runs on the main thread; the round-trip
 * harness below starts and joins its own two threads. */
#include "turns.h"
#include "lab.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------------- figures */

typedef struct figure {
    const char *key;    /* JSON key */
    const char *title;  /* table title */
    const char *method; /* how it is measured, one line */
    const char *target; /* lull's target from BRIEF §5 */
    int nvalues;
    const char *names[TURNS_VALUES];   /* JSON names of the values */
    const char *columns[TURNS_VALUES]; /* column headers */
    int ratio_value;                   /* value compared with lull's; -1 */
} figure;

static const figure figures[TURNS_FIGURES] = {
    [TURNS_CHAIN_TASK] =
        {"chain_task",
         "(1) posted-task / next-iteration callback chain",
         "a callback that re-queues itself; every loop also watches one idle "
         "socket, so its I/O check is real",
         "≥ 20× cheaper than libuv's next-iteration callback; cheaper than "
         "libevent's one-pass drain while still polling I/O every quantum",
         2,
         {"ns_per_hop", "polls_per_hop"},
         {"ns/hop", "polls/hop"},
         CHAIN_NS_PER_HOP},
    [TURNS_CHAIN_TIMER0] =
        {"chain_timer0",
         "(2) zero-delay timer chain",
         "a timer that re-arms itself with delay 0 from its callback; one "
         "idle socket watched",
         "within 1.5× of the task chain; ≥ 15× cheaper than libev's and "
         "libevent's",
         2,
         {"ns_per_hop", "polls_per_hop"},
         {"ns/hop", "polls/hop"},
         CHAIN_NS_PER_HOP},
    [TURNS_LATENESS] =
        {"lateness_1ms",
         "(3) 1 ms timer lateness, µs",
         "a 1 ms one-shot timer re-armed from its callback; lateness = fire "
         "time - (arm time + 1 ms) on CLOCK_MONOTONIC",
         "p99 ≤ 100 µs on an idle machine (best peer in BRIEF: 131 µs)",
         3,
         {"p50_us", "p99_us", "max_us"},
         {"p50 µs", "p99 µs", "max µs"},
         LATE_P99_US},
    [TURNS_IDLE] =
        {"idle",
         "(4) idle window",
         NULL, /* printed by the driver: it depends on the parameters */
         "0 wakeups and < 0.1 ms CPU per second with 10,000 idle sessions "
         "(1 wakeup is the timer that ends the window)",
         4,
         {"wakeups", "voluntary_cs", "cpu_us", "cpu_us_per_s"},
         {"wakeups", "vol. cs", "CPU µs", "CPU µs/s"},
         -1},
    [TURNS_ROUNDTRIP] =
        {"roundtrip",
         "(5) cross-thread round trip, both threads on one CPU, µs",
         "thread A posts to loop B, B posts back; the floors are two raw "
         "threads ping-ponging on a futex word, and on eventfds each watched "
         "by its own epoll (the kernel path of an epoll loop's wake-up)",
         "within 1.2× of the futex floor measured in the same run",
         3,
         {"p50_us", "p99_us", "mean_us"},
         {"p50 µs", "p99 µs", "mean µs"},
         TRIP_P50_US},
    [TURNS_TIMERS] =
        {"timers",
         "(6) timers at scale",
         NULL, /* printed by the driver */
         "arm + cancel ≤ 80 ns together with 1,000,000 armed (libev: 78); "
         "≤ 64 bytes per timer",
         4,
         {"arm_cancel_ns", "arm_ns", "cancel_ns", "bytes_per_timer"},
         {"arm+cancel ns", "arm ns", "cancel ns", "bytes/timer"},
         TIMERS_PAIR_NS},
};

/* ----------------------------------------------------------- the peers */

/* Every implementation the lab knows, in row order; a NULL peer was not
 * found when lull-lab was built. */
static const struct {
    const char *name;
    const turns_peer *peer;
} known[] = {
    {"lull", &turns_lull},
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
    {"node", &turns_node},      {"futex", &turns_futex},
};
#define KNOWN_COUNT (sizeof known / sizeof known[0])

/* ------------------------------------------------------ shared helpers */

void turns_result_clear(turns_result *out) {
    for (int i = 0; i < TURNS_VALUES; i++)
        out->v[i] = NAN;
}

void turns_latency_us(double *samples_ns, int n, double *p50, double *p99,
                      double *third, bool third_is_max) {
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += samples_ns[i];
    *p50 = lab_percentile(samples_ns, (size_t)n, 0.50) / 1e3;
    *p99 = lab_percentile(samples_ns, (size_t)n, 0.99) / 1e3;
    if (third_is_max) {
        *third = n ? samples_ns[n - 1] / 1e3 : NAN; /* sorted above */
    } else {
        *third = n ? sum / n / 1e3 : NAN;
    }
}

int turns_open_sockets(int *fds, int n) {
    for (int i = 0; i < n; i += 2) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                       sv) != 0) {
            int e = errno;
            turns_close_sockets(fds, i);
            return -e;
        }
        fds[i] = sv[0];
        if (i + 1 < n) {
            fds[i + 1] = sv[1];
        } else {
            close(sv[1]); /* odd n: keep one end, still never readable */
        }
    }
    return 0;
}

void turns_close_sockets(int *fds, int n) {
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

void turns_timer_figures(turns_result *out, size_t armed, size_t pairs,
                         uint64_t t0, uint64_t t1, uint64_t t2,
                         uint64_t heap_growth) {
    out->v[TIMERS_ARM_NS] = (double)(t1 - t0) / (double)pairs;
    out->v[TIMERS_CANCEL_NS] = (double)(t2 - t1) / (double)pairs;
    out->v[TIMERS_PAIR_NS] = (double)(t2 - t0) / (double)pairs;
    out->v[TIMERS_BYTES] = (double)heap_growth / (double)armed;
}

uint64_t turns_random_delay(uint64_t *state, uint64_t lo_ns, uint64_t hi_ns) {
    return lo_ns + lab_rand(state) % (hi_ns - lo_ns);
}

/* The round-trip harness. One pair runs at a time (the driver is single
 * threaded), so the barrier can be a file-level object. */
static pthread_barrier_t pair_barrier;

typedef struct pair_side {
    void *(*fn)(void *);
    void *arg;
    int cpu;
    int pin_rc;
} pair_side;

static void *pair_thread(void *arg) {
    pair_side *s = arg;
    s->pin_rc = lab_pin_cpu(s->cpu);
    return s->fn(s->arg);
}

void turns_pair_ready(void) {
    pthread_barrier_wait(&pair_barrier);
}

int turns_pair_run(const turns_params *p, void *(*a)(void *),
                   void *(*b)(void *), void *arg) {
    pair_side sa = {a, arg, p->cpu, 0}, sb = {b, arg, p->cpu, 0};
    pthread_t ta, tb;
    pthread_barrier_init(&pair_barrier, NULL, 2);
    int rc = pthread_create(&tb, NULL, pair_thread, &sb);
    if (rc != 0) {
        pthread_barrier_destroy(&pair_barrier);
        return -rc;
    }
    rc = pthread_create(&ta, NULL, pair_thread, &sa);
    if (rc != 0) {
        /* b waits at the barrier forever otherwise: it is cancelled. */
        pthread_cancel(tb);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&pair_barrier);
        return -rc;
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&pair_barrier);
    if (sa.pin_rc < 0) return sa.pin_rc;
    return sb.pin_rc;
}

/* ------------------------------------------------------------- driver */

#define MAX_ROWS 16

typedef struct row {
    const turns_entry *entry;
    const turns_peer *peer;
    lab_series values[TURNS_VALUES];
    int failures;
    int last_error;
} row;

static void run_one(row *rw, const turns_params *p, int nvalues) {
    turns_result res;
    turns_result_clear(&res);
    uint64_t t0 = lab_now_ns();
    int rc = rw->entry->fn(p, &res);
    if (getenv("LAB_TRACE")) /* where a slow run spends its time */
        fprintf(stderr, "  [%s: %.3f s, rc %d]\n", rw->entry->label,
                (double)(lab_now_ns() - t0) / 1e9, rc);
    if (rc < 0) {
        rw->failures++;
        rw->last_error = rc;
        return;
    }
    if (rc == TURNS_SKIPPED) return;
    for (int v = 0; v < nvalues; v++)
        if (isfinite(res.v[v])) lab_series_add(&rw->values[v], res.v[v]);
}

/* Idle windows run side by side, one thread (or Node process) each: idle
 * loops do not compete for anything, every value is per loop thread, and a
 * window is seconds long, so running them in turn would cost the whole run
 * (implementations x rounds) windows. */
typedef struct idle_job {
    row *rw;
    const turns_params *p;
    int nvalues;
} idle_job;

static void *idle_thread(void *arg) {
    idle_job *job = arg;
    run_one(job->rw, job->p, job->nvalues);
    return NULL;
}

static void run_side_by_side(row *rows, int nrows, const turns_params *p,
                             int nvalues) {
    pthread_t threads[MAX_ROWS];
    idle_job jobs[MAX_ROWS];
    bool started[MAX_ROWS] = {false};
    for (int i = 0; i < nrows; i++) {
        jobs[i] = (idle_job){&rows[i], p, nvalues};
        started[i] =
            pthread_create(&threads[i], NULL, idle_thread, &jobs[i]) == 0;
        if (!started[i]) run_one(&rows[i], p, nvalues);
    }
    for (int i = 0; i < nrows; i++)
        if (started[i]) pthread_join(threads[i], NULL);
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
    lab_json_field(j, "idle_handles_lull", p->idle_handles_lull);
    lab_json_field(j, "idle_handles_peer", p->idle_handles_peer);
    lab_json_field(j, "idle_window_s", (double)p->idle_window_ns / 1e9);
    lab_json_field(j, "trips", p->trips);
    lab_json_field(j, "timers", p->timers);
    lab_json_field(j, "timer_pairs", p->timer_pairs);
    lab_json_field(j, "cpu", p->cpu);
    lab_json_end_object(j);
}

static void print_method(int f, const turns_params *p) {
    if (f == TURNS_IDLE) {
        printf("  %.0f s window after one non-blocking iteration, every "
               "implementation on its own thread at once; lull: %d watched "
               "sockets + %d far timers + %d pumps listening; peers: %d "
               "watched sockets (Node: whole-process CPU)\n",
               (double)p->idle_window_ns / 1e9, p->idle_handles_lull,
               p->idle_handles_lull, p->idle_handles_lull,
               p->idle_handles_peer);
    } else if (f == TURNS_TIMERS) {
        printf("  %d timers armed with random deadlines in [1 s, 1000 s), "
               "then %d more armed and cancelled (timed apart); bytes per "
               "timer = handle + heap growth (mallinfo2) / armed\n",
               p->timers, p->timer_pairs);
    } else {
        printf("  %s\n", figures[f].method);
    }
    if (f == TURNS_CHAIN_TASK || f == TURNS_CHAIN_TIMER0)
        printf("  %llu hops per round (Node's setTimeout(0): %llu)\n",
               (unsigned long long)p->hops, (unsigned long long)p->slow_hops);
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
        lab_plot_bar(plot, rows[i].entry->label, &rows[i].values[v],
                     rows[i].peer == &turns_lull);
}

static void run_figure(int f, const turns_params *p, int rounds,
                       const turns_peer *const *peers, int npeers,
                       lab_json *json, lab_plot *plot) {
    const figure *fig = &figures[f];
    row rows[MAX_ROWS];
    int nrows = 0;
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < npeers; i++)
        for (int e = 0; e < peers[i]->count; e++) {
            const turns_entry *en = &peers[i]->entries[e];
            if (en->figure != f || nrows == MAX_ROWS) continue;
            rows[nrows].entry = en;
            rows[nrows].peer = peers[i];
            nrows++;
        }

    printf("\n%s\n", fig->title);
    print_method(f, p);
    fflush(stdout);

    uint64_t started = lab_now_ns();
    for (int r = 0; r < rounds; r++) {
        turns_params rp = *p;
        rp.seed = p->seed + (uint64_t)r * 2 + 1;
        rp.round = r;
        if (f == TURNS_IDLE) {
            run_side_by_side(rows, nrows, &rp, fig->nvalues);
            continue;
        }
        for (int i = 0; i < nrows; i++)
            run_one(&rows[i], &rp, fig->nvalues);
    }
    double took = (double)(lab_now_ns() - started) / 1e9;

    /* lull's row is the base of the ratio column. */
    double base = NAN;
    if (fig->ratio_value >= 0)
        for (int i = 0; i < nrows; i++)
            if (rows[i].peer == &turns_lull &&
                rows[i].values[fig->ratio_value].n > 0) {
                base = lab_series_median(&rows[i].values[fig->ratio_value]);
                break;
            }

    const char *header[LAB_TABLE_COLS] = {"implementation"};
    int cols = 1;
    for (int v = 0; v < fig->nvalues; v++)
        header[cols++] = fig->columns[v];
    if (fig->ratio_value >= 0) header[cols++] = "lull ÷ row";
    lab_table t;
    lab_table_init(&t, cols, header);
    for (int i = 0; i < nrows; i++) {
        int tr = lab_table_row(&t);
        lab_table_set(&t, tr, 0, "%s", rows[i].entry->label);
        if (rows[i].failures == rounds) {
            for (int v = 0; v < fig->nvalues; v++)
                lab_table_set(&t, tr, 1 + v, "failed");
            continue;
        }
        for (int v = 0; v < fig->nvalues; v++) {
            char buf[LAB_CELL];
            lab_format_series(buf, sizeof buf, &rows[i].values[v]);
            lab_table_set(&t, tr, 1 + v, "%s", buf);
        }
        if (fig->ratio_value >= 0) {
            const lab_series *s = &rows[i].values[fig->ratio_value];
            double m = s->n ? lab_series_median(s) : NAN;
            if (isfinite(base) && isfinite(m) && m > 0) {
                lab_table_set(&t, tr, cols - 1, "%.3g", base / m);
            } else {
                lab_table_set(&t, tr, cols - 1, "-");
            }
        }
    }
    lab_table_print(&t, stdout);
    for (int i = 0; i < nrows; i++)
        if (rows[i].failures > 0)
            printf("  note: %s failed %d of %d rounds (%s)\n",
                   rows[i].entry->label, rows[i].failures, rounds,
                   strerror(-rows[i].last_error));
    if (fig->ratio_value >= 0)
        printf("  lull ÷ row: lull's median %s over the row's (< 1: lull "
               "lower)\n",
               fig->columns[fig->ratio_value]);
    printf("  target: %s\n", fig->target);
    printf("  (%.1f s)\n", took);
    plot_figure(plot, fig, rows, nrows);

    if (!json) return;
    lab_json_key(json, fig->key);
    lab_json_begin_object(json);
    lab_json_key(json, "title");
    lab_json_string(json, fig->title);
    lab_json_key(json, "rows");
    lab_json_begin_array(json);
    for (int i = 0; i < nrows; i++) {
        lab_json_begin_object(json);
        lab_json_key(json, "label");
        lab_json_string(json, rows[i].entry->label);
        lab_json_key(json, "peer");
        lab_json_string(json, rows[i].peer->name);
        lab_json_field(json, "failures", rows[i].failures);
        for (int v = 0; v < fig->nvalues; v++)
            if (rows[i].values[v].n > 0)
                lab_json_series(json, fig->names[v], &rows[i].values[v]);
        if (fig->ratio_value >= 0 && rows[i].values[fig->ratio_value].n > 0) {
            lab_json_key(json, "lull_ratio");
            lab_json_number(
                json,
                base / lab_series_median(&rows[i].values[fig->ratio_value]));
        }
        lab_json_end_object(json);
    }
    lab_json_end_array(json);
    lab_json_end_object(json);
}

static int run_turns(const lab_options *opts, lab_json *json) {
    turns_params p;
    set_params(opts, &p);
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
        char why[128] = "not installed";
        bool ok =
            peer && (!peer->available || peer->available(why, sizeof why));
        const char *version = ok && peer->version ? peer->version() : NULL;
        if (ok) {
            peers[npeers++] = peer;
            printf(" %s%s%s", known[i].name, version ? " " : "",
                   version ? version : "");
        } else {
            snprintf(skipped[nskipped++], sizeof skipped[0], "%s: %s, skipped",
                     known[i].name, why);
        }
        if (json) {
            lab_json_begin_object(json);
            lab_json_key(json, "name");
            lab_json_string(json, known[i].name);
            lab_json_key(json, "available");
            lab_json_bool(json, ok);
            if (version) {
                lab_json_key(json, "version");
                lab_json_string(json, version);
            }
            if (!ok) {
                lab_json_key(json, "why");
                lab_json_string(json, why);
            }
            lab_json_end_object(json);
        }
    }
    printf("\n");
    for (int i = 0; i < nskipped; i++)
        printf("%s\n", skipped[i]);
    printf("%d rounds per figure; median [min–max] over rounds; rows run in "
           "turn within each round\n",
           rounds);
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
