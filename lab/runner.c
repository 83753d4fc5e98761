/* The `runner` scenario, the polling pump in its real setting:
 * each session's runner is a separate process that commits events, and
 * the parent's transport delivers them to a driver. The runners are
 * lull-lab itself, re-executed (`lull-lab runner-child`, lab/runner_child.c);
 * the same runners are driven by lull's transport (lab/runner_run.c) and,
 * when `node` is on PATH, by a Node transport (lab/node/runner.js), each
 * in the polling pump's two modes: a 5 ms poll (before) and a wake on the
 * runner's commit (after). Every measurement spawns its own N runners,
 * waits for them, measures an idle window, streams one turn per session
 * (40 events, one every 15 ms, every session at once), checks every
 * event (once, in order, intact: a failure is an error of the run,
 * -EPROTO), and reaps the runners.
 *
 * Each size (12 runners, then 100 and 1,000 at full size; --sessions N
 * alone) is one of the engine's figures, its four transports the rows,
 * round r starting at row r mod 4 (A B A B ...). `--only check` is the
 * smallest form, for ctest: a few runners, a short turn, every transport
 * once, the checks and nothing timed. One thread (Node runs in its own
 * process per measurement). */
#include "runner.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MS 1000000ull

/* The line under the short table's title. */
#define RUNNER_LEGEND                                                          \
    "per session per second; idle CPU: the transport's process; × p50: the "  \
    "row's ÷ lull's, same policy"

enum {
    RV_P50,
    RV_P95,
    RV_P99,
    RV_MAX,
    RV_MEAN,
    RV_READS,    /* idle reads / session / s */
    RV_WAKEUPS,  /* idle voluntary switches / session / s */
    RV_CPU,      /* idle CPU of the transport's process, ms / s */
    RV_LOOP_WAK, /* lull: idle wakeups lull counted / session / s */
    RV_READY,    /* spawn -> all ready, ms */
    RV_CPU_EV,   /* the transport's CPU over the stream ÷ events, ns */
    RV_BUSY_T,   /* the transport's CPU's busy share over the stream, % */
    RV_BUSY_R,   /* the runners' CPU's */
    RV_STEAL,    /* both CPUs' steal over the stream, % */
    RV_PER_READ, /* events per read over the stream */
    RV_COUNT
};

static const lab_col cols[RV_COUNT] = {
    {"wait_p50_us", "delivery wait p50, µs", 0},
    {"wait_p95_us", "p95, µs", 0},
    {"wait_p99_us", "p99, µs", 0},
    {"wait_max_us", "max, µs", 0},
    {"wait_mean_us", "mean, µs", 0},
    {"idle_reads_per_session_s", "idle reads / session / s", 0},
    {"idle_wakeups_per_session_s", "idle wakeups / session / s", 0},
    {"idle_cpu_ms_per_s", "idle CPU, ms / s", 0},
    {"idle_loop_wakeups_per_session_s", "lull-counted wakeups / session / s",
     0},
    {"ready_ms", "spawn → all ready, ms", 0},
    {"cpu_per_event_ns", "transport CPU / event, ns", 0},
    {"busy_transport_cpu_pct", "transport's CPU busy, %", 0},
    {"busy_runners_cpu_pct", "runners' CPU busy, %", 0},
    {"steal_pct", "steal, %", 0},
    {"events_per_read", "events / read", 0},
};

/* The rows of a size: lull's two modes, then Node's. */
enum {
    ROW_LULL_POLL,
    ROW_LULL_NOTIFY,
    ROW_FLOOR,
    ROW_NODE_POLL,
    ROW_NODE_NOTIFY,
    ROWS
};
static const char *const row_label[ROWS] = {
    "lull, 5 ms poll (before)", "lull, notify (after)",
    "floor: epoll_wait + read, no loop", "Node, setInterval 5 ms (before)",
    "Node, event-driven (after)"};
static const char *const row_short[ROWS] = {"lull poll", "lull notify", "floor",
                                            "Node poll", "Node notify"};

