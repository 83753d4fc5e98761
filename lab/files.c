/* The `files` scenario: the worker pool's file round trip and file-system
 * events, in the same run (lab/files.h has the rows' contract).
 *
 * The pool's round trip, bench/fs_roundtrip's method: a 4 KiB pread
 * submitted from a loop's thread, read on a pool of one thread, its result
 * back on the loop, which submits the next; the offsets walk through a
 * 1 MiB file (in the page cache after the first round). Rows, each in a
 * thread of its own pinned to one CPU (its pool threads start there too):
 *   bare pool   one worker thread, one futex word each way, the pread
 *               between: no loop, no queue, the least a pool can do
 *   lull        lull_fs_read on lull_pool_new's pool of one thread
 *   libuv       uv_fs_read, UV_THREADPOOL_SIZE=1 (when installed)
 * Rounds rotate the rows (A B A B); each round gives a row its p50 and p99
 * trip; the tables show the median over rounds with min and max. Every
 * read's length and bytes are checked (each 4 KiB block of the file holds
 * its own index).
 *
 * File-system events: one lull_fsevent watches an empty directory. First
 * the idle window: nothing happens in it, and the loop's wakeups over it
 * (I/O, timer, signal; lull_loop_metrics) are counted: 0 expected. Then
 * the scenario's thread creates FILES_RATE files a second (mknod, a batch
 * every millisecond, paced on the clock) for 1 s (--quick: 0.3 s), fewer
 * than the kernel queues (fs.inotify.max_queued_events), so any loss is
 * the loop's: the watch counts each name's CREATED once. Delivered/s:
 * names delivered ÷ the time from the first mknod to the last delivery.
 * Lost: names never delivered, plus one per OVERFLOW. A name delivered
 * twice, unknown, or lost fails the check.
 *
 * Everything lives in one mkdtemp directory under /dev/shm (else /tmp),
 * removed at the end. One thread: the scenario's; a measurement starts a
 * thread and joins it. */
#include "files.h"
#include "engine.h"
#include "lull.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FILES_RATE  12000 /* files created a second: 1.2× the target */
#define EVENTS_GOAL 10000 /* delivered a second, the verdict's target */

/* ------------------------------------------------- the pool's rows */

int files_trip(files_trips *t, int64_t result) {
    uint64_t now = lab_now_ns();
    int k = t->n - t->warmup;
    if (k >= 0) t->ns[k] = now - t->start;
    /* The block read was number n mod 256: its bytes are that number. */
    char want = (char)(t->n % (FILES_SIZE / FILES_BLOCK));
    t->n++;
    if (result != FILES_BLOCK) return result < 0 ? (int)result : -EIO;
    if (t->block[0] != want || t->block[FILES_BLOCK - 1] != want)
        return -EPROTO;
    t->start = lab_now_ns();
    return t->n < t->warmup + t->want ? 0 : 1;
}

typedef struct bare {
    files_trips *t;
    uint32_t to_worker, to_main; /* futex words: 1 when it is your turn */
    bool quit;
    uint64_t offset;
    int64_t result;
} bare;

