/* The `serve` scenario: lull-kv beside redis-server, both driven by
 * redis-benchmark, a client nobody on this project wrote, in one run.
 *
 * Throughput and latency: lull-kv and `redis-server --save '' --appendonly
 * no --io-threads 1` (persistence off, one I/O thread: both single-threaded
 * event loops) each listen on a free port of 127.0.0.1. Each depth D (1
 * and 16) is one of the engine's figures whose rows are the two servers:
 * every round runs `redis-benchmark -t ping_mbulk,set,get -n N -c 50 -P D
 * --csv` against each, the server that goes first rotating, and reads the
 * CSV for requests/s, p50 and p99 (ms), and /proc for each server's CPU.
 * Figures: median [min–max] over rounds.
 *
 * The floor rows are lab/serve_floor.c (`--only floors` runs them
 * alone), the replication rows lab/serve_repl.c (`--only replication` runs
 * them alone, `--only throughput` the first table alone); redis-benchmark's
 * whole default suite, a 64 MiB value, idle with keys that expire and
 * pub/sub are lab/serve_more.h's (`--only suite`, `bigvalue`, `idle`,
 * `pubsub`); the TLS rows, a full run's only, lab/serve_tls.c (`--only
 * tls`), and the replication rows' TLS pair; the processes, tools and client
 * lab/serve_proc.c; the soak's lull-kv lab/serve_soak.c.
 *
 * CPUs: with two or more, the servers run on one and redis-benchmark on
 * another; during catch-up the primary and its pings share one and the
 * replica has the other (as in `replicate`): unpinned, three busy
 * processes on two CPUs leave the ping p99 to the scheduler. Missing tools
 * skip with one line. */
#include "serve_more.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The values of one redis-benchmark run against one server at one depth. */
enum {
    SV_RPS,                        /* + test: requests/s */
    SV_P50 = SV_RPS + TESTS,       /* + test: p50, ms */
    SV_P99 = SV_P50 + TESTS,       /* + test: p99, ms */
    SV_SERVER_US = SV_P99 + TESTS, /* the server's CPU µs / request */
    SV_CLIENT_US,                  /* redis-benchmark's CPU µs / request */
    SV_PER_SLEEP,                  /* requests per server sleep */
    SV_CLIENT_BUSY,                /* redis-benchmark's CPU ÷ its run's time */
    SV_COUNT
};

static const lab_col cols[SV_COUNT] = {
    {"ping_mbulk_rps", "ping req/s", LAB_COL_RATE},
    {"set_rps", "set req/s", LAB_COL_RATE},
    {"get_rps", "get req/s", LAB_COL_RATE},
    {"ping_mbulk_p50_ms", "ping p50 ms", 0},
    {"set_p50_ms", "set p50 ms", 0},
    {"get_p50_ms", "get p50 ms", 0},
    {"ping_mbulk_p99_ms", "ping p99 ms", 0},
    {"set_p99_ms", "set p99 ms", 0},
    {"get_p99_ms", "get p99 ms", 0},
    {"server_cpu_us_per_req", "server CPU µs/req", 0},
    {"client_cpu_us_per_req", "client CPU µs/req", 0},
    {"req_per_server_sleep", "req per sleep", LAB_COL_RATE},
    {"client_busy", "client busy", 0},
};

typedef struct sctx {
    const params *p;
    int d;        /* the depth's index */
    int keyspace; /* 0: one key; else -r keyspace -d value_size */
    server *srv;  /* [SERVERS] */
} sctx;

/* Reads redis-benchmark's --csv: a header naming the columns, then one
 * line per test. Returns how many of the tests were found. */