typedef struct rctx {
    runner_params p;
    bool check; /* --only check: say what was checked */
} rctx;

/* The rows a size measures: --only notify, floor or node picks one (lull's
 * notify, the floor, Node's notify: a profile of one transport); the polls
 * are not measured at SIZE_NO_POLL runners and above (a poll of every
 * session every 5 ms is only a queue there). */
#define SIZE_NO_POLL 3000
static bool row_wanted(const lab_options *opts, int k, int n) {
    const char *only = opts->only;
    if (only && strcmp(only, "notify") == 0) return k == ROW_LULL_NOTIFY;
    if (only && strcmp(only, "floor") == 0) return k == ROW_FLOOR;
    if (only && strcmp(only, "node") == 0) return k == ROW_NODE_NOTIFY;
    return n < SIZE_NO_POLL || (k != ROW_LULL_POLL && k != ROW_NODE_POLL);
}

static int measure(lab_fig *f, lab_row *row, int round, double *v) {
    rctx *c = f->ctx;
    int which = (int)row->tag;
    int mode = which == ROW_LULL_POLL || which == ROW_NODE_POLL ? RUNNER_POLL
               : which == ROW_FLOOR                             ? RUNNER_FLOOR
                                                                : RUNNER_NOTIFY;
    runner_result res;
    c->p.seed += 0x9E3779B97F4A7C15ull; /* new poll phases each round */
    int rc = which >= ROW_NODE_POLL ? runner_node_measure(&c->p, mode, &res)
                                    : runner_lull_measure(&c->p, mode, &res);
    if (rc < 0) {
        /* Said at once, whatever --verbose: a failed row is news. */
        printf("  runner, %d runners, %s, round %d: %s\n", c->p.runners,
               row->label, round + 1, res.why[0] ? res.why : strerror(-rc));
        return rc;
    }
    if (c->check)
        printf("  %d runners, %s: %.0f events, each once and in order\n",
               c->p.runners, row->label, res.delivered);
    v[RV_P50] = res.wait_p50_us;
    v[RV_P95] = res.wait_p95_us;
    v[RV_P99] = res.wait_p99_us;
    v[RV_MAX] = res.wait_max_us;
    v[RV_MEAN] = res.wait_mean_us;
    v[RV_READS] = res.idle_reads;
    v[RV_WAKEUPS] = res.idle_wakeups;
    v[RV_CPU] = res.idle_cpu_ms;
    v[RV_LOOP_WAK] = res.loop_wakeups;
    v[RV_READY] = res.ready_ms;
    v[RV_CPU_EV] = res.cpu_per_event_ns;
    v[RV_BUSY_T] = res.busy_transport_pct;
    v[RV_BUSY_R] = res.busy_runners_pct;
    v[RV_STEAL] = res.steal_pct;
    v[RV_PER_READ] = res.events_per_read;
    /* Each round's own line: a wait is only read with what the CPUs did
     * meanwhile (the medians hide which round was the busy one). */
    lab_detail("  %d, %s, round %d: p50 %.1f, p99 %.1f µs; %.0f ns CPU / "
               "event, %.2f events / read; CPUs busy: transport's %.0f%%, "
               "runners' %.0f%%; steal %.1f%%\n",
               c->p.runners, row_short[which], round + 1, res.wait_p50_us,
               res.wait_p99_us, res.cpu_per_event_ns, res.events_per_read,
               res.busy_transport_pct, res.busy_runners_pct, res.steal_pct);
    return 0;
}

static void fig_json(const lab_fig *f, const lab_row *row, lab_json *j) {
    const rctx *c = f->ctx;
    if (!row) {
        lab_json_field(j, "runners", c->p.runners);
        lab_json_field(j, "idle_s", (double)c->p.idle_ns / 1e9);
        return;
    }
    lab_json_key(j, "mode");
    lab_json_string(j, row->tag == ROW_LULL_POLL || row->tag == ROW_NODE_POLL
                           ? "poll"
                       : row->tag == ROW_FLOOR ? "floor"
                                               : "notify");
}

