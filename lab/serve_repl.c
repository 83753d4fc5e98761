/* The `serve` scenario's replication rows (lab/serve.h): a primary gets K
 * keys (a pipelined loader of our own), then a replica starts (`lull-kv
 * --replica-of`, `redis-server --replicaof`). While it catches up,
 * `redis-benchmark -t ping_mbulk -c 10` measures the primary's latency;
 * catch-up ends when the replica's offset (slave_repl_offset) reaches the
 * primary's (master_repl_offset) with the link up, both read from `INFO
 * replication` every few ms. redis-benchmark only reports on runs it
 * finishes, so the ping load is a chain of short runs (about 100 ms each)
 * started until catch-up ends; their latency distributions are merged (a
 * conservative p99: each run's cumulative counts are taken at the printed
 * bucket edges, never interpolated). The last run may outlast catch-up by
 * up to one run. lull-kv runs as primary twice: with a backlog the load
 * has passed, so the replica gets a snapshot from a forked child pinned to
 * the replica's CPU (--repl-sender-cpu), where redis-server's fork + RDB
 * child runs; and with a backlog that holds the whole load, replayed by
 * the loop's budget sender (--repl-catchup loop). A full run adds the
 * latter over TLS (redis-server's TLS replication beside it): the primary has a
 * TLS port with a throwaway certificate (lab/serve_tls.c), the replica connects
 * to it; keys, pings and INFO use the plain port. Once caught up, every row's
 * replica must hold all the keys, and the last one's bytes (else the run failed
 * a delivered-data check).
 *
 * The rows are one of the engine's figures: the row that goes first
 * rotates round by round. One thread. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What each primary's catch-up is: lull-kv forks a child that writes a
 * snapshot to the replica's socket, or replays its write log from the loop
 * record by record within its budget; redis-server forks a child that
 * writes a snapshot (RDB) to the replica's socket. */
static const char *const repl_label[REPL_ROWS] = {
    "lull-kv, fork + snapshot", "lull-kv, log replay, loop budget",
    "redis-server, fork + RDB", "lull-kv over TLS, loop budget",
    "redis-server over TLS, fork + RDB"};

/* The latency distribution of a chain of ping runs: each run's printed
 * (edge ms, cumulative count) points. */
#define MAX_POINTS 4096
#define MAX_RUNS   512
typedef struct chain {
    double edge[MAX_POINTS];
    uint64_t cum[MAX_POINTS];
    int run_of[MAX_POINTS];
    int points;
    int runs;
    uint64_t total;
    double rps_sum;
} chain;

/* Takes the "x% <= V milliseconds (cumulative count C)" lines of one run's
 * plain output. */
static void chain_add(chain *ch, const char *text) {
    uint64_t run_total = 0;
    for (const char *l = text; l && *l;
         l = strchr(l, '\n'), l = l ? l + 1 : l) {
        double pct, v;
        unsigned long long c;
        if (sscanf(l, "%lf%% <= %lf milliseconds (cumulative count %llu)", &pct,
                   &v, &c) != 3)
            continue;
        if (ch->points == MAX_POINTS) break;
        ch->edge[ch->points] = v;
        ch->cum[ch->points] = c;
        ch->run_of[ch->points] = ch->runs;
        ch->points++;
        if (c > run_total) run_total = c;
    }
    const char *rps = strstr(text, "throughput summary:");
    if (rps) ch->rps_sum += strtod(rps + 19, NULL);
    ch->total += run_total;
    ch->runs++;
}

/* The smallest edge at which the merged count reaches p of the total: for
 * each run, the count at an edge is its count at its largest printed edge
 * not above it (a lower bound), so the figure errs high, never low. */
