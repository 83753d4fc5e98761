/* The verdict that closes every lull-lab run, and the noise measured in
 * the same run (lab/engine.h).
 *
 * Scenarios add the lines they measured (lab_verdict_add); lab/main.c
 * declares a line for each contract C1-C8 and each scenario's seed table,
 * so a contract no scenario of this run measured still gets its line, as
 * "not run" with the reason. Around each scenario lab/main.c reads what
 * the rest of the machine did (lab_noise_*), and marks the timing lines
 * that scenario added as noisy when it was busy: a miss then reads "✗
 * noisy", and --strict does not count it. One thread. */
#include "engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINES 48
#define WIDTH     100 /* columns of every verdict line */
#define MAX_PRINT 25  /* lines of the whole verdict */

static lab_verdict lines[MAX_LINES];
static int nlines;
static const char *current; /* the scenario running, for lab_verdict_add */

/* The contracts' names, in the README's words (README: The contracts). */
static const struct {
    const char *id, *name;
} names[] = {
    {"C1", "Quiet"},         {"C2", "Turns"},     {"C3", "Zero-delay"},
    {"C4", "Notification"},  {"C5", "Budget"},    {"C6", "Transports"},
    {"C7", "Deterministic"}, {"C8", "Visible"},   {"pump", "1A"},
    {"loopback", "1B"},      {"replicate", "1C"}, {"serve", "lull-kv"},
    {"runner", "1A"},
};

static const char *name_of(const char *id) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i].id, id) == 0) return names[i].name;
    return "";
}

/* Contracts first, in order, then the seed tables in the order above. */
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
    return v;
}

void lab_verdict_judge(lab_verdict *v, bool ok) {
    if (v) v->status = ok ? LAB_V_MET : LAB_V_MISSED;
}

void lab_verdict_spread(lab_verdict *v, const char *what, double spread) {
    if (!v || !isfinite(spread) || spread <= LAB_NOISY_SPREAD) return;
    snprintf(v->noise, sizeof v->noise, "%s spread %.1f× over rounds", what,
             spread);
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
    char text[96];
    bool noisy = n && lab_noise_text(n, text, sizeof text);
    for (int i = 0; noisy && current && i < nlines; i++) {
        lab_verdict *v = &lines[i];
        if (!v->scenario || strcmp(v->scenario, current) != 0) continue;
        if (v->timing && !v->noise[0])
            snprintf(v->noise, sizeof v->noise, "%s", text);
    }
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

static const char *status_text(const lab_verdict *v) {
    switch (v->status) {
    case LAB_V_MET:
        return "✓";
    case LAB_V_MISSED:
        return v->noise[0] ? "✗ noisy" : "✗";
    default:
        return "not run";
    }
}

static void fill_row(vrow *r, const lab_verdict *v, bool first) {
    memset(r, 0, sizeof *r);
    if (first)
        snprintf(r->cell[COL_ID], sizeof r->cell[0], "%s %s", v->id,
                 name_of(v->id));
    if (v->status == LAB_V_NOT_RUN) {
        /* Precisions so the compiler can see it fits: the cell is cut to
         * its column anyway. */
        snprintf(r->cell[COL_WHAT], sizeof r->cell[0], "%.96s%s%.96s", v->what,
                 v->what[0] ? ": " : "", v->note[0] ? v->note : "not run");
    } else {
        snprintf(r->cell[COL_WHAT], sizeof r->cell[0], "%s", v->what);
        snprintf(r->cell[COL_TARGET], sizeof r->cell[0], "%s", v->target);
        snprintf(r->cell[COL_PEER], sizeof r->cell[0], "%s", v->peer);
    }
    snprintf(r->cell[COL_RESULT], sizeof r->cell[0], "%s", status_text(v));
}

/* A not-run line has only its reason, which spans the three middle
 * columns. */
static bool spans(const vrow *r) {
    return !r->cell[COL_TARGET][0] && !r->cell[COL_PEER][0];
}

/* Column widths within WIDTH: the widest of what, peer and target loses a
 * column at a time until every line fits; spanning cells are cut to the
 * three columns they span. */
static void fit(vrow *rows, int n, int width[COLS]) {
    for (int c = 0; c < COLS; c++) {
        width[c] = 0;
        for (int i = 0; i < n; i++)
            if ((c != COL_WHAT || !spans(&rows[i])) &&
                width_of(rows[i].cell[c]) > width[c])
                width[c] = width_of(rows[i].cell[c]);
    }
    /* Over WIDTH: the peer column gives first, down to 20 columns, then
     * the target, down to 16, then what was measured, then all three. */
    static const int floor_of[COLS] = {0, 0, 16, 20, 0};
    for (;;) {
        int total = 2 * (COLS - 1);
        for (int c = 0; c < COLS; c++)
            total += width[c];
        if (total <= WIDTH) break;
        int c = COL_WHAT;
        if (width[COL_PEER] > floor_of[COL_PEER])
            c = COL_PEER;
        else if (width[COL_TARGET] > floor_of[COL_TARGET])
            c = COL_TARGET;
        else if (width[COL_WHAT] <= 24)
            c = width[COL_PEER] >= width[COL_TARGET] ? COL_PEER : COL_TARGET;
        width[c]--;
    }
    int span = width[COL_WHAT] + width[COL_TARGET] + width[COL_PEER] + 4;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < COLS; c++)
            cut(rows[i].cell[c],
                c == COL_WHAT && spans(&rows[i]) ? span : width[c]);
}