/* A figure of n runners: lull's rows, and Node's when it can run. */
static lab_fig *size_fig(const lab_options *opts, const runner_params *base,
                         int n, uint64_t idle_ns, int rounds, bool node,
                         bool check, rctx *c) {
    *c = (rctx){.p = *base, .check = check};
    c->p.runners = n;
    c->p.idle_ns = idle_ns;
    lab_fig_spec spec = {"main", "runner", NULL, cols,     RV_COUNT, RV_P50,
                         0,      measure,  NULL, fig_json, c};
    lab_fig *f = lab_fig_new(&spec);
    if (!f) return NULL;
    for (int k = 0; k < ROWS; k++) {
        if (k >= ROW_NODE_POLL && !node) break;
        if (!row_wanted(opts, k, n)) continue;
        bool lull = k == ROW_LULL_POLL || k == ROW_LULL_NOTIFY;
        lab_row *r = lab_fig_add(f,
                                 lull             ? "lull"
                                 : k == ROW_FLOOR ? "floor"
                                                  : "node",
                                 lull             ? LAB_ROW_LULL | LAB_ROW_BASE
                                 : k == ROW_FLOOR ? LAB_ROW_FLOOR
                                                  : 0,
                                 "%s", row_label[k]);
        r->tag = k;
        /* Like for like: each poll against lull's poll, each wake against
         * lull's notify. */
        r->cls = k == ROW_LULL_POLL || k == ROW_NODE_POLL ? 1 : 0;
    }
    lab_fig_run(f, opts, rounds);
    return f;
}

/* ------------------------------------------------------------- limits */

/* 0 when n runners fit the process's limits (the soft RLIMIT_NOFILE is
 * raised to the hard one first); else a line saying which limit and how to
 * raise it, and the error opening fds (-EMFILE) or forking (-EAGAIN)
 * would have met: the size is not run. */
static int limits_allow(int n, char *why, size_t size) {
    long need = runner_fds_needed(n);
    long have = lab_raise_nofile();
    if (have >= 0 && have < need) {
        snprintf(why, size,
                 "%d runners need about %ld fds, and RLIMIT_NOFILE allows %ld "
                 "(raise the hard limit: ulimit -Hn %ld, as root)",
                 n, need, have, need);
        return -EMFILE;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long)rl.rlim_cur < n + 64) {
        snprintf(why, size,
                 "%d runners need %d processes, and RLIMIT_NPROC allows %ld "
                 "for the whole user (ulimit -u)",
                 n, n + 64, (long)rl.rlim_cur);
        return -EAGAIN;
    }
    return 0;
}

/* ------------------------------------------------------------- output */

static double med(const lab_fig *f, int row, int v) {
    const lab_row *r = lab_fig_find(f, NULL, row_label[row]);
    return r ? lab_row_median(r, v) : NAN;
}

static void brief_rows(lab_table *t, const lab_fig *f, int n) {
    for (int k = 0; k < f->nrows; k++) {
        const lab_row *r = &f->rows[k];
        /* Node's poll: --verbose (the demo fits 80 lines). */
        if (r->tag == ROW_NODE_POLL && !lab_verbose) continue;
        int tr = lab_table_row(t);
        char buf[LAB_CELL];
        lab_table_set(t, tr, 0, "%d, %s", n, row_short[r->tag]);
        bool measured = r->v[RV_P50].n > 0;
        static const int v[] = {RV_P50, RV_P99, RV_READS, RV_WAKEUPS, RV_CPU};
        for (int c = 0; c < 5; c++)
            lab_table_set(t, tr, 1 + c, "%s",
                          measured ? lab_fmt(buf, lab_row_median(r, v[c]))
                                   : "failed");
        const lab_row *base = lab_fig_base_of(f, r);
        if (r->flags & LAB_ROW_LULL)
            lab_table_set(t, tr, 6, "–");
        else
            lab_table_set(t, tr, 6, "%s",
                          lab_fmt_ratio(buf, lab_ratio(f, base, r, RV_P50)));
    }
}

