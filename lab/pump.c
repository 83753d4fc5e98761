/* The `pump` scenario (BRIEF §4, investigation 1A): N live sessions, each a
 * committed-event window (lab/window.c) whose pump delivers to a driver.
 * Three modes on the same session code; only the trigger of the pass
 * differs:
 *   poll_ms_grid  the investigation's "before", setInterval(pass, 5) on a
 *                 runtime whose timers are whole milliseconds: every
 *                 session's 5 ms poll falls on one of five 1 ms slots, and
 *                 the polls of a slot share one timer (the runtime's timer
 *                 list), so they share one wakeup
 *   poll          the same 5 ms poll written on lull: a repeating timer per
 *                 session at a random ns phase, so the 12 phases never
 *                 coalesce (about 2,400 wakeups/s at 12 sessions)
 *   notify        the pump listens to the window's notifier (the "after")
 *
 * One run of a mode: open the sessions with R events already delivered and
 * retained; an idle window (reads, utilisation, the loop thread's CPU time,
 * wakeups and the wake audit; its edges are in idle_edges below); then, with R
 * = 49, a provider fixture streams one turn per session, 40 events each, one
 * every 15 ms, every session at once, and the driver records each event's
 * delivery wait (the instant the commit made it readable -> the driver receives
 * it, real clock). Each round runs both modes, alternating which goes first;
 * figures are median [min–max] over rounds. Then the same at 1,000 and 10,000
 * sessions.
 *
 * Everything runs on the calling thread, on one lull loop per run; nothing
 * here is a model. Sessions: --sessions N (default 12). */
#include "lab.h"

#include "window.h"
#include <stddef.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lull.h>

#define MS 1000000ull

enum { MODE_POLL_GRID, MODE_POLL, MODE_NOTIFY, MODES };
static const char *const mode_name[MODES] = {"poll_ms_grid", "poll", "notify"};
static const char *const mode_label[MODES] = {
    "poll, 1 ms grid (before)", "poll on lull's ns timers", "notify (after)"};

typedef struct params {
    int sessions;           /* the main table's size (default 12) */
    int events;             /* per turn: 40, the investigation's */
    uint64_t interval_ns;   /* provider: one event every 15 ms */
    uint64_t poll_ns;       /* poll modes' period: 5 ms */
    uint64_t grid_ns;       /* poll_ms_grid: the runtime's timer unit, 1 ms */
    uint64_t idle_ns;       /* the idle window */
    uint64_t scale_idle_ns; /* ... at 1,000 and 10,000 sessions */
    int retain_small;       /* 49 and 409 retained events: the reference's */
    int retain_large;
    int rounds;
    int scale_rounds;
    int scale[2]; /* larger session counts: 1,000 and 10,000 */
    uint64_t seed;
} params;

/* ------------------------------------------------------------ sessions */

typedef struct run run;

typedef struct session {
    lab_window window;         /* the source of truth */
    lab_window_cursor cursor;  /* the driver's delivery position */
    lull_pump pump;            /* runs deliver_pass */
    lull_listener listener;    /* notify mode: the pump on window.notifier */
    lull_timer poll;           /* poll mode: wakes the pump every 5 ms */
    struct session *slot_next; /* poll_ms_grid: the next of its slot */
    lull_timer provider;       /* the fixture's stream into this window */
    int sent;                  /* events of the turn committed */
    int received;              /* events of the turn the driver has */
    run *run;
} session;

/* The idle window's edges. It opens in the loop thread's first callback
 * of the window (set-up before it is not counted) and closes while the loop
 * sleeps: an observer thread reads the loop thread's CPU clock at the
 * window's end, then posts the task that stops the loop. So the wakeup that
 * ends the window, the harness's and not the sessions', is left out. */
typedef struct idle_edges {
    lull_task begin;    /* loop thread: the window's first callback */
    lull_task stop;     /* posted by the observer: ends the run */
    clockid_t loop_cpu; /* the loop thread's CPU-time clock */
    uint64_t end_at;    /* CLOCK_MONOTONIC: when the observer reads */
    atomic_bool begun;  /* cpu0 and t0 are set */
    uint64_t t0, cpu0;  /* loop thread, in begin */
    uint64_t t1, cpu1;  /* observer, the loop asleep (or busy polling) */
    uint64_t cpu_stop;  /* loop thread, in stop: cpu_stop - cpu1 is the
                           cost of the wakeup that ends the window */
    uint64_t reads0, reads1;
    lull_metrics m0, m1;
} idle_edges;

static void window_stop(lull_task *t);

/* poll_ms_grid: one timer per millisecond slot of the 5 ms period, as a
 * runtime with millisecond timers keeps one list of timers per due time:
 * the slot's timer polls every session whose phase rounds to it. */