static void print_row(const vrow *r, const int width[COLS]) {
    char line[8 * WIDTH];
    size_t used = 0;
    for (int c = 0; c < COLS; c++) {
        int w = width[c];
        if (spans(r) && c == COL_WHAT)
            w += width[COL_TARGET] + width[COL_PEER] + 4;
        if (spans(r) && (c == COL_TARGET || c == COL_PEER)) continue;
        int pad = w - width_of(r->cell[c]);
        if (c == COLS - 1 || pad < 0) pad = 0; /* no trailing blanks */
        used += (size_t)snprintf(line + used, sizeof line - used, "%s%s%*s",
                                 c ? "  " : "", r->cell[c], pad, "");
    }
    while (used > 0 && line[used - 1] == ' ')
        line[--used] = '\0';
    puts(line);
}

static void json_line(lab_json *j, const lab_verdict *v) {
    static const char *const status[] = {"not run", "met", "missed"};
    lab_json_begin_object(j);
    lab_json_key(j, "id");
    lab_json_string(j, v->id);
    lab_json_key(j, "name");
    lab_json_string(j, name_of(v->id));
    lab_json_field(j, "part", v->part);
    lab_json_key(j, "status");
    lab_json_string(j, status[v->status]);
    lab_json_key(j, "noisy");
    lab_json_bool(j, v->noise[0] != '\0');
    const char *keys[] = {"measured", "target", "peer", "noise", "note"};
    const char *vals[] = {v->what, v->target, v->peer, v->noise, v->note};
    for (int k = 0; k < 5; k++) {
        if (!vals[k][0]) continue;
        lab_json_key(j, keys[k]);
        lab_json_string(j, vals[k]);
    }
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
    snprintf(rows[0].cell[COL_PEER], sizeof rows[0].cell[0], "best peer, ×");
    int strict = 0, missed = 0, met = 0, notrun = 0;
    for (int i = 0; i < nlines; i++) {
        bool first = i == 0 || strcmp(lines[i].id, lines[i - 1].id) != 0;
        fill_row(&rows[i + 1], &lines[i], first);
        if (lines[i].status == LAB_V_MISSED) {
            missed++;
            if (!lines[i].noise[0]) strict++;
        }
        met += lines[i].status == LAB_V_MET;
        notrun += lines[i].status == LAB_V_NOT_RUN;
    }
    int width[COLS];
    fit(rows, nlines + 1, width);

    printf("\nverdict: %d met (✓), %d missed (✗), %d not run\n", met, missed,
           notrun);
    int printed = 1;
    for (int i = 0; i < nlines + 1 && printed < MAX_PRINT - 2; i++, printed++)
        print_row(&rows[i], width);
    /* The noise behind each "noisy": once per cause, with its lines. */
    for (int i = 0; i < nlines && printed < MAX_PRINT; i++) {
        if (!lines[i].noise[0] || lines[i].status != LAB_V_MISSED) continue;
        bool seen = false;
        for (int k = 0; k < i; k++)
            seen |= lines[k].status == LAB_V_MISSED &&
                    strcmp(lines[k].noise, lines[i].noise) == 0;
        if (seen) continue;
        char ids[64] = "";
        for (int k = i; k < nlines; k++)
            if (lines[k].status == LAB_V_MISSED &&
                strcmp(lines[k].noise, lines[i].noise) == 0 &&
                !strstr(ids, lines[k].id))
                snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%s",
                         ids[0] ? ", " : "", lines[k].id);
        char note[WIDTH * 3];
        snprintf(note, sizeof note, "noisy %s: %s; rerun on a quiet machine",
                 ids, lines[i].noise);
        cut(note, WIDTH);
        puts(note);
        printed++;
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
    printf("verdict: %d met (✓), %d missed (✗), %d not run\n", MAX_LINES,
           MAX_LINES, MAX_LINES);
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
