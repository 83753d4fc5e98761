/* The `serve` scenario's floors (lab/serve.h): what a request costs a
 * server that does nothing but answer it, beside lull-kv and redis-server
 * under the same load. `lull-lab serve --only floors` runs them alone.
 *
 * Rows: the epoll floor and the io_uring floor (lab/floor/floor.h: plain
 * C, no lull, lull-kv's batching; the io_uring one only where liburing was
 * found), lull-kv and redis-server, all four started once, pinned to the
 * servers' CPU. Loads: `redis-benchmark -t ping_mbulk,get -c C -P D --csv`
 * at C = 50 and 300 clients (--quick: 50), D = 1 and 16, one of the
 * engine's figures each; per round every figure runs each row once, the
 * row that goes first rotating. GET reads one key holding "xxx" (set
 * first in lull-kv and redis-server; the floors answer it whatever the
 * key), as redis-benchmark's SET would have left it.
 *
 * Columns, per request over both tests:
 *   server CPU: /proc/PID/stat utime + stime (every thread, the exited
 *     ones included), before and after the run;
 *   system calls, the server's own count: the floors' counters (INFO);
 *     lull-kv's from the library's metrics (INFO stats: lull_stream reads
 *     that returned data and writes, and lull_metrics.polls);
 *     redis-server's INFO stats total_reads_processed and
 *     total_writes_processed (its reads and writes; no epoll_wait);
 *   system calls, the kernel's count: every system call of every thread
 *     of the server (perf_event_open on the tracepoint
 *     raw_syscalls:sys_enter, counting), in a pass of its own after the
 *     measured rounds, whose times and rates are not kept: while such a
 *     counter exists every system call on the machine takes the kernel's
 *     slow path (about 400 ns more each on this project's 2-CPU guest).
 *     That pass also takes the own counts, so the two can be compared on
 *     the same runs.
 *
 * Then: lull-kv's CPU per request ÷ the epoll floor's (the verdict: ≤
 * 1.1), and the io_uring floor's ÷ the epoll floor's (an io_uring backend
 * pays where that is ≤ 0.8 at some load). One thread. */
#include "serve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { F_EPOLL, F_URING, F_KV, F_REDIS, FLOOR_ROWS };

static const char *const row_label[FLOOR_ROWS] = {
    "epoll floor", "io_uring floor", "lull-kv", "redis-server"};
static const char *const row_peer[FLOOR_ROWS] = {"floor", "floor", "lull",
                                                 "redis-server"};

enum {
    FV_PING_RPS,
    FV_GET_RPS,
    FV_SERVER_US,   /* the server's CPU µs per request */
    FV_SYS_OWN,     /* system calls per request: the server's own count */
    FV_SYS_KERNEL,  /* ... the kernel's (the counting pass) */
    FV_SYS_OWN_K,   /* ... the own count in the counting pass */
    FV_CLIENT_BUSY, /* redis-benchmark's CPU ÷ its run's time */
    FV_COUNT
};

static const lab_col fcols[FV_COUNT] = {
    {"ping_mbulk_rps", "ping req/s", LAB_COL_RATE},
    {"get_rps", "get req/s", LAB_COL_RATE},
    {"server_cpu_us_per_req", "server CPU µs/req", 0},
    {"syscalls_per_req", "syscalls/req, own", 0},
    {"syscalls_per_req_kernel", "syscalls/req, kernel", 0},
    {"syscalls_per_req_own_same_pass", "own, same pass", 0},
    {"client_busy", "client busy", 0},
};

#define CLIENT_COUNTS 2
static const int client_count[CLIENT_COUNTS] = {50, 300};
#define CONFIGS (CLIENT_COUNTS * DEPTHS)

/* An io_uring floor at most this fraction of the epoll floor's CPU per
 * request, at some load, says an io_uring backend is worth building. */
#define URING_PAYS 0.8
/* lull-kv's target: at most this many times the epoll floor's CPU. */
#define KV_TARGET 1.1

typedef struct fparams {
    int rounds;
    int requests[DEPTHS]; /* -n per test at each depth */
    int nclients;         /* client_count[0 .. nclients) */
} fparams;

