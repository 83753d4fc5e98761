/* The engine's figures: rows, rounds and rotation, medians, the verbose
 * table, the JSON and the plot of one figure, and the output switches
 * (--verbose) every scenario prints through (lab/engine.h).
 *
 * Runs on the scenario's thread. A side-by-side figure starts one thread
 * per row for a round and joins them; a forked figure measures in a child
 * and reads the values back through a pipe. */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool lab_verbose;

/* ------------------------------------------------------------ figures */

lab_fig *lab_fig_new(const lab_fig_spec *spec) {
    lab_fig *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->key = spec->key;
    f->title = spec->title;
    f->policy = spec->policy;
    f->cols = spec->cols;
    f->ncols = spec->ncols < LAB_VALUES ? spec->ncols : LAB_VALUES;
    f->ratio_col = spec->ratio_col;
    f->flags = spec->flags;
    f->measure = spec->measure;
    f->cell = spec->cell;
    f->json = spec->json;
    f->ctx = spec->ctx;
    return f;
}

void lab_fig_free(lab_fig *f) {
    free(f);
}

lab_row *lab_fig_add(lab_fig *f, const char *peer, unsigned flags,
                     const char *fmt, ...) {
    if (f->nrows == LAB_ROWS) return NULL;
    lab_row *r = &f->rows[f->nrows++];
    memset(r, 0, sizeof *r);
    r->peer = peer;
    r->flags = flags;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->label, sizeof r->label, fmt, ap);
    va_end(ap);
    return r;
}

/* Measures in a child and reads its values back: the child's memory (page
 * faults, heap growth) is its own, and every row starts from the same
 * parent. The scenario's thread is the only one here, so the child may
 * allocate. */
static int measure_forked(lab_fig *f, lab_row *row, int round, double *v) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        return -err;
    }
    if (pid == 0) {
        close(fds[0]);
        int rc = f->measure(f, row, round, v);
        size_t size = sizeof(double) * LAB_VALUES;
        if (write(fds[1], &rc, sizeof rc) != (ssize_t)sizeof rc ||
            write(fds[1], v, size) != (ssize_t)size)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    int rc = -EPROTO;
    size_t size = sizeof(double) * LAB_VALUES;
    if (read(fds[0], &rc, sizeof rc) != (ssize_t)sizeof rc ||
        read(fds[0], v, size) != (ssize_t)size)
        rc = -EPROTO; /* the child died before it wrote */
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return rc;
}

static void measure_row(lab_fig *f, lab_row *row, int round,
                        const lab_options *opts) {
    if ((row->flags & LAB_ROW_SLOW) && opts->quick && round > 0) {
        row->skipped++;
        return;
    }
    double v[LAB_VALUES];
    for (int i = 0; i < LAB_VALUES; i++)
        v[i] = NAN;
    uint64_t t0 = lab_now_ns();
    int rc = f->flags & LAB_FIG_FORKED ? measure_forked(f, row, round, v)
                                       : f->measure(f, row, round, v);
    if (getenv("LAB_TRACE")) /* where a slow run spends its time */
        fprintf(stderr, "  [%s: %.3f s, rc %d]\n", row->label,
                (double)(lab_now_ns() - t0) / 1e9, rc);
    if (rc == LAB_SKIPPED) {
        row->skipped++;
        return;
    }
    if (rc < 0) {
        row->failures++;
        row->last_error = rc;
        /* -EPROTO is the lab's "what arrived is wrong": a lost, repeated,
         * reordered or corrupt event, frame, record or reply. */
        if (rc == -EPROTO)
            lab_check_failed("%s: %s, round %d: what was delivered is wrong",
                             f->title, row->label, round + 1);
        return;
    }
    for (int i = 0; i < f->ncols && i < LAB_VALUES; i++)
        if (isfinite(v[i])) lab_series_add_round(&row->v[i], round, v[i]);
}

typedef struct side_job {
    lab_fig *f;
    lab_row *row;
    int round;
    const lab_options *opts;
} side_job;

static void *side_thread(void *arg) {
    side_job *job = arg;
    measure_row(job->f, job->row, job->round, job->opts);
    return NULL;
}

/* Every row at once, a thread each: for windows seconds long that compete
 * for nothing (idle loops), where taking turns would cost rows × rounds
 * windows. */
static void run_side_by_side(lab_fig *f, int round, const lab_options *opts) {
    pthread_t threads[LAB_ROWS];
    side_job jobs[LAB_ROWS];
    bool started[LAB_ROWS] = {false};
    for (int i = 0; i < f->nrows; i++) {
        jobs[i] = (side_job){f, &f->rows[i], round, opts};
        started[i] =
            pthread_create(&threads[i], NULL, side_thread, &jobs[i]) == 0;
        if (!started[i]) measure_row(f, &f->rows[i], round, opts);
    }
    for (int i = 0; i < f->nrows; i++)
        if (started[i]) pthread_join(threads[i], NULL);
}

