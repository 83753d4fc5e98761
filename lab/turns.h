/* The `turns` scenario's contract between its driver (lab/turns.c) and the
 * implementations of its figures: lull (lab/turns_lull.c), the C peers
 * (lab/peers/<peer>.c, each compiled only when its library is installed), the
 * futex floor (lab/peers/futex.c) and Node (lab/turns_node.c, which runs
 * lab/node/turns.js).
 *
 * Every implementation of a figure is a turns_fn: it sets up, measures once
 * and tears down, filling the figure's values (unused ones stay NaN). The
 * driver calls the implementations of a figure in turn, round after round,
 * so drift on the machine spreads over all of them. */
#ifndef LAB_TURNS_H
#define LAB_TURNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    TURNS_CHAIN_TASK,   /* posted task / next-iteration callback chain */
    TURNS_CHAIN_TIMER0, /* zero-delay timer chain */
    TURNS_LATENESS,     /* 1 ms timer lateness */
    TURNS_IDLE,         /* idle window with many idle handles */
    TURNS_ROUNDTRIP,    /* cross-thread round trip, both threads on one CPU */
    TURNS_TIMERS,       /* arm + cancel with 1,000,000 timers armed */
    TURNS_FIGURES
};

/* Values each figure fills, by index. */
enum { CHAIN_NS_PER_HOP, CHAIN_POLLS_PER_HOP };
enum { LATE_P50_US, LATE_P99_US, LATE_MAX_US };
enum { IDLE_WAKEUPS, IDLE_NVCSW, IDLE_CPU_US, IDLE_CPU_US_PER_S };
enum { TRIP_P50_US, TRIP_P99_US, TRIP_MEAN_US };
enum { TIMERS_PAIR_NS, TIMERS_ARM_NS, TIMERS_CANCEL_NS, TIMERS_BYTES };
#define TURNS_VALUES 4

typedef struct turns_params {
    uint64_t hops;         /* chain length */
    uint64_t slow_hops;    /* chain length where a zero-delay timer really
                              waits (Node clamps it to 1 ms) */
    int lateness_samples;  /* 1 ms timers fired one after another */
    int idle_handles_lull; /* sockets, far timers and pumps, each */
    int idle_handles_peer; /* watched sockets for the peers */
    uint64_t idle_window_ns;
    int trips;        /* cross-thread round trips measured */
    int warmup_trips; /* round trips run before measuring */
    int timers;       /* timers armed before arm/cancel is timed */
    int timer_pairs;  /* arms, then cancels, timed with them armed */
    int cpu;          /* the CPU both round-trip threads share */
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

typedef struct turns_entry {
    int figure;        /* TURNS_* */
    const char *label; /* the table row, e.g. "libevent (1 callback/pass)" */
    turns_fn fn;
} turns_entry;

typedef struct turns_peer {
    const char *name; /* "lull", "libuv", ... */
    /* Version string for the header; NULL when there is none. */
    const char *(*version)(void);
    /* NULL when always available; else says why not (e.g. no `node`). */
    bool (*available)(char *why, size_t size);
    const turns_entry *entries;
    int count;
} turns_peer;

extern const turns_peer turns_lull;  /* lab/turns_lull.c */
extern const turns_peer turns_futex; /* lab/peers/futex.c */
extern const turns_peer turns_node;  /* lab/turns_node.c */
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
/* Fills p50 / p99 / max (or mean) from an array of samples in ns, in µs. */
void turns_latency_us(double *samples_ns, int n, double *p50, double *p99,
                      double *third, bool third_is_max);
/* Opens n/2 socketpairs into fds[0..n) (n rounded up to even), all
 * non-blocking; returns 0 or a negative errno (closing what it opened). */
int turns_open_sockets(int *fds, int n);
void turns_close_sockets(int *fds, int n);
/* The timers figure from its measurement: `pairs` timers armed in
 * [t0, t1) and cancelled in [t1, t2) with `armed` already armed, and the
 * heap growth those `armed` timers caused. */
void turns_timer_figures(turns_result *out, size_t armed, size_t pairs,
                         uint64_t t0, uint64_t t1, uint64_t t2,
                         uint64_t heap_growth);
/* A random delay in [lo_ns, hi_ns). */
uint64_t turns_random_delay(uint64_t *state, uint64_t lo_ns, uint64_t hi_ns);

/* The round-trip harness every cross-thread entry shares: it starts two
 * threads pinned to p->cpu, runs `a` on one and `b` on the other, and joins
 * them. Each side function receives `arg`. A side's setup must be visible
 * to the other before either sends: turns_pair_ready() waits at a barrier
 * shared by both sides. */
typedef struct turns_pair turns_pair;
int turns_pair_run(const turns_params *p, void *(*a)(void *),
                   void *(*b)(void *), void *arg);
/* Both sides call this once, after their setup and before their first send:
 * returns when the other side got there too. */
void turns_pair_ready(void);

#endif /* LAB_TURNS_H */
