/* The `turns` scenario's contract between its driver (lab/turns.c) and the
 * implementations of its figures: lull (lab/turns_lull.c, and the same code
 * linked against liblull.so through lab/turns_lull_so.c), the C peers
 * (lab/peers/<peer>.c, each compiled only when its library is installed),
 * the floors (lab/peers/floor.c) and Node (lab/turns_node.c, which runs
 * lab/node/turns.js). lab/turns_util.c holds the helpers they share and
 * lab/turns_count.c the poll and sched_yield counters.
 *
 * Every implementation of a figure is a turns_fn: it sets up, measures once
 * and tears down, filling the figure's values (unused ones stay NaN). The
 * driver calls the implementations of a figure once per round, rotating
 * which row goes first, so drift on the machine spreads over all of them. */
#ifndef LAB_TURNS_H
#define LAB_TURNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    TURNS_CHAIN_TASK,     /* posted task / next-iteration callback chain */
    TURNS_CHAIN_TIMER0,   /* zero-delay timer chain */
    TURNS_LATENESS,       /* 1 ms timer lateness */
    TURNS_IDLE,           /* idle window with many idle handles */
    TURNS_ROUNDTRIP,      /* cross-thread round trip, both threads on one CPU */
    TURNS_ROUNDTRIP_2CPU, /* the same entries, the threads on two CPUs */
    TURNS_TIMERS,         /* arm + cancel with 1,000,000 timers armed */
    TURNS_VIRTUAL,        /* the virtual clock against the real one (C7) */
    TURNS_LATENESS_BUSY,  /* 1 ms timer lateness beside CPU hogs (full runs) */
    TURNS_ARM_DELAY,      /* a delayed arm's start after its call (full runs) */
    TURNS_FIGURES
};

/* Values each figure fills, by index. */
enum { CHAIN_NS_PER_HOP, CHAIN_POLLS_PER_HOP };
enum { LATE_P50_US, LATE_P99_US, LATE_MAX_US, LATE_MIN_US };
/* IDLE_NS_PER_HANDLE: CPU ns per second of window per idle socket or
 * timer (sockets + timers, the same count in every row), filled by the
 * driver. */
enum {
    IDLE_WAKEUPS,
    IDLE_NVCSW,
    IDLE_CPU_US,
    IDLE_CPU_US_PER_S,
    IDLE_NS_PER_HANDLE
};
/* TRIP_YIELDS is filled by the driver (sched_yield calls per trip). */
enum { TRIP_P50_US, TRIP_P99_US, TRIP_MEAN_US, TRIP_YIELDS };
enum {
    TIMERS_STEADY_NS,    /* arm + cancel, the median of the steady rounds */
    TIMERS_ARM_NS,       /* ... its arm half */
    TIMERS_CANCEL_NS,    /* ... its cancel half */
    TIMERS_FIRST_NS,     /* arm + cancel in the first round (growth) */
    TIMERS_FIRST_FAULTS, /* minor page faults in the first round */
    TIMERS_BYTES         /* bytes per armed timer */
};
enum {
    VIRTUAL_SAME_ORDER, /* 1 when both clocks fired every timer in the
                           order of its deadline, ties in arm order */
    VIRTUAL_TIMERS,     /* timers in that comparison */
    VIRTUAL_HOUR_MS     /* real ms to advance 1 h with 10,000 timers due */
};
/* How much later than its lull_timer_start call an arm's delay starts
 * counting, ns (lab/turns_arm.c). */
enum { ARM_P50_NS, ARM_P99_NS, ARM_P999_NS, ARM_MAX_NS };
#define TURNS_VALUES 6

/* Rounds of arm-then-cancel the timers figure runs in each process: the
 * first pays for growth (page faults on fresh memory, array doubling), the
 * others are the steady state. */
#define TURNS_TIMER_ROUNDS 4

typedef struct turns_params {
    uint64_t hops;        /* chain length */
    uint64_t slow_hops;   /* chain length where a zero-delay timer really
                             waits (Node clamps it to 1 ms) */
    int lateness_samples; /* 1 ms timers fired one after another */
    int idle_handles;     /* idle: watched sockets, and as many timers due in
                             an hour or two, in every row (lull's pump row
                             adds as many pumps) */
    uint64_t idle_window_ns;
    int trips;        /* cross-thread round trips measured */
    int warmup_trips; /* round trips run before measuring */
    int timers;       /* timers armed before arm/cancel is timed */
    int timer_pairs;  /* arms, then cancels, timed with them armed */
    int cpu;          /* the CPU of a round trip's first thread */
    int cpu_b;        /* ... of its second: cpu, or another CPU */
    long slack_ns;    /* lateness: the timer slack the driver gave the
                         calling thread; 0 = left at the kernel's default */
    uint64_t seed;    /* for random deadlines */
    int round;        /* 0-based round this call belongs to */
    bool quick;       /* --quick: an entry may skip later rounds */
} turns_params;