#define MAX_SLOTS 16
typedef struct grid_slot {
    lull_timer timer;
    session *first;
} grid_slot;

struct run {
    lull_loop *loop;
    session *s;
    int n;
    int mode;
    grid_slot slot[MAX_SLOTS];
    int nslots;
    idle_edges idle;
    lull_timer deadline; /* ends a stream that cannot finish (a bug) */
    int done;            /* sessions whose terminal event arrived */
    double *wait;        /* delivery wait of every event, ns */
    size_t nwait;
    double *terminal; /* ... of each session's terminal event */
    size_t nterminal;
    int events; /* per turn */
    bool timed_out;
};

/* The driver: receives events in order, records how long each waited. */
static void driver_receive(session *s, const lab_window_event *ev,
                           uint64_t now) {
    run *r = s->run;
    double wait = now >= ev->readable_ns ? (double)(now - ev->readable_ns) : 0;
    r->wait[r->nwait++] = wait;
    s->received++;
    if (ev->flags & LAB_EVENT_TERMINAL) {
        r->terminal[r->nterminal++] = wait;
        if (++r->done == r->n) lull_stop(r->loop);
    }
}

/* The delivery pass, the same in both modes: one state read, every event
 * after the cursor to the driver. A full batch continues next task. */
#define BATCH 64
static int deliver_pass(lull_pump *p, uint64_t *retry_ns) {
    (void)retry_ns; /* this driver never holds anything back */
    session *s = LULL_CONTAINER_OF(p, session, pump);
    lab_window_event ev[BATCH];
    int n = lab_window_read(&s->window, &s->cursor, ev, BATCH);
    if (n == 0) return LULL_PASS_QUIET;
    uint64_t now = lull_now_exact(s->run->loop);
    for (int i = 0; i < n; i++)
        driver_receive(s, &ev[i], now);
    lull_pump_delivered(p, (uint64_t)n);
    return n == BATCH ? LULL_PASS_AGAIN : LULL_PASS_QUIET;
}

static void poll_tick(lull_timer *t) {
    lull_pump_wake(&LULL_CONTAINER_OF(t, session, poll)->pump);
}

static void slot_tick(lull_timer *t) {
    grid_slot *slot = LULL_CONTAINER_OF(t, grid_slot, timer);
    for (session *s = slot->first; s; s = s->slot_next)
        lull_pump_wake(&s->pump);
}

/* The provider fixture: one event per tick; the last one ends the turn. */
static void provider_tick(lull_timer *t) {
    session *s = LULL_CONTAINER_OF(t, session, provider);
    int k = s->sent++;
    bool last = s->sent == s->run->events;
    lab_window_append(&s->window, (uint64_t)k, last ? LAB_EVENT_TERMINAL : 0,
                      1);
    lab_window_commit(&s->window);
    if (last) lull_timer_stop(t);
}

static void stream_deadline(lull_timer *t) {
    run *r = LULL_CONTAINER_OF(t, run, deadline);
    r->timed_out = true;
    lull_stop(t->loop);
}

static void run_close(run *r) {
    for (int i = 0; i < r->n; i++) {
        session *s = &r->s[i];
        lull_timer_stop(&s->poll);
        lull_timer_stop(&s->provider);
        lull_pump_close(&s->pump);
        lab_window_cursor_close(&s->cursor);
        lab_window_free(&s->window);
    }
    for (int k = 0; k < r->nslots; k++)
        lull_timer_stop(&r->slot[k].timer);
    lull_timer_stop(&r->deadline);
    int rc = r->loop ? lull_loop_free(r->loop) : 0;
    if (rc < 0)
        fprintf(stderr, "pump: lull_loop_free: %s (a handle leaked)\n",
                strerror(-rc));
    free(r->s);
    free(r->wait);
    free(r->terminal);
    memset(r, 0, sizeof *r);
}

/* Starts the timer of every slot that has sessions (an empty slot has no
 * timer in the runtime either), on the loop clock's millisecond grid. */
static void start_slots(run *r, const params *p) {
    uint64_t now = lull_now_exact(r->loop);
    uint64_t origin = (now / p->grid_ns + 1) * p->grid_ns;
    for (int k = 0; k < r->nslots; k++)
        if (r->slot[k].first)
            lull_timer_start(&r->slot[k].timer,
                             origin + (uint64_t)k * p->grid_ns - now,
                             p->poll_ns);
}

