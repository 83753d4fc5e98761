/* The `pump` scenario's journal variant (--journal; --only journal runs
 * it alone): each event is appended to a per-session journal file and made
 * durable with fdatasync before its commit becomes readable, in notify
 * mode. Four variants, 4 and 12 sessions: in memory (no journal, the
 * baseline); sync on the loop thread (the "before": write
 * + fdatasync in the provider's callback); a lull_journal per session on a
 * worker pool (the commit becomes readable in the sync's completion); and
 * one shared lull_journal for every session (group commit across
 * sessions). The wait here runs from the instant the provider produced the
 * event (its due time: a provider that falls behind catches up) to the
 * driver, so it includes the sync. The device's raw fdatasync latency is
 * measured in the same run; every stream is checked on disk (re-read and
 * compared) and in order at the driver. Each size is one of the engine's
 * figures, its variants the rows. */
#include "pump.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --journal's variants. J_OFF (0) is every run of the main table. */
enum { J_OFF, J_MEMORY, J_LOOP, J_POOL, J_GROUP, J_END };
static const char *const j_name[J_END] = {"", "memory", "loop", "pool",
                                          "pool_group"};
static const char *const j_label[J_END] = {
    "", "in memory (no journal)", "fdatasync on the loop (before)",
    "lull_journal per session, pool", "one shared lull_journal, pool"};

/* Pool threads per variant: each per-session journal keeps at most one
 * batch in flight, so 4 threads overlap 4 sessions' syncs; the shared
 * journal has one batch in flight, so one thread is all it can use. */
#define J_POOL_THREADS  4
#define J_GROUP_THREADS 1
#define JREC            32 /* bytes per record: "ssssss eee due-ns(20)\n" */

typedef struct jrec {
    lull_append append; /* pool variants */
    session *s;
    uint64_t due;         /* when the provider produced the event */
    bool last;            /* the turn's terminal event */
    char bytes[JREC + 1]; /* the record; +1 for snprintf's terminator */
} jrec;

/* The commit, once durable: the event becomes readable. */
static void make_readable(session *s, jrec *j) {
    lab_window_append(&s->window, j->due, j->last ? LAB_EVENT_TERMINAL : 0, 1);
    lab_window_commit(&s->window);
}

static void on_durable(lull_append *a, int status) {
    jrec *j = LULL_CONTAINER_OF(a, jrec, append);
    if (status != 0) j->s->run->journal_errors++;
    make_readable(j->s, j); /* delivered anyway, so the stream ends */
}

static int write_at(int fd, const void *buf, size_t len, uint64_t off) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, (const char *)buf + done, len - done,
                           (off_t)(off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? -errno : -EIO;
        done += (size_t)n;
    }
    return 0;
}

/* One event of the turn: the record, then what the variant does with it. */
static void journal_event(session *s, int k, uint64_t due) {
    run *r = s->run;
    jrec *j = &s->jrecs[k];
    j->s = s;
    j->due = due;
    j->last = k + 1 == r->events;
    /* Fixed width: 6 + 1 + 3 + 1 + 20 + 1 bytes while i < 10^6, k < 1000. */
    char rec[64];
    snprintf(rec, sizeof rec, "%06d %03d %020" PRIu64 "\n", (int)(s - r->s), k,
             due);
    memcpy(j->bytes, rec, JREC);
    j->bytes[JREC] = '\0';
    switch (r->journal) {
    case J_MEMORY:
        make_readable(s, j);
        break;
    case J_LOOP: /* the "before": the loop thread blocks */
        if (write_at(s->fd, j->bytes, JREC, s->jend) < 0 ||
            fdatasync(s->fd) < 0)
            r->journal_errors++;
        s->jend += JREC;
        r->syncs++;
        make_readable(s, j);
        break;
    case J_POOL:
    case J_GROUP: {
        lull_journal *jn = r->journal == J_POOL ? &s->journal : &r->shared;
        if (lull_journal_append(jn, &j->append, j->bytes, JREC, on_durable) <
            0) {
            r->journal_errors++;
            make_readable(s, j);
        }
        break;
    }
    }
}