void lab_fig_round(lab_fig *f, const lab_options *opts, int round) {
    if (round >= LAB_MAX_ROUNDS) return;
    lab_stdout_check();
    if (round + 1 > f->rounds) f->rounds = round + 1;
    uint64_t t0 = lab_now_ns();
    if (f->flags & LAB_FIG_SIDE_BY_SIDE) {
        run_side_by_side(f, round, opts);
    } else {
        for (int k = 0; k < f->nrows; k++)
            measure_row(f, &f->rows[(k + round) % f->nrows], round, opts);
    }
    f->seconds += (double)(lab_now_ns() - t0) / 1e9;
}

void lab_fig_run(lab_fig *f, const lab_options *opts, int rounds) {
    for (int r = 0; r < rounds; r++)
        lab_fig_round(f, opts, r);
}

/* ------------------------------------------------------------ queries */

int lab_fig_error(const lab_fig *f) {
    for (int i = 0; i < f->nrows; i++)
        if (f->rows[i].failures) return f->rows[i].last_error;
    return 0;
}

double lab_row_median(const lab_row *row, int col) {
    if (!row || col < 0 || col >= LAB_VALUES || row->v[col].n == 0) return NAN;
    return lab_series_median(&row->v[col]);
}

double lab_row_spread(const lab_row *row, int col) {
    if (!row || col < 0 || col >= LAB_VALUES || row->v[col].n == 0) return NAN;
    double lo = lab_series_min(&row->v[col]);
    return lo > 0 ? lab_series_max(&row->v[col]) / lo : NAN;
}

lab_row *lab_fig_find(const lab_fig *f, const char *peer, const char *part) {
    for (int i = 0; i < f->nrows; i++) {
        const lab_row *r = &f->rows[i];
        if (peer && (!r->peer || strcmp(r->peer, peer) != 0)) continue;
        if (part && !strstr(r->label, part)) continue;
        return (lab_row *)r;
    }
    return NULL;
}

lab_row *lab_fig_base(const lab_fig *f, int cls) {
    for (int i = 0; i < f->nrows; i++)
        if ((f->rows[i].flags & LAB_ROW_BASE) && f->rows[i].cls == cls)
            return (lab_row *)&f->rows[i];
    return NULL;
}

lab_row *lab_fig_base_of(const lab_fig *f, const lab_row *row) {
    lab_row *b = lab_fig_base(f, row->cls);
    return b ? b : lab_fig_base(f, 0);
}

static bool is_rate(const lab_fig *f, int col) {
    return col >= 0 && col < f->ncols && (f->cols[col].flags & LAB_COL_RATE);
}

lab_row *lab_fig_best_peer(const lab_fig *f, int cls, int col) {
    lab_row *best = NULL;
    for (int i = 0; i < f->nrows; i++) {
        lab_row *r = (lab_row *)&f->rows[i];
        if ((r->flags & (LAB_ROW_LULL | LAB_ROW_FLOOR)) || r->cls != cls)
            continue;
        double m = lab_row_median(r, col);
        if (!isfinite(m)) continue;
        double b = lab_row_median(best, col);
        if (!best || (is_rate(f, col) ? m > b : m < b)) best = r;
    }
    return best;
}

double lab_ratio(const lab_fig *f, const lab_row *lull, const lab_row *other,
                 int col) {
    double l = lab_row_median(lull, col), o = lab_row_median(other, col);
    if (!isfinite(l) || !isfinite(o)) return NAN;
    if (is_rate(f, col)) return o > 0 ? l / o : NAN;
    return l > 0 ? o / l : NAN;
}

/* ------------------------------------------------------------- output */