static void print_legend(const runner_params *p, int rounds) {
    lab_detail("each session's runner a process (lull-lab runner-child, "
               "spawned per measurement); one turn per session, %d events, "
               "one every %.0f ms, every session at once, %s; idle window "
               "first\n",
               p->events, (double)p->interval_ns / 1e6,
               p->aligned ? "every runner committing in the same instant "
                            "(--aligned)"
                          : "each runner on a phase of its own within the "
                            "period (--aligned: all in one instant)");
    lab_detail("lull, 5 ms poll: a 5 ms poll per session on a 1 ms timer "
               "grid (the polling pump), each a read() of the "
               "runner's pipe; lull, notify: the pipe's readiness wakes the "
               "pump, the pass (the same read) runs in the next task\n");
    lab_detail("floor: no loop; the thread blocks in epoll_wait on every "
               "runner's pipe and reads it at once (the kernel's share of a "
               "wait)\n");
    lab_detail("Node: child_process.spawn with stdio pipes; setInterval(pass, "
               "%.0f) reading the stdout stream (before), or 'data' waking "
               "one pass by setImmediate (after)\n",
               (double)p->poll_ns / 1e6);
    lab_detail("%d rounds, the row that runs first rotating; wait = the "
               "runner's CLOCK_MONOTONIC stamp at its commit (its write) -> "
               "the driver has it; idle wakeups = the transport thread's "
               "voluntary context switches less the one that ends the "
               "window; idle CPU = the transport's process\n",
               rounds);
}

static void plot_size(lab_plot *plot, const lab_fig *f, int n) {
    if (!plot) return;
    char title[96];
    snprintf(title, sizeof title, "runner, %d processes: delivery wait p50", n);
    lab_fig_plot(f, plot, RV_P50, title, "us");
    snprintf(title, sizeof title, "runner, %d processes: idle wakeups", n);
    lab_fig_plot(f, plot, RV_WAKEUPS, title, "per session per s");
}

/* The full run's table by sessions: each size's notify rows and floor, the
 * wait and the transport's CPU per event, lull's against the floor's. */
#define NSIZES 4
#define RUNNER_SCALE_TITLE                                                     \
    "by sessions: wait p50, µs [min–max of the rounds]; transport CPU per " \
    "event, ns; busy CPUs"

static void scale_init(lab_table *t) {
    static const char *const header[] = {"sessions",
                                         "lull p50",
                                         "floor p50",
                                         "Node p50",
                                         "lull CPU/ev",
                                         "floor CPU/ev",
                                         "Node CPU/ev",
                                         "lull ÷ floor p50 · CPU",
                                         "busy %: transport · runners"};
    lab_table_init(t, 9, header);
}

/* lull ÷ the floor on col, round by round, the median: the two ran in the
 * same rounds, so each ratio sees one state of the machine (a 12-session
 * p50 moves between ~25 and ~55 µs from round to round, both rows with
 * it). NaN where either row is missing. */
static double same_round_ratio(const lab_row *ln, const lab_row *fl, int col) {
    return ln && fl ? lab_series_ratio_median(&ln->v[col], &fl->v[col]) : NAN;
}

/* A size's row of the table by sessions; *q50 and *qcpu get lull ÷ the
 * floor on the p50 and on CPU per event (same_round_ratio). */
