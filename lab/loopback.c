/* The `loopback` scenario, the zero-delay timer: strictly serialized
 * request/response over a loopback link that delivers one frame per turn,
 * with a server that fans out after each commit in a zero-delay step of its
 * own, so each round trip pays three turns (request, refresh, response).
 *
 * lull runs it on its real loopback pair in three modes that differ only in
 * what carries a turn: a posted task, a zero-delay timer (C3 says the two
 * cost the same: the table shows it) and a real 1 ms timer (the contrast:
 * the zero-delay timer's broken form, where each frame paid a timer's park).
 * Beside it, in the same run: Node (setTimeout(0), setImmediate, a
 * MessageChannel round trip) and libuv, libev and libevent (a zero-delay
 * timer and their cheapest next-iteration callback), each running the same
 * workload over a minimal loopback made of its own turns, when installed.
 *
 * This file is the driver: every implementation is a row of one of the
 * engine's figures, round r starting at row r mod N, every figure the
 * median [min–max] over rounds. The workload and the peers' loopback over
 * their turns, which every implementation shares, are lab/loopback_work.c.
 * One thread. */
#include "loopback.h"
#include "engine.h"
#include "turns.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ driver */

static const struct {
    const char *name;
    const lb_peer *peer;
} known[] = {
    {"lull", &lb_lull},
#ifdef LAB_HAVE_UV
    {"libuv", &lb_uv},
#else
    {"libuv", NULL},
#endif
#ifdef LAB_HAVE_EV
    {"libev", &lb_ev},
#else
    {"libev", NULL},
#endif
#ifdef LAB_HAVE_EVENT
    {"libevent", &lb_event},
#else
    {"libevent", NULL},
#endif
    {"node", &lb_node},
};
#define KNOWN_COUNT (sizeof known / sizeof known[0])

/* The values of one measurement of a row. */
enum {
    LV_COMMITS_MS,     /* 100 sequential commits, wall time */
    LV_GRAPH_MS,       /* the 24-effect graph, 10 rounds, wall time */
    LV_TRIP_US,        /* the commits workload per round trip */
    LV_FRAMES,         /* frames delivered, both workloads */
    LV_TURNS_PER_TRIP, /* turns per round trip, commits workload */
    LV_TIMERS,         /* timers armed, both workloads */
    LV_COMMITS_FRAMES, /* frames of the commits workload */
    LV_GRAPH_FRAMES,   /* ... of the graph */
    LV_POLLS_PER_TURN, /* I/O checks per turn, commits workload */
    LV_COUNT
};

static const lab_col cols[LV_COUNT] = {
    {"commits_ms", "100 commits, ms", 0},
    {"graph_ms", "graph, ms", 0},
    {"round_trip_us", "round trip, µs", 0},
    {"frames", "frames", 0},
    {"turns_per_round_trip", "turns / trip", 0},
    {"timers_armed", "timers armed", 0},
    {"commits_frames", "commits frames", 0},
    {"graph_frames", "graph frames", 0},
    {"polls_per_turn", "polls / turn", 0},
};

/* A class's policy in a word, for the short table. */
static const char *const class_policy[] = {
    [LB_CLASS_QUANTUM] = "every 0.5 ms",
    [LB_CLASS_EVERY_TURN] = "every turn",
    [LB_CLASS_NO_POLL] = "none",
};

typedef struct lctx {
    const lab_options *opts;
    lb_params p;
} lctx;

static void set_params(const lab_options *opts, lb_params *p) {
    memset(p, 0, sizeof *p);
    p->commits = 100;
    p->effects = 24;
    p->graph_rounds = 10;
    p->quick = opts->quick;
}

/* Fast modes repeat each workload: one run of lull's is a few µs. */
static int reps_for(const lab_options *opts, const lb_entry *e) {
    if (e && e->slow) return 1;
    return opts->quick ? 10 : 200;
}