typedef struct fctx {
    const fparams *p;
    int clients;   /* -c */
    int d;         /* the depth's index */
    server *srv;   /* [FLOOR_ROWS] */
    bool counting; /* the counting pass */
} fctx;

/* Why a row is not run ("" when it is). */
static char not_run[FLOOR_ROWS][160];

/* ------------------------------------------------- the kernel's count */

static int tp_id = -1;   /* raw_syscalls:sys_enter, or -1 */
static char tp_why[160]; /* why the kernel's count is not taken */

static long perf_open(struct perf_event_attr *a, pid_t tid) {
    return syscall(SYS_perf_event_open, a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static struct perf_event_attr tp_attr(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_TRACEPOINT;
    a.size = sizeof a;
    a.config = (unsigned long long)tp_id;
    return a;
}

/* Finds the tracepoint and checks that a counter on it opens here (root,
 * or perf_event_paranoid -1). */
static void tracepoint_probe(void) {
    static const char *const paths[] = {
        "/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
        "/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id"};
    tp_id = -1;
    /* LULL_LAB_NO_TRACEFS takes the path of a machine without tracefs,
     * so it can be tried on one that has it. */
    if (getenv("LULL_LAB_NO_TRACEFS")) {
        snprintf(tp_why, sizeof tp_why, "LULL_LAB_NO_TRACEFS is set");
        return;
    }
    for (size_t i = 0; i < sizeof paths / sizeof paths[0] && tp_id < 0; i++) {
        FILE *f = fopen(paths[i], "re");
        if (!f) continue;
        if (fscanf(f, "%d", &tp_id) != 1) tp_id = -1;
        fclose(f);
    }
    if (tp_id < 0) {
        snprintf(tp_why, sizeof tp_why, "tracefs not readable");
        return;
    }
    struct perf_event_attr a = tp_attr();
    long fd = perf_open(&a, 0);
    if (fd < 0) {
        snprintf(tp_why, sizeof tp_why, "perf_event_open: %s", strerror(errno));
        tp_id = -1;
        return;
    }
    close((int)fd);
}

#define MAX_TASKS 64
typedef struct syscount {
    int fd[MAX_TASKS];
    int n;
} syscount;

static void count_close(syscount *sc) {
    for (int i = 0; i < sc->n; i++)
        close(sc->fd[i]);
    sc->n = 0;
}

/* A counter on each thread of pid. */
static bool count_start(syscount *sc, pid_t pid) {
    sc->n = 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return false;
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        struct perf_event_attr a = tp_attr();
        long fd = sc->n < MAX_TASKS ? perf_open(&a, atoi(e->d_name)) : -1;
        if (fd < 0)
            ok = false;
        else
            sc->fd[sc->n++] = (int)fd;
    }
    closedir(d);
    if (!ok) count_close(sc);
    return ok;
}

static double count_stop(syscount *sc) {
    double total = 0;
    for (int i = 0; i < sc->n; i++) {
        uint64_t v = 0;
        if (read(sc->fd[i], &v, sizeof v) != (ssize_t)sizeof v) total = NAN;
        total += (double)v;
    }
    count_close(sc);
    return total;
}

/* ----------------------------------------------------- the own count */

/* `INFO section` over a fresh connection, its text into buf; 0 or -1. */
static int info_text(int port, const char *section, char *buf, size_t size) {
    int fd = serve_client_connect(port);
    if (fd < 0) return -1;
    char req[64];
    int n = snprintf(req, sizeof req, "*2\r\n$4\r\nINFO\r\n$%zu\r\n%s\r\n",
                     strlen(section), section);
    char head[32];
    size_t h = 0;
    int rc = serve_send_all(fd, req, (size_t)n);
    while (rc == 0 && h < sizeof head - 1) { /* "$<len>\r\n" */
        rc = serve_recv_exact(fd, head + h, 1);
        if (rc == 0 && head[h++] == '\n') break;
    }
    head[h] = '\0';
    long len = rc == 0 && head[0] == '$' ? strtol(head + 1, NULL, 10) : -1;
    if (len < 0 || (size_t)len + 2 > size ||
        serve_recv_exact(fd, buf, (size_t)len + 2) < 0)
        rc = -1;
    else
        buf[len] = '\0';
    close(fd);
    return rc;
}

/* The system calls a server has counted itself so far (see the top of
 * this file), or NaN. */
static double own_count(int row, int port) {
    char text[4096];
    if (info_text(port, "stats", text, sizeof text) < 0) return NAN;
    if (row == F_EPOLL || row == F_URING) {
        long long n = serve_info_number(text, "syscalls");
        return n < 0 ? NAN : (double)n;
    }
    long long r = serve_info_number(text, "total_reads_processed"),
              w = serve_info_number(text, "total_writes_processed"),
              polls = row == F_KV ? serve_info_number(text, "loop_polls") : 0;
    if (r < 0 || w < 0 || polls < 0) return NAN;
    return (double)(r + w + polls);
}

/* --------------------------------------------------------- measuring */

/* redis-benchmark's --csv: requests/s of PING_MBULK and GET. */
static bool parse_rps(const char *text, double *ping, double *get) {
    int col = -1;
    *ping = *get = NAN;
    for (const char *l = text; l && *l;
         l = strchr(l, '\n'), l = l ? l + 1 : l) {
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(l, "\n"), l);
        char *cells[16];
        int nc = 0;
        for (char *save = NULL, *c = strtok_r(line, ",\r", &save); c && nc < 16;
             c = strtok_r(NULL, ",\r", &save)) {
            if (*c == '"') c++;
            c[strcspn(c, "\"")] = '\0';
            cells[nc++] = c;
        }
        if (nc == 0) continue;
        if (strcmp(cells[0], "test") == 0) {
            for (int i = 1; i < nc; i++)
                if (strcmp(cells[i], "rps") == 0) col = i;
        } else if (col > 0 && col < nc) {
            if (strcmp(cells[0], "PING_MBULK") == 0)
                *ping = strtod(cells[col], NULL);
            if (strcmp(cells[0], "GET") == 0) *get = strtod(cells[col], NULL);
        }
    }
    return isfinite(*ping) && isfinite(*get);
}