static void scale_row(lab_table *t, const lab_fig *f, int n, double *q50,
                      double *qcpu) {
    const lab_row *ln = lab_fig_find(f, "lull", row_label[ROW_LULL_NOTIFY]);
    const lab_row *fl = lab_fig_find(f, NULL, row_label[ROW_FLOOR]);
    const lab_row *nn = lab_fig_find(f, "node", row_label[ROW_NODE_NOTIFY]);
    const lab_row *rows[3] = {ln, fl, nn};
    *q50 = *qcpu = NAN;
    int tr = lab_table_row(t);
    if (tr < 0) return;
    char buf[LAB_CELL], b2[LAB_CELL];
    lab_table_set(t, tr, 0, "%d", n);
    for (int k = 0; k < 3; k++) {
        const lab_row *r = rows[k];
        bool measured = r && r->v[RV_P50].n > 0;
        if (measured && k < 2)
            lab_format_series(buf, sizeof buf, &r->v[RV_P50]);
        else
            lab_fmt(buf, measured ? lab_row_median(r, RV_P50) : NAN);
        lab_table_set(t, tr, 1 + k, "%s", r ? buf : "–");
        lab_table_set(t, tr, 4 + k, "%s",
                      measured ? lab_fmt(buf, lab_row_median(r, RV_CPU_EV))
                               : "–");
    }
    *q50 = same_round_ratio(ln, fl, RV_P50);
    *qcpu = same_round_ratio(ln, fl, RV_CPU_EV);
    lab_table_set(t, tr, 7, "%s · %s", lab_fmt3(buf, *q50),
                  lab_fmt3(b2, *qcpu));
    lab_table_set(t, tr, 8, "%s · %s",
                  lab_fmt3(buf, ln ? lab_row_median(ln, RV_BUSY_T) : NAN),
                  lab_fmt3(b2, ln ? lab_row_median(ln, RV_BUSY_R) : NAN));
}

/* ------------------------------------------------------------ verdict */

static double row_max(const lab_fig *f, int row, int v) {
    const lab_row *r = lab_fig_find(f, NULL, row_label[row]);
    return r && r->v[v].n ? lab_series_max(&r->v[v]) : NAN;
}