int serve_parse_csv(const char *text, double rps[TESTS], double p50[TESTS],
                    double p99[TESTS]) {
    int col_rps = -1, col_p50 = -1, col_p99 = -1, found = 0;
    const char *line = text;
    while (*line) {
        size_t len = strcspn(line, "\n");
        char copy[512];
        snprintf(copy, sizeof copy, "%.*s", (int)len, line);
        line += len + (line[len] == '\n');
        char *cells[16];
        int nc = 0;
        for (char *save = NULL, *c = strtok_r(copy, ",\r", &save); c && nc < 16;
             c = strtok_r(NULL, ",\r", &save)) {
            if (*c == '"') c++;
            c[strcspn(c, "\"")] = '\0';
            cells[nc++] = c;
        }
        if (nc == 0) continue;
        if (strcmp(cells[0], "test") == 0) {
            for (int i = 1; i < nc; i++) {
                if (strcmp(cells[i], "rps") == 0) col_rps = i;
                if (strcmp(cells[i], "p50_latency_ms") == 0) col_p50 = i;
                if (strcmp(cells[i], "p99_latency_ms") == 0) col_p99 = i;
            }
            continue;
        }
        if (col_rps < 0 || col_p50 < 0 || col_p99 < 0 || col_rps >= nc ||
            col_p50 >= nc || col_p99 >= nc)
            continue;
        for (int t = 0; t < TESTS; t++) {
            if (strcmp(cells[0], test_csv[t]) != 0) continue;
            rps[t] = strtod(cells[col_rps], NULL);
            p50[t] = strtod(cells[col_p50], NULL);
            p99[t] = strtod(cells[col_p99], NULL);
            found++;
        }
    }
    return found;
}

/* One redis-benchmark run of the three tests against srv: one key
 * (redis-benchmark's default), or with keyspace > 0 a random key of that
 * many per request, and value_size-byte values (-r, -d). */
static int benchmark(const server *srv, int requests, int clients, int pipeline,
                     int keyspace, int value_size, double *v) {
    int port = srv->port;
    char p[16], n[16], c[16], P[16], r[16], d[16];
    snprintf(p, sizeof p, "%d", port);
    snprintf(n, sizeof n, "%d", requests);
    snprintf(c, sizeof c, "%d", clients);
    snprintf(P, sizeof P, "%d", pipeline);
    snprintf(r, sizeof r, "%d", keyspace);
    snprintf(d, sizeof d, "%d", value_size);
    char *args[] = {serve_bench_path,
                    "-h",
                    "127.0.0.1",
                    "-p",
                    p,
                    "-t",
                    "ping_mbulk,set,get",
                    "-n",
                    n,
                    "-c",
                    c,
                    "-P",
                    P,
                    "--csv",
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    if (keyspace > 0) {
        char **end = &args[14];
        *end++ = "-r";
        *end++ = r;
        *end++ = "-d";
        *end = d;
    }
    static char buf[8192];
    double server_s[2], client_s;
    long sleeps[2];
    bool known = serve_proc_cpu(srv->pid, &server_s[0], &sleeps[0]);
    uint64_t t0 = lab_now_ns();
    int rc =
        serve_bench_run(args, buf, sizeof buf, serve_cpu_client, &client_s);
    if (rc < 0) return rc;
    double wall_s = (double)(lab_now_ns() - t0) / 1e9;
    known = known && serve_proc_cpu(srv->pid, &server_s[1], &sleeps[1]);
    double rps[TESTS], p50[TESTS], p99[TESTS];
    if (serve_parse_csv(buf, rps, p50, p99) != TESTS) return -EPROTO;
    for (int t = 0; t < TESTS; t++) {
        v[SV_RPS + t] = rps[t];
        v[SV_P50 + t] = p50[t];
        v[SV_P99 + t] = p99[t];
    }
    double total = (double)requests * TESTS;
    v[SV_CLIENT_US] = client_s * 1e6 / total;
    v[SV_CLIENT_BUSY] = client_s / wall_s;
    if (known) {
        v[SV_SERVER_US] = (server_s[1] - server_s[0]) * 1e6 / total;
        long slept = sleeps[1] - sleeps[0];
        v[SV_PER_SLEEP] = total / (double)(slept > 0 ? slept : 1);
    }
    return 0;
}

static int measure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    const sctx *c = fig->ctx;
    int s = (int)row->tag;
    int rc = benchmark(&c->srv[s], c->p->requests[c->d], c->p->clients,
                       depth[c->d], c->keyspace, c->p->value_size, v);
    if (rc < 0)
        printf("redis-benchmark against %s failed: %s\n", server_name[s],
               strerror(-rc));
    return rc;
}

