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
 *           [--repl-catchup auto|thread|loop] [--repl-sender-cpu N]
 *           [--repl-backlog-size SIZE] [--repl-snapshot fork|inline]
 *           [--bind ADDR ...] [--requirepass P] [--masterauth P]
 *           [--protected-mode yes|no] [--tls-port N --tls-cert-file F
 *           --tls-key-file F --tls-ca-cert-file F]
 *           [--tls-auth-clients yes|no|optional] [--tls-replication yes|no]
 *   (usage_text below says what each does; docs/KV.md as Redis means it)
 *     --port N        TCP on 127.0.0.1:N (default 6380; 0 = any free port)
 *     --unix PATH     also listen on a Unix socket (a stale socket file is
 *                     replaced; a live one, or another file, refused)
 *     --proto-max-bulk-len SIZE  the longest argument (default 512mb, at
 *                     least 1mb; --max-bulk is the same)
 *     --client-query-buffer-limit SIZE  the most a client's unparsed input
 *                     may hold (default 1gb, at least 1mb)
 *     --client-output-buffer-limit CLASS HARD SOFT SECONDS  per class
 *                     (normal, replica or slave, pubsub), as Redis writes
 *                     it; several classes may follow one flag
 *     --replica-of H:P  be a replica of the primary at H:P (H a name,
 *                     looked up before each connect, or numeric)
 *     --repl-mode M   how a primary's loop sends to catching-up replicas:
 *                     budget (default) or per-record
 *     --repl-catchup W  where a catching-up replica's backlog is sent from:
 *                     auto (default: a thread of its own with two CPUs or
 *                     more), thread, or loop (--repl-mode's sender)
 *     --repl-sender-cpu N  the sender thread's and snapshot child's CPU
 *     --repl-backlog-size SIZE  the write log a primary keeps for replicas
 *                     to continue from (default 1mb, at least 16kb)
 *     --repl-snapshot H  how a full resync's snapshot is made: fork
 *                     (default: a child writes it) or inline (the loop)
 *     --repl-backlog-always yes|no  keep the backlog before a replica
 *                     first connects (default no, as Redis: none)
 *   SIZE is bytes, or a number with k, kb, m, mb, g or gb (as Redis: k is
 *   1000, kb 1024). It prints "lull-kv: listening on 127.0.0.1:PORT" once
 *   ready, and runs until SIGINT or SIGTERM (then closes every connection
 *   and exits 0).
 *
 * Build:
 *   cc -O2 -o lull-kv server.c node.c conn.c link.c expiry.c cmd.c \
 *      cmd_types.c cmd_client.c types.c buf.c dict.c repl.c resp.c store.c \
 *      snap.c \
 *      $(pkg-config --cflags --libs lull) -lm */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* getrandom */
#include "server.h"
#include "dict.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------ the socket transport */

/* A primary that accepts but never answers the connect is given up on
 * after 2 s, and retried with the backoff. */
#define CONNECT_TIMEOUT_NS 2000000000ull

/* The socket's descriptor and counts of a client connection: a stream,
 * or the stream under a TLS connection (conn.tls). */
static const lull_stream *conn_stream(const lull_endpoint *ep) {
    const conn *c = ep->data;
    return c->tls ? &c->t.tls.stream : &c->t.stream;
}

/* Pausing, resuming and shutting: the stream's own calls on a stream (a
 * paused stream still sees its peer's reset when it writes, so a dead
 * replica's link closes while paused; lull_endpoint_read_stop holds that
 * close back too), the frame interface's on TLS. */
static int socket_read_stop(lull_endpoint *ep) {
    conn *c = ep->data;
    return c->tls ? lull_endpoint_read_stop(ep)
                  : lull_stream_read_stop(&c->t.stream);
}

static int socket_read_start(lull_endpoint *ep) {
    conn *c = ep->data;
    return c->tls ? lull_endpoint_read_start(ep)
                  : lull_stream_read_start(&c->t.stream);
}

static int socket_shutdown(lull_endpoint *ep) {
    conn *c = ep->data;
    return c->tls ? lull_endpoint_shutdown(ep)
                  : lull_stream_shutdown(&c->t.stream);
}

/* The peer's address of a client connection, or false (a Unix socket, or
 * the peer gone). */
static bool peer_addr(lull_endpoint *ep, struct sockaddr_storage *sa) {
    socklen_t len = sizeof *sa;
    return getpeername(lull_stream_fd(conn_stream(ep)), (struct sockaddr *)sa,
                       &len) == 0 &&
           (sa->ss_family == AF_INET || sa->ss_family == AF_INET6);
}

/* Whether the connection is over TCP (its own end's family: a peer
 * that reset before the accept has no address any more, but the socket
 * still has its family). */
static bool socket_is_tcp(lull_endpoint *ep) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    return getsockname(lull_stream_fd(conn_stream(ep)), (struct sockaddr *)&sa,
                       &len) == 0 &&
           (sa.ss_family == AF_INET || sa.ss_family == AF_INET6);
}

/* "ip:port" (or "ip") of the connection's peer; "unix" for a Unix
 * socket; "?:0" (or "?"), as Redis says it, for a TCP peer that has no
 * address any more (it reset before the accept). */
static void socket_peer(lull_endpoint *ep, char *s, size_t cap,
                        bool with_port) {
    struct sockaddr_storage sa;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (!peer_addr(ep, &sa)) {
        snprintf(s, cap, "%s",
                 !socket_is_tcp(ep) ? "unix"
                 : with_port        ? "?:0"
                                    : "?");
        return;
    }
    int port = 0;
    if (sa.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        port = ntohs(in->sin_port);
    } else {
        struct sockaddr_in6 *in = (struct sockaddr_in6 *)&sa;
        inet_ntop(AF_INET6, &in->sin6_addr, ip, sizeof ip);
        port = ntohs(in->sin6_port);
    }
    if (!with_port)
        snprintf(s, cap, "%s", ip);
    else if (sa.ss_family == AF_INET6)
        snprintf(s, cap, "[%s]:%d", ip, port);
    else
        snprintf(s, cap, "%s:%d", ip, port);
}

/* Protected mode's test, as Redis': a Unix socket, 127.0.0.0/8, ::1 and
 * ::ffff:127.0.0.0/104 are local. */
static bool peer_is_loopback(lull_endpoint *ep) {
    struct sockaddr_storage sa;
    if (!peer_addr(ep, &sa))
        return true; /* Unix (or gone: nothing to refuse) */
    if (sa.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&sa)->sin_addr.s_addr) >> 24) ==
               127;
    const struct in6_addr *a = &((struct sockaddr_in6 *)&sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a)) return true;
    return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
}

static void socket_connected(lull_stream *s, int status) {
    master_connected(s->ep.data, status);
}

/* --tls-replication: the handshake with the primary completed; it is the
 * link's "connected". A failed one reaches only master_closed. */
static void tls_master_ready(lull_tls *tls) {
    master_connected(tls->ep.data, 0);
}

