/* The committed-event window (lab/window.c) and the regression tests of
 * the polling pump's fix (README), ported to lull: an idle session reads
 * nothing in notify mode (and ~400 times in 2 s in poll mode); with time frozen
 * a whole turn is delivered, each event before a task posted the moment it
 * became readable; held items are retried only while held; several commits in
 * one task cause one pass; close during a pending wake; and a seeded property
 * test interleaving commits, checkpoints and cursor moves against a model.
 * Everything on the virtual clock. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <string.h>
#include <sys/resource.h>

#include "window.h"

#define MS 1000000ull

/* ------------------------------------------------------------ a session */

/* One reader of a window: a cursor, a pump whose pass delivers to a
 * driver, and, in poll mode, the 5 ms repeating timer of the polling pump's
 * "before" (which wakes the pump: the same pass either way). */
typedef struct session {
    lab_window *w;
    lab_window_cursor cursor;
    lull_pump pump;
    lull_listener listener;
    lull_timer poll;
    bool polling;
    bool busy;              /* the driver is not ready (a pending turn start):
                               the pass holds everything back */
    uint64_t delivered;     /* events the driver received */
    uint64_t last_seq;      /* the last one */
    uint64_t expect;        /* model: the sequence number due next */
    const uint64_t *values; /* model: the value of each sequence number */
    bool check_model;
} session;

static lull_pass_result session_pass(lull_pump *p, uint64_t *retry_ns) {
    session *s = LULL_CONTAINER_OF(p, session, pump);
    if (s->busy) {
        /* Hold back what is readable and retry; with nothing readable there
         * is nothing held, so no retry (the next change wakes the pump). */
        if (lab_window_backlog(&s->cursor) == 0) return LULL_PASS_QUIET;
        *retry_ns = 5 * MS; /* the polling pump's retry while held */
        return LULL_PASS_HELD;
    }
    lab_window_event ev[16];
    int n = lab_window_read(s->w, &s->cursor, ev, 16);
    for (int i = 0; i < n; i++) {
        if (s->check_model) {
            if (ev[i].seq != s->expect)
                check_fail(__FILE__, __LINE__,
                           "delivered seq %llu, model expects %llu",
                           (unsigned long long)ev[i].seq,
                           (unsigned long long)s->expect);
            CHECK_U64_EQ(ev[i].value, s->values[ev[i].seq]);
            s->expect++;
        }
        s->last_seq = ev[i].seq;
    }
    s->delivered += (uint64_t)n;
    lull_pump_delivered(p, (uint64_t)n);
    /* A full batch may have left more: continue in the next task. */
    return n == 16 ? LULL_PASS_AGAIN : LULL_PASS_QUIET;
}

static void poll_tick(lull_timer *t) {
    lull_pump_wake(&LULL_CONTAINER_OF(t, session, poll)->pump);
}

static void session_open(lull_loop *loop, session *s, lab_window *w,
                         bool polling) {
    memset(s, 0, sizeof *s);
    s->w = w;
    s->polling = polling;
    lab_window_cursor_open(w, &s->cursor, 1);
    s->expect = s->cursor.next;
    lull_pump_init(loop, &s->pump, session_pass);
    lull_timer_init(loop, &s->poll, poll_tick);
    if (polling)
        lull_timer_start(&s->poll, 5 * MS, 5 * MS);
    else
        lull_pump_listen(&s->pump, &w->notifier, &s->listener);
}

static void session_close(session *s) {
    lull_timer_stop(&s->poll);
    lull_pump_close(&s->pump);
    lab_window_cursor_close(&s->cursor);
}

static lull_loop *new_loop(void) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    check_trace_reset();
    return loop;
}

/* Most pump cases' start: a loop, a window of 64 slots keeping 8, and
 * one session on it in notify mode. */
static lull_loop *open_session(lab_window *w, session *s) {
    lull_loop *loop = new_loop();
    CHECK_EQ(lab_window_init(w, loop, 64, 8), 0);
    session_open(loop, s, w, false);
    return loop;
}

/* A case's end: the session (NULL: none) closed, the window freed, and the
 * loop freed with nothing left on it. */