static void futex_wait_for(uint32_t *w) {
    while (!__atomic_load_n(w, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    __atomic_store_n(w, 0, __ATOMIC_RELAXED);
}

static void futex_pass(uint32_t *w) {
    __atomic_store_n(w, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *bare_worker(void *arg) {
    bare *b = arg;
    for (;;) {
        futex_wait_for(&b->to_worker);
        if (b->quit) return NULL;
        b->result = pread(b->t->fd, b->t->block, FILES_BLOCK, (off_t)b->offset);
        if (b->result < 0) b->result = -errno;
        futex_pass(&b->to_main);
    }
}

static int bare_run(files_trips *t) {
    bare b = {.t = t};
    pthread_t th;
    if (pthread_create(&th, NULL, bare_worker, &b) != 0) return -EAGAIN;
    int more = 0;
    while (more == 0) {
        b.offset = files_offset(t);
        futex_pass(&b.to_worker);
        futex_wait_for(&b.to_main);
        more = files_trip(t, b.result);
    }
    b.quit = true;
    futex_pass(&b.to_worker);
    pthread_join(th, NULL);
    return more < 0 ? more : 0;
}

typedef struct lulltrip {
    lull_fs req;
    lull_loop *loop;
    lull_pool *pool;
    files_trips *t;
    int rc;
} lulltrip;

static void lull_back(lull_fs *req, int64_t result) {
    lulltrip *p = LULL_CONTAINER_OF(req, lulltrip, req);
    int more = files_trip(p->t, result);
    if (more < 0) p->rc = more;
    if (more != 0) return;
    int rc = lull_fs_read(p->loop, p->pool, req, p->t->fd, p->t->block,
                          FILES_BLOCK, files_offset(p->t), lull_back);
    if (rc < 0) p->rc = rc;
}

static int lull_run(files_trips *t) {
    lulltrip p = {.t = t};
    int rc = lull_loop_new(&p.loop, NULL);
    if (rc < 0) return rc;
    rc = lull_pool_new(&p.pool, &(lull_pool_options){.threads = 1});
    if (rc < 0) {
        lull_loop_free(p.loop);
        return rc;
    }
    t->start = lab_now_ns();
    rc = lull_fs_read(p.loop, p.pool, &p.req, t->fd, t->block, FILES_BLOCK, 0,
                      lull_back);
    if (rc == 0) rc = lull_loop_run(p.loop, LULL_RUN_DEFAULT);
    if (rc == 0) rc = p.rc;
    lull_pool_free(p.pool);
    if (lull_loop_free(p.loop) < 0 && rc == 0) rc = -EBUSY;
    return rc;
}

typedef int (*trips_fn)(files_trips *t);

typedef struct pool_impl {
    const char *peer, *label;
    trips_fn run; /* NULL: not built in */
    unsigned flags;
} pool_impl;

#ifdef LAB_HAVE_UV
#define UV_RUN files_uv_run
#else
#define UV_RUN NULL
#endif

enum { I_BARE, I_LULL, I_UV, IMPLS };
static const pool_impl impls[IMPLS] = {
    {"floor", "bare pool: futex + pread", bare_run, LAB_ROW_FLOOR},
    {"lull", "lull_fs_read", lull_run, LAB_ROW_LULL | LAB_ROW_BASE},
    {"libuv", "libuv uv_fs_read", UV_RUN, 0},
};

enum { PC_P50, PC_P99, PC_COUNT };
static const lab_col pool_cols[PC_COUNT] = {
    {"p50_us", "p50 µs", 0},
    {"p99_us", "p99 µs", 0},
};

typedef struct pool_ctx {
    files_trips t; /* the row's; fd, block, want, warmup and ns kept */
    double *us;
    int err; /* the error of a row that failed */
} pool_ctx;

typedef struct pool_job {
    trips_fn run;
    files_trips *t;
    int rc;
} pool_job;

static void *pool_thread(void *arg) {
    pool_job *j = arg;
    j->rc = lab_pin_cpu(lab_first_cpu());
    j->t->start = lab_now_ns();
    if (j->rc == 0) j->rc = j->run(j->t);
    return NULL;
}

static int pool_measure(lab_fig *f, lab_row *row, int round, double *v) {
    (void)round;
    pool_ctx *c = f->ctx;
    const pool_impl *im = row->arg;
    c->t.n = 0;
    memset(c->t.block, 0xff, FILES_BLOCK);
    pool_job j = {im->run, &c->t, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, pool_thread, &j) != 0) return -EAGAIN;
    pthread_join(th, NULL);
    if (j.rc == -EPROTO)
        printf("files: %s: a read returned the wrong bytes\n", im->label);
    if (j.rc == 0 && c->t.n != c->t.warmup + c->t.want) {
        printf("files: %s: %d trips, expected %d\n", im->label, c->t.n,
               c->t.warmup + c->t.want);
        j.rc = -EPROTO;
    }
    if (j.rc < 0) {
        if (j.rc != -EPROTO)
            lab_detail("files: %s: %s\n", im->label, strerror(-j.rc));
        return j.rc;
    }
    for (int i = 0; i < c->t.want; i++)
        c->us[i] = (double)c->t.ns[i] / 1e3;
    v[PC_P50] = lab_percentile(c->us, (size_t)c->t.want, 0.50);
    v[PC_P99] = lab_percentile(c->us, (size_t)c->t.want, 0.99);
    return 0;
}

/* ------------------------------------------------ file-system events */

enum { EC_RATE, EC_LOST, EC_OVERFLOWS, EC_IDLE, EC_COUNT };
static const lab_col event_cols[EC_COUNT] = {
    {"delivered_per_s", "delivered/s", LAB_COL_RATE},
    {"lost", "lost", 0},
    {"overflows", "overflows", 0},
    {"idle_wakeups", "idle wakeups", 0},
};

typedef struct events_ctx {
    const char *base; /* the scenario's temporary directory */
    int files;        /* created a round */
    uint64_t idle_ns; /* the idle window */
    unsigned char *seen;
    /* Over all rounds, for the verdict: a round that lost fails. */
    long lost, overflows;
} events_ctx;

typedef struct watcher {
    events_ctx *c;
    const char *dir;
    lull_loop *loop;
    lull_fsevent w;
    lull_task mark, finish;
    sem_t ready, marked;
    int marks;
    lull_metrics m[2]; /* at the idle window's start and end */
    int distinct;      /* atomic: names delivered */
    long repeated, unknown, overflows;
    uint64_t last_ns; /* the last new name's delivery */
    int rc;
} watcher;

static uint64_t wakeups(const lull_metrics *m) {
    return m->wakeups_io + m->wakeups_timer + m->wakeups_signal;
}

static void on_event(lull_fsevent *w, unsigned events, const char *name,
                     const char *other) {
    (void)other;
    watcher *e = w->data;
    if (events & LULL_FSEVENT_OVERFLOW) {
        e->overflows++;
        return;
    }
    char *end;
    long i = name && name[0] == 'f' ? strtol(name + 1, &end, 10) : -1;
    if (i < 0 || i >= e->c->files || *end || events != LULL_FSEVENT_CREATED) {
        e->unknown++;
        return;
    }
    if (e->c->seen[i]) {
        e->repeated++;
        return;
    }
    e->c->seen[i] = 1;
    e->last_ns = lab_now_ns();
    __atomic_add_fetch(&e->distinct, 1, __ATOMIC_RELEASE);
}

static void on_mark(lull_task *t) {
    watcher *e = t->data;
    lull_loop_metrics(e->loop, &e->m[e->marks++ % 2]);
    sem_post(&e->marked);
}

static void on_finish(lull_task *t) {
    watcher *e = t->data;
    lull_fsevent_stop(&e->w);
}

static void *watch_thread(void *arg) {
    watcher *e = arg;
    e->rc = lull_loop_new(&e->loop, NULL);
    if (e->rc == 0) {
        lull_fsevent_init(e->loop, &e->w);
        e->w.data = e;
        e->rc = lull_fsevent_start(&e->w, e->dir, on_event);
        if (e->rc < 0) lull_loop_free(e->loop);
    }
    sem_post(&e->ready);
    if (e->rc < 0) return NULL;
    e->rc = lull_loop_run(e->loop, LULL_RUN_DEFAULT);
    if (lull_loop_free(e->loop) < 0 && e->rc == 0) e->rc = -EBUSY;
    return NULL;
}

static void sleep_until(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Creates the files at FILES_RATE, a batch a millisecond; returns how many
 * were created, and the first one's time in *t0. */
static int create_files(const char *dir, int files, uint64_t *t0) {
    char path[512];
    int per_ms = FILES_RATE / 1000, made = 0;
    *t0 = lab_now_ns();
    for (int ms = 0; made < files; ms++) {
        sleep_until(*t0 + (uint64_t)ms * 1000000u);
        for (int k = 0; k < per_ms && made < files; k++) {
            snprintf(path, sizeof path, "%s/f%d", dir, made);
            if (mknod(path, S_IFREG | 0600, 0) < 0) return made;
            made++;
        }
    }
    return made;
}

static void remove_files(const char *dir, int files) {
    char path[512];
    for (int i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f%d", dir, i);
        unlink(path);
    }
    rmdir(dir);
}

static int events_once(events_ctx *c, double *v) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/events-XXXXXX", c->base);
    if (!mkdtemp(dir)) return -errno;
    memset(c->seen, 0, (size_t)c->files);
    watcher e = {.c = c, .dir = dir};
    sem_init(&e.ready, 0, 0);
    sem_init(&e.marked, 0, 0);
    lull_task_init(&e.mark, on_mark);
    lull_task_init(&e.finish, on_finish);
    e.mark.data = e.finish.data = &e;
    pthread_t th;
    int made = 0, rc = 0;
    if (pthread_create(&th, NULL, watch_thread, &e) != 0) {
        rmdir(dir);
        return -EAGAIN;
    }
    sem_wait(&e.ready);
    if (e.rc < 0) {
        pthread_join(th, NULL);
        rmdir(dir);
        return e.rc;
    }
    /* The idle window, between two looks at the loop's counters. */
    lull_task_post_remote(e.loop, &e.mark);
    sem_wait(&e.marked);
    sleep_until(lab_now_ns() + c->idle_ns);
    lull_task_post_remote(e.loop, &e.mark);
    sem_wait(&e.marked);
    /* The burst, then up to 2 s for the last deliveries. */
    uint64_t t0;
    made = create_files(dir, c->files, &t0);
    if (made < c->files) rc = -errno;
    uint64_t deadline = lab_now_ns() + 2000000000u;
    while (__atomic_load_n(&e.distinct, __ATOMIC_ACQUIRE) < made &&
           lab_now_ns() < deadline)
        usleep(1000);
    lull_task_post_remote(e.loop, &e.finish);
    pthread_join(th, NULL);
    remove_files(dir, made);
    if (rc == 0) rc = e.rc;
    if (rc < 0) return rc;
    long lost = (long)(made - e.distinct) + e.overflows;
    c->lost += lost;
    c->overflows += e.overflows;
    v[EC_RATE] = e.distinct / ((double)(e.last_ns - t0) / 1e9);
    v[EC_LOST] = (double)lost;
    v[EC_OVERFLOWS] = (double)e.overflows;
    v[EC_IDLE] = (double)(wakeups(&e.m[1]) - wakeups(&e.m[0]));
    if (lost || e.repeated || e.unknown) {
        printf("files: events: %d files, %d names delivered, %ld lost "
               "(%ld overflows), %ld repeated, %ld unknown\n",
               made, e.distinct, lost, e.overflows, e.repeated, e.unknown);
        return -EPROTO;
    }
    return 0;
}

static int events_measure(lab_fig *f, lab_row *row, int round, double *v) {
    (void)row;
    (void)round;
    return events_once(f->ctx, v);
}

/* ---------------------------------------------------------- output */

static void brief_pool(lab_fig *pool, const bool ok[IMPLS]) {
    const char *header[] = {"4 KiB pread round trip", "p50 µs", "p99 µs",
                            "× lull"};
    lab_table t;
    lab_table_init(&t, 4, header);
    char a[LAB_CELL];
    for (int i = 0; i < IMPLS; i++) {
        int r = lab_table_row(&t);
        lab_table_set(&t, r, 0, "%s", impls[i].label);
        lab_row *row = lab_fig_find(pool, impls[i].peer, impls[i].label);
        if (!ok[i] || !row || row->v[PC_P50].n == 0) {
            lab_table_set(&t, r, 1, "%s", ok[i] ? "failed" : "not run");
            lab_table_set(&t, r, 2, "–");
            lab_table_set(&t, r, 3, "–");
            continue;
        }
        for (int c = PC_P50; c <= PC_P99; c++) {
            char cell[LAB_CELL];
            lab_format_series(cell, sizeof cell, &row->v[c]);
            lab_table_set(&t, r, 1 + c, "%s", cell);
        }
        lab_table_set(&t, r, 3, "%s",
                      lab_fmt_ratio(a, lab_ratio(pool, lab_fig_base(pool, 0),
                                                 row, PC_P50)));
    }
    lab_table_brief(&t, "the pool: median [min–max] over rounds of each "
                        "round's p50/p99");
}

/* The figures --only left out print nothing: their rows would read
 * "failed" (the pool's) or a rate of "–" (the events'). */
static void brief(lab_fig *pool, lab_fig *ev, const bool ok[IMPLS],
                  const events_ctx *ec, bool run_pool, bool run_ev) {
    char a[LAB_CELL];
    if (run_pool) brief_pool(pool, ok);
    if (!run_ev) return;
    const lab_row *er = &ev->rows[0];
    char rate[LAB_CELL];
    lab_format_series(rate, sizeof rate, &er->v[EC_RATE]);
    /* lost counts each overflow too. */
    printf("  events, %d files at %d/s: delivered/s %s, lost %ld, idle "
           "wakeups %s\n",
           ec->files, FILES_RATE, rate, ec->lost,
           lab_fmt(a, lab_series_max(&er->v[EC_IDLE])));
}

/* quick (the demo): the first line only; the rest in full runs. With
 * --only fs_events the events' line is the one shown, quick or not, and
 * the pool's lines say they were not measured. */
static void verdict(lab_fig *pool, lab_fig *ev, const bool ok[IMPLS],
                    const events_ctx *ec, bool quick, bool run_pool,
                    bool run_ev) {
    char a[LAB_CELL], b[LAB_CELL];
    lab_row *floor_row = lab_fig_find(pool, "floor", NULL);
    lab_row *lull = lab_fig_base(pool, 0);
    double lp = lab_row_median(lull, PC_P50);
    double bp = lab_row_median(floor_row, PC_P50);
    /* 1. The round trip's p50 within 1.25× of the bare pool's (the
     * floor: the verdict says the word the short output defined). */
    lab_verdict *v = lab_verdict_add("files", 0);
    if (v && !run_pool) {
        snprintf(v->note, sizeof v->note, "pool p50: not measured (--only)");
    } else if (v && !(isfinite(lp) && isfinite(bp))) {
        snprintf(v->note, sizeof v->note, "pool p50: not measured");
    } else if (v) {
        v->timing = true;
        snprintf(v->what, sizeof v->what, "fs_read p50 %s× floor",
                 lab_fmt3(a, lp / bp));
        snprintf(v->target, sizeof v->target, "≤ 1.25× floor");
        snprintf(v->peer, sizeof v->peer, "%s µs vs %s µs", lab_fmt3(a, lp),
                 lab_fmt3(b, bp));
        lab_verdict_spread(v, "floor p50", lab_row_spread(floor_row, PC_P50));
        lab_verdict_bound(v, lp / bp, 1.25, true);
    }
    if (quick && run_pool) return;
    /* 2. At most libuv's. */
    v = run_pool ? lab_verdict_add("files", 1) : NULL;
    lab_row *uv = lab_fig_find(pool, "libuv", NULL);
    double up = lab_row_median(uv, PC_P50);
    if (v && (!ok[I_UV] || !isfinite(up) || !isfinite(lp))) {
        snprintf(v->note, sizeof v->note, "pool p50 against libuv: not run");
    } else if (v) {
        v->timing = true;
        snprintf(v->what, sizeof v->what, "fs_read p50 vs libuv %s",
                 lab_fmt_ratio(a, up / lp));
        snprintf(v->target, sizeof v->target, "at most libuv's");
        snprintf(v->peer, sizeof v->peer, "%s µs vs %s µs", lab_fmt3(a, lp),
                 lab_fmt3(b, up));
        lab_verdict_spread(v, "libuv p50", lab_row_spread(uv, PC_P50));
        lab_verdict_bound(v, lp, up, true);
    }
    /* 3. Events: ≥ 10,000 delivered a second, none lost, an idle watch
     * quiet. */
    v = run_ev ? lab_verdict_add("files", 2) : NULL;
    const lab_row *er = &ev->rows[0];
    double rate = lab_row_median(er, EC_RATE);
    double idle = lab_series_max(&er->v[EC_IDLE]);
    if (v && !isfinite(rate)) {
        snprintf(v->note, sizeof v->note, "fs events: not measured");
    } else if (v) {
        v->timing = true;
        snprintf(v->what, sizeof v->what, "fs events %s/s, %ld lost",
                 lab_fmt3(a, rate), ec->lost);
        snprintf(v->target, sizeof v->target, "≥ 10000/s, 0 lost");
        snprintf(v->peer, sizeof v->peer, "idle watch: %s wakeups",
                 lab_fmt3(b, idle));
        lab_verdict_bound(v, rate, EVENTS_GOAL, false);
        if (ec->lost || idle != 0) v->status = LAB_V_MISSED;
    }
}

/* ------------------------------------------------------------ driver */

static int make_file(const char *base, int *fd) {
    char path[256];
    snprintf(path, sizeof path, "%s/data", base);
    *fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (*fd < 0) return -errno;
    unlink(path);
    static char chunk[FILES_BLOCK];
    for (int i = 0; i < FILES_SIZE / FILES_BLOCK; i++) {
        memset(chunk, i, sizeof chunk);
        if (write(*fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk)
            return errno ? -errno : -EIO;
    }
    return 0;
}

/* The kernel's queue: more files than it holds could overflow by design. */
static int queue_limit(void) {
    FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
    int n = 16384;
    if (f) {
        if (fscanf(f, "%d", &n) != 1) n = 16384;
        fclose(f);
    }
    return n;
}

static int run_files(const lab_options *opts, lab_json *json) {
    int rounds = lab_rounds(opts, 5, 3);
    bool ok[IMPLS];
    for (int i = 0; i < IMPLS; i++)
        ok[i] = impls[i].run != NULL;
    lab_detail("implementations: lull");
#ifdef LAB_HAVE_UV
    lab_detail(" libuv %s", files_uv_version());
    /* Before libuv starts its pool: one thread, as lull's and the bare
     * pool's. */
    setenv("UV_THREADPOOL_SIZE", "1", 0);
#endif
    lab_detail("\n");
    char base[] = "/dev/shm/lull-lab-files-XXXXXX";
    char base_tmp[] = "/tmp/lull-lab-files-XXXXXX";
    const char *dir = mkdtemp(base);
    if (!dir) dir = mkdtemp(base_tmp);
    if (!dir) return -errno;
    lab_tmp_note(dir);
    static pool_ctx pc;
    static events_ctx ec;
    static char block[FILES_BLOCK] __attribute__((aligned(4096)));
    pc = (pool_ctx){.t = {.block = block, .fd = -1}};
    pc.t.want = opts->quick ? 2000 : 20000;
    pc.t.warmup = pc.t.want / 10;
    pc.t.ns = calloc((size_t)pc.t.want, sizeof *pc.t.ns);
    pc.us = calloc((size_t)pc.t.want, sizeof *pc.us);
    int limit = queue_limit();
    ec = (events_ctx){.base = dir};
    ec.files = FILES_RATE * (opts->quick ? 3 : 10) / 10;
    if (ec.files > limit) ec.files = limit;
    ec.idle_ns = opts->quick ? 200000000u : 500000000u;
    ec.seen = calloc((size_t)ec.files, 1);
    lab_fig *pool = NULL, *ev = NULL;
    int rc = -ENOMEM;
    if (!pc.t.ns || !pc.us || !ec.seen) goto out;
    if ((rc = make_file(dir, &pc.t.fd)) < 0) goto out;
    lab_fig_spec ps = {"pool_read", "pool: a 4 KiB pread round trip",
                       NULL,        pool_cols,
                       PC_COUNT,    PC_P50,
                       0,           pool_measure,
                       NULL,        NULL,
                       &pc};
    lab_fig_spec es = {
        "fs_events", "file-system events", NULL, event_cols, EC_COUNT, -1,
        0,           events_measure,       NULL, NULL,       &ec};
    rc = -ENOMEM;
    if (!(pool = lab_fig_new(&ps)) || !(ev = lab_fig_new(&es))) goto out;
    for (int i = 0; i < IMPLS; i++) {
        if (!ok[i]) continue;
        lab_row *r = lab_fig_add(pool, impls[i].peer, impls[i].flags, "%s",
                                 impls[i].label);
        if (r) r->arg = &impls[i];
    }
    lab_fig_add(ev, "lull", LAB_ROW_LULL | LAB_ROW_BASE, "lull_fsevent");
    bool run_pool = !opts->only || strcmp(opts->only, ps.key) == 0;
    bool run_ev = !opts->only || strcmp(opts->only, es.key) == 0;
    lab_detail("pool: every thread of a row on CPU %d, %d trips (+%d "
               "warm-up) a round; events: %d files at %d/s (the kernel "
               "queues %d), idle window %.1f s; %d rounds, the row that "
               "goes first rotating\n",
               lab_first_cpu(), pc.t.want, pc.t.warmup, ec.files, FILES_RATE,
               limit, (double)ec.idle_ns / 1e9, rounds);
    for (int r = 0; r < rounds; r++) {
        if (run_pool) lab_fig_round(pool, opts, r);
        if (run_ev) lab_fig_round(ev, opts, r);
    }
    lab_detail("\n%s\n", ps.title);
    lab_fig_print(pool);
    lab_fig_notes(pool);
    lab_detail("\n%s\n", es.title);
    lab_fig_print(ev);
    lab_fig_notes(ev);
    if (json) {
        lab_json_key(json, "params");
        lab_json_begin_object(json);
        lab_json_field(json, "rounds", rounds);
        lab_json_field(json, "trips", pc.t.want);
        lab_json_field(json, "warmup_trips", pc.t.warmup);
        lab_json_field(json, "files", ec.files);
        lab_json_field(json, "files_per_s", FILES_RATE);
        lab_json_field(json, "idle_window_s", (double)ec.idle_ns / 1e9);
        lab_json_end_object(json);
        lab_fig_json(pool, json);
        lab_fig_json(ev, json);
    }
    /* The demo (--quick) shows the verdict's line and leaves the table to
     * full runs and --verbose. */
    if (!opts->quick) brief(pool, ev, ok, &ec, run_pool, run_ev);
    verdict(pool, ev, ok, &ec, opts->quick, run_pool, run_ev);
    lab_fig_plot(pool, opts->plot, PC_P50, "files: 4 KiB pread round trip p50",
                 "µs");
    rc = lab_fig_error(pool);
    if (rc == 0 || rc == -EPROTO) rc = lab_fig_error(ev);
    if (rc == -EPROTO) rc = 0; /* counted already: lull-lab exits 1 */
out:
    if (pool) lab_fig_free(pool);
    if (ev) lab_fig_free(ev);
    if (pc.t.fd >= 0) close(pc.t.fd);
    free(pc.t.ns);
    free(pc.us);
    free(ec.seen);
    rmdir(dir);
    lab_tmp_forget(dir);
    return rc;
}

/* --only: the two figures' keys. */
static const char *const files_only[] = {"pool_read", "fs_events", NULL};

const lab_scenario lab_files = {
    "files",
    "the pool's 4 KiB pread round trip beside a bare futex pool and libuv; "
    "file-system events delivered a second, none lost",
    run_files,
    "files: the pool's pread round trip beside a bare pool; file-system events",
    "files",
    NULL,
    true,
    files_only,
};
