/* What the `serve` scenario's files share: its tables of servers, tests
 * and depths, its parameters, the processes it starts (lab/serve_proc.c:
 * children, tools, a blocking client, the servers), the replication rows
 * (lab/serve_repl.c) and the soak's lull-kv (lab/serve_soak.c). The driver
 * is lab/serve.c. */
#ifndef LAB_SERVE_H
#define LAB_SERVE_H

#include "engine.h"

#include <stdbool.h>
#include <sys/types.h>

#define MS 1000000ull

enum { S_KV, S_REDIS, SERVERS };
extern const char *const server_name[SERVERS];
extern const char *const server_key[SERVERS];

enum { T_PING, T_SET, T_GET, TESTS };
extern const char *const test_csv[TESTS];
extern const char *const test_key[TESTS];

#define DEPTHS 2
extern const int depth[DEPTHS];

/* The catch-up rows: lull-kv's forked snapshot, lull-kv's log replayed
 * by the loop's budget sender, redis-server; the TLS two in a full run
 * only. */
enum { R_KV_SNAPSHOT, R_KV_BUDGET, R_REDIS, R_KV_TLS, R_REDIS_TLS, REPL_ROWS };

/* The floor table's title, one for each source of its system-call count
 * (lab/serve_floor.c): `lull-lab titles` lists both, so the width test
 * sees each whatever the machine exposes. */
#define SERVE_FLOOR_TITLE_KERNEL                                               \
    "floors: plain C servers, no lull; [system calls], the kernel's count; "   \
    "ratios round by round"
#define SERVE_FLOOR_TITLE_OWN                                                  \
    "floors: plain C servers, no lull; [system calls], the server's own "      \
    "count; ratios round by round"
#define SERVE_SUITE_TITLE                                                      \
    "redis-benchmark's default suite, 50 clients: lull-kv's CPU µs/req; × "  \
    "and floor ×: vs redis-server"

/* lull-kv's default quantum (a shared loop's, contract C5); the budget-mode
 * target is this plus 1 ms. */
#define KV_QUANTUM_MS 0.5

typedef struct params {
    int rounds;
    int requests[DEPTHS]; /* -n per test at each depth */
    int clients;
    int keys; /* written before a replica catches up */
    int value_size;
    int repl_rounds;
    int ping_clients;
    int keyspace; /* the second throughput table's -r (and -d value_size) */
} params;
/* ----------------------------------------------- processes (serve_proc.c) */

/* Every process this scenario started and has not reaped yet. */
#define MAX_CHILDREN 8
extern volatile pid_t serve_children[MAX_CHILDREN];
/* The two CPUs the servers and the clients are pinned to (-1: not
 * pinned, when this process may run on one CPU only). */
extern int serve_cpu_server, serve_cpu_client;
extern char serve_kv_path[512], serve_redis_path[512], serve_bench_path[512];
/* --kv PATH, else the lull-kv built beside lull-lab. */
extern const char *serve_kv_option;

void serve_kill_all_children(void);
/* On: SIGINT/SIGTERM/SIGHUP kill the children, then re-raise. */
void serve_guard_children(bool on);
void serve_choose_cpus(void);
/* Starts args, its stdout and stderr on out_fd (-1: /dev/null), pinned to
 * cpu (-1: not pinned). Returns its pid, or a negative errno. */
pid_t serve_spawn(char *const *args, int out_fd, int cpu);
/* Reaps pid if it has exited; true when it has (or is unknown). */
bool serve_exited(pid_t pid);
void serve_stop(pid_t pid);
void serve_sleep_ms(int ms);
int serve_temp_output(void);
void serve_first_line(int fd, char *buf, size_t size);
/* A redis-benchmark run (args[0] is serve_bench_path) through
 * serve_run_capture, its silence bounded by the sizes
 * (serve_bench_sizes): -ETIMEDOUT, with a line, for the first that hangs
 * and for every run after it. */
void serve_bench_sizes(bool quick);
/* For a run of its own (the suite's, on a terminal): the silence allowed
 * (0 once one run hung: start none), and the call that says it hung. */
int serve_bench_silence_ms(void);
void serve_bench_hung(void);
int serve_bench_run(char *const *args, char *buf, size_t size, int cpu,
                    double *cpu_s);
/* The last line a child wrote to fd: its reason, when it exited. */
void serve_last_line(int fd, char *buf, size_t size);
/* A running process's CPU time so far and its voluntary switches. */
bool serve_proc_cpu(pid_t pid, double *cpu_s, long *sleeps);
/* Runs args to the end with stdout captured into buf; its CPU time into
 * *cpu_s (may be NULL). */