/* TCP keepalive: the kernel probes a connection silent for `idle` s, 3
 * times `interval` s apart, then fails it (ETIMEDOUT); a live peer's
 * kernel answers them. No loop timer, no wakeup: an idle connection
 * stays quiet. A peer whose host vanished (power lost, a partition: no
 * FIN, no RST) is found so:
 *  - the replica's link: 60 s, 10 s apart (Redis' repl-timeout's scale);
 *    before, the link stayed "up" for ever, the replica never retrying
 *    (master_closed retries);
 *  - a client: Redis' tcp-keepalive default, 300 s, 100 s apart; before,
 *    its connection, its maxclients place and its subscriptions stayed
 *    for ever. */
static void keepalive(int fd, int idle, int interval) {
    int on = 1, probes = 3;
    if (fd < 0) return;
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval,
                     sizeof interval);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

static int socket_connect(server *srv) {
    master *m = &srv->m;
    int rc;
    if (srv->repl_tls) {
        lull_tls_options o = {
            .stream = {.flags = LULL_STREAM_RAW,
                       .connect_timeout_ns = CONNECT_TIMEOUT_NS},
            .server_name = m->host,
            .on_handshake = tls_master_ready};
        m->t.tls.ep.data = srv;
        m->ep = &m->t.tls.ep;
        rc = lull_tls_connect_tcp(srv->loop, &m->t.tls, srv->repl_tls, m->addr,
                                  m->port, &o);
        if (rc == 0) keepalive(lull_stream_fd(&m->t.tls.stream), 60, 10);
        return rc;
    }
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .connect_timeout_ns = CONNECT_TIMEOUT_NS};
    m->t.stream.ep.data = srv;
    m->ep = &m->t.stream.ep;
    rc = lull_stream_connect_tcp(srv->loop, &m->t.stream, m->addr, m->port, &o,
                                 socket_connected);
    if (rc == 0) keepalive(lull_stream_fd(&m->t.stream), 60, 10);
    return rc;
}

static void socket_io_counts(const lull_endpoint *ep, uint64_t *reads,
                             uint64_t *writes) {
    const lull_stream *s = conn_stream(ep);
    *reads = s->reads;
    *writes = s->writes;
}

/* The socket of a plaintext connection, for the catch-up sender thread;
 * none under TLS (its bytes are the session's). */
static int socket_fd(lull_endpoint *ep) {
    conn *c = ep->data;
    return c->tls ? -1 : lull_stream_fd(&c->t.stream);
}

/* kv_net.local: the socket's own end, by getsockname (CLIENT LIST only,
 * so no connection pays for it at accept). */
static int socket_local(lull_endpoint *ep, bool primary, char *s, size_t cap,
                        bool *unix_sock) {
    const lull_stream *st;
    if (primary) {
        server *srv = ep->data;
        st = srv->repl_tls ? &srv->m.t.tls.stream : &srv->m.t.stream;
    } else {
        st = conn_stream(ep);
    }
    int fd = lull_stream_fd(st);
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    *unix_sock = false;
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        snprintf(s, cap, "?:0");
        return fd;
    }
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa.ss_family == AF_UNIX) {
        /* Redis' "path:0" for a Unix socket, both ends. */
        const struct sockaddr_un *un = (const struct sockaddr_un *)&sa;
        size_t max = len > offsetof(struct sockaddr_un, sun_path)
                         ? len - offsetof(struct sockaddr_un, sun_path)
                         : 0;
        *unix_sock = true;
        snprintf(s, cap, "%.*s:0", (int)strnlen(un->sun_path, max),
                 un->sun_path);
    } else if (sa.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(s, cap, "%s:%d", ip, ntohs(in->sin_port));
    } else {
        const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)&sa;
        inet_ntop(AF_INET6, &in->sin6_addr, ip, sizeof ip);
        snprintf(s, cap, "[%s]:%d", ip, ntohs(in->sin6_port));
    }
    return fd;
}

/* The primary's name, looked up on the default pool: the first address
 * getaddrinfo gives (its order is RFC 6724's, as Redis' connect takes the
 * first), as text for the connect. */
static void looked_up(lull_lookup *req, int status, struct addrinfo *res) {
    server *srv = req->data;
    master *m = &srv->m;
    m->lookup_left = false;
    const char *failed = NULL;
    if (status == -ECANCELED)
        failed = "cancelled";
    else if (status == EAI_SYSTEM)
        failed = strerror(req->sys_errno);
    else if (status != 0)
        failed = gai_strerror(status);
    else if (!res)
        failed = "no address";
    /* Numeric, with a link-local address's zone ("%eth0"), which lull's
     * connect reads back: inet_ntop would drop it. */
    int rc = failed ? 0
                    : getnameinfo(res->ai_addr, res->ai_addrlen, m->addr,
                                  sizeof m->addr, NULL, 0, NI_NUMERICHOST);
    if (rc != 0) failed = gai_strerror(rc);
    if (res) freeaddrinfo(res);
    master_resolved(srv, failed);
}

static int socket_resolve(server *srv) {
    static const struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                          .ai_socktype = SOCK_STREAM,
                                          .ai_flags = AI_ADDRCONFIG};
    lull_pool *pool;
    int rc = lull_pool_default(&pool);
    if (rc < 0) return rc;
    srv->m.lookup.data = srv;
    return lull_lookup_start(srv->loop, pool, &srv->m.lookup, srv->m.host, NULL,
                             &hints, looked_up);
}

/* A lookup not started yet is dropped; a running one cannot be, and
 * getaddrinfo may wait tens of seconds on a resolver that does not
 * answer: it is left (lookup_left), and the exit does not wait for it. */
static void socket_resolve_cancel(server *srv) {
    srv->m.lookup_left = lull_lookup_cancel(&srv->m.lookup) == -EBUSY;
}

const kv_net kv_net_socket = {
    socket_read_stop, socket_read_start,    socket_shutdown, socket_peer,
    socket_connect,   socket_io_counts,     socket_fd,       socket_local,
    socket_resolve,   socket_resolve_cancel};

/* The one server of this process, for INFO stats (kv has no pointer back
 * to it). */
static server *stats_server;

/* INFO stats: what lull counted of the system calls serving clients
 * costs: its streams' reads that returned data and their writes (one
 * send or sendmsg each), under the names Redis gives its own, and the loop's
 * polls (epoll_wait calls) and wakeups (lull_loop_metrics); and, as
 * Redis', the clients refused past maxclients. Not counted:
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
                     "loop_wakeups:%" PRIu64 "\r\n"
                     "rejected_connections:%" PRIu64 "\r\n"
                     "evicted_clients:%" PRIu64 "\r\n",
                     reads, writes, m.polls, m.wakeups, stats_server->rejected,
                     stats_server->evicted_clients);
    if (n > 0 && (size_t)n < sizeof text) buf_put(b, text, (size_t)n);
}

/* Redis 7's refusal in protected mode, word for word. */
static const char denied[] =
    "-DENIED Redis is running in protected mode because protected mode is "
    "enabled and no password is set for the default user. In this mode "
    "connections are only accepted from the loopback interface. If you want "
    "to connect from external computers to Redis you may adopt one of the "
    "following solutions: 1) Just disable protected mode sending the command "
    "'CONFIG SET protected-mode no' from the loopback interface by connecting "
    "to Redis from the same host the server is running, however MAKE SURE "
    "Redis is not publicly accessible from internet if you do so. Use CONFIG "
    "REWRITE to make this change permanent. 2) Alternatively you can just "
    "disable the protected mode by editing the Redis configuration file, and "
    "setting the protected mode option to 'no', and then restarting the "
    "server. 3) If you started the server manually just for testing, restart "
    "it with the '--protected-mode no' option. 4) Setup a an authentication "
    "password for the default user. NOTE: You only need to do one of the "
    "above things in order for the server to start accepting connections "
    "from the outside.\r\n";

