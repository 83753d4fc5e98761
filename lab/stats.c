/* lull-lab's shared utilities: clocks and per-thread counters, pinning,
 * round statistics, the text table and the JSON writer. Everything here
 * runs on the thread that calls it; nothing is shared between threads. */
#include "lab.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

int lab_rounds(const lab_options *opts, int full_default, int quick_default) {
    int n = opts->rounds > 0 ? opts->rounds
                             : (opts->quick ? quick_default : full_default);
    return n > LAB_MAX_ROUNDS ? LAB_MAX_ROUNDS : n;
}

/* -------------------------------------------------------------- clocks */

static uint64_t read_clock(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t lab_now_ns(void) {
    return read_clock(CLOCK_MONOTONIC);
}

uint64_t lab_thread_cpu_ns(void) {
    return read_clock(CLOCK_THREAD_CPUTIME_ID);
}

uint64_t lab_thread_nvcsw(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
    return (uint64_t)ru.ru_nvcsw;
}

int lab_pin_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return -pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int lab_first_cpu(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set)) return cpu;
    return 0;
}

long lab_raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -errno;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return -errno;
    }
    return (long)rl.rlim_cur;
}

uint64_t lab_heap_bytes(void) {
    struct mallinfo2 mi = mallinfo2();
    return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
}

uint64_t lab_rand(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL; /* xorshift64*'s multiplier */
}

/* ---------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lab_percentile(double *v, size_t n, double p) {
    if (n == 0) return NAN; /* no sample: no figure, not a 0 */
    qsort(v, n, sizeof *v, cmp_double);
    if (p <= 0) return v[0];
    if (p >= 1) return v[n - 1];
    double pos = p * (double)(n - 1);
    size_t i = (size_t)pos;
    double frac = pos - (double)i;
    if (i + 1 >= n) return v[n - 1];
    return v[i] + (v[i + 1] - v[i]) * frac;
}

void lab_series_add_round(lab_series *s, int round, double value) {
    if (s->n >= LAB_MAX_ROUNDS || (s->n && round <= s->round[s->n - 1])) return;
    s->v[s->n] = value;
    s->round[s->n++] = round;
}

void lab_series_add(lab_series *s, double value) {
    lab_series_add_round(s, s->n ? s->round[s->n - 1] + 1 : 0, value);
}

double lab_series_median(const lab_series *s) {
    double tmp[LAB_MAX_ROUNDS];
    memcpy(tmp, s->v, sizeof(double) * (size_t)s->n);
    return lab_percentile(tmp, (size_t)s->n, 0.5);
}

int lab_series_median_index(const lab_series *s) {
    double m = lab_series_median(s);
    int k = 0;
    for (int i = 1; i < s->n; i++)
        if (fabs(s->v[i] - m) < fabs(s->v[k] - m)) k = i;
    return k;
}

double lab_series_min(const lab_series *s) {
    double m = s->n ? s->v[0] : NAN;
    for (int i = 1; i < s->n; i++)
        if (s->v[i] < m) m = s->v[i];
    return m;
}

double lab_series_max(const lab_series *s) {
    double m = s->n ? s->v[0] : NAN;
    for (int i = 1; i < s->n; i++)
        if (s->v[i] > m) m = s->v[i];
    return m;
}

/* The rounds a and b both have: ia[k] and ib[k] index the k-th in each.
 * Returns how many. */
static int common_rounds(const lab_series *a, const lab_series *b,
                         int ia[LAB_MAX_ROUNDS], int ib[LAB_MAX_ROUNDS]) {
    int n = 0;
    for (int i = 0, j = 0; i < a->n && j < b->n;) {
        if (a->round[i] < b->round[j]) {
            i++;
        } else if (a->round[i] > b->round[j]) {
            j++;
        } else {
            ia[n] = i++;
            ib[n++] = j++;
        }
    }
    return n;
}

lab_series lab_series_ratios(const lab_series *a, const lab_series *b) {
    lab_series r = {.n = 0};
    int ia[LAB_MAX_ROUNDS], ib[LAB_MAX_ROUNDS];
    int n = common_rounds(a, b, ia, ib);
    for (int k = 0; k < n; k++)
        if (b->v[ib[k]] > 0)
            lab_series_add_round(&r, a->round[ia[k]],
                                 a->v[ia[k]] / b->v[ib[k]]);
    return r;
}