static void verdict(const lab_fig *f, int n, bool node, const char *no_node) {
    const char *node_cell = strcmp(no_node, "node not found") == 0
                                ? "Node not found"
                                : "Node not run";
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
    const lab_row *ln = lab_fig_find(f, "lull", row_label[ROW_LULL_NOTIFY]);
    const lab_row *nn = lab_fig_find(f, "node", row_label[ROW_NODE_NOTIFY]);
    double p50 = med(f, ROW_LULL_NOTIFY, RV_P50);
    double p99 = med(f, ROW_LULL_NOTIFY, RV_P99);
    double x = nn ? lab_ratio(f, ln, nn, RV_P50) : NAN;
    lab_verdict *v;
    if (!isfinite(p50)) {
        if ((v = lab_verdict_add("runner", 0)))
            snprintf(v->note, sizeof v->note,
                     "%d runners: lull's notify row failed (see above)", n);
        return;
    }
    /* The default size is the README's (12); another is named. */
    char size[16] = "";
    if (n != 12) snprintf(size, sizeof size, ", %d", n);
    if ((v = lab_verdict_add("runner", 0))) {
        v->timing = true;
        snprintf(v->what, sizeof v->what, "notify%s: p50 %s, p99 %s µs", size,
                 lab_fmt3(a, p50), lab_fmt3(b, p99));
        snprintf(v->target, sizeof v->target, "≤ 50, ≤ 500, ×10");
        if (node && nn)
            snprintf(v->peer, sizeof v->peer, "Node %s %s",
                     lab_fmt3(a, med(f, ROW_NODE_NOTIFY, RV_P50)),
                     lab_fmt_ratio(c, x));
        else
            snprintf(v->peer, sizeof v->peer, "%s", node_cell);
        /* The floor (no loop: a thread blocked on the pipes) ran in the
         * same rounds: what the kernel's part of a wait costs here. */
        const lab_row *fl = lab_fig_find(f, NULL, row_label[ROW_FLOOR]);
        double f50 = med(f, ROW_FLOOR, RV_P50), f99 = med(f, ROW_FLOOR, RV_P99);
        char r50[32], r99[32];
        snprintf(r50, sizeof r50, "p50 ≤ %s× floor", lab_fmt3(a, 50 / f50));
        snprintf(r99, sizeof r99, "p99 ≤ %s× floor", lab_fmt3(a, 500 / f99));
        if (fl)
            lab_verdict_spread(v, "the floor's p99",
                               lab_row_spread(fl, RV_P99));
        lab_verdict_bound_floor(v, p50, 50, true, f50, r50);
        lab_verdict_bound_floor(v, p99, 500, true, f99, r99);
        if (node && nn) { /* no Node: the target's absolute part */
            /* No transport's wait is below the floor's: where the floor
             * is not ×10 below Node's, no loop could be. Restated, ×10
             * below Node is a p50 of Node's ÷ 10 = (floor's × Node) ÷ 10
             * floors. */
            double fx = fl ? lab_ratio(f, fl, nn, RV_P50) : NAN;
            char rx[32];
            snprintf(rx, sizeof rx, "p50 ≤ %s× floor", lab_fmt3(a, fx / 10));
            lab_verdict_spread(v, "Node's p50", lab_row_spread(nn, RV_P50));
            lab_verdict_bound_floor(v, x, 10, false, fx, rx);
        }
    }
    /* Every round, not the median: an idle window has no noise to hide. */
    double reads = row_max(f, ROW_LULL_NOTIFY, RV_READS);
    double wakeups = row_max(f, ROW_LULL_NOTIFY, RV_WAKEUPS);
    if ((v = lab_verdict_add("runner", 1))) {
        snprintf(v->what, sizeof v->what, "idle%s: %s reads, %s wakeups", size,
                 lab_fmt3(a, reads), lab_fmt3(b, wakeups));
        snprintf(v->target, sizeof v->target, "0, 0 / session");
        if (node && nn)
            snprintf(v->peer, sizeof v->peer, "CPU %s, Node %s ms/s",
                     lab_fmt3(c, med(f, ROW_LULL_NOTIFY, RV_CPU)),
                     lab_fmt3(a, med(f, ROW_NODE_NOTIFY, RV_CPU)));
        else
            snprintf(v->peer, sizeof v->peer, "%s", node_cell);
        lab_verdict_judge(v, reads == 0 && wakeups == 0);
    }
}

/* ------------------------------------------------------------- driver */

/* `--only check`: the smallest form, every event checked, nothing timed. */
static int run_check(const lab_options *opts, runner_params *p, bool node,
                     const char *no_node) {
    int n = opts->sessions > 0 ? opts->sessions : 3;
    char why[256];
    int limit = limits_allow(n, why, sizeof why);
    if (limit < 0) {
        printf("  runner: not run: %s\n", why);
        return limit;
    }
    p->events = 10;
    p->interval_ns = 2 * MS;
    static rctx c;
    lab_fig *f = size_fig(opts, p, n, 100 * MS, 1, node, true, &c);
    if (!f) return -ENOMEM;
    if (!node) printf("  Node: not run (%s)\n", no_node);
    int rc = lab_fig_error(f);
    lab_verdict *v = lab_verdict_add("runner", 0);
    if (v)
        snprintf(v->note, sizeof v->note,
                 "check only: %d runners × %d transports, %s", n, f->nrows,
                 rc == 0 ? "every event once, in order" : "FAILED");
    lab_fig_free(f);
    return rc == -EPROTO ? 0 : rc; /* -EPROTO: counted as a failed check */
}

