/* lull-lab's shared vocabulary: the scenario table, run options, clocks,
 * round statistics, the table printer and the JSON writer (lab/stats.c).
 *
 * Adding a scenario is two lines: declare its `lab_scenario` below and list
 * it in lab/main.c's table (lab/CMakeLists.txt picks up every .c file in lab/).
 */
#ifndef LAB_H
#define LAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------- options */

typedef struct lab_plot lab_plot;

typedef struct lab_options {
    bool quick;            /* small sizes: `make demo` runs `all --quick` */
    int rounds;            /* rounds per figure; 0 = the scenario's default */
    const char *json_path; /* --json FILE, or NULL */
    const char *only;      /* --only NAME: the one figure of a scenario to
                              run (its JSON key), or NULL for all */
    int sessions;          /* --sessions N (pump, runner); 0 = the
                              default, 12 */
    bool journal;          /* --journal (pump): add the journal variant */
    bool aligned;          /* --aligned (runner): every runner commits in
                              the same instant */
    const char *plot_path; /* --plot FILE.svg, or NULL */
    lab_plot *plot;        /* open while scenarios run when plot_path set */
    const char *argv0;     /* how lull-lab was started */
    bool tcp;              /* --tcp (replicate): TCP loopback, not Unix */
    const char *kv_path;   /* --kv PATH (serve): the lull-kv to run */
    bool verbose;          /* --verbose: every legend and every table */
    bool strict;           /* --strict: a miss not marked noisy fails */
} lab_options;

typedef struct lab_json lab_json;

/* A scenario prints its tables on stdout and, when json is not NULL, writes
 * its figures as the members of one JSON object (lab/main.c opens and closes
 * that object); it adds its lines to the verdict (lab/engine.h). Returns 0,
 * or a negative errno when it could not run. */
typedef struct lab_scenario {
    const char *name;        /* the subcommand */
    const char *description; /* one line for `lull-lab help` and --verbose */
    int (*run)(const lab_options *opts, lab_json *json);
    const char *title;    /* its heading in the short output (< 100 columns) */
    const char *measures; /* the verdict's ids it adds lines for: contracts
                             ("C1 C2") and its own line (its name) */
    /* Every other fixed line its short output may print, each variant of
     * it (NULL-terminated; may be NULL): `lull-lab titles` lists them with
     * the titles, so a test checks their width whatever the machine. */
    const char *const *headings;
    /* With --quick (the demo) it prints its verdict lines only: no title
     * either, so `make demo` stays one screen. */
    bool verdict_only_when_quick;
    /* The names --only takes (NULL-terminated; NULL: none): lab/main.c
     * refuses any other before the run starts. */
    const char *const *only;
} lab_scenario;

extern const lab_scenario lab_turns;     /* lab/turns.c */
extern const lab_scenario lab_pump;      /* lab/pump.c */
extern const lab_scenario lab_loopback;  /* lab/loopback.c */
extern const lab_scenario lab_replicate; /* lab/replicate.c */
extern const lab_scenario lab_serve;     /* lab/serve.c */
extern const lab_scenario lab_runner;    /* lab/runner.c */

/* The rounds a figure runs: --rounds, else quick_default or full_default. */
int lab_rounds(const lab_options *opts, int full_default, int quick_default);

/* -------------------------------------------------------------- clocks */

uint64_t lab_now_ns(void);        /* CLOCK_MONOTONIC */
uint64_t lab_thread_cpu_ns(void); /* CPU time of the calling thread */
/* Voluntary context switches of the calling thread (getrusage
 * RUSAGE_THREAD): each one is a block in the kernel, so for an event loop
 * thread it counts the waits that actually slept. */
uint64_t lab_thread_nvcsw(void);
/* Pins the calling thread to one CPU; returns 0 or a negative errno. */
int lab_pin_cpu(int cpu);
/* The first CPU this process may run on (the one pinned pairs share). */
int lab_first_cpu(void);
/* Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft
 * limit. */
long lab_raise_nofile(void);
/* Heap bytes in use (mallinfo2: arena plus mmapped chunks). */
uint64_t lab_heap_bytes(void);
/* A small, fast, seeded generator for random deadlines (xorshift64*). */
uint64_t lab_rand(uint64_t *state);