/* One redis-benchmark run against row's server. */
static int bench(const server *s, int requests, int clients, int pipeline,
                 char *out, size_t size, double *client_s) {
    char p[16], n[16], c[16], P[16];
    snprintf(p, sizeof p, "%d", s->port);
    snprintf(n, sizeof n, "%d", requests);
    snprintf(c, sizeof c, "%d", clients);
    snprintf(P, sizeof P, "%d", pipeline);
    char *args[] = {serve_bench_path,
                    "-h",
                    "127.0.0.1",
                    "-p",
                    p,
                    "-t",
                    "ping_mbulk,get",
                    "-n",
                    n,
                    "-c",
                    c,
                    "-P",
                    P,
                    "--csv",
                    NULL};
    return serve_bench_run(args, out, size, serve_cpu_client, client_s);
}

static int measure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    const fctx *c = fig->ctx;
    int r = (int)row->tag;
    if (not_run[r][0]) return LAB_SKIPPED;
    const server *s = &c->srv[r];
    int n = c->p->requests[c->d];
    double own0 = own_count(r, s->port);
    syscount sc = {.n = 0};
    bool counted = c->counting && tp_id >= 0 && count_start(&sc, s->pid);
    double cpu0, cpu1, client_s;
    long sleeps;
    bool known = serve_proc_cpu(s->pid, &cpu0, &sleeps);
    uint64_t t0 = lab_now_ns();
    static char buf[4096];
    int rc = bench(s, n, c->clients, depth[c->d], buf, sizeof buf, &client_s);
    double wall = (double)(lab_now_ns() - t0) / 1e9;
    known = known && serve_proc_cpu(s->pid, &cpu1, &sleeps);
    double kernel = counted ? count_stop(&sc) : NAN;
    if (rc < 0) {
        printf("redis-benchmark against %s failed: %s\n", row_label[r],
               strerror(-rc));
        return rc;
    }
    double own1 = own_count(r, s->port), ping, get;
    if (!parse_rps(buf, &ping, &get)) return -EPROTO;
    double total = 2.0 * n;
    if (c->counting) { /* times and rates of this pass are not kept */
        v[FV_SYS_KERNEL] = kernel / total;
        v[FV_SYS_OWN_K] = (own1 - own0) / total;
        return 0;
    }
    v[FV_PING_RPS] = ping;
    v[FV_GET_RPS] = get;
    if (known) v[FV_SERVER_US] = (cpu1 - cpu0) * 1e6 / total;
    v[FV_SYS_OWN] = (own1 - own0) / total;
    v[FV_CLIENT_BUSY] = client_s / wall;
    return 0;
}