/* One listening socket: an address of --bind, plaintext or TLS, or the
 * Unix socket (lull_server has no data pointer: this is found around
 * it). */
typedef struct listener {
    lull_server ls;
    server *srv;
    lull_tls_ctx *tls; /* NULL: plaintext */
    bool tcp;          /* not the Unix socket: clients get keepalive */
    bool paused;       /* accepting paused (out of fds), said in the log */
    char at[96];       /* its address, for the log */
} listener;

#define MAX_BIND 16

/* lull_server_accept's errors once the listening socket can accept no
 * more (shut down, or no longer a listening socket): no retry helps. */
static bool listener_gone(int rc) {
    return rc == -EINVAL || rc == -EBADF || rc == -ENOTSOCK ||
           rc == -EOPNOTSUPP;
}

/* lull_server_accept's errors while accepting is paused, out of fds or
 * kernel memory: lull retries by itself, the clients wait in the backlog;
 * the log says so once, and again when accepting resumes. */
static bool accept_paused(int rc) {
    return rc == -EMFILE || rc == -ENFILE || rc == -ENOBUFS || rc == -ENOMEM;
}

/* A listener that failed for good is closed and said so. The others go
 * on; with none left nobody can reach the server, so it stops (main then
 * exits with status 1) rather than serve on unseen. */
static void stop_listening(listener *l, int err) {
    server *srv = l->srv;
    lull_server_close(&l->ls);
    srv->listening--;
    srv_log(srv, "stopped accepting on %s: %s", l->at, strerror(err));
    if (srv->listening > 0) return;
    srv_log(srv, "no address left to accept on: stopping");
    lull_loop_stop(srv->loop);
}

static void accept_on(lull_server *ls) {
    listener *l = LULL_CONTAINER_OF(ls, listener, ls);
    server *srv = l->srv;
    conn *c = conn_new(srv);
    if (!c) return; /* the waiting connection is closed when we return */
    /* Raw: max_frame only bounds one send. lull-kv bounds what a
     * connection holds itself (run_commands' backpressure), so a reply is
     * never refused for its size: a 17 MiB GET answer is one frame. */
    lull_stream_options o = {.flags = LULL_STREAM_RAW, .max_frame = SIZE_MAX};
    int rc;
    if (l->tls) {
        lull_tls_options to = {.stream = o};
        c->tls = true;
        rc = lull_tls_accept(ls, &c->t.tls, l->tls, &to);
    } else {
        rc = lull_server_accept(ls, &c->t.stream, &o);
    }
    if (rc < 0) {
        conn_abort(c);
        if (listener_gone(rc)) stop_listening(l, -rc);
        if (accept_paused(rc) && !l->paused) {
            l->paused = true;
            srv_log(srv, "accepting on %s paused: %s (new clients wait)", l->at,
                    strerror(-rc));
        }
        return;
    }
    if (l->paused) {
        l->paused = false;
        srv_log(srv, "accepting on %s again", l->at);
    }
    lull_endpoint *ep = c->tls ? &c->t.tls.ep : &c->t.stream.ep;
    if (l->tcp)
        keepalive(lull_stream_fd(c->tls ? &c->t.tls.stream : &c->t.stream), 300,
                  100);
    if (!conn_start(c, ep)) return;
    if (srv->protected_mode && !srv->requirepass && !peer_is_loopback(ep))
        conn_refuse(c, denied, "refused by protected mode");
}

/* --bind's IPv6 unspecified address ("::", "[::]"). */
static bool is_v6_any(const char *host) {
    char text[INET6_ADDRSTRLEN];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n >= sizeof text) return false;
    memcpy(text, host, n);
    text[n] = '\0';
    struct in6_addr a;
    return inet_pton(AF_INET6, text, &a) == 1 && IN6_IS_ADDR_UNSPECIFIED(&a);
}

/* "::" beside an IPv4 address of --bind listens on IPv6 alone
 * (IPV6_V6ONLY), as Redis' IPv6 listeners do. Dual-stack, the kernel's
 * default, it claimed the port on every IPv4 address too, so redis.conf's
 * "every address", `bind 0.0.0.0 ::` (either order), or `:: 127.0.0.1`,
 * stopped lull-kv at start with EADDRINUSE. */
static int listen_v6_only_any(lull_loop *loop, lull_server *ls, int port,
                              lull_connection_fn fn) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                              .sin6_port = htons((uint16_t)port),
                              .sin6_addr = IN6ADDR_ANY_INIT};
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return lull_server_open(loop, ls, fd, fn); /* owns fd, also on failure */
}

/* ------------------------------------------------------------- main */

/* maxclients: what RLIMIT_NOFILE, its soft limit raised to the hard one,
 * leaves once the server's own descriptors
 * are set aside (Redis sets aside 32 too; here the listening sockets come
 * on top: epoll, the signalfds, lull's eventfds, stdio, a replica's link
 * and the catch-up thread's socket are in the 32). 0: no bound. */
static size_t clients_fd_bound(int listeners) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    /* The soft limit is a default (often 1,024) that a server may lift to
     * the hard one itself, as redis-server does: raise it first. */
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t soft = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = soft;
    }
    if (rl.rlim_cur == RLIM_INFINITY) return 0;
    rlim_t reserve = 32 + (rlim_t)listeners;
    return (size_t)(rl.rlim_cur > 2 * reserve ? rl.rlim_cur - reserve
                                              : rl.rlim_cur / 2);
}

/* The options, as --help prints them (to stdout, exit 0) and a wrong
 * option's message ends with (to stderr, exit 2). */
