/* lull-kv: a Redis-protocol (RESP2) key-value server on one lull loop.
 *
 * An example of a real protocol server on lull's public API, and a vehicle
 * for benchmarks against clients nobody here wrote (redis-cli,
 * redis-benchmark, redis-py). Not a Redis replacement: docs/KV.md says
 * what it does and does not do. This file holds main (the options, the
 * listening sockets and the loop) and the socket transport (kv_net_socket:
 * lull streams); node.c a server's set-up, conn.c the client connections,
 * link.c replication, cmd.c the commands, store.c the keyspace, repl.c the
 * write log, resp.c the parser, expiry.c the expiry timer.
 *
 *   lull-kv [--port N] [--unix PATH] [--proto-max-bulk-len SIZE]
 *           [--client-query-buffer-limit SIZE]
 *           [--client-output-buffer-limit CLASS HARD SOFT SECONDS ...]
 *           [--replica-of HOST:PORT] [--repl-mode per-record|budget]
 *     --port N        TCP on 127.0.0.1:N (default 6380; 0 = any free port)
 *     --unix PATH     also listen on a Unix socket (an old file is removed)
 *     --proto-max-bulk-len SIZE  the longest argument (default 512mb;
 *                     --max-bulk is the same)
 *     --client-query-buffer-limit SIZE  the most a client's unparsed input
 *                     may hold (default 1gb)
 *     --client-output-buffer-limit CLASS HARD SOFT SECONDS  per class
 *                     (normal, replica or slave, pubsub), as Redis writes
 *                     it; several classes may follow one flag
 *     --replica-of H:P  be a replica of the primary at H:P (H numeric, or
 *                     localhost)
 *     --repl-mode M   how a primary sends to catching-up replicas: budget
 *                     (default) or per-record
 *   SIZE is bytes, or a number with k, kb, m, mb, g or gb (as Redis: k is
 *   1000, kb 1024). It prints "lull-kv: listening on 127.0.0.1:PORT" once
 *   ready, and runs until killed.
 *
 * Build:
 *   cc -O2 -o lull-kv server.c node.c conn.c link.c expiry.c cmd.c \
 *      cmd_types.c cmd_client.c types.c buf.c dict.c repl.c resp.c store.c \
 *      $(pkg-config --cflags --libs lull) -lm */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* getrandom */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------ the socket transport */

/* A primary that accepts but never answers the connect is given up on
 * after 2 s, and retried with the backoff. */
#define CONNECT_TIMEOUT_NS 2000000000ull

static lull_stream *stream_of(lull_endpoint *ep) {
    return LULL_CONTAINER_OF(ep, lull_stream, ep);
}

static int socket_read_stop(lull_endpoint *ep) {
    return lull_stream_read_stop(stream_of(ep));
}

static int socket_read_start(lull_endpoint *ep) {
    return lull_stream_read_start(stream_of(ep));
}

static int socket_shutdown(lull_endpoint *ep) {
    return lull_stream_shutdown(stream_of(ep));
}

/* "ip:port" (or "ip") of the connection's peer; "unix" for a Unix
 * socket. */
static void socket_peer(lull_endpoint *ep, char *s, size_t cap,
                        bool with_port) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    char ip[INET6_ADDRSTRLEN] = "?";
    snprintf(s, cap, "unix");
    if (getpeername(lull_stream_fd(stream_of(ep)), (struct sockaddr *)&sa,
                    &len) != 0)
        return;
    int port = 0;
    if (sa.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        port = ntohs(in->sin_port);
    } else if (sa.ss_family == AF_INET6) {
        struct sockaddr_in6 *in = (struct sockaddr_in6 *)&sa;
        inet_ntop(AF_INET6, &in->sin6_addr, ip, sizeof ip);
        port = ntohs(in->sin6_port);
    } else {
        return;
    }
    if (!with_port)
        snprintf(s, cap, "%s", ip);
    else if (sa.ss_family == AF_INET6)
        snprintf(s, cap, "[%s]:%d", ip, port);
    else
        snprintf(s, cap, "%s:%d", ip, port);
}

static void socket_connected(lull_stream *s, int status) {
    master_connected(s->ep.data, status);
}