static double chain_percentile(const chain *ch, double p) {
    static uint64_t at[MAX_RUNS];
    static double best[MAX_RUNS];
    if (ch->total == 0) return 0;
    double answer = 0;
    bool have = false;
    for (int i = 0; i < ch->points; i++) {
        double t = ch->edge[i];
        if (have && t >= answer) continue;
        memset(at, 0, sizeof at);
        for (int r = 0; r < ch->runs; r++)
            best[r] = -1;
        for (int k = 0; k < ch->points; k++) {
            int r = ch->run_of[k];
            if (ch->edge[k] <= t && ch->edge[k] >= best[r] &&
                ch->cum[k] >= at[r]) {
                best[r] = ch->edge[k];
                at[r] = ch->cum[k];
            }
        }
        uint64_t sum = 0;
        for (int r = 0; r < ch->runs; r++)
            sum += at[r];
        if ((double)sum >= p * (double)ch->total) {
            answer = t;
            have = true;
        }
    }
    return answer;
}

/* Starts one ping run against port; its output goes to a pipe (*rd). */
static pid_t ping_start(int port, int requests, int clients, int *rd) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return -errno;
    char p[16], n[16], c[16];
    snprintf(p, sizeof p, "%d", port);
    snprintf(n, sizeof n, "%d", requests);
    snprintf(c, sizeof c, "%d", clients);
    char *args[] = {serve_bench_path, "-h", "127.0.0.1", "-p", p, "-t",
                    "ping_mbulk",     "-n", n,           "-c", c, NULL};
    /* On the primary's CPU, as replicate's pinger: the replica has the
     * other one to itself. */
    pid_t pid = serve_spawn(args, pipefd[1], serve_cpu_server);
    close(pipefd[1]);
    if (pid < 0)
        close(pipefd[0]);
    else
        *rd = pipefd[0];
    return pid;
}

/* The values of one catch-up. */
enum { RV_CATCHUP_S, RV_PING_P99, RV_PING_P99_IDLE, RV_PING_RPS, RV_COUNT };

static const lab_col cols[RV_COUNT] = {
    {"catchup_s", "catch-up s", 0},
    {"ping_p99_ms", "ping p99 ms", 0},
    {"ping_p99_idle_ms", "ping p99 ms, no replica", 0},
    {"ping_rps", "ping req/s", LAB_COL_RATE},
};

/* What a row keeps besides its values. */
typedef struct repl_figures {
    uint64_t pings;
    bool skipped;
    char why[240];
} repl_figures;

typedef struct rctx {
    const params *p;
    const serve_tls_files *tls; /* the TLS rows' certificate, or NULL */
    int ping_requests; /* per run of the ping chain, from the idle rate */
    repl_figures r[REPL_ROWS];
} rctx;

/* The primary's offset and whether the replica has reached it: 1 caught
 * up, 0 not yet, -1 the query failed. The replica's connection is opened
 * on demand (it may not be listening yet). */
static int caught_up(int primary_fd, int replica_port, int *replica_fd) {
    static char text[8192];
    if (serve_info_replication(primary_fd, text, sizeof text) < 0) return -1;
    long long primary = serve_info_number(text, "master_repl_offset");
    if (*replica_fd < 0) *replica_fd = serve_client_connect(replica_port);
    if (*replica_fd < 0) return 0;
    if (serve_info_replication(*replica_fd, text, sizeof text) < 0) {
        close(*replica_fd);
        *replica_fd = -1;
        return 0;
    }
    long long replica = serve_info_number(text, "slave_repl_offset");
    /* With no writes during the sync, redis-server's offset may stay 0 until
     * its next replica ping (10 s): 0 is a valid offset to reach. */
    return primary >= 0 && replica >= primary &&
           serve_info_has(text, "master_link_status:up");
}

/* The replica at port holds p->keys keys (DBSIZE), and the last one
 * written has its value_size bytes of 'v' (GET). */