static const char usage_text[] =
    "usage: lull-kv [OPTION]...\n"
    "A Redis-protocol (RESP2) key-value server on one lull loop.\n"
    "\n"
    "  --port N          the TCP port on each --bind address (default 6380;\n"
    "                    0 = any free port)\n"
    "  --unix PATH       also listen on a Unix socket (a stale socket file\n"
    "                    is replaced; a live one, or another file, refused)\n"
    "  --proto-max-bulk-len SIZE\n"
    "                    the longest argument (default 512mb, at least 1mb;\n"
    "                    --max-bulk is the same)\n"
    "  --client-query-buffer-limit SIZE\n"
    "                    the most a client's unparsed input may hold\n"
    "                    (default 1gb, at least 1mb)\n"
    "  --client-output-buffer-limit CLASS HARD SOFT SECONDS ...\n"
    "                    per class (normal, replica or slave, pubsub), as\n"
    "                    Redis writes it; several classes may follow\n"
    "                    (default normal 1gb 0 0, not Redis' 0 0 0)\n"
    "  --maxmemory-clients SIZE\n"
    "                    the most all clients' buffers may hold together;\n"
    "                    past it the ones holding the most are closed (bytes,\n"
    "                    0 = none; default a quarter of the memory lull-kv\n"
    "                    may use, not Redis' 0)\n"
    "  --replica-of HOST:PORT\n"
    "                    be a replica of that primary (HOST a name, looked\n"
    "                    up before each connect, or numeric; [IPv6])\n"
    "  --repl-mode budget|per-record\n"
    "                    how a primary's loop sends to catching-up replicas\n"
    "                    (default budget)\n"
    "  --repl-catchup auto|thread|loop\n"
    "                    where a catching-up replica's backlog is sent from:\n"
    "                    a thread of its own, or the loop (default auto: the\n"
    "                    thread when the process may use two CPUs or more)\n"
    "  --repl-sender-cpu N\n"
    "                    pin the sender thread and snapshot child to CPU N\n"
    "  --repl-backlog-size SIZE\n"
    "                    the write log kept for replicas to continue from\n"
    "                    (default 1mb, at least 16kb); one further back\n"
    "                    gets a snapshot\n"
    "  --repl-snapshot fork|inline\n"
    "                    a full resync's snapshot is written by a forked\n"
    "                    child (default) or by the loop at once\n"
    "  --repl-backlog-always yes|no\n"
    "                    keep the backlog before a replica first connects\n"
    "                    (default no: as Redis, writes are not logged until\n"
    "                    then, and that replica gets a snapshot)\n"
    "  --bind ADDR [ADDR ...]\n"
    "                    listen on these numeric addresses, IPv4 or IPv6\n"
    "                    (default 127.0.0.1; :: beside IPv4: IPv6 only)\n"
    "  --requirepass PASS\n"
    "                    clients must AUTH with PASS (user default)\n"
    "  --masterauth PASS the password a replica AUTHs with to its primary\n"
    "  --protected-mode yes|no\n"
    "                    without a password, refuse clients that are not\n"
    "                    on loopback (default yes)\n"
    "  --tls-port N      also TLS on port N of each --bind address\n"
    "  --tls-cert-file FILE, --tls-key-file FILE\n"
    "                    the server's certificate chain and key (PEM); a\n"
    "                    replica also shows them to its primary\n"
    "  --tls-ca-cert-file FILE\n"
    "                    the CAs trusted for clients and for the primary\n"
    "  --tls-auth-clients yes|no|optional\n"
    "                    require a client certificate (default yes), ask\n"
    "                    for none, or verify one if sent\n"
    "  --tls-replication yes|no\n"
    "                    a replica connects to its primary over TLS\n"
    "  --help            print this and exit\n"
    "\n"
    "SIZE is bytes, or a number with k, kb, m, mb, g or gb (k is 1000, kb\n"
    "1024). lull-kv prints \"lull-kv: listening on 127.0.0.1:PORT\" once\n"
    "ready and runs until SIGINT or SIGTERM, which close every connection\n"
    "and exit 0. docs/KV.md has the commands it serves.\n";

/* A refused option: one line naming it and what it takes, then where the
 * options are listed (the whole usage buried that line). Exit status 2. */
static int refuse(const char *opt, const char *want, const char *val) {
    if (!opt)
        ; /* the caller said it */
    else if (val)
        fprintf(stderr, "lull-kv: %s takes %s, not '%s'\n", opt, want, val);
    else
        fprintf(stderr, "lull-kv: %s %s\n", opt, want);
    fputs("usage: lull-kv [OPTION]... (lull-kv --help lists them)\n", stderr);
    return 2;
}

/* The options that take a value, so a missing one is named as such. */
static bool takes_value(const char *a) {
    static const char *const names[] = {"--port",
                                        "--unix",
                                        "--bind",
                                        "--requirepass",
                                        "--masterauth",
                                        "--protected-mode",
                                        "--tls-port",
                                        "--tls-cert-file",
                                        "--tls-key-file",
                                        "--tls-ca-cert-file",
                                        "--tls-auth-clients",
                                        "--tls-replication",
                                        "--proto-max-bulk-len",
                                        "--max-bulk",
                                        "--client-query-buffer-limit",
                                        "--client-output-buffer-limit",
                                        "--maxmemory-clients",
                                        "--replica-of",
                                        "--repl-mode",
                                        "--repl-catchup",
                                        "--repl-sender-cpu",
                                        "--repl-backlog-size",
                                        "--repl-snapshot",
                                        "--repl-backlog-always"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(a, names[i]) == 0) return true;
    return false;
}

#define PORT_WANT "a port number 0-65535"
#define YES_NO    "yes or no"
/* The least an argument or a query buffer may be limited to, as Redis
 * refuses a smaller proto-max-bulk-len or client-query-buffer-limit: below
 * it a server starts that refuses every command but the shortest. */
#define LIMIT_MIN  ((size_t)1 << 20)
#define LIMIT_WANT "a size of 1mb or more"

/* A size as Redis reads one (memtoll): digits, then no unit or b (bytes),
 * k / m / g (powers of 1000) or kb / mb / gb (powers of 1024), in any
 * case. */
static bool parse_size(const char *s, size_t *out) {
    return kv_parse_size(s, strlen(s), out);
}

/* --maxmemory-clients' default: a quarter of the memory lull-kv may use,
 * the machine's or its cgroup's limit (memory.max) when that is lower,
 * read once at start. Redis' default is 0, no budget: with it, clients
 * each under their own limit and never reading can take all memory, and
 * the OOM killer ends the server and every client. A quarter leaves the
 * rest to the keyspace, a snapshot child's copies and the kernel's
 * socket buffers. 0 (none) when the memory cannot be read. */
static size_t clients_budget_default(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    unsigned long long mem =
        (unsigned long long)pages * (unsigned long long)page;
    char line[512], path[600];
    FILE *f = fopen("/proc/self/cgroup", "r");
    path[0] = 0;
    if (f) {
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "0::", 3) == 0) { /* cgroup v2 */
                line[strcspn(line, "\n")] = 0;
                snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max",
                         line + 3);
            }
        fclose(f);
    }
    f = path[0] ? fopen(path, "r") : NULL;
    if (f) {
        unsigned long long max;
        if (fscanf(f, "%llu", &max) == 1 && max < mem) mem = max; /* "max" */
        fclose(f);
    }
    mem /= 4;
    return mem > SIZE_MAX ? SIZE_MAX : (size_t)mem;
}

/* A port: decimal digits only, 0 to 65535 (atoi took "abc" for 0, any
 * free port, and a number past int's range as whatever it wrapped to). */