/* Cells of a row that is not run say so. */
static bool cell(const lab_fig *f, const lab_row *row, int col, char *buf,
                 size_t size) {
    (void)f;
    if (!not_run[row->tag][0]) return false;
    snprintf(buf, size, "%s", col == 0 ? "not run" : "");
    return true;
}

static void fig_json(const lab_fig *f, const lab_row *row, lab_json *j) {
    const fctx *c = f->ctx;
    if (!row) {
        lab_json_field(j, "clients", c->clients);
        lab_json_field(j, "pipeline", depth[c->d]);
        lab_json_field(j, "requests_per_test", c->p->requests[c->d]);
        return;
    }
    if (not_run[row->tag][0]) {
        lab_json_key(j, "not_run");
        lab_json_string(j, not_run[row->tag]);
    }
}

/* ----------------------------------------------------------- servers */

static bool start_floor(server *s, const char *path, int cpu) {
    memset(s, 0, sizeof *s);
    s->out_fd = serve_temp_output();
    char *args[] = {(char *)path, "--port", "0", NULL};
    s->pid = serve_spawn(args, s->out_fd, cpu);
    if (s->pid < 0) {
        snprintf(s->why, sizeof s->why, "cannot start: %s", strerror(-s->pid));
        s->pid = 0;
        return false;
    }
    if (serve_server_ready(s, true)) return true;
    serve_server_stop(s);
    return false;
}

/* The key GET reads, as redis-benchmark's SET leaves it. */
static bool preload(const server *s) {
    static const char set[] = "*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__"
                              "\r\n$3\r\nxxx\r\n";
    int fd = serve_client_connect(s->port);
    if (fd < 0) return false;
    char reply[5];
    bool ok = serve_send_all(fd, set, sizeof set - 1) == 0 &&
              serve_recv_exact(fd, reply, 5) == 0 &&
              memcmp(reply, "+OK\r\n", 5) == 0;
    close(fd);
    return ok;
}

/* The floors' programs built beside lull-lab; not_run says why not. */
static const char *floor_path(int r) {
    const char *path = NULL;
    static char installed[2][4096];
#ifdef LAB_FLOOR_EPOLL_PATH
    if (r == F_EPOLL)
        path = lab_installed_path("libexec/lull/lull-floor-epoll",
                                  LAB_FLOOR_EPOLL_PATH, installed[0],
                                  sizeof installed[0]);
#endif
#ifdef LAB_FLOOR_URING_PATH
    if (r == F_URING)
        path = lab_installed_path("libexec/lull/lull-floor-uring",
                                  LAB_FLOOR_URING_PATH, installed[1],
                                  sizeof installed[1]);
#endif
    if (!path)
        snprintf(not_run[r], sizeof not_run[r], "%s",
                 r == F_URING ? "liburing-dev not found" : "not built");
    else if (access(path, X_OK) != 0)
        snprintf(not_run[r], sizeof not_run[r], "%s not found", path);
    return not_run[r][0] ? NULL : path;
}

bool serve_start_epoll_floor(server *s, int cpu) {
    not_run[F_EPOLL][0] = '\0';
    const char *path = floor_path(F_EPOLL);
    if (path) return start_floor(s, path, cpu);
    *s = (server){.out_fd = -1};
    snprintf(s->why, sizeof s->why, "%s", not_run[F_EPOLL]);
    return false;
}