static bool replica_has(int port, const params *p) {
    int fd = serve_client_connect(port);
    if (fd < 0) return false;
    char want[320], got[320], req[96];
    int vs = p->value_size > 256 ? 256 : p->value_size;
    int n = snprintf(want, sizeof want, ":%d\r\n$%d\r\n%0*d\r\n", p->keys, vs,
                     vs, 0);
    memset(want + n - 2 - vs, 'v', (size_t)vs);
    int r = snprintf(req, sizeof req,
                     "*1\r\n$6\r\nDBSIZE\r\n*2\r\n$3\r\nGET\r\n$12\r\n"
                     "key:%08d\r\n",
                     p->keys - 1);
    bool ok = serve_send_all(fd, req, (size_t)r) == 0 &&
              serve_recv_exact(fd, got, (size_t)n) == 0 &&
              memcmp(got, want, (size_t)n) == 0;
    close(fd);
    return ok;
}

/* A run of the ping chain lasts about this long at the idle rate. */
#define PING_RUN_MS 100

/* One catch-up: a primary of row `row` with p->keys keys, an idle ping
 * run, then a replica and the ping chain until it has caught up. */
static int replicate_once(const params *p, const serve_tls_files *t, int row,
                          repl_figures *f, int *ping_requests, double *v) {
    server primary, replica;
    memset(&replica, 0, sizeof replica);
    replica.out_fd = -1;
    bool kv = row != R_REDIS && row != R_REDIS_TLS;
    bool tls = row == R_KV_TLS || row == R_REDIS_TLS;
    /* Over TLS: the primary listens on a TLS port too, and the replica
     * connects to it; keys and pings go to the plain port, as in the
     * other rows (the pings measure the primary's loop, not a handshake). */
    char tport[16];
    int tls_port = tls ? serve_free_port() : 0;
    snprintf(tport, sizeof tport, "%d", tls_port);
    const char *ptls[] = {"--tls-port",
                          tport,
                          "--tls-cert-file",
                          t ? t->cert : "",
                          "--tls-key-file",
                          t ? t->key : "",
                          "--tls-ca-cert-file",
                          t ? t->cert : "",
                          "--tls-auth-clients",
                          "no",
                          NULL};
    /* Which catch-up each lull-kv row measures, whatever the keys' count:
     * the snapshot row keeps the smallest backlog (a replica attached after
     * the load is past it), the log-replay rows one that holds the whole
     * load (10^6 keys' log is ~140 MB), kept from the start. The snapshot child
     * (and the sender thread) on the replica's CPU, as redis-server's child. */
    char cpu[16];
    snprintf(cpu, sizeof cpu, "%d", serve_cpu_client);
    const char *mode[24];
    int m = 0;
    mode[m++] = "--repl-backlog-size";
    mode[m++] = row == R_KV_SNAPSHOT ? "16kb" : "1gb";
    if (row == R_KV_BUDGET || row == R_KV_TLS) {
        const char *loop[] = {"--repl-mode", "budget", "--repl-catchup", "loop",
                              /* the log kept before the replica came */
                              "--repl-backlog-always", "yes"};
        memcpy(mode + m, loop, sizeof loop);
        m += 6;
    } else if (serve_cpu_client >= 0) {
        mode[m++] = "--repl-sender-cpu";
        mode[m++] = cpu;
    }
    if (tls) {
        memcpy(mode + m, ptls, sizeof ptls); /* NULL-terminated */
    } else {
        mode[m] = NULL;
    }
    bool ok = kv ? serve_start_kv(&primary, mode, serve_cpu_server)
                 /* Its fork + RDB child runs on the replica's CPU, not on
                  * the primary's, which the pings share. */
                 : serve_start_redis_with(&primary, 0, serve_cpu_server,
                                          serve_cpu_client, tls ? ptls : NULL);
    if (!ok) {
        snprintf(f->why, sizeof f->why, "%s primary: %s",
                 kv ? "lull-kv" : "redis-server", primary.why);
        if (kv || tls) f->skipped = true;
        return kv || tls ? 0 : -EIO;
    }
    int rc = 0;
    chain *ch = calloc(1, sizeof *ch);
    int primary_fd = -1, replica_fd = -1, rd = -1;
    pid_t pinger = 0;
    if (!ch) rc = -ENOMEM;
    if (rc == 0 && serve_load_keys(primary.port, p->keys, p->value_size) < 0) {
        snprintf(f->why, sizeof f->why, "loading %d keys failed", p->keys);
        rc = -EIO;
    }

    /* The primary's ping latency with no replica: the reference. */
    if (rc == 0) {
        pinger = ping_start(primary.port, *ping_requests, p->ping_clients, &rd);
        static char out[65536];
        if (pinger < 0) rc = pinger;
        size_t used = 0;
        for (ssize_t r; rc == 0 && (r = read(rd, out + used,
                                             sizeof out - 1 - used)) != 0;) {
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) break;
            used += (size_t)r;
            if (used == sizeof out - 1) break;
        }
        out[used] = '\0';
        if (rd >= 0) close(rd);
        rd = -1;
        if (pinger > 0) serve_stop(pinger);
        pinger = 0;
        chain idle_chain;
        memset(&idle_chain, 0, sizeof idle_chain);
        chain_add(&idle_chain, out);
        if (idle_chain.total == 0) {
            snprintf(f->why, sizeof f->why,
                     "the idle ping run reported nothing");
            rc = -EPROTO;
        } else {
            v[RV_PING_P99_IDLE] = chain_percentile(&idle_chain, 0.99);
            /* Runs of about PING_RUN_MS at this rate from now on. */
            double rate = idle_chain.rps_sum;
            int want = (int)(rate * PING_RUN_MS / 1000);
            *ping_requests = want < 1000 ? 1000 : want;
        }
    }
    if (rc == 0 && (primary_fd = serve_client_connect(primary.port)) < 0)
        rc = -EIO;

    /* The ping chain's first run, then the replica: the pings are there
     * before its first byte is asked for. */
    if (rc == 0) {
        pinger = ping_start(primary.port, *ping_requests, p->ping_clients, &rd);
        if (pinger < 0) rc = pinger;
    }
    uint64_t t0 = lab_now_ns(), t_end = 0;
    if (rc == 0) {
        char master[32];
        snprintf(master, sizeof master, "127.0.0.1:%d",
                 tls ? tls_port : primary.port);
        const char *rtls[] = {"--tls-replication",
                              "yes",
                              "--tls-cert-file",
                              t ? t->cert : "",
                              "--tls-key-file",
                              t ? t->key : "",
                              "--tls-ca-cert-file",
                              t ? t->cert : "",
                              NULL};
        if (kv) {
            memset(&replica, 0, sizeof replica);
            replica.out_fd = serve_temp_output();
            char *args[16] = {serve_kv_path,  "--port", "0",
                              "--replica-of", master,   NULL};
            for (int i = 0; tls && rtls[i]; i++)
                args[5 + i] = (char *)rtls[i];
            replica.pid = serve_spawn(args, replica.out_fd, serve_cpu_client);
        } else {
            /* Not waited for: its sync may start at once, and the pings
             * must be running by then. */
            if (!serve_spawn_redis_with(&replica, tls ? tls_port : primary.port,
                                        serve_cpu_client, -1,
                                        tls ? rtls : NULL)) {
                snprintf(f->why, sizeof f->why, "redis-server replica: %s",
                         replica.why);
                rc = -EIO;
            }
        }
        if (rc == 0 && replica.pid <= 0) rc = -EIO;
    }
    static char out[65536];
    size_t used = 0;
    bool done = false;
    while (rc == 0) {
        if (pinger <= 0 && !done) {
            pinger =
                ping_start(primary.port, *ping_requests, p->ping_clients, &rd);
            used = 0;
            if (pinger < 0) {
                rc = pinger;
                break;
            }
        }
        if (done && pinger <= 0) break;
        /* Poll the offsets every 5 ms while the run goes on. */
        struct pollfd pfd = {.fd = rd, .events = POLLIN};
        int n = poll(&pfd, 1, 5);
        if (n > 0) {
            ssize_t r = read(rd, out + used, sizeof out - 1 - used);
            if (r > 0) used += (size_t)r;
            if (r == 0 || used == sizeof out - 1) {
                out[used] = '\0';
                close(rd);
                rd = -1;
                serve_stop(pinger);
                pinger = 0;
                chain_add(ch, out);
                if (ch->runs == MAX_RUNS) done = true;
            }
        }
        if (done) continue;
        if (serve_exited(replica.pid)) {
            char line[160];
            serve_last_line(replica.out_fd, line, sizeof line);
            replica.pid = 0;
            snprintf(f->why, sizeof f->why, "%s replica exited: %s",
                     kv ? "lull-kv" : "redis-server", line);
            f->skipped = kv && replica.port <= 0; /* --replica-of refused */
            rc = f->skipped ? 0 : -EIO;
            break;
        }
        if (kv && replica.port <= 0) {
            char text[512];
            ssize_t got = pread(replica.out_fd, text, sizeof text - 1, 0);
            text[got > 0 ? got : 0] = '\0';
            const char *at = strstr(text, "listening on 127.0.0.1:");
            if (at) replica.port = atoi(at + 23);
            if (replica.port <= 0) continue;
        }
        int c = caught_up(primary_fd, replica.port, &replica_fd);
        if (c < 0) {
            snprintf(f->why, sizeof f->why, "INFO replication failed");
            rc = -EIO;
        } else if (c == 1) {
            t_end = lab_now_ns();
            done = true;
        } else if (lab_now_ns() - t0 > 600000 * MS) {
            snprintf(f->why, sizeof f->why, "no catch-up within 600 s");
            rc = -ETIMEDOUT;
        }
    }
    if (rd >= 0) close(rd);
    if (pinger > 0) serve_stop(pinger);
    if (primary_fd >= 0) close(primary_fd);
    if (replica_fd >= 0) close(replica_fd);
    /* What arrived: every key, and the last one's bytes. */
    if (rc == 0 && !f->skipped && !replica_has(replica.port, p)) {
        snprintf(f->why, sizeof f->why,
                 "the replica's keys or bytes differ from the primary's");
        rc = -EPROTO;
    }
    if (rc == 0 && !f->skipped) {
        v[RV_CATCHUP_S] = (double)(t_end - t0) / 1e9;
        v[RV_PING_P99] = chain_percentile(ch, 0.99);
        v[RV_PING_RPS] = ch->runs ? ch->rps_sum / ch->runs : 0;
        f->pings += ch->total;
    }
    free(ch);
    serve_server_stop(&replica);
    serve_server_stop(&primary);
    return rc;
}