typedef struct turns_result {
    double v[TURNS_VALUES];
} turns_result;

/* Returns 0, TURNS_SKIPPED when the entry chose not to run this round (a
 * slow entry under --quick), or a negative errno when it could not run. */
#define TURNS_SKIPPED 1
typedef int (*turns_fn)(const turns_params *p, turns_result *out);

/* turns_entry.flags */
#define TURNS_BASE                                                             \
    0x1u /* the base of the ratio column for rows of its                       \
            class (one per class; lull's rows) */
#define TURNS_SLACK_BOTH                                                       \
    0x2u /* lateness: run at the lab's common timer                            \
            slack and again at the kernel's default */
#define TURNS_OWN_SLACK                                                        \
    0x4u /* lateness: the implementation sets its own                          \
            slack (lull); the driver leaves the thread's */

/* Classes of the chain figures' rows: their I/O policy, which says which
 * rows compare like for like. A row's ratio is taken against the TURNS_BASE
 * row of its class, or of class 0 when its class has none. Rows of the
 * other figures are all class 0. */
enum {
    TURNS_CLASS_QUANTUM = 0, /* I/O checked once per 0.5 ms of callbacks:
                                lull's default */
    TURNS_CLASS_EVERY_HOP,   /* I/O checked on every hop */
    TURNS_CLASS_NO_POLL,     /* no I/O check while callbacks are queued */
    TURNS_CLASSES
};

typedef struct turns_entry {
    int figure;         /* TURNS_* */
    const char *label;  /* the table row, e.g. "libevent (1 callback/pass)" */
    turns_fn fn;        /* measures once */
    const char *policy; /* chains: when the row checks I/O; NULL: none */
    unsigned flags;     /* TURNS_BASE, TURNS_SLACK_BOTH, TURNS_OWN_SLACK */
    int cls;            /* TURNS_CLASS_* */
} turns_entry;

typedef struct turns_peer {
    const char *name; /* "lull", "libuv", ... */
    /* Version string for the header; NULL when there is none. */
    const char *(*version)(void);
    /* NULL when always available; else says why not (e.g. no `node`). */
    bool (*available)(char *why, size_t size);
    const turns_entry *entries;
    int count;
    const char *build; /* how it is built and linked, for the header */
} turns_peer;

extern const turns_peer turns_lull;    /* lab/turns_lull.c */
extern const turns_peer turns_lull_so; /* lab/turns_lull_so.c */
extern const turns_peer turns_floor;   /* lab/peers/floor.c */
extern const turns_peer turns_node;    /* lab/turns_node.c */

/* Figure (9)'s rows, lull's entries (lab/turns_arm.c): a producer arming
 * one timer per task, the same doing ~1 µs of work first, that one's
 * second arm per task, a 1 ms timer re-arming itself. */
int turns_arm_plain(const turns_params *p, turns_result *out);
int turns_arm_worked(const turns_params *p, turns_result *out);
int turns_arm_second(const turns_params *p, turns_result *out);
int turns_arm_rearm(const turns_params *p, turns_result *out);
#ifdef LAB_HAVE_UV
extern const turns_peer turns_uv; /* lab/peers/uv.c */
#endif
#ifdef LAB_HAVE_EV
extern const turns_peer turns_ev; /* lab/peers/ev.c */
#endif
#ifdef LAB_HAVE_EVENT
extern const turns_peer turns_event; /* lab/peers/event.c */
#endif

/* ------------------------------------------- helpers the entries share */

/* Sets every value to NaN ("not measured by this implementation"). */
void turns_result_clear(turns_result *out);

/* A chain's measurement: the clock and the calling thread's polls from
 * just before the first hop is queued to the loop's return. */
typedef struct turns_chain_clock {
    uint64_t polls0, t0;
} turns_chain_clock;
void turns_chain_begin(turns_chain_clock *c);
/* Fills ns/hop and polls/hop over p->hops hops. */
void turns_chain_end(const turns_chain_clock *c, const turns_params *p,
                     turns_result *out);

/* The lateness figure's samples: a 1 ms timer, due 1 ms after each arm. */
typedef struct turns_late {
    double *samples;
    int n, want;
    uint64_t due; /* CLOCK_MONOTONIC ns the timer is due at */
} turns_late;
/* Allocates p->lateness_samples samples; 0 or -ENOMEM. */
int turns_late_open(turns_late *l, const turns_params *p);
/* Call just before arming the 1 ms timer: its due time is now + 1 ms. */
void turns_late_arm(turns_late *l);
/* The timer fired: records its lateness (< 0: early). Returns true when
 * another sample is wanted: turns_late_arm and arm the timer again. */