static bool parse_port(const char *s, int *out) {
    size_t n = strspn(s, "0123456789");
    if (n == 0 || n > 5 || s[n]) return false;
    long v = strtol(s, NULL, 10);
    if (v > 65535) return false;
    *out = (int)v;
    return true;
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

/* CONFIG GET's answers: the limits and the access options, in Redis'
 * forms (a password as it was given, as Redis 7 shows it to a client
 * that may run CONFIG; "" for an option not set). The ports are the ones
 * listened on, so --port 0's pick shows. Filled once the listeners are
 * up. */
enum { CONFIGS = 20 };
static char config_text[CONFIGS][1024];
static const char *config_table[CONFIGS][2];

/* An address lull's connect takes: IPv4, or IPv6 bare or in brackets,
 * with a zone or not ("fe80::1%eth0": the connect reads the zone). A
 * name would be taken here and fail every connect (-EINVAL) for ever. */
static bool numeric_host(const char *h) {
    unsigned char a[sizeof(struct in6_addr)];
    char v6[64]; /* master.addr's size: what parse_hostport keeps */
    size_t n = strlen(h);
    if (inet_pton(AF_INET, h, a) == 1) return true;
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= sizeof v6) return false;
    memcpy(v6, h, n);
    v6[n] = 0;
    char *zone = strchr(v6, '%');
    if (zone && !zone[1]) return false; /* no zone after it */
    if (zone) *zone = 0;
    return inet_pton(AF_INET6, v6, a) == 1;
}

/* HOST:PORT (the last ':' splits, so [::1]:6380 works). */
static bool parse_hostport(const char *s, master *m) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof m->host)
        return false;
    memcpy(m->host, s, (size_t)(colon - s));
    m->host[colon - s] = 0;
    /* digits only, as --port takes them: strtol took " 1" and "+1" */
    int port;
    if (!parse_port(colon + 1, &port) || port == 0) return false;
    m->port = port;
    /* localhost is 127.0.0.1, where lull-kv listens by default (a lookup
     * may put ::1 first). Another name is looked up before each connect
     * (kv_net.resolve); brackets hold an IPv6 address, nothing else. */
    snprintf(m->addr, sizeof m->addr, "%s",
             strcmp(m->host, "localhost") == 0 ? "127.0.0.1" : m->host);
    if (numeric_host(m->addr)) return true;
    m->named = true;
    return m->host[0] != '[';
}

/* n random bytes; with no entropy source, time and pid, which still
 * differ per start. */
static void random_bytes(unsigned char *r, size_t n) {
    if (getrandom(r, n, 0) == (ssize_t)n) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                 ((uint64_t)getpid() << 40);
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        r[i] = (unsigned char)(x >> 56);
    }
}

/* This primary's replid: 40 random hex digits, new on every start (its log
 * starts empty on every start too). */
static void make_replid(char *id) {
    unsigned char r[20];
    random_bytes(r, sizeof r);
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(id + 2 * i, 3, "%02x", r[i]);
}

/* The keyspace's hash keyed at random, new on every start: a client
 * cannot learn which keys share a bucket and send only those. */
/* Started with 0, 1 or 2 closed (`lull-kv >&- 2>&-`), the first files
 * lull-kv opens (the epoll fd, an eventfd, a listener) would take them,
 * and its log lines (stderr) or --help (stdout) be written into a socket
 * a client reads. /dev/null takes each closed one first, as daemons do;
 * opened in order, it lands on the lowest free, the one closed. Where
 * even that fails, lull-kv says nothing it could say and stops. */
static bool std_fds_open(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        int n = open("/dev/null", O_RDWR);
        if (n != fd) {
            if (n >= 0) close(n);
            return false;
        }
    }
    return true;
}

static void seed_hash(void) {
    uint64_t seed;
    random_bytes((unsigned char *)&seed, sizeof seed);
    dict_seed(seed);
}

/* yes / no, as Redis' boolean options: 1, 0, or -1. */
static int yes_no(const char *s) {
    if (strcasecmp(s, "yes") == 0) return 1;
    if (strcasecmp(s, "no") == 0) return 0;
    return -1;
}

/* The TLS options, until the contexts are made of them. */
typedef struct tls_opts {
    int port; /* 0: no TLS port */
    const char *cert, *key, *ca;
    int auth_clients; /* 1 yes (Redis' default), 0 no, 2 optional */
    bool replication;
} tls_opts;

static void fill_config(server *srv, const tls_opts *tls, int tls_port,
                        const char *const *bind, int nbind,
                        const char *unix_path) {
    const obuf_limit *o = srv->obl;
    static const char *const names[CONFIGS] = {"proto-max-bulk-len",
                                               "client-query-buffer-limit",
                                               "client-output-buffer-limit",
                                               "bind",
                                               "port",
                                               "unixsocket",
                                               "requirepass",
                                               "masterauth",
                                               "protected-mode",
                                               "tls-port",
                                               "tls-cert-file",
                                               "tls-key-file",
                                               "tls-ca-cert-file",
                                               "tls-auth-clients",
                                               "tls-replication",
                                               "replicaof",
                                               "slaveof",
                                               "maxclients",
                                               "repl-backlog-size",
                                               "maxmemory-clients"};
    char(*t)[1024] = config_text;
    snprintf(t[0], sizeof t[0], "%zu", srv->lim.max_bulk);
    snprintf(t[1], sizeof t[1], "%zu", srv->qbuf_limit);
    snprintf(t[2], sizeof t[2],
             "normal %zu %zu %" PRIu64 " slave %zu %zu %" PRIu64
             " pubsub %zu %zu %" PRIu64,
             o[0].hard, o[0].soft, o[0].soft_ns / 1000000000u, o[1].hard,
             o[1].soft, o[1].soft_ns / 1000000000u, o[2].hard, o[2].soft,
             o[2].soft_ns / 1000000000u);
    size_t used = 0;
    for (int b = 0; b < nbind && used < sizeof t[3]; b++)
        used += (size_t)snprintf(t[3] + used, sizeof t[3] - used, "%s%s",
                                 b ? " " : "", bind[b]);
    snprintf(t[4], sizeof t[4], "%d", srv->port);
    snprintf(t[5], sizeof t[5], "%s", unix_path ? unix_path : "");
    snprintf(t[6], sizeof t[6], "%s", srv->requirepass ? srv->requirepass : "");
    snprintf(t[7], sizeof t[7], "%s", srv->masterauth ? srv->masterauth : "");
    snprintf(t[8], sizeof t[8], "%s", srv->protected_mode ? "yes" : "no");
    snprintf(t[9], sizeof t[9], "%d", tls_port);
    snprintf(t[10], sizeof t[10], "%s", tls->cert ? tls->cert : "");
    snprintf(t[11], sizeof t[11], "%s", tls->key ? tls->key : "");
    snprintf(t[12], sizeof t[12], "%s", tls->ca ? tls->ca : "");
    static const char *const auth[] = {"no", "yes", "optional"};
    snprintf(t[13], sizeof t[13], "%s", auth[tls->auth_clients]);
    snprintf(t[14], sizeof t[14], "%s", tls->replication ? "yes" : "no");
    if (srv->kv.replica)
        snprintf(t[15], sizeof t[15], "%s %d", srv->m.host, srv->m.port);
    else
        t[15][0] = 0;
    memcpy(t[16], t[15], sizeof t[16]);
    /* (0 only with no descriptor limit at all: no bound) */
    snprintf(t[17], sizeof t[17], "%zu", srv->maxclients);
    snprintf(t[18], sizeof t[18], "%" PRIu64, srv->kv.log.backlog);
    for (int i = 0; i < CONFIGS; i++) {
        config_table[i][0] = names[i];
        config_table[i][1] = t[i];
    }
    /* CONFIG SET changes it: its text is the server's (conn_budget_set). */
    config_table[19][1] = srv->maxmemory_clients_text;
    srv->kv.config = config_table;
    srv->kv.nconfig = CONFIGS;
}

