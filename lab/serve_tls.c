/* `serve`'s TLS rows (lab/serve_more.h), in the full run only (`lull-lab
 * serve`, `lull-lab all`, or `--only tls`; never --quick, so the demo
 * keeps its length): lull-kv and redis-server each with a TLS port, the
 * same throwaway certificate (an ECDSA P-256 key made with openssl at run
 * time in a temporary directory, its own CA) and the same cipher
 * (redis-benchmark offers TLS 1.3's TLS_AES_128_GCM_SHA256 alone, and
 * ECDHE-ECDSA-AES128-GCM-SHA256 for 1.2), driven by `redis-benchmark
 * --tls`:
 *   - -t ping_mbulk,set,get -c 50 at -P 1 and -P 16: the server's CPU per
 *     request first (/proc/PID/stat's utime + stime before and after the
 *     run, over the three tests' requests), then requests/s;
 *   - -t ping_mbulk -c 50 -k 0: a new connection for every request, so
 *     the handshake is the work: connections/s and the server's CPU per
 *     connection.
 * Each figure's rows are the two servers, the one that goes first
 * rotating round by round; median [min–max]. After each run the key
 * redis-benchmark SET is read back from the server (3 bytes, the same on
 * both servers), and the CSV must hold every test asked for: otherwise the run
 * is a delivered-data failure (-EPROTO). The verdict's line: server CPU per
 * request over TLS ≤ 0.9× redis-server's at both depths. Without TLS in
 * lull-kv, in redis-server, in redis-benchmark or without openssl, one
 * line says which and the rows are not run. One thread. */
#include "serve_more.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------- the certificate */