static int run_all(const lab_options *opts, lab_json *json,
                   const char *pin_why) {
    /* The runners are this very binary, named through this process's
     * /proc entry: it reaches the running file even once its path is
     * gone (lull-lab rebuilt or reinstalled mid-run; the path that
     * readlink gave then read "... (deleted)" and every spawn failed),
     * and it names lull-lab, not node, when Node's runner.js spawns. */
    static char exe[32];
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)getpid());
    runner_params p = {.events = 40,
                       .interval_ns = 15 * MS,
                       .poll_ns = 5 * MS,
                       .grid_ns = 1 * MS,
                       .exe = exe,
                       .aligned = opts->aligned,
                       .seed = 0x9E3779B97F4A7C15ull};
    char no_node[128] = "node not found";
    char skipped[160] = "";
    lab_detail("implementations: lull");
    if (json) {
        lab_json_key(json, "peers");
        lab_json_begin_array(json);
    }
    bool node = lab_peer_probe(json, "node", true, runner_node_available,
                               lab_node_version, NULL, skipped, sizeof skipped);
    if (json) lab_json_end_array(json);
    if (!node) {
        char why[128];
        runner_node_available(why, sizeof why);
        snprintf(no_node, sizeof no_node, "%s",
                 strstr(why, "not on PATH") ? "node not found" : why);
    }
    lab_detail("\nCPUs: %s\n", pin_why);
    if (opts->only && strcmp(opts->only, "check") == 0)
        return run_check(opts, &p, node, no_node);
    if (opts->only && strcmp(opts->only, "notify") != 0 &&
        strcmp(opts->only, "floor") != 0 && strcmp(opts->only, "node") != 0) {
        fprintf(stderr,
                "lull-lab runner: no figure '%s' (only: check, notify, "
                "floor, node)\n",
                opts->only);
        return -EINVAL;
    }
    if (opts->only && strcmp(opts->only, "node") == 0 && !node) {
        printf("  runner: Node not run (%s)\n", no_node);
        return 0;
    }

    /* Sizes: --sessions N alone; else 12, and at full size 100, 1,000 and
     * 3,000 (each where the fds and processes allow). */
    int sizes[NSIZES] = {opts->sessions > 0 ? opts->sessions : 12, 100, 1000,
                         3000};
    int nsizes = opts->sessions > 0 || opts->quick ? 1 : NSIZES;
    int rounds = lab_rounds(opts, 5, 2);
    /* Five rounds at every size: a 1,000-runner round on a shared machine
     * moves by several times (the CPUs' busy share each round says why),
     * and the rows are read against the floor over all five. */
    int scale_rounds = opts->rounds > 0 ? opts->rounds : 5;
    uint64_t idle = (opts->quick ? 300 : 2000) * MS;
    uint64_t scale_idle = 1000 * MS;
    print_legend(&p, rounds);
    if (json) {
        lab_json_key(json, "params");
        lab_json_begin_object(json);
        lab_json_field(json, "events_per_turn", p.events);
        lab_json_field(json, "interval_ms", (double)p.interval_ns / 1e6);
        lab_json_field(json, "poll_ms", (double)p.poll_ns / 1e6);
        lab_json_field(json, "poll_grid_ms", (double)p.grid_ns / 1e6);
        lab_json_key(json, "commits");
        lab_json_string(json, p.aligned ? "aligned: every runner in the same "
                                          "instant"
                                        : "each runner on its own phase");
        lab_json_key(json, "node");
        lab_json_string(json, node ? lab_node_version() : no_node);
        lab_json_key(json, "runners_exe");
        lab_json_string(json, exe);
        lab_json_end_object(json);
    }

    const char *header[] = {
        "runners, transport", "wait p50, µs",   "p99, µs", "idle reads/s",
        "idle wakeups/s",     "idle CPU, ms/s", "× p50"};
    lab_table t;
    lab_table_init(&t, 7, header);
    static rctx ctx[NSIZES];
    static char keys[NSIZES][32];
    lab_fig *main_f = NULL;
    lab_table scale;
    scale_init(&scale);
    runner_scale worst = RUNNER_SCALE_INIT;
    int rc = 0;
    for (int k = 0; k < nsizes; k++) {
        int n = sizes[k];
        char why[256];
        if (limits_allow(n, why, sizeof why) < 0) {
            printf("  runner: %d runners not run: %s\n", n, why);
            lab_verdict *v = k == 0 ? lab_verdict_add("runner", 0) : NULL;
            if (v)
                snprintf(v->note, sizeof v->note, "%d runners: %s", n,
                         strstr(why, "RLIMIT_NOFILE") ? "too few fds allowed"
                                                      : "too few processes "
                                                        "allowed");
            continue;
        }
        lab_fig *f = size_fig(opts, &p, n, k ? scale_idle : idle,
                              k ? scale_rounds : rounds, node, false, &ctx[k]);
        if (!f) return -ENOMEM;
        lab_detail("\n%d runners:\n", n);
        lab_fig_print(f);
        lab_fig_notes(f);
        /* Beyond the first size, the table by sessions has its rows. */
        if (k == 0) brief_rows(&t, f, n);
        double q50, qcpu;
        scale_row(&scale, f, n, &q50, &qcpu);
        runner_scale_note(
            &worst, k, q50, qcpu,
            lab_row_spread(lab_fig_find(f, NULL, row_label[ROW_FLOOR]),
                           RV_P50));
        snprintf(keys[k], sizeof keys[k], "runners_%d", n);
        f->key = keys[k];
        lab_fig_json(f, json);
        int err = lab_fig_error(f);
        if (err < 0 && err != -EPROTO && rc == 0) rc = err;
        if (k == 0) {
            plot_size(opts->plot, f, n);
            main_f = f;
        } else {
            lab_fig_free(f);
        }
    }
    if (t.rows > 1) lab_table_brief(&t, lab_verbose ? RUNNER_LEGEND : NULL);
    if (nsizes > 1 && scale.rows > 1) {
        printf("\n");
        lab_table_brief(&scale, RUNNER_SCALE_TITLE);
        lab_detail("  lull ÷ floor: the median of the rounds' ratios\n");
        printf("  %s\n", pin_why);
    }
    if (!node) printf("  Node: not run (%s)\n", no_node);
    if (main_f && opts->only) {
        lab_verdict *v = lab_verdict_add("runner", 0);
        if (v)
            snprintf(v->note, sizeof v->note, "one transport only (--only %s)",
                     opts->only);
        lab_fig_free(main_f);
    } else if (main_f) {
        verdict(main_f, sizes[0], node, no_node);
        if (nsizes > 1) runner_scale_verdict(&worst, sizes[0]);
        lab_fig_free(main_f);
    }
    return rc;
}