/* Opens n sessions with `retain` events already delivered and retained. */
static int run_open(run *r, int n, int mode, int retain, const params *p,
                    uint64_t *seed) {
    memset(r, 0, sizeof *r);
    r->n = n;
    r->mode = mode;
    r->events = p->events;
    int rc = lull_loop_new(&r->loop, NULL);
    if (rc < 0) return rc;
    LULL_NAME(r->loop, poll_tick, "pump: poll timer (5 ms, per session)");
    LULL_NAME(r->loop, slot_tick, "pump: poll timer list (5 ms, 1 ms slot)");
    LULL_NAME(r->loop, deliver_pass, "pump: delivery pass");
    LULL_NAME(r->loop, provider_tick, "pump: provider fixture (15 ms)");
    LULL_NAME(r->loop, window_stop, "pump: end of the idle window");
    lull_timer_init(r->loop, &r->deadline, stream_deadline);
    r->nslots = (int)(p->poll_ns / p->grid_ns);
    for (int k = 0; k < r->nslots; k++)
        lull_timer_init(r->loop, &r->slot[k].timer, slot_tick);
    size_t nwait = (size_t)n * (size_t)p->events;
    r->s = calloc((size_t)n, sizeof *r->s);
    r->wait = malloc(nwait * sizeof *r->wait);
    r->terminal = malloc((size_t)n * sizeof *r->terminal);
    if (!r->s || !r->wait || !r->terminal) {
        r->n = 0;
        run_close(r);
        return -ENOMEM;
    }
    /* Written now, not first in a delivery pass: fresh pages of a large
     * allocation fault on first write (tens of µs each on a VM), and at
     * 1,000 or 10,000 sessions those faults would land inside the waits
     * being measured. NAN (no wait recorded) is not a zero the compiler
     * could fold into calloc and skip. */
    for (size_t i = 0; i < nwait; i++)
        r->wait[i] = NAN;
    for (int i = 0; i < n; i++)
        r->terminal[i] = NAN;
    /* Retained + one turn, so the turn never waits for ring space. */
    uint32_t capacity = (uint32_t)(retain + p->events + 1);
    for (int i = 0; i < n; i++) {
        session *s = &r->s[i];
        s->run = r;
        rc = lab_window_init(&s->window, r->loop, capacity, (uint32_t)retain);
        if (rc < 0) {
            r->n = i;
            run_close(r);
            return rc;
        }
        for (int k = 0; k < retain; k++)
            lab_window_append(&s->window, (uint64_t)k, 0, 0);
        lab_window_commit(&s->window); /* nobody listens yet */
        /* The driver has had them: its cursor is past them. */
        lab_window_cursor_open(&s->window, &s->cursor, s->window.readable);
        lull_pump_init(r->loop, &s->pump, deliver_pass);
        lull_timer_init(r->loop, &s->poll, poll_tick);
        lull_timer_init(r->loop, &s->provider, provider_tick);
        if (mode == MODE_POLL) {
            /* Sessions open at unrelated times: a random phase each. */
            uint64_t phase = 1000 + lab_rand(seed) % (p->poll_ns - 1000);
            lull_timer_start(&s->poll, phase, p->poll_ns);
        } else if (mode == MODE_POLL_GRID) {
            /* The same random phase, rounded to the runtime's unit. */
            grid_slot *slot = &r->slot[lab_rand(seed) % (uint64_t)r->nslots];
            s->slot_next = slot->first;
            slot->first = s;
        } else {
            lull_pump_listen(&s->pump, &s->window.notifier, &s->listener);
        }
    }
    if (mode == MODE_POLL_GRID) start_slots(r, p);
    return 0;
}

static uint64_t total_reads(const run *r) {
    uint64_t sum = 0;
    for (int i = 0; i < r->n; i++)
        sum += r->s[i].window.reads;
    return sum;
}

static uint64_t total_passes(const run *r) {
    uint64_t sum = 0;
    for (int i = 0; i < r->n; i++)
        sum += r->s[i].pump.passes;
    return sum;
}

/* ------------------------------------------------------------- figures */

#define AUDIT_TOP 3
typedef struct audit_row {
    char name[64];
    double wakeups_per_s;
    double empty_per_s;
} audit_row;

typedef struct idle_result {
    double reads_per_session_s;
    double utilisation_pct;
    double cpu_ms_per_s;  /* the loop thread's, between the edges */
    double end_wakeup_us; /* loop-thread CPU of the wakeup that ends it */
    double wakeups_per_s; /* the window's own end excluded */
    int naudit;
    audit_row audit[AUDIT_TOP];
} idle_result;

typedef struct stream_result {
    double mean_us, p50_us, p95_us, p99_us, max_us;
    double terminal_p50_us;
    double passes_per_event;
    bool complete;
} stream_result;

/* Series of one mode at one size. */
typedef struct figures {
    lab_series reads, util, cpu_small, cpu_large, wakeups, end_wakeup;
    lab_series mean, p50, p95, p99, max, terminal, passes;
    int naudit;
    audit_row audit[AUDIT_TOP]; /* the last round's idle window */
    int incomplete;             /* streams that hit the deadline */
} figures;