/* Starts every row's server; a row whose server does not start is not
 * run (lull-kv's or redis-server's failing fails the figure). */
static int start_all(server *srv) {
    for (int r = 0; r < FLOOR_ROWS; r++) {
        not_run[r][0] = '\0';
        srv[r] = (server){.out_fd = -1};
    }
    for (int r = F_EPOLL; r <= F_URING; r++) {
        const char *path = floor_path(r);
        /* The bound spelled out: without it gcc 12, seeing a row whose
         * floor is not built (no liburing), takes srv[r].why for the
         * rest of the array and fails the build on a truncation. */
        if (path && !start_floor(&srv[r], path, serve_cpu_server))
            snprintf(not_run[r], sizeof not_run[r], "%.*s",
                     (int)sizeof not_run[r] - 1, srv[r].why);
    }
    if (!serve_start_kv(&srv[F_KV], NULL, serve_cpu_server)) {
        printf("lull-kv: %s\n", srv[F_KV].why);
        return -EIO;
    }
    if (!serve_start_redis(&srv[F_REDIS], 0, serve_cpu_server, -1)) {
        printf("redis-server: %s\n", srv[F_REDIS].why);
        return -EIO;
    }
    for (int r = 0; r < FLOOR_ROWS; r++)
        if (!not_run[r][0] && !preload(&srv[r])) {
            printf("%s: SET key:__rand_int__ failed\n", row_label[r]);
            return -EPROTO;
        }
    return 0;
}

static void stop_all(server *srv) {
    for (int r = 0; r < FLOOR_ROWS; r++)
        if (srv[r].pid > 0) serve_server_stop(&srv[r]);
}

/* -------------------------------------------------------------- output */

static double med(const lab_fig *f, int r, int col) {
    return lab_row_median(&f->rows[r], col);
}

/* What each column is, and how each server's system calls were counted. */
static void legend(const fparams *p, const char *uring_line) {
    lab_detail(
        "\nfloors: servers in plain C with lull-kv's batching (one read of up "
        "to 64 KiB per readable connection, one send of its replies), on "
        "epoll and on io_uring (%s), beside lull-kv and redis-server; "
        "redis-benchmark -t ping_mbulk,get -c C -P D --csv, -n %d at -P 1 "
        "and %d at -P 16; %d rounds, the row that goes first rotating; "
        "median [min–max]\n",
        uring_line, p->requests[0], p->requests[1], p->rounds);
    lab_detail("  server CPU: /proc/PID/stat utime+stime per request (ping "
               "and get together); client busy: redis-benchmark's CPU ÷ its "
               "run's time\n");
    lab_detail("  syscalls/req, own: the floors' own counters; lull-kv's "
               "library metrics (INFO stats: stream reads with data + "
               "writes + loop polls); redis-server's INFO stats reads + "
               "writes (no epoll_wait)\n");
    if (tp_id >= 0)
        lab_detail("  syscalls/req, kernel: every system call of the "
                   "server's threads (perf tracepoint raw_syscalls:sys_enter, "
                   "counting), in one more run of each row whose times are "
                   "not kept (the counter slows every system call); 'own, "
                   "same pass' is the own count on that run\n");
    else
        lab_detail("  syscalls/req, kernel: not measured (%s)\n", tp_why);
}

/* Row a's CPU per request ÷ row b's, round by round (the two ran in the
 * same round, a few seconds apart, so what the machine did between
 * rounds drops out): their median [min–max] is the figure's ratio. */
static lab_series paired(const lab_fig *f, int a, int b) {
    return lab_series_ratios(&f->rows[a].v[FV_SERVER_US],
                             &f->rows[b].v[FV_SERVER_US]);
}

static double paired_median(const lab_fig *f, int a, int b) {
    return lab_series_ratio_median(&f->rows[a].v[FV_SERVER_US],
                                   &f->rows[b].v[FV_SERVER_US]);
}