static int measure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    rctx *c = fig->ctx;
    int i = (int)row->tag;
    repl_figures *f = &c->r[i];
    if (f->skipped) return LAB_SKIPPED;
    int rc = replicate_once(c->p, c->tls, i, f, &c->ping_requests, v);
    /* Said in the short output too: the run fails on it, and a bare
     * "serve failed: Input/output error" named nothing. */
    if (rc < 0) printf("replication, %s: %s\n", repl_label[i], f->why);
    if (f->skipped && i >= R_KV_TLS) { /* no TLS in one of them */
        printf("TLS catch-up not run: %.78s\n", f->why);
        c->r[R_KV_TLS] = c->r[R_REDIS_TLS] = *f;
        return LAB_SKIPPED;
    }
    if (f->skipped) { /* no replication in this lull-kv */
        int other = i == R_KV_BUDGET ? R_KV_SNAPSHOT : R_KV_BUDGET;
        c->r[other] = *f;
        return LAB_SKIPPED;
    }
    return rc;
}

static void row_json(const lab_fig *fig, const lab_row *row, lab_json *j) {
    const rctx *c = fig->ctx;
    if (!row) {
        lab_json_field(j, "keys", c->p->keys);
        lab_json_field(j, "ping_clients", c->p->ping_clients);
        return;
    }
    int i = (int)row->tag;
    lab_json_key(j, "server");
    bool redis = i == R_REDIS || i == R_REDIS_TLS;
    lab_json_string(j, redis ? "redis-server" : "lull-kv");
    if (!redis) {
        lab_json_key(j, "repl_catchup");
        lab_json_string(j, i == R_KV_SNAPSHOT ? "snapshot" : "loop");
    }
    if (i >= R_KV_TLS) lab_json_field(j, "tls", 1);
    if (c->r[i].skipped) {
        lab_json_key(j, "skipped");
        lab_json_string(j, c->r[i].why);
    }
    lab_json_field(j, "pings", (double)c->r[i].pings);
}

