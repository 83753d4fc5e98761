/* What the `turns` figures are judged by (lab/turns_report.h): the notes
 * under each table (like for like, ratios to the floors, sched_yield
 * spins), the scenario's short table and its verdict lines. */
#include "turns_report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* lull's task chain, ns/hop, for (2)'s target; NaN until (1) ran. */
static double lull_task_ns = NAN;

/* lull's every-hop row ÷ the floor's (no loop: epoll_wait(0) and one
 * indirect call per hop), round by round, as median [min–max]. */
static void hop_floor_check(const lab_fig *fig) {
    const lab_row *e = lab_fig_base(fig, TURNS_CLASS_EVERY_HOP);
    const lab_row *fl = lab_fig_find(fig, "floor", "epoll_wait(0)");
    if (!e || !fl) return;
    lab_series r =
        lab_series_ratios(&e->v[CHAIN_NS_PER_HOP], &fl->v[CHAIN_NS_PER_HOP]);
    if (!r.n) return;
    lab_detail("  lull every hop ÷ the floor, round by round: %.3f [%.3f–%.3f] "
               "(target ≤ 1.05)\n",
               lab_series_median(&r), lab_series_min(&r), lab_series_max(&r));
}

/* Like for like in the chains: lull's row beside the cheapest peer row
 * that checks I/O the same way. */
static void chain_checks(const lab_fig *fig, int f) {
    static const char *const policy[TURNS_CLASSES] = {
        [TURNS_CLASS_QUANTUM] = "I/O every 0.5 ms",
        [TURNS_CLASS_EVERY_HOP] = "I/O every hop",
    };
    lab_detail("  like for like, ns/hop (× = the peer's ÷ lull's; > 1: lull "
               "cheaper):\n");
    for (int cls = 0; cls < TURNS_CLASSES; cls++) {
        const lab_row *b = lab_fig_base(fig, cls);
        if (!b) continue;
        const lab_row *best = lab_fig_best_peer(fig, cls, CHAIN_NS_PER_HOP);
        double lull = lab_row_median(b, CHAIN_NS_PER_HOP);
        char a[LAB_CELL], c[LAB_CELL];
        if (!best) {
            lab_detail("    %s: lull %s; no peer row runs this policy\n",
                       policy[cls], lab_fmt(a, lull));
            continue;
        }
        double peer = lab_row_median(best, CHAIN_NS_PER_HOP);
        lab_detail("    %s: lull %s, cheapest peer %s (%s): %.2f×\n",
                   policy[cls], lab_fmt(a, lull), lab_fmt(c, peer), best->label,
                   peer / lull);
    }
    hop_floor_check(fig);
    const lab_row *q = lab_fig_base(fig, TURNS_CLASS_QUANTUM);
    const lab_row *e = lab_fig_base(fig, TURNS_CLASS_EVERY_HOP);
    double dq = lab_row_median(q, CHAIN_NS_PER_HOP);
    double de = lab_row_median(e, CHAIN_NS_PER_HOP);
    char a[LAB_CELL], c[LAB_CELL];
    if (isfinite(dq) && isfinite(de))
        lab_detail(
            "  lull's default policy saves: %s ns/hop checking I/O every "
            "hop ÷ %s by default = %.3g×\n",
            lab_fmt(a, de), lab_fmt(c, dq), de / dq);
    for (int i = 0; i < fig->nrows; i++)
        if (fig->rows[i].cls == TURNS_CLASS_NO_POLL)
            lab_detail(
                "  %s checks no I/O between hops; its ratio is to lull's "
                "default row, which does\n",
                fig->rows[i].label);
    if (f == TURNS_CHAIN_TASK) {
        lull_task_ns = dq;
    } else if (isfinite(lull_task_ns) && isfinite(dq)) {
        lab_detail("  lull's zero-delay timer ÷ its posted task: %.3g×\n",
                   dq / lull_task_ns);
    }
    const lab_row *uv = lab_fig_find(fig, NULL, "libuv: uv_timer_start(0)");
    if (f == TURNS_CHAIN_TIMER0 && uv)
        lab_detail(
            "  note: libuv 1.44 runs a timer armed from a timer callback "
            "again in the same iteration, without polling I/O (a "
            "starvation bug of that version)\n");
}

/* l's col ÷ the floor's, by the median of their round-by-round ratios
 * (a round's machine is the same for both), as the verdict's floor lines
 * judge; NAN without both or with no round in common. */
