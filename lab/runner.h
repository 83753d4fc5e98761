/* What the `runner` scenario's files share (the polling pump in its real
 * setting): the runner processes' wire format, the parameters of a run, and one
 * measurement of a transport — lull's (lab/runner_run.c) or Node's
 * (lab/runner_node.c, lab/node/runner.js). The runner child itself is
 * lab/runner_child.c; the figures, tables and verdict are lab/runner.c.
 *
 * A runner is lull-lab re-executed as `lull-lab runner-child ID EVENTS
 * INTERVAL_NS`. It writes one READY record on its stdout, then for each
 * command it reads on its stdin (runner_go: a CLOCK_MONOTONIC start time)
 * it commits one turn: event k at start + phase + (k + 1) × interval, each
 * one a record written to its stdout the instant it is committed, stamped
 * with CLOCK_MONOTONIC (one clock for every process of the machine, so the
 * parent measures the wait across the process boundary). EOF on stdin:
 * it exits 0. The pipe holds what the runner committed and the parent has
 * not read: it is the runner's committed-event window as its parent sees
 * it, and a read of it is a state read.
 *
 * Every runner gets the same start, so every session streams its turn at
 * once, as the polling pump was first measured; each on a phase of its own
 * within the period (runner_phase), as separate programs would. With
 * RUNNER_GO_ALIGNED (`lull-lab runner --aligned`) the phase is 0 and all
 * N runners commit in the same instant: N processes woken together on the
 * machine's CPUs, whose queue for a CPU is then most of every wait. */
#ifndef LAB_RUNNER_H
#define LAB_RUNNER_H

#include "engine.h"

#include <stdint.h>

/* ------------------------------------------------------------- records */

/* One record, 32 bytes, the host's byte order (little-endian here; Node
 * reads it with readUInt32LE / readBigUInt64LE). A write of it is atomic
 * (under PIPE_BUF), so a reader never sees half of one from the kernel. */
#define RUNNER_RECORD   32
#define RUNNER_MAGIC    0x524e5552u /* "RUNR" */
#define RUNNER_TERMINAL 0x1u        /* the last event of a turn */
#define RUNNER_READY    0x2u        /* the runner is up; seq RUNNER_NO_SEQ */
#define RUNNER_NO_SEQ   0xffffffffu

typedef struct runner_record {
    uint32_t magic;     /* RUNNER_MAGIC: a torn or stray record fails */
    uint32_t runner;    /* the runner's index, 0..N-1 */
    uint32_t seq;       /* the event's number in its turn, 0..events-1 */
    uint32_t flags;     /* RUNNER_TERMINAL, RUNNER_READY */
    uint64_t commit_ns; /* CLOCK_MONOTONIC when the runner committed it */
    uint32_t check;     /* runner_check(runner, seq, flags) */
    uint32_t turn;      /* turns before this one (0: the first) */
} runner_record;

_Static_assert(sizeof(runner_record) == RUNNER_RECORD, "runner record size");

/* A checksum of a record's identity: a record delivered to the wrong
 * session or with a corrupt number fails it. lab/node/runner.js computes
 * the same with Math.imul. */
static inline uint32_t runner_check(uint32_t runner, uint32_t seq,
                                    uint32_t flags) {
    uint32_t h = runner * 0x9E3779B1u ^ seq * 0x85EBCA77u ^ flags * 0xC2B2AE3Du;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    return h;
}

/* The start command, on a runner's stdin. */
#define RUNNER_GO_ALIGNED 0x1u /* no phase: commit with every other runner */
typedef struct runner_go {
    uint64_t start_ns; /* CLOCK_MONOTONIC: the turn's origin */
    uint32_t flags;    /* RUNNER_GO_* */
    uint32_t pad;      /* 0 */
} runner_go;

_Static_assert(sizeof(runner_go) == 16, "runner command size");

/* A runner's phase within the period: a fixed spread over [0, interval),
 * the same for every transport and every round (like for like). */
static inline uint64_t runner_phase(uint32_t runner, uint64_t interval_ns) {
    return (uint64_t)runner_check(runner, 0, 0x80) * interval_ns >> 32;
}

/* `lull-lab runner-child ID EVENTS INTERVAL_NS` (argv[0] is
 * "runner-child"). Returns the exit status. */
int runner_child_main(int argc, char **argv);

/* ---------------------------------------------------------- parameters */

typedef struct runner_params {
    int runners;          /* this measurement's N */
    int events;           /* per turn: 40, as the polling pump's */
    uint64_t interval_ns; /* one event every 15 ms */
    uint64_t poll_ns;     /* poll mode: every 5 ms */
    uint64_t grid_ns;     /* poll mode: on a 1 ms timer grid */
    uint64_t idle_ns;     /* the idle window */
    bool aligned;         /* RUNNER_GO_ALIGNED: every runner at once */
    const char *exe;      /* lull-lab, as the runners are started */
    uint64_t seed;        /* poll phases */
} runner_params;

