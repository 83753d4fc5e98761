/* The verdict that closes every lull-lab run, and the noise measured in
 * the same run (lab/engine.h).
 *
 * Scenarios add the lines they measured (lab_verdict_add); lab/main.c
 * declares a line for each contract C1-C8 and each scenario's own line,
 * so a contract no scenario of this run measured still gets its line, as
 * "not run" with the reason. A miss is told apart here, by the evidence
 * each line carries (lab/engine.h: floor-bound, noisy, or plain); what
 * the rest of the machine did (lab_noise_*) goes into the JSON beside it.
 * One thread. */
#include "engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINES 48
#define WIDTH     100 /* columns of every verdict line */

static lab_verdict lines[MAX_LINES];
static int nlines;
static const char *current; /* the scenario running, for lab_verdict_add */

/* The contracts' names, in the README's words (README: The contracts). */
static const struct {
    const char *id, *name;
} names[] = {
    {"C1", "Quiet"},         {"C2", "Turns"},   {"C3", "Zero-delay"},
    {"C4", "Notification"},  {"C5", "Budget"},  {"C6", "Transports"},
    {"C7", "Deterministic"}, {"C8", "Visible"}, {"pump", ""},
    {"loopback", ""},        {"replicate", ""}, {"serve", "lull-kv"},
    {"runner", ""},          {"udp", ""},       {"files", ""},
};

static const char *name_of(const char *id) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i].id, id) == 0) return names[i].name;
    return "";
}

/* Contracts first, in order, then the scenarios in the order above. */
static int rank_of(const char *id) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i].id, id) == 0) return (int)i;
    return (int)(sizeof names / sizeof names[0]);
}

lab_verdict *lab_verdict_add(const char *id, int part) {
    if (nlines == MAX_LINES) return NULL;
    lab_verdict *v = &lines[nlines++];
    memset(v, 0, sizeof *v);
    snprintf(v->id, sizeof v->id, "%s", id);
    v->part = part;
    v->scenario = current;
    v->status = LAB_V_NOT_RUN;
    v->miss = NAN;
    v->moved_by = NAN;
    v->ev_by = NAN;
    v->floor_by = NAN;
    return v;
}

void lab_verdict_judge(lab_verdict *v, bool ok) {
    if (v) v->status = ok ? LAB_V_MET : LAB_V_MISSED;
}

/* A bound missed: the largest miss is kept, and whether the evidence
 * before it moved as much. A miss of unknown size (NAN, or a bound of 0)
 * is never noise. */
static bool missed_bound(lab_verdict *v, double value, double bound,
                         bool upper) {
    if (v->status == LAB_V_NOT_RUN) v->status = LAB_V_MET;
    v->ev_used = true;
    if (upper ? value <= bound : value >= bound) return false;
    double by = upper ? value / bound : bound / value;
    if (!isfinite(by)) by = INFINITY;
    v->status = LAB_V_MISSED;
    bool explained = v->ev_by >= by;
    if (!explained) v->unexplained = true;
    if (!(by <= v->miss)) {
        v->miss = by;
        if (explained) {
            memcpy(v->moved, v->ev, sizeof v->moved);
            v->moved_by = v->ev_by;
        }
    }
    return true;
}

void lab_verdict_bound(lab_verdict *v, double value, double bound, bool upper) {
    if (v && missed_bound(v, value, bound, upper)) v->beyond_floor = true;
}

void lab_verdict_bound_floor(lab_verdict *v, double value, double bound,
                             bool upper, double floor, const char *restated) {
    if (!v || !missed_bound(v, value, bound, upper)) return;
    double by = upper ? floor / bound : bound / floor;
    if (!(by > 1)) {
        v->beyond_floor = true;
        return;
    }
    if (!(by <= v->floor_by)) v->floor_by = by;
    if (restated)
        snprintf(v->floor_target, sizeof v->floor_target, "%s", restated);
}