static int measure(lab_fig *fig, lab_row *row, int round, double *v) {
    const lctx *c = fig->ctx;
    const lb_entry *e = row->arg;
    lb_params p = c->p;
    p.round = round;
    p.reps = reps_for(c->opts, e);
    lb_result r;
    for (int w = 0; w < LB_WORKLOADS; w++)
        r.ms[w] = r.frames[w] = r.turns[w] = r.timers[w] = r.polls[w] = NAN;
    int rc = e->fn(&p, &r);
    if (rc == LB_SKIPPED) return LAB_SKIPPED;
    if (rc < 0) return rc;
    v[LV_COMMITS_MS] = r.ms[LB_COMMITS];
    v[LV_GRAPH_MS] = r.ms[LB_GRAPH];
    v[LV_TRIP_US] = r.ms[LB_COMMITS] * 1000.0 / p.commits;
    v[LV_FRAMES] = r.frames[LB_COMMITS] + r.frames[LB_GRAPH];
    v[LV_TURNS_PER_TRIP] = r.turns[LB_COMMITS] / p.commits;
    v[LV_TIMERS] = r.timers[LB_COMMITS] + r.timers[LB_GRAPH];
    v[LV_COMMITS_FRAMES] = r.frames[LB_COMMITS];
    v[LV_GRAPH_FRAMES] = r.frames[LB_GRAPH];
    v[LV_POLLS_PER_TURN] = r.polls[LB_COMMITS] / r.turns[LB_COMMITS];
    return 0;
}

static lab_row *find_row(const lab_fig *fig, const char *peer,
                         const char *mode) {
    for (int i = 0; i < fig->nrows; i++) {
        const lb_entry *e = fig->rows[i].arg;
        if (strcmp(fig->rows[i].peer, peer) == 0 && strcmp(e->mode, mode) == 0)
            return (lab_row *)&fig->rows[i];
    }
    return NULL;
}

/* The commits workload's time of a over b's. */
static double ratio(const lab_row *a, const lab_row *b) {
    double x = lab_row_median(a, LV_COMMITS_MS);
    double y = lab_row_median(b, LV_COMMITS_MS);
    return isfinite(x) && isfinite(y) && y > 0 ? x / y : NAN;
}

static void print_table(const lab_fig *fig) {
    const char *header[] = {"implementation: turn", "I/O checked",
                            "100 commits, ms",      "graph, ms",
                            "round trip, µs",       "frames",
                            "turns / trip",         "I/O polls a turn",
                            "timers armed",         "×"};
    lab_table t;
    lab_table_init(&t, 10, header);
    for (int i = 0; i < fig->nrows; i++) {
        const lab_row *rw = &fig->rows[i];
        int r = lab_table_row(&t);
        lab_table_set(&t, r, 0, "%s", rw->label);
        lab_table_set(&t, r, 1, "%s", rw->policy);
        if (rw->v[LV_COMMITS_MS].n == 0) {
            for (int c = 2; c < 10; c++)
                lab_table_set(&t, r, c, "%s", rw->failures ? "failed" : "-");
            continue;
        }
        static const int shown[] = {LV_COMMITS_MS, LV_GRAPH_MS, LV_TRIP_US};
        for (int k = 0; k < 3; k++) {
            char buf[LAB_CELL];
            lab_format_series(buf, sizeof buf, &rw->v[shown[k]]);
            lab_table_set(&t, r, 2 + k, "%s", buf);
        }
        lab_table_set(&t, r, 5, "%.0f + %.0f",
                      lab_row_median(rw, LV_COMMITS_FRAMES),
                      lab_row_median(rw, LV_GRAPH_FRAMES));
        char buf[LAB_CELL];
        lab_table_set(&t, r, 6, "%s",
                      lab_fmt(buf, lab_row_median(rw, LV_TURNS_PER_TRIP)));
        lab_table_set(&t, r, 7, "%s",
                      lab_fmt(buf, lab_row_median(rw, LV_POLLS_PER_TURN)));
        lab_table_set(&t, r, 8, "%s",
                      lab_fmt(buf, lab_row_median(rw, LV_TIMERS)));
        double x = lab_ratio(fig, lab_fig_base_of(fig, rw), rw, LV_COMMITS_MS);
        lab_table_set(&t, r, 9, "%s", isfinite(x) ? lab_fmt(buf, x) : "-");
    }
    lab_table_detail(&t);
    lab_detail("  × : the row's 100 commits ÷ lull's posted task's with the "
               "same I/O policy (or lull's default row, for rows that check "
               "none); polls: epoll calls counted in lull-lab for every C "
               "row, Node's libuv iterations\n");
    lab_fig_notes(fig);
}