/* The provider of the journal variant: event k is due at start + (k + 1)
 * intervals whatever the loop is doing, and a tick that runs late (a loop
 * blocked in fdatasync skips periods) emits every event due by now, each
 * with its own due time, so the wait measured counts the whole delay. */
static void journal_provider(lull_timer *t) {
    session *s = LULL_CONTAINER_OF(t, session, provider);
    run *r = s->run;
    uint64_t now = lull_loop_now_exact(r->loop);
    while (s->sent < r->events) {
        uint64_t due =
            r->stream_start + (uint64_t)(s->sent + 1) * r->interval_ns;
        if (due > now) break;
        journal_event(s, s->sent++, due);
    }
    if (s->sent == r->events) lull_timer_stop(t);
}

static int open_file(const run *r, const char *name) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", r->dir, name) >=
        sizeof path)
        return -ENAMETOOLONG;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    return fd < 0 ? -errno : fd;
}

/* Where the journal files go: $TMPDIR, else /var/tmp (a disk on most
 * systems, where /tmp may be memory and fdatasync free). */
static const char *journal_parent(void) {
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/var/tmp";
}

/* Makes journal_parent()/STEM-XXXXXX in dir (size bytes) and notes it for
 * the signal cleanup. The directories' names once had 96 bytes: a $TMPDIR
 * of 72 characters was cut short and mkdtemp refused it (EINVAL). A
 * failure names the directory, once, on stdout: "pump failed: No such
 * file or directory" said nothing of $TMPDIR. */
static int make_dir(char *dir, size_t size, const char *stem) {
    static bool said;
    const char *parent = journal_parent();
    int rc = 0;
    if ((size_t)snprintf(dir, size, "%s/%s-XXXXXX", parent, stem) >= size)
        rc = -ENAMETOOLONG;
    else if (!mkdtemp(dir))
        rc = -errno;
    if (rc == 0) {
        lab_tmp_note(dir);
        return 0;
    }
    dir[0] = '\0';
    if (!said) {
        said = true;
        printf("  journal: cannot make a directory in '%s'%s: %s\n", parent,
               getenv("TMPDIR") && *getenv("TMPDIR") ? " ($TMPDIR)" : "",
               strerror(-rc));
    }
    return rc;
}

/* Turns an opened notify-mode run into a journal variant. */
static int journal_open(run *r, int variant, const params *p) {
    r->journal = variant;
    r->interval_ns = p->interval_ns;
    r->first_seq = (uint64_t)p->retain_small + 1;
    r->shared_fd = -1;
    for (int i = 0; i < r->n; i++)
        r->s[i].fd = -1;
    int rc = make_dir(r->dir, sizeof r->dir, "lull-lab-journal");
    if (rc < 0) return rc;
    if (variant == J_POOL || variant == J_GROUP) {
        lull_pool_options o = {.threads = variant == J_POOL ? J_POOL_THREADS
                                                            : J_GROUP_THREADS,
                               .name = "lab-fsync"};
        if ((rc = lull_pool_new(&r->pool, &o)) < 0) return rc;
    }
    if (variant == J_GROUP) {
        if ((r->shared_fd = open_file(r, "shared")) < 0) return r->shared_fd;
        rc = lull_journal_init(r->loop, r->pool, &r->shared, r->shared_fd);
        if (rc < 0) return rc;
    }
    for (int i = 0; i < r->n; i++) {
        session *s = &r->s[i];
        s->jrecs = calloc((size_t)r->events, sizeof *s->jrecs);
        if (!s->jrecs) return -ENOMEM;
        lull_timer_init(r->loop, &s->provider, journal_provider);
        if (variant != J_LOOP && variant != J_POOL) continue;
        char name[32];
        snprintf(name, sizeof name, "session-%d", i);
        if ((s->fd = open_file(r, name)) < 0) return s->fd;
        if (variant == J_POOL &&
            (rc = lull_journal_init(r->loop, r->pool, &s->journal, s->fd)) < 0)
            return rc;
    }
    return 0;
}