void lab_verdict_spread(lab_verdict *v, const char *what, double spread) {
    if (!v) return;
    if (v->ev_used) { /* evidence for the bounds to come, not the last */
        v->ev_used = false;
        v->ev[0] = '\0';
        v->ev_by = NAN;
    }
    if (!isfinite(spread) || spread <= v->ev_by) return;
    snprintf(v->ev, sizeof v->ev, "%s", what);
    v->ev_by = spread;
}

void lab_verdict_peer_met(lab_verdict *v, const char *peer) {
    if (v && peer) snprintf(v->peer_met, sizeof v->peer_met, "%s", peer);
}

/* How a line reads: the rules of lab/engine.h, in their order. */
enum { R_MET, R_NOT_RUN, R_FLOOR, R_PLAIN, R_NOISY };
static int reading(const lab_verdict *v) {
    if (v->status == LAB_V_MET) return R_MET;
    if (v->status == LAB_V_NOT_RUN) return R_NOT_RUN;
    if (v->floor_by > 1 && !v->beyond_floor) return R_FLOOR;
    if (v->peer_met[0]) return R_PLAIN;
    if (isfinite(v->miss) && !v->unexplained) return R_NOISY;
    return R_PLAIN;
}

/* A placeholder line, replaced by any line a scenario adds for the id. */
static bool expected[MAX_LINES];

void lab_verdict_expect(const char *id, const char *why) {
    for (int i = 0; i < nlines; i++)
        if (strcmp(lines[i].id, id) == 0) return;
    lab_verdict *v = lab_verdict_add(id, 0);
    if (!v) return;
    expected[v - lines] = true;
    v->scenario = NULL;
    snprintf(v->note, sizeof v->note, "%s", why);
}

void lab_verdict_begin(const char *scenario) {
    current = scenario;
}

void lab_verdict_end(const lab_noise *n) {
    (void)n; /* the JSON has it (lab_noise_json); it marks no line */
    current = NULL;
}

/* ------------------------------------------------------------ printing */

