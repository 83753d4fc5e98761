/* `serve`'s default-suite rows (lab/serve_more.h): the suite
 * redis-benchmark runs by default (20 tests, PING_INLINE to MSET, the
 * LRANGE replies of 100 to 600 elements among them) against lull-kv,
 * redis-server and the epoll floor, 50 clients, at -P 1 and -P 16;
 * --quick runs a subset.
 *
 * What a test costs the server comes first: its CPU time (every thread,
 * serve_cpu_ns) read from /proc each time redis-benchmark prints a test's
 * CSV line, which it does as the test ends; the difference between two
 * lines is that test's, per request of it. redis-benchmark writes to a
 * pseudo-terminal, not a pipe, so its stdio flushes each line at once (to
 * a pipe it would hold them all to its exit). A request is one command:
 * one MSET of 10 keys, one LRANGE of 600 elements. req/s, p50 and p99 are
 * redis-benchmark's own (its CSV).
 *
 * Each round starts the three servers afresh, and they take turns test by
 * test: redis-benchmark -t runs one test (an LRANGE test after the LPUSH
 * it needs) against each server in turn, the suite's tests in its
 * order. So every server runs every test on the same keyspace (the
 * pops take what the pushes left), lull-kv's write log starts empty, and
 * the three run a test within seconds of each other (run_round says why
 * that matters here).
 *
 * The epoll floor (lab/floor/) answers the same requests with replies of
 * the same shape and size, no keyspace, no loop library: what the kernel's
 * work and a parse cost. Where the floor itself is not 0.9× redis-server's
 * CPU (or 0.95× its req/s), no server could be on this machine, and the
 * line says floor-bound.
 *
 * Figures: one per depth whose rows are the three servers (suite_p1,
 * suite_p16): the first row measured in a round runs the round for all
 * three. Their per-test values fill one figure per test (suite_<test>:
 * each server at each depth), whose rows take the values of the round's
 * runs. One thread. */
#include "serve_more.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

/* The suite's servers: serve.h's two, then the floor. */
enum { S_FLOOR = SERVERS, SUITE_SERVERS };

static const char *suite_name(int s) {
    return s == S_FLOOR ? "epoll floor" : server_name[s];
}

/* A row's peer and flags in the figures. */
static const char *row_peer(int s) {
    return s == S_KV ? "lull" : s == S_REDIS ? "redis-server" : "floor";
}

static unsigned row_flags(int s) {
    return s == S_KV      ? LAB_ROW_LULL | LAB_ROW_BASE
           : s == S_FLOOR ? LAB_ROW_FLOOR
                          : 0;
}

typedef struct suite_test {
    const char *csv;   /* its first CSV cell */
    const char *key;   /* JSON: suite_<key> */
    const char *label; /* the tables' */
    bool quick;        /* in --quick's subset */
} suite_test;

/* redis-benchmark 7.0's default suite, in its order. */
#define SUITE_TESTS 20
static const suite_test tests[SUITE_TESTS] = {
    {"PING_INLINE", "ping_inline", "PING_INLINE", false},
    {"PING_MBULK", "ping_mbulk", "PING_MBULK", false},
    {"SET", "set", "SET", true},
    {"GET", "get", "GET", true},
    {"INCR", "incr", "INCR", false},
    {"LPUSH", "lpush", "LPUSH", false},
    {"RPUSH", "rpush", "RPUSH", false},
    {"LPOP", "lpop", "LPOP", false},
    {"RPOP", "rpop", "RPOP", false},
    {"SADD", "sadd", "SADD", false},
    {"HSET", "hset", "HSET", false},
    {"SPOP", "spop", "SPOP", false},
    {"ZADD", "zadd", "ZADD", false},
    {"ZPOPMIN", "zpopmin", "ZPOPMIN", false},
    {"LPUSH (needed to benchmark LRANGE)", "lpush_for_lrange",
     "LPUSH (for LRANGE)", true},
    {"LRANGE_100 (first 100 elements)", "lrange_100", "LRANGE_100", true},
    {"LRANGE_300 (first 300 elements)", "lrange_300", "LRANGE_300", false},
    {"LRANGE_500 (first 500 elements)", "lrange_500", "LRANGE_500", false},
    {"LRANGE_600 (first 600 elements)", "lrange_600", "LRANGE_600", true},
    {"MSET (10 keys)", "mset", "MSET (10 keys)", false},
};

#define CLIENTS 50
/* Requests per test: `redis-benchmark -n 100000`, the suite's usual size;
 * --quick's are a few ms of each test at -P 1 and -P 16. A test's CSV
 * line comes when it ends, so a test that hangs is seen after the
 * silence serve_bench_silence_ms() allows (lab/serve_proc.c). */
#define REQUESTS       100000
#define QUICK_REQUESTS 4000
#define QUICK_P16      10000
#define EXIT_CHECK_MS  1000 /* how often a silent run's server is looked at */

