/* lull-lab's engine: the one place that owns rows, rounds, rotation,
 * medians and the output of a figure; the verdict that closes every run;
 * the noise of the machine measured in the same run. A scenario only
 * feeds it: it declares a figure (its value columns, its rows, and a
 * function that measures one row once), lets lab_fig_run measure it, then
 * asks for the table, the JSON, the plot, and the medians its short table
 * and its verdict lines are made of (lab/engine.c, lab/verdict.c).
 *
 * Ratios: every × in lull-lab is the other row's cost ÷ lull's (for rates,
 * such as requests per second: lull's ÷ the other's), so above 1 lull is
 * cheaper or faster, below 1 it is not. LAB_RATIO_RULE says it once, at the
 * head of every run.
 *
 * One thread: the scenario's. A side-by-side figure starts a thread per
 * row and joins them before lab_fig_run returns. */
#ifndef LAB_ENGINE_H
#define LAB_ENGINE_H

#include "lab.h"

#define LAB_RATIO_RULE                                                          \
    "× = the other's cost ÷ lull's (rates: lull's ÷ the other's); above 1, " \
    "lull is cheaper"

/* The words of lull-lab's own its tables use, said on the line after
 * LAB_RATIO_RULE (lab.no_undefined_terms and lab.verdict_shape check that
 * none is used before it is defined: LAB_LEGEND_TERMS, lab/text.cmake).
 * A floor's × "per round" (the turns table) is the median of the rounds'
 * own ratios, which the verdict's "N× floor" judges too: a round's machine
 * is the same for both rows. */
#define LAB_WORDS_RULE                                                         \
    "floor: the same work with no loop library; × per round: the median of "  \
    "the rounds' own ratios"

/* The common words the tables use in lull-lab's own sense, said on the
 * lines after LAB_WORDS_RULE (also LAB_LEGEND_TERMS): a hop is one run of
 * a chain's task (turns, C2, and C6's "2 hops"); a peer's "same policy" is
 * the I/O checks, timer slack or calls per record of lull's row it is
 * compared with (docs/BENCHMARKS.md); a noisy miss is one that a floor or
 * peer of the same rounds moved as much as (the "✗ noisy" rule below;
 * other processes' CPU marks nothing). The contracts and the figures a
 * problem was first measured by ("first", before → after its fix) are the
 * README's. */
#define LAB_TERMS_RULE                                                         \
    "p50: median, p99: 99th percentile; µs/s: CPU µs per second; hop: one "  \
    "run of a self-re-posting task\n"                                          \
    "same policy: set like lull's row; noisy: a floor or peer moved as "       \
    "much; C1–C8, first: README.md"

/* ------------------------------------------------------------- figures */

#define LAB_VALUES 16 /* value columns of one figure: pump's 13 and room */
#define LAB_ROWS   24 /* rows of one figure: turns' lateness has 13 */

/* lab_col.flags */
#define LAB_COL_RATE 0x1u /* higher is better: × = lull's ÷ the row's */

typedef struct lab_col {
    const char *key;  /* JSON name */
    const char *head; /* table header */
    unsigned flags;   /* LAB_COL_* */
} lab_col;

/* lab_row.flags */
#define LAB_ROW_LULL 0x1u /* lull's own row (highlighted in the plot) */
#define LAB_ROW_BASE 0x2u /* lull's row the × of its class is taken to */
#define LAB_ROW_FLOOR                                                          \
    0x4u /* no loop at all: its spread over the rounds                         \
            is the machine's noise, not a library's */
#define LAB_ROW_SLOW                                                           \
    0x8u /* a real wait per turn: with --quick, measured                       \
            in the first round only */

typedef struct lab_row {
    char label[96];     /* the table's first column */
    const char *peer;   /* "lull", "libuv", ..., "floor" (JSON) */
    const char *policy; /* the figure's policy column, NULL: "-" */
    int cls;            /* like for like: × is taken to the base row of
                           the same class, else of class 0 */
    unsigned flags;     /* LAB_ROW_* */
    const void *arg;    /* the scenario's: what this row measures */
    long tag;           /* the scenario's: a number of its own */
    lab_series v[LAB_VALUES];
    int failures;   /* rounds that returned an error */
    int last_error; /* ... the last one, a negative errno */
    int skipped;    /* rounds the row chose not to run */
} lab_row;