double lab_series_ratio_median(const lab_series *a, const lab_series *b) {
    lab_series r = lab_series_ratios(a, b);
    return r.n ? lab_series_median(&r) : NAN;
}

int lab_series_below(const lab_series *a, const lab_series *b, int *n) {
    int ia[LAB_MAX_ROUNDS], ib[LAB_MAX_ROUNDS];
    int below = 0;
    *n = common_rounds(a, b, ia, ib);
    for (int k = 0; k < *n; k++)
        below += a->v[ia[k]] < b->v[ib[k]];
    return below;
}

double lab_sign_test_p(int k, int n) {
    if (n <= 0 || k < 0 || k > n) return 1;
    int tail = k < n - k ? k : n - k;
    double p = 0, c = 1; /* c: n choose i */
    for (int i = 0; i <= tail; i++) {
        p += c;
        c = c * (n - i) / (i + 1);
    }
    p = 2 * p / pow(2, n);
    return p < 1 ? p : 1;
}

/* ---------------------------------------------------------------- table */

void lab_table_init(lab_table *t, int cols, const char *const *header) {
    memset(t, 0, sizeof *t);
    t->cols = cols > LAB_TABLE_COLS ? LAB_TABLE_COLS : cols;
    int row = lab_table_row(t);
    for (int c = 0; c < t->cols; c++)
        lab_table_set(t, row, c, "%s", header[c]);
}

int lab_table_row(lab_table *t) {
    if (t->rows >= LAB_TABLE_ROWS) return -1;
    return t->rows++;
}

void lab_table_set(lab_table *t, int row, int col, const char *fmt, ...) {
    if (row < 0 || row >= t->rows || col < 0 || col >= t->cols) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cell[row][col], LAB_CELL, fmt, ap);
    va_end(ap);
}

/* Display width of a UTF-8 string: counts code points, not bytes, so the
 * en dash of "[min–max]" keeps the columns aligned. */
static int text_width(const char *s) {
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

static void print_table(const lab_table *t, FILE *out, bool rule) {
    int width[LAB_TABLE_COLS] = {0};
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->cols; c++) {
            int w = text_width(t->cell[r][c]);
            if (w > width[c]) width[c] = w;
        }
    for (int r = 0; r < t->rows; r++) {
        /* Trailing empty cells print nothing: no blanks at a line's end. */
        int last = t->cols - 1;
        while (last > 0 && !t->cell[r][last][0])
            last--;
        fputs("  ", out);
        for (int c = 0; c <= last; c++) {
            int pad = width[c] - text_width(t->cell[r][c]);
            if (c == 0) {
                fprintf(out, "%s%*s", t->cell[r][c], last ? pad : 0, "");
            } else {
                fprintf(out, "  %*s%s", pad, "", t->cell[r][c]);
            }
        }
        fputc('\n', out);
        if (r == 0 && rule) {
            fputs("  ", out);
            for (int c = 0; c < t->cols; c++) {
                if (c) fputs("  ", out);
                for (int i = 0; i < width[c]; i++)
                    fputc('-', out);
            }
            fputc('\n', out);
        }
    }
}

void lab_table_print(const lab_table *t, FILE *out) {
    print_table(t, out, true);
}

void lab_table_print_short(const lab_table *t, FILE *out) {
    print_table(t, out, false);
}

void lab_format_value(char *buf, size_t size, double v) {
    double a = fabs(v);
    if (!isfinite(v)) {
        snprintf(buf, size, "-");
    } else if (a == 0) {
        snprintf(buf, size, "0");
    } else if (a >= 1000) {
        snprintf(buf, size, "%.0f", v);
    } else if (a >= 100) {
        snprintf(buf, size, "%.1f", v);
    } else if (a >= 1) {
        snprintf(buf, size, "%.2f", v);
    } else {
        snprintf(buf, size, "%.3g", v);
    }
}