/* Each test's values, and the columns of its figure. */
enum {
    TV_CPU,
    TV_RPS,
    TV_P50,
    TV_P99,
    TV_CLIENT,
    TV_BUSY,
    TV_X_CPU, /* the round's × against redis-server (test_measure) */
    TV_X_RPS,
    TV_COUNT
};
static const lab_col test_cols[TV_COUNT] = {
    {"server_cpu_us_per_req", "server CPU µs/req", 0},
    {"rps", "req/s", LAB_COL_RATE},
    {"p50_ms", "p50 ms", 0},
    {"p99_ms", "p99 ms", 0},
    {"client_cpu_us_per_req", "redis-benchmark CPU µs/req", 0},
    {"server_busy", "server CPU ÷ test time", 0},
    {"x_cpu", "redis-server's CPU ÷ this server's, same round", LAB_COL_RATE},
    {"x_rps", "this server's req/s ÷ redis-server's, same round", LAB_COL_RATE},
};

/* A whole run's values (the depth figures' columns). */
enum { DV_CPU, DV_CLIENT, DV_SECONDS, DV_COUNT };
static const lab_col drive_cols[DV_COUNT] = {
    {"server_cpu_us_per_req", "server CPU µs/req, whole suite", 0},
    {"client_cpu_us_per_req", "redis-benchmark CPU µs/req", 0},
    {"seconds", "suite s", 0},
};

typedef struct suite {
    int requests[DEPTHS]; /* -n */
    bool quick;
    /* The round's runs: [depth][server][test][TV_*]. */
    double res[DEPTHS][SUITE_SERVERS][SUITE_TESTS][TV_COUNT];
    bool have[DEPTHS][SUITE_SERVERS][SUITE_TESTS];
    /* The round's totals of each server, their error (0, LAB_SKIPPED for
     * a floor left out, or a negative errno) and why. */
    double dv[DEPTHS][SUITE_SERVERS][DV_COUNT];
    int rc[DEPTHS][SUITE_SERVERS];
    char why[DEPTHS][SUITE_SERVERS][240];
    bool started[DEPTHS][SUITE_SERVERS]; /* false: say why in round 1 only */
    int ran[DEPTHS]; /* the round run_round last ran, plus one */
} suite;

typedef struct drive_ctx {
    suite *su;
    int d; /* the depth's index */
} drive_ctx;

typedef struct test_ctx {
    suite *su;
    int t; /* the test's index */
} test_ctx;

/* --------------------------------------------------------------- a run */

/* A pseudo-terminal: *master to read, *slave for the child's stdout;
 * raw, so that no CR is added and nothing echoes. */
static int open_pty(int *master, int *slave) {
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0) return -errno;
    fcntl(m, F_SETFD, FD_CLOEXEC);
    char name[64];
    if (grantpt(m) != 0 || unlockpt(m) != 0 ||
        ptsname_r(m, name, sizeof name) != 0) {
        int err = errno;
        close(m);
        return -err;
    }
    int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s < 0) {
        int err = errno;
        close(m);
        return -err;
    }
    struct termios t;
    if (tcgetattr(s, &t) == 0) {
        cfmakeraw(&t);
        tcsetattr(s, TCSANOW, &t);
    }
    *master = m;
    *slave = s;
    return 0;
}

/* The comma-separated, quoted cells of one CSV line, in place. */
static int csv_cells(char *line, char **cells, int max) {
    int n = 0;
    for (char *save = NULL, *c = strtok_r(line, ",\r", &save); c && n < max;
         c = strtok_r(NULL, ",\r", &save)) {
        if (*c == '"') c++;
        c[strcspn(c, "\"")] = '\0';
        cells[n++] = c;
    }
    return n;
}

static int test_of(const char *csv) {
    for (int t = 0; t < SUITE_TESTS; t++)
        if (strcmp(tests[t].csv, csv) == 0) return t;
    return -1;
}

/* CPU of the server and of redis-benchmark, at an instant. */
typedef struct sample {
    uint64_t t_ns, server_ns, client_ns;
    bool server_ok, client_ok; /* false: the process was gone */
} sample;

static void take(sample *s, pid_t server_pid, pid_t client) {
    s->t_ns = lab_now_ns();
    s->server_ok = serve_cpu_ns(server_pid, &s->server_ns);
    s->client_ok = serve_cpu_ns(client, &s->client_ns);
}

/* What a run's reader keeps between lines. */
typedef struct reader {
    suite *su;
    int d, s;
    int col_rps, col_p50, col_p99; /* from the header; -1 before */
    sample first, prev;
    int found;     /* lines of tests, a repeated one's too */
    bool stale;    /* a line of the same read as the one before: no CPU */
    char why[160]; /* the first line that was not CSV */
} reader;