/* Display width of UTF-8 text: code points, not bytes. */
static int width_of(const char *s) {
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

/* Cuts s to at most w columns, ending in "…" when cut. */
static void cut(char *s, int w) {
    if (width_of(s) <= w) return;
    int cols = 0;
    char *p = s;
    for (; *p; p++) {
        if (((unsigned char)*p & 0xC0) != 0x80) {
            if (cols == w - 1) break;
            cols++;
        }
    }
    snprintf(p, 4, "…");
}

enum { COL_ID, COL_WHAT, COL_TARGET, COL_PEER, COL_RESULT, COLS };

typedef struct vrow {
    char cell[COLS][200];
} vrow;

static int cmp_line(const void *a, const void *b) {
    const lab_verdict *x = a, *y = b;
    int rx = rank_of(x->id), ry = rank_of(y->id);
    if (rx != ry) return rx - ry;
    if (rx == (int)(sizeof names / sizeof names[0])) {
        int c = strcmp(x->id, y->id);
        if (c) return c;
    }
    return x->part - y->part;
}

static void status_text(const lab_verdict *v, char *buf, size_t size) {
    switch (reading(v)) {
    case R_MET:
        snprintf(buf, size, "✓");
        break;
    case R_NOT_RUN:
        snprintf(buf, size, "not run");
        break;
    case R_FLOOR:
        snprintf(buf, size, "✗ floor-bound (floor ×%.1f)", v->floor_by);
        break;
    case R_NOISY:
        snprintf(buf, size, "✗ noisy");
        break;
    default:
        snprintf(buf, size, "✗");
    }
}

static void fill_row(vrow *r, const lab_verdict *v, bool first) {
    memset(r, 0, sizeof *r);
    if (first)
        snprintf(r->cell[COL_ID], sizeof r->cell[0], "%s%s%s", v->id,
                 name_of(v->id)[0] ? " " : "", name_of(v->id));
    if (v->status == LAB_V_NOT_RUN) {
        /* Precisions so the compiler can see it fits. */
        snprintf(r->cell[COL_WHAT], sizeof r->cell[0], "%.96s%s%.96s", v->what,
                 v->what[0] ? ": " : "", v->note[0] ? v->note : "not run");
    } else {
        snprintf(r->cell[COL_WHAT], sizeof r->cell[0], "%s", v->what);
        snprintf(r->cell[COL_TARGET], sizeof r->cell[0], "%s",
                 reading(v) == R_FLOOR && v->floor_target[0] ? v->floor_target
                                                             : v->target);
        /* A floor-bound line's result says what it is compared with. */
        if (reading(v) != R_FLOOR)
            snprintf(r->cell[COL_PEER], sizeof r->cell[0], "%s", v->peer);
    }
    status_text(v, r->cell[COL_RESULT], sizeof r->cell[0]);
}

/* A not-run line has only its reason, which spans the three middle
 * columns. */
static bool spans(const vrow *r) {
    return !r->cell[COL_TARGET][0] && !r->cell[COL_PEER][0];
}

/* The blanks between two columns: 2, or 1 where a run's figures came out
 * wide enough that 2 would cut a cell (fit). */
static int gap = 2;

/* Column widths: each the widest of its cells, so no cell is cut. The
 * results are right-aligned at the table's right edge, just past the
 * widest "compared with" cell and its result together: a long result (a
 * floor-bound line's, whose "compared with" cell is empty) takes that
 * cell's room. A spanning cell (not run) takes the three middle columns.
 * The cells are written short enough that the whole fits WIDTH
 * (lab.verdict_shape checks it); the figures' widths vary from run to run,
 * so past WIDTH the columns close up to one blank, and only past that, as
 * a last resort, the widest of what and target is cut with "…".
 * width[COL_RESULT] is the tail: the columns from the "compared with"
 * column's start to the right edge. */
static void fit(vrow *rows, int n, int width[COLS]) {
    for (int c = 0; c < COLS; c++) {
        width[c] = 0;
        for (int i = 0; i < n; i++)
            if ((c != COL_WHAT || !spans(&rows[i])) &&
                width_of(rows[i].cell[c]) > width[c])
                width[c] = width_of(rows[i].cell[c]);
    }
    int tail;
    for (gap = 2; gap >= 1; gap--) {
        tail = width[COL_PEER];
        for (int i = 0; i < n; i++) {
            int peer = width_of(rows[i].cell[COL_PEER]);
            int t =
                (peer ? peer + gap : 0) + width_of(rows[i].cell[COL_RESULT]);
            if (t > tail) tail = t;
        }
        if (width[COL_ID] + width[COL_WHAT] + width[COL_TARGET] + 3 * gap +
                tail <=
            WIDTH)
            break;
    }
    if (gap < 1) gap = 1;
    width[COL_RESULT] = tail;
    for (;;) {
        int total = width[COL_ID] + width[COL_WHAT] + width[COL_TARGET] +
                    3 * gap + tail;
        if (total <= WIDTH) break;
        width[width[COL_TARGET] > width[COL_WHAT] ? COL_TARGET : COL_WHAT]--;
    }
    int span = width[COL_WHAT] + width[COL_TARGET] + width[COL_PEER] + 2 * gap;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < COL_PEER; c++)
            cut(rows[i].cell[c],
                c == COL_WHAT && spans(&rows[i]) ? span : width[c]);
}

static void print_row(const vrow *r, const int width[COLS]) {
    char line[8 * WIDTH];
    size_t used = 0;
    int col = 0; /* columns printed so far */
    for (int c = 0; c < COL_RESULT; c++) {
        int w = width[c];
        if (spans(r) && c == COL_WHAT)
            w += width[COL_TARGET] + width[COL_PEER] + 2 * gap;
        if (spans(r) && (c == COL_TARGET || c == COL_PEER)) continue;
        int pad = w - width_of(r->cell[c]);
        if (pad < 0) pad = 0;
        used += (size_t)snprintf(line + used, sizeof line - used, "%*s%s%*s",
                                 c ? gap : 0, "", r->cell[c], pad, "");
        col += (c ? gap : 0) + width_of(r->cell[c]) + pad;
    }
    /* The result, right-aligned at the right edge, over the blanks. */
    int edge = width[COL_ID] + width[COL_WHAT] + width[COL_TARGET] + 3 * gap +
               width[COL_RESULT];
    int start = edge - width_of(r->cell[COL_RESULT]);
    while (used > 0 && line[used - 1] == ' ')
        line[--used] = '\0', col--;
    if (r->cell[COL_RESULT][0])
        snprintf(line + used, sizeof line - used, "%*s%s",
                 start - col >= gap ? start - col : gap, "",
                 r->cell[COL_RESULT]);
    puts(line);
}