bool serve_tls_make(serve_tls_files *t) {
    memset(t, 0, sizeof *t);
    char openssl[512];
    if (!serve_on_path("openssl", openssl, sizeof openssl)) {
        snprintf(t->why, sizeof t->why, "openssl not on PATH");
        return false;
    }
    snprintf(t->dir, sizeof t->dir, "/tmp/lull-lab-tls-XXXXXX");
    if (!mkdtemp(t->dir)) {
        snprintf(t->why, sizeof t->why, "mkdtemp: %s", strerror(errno));
        t->dir[0] = '\0';
        return false;
    }
    lab_tmp_note(t->dir);
    snprintf(t->cert, sizeof t->cert, "%s/cert.pem", t->dir);
    snprintf(t->key, sizeof t->key, "%s/key.pem", t->dir);
    /* Valid for the address both servers are reached at (lull-kv's
     * replica checks it against --replica-of's host). */
    char *args[] = {openssl,
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-keyout",
                    t->key,
                    "-out",
                    t->cert,
                    "-days",
                    "1",
                    "-subj",
                    "/CN=localhost",
                    "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    NULL};
    char out[256];
    int rc = serve_run_capture(args, out, sizeof out, 30000, -1, NULL);
    if (rc < 0 || access(t->cert, R_OK) != 0 || access(t->key, R_OK) != 0) {
        snprintf(t->why, sizeof t->why, "openssl req failed (%s)",
                 strerror(rc < 0 ? -rc : EIO));
        serve_tls_remove(t);
        return false;
    }
    return true;
}

void serve_tls_remove(serve_tls_files *t) {
    if (!t->dir[0]) return;
    unlink(t->cert);
    unlink(t->key);
    rmdir(t->dir);
    lab_tmp_forget(t->dir);
    t->dir[0] = '\0';
}

/* ---------------------------------------------------------------- rows */

enum { K_P1, K_P16, K_CONNECT, KINDS };

/* The values of one run. */
enum { TV_CPU, TV_PING_RPS, TV_SET_RPS, TV_GET_RPS, TV_P99, TV_COUNT };

static const lab_col cols[TV_COUNT] = {
    {"server_cpu_us_per_req", "server CPU µs/req", 0},
    {"ping_rps", "ping req/s", LAB_COL_RATE},
    {"set_rps", "set req/s", LAB_COL_RATE},
    {"get_rps", "get req/s", LAB_COL_RATE},
    {"p99_ms", "p99 ms, highest test", 0},
};

/* Requests per test, a run of some 10 to 30 s each on a 2-CPU machine
 * where other work runs too: redis-benchmark --tls is slower than
 * plaintext (its own encryption), and with -k 0 a request is a whole
 * handshake of both sides (near a millisecond of CPU each with OpenSSL
 * 3); --only tls with --quick takes a tenth. */
static const int full_requests[KINDS] = {30000, 200000, 2000};

typedef struct tctx {
    const serve_tls_files *files;
    server srv[SERVERS];
    int tls_port[SERVERS];
    int kind;
    int requests;
} tctx;

static tctx ctx[KINDS];

/* The TLS options both servers take (lull-kv's spelling is Redis'). */
static void tls_args(const serve_tls_files *t, const char *port,
                     const char **a) {
    const char *v[] = {"--tls-port",
                       port,
                       "--tls-cert-file",
                       t->cert,
                       "--tls-key-file",
                       t->key,
                       "--tls-ca-cert-file",
                       t->cert,
                       "--tls-auth-clients",
                       "no",
                       NULL};
    memcpy(a, v, sizeof v);
}

/* The value redis-benchmark's SETs left at key:__rand_int__ on each
 * server (-d 3: 3 bytes, the same whichever server got them). */
static char value_seen[SERVERS][4];

/* GET key:__rand_int__ over the plain port: 3 bytes, and the same bytes
 * as the last run against either server left. */
static bool value_back(int s, int port) {
    static const char req[] = "*2\r\n$3\r\nGET\r\n$16\r\nkey:__rand_int__\r\n";
    char got[9];
    int fd = serve_client_connect(port);
    if (fd < 0) return false;
    bool ok = serve_send_all(fd, req, sizeof req - 1) == 0 &&
              serve_recv_exact(fd, got, sizeof got) == 0 &&
              memcmp(got, "$3\r\n", 4) == 0 && memcmp(got + 7, "\r\n", 2) == 0;
    close(fd);
    if (!ok) return false;
    memcpy(value_seen[s], got + 4, 3);
    int other = s == S_KV ? S_REDIS : S_KV;
    return !value_seen[other][0] || memcmp(value_seen[other], got + 4, 3) == 0;
}

static int bench(const tctx *c, int s, double *v) {
    const server *srv = &c->srv[s];
    char p[16], n[16];
    snprintf(p, sizeof p, "%d", c->tls_port[s]);
    snprintf(n, sizeof n, "%d", c->requests);
    char *args[32] = {serve_bench_path,
                      "-h",
                      "127.0.0.1",
                      "-p",
                      p,
                      "--tls",
                      "--cacert",
                      (char *)c->files->cert,
                      "--tls-ciphersuites",
                      "TLS_AES_128_GCM_SHA256",
                      "--tls-ciphers",
                      "ECDHE-ECDSA-AES128-GCM-SHA256",
                      "-c",
                      "50",
                      "-n",
                      n,
                      "--csv"};
    int a = 17;
    bool connect = c->kind == K_CONNECT;
    args[a++] = "-t";
    args[a++] = connect ? "ping_mbulk" : "ping_mbulk,set,get";
    args[a++] = connect ? "-k" : "-P";
    args[a++] = connect ? "0" : c->kind == K_P1 ? "1" : "16";
    args[a] = NULL;
    static char buf[8192];
    double before, after;
    long sleeps;
    bool known = serve_proc_cpu(srv->pid, &before, &sleeps);
    int rc = serve_bench_run(args, buf, sizeof buf, serve_cpu_client, NULL);
    if (rc < 0) return rc;
    known = known && serve_proc_cpu(srv->pid, &after, &sleeps);
    double rps[TESTS] = {0}, p50[TESTS] = {0}, p99[TESTS] = {0};
    int want = connect ? 1 : TESTS;
    if (serve_parse_csv(buf, rps, p50, p99) != want || rps[T_PING] <= 0)
        return -EPROTO;
    if (!connect && !value_back(s, srv->port)) return -EPROTO;
    v[TV_PING_RPS] = rps[T_PING];
    if (!connect) {
        v[TV_SET_RPS] = rps[T_SET];
        v[TV_GET_RPS] = rps[T_GET];
    }
    v[TV_P99] = fmax(p99[T_PING], fmax(p99[T_SET], p99[T_GET]));
    if (known)
        v[TV_CPU] = (after - before) * 1e6 / ((double)c->requests * want);
    return 0;
}

static int measure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    const tctx *c = fig->ctx;
    int s = (int)row->tag;
    int rc = bench(c, s, v);
    if (rc < 0)
        printf("redis-benchmark --tls against %s failed: %s\n", server_name[s],
               strerror(-rc));
    return rc;
}

static void row_json(const lab_fig *fig, const lab_row *row, lab_json *j) {
    const tctx *c = fig->ctx;
    if (!row) {
        lab_json_field(j, "requests", c->requests);
        lab_json_field(j, "clients", 50);
        lab_json_field(j, "pipeline", c->kind == K_P16 ? 16 : 1);
        lab_json_field(j, "keepalive", c->kind == K_CONNECT ? 0 : 1);
        return;
    }
    lab_json_key(j, "server");
    lab_json_string(j, server_name[row->tag]);
}