static void on_line(reader *r, char *line, const sample *now) {
    char copy[120]; /* the start of a line that is not CSV, for an error */
    snprintf(copy, sizeof copy, "%.119s", line);
    char *cells[16];
    int n = csv_cells(line, cells, 16);
    if (n >= 2 && strcmp(cells[0], "test") == 0) {
        for (int i = 1; i < n; i++) {
            if (strcmp(cells[i], "rps") == 0) r->col_rps = i;
            if (strcmp(cells[i], "p50_latency_ms") == 0) r->col_p50 = i;
            if (strcmp(cells[i], "p99_latency_ms") == 0) r->col_p99 = i;
        }
        r->first = r->prev = *now;
        r->stale = true; /* a test's line in this same read has no CPU */
        return;
    }
    int t = n > 0 ? test_of(cells[0]) : -1;
    if (t < 0 || r->col_rps < 0 || r->col_p50 < 0 || r->col_p99 < 0 ||
        r->col_rps >= n || r->col_p50 >= n || r->col_p99 >= n) {
        if (!r->why[0] && copy[0]) snprintf(r->why, sizeof r->why, "%s", copy);
        return;
    }
    r->found++;
    if (r->su->have[r->d][r->s][t]) {
        /* The LPUSH redis-benchmark runs before each LRANGE test: the
         * first run's line is the suite's, the others are left out (their
         * CPU, too, which ends at this line). */
        r->prev = *now;
        r->stale = true;
        return;
    }
    double *v = r->su->res[r->d][r->s][t];
    double reqs = r->su->requests[r->d];
    v[TV_RPS] = strtod(cells[r->col_rps], NULL);
    v[TV_P50] = strtod(cells[r->col_p50], NULL);
    v[TV_P99] = strtod(cells[r->col_p99], NULL);
    double server_ns = (double)(now->server_ns - r->prev.server_ns);
    double wall_ns = (double)(now->t_ns - r->prev.t_ns);
    bool cpu = !r->stale && now->server_ok && r->prev.server_ok;
    v[TV_CPU] = cpu ? server_ns / 1e3 / reqs : NAN;
    v[TV_BUSY] = cpu && wall_ns > 0 ? server_ns / wall_ns : NAN;
    v[TV_CLIENT] =
        r->stale || !now->client_ok || !r->prev.client_ok
            ? NAN
            : (double)(now->client_ns - r->prev.client_ns) / 1e3 / reqs;
    r->su->have[r->d][r->s][t] = true;
    r->prev = *now;
    r->stale = true; /* until the next read */
}

/* What one server's runs of a round add up to, for its depth figure: every
 * test it ran, the LPUSH repeated before each LRANGE too. */
typedef struct tally {
    uint64_t server_ns, client_ns, t_ns;
    bool client_ok;
    int found;
} tally;

/* One redis-benchmark run against srv, `-t` tests, its lines read as they
 * come: `lines` of tests expected. The run's totals are added to *acc:
 * from its header line to its last test's, so connecting its clients
 * counts in its first test (as in a run of the whole suite) and closing
 * them, after its last line, in none. */
static int run_tests(suite *su, server *srv, int d, int s,
                     const char *tests_arg, int lines, tally *acc, char *why,
                     size_t why_size) {
    int line_wait_ms = serve_bench_silence_ms();
    if (line_wait_ms == 0) {
        snprintf(why, why_size, "redis-benchmark hung before");
        return -ETIMEDOUT;
    }
    char port[16], n[16], c[16], P[16];
    snprintf(port, sizeof port, "%d", srv->port);
    snprintf(n, sizeof n, "%d", su->requests[d]);
    snprintf(c, sizeof c, "%d", CLIENTS);
    snprintf(P, sizeof P, "%d", depth[d]);
    char *args[] = {serve_bench_path,
                    "-h",
                    "127.0.0.1",
                    "-p",
                    port,
                    "-n",
                    n,
                    "-c",
                    c,
                    "-P",
                    P,
                    "--csv",
                    "-t",
                    (char *)tests_arg,
                    NULL};
    int master = -1, slave = -1;
    int rc = open_pty(&master, &slave);
    if (rc < 0) {
        snprintf(why, why_size, "no pseudo-terminal: %s", strerror(-rc));
        return rc;
    }
    pid_t pid = serve_spawn(args, slave, serve_cpu_client);
    close(slave);
    if (pid < 0) {
        close(master);
        snprintf(why, why_size, "cannot start redis-benchmark: %s",
                 strerror(-pid));
        return pid;
    }
    reader r = {
        .su = su, .d = d, .s = s, .col_rps = -1, .col_p50 = -1, .col_p99 = -1};
    take(&r.first, srv->pid, pid);
    r.prev = r.first;
    static char buf[8192];
    size_t used = 0;
    int waited_ms = 0;
    for (;;) {
        struct pollfd pfd = {.fd = master, .events = POLLIN};
        int ready = poll(&pfd, 1, EXIT_CHECK_MS);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) {
            /* redis-benchmark can wait for ever on a server that died at
             * the wrong moment (its connections' setup, say). */
            if (serve_exited(srv->pid)) {
                srv->pid = 0; /* reaped */
                snprintf(why, why_size, "the server exited");
                rc = -ESRCH;
                break;
            }
            if ((waited_ms += EXIT_CHECK_MS) < line_wait_ms) continue;
            snprintf(why, why_size, "redis-benchmark printed nothing for %d s",
                     line_wait_ms / 1000);
            serve_bench_hung();
            rc = -ETIMEDOUT;
            break;
        }
        waited_ms = 0;
        ssize_t got = read(master, buf + used, sizeof buf - 1 - used);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break; /* EIO: every end of the terminal closed */
        sample now;
        take(&now, srv->pid, pid);
        r.stale = false;
        used += (size_t)got;
        buf[used] = '\0';
        char *line = buf, *end;
        while ((end = strchr(line, '\n'))) {
            *end = '\0';
            on_line(&r, line, &now);
            line = end + 1;
        }
        used -= (size_t)(line - buf);
        memmove(buf, line, used);
        if (used == sizeof buf - 1) used = 0; /* a line too long: not CSV */
    }
    close(master);
    serve_stop(pid); /* reaps it; kills it first if it still runs */
    if (rc < 0) return rc;
    if (!r.first.server_ok || !r.prev.server_ok) {
        snprintf(why, why_size, "the server was gone");
        return -ESRCH;
    }
    if (r.found != lines) {
        /* redis-benchmark gave up (a server that closed its connections,
         * a reply it could not parse): what it printed says why. */
        snprintf(why, why_size,
                 "redis-benchmark -t %s reported %d of %d "
                 "tests%s%.160s",
                 tests_arg, r.found, lines, r.why[0] ? ": " : "", r.why);
        return -EIO;
    }
    acc->found += r.found;
    acc->server_ns += r.prev.server_ns - r.first.server_ns;
    acc->client_ok &= r.prev.client_ok && r.first.client_ok;
    acc->client_ns += r.prev.client_ns - r.first.client_ns;
    acc->t_ns += r.prev.t_ns - r.first.t_ns;
    return 0;
}