/* Reads a whole file into a fresh buffer; its length in *len. */
static char *slurp(int fd, size_t *len) {
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) return NULL;
    char *buf = malloc((size_t)end + 1);
    if (!buf) return NULL;
    size_t got = 0;
    while (got < (size_t)end) {
        ssize_t n = pread(fd, buf + got, (size_t)end - got, (off_t)got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    *len = got;
    return buf;
}

/* The data on disk, re-read: each session's records once each, in order
 * (in the shared file, each session's in order among the others'). Returns
 * the records that are missing, extra or different. */
static int journal_verify(run *r) {
    if (r->journal == J_MEMORY) return 0;
    int bad = 0;
    if (r->journal == J_GROUP) {
        size_t len;
        char *buf = slurp(r->shared_fd, &len);
        if (!buf) return r->n * r->events;
        int *next = calloc((size_t)r->n, sizeof *next);
        for (size_t off = 0; next && off + JREC <= len; off += JREC) {
            int i = atoi(buf + off);
            if (i < 0 || i >= r->n || next[i] >= r->events ||
                memcmp(buf + off, r->s[i].jrecs[next[i]].bytes, JREC) != 0) {
                bad++;
                continue;
            }
            next[i]++;
        }
        for (int i = 0; next && i < r->n; i++)
            bad += r->events - next[i];
        if (len % JREC) bad++;
        free(next);
        free(buf);
        return bad < r->n * r->events ? bad : r->n * r->events;
    }
    for (int i = 0; i < r->n; i++) {
        size_t len;
        char *buf = slurp(r->s[i].fd, &len);
        if (!buf || len != (size_t)r->events * JREC) {
            bad += r->events;
        } else {
            for (int k = 0; k < r->events; k++)
                if (memcmp(buf + (size_t)k * JREC, r->s[i].jrecs[k].bytes,
                           JREC) != 0)
                    bad++;
        }
        free(buf);
    }
    return bad;
}

static void unlink_in(const run *r, const char *name) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", r->dir, name) <
        sizeof path)
        unlink(path);
}

/* Before run_close's own teardown: the pool's work comes home first (a
 * pool thread may still be inside the post of a last completion until the
 * pool is freed), then the files go. */
static void journal_close(run *r) {
    for (int i = 0; i < r->n; i++)
        lull_timer_stop(&r->s[i].provider);
    lull_timer_stop(&r->deadline);
    if (r->pool) {
        lull_pool_free(r->pool); /* cancels what waits, joins the threads */
        r->pool = NULL;
        for (int k = 0; k < 1000 && lull_loop_alive(r->loop); k++)
            lull_loop_run(r->loop, LULL_RUN_NOWAIT); /* their done functions */
    }
    for (int i = 0; i < r->n; i++) {
        session *s = &r->s[i];
        if (s->fd >= 0) {
            char name[32];
            snprintf(name, sizeof name, "session-%d", i);
            close(s->fd);
            unlink_in(r, name);
        }
        free(s->jrecs);
        s->jrecs = NULL;
    }
    if (r->shared_fd >= 0) {
        close(r->shared_fd);
        unlink_in(r, "shared");
    }
    if (r->dir[0]) {
        rmdir(r->dir);
        lab_tmp_forget(r->dir);
    }
    r->journal = J_OFF;
}

/* A journal run's end: its journal first, then the run (lab/pump_run.c). */
static void close_run(run *r) {
    if (r->journal) journal_close(r);
    pump_run_close(r);
}

/* The device's own fdatasync latency, in the journals' directory: a
 * 32-byte append and its sync, `n` times. */