static void finish(lull_loop *loop, lab_window *w, session *s) {
    if (s) session_close(s);
    lab_window_free(w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------------ the window alone */

static lull_listener counted;
static int counted_runs;
static void count_raise(lull_listener *l) {
    (void)l;
    counted_runs++;
}

TEST(commit_makes_a_batch_readable_and_raises_after) {
    lull_loop *loop = new_loop();
    lab_window w;
    CHECK_EQ(lab_window_init(&w, loop, 16, 4), 0);
    counted_runs = 0;
    lull_listener_start(loop, &w.notifier, &counted, count_raise);
    lab_window_cursor c;
    lab_window_cursor_open(&w, &c, 1);
    CHECK_U64_EQ(lab_window_append(&w, 10, 0, 1), 1);
    CHECK_U64_EQ(lab_window_append(&w, 11, 0, 1), 2);
    lab_window_event ev[8];
    CHECK_EQ(lab_window_read(&w, &c, ev, 8), 0); /* appended, not committed */
    CHECK_U64_EQ(w.raises, 0);
    lull_loop_advance(loop, 3 * MS);
    CHECK_EQ(lab_window_commit(&w), 2);
    CHECK_U64_EQ(w.raises, 1);
    CHECK_EQ(counted_runs, 0); /* never inside the commit */
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(counted_runs, 1);
    CHECK_U64_EQ(lab_window_backlog(&c), 2);
    CHECK_EQ(lab_window_read(&w, &c, ev, 1), 1);
    CHECK_U64_EQ(ev[0].seq, 1);
    CHECK_U64_EQ(ev[0].value, 10);
    CHECK_U64_EQ(ev[0].readable_ns, lull_loop_now(loop));
    CHECK_EQ(lab_window_read(&w, &c, ev, 8), 1);
    CHECK_U64_EQ(ev[0].seq, 2);
    CHECK_EQ(lab_window_read(&w, &c, ev, 8), 0);
    CHECK_U64_EQ(w.reads, 4);           /* every call is a state read */
    CHECK_EQ(lab_window_commit(&w), 0); /* nothing new: no raise */
    CHECK_U64_EQ(w.raises, 1);
    lull_listener_stop(&counted);
    lab_window_cursor_close(&c);
    finish(loop, &w, NULL);
}

TEST(checkpoint_holds_commits_and_releases_them) {
    lull_loop *loop = new_loop();
    lab_window w;
    CHECK_EQ(lab_window_init(&w, loop, 16, 4), 0);
    lab_window_cursor c;
    lab_window_cursor_open(&w, &c, 1);
    lab_window_checkpoint_begin(&w);
    lab_window_checkpoint_begin(&w); /* nested */
    lab_window_append(&w, 1, 0, 0);
    CHECK_EQ(lab_window_commit(&w), 0);
    CHECK_U64_EQ(lab_window_backlog(&c), 0);
    CHECK_U64_EQ(w.raises, 0); /* nothing a reader can see changed */
    CHECK_EQ(lab_window_checkpoint_end(&w), 0);
    CHECK_U64_EQ(lab_window_backlog(&c), 0);
    lull_loop_advance(loop, 7 * MS);
    CHECK_EQ(lab_window_checkpoint_end(&w), 1);
    CHECK_U64_EQ(w.raises, 1);
    lab_window_event ev[2];
    CHECK_EQ(lab_window_read(&w, &c, ev, 2), 1);
    CHECK_U64_EQ(ev[0].readable_ns,
                 lull_loop_now(loop)); /* stamped at release */
    CHECK_EQ(lab_window_checkpoint_end(&w), -EINVAL);
    lab_window_cursor_close(&c);
    finish(loop, &w, NULL);
}

/* lull-lab times deliveries out of windows by the thousand: a page first
 * written by an append would put a page fault (tens of µs on a VM) inside
 * the measured wait. init writes the whole ring, so filling it faults no
 * page. Minor faults are counted per thread by the kernel; a ring of 4 MiB
 * would fault about a thousand times if init left it untouched. */
static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}

TEST(filling_the_ring_after_init_faults_no_page) {
    lull_loop *loop = new_loop();
    lab_window w;
    uint32_t capacity = (4u << 20) / sizeof(lab_window_event);
    CHECK_EQ(lab_window_init(&w, loop, capacity, 0), 0);
    long before = minor_faults();
    for (uint32_t i = 0; i < capacity; i++)
        lab_window_append(&w, i, 0, 0);
    long faults = minor_faults() - before;
    /* A few for the checker's own pages; a thousand if the ring faulted. */
    CHECK_LE(faults, 16);
    CHECK_EQ(lab_window_commit(&w), (int)capacity);
    finish(loop, &w, NULL);
}

TEST(retention_keeps_events_behind_the_slowest_cursor) {
    lull_loop *loop = new_loop();
    lab_window w;
    CHECK_EQ(lab_window_init(&w, loop, 8, 3), 0);
    lab_window_cursor fast, slow;
    lab_window_cursor_open(&w, &fast, 1);
    lab_window_cursor_open(&w, &slow, 1);
    lab_window_event ev[8];
    for (int i = 0; i < 6; i++)
        CHECK(lab_window_append(&w, i, 0, 0) != 0);
    lab_window_commit(&w);
    CHECK_EQ(lab_window_read(&w, &fast, ev, 8), 6);
    CHECK_U64_EQ(w.first, 1); /* slow has read nothing */
    CHECK_EQ(lab_window_read(&w, &slow, ev, 5), 5);
    CHECK_U64_EQ(w.first, 3); /* slow is at 6: keep 3, 4, 5 */
    CHECK_U64_EQ(lab_window_retained(&w), 4);
    /* The ring is bounded: 8 slots, slow reader at 6. */
    CHECK(lab_window_append(&w, 6, 0, 0) != 0);
    CHECK(lab_window_append(&w, 7, 0, 0) != 0);
    CHECK(lab_window_append(&w, 8, 0, 0) != 0);
    CHECK(lab_window_append(&w, 9, 0, 0) != 0);
    CHECK_U64_EQ(lab_window_append(&w, 10, 0, 0), 0); /* full */
    lab_window_commit(&w);
    /* Recovery: back to a retained event, not to a dropped one. */
    CHECK_EQ(lab_window_cursor_seek(&fast, 2), -ERANGE);
    CHECK_EQ(lab_window_cursor_seek(&fast, 3), 0);
    CHECK_EQ(lab_window_cursor_seek(&fast, 99), -ERANGE);
    CHECK_EQ(lab_window_read(&w, &fast, ev, 8), 8);
    CHECK_U64_EQ(ev[0].seq, 3);
    CHECK_U64_EQ(ev[7].seq, 10);
    CHECK_U64_EQ(ev[7].value, 9);
    lab_window_cursor_close(&slow); /* fast is now the slowest */
    CHECK_U64_EQ(w.first, 8);
    CHECK_U64_EQ(w.dropped, 7);
    CHECK(lab_window_append(&w, 10, 0, 0) != 0);
    lab_window_cursor_close(&fast);
    finish(loop, &w, NULL);
}

/* ------------------------------- the polling pump's regression tests */

/* An open idle session reads the window (near) never in notify mode; the
 * 5 ms poll reads it 400 times in 2 s. The polling pump's fix holds it: < 100
 * state reads in a 2 s idle window (was 708). */
static uint64_t idle_reads(bool polling) {
    lull_loop *loop = new_loop();
    lab_window w;
    CHECK_EQ(lab_window_init(&w, loop, 128, 49), 0);
    for (int i = 0; i < 49; i++)
        lab_window_append(&w, i, 0, 0);
    lab_window_commit(&w);
    session s;
    session_open(loop, &s, &w, polling);
    lull_pump_wake(&s.pump); /* deliver what is there at open */
    lull_loop_settle(loop);
    CHECK_U64_EQ(s.delivered, 49);
    uint64_t before = w.reads;
    lull_loop_advance(loop, 2000 * MS);
    uint64_t reads = w.reads - before;
    if (!polling) {
        CHECK(lull_pump_quiet(&s.pump));
        CHECK(!lull_loop_alive(loop)); /* nothing armed, nothing queued */
    }
    finish(loop, &w, &s);
    return reads;
}

TEST(idle_session_reads_nothing_in_notify_mode) {
    CHECK_U64_EQ(idle_reads(false), 0);
}

TEST(idle_session_reads_400_times_in_poll_mode) {
    uint64_t reads = idle_reads(true);
    CHECK(reads >= 395 && reads <= 405);
}

/* With time frozen (no lull_loop_advance anywhere), a provider task commits one
 * event per task for a 40-event turn; at each commit it posts a probe task.
 * Every event must reach the driver before its probe runs: the order check
 * of the polling pump's fix, independent of host speed. */
#define TURN 40

typedef struct frozen {
    lull_loop *loop;
    lab_window w;
    session s;
    lull_task provider;
    lull_task probe[TURN];
    int committed;
    int probes_run;
    bool order_ok;
} frozen;

static frozen *the_frozen;

static void probe_run(lull_task *t) {
    frozen *f = the_frozen;
    int k = (int)(t - f->probe); /* probe k: event k + 1 became readable */
    f->probes_run++;
    if (f->s.delivered < (uint64_t)k + 1) f->order_ok = false;
}

static void provider_run(lull_task *t) {
    frozen *f = LULL_CONTAINER_OF(t, frozen, provider);
    int k = f->committed++;
    lab_window_append(&f->w, (uint64_t)k,
                      k == TURN - 1 ? LAB_EVENT_TERMINAL : 0, 1);
    lab_window_commit(&f->w);
    /* The moment event k + 1 became readable: queue the probe. */
    lull_task_post(f->loop, &f->probe[k]);
    if (f->committed < TURN) lull_task_post(f->loop, &f->provider);
}

static void frozen_turn(bool polling, uint64_t *delivered, bool *order_ok) {
    lull_loop *loop = new_loop();
    static frozen f;
    memset(&f, 0, sizeof f);
    the_frozen = &f;
    f.loop = loop;
    f.order_ok = true;
    CHECK_EQ(lab_window_init(&f.w, loop, 128, 49), 0);
    session_open(loop, &f.s, &f.w, polling);
    uint64_t t0 = lull_loop_now(loop);
    for (int k = 0; k < TURN; k++)
        lull_task_init(&f.probe[k], probe_run);
    lull_task_init(&f.provider, provider_run);
    lull_task_post(loop, &f.provider);
    lull_loop_settle(loop); /* runs everything ready; never moves time */
    CHECK_U64_EQ(lull_loop_now(loop), t0);
    CHECK_EQ(f.committed, TURN);
    CHECK_EQ(f.probes_run, TURN);
    *delivered = f.s.delivered;
    *order_ok = f.order_ok;
    if (!polling) {
        CHECK_U64_EQ(f.s.last_seq, TURN);
        CHECK(lull_pump_quiet(&f.s.pump));
    }
    finish(loop, &f.w, &f.s);
}

TEST(turn_is_delivered_with_time_frozen) {
    uint64_t delivered = 0;
    bool order_ok = false;
    frozen_turn(false, &delivered, &order_ok);
    CHECK_U64_EQ(delivered, TURN);
    CHECK(order_ok);
}

/* The same check fails for the 5 ms poll: this is what makes it a
 * regression test. */
TEST(poll_mode_delivers_nothing_with_time_frozen) {
    uint64_t delivered = 1;
    bool order_ok = true;
    frozen_turn(true, &delivered, &order_ok);
    CHECK_U64_EQ(delivered, 0);
    CHECK(!order_ok);
}

/* Held items (a pending turn start) are retried every 5 ms only while held;
 * once delivered the pump is quiet and no timer remains. */
TEST(held_items_are_retried_only_while_held) {
    lab_window w;
    session s;
    lull_loop *loop = open_session(&w, &s);
    s.busy = true;
    lab_window_append(&w, 1, 0, 1);
    lab_window_commit(&w);
    lull_loop_settle(loop);
    CHECK_U64_EQ(s.pump.passes, 1);
    CHECK(!lull_pump_quiet(&s.pump));
    lull_loop_advance(loop, 23 * MS);
    CHECK_U64_EQ(s.pump.passes, 5); /* at 0, 5, 10, 15, 20 ms */
    CHECK_U64_EQ(s.delivered, 0);
    CHECK_U64_EQ(w.reads, 0);        /* held passes decide without reading */
    s.busy = false;                  /* no raise: the retry finds it */
    lull_loop_advance(loop, 2 * MS); /* 25 ms */
    CHECK_U64_EQ(s.pump.passes, 6);
    CHECK_U64_EQ(s.delivered, 1);
    CHECK(lull_pump_quiet(&s.pump));
    CHECK(!lull_loop_alive(loop));
    lull_loop_advance(loop, 2000 * MS);
    CHECK_U64_EQ(s.pump.passes, 6);
    CHECK_U64_EQ(w.reads, 1);
    finish(loop, &w, &s);
}

/* A commit while held wakes the pump: the retry is cancelled and the pass
 * re-decides at once. */
TEST(commit_while_held_redecides_at_once) {
    lab_window w;
    session s;
    lull_loop *loop = open_session(&w, &s);
    s.busy = true;
    lab_window_append(&w, 1, 0, 1);
    lab_window_commit(&w);
    lull_loop_settle(loop);
    lull_loop_advance(loop, 2 * MS);
    s.busy = false;
    lab_window_append(&w, 2, 0, 1);
    lab_window_commit(&w);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_U64_EQ(s.delivered, 2);
    CHECK(lull_pump_quiet(&s.pump)); /* the 5 ms retry is gone */
    lull_loop_advance(loop, 100 * MS);
    CHECK_U64_EQ(s.pump.passes, 2);
    finish(loop, &w, &s);
}

typedef struct batch_writer {
    lull_task task;
    lab_window *w;
    int commits;
} batch_writer;

static void write_batch(lull_task *t) {
    batch_writer *b = LULL_CONTAINER_OF(t, batch_writer, task);
    for (int i = 0; i < b->commits; i++) {
        lab_window_append(b->w, (uint64_t)i, 0, 1);
        lab_window_commit(b->w);
    }
}

TEST(several_commits_in_one_task_cause_one_pass) {
    lab_window w;
    session s;
    lull_loop *loop = open_session(&w, &s);
    batch_writer b = {.w = &w, .commits = 7};
    lull_task_init(&b.task, write_batch);
    lull_task_post(loop, &b.task);
    CHECK_EQ(lull_loop_settle(loop), 2); /* the writer, then one pass */
    CHECK_U64_EQ(w.raises, 7);
    CHECK_U64_EQ(s.pump.passes, 1);
    CHECK_U64_EQ(w.reads, 1);
    CHECK_U64_EQ(s.delivered, 7);
    finish(loop, &w, &s);
}

TEST(close_or_unlisten_during_a_pending_wake_runs_nothing) {
    lab_window w;
    session s;
    lull_loop *loop = open_session(&w, &s);
    counted_runs = 0;
    lull_listener_start(loop, &w.notifier, &counted, count_raise);
    lab_window_append(&w, 1, 0, 1);
    lab_window_commit(&w);
    lull_pump_close(&s.pump);
    lull_listener_stop(&counted);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_U64_EQ(s.pump.passes, 0);
    CHECK_EQ(counted_runs, 0);
    CHECK_U64_EQ(w.reads, 0);
    finish(loop, &w, &s);
}

/* A cursor move (recovery) is a wake source: the pass re-delivers from the
 * new position without any other change. */
TEST(cursor_move_wakes_the_reader) {
    lab_window w;
    session s;
    lull_loop *loop = open_session(&w, &s);
    for (int i = 0; i < 5; i++)
        lab_window_append(&w, (uint64_t)i, 0, 1);
    lab_window_commit(&w);
    lull_loop_settle(loop);
    CHECK_U64_EQ(s.delivered, 5);
    CHECK_EQ(lab_window_cursor_seek(&s.cursor, 3), 0);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_U64_EQ(s.delivered, 8);
    CHECK_U64_EQ(s.last_seq, 5);
    finish(loop, &w, &s);
}

/* ------------------------------------------------------- property test */

/* 100,000 random operations on one window with two readers: commits of
 * 1-3 events, nested checkpoints, cursor moves (back to any retained event,
 * or forward), the driver of reader 1 turning busy and ready (HELD passes,
 * retried by timer), settles and small advances of time. A model holds the
 * value of every sequence number and the position each reader must see
 * next; every delivery is checked against it (nothing lost, duplicated or
 * reordered), and after each settle a reader that is not held must have
 * nothing readable left (a change that did not wake it would show here). */
#define OPS       100000
#define PROP_CAP  64
#define PROP_KEEP 8

static uint64_t rng(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL; /* xorshift64* */
}

static void check_after_settle(session *s, bool never_held) {
    uint64_t backlog = lab_window_backlog(&s->cursor);
    if (never_held && backlog != 0)
        check_fail(__FILE__, __LINE__,
                   "reader at %llu left %llu readable events after settle",
                   (unsigned long long)s->cursor.next,
                   (unsigned long long)backlog);
    /* Pending work always has a deadline or a task (a reader whose driver
     * became ready without a wake is found by its retry timer). */
    if (backlog != 0) CHECK(!lull_pump_quiet(&s->pump));
    CHECK_U64_EQ(s->expect, s->cursor.next);
}

static void property_run(uint64_t seed) {
    lull_loop *loop = new_loop();
    static uint64_t values[OPS * 3 + 2];
    static lab_window w;
    static session r[2];
    CHECK_EQ(lab_window_init(&w, loop, PROP_CAP, PROP_KEEP), 0);
    for (int i = 0; i < 2; i++) {
        session_open(loop, &r[i], &w, false);
        r[i].values = values;
        r[i].check_model = true;
    }
    uint64_t st = seed, model_readable = 1, model_committed = 1;
    uint64_t model_next = 1;
    int holds = 0, settles = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t x = rng(&st);
        switch (x % 16) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4: { /* commit 1-3 events */
            int n = 1 + (int)((x >> 8) % 3);
            for (int i = 0; i < n; i++) {
                uint64_t v = rng(&st);
                uint64_t seq = lab_window_append(&w, v, 0, 0);
                if (seq == 0) break; /* full: a slow (held) reader */
                CHECK_U64_EQ(seq, model_next);
                values[seq] = v;
                model_next++;
            }
            lab_window_commit(&w);
            model_committed = model_next;
            if (holds == 0) model_readable = model_committed;
            break;
        }
        case 5: /* checkpoint begins */
            if (holds < 3) {
                lab_window_checkpoint_begin(&w);
                holds++;
            }
            break;
        case 6:
        case 7: /* checkpoint ends */
            if (holds > 0) {
                CHECK(lab_window_checkpoint_end(&w) >= 0);
                if (--holds == 0) model_readable = model_committed;
            }
            break;
        case 8: { /* recovery: move a cursor anywhere retained */
            session *s = &r[(x >> 8) & 1];
            uint64_t span = w.readable - w.first + 1;
            uint64_t to = w.first + (x >> 16) % span;
            CHECK_EQ(lab_window_cursor_seek(&s->cursor, to), 0);
            s->expect = to;
            break;
        }
        case 9: /* reader 1's driver turns busy or ready, without a wake */
            r[1].busy = !r[1].busy;
            break;
        case 10: /* a little time: held retries come due */
            lull_loop_advance(loop, ((x >> 8) % 7) * MS);
            break;
        default: /* run what is ready */
            lull_loop_settle(loop);
            settles++;
            check_after_settle(&r[0], true);
            check_after_settle(&r[1], false);
            break;
        }
        CHECK_U64_EQ(w.readable, model_readable);
        CHECK_U64_EQ(w.committed, model_committed);
        CHECK_U64_EQ(w.next, model_next);
        /* Retention: nothing a reader still needs is dropped, and no more
         * than PROP_KEEP events are kept behind the slowest reader. */
        uint64_t slowest = r[0].cursor.next < r[1].cursor.next
                               ? r[0].cursor.next
                               : r[1].cursor.next;
        CHECK(w.first <= slowest);
        CHECK(slowest - w.first <= PROP_KEEP);
        CHECK(lab_window_retained(&w) <= PROP_CAP);
    }
    /* Drain: end the checkpoints, free the driver, let the retry run. */
    while (holds-- > 0)
        lab_window_checkpoint_end(&w);
    r[1].busy = false;
    lull_loop_advance(loop, 10 * MS);
    lull_loop_settle(loop);
    for (int i = 0; i < 2; i++) {
        check_after_settle(&r[i], true);
        CHECK_U64_EQ(r[i].cursor.next, model_next);
        CHECK(lull_pump_quiet(&r[i].pump));
    }
    CHECK(settles > OPS / 4);
    CHECK(model_next > OPS / 2); /* the ring did not stay full */
    for (int i = 0; i < 2; i++)
        session_close(&r[i]);
    finish(loop, &w, NULL);
}

TEST(property_no_event_lost_duplicated_or_reordered) {
    property_run(0x9E3779B97F4A7C15ull);
}

TEST(property_second_seed) {
    property_run(20250101);
}