/* A round's runs (redis-benchmark's -t), in the suite's order, one test
 * each: `-t lrange_N` runs the LPUSH the LRANGE tests need before its
 * LRANGE (two lines; the first run's LPUSH is the suite's, on_line). A
 * test's runs against the three servers then take seconds, not the tens
 * of seconds of the four LRANGE tests at -P 1. */
static const char *const chunks[] = {
    "ping_inline", "ping_mbulk", "set",        "get",     "incr",
    "lpush",       "rpush",      "lpop",       "rpop",    "sadd",
    "hset",        "spop",       "zadd",       "zpopmin", "lrange_100",
    "lrange_300",  "lrange_500", "lrange_600", "mset",
};
/* --quick's: the tests marked quick above. */
static const char *const quick_chunks[] = {"set", "get", "lrange_100",
                                           "lrange_600"};
#define N_CHUNKS       (int)(sizeof chunks / sizeof *chunks)
#define N_QUICK_CHUNKS (int)(sizeof quick_chunks / sizeof *quick_chunks)

/* The tests' lines a run of chunk prints: an LRANGE's LPUSH, then it. */
static int lines_of(const char *chunk) {
    return strncmp(chunk, "lrange", 6) == 0 ? 2 : 1;
}

/* --quick's chunks as one -t list, for the description and the JSON. */
static const char *quick_list(void) {
    static char list[64];
    size_t used = 0;
    for (int c = 0; c < N_QUICK_CHUNKS && used < sizeof list; c++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                 c ? "," : "", quick_chunks[c]);
    return list;
}

static bool start_server(server *srv, int s) {
    return s == S_KV      ? serve_start_kv(srv, NULL, serve_cpu_server)
           : s == S_REDIS ? serve_start_redis(srv, 0, serve_cpu_server, -1)
                          : serve_start_epoll_floor(srv, serve_cpu_server);
}

/* A server that failed this round: its tests are dropped, the why kept.
 * lull-kv's or redis-server's failing fails the suite; the floor's leaves
 * it out of the round (its line is judged without it). */
static void drop_server(suite *su, int d, int s, int rc, const char *why) {
    memset(su->have[d][s], 0, sizeof su->have[d][s]);
    su->rc[d][s] = s == S_FLOOR ? LAB_SKIPPED : rc;
    snprintf(su->why[d][s], sizeof su->why[d][s], "%s", why);
}

/* A test the round's runs did not report for server s, or -1. */
static int test_missing(const suite *su, int d, int s) {
    for (int k = 0; k < SUITE_TESTS; k++)
        if ((!su->quick || tests[k].quick) && !su->have[d][s][k]) return k;
    return -1;
}

/* One round of a depth, for every server: each starts afresh, and they
 * take turns test by test (the server that goes first rotating), so the
 * three run each test within seconds of each other. This machine has
 * spells of a few seconds in which a server's CPU per request is 20–30%
 * higher, whichever server runs; a server that ran the whole suite
 * alone met a spell its neighbours missed. */