static int socket_connect(server *srv) {
    master *m = &srv->m;
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .connect_timeout_ns = CONNECT_TIMEOUT_NS};
    m->t.stream.ep.data = srv;
    m->ep = &m->t.stream.ep;
    return lull_stream_connect_tcp(srv->loop, &m->t.stream, m->addr, m->port,
                                   &o, socket_connected);
}

static void socket_io_counts(const lull_endpoint *ep, uint64_t *reads,
                             uint64_t *writes) {
    const lull_stream *s = LULL_CONTAINER_OF(ep, const lull_stream, ep);
    *reads = s->reads;
    *writes = s->writes;
}

const kv_net kv_net_socket = {socket_read_stop, socket_read_start,
                              socket_shutdown,  socket_peer,
                              socket_connect,   socket_io_counts};

/* The one server of this process, for INFO stats (kv has no pointer back
 * to it). */
static server *stats_server;

/* INFO stats: what lull counted of the system calls serving clients
 * costs: its streams' reads that returned data and their writes (one
 * sendmsg each), under the names Redis gives its own, and the loop's
 * polls (epoll_wait calls) and wakeups (lull_loop_metrics). Not counted:
 * a read that finds nothing (lull reads once per readiness, so only a
 * spurious one), accept and close, and epoll_ctl (none while a
 * connection's interest stays the same). */
static void info_stats(kv *k, buf *b) {
    (void)k;
    uint64_t reads, writes;
    conn_io_totals(stats_server, &reads, &writes);
    lull_metrics m;
    lull_loop_metrics(stats_server->loop, &m);
    char text[320];
    int n = snprintf(text, sizeof text,
                     "total_reads_processed:%" PRIu64 "\r\n"
                     "total_writes_processed:%" PRIu64 "\r\n"
                     "loop_polls:%" PRIu64 "\r\n"
                     "loop_wakeups:%" PRIu64 "\r\n",
                     reads, writes, m.polls, m.wakeups);
    if (n > 0 && (size_t)n < sizeof text) buf_put(b, text, (size_t)n);
}

static void accept_on(server *srv, lull_server *ls) {
    conn *c = conn_new(srv);
    if (!c) return; /* the waiting connection is closed when we return */
    /* Raw: max_frame only bounds one send. lull-kv bounds what a
     * connection holds itself (run_commands' backpressure), so a reply is
     * never refused for its size: a 17 MiB GET answer is one frame. */
    lull_stream_options o = {.flags = LULL_STREAM_RAW, .max_frame = SIZE_MAX};
    if (lull_server_accept(ls, &c->t.stream, &o) < 0) {
        conn_abort(c);
        return;
    }
    conn_start(c, &c->t.stream.ep);
}

/* lull_server has no data pointer: the server is found around it. */
static void accept_tcp(lull_server *ls) {
    accept_on(LULL_CONTAINER_OF(ls, server, tcp), ls);
}

static void accept_unix(lull_server *ls) {
    accept_on(LULL_CONTAINER_OF(ls, server, unx), ls);
}

/* ------------------------------------------------------------- main */

/* The options, as --help prints them (to stdout, exit 0) and a wrong
 * option's message ends with (to stderr, exit 2). */
static const char usage_text[] =
    "usage: lull-kv [OPTION]...\n"
    "A Redis-protocol (RESP2) key-value server on one lull loop.\n"
    "\n"
    "  --port N          TCP on 127.0.0.1:N (default 6380; 0 = any free port)\n"
    "  --unix PATH       also listen on a Unix socket (an old file is "
    "removed)\n"
    "  --proto-max-bulk-len SIZE\n"
    "                    the longest argument (default 512mb; --max-bulk is\n"
    "                    the same)\n"
    "  --client-query-buffer-limit SIZE\n"
    "                    the most a client's unparsed input may hold\n"
    "                    (default 1gb)\n"
    "  --client-output-buffer-limit CLASS HARD SOFT SECONDS ...\n"
    "                    per class (normal, replica or slave, pubsub), as\n"
    "                    Redis writes it; several classes may follow\n"
    "  --replica-of HOST:PORT\n"
    "                    be a replica of that primary (HOST numeric, or\n"
    "                    localhost)\n"
    "  --repl-mode budget|per-record\n"
    "                    how a primary sends to catching-up replicas\n"
    "                    (default budget)\n"
    "  --help            print this and exit\n"
    "\n"
    "SIZE is bytes, or a number with k, kb, m, mb, g or gb (k is 1000, kb\n"
    "1024). lull-kv prints \"lull-kv: listening on 127.0.0.1:PORT\" once\n"
    "ready and runs until killed. docs/KV.md has the commands it serves.\n";