int serve_run_capture(char *const *args, char *buf, size_t size, int timeout_ms,
                      int cpu, double *cpu_s);
bool serve_kv_available(char *why, size_t size);
bool serve_redis_available(char *why, size_t size);
bool serve_bench_available(char *why, size_t size);
const char *serve_get_redis_version(void);
const char *serve_get_bench_version(void);

/* A blocking connection to 127.0.0.1:port with 30 s timeouts, or -1. */
int serve_client_connect(int port);
int serve_send_all(int fd, const char *p, size_t n);
int serve_recv_exact(int fd, char *p, size_t n);
int serve_info_replication(int fd, char *buf, size_t size);
long long serve_info_number(const char *text, const char *name);
bool serve_info_has(const char *text, const char *line);
/* Writes keys "key:%08d" with value_size-byte values. 0 or -1. */
int serve_load_keys(int port, int keys, int value_size);

typedef struct server {
    pid_t pid;
    int port;
    int out_fd;    /* its stdout and stderr */
    char dir[64];  /* redis-server's working directory, or "" */
    char why[160]; /* why it did not start */
} server;

void serve_server_stop(server *s);
/* Waits up to 10 s for s to answer PING (read_port: first reads its port
 * from its "listening on 127.0.0.1:PORT" line); false with s->why set. */
bool serve_server_ready(server *s, bool read_port);
/* lull-kv on a port of its choosing, with extra arguments (NULL-ended). */
bool serve_start_kv(server *s, const char *const *extra, int cpu);
/* redis-server, persistence off, one I/O thread; replica_of > 0 makes it
 * a replica of 127.0.0.1:replica_of; spawn does not wait for it. */
/* bgsave_cpu >= 0 pins the child it forks to write a snapshot (for a
 * replica: fork + RDB) to that CPU (bgsave_cpulist), not to its own. */
bool serve_spawn_redis(server *s, int replica_of, int cpu, int bgsave_cpu);
bool serve_start_redis(server *s, int replica_of, int cpu, int bgsave_cpu);
/* The two above with more arguments (NULL-ended; the TLS options). */
bool serve_spawn_redis_with(server *s, int replica_of, int cpu, int bgsave_cpu,
                            const char *const *extra);
bool serve_start_redis_with(server *s, int replica_of, int cpu, int bgsave_cpu,
                            const char *const *extra);
/* A port the kernel just handed out on 127.0.0.1 (free a moment ago). */
int serve_free_port(void);
/* The program `name` on PATH: its path into out. */
bool serve_on_path(const char *name, char *out, size_t size);
/* redis-benchmark's --csv: requests/s, p50 and p99 (ms) of each of the
 * tests (test_csv); returns how many were found (lab/serve.c). */
int serve_parse_csv(const char *text, double rps[TESTS], double p50[TESTS],
                    double p99[TESTS]);

/* The rows' helpers (serve_proc.c): */

/* Whether `serve --only NAME` runs the figure `name` (no --only: all). */
bool serve_wants(const lab_options *opts, const char *name);

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

/* --------------------------------------------- floors (serve_floor.c) */

/* The floor rows: servers with no loop library beside lull-kv and
 * redis-server, their CPU and system calls per request; adds its verdict
 * line and prints its short table. */
int serve_floors(const lab_options *opts, lab_json *json);
/* The epoll floor server (lab/floor/epoll.c) on a port of its choosing,
 * its CPU pinned as serve_start_kv's; false with s->why set when it is
 * not built or does not start. */
bool serve_start_epoll_floor(server *s, int cpu);

/* ------------------------------------------------ TLS (serve_tls.c) */

/* A throwaway certificate for the TLS rows: an ECDSA P-256 key and a
 * self-signed certificate for 127.0.0.1 (its own CA), made by openssl in
 * a temporary directory. */
typedef struct serve_tls_files {
    char dir[64];  /* the directory; "" once removed */
    char cert[96]; /* dir/cert.pem: the certificate, and the CA */
    char key[96];  /* dir/key.pem */
    char why[160]; /* why it could not be made */
} serve_tls_files;

bool serve_tls_make(serve_tls_files *t);
void serve_tls_remove(serve_tls_files *t);

/* ------------------------------------------ replication (serve_repl.c) */

/* The replication rows: a primary with p->keys keys, a replica catching
 * up while redis-benchmark pings the primary. Prints its table and adds
 * its line to the short table `brief` (when that has its header). */
int serve_replication(const lab_options *opts, const params *p, lab_json *json,
                      lab_table *brief);

#endif /* LAB_SERVE_H */
