/* The `pump` scenario, the polling pump: N live sessions, each a
 * committed-event window whose pump delivers to a driver, in three modes
 * that differ only in what triggers the delivery pass: a 5 ms poll on a
 * 1 ms timer grid (the polling pump as first written), the same poll on lull's
 * ns timers, and notification (the "after"). The runs themselves are
 * lab/pump_run.c; the journal variant is lab/pump_journal.c.
 *
 * Each size is one of the engine's figures, its modes the rows: one
 * measurement of a mode opens its own loop and sessions, runs an idle
 * window and a stream (and, at the main size, an idle window with the
 * larger retained window). Round r starts at mode r mod 3. The main table
 * (12 sessions, --sessions N) has every figure the polling pump was first
 * measured by, beside that reference (before -> after); the scale table the
 * same at 1,000 and 10,000 sessions. One thread (and the idle window's
 * observer). */
#include "pump.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* The values of one measurement of a mode. */
enum {
    PV_READS,      /* idle state reads / session / s */
    PV_UTIL,       /* idle utilisation, % */
    PV_CPU_SMALL,  /* idle CPU ms / s, 49-event window */
    PV_CPU_LARGE,  /* ... 409-event window (main size only) */
    PV_WAKEUPS,    /* idle wakeups / s */
    PV_END_WAKEUP, /* loop-thread CPU of the wakeup that ends the window */
    PV_MEAN,       /* delivery wait, µs */
    PV_P50,
    PV_P95,
    PV_P99,
    PV_MAX,
    PV_TERMINAL,       /* the terminal event's wait p50, µs */
    PV_PASSES,         /* pump passes / delivered event */
    PV_AUDIT_WAKEUPS,  /* idle wakeups the wake audit attributed */
    PV_METRIC_WAKEUPS, /* idle wakeups lull_loop_metrics counted */
    PV_COUNT
};

static const lab_col cols[PV_COUNT] = {
    {"idle_reads_per_session_s", "idle state reads / session / s", 0},
    {"idle_utilisation_pct", "idle utilisation, %", 0},
    {"idle_cpu_ms_per_s_small", "idle CPU ms / s, 49-event window", 0},
    {"idle_cpu_ms_per_s_large", "idle CPU ms / s, 409-event window", 0},
    {"idle_wakeups_per_s", "idle wakeups / s", 0},
    {"idle_end_wakeup_cpu_us", "CPU of the window's last wakeup, µs", 0},
    {"wait_mean_us", "delivery wait mean, µs", 0},
    {"wait_p50_us", "delivery wait p50, µs", 0},
    {"wait_p95_us", "delivery wait p95, µs", 0},
    {"wait_p99_us", "delivery wait p99, µs", 0},
    {"wait_max_us", "delivery wait max, µs", 0},
    {"terminal_wait_p50_us", "terminal-event wait p50, µs", 0},
    {"passes_per_event", "pump passes / delivered event", 0},
    {"idle_audit_wakeups", "idle wakeups named by the audit", 0},
    {"idle_metric_wakeups", "idle wakeups counted", 0},
};

/* What a size's measure function reads and what it keeps besides the
 * values: the last round's wake audit and the streams that never ended. */
typedef struct pctx {
    const params *p;
    int sessions;
    uint64_t idle_ns;
    bool large_too; /* also an idle window with the larger window */
    uint64_t seed;
    int naudit[MODES];
    audit_row audit[MODES][AUDIT_TOP];
    int incomplete[MODES];
} pctx;

/* One mode at one size: idle window + stream with the small window, and
 * (when large_too) an idle window with the large one. */