static void print_repl(const lab_fig *fig, const rctx *c) {
    const char *header[] = {"primary",     "catch-up s",
                            "ping p99 ms", "ping p99 ms, no replica",
                            "ping req/s",  "pings"};
    lab_table t;
    lab_table_init(&t, 6, header);
    for (int i = 0; i < fig->nrows; i++) {
        const lab_row *r = &fig->rows[i];
        if (c->r[r->tag].skipped) continue;
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", r->label);
        for (int k = 0; k < RV_COUNT; k++) {
            char buf[LAB_CELL];
            lab_format_series(buf, sizeof buf, &r->v[k]);
            lab_table_set(&t, row, 1 + k, "%s", buf);
        }
        lab_table_set(&t, row, 5, "%llu",
                      (unsigned long long)c->r[r->tag].pings);
    }
    if (t.rows > 1) lab_table_detail(&t);
    if (c->r[R_KV_BUDGET].skipped)
        lab_detail("  lull-kv rows (snapshot, loop budget): %s, "
                   "skipped\n",
                   c->r[R_KV_BUDGET].why);
    else
        lab_detail("  snapshot, primary ping p99 during catch-up of %d "
                   "keys: %.2f ms (loop budget %.2f ms, redis-server %.2f "
                   "ms); target ≤ quantum + 1 ms = %.1f ms\n",
                   c->p->keys,
                   lab_row_median(&fig->rows[R_KV_SNAPSHOT], RV_PING_P99),
                   lab_row_median(&fig->rows[R_KV_BUDGET], RV_PING_P99),
                   lab_row_median(&fig->rows[R_REDIS], RV_PING_P99),
                   KV_QUANTUM_MS + 1);
}