/* Says on stderr why the context of cfg was refused (rc), naming the
 * file at fault: lull_tls_ctx_new's errno says what went wrong, not with
 * which file, and a missing or unusable CA file was reported as the
 * certificate's and the key's. A file that cannot be read is named with
 * access()'s reason; a file that can is the CA file's fault when the
 * context stands without it. */
static void say_tls_refusal(const lull_tls_config *cfg, int rc) {
    const char *const what[3] = {"certificate", "key", "CA"};
    const char *const file[3] = {cfg->cert_file, cfg->key_file, cfg->ca_file};
    for (int i = 0; i < 3; i++)
        if (file[i] && access(file[i], R_OK) != 0) {
            fprintf(stderr, "lull-kv: TLS %s file %s: %s\n", what[i], file[i],
                    strerror(errno));
            return;
        }
    lull_tls_config bare = *cfg;
    bare.ca_file = NULL;
    bare.verify_client = bare.require_client_cert = false;
    bare.insecure_skip_verify = true;
    lull_tls_ctx *probe = NULL;
    if (cfg->ca_file && lull_tls_ctx_new(&bare, &probe) == 0) {
        lull_tls_ctx_free(probe);
        fprintf(stderr, "lull-kv: TLS CA file %s: %s\n", cfg->ca_file,
                strerror(-rc));
    } else if (cfg->cert_file || cfg->key_file) {
        fprintf(stderr, "lull-kv: TLS %s certificate %s, key %s: %s\n",
                cfg->server ? "server" : "replica",
                cfg->cert_file ? cfg->cert_file : "(none)",
                cfg->key_file ? cfg->key_file : "(none)", strerror(-rc));
    } else {
        fprintf(stderr, "lull-kv: TLS %s context: %s\n",
                cfg->server ? "server" : "replication", strerror(-rc));
    }
}

/* The server's context (for the TLS port) and the replica's (its link),
 * as Redis makes them: the same certificate both ways, one CA file. 0, or
 * 1 after a line on stderr. */
static int make_tls(const tls_opts *t, server *srv, lull_tls_ctx **server_ctx) {
    if (!t->port && !t->replication) return 0;
    if (!lull_tls_available()) {
        fprintf(stderr, "lull-kv: TLS asked for, and lull was built without "
                        "it\n");
        return 1;
    }
    if ((t->auth_clients || t->replication) && !t->ca) {
        fprintf(stderr, "lull-kv: --tls-ca-cert-file is needed with "
                        "--tls-auth-clients yes|optional or "
                        "--tls-replication yes\n");
        return 1;
    }
    int rc;
    if (t->port) {
        if (!t->cert || !t->key) {
            fprintf(stderr, "lull-kv: --tls-port needs --tls-cert-file and "
                            "--tls-key-file\n");
            return 1;
        }
        lull_tls_config c = {.server = true,
                             .cert_file = t->cert,
                             .key_file = t->key,
                             .ca_file = t->ca,
                             .verify_client = t->auth_clients == 2,
                             .require_client_cert = t->auth_clients == 1};
        if ((rc = lull_tls_ctx_new(&c, server_ctx)) < 0) {
            say_tls_refusal(&c, rc);
            return 1;
        }
    }
    if (t->replication && srv->kv.replica) {
        lull_tls_config c = {
            .cert_file = t->cert, .key_file = t->key, .ca_file = t->ca};
        if ((rc = lull_tls_ctx_new(&c, &srv->repl_tls)) < 0) {
            say_tls_refusal(&c, rc);
            return 1;
        }
    }
    return 0;
}

/* SIGINT and SIGTERM end a run as they end redis-server's: no more
 * accepts, every connection closed (one last non-blocking write of what
 * it has queued, then EOF to its client), the Unix socket's file removed,
 * exit status 0. A second signal while closing changes nothing. A signal
 * the process was started with ignored stays ignored (a script's
 * background jobs start with SIGINT ignored, so that a Ctrl-C meant for
 * the script passes them by).
 *
 *   trigger          a signal read from the loop's signalfd
 *   source of truth  the kernel's pending signals
 *   pending work     none until one is read; then the shutdown, once
 *   next deadline    none; the shutdown's drain waits 1 s at most
 *   quiet            no timer, no task: the signalfd alone */
typedef struct shutdown_watch {
    lull_signal sig[2];
    bool watched[2]; /* not ignored at start-up: blocked, then watched */
    server *srv;
    int signum; /* the signal that asked; 0: none yet */
} shutdown_watch;

static const int shutdown_signals[2] = {SIGINT, SIGTERM};

static void shutdown_asked(lull_signal *sig, int signum) {
    shutdown_watch *w = sig->data;
    if (w->signum) return;
    w->signum = signum;
    srv_log(w->srv, "%s received: closing every connection and exiting",
            signum == SIGINT ? "SIGINT" : "SIGTERM");
    lull_loop_stop(w->srv->loop);
}

/* Before any thread starts (the catch-up sender's inherits the mask). */
static void shutdown_watch_block(shutdown_watch *w) {
    for (int i = 0; i < 2; i++) {
        struct sigaction was;
        w->watched[i] = sigaction(shutdown_signals[i], NULL, &was) == 0 &&
                        was.sa_handler != SIG_IGN;
        if (w->watched[i]) lull_signal_block(shutdown_signals[i]);
    }
}

static void shutdown_watch_stop(shutdown_watch *w) {
    for (int i = 0; i < 2; i++)
        if (w->watched[i]) lull_signal_stop(&w->sig[i]);
}

/* The handles hold no reference: they never keep a run alive alone. When
 * they cannot start (no fd left for the signalfd, a sandbox refusing it),
 * the signals are given back their usual action, unblocked, rather than
 * left blocked and unread: they then end the process at once, as before
 * there was a shutdown. */
static int shutdown_watch_start(shutdown_watch *w, server *srv) {
    w->srv = srv;
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        if (!w->watched[i]) continue;
        rc = lull_signal_init(srv->loop, &w->sig[i], shutdown_asked);
        w->sig[i].data = w;
        if (rc == 0) rc = lull_signal_start(&w->sig[i], shutdown_signals[i]);
        if (rc == 0) lull_signal_unref(&w->sig[i]);
    }
    if (rc == 0) return 0;
    shutdown_watch_stop(w);
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < 2; i++)
        if (w->watched[i]) sigaddset(&set, shutdown_signals[i]);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    w->watched[0] = w->watched[1] = false;
    return rc;
}

static void drain_overdue(lull_timer *t) {
    lull_loop_stop(t->loop);
}

/* Closes every connection and runs the loop until their close callbacks
 * have freed them (the listeners are closed and the server stopped
 * already; a command run while the server stopped may have armed the
 * expiry timer again, so it is stopped again). What has not closed a
 * second later is said, not waited for: false. */