static int measure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    pctx *c = fig->ctx;
    const params *p = c->p;
    int mode = (int)row->tag;
    run r;
    idle_result ir = {0};
    stream_result sr = {0};
    int rc = pump_run_open(&r, c->sessions, mode, p->retain_small, p, &c->seed);
    if (rc < 0) return rc;
    rc = pump_idle_window(&r, c->idle_ns, &ir);
    if (rc == 0) rc = pump_stream(&r, p, &sr);
    pump_run_close(&r);
    if (rc < 0) return rc;
    v[PV_READS] = ir.reads_per_session_s;
    v[PV_UTIL] = ir.utilisation_pct;
    v[PV_CPU_SMALL] = ir.cpu_ms_per_s;
    v[PV_WAKEUPS] = ir.wakeups_per_s;
    v[PV_END_WAKEUP] = ir.end_wakeup_us;
    v[PV_AUDIT_WAKEUPS] = ir.audit_wakeups;
    v[PV_METRIC_WAKEUPS] = ir.metric_wakeups;
    c->naudit[mode] = ir.naudit; /* the last round's is kept */
    memcpy(c->audit[mode], ir.audit, sizeof ir.audit);
    if (!sr.complete) c->incomplete[mode]++;
    v[PV_MEAN] = sr.mean_us;
    v[PV_P50] = sr.p50_us;
    v[PV_P95] = sr.p95_us;
    v[PV_P99] = sr.p99_us;
    v[PV_MAX] = sr.max_us;
    v[PV_TERMINAL] = sr.terminal_p50_us;
    v[PV_PASSES] = sr.passes_per_event;
    if (!c->large_too) return 0;
    rc = pump_run_open(&r, c->sessions, mode, p->retain_large, p, &c->seed);
    if (rc < 0) return rc;
    rc = pump_idle_window(&r, c->idle_ns, &ir);
    pump_run_close(&r);
    if (rc == 0) v[PV_CPU_LARGE] = ir.cpu_ms_per_s;
    return rc;
}

static void row_json(const lab_fig *fig, const lab_row *row, lab_json *j) {
    const pctx *c = fig->ctx;
    if (!row) {
        lab_json_field(j, "sessions", c->sessions);
        return;
    }
    int m = (int)row->tag;
    lab_json_key(j, "mode");
    lab_json_string(j, pump_mode_name[m]);
    lab_json_field(j, "incomplete_streams", c->incomplete[m]);
    lab_json_key(j, "audit");
    lab_json_begin_array(j);
    for (int i = 0; i < c->naudit[m]; i++) {
        lab_json_begin_object(j);
        lab_json_key(j, "source");
        lab_json_string(j, c->audit[m][i].name);
        lab_json_field(j, "wakeups_per_s", c->audit[m][i].wakeups_per_s);
        lab_json_field(j, "empty_passes_per_s", c->audit[m][i].empty_per_s);
        lab_json_end_object(j);
    }
    lab_json_end_array(j);
}

/* Every mode at n sessions, `rounds` times; the mode that goes first
 * rotates. Returns the figure (its ctx in *c), or NULL out of memory. */
static lab_fig *run_size(const lab_options *opts, const params *p, int n,
                         int rounds, uint64_t idle_ns, bool large_too,
                         pctx *c) {
    *c = (pctx){.p = p,
                .sessions = n,
                .idle_ns = idle_ns,
                .large_too = large_too,
                .seed = p->seed + (uint64_t)n};
    lab_fig_spec spec = {"main", "pump",  NULL, cols,     PV_COUNT, -1,
                         0,      measure, NULL, row_json, c};
    lab_fig *fig = lab_fig_new(&spec);
    if (!fig) return NULL;
    for (int m = 0; m < MODES; m++)
        lab_fig_add(fig, "lull", LAB_ROW_LULL, "%s", pump_mode_label[m])->tag =
            m;
    lab_fig_run(fig, opts, rounds);
    return fig;
}

/* --------------------------------------------------------------- output */

static void cell(lab_table *t, int row, int col, const lab_series *s) {
    char buf[LAB_CELL];
    lab_format_series(buf, sizeof buf, s);
    lab_table_set(t, row, col, "%s", buf);
}

static void main_row(lab_table *t, const char *label, const lab_fig *fig, int v,
                     const char *reference) {
    int row = lab_table_row(t);
    lab_table_set(t, row, 0, "%s", label);
    for (int m = 0; m < MODES; m++)
        cell(t, row, 1 + m, &fig->rows[m].v[v]);
    lab_table_set(t, row, 1 + MODES, "%s", reference);
}

static double med(const lab_fig *fig, int mode, int v) {
    return lab_row_median(&fig->rows[mode], v);
}