/* The reason under the verdict for a noisy line: which floor or peer
 * moved, by how much, beside the size of the miss. */
static void noisy_reason(const lab_verdict *v, char *buf, size_t size) {
    snprintf(buf, size,
             "noisy %.11s: %.63s moved %.2f× over the same rounds; lull "
             "missed by %.2f×",
             v->id, v->moved, v->moved_by, v->miss);
}

static void json_line(lab_json *j, const lab_verdict *v) {
    static const char *const status[] = {"not run", "met", "missed"};
    int how = reading(v);
    lab_json_begin_object(j);
    lab_json_key(j, "id");
    lab_json_string(j, v->id);
    lab_json_key(j, "name");
    lab_json_string(j, name_of(v->id));
    lab_json_field(j, "part", v->part);
    lab_json_key(j, "status");
    lab_json_string(j, status[v->status]);
    lab_json_key(j, "noisy");
    lab_json_bool(j, how == R_NOISY);
    lab_json_key(j, "floor_bound");
    lab_json_bool(j, how == R_FLOOR);
    char noise[WIDTH * 2] = "";
    if (how == R_NOISY) noisy_reason(v, noise, sizeof noise);
    const char *keys[] = {"measured", "target",   "peer",        "noise",
                          "note",     "peer_met", "floor_target"};
    const char *vals[] = {v->what,
                          v->target,
                          v->peer,
                          noise,
                          v->note,
                          v->peer_met,
                          how == R_FLOOR ? v->floor_target : ""};
    for (int k = 0; k < 7; k++) {
        if (!vals[k][0]) continue;
        lab_json_key(j, keys[k]);
        lab_json_string(j, vals[k]);
    }
    if (isfinite(v->miss)) lab_json_field(j, "missed_by", v->miss);
    if (isfinite(v->moved_by)) {
        lab_json_key(j, "moved");
        lab_json_string(j, v->moved);
        lab_json_field(j, "moved_by", v->moved_by);
    }
    if (isfinite(v->floor_by)) lab_json_field(j, "floor_by", v->floor_by);
    if (v->scenario) {
        lab_json_key(j, "scenario");
        lab_json_string(j, v->scenario);
    }
    lab_json_end_object(j);
}