static void row_json(const lab_fig *fig, const lab_row *row, lab_json *j) {
    const sctx *c = fig->ctx;
    if (!row) {
        lab_json_field(j, "keyspace", c->keyspace ? c->keyspace : 1);
        lab_json_field(j, "pipeline", depth[c->d]);
        lab_json_field(j, "requests", c->p->requests[c->d]);
        lab_json_field(j, "clients", c->p->clients);
        return;
    }
    lab_json_key(j, "server");
    lab_json_string(j, server_name[row->tag]);
}

/* -------------------------------------------------------------- output */

static void cell(lab_table *t, int row, int col, const lab_series *s) {
    char buf[LAB_CELL];
    lab_format_series(buf, sizeof buf, s);
    lab_table_set(t, row, col, "%s", buf);
}

static const lab_series *ser(lab_fig *const f[DEPTHS], int s, int d, int v) {
    return &f[d]->rows[s].v[v];
}

static double med(lab_fig *const f[DEPTHS], int s, int d, int v) {
    return lab_row_median(&f[d]->rows[s], v);
}

static void print_main(lab_fig *const f[DEPTHS]) {
    const char *header[] = {
        "test, depth", "lull-kv req/s",        "redis-server req/s",
        "×",           "lull-kv p50 / p99 ms", "redis-server p50 / p99 ms"};
    lab_table t;
    lab_table_init(&t, 6, header);
    for (int d = 0; d < DEPTHS; d++)
        for (int k = 0; k < TESTS; k++) {
            int row = lab_table_row(&t);
            lab_table_set(&t, row, 0, "%s -P %d", test_key[k], depth[d]);
            cell(&t, row, 1, ser(f, S_KV, d, SV_RPS + k));
            cell(&t, row, 2, ser(f, S_REDIS, d, SV_RPS + k));
            lab_table_set(&t, row, 3, "%.2f",
                          med(f, S_KV, d, SV_RPS + k) /
                              med(f, S_REDIS, d, SV_RPS + k));
            for (int s = 0; s < SERVERS; s++) {
                char a[LAB_CELL], b[LAB_CELL];
                lab_table_set(&t, row, 4 + s, "%s / %s",
                              lab_fmt(a, med(f, s, d, SV_P50 + k)),
                              lab_fmt(b, med(f, s, d, SV_P99 + k)));
            }
        }
    lab_table_detail(&t);
    lab_detail("  × : lull-kv's requests/s ÷ redis-server's\n");
}

static void print_targets(lab_fig *const f[DEPTHS]) {
    for (int d = 0; d < DEPTHS; d++) {
        int rps_ok = 0, p99_ok = 0;
        for (int k = 0; k < TESTS; k++) {
            if (med(f, S_KV, d, SV_RPS + k) >= med(f, S_REDIS, d, SV_RPS + k))
                rps_ok++;
            if (med(f, S_KV, d, SV_P99 + k) <= med(f, S_REDIS, d, SV_P99 + k))
                p99_ok++;
        }
        lab_detail("  -P %d: lull-kv req/s ≥ redis-server's in %d of %d "
                   "tests, p99 no higher in %d of %d; target: all\n",
                   depth[d], rps_ok, TESTS, p99_ok, TESTS);
    }
}

/* The CPU table: why a rate is what it is. When redis-benchmark's CPU is
 * the limit (one CPU busy), the rate follows its µs per request, and a
 * server that sleeps more often costs the client more: each sleep is a
 * wake-up the client's next write pays for, and a smaller batch of
 * replies for it to read. */