static void run_round(suite *su, int d, int round) {
    server srv[SUITE_SERVERS];
    bool up[SUITE_SERVERS];
    tally acc[SUITE_SERVERS];
    for (int s = 0; s < SUITE_SERVERS; s++) {
        acc[s] = (tally){.client_ok = true};
        su->rc[d][s] = 0;
        su->why[d][s][0] = '\0';
        up[s] = su->started[d][s] = start_server(&srv[s], s);
        if (!up[s]) drop_server(su, d, s, -EIO, srv[s].why);
    }
    const char *const *list = su->quick ? quick_chunks : chunks;
    int count = su->quick ? N_QUICK_CHUNKS : N_CHUNKS;
    /* Without lull-kv or redis-server the suite has failed: no more runs. */
    for (int c = 0; c < count && up[S_KV] && up[S_REDIS]; c++)
        for (int k = 0; k < SUITE_SERVERS && up[S_KV] && up[S_REDIS]; k++) {
            int s = (k + round + c) % SUITE_SERVERS;
            if (!up[s]) continue;
            char why[240] = "";
            int rc = run_tests(su, &srv[s], d, s, list[c], lines_of(list[c]),
                               &acc[s], why, sizeof why);
            if (rc < 0) {
                serve_server_stop(&srv[s]);
                up[s] = false;
                drop_server(su, d, s, rc, why);
            }
        }
    int failed = !up[S_KV] ? S_KV : !up[S_REDIS] ? S_REDIS : -1;
    for (int s = 0; s < SUITE_SERVERS; s++) {
        if (!up[s]) continue;
        serve_server_stop(&srv[s]);
        if (failed >= 0) { /* its runs stopped with the failed server's */
            char why[240];
            snprintf(why, sizeof why, "not run: %s failed", suite_name(failed));
            drop_server(su, d, s, LAB_SKIPPED, why);
            continue;
        }
        int t = test_missing(su, d, s);
        if (t >= 0) {
            char why[240];
            snprintf(why, sizeof why, "redis-benchmark did not report %s",
                     tests[t].csv);
            drop_server(su, d, s, -EIO, why);
            continue;
        }
        double total = (double)su->requests[d] * acc[s].found;
        double *v = su->dv[d][s];
        v[DV_CPU] = (double)acc[s].server_ns / 1e3 / total;
        v[DV_CLIENT] =
            acc[s].client_ok ? (double)acc[s].client_ns / 1e3 / total : NAN;
        v[DV_SECONDS] = (double)acc[s].t_ns / 1e9;
    }
    su->ran[d] = round + 1;
}

/* A depth figure's row: the round's runs of its server (run_round, on the
 * first row measured in the round). */
static int drive_measure(lab_fig *f, lab_row *row, int round, double *v) {
    const drive_ctx *c = f->ctx;
    suite *su = c->su;
    int s = (int)row->tag;
    if (su->ran[c->d] != round + 1) run_round(su, c->d, round);
    int rc = su->rc[c->d][s];
    /* A floor that is not built is said once, not every round. */
    if (rc < 0 || (rc == LAB_SKIPPED && (round == 0 || su->started[c->d][s])))
        printf("default suite, %s -P %d: %s\n", suite_name(s), depth[c->d],
               su->why[c->d][s]);
    if (rc != 0) return rc;
    memcpy(v, su->dv[c->d][s], sizeof(double) * DV_COUNT);
    return 0;
}

/* A test figure's row: the values its depth figure's run left, and its ×
 * against redis-server in the same round. */
static int test_measure(lab_fig *f, lab_row *row, int round, double *v) {
    (void)round;
    const test_ctx *c = f->ctx;
    int d = (int)row->tag / SUITE_SERVERS, s = (int)row->tag % SUITE_SERVERS;
    if (!c->su->have[d][s][c->t]) return LAB_SKIPPED;
    const double *mine = c->su->res[d][s][c->t];
    const double *redis = c->su->res[d][S_REDIS][c->t];
    memcpy(v, mine, sizeof(double) * TV_COUNT);
    v[TV_X_CPU] = v[TV_X_RPS] = NAN;
    if (s != S_REDIS && c->su->have[d][S_REDIS][c->t]) {
        if (mine[TV_CPU] > 0) v[TV_X_CPU] = redis[TV_CPU] / mine[TV_CPU];
        if (redis[TV_RPS] > 0) v[TV_X_RPS] = mine[TV_RPS] / redis[TV_RPS];
    }
    return 0;
}

static void drive_json(const lab_fig *f, const lab_row *row, lab_json *j) {
    const drive_ctx *c = f->ctx;
    if (row) return;
    lab_json_field(j, "pipeline", depth[c->d]);
    lab_json_field(j, "requests_per_test", c->su->requests[c->d]);
    lab_json_field(j, "clients", CLIENTS);
    lab_json_key(j, "tests");
    lab_json_string(j, c->su->quick ? quick_list() : "all, one -t each");
}