/* A server's failure to start, without serve_server_ready's "exited at
 * start: " (the line says so already). */
static const char *reason(const char *why) {
    static const char prefix[] = "exited at start: ";
    return strncmp(why, prefix, sizeof prefix - 1) == 0
               ? why + sizeof prefix - 1
               : why;
}

/* Starts both servers with TLS; false (which could not, and why) when
 * either cannot. */
static bool start_both(tctx *c, const serve_tls_files *t, const char **note,
                       char *why, size_t size) {
    char port[SERVERS][16];
    const char *extra[SERVERS][12];
    for (int s = 0; s < SERVERS; s++) {
        c->tls_port[s] = serve_free_port();
        snprintf(port[s], sizeof port[s], "%d", c->tls_port[s]);
        tls_args(t, port[s], extra[s]);
    }
    if (!serve_start_kv(&c->srv[S_KV], extra[S_KV], serve_cpu_server)) {
        snprintf(why, size, "%s", reason(c->srv[S_KV].why));
        *note = "lull-kv without TLS";
        return false;
    }
    if (!serve_start_redis_with(&c->srv[S_REDIS], 0, serve_cpu_server, -1,
                                extra[S_REDIS])) {
        snprintf(why, size, "%s", reason(c->srv[S_REDIS].why));
        *note = "redis-server without TLS";
        serve_server_stop(&c->srv[S_KV]);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------- output */

static double med(const lab_fig *f, int s, int col) {
    return lab_row_median(&f->rows[s], col);
}

/* × = redis-server's CPU per request ÷ lull-kv's: ≥ 1/0.9 meets it. */
#define CPU_TARGET (1 / 0.9)

static double cpu_x(const lab_fig *f) {
    return med(f, S_REDIS, TV_CPU) / med(f, S_KV, TV_CPU);
}

static void verdict(lab_fig *const f[KINDS]) {
    lab_verdict *v = lab_verdict_add("serve", SERVE_V_TLS);
    if (!v) return;
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "TLS CPU %s -P 1, %s -P 16",
             lab_fmt_ratio(a, cpu_x(f[K_P1])),
             lab_fmt_ratio(b, cpu_x(f[K_P16])));
    snprintf(v->target, sizeof v->target, "≥ ×1.11");
    snprintf(v->peer, sizeof v->peer, "conn/s %s",
             lab_fmt_ratio(c, med(f[K_CONNECT], S_KV, TV_PING_RPS) /
                                  med(f[K_CONNECT], S_REDIS, TV_PING_RPS)));
    for (int k = K_P1; k <= K_P16; k++) {
        lab_verdict_spread(v, "redis-server's CPU/req",
                           lab_row_spread(&f[k]->rows[S_REDIS], TV_CPU));
        lab_verdict_bound(v, cpu_x(f[k]), CPU_TARGET, false);
    }
}

static void brief(lab_fig *const f[KINDS]) {
    const char *header[] = {"over TLS", "lull-kv", "redis-server", "×"};
    lab_table t;
    lab_table_init(&t, 4, header);
    static const char *const label[2] = {"-P 1", "-P 16"};
    for (int k = K_P1; k <= K_P16; k++) {
        char l[64];
        snprintf(l, sizeof l, "server CPU µs/req, %s", label[k]);
        serve_brief_row(&t, l, med(f[k], S_KV, TV_CPU),
                        med(f[k], S_REDIS, TV_CPU), cpu_x(f[k]));
    }
    for (int k = K_P1; k <= K_P16; k++) {
        char l[64];
        snprintf(l, sizeof l, "get req/s, %s", label[k]);
        serve_brief_row(
            &t, l, med(f[k], S_KV, TV_GET_RPS), med(f[k], S_REDIS, TV_GET_RPS),
            med(f[k], S_KV, TV_GET_RPS) / med(f[k], S_REDIS, TV_GET_RPS));
    }
    const lab_fig *g = f[K_CONNECT];
    serve_brief_row(&t, "new connections/s (-k 0)", med(g, S_KV, TV_PING_RPS),
                    med(g, S_REDIS, TV_PING_RPS),
                    med(g, S_KV, TV_PING_RPS) / med(g, S_REDIS, TV_PING_RPS));
    serve_brief_row(&t, "server CPU µs/connection", med(g, S_KV, TV_CPU),
                    med(g, S_REDIS, TV_CPU), cpu_x(g));
    lab_table_brief(&t, NULL);
    lab_detail("  × : CPU rows, redis-server's ÷ lull-kv's (above 1: lull-kv "
               "spends less); rates, lull-kv's ÷ redis-server's\n");
}

/* One line (the reason, within 100 columns), and the verdict's line with
 * a short note of what lacks TLS. */
static void not_run(const char *note, const char *why) {
    printf("TLS rows not run (%s): %.*s\n", note, 78 - (int)strlen(note), why);
    lab_verdict *v = lab_verdict_add("serve", SERVE_V_TLS);
    if (!v) return;
    snprintf(v->what, sizeof v->what, "TLS CPU");
    snprintf(v->note, sizeof v->note, "%s", note);
}

int serve_tls(const lab_options *opts, lab_json *json) {
    static char bench_help[32768];
    char *help[] = {serve_bench_path, "--help", NULL};
    /* redis-benchmark --help exits 1 on some versions: its text is what
     * counts. */
    serve_run_capture(help, bench_help, sizeof bench_help, 5000, -1, NULL);
    if (!strstr(bench_help, "--tls")) {
        not_run("redis-benchmark without --tls",
                "this redis-benchmark has no --tls");
        return 0;
    }
    static serve_tls_files files;
    if (!serve_tls_make(&files)) {
        not_run("no certificate (openssl)", files.why);
        return 0;
    }
    int rounds = lab_rounds(opts, 5, 1);
    char why[240];
    tctx *c0 = &ctx[0];
    memset(ctx, 0, sizeof ctx);
    memset(value_seen, 0, sizeof value_seen);
    const char *note = "";
    if (!start_both(c0, &files, &note, why, sizeof why)) {
        not_run(note, why);
        serve_tls_remove(&files);
        return 0;
    }
    lab_detail("\nover TLS: lull-kv and redis-server, each with a TLS port, "
               "one throwaway ECDSA P-256 certificate and "
               "TLS_AES_128_GCM_SHA256; redis-benchmark --tls -c 50 -t "
               "ping_mbulk,set,get at -P 1 (-n %d) and -P 16 (-n %d), and "
               "-t ping_mbulk -k 0 (a new connection per request, -n %d); "
               "server CPU from /proc/PID/stat; one unmeasured run of each "
               "against each server first; the server that goes first "
               "rotating; %d round%s, median [min–max]\n",
               full_requests[K_P1] / (opts->quick ? 10 : 1),
               full_requests[K_P16] / (opts->quick ? 10 : 1),
               full_requests[K_CONNECT] / (opts->quick ? 10 : 1), rounds,
               rounds == 1 ? "" : "s");
    static const char *const keys[KINDS] = {"tls_p1", "tls_p16", "tls_connect"};
    static const char *const titles[KINDS] = {
        "serve: over TLS, -P 1", "serve: over TLS, -P 16",
        "serve: over TLS, a new connection per request"};
    lab_fig *f[KINDS] = {NULL};
    int rc = 0;
    for (int k = 0; k < KINDS && rc == 0; k++) {
        ctx[k] = *c0;
        ctx[k].files = &files;
        ctx[k].kind = k;
        ctx[k].requests = full_requests[k] / (opts->quick ? 10 : 1);
        lab_fig_spec spec = {keys[k],  titles[k], NULL,   cols,
                             TV_COUNT, TV_CPU,    0,      measure,
                             NULL,     row_json,  &ctx[k]};
        if (!(f[k] = lab_fig_new(&spec))) {
            rc = -ENOMEM;
            break;
        }
        for (int s = 0; s < SERVERS; s++)
            lab_fig_add(f[k], s == S_KV ? "lull" : "redis-server",
                        s == S_KV ? LAB_ROW_LULL | LAB_ROW_BASE : 0, "%s",
                        server_name[s])
                ->tag = s;
    }
    /* Warm-up, unmeasured: each server's first TLS sessions and buffers. */
    for (int s = 0; s < SERVERS && rc == 0; s++) {
        double scratch[LAB_VALUES];
        bench(&ctx[K_P16], s, scratch);
    }
    for (int round = 0; round < rounds && rc == 0; round++)
        for (int k = 0; k < KINDS && rc == 0; k++) {
            lab_fig_round(f[k], opts, round);
            rc = lab_fig_error(f[k]);
        }
    serve_server_stop(&c0->srv[S_KV]);
    serve_server_stop(&c0->srv[S_REDIS]);
    serve_tls_remove(&files);
    if (rc == 0) {
        for (int k = 0; k < KINDS; k++)
            lab_fig_print(f[k]);
        brief(f);
        verdict(f);
        for (int k = 0; k < KINDS; k++)
            lab_fig_json(f[k], json);
    }
    for (int k = 0; k < KINDS; k++)
        lab_fig_free(f[k]);
    return rc;
}