static void print_cpu(lab_fig *const f[DEPTHS]) {
    const char *header[] = {"depth",
                            "lull-kv CPU µs/req",
                            "redis-server CPU µs/req",
                            "redis-benchmark µs/req, vs lull-kv",
                            "vs redis-server",
                            "req per sleep, lull-kv",
                            "redis-server"};
    lab_table t;
    lab_table_init(&t, 7, header);
    for (int d = 0; d < DEPTHS; d++) {
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "-P %d", depth[d]);
        for (int s = 0; s < SERVERS; s++) {
            cell(&t, row, 1 + s, ser(f, s, d, SV_SERVER_US));
            cell(&t, row, 3 + s, ser(f, s, d, SV_CLIENT_US));
            cell(&t, row, 5 + s, ser(f, s, d, SV_PER_SLEEP));
        }
    }
    lab_detail("\nCPU per request over the three tests: each server's own "
               "(/proc), redis-benchmark's (its rusage); requests per server "
               "sleep (its voluntary context switches)\n");
    lab_table_detail(&t);
    for (int d = 0; d < DEPTHS; d++) {
        if (ser(f, S_KV, d, SV_SERVER_US)->n == 0 ||
            ser(f, S_REDIS, d, SV_SERVER_US)->n == 0) {
            lab_detail("  -P %d: a server's CPU time was not readable from "
                       "/proc\n",
                       depth[d]);
            continue;
        }
        double busy_kv = med(f, S_KV, d, SV_CLIENT_BUSY),
               busy_redis = med(f, S_REDIS, d, SV_CLIENT_BUSY);
        char x[LAB_CELL];
        lab_detail("  -P %d: lull-kv's CPU per request, × = redis-server's ÷ "
                   "lull-kv's: %s; redis-benchmark kept %.2f and %.2f of a "
                   "CPU busy%s\n",
                   depth[d],
                   lab_fmt_ratio(x, med(f, S_REDIS, d, SV_SERVER_US) /
                                        med(f, S_KV, d, SV_SERVER_US)),
                   busy_kv, busy_redis,
                   busy_kv > 0.95 && busy_redis > 0.95
                       ? ": the client's CPU is the limit of both rates"
                       : "");
    }
    lab_detail("  per request, redis-server does what lull-kv does not: "
               "per-command statistics and latency histograms (INFO "
               "commandstats, latency-tracking), an expiry check on every "
               "key it looks up, an ACL check of every command, LRU clock "
               "updates; and a serverCron 10 times a second. lull-kv has "
               "no persistence, no ACLs, no command statistics "
               "(docs/KV.md)\n");
}

static void plot_figures(lab_plot *plot, lab_fig *const f[DEPTHS]) {
    if (!plot) return;
    char title[96];
    for (int d = 0; d < DEPTHS; d++) {
        snprintf(title, sizeof title,
                 "serve: redis-benchmark requests/s, 50 clients, -P %d",
                 depth[d]);
        lab_plot_panel(plot, title, "req/s");
        for (int k = 0; k < TESTS; k++)
            for (int s = 0; s < SERVERS; s++) {
                char label[64];
                snprintf(label, sizeof label, "%s %s", server_name[s],
                         test_key[k]);
                lab_plot_bar(plot, label, ser(f, s, d, SV_RPS + k), s == S_KV);
            }
    }
}

/* ------------------------------------------------------ short, verdict */

/* The short table: lull-kv's requests/s of each test and depth, with one
 * key and with 10^6, each with its × to redis-server's; the replication
 * rows (lab/serve_repl.c) add their line to it before it prints. */
static lab_table short_table;

/* One key and 10^6 keys (f[0], f[1]), for each test and depth: lull-kv's
 * requests/s and its × to redis-server's, and the p99s of one key. */
