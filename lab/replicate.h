/* What the `replicate` scenario's files share: the catch-up runs
 * (lab/replicate_run.c), the driver and its figures (lab/replicate.c), and
 * the write-cost and ping-pong sections (lab/replicate_write.c), which the
 * scenario prints after the catch-up tables. */
#ifndef LAB_REPLICATE_H
#define LAB_REPLICATE_H

#include "engine.h"

#include <lull.h>

#define US 1000ull
#define MS 1000000ull

enum {
    M_PER_RECORD,
    M_PER_RECORD_POST,
    M_BUDGET_SHARED,
    M_BUDGET_DEDICATED,
    MODES
};
extern const char *const rep_mode_key[MODES];   /* JSON */
extern const char *const rep_mode_label[MODES]; /* tables */

/* Skip variant: keep 1 record in this many. */
#define SKIP_KEEP 100

typedef struct params {
    int records;
    int txn;         /* records per transaction */
    int record_size; /* bytes, head included */
    int replicas[2];
    int rounds;
    bool tcp;
    uint64_t ping_ns;
    uint64_t progress_ns;
    uint64_t idle_ns; /* the idle baseline's length */
} params;

typedef struct log_store {
    unsigned char *bytes;
    int records;
    int size;
    int kept; /* records the skip filter keeps */
} log_store;

/* Figures of one run. */
typedef struct result {
    double cpu_s;
    double cpu_per_entry_us;
    double rate;
    double total_s;
    double ping_p50, ping_p99, ping_max;
    double late_p99;
    double writes_per_record;
    double bytes_per_writev;
    double preemptions; /* of the source thread during the catch-up */
    uint64_t pings;
    uint64_t entries;
    uint64_t received; /* records the replicas received and checked */
    int bad;
    char why[160]; /* the first replica found wrong, when bad */
} result;

/* The scenario's sizes: --quick, --rounds, --tcp. */
void rep_set_params(const lab_options *opts, params *p);
/* The log the source catches its replicas up from (free log->bytes). */
int rep_log_make(log_store *l, const params *p);
/* One catch-up: a source loop, `replicas` replicas (0: the pinger alone,
 * the source idle), one mode, the skip filter or not. serial names its
 * sockets apart from every other run's. */
int rep_run_once(const params *p, const log_store *log, int mode, int replicas,
                 bool skip, int serial, result *out);

/* 500-byte records written to a Unix socket whose other end a reader
 * thread drains: CPU per record of the writing thread, per way of writing.
 * Prints its table; writes "write_cost" into json when not NULL; its
 * figure goes to *out (the caller frees it) when out is not NULL. */
int replicate_write_cost(const lab_options *opts, lab_json *json,
                         int record_size, lab_fig **out);

/* 64-byte ping-pong over a Unix socketpair, both threads pinned to one CPU:
 * blocking read/write (the floor) against two lull loops with streams.
 * Prints its table; writes "pingpong" into json when not NULL; its figure
 * goes to *out as above. */
int replicate_pingpong(const lab_options *opts, lab_json *json, lab_fig **out);

#endif
