/* What the `pump` scenario's files share: its parameters, a run of N
 * sessions on one loop (lab/pump_run.c), the idle window and the stream
 * that measure a run, and the journal variant (lab/pump_journal.c). The
 * driver, its figures and its verdict are lab/pump.c. */
#ifndef LAB_PUMP_H
#define LAB_PUMP_H

#include "engine.h"
#include "soak.h"
#include "window.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <lull.h>

#define MS 1000000ull

enum { MODE_POLL_GRID, MODE_POLL, MODE_NOTIFY, MODES };
extern const char *const pump_mode_name[MODES];  /* JSON */
extern const char *const pump_mode_label[MODES]; /* tables */

typedef struct params {
    int sessions; /* the main table's size (default 12) */
    int events;   /* per turn: 40, as the polling pump was first measured */
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
    char dir[PATH_MAX];    /* the temporary directory of the files */
    lab_soak_result *soak; /* verify mode: counts and the first fault */
    int soak_errors;       /* verify mode: events found wrong */
};

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
    double audit_wakeups;  /* wakeups the wake audit attributed to a source
                              (the harness's own left out) */
    double metric_wakeups; /* wakeups lull_loop_metrics counted (the same) */
} idle_result;

typedef struct stream_result {
    double mean_us, p50_us, p95_us, p99_us, max_us;
    double terminal_p50_us;
    double passes_per_event;
    bool complete;
} stream_result;

/* The parameters of a run: --quick, --sessions, --rounds. */
void pump_set_params(const lab_options *opts, params *p);
/* Opens n sessions with `retain` events already delivered and retained,
 * their pumps woken as `mode` says. */
int pump_run_open(run *r, int n, int mode, int retain, const params *p,
                  uint64_t *seed);
/* Closes a run; a journal run's journal is closed first by its own file
 * (lab/pump_journal.c), which calls this file and is never called by it. */
void pump_run_close(run *r);
/* The idle window: reads, utilisation, the loop thread's CPU, wakeups and
 * the wake audit, over idle_ns. */
int pump_idle_window(run *r, uint64_t idle_ns, idle_result *out);
/* One turn per session, every session at once: each event's wait. */
int pump_stream(run *r, const params *p, stream_result *out);

/* The journal variant (--journal; --only journal alone). */
int pump_run_journal(const lab_options *opts, const params *p, lab_json *json);

#endif /* LAB_PUMP_H */