/* "0.94 [0.85–1.02]", or "–". */
static void ratio_cell(lab_table *t, int row, int col, const lab_series *s) {
    char m[LAB_CELL], lo[LAB_CELL], hi[LAB_CELL];
    if (s->n == 0) {
        lab_table_set(t, row, col, "–");
        return;
    }
    lab_table_set(t, row, col, "%s [%s–%s]", lab_fmt3(m, lab_series_median(s)),
                  lab_fmt3(lo, lab_series_min(s)),
                  lab_fmt3(hi, lab_series_max(s)));
}

/* The short table: a column per load; a row per server, its CPU per
 * request [system calls per request, the kernel's count where taken];
 * then the two ratios, paired round by round. */
static void brief(lab_fig *const f[CONFIGS], int nconf) {
    const char *header[1 + CONFIGS] = {"CPU µs/req [syscalls/req]"};
    char heads[CONFIGS][32];
    for (int k = 0; k < nconf; k++) {
        const fctx *c = f[k]->ctx;
        snprintf(heads[k], sizeof heads[k], "%d clients -P %d", c->clients,
                 depth[c->d]);
        header[1 + k] = heads[k];
    }
    lab_table t;
    lab_table_init(&t, 1 + nconf, header);
    for (int r = 0; r < FLOOR_ROWS; r++) {
        /* A floor not built here: the decision line below says why. */
        if (not_run[r][0] && r == F_URING) continue;
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", row_label[r]);
        for (int k = 0; k < nconf; k++) {
            char a[LAB_CELL], b[LAB_CELL];
            if (not_run[r][0]) {
                lab_table_set(&t, row, 1 + k, "not run");
                continue;
            }
            double sys = med(f[k], r, FV_SYS_KERNEL);
            if (!isfinite(sys)) sys = med(f[k], r, FV_SYS_OWN);
            lab_table_set(&t, row, 1 + k, "%s [%s]",
                          lab_fmt3(a, med(f[k], r, FV_SERVER_US)),
                          lab_fmt3(b, sys));
        }
    }
    static const struct {
        int a, b;
        const char *label;
    } ratios[] = {{F_KV, F_EPOLL, "lull-kv ÷ epoll floor [min–max]"},
                  {F_URING, F_EPOLL, "io_uring ÷ epoll floor [min–max]"}};
    for (int i = 0; i < 2; i++) {
        /* io_uring's: the decision line under the table. */
        if (not_run[ratios[i].a][0] || (i == 1 && !lab_verbose)) continue;
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", ratios[i].label);
        for (int k = 0; k < nconf; k++) {
            lab_series s = paired(f[k], ratios[i].a, ratios[i].b);
            ratio_cell(&t, row, 1 + k, &s);
        }
    }
    /* The short output's title says what a floor is (lab/serve.c). */
    lab_table_brief(&t, !lab_verbose ? NULL
                        : tp_id >= 0 ? SERVE_FLOOR_TITLE_KERNEL
                                     : SERVE_FLOOR_TITLE_OWN);
}

/* The io_uring decision: the backend pays if its floor costs at most
 * URING_PAYS of the epoll floor's CPU per request at some load (the
 * median of the ratios round by round). */
static bool decide(lab_fig *const f[CONFIGS], int nconf, lab_json *json) {
    double best = INFINITY;
    int at = -1;
    for (int k = 0; k < nconf; k++) {
        double x = paired_median(f[k], F_URING, F_EPOLL);
        if (isfinite(x) && x < best) best = x, at = k;
    }
    bool pays = at >= 0 && best <= URING_PAYS;
    if (at < 0) {
        printf("  io_uring backend: not decided (io_uring floor: %s)\n",
               not_run[F_URING][0] ? not_run[F_URING] : "not measured");
    } else {
        const fctx *c = f[at]->ctx;
        char x[LAB_CELL];
        /* Plain words: "a backend pays" named lull's own layer
         * (src/backend.h), a word the demo's reader has not met. */
        printf("  io_uring ÷ epoll floor at best %s (%d clients -P %d); "
               "lull %s io_uring at ≤ %.1f\n",
               lab_fmt3(x, best), c->clients, depth[c->d],
               pays ? "should use" : "would use", URING_PAYS);
    }
    if (json) {
        lab_json_key(json, "io_uring_decision");
        lab_json_begin_object(json);
        lab_json_field(json, "threshold", URING_PAYS);
        lab_json_key(json, "uring_over_epoll_cpu");
        lab_json_begin_array(json);
        for (int k = 0; k < nconf; k++) {
            lab_series s = paired(f[k], F_URING, F_EPOLL);
            lab_json_begin_object(json);
            lab_json_field(json, "clients", ((const fctx *)f[k]->ctx)->clients);
            lab_json_field(json, "pipeline",
                           depth[((const fctx *)f[k]->ctx)->d]);
            if (s.n) lab_json_series(json, "paired", &s);
            lab_json_end_object(json);
        }
        lab_json_end_array(json);
        lab_json_key(json, "pays");
        lab_json_bool(json, pays);
        if (not_run[F_URING][0]) {
            lab_json_key(json, "not_run");
            lab_json_string(json, not_run[F_URING]);
        }
        lab_json_end_object(json);
    }
    return pays;
}