static void brief(lab_fig *const f[2][DEPTHS], int keyspace) {
    const char *header[] = {"requests/s", "lull-kv, 1 key",
                            "×",          "10^6 keys",
                            "×",          "p99 ms (1 key), kv / redis"};
    lab_table *t = &short_table;
    lab_table_init(t, 6, header);
    (void)keyspace;
    for (int d = 0; d < DEPTHS; d++)
        for (int k = 0; k < TESTS; k++) {
            int row = lab_table_row(t);
            char a[LAB_CELL], b[LAB_CELL];
            lab_table_set(t, row, 0, "%s -P %d", test_key[k], depth[d]);
            for (int v = 0; v < 2; v++) {
                lab_fig *const *g = f[v];
                lab_table_set(t, row, 1 + 2 * v, "%s",
                              lab_fmt(a, med(g, S_KV, d, SV_RPS + k)));
                lab_table_set(
                    t, row, 2 + 2 * v, "%s",
                    lab_fmt_ratio(b,
                                  lab_ratio(g[d], &g[d]->rows[S_KV],
                                            &g[d]->rows[S_REDIS], SV_RPS + k)));
            }
            lab_table_set(t, row, 5, "%s / %s",
                          lab_fmt(a, med(f[0], S_KV, d, SV_P99 + k)),
                          lab_fmt(b, med(f[0], S_REDIS, d, SV_P99 + k)));
        }
}

/* ------------------------------------------------------------ scenario */

static void set_params(const lab_options *opts, params *p) {
    memset(p, 0, sizeof *p);
    p->rounds = lab_rounds(opts, 5, 2);
    p->requests[0] = opts->quick ? 10000 : 200000;
    p->requests[1] = opts->quick ? 100000 : 1000000;
    p->clients = 50;
    p->keys = opts->quick ? 100000 : 1000000;
    p->value_size = 32;
    p->repl_rounds = lab_rounds(opts, 3, 1);
    p->ping_clients = 10;
    p->keyspace = 1000000;
}

/* lull-kv, redis-server and redis-benchmark: all three, or serve skips. */
static bool probe_tools(lab_json *json) {
    lab_detail("implementations:");
    if (json) {
        lab_json_key(json, "peers");
        lab_json_begin_array(json);
    }
    char skipped[3][240];
    int nskipped = 0;
    bool have_kv =
        lab_peer_probe(json, "lull-kv", true, serve_kv_available, NULL, NULL,
                       skipped[nskipped], sizeof skipped[0]);
    if (!have_kv) nskipped++;
    bool have_redis = lab_peer_probe(
        json, "redis-server", true, serve_redis_available,
        serve_get_redis_version, NULL, skipped[nskipped], sizeof skipped[0]);
    if (!have_redis) nskipped++;
    bool have_bench = lab_peer_probe(
        json, "redis-benchmark", true, serve_bench_available,
        serve_get_bench_version, NULL, skipped[nskipped], sizeof skipped[0]);
    if (!have_bench) nskipped++;
    lab_detail("\n");
    if (json) lab_json_end_array(json);
    if (have_kv && have_redis && have_bench) return true;
    /* One line a missing program, each cut to fit 100 columns (a reason
     * may hold a path), so the skip reads the same on any machine. */
    printf("serve skipped: it needs lull-kv, redis-server and "
           "redis-benchmark\n");
    for (int i = 0; i < nskipped; i++) {
        size_t n = strlen(skipped[i]);
        if (n > 96)
            printf("  %.93s...\n", skipped[i]);
        else
            printf("  %s\n", skipped[i]);
    }
    return false;
}

static void json_params(lab_json *json, const params *p) {
    lab_json_key(json, "params");
    lab_json_begin_object(json);
    lab_json_field(json, "rounds", p->rounds);
    lab_json_field(json, "requests_p1", p->requests[0]);
    lab_json_field(json, "requests_p16", p->requests[1]);
    lab_json_field(json, "clients", p->clients);
    lab_json_field(json, "keys", p->keys);
    lab_json_field(json, "value_bytes", p->value_size);
    lab_json_field(json, "repl_rounds", p->repl_rounds);
    lab_json_end_object(json);
}

/* The throughput figures: both servers started once, every depth's
 * figure one round at a time. */