int lab_verdict_print(lab_json *json) {
    /* A placeholder goes when a scenario added a line of its id. */
    int n = 0;
    for (int i = 0; i < nlines; i++) {
        bool drop = false;
        if (expected[i])
            for (int k = 0; k < nlines; k++)
                if (!expected[k] && strcmp(lines[k].id, lines[i].id) == 0)
                    drop = true;
        if (!drop) {
            lines[n] = lines[i];
            expected[n] = expected[i];
            n++;
        }
    }
    nlines = n;
    qsort(lines, (size_t)nlines, sizeof lines[0], cmp_line);

    static vrow rows[MAX_LINES + 1];
    memset(&rows[0], 0, sizeof rows[0]);
    snprintf(rows[0].cell[COL_ID], sizeof rows[0].cell[0], "contract");
    snprintf(rows[0].cell[COL_WHAT], sizeof rows[0].cell[0],
             "lull in this run");
    snprintf(rows[0].cell[COL_TARGET], sizeof rows[0].cell[0], "target");
    snprintf(rows[0].cell[COL_PEER], sizeof rows[0].cell[0],
             "compared with, ×");
    int strict = 0, missed = 0, met = 0, notrun = 0, noisy = 0, bound = 0;
    for (int i = 0; i < nlines; i++) {
        bool first = i == 0 || strcmp(lines[i].id, lines[i - 1].id) != 0;
        fill_row(&rows[i + 1], &lines[i], first);
        int how = reading(&lines[i]);
        if (lines[i].status == LAB_V_MISSED) {
            missed++;
            if (how != R_NOISY) strict++;
        }
        noisy += how == R_NOISY;
        bound += how == R_FLOOR;
        met += how == R_MET;
        notrun += how == R_NOT_RUN;
    }
    int width[COLS];
    fit(rows, nlines + 1, width);

    printf("\nverdict: %d met (✓), %d missed (✗: %d noisy, %d floor-bound: "
           "the floor misses too), "
           "%d not run\n",
           met, missed, noisy, bound, notrun);
    for (int i = 0; i < nlines + 1; i++)
        print_row(&rows[i], width);
    /* A reason for every noisy mark, one line each. */
    for (int i = 0; i < nlines; i++) {
        if (reading(&lines[i]) != R_NOISY) continue;
        char note[WIDTH * 3];
        noisy_reason(&lines[i], note, sizeof note);
        cut(note, WIDTH);
        puts(note);
    }

    if (json) {
        lab_json_key(json, "verdict");
        lab_json_begin_array(json);
        for (int i = 0; i < nlines; i++)
            json_line(json, &lines[i]);
        lab_json_end_array(json);
    }
    return strict;
}