/* The transport against the turn, measured side by side each round. */
typedef struct unit {
    lab_series hop;   /* lull posted-task hop, ns */
    lab_series trip;  /* lull loopback round trip alone, ns */
    lab_series ratio; /* trip / (2 hops), per round */
} unit;

/* Many short measurements of each, alternating, and their medians: one
 * short enough to finish inside a scheduler slice (40,000 hops is about
 * 0.2 ms) is not shared with another process on a busy machine, and a
 * preemption spoils one measurement, not the round. */
#define UNIT_HOPS      40000
#define UNIT_TRIES_MAX 32
static void measure_unit(unit *u, int tries) {
    double hop[UNIT_TRIES_MAX], trip[UNIT_TRIES_MAX], ratio[UNIT_TRIES_MAX];
    if (tries > UNIT_TRIES_MAX) tries = UNIT_TRIES_MAX;
    for (int i = 0; i < tries; i++) {
        if (lb_lull_task_hop(UNIT_HOPS, &hop[i]) < 0) return;
        if (lb_lull_round_trip(UNIT_HOPS / 2, &trip[i]) < 0) return;
        ratio[i] = trip[i] / (2 * hop[i]);
    }
    lab_series_add(&u->hop, lab_percentile(hop, (size_t)tries, 0.5));
    lab_series_add(&u->trip, lab_percentile(trip, (size_t)tries, 0.5));
    lab_series_add(&u->ratio, lab_percentile(ratio, (size_t)tries, 0.5));
}

static void print_targets(const lab_fig *fig, const unit *u, lab_json *json) {
    const lab_row *task = find_row(fig, "lull", "task");
    const lab_row *timer0 = find_row(fig, "lull", "timer0");
    const lab_row *timer0_q1 = find_row(fig, "lull", "timer0_q1");
    const lab_row *immediate = find_row(fig, "node", "setImmediate");
    const lab_row *floor = find_row(fig, "floor", "epoll0");
    double t0_task = ratio(timer0, task);
    double node_t0 = ratio(immediate, timer0);
    double node_q1 = ratio(immediate, timer0_q1);
    double node_floor = ratio(immediate, floor);
    double q1_floor = ratio(timer0_q1, floor);
    double hop_ns = lab_series_median(&u->hop);
    double work_ns = lab_row_median(task, LV_TRIP_US) * 1000;
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL], d[LAB_CELL], e[LAB_CELL],
        f[LAB_CELL];
    lab_format_series(c, sizeof c, &u->ratio);
    lab_format_series(d, sizeof d, &u->trip);
    lab_format_series(e, sizeof e, &u->hop);
    lab_detail("  targets (medians of this run):\n");
    lab_detail("    100 commits: lull zero-delay timer ÷ posted task   %s   "
               "(≤ 1.2)\n",
               lab_fmt(a, t0_task));
    lab_detail("    100 commits: node setImmediate ÷ lull zero-delay, both "
               "checking I/O every turn   %s   (≥ 10); with lull's default "
               "policy %s\n",
               lab_fmt(b, node_q1), lab_fmt(f, node_t0));
    lab_detail("      the floor (no loop: epoll_wait(0) and a call a turn): "
               "node setImmediate ÷ floor %s; lull zero-delay, every turn ÷ "
               "floor %s\n",
               lab_fmt(a, node_floor), lab_fmt(b, q1_floor));
    lab_detail("    loopback round trip ÷ two posted-task hops        %s   "
               "(≤ 2)\n"
               "      a frame each way and nothing else: %s ns per round "
               "trip; posted-task hop %s ns (the `turns` chain's method: one "
               "idle socket watched, a fresh loop each; medians of short "
               "runs, same round)\n"
               "      the commits workload's round trip (three turns, two "
               "frames, the server's work) is %s hops\n",
               c, d, e, lab_fmt(f, work_ns / hop_ns));
    lab_detail("  reference (the zero-delay timer as first measured, on a "
               "JavaScript runtime): 100 "
               "commits 34.9 ms with immediates, 943 ms with zero-delay "
               "timers; 24-effect graph, 10 rounds, 141 → 1525 ms for "
               "~560–590 frames\n");
    if (!json) return;
    lab_json_key(json, "targets");
    lab_json_begin_object(json);
    lab_json_field(json, "timer0_over_task", t0_task);
    lab_json_field(json, "node_setimmediate_over_lull_timer0", node_t0);
    lab_json_field(json, "node_setimmediate_over_lull_timer0_every_turn",
                   node_q1);
    lab_json_field(json, "node_setimmediate_over_floor", node_floor);
    lab_json_field(json, "lull_timer0_every_turn_over_floor", q1_floor);
    lab_json_end_object(json);
    lab_json_series(json, "lull_task_hop_ns", &u->hop);
    lab_json_series(json, "lull_round_trip_alone_ns", &u->trip);
    lab_json_series(json, "round_trip_over_two_task_hops", &u->ratio);
}