/* ------------------------------------------------- temporary directories */

/* SIGINT, SIGTERM, SIGHUP and SIGPIPE (those not ignored at start)
 * remove every noted directory and its contents, then end lull-lab as the
 * signal would (lab/cleanup.c). A scenario notes a directory once made
 * and forgets it once removed; a file noted is unlinked. */
void lab_tmp_guard(void);
void lab_tmp_note(const char *dir);
void lab_tmp_forget(const char *dir);
/* Ends lull-lab by SIGPIPE when stdout is a pipe nobody reads any more;
 * the engine calls it before each round. */
void lab_stdout_check(void);

/* ---------------------------------------------------------- statistics */

/* Sorts v in place and returns the p-quantile (p in [0, 1]), interpolating
 * between neighbours; NaN for an empty array (no figure, never a 0). */
double lab_percentile(double *v, size_t n, double p);

/* One figure's values over the rounds: median, min and max of them. A row
 * that missed a round (a failure, a value not measured) has no value for
 * it: round[i] says which round v[i] came from, in increasing order. */
#define LAB_MAX_ROUNDS 64
/* --sessions: ten times the largest size the full pump runs (10,000; the
 * runner's largest is 3,000 processes). More is no figure the lab
 * reports, only minutes of set-up before a first line. */
#define LAB_MAX_SESSIONS 100000
typedef struct lab_series {
    double v[LAB_MAX_ROUNDS];
    int round[LAB_MAX_ROUNDS];
    int n;
} lab_series;
/* Adds the value of round `round`, which comes after every round in s. */
void lab_series_add_round(lab_series *s, int round, double value);
/* Adds the next round's value: the round after s's last. */
void lab_series_add(lab_series *s, double value);
/* Median, min and max of the rounds; NaN when s has none. */
double lab_series_median(const lab_series *s);
/* The round whose value is nearest the median (the median round itself
 * when the rounds are odd in number). */
int lab_series_median_index(const lab_series *s);
double lab_series_min(const lab_series *s);
double lab_series_max(const lab_series *s);
/* a ÷ b round by round, for two rows measured in the same rounds (each
 * ratio then sees one machine); rounds where b is not above 0 are left
 * out, and so are rounds only one of them has. */
lab_series lab_series_ratios(const lab_series *a, const lab_series *b);
/* The median of lab_series_ratios(a, b); NaN when no round has both. */
double lab_series_ratio_median(const lab_series *a, const lab_series *b);
/* The rounds in which a is below b (ties are not), of the *n rounds both
 * have. */
int lab_series_below(const lab_series *a, const lab_series *b, int *n);
/* Two-sided sign test: the chance that a fair coin tossed n times lands
 * as unevenly as k heads, or more so. Near 1: the rounds cannot tell two
 * rows apart; below 0.05, one is lower more often than chance. */
double lab_sign_test_p(int k, int n);

/* ---------------------------------------------------------------- table */

/* A text table: add the header, then rows, then print (columns are sized
 * to their widest cell; the first column is left-aligned). */