static void print_main(const params *p, const lab_fig *fig) {
    const char *header[] = {"figure", pump_mode_label[0], pump_mode_label[1],
                            pump_mode_label[2], "reference before → after"};
    lab_table t;
    lab_table_init(&t, 2 + MODES, header);
    char label[96];
    main_row(&t, "idle state reads / session / s", fig, PV_READS, "364 → 0");
    snprintf(label, sizeof label, "idle utilisation, %d sessions, %%",
             p->sessions);
    main_row(&t, label, fig, PV_UTIL, "1.5 → 0.0");
    snprintf(label, sizeof label, "idle CPU ms / s, %d-event window",
             p->retain_small);
    main_row(&t, label, fig, PV_CPU_SMALL, "12.8 → 0.05");
    snprintf(label, sizeof label, "idle CPU ms / s, %d-event window",
             p->retain_large);
    main_row(&t, label, fig, PV_CPU_LARGE, "21.5 → 0.08");
    main_row(&t, "idle wakeups / s", fig, PV_WAKEUPS, "–");
    main_row(&t, "delivery wait mean, µs", fig, PV_MEAN, "3480 → 1910");
    main_row(&t, "delivery wait p50, µs", fig, PV_P50, "3160 → 830");
    main_row(&t, "delivery wait p95, µs", fig, PV_P95, "7780 → 6360");
    main_row(&t, "delivery wait p99, µs", fig, PV_P99, "–");
    main_row(&t, "delivery wait max, µs", fig, PV_MAX, "8840 → 9070");
    main_row(&t, "terminal-event wait p50, µs", fig, PV_TERMINAL, "2370 → 80");
    main_row(&t, "pump passes / delivered event", fig, PV_PASSES, "–");
    lab_table_detail(&t);
    lab_detail("  idle CPU: the loop thread's CPU time "
               "(CLOCK_THREAD_CPUTIME_ID, kernel and user) from its first "
               "callback of the window to the window's end, read there by an "
               "observer thread while the loop sleeps; set-up before the "
               "window and the one wakeup that ends it are not counted\n");
    char buf[LAB_CELL];
    lab_format_series(buf, sizeof buf,
                      &fig->rows[MODE_NOTIFY].v[PV_END_WAKEUP]);
    lab_detail("  the wakeup that ends the window (the observer's post; not "
               "counted): %s µs of the loop thread's CPU in notify mode\n",
               buf);
    double after = med(fig, MODE_NOTIFY, PV_CPU_SMALL);
    char grid[LAB_CELL], ns[LAB_CELL];
    lab_detail(
        "  idle CPU, %d-event window (medians), × = before ÷ after: 1 ms "
        "grid %s, ns timers %s (reference 12.8 ÷ 0.05 = ×256); "
        "notify's figure is one entry into sleep spread over the "
        "window, so the ratio grows with the window: compare each "
        "column with the reference's\n",
        p->retain_small,
        lab_fmt_ratio(grid, med(fig, MODE_POLL_GRID, PV_CPU_SMALL) / after),
        lab_fmt_ratio(ns, med(fig, MODE_POLL, PV_CPU_SMALL) / after));
    lab_detail("  utilisation: lull_loop_metrics busy / (busy + idle), "
               "callback time only; the kernel's share of each wakeup is in "
               "the CPU rows\n");
}

static void print_audit(const pctx *c) {
    for (int m = 0; m < MODES; m++) {
        lab_detail("  wake audit, %s mode, idle window, %d sessions (last "
                   "round; the post that ends the window left out):\n",
                   pump_mode_name[m], c->sessions);
        if (c->naudit[m] == 0)
            lab_detail("    no source woke the loop or ran an empty pass\n");
        for (int i = 0; i < c->naudit[m]; i++) {
            const audit_row *a = &c->audit[m][i];
            char w[LAB_CELL], e[LAB_CELL];
            lab_detail("    %-40s %10s wakeups/s %10s empty passes/s\n",
                       a->name, lab_fmt(w, a->wakeups_per_s),
                       lab_fmt(e, a->empty_per_s));
        }
    }
}