/* Every measurement with the transport on one CPU and the runners on
 * another (lab/runner_cpu.c), where there are two. */
static int run_runner(const lab_options *opts, lab_json *json) {
    char pin_why[128];
    /* One CPU: said at once, but in the demo, whose lines stay as they are
     * (--verbose says it there). */
    if (runner_pin_begin(pin_why, sizeof pin_why) < 0 && !opts->quick)
        printf("  runner: %s\n", pin_why);
    char fifo_why[96];
    int fifo = runner_fifo_begin(fifo_why, sizeof fifo_why);
    if (fifo < 0) printf("  runner: %s\n", fifo_why); /* asked for: said */
    char cpus[240];
    snprintf(cpus, sizeof cpus, "%s%s%s", pin_why, fifo > 0 ? "; " : "",
             fifo > 0 ? fifo_why : "");
    int rc = run_all(opts, json, cpus);
    runner_fifo_end();
    runner_pin_end();
    return rc;
}

static const char *const runner_headings[] = {RUNNER_LEGEND, RUNNER_SCALE_TITLE,
                                              NULL};

/* --only: the check, or one transport alone (row_wanted). */
static const char *const runner_only[] = {"check", "notify", "floor", "node",
                                          NULL};

const lab_scenario lab_runner = {
    "runner",
    "the polling pump on real processes: runner children commit events, the "
    "parent's transport delivers them, polling every 5 ms vs woken by the "
    "commit; lull beside Node",
    run_runner,
    "runner: the polling pump on processes: runners write events, a "
    "transport polls or is woken",
    "runner",
    runner_headings,
    false,
    runner_only,
};