#define LAB_TABLE_COLS 14
#define LAB_TABLE_ROWS 32
#define LAB_CELL       64
typedef struct lab_table {
    int cols;
    int rows; /* rows added, the header included */
    char cell[LAB_TABLE_ROWS][LAB_TABLE_COLS][LAB_CELL];
} lab_table;
void lab_table_init(lab_table *t, int cols, const char *const *header);
/* Appends an empty row and returns its index (or -1 when full). */
int lab_table_row(lab_table *t);
void lab_table_set(lab_table *t, int row, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void lab_table_print(const lab_table *t, FILE *out);
/* The same without the rule under the header: the short output's tables,
 * whose header is the line under their title. */
void lab_table_print_short(const lab_table *t, FILE *out);

/* Formats "median [min–max]" with a precision suited to the magnitude. */
void lab_format_series(char *buf, size_t size, const lab_series *s);
/* Formats a number with a precision suited to its magnitude. */
void lab_format_value(char *buf, size_t size, double v);

/* ----------------------------------------------------------------- json */

/* A streaming JSON writer: it tracks nesting and commas. Keys are given
 * with lab_json_key before a value inside an object. Numbers that are not
 * finite are written as null. */
lab_json *lab_json_open(const char *path); /* NULL on error (errno set) */
int lab_json_close(lab_json *j);           /* 0 or a negative errno */
/* Writes out what is buffered: 0, or the write's negative errno (a full
 * disk, /dev/full), found before the run rather than after it. */
int lab_json_flush(lab_json *j);
void lab_json_key(lab_json *j, const char *key);
void lab_json_begin_object(lab_json *j);
void lab_json_end_object(lab_json *j);
void lab_json_begin_array(lab_json *j);
void lab_json_end_array(lab_json *j);
void lab_json_number(lab_json *j, double v);
void lab_json_string(lab_json *j, const char *s);
void lab_json_bool(lab_json *j, bool v);
/* "key": number, inside an object. */
void lab_json_field(lab_json *j, const char *key, double v);
/* "key": median/min/max/rounds of a series, as one object. */
void lab_json_series(lab_json *j, const char *key, const lab_series *s);

/* ----------------------------------------------------------------- plot */

/* An SVG of horizontal bars (median, min-max whisker, log scale), one panel
 * per figure, written by lab_plot_close (lab/plot.c). */
lab_plot *lab_plot_open(const char *path); /* NULL when out of memory */
void lab_plot_panel(lab_plot *p, const char *title, const char *unit);
void lab_plot_bar(lab_plot *p, const char *label, const lab_series *s,
                  bool highlight);
int lab_plot_close(lab_plot *p); /* writes the file: 0 or a negative errno */

/* ---------------------------------------------------------------- peers */

/* Probes one implementation a scenario runs beside lull (lab/engine.c):
 * present is false when it was not built in; available (may be NULL: always
 * available) says why it cannot run. Prints " name version" on the
 * "implementations:" line when it can run (--verbose), else writes "name: why,
 * skipped" into skipped; with json, appends its {name, available, version,
 * build, why} object to the open "peers" array. Returns whether it can run. */
bool lab_peer_probe(lab_json *json, const char *name, bool present,
                    bool (*available)(char *why, size_t size),
                    const char *(*version)(void), const char *build,
                    char *skipped, size_t skipped_size);
/* The short output's lines for the n peers lab_peer_probe skipped (their
 * texts in skipped), one per reason: "  libuv, libev: not run (not found
 * when lull-lab was built)", so that a table's "–" or a row it lacks says
 * why without --verbose (which printed them already: nothing then). */
void lab_peers_not_run(const char (*skipped)[160], int n);

/* ----------------------------------------------------------------- node */

/* The Node rows' runner (lab/node.c). lab_node_available finds `node` on
 * PATH, checks that script is readable and reads `node --version`; false
 * with a reason in why when any of that fails. lab_node_run runs node with
 * args (args[0] is lab_node_path()), optionally pinned to the CPUs pin_cpu
 * and pin_cpu_b (-1: not pinned) and at the timer slack slack_ns (0: the
 * caller's); reads at most size-1 bytes of its stdout into buf. Returns 0
 * when node exited 0 having printed something; -ENODATA when it printed
 * nothing, -ETIMEDOUT when it was silent so long it was killed, -ECHILD
 * when it failed. A result it printed but that is not one (no figures) is
 * -ENODATA too at the caller: -EPROTO, a failed check of what lull
 * delivered, is for figures that say events were lost or wrong.
 * lab_node_error says an rc of lab_node_run in words. */
bool lab_node_available(const char *script, char *why, size_t size);
int lab_node_run(char *const *args, int pin_cpu, int pin_cpu_b, long slack_ns,
                 char *buf, size_t size);
const char *lab_node_error(int rc);
/* How long a measurement may be silent: --quick's sizes take seconds. */
void lab_node_sizes(bool quick);
char *lab_node_path(void);
const char *lab_node_version(void);

/* rel's path under an installed lull-lab's prefix (lab/paths.c) when that
 * file exists, written into buf; else `built`, where this build made it. */
const char *lab_installed_path(const char *rel, const char *built, char *buf,
                               size_t size);

#endif /* LAB_H */