/* A catch-up line of the short table: label, lull-kv's catch-up seconds,
 * its ×, and in the p99 column the ping p99 during catch-up, lull-kv /
 * redis-server. */
static void catchup_row(const lab_fig *fig, lab_table *t, const char *label,
                        int kv, int redis) {
    const lab_row *b = &fig->rows[kv], *r = &fig->rows[redis];
    char a[LAB_CELL], d[LAB_CELL];
    int row = lab_table_row(t);
    lab_table_set(t, row, 0, "%s", label);
    lab_table_set(t, row, 1, "%s", lab_fmt(a, lab_row_median(b, RV_CATCHUP_S)));
    lab_table_set(t, row, 2, "%s",
                  lab_fmt_ratio(d, lab_ratio(fig, b, r, RV_CATCHUP_S)));
    lab_table_set(t, row, 5, "%s / %s",
                  lab_fmt(a, lab_row_median(b, RV_PING_P99)),
                  lab_fmt(d, lab_row_median(r, RV_PING_P99)));
}

static void brief_verdict(const lab_fig *fig, const rctx *c, lab_table *t) {
    const lab_row *b = &fig->rows[R_KV_SNAPSHOT], *r = &fig->rows[R_REDIS];
    if (t && t->rows > 0 && !c->r[R_KV_BUDGET].skipped)
        catchup_row(fig, t, "replica catch-up, s; ping", R_KV_SNAPSHOT,
                    R_REDIS);
    /* The same over TLS (a full run's): the replica's link encrypted. */
    if (t && t->rows > 0 && fig->nrows == REPL_ROWS && !c->r[R_KV_TLS].skipped)
        catchup_row(fig, t, "TLS replica catch-up, s; ping", R_KV_TLS,
                    R_REDIS_TLS);
    lab_verdict *v = lab_verdict_add("serve", 1);
    if (!v) return;
    char a[LAB_CELL], d[LAB_CELL], e[LAB_CELL];
    if (c->r[R_KV_BUDGET].skipped) {
        snprintf(v->note, sizeof v->note, "%.150s", c->r[R_KV_BUDGET].why);
        return;
    }
    double p99 = lab_row_median(b, RV_PING_P99);
    v->timing = true;
    snprintf(v->what, sizeof v->what, "catch-up: ping p99 %s ms",
             lab_fmt3(a, p99));
    snprintf(v->target, sizeof v->target, "≤ quantum + 1 ms");
    snprintf(v->peer, sizeof v->peer, "redis %s %s",
             lab_fmt3(d, lab_row_median(r, RV_PING_P99)),
             lab_fmt_ratio(e, lab_ratio(fig, b, r, RV_PING_P99)));
    /* redis-server's replica caught up in the same rounds. */
    lab_verdict_spread(v, "redis-server's ping p99",
                       lab_row_spread(r, RV_PING_P99));
    if (lab_row_median(r, RV_PING_P99) <= KV_QUANTUM_MS + 1)
        lab_verdict_peer_met(v, "redis-server");
    lab_verdict_bound(v, p99, KV_QUANTUM_MS + 1, true);
}