/* The transports' modes: the polling pump (before) and the wake (after); and,
 * for lull's measure only, the floor: no loop, the thread blocked in epoll_wait
 * on every runner's pipe and reading it at once, so the kernel's part of a wait
 * (the pipe, the wakeup across processes, the scheduler) is measured alone. */
enum { RUNNER_POLL, RUNNER_NOTIFY, RUNNER_FLOOR, RUNNER_MODES };

/* One measurement: N runners spawned, an idle window, one turn each
 * streamed at once, the runners told to stop and reaped. */
typedef struct runner_result {
    double wait_p50_us, wait_p95_us, wait_p99_us, wait_max_us, wait_mean_us;
    double idle_reads;   /* per session per second: reads of the runners' pipes
                            (lull) or of the transport's window (Node) */
    double idle_wakeups; /* per session per second: the transport thread's
                            voluntary context switches, the one that ends
                            the window left out */
    double idle_cpu_ms;  /* the transport process's CPU, ms per second */
    double idle_s;       /* the window as measured */
    double ready_ms;     /* first spawn -> every runner's READY read */
    double loop_wakeups; /* lull: lull_loop_metrics' idle wakeups per
                            session per second (the same end left out);
                            NaN for Node */
    double delivered;    /* events the driver received */
    double cpu_per_event_ns;   /* the transport process's CPU over the stream
                                  (send the start, every event delivered)
                                  ÷ the events: the scheduler does not move it */
    double events_per_read;    /* events ÷ reads of the pipes (lull, floor)
                                  or of the windows (Node) over the stream:
                                  a late transport reads more at once, and
                                  pays less per event */
    double busy_transport_pct; /* over the stream, the transport's CPU's
                                  busy share (/proc/stat), % */
    double busy_runners_pct;   /* ... the runners' CPU's */
    double steal_pct;          /* ... both CPUs' steal, % of their time */
    char why[256];             /* the first thing found wrong, or "" */
} runner_result;

/* lull's transport (lab/runner_run.c), or the floor. 0; -EPROTO when an event
 * was lost, repeated, out of order or corrupt, or a runner failed (out->why
 * says which); another negative errno when it could not run (-EMFILE, -EAGAIN:
 * out of fds or processes, with out->why). */
int runner_lull_measure(const runner_params *p, int mode, runner_result *out);

/* Node's transport (lab/runner_node.c): the same, run by node. */
bool runner_node_available(char *why, size_t size);
int runner_node_measure(const runner_params *p, int mode, runner_result *out);

/* The fds one measurement of N runners needs in the transport's process. */
long runner_fds_needed(int runners);

/* ------------------------------------------------- CPUs (runner_cpu.c) */

/* Pins the calling thread (the transport's; Node's process inherits it) to
 * the first CPU it may use and tells every runner started after it to pin
 * itself to the second. 0, and why says where; a negative errno and why
 * says why not (one CPU: -ENODEV), nothing pinned. runner_pin_end restores
 * the thread's CPUs. */
int runner_pin_begin(char *why, size_t size);
void runner_pin_end(void);
/* The CPU pinned to: 0 the transport, 1 the runners; -1 when not pinned. */
int runner_pinned_cpu(int which);
/* In a runner, at its start: its CPU, if the transport named one, and
 * the ordinary scheduling class. */
void runner_child_pin(void);
/* LAB_RUNNER_FIFO=PRIO: the calling thread at SCHED_FIFO PRIO. 1 and why
 * says so; 0 when not asked for; a negative errno and why says why not.
 * runner_fifo_end restores the class. */
int runner_fifo_begin(char *why, size_t size);
void runner_fifo_end(void);

/* /proc/stat's ticks of the transport's CPU and the runners' (busy, steal,
 * all), or of the whole machine for both when not pinned. */
typedef struct runner_stat {
    unsigned long long t[2][3];
} runner_stat;
void runner_stat_read(runner_stat *s);
/* Sets out's busy_transport_pct, busy_runners_pct and steal_pct. */
void runner_stat_figures(const runner_stat *a, const runner_stat *b,
                         runner_result *out);

/* ------------------------------------------------------ the scale line */

/* Full runs: lull's transport against the floor at every size (the table
 * by sessions), the worst size's ratios, and the first size's p50 held to
 * the tighter bound the default size has (lab/runner_scale.c). A size
 * whose ratio is missing is a gap: the line cannot be met with one. */
typedef struct runner_scale {
    double q50, qcpu;  /* the largest lull ÷ floor over the sizes */
    double first_q50;  /* at the first size */
    double floor_move; /* the floor's p50 spread at the worst p50's size */
    int gaps;          /* sizes with a ratio missing */
} runner_scale;
#define RUNNER_SCALE_INIT                                                      \
    { NAN, NAN, NAN, NAN, 0 }

/* Size k's lull ÷ floor p50 and CPU per event, and the floor's p50
 * spread over that size's rounds. */
void runner_scale_note(runner_scale *w, int k, double q50, double qcpu,
                       double floor_move);
/* The verdict line "runner", part 2; first_n: the first size's sessions. */
void runner_scale_verdict(const runner_scale *w, int first_n);

#endif /* LAB_RUNNER_H */