static void test_json(const lab_fig *f, const lab_row *row, lab_json *j) {
    if (!row) return;
    (void)f;
    lab_json_key(j, "server");
    lab_json_string(j, suite_name((int)(row->tag % SUITE_SERVERS)));
    lab_json_field(j, "pipeline", depth[row->tag / SUITE_SERVERS]);
}

/* ------------------------------------------------------------- output */

static double med(const lab_fig *f, int d, int s, int col) {
    return lab_row_median(&f->rows[d * SUITE_SERVERS + s], col);
}

/* The same-round × column of a CPU or req/s column. */
static int x_col(int col) {
    return col == TV_CPU ? TV_X_CPU : TV_X_RPS;
}

/* × of server s (lull-kv, or the floor) against redis-server: the median
 * over the rounds of the × within each round, where the two ran the test
 * seconds apart (run_round), rather than the × of two medians, whose
 * rounds may have met the machine in different moods. */
static double ratio_of(const lab_fig *f, int d, int s, int col) {
    return med(f, d, s, x_col(col));
}

static double ratio(const lab_fig *f, int d, int col) {
    return ratio_of(f, d, S_KV, col);
}

static void series_cell(lab_table *t, int row, int col, const lab_series *s) {
    char buf[LAB_CELL];
    lab_format_series(buf, sizeof buf, s);
    lab_table_set(t, row, col, "%s", buf);
}

static void print_depth(lab_fig *const *tf, int d) {
    const char *header[] = {"test",
                            "lull-kv CPU µs/req",
                            "redis-server",
                            "epoll floor",
                            "×",
                            "floor ×",
                            "lull-kv req/s",
                            "redis-server",
                            "epoll floor",
                            "×",
                            "floor ×",
                            "p50 / p99 ms, lull-kv",
                            "redis-server",
                            "redis-benchmark µs/req, kv / redis / floor"};
    static const int cols[] = {TV_CPU, TV_RPS};
    lab_table t;
    lab_table_init(&t, 14, header);
    for (int k = 0; k < SUITE_TESTS; k++) {
        const lab_fig *f = tf[k];
        if (!f) continue;
        int row = lab_table_row(&t);
        char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
        lab_table_set(&t, row, 0, "%s -P %d", tests[k].label, depth[d]);
        for (int i = 0; i < 2; i++) {
            int col = cols[i], at = 1 + 5 * i;
            for (int s = 0; s < SUITE_SERVERS; s++)
                series_cell(&t, row, at + s,
                            &f->rows[d * SUITE_SERVERS + s].v[col]);
            lab_table_set(&t, row, at + 3, "%s",
                          lab_fmt_ratio(a, ratio(f, d, col)));
            lab_table_set(&t, row, at + 4, "%s",
                          lab_fmt_ratio(a, ratio_of(f, d, S_FLOOR, col)));
        }
        for (int s = 0; s < SERVERS; s++) {
            const lab_row *r = &f->rows[d * SUITE_SERVERS + s];
            lab_table_set(&t, row, 11 + s, "%s / %s",
                          lab_fmt(a, lab_row_median(r, TV_P50)),
                          lab_fmt(b, lab_row_median(r, TV_P99)));
        }
        lab_table_set(&t, row, 13, "%s / %s / %s",
                      lab_fmt(a, med(f, d, S_KV, TV_CLIENT)),
                      lab_fmt(b, med(f, d, S_REDIS, TV_CLIENT)),
                      lab_fmt(c, med(f, d, S_FLOOR, TV_CLIENT)));
    }
    lab_table_detail(&t);
}

/* The suite's table, test by test: --verbose only (the short output's
 * verdict line says how many tests met the target). */
static void print_brief(lab_fig *const *tf) {
    const char *header[] = {"default suite", "µs/req -P 1",  "×", "floor ×",
                            "req/s ×",       "µs/req -P 16", "×", "floor ×",
                            "req/s ×"};
    lab_table t;
    lab_table_init(&t, 9, header);
    for (int k = 0; k < SUITE_TESTS; k++) {
        const lab_fig *f = tf[k];
        if (!f) continue;
        int row = lab_table_row(&t);
        char a[LAB_CELL];
        lab_table_set(&t, row, 0, "%s", tests[k].label);
        for (int d = 0; d < DEPTHS; d++) {
            lab_table_set(&t, row, 1 + 4 * d, "%s",
                          lab_fmt(a, med(f, d, S_KV, TV_CPU)));
            lab_table_set(&t, row, 2 + 4 * d, "%s",
                          lab_fmt_ratio(a, ratio(f, d, TV_CPU)));
            lab_table_set(&t, row, 3 + 4 * d, "%s",
                          lab_fmt_ratio(a, ratio_of(f, d, S_FLOOR, TV_CPU)));
            lab_table_set(&t, row, 4 + 4 * d, "%s",
                          lab_fmt_ratio(a, ratio(f, d, TV_RPS)));
        }
    }
    lab_table_brief(&t, SERVE_SUITE_TITLE);
}