static double ratio_to_floor(const lab_row *l, const lab_row *fl, int col) {
    if (!l || !fl) return NAN;
    return lab_series_ratio_median(&l->v[col], &fl->v[col]);
}

/* Row r's 1 ms p99 ÷ another's (the floor's): ratio_to_floor, or the ratio
 * of their medians when they share no round. */
static double late_over_floor(const lab_row *r, const lab_row *floor) {
    double x = ratio_to_floor(r, floor, LATE_P99_US);
    if (isfinite(x)) return x;
    return lab_row_median(r, LATE_P99_US) / lab_row_median(floor, LATE_P99_US);
}

/* lull's p99 against another row's of the same rounds: the median of the
 * round-by-round ratios (the figure the verdict's floor line judges), the
 * ratio of the medians beside it, and the rounds lull was lower in, with
 * a sign test (a p99 moves from round to round with the machine; a
 * difference between two rows shows, if there is one, as one lower in
 * most rounds). */
static void p99_against(const lab_row *l, const lab_row *r,
                        const char *target) {
    int n, k = lab_series_below(&l->v[LATE_P99_US], &r->v[LATE_P99_US], &n);
    lab_detail("  lull's p99 ÷ %s's, round by round: %.3g%s (ratio of "
               "medians %.3g); lull lower in %d of %d rounds (sign test p = "
               "%.2g)\n",
               r->label, late_over_floor(l, r), target,
               lab_row_median(l, LATE_P99_US) / lab_row_median(r, LATE_P99_US),
               k, n, lab_sign_test_p(k, n));
}

static void lateness_checks(const lab_fig *fig) {
    const lab_row *lull = lab_fig_base(fig, 0);
    const lab_row *sleep = lab_fig_find(fig, "floor", "clock_nanosleep");
    const lab_row *epoll = lab_fig_find(fig, "floor", "epoll_pwait2");
    if (!lull) return;
    if (sleep) p99_against(lull, sleep, " (target ≤ 1.1)");
    if (epoll) p99_against(lull, epoll, "");
    if (lull->v[LATE_MIN_US].n)
        lab_detail("  lull's earliest fire over the rounds: %.3g µs (< 0: it "
                   "fired early)\n",
                   lab_series_min(&lull->v[LATE_MIN_US]));
}