static void window_begin(lull_task *t) {
    run *r = LULL_CONTAINER_OF(t, run, idle.begin);
    idle_edges *e = &r->idle;
    lull_loop_metrics(r->loop, &e->m0);
    lull_loop_audit_reset(r->loop);
    e->reads0 = total_reads(r);
    e->t0 = lab_now_ns();
    e->cpu0 = lab_thread_cpu_ns();
    atomic_store_explicit(&e->begun, true, memory_order_release);
}

static void window_stop(lull_task *t) {
    run *r = LULL_CONTAINER_OF(t, run, idle.stop);
    idle_edges *e = &r->idle;
    e->cpu_stop = lab_thread_cpu_ns();
    e->reads1 = total_reads(r);
    lull_loop_metrics(r->loop, &e->m1);
    lull_loop_unref(r->loop);
    lull_stop(r->loop);
}

static uint64_t read_clock(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The observer: sleeps to the window's end, reads the loop thread's CPU
 * clock there, then wakes the loop to stop it. */
static void *window_observer(void *arg) {
    run *r = arg;
    idle_edges *e = &r->idle;
    struct timespec at = {(time_t)(e->end_at / 1000000000u),
                          (long)(e->end_at % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
        ;
    /* A loop thread starved past the whole window has not begun it. */
    while (!atomic_load_explicit(&e->begun, memory_order_acquire)) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    e->cpu1 = read_clock(e->loop_cpu);
    e->t1 = lab_now_ns();
    lull_post_remote(r->loop, &e->stop);
    return NULL;
}

static int idle_window(run *r, uint64_t idle_ns, idle_result *out) {
    memset(out, 0, sizeof *out);
    /* One non-blocking iteration first: registrations reach the kernel and
     * nothing left over from opening is counted. */
    int rc = lull_run(r->loop, LULL_RUN_NOWAIT);
    if (rc < 0) return rc;
    idle_edges *e = &r->idle;
    atomic_store(&e->begun, false);
    int err = pthread_getcpuclockid(pthread_self(), &e->loop_cpu);
    if (err) return -err;
    lull_task_init(&e->begin, window_begin);
    lull_task_init(&e->stop, window_stop);
    lull_post(r->loop, &e->begin);
    lull_loop_ref(r->loop); /* alive until the observer's stop runs */
    e->end_at = lab_now_ns() + idle_ns;
    pthread_t observer;
    err = pthread_create(&observer, NULL, window_observer, r);
    if (err) {
        lull_cancel(&e->begin);
        lull_loop_unref(r->loop);
        return -err;
    }
    rc = lull_run(r->loop, LULL_RUN_DEFAULT);
    pthread_join(observer, NULL);
    if (rc < 0) return rc;

    double seconds = (double)(e->t1 - e->t0) / 1e9;
    out->reads_per_session_s = (double)(e->reads1 - e->reads0) / r->n / seconds;
    double busy = (double)(e->m1.busy_ns - e->m0.busy_ns);
    double idle = (double)(e->m1.idle_ns - e->m0.idle_ns);
    out->utilisation_pct = busy + idle > 0 ? 100.0 * busy / (busy + idle) : 0;
    out->cpu_ms_per_s = (double)(e->cpu1 - e->cpu0) / 1e6 / seconds;
    out->end_wakeup_us = (double)(e->cpu_stop - e->cpu1) / 1e3;
    /* The observer's post woke the loop if it was asleep: the harness's
     * wakeup, not the sessions'. */
    uint64_t wakeups = (e->m1.wakeups - e->m0.wakeups) -
                       (e->m1.wakeups_remote - e->m0.wakeups_remote);
    out->wakeups_per_s = (double)wakeups / seconds;

    lull_audit_entry a[AUDIT_TOP + 1];
    int total = lull_loop_audit(r->loop, a, AUDIT_TOP + 1, NULL);
    int got = total < AUDIT_TOP + 1 ? total : AUDIT_TOP + 1;
    for (int i = 0; i < got; i++) {
        if (a[i].name && strstr(a[i].name, "end of the idle window")) continue;
        if (a[i].wakeups == 0 && a[i].empty_passes == 0) continue;
        if (out->naudit == AUDIT_TOP) continue;
        audit_row *row = &out->audit[out->naudit++];
        snprintf(row->name, sizeof row->name, "%s",
                 a[i].name ? a[i].name : "?");
        row->wakeups_per_s = a[i].wakeups_per_s;
        row->empty_per_s = a[i].empty_per_s;
    }
    return 0;
}

static int stream(run *r, const params *p, stream_result *out) {
    memset(out, 0, sizeof *out);
    r->nwait = r->nterminal = 0;
    r->done = 0;
    uint64_t passes0 = total_passes(r);
    /* Every session's provider starts in the same instant: all stream at
     * once, as in the reference benchmark. */
    for (int i = 0; i < r->n; i++) {
        r->s[i].sent = r->s[i].received = 0;
        lull_timer_start(&r->s[i].provider, p->interval_ns, p->interval_ns);
    }
    /* Far beyond the 0.6 s the turn takes, even on a saturated loop. */
    r->timed_out = false;
    lull_timer_start(&r->deadline, 60000 * MS, 0);
    int rc = lull_run(r->loop, LULL_RUN_DEFAULT);
    lull_timer_stop(&r->deadline);
    if (rc < 0) return rc;
    out->complete = !r->timed_out && r->done == r->n;

    size_t n = r->nwait;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += r->wait[i];
    out->mean_us = n ? sum / (double)n / 1e3 : NAN;
    out->p50_us = lab_percentile(r->wait, n, 0.50) / 1e3;
    out->p95_us = lab_percentile(r->wait, n, 0.95) / 1e3;
    out->p99_us = lab_percentile(r->wait, n, 0.99) / 1e3;
    out->max_us = n ? r->wait[n - 1] / 1e3 : NAN; /* sorted above */
    out->terminal_p50_us =
        lab_percentile(r->terminal, r->nterminal, 0.50) / 1e3;
    out->passes_per_event =
        n ? (double)(total_passes(r) - passes0) / (double)n : NAN;
    return 0;
}

static void add_idle(figures *f, const idle_result *x, bool keep_audit) {
    lab_series_add(&f->reads, x->reads_per_session_s);
    lab_series_add(&f->util, x->utilisation_pct);
    lab_series_add(&f->cpu_small, x->cpu_ms_per_s);
    lab_series_add(&f->wakeups, x->wakeups_per_s);
    lab_series_add(&f->end_wakeup, x->end_wakeup_us);
    if (keep_audit) {
        f->naudit = x->naudit;
        memcpy(f->audit, x->audit, sizeof f->audit);
    }
}

static void add_stream(figures *f, const stream_result *x) {
    if (!x->complete) f->incomplete++;
    lab_series_add(&f->mean, x->mean_us);
    lab_series_add(&f->p50, x->p50_us);
    lab_series_add(&f->p95, x->p95_us);
    lab_series_add(&f->p99, x->p99_us);
    lab_series_add(&f->max, x->max_us);
    lab_series_add(&f->terminal, x->terminal_p50_us);
    lab_series_add(&f->passes, x->passes_per_event);
}

/* One mode at one size: idle window + stream with the small window, and
 * (when large_too) an idle window with the large one. */
static int run_mode(const params *p, int n, int mode, uint64_t idle_ns,
                    bool large_too, bool keep_audit, uint64_t *seed,
                    figures *f) {
    run r;
    idle_result ir = {0};
    stream_result sr = {0};
    int rc = run_open(&r, n, mode, p->retain_small, p, seed);
    if (rc < 0) return rc;
    rc = idle_window(&r, idle_ns, &ir);
    if (rc == 0) rc = stream(&r, p, &sr);
    run_close(&r);
    if (rc < 0) return rc;
    add_idle(f, &ir, keep_audit);
    add_stream(f, &sr);
    if (!large_too) return 0;
    rc = run_open(&r, n, mode, p->retain_large, p, seed);
    if (rc < 0) return rc;
    rc = idle_window(&r, idle_ns, &ir);
    run_close(&r);
    if (rc < 0) return rc;
    lab_series_add(&f->cpu_large, ir.cpu_ms_per_s);
    return 0;
}

/* Every mode, `rounds` times; the mode that goes first rotates. */
static int run_size(const params *p, int n, int rounds, uint64_t idle_ns,
                    bool large_too, figures f[MODES]) {
    memset(f, 0, sizeof(figures) * MODES);
    uint64_t seed = p->seed + (uint64_t)n;
    for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < MODES; k++) {
            int mode = (k + round) % MODES;
            int rc = run_mode(p, n, mode, idle_ns, large_too,
                              round == rounds - 1, &seed, &f[mode]);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* --------------------------------------------------------------- output */

static void cell(lab_table *t, int row, int col, const lab_series *s) {
    char buf[LAB_CELL];
    lab_format_series(buf, sizeof buf, s);
    lab_table_set(t, row, col, "%s", buf);
}

static void main_row(lab_table *t, const char *label, const figures f[MODES],
                     size_t offset, const char *reference) {
    int row = lab_table_row(t);
    lab_table_set(t, row, 0, "%s", label);
    for (int m = 0; m < MODES; m++)
        cell(t, row, 1 + m,
             (const lab_series *)(const void *)((const char *)&f[m] + offset));
    lab_table_set(t, row, 1 + MODES, "%s", reference);
}

#define FIELD(name) offsetof(figures, name)

static void print_main(const params *p, const figures f[MODES]) {
    const char *header[] = {"figure", mode_label[0], mode_label[1],
                            mode_label[2], "reference before → after"};
    lab_table t;
    lab_table_init(&t, 2 + MODES, header);
    char label[96];
    main_row(&t, "idle state reads / session / s", f, FIELD(reads), "364 → 0");
    snprintf(label, sizeof label, "idle utilisation, %d sessions, %%",
             p->sessions);
    main_row(&t, label, f, FIELD(util), "1.5 → 0.0");
    snprintf(label, sizeof label, "idle CPU ms / s, %d retained",
             p->retain_small);
    main_row(&t, label, f, FIELD(cpu_small), "12.8 → 0.05");
    snprintf(label, sizeof label, "idle CPU ms / s, %d retained",
             p->retain_large);
    main_row(&t, label, f, FIELD(cpu_large), "21.5 → 0.08");
    main_row(&t, "idle wakeups / s", f, FIELD(wakeups), "–");
    main_row(&t, "delivery wait mean, µs", f, FIELD(mean), "3480 → 1910");
    main_row(&t, "delivery wait p50, µs", f, FIELD(p50), "3160 → 830");
    main_row(&t, "delivery wait p95, µs", f, FIELD(p95), "7780 → 6360");
    main_row(&t, "delivery wait p99, µs", f, FIELD(p99), "–");
    main_row(&t, "delivery wait max, µs", f, FIELD(max), "8840 → 9070");
    main_row(&t, "terminal-event wait p50, µs", f, FIELD(terminal),
             "2370 → 80");
    main_row(&t, "pump passes / delivered event", f, FIELD(passes), "–");
    lab_table_print(&t, stdout);
    printf("  idle CPU: the loop thread's CPU time (CLOCK_THREAD_CPUTIME_ID, "
           "kernel and user) from its first callback of the window to the "
           "window's end, read there by an observer thread while the loop "
           "sleeps; set-up before the window and the one wakeup that ends "
           "it are not counted\n");
    char buf[LAB_CELL];
    lab_format_series(buf, sizeof buf, &f[MODE_NOTIFY].end_wakeup);
    printf("  the wakeup that ends the window (the observer's post; not "
           "counted): %s µs of the loop thread's CPU in notify mode\n",
           buf);
    double after = lab_series_median(&f[MODE_NOTIFY].cpu_small);
    char grid[24], ns[24];
    lab_format_value(grid, sizeof grid,
                     lab_series_median(&f[MODE_POLL_GRID].cpu_small) / after);
    lab_format_value(ns, sizeof ns,
                     lab_series_median(&f[MODE_POLL].cpu_small) / after);
    printf("  idle CPU before ÷ after, %d retained (medians): 1 ms grid ÷ "
           "notify %s×, ns timers ÷ notify %s× (reference 12.8 ÷ 0.05 = "
           "256×); notify's figure is one entry into sleep spread over the "
           "window, so the ratio grows with the window: compare each column "
           "with the reference's\n",
           p->retain_small, grid, ns);
    printf("  utilisation: lull_loop_metrics busy / (busy + idle), callback "
           "time only; the kernel's share of each wakeup is in the CPU rows\n");
}

static void print_audit(const figures f[MODES], int n) {
    for (int m = 0; m < MODES; m++) {
        printf("  wake audit, %s mode, idle window, %d sessions (last round; "
               "the post that ends the window left out):\n",
               mode_name[m], n);
        if (f[m].naudit == 0)
            printf("    no source woke the loop or ran "
                   "an empty pass\n");
        for (int i = 0; i < f[m].naudit; i++) {
            const audit_row *a = &f[m].audit[i];
            char w[24], e[24];
            lab_format_value(w, sizeof w, a->wakeups_per_s);
            lab_format_value(e, sizeof e, a->empty_per_s);
            printf("    %-40s %10s wakeups/s %10s empty passes/s\n", a->name, w,
                   e);
        }
    }
}

static void scale_rows(lab_table *t, int n, const figures f[MODES]) {
    for (int m = 0; m < MODES; m++) {
        int row = lab_table_row(t);
        lab_table_set(t, row, 0, "%d %s", n, mode_name[m]);
        cell(t, row, 1, &f[m].reads);
        cell(t, row, 2, &f[m].util);
        cell(t, row, 3, &f[m].cpu_small);
        cell(t, row, 4, &f[m].wakeups);
        cell(t, row, 5, &f[m].p50);
        cell(t, row, 6, &f[m].p99);
        cell(t, row, 7, &f[m].terminal);
    }
}

static void json_figures(lab_json *j, const char *key, const figures *f) {
    lab_json_key(j, key);
    lab_json_begin_object(j);
    lab_json_series(j, "idle_reads_per_session_s", &f->reads);
    lab_json_series(j, "idle_utilisation_pct", &f->util);
    lab_json_series(j, "idle_cpu_ms_per_s_small", &f->cpu_small);
    if (f->cpu_large.n)
        lab_json_series(j, "idle_cpu_ms_per_s_large", &f->cpu_large);
    lab_json_series(j, "idle_wakeups_per_s", &f->wakeups);
    lab_json_series(j, "idle_end_wakeup_cpu_us", &f->end_wakeup);
    lab_json_series(j, "wait_mean_us", &f->mean);
    lab_json_series(j, "wait_p50_us", &f->p50);
    lab_json_series(j, "wait_p95_us", &f->p95);
    lab_json_series(j, "wait_p99_us", &f->p99);
    lab_json_series(j, "wait_max_us", &f->max);
    lab_json_series(j, "terminal_wait_p50_us", &f->terminal);
    lab_json_series(j, "passes_per_event", &f->passes);
    lab_json_field(j, "incomplete_streams", f->incomplete);
    lab_json_key(j, "audit");
    lab_json_begin_array(j);
    for (int i = 0; i < f->naudit; i++) {
        lab_json_begin_object(j);
        lab_json_key(j, "source");
        lab_json_string(j, f->audit[i].name);
        lab_json_field(j, "wakeups_per_s", f->audit[i].wakeups_per_s);
        lab_json_field(j, "empty_passes_per_s", f->audit[i].empty_per_s);
        lab_json_end_object(j);
    }
    lab_json_end_array(j);
    lab_json_end_object(j);
}

static void json_size(lab_json *j, int n, const figures f[MODES]) {
    lab_json_begin_object(j);
    lab_json_field(j, "sessions", n);
    for (int m = 0; m < MODES; m++)
        json_figures(j, mode_name[m], &f[m]);
    lab_json_end_object(j);
}

static void json_params(lab_json *j, const params *p) {
    lab_json_key(j, "params");
    lab_json_begin_object(j);
    lab_json_field(j, "sessions", p->sessions);
    lab_json_field(j, "events_per_turn", p->events);
    lab_json_field(j, "interval_ms", (double)p->interval_ns / 1e6);
    lab_json_field(j, "poll_ms", (double)p->poll_ns / 1e6);
    lab_json_field(j, "poll_grid_ms", (double)p->grid_ns / 1e6);
    lab_json_field(j, "idle_s", (double)p->idle_ns / 1e9);
    lab_json_field(j, "scale_idle_s", (double)p->scale_idle_ns / 1e9);
    lab_json_key(j, "idle_cpu_counts");
    lab_json_string(j, "loop thread CPU time (CLOCK_THREAD_CPUTIME_ID) from "
                       "its first callback of the window to the window's "
                       "end, read by an observer thread; set-up and the "
                       "wakeup that ends the window not counted (that "
                       "wakeup: idle_end_wakeup_cpu_us)");
    lab_json_key(j, "retained");
    lab_json_begin_array(j);
    lab_json_number(j, p->retain_small);
    lab_json_number(j, p->retain_large);
    lab_json_end_array(j);
    lab_json_field(j, "rounds", p->rounds);
    lab_json_field(j, "scale_rounds", p->scale_rounds);
    lab_json_end_object(j);
}

static void note_incomplete(const figures f[MODES]) {
    for (int m = 0; m < MODES; m++)
        if (f[m].incomplete)
            printf("  note: %s mode: %d stream(s) hit the 60 s deadline "
                   "before every turn was delivered\n",
                   mode_name[m], f[m].incomplete);
}

static void set_params(const lab_options *opts, params *p) {
    memset(p, 0, sizeof *p);
    p->sessions = opts->sessions > 0 ? opts->sessions : 12;
    p->events = 40;
    p->interval_ns = 15 * MS;
    p->poll_ns = 5 * MS;
    p->grid_ns = 1 * MS;
    p->idle_ns = (opts->quick ? 400 : 2000) * MS;
    p->scale_idle_ns = (opts->quick ? 400 : 1000) * MS;
    p->retain_small = 49;
    p->retain_large = 409;
    p->rounds = lab_rounds(opts, 5, 3);
    p->scale_rounds = opts->rounds > 0 ? opts->rounds : (opts->quick ? 1 : 3);
    p->scale[0] = 1000;
    p->scale[1] = 10000;
    p->seed = 0x9E3779B97F4A7C15ULL; /* any odd constant; fixed per run */
}

/* The plot: one panel per headline figure, the modes side by side. */
static void plot_main(lab_plot *plot, const params *p, const figures f[MODES]) {
    static const struct {
        const char *title, *unit;
        size_t offset;
    } rows[] = {
        {"idle state reads per session", "per s", offsetof(figures, reads)},
        {"idle CPU, 49 retained events", "ms per s",
         offsetof(figures, cpu_small)},
        {"idle wakeups", "per s", offsetof(figures, wakeups)},
        {"delivery wait p50", "us", offsetof(figures, p50)},
        {"delivery wait p99", "us", offsetof(figures, p99)},
        {"terminal-event wait p50", "us", offsetof(figures, terminal)},
    };
    if (!plot) return;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char title[160];
        snprintf(title, sizeof title, "pump, %d sessions: %s", p->sessions,
                 rows[r].title);
        lab_plot_panel(plot, title, rows[r].unit);
        for (int m = 0; m < MODES; m++) {
            const lab_series *s =
                (const lab_series *)(const void *)((const char *)&f[m] +
                                                   rows[r].offset);
            lab_plot_bar(plot, mode_label[m], s, m == MODE_NOTIFY);
        }
    }
}

static int run_pump(const lab_options *opts, lab_json *json) {
    params p;
    set_params(opts, &p);
    printf("%d sessions; provider: one turn per session, %d events, one every "
           "%.0f ms, all sessions at once; idle window %.1f s first\n",
           p.sessions, p.events, (double)p.interval_ns / 1e6,
           (double)p.idle_ns / 1e9);
    printf("poll, 1 ms grid: a %.0f ms poll per session on a runtime with "
           "%.0f ms timers, as in the investigation: each session's phase "
           "rounds to one of %d slots and a slot's polls share one timer and "
           "one wakeup\n",
           (double)p.poll_ns / 1e6, (double)p.grid_ns / 1e6,
           (int)(p.poll_ns / p.grid_ns));
    printf("poll on lull's ns timers: the same %.0f ms poll as a lull "
           "repeating timer per session, random ns phases, 1 µs slack: no "
           "two coalesce; notify: the pump listens to the window's notifier; "
           "the same pass in every mode\n",
           (double)p.poll_ns / 1e6);
    printf("%d rounds, the mode that runs first rotating each round; each "
           "mode opens its own loop and sessions; median [min–max] over "
           "rounds; "
           "wait = commit made the event readable -> driver has it "
           "(CLOCK_MONOTONIC)\n",
           p.rounds);
    printf("reference: investigation 1A, 12 sessions on a JavaScript runtime "
           "(state reads there copied the window; here a read is indexed)\n");
    if (json) json_params(json, &p);

    figures main_f[MODES];
    int rc = run_size(&p, p.sessions, p.rounds, p.idle_ns, true, main_f);
    if (rc < 0) return rc;
    print_main(&p, main_f);
    plot_main(opts->plot, &p, main_f);
    note_incomplete(main_f);
    print_audit(main_f, p.sessions);
    printf("  target (notify): 0 idle reads and wakeups; idle CPU < 0.1 ms/s; "
           "wait p50 ≤ 5 µs, p99 ≤ 50 µs\n");
    if (json) {
        lab_json_key(json, "main");
        json_size(json, p.sessions, main_f);
    }

    printf("\nscale: how each mode's cost grows with sessions (%d round%s; "
           "idle window %.1f s; %d retained)\n",
           p.scale_rounds, p.scale_rounds == 1 ? "" : "s",
           (double)p.scale_idle_ns / 1e9, p.retain_small);
    const char *header[] = {"sessions, mode", "reads/session/s", "idle util %",
                            "idle CPU ms/s",  "wakeups/s",       "wait p50 µs",
                            "wait p99 µs",    "terminal p50 µs"};
    lab_table t;
    lab_table_init(&t, 8, header);
    scale_rows(&t, p.sessions, main_f);
    if (json) {
        lab_json_key(json, "scale");
        lab_json_begin_array(json);
    }
    for (int k = 0; k < 2; k++) {
        figures f[MODES];
        rc =
            run_size(&p, p.scale[k], p.scale_rounds, p.scale_idle_ns, false, f);
        if (rc < 0) {
            printf("  %d sessions: failed: %s\n", p.scale[k], strerror(-rc));
            break;
        }
        scale_rows(&t, p.scale[k], f);
        note_incomplete(f);
        if (json) json_size(json, p.scale[k], f);
    }
    if (json) lab_json_end_array(json);
    lab_table_print(&t, stdout);
    return rc < 0 ? rc : 0;
}

const lab_scenario lab_pump = {
    "pump",
    "investigation 1A: a 5 ms polling delivery pump vs notifier-driven "
    "passes over committed-event windows",
    run_pump,
};