/* ------------------------------------------------------ short, verdict */

static void brief(const lab_fig *fig) {
    static const struct {
        const char *peer, *mode;
    } shown[] = {
        {"lull", "task"},    {"lull", "timer0"},       {"lull", "task_q1"},
        {"floor", "epoll0"}, {"node", "setImmediate"}, {"node", "setTimeout"},
    }; /* the C peers' rows and the rest: --verbose */
    const char *header[] = {"implementation: turn", "I/O checked",
                            "I/O polls a turn", "round trip, µs", "×"};
    lab_table t;
    lab_table_init(&t, 5, header);
    for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
        const lab_row *r = find_row(fig, shown[k].peer, shown[k].mode);
        if (!r) continue;
        int row = lab_table_row(&t);
        char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
        lab_table_set(&t, row, 0, "%s", r->label);
        lab_table_set(&t, row, 1, "%s", class_policy[r->cls]);
        lab_table_set(&t, row, 2, "%s",
                      lab_fmt(a, lab_row_median(r, LV_POLLS_PER_TURN)));
        lab_table_set(&t, row, 3, "%s",
                      lab_fmt(b, lab_row_median(r, LV_TRIP_US)));
        lab_table_set(&t, row, 4, "%s",
                      lab_fmt_ratio(c, lab_ratio(fig, lab_fig_base_of(fig, r),
                                                 r, LV_COMMITS_MS)));
    }
    lab_table_brief(&t, NULL);
}