int serve_replication(const lab_options *opts, const params *p, lab_json *json,
                      lab_table *brief) {
    lab_detail("\nreplication: the primary holds %d keys (%d-byte values); "
               "a replica starts and catches up from offset 0 while "
               "redis-benchmark -t ping_mbulk -c %d runs against the primary "
               "(back-to-back runs of ~%d ms, distributions merged); "
               "catch-up = from the replica's start until its offset equals "
               "the primary's; %d round%s\n",
               p->keys, p->value_size, p->ping_clients, PING_RUN_MS,
               p->repl_rounds, p->repl_rounds == 1 ? "" : "s");
    static rctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.ping_requests = 10000;
    /* The TLS rows: a full run's only (the demo keeps its length). */
    static serve_tls_files tls;
    int rows = R_KV_TLS;
    if (!opts->quick) {
        if (serve_tls_make(&tls)) {
            c.tls = &tls;
            rows = REPL_ROWS;
        } else {
            printf("TLS catch-up not run: %.78s\n", tls.why);
        }
    }
    lab_fig_spec spec = {"replication",
                         "serve: replication",
                         NULL,
                         cols,
                         RV_COUNT,
                         -1,
                         0,
                         measure,
                         NULL,
                         row_json,
                         &c};
    lab_fig *fig = lab_fig_new(&spec);
    if (!fig) return -ENOMEM;
    for (int i = 0; i < rows; i++) {
        bool redis = i == R_REDIS || i == R_REDIS_TLS;
        lab_fig_add(fig, redis ? "redis-server" : "lull-kv",
                    redis ? 0 : LAB_ROW_LULL, "%s", repl_label[i])
            ->tag = i;
    }
    lab_fig_run(fig, opts, p->repl_rounds);
    if (c.tls) serve_tls_remove(&tls);
    int rc = lab_fig_error(fig);
    if (rc == 0) {
        print_repl(fig, &c);
        brief_verdict(fig, &c, brief);
        lab_fig_json(fig, json);
        if (!c.r[R_KV_BUDGET].skipped)
            lab_fig_plot(fig, opts->plot, RV_PING_P99,
                         "serve: primary ping p99 while a replica catches up",
                         "ms");
    }
    lab_fig_free(fig);
    return rc;
}