static int raw_fdatasync(int n, double *p50_us, double *p99_us) {
    char dir[PATH_MAX];
    int rc = make_dir(dir, sizeof dir, "lull-lab-fsync");
    if (rc < 0) return rc;
    char path[PATH_MAX];
    int fd = -1;
    if ((size_t)snprintf(path, sizeof path, "%s/probe", dir) >= sizeof path)
        rc = -ENAMETOOLONG;
    else if ((fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) <
             0)
        rc = -errno;
    double *v = calloc((size_t)n, sizeof *v);
    if (!v && rc == 0) rc = -ENOMEM;
    char rec[JREC] = {0};
    for (int i = 0; i < n && rc == 0; i++) {
        uint64_t t0 = lab_now_ns();
        if ((rc = write_at(fd, rec, sizeof rec, (uint64_t)i * JREC)) < 0 ||
            (fdatasync(fd) < 0 && (rc = -errno) < 0))
            break;
        v[i] = (double)(lab_now_ns() - t0);
    }
    if (rc == 0) {
        *p50_us = lab_percentile(v, (size_t)n, 0.50) / 1e3;
        *p99_us = lab_percentile(v, (size_t)n, 0.99) / 1e3;
    }
    free(v);
    if (fd >= 0) close(fd);
    unlink(path);
    rmdir(dir);
    lab_tmp_forget(dir);
    return rc;
}

/* The counts of one variant at one size, over its rounds. */
typedef struct jcounts {
    int bad_on_disk, out_of_order, errors, incomplete;
    int streams;
} jcounts;

enum {
    JV_MEAN,
    JV_P50,
    JV_P95,
    JV_P99,
    JV_MAX,          /* due -> delivered, µs */
    JV_UTIL,         /* loop, while streaming, % */
    JV_SYNCS,        /* fdatasync calls / commit */
    JV_IDLE_WAKEUPS, /* the loop's, per s */
    JV_POOL_WAKEUPS, /* the pool's, over the window */
    JV_COUNT
};

static const lab_col jcols[JV_COUNT] = {
    {"wait_mean_us", "produced → delivered mean, µs", 0},
    {"wait_p50_us", "produced → delivered p50, µs", 0},
    {"wait_p95_us", "produced → delivered p95, µs", 0},
    {"wait_p99_us", "produced → delivered p99, µs", 0},
    {"wait_max_us", "produced → delivered max, µs", 0},
    {"stream_utilisation_pct", "loop utilisation, streaming, %", 0},
    {"fdatasync_per_commit", "fdatasync calls / commit", 0},
    {"idle_wakeups_per_s", "idle loop wakeups / s", 0},
    {"idle_pool_wakeups", "idle pool wakeups (window)", 0},
};

typedef struct jctx {
    const params *p;
    int sessions;
    uint64_t idle_ns;
    uint64_t seed;
    jcounts counts[J_END];
} jctx;