static void verdict(const lab_fig *fig, const unit *u) {
    char a[LAB_CELL], b[LAB_CELL];
    lab_verdict *v = lab_verdict_add("C6", 0);
    if (v && u->ratio.n) {
        double x = lab_series_median(&u->ratio);
        v->timing = true;
        snprintf(v->what, sizeof v->what, "loopback trip %s× 2 hops",
                 lab_fmt3(a, x));
        snprintf(v->target, sizeof v->target, "≤ 2× 2 hops");
        snprintf(v->peer, sizeof v->peer, "–");
        /* lull against lull: no floor or peer to tell noise by. */
        lab_verdict_bound(v, x, 2, true);
    }
    const lab_row *task = find_row(fig, "lull", "task");
    const lab_row *timer0 = find_row(fig, "lull", "timer0");
    const lab_row *timer0_q1 = find_row(fig, "lull", "timer0_q1");
    const lab_row *node = find_row(fig, "node", "setImmediate");
    if ((v = lab_verdict_add("loopback", 0)) && task && timer0) {
        double x = ratio(timer0, task);
        v->timing = true;
        snprintf(v->what, sizeof v->what, "a commit: zero-delay %s× task",
                 lab_fmt3(a, x));
        snprintf(v->target, sizeof v->target, "≤ 1.2× task");
        const lab_row *ev = find_row(fig, "libevent", "active");
        if (ev)
            snprintf(
                v->peer, sizeof v->peer, "libevent 0.5 ms %s",
                lab_fmt_ratio(b, lab_ratio(fig, timer0, ev, LV_COMMITS_MS)));
        lab_verdict_bound(v, x, 1.2, true);
    }
    /* The target "≥ 10× Node's setImmediate", at equal policy: Node
     * checks I/O on every turn, so lull's row here does too; the saving
     * of lull's default policy beside it. The floor checks I/O every turn
     * with no loop at all: where Node is not ×10 above it, no loop that
     * checks on every turn could be. */
    if ((v = lab_verdict_add("loopback", 1)) && timer0_q1) {
        if (!node) {
            snprintf(v->note, sizeof v->note, "Node not found");
        } else if (!isfinite(lab_row_median(node, LV_COMMITS_MS))) {
            /* Node ran and gave no figure (the line above the table
             * says why): nothing to judge lull by, not a miss. */
            snprintf(v->note, sizeof v->note, "Node gave no figure");
        } else {
            double x = lab_ratio(fig, timer0_q1, node, LV_COMMITS_MS);
            v->timing = true;
            snprintf(v->what, sizeof v->what, "vs Node, I/O every turn: %s",
                     lab_fmt_ratio(a, x));
            snprintf(v->target, sizeof v->target, "≥ ×10");
            snprintf(
                v->peer, sizeof v->peer, "lull default %s",
                lab_fmt_ratio(b, lab_ratio(fig, timer0, node, LV_COMMITS_MS)));
            lab_verdict_spread(v, "Node's setImmediate",
                               lab_row_spread(node, LV_COMMITS_MS));
            const lab_row *fl = find_row(fig, "floor", "epoll0");
            double fx = fl ? lab_ratio(fig, fl, node, LV_COMMITS_MS) : NAN;
            /* Restated: lull's 100 commits ≤ Node's ÷ 10, which is
             * (Node's ÷ floor's) ÷ 10 floors. */
            char rx[32];
            snprintf(rx, sizeof rx, "≤ %s× floor", lab_fmt3(b, fx / 10));
            lab_verdict_bound_floor(v, x, 10, false, fx, rx);
        }
    }
}

static void row_json(const lab_fig *fig, const lab_row *row, lab_json *j) {
    (void)fig;
    if (!row) return;
    const lb_entry *e = row->arg;
    lab_json_key(j, "mode");
    lab_json_string(j, e->mode);
}

/* A peer's rows. */
static void add_entries(lab_fig *fig, const lb_peer *peer) {
    bool lull = peer == &lb_lull;
    for (int e = 0; e < peer->count; e++) {
        const lb_entry *en = &peer->entries[e];
        /* lull's posted task is the base of its class: the default row,
         * and the quantum_ns = 1 one. */
        bool base = lull && strncmp(en->mode, "task", 4) == 0;
        unsigned flags = (lull ? LAB_ROW_LULL : 0) |
                         (en->slow ? LAB_ROW_SLOW : 0) |
                         (base ? LAB_ROW_BASE : 0);
        lab_row *r = lab_fig_add(fig, peer->name, flags, "%s", en->label);
        if (!r) continue;
        r->arg = en;
        r->policy = en->policy;
        r->cls = en->cls;
    }
}

/* Every row of every peer that can run, and the floor's, in the table's
 * order. */