/* The targets: server CPU per request ≤ 0.9× redis-server's (× ≥ 1/0.9)
 * and req/s ≥ 0.95× in every test at both depths. */
#define CPU_TARGET (1 / 0.9)
#define RPS_TARGET 0.95

/* One bound of one test: x (lull-kv's ×) ≥ target. The floor's × ran in
 * the same rounds, against the same redis-server runs, so how far it moved
 * over the rounds is the evidence for noise, and a miss the floor's × (xf)
 * shares is the machine's: for the req/s too, since redis-benchmark is
 * what limits it and it runs slower against a server that answers sooner
 * (fewer replies in each of its reads), the floor as much as lull-kv. A
 * figure lull-kv lacks is a plain miss, never the floor's. */
static void judge(lab_verdict *v, const lab_row *floor, int col, double x,
                  double xf, double target) {
    const char *unit = col == TV_CPU ? "CPU ×" : "req/s ×";
    char what[64];
    snprintf(what, sizeof what, "the floor's %s", unit);
    lab_verdict_spread(v, what, lab_row_spread(floor, x_col(col)));
    if (isfinite(x) && isfinite(xf))
        lab_verdict_bound_floor(v, x, target, false, xf, NULL);
    else
        lab_verdict_bound(v, x, target, false);
}

static void verdict(lab_fig *const *tf) {
    int cpu_ok = 0, rps_ok = 0, floor_cpu_ok = 0, floor_rps_ok = 0;
    int floors = 0, n = 0;
    lab_verdict *v = lab_verdict_add("serve", SERVE_V_SUITE);
    for (int k = 0; k < SUITE_TESTS; k++)
        for (int d = 0; d < DEPTHS && tf[k]; d++) {
            double x = ratio(tf[k], d, TV_CPU), y = ratio(tf[k], d, TV_RPS);
            double xf = ratio_of(tf[k], d, S_FLOOR, TV_CPU);
            double yf = ratio_of(tf[k], d, S_FLOOR, TV_RPS);
            n++;
            cpu_ok += x >= CPU_TARGET;
            rps_ok += y >= RPS_TARGET;
            floors +=
                (isfinite(x) && isfinite(xf)) || (isfinite(y) && isfinite(yf));
            floor_cpu_ok += xf >= CPU_TARGET;
            floor_rps_ok += yf >= RPS_TARGET;
            const lab_row *fl = &tf[k]->rows[d * SUITE_SERVERS + S_FLOOR];
            judge(v, fl, TV_CPU, x, xf, CPU_TARGET);
            judge(v, fl, TV_RPS, y, yf, RPS_TARGET);
        }
    if (!v || n == 0) return;
    v->timing = true;
    /* Narrow cells: the verdict's columns are shared by every line (the
     * tables have every test's ×). */
    snprintf(v->what, sizeof v->what, "CPU met %d, req/s %d of %d", cpu_ok,
             rps_ok, n);
    snprintf(v->target, sizeof v->target, "≥ ×1.11, ×0.95");
    if (floors > 0)
        snprintf(v->peer, sizeof v->peer, "floor %d, %d", floor_cpu_ok,
                 floor_rps_ok);
    else
        snprintf(v->peer, sizeof v->peer, "no floor");
}

static void plot(lab_plot *p, lab_fig *const *tf) {
    if (!p) return;
    for (int d = 0; d < DEPTHS; d++) {
        char title[96];
        snprintf(title, sizeof title,
                 "serve: default suite, server CPU per request, -P %d",
                 depth[d]);
        lab_plot_panel(p, title, "µs");
        for (int k = 0; k < SUITE_TESTS; k++)
            /* lull-kv and redis-server only: a panel holds few bars. */
            for (int s = 0; tf[k] && s < SERVERS; s++) {
                char label[64];
                snprintf(label, sizeof label, "%s %s", suite_name(s),
                         tests[k].label);
                lab_plot_bar(p, label,
                             &tf[k]->rows[d * SUITE_SERVERS + s].v[TV_CPU],
                             s == S_KV);
            }
    }
}

/* ----------------------------------------------------------- the rows */

