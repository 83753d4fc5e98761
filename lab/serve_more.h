/* The `serve` rows that follow its throughput and replication tables:
 * redis-benchmark's whole default suite (lab/serve_suite.c), and three
 * rows beside redis-server with one short table of their own
 * (lab/serve_beside.c runs them): a 64 MiB value (lab/serve_big.c), idle
 * with a million keys that expire (lab/serve_idle.c), a publisher with a
 * subscriber that never reads (lab/serve_pubsub.c). lab/serve.c calls
 * serve_suite and serve_beside; each prints its own short table and adds
 * its lines to the verdict (id "serve"). One thread, the scenario's, but
 * for the clients the pinned helper threads run (serve_run_pinned). */
#ifndef LAB_SERVE_MORE_H
#define LAB_SERVE_MORE_H

#include "serve.h"

#include <stdint.h>

/* The verdict's "serve" lines, in order: the suite's (it replaces the
 * throughput table's), the catch-up (part 1, serve_repl.c), then the 64
 * MiB value's and the idle row's, which share one line: the verdict has
 * 25 lines for every scenario. */
enum { SERVE_V_SUITE = 0, SERVE_V_BESIDE = 2 };

/* What the 64 MiB row and the idle row found, for their line. */
typedef struct serve_side {
    bool big_ran;        /* measured */
    double big_kv_ms;    /* lull-kv's SET + GET, median */
    double big_redis_ms; /* redis-server's */
    double big_x;        /* × (redis-server's time ÷ lull-kv's) */
    bool idle_ran;       /* measured */
    double idle_kv;      /* lull-kv's wakeups/s, the worst window */
    double idle_redis;   /* redis-server's, median */
    char why[160];       /* why a row did not run */
} serve_side;

/* Whether `serve --only NAME` runs the figure `name` (no --only: all). */
bool serve_wants(const lab_options *opts, const char *name);

/* The whole default suite at -P 1 and -P 16: its figures, its short
 * table, its verdict line. 0, or a negative errno when redis-benchmark
 * failed against a server that was running. */
int serve_suite(const lab_options *opts, lab_json *json);
/* The 64 MiB value, the idle row and the pub/sub row, their short table
 * and their verdict line. */
int serve_beside(const lab_options *opts, lab_json *json);
/* serve could not run (a tool missing): one "not run" verdict line for
 * each of the targets above, saying which tool. */
void serve_more_not_run(void);

int serve_bigvalue(const lab_options *opts, lab_json *json, lab_table *brief,
                   serve_side *side);
int serve_idle(const lab_options *opts, lab_json *json, lab_table *brief,
               serve_side *side);
int serve_pubsub(const lab_options *opts, lab_json *json, lab_table *brief);

/* ------------------------------------------- helpers (serve_beside.c) */

/* CPU time of every thread of pid in ns, from /proc/PID/task/TID/schedstat
 * (the time /proc/PID/stat's utime + stime count, to the ns rather than
 * in 10 ms ticks), else from stat's ticks. False when pid is gone. */
bool serve_cpu_ns(pid_t pid, uint64_t *ns);
/* A number from /proc/PID/status ("VmHWM", "VmRSS" in kB;
 * "voluntary_ctxt_switches"), or -1. */
long long serve_status_field(pid_t pid, const char *name);
/* Runs fn(arg) on a new thread pinned to cpu (-1: not pinned) and waits
 * for it: the clients of lull-lab's own run beside the server's CPU, as
 * redis-benchmark does. Returns what fn returned (an int cast to void *),
 * or a negative errno when the thread could not start. */
int serve_run_pinned(int cpu, void *(*fn)(void *), void *arg);
/* One request and its whole reply over a blocking connection: the text
 * of `INFO section`'s bulk reply into buf; 0 or -1. */
int serve_info(int fd, const char *section, char *buf, size_t size);
/* The short table's row: a figure, lull-kv's value, redis-server's, ×. */
void serve_brief_row(lab_table *t, const char *label, double kv, double redis,
                     double ratio);

#endif /* LAB_SERVE_MORE_H */