static void scale_rows(lab_table *t, const lab_fig *fig, int n) {
    static const int v[] = {PV_READS, PV_UTIL, PV_CPU_SMALL, PV_WAKEUPS,
                            PV_P50,   PV_P99,  PV_TERMINAL};
    for (int m = 0; m < MODES; m++) {
        int row = lab_table_row(t);
        lab_table_set(t, row, 0, "%d %s", n, pump_mode_name[m]);
        for (int k = 0; k < 7; k++)
            cell(t, row, 1 + k, &fig->rows[m].v[v[k]]);
    }
}

static void json_params(lab_json *j, const params *p) {
    lab_json_key(j, "params");
    lab_json_begin_object(j);
    lab_json_field(j, "sessions", p->sessions);
    lab_json_field(j, "events_per_turn", p->events);
    lab_json_field(j, "interval_ms", (double)p->interval_ns / 1e6);
    lab_json_field(j, "poll_ms", (double)p->poll_ns / 1e6);
    lab_json_field(j, "poll_grid_ms", (double)p->grid_ns / 1e6);
    lab_json_field(j, "idle_s", (double)p->idle_ns / 1e9);
    lab_json_field(j, "scale_idle_s", (double)p->scale_idle_ns / 1e9);
    lab_json_key(j, "idle_cpu_counts");
    lab_json_string(j, "loop thread CPU time (CLOCK_THREAD_CPUTIME_ID) from "
                       "its first callback of the window to the window's "
                       "end, read by an observer thread; set-up and the "
                       "wakeup that ends the window not counted (that "
                       "wakeup: idle_end_wakeup_cpu_us)");
    lab_json_key(j, "retained");
    lab_json_begin_array(j);
    lab_json_number(j, p->retain_small);
    lab_json_number(j, p->retain_large);
    lab_json_end_array(j);
    lab_json_field(j, "rounds", p->rounds);
    lab_json_field(j, "scale_rounds", p->scale_rounds);
    lab_json_end_object(j);
}

static void note_incomplete(const pctx *c) {
    for (int m = 0; m < MODES; m++)
        if (c->incomplete[m])
            lab_check_failed("pump, %s mode, %d sessions: %d stream(s) hit "
                             "the 60 s deadline before every turn was "
                             "delivered",
                             pump_mode_name[m], c->sessions, c->incomplete[m]);
}

/* The plot: one panel per headline figure, the modes side by side. */
static void plot_main(lab_plot *plot, const params *p, const lab_fig *fig) {
    static const struct {
        const char *title, *unit;
        int v;
    } panels[] = {
        {"idle state reads per session", "per s", PV_READS},
        {"idle CPU, 49-event window", "ms per s", PV_CPU_SMALL},
        {"idle wakeups", "per s", PV_WAKEUPS},
        {"delivery wait p50", "us", PV_P50},
        {"delivery wait p99", "us", PV_P99},
        {"terminal-event wait p50", "us", PV_TERMINAL},
    };
    for (size_t k = 0; plot && k < sizeof panels / sizeof panels[0]; k++) {
        char title[160];
        snprintf(title, sizeof title, "pump, %d sessions: %s", p->sessions,
                 panels[k].title);
        lab_fig_plot(fig, plot, panels[k].v, title, panels[k].unit);
    }
}

static void print_legend(const params *p) {
    lab_detail("%d sessions; provider: one turn per session, %d events, one "
               "every %.0f ms, all sessions at once; idle window %.1f s "
               "first\n",
               p->sessions, p->events, (double)p->interval_ns / 1e6,
               (double)p->idle_ns / 1e9);
    lab_detail(
        "poll, 1 ms grid: a %.0f ms poll per session on a runtime "
        "with %.0f ms timers, as the polling pump first ran: each session's "
        "phase rounds to one of %d slots and a slot's polls share one "
        "timer and one wakeup\n",
        (double)p->poll_ns / 1e6, (double)p->grid_ns / 1e6,
        (int)(p->poll_ns / p->grid_ns));
    lab_detail("poll on lull's ns timers: the same %.0f ms poll as a lull "
               "repeating timer per session, random ns phases, 1 µs slack: "
               "no two coalesce; notify: the pump listens to the window's "
               "notifier; the same pass in every mode\n",
               (double)p->poll_ns / 1e6);
    lab_detail("%d rounds, the mode that runs first rotating each round; "
               "each mode opens its own loop and sessions; median [min–max] "
               "over rounds; wait = commit made the event readable -> driver "
               "has it (CLOCK_MONOTONIC)\n",
               p->rounds);
    lab_detail("reference: the polling pump as first measured, 12 sessions on "
               "a JavaScript "
               "runtime (state reads there copied the window; here a read "
               "is indexed)\n");
}