static void trip_checks(const lab_fig *fig, int f) {
    if (f == TURNS_ROUNDTRIP_2CPU && lab_fig_find(fig, "node", ""))
        lab_detail("  node's threads are not pinned: the scheduler may keep "
                   "both on one CPU, so its row is not a two-CPU figure\n");
    const lab_row *futex = lab_fig_find(fig, "floor", "futex");
    const lab_row *efd = lab_fig_find(fig, "floor", "eventfd");
    const lab_row *lf = lab_fig_find(fig, "lull", "futex sleep");
    const lab_row *le = lab_fig_find(fig, "lull", "epoll sleep");
    if (f == TURNS_ROUNDTRIP && lf && futex)
        lab_detail("  lull (futex sleep) ÷ futex floor: %.3g (target ≤ 1.2)\n",
                   lab_row_median(lf, TRIP_P50_US) /
                       lab_row_median(futex, TRIP_P50_US));
    if (le && efd)
        lab_detail("  lull (epoll sleep) ÷ eventfd+epoll floor: %.3g\n",
                   lab_row_median(le, TRIP_P50_US) /
                       lab_row_median(efd, TRIP_P50_US));
    for (int i = 0; i < fig->nrows; i++) {
        double y = lab_row_median(&fig->rows[i], TRIP_YIELDS);
        if (!(y > 0.1)) continue;
        lab_detail("  %s: %.2g sched_yield per trip: a spin-wait inside the "
                   "library\n",
                   fig->rows[i].label, y);
        if (strcmp(fig->rows[i].peer, "libuv") == 0 && f == TURNS_ROUNDTRIP)
            lab_detail(
                "    libuv 1.44: uv_async_send's eventfd write wakes the "
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

/* Measured here, after the timers figure; lab/turns.c writes it into
 * that figure's JSON. */
double turns_clock_ns = NAN;

bool turns_is_trip(int f) {
    return f == TURNS_ROUNDTRIP || f == TURNS_ROUNDTRIP_2CPU;
}

static void timer_checks(const lab_fig *fig) {
    const lab_row *lull = lab_fig_base(fig, 0);
    const lab_row *ev = NULL;
    for (int i = 0; i < fig->nrows; i++)
        if (strcmp(fig->rows[i].peer, "libev") == 0) ev = &fig->rows[i];
    const lab_row *so = lab_fig_find(fig, "lull.so", "lull");
    turns_clock_ns = clock_read_ns();
    if (lull && ev && lull->v[TIMERS_STEADY_NS].n &&
        ev->v[TIMERS_STEADY_NS].n) {
        int kl = lab_series_median_index(&lull->v[TIMERS_STEADY_NS]);
        int ke = lab_series_median_index(&ev->v[TIMERS_STEADY_NS]);
        lab_detail("  lull ÷ libev, steady arm+cancel: %.3g (arm %.3g vs %.3g "
                   "ns, cancel %.3g vs %.3g)\n",
                   lab_row_median(lull, TIMERS_STEADY_NS) /
                       lab_row_median(ev, TIMERS_STEADY_NS),
                   lull->v[TIMERS_ARM_NS].v[kl], ev->v[TIMERS_ARM_NS].v[ke],
                   lull->v[TIMERS_CANCEL_NS].v[kl],
                   ev->v[TIMERS_CANCEL_NS].v[ke]);
        lab_detail("    lull's row arms from callbacks, as a running program "
                   "does: such an arm reads no clock and counts its delay "
                   "from the loop's next reading (never early); outside any "
                   "run every lull arm reads CLOCK_MONOTONIC, %.3g ns here "
                   "(the row below it); libev's ev_timer_start adds the delay "
                   "to its cached ev_now() in both cases and reads no clock\n",
                   turns_clock_ns);
    }
    if (lull && so)
        lab_detail("  lull linked shared ÷ static, steady arm+cancel: %.3g\n",
                   lab_row_median(so, TIMERS_STEADY_NS) /
                       lab_row_median(lull, TIMERS_STEADY_NS));
}

/* Idle: lull's sockets-and-timers row against every peer's, per handle
 * (the rows hold the same handles, so this is the CPU µs/s ratio too). */
static void idle_checks(const lab_fig *fig) {
    const lab_row *l = lab_fig_find(fig, "lull", NULL);
    double lv = lab_row_median(l, IDLE_NS_PER_HANDLE);
    if (!isfinite(lv)) return;
    for (int i = 0; i < fig->nrows; i++) {
        const lab_row *r = &fig->rows[i];
        if (r->flags & LAB_ROW_LULL) continue;
        double v = lab_row_median(r, IDLE_NS_PER_HANDLE);
        if (!isfinite(v)) continue;
        if (r->flags & LAB_ROW_FLOOR)
            lab_detail("  lull ÷ %s, CPU per handle, round by round: %.3g "
                       "(ratio of medians %.3g)\n",
                       r->label, ratio_to_floor(l, r, IDLE_NS_PER_HANDLE),
                       lv / v);
        else
            lab_detail("  lull ÷ %s, CPU per handle: %.3g (target ≤ 1)\n",
                       r->label, lv / v);
    }
}

/* Beside the hogs: lull's p99 against every other row's, same rounds. */
static void busy_checks(const lab_fig *fig) {
    const lab_row *l = lab_fig_find(fig, "lull", NULL);
    if (!isfinite(lab_row_median(l, LATE_P99_US))) return;
    for (int i = 0; i < fig->nrows; i++) {
        const lab_row *r = &fig->rows[i];
        if ((r->flags & LAB_ROW_LULL) ||
            !isfinite(lab_row_median(r, LATE_P99_US)))
            continue;
        p99_against(l, r, (r->flags & LAB_ROW_FLOOR) ? "" : " (target ≤ 1)");
    }
    if (l->v[LATE_MIN_US].n)
        lab_detail("  lull's earliest firing: %+.1f µs\n",
                   lab_series_min(&l->v[LATE_MIN_US]));
}

void turns_report_figure(const lab_fig *fig, int f, const turns_params *p) {
    (void)p;
    if (f == TURNS_CHAIN_TASK || f == TURNS_CHAIN_TIMER0) {
        lab_detail("  × : the row's ns/hop ÷ lull's with the same I/O policy "
                   "(or lull's default row, for rows that check none)\n");
        chain_checks(fig, f);
    } else if (f == TURNS_LATENESS) {
        lateness_checks(fig);
    } else if (turns_is_trip(f)) {
        lab_detail("  × : the row's p50 ÷ lull's whose loops sleep in epoll, "
                   "as the peers' do\n");
        trip_checks(fig, f);
    } else if (f == TURNS_TIMERS) {
        timer_checks(fig);
    } else if (f == TURNS_IDLE) {
        idle_checks(fig);
    } else if (f == TURNS_LATENESS_BUSY) {
        busy_checks(fig);
    }
}

/* --------------------------------------------------------- short table */

/* "libevent 45.70": a row's peer and its median, or "–". */
static const char *peer_cell(char *buf, const lab_row *r, int col) {
    char v[LAB_CELL];
    if (!r || !isfinite(lab_row_median(r, col))) return "–";
    snprintf(buf, LAB_CELL, "%s %s", r->peer,
             lab_fmt(v, lab_row_median(r, col)));
    return buf;
}

/* A peer's figure as the verdict's "compared with" cell gives it, in
 * three significant digits: its name and its median, written by fmt. Bare
 * (fmt_plain) where lull's cell beside it shows the figure in its unit;
 * with its unit (lab_fmt_ns, lab_fmt_us) where lull's cell is a ratio, so
 * that a newcomer reads "node 1.10 ms", not "node 1103235" beside
 * "zero-delay timer 1.07× a task". */
typedef const char *(*cell_fmt)(char *buf, double v);

/* The bare figure, where lull's cell beside it shows the unit. */
static const char *fmt_plain(char *buf, double v) {
    return lab_fmt3(buf, v);
}

static const char *peer_cell3(char *buf, const lab_row *r, int col,
                              cell_fmt fmt) {
    char v[LAB_CELL];
    if (!r || !isfinite(lab_row_median(r, col))) return "–";
    snprintf(buf, LAB_CELL, "%.20s %.40s", r->peer,
             fmt(v, lab_row_median(r, col)));
    return buf;
}

/* The idle figure's handle count as its labels say it: its sockets and
 * the timer beside each, "20k" for 10,000 sockets, or twice the smaller
 * count a low RLIMIT_NOFILE left (it measured that many, not 20k). The
 * figure is per handle of both, so the count is too: the short table's
 * per-handle figure times it is C1's CPU. */
static const char *idle_count(char buf[16]) {
    if (turns_idle_handles == 10000)
        snprintf(buf, 16, "20k");
    else
        snprintf(buf, 16, "%d", 2 * turns_idle_handles);
    return buf;
}

/* One line of the short table: the figure, lull's median with its unit,
 * the best peer of the same class, its ×, and a floor when there is one. */
/* The floor's ×, per round (the header says so, and LAB_WORDS_RULE what
 * that is): the median of the rounds' own ratios, which the verdict's
 * floor lines judge; with no round in common, the ratio of medians. */
static void brief_row(lab_table *t, const char *what, const lab_fig *fig,
                      const lab_row *lull, const lab_row *peer,
                      const lab_row *floor, int col, const char *unit) {
    if (!fig || !lull) return;
    int r = lab_table_row(t);
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL], d[LAB_CELL];
    lab_table_set(t, r, 0, "%s", what);
    lab_table_set(t, r, 1, "%s %s", lab_fmt(a, lab_row_median(lull, col)),
                  unit);
    lab_table_set(t, r, 2, "%s", peer_cell(b, peer, col));
    lab_table_set(t, r, 3, "%s",
                  lab_fmt_ratio(c, lab_ratio(fig, lull, peer, col)));
    double floor_x = 1 / ratio_to_floor(lull, floor, col);
    if (floor)
        lab_table_set(t, r, 4, "%s %s", lab_fmt(d, lab_row_median(floor, col)),
                      lab_fmt_ratio(c, isfinite(floor_x)
                                           ? floor_x
                                           : lab_ratio(fig, lull, floor, col)));
}

/* A lateness row at the lab's common slack (not a default-slack one). */
static lab_row *best_late_peer(const lab_fig *fig) {
    return lab_fig_best_peer(fig, 0, LATE_P99_US);
}

/* One row a figure, where a peer runs beside lull (the demo fits 80
 * lines): lull's default policy (I/O every 0.5 ms) and the zero-delay
 * timer are the verdict's C2 and C3 lines; the one-CPU trip, --verbose. */
static void brief(lab_fig *const figs[TURNS_FIGURES]) {
    const char *header[] = {"figure", "lull", "best peer, same policy", "×",
                            "floor, × per round"};
    lab_table t;
    lab_table_init(&t, 5, header);
    const lab_fig *f = figs[TURNS_CHAIN_TASK];
    if (f) {
        const lab_row *e = lab_fig_base(f, TURNS_CLASS_EVERY_HOP);
        const lab_row *fl = lab_fig_find(f, "floor", "epoll_wait(0)");
        brief_row(&t, "posted task, I/O every hop", f, e,
                  lab_fig_best_peer(f, TURNS_CLASS_EVERY_HOP, CHAIN_NS_PER_HOP),
                  fl, CHAIN_NS_PER_HOP, "ns");
    }
    if ((f = figs[TURNS_LATENESS])) {
        const lab_row *l = lab_fig_base(f, 0);
        const lab_row *fl = lab_fig_find(f, "floor", "nanosleep");
        brief_row(&t, "1 ms timer lateness p99", f, l, best_late_peer(f), fl,
                  LATE_P99_US, "µs");
    }
    if ((f = figs[TURNS_LATENESS_BUSY])) {
        const lab_row *l = lab_fig_base(f, 0);
        const lab_row *fl = lab_fig_find(f, "floor", "nanosleep");
        brief_row(&t, "1 ms p99 beside CPU hogs", f, l,
                  lab_fig_best_peer(f, 0, LATE_P99_US), fl, LATE_P99_US, "µs");
    }
    if ((f = figs[TURNS_IDLE])) {
        lab_row *l = lab_fig_find(f, "lull", NULL);
        const lab_row *fl = lab_fig_find(f, "floor", "epoll_wait");
        char label[48], count[16];
        snprintf(label, sizeof label, "idle CPU per handle, %s",
                 idle_count(count));
        brief_row(&t, label, f, l, lab_fig_best_peer(f, 0, IDLE_NS_PER_HANDLE),
                  fl, IDLE_NS_PER_HANDLE, "ns/s");
    }
    if ((f = figs[TURNS_ROUNDTRIP_2CPU])) {
        const lab_row *l = lab_fig_base(f, 0);
        const lab_row *fl = lab_fig_find(f, "floor", "eventfd");
        brief_row(&t, "cross-thread trip p50, 2 CPUs", f, l,
                  lab_fig_best_peer(f, 0, TRIP_P50_US), fl, TRIP_P50_US, "µs");
    }
    if ((f = figs[TURNS_TIMERS]))
        brief_row(&t, "arm+cancel, 10^6 timers armed", f, lab_fig_base(f, 0),
                  lab_fig_best_peer(f, 0, TIMERS_STEADY_NS), NULL,
                  TIMERS_STEADY_NS, "ns");
    if (t.rows > 1) lab_table_brief(&t, NULL);
}

/* ------------------------------------------------------------- verdict */

static void verdict_quiet(const lab_fig *f) {
    lab_row *l = lab_fig_find(f, "lull", NULL);
    lab_verdict *v = lab_verdict_add("C1", 0);
    if (!v || !l) return;
    double w = lab_row_median(l, IDLE_WAKEUPS);
    double cpu = lab_row_median(l, IDLE_CPU_US_PER_S);
    char a[LAB_CELL], b[LAB_CELL];
    v->timing = true;
    char count[16];
    char wake[LAB_CELL] = "–"; /* a count: no decimals, unless missing */
    if (isfinite(w)) snprintf(wake, sizeof wake, "%.0f", w);
    snprintf(v->what, sizeof v->what, "%s idle: %s wakeup, %s µs/s",
             idle_count(count), wake, lab_fmt3(b, cpu));
    snprintf(v->target, sizeof v->target, "≤ 1, < 100 µs/s");
    lab_row *p = lab_fig_best_peer(f, 0, IDLE_CPU_US_PER_S);
    if (p)
        snprintf(v->peer, sizeof v->peer, "%s %s",
                 peer_cell3(a, p, IDLE_CPU_US_PER_S, fmt_plain),
                 lab_fmt_ratio(b, lab_ratio(f, l, p, IDLE_CPU_US_PER_S)));
    /* The wakeups first, with no evidence: a count's miss is never noise.
     * The peer's spread is the evidence for the CPU bound after it. */
    lab_verdict_bound(v, w, 1, true);
    if (p) {
        char what[64];
        snprintf(what, sizeof what, "%s's idle CPU", p->peer);
        lab_verdict_spread(v, what, lab_row_spread(p, IDLE_CPU_US_PER_S));
    }
    lab_verdict_bound(v, cpu, 100, true);
}

/* lull's row of class cls against the best peer of that class. */
static void verdict_peer(lab_verdict *v, const lab_fig *f, const lab_row *l,
                         const lab_row *p, int col, cell_fmt fmt) {
    char a[LAB_CELL], b[LAB_CELL];
    if (!p) {
        snprintf(v->peer, sizeof v->peer, "none at this policy");
        return;
    }
    snprintf(v->peer, sizeof v->peer, "%s %s", peer_cell3(a, p, col, fmt),
             lab_fmt_ratio(b, lab_ratio(f, l, p, col)));
    char what[64];
    snprintf(what, sizeof what, "%s's row", p->peer);
    lab_verdict_spread(v, what, lab_row_spread(p, col));
}

static void verdict_turns(const lab_fig *task, const lab_fig *timer0) {
    char a[LAB_CELL];
    if (task) {
        /* Against the best peer at the same policy: lull's default (I/O
         * every 0.5 ms) when a peer runs it, else I/O every hop, the
         * policy every peer has. */
        int cls = TURNS_CLASS_QUANTUM;
        lab_row *p = lab_fig_best_peer(task, cls, CHAIN_NS_PER_HOP);
        if (!p) {
            cls = TURNS_CLASS_EVERY_HOP;
            p = lab_fig_best_peer(task, cls, CHAIN_NS_PER_HOP);
        }
        lab_row *l = lab_fig_base(task, cls);
        lab_verdict *v = lab_verdict_add("C2", 0);
        if (v && l) {
            v->timing = true;
            snprintf(v->what, sizeof v->what, "task %s ns a hop, I/O %s",
                     lab_fmt3(a, lab_row_median(l, CHAIN_NS_PER_HOP)),
                     cls == TURNS_CLASS_QUANTUM ? "0.5 ms" : "a hop");
            snprintf(v->target, sizeof v->target, "< best peer");
            verdict_peer(v, task, l, p, CHAIN_NS_PER_HOP, fmt_plain);
            if (p)
                lab_verdict_bound(v, lab_row_median(l, CHAIN_NS_PER_HOP),
                                  lab_row_median(p, CHAIN_NS_PER_HOP), true);
            else
                snprintf(v->note, sizeof v->note, "no peer ran");
        }
    }
    if (task && timer0) {
        lab_row *lt = lab_fig_base(task, TURNS_CLASS_QUANTUM);
        lab_row *l0 = lab_fig_base(timer0, TURNS_CLASS_QUANTUM);
        lab_row *e0 = lab_fig_base(timer0, TURNS_CLASS_EVERY_HOP);
        lab_verdict *v = lab_verdict_add("C3", 0);
        if (v && lt && l0) {
            double x = lab_row_median(l0, CHAIN_NS_PER_HOP) /
                       lab_row_median(lt, CHAIN_NS_PER_HOP);
            v->timing = true;
            snprintf(v->what, sizeof v->what, "zero-delay timer %s× a task",
                     lab_fmt3(a, x));
            snprintf(v->target, sizeof v->target, "≤ 1.5× a task");
            if (e0)
                verdict_peer(v, timer0, e0,
                             lab_fig_best_peer(timer0, TURNS_CLASS_EVERY_HOP,
                                               CHAIN_NS_PER_HOP),
                             CHAIN_NS_PER_HOP, lab_fmt_ns);
            lab_verdict_bound(v, x, 1.5, true);
        }
    }
}

static void verdict_lateness(const lab_fig *f) {
    lab_row *l = lab_fig_base(f, 0);
    lab_row *floor = lab_fig_find(f, "floor", "nanosleep");
    lab_verdict *v = lab_verdict_add("C3", 1);
    if (!v || !l || !floor) return;
    double x = late_over_floor(l, floor);
    double early = lab_series_min(&l->v[LATE_MIN_US]);
    char a[LAB_CELL], b[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "1 ms p99 %s = %s× floor%s",
             lab_fmt_us(a, lab_row_median(l, LATE_P99_US)), lab_fmt3(b, x),
             early < 0 ? ", early" : "");
    snprintf(v->target, sizeof v->target, "≤ 1.1× floor");
    const lab_row *p = best_late_peer(f);
    verdict_peer(v, f, l, p, LATE_P99_US, fmt_plain);
    lab_verdict_spread(v, "the floor's p99",
                       lab_row_spread(floor, LATE_P99_US));
    /* A peer within the bound in the same rounds: the machine allowed it. */
    if (p && late_over_floor(p, floor) <= 1.1) lab_verdict_peer_met(v, p->peer);
    lab_verdict_bound(v, x, 1.1, true);
    if (early < 0) { /* a timer early is a plain miss, whatever the noise */
        lab_verdict_judge(v, false);
        v->unexplained = true;
    }
}

/* Full runs only: idle CPU per handle, every row holding as many sockets
 * and timers, against the cheapest peer's; floor-bound where lull is at the
 * loop-less floor, asleep on the same sockets, and the floor is above that
 * peer too (every row is then the kernel's one wake-up, and the order
 * among them is chance). */
static void verdict_idle_peers(const lab_fig *f) {
    lab_row *l = lab_fig_find(f, "lull", NULL);
    lab_row *p = lab_fig_best_peer(f, 0, IDLE_NS_PER_HANDLE);
    double lv = lab_row_median(l, IDLE_NS_PER_HANDLE);
    lab_verdict *v = isfinite(lv) && p ? lab_verdict_add("C1", 1) : NULL;
    if (!v) return;
    char a[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "idle CPU per handle %s ns/s",
             lab_fmt3(a, lv));
    snprintf(v->target, sizeof v->target, "≤ every peer");
    verdict_peer(v, f, l, p, IDLE_NS_PER_HANDLE, fmt_plain);
    double pv = lab_row_median(p, IDLE_NS_PER_HANDLE);
    const lab_row *fl = lab_fig_find(f, "floor", "epoll_wait");
    double fv = lab_row_median(fl, IDLE_NS_PER_HANDLE);
    /* lull more than 5% above the floor, round by round (the every-hop
     * turn's tolerance), is beyond it whatever the floor did. */
    if (!isfinite(fv) || !(ratio_to_floor(l, fl, IDLE_NS_PER_HANDLE) <= 1.05)) {
        lab_verdict_bound(v, lv, pv, true);
        return;
    }
    char restated[48];
    snprintf(restated, sizeof restated, "≤ %.2f× floor", pv / fv);
    lab_verdict_bound_floor(v, lv, pv, true, fv, restated);
}

/* A full-run line (the demo's verdict keeps to one line a contract part
 * it always had) of C2 judging lull's row l against the loop-less floor fl
 * doing the same, by the median of their round-by-round ratios; the peer
 * cell is the best peer against lull's row `base`. */
static void verdict_floor_ratio(const lab_fig *f, int part, const lab_row *l,
                                const lab_row *fl, const lab_row *base,
                                const lab_row *peer, int col, cell_fmt fmt,
                                const char *what, double bound) {
    if (!l || !fl) return;
    lab_series r = lab_series_ratios(&l->v[col], &fl->v[col]);
    lab_verdict *v = r.n ? lab_verdict_add("C2", part) : NULL;
    if (!v) return;
    double x = lab_series_median(&r);
    char a[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "%s: %s× floor", what, lab_fmt3(a, x));
    snprintf(v->target, sizeof v->target, "≤ %g× floor", bound);
    verdict_peer(v, f, base, peer, col, fmt);
    /* The evidence is the floor's own spread: the ratio's spread is
     * lull's figure moving, the miss itself, not noise beside it. */
    lab_verdict_spread(v, "the floor", lab_row_spread(fl, col));
    lab_verdict_bound(v, x, bound, true);
}

/* lull checking I/O every hop against epoll_wait(0) and a call a hop. */
static void verdict_every_hop(const lab_fig *f) {
    const lab_row *e = lab_fig_base(f, TURNS_CLASS_EVERY_HOP);
    verdict_floor_ratio(
        f, 1, e, lab_fig_find(f, "floor", "epoll_wait(0)"), e,
        lab_fig_best_peer(f, TURNS_CLASS_EVERY_HOP, CHAIN_NS_PER_HOP),
        CHAIN_NS_PER_HOP, lab_fmt_ns, "I/O every hop", 1.05);
}

/* The cross-thread round trip on one CPU, lull's loops sleeping on a
 * futex as the floor's threads do. */
static void verdict_cross_thread(const lab_fig *f) {
    verdict_floor_ratio(f, 2, lab_fig_find(f, "lull", "futex sleep"),
                        lab_fig_find(f, "floor", "futex"), lab_fig_base(f, 0),
                        lab_fig_best_peer(f, 0, TRIP_P50_US), TRIP_P50_US,
                        lab_fmt_us, "cross-thread trip", 1.1);
}

/* Full runs only (the figure needs seconds of hogs): lull's 1 ms p99
 * beside CPU hogs against the best peer's at the same slack. */
static void verdict_busy(const lab_fig *f) {
    lab_row *l = lab_fig_base(f, 0);
    lab_row *p = lab_fig_best_peer(f, 0, LATE_P99_US);
    lab_row *floor = lab_fig_find(f, "floor", "nanosleep");
    lab_verdict *v = l ? lab_verdict_add("C3", 2) : NULL;
    if (!v) return;
    double lv = lab_row_median(l, LATE_P99_US);
    char a[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "beside CPU hogs: p99 %s",
             lab_fmt_us(a, lv));
    snprintf(v->target, sizeof v->target, "≤ every peer");
    verdict_peer(v, f, l, p, LATE_P99_US, fmt_plain);
    if (floor)
        lab_verdict_spread(v, "the floor's p99",
                           lab_row_spread(floor, LATE_P99_US));
    if (p)
        lab_verdict_bound(v, lv, lab_row_median(p, LATE_P99_US), true);
    else
        snprintf(v->note, sizeof v->note, "no peer ran");
}

/* Full runs only: how late a ~1 µs task's delayed arms start counting at
 * p99.9, its first arm (a clock reading) and its deferred second, the
 * worse of the two; no peer defers an arm. */
static void verdict_arm_delay(const lab_fig *f) {
    lab_row *first = lab_fig_find(f, "lull", "one arm per ~1 µs task");
    lab_row *second = lab_fig_find(f, "lull", "second arm");
    if (!first || !second) return;
    double x = lab_row_median(first, ARM_P999_NS);
    double y = lab_row_median(second, ARM_P999_NS);
    if (!isfinite(x) && !isfinite(y)) return;
    /* The worse of the two, so NaN (a miss, never met) when one of them
     * was not measured. */
    double w = isfinite(x) && isfinite(y) ? fmax(x, y) : NAN;
    lab_verdict *v = lab_verdict_add("C3", 3);
    if (!v) return;
    char a[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "arm start p99.9: %s µs late",
             lab_fmt3(a, w / 1e3));
    snprintf(v->target, sizeof v->target, "≤ 20 µs");
    snprintf(v->peer, sizeof v->peer, "–");
    /* No floor or peer runs beside it, so nothing tells noise from a
     * miss: lull's own rounds moving is no evidence (a miss is plain). */
    lab_verdict_bound(v, w, 20e3, true);
}

static void verdict_virtual(const lab_fig *f) {
    lab_row *l = lab_fig_base(f, 0);
    lab_verdict *v = lab_verdict_add("C7", 0);
    if (!v || !l || l->v[VIRTUAL_SAME_ORDER].n == 0) return;
    bool same = lab_series_min(&l->v[VIRTUAL_SAME_ORDER]) == 1;
    char a[LAB_CELL];
    snprintf(v->what, sizeof v->what, "%s order; 1 h in %s ms",
             same ? "same" : "NOT the same",
             lab_fmt3(a, lab_row_median(l, VIRTUAL_HOUR_MS)));
    snprintf(v->target, sizeof v->target, "same as real");
    snprintf(v->peer, sizeof v->peer, "–");
    lab_verdict_judge(v, same);
}

void turns_report(lab_fig *const figs[TURNS_FIGURES], const lab_options *opts) {
    brief(figs);
    if (figs[TURNS_IDLE]) verdict_quiet(figs[TURNS_IDLE]);
    if (figs[TURNS_IDLE] && !opts->quick) verdict_idle_peers(figs[TURNS_IDLE]);
    verdict_turns(figs[TURNS_CHAIN_TASK], figs[TURNS_CHAIN_TIMER0]);
    if (figs[TURNS_CHAIN_TASK] && !opts->quick)
        verdict_every_hop(figs[TURNS_CHAIN_TASK]);
    if (figs[TURNS_ROUNDTRIP] && !opts->quick)
        verdict_cross_thread(figs[TURNS_ROUNDTRIP]);
    if (figs[TURNS_LATENESS]) verdict_lateness(figs[TURNS_LATENESS]);
    if (figs[TURNS_LATENESS_BUSY]) verdict_busy(figs[TURNS_LATENESS_BUSY]);
    if (figs[TURNS_ARM_DELAY]) verdict_arm_delay(figs[TURNS_ARM_DELAY]);
    if (figs[TURNS_VIRTUAL]) verdict_virtual(figs[TURNS_VIRTUAL]);
}