void lab_verdict_titles(void) {
    printf("verdict: %d met (✓), %d missed (✗: %d noisy, %d floor-bound: "
           "the floor misses too), "
           "%d not run\n",
           MAX_LINES, MAX_LINES, MAX_LINES, MAX_LINES, MAX_LINES);
    lab_verdict w = {.id = "replicate",
                     .moved = "the epoll floor's CPU/req",
                     .moved_by = 99.99,
                     .miss = 99.99};
    char buf[WIDTH * 3];
    noisy_reason(&w, buf, sizeof buf);
    puts(buf);
    /* The busy-machine lines above the verdict, at their widest. */
    lab_noise busy[2] = {{.others_cpu = 99.99}, {.others_cpu = 99.99}};
    lab_noise_summary(busy, 2, buf, sizeof buf);
    puts(buf);

    /* A verdict of made-up lines, one of each reading, with cells as wide
     * as the scenarios' widest: lab.verdict_rules checks how each reads,
     * lab.title_widths that it fits. */
    nlines = 0;
    current = "sample";
    lab_verdict *v;
    /* Missed by 2×; a peer moved 3× in the same rounds: noisy. */
    if ((v = lab_verdict_add("C1", 0))) {
        snprintf(v->what, sizeof v->what, "20k idle: 1 wakeup, 200 µs/s");
        snprintf(v->target, sizeof v->target, "≤ 1, < 100 µs/s");
        snprintf(v->peer, sizeof v->peer, "libevent 35.0 ×0.18");
        lab_verdict_spread(v, "libevent's idle CPU", 3);
        lab_verdict_bound(v, 200, 100, true);
    }
    /* The same, but a peer met the target in the same rounds: plain. */
    if ((v = lab_verdict_add("C2", 0))) {
        snprintf(v->what, sizeof v->what, "task 26.5 ns a hop, I/O 0.5 ms");
        snprintf(v->target, sizeof v->target, "< best peer");
        snprintf(v->peer, sizeof v->peer, "libevent 13.2 ×0.50");
        lab_verdict_spread(v, "libevent's row", 3);
        lab_verdict_peer_met(v, "libevent");
        lab_verdict_bound(v, 26.5, 13.2, true);
    }
    /* The floor misses the bound too, by 1.74×: floor-bound. */
    if ((v = lab_verdict_add("C3", 0))) {
        snprintf(v->what, sizeof v->what, "notify: p50 27.8, p99 601 µs");
        snprintf(v->target, sizeof v->target, "≤ 50, ≤ 500, ×10");
        snprintf(v->peer, sizeof v->peer, "Node 211 ×7.57");
        lab_verdict_bound_floor(v, 27.8, 50, true, 23.6, "p50 ≤ 2.1× floor");
        lab_verdict_bound_floor(v, 601, 500, true, 872, "p99 ≤ 0.57× floor");
    }
    /* The floor misses one bound, but another is missed too: plain. */
    if ((v = lab_verdict_add("C3", 1))) {
        snprintf(v->what, sizeof v->what, "notify: p50 80.0, p99 601 µs");
        snprintf(v->target, sizeof v->target, "≤ 50, ≤ 500 µs");
        lab_verdict_bound_floor(v, 80, 50, true, 23.6, "p50 ≤ 2.1× floor");
        lab_verdict_bound_floor(v, 601, 500, true, 872, "p99 ≤ 0.57× floor");
    }
    /* Missed by 1.5×; the floor moved 1.2×, less: plain. */
    if ((v = lab_verdict_add("C4", 0))) {
        snprintf(v->what, sizeof v->what, "64-B ping-pong 1.73× floor");
        snprintf(v->target, sizeof v->target, "≤ 1.15× floor");
        snprintf(v->peer, sizeof v->peer, "met in 7, 10 of 10 tests");
        lab_verdict_spread(v, "the blocking floor", 1.2);
        lab_verdict_bound(v, 1.73, 1.15, true);
    }
    /* A count, missed: never noisy, whatever moved. */
    if ((v = lab_verdict_add("C5", 0))) {
        snprintf(v->what, sizeof v->what, "idle: 3 reads, 0 wakeups");
        snprintf(v->target, sizeof v->target, "0, 0 / session");
        lab_verdict_spread(v, "Node's CPU", 50);
        lab_verdict_bound(v, 3, 0, true);
    }
    /* The floor moved 4× before the p99's bound (met); Node moved 1.1×
     * before the ×10 bound, missed by 1.5×: the floor's spread does not
     * explain it, so plain. */
    if ((v = lab_verdict_add("C6", 0))) {
        snprintf(v->what, sizeof v->what, "notify: p50 13.1, p99 33.6 µs");
        snprintf(v->target, sizeof v->target, "≤ 50, ≤ 500, ×10");
        snprintf(v->peer, sizeof v->peer, "Node 90.3 ×6.87");
        lab_verdict_spread(v, "the floor's p99", 4);
        lab_verdict_bound(v, 33.6, 500, true);
        lab_verdict_spread(v, "Node's p50", 1.1);
        lab_verdict_bound(v, 6.87, 10, false);
    }
    /* A lower bound (×10 below Node) the floor misses too, being only ×8
     * below Node: floor-bound by 10 ÷ 8. */
    if ((v = lab_verdict_add("C6", 1))) {
        snprintf(v->what, sizeof v->what, "notify: p50 13.1, p99 33.6 µs");
        snprintf(v->target, sizeof v->target, "≤ 50, ≤ 500, ×10");
        snprintf(v->peer, sizeof v->peer, "Node 90.3 ×6.87");
        lab_verdict_bound_floor(v, 13.1, 50, true, 11.3, "p50 ≤ 3.8× floor");
        lab_verdict_bound_floor(v, 6.87, 10, false, 8, "p50 ≤ 0.8× floor");
    }
    if ((v = lab_verdict_add("C7", 0))) {
        snprintf(v->what, sizeof v->what, "same order; 1 h in 27.8 ms");
        snprintf(v->target, sizeof v->target, "same as real");
        snprintf(v->peer, sizeof v->peer, "–");
        lab_verdict_judge(v, true);
    }
    lab_verdict_expect("C8", "`lull-lab pump` measures it");
    current = NULL;
    lab_verdict_print(NULL);
}

/* -------------------------------------------------------------- noise */

/* /proc/stat's first line: busy (user, nice, system, irq, softirq), steal
 * and all of it, in clock ticks. */