typedef struct lab_fig lab_fig;

/* Measures `row` once: fills v (LAB_VALUES of them, NaN where not
 * measured); returns 0, LAB_SKIPPED (not this round) or a negative
 * errno; -EPROTO says what was delivered was wrong, a failed check. */
#define LAB_SKIPPED 1
typedef int (*lab_measure_fn)(lab_fig *f, lab_row *row, int round, double *v);

/* Formats row's cell of value column col into buf, or returns false for
 * the engine's "median [min–max]". */
typedef bool (*lab_cell_fn)(const lab_fig *f, const lab_row *row, int col,
                            char *buf, size_t size);

/* Adds a figure's own members to its JSON object (rows == NULL), or a
 * row's own members to the row's object. */
typedef void (*lab_json_fn)(const lab_fig *f, const lab_row *row, lab_json *j);

/* lab_fig.flags */
#define LAB_FIG_SIDE_BY_SIDE 0x1u /* every row at once, a thread each */
#define LAB_FIG_FORKED                                                         \
    0x2u /* each measurement in a forked child, so                             \
            every row starts from the same memory */

/* What a scenario says of a figure; lab_fig_new copies it. */
typedef struct lab_fig_spec {
    const char *key;    /* JSON key */
    const char *title;  /* the table's heading */
    const char *policy; /* the header of the policy column; NULL: none */
    const lab_col *cols;
    int ncols;
    int ratio_col;  /* the value the × column compares; -1: no × */
    unsigned flags; /* LAB_FIG_* */
    lab_measure_fn measure;
    lab_cell_fn cell; /* NULL: every cell is the engine's */
    lab_json_fn json; /* NULL: nothing of its own */
    void *ctx;        /* the scenario's */
} lab_fig_spec;

struct lab_fig {
    /* From the spec. */
    const char *key, *title, *policy;
    const lab_col *cols;
    int ncols;
    int ratio_col;
    unsigned flags;
    lab_measure_fn measure;
    lab_cell_fn cell;
    lab_json_fn json;
    void *ctx;
    /* Filled by the engine. */
    lab_row rows[LAB_ROWS];
    int nrows;
    int rounds;
    double seconds; /* lab_fig_run's wall time */
};

/* A figure of the spec's shape, with no rows; NULL when out of memory.
 * Figures are large (every row keeps every round): allocate, never put
 * one on the stack. */