bool turns_late_fired(turns_late *l);
/* Fills p50 / p99 / max / min in µs when rc is 0; frees; returns rc. */
int turns_late_close(turns_late *l, int rc, turns_result *out);

/* The idle figure's window: the calling thread's CPU time and voluntary
 * context switches from begin (just before the window's timer is armed)
 * to end (the loop returned). Every row holds p->idle_handles watched
 * sockets and as many timers, each due at turns_idle_delay_ns. */
typedef struct turns_idle_clock {
    uint64_t cpu0, cs0;
} turns_idle_clock;
void turns_idle_begin(turns_idle_clock *c);
void turns_idle_end(const turns_idle_clock *c, const turns_params *p,
                    turns_result *out);

/* The round trip's bookkeeping on side A: when the ping left, and each
 * trip's time once warm. */
typedef struct turns_trip_clock {
    const turns_params *p;
    double *samples;
    int done;      /* trips completed, warm-up included */
    uint64_t sent; /* when the ping of the trip in flight left */
} turns_trip_clock;
/* Allocates p->trips samples; 0 or -ENOMEM. */
int turns_trip_open(turns_trip_clock *t, const turns_params *p);
/* Side A sends a ping now. */
void turns_trip_send(turns_trip_clock *t);
/* The pong arrived at side A: records the trip. Returns true when another
 * trip is due (its send time is taken: send it), false after the last. */
bool turns_trip_arrived(turns_trip_clock *t);
/* Fills p50 / p99 / mean in µs when rc is 0; frees; returns rc. */
int turns_trip_close(turns_trip_clock *t, int rc, turns_result *out);
/* Fills p50 / p99 / mean of round-trip samples in ns, in µs (sorts). */
void turns_trip_us(double *samples_ns, int n, turns_result *out);
/* Opens n/2 socketpairs into fds[0..n) (n rounded up to even), all
 * non-blocking; returns 0 or a negative errno (closing what it opened). */
int turns_open_sockets(int *fds, int n);
void turns_close_sockets(int *fds, int n);
/* An idle timer's delay: random in [1 h, 2 h), so none fires in the
 * window and each sits in the loop's timer structure. */
uint64_t turns_idle_delay_ns(uint64_t *seed);
/* A random delay in [lo_ns, hi_ns). */
uint64_t turns_random_delay(uint64_t *state, uint64_t lo_ns, uint64_t hi_ns);

/* Polls (epoll_wait, epoll_pwait, epoll_pwait2 calls) made so far by the
 * calling thread, whoever made them: lull, a peer library or the lab. */
uint64_t turns_polls(void);
/* sched_yield calls made so far by every thread of the process. */
uint64_t turns_yields(void);

/* The timers figure: every implementation arms p->timers timers, then runs
 * TURNS_TIMER_ROUNDS rounds of arming p->timer_pairs more and cancelling
 * them, bracketing each round's arms and cancels with these calls. */
typedef struct turns_timer_rounds {
    uint64_t t[TURNS_TIMER_ROUNDS][3]; /* arms start, cancels start, end */
    uint64_t faults[TURNS_TIMER_ROUNDS];
    uint64_t faults0; /* minor faults when the round began */
    int r;            /* rounds done */
} turns_timer_rounds;
void turns_timer_arms(turns_timer_rounds *tr);    /* the arms begin */
void turns_timer_cancels(turns_timer_rounds *tr); /* the cancels begin */
void turns_timer_done(turns_timer_rounds *tr);    /* the round ended */
/* Fills the timers figure: round 0 is the growth round, the median of the
 * others the steady state; bytes per timer = heap_growth / armed. */
void turns_timer_figures(turns_result *out, const turns_timer_rounds *tr,
                         size_t armed, size_t pairs, double heap_growth);

/* The round-trip harness every cross-thread entry shares: it starts two
 * threads, pinned to p->cpu and p->cpu_b, runs `a` on the first and `b` on
 * the second, and joins them. Each side function receives `arg`. A side's
 * setup must be visible to the other before either sends:
 * turns_pair_ready() waits at a barrier shared by both sides. */
int turns_pair_run(const turns_params *p, void *(*a)(void *),
                   void *(*b)(void *), void *arg);
/* Both sides call this once, after their setup and before their first send:
 * returns when the other side got there too. */
void turns_pair_ready(void);

#endif /* LAB_TURNS_H */