static bool close_connections(server *srv) {
    for (conn *c = srv->conns, *next; c; c = next) {
        next = c->next; /* on_close unlinks c in a later turn */
        conn_drop(c, NULL);
    }
    server_stop(srv);
    lull_timer overdue;
    lull_timer_init(srv->loop, &overdue, drain_overdue);
    lull_timer_start(&overdue, 1000000000u, 0);
    lull_timer_unref(&overdue);
    /* The loop is alive until a lookup left running answers: while one
     * is, run only until the connections are gone (then the rest, if it
     * answered meanwhile). */
    while (srv->m.lookup_left && srv->conns && lull_timer_active(&overdue))
        lull_loop_run(srv->loop, LULL_RUN_ONCE);
    if (!srv->m.lookup_left && lull_timer_active(&overdue))
        lull_loop_run(srv->loop, LULL_RUN_DEFAULT);
    lull_timer_stop(&overdue);
    if (!srv->conns) return true;
    srv_log(srv, "a connection did not close within 1 s");
    return false;
}

/* The --unix path's file as this run's bind made it: removed at exit
 * only while it is still that socket, not one another server put there
 * since, nor a file someone else wrote. */
typedef struct unix_file {
    const char *path;
    dev_t dev;
    ino_t ino;
    bool made;
} unix_file;

static void unix_file_note(unix_file *f, const char *path) {
    struct stat st;
    f->path = path;
    /* "@name" is in the abstract namespace: no file at all. */
    f->made = path[0] != '@' && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
    if (f->made) {
        f->dev = st.st_dev;
        f->ino = st.st_ino;
    }
}

static void unix_file_remove(const unix_file *f) {
    struct stat st;
    if (f->made && lstat(f->path, &st) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == f->dev && st.st_ino == f->ino)
        unlink(f->path);
}

/* Before the bind: a socket file nobody listens on (an earlier run's) is
 * removed; a live server's is refused (-EADDRINUSE), and anything that is
 * not a socket is left for the bind to refuse. */
static int unix_path_claim(const char *path) {
    struct stat st;
    if (path[0] == '@' || lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
        return 0; /* abstract ("@name"), free, or for the bind to refuse */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) return 0; /* the bind says so */
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    int err = rc == 0 ? 0 : errno;
    close(fd);
    if (rc == 0 || err == EAGAIN) return -EADDRINUSE; /* it accepts */
    if (err == ECONNREFUSED) unlink(path);            /* nobody listens */
    return 0;
}

/* "a.b.c.d:port", or "[v6]:port". */
static void addr_text(char *s, size_t cap, const char *addr, int port) {
    if (strchr(addr, ':'))
        snprintf(s, cap, "[%s]:%d", addr, port);
    else
        snprintf(s, cap, "%s:%d", addr, port);
}