static int throughput(const lab_options *opts, const params *p,
                      lab_json *json) {
    static server srv[SERVERS];
    if (!serve_start_kv(&srv[S_KV], NULL, serve_cpu_server)) {
        printf("lull-kv: %s\n", srv[S_KV].why);
        return -EIO;
    }
    if (!serve_start_redis(&srv[S_REDIS], 0, serve_cpu_server, -1)) {
        printf("redis-server: %s\n", srv[S_REDIS].why);
        serve_server_stop(&srv[S_KV]);
        return -EIO;
    }
    /* Warm-up, unmeasured: each server's first runs pay for its growth
     * (the keyspace, buffers, page faults), whichever would run first. */
    for (int v = 0; v < 2; v++)
        for (int s = 0; s < SERVERS; s++) {
            double scratch[LAB_VALUES];
            benchmark(&srv[s], p->requests[1] / 2, p->clients, depth[1],
                      v ? p->keyspace : 0, p->value_size, scratch);
        }
    static sctx c[2][DEPTHS];
    lab_fig *f[2][DEPTHS] = {{NULL}};
    int rc = 0;
    for (int v = 0; v < 2; v++)
        for (int d = 0; d < DEPTHS && rc == 0; d++) {
            c[v][d] = (sctx){p, d, v ? p->keyspace : 0, srv};
            lab_fig_spec spec = {"", "serve", NULL, cols,     SV_COUNT, SV_RPS,
                                 0,  measure, NULL, row_json, &c[v][d]};
            f[v][d] = lab_fig_new(&spec);
            if (!f[v][d]) {
                rc = -ENOMEM;
                break;
            }
            for (int s = 0; s < SERVERS; s++)
                lab_fig_add(f[v][d], s == S_KV ? "lull" : "redis-server",
                            s == S_KV ? LAB_ROW_LULL | LAB_ROW_BASE : 0, "%s",
                            server_name[s])
                    ->tag = s;
        }
    for (int round = 0; round < p->rounds && rc == 0; round++)
        for (int v = 0; v < 2; v++)
            for (int d = 0; d < DEPTHS && rc == 0; d++) {
                lab_fig_round(f[v][d], opts, round);
                rc = lab_fig_error(f[v][d]);
            }
    serve_server_stop(&srv[S_KV]);
    serve_server_stop(&srv[S_REDIS]);
    if (rc == 0) {
        for (int v = 0; v < 2; v++) {
            if (v)
                lab_detail("\nthe same with -r %d -d %d: a random key of %d "
                           "per request, %d-byte values\n",
                           p->keyspace, p->value_size, p->keyspace,
                           p->value_size);
            print_main(f[v]);
            print_targets(f[v]);
            print_cpu(f[v]);
        }
        brief(f, p->keyspace);
        plot_figures(opts->plot, f[0]);
        for (int v = 0; v < 2; v++)
            for (int d = 0; d < DEPTHS; d++) {
                char key[48];
                snprintf(key, sizeof key, "throughput_%sp%d",
                         v ? "r1000000_" : "", depth[d]);
                f[v][d]->key = key;
                lab_fig_json(f[v][d], json);
            }
    }
    for (int v = 0; v < 2; v++)
        for (int d = 0; d < DEPTHS; d++)
            lab_fig_free(f[v][d]);
    return rc;
}

/* Whether the most clients a figure connects at once (the floors' 300, 50
 * with --quick) fit RLIMIT_NOFILE, raised to the hard limit first: every
 * server and redis-benchmark inherit it, and past it redis-server refuses
 * clients ("max number of clients reached"), redis-benchmark exits 1 and
 * no row could be measured. 64 more for the servers' own fds (redis-server
 * keeps 32) and the benchmark's. Else a line saying so: serve not run. */
static bool fds_allow(const lab_options *opts) {
    int clients = opts->quick ? 50 : 300;
    long need = clients + 64;
    long have = lab_raise_nofile();
    if (have < 0 || have >= need) return true;
    printf("serve skipped: %d clients need about %ld fds, and RLIMIT_NOFILE "
           "allows %ld\n  (raise the hard limit: ulimit -Hn %ld, as root)\n",
           clients, need, have, need);
    return false;
}