/* lull-kv's CPU per request ≤ KV_TARGET × the epoll floor's at every
 * load (the median of the ratios round by round); redis-server's for
 * comparison. */
static void verdict(lab_fig *const f[CONFIGS], int nconf) {
    lab_verdict *v = lab_verdict_add("serve", 2);
    if (!v) return;
    double lo = INFINITY, hi = -INFINITY, rlo = INFINITY, rhi = -INFINITY,
           spread = NAN;
    for (int k = 0; k < nconf; k++) {
        double x = paired_median(f[k], F_KV, F_EPOLL);
        double y = paired_median(f[k], F_REDIS, F_EPOLL);
        if (!isfinite(x)) continue;
        lo = fmin(lo, x);
        hi = fmax(hi, x);
        if (isfinite(y)) rlo = fmin(rlo, y), rhi = fmax(rhi, y);
        double s = lab_row_spread(&f[k]->rows[F_EPOLL], FV_SERVER_US);
        if (isfinite(s) && !(s <= spread)) spread = s;
    }
    if (!isfinite(hi)) {
        snprintf(v->what, sizeof v->what, "CPU/req ÷ epoll floor");
        snprintf(v->note, sizeof v->note, "epoll floor: %.120s",
                 not_run[F_EPOLL][0] ? not_run[F_EPOLL] : "not measured");
        return;
    }
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL], d[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "CPU/req %s–%s× epoll floor",
             lab_fmt3(a, lo), lab_fmt3(b, hi));
    snprintf(v->target, sizeof v->target, "≤ %.1f× floor", KV_TARGET);
    snprintf(v->peer, sizeof v->peer, "redis %s–%s×", lab_fmt3(c, rlo),
             lab_fmt3(d, rhi));
    lab_verdict_spread(v, "the epoll floor's CPU/req", spread);
    lab_verdict_bound(v, hi, KV_TARGET, true);
}

/* ------------------------------------------------------------ the figure */

static void set_params(const lab_options *opts, fparams *p) {
    p->rounds = lab_rounds(opts, 5, 2);
    /* --quick: long enough at -P 16 for /proc's 10 ms CPU ticks to be a
     * few percent of the run. */
    p->requests[0] = opts->quick ? 20000 : 200000;
    p->requests[1] = opts->quick ? 200000 : 1000000;
    p->nclients = opts->quick ? 1 : CLIENT_COUNTS;
}