int serve_suite(const lab_options *opts, lab_json *json) {
    /* Without a pseudo-terminal redis-benchmark's lines come all at its
     * exit, and a test's CPU cannot be told from the next one's. */
    int master, slave, err = open_pty(&master, &slave);
    if (err < 0) {
        printf("default suite: not run (no pseudo-terminal: %s)\n",
               strerror(-err));
        lab_verdict *v = lab_verdict_add("serve", SERVE_V_SUITE);
        if (v) {
            snprintf(v->what, sizeof v->what, "default suite");
            snprintf(v->note, sizeof v->note, "no pseudo-terminal: %s",
                     strerror(-err));
        }
        return 0;
    }
    close(master);
    close(slave);
    static suite su;
    memset(&su, 0, sizeof su);
    su.quick = opts->quick;
    su.requests[0] = opts->quick ? QUICK_REQUESTS : REQUESTS;
    su.requests[1] = opts->quick ? QUICK_P16 : REQUESTS;
    int rounds = lab_rounds(opts, 3, 1);
    lab_detail("\ndefault suite: redis-benchmark -c %d --csv -t, one test "
               "at a time (each LRANGE after its LPUSH), %s%s at -P 1 "
               "(-n %d) and -P 16 (-n %d), against lull-kv, redis-server "
               "and an epoll floor (no keyspace, no loop library), all three "
               "fresh each round and taking turns test by test, the one "
               "that goes first rotating; "
               "%d round%s, median [min–max]; a test's server CPU is the "
               "server's CPU time (/proc/PID/task/*/schedstat) between its "
               "CSV line and the one before\n",
               CLIENTS, su.quick ? "of " : "every test of its default suite",
               su.quick ? quick_list() : "", su.requests[0], su.requests[1],
               rounds, rounds == 1 ? "" : "s");

    static drive_ctx dc[DEPTHS];
    static test_ctx tc[SUITE_TESTS];
    static const char *const drive_key[DEPTHS] = {"suite_p1", "suite_p16"};
    static char test_key_buf[SUITE_TESTS][40];
    lab_fig *df[DEPTHS] = {NULL}, *tf[SUITE_TESTS] = {NULL};
    int rc = 0;
    for (int d = 0; d < DEPTHS && rc == 0; d++) {
        dc[d] = (drive_ctx){&su, d};
        lab_fig_spec spec = {drive_key[d],
                             "serve: default suite",
                             NULL,
                             drive_cols,
                             DV_COUNT,
                             DV_CPU,
                             0,
                             drive_measure,
                             NULL,
                             drive_json,
                             &dc[d]};
        df[d] = lab_fig_new(&spec);
        if (!df[d]) {
            rc = -ENOMEM;
            break;
        }
        for (int s = 0; s < SUITE_SERVERS; s++)
            lab_fig_add(df[d], row_peer(s), row_flags(s), "%s", suite_name(s))
                ->tag = s;
    }
    for (int k = 0; k < SUITE_TESTS && rc == 0; k++) {
        if (su.quick && !tests[k].quick) continue;
        tc[k] = (test_ctx){&su, k};
        snprintf(test_key_buf[k], sizeof test_key_buf[k], "suite_%s",
                 tests[k].key);
        lab_fig_spec spec = {test_key_buf[k],
                             tests[k].label,
                             NULL,
                             test_cols,
                             TV_COUNT,
                             -1, /* × is per round: x_cpu, x_rps */
                             0,
                             test_measure,
                             NULL,
                             test_json,
                             &tc[k]};
        tf[k] = lab_fig_new(&spec);
        if (!tf[k]) {
            rc = -ENOMEM;
            break;
        }
        for (int d = 0; d < DEPTHS; d++)
            for (int s = 0; s < SUITE_SERVERS; s++) {
                lab_row *r = lab_fig_add(tf[k], row_peer(s), row_flags(s),
                                         "%s -P %d", suite_name(s), depth[d]);
                r->tag = d * SUITE_SERVERS + s;
                r->cls = d;
            }
    }
    for (int round = 0; round < rounds && rc == 0; round++) {
        memset(su.have, 0, sizeof su.have);
        for (int d = 0; d < DEPTHS && rc == 0; d++) {
            lab_fig_round(df[d], opts, round);
            rc = lab_fig_error(df[d]);
        }
        for (int k = 0; k < SUITE_TESTS && rc == 0; k++)
            if (tf[k]) lab_fig_round(tf[k], opts, round);
    }
    if (rc == 0) {
        for (int d = 0; d < DEPTHS; d++) {
            lab_detail("\n");
            lab_fig_print(df[d]);
            print_depth(tf, d);
        }
        lab_detail("  tests' × : redis-server's CPU ÷ lull-kv's, lull-kv's "
                   "req/s ÷ redis-server's, each in the same round, median "
                   "over the rounds; floor ×: the same for the floor. "
                   "Targets: CPU ≤ 0.9× redis-server's (× ≥ 1.11) and req/s "
                   "≥ 0.95× in every test at both depths; a miss the "
                   "floor's figures share is floor-bound\n");
        if (lab_verbose) print_brief(tf);
        verdict(tf);
        plot(opts->plot, tf);
        for (int d = 0; d < DEPTHS; d++)
            lab_fig_json(df[d], json);
        for (int k = 0; k < SUITE_TESTS; k++)
            if (tf[k]) lab_fig_json(tf[k], json);
    }
    for (int d = 0; d < DEPTHS; d++)
        lab_fig_free(df[d]);
    for (int k = 0; k < SUITE_TESTS; k++)
        lab_fig_free(tf[k]);
    return rc;
}
