/* The `pump` scenario's runs (lab/pump.h): N live sessions, each a
 * committed-event window (lab/window.c) whose pump delivers to a driver,
 * on one lull loop. Three modes on the same session code; only the
 * trigger of the pass differs:
 *   poll_ms_grid  the polling pump as first written, setInterval(pass, 5) on a
 *                 runtime whose timers are whole milliseconds: every
 *                 session's 5 ms poll falls on one of five 1 ms slots, and
 *                 the polls of a slot share one timer (the runtime's timer
 *                 list), so they share one wakeup
 *   poll          the same 5 ms poll written on lull: a repeating timer per
 *                 session at a random ns phase, so the 12 phases never
 *                 coalesce (about 2,400 wakeups/s at 12 sessions)
 *   notify        the pump listens to the window's notifier (the "after")
 *
 * A run opens the sessions with R events already delivered and retained;
 * its idle window measures reads, utilisation, the loop thread's CPU time,
 * wakeups and the wake audit (its edges are in idle_edges, lab/pump.h);
 * its stream has a provider fixture stream one turn per session, 40
 * events each, one every 15 ms, every session at once, and the driver
 * records each event's delivery wait (the instant the commit made it
 * readable -> the driver receives it, real clock).
 *
 * Everything runs on the calling thread, on one lull loop per run, but for
 * the idle window's observer thread; nothing here is a model.
 *
 * lab_pump_soak (lab/soak.h, for `lull-lab soak`) runs the stream alone at
 * random sizes in verify mode: the provider and the delivery pass are
 * checked twins of the timed ones, chosen when the run opens, so the
 * figures never pay for the checks. */
#include "pump.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The wake audit's sources read after an idle window: every source of a
 * run (sessions share their callbacks) with room to spare. */
#define AUDIT_MAX 16

const char *const pump_mode_name[MODES] = {"poll_ms_grid", "poll", "notify"};
const char *const pump_mode_label[MODES] = {
    "poll, 1 ms grid (before)", "poll on lull's ns timers", "notify (after)"};

static void window_stop(lull_task *t);

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
static lull_pass_result deliver_pass(lull_pump *p, uint64_t *retry_ns) {
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
static lull_pass_result deliver_pass_verified(lull_pump *p,
                                              uint64_t *retry_ns) {
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

void pump_run_close(run *r) {
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
int pump_run_open(run *r, int n, int mode, int retain, const params *p,
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
        pump_run_close(r);
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
            pump_run_close(r);
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

/* ---------------------------------------------------------- measuring */

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

int pump_idle_window(run *r, uint64_t idle_ns, idle_result *out) {
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

    out->metric_wakeups = (double)wakeups;
    lull_audit_entry a[AUDIT_MAX];
    int total = lull_loop_audit(r->loop, a, AUDIT_MAX, NULL);
    int got = total < AUDIT_MAX ? total : AUDIT_MAX;
    for (int i = 0; i < got; i++) {
        if (a[i].name && strstr(a[i].name, "end of the idle window")) continue;
        out->audit_wakeups += (double)a[i].wakeups;
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

int pump_stream(run *r, const params *p, stream_result *out) {
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

void pump_set_params(const lab_options *opts, params *p) {
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

/* ---------------------------------------------------------------- soak */

/* One soak run (lab/soak.h): sessions, events per turn, retained events,
 * the provider's period and the mode drawn from *seed; no idle window, the
 * stream alone, every event checked as the driver receives it. */
int lab_pump_soak(uint64_t *seed, lab_soak_result *out) {
    memset(out, 0, sizeof *out);
    params p;
    pump_set_params(&(lab_options){.quick = true}, &p);
    p.verify = true;
    int n = 1 + (int)(lab_rand(seed) % 128);
    int mode = (int)(lab_rand(seed) % MODES);
    int retain = (int)(lab_rand(seed) % 256);
    p.events = 1 + (int)(lab_rand(seed) % 256);
    p.interval_ns = 20000 + lab_rand(seed) % (2 * MS);
    snprintf(out->sizes, sizeof out->sizes,
             "%d sessions, %s, %d events every %.0f us, %d retained", n,
             pump_mode_name[mode], p.events, (double)p.interval_ns / 1e3,
             retain);
    run r;
    int rc = pump_run_open(&r, n, mode, retain, &p, seed);
    if (rc < 0) return rc;
    r.soak = out;
    r.first_seq = (uint64_t)retain + 1;
    stream_result sr;
    rc = pump_stream(&r, &p, &sr);
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
    pump_run_close(&r);
    return rc;
}