static int usage(void) {
    fputs(usage_text, stderr);
    return 2;
}

/* A size as Redis reads one (memtoll): digits, then no unit or b (bytes),
 * k / m / g (powers of 1000) or kb / mb / gb (powers of 1024), in any
 * case. */
static bool parse_size(const char *s, size_t *out) {
    static const struct {
        const char *unit;
        unsigned long long mul;
    } units[] = {{"", 1},           {"b", 1},          {"k", 1000},
                 {"kb", 1024},      {"m", 1000000},    {"mb", 1 << 20},
                 {"g", 1000000000}, {"gb", 1ull << 30}};
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            if (v > SIZE_MAX / units[i].mul) return false;
            *out = (size_t)(v * units[i].mul);
            return true;
        }
    return false;
}

/* --client-output-buffer-limit's words: CLASS HARD SOFT SECONDS, one or
 * more times. */
static bool parse_obl(server *srv, char **w, int n) {
    if (n == 0 || n % 4) return false;
    for (int i = 0; i < n; i += 4) {
        int cls;
        if (strcasecmp(w[i], "normal") == 0)
            cls = CLASS_NORMAL;
        else if (strcasecmp(w[i], "replica") == 0 ||
                 strcasecmp(w[i], "slave") == 0)
            cls = CLASS_REPLICA;
        else if (strcasecmp(w[i], "pubsub") == 0)
            cls = CLASS_PUBSUB;
        else
            return false;
        obuf_limit l;
        size_t secs;
        if (!parse_size(w[i + 1], &l.hard) || !parse_size(w[i + 2], &l.soft) ||
            !parse_size(w[i + 3], &secs) || secs > UINT32_MAX)
            return false;
        l.soft_ns = (uint64_t)secs * 1000000000u;
        srv->obl[cls] = l;
    }
    return true;
}

/* The words of a value that may come as one argument ("replica 256mb
 * 64mb 60", as redis.conf writes it) or as several (until the next
 * --flag): split into w[], at most cap. */
static int collect_words(int argc, char **argv, int *i, char *text, size_t bcap,
                         char **w, int cap) {
    size_t used = 0;
    int n = 0;
    while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
        const char *a = argv[++*i];
        size_t len = strlen(a);
        if (used + len + 1 > bcap) return -1;
        memcpy(text + used, a, len + 1);
        for (char *t = strtok(text + used, " \t"); t; t = strtok(NULL, " \t")) {
            if (n == cap) return -1;
            w[n++] = t;
        }
        used += len + 1;
    }
    return n;
}

/* CONFIG GET's answers for the limits, in Redis' forms. */
static char config_text[4][160];
static const char *config_table[4][2];

static void fill_config(server *srv) {
    snprintf(config_text[0], sizeof config_text[0], "%zu", srv->lim.max_bulk);
    snprintf(config_text[1], sizeof config_text[1], "%zu", srv->qbuf_limit);
    const obuf_limit *o = srv->obl;
    snprintf(config_text[2], sizeof config_text[2],
             "normal %zu %zu %" PRIu64 " slave %zu %zu %" PRIu64
             " pubsub %zu %zu %" PRIu64,
             o[0].hard, o[0].soft, o[0].soft_ns / 1000000000u, o[1].hard,
             o[1].soft, o[1].soft_ns / 1000000000u, o[2].hard, o[2].soft,
             o[2].soft_ns / 1000000000u);
    static const char *const names[] = {"proto-max-bulk-len",
                                        "client-query-buffer-limit",
                                        "client-output-buffer-limit"};
    for (int i = 0; i < 3; i++) {
        config_table[i][0] = names[i];
        config_table[i][1] = config_text[i];
    }
    srv->kv.config = config_table;
    srv->kv.nconfig = 3;
}

