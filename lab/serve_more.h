/* The `serve` rows that follow its throughput and replication tables:
 * redis-benchmark's whole default suite (lab/serve_suite.c), and three
 * rows beside redis-server with one short table of their own
 * (lab/serve_beside.c runs them): a 64 MiB value (lab/serve_big.c), idle
 * with a million keys that expire (lab/serve_idle.c), a publisher with a
 * subscriber that never reads (lab/serve_pubsub.c); in a full run, the
 * TLS rows (lab/serve_tls.c). lab/serve.c calls serve_suite,
 * serve_beside and serve_tls; each prints its own short table and adds
 * its lines to the verdict (id "serve"). One thread, the scenario's, but
 * for the clients the pinned helper threads run (serve_run_pinned). */
#ifndef LAB_SERVE_MORE_H
#define LAB_SERVE_MORE_H

#include "serve.h"

#include <stdint.h>

/* The verdict's "serve" lines, in order: the suite's (it replaces the
 * throughput table's), the catch-up (part 1, serve_repl.c), then the 64
 * MiB value's and the idle row's, which share one line: the verdict has
 * 25 lines for every scenario. The TLS rows' line (a full run's only)
 * comes last. */
enum { SERVE_V_SUITE = 0, SERVE_V_BESIDE = 2, SERVE_V_TLS = 3 };

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
/* The TLS rows (lab/serve_tls.c): a full run's only. Prints its short
 * table and adds its verdict line; without TLS somewhere, one line. */
int serve_tls(const lab_options *opts, lab_json *json);

#endif /* LAB_SERVE_MORE_H */