lab_fig *lab_fig_new(const lab_fig_spec *spec);
void lab_fig_free(lab_fig *f);
/* Appends a row (NULL when the figure is full). */
lab_row *lab_fig_add(lab_fig *f, const char *peer, unsigned flags,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Measures every row `rounds` times. Round r starts at row r mod N, so no
 * row always runs first (cold) or after the same neighbour; side-by-side
 * figures run all rows at once instead. */
void lab_fig_run(lab_fig *f, const lab_options *opts, int rounds);
/* One round of lab_fig_run, for scenarios that interleave the rounds of
 * several figures (or a measurement of their own) round by round. */
void lab_fig_round(lab_fig *f, const lab_options *opts, int round);

/* The error of the first row that failed a round, or 0. */
int lab_fig_error(const lab_fig *f);
/* The median of a row's value over its rounds; NaN when it has none. */
double lab_row_median(const lab_row *row, int col);
/* Max ÷ min of a row's value over its rounds (1 for one round); NaN when
 * it has none or min is not above 0. */
double lab_row_spread(const lab_row *row, int col);
/* The first row of `peer` (NULL: any) whose label contains `part`. */
lab_row *lab_fig_find(const lab_fig *f, const char *peer, const char *part);
/* lull's base row of class cls (LAB_ROW_BASE), or NULL. */
lab_row *lab_fig_base(const lab_fig *f, int cls);
/* The row a row's × is taken to: the base of its class, else of class 0. */
lab_row *lab_fig_base_of(const lab_fig *f, const lab_row *row);
/* The cheapest (for rates, the fastest) row of class cls that is neither
 * lull's nor a floor, by the median of col; NULL when none measured it. */
lab_row *lab_fig_best_peer(const lab_fig *f, int cls, int col);
/* × of `other` against lull's row `lull` on column col, by the rule above;
 * NaN when either has no median. */
double lab_ratio(const lab_fig *f, const lab_row *lull, const lab_row *other,
                 int col);

/* The whole table: label, policy, "median [min–max]" per value, ×. Printed
 * only with --verbose, as every lab_detail. */
void lab_fig_print(const lab_fig *f);
/* Notes rows that failed or skipped rounds (--verbose). */
void lab_fig_notes(const lab_fig *f);
/* The figure as one JSON object under its key. */
void lab_fig_json(const lab_fig *f, lab_json *j);
/* One plot panel: every row's median of col, with its min-max. */
void lab_fig_plot(const lab_fig *f, lab_plot *plot, int col, const char *title,
                  const char *unit);

/* ------------------------------------------------------------ output */

/* --verbose: set once by lab/main.c. */
extern bool lab_verbose;
/* printf when --verbose, else nothing: the long legends and tables. */
void lab_detail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A table printed only with --verbose. */
void lab_table_detail(const lab_table *t);
/* A scenario's short table: always printed (with --verbose, after the
 * long ones, headed "summary:"), under an optional one-line title. */
void lab_table_brief(const lab_table *t, const char *title);
/* A value as tables print it, into a LAB_CELL buffer; returns buf. */
const char *lab_fmt(char *buf, double v);
/* A value in at most three significant digits, for the verdict's narrow
 * cells: 2925, 199, 3.48, 0.0047. */
const char *lab_fmt3(char *buf, double v);
/* A time given in µs, as lab_fmt3 writes it with its unit: "87.4 µs",
 * and from 1,000 µs on "19.6 ms", so that a busy machine's figure keeps
 * the width of its verdict cell. */
const char *lab_fmt_us(char *buf, double us);
/* A time given in ns: "85.4 ns", and from 1,000 ns on as lab_fmt_us
 * writes it ("1.10 ms", not "1103235"). */
const char *lab_fmt_ns(char *buf, double ns);
/* "×1.23", "×" followed by the value as tables print it; "–" for NaN. */
const char *lab_fmt_ratio(char *buf, double v);

/* ------------------------------------------------------------- checks */

/* A delivered-data check (events, frames, records, replies, data on disk)
 * that failed: printed at once, counted, and lull-lab exits non-zero. */
void lab_check_failed(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
int lab_checks_failed(void);

/* ------------------------------------------------------------ verdict */

/* One line of the verdict: a contract's figure (id "C1".."C8"; a contract
 * may have several parts, one line each) or a scenario's own line, what
 * it reproduces (id = the scenario's name). The cells are short, in the
 * README's words: the verdict is at most 25 lines of at most 100 columns,
 * and every cell fits its column whole (the JSON has the same text).
 *
 * A missed line reads, in this order of precedence:
 *   "✗ floor-bound (floor ×F)"  the floor measured beside lull (the same
 *       work with no loop) misses the target itself, by F: no loop could
 *       meet it on this machine; the target is restated against the floor;
 *   "✗"        a peer met the target in the same rounds, so the machine
 *       could: the miss is lull's;
 *   "✗ noisy"  the floor or a peer measured in the same rounds moved, over
 *       those rounds (max ÷ min), by at least the miss (lull's figure ÷ the
 *       target): noise could explain it. A reason line under the verdict
 *       says which moved and by how much;
 *   "✗"        otherwise. */
enum {
    LAB_V_NOT_RUN, /* note says why */
    LAB_V_MET,
    LAB_V_MISSED,
};

typedef struct lab_verdict {
    char id[12];       /* "C1".."C8", or a scenario's name */
    int part;          /* order among the lines of one id */
    int status;        /* LAB_V_* */
    bool timing;       /* a time or rate: the machine's noise touches it */
    char what[160];    /* what was measured, and lull's figure */
    char target[160];  /* the README's target */
    char peer[160];    /* what it is compared with in the same run, × */
    char note[160];    /* not run: why; else anything the line must say */
    double miss;       /* missed: lull's figure ÷ the target (≥ 1); NAN
                          when the miss has no size (a count, an order) */
    char moved[64];    /* what moved enough to explain the largest miss */
    double moved_by;   /* ... and by how much over the rounds (max ÷ min) */
    char ev[64];       /* the evidence for the bounds that follow: the */
    double ev_by;      /* floor or peer that moved most, and by how much */
    bool ev_used;      /* a bound took it: the next spread starts anew */
    bool unexplained;  /* a bound missed by more than its evidence moved */
    char peer_met[64]; /* a peer that met the target in the same rounds */
    double floor_by;   /* a bound lull and the floor both missed: the
                          floor's figure ÷ the bound (> 1); NAN: none */
    bool beyond_floor; /* a bound missed that the floor met, or that has
                          no floor: the line is not floor-bound */
    char floor_target[64]; /* the target restated against the floor, shown
                              when the line is floor-bound */
    const char *scenario;  /* set by the engine: who added it */
} lab_verdict;

/* A new line (zeroed but for id, part and scenario); NULL when full. */
lab_verdict *lab_verdict_add(const char *id, int part);
/* Sets a line's status from a comparison: met when ok, else missed, a
 * miss without a size (never noisy). */
void lab_verdict_judge(lab_verdict *v, bool ok);
/* One bound of the line's target: value ≤ bound (upper) or ≥ bound. The
 * first call marks the line met; a bound missed marks it missed and keeps
 * the largest miss (value ÷ bound, or bound ÷ value). */
void lab_verdict_bound(lab_verdict *v, double value, double bound, bool upper);
/* A floor or peer measured in the same rounds as lull's figure, and its
 * spread over them (max ÷ min): the evidence a miss of the bounds that
 * follow (up to the next spread after a bound) may be noise. A line is
 * noisy when every bound it missed had evidence that moved as much. */
void lab_verdict_spread(lab_verdict *v, const char *what, double spread);
/* A peer that met the target in the same rounds: a miss is then plain. */
void lab_verdict_peer_met(lab_verdict *v, const char *peer);
/* lab_verdict_bound for a bound the floor, measured in the same rounds, is
 * held to as well (its figure floor, in value's unit). When lull and the
 * floor both miss it, the line is floor-bound (unless another bound was
 * missed) and its target cell becomes restated: the target relative to
 * the floor ("≤ 0.57× floor"). */
void lab_verdict_bound_floor(lab_verdict *v, double value, double bound,
                             bool upper, double floor, const char *restated);

/* The scenarios' declarations (lab/main.c): every contract gets a line,
 * "not run (why)" when no scenario of this run measured it. */
void lab_verdict_expect(const char *id, const char *why);
/* Prints the verdict; writes it into json (may be NULL) as "verdict".
 * Returns the lines missed and not marked noisy (what --strict fails on). */
int lab_verdict_print(lab_json *json);
/* The verdict's fixed lines, for `lull-lab titles`. */
void lab_verdict_titles(void);

/* -------------------------------------------------------------- noise */

/* What else the machine did while a scenario ran: CPU time of every other
 * process (/proc/stat's busy time less lull-lab's own and its reaped
 * children's, /proc/self/stat), the hypervisor's steal, the load average. */
typedef struct lab_noise {
    uint64_t t0_ns;
    unsigned long long busy0, steal0, total0, self0;
    double others_cpu; /* CPUs' worth, averaged over the scenario */
    double steal_pct;  /* of all CPU time */
    double load1;      /* the 1-minute load average at its end */
    double seconds;    /* the scenario's wall time */
} lab_noise;
void lab_noise_begin(lab_noise *n);
void lab_noise_end(lab_noise *n);
/* Whether the noise is enough to spoil a timing figure, and what to say:
 * "other processes used 0.8 CPU". */
#define LAB_NOISY_OTHERS 0.25 /* CPUs: a build job uses 1 */
#define LAB_NOISY_STEAL  2.0  /* percent */
bool lab_noise_text(const lab_noise *n, char *buf, size_t size);
/* What the short output says above the verdict when any of the count
 * scenarios run had a busy machine (lab_noise_text): how many and the
 * worst, two lines in buf, since the verdict's marks do not say it (a
 * newcomer's make demo beside other work read "✗" as lull's miss). Returns
 * how many were busy; 0 leaves buf "". */
int lab_noise_summary(const lab_noise *n, int count, char *buf, size_t size);
/* lab/main.c brackets each scenario: lines added in between are its. What
 * else the machine did (n) goes into the JSON; it marks no line noisy by
 * itself: only a floor or a peer that moved in the same rounds does. */
void lab_verdict_begin(const char *scenario);
void lab_verdict_end(const lab_noise *n);
void lab_noise_json(lab_json *j, const char *scenario, const lab_noise *n);

#endif /* LAB_ENGINE_H */