void lab_format_series(char *buf, size_t size, const lab_series *s) {
    char med[24], lo[24], hi[24];
    if (s->n == 0) {
        snprintf(buf, size, "-");
        return;
    }
    lab_format_value(med, sizeof med, lab_series_median(s));
    if (s->n == 1) {
        snprintf(buf, size, "%s", med);
        return;
    }
    lab_format_value(lo, sizeof lo, lab_series_min(s));
    lab_format_value(hi, sizeof hi, lab_series_max(s));
    snprintf(buf, size, "%s [%s–%s]", med, lo, hi);
}

/* ----------------------------------------------------------------- json */

#define JSON_DEPTH 32

struct lab_json {
    FILE *f;
    int depth;
    bool first[JSON_DEPTH]; /* no member written yet at this depth */
    bool after_key;         /* a key was written; the value follows */
};

lab_json *lab_json_open(const char *path) {
    lab_json *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->f = fopen(path, "w");
    if (!j->f) {
        int e = errno;
        free(j);
        errno = e;
        return NULL;
    }
    j->first[0] = true;
    return j;
}

int lab_json_flush(lab_json *j) {
    return fflush(j->f) == 0 && !ferror(j->f) ? 0 : -(errno ? errno : EIO);
}

int lab_json_close(lab_json *j) {
    fputc('\n', j->f);
    /* The write's own error (ENOSPC), where stdio's flag says only that
     * one failed. */
    errno = 0;
    int rc = lab_json_flush(j);
    if (fclose(j->f) != 0 && rc == 0) rc = -errno;
    free(j);
    return rc;
}

/* Writes the separator and indentation owed before a value or a key. */
static void json_prefix(lab_json *j) {
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (!j->first[j->depth]) fputc(',', j->f);
    j->first[j->depth] = false;
    if (j->depth > 0) fprintf(j->f, "\n%*s", 2 * j->depth, "");
}

static void json_escaped(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

void lab_json_key(lab_json *j, const char *key) {
    json_prefix(j);
    json_escaped(j->f, key);
    fputs(": ", j->f);
    j->after_key = true;
}

static void json_open(lab_json *j, char c) {
    json_prefix(j);
    fputc(c, j->f);
    if (j->depth + 1 < JSON_DEPTH) j->depth++;
    j->first[j->depth] = true;
}

static void json_close(lab_json *j, char c) {
    bool empty = j->first[j->depth];
    if (j->depth > 0) j->depth--;
    if (!empty) fprintf(j->f, "\n%*s", 2 * j->depth, "");
    fputc(c, j->f);
}

void lab_json_begin_object(lab_json *j) {
    json_open(j, '{');
}

void lab_json_end_object(lab_json *j) {
    json_close(j, '}');
}

void lab_json_begin_array(lab_json *j) {
    json_open(j, '[');
}

void lab_json_end_array(lab_json *j) {
    json_close(j, ']');
}

void lab_json_number(lab_json *j, double v) {
    json_prefix(j);
    if (isfinite(v)) {
        fprintf(j->f, "%.15g", v);
    } else {
        fputs("null", j->f);
    }
}

void lab_json_field(lab_json *j, const char *key, double v) {
    lab_json_key(j, key);
    lab_json_number(j, v);
}

void lab_json_string(lab_json *j, const char *s) {
    json_prefix(j);
    json_escaped(j->f, s);
}

void lab_json_bool(lab_json *j, bool v) {
    json_prefix(j);
    fputs(v ? "true" : "false", j->f);
}

void lab_json_series(lab_json *j, const char *key, const lab_series *s) {
    lab_json_key(j, key);
    lab_json_begin_object(j);
    lab_json_field(j, "median", s->n ? lab_series_median(s) : NAN);
    lab_json_field(j, "min", s->n ? lab_series_min(s) : NAN);
    lab_json_field(j, "max", s->n ? lab_series_max(s) : NAN);
    lab_json_key(j, "rounds");
    lab_json_begin_array(j);
    for (int i = 0; i < s->n; i++)
        lab_json_number(j, s->v[i]);
    lab_json_end_array(j);
    lab_json_end_object(j);
}
