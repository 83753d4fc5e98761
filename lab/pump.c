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
 * here is a model. Sessions: --sessions N (default 12).
 *
 * --journal adds the journal variant (--only journal runs it alone): each
 * event is appended to a per-session journal file and made durable with
 * fdatasync before its commit becomes readable, in notify mode. Four
 * variants, 4 and 12 sessions: in memory (no journal, the baseline); sync
 * on the loop thread (the investigation's "before": write + fdatasync in
 * the provider's callback); a lull_journal per session on a worker pool
 * (the commit becomes readable in the sync's completion); and one shared
 * lull_journal for every session (group commit across sessions). The wait
 * here runs from the instant the provider produced the event (its due
 * time: a provider that falls behind catches up) to the driver, so it
 * includes the sync. The device's raw fdatasync latency is measured in
 * the same run; every stream is checked on disk (re-read and compared)
 * and in order at the driver.
 *
 * lab_pump_soak (lab/soak.h, for `lull-lab soak`) runs the stream alone at
 * random sizes in verify mode: the provider and the delivery pass are
 * checked twins of the timed ones, chosen when the run opens, so the
 * figures above never pay for the checks. */
#include "lab.h"

#include "soak.h"
#include "window.h"
#include <stddef.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    bool verify; /* the soak's runs: checked callbacks (see lab_pump_soak) */
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
    struct jrec *jrecs;   /* --journal: the turn's records, one per event */
    int fd;               /* --journal: this session's file, or -1 */
    uint64_t jend;        /* sync on the loop: where the next record goes */
    lull_journal journal; /* journal on a pool: this session's */
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
    int journal;           /* --journal: J_* variant; J_OFF otherwise */
    uint64_t stream_start; /* when the providers were started */
    uint64_t interval_ns;  /* the providers' period */
    uint64_t first_seq;    /* window sequence number of a turn's 1st event */
    uint64_t syncs;        /* sync on the loop: fdatasync calls */
    int order_errors;      /* events the driver got out of order */
    int journal_errors;    /* failed writes or syncs */
    lull_pool *pool;       /* journal variants on a pool */
    lull_journal shared;   /* one shared journal: its journal */
    int shared_fd;         /* ... and its file */
    char dir[96];          /* the temporary directory of the files */
    lab_soak_result *soak; /* verify mode: counts and the first fault */
    int soak_errors;       /* verify mode: events found wrong */
};

/* The driver: receives events in order, records how long each waited. */
static void driver_receive(session *s, const lab_window_event *ev,
                           uint64_t now) {
    run *r = s->run;
    /* The journal variant waits from the event's due time (its value). */
    uint64_t from = r->journal ? ev->value : ev->readable_ns;
    double wait = now >= from ? (double)(now - from) : 0;
    if (r->journal && ev->seq != r->first_seq + (uint64_t)s->received)
        r->order_errors++;
    r->wait[r->nwait++] = wait;
    s->received++;
    if (ev->flags & LAB_EVENT_TERMINAL) {
        r->terminal[r->nterminal++] = wait;
        if (++r->done == r->n) lull_loop_stop(r->loop);
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
    uint64_t now = lull_loop_now_exact(s->run->loop);
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

/* ------------------------------------------------- verify mode (soak) */

/* The soak's payload of event k of session i: k in the high half (the
 * provider's own sequence), a hash of (i, k) in the low half (its
 * checksum: a corrupt event, or one delivered to the wrong session, fails
 * it). */
static uint64_t soak_value(int i, int k) {
    uint64_t h =
        ((uint64_t)(uint32_t)i << 32 | (uint32_t)k) ^ 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 29)) * 0x94D049BB133111EBull;
    return (uint64_t)(uint32_t)k << 32 | (uint32_t)(h ^ (h >> 32));
}

static void soak_fault(run *r, const session *s, const char *what,
                       const lab_window_event *ev) {
    if (r->soak_errors++ == 0)
        snprintf(r->soak->why, sizeof r->soak->why,
                 "pump: session %d: %s (event %d of %d received: window seq "
                 "%" PRIu64 ", value 0x%016" PRIx64 ", flags %u)",
                 (int)(s - r->s), what, s->received, r->events, ev->seq,
                 ev->value, ev->flags);
}

/* provider_tick with the soak's payload. */
static void provider_tick_verified(lull_timer *t) {
    session *s = LULL_CONTAINER_OF(t, session, provider);
    int k = s->sent++;
    bool last = s->sent == s->run->events;
    lab_window_append(&s->window, soak_value((int)(s - s->run->s), k),
                      last ? LAB_EVENT_TERMINAL : 0, 1);
    lab_window_commit(&s->window);
    if (last) lull_timer_stop(t);
}

/* deliver_pass with every event checked before the driver has it: the
 * window's sequence number is the next of this session's turn (nothing
 * lost, repeated or reordered), the payload is event `received` of this
 * session (checksum), the terminal flag on the last event only. */
static int deliver_pass_verified(lull_pump *p, uint64_t *retry_ns) {
    (void)retry_ns;
    session *s = LULL_CONTAINER_OF(p, session, pump);
    run *r = s->run;
    lab_window_event ev[BATCH];
    int n = lab_window_read(&s->window, &s->cursor, ev, BATCH);
    if (n == 0) return LULL_PASS_QUIET;
    uint64_t now = lull_loop_now_exact(r->loop);
    for (int i = 0; i < n; i++) {
        int k = s->received;
        if (k >= r->events) {
            soak_fault(r, s, "an event after the turn's last", &ev[i]);
            continue; /* not to the driver: its arrays hold one turn */
        }
        bool last = k + 1 == r->events;
        if (ev[i].seq != r->first_seq + (uint64_t)k)
            soak_fault(r, s, "sequence number out of order", &ev[i]);
        else if (ev[i].value >> 32 != (uint64_t)k)
            soak_fault(r, s,
                       "the provider's sequence number in the payload is "
                       "not the next (lost, repeated or reordered)",
                       &ev[i]);
        else if (ev[i].value != soak_value((int)(s - r->s), k))
            soak_fault(r, s, "payload checksum wrong", &ev[i]);
        else if ((ev[i].flags & LAB_EVENT_TERMINAL) != (last ? 1u : 0u))
            soak_fault(r, s, "terminal flag wrong", &ev[i]);
        else
            r->soak->verified++;
        driver_receive(s, &ev[i], now);
    }
    lull_pump_delivered(p, (uint64_t)n);
    return n == BATCH ? LULL_PASS_AGAIN : LULL_PASS_QUIET;
}

static void stream_deadline(lull_timer *t) {
    run *r = LULL_CONTAINER_OF(t, run, deadline);
    r->timed_out = true;
    lull_loop_stop(t->loop);
}

static void journal_close(run *r);

static void run_close(run *r) {
    if (r->journal) journal_close(r);
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
    uint64_t now = lull_loop_now_exact(r->loop);
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
        lull_pump_init(r->loop, &s->pump,
                       p->verify ? deliver_pass_verified : deliver_pass);
        lull_timer_init(r->loop, &s->poll, poll_tick);
        lull_timer_init(r->loop, &s->provider,
                        p->verify ? provider_tick_verified : provider_tick);
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
    lull_loop_stop(r->loop);
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
    lull_task_post_remote(r->loop, &e->stop);
    return NULL;
}

static int idle_window(run *r, uint64_t idle_ns, idle_result *out) {
    memset(out, 0, sizeof *out);
    /* One non-blocking iteration first: registrations reach the kernel and
     * nothing left over from opening is counted. */
    int rc = lull_loop_run(r->loop, LULL_RUN_NOWAIT);
    if (rc < 0) return rc;
    idle_edges *e = &r->idle;
    atomic_store(&e->begun, false);
    int err = pthread_getcpuclockid(pthread_self(), &e->loop_cpu);
    if (err) return -err;
    lull_task_init(&e->begin, window_begin);
    lull_task_init(&e->stop, window_stop);
    lull_task_post(r->loop, &e->begin);
    lull_loop_ref(r->loop); /* alive until the observer's stop runs */
    e->end_at = lab_now_ns() + idle_ns;
    pthread_t observer;
    err = pthread_create(&observer, NULL, window_observer, r);
    if (err) {
        lull_task_cancel(&e->begin);
        lull_loop_unref(r->loop);
        return -err;
    }
    rc = lull_loop_run(r->loop, LULL_RUN_DEFAULT);
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
    r->stream_start = lull_loop_now_exact(r->loop);
    for (int i = 0; i < r->n; i++) {
        r->s[i].sent = r->s[i].received = 0;
        lull_timer_start(&r->s[i].provider, p->interval_ns, p->interval_ns);
    }
    /* Far beyond the 0.6 s the turn takes, even on a saturated loop. */
    r->timed_out = false;
    lull_timer_start(&r->deadline, 60000 * MS, 0);
    int rc = lull_loop_run(r->loop, LULL_RUN_DEFAULT);
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

/* ------------------------------------------------------------ journal */

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
    case J_LOOP: /* the investigation's "before": the loop thread blocks */
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
    char path[160];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    return fd < 0 ? -errno : fd;
}

/* Where the journal files go: $TMPDIR, else /var/tmp (a disk on most
 * systems, where /tmp may be memory and fdatasync free). */
static const char *journal_parent(void) {
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/var/tmp";
}

/* Turns an opened notify-mode run into a journal variant. */
static int journal_open(run *r, int variant, const params *p) {
    r->journal = variant;
    r->interval_ns = p->interval_ns;
    r->first_seq = (uint64_t)p->retain_small + 1;
    r->shared_fd = -1;
    for (int i = 0; i < r->n; i++)
        r->s[i].fd = -1;
    snprintf(r->dir, sizeof r->dir, "%s/lull-lab-journal-XXXXXX",
             journal_parent());
    if (!mkdtemp(r->dir)) {
        r->dir[0] = '\0';
        return -errno;
    }
    int rc = 0;
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
    char path[160];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
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
    if (r->dir[0]) rmdir(r->dir);
    r->journal = J_OFF;
}

/* The device's own fdatasync latency, in the journals' directory: a
 * 32-byte append and its sync, `n` times. */
static int raw_fdatasync(int n, double *p50_us, double *p99_us) {
    char dir[96];
    snprintf(dir, sizeof dir, "%s/lull-lab-fsync-XXXXXX", journal_parent());
    if (!mkdtemp(dir)) return -errno;
    char path[128];
    snprintf(path, sizeof path, "%s/probe", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = fd < 0 ? -errno : 0;
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
    return rc;
}

typedef struct jfigures {
    lab_series mean, p50, p95, p99, max; /* due -> delivered, µs */
    lab_series util;                     /* loop, while streaming, % */
    lab_series syncs_per_commit;
    lab_series idle_wakeups;      /* the loop's, per s */
    lab_series idle_pool_wakeups; /* the pool threads', over the window */
    int bad_on_disk, out_of_order, errors, incomplete;
    int streams;
} jfigures;

static int journal_run_one(const params *p, int n, int variant,
                           uint64_t idle_ns, uint64_t *seed, jfigures *f) {
    run r;
    int rc = run_open(&r, n, MODE_NOTIFY, p->retain_small, p, seed);
    if (rc < 0) return rc;
    if ((rc = journal_open(&r, variant, p)) < 0) {
        run_close(&r);
        return rc;
    }
    LULL_NAME(r.loop, journal_provider, "pump: provider fixture (journal)");
    idle_result ir;
    lull_pool_stats ps0 = {0}, ps1 = {0};
    lull_pool_get_stats(r.pool, &ps0);
    rc = idle_window(&r, idle_ns, &ir);
    lull_pool_get_stats(r.pool, &ps1);
    stream_result sr;
    lull_metrics m0, m1;
    lull_loop_metrics(r.loop, &m0);
    if (rc == 0) rc = stream(&r, p, &sr);
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
        lab_series_add(&f->mean, sr.mean_us);
        lab_series_add(&f->p50, sr.p50_us);
        lab_series_add(&f->p95, sr.p95_us);
        lab_series_add(&f->p99, sr.p99_us);
        lab_series_add(&f->max, sr.max_us);
        lab_series_add(&f->util,
                       busy + idle > 0 ? 100 * busy / (busy + idle) : 0);
        lab_series_add(&f->syncs_per_commit, (double)syncs / commits);
        lab_series_add(&f->idle_wakeups, ir.wakeups_per_s);
        if (r.pool)
            lab_series_add(&f->idle_pool_wakeups,
                           (double)(ps1.wakeups - ps0.wakeups));
        if (!sr.complete) f->incomplete++;
        f->bad_on_disk += journal_verify(&r);
        f->out_of_order += r.order_errors;
        f->errors += r.journal_errors;
        f->streams++;
    }
    run_close(&r);
    return rc;
}

static void jcell(lab_table *t, int row, int col, const lab_series *s) {
    if (s->n == 0) {
        lab_table_set(t, row, col, "–");
        return;
    }
    cell(t, row, col, s);
}

static void journal_table(int n, const jfigures f[J_END], int events) {
    const char *header[] = {"figure", j_label[J_MEMORY], j_label[J_LOOP],
                            j_label[J_POOL], j_label[J_GROUP]};
    lab_table t;
    lab_table_init(&t, 5, header);
    static const struct {
        const char *label;
        size_t offset;
    } rows[] = {
        {"produced → delivered mean, µs", offsetof(jfigures, mean)},
        {"produced → delivered p50, µs", offsetof(jfigures, p50)},
        {"produced → delivered p95, µs", offsetof(jfigures, p95)},
        {"produced → delivered p99, µs", offsetof(jfigures, p99)},
        {"produced → delivered max, µs", offsetof(jfigures, max)},
        {"loop utilisation, streaming, %", offsetof(jfigures, util)},
        {"fdatasync calls / commit", offsetof(jfigures, syncs_per_commit)},
        {"idle loop wakeups / s", offsetof(jfigures, idle_wakeups)},
        {"idle pool wakeups (window)", offsetof(jfigures, idle_pool_wakeups)},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", rows[k].label);
        for (int v = J_MEMORY; v < J_END; v++)
            jcell(&t, row, v,
                  (const lab_series *)(const void *)((const char *)&f[v] +
                                                     rows[k].offset));
    }
    int row = lab_table_row(&t);
    lab_table_set(&t, row, 0, "events in order, data on disk");
    for (int v = J_MEMORY; v < J_END; v++) {
        int total = f[v].streams * n * events;
        int bad = f[v].out_of_order + f[v].bad_on_disk + f[v].errors;
        lab_table_set(&t, row, v, "%s %d/%d", bad ? "FAILED" : "ok",
                      total - bad, total);
    }
    printf("\n%d sessions:\n", n);
    lab_table_print(&t, stdout);
}

static void json_jfigures(lab_json *j, const char *key, const jfigures *f) {
    lab_json_key(j, key);
    lab_json_begin_object(j);
    lab_json_series(j, "wait_mean_us", &f->mean);
    lab_json_series(j, "wait_p50_us", &f->p50);
    lab_json_series(j, "wait_p95_us", &f->p95);
    lab_json_series(j, "wait_p99_us", &f->p99);
    lab_json_series(j, "wait_max_us", &f->max);
    lab_json_series(j, "stream_utilisation_pct", &f->util);
    lab_json_series(j, "fdatasync_per_commit", &f->syncs_per_commit);
    lab_json_series(j, "idle_wakeups_per_s", &f->idle_wakeups);
    if (f->idle_pool_wakeups.n)
        lab_json_series(j, "idle_pool_wakeups", &f->idle_pool_wakeups);
    lab_json_field(j, "streams", f->streams);
    lab_json_field(j, "out_of_order", f->out_of_order);
    lab_json_field(j, "bad_on_disk", f->bad_on_disk);
    lab_json_field(j, "io_errors", f->errors);
    lab_json_field(j, "incomplete_streams", f->incomplete);
    lab_json_end_object(j);
}

/* Returns 0, -EIO when an event was lost, repeated, out of order or wrong
 * on disk, or the error that stopped a run. */
static int run_journal(const lab_options *opts, const params *p,
                       lab_json *json) {
    int rounds = lab_rounds(opts, 3, 1);
    uint64_t idle_ns = (opts->quick ? 300 : 1000) * MS;
    int probes = opts->quick ? 50 : 200;
    static const int sizes[2] = {4, 12};
    printf("\njournal: each commit appended to a per-session journal file "
           "and synced before it becomes readable; notify mode; files in "
           "%s; %d rounds, the variant that runs first rotating; wait = the "
           "event's due time at the provider -> the driver has it\n",
           journal_parent(), rounds);
    printf("pools: %d threads for the per-session journals, %d for the "
           "shared one (its one batch in flight at a time)\n",
           J_POOL_THREADS, J_GROUP_THREADS);
    lab_series raw50 = {0}, raw99 = {0};
    static jfigures f[2][J_END];
    memset(f, 0, sizeof f);
    uint64_t seed = p->seed;
    int rc = 0;
    for (int round = 0; round < rounds && rc == 0; round++) {
        double r50 = NAN, r99 = NAN;
        if ((rc = raw_fdatasync(probes, &r50, &r99)) < 0) break;
        lab_series_add(&raw50, r50);
        lab_series_add(&raw99, r99);
        for (int z = 0; z < 2 && rc == 0; z++)
            for (int k = 0; k < J_END - 1 && rc == 0; k++) {
                int v = J_MEMORY + (k + round) % (J_END - 1);
                rc = journal_run_one(p, sizes[z], v, idle_ns, &seed, &f[z][v]);
            }
    }
    if (rc < 0) return rc;
    char b50[LAB_CELL], b99[LAB_CELL];
    lab_format_series(b50, sizeof b50, &raw50);
    lab_format_series(b99, sizeof b99, &raw99);
    printf("raw fdatasync of a 32-byte append there: p50 %s µs, p99 %s µs "
           "(%d per round)\n",
           b50, b99, probes);
    int bad = 0;
    for (int z = 0; z < 2; z++) {
        journal_table(sizes[z], f[z], p->events);
        for (int v = J_MEMORY; v < J_END; v++)
            bad += f[z][v].out_of_order + f[z][v].bad_on_disk + f[z][v].errors;
    }
    printf("  target, 12 sessions: the per-session pool journal's wait p50 "
           "≤ in-memory p50 + raw fdatasync p50, and its loop utilisation "
           "below the on-loop variant's\n");
    if (json) {
        lab_json_key(json, "journal");
        lab_json_begin_object(json);
        lab_json_key(json, "dir");
        lab_json_string(json, journal_parent());
        lab_json_field(json, "pool_threads", J_POOL_THREADS);
        lab_json_field(json, "group_pool_threads", J_GROUP_THREADS);
        lab_json_series(json, "raw_fdatasync_p50_us", &raw50);
        lab_json_series(json, "raw_fdatasync_p99_us", &raw99);
        lab_json_key(json, "sizes");
        lab_json_begin_array(json);
        for (int z = 0; z < 2; z++) {
            lab_json_begin_object(json);
            lab_json_field(json, "sessions", sizes[z]);
            for (int v = J_MEMORY; v < J_END; v++)
                json_jfigures(json, j_name[v], &f[z][v]);
            lab_json_end_object(json);
        }
        lab_json_end_array(json);
        lab_json_end_object(json);
    }
    if (bad) {
        printf("  journal: %d events lost, repeated, out of order or wrong "
               "on disk\n",
               bad);
        return -EIO;
    }
    return 0;
}

static int run_pump(const lab_options *opts, lab_json *json) {
    params p;
    set_params(opts, &p);
    if (opts->only && strcmp(opts->only, "journal") == 0)
        return run_journal(opts, &p, json);
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
    if (rc < 0) return rc;
    return opts->journal ? run_journal(opts, &p, json) : 0;
}

const lab_scenario lab_pump = {
    "pump",
    "investigation 1A: a 5 ms polling delivery pump vs notifier-driven "
    "passes over committed-event windows",
    run_pump,
};

/* ---------------------------------------------------------------- soak */

/* One soak run (lab/soak.h): sessions, events per turn, retained events,
 * the provider's period and the mode drawn from *seed; no idle window, the
 * stream alone, every event checked as the driver receives it. */
int lab_pump_soak(uint64_t *seed, lab_soak_result *out) {
    memset(out, 0, sizeof *out);
    params p;
    set_params(&(lab_options){.quick = true}, &p);
    p.verify = true;
    int n = 1 + (int)(lab_rand(seed) % 128);
    int mode = (int)(lab_rand(seed) % MODES);
    int retain = (int)(lab_rand(seed) % 256);
    p.events = 1 + (int)(lab_rand(seed) % 256);
    p.interval_ns = 20000 + lab_rand(seed) % (2 * MS);
    snprintf(out->sizes, sizeof out->sizes,
             "%d sessions, %s, %d events every %.0f us, %d retained", n,
             mode_name[mode], p.events, (double)p.interval_ns / 1e3, retain);
    run r;
    int rc = run_open(&r, n, mode, retain, &p, seed);
    if (rc < 0) return rc;
    r.soak = out;
    r.first_seq = (uint64_t)retain + 1;
    stream_result sr;
    rc = stream(&r, &p, &sr);
    for (int i = 0; rc == 0 && i < r.n && !r.soak_errors && !out->why[0]; i++)
        if (r.s[i].received != p.events)
            snprintf(out->why, sizeof out->why,
                     "pump: session %d received %d of %d events%s", i,
                     r.s[i].received, p.events,
                     r.timed_out ? " (the stream's 60 s deadline hit)" : "");
    if (rc == 0 && (r.soak_errors || out->why[0] || !sr.complete)) {
        if (!out->why[0])
            snprintf(out->why, sizeof out->why,
                     "pump: the stream did not complete");
        rc = -EPROTO;
    }
    run_close(&r);
    return rc;
}