static void read_stat(unsigned long long *busy, unsigned long long *steal,
                      unsigned long long *total) {
    *busy = *steal = *total = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    unsigned long long v[8] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
               &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) >= 7) {
        *busy = v[0] + v[1] + v[2] + v[5] + v[6];
        *steal = v[7];
        for (int i = 0; i < 8; i++)
            *total += v[i];
    }
    fclose(f);
}

/* lull-lab's own CPU ticks and its reaped children's (utime, stime,
 * cutime, cstime: fields 14-17 of /proc/self/stat). */
static unsigned long long read_self(void) {
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    if (!p) return 0;
    unsigned long long v[4] = {0};
    /* After ")": state, then fields 4..13, then utime (14). */
    if (sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
               "%llu %llu",
               &v[0], &v[1], &v[2], &v[3]) != 4)
        return 0;
    return v[0] + v[1] + v[2] + v[3];
}

void lab_noise_begin(lab_noise *n) {
    memset(n, 0, sizeof *n);
    n->t0_ns = lab_now_ns();
    read_stat(&n->busy0, &n->steal0, &n->total0);
    n->self0 = read_self();
}

void lab_noise_end(lab_noise *n) {
    unsigned long long busy, steal, total;
    read_stat(&busy, &steal, &total);
    unsigned long long self = read_self();
    double secs = (double)(lab_now_ns() - n->t0_ns) / 1e9;
    n->seconds = secs;
    double hz = (double)sysconf(_SC_CLK_TCK);
    double others = ((double)(busy - n->busy0) - (double)(self - n->self0)) /
                    hz / (secs > 0 ? secs : 1);
    n->others_cpu = others > 0 ? others : 0;
    n->steal_pct = total > n->total0 ? 100.0 * (double)(steal - n->steal0) /
                                           (double)(total - n->total0)
                                     : 0;
    double load[1];
    n->load1 = getloadavg(load, 1) == 1 ? load[0] : NAN;
}

bool lab_noise_text(const lab_noise *n, char *buf, size_t size) {
    if (n->others_cpu >= LAB_NOISY_OTHERS) {
        snprintf(buf, size, "other processes used %.2f CPU", n->others_cpu);
        return true;
    }
    if (n->steal_pct >= LAB_NOISY_STEAL) {
        snprintf(buf, size, "the hypervisor stole %.1f%% of the CPU",
                 n->steal_pct);
        return true;
    }
    snprintf(buf, size, "quiet");
    return false;
}

int lab_noise_summary(const lab_noise *n, int count, char *buf, size_t size) {
    char text[96];
    int busy = 0, worst = -1;
    for (int i = 0; i < count; i++) {
        if (!lab_noise_text(&n[i], text, sizeof text)) continue;
        busy++;
        if (worst < 0 || n[i].others_cpu > n[worst].others_cpu ||
            (n[i].others_cpu == n[worst].others_cpu &&
             n[i].steal_pct > n[worst].steal_pct))
            worst = i;
    }
    if (size > 0) buf[0] = '\0';
    if (busy == 0) return 0;
    lab_noise_text(&n[worst], text, sizeof text);
    snprintf(buf, size,
             "busy machine in %d of %d scenario%s (at worst, %s):\n"
             "  a miss may be the machine's, not lull's: rerun on a quiet "
             "machine before quoting it",
             busy, count, count == 1 ? "" : "s", text);
    return busy;
}

void lab_noise_json(lab_json *j, const char *scenario, const lab_noise *n) {
    if (!j) return;
    lab_json_key(j, scenario);
    lab_json_begin_object(j);
    lab_json_field(j, "seconds", n->seconds);
    lab_json_field(j, "others_cpu", n->others_cpu);
    lab_json_field(j, "steal_pct", n->steal_pct);
    lab_json_field(j, "load1", n->load1);
    char text[96];
    lab_json_key(j, "noisy");
    lab_json_bool(j, lab_noise_text(n, text, sizeof text));
    lab_json_end_object(j);
}