int serve_floors(const lab_options *opts, lab_json *json) {
    fparams p;
    set_params(opts, &p);
    tracepoint_probe();
    lab_noise noise;
    lab_noise_begin(&noise);
    static server srv[FLOOR_ROWS];
    int rc = start_all(srv);
    char uring_line[200];
    snprintf(uring_line, sizeof uring_line, "%s", not_run[F_URING]);
    if (!not_run[F_URING][0]) { /* its mode, from its "listening" line */
        char line[200];
        serve_first_line(srv[F_URING].out_fd, line, sizeof line);
        const char *m = strchr(line, '(');
        snprintf(uring_line, sizeof uring_line, "%.*s",
                 m ? (int)strcspn(m + 1, ")") : 0, m ? m + 1 : "");
    }
    /* Warm-up, unmeasured: buffers, page faults, 300 connections. */
    for (int r = 0; rc == 0 && r < FLOOR_ROWS; r++) {
        char buf[4096];
        double client_s;
        if (!not_run[r][0])
            bench(&srv[r], p.requests[1] / 4, client_count[p.nclients - 1],
                  depth[DEPTHS - 1], buf, sizeof buf, &client_s);
    }
    static fctx ctx[CONFIGS];
    lab_fig *f[CONFIGS] = {NULL};
    int nconf = 0;
    for (int ci = 0; ci < p.nclients && rc == 0; ci++)
        for (int d = 0; d < DEPTHS && rc == 0; d++) {
            ctx[nconf] = (fctx){&p, client_count[ci], d, srv, false};
            lab_fig_spec spec = {"",       "serve floors", NULL,       fcols,
                                 FV_COUNT, FV_SERVER_US,   0,          measure,
                                 cell,     fig_json,       &ctx[nconf]};
            if (!(f[nconf] = lab_fig_new(&spec))) {
                rc = -ENOMEM;
                break;
            }
            for (int r = 0; r < FLOOR_ROWS; r++) {
                unsigned flags = r == F_KV      ? LAB_ROW_LULL | LAB_ROW_BASE
                                 : r == F_REDIS ? 0u
                                                : LAB_ROW_FLOOR;
                lab_fig_add(f[nconf], row_peer[r], flags, "%s", row_label[r])
                    ->tag = r;
            }
            nconf++;
        }
    for (int round = 0; round < p.rounds && rc == 0; round++)
        for (int k = 0; k < nconf && rc == 0; k++) {
            lab_fig_round(f[k], opts, round);
            rc = lab_fig_error(f[k]);
        }
    /* The counting pass: the kernel's count, and the own count beside it. */
    for (int k = 0; k < nconf && rc == 0 && tp_id >= 0; k++) {
        ctx[k].counting = true;
        lab_fig_round(f[k], opts, p.rounds);
        f[k]->rounds = p.rounds;
        rc = lab_fig_error(f[k]);
    }
    stop_all(srv);
    lab_noise_end(&noise);
    if (rc == 0) {
        legend(&p, uring_line);
        for (int k = 0; k < nconf; k++) {
            lab_detail("\n%d clients, -P %d:\n", ctx[k].clients,
                       depth[ctx[k].d]);
            lab_fig_print(f[k]);
            lab_fig_notes(f[k]);
        }
        char text[96];
        lab_noise_text(&noise, text, sizeof text);
        lab_detail("  machine while the floors ran: %s; load average %.2f "
                   "(%.0f s)\n",
                   text, noise.load1, noise.seconds);
        brief(f, nconf);
        if (json) {
            lab_json_key(json, "floors");
            lab_json_begin_object(json);
            lab_json_key(json, "io_uring_mode");
            lab_json_string(json, uring_line);
            lab_json_key(json, "kernel_count");
            lab_json_string(json, tp_id >= 0 ? "perf raw_syscalls:sys_enter"
                                             : tp_why);
            lab_noise_json(json, "noise", &noise);
            decide(f, nconf, json);
            for (int k = 0; k < nconf; k++) {
                char key[32];
                snprintf(key, sizeof key, "c%d_p%d", ctx[k].clients,
                         depth[ctx[k].d]);
                f[k]->key = key;
                lab_fig_json(f[k], json);
            }
            lab_json_end_object(json);
        } else {
            decide(f, nconf, NULL);
        }
        verdict(f, nconf);
        for (int k = 0; k < nconf && opts->plot; k++) {
            char title[96];
            snprintf(title, sizeof title,
                     "serve floors: server CPU µs/request, %d clients -P %d",
                     ctx[k].clients, depth[ctx[k].d]);
            lab_fig_plot(f[k], opts->plot, FV_SERVER_US, title, "µs");
        }
    }
    for (int k = 0; k < nconf; k++)
        lab_fig_free(f[k]);
    return rc;
}