/* One variant at one size, once: an idle window, then the stream. */
static int journal_measure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    jctx *c = fig->ctx;
    const params *p = c->p;
    int n = c->sessions, variant = (int)row->tag;
    jcounts *k = &c->counts[variant];
    run r;
    int rc = pump_run_open(&r, n, MODE_NOTIFY, p->retain_small, p, &c->seed);
    if (rc < 0) return rc;
    if ((rc = journal_open(&r, variant, p)) < 0) {
        close_run(&r);
        return rc;
    }
    LULL_NAME(r.loop, journal_provider, "pump: provider fixture (journal)");
    idle_result ir;
    lull_pool_stats ps0 = {0}, ps1 = {0};
    lull_pool_get_stats(r.pool, &ps0);
    rc = pump_idle_window(&r, c->idle_ns, &ir);
    lull_pool_get_stats(r.pool, &ps1);
    stream_result sr;
    lull_metrics m0, m1;
    lull_loop_metrics(r.loop, &m0);
    if (rc == 0) rc = pump_stream(&r, p, &sr);
    lull_loop_metrics(r.loop, &m1);
    if (rc == 0) {
        int commits = n * p->events;
        uint64_t syncs = r.syncs;
        if (variant == J_POOL)
            for (int i = 0; i < n; i++)
                syncs += r.s[i].journal.syncs;
        if (variant == J_GROUP) syncs = r.shared.syncs;
        double busy = (double)(m1.busy_ns - m0.busy_ns);
        double idle = (double)(m1.idle_ns - m0.idle_ns);
        v[JV_MEAN] = sr.mean_us;
        v[JV_P50] = sr.p50_us;
        v[JV_P95] = sr.p95_us;
        v[JV_P99] = sr.p99_us;
        v[JV_MAX] = sr.max_us;
        v[JV_UTIL] = busy + idle > 0 ? 100 * busy / (busy + idle) : 0;
        v[JV_SYNCS] = (double)syncs / commits;
        v[JV_IDLE_WAKEUPS] = ir.wakeups_per_s;
        if (r.pool) v[JV_POOL_WAKEUPS] = (double)(ps1.wakeups - ps0.wakeups);
        if (!sr.complete) k->incomplete++;
        k->bad_on_disk += journal_verify(&r);
        k->out_of_order += r.order_errors;
        k->errors += r.journal_errors;
        k->streams++;
    }
    close_run(&r);
    return rc;
}

static void journal_row_json(const lab_fig *fig, const lab_row *row,
                             lab_json *j) {
    const jctx *c = fig->ctx;
    if (!row) {
        lab_json_field(j, "sessions", c->sessions);
        return;
    }
    const jcounts *k = &c->counts[row->tag];
    lab_json_key(j, "variant");
    lab_json_string(j, j_name[row->tag]);
    lab_json_field(j, "streams", k->streams);
    lab_json_field(j, "out_of_order", k->out_of_order);
    lab_json_field(j, "bad_on_disk", k->bad_on_disk);
    lab_json_field(j, "io_errors", k->errors);
    lab_json_field(j, "incomplete_streams", k->incomplete);
}

/* The table of one size: the figures down, the variants across. */
static void journal_table(const lab_fig *fig, int events) {
    const jctx *c = fig->ctx;
    const char *header[] = {"figure", j_label[J_MEMORY], j_label[J_LOOP],
                            j_label[J_POOL], j_label[J_GROUP]};
    lab_table t;
    lab_table_init(&t, 5, header);
    for (int k = 0; k < JV_COUNT; k++) {
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", jcols[k].head);
        for (int i = 0; i < fig->nrows; i++) {
            char buf[LAB_CELL];
            const lab_series *s = &fig->rows[i].v[k];
            if (s->n == 0)
                snprintf(buf, sizeof buf, "–");
            else
                lab_format_series(buf, sizeof buf, s);
            lab_table_set(&t, row, 1 + (int)fig->rows[i].tag - J_MEMORY, "%s",
                          buf);
        }
    }
    int row = lab_table_row(&t);
    lab_table_set(&t, row, 0, "events in order, data on disk");
    for (int v = J_MEMORY; v < J_END; v++) {
        const jcounts *k = &c->counts[v];
        int total = k->streams * c->sessions * events;
        int bad = k->out_of_order + k->bad_on_disk + k->errors;
        lab_table_set(&t, row, v, "%s %d/%d", bad ? "FAILED" : "ok",
                      total - bad, total);
    }
    lab_detail("\n%d sessions:\n", c->sessions);
    lab_table_detail(&t);
}

/* Returns 0 (a lost, repeated, out-of-order or wrong event is a failed
 * check: lab_check_failed), or the error that stopped a run. */