static int serve_body(const lab_options *opts, lab_json *json,
                      const params *p) {
    if (!probe_tools(json) || !fds_allow(opts)) {
        serve_more_not_run();
        return 0;
    }
    if (json) json_params(json, p);
    lab_detail("lull-kv (%s) and redis-server --save '' --appendonly no "
               "--io-threads 1, each on a free port of 127.0.0.1; "
               "redis-benchmark -t ping_mbulk,set,get -c %d -P 1 (-n %d) and "
               "-P 16 (-n %d) --csv, with one key and again with -r %d -d "
               "%d; one unmeasured run of each against each server first; "
               "the server that goes first rotating; %d rounds, median "
               "[min–max]\n",
               serve_kv_path, p->clients, p->requests[0], p->requests[1],
               p->keyspace, p->value_size, p->rounds);
    if (serve_cpu_server >= 0)
        lab_detail("servers pinned to CPU %d, redis-benchmark to CPU %d; in "
                   "the replication rows the primary and its pings share CPU "
                   "%d, the replica has CPU %d\n",
                   serve_cpu_server, serve_cpu_client, serve_cpu_server,
                   serve_cpu_client);
    else
        lab_detail("one CPU: nothing pinned\n");
    uint64_t started = lab_now_ns();
    short_table.rows = 0;
    int rc = 0;
    /* --quick (the demo) leaves out the three-test table: the default
     * suite's short table below has the same tests with the server's CPU
     * first. --only throughput still runs it. */
    bool throughput_quick_skip = opts->quick && !opts->only;
    if (serve_wants(opts, "throughput") && !throughput_quick_skip)
        rc = throughput(opts, p, json);
    if (rc == 0 && serve_wants(opts, "floors")) rc = serve_floors(opts, json);
    if (rc == 0 && serve_wants(opts, "replication"))
        rc = serve_replication(opts, p, json, &short_table);
    if (short_table.rows > 1) lab_table_brief(&short_table, NULL);
    if (rc == 0 && serve_wants(opts, "suite")) rc = serve_suite(opts, json);
    if (rc == 0) rc = serve_beside(opts, json);
    /* The TLS rows: a full run's (the demo keeps its length). */
    bool tls_only = opts->only && strcmp(opts->only, "tls") == 0;
    if (rc == 0 && (tls_only || (!opts->quick && !opts->only)))
        rc = serve_tls(opts, json);
    lab_detail("  (%.1f s)\n", (double)(lab_now_ns() - started) / 1e9);
    return rc;
}

static int run_serve(const lab_options *opts, lab_json *json) {
    params p;
    set_params(opts, &p);
    serve_kv_option = opts->kv_path;
    serve_bench_sizes(opts->quick);
    serve_choose_cpus();
    serve_guard_children(true);
    int rc = serve_body(opts, json, &p);
    serve_kill_all_children(); /* none should be left; never leave one */
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (serve_children[i] > 0) serve_stop(serve_children[i]);
    serve_guard_children(false);
    return rc;
}

static const char *const serve_headings[] = {
    SERVE_FLOOR_TITLE_KERNEL, SERVE_FLOOR_TITLE_OWN, SERVE_SUITE_TITLE, NULL};

/* --only: the parts serve_wants() and run_serve pick by name. */
static const char *const serve_only[] = {
    "throughput", "floors", "replication", "suite", "bigvalue",
    "idle",       "pubsub", "tls",         NULL};

const lab_scenario lab_serve = {
    "serve",
    "a Redis-protocol server: lull-kv beside redis-server under "
    "redis-benchmark (ping, set, get at -P 1 and 16; its whole default "
    "suite), a replica catching up while the primary answers pings, a "
    "64 MiB value, idle with 10^6 keys that expire, pub/sub with a "
    "subscriber that never reads",
    run_serve,
    /* The tables' columns are redis-benchmark's -P 1 and -P 16, which a
     * newcomer reading `make demo` has not met: the title says what -P is
     * (lab/serve_terms.cmake), in the line `make demo` has anyway (its
     * output is held to 79 lines, lab/verdict_shape.cmake). */
    "serve: lull-kv beside redis-server and floors (plain C, no lull); -P: "
    "redis-benchmark's pipelining",
    "serve",
    serve_headings,
    false,
    serve_only,
};