int main(int argc, char **argv) {
    static server srv;
    static listener lis[2 * MAX_BIND];
    static listener unx;
    int port = 6380, nlis = 0, nbind = 0;
    const char *bind[MAX_BIND];
    const char *unix_path = NULL;
    tls_opts tls = {.auth_clients = 1};
    bool backlog_always = false, clients_budget_set = false;
    if (!std_fds_open()) return 1; /* before any descriptor of its own */
    seed_hash();                   /* before any key is stored */
    server_defaults(&srv);
    srv.protected_mode = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        int yn;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
            fprintf(stderr, "lull-kv: writing --help: %s\n", strerror(errno));
            return 1;
        } else if (more && strcmp(a, "--port") == 0) {
            if (!parse_port(argv[++i], &port))
                return refuse(a, PORT_WANT, argv[i]);
        } else if (more && strcmp(a, "--unix") == 0) {
            unix_path = argv[++i];
        } else if (strcmp(a, "--bind") == 0) {
            /* The words point into text, which outlives the loop. */
            static char text[1024];
            char *w[MAX_BIND];
            nbind =
                collect_words(argc, argv, &i, text, sizeof text, w, MAX_BIND);
            if (nbind <= 0)
                return refuse(a,
                              nbind == 0 ? "needs an address or more"
                                         : "takes at most 16 addresses",
                              NULL);
            for (int b = 0; b < nbind; b++)
                bind[b] = w[b];
        } else if (more && strcmp(a, "--requirepass") == 0) {
            srv.requirepass = argv[++i];
            if (!*srv.requirepass) srv.requirepass = NULL; /* Redis: none */
        } else if (more && strcmp(a, "--masterauth") == 0) {
            srv.masterauth = argv[++i];
        } else if (more && strcmp(a, "--protected-mode") == 0) {
            if ((yn = yes_no(argv[++i])) < 0) return refuse(a, YES_NO, argv[i]);
            srv.protected_mode = yn;
        } else if (more && strcmp(a, "--tls-port") == 0) {
            if (!parse_port(argv[++i], &tls.port))
                return refuse(a, PORT_WANT, argv[i]);
        } else if (more && strcmp(a, "--tls-cert-file") == 0) {
            tls.cert = argv[++i];
        } else if (more && strcmp(a, "--tls-key-file") == 0) {
            tls.key = argv[++i];
        } else if (more && strcmp(a, "--tls-ca-cert-file") == 0) {
            tls.ca = argv[++i];
        } else if (more && strcmp(a, "--tls-auth-clients") == 0) {
            i++;
            if (strcasecmp(argv[i], "optional") == 0)
                tls.auth_clients = 2;
            else if ((tls.auth_clients = yes_no(argv[i])) < 0)
                return refuse(a, "yes, no or optional", argv[i]);
        } else if (more && strcmp(a, "--tls-replication") == 0) {
            if ((yn = yes_no(argv[++i])) < 0) return refuse(a, YES_NO, argv[i]);
            tls.replication = yn;
        } else if (more && (strcmp(a, "--proto-max-bulk-len") == 0 ||
                            strcmp(a, "--max-bulk") == 0)) {
            if (!parse_size(argv[++i], &srv.lim.max_bulk) ||
                srv.lim.max_bulk < LIMIT_MIN)
                return refuse(a, LIMIT_WANT, argv[i]);
        } else if (more && strcmp(a, "--client-query-buffer-limit") == 0) {
            if (!parse_size(argv[++i], &srv.qbuf_limit) ||
                srv.qbuf_limit < LIMIT_MIN)
                return refuse(a, LIMIT_WANT, argv[i]);
        } else if (more && strcmp(a, "--maxmemory-clients") == 0) {
            /* Bytes only: no maxmemory for a percentage to be of. */
            if (!parse_size(argv[++i], &srv.maxmemory_clients))
                return refuse(a, "a size in bytes, 0 for none (no percentage)",
                              argv[i]);
            clients_budget_set = true;
        } else if (strcmp(a, "--client-output-buffer-limit") == 0) {
            char text[512], *w[32];
            int n = collect_words(argc, argv, &i, text, sizeof text, w, 32);
            if (n < 0 || !parse_obl(&srv, w, n))
                return refuse(a,
                              "takes CLASS HARD SOFT SECONDS, once per class "
                              "(normal, replica or slave, pubsub)",
                              NULL);
        } else if (more && strcmp(a, "--replica-of") == 0) {
            if (!parse_hostport(argv[++i], &srv.m))
                return refuse(a, "HOST:PORT (a name, an address, [IPv6])",
                              argv[i]);
            srv.kv.replica = true;
        } else if (more && strcmp(a, "--repl-mode") == 0) {
            i++;
            if (strcmp(argv[i], "per-record") == 0)
                srv.per_record = true;
            else if (strcmp(argv[i], "budget") != 0)
                return refuse(a, "budget or per-record", argv[i]);
        } else if (more && strcmp(a, "--repl-catchup") == 0) {
            const char *w = argv[++i];
            if (strcmp(w, "auto") == 0)
                srv.catchup = CATCHUP_AUTO;
            else if (strcmp(w, "thread") == 0)
                srv.catchup = CATCHUP_THREAD;
            else if (strcmp(w, "loop") == 0)
                srv.catchup = CATCHUP_LOOP;
            else
                return refuse(a, "auto, thread or loop", w);
        } else if (more && strcmp(a, "--repl-sender-cpu") == 0) {
            char *end;
            long cpu = strtol(argv[++i], &end, 10);
            /* digits only: strtol skips a space and takes a sign */
            if (*end || *argv[i] < '0' || *argv[i] > '9' ||
                cpu >= 1024) /* a cpu_set_t's CPUs */
                return refuse(a, "a CPU number 0-1023", argv[i]);
            srv.sender_cpu = (int)cpu;
        } else if (more && strcmp(a, "--repl-backlog-size") == 0) {
            size_t n;
            /* 16 KiB at least, as Redis' minimum. */
            if (!parse_size(argv[++i], &n) || n < ((size_t)16 << 10))
                return refuse(a, "a size of 16kb or more", argv[i]);
            srv.kv.log.backlog = n;
        } else if (more && strcmp(a, "--repl-backlog-always") == 0) {
            const char *w = argv[++i];
            if (strcmp(w, "yes") != 0 && strcmp(w, "no") != 0)
                return refuse(a, "yes or no", w);
            backlog_always = strcmp(w, "yes") == 0;
        } else if (more && strcmp(a, "--repl-snapshot") == 0) {
            const char *w = argv[++i];
            if (strcmp(w, "fork") == 0)
                srv.snapshot = SNAPSHOT_FORK;
            else if (strcmp(w, "inline") == 0)
                srv.snapshot = SNAPSHOT_INLINE;
            else
                return refuse(a, "fork or inline", w);
        } else if (takes_value(a)) {
            return refuse(a, "needs a value", NULL);
        } else {
            fprintf(stderr, "lull-kv: unknown option '%s'\n", a);
            return refuse(NULL, NULL, NULL);
        }
    }
    /* No backlog before the first replica, as Redis: a write is counted,
     * not copied (a 64 MiB SET's third copy, a SET's ~300 instructions). */
    srv.kv.log.idle = !backlog_always;
    if (!clients_budget_set) srv.maxmemory_clients = clients_budget_default();
    /* A client gone is a failed send, not a signal; so is a log reader
     * gone (stderr a pipe whose reader exited). A terminal's hang-up
     * (SIGHUP) is ignored, as redis-server ignores it: a server started
     * from a shell outlives the session instead of dying unannounced,
     * its --unix file left behind. */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    static shutdown_watch watch;
    shutdown_watch_block(&watch);
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
    lull_tls_ctx *tls_ctx = NULL;
    if (make_tls(&tls, &srv, &tls_ctx)) return 1;
    if (nbind == 0) bind[nbind++] = "127.0.0.1";
    bool any_v4 = false;
    for (int b = 0; b < nbind; b++) {
        struct in_addr a4;
        any_v4 |= inet_pton(AF_INET, bind[b], &a4) == 1;
    }
    /* Every address on one port: the first bind picks it when --port 0. */
    char line[1024];
    size_t used = 0;
    for (int t = 0; t < (tls_ctx ? 2 : 1); t++) {
        int want = t ? tls.port : port;
        for (int b = 0; b < nbind; b++) {
            listener *l = &lis[nlis];
            l->srv = &srv;
            l->tls = t ? tls_ctx : NULL;
            l->tcp = true;
            if (any_v4 && is_v6_any(bind[b]))
                rc = listen_v6_only_any(loop, &l->ls, want, accept_on);
            else
                rc = lull_server_listen_tcp(loop, &l->ls, bind[b], want, 0,
                                            accept_on);
            if (rc < 0) {
                fprintf(stderr, "lull-kv: listen on %s port %d: %s\n", bind[b],
                        want, strerror(-rc));
                return 1;
            }
            nlis++;
            srv.listening++;
            want = lull_server_port(&l->ls);
            if (!t && b == 0) srv.port = srv.kv.tcp_port = want;
            char at[80];
            addr_text(at, sizeof at, bind[b], want);
            snprintf(l->at, sizeof l->at, "%s%s", t ? "tls " : "", at);
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%s",
                                     used ? " and " : "", l->at);
            if (used >= sizeof line) used = sizeof line - 1;
        }
    }
    static unix_file unx_file;
    if (unix_path) {
        unx.srv = &srv;
        rc = unix_path_claim(unix_path);
        if (rc == 0)
            rc =
                lull_server_listen_unix(loop, &unx.ls, unix_path, 0, accept_on);
        if (rc < 0) {
            fprintf(stderr, "lull-kv: listen on %s: %s\n", unix_path,
                    strerror(-rc));
            return 1;
        }
        unix_file_note(&unx_file, unix_path);
        srv.has_unix = true;
        srv.listening++;
        snprintf(unx.at, sizeof unx.at, "%s", unix_path);
    }
    srv.maxclients = clients_fd_bound(nlis + (unix_path != NULL));
    fill_config(&srv, &tls, tls_ctx ? lull_server_port(&lis[nlis - 1].ls) : 0,
                bind, nbind, unix_path);
    printf("lull-kv: listening on %s%s%s\n", line, unix_path ? " and " : "",
           unix_path ? unix_path : "");
    fflush(stdout);
    if ((rc = shutdown_watch_start(&watch, &srv)) < 0)
        srv_log(&srv,
                "SIGINT and SIGTERM not watched (%s): either ends lull-kv "
                "at once, without closing its connections",
                strerror(-rc));
    server_start(&srv);
    /* A signal or a failure ends the run (a failure: every listener gone,
     * or the loop's poll failing); exit 0 only for a signal's whole
     * shutdown. */
    rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    if (rc < 0)
        fprintf(stderr, "lull-kv: the loop stopped: %s\n", strerror(-rc));
    bool clean = rc == 0 && watch.signum && srv.listening > 0;
    /* No accept, then no command, while the server stops. */
    for (int l = 0; l < nlis; l++)
        lull_server_close(&lis[l].ls);
    if (srv.has_unix) lull_server_close(&unx.ls);
    server_stop(&srv);
    if (watch.signum) {
        clean &= close_connections(&srv);
        if (unix_path) unix_file_remove(&unx_file);
    }
    shutdown_watch_stop(&watch);
    lull_tls_ctx_free(tls_ctx);
    lull_tls_ctx_free(srv.repl_tls);
    server_free(&srv);
    /* A lookup left running posts its answer to the loop when getaddrinfo
     * returns: the loop is not freed, and the process ends without it. */
    if (!srv.m.lookup_left && lull_loop_free(loop) < 0 && watch.signum) {
        fprintf(stderr, "lull-kv: at exit, still open:\n");
        lull_loop_print_live(loop, stderr);
        clean = false;
    }
    return clean ? 0 : 1;
}