int pump_run_journal(const lab_options *opts, const params *p, lab_json *json) {
    int rounds = lab_rounds(opts, 3, 1);
    uint64_t idle_ns = (opts->quick ? 300 : 1000) * MS;
    int probes = opts->quick ? 50 : 200;
    static const int sizes[2] = {4, 12};
    lab_detail("\njournal: each commit appended to a per-session journal "
               "file and synced before it becomes readable; notify mode; "
               "files in %s; %d rounds, the variant that runs first "
               "rotating; wait = the event's due time at the provider -> the "
               "driver has it\n",
               journal_parent(), rounds);
    lab_detail("pools: %d threads for the per-session journals, %d for the "
               "shared one (its one batch in flight at a time)\n",
               J_POOL_THREADS, J_GROUP_THREADS);
    static jctx ctx[2];
    lab_fig *figs[2] = {NULL, NULL};
    int rc = 0;
    for (int z = 0; z < 2 && rc == 0; z++) {
        ctx[z] = (jctx){p, sizes[z], idle_ns, p->seed, {{0}}};
        lab_fig_spec spec = {"journal", "journal",
                             NULL,      jcols,
                             JV_COUNT,  -1,
                             0,         journal_measure,
                             NULL,      journal_row_json,
                             &ctx[z]};
        figs[z] = lab_fig_new(&spec);
        if (!figs[z]) rc = -ENOMEM;
        for (int v = J_MEMORY; rc == 0 && v < J_END; v++) {
            lab_row *row =
                lab_fig_add(figs[z], "lull", LAB_ROW_LULL, "%s", j_label[v]);
            row->tag = v;
        }
    }
    lab_series raw50 = {0}, raw99 = {0};
    for (int round = 0; round < rounds && rc == 0; round++) {
        double r50 = NAN, r99 = NAN;
        if ((rc = raw_fdatasync(probes, &r50, &r99)) < 0) break;
        lab_series_add(&raw50, r50);
        lab_series_add(&raw99, r99);
        for (int z = 0; z < 2; z++)
            lab_fig_round(figs[z], opts, round);
    }
    for (int z = 0; z < 2 && rc == 0; z++)
        rc = lab_fig_error(figs[z]);
    if (rc == 0) {
        char b50[LAB_CELL], b99[LAB_CELL];
        lab_format_series(b50, sizeof b50, &raw50);
        lab_format_series(b99, sizeof b99, &raw99);
        lab_detail("raw fdatasync of a 32-byte append there: p50 %s µs, p99 "
                   "%s µs (%d per round)\n",
                   b50, b99, probes);
        for (int z = 0; z < 2; z++)
            journal_table(figs[z], p->events);
        lab_detail("  target, 12 sessions: the per-session pool journal's "
                   "wait p50 ≤ in-memory p50 + raw fdatasync p50, and its "
                   "loop utilisation below the on-loop variant's\n");
    }
    if (rc == 0 && json) {
        lab_json_key(json, "journal");
        lab_json_begin_object(json);
        lab_json_key(json, "dir");
        lab_json_string(json, journal_parent());
        lab_json_field(json, "pool_threads", J_POOL_THREADS);
        lab_json_field(json, "group_pool_threads", J_GROUP_THREADS);
        lab_json_series(json, "raw_fdatasync_p50_us", &raw50);
        lab_json_series(json, "raw_fdatasync_p99_us", &raw99);
        for (int z = 0; z < 2; z++) {
            char key[32];
            snprintf(key, sizeof key, "sessions_%d", sizes[z]);
            figs[z]->key = key;
            lab_fig_json(figs[z], json);
        }
        lab_json_end_object(json);
    }
    for (int z = 0; rc == 0 && z < 2; z++)
        for (int v = J_MEMORY; v < J_END; v++) {
            const jcounts *k = &ctx[z].counts[v];
            int bad = k->out_of_order + k->bad_on_disk + k->errors;
            if (bad)
                lab_check_failed("pump journal, %d sessions, %s: %d events "
                                 "lost, repeated, out of order or wrong on "
                                 "disk",
                                 sizes[z], j_label[v], bad);
        }
    for (int z = 0; z < 2; z++)
        lab_fig_free(figs[z]);
    return rc;
}