static void add_rows(lab_fig *fig, lab_json *json) {
    lab_detail("implementations:");
    if (json) {
        lab_json_key(json, "peers");
        lab_json_begin_array(json);
    }
    char skipped[KNOWN_COUNT][160];
    int nskipped = 0;
    for (size_t i = 0; i < KNOWN_COUNT; i++) {
        const lb_peer *peer = known[i].peer;
        if (!lab_peer_probe(json, known[i].name, peer != NULL,
                            peer ? peer->available : NULL,
                            peer ? peer->version : NULL, NULL,
                            skipped[nskipped], sizeof skipped[0])) {
            nskipped++;
            continue;
        }
        add_entries(fig, peer);
    }
    add_entries(fig, &lb_floor); /* no library: no version to probe */
    lab_detail("\n");
    for (int i = 0; i < nskipped; i++)
        lab_detail("%s\n", skipped[i]);
    lab_peers_not_run((const char(*)[160])skipped, nskipped);
    if (json) lab_json_end_array(json);
}

static int run_loopback(const lab_options *opts, lab_json *json) {
    static lctx c;
    c.opts = opts;
    set_params(opts, &c.p);
    int rounds = lab_rounds(opts, 5, 3);
    int unit_tries = opts->quick ? 5 : 21;
    lab_fig_spec spec = {"rows",   "loopback",    NULL, cols,
                         LV_COUNT, LV_COMMITS_MS, 0,    measure,
                         NULL,     row_json,      &c};
    lab_fig *fig = lab_fig_new(&spec);
    if (!fig) return -ENOMEM;
    add_rows(fig, json);
    lab_detail("client and server on one loopback link, one frame per turn; "
               "the server refreshes (ACK + fan-out UPDATEs) in a zero-delay "
               "step after each commit\n"
               "workloads: %d sequential commits (COMMIT -> refresh -> ACK); "
               "a graph of %d effects in a tree over %d rounds\n"
               "%d rounds, the row that goes first rotating each round; "
               "median [min–max] over rounds; fast rows: each round is the "
               "median of %d runs timed one by one\n",
               c.p.commits, c.p.effects, c.p.graph_rounds, rounds,
               reps_for(opts, NULL));

    unit u;
    memset(&u, 0, sizeof u);
    for (int r = 0; r < rounds; r++) {
        measure_unit(&u, unit_tries);
        lab_fig_round(fig, opts, r);
    }
    print_table(fig);
    if (json) {
        lab_json_key(json, "params");
        lab_json_begin_object(json);
        lab_json_field(json, "rounds", rounds);
        lab_json_field(json, "commits", c.p.commits);
        lab_json_field(json, "effects", c.p.effects);
        lab_json_field(json, "graph_rounds", c.p.graph_rounds);
        lab_json_field(json, "fast_reps", reps_for(opts, NULL));
        lab_json_field(json, "unit_hops", UNIT_HOPS);
        lab_json_field(json, "unit_tries", unit_tries);
        lab_json_end_object(json);
        lab_fig_json(fig, json);
    }
    print_targets(fig, &u, json);
    lab_detail("  (%.1f s)\n", fig->seconds);
    brief(fig);
    verdict(fig, &u);
    lab_fig_plot(fig, opts->plot, LV_COMMITS_MS,
                 "loopback: 100 sequential commits (wall time)", "ms");
    lab_fig_plot(fig, opts->plot, LV_GRAPH_MS,
                 "loopback: 24-effect graph, 10 rounds (wall time)", "ms");
    lab_fig_free(fig);
    return 0;
}

const lab_scenario lab_loopback = {
    "loopback",
    "the zero-delay timer: serialized request/response over the loopback "
    "pair, a turn by task, zero-delay timer or 1 ms timer; beside Node, "
    "libuv, libev, libevent",
    run_loopback,
    "loopback: the zero-delay timer beside a posted task, a frame a turn; "
    "a commit: a request and its ACK",
    "C6 loopback",
    NULL,
    false,
    NULL, /* no --only: one figure */
};