/* ------------------------------------------------------- short, verdict */

/* The figures the polling pump was first judged by (wakeups, the p99 and
 * the terminal event's wait: --verbose's table and the verdict). */
static void brief(const lab_fig *main_f) {
    /* "ms timers" beside "ns timers": the polling pump's runtime rounded
     * its timers to whole milliseconds (the verbose legend's "1 ms grid",
     * a word the short output never defined). */
    const char *header[] = {"figure, 12 sessions", "poll, ms timers",
                            "poll, ns timers", "notify",
                            "first: before → after"};
    static const struct {
        const char *what, *ref;
        int v;
    } rows[] = {
        {"idle reads / session / s", "364 → 0", PV_READS},
        /* Plain words: the demo never says what a window is (the
         * session's committed events, 49 of them kept after delivery). */
        {"idle CPU ms / s, 49 events kept", "12.8 → 0.05", PV_CPU_SMALL},
        {"delivery wait p50, µs", "3160 → 830", PV_P50},
    };
    lab_table t;
    lab_table_init(&t, 5, header);
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        int r = lab_table_row(&t);
        lab_table_set(&t, r, 0, "%s", rows[k].what);
        for (int m = 0; m < MODES; m++) {
            char buf[LAB_CELL];
            lab_table_set(&t, r, 1 + m, "%s",
                          lab_fmt(buf, med(main_f, m, rows[k].v)));
        }
        lab_table_set(&t, r, 4, "%s", rows[k].ref);
    }
    lab_table_brief(&t, NULL);
}

static void verdict(const lab_fig *f) {
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL], d[LAB_CELL];
    const lab_row *n = &f->rows[MODE_NOTIFY], *g = &f->rows[MODE_POLL_GRID];
    double p50 = lab_row_median(n, PV_P50), p99 = lab_row_median(n, PV_P99);
    lab_verdict *v = lab_verdict_add("C4", 0);
    if (v) {
        v->timing = true;
        snprintf(v->what, sizeof v->what, "wait p50 %s, p99 %s µs",
                 lab_fmt3(a, p50), lab_fmt3(b, p99));
        snprintf(v->target, sizeof v->target, "≤ 5, ≤ 50 µs");
        (void)c; /* lull against lull: its 5 ms poll */
        snprintf(v->peer, sizeof v->peer, "lull poll %s",
                 lab_fmt_ratio(d, lab_ratio(f, n, g, PV_P50)));
        /* Every row is lull's: no floor or peer to tell noise by. */
        lab_verdict_bound(v, p50, 5, true);
        lab_verdict_bound(v, p99, 50, true);
    }
    /* C8: every idle wakeup of the poll mode attributed to a source. */
    const lab_row *pl = &f->rows[MODE_POLL];
    double named = 0, counted = 0;
    for (int i = 0; i < pl->v[PV_AUDIT_WAKEUPS].n; i++) {
        named += pl->v[PV_AUDIT_WAKEUPS].v[i];
        counted += pl->v[PV_METRIC_WAKEUPS].v[i];
    }
    if ((v = lab_verdict_add("C8", 0)) && counted > 0) {
        snprintf(v->what, sizeof v->what, "%.0f of %.0f wakeups named", named,
                 counted);
        snprintf(v->target, sizeof v->target, "all named");
        snprintf(v->peer, sizeof v->peer, "–");
        lab_verdict_judge(v, named == counted);
    }
    double r0 = lab_row_median(g, PV_READS), r1 = lab_row_median(n, PV_READS);
    double w0 = lab_row_median(g, PV_P50);
    double c0 = lab_row_median(g, PV_CPU_SMALL),
           c1 = lab_row_median(n, PV_CPU_SMALL);
    if ((v = lab_verdict_add("pump", 0))) {
        v->timing = true;
        snprintf(v->what, sizeof v->what, "reads %s→%s/s, p50 %s→%s µs",
                 lab_fmt3(a, r0), lab_fmt3(b, r1), lab_fmt3(c, w0),
                 lab_fmt3(d, p50));
        snprintf(v->target, sizeof v->target, "364→0, 3160→830");
        snprintf(v->peer, sizeof v->peer, "CPU %s→%s ms/s", lab_fmt3(a, c0),
                 lab_fmt3(b, c1));
        lab_verdict_judge(v, r1 == 0 && r0 > 0 && p50 < w0 && c1 < c0);
    }
}