/* HOST:PORT (the last ':' splits, so [::1]:6380 works). */
static bool parse_hostport(const char *s, master *m) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof m->host)
        return false;
    memcpy(m->host, s, (size_t)(colon - s));
    m->host[colon - s] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port <= 0 || port > 65535) return false;
    m->port = (int)port;
    /* lull takes numeric addresses only (a name lookup blocks). */
    snprintf(m->addr, sizeof m->addr, "%s",
             strcmp(m->host, "localhost") == 0 ? "127.0.0.1" : m->host);
    return true;
}

/* This primary's replid: 40 random hex digits, new on every start (its log
 * starts empty on every start too). */
static void make_replid(char *id) {
    unsigned char r[20];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        /* No entropy source: time and pid still differ per start. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                     ((uint64_t)getpid() << 40);
        for (size_t i = 0; i < sizeof r; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r[i] = (unsigned char)(x >> 56);
        }
    }
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(id + 2 * i, 3, "%02x", r[i]);
}

int main(int argc, char **argv) {
    static server srv;
    int port = 6380;
    const char *unix_path = NULL;
    server_defaults(&srv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (more && strcmp(a, "--port") == 0) {
            port = atoi(argv[++i]);
        } else if (more && strcmp(a, "--unix") == 0) {
            unix_path = argv[++i];
        } else if (more && (strcmp(a, "--proto-max-bulk-len") == 0 ||
                            strcmp(a, "--max-bulk") == 0)) {
            if (!parse_size(argv[++i], &srv.lim.max_bulk) ||
                srv.lim.max_bulk == 0)
                return usage();
        } else if (more && strcmp(a, "--client-query-buffer-limit") == 0) {
            if (!parse_size(argv[++i], &srv.qbuf_limit) || srv.qbuf_limit == 0)
                return usage();
        } else if (strcmp(a, "--client-output-buffer-limit") == 0) {
            char text[512], *w[32];
            int n = collect_words(argc, argv, &i, text, sizeof text, w, 32);
            if (n < 0 || !parse_obl(&srv, w, n)) return usage();
        } else if (more && strcmp(a, "--replica-of") == 0) {
            if (!parse_hostport(argv[++i], &srv.m)) return usage();
            srv.kv.replica = true;
        } else if (more && strcmp(a, "--repl-mode") == 0) {
            i++;
            if (strcmp(argv[i], "per-record") == 0)
                srv.per_record = true;
            else if (strcmp(argv[i], "budget") != 0)
                return usage();
        } else {
            return usage();
        }
    }
    if (port < 0 || port > 65535) return usage();
    fill_config(&srv);
    make_replid(srv.kv.replid);
    lull_loop *loop;
    int rc = lull_loop_new(&loop, NULL);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (rc < 0 || (rc = server_open(&srv, loop, &kv_net_socket,
                                    (int64_t)now.tv_sec * 1000 +
                                        now.tv_nsec / 1000000)) < 0) {
        fprintf(stderr, "lull-kv: %s\n", strerror(-rc));
        return 1;
    }
    stats_server = &srv;
    srv.kv.stats = info_stats;
    rc = lull_server_listen_tcp(loop, &srv.tcp, "127.0.0.1", port, 0,
                                accept_tcp);
    if (rc < 0) {
        fprintf(stderr, "lull-kv: listen on 127.0.0.1:%d: %s\n", port,
                strerror(-rc));
        return 1;
    }
    if (unix_path) {
        unlink(unix_path); /* a socket file left by an earlier run */
        rc = lull_server_listen_unix(loop, &srv.unx, unix_path, 0, accept_unix);
        if (rc < 0) {
            fprintf(stderr, "lull-kv: listen on %s: %s\n", unix_path,
                    strerror(-rc));
            return 1;
        }
        srv.has_unix = true;
    }
    srv.port = lull_server_port(&srv.tcp);
    printf("lull-kv: listening on 127.0.0.1:%d%s%s\n", srv.port,
           unix_path ? " and " : "", unix_path ? unix_path : "");
    fflush(stdout);
    server_start(&srv);
    lull_loop_run(loop, LULL_RUN_DEFAULT);
    server_stop(&srv);
    lull_server_close(&srv.tcp);
    if (srv.has_unix) lull_server_close(&srv.unx);
    server_free(&srv);
    lull_loop_free(loop);
    return 0;
}