void lab_detail(const char *fmt, ...) {
    if (!lab_verbose) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

void lab_table_detail(const lab_table *t) {
    if (lab_verbose) lab_table_print(t, stdout);
}

void lab_table_brief(const lab_table *t, const char *title) {
    /* --verbose prints it too, after the scenario's long tables. */
    if (lab_verbose) printf("\nsummary:\n");
    if (title) printf("%s\n", title);
    if (lab_verbose)
        lab_table_print(t, stdout);
    else
        lab_table_print_short(t, stdout); /* the demo fits 80 lines */
}

const char *lab_fmt(char *buf, double v) {
    lab_format_value(buf, LAB_CELL, v);
    return buf;
}

const char *lab_fmt3(char *buf, double v) {
    double a = fabs(v);
    if (!isfinite(v))
        snprintf(buf, LAB_CELL, "–");
    else if (a >= 100 || a == 0)
        snprintf(buf, LAB_CELL, "%.0f", v);
    else if (a >= 10)
        snprintf(buf, LAB_CELL, "%.1f", v);
    else if (a >= 1)
        snprintf(buf, LAB_CELL, "%.2f", v);
    else
        snprintf(buf, LAB_CELL, "%.2g", v);
    return buf;
}

const char *lab_fmt_us(char *buf, double us) {
    char n[LAB_CELL];
    if (isfinite(us) && fabs(us) >= 1000)
        snprintf(buf, LAB_CELL, "%.32s ms", lab_fmt3(n, us / 1000));
    else
        snprintf(buf, LAB_CELL, "%.32s µs", lab_fmt3(n, us));
    return buf;
}

const char *lab_fmt_ns(char *buf, double ns) {
    char n[LAB_CELL];
    if (isfinite(ns) && fabs(ns) >= 1000) return lab_fmt_us(buf, ns / 1000);
    snprintf(buf, LAB_CELL, "%.32s ns", lab_fmt3(n, ns));
    return buf;
}

const char *lab_fmt_ratio(char *buf, double v) {
    if (!isfinite(v)) {
        snprintf(buf, LAB_CELL, "–");
        return buf;
    }
    char tmp[24];
    if (v >= 10)
        snprintf(tmp, sizeof tmp, "%.0f", v);
    else
        snprintf(tmp, sizeof tmp, "%.2f", v);
    snprintf(buf, LAB_CELL, "×%s", tmp);
    return buf;
}

void lab_fig_print(const lab_fig *f) {
    if (!lab_verbose) return;
    const char *header[LAB_TABLE_COLS] = {"implementation"};
    int cols = 1;
    if (f->policy) header[cols++] = f->policy;
    int first = cols;
    for (int v = 0; v < f->ncols && cols < LAB_TABLE_COLS; v++)
        header[cols++] = f->cols[v].head;
    bool ratio = f->ratio_col >= 0 && cols < LAB_TABLE_COLS;
    if (ratio) header[cols++] = "×";
    lab_table t;
    lab_table_init(&t, cols, header);
    for (int i = 0; i < f->nrows; i++) {
        const lab_row *r = &f->rows[i];
        int tr = lab_table_row(&t);
        lab_table_set(&t, tr, 0, "%s", r->label);
        if (f->policy)
            lab_table_set(&t, tr, 1, "%s", r->policy ? r->policy : "-");
        bool measured = false;
        for (int v = 0; v < f->ncols; v++)
            measured |= r->v[v].n > 0;
        for (int v = 0; v < f->ncols && first + v < cols - (ratio ? 1 : 0);
             v++) {
            char buf[3 * 24 + 8]; /* three values, as lab_format_series */
            if (!measured && r->failures) {
                snprintf(buf, sizeof buf, "failed");
            } else if (!f->cell || !f->cell(f, r, v, buf, sizeof buf)) {
                lab_format_series(buf, sizeof buf, &r->v[v]);
            }
            lab_table_set(&t, tr, first + v, "%s", buf);
        }
        if (ratio) {
            char buf[LAB_CELL];
            double x = lab_ratio(f, lab_fig_base_of(f, r), r, f->ratio_col);
            if (isfinite(x))
                lab_table_set(&t, tr, cols - 1, "%.3g", x);
            else
                lab_table_set(&t, tr, cols - 1, "%s", lab_fmt_ratio(buf, x));
        }
    }
    lab_table_print(&t, stdout);
}

void lab_fig_notes(const lab_fig *f) {
    for (int i = 0; i < f->nrows; i++) {
        const lab_row *r = &f->rows[i];
        if (r->failures > 0)
            lab_detail("  note: %s failed %d of %d rounds (%s)\n", r->label,
                       r->failures, f->rounds, strerror(-r->last_error));
        int measured = 0;
        for (int v = 0; v < f->ncols; v++)
            if (r->v[v].n > measured) measured = r->v[v].n;
        if (r->skipped > 0 && measured > 0 && (r->flags & LAB_ROW_SLOW))
            lab_detail("  note: %s ran %d of %d rounds (a real wait per "
                       "turn; --quick runs it once)\n",
                       r->label, measured, f->rounds);
    }
}

void lab_fig_json(const lab_fig *f, lab_json *j) {
    if (!j) return;
    lab_json_key(j, f->key);
    lab_json_begin_object(j);
    lab_json_key(j, "title");
    lab_json_string(j, f->title);
    lab_json_field(j, "rounds", f->rounds);
    lab_json_key(j, "order");
    lab_json_string(j, f->flags & LAB_FIG_SIDE_BY_SIDE
                           ? "all rows at once, each on its own thread"
                           : "round r starts at row r mod N");
    if (f->json) f->json(f, NULL, j);
    lab_json_key(j, "rows");
    lab_json_begin_array(j);
    for (int i = 0; i < f->nrows; i++) {
        const lab_row *r = &f->rows[i];
        lab_json_begin_object(j);
        lab_json_key(j, "label");
        lab_json_string(j, r->label);
        if (r->peer) {
            lab_json_key(j, "peer");
            lab_json_string(j, r->peer);
        }
        if (f->policy && r->policy) {
            lab_json_key(j, "policy");
            lab_json_string(j, r->policy);
        }
        lab_json_field(j, "failures", r->failures);
        for (int v = 0; v < f->ncols; v++)
            if (r->v[v].n > 0) lab_json_series(j, f->cols[v].key, &r->v[v]);
        if (f->ratio_col >= 0) {
            const lab_row *b = lab_fig_base_of(f, r);
            double x = lab_ratio(f, b, r, f->ratio_col);
            if (isfinite(x) && b) {
                lab_json_field(j, "ratio", x);
                lab_json_key(j, "ratio_to");
                lab_json_string(j, b->label);
            }
        }
        if (f->json) f->json(f, r, j);
        lab_json_end_object(j);
    }
    lab_json_end_array(j);
    lab_json_end_object(j);
}

void lab_fig_plot(const lab_fig *f, lab_plot *plot, int col, const char *title,
                  const char *unit) {
    if (!plot) return;
    lab_plot_panel(plot, title, unit);
    for (int i = 0; i < f->nrows; i++)
        lab_plot_bar(plot, f->rows[i].label, &f->rows[i].v[col],
                     f->rows[i].flags & LAB_ROW_LULL);
}

/* ---------------------------------------------------------------- peers */

/* The end of lab_peer_probe's "name: why, skipped". */
#define SKIPPED ", skipped"

bool lab_peer_probe(lab_json *json, const char *name, bool present,
                    bool (*available)(char *why, size_t size),
                    const char *(*version)(void), const char *build,
                    char *skipped, size_t skipped_size) {
    /* Not built in: installing the package now is not enough. */
    char why[128] = "not found when lull-lab was built";
    bool ok = present && (!available || available(why, sizeof why));
    const char *ver = ok && version ? version() : NULL;
    if (ok)
        lab_detail(" %s%s%s", name, ver ? " " : "", ver ? ver : "");
    else
        snprintf(skipped, skipped_size, "%s: %s" SKIPPED, name, why);
    if (json) {
        lab_json_begin_object(json);
        lab_json_key(json, "name");
        lab_json_string(json, name);
        lab_json_key(json, "available");
        lab_json_bool(json, ok);
        if (ver) {
            lab_json_key(json, "version");
            lab_json_string(json, ver);
        }
        if (present && build) {
            lab_json_key(json, "build");
            lab_json_string(json, build);
        }
        if (!ok) {
            lab_json_key(json, "why");
            lab_json_string(json, why);
        }
        lab_json_end_object(json);
    }
    return ok;
}

void lab_peers_not_run(const char (*skipped)[160], int n) {
    if (lab_verbose) return; /* each was printed with its probe */
    bool said[16] = {false};
    if (n > 16) n = 16;
    for (int i = 0; i < n; i++) {
        if (said[i]) continue;
        const char *why = strstr(skipped[i], ": ");
        if (!why) continue;
        size_t whylen = strlen(why);
        size_t tail = sizeof SKIPPED - 1;
        if (whylen >= tail && !strcmp(why + whylen - tail, SKIPPED))
            whylen -= tail;
        /* The peers skipped for the same reason, on one line. */
        printf("  %.*s", (int)(why - skipped[i]), skipped[i]);
        for (int k = i + 1; k < n; k++) {
            const char *w = strstr(skipped[k], ": ");
            if (!said[k] && w && strcmp(w, why) == 0) {
                printf(", %.*s", (int)(w - skipped[k]), skipped[k]);
                said[k] = true;
            }
        }
        printf(": not run (%.*s)\n", (int)(whylen - 2), why + 2);
    }
}

/* ------------------------------------------------------------- checks */

static int checks_failed;

void lab_check_failed(const char *fmt, ...) {
    checks_failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("CHECK FAILED: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

int lab_checks_failed(void) {
    return checks_failed;
}