static int run_pump(const lab_options *opts, lab_json *json) {
    params p;
    pump_set_params(opts, &p);
    if (opts->only && strcmp(opts->only, "journal") == 0)
        return pump_run_journal(opts, &p, json);
    print_legend(&p);
    if (json) json_params(json, &p);

    static pctx main_c, scale_c[2];
    lab_fig *main_f =
        run_size(opts, &p, p.sessions, p.rounds, p.idle_ns, true, &main_c);
    if (!main_f) return -ENOMEM;
    int rc = lab_fig_error(main_f);
    if (rc < 0) {
        lab_fig_free(main_f);
        return rc;
    }
    print_main(&p, main_f);
    plot_main(opts->plot, &p, main_f);
    note_incomplete(&main_c);
    print_audit(&main_c);
    lab_detail("  target (notify): 0 idle reads and wakeups; idle CPU < 0.1 "
               "ms/s; wait p50 ≤ 5 µs, p99 ≤ 50 µs\n");
    lab_fig_json(main_f, json);

    lab_detail("\nscale: how each mode's cost grows with sessions (%d "
               "round%s; idle window %.1f s; %d-event window)\n",
               p.scale_rounds, p.scale_rounds == 1 ? "" : "s",
               (double)p.scale_idle_ns / 1e9, p.retain_small);
    const char *header[] = {"sessions, mode", "reads/session/s", "idle util %",
                            "idle CPU ms/s",  "wakeups/s",       "wait p50 µs",
                            "wait p99 µs",    "terminal p50 µs"};
    lab_table t;
    lab_table_init(&t, 8, header);
    scale_rows(&t, main_f, p.sessions);
    lab_fig *scale_f[2] = {NULL, NULL};
    for (int k = 0; k < 2 && rc == 0; k++) {
        scale_f[k] = run_size(opts, &p, p.scale[k], p.scale_rounds,
                              p.scale_idle_ns, false, &scale_c[k]);
        if (!scale_f[k]) rc = -ENOMEM;
        if (rc == 0 && (rc = lab_fig_error(scale_f[k])) < 0)
            lab_detail("  %d sessions: failed: %s\n", p.scale[k],
                       strerror(-rc));
        if (rc < 0) break;
        scale_rows(&t, scale_f[k], p.scale[k]);
        note_incomplete(&scale_c[k]);
        char key[32];
        snprintf(key, sizeof key, "scale_%d", p.scale[k]);
        scale_f[k]->key = key;
        lab_fig_json(scale_f[k], json);
    }
    lab_table_detail(&t);
    brief(main_f);
    verdict(main_f);
    lab_fig_free(main_f);
    for (int k = 0; k < 2; k++)
        lab_fig_free(scale_f[k]);
    if (rc < 0) return rc;
    return opts->journal ? pump_run_journal(opts, &p, json) : 0;
}

/* --only: the journal variant alone. */
static const char *const pump_only[] = {"journal", NULL};

const lab_scenario lab_pump = {
    "pump",
    "the polling pump: a delivery pump polling every 5 ms vs one woken by "
    "notification, over committed-event windows",
    run_pump,
    "pump: the polling pump, a delivery pump polling every 5 ms, vs one woken "
    "by "
    "notification",
    "C4 C8 pump",
    NULL,
    false,
    pump_only,
};
