/* lull-kv: a Redis-protocol (RESP2) key-value server on one lull loop.
 *
 * An example of a real protocol server on lull's public API, and a vehicle
 * for benchmarks against clients nobody here wrote (redis-cli,
 * redis-benchmark). Not a Redis replacement: docs/KV.md says what it does
 * and does not do. The commands live in cmd.c, the write log in repl.c;
 * this file owns the sockets.
 *
 * Each connection is a lull_stream in raw mode (LULL_STREAM_RAW): bytes
 * arrive in chunks of any size at on_frame. They are appended to the
 * connection's input buffer, every complete command at its front is run
 * (pipelining), and what is left is kept for the next chunk (partial
 * reads). All replies to one chunk go out as one send, so a pipeline of N
 * commands costs one write, not N. A connection whose replies pile up past
 * the stream's high-water mark stops reading until they drain.
 *
 * QUIT and a protocol error (`-ERR Protocol error: ...`) end a connection:
 * the last replies go out as one frame of our own, the write side is shut,
 * and the frame's release (it is in the kernel) closes the socket, so the
 * server does not wait for the client to hang up. No other connection
 * notices.
 *
 * Replication (docs/KV.md). A primary logs every write (repl.c); a
 * connection that sends `REPLSYNC <replid|?> <offset> <port>` becomes a
 * replica link: the primary answers `+FULLRESYNC <replid> 0` or
 * `+CONTINUE <offset>` and from then on streams its log from that offset,
 * record by record, as a producer (docs/STREAMS.md): one lull_endpoint_send per
 * record, lull_loop_should_yield on the loop's shared quantum (budget mode) or
 * a posted continuation after every record (per-record mode), and a wait
 * for on_drain when the stream is full, so clients are served between
 * slices while a replica catches up. The replica sends `REPLACK <offset>`
 * after it applied records; that is the offset INFO shows for it. A
 * replica (--replica-of) refuses writes from clients with -READONLY.
 *
 *   lull-kv [--port N] [--unix PATH] [--max-bulk BYTES]
 *           [--replica-of HOST:PORT] [--repl-mode per-record|budget]
 *     --port N        TCP on 127.0.0.1:N (default 6380; 0 = any free port)
 *     --unix PATH     also listen on a Unix socket (an old file is removed)
 *     --max-bulk B    the longest argument accepted (default 64 MiB)
 *     --replica-of H:P  be a replica of the primary at H:P (H numeric, or
 *                     localhost)
 *     --repl-mode M   how a primary sends to catching-up replicas: budget
 *                     (default) or per-record
 *   It prints "lull-kv: listening on 127.0.0.1:PORT" once ready, and runs
 *   until killed.
 *
 * Build:
 *   cc -O2 -o lull-kv server.c cmd.c repl.c resp.c store.c \
 *      $(pkg-config --cflags --libs lull) */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* getrandom */
#include "cmd.h"
#include "repl.h"
#include "resp.h"
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <lull.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* 1024 arguments: far more than any command lull-kv knows takes (SET has
 * three); a client sending more is sending something lull-kv cannot run. */
#define MAX_ARGS 1024

/* Frames a replica link can have in flight: the log's records are sent by
 * pointer, each in a lull_frame of the link's own. 4096 covers a stream's
 * high-water mark (64 KiB) of records of 16 bytes and more; a sender that
 * finds its next frame still in flight waits for that frame's release. */
#define RING 4096

/* The replica's reconnect backoff: 100 ms at first (a primary restarting
 * is back within a few hundred ms), doubled per failure up to 5 s (a
 * primary that is gone for good costs a connect every 5 s, no more). */
#define RETRY_MIN_NS 100000000ull
#define RETRY_MAX_NS 5000000000ull
/* A primary that accepts but never answers the connect is given up on
 * after 2 s, and retried with the backoff. */
#define CONNECT_TIMEOUT_NS 2000000000ull

typedef struct rlink rlink;
typedef struct conn conn;

enum { M_DOWN, M_CONNECTING, M_SYNC, M_UP };

/* The replica's link to its primary (--replica-of). Its contract (BRIEF
 * §1A):
 *   trigger          start-up; the link's close or a failed connect, which
 *                    arms the retry timer; the retry timer, which connects
 *   source of truth  m->state, and the offset and replid in srv->kv
 *   pending work     state == M_DOWN: no link and no connect under way
 *   next retry       the retry timer, backoff_ns after the failure (100 ms,
 *                    doubling to 5 s; a completed handshake resets it)
 *   quiet            connected or connecting: no timer, one socket in
 *                    epoll; acks are sent only after records were applied
 * There is no periodic check of a live link: a dead primary is seen as the
 * socket's close (EOF, reset), and a silent one is simply idle. */
typedef struct master {
    lull_stream s;
    int state;       /* M_* */
    char host[64];   /* as given on the command line (INFO master_host) */
    char addr[64];   /* numeric: host, or 127.0.0.1 for localhost */
    int port;        /* the primary's port */
    char replid[41]; /* the primary's id from the last full resync */
    buf in;          /* bytes of the link not yet applied */
    lull_timer retry;
    uint64_t backoff_ns;  /* the next retry's delay */
    lull_task ack;        /* sends REPLACK <offset> */
    lull_frame ack_frame; /* its bytes: ack_buf (no allocation per ack) */
    char ack_buf[64];     /* the REPLACK request in flight */
    bool ack_again;       /* records applied while an ack was in flight */
    uint64_t acked;       /* the offset last acknowledged */
} master;

typedef struct server {
    lull_loop *loop;
    lull_server tcp;
    lull_server unx;
    bool has_unix;
    kv kv; /* keyspace, write log, replication state */
    resp_limits lim;
    resp_arg argv[MAX_ARGS]; /* the command being run (one at a time) */
    bool per_record;         /* --repl-mode per-record */
    int port;                /* the bound TCP port (told to a primary) */
    master m;                /* --replica-of */
} server;

struct conn {
    lull_stream s;
    server *srv;
    buf in;         /* bytes read and not yet parsed into a command */
    buf out;        /* replies to the current chunk, sent at its end */
    bool closing;   /* QUIT or a protocol error: input is ignored now */
    bool gone;      /* on_close ran while `fin` was in flight */
    lull_frame fin; /* the last replies (bytes: out): its release closes */
    rlink *link;    /* set by REPLSYNC: this is a replica's link */
};

static server *the_server; /* lull_server has no data pointer: one server */

/* ----------------------------------------------------------- helpers */

static bool parse_u64(const resp_arg *a, uint64_t *out) {
    long long v;
    if (!kv_parse_i64(a->p, a->len, &v) || v < 0) return false;
    *out = (uint64_t)v;
    return true;
}

/* ---------------------------------------------- primary: replica links */

typedef struct ring_frame {
    lull_frame f;
    rlink *l;
} ring_frame;

struct rlink {
    repl_peer peer;     /* in kv.peers while the connection is open */
    conn *c;            /* the connection; NULL once it closed */
    lull_task task;     /* the producer */
    repl_cursor cur;    /* the next record to send */
    size_t inflight;    /* ring frames the stream holds (not released) */
    uint64_t ring_next; /* the next ring frame to use */
    bool starved;       /* waits for ring[ring_next]'s release */
    ring_frame ring[RING];
};

/* The catch-up and follow sender: one record per step. */
static void produce(lull_task *t) {
    rlink *l = LULL_CONTAINER_OF(t, rlink, task);
    server *srv = the_server;
    const repl_log *log = &srv->kv.log;
    while (repl_log_more(log, &l->cur)) {
        if (!lull_endpoint_writable(&l->c->s.ep))
            return; /* on_drain posts us */
        ring_frame *rf = &l->ring[l->ring_next % RING];
        if (rf->f.in_flight) { /* its release posts us */
            l->starved = true;
            return;
        }
        size_t len;
        rf->f.bytes = repl_log_next(log, &l->cur, &len);
        rf->f.len = len;
        if (lull_endpoint_send(&l->c->s.ep, &rf->f) < 0)
            return; /* on_close follows */
        l->ring_next++;
        l->inflight++;
        if (srv->per_record || lull_loop_should_yield(srv->loop)) {
            lull_task_post(srv->loop, t);
            return;
        }
    }
}

static void ring_release(lull_frame *f) {
    rlink *l = ((ring_frame *)(void *)f)->l;
    l->inflight--;
    if (!l->c) {
        if (l->inflight == 0) free(l); /* the last frame of a closed link */
        return;
    }
    if (l->starved) {
        l->starved = false;
        lull_task_post(the_server->loop, &l->task);
    }
}

/* New records: every link's producer sends them (a no-op for a producer
 * already queued). */
static void wake_links(server *srv) {
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers; p = p->next)
        lull_task_post(srv->loop, &LULL_CONTAINER_OF(p, rlink, peer)->task);
}

/* The link's connection closed: it leaves INFO, its producer stops, and
 * its memory goes with the last frame the stream still holds. */
static void link_drop(rlink *l) {
    server *srv = the_server;
    l->peer.prev->next = l->peer.next;
    l->peer.next->prev = l->peer.prev;
    srv->kv.npeers--;
    lull_task_cancel(&l->task);
    l->c = NULL;
    if (l->inflight == 0) free(l);
}

static void peer_ip(conn *c, char *ip, size_t cap) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    snprintf(ip, cap, "unix");
    if (getpeername(lull_stream_fd(&c->s), (struct sockaddr *)&sa, &len) != 0)
        return;
    if (sa.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, ip,
                  (socklen_t)cap);
    else if (sa.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, ip,
                  (socklen_t)cap);
}

/* REPLSYNC <replid|?> <offset> <listening-port>: the connection becomes a
 * replica link. The replica continues from its offset when it holds this
 * primary's history (same replid, a record boundary of the log); else it
 * starts over from 0 (FULLRESYNC: it drops its keys first). */
static void start_link(conn *c, const resp_arg *a, size_t argc) {
    server *srv = c->srv;
    kv *k = &srv->kv;
    uint64_t offset, port;
    if (k->replica) {
        buf_str(&c->out, "-ERR this lull-kv is a replica: replicate from "
                         "its primary\r\n");
        return;
    }
    if (argc != 4 || !parse_u64(&a[2], &offset) || !parse_u64(&a[3], &port) ||
        port > 65535) {
        buf_str(&c->out, "-ERR usage: REPLSYNC <replid|?> <offset> <port>\r\n");
        return;
    }
    rlink *l = calloc(1, sizeof *l);
    if (!l) {
        buf_str(&c->out, "-OOM out of memory\r\n");
        return;
    }
    bool same = a[1].len == 40 && memcmp(a[1].p, k->replid, 40) == 0;
    char reply[96];
    if (same && repl_log_seek(&k->log, offset, &l->cur) == 0) {
        snprintf(reply, sizeof reply, "+CONTINUE %" PRIu64 "\r\n", offset);
    } else {
        offset = 0;
        repl_log_seek(&k->log, 0, &l->cur);
        snprintf(reply, sizeof reply, "+FULLRESYNC %s 0\r\n", k->replid);
    }
    buf_str(&c->out, reply);
    for (size_t i = 0; i < RING; i++)
        l->ring[i] = (ring_frame){.f = {.release = ring_release}, .l = l};
    l->c = c;
    lull_task_init(&l->task, produce);
    peer_ip(c, l->peer.ip, sizeof l->peer.ip);
    l->peer.port = (int)port;
    l->peer.offset = offset;
    l->peer.prev = k->peers.prev;
    l->peer.next = &k->peers;
    k->peers.prev->next = &l->peer;
    k->peers.prev = &l->peer;
    k->npeers++;
    k->clients--; /* a replica, not a client (as Redis counts them) */
    c->link = l;
    /* Posted: it runs after this chunk's replies, the answer above
     * included, are queued. */
    lull_task_post(srv->loop, &l->task);
}

/* What a replica may send on its link: REPLACK <offset>. */
static bool link_command(conn *c, const resp_arg *a, size_t argc) {
    uint64_t off;
    if (argc != 2 || !resp_is(&a[0], "REPLACK") || !parse_u64(&a[1], &off) ||
        off > c->srv->kv.log.end)
        return false;
    c->link->peer.offset = off;
    return true;
}

static void conn_free(conn *c);

/* CLIENT KILL TYPE replica|slave: closes every replica link (they
 * reconnect and continue from their offsets). The one CLIENT form
 * lull-kv knows. */
static bool client_kill_replicas(server *srv, const resp_arg *a, size_t argc,
                                 buf *out) {
    if (!(argc == 4 && resp_is(&a[0], "CLIENT") && resp_is(&a[1], "KILL") &&
          resp_is(&a[2], "TYPE") &&
          (resp_is(&a[3], "replica") || resp_is(&a[3], "slave"))))
        return false;
    long long n = 0;
    repl_peer *p = srv->kv.peers.next;
    while (p != &srv->kv.peers) {
        repl_peer *next = p->next;
        conn *lc = LULL_CONTAINER_OF(p, rlink, peer)->c;
        /* A link closing after a protocol error may still hold `fin`
         * behind its records: the close releases it, and fin's release
         * frees the connection (gone: it must not close it again). */
        bool finishing = lc->fin.in_flight;
        lc->gone = true;
        lull_endpoint_close(&lc->s.ep, 0); /* no on_close follows */
        if (!finishing) conn_free(lc);
        n++;
        p = next;
    }
    buf_int(out, ':', n);
    return true;
}

/* ---------------------------------------------------------- connections */

static void conn_free(conn *c) {
    if (c->link)
        link_drop(c->link);
    else
        c->srv->kv.clients--;
    buf_free(&c->in);
    buf_free(&c->out);
    free(c);
}

static void on_close(lull_endpoint *ep, int reason) {
    (void)reason; /* EOF, reset, ...: the client is gone either way */
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    if (c->fin.in_flight) {
        c->gone = true; /* fin's release, right after this, frees it */
        return;
    }
    conn_free(c);
}

/* The last replies are in the kernel (or were dropped by a close): the
 * connection is done. */
static void fin_release(lull_frame *f) {
    conn *c = LULL_CONTAINER_OF(f, conn, fin);
    if (!c->gone) lull_endpoint_close(&c->s.ep, 0);
    conn_free(c);
}

/* Sends what the chunk produced, and pushes back when it piles up. The
 * copy is one allocation per chunk, not per command: the output buffer is
 * reused for the next chunk while lull still holds the copy. */
static void flush(conn *c) {
    if (c->out.len == 0) return;
    lull_endpoint_send_copy(&c->s.ep, c->out.p, c->out.len);
    c->out.len = 0;
    if (!lull_endpoint_writable(&c->s.ep)) lull_stream_read_stop(&c->s);
}

static void on_drain(lull_endpoint *ep) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    lull_stream_read_start(&c->s);
    if (c->link) lull_task_post(c->srv->loop, &c->link->task);
}

/* Stops serving this client: its last replies leave as `fin`, the write
 * side is shut, and fin's release closes the socket. c may be gone when
 * this returns. */
static void conn_finish(conn *c) {
    c->closing = true;
    c->fin = (lull_frame){
        .bytes = c->out.p, .len = c->out.len, .release = fin_release};
    if (c->out.len == 0 || lull_endpoint_send(&c->s.ep, &c->fin) < 0) {
        lull_endpoint_close(&c->s.ep, 0);
        conn_free(c);
        return;
    }
    lull_stream_shutdown(&c->s);
}

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    server *srv = c->srv;
    if (c->closing) return;
    /* With nothing left over from the last chunk, commands are parsed in
     * the stream's own buffer (valid for this call) and only an unparsed
     * tail is copied: the common chunk of whole commands is not copied. */
    bool direct = c->in.len == 0;
    const char *p = bytes;
    size_t total = len;
    if (!direct) {
        buf_put(&c->in, bytes, len);
        p = c->in.p;
        total = c->in.len;
    }
    uint64_t log_end = srv->kv.log.end;
    size_t off = 0;
    while (!c->closing && !c->in.oom) {
        size_t argc;
        const char *err = NULL;
        long n =
            resp_parse(&srv->lim, p + off, total - off, srv->argv, &argc, &err);
        if (n == RESP_INCOMPLETE) break;
        if (n == RESP_ERROR) {
            buf_str(&c->out, "-ERR ");
            buf_str(&c->out, err);
            buf_str(&c->out, "\r\n");
            c->closing = true;
            break;
        }
        off += (size_t)n;
        if (argc == 0) continue;
        if (c->link) {
            if (!link_command(c, srv->argv, argc)) {
                fprintf(stderr,
                        "lull-kv: replica %s:%d sent what is not REPLACK "
                        "<offset>: link closed\n",
                        c->link->peer.ip, c->link->peer.port);
                lull_endpoint_close(&c->s.ep, -EPROTO); /* no on_close */
                conn_free(c);
                return;
            }
        } else if (resp_is(&srv->argv[0], "REPLSYNC")) {
            start_link(c, srv->argv, argc);
        } else if (!client_kill_replicas(srv, srv->argv, argc, &c->out)) {
            if (kv_exec(&srv->kv, srv->argv, argc, &c->out) & KV_QUIT)
                c->closing = true;
        }
    }
    if (srv->kv.log.end != log_end) wake_links(srv);
    /* Keep the unparsed tail at the front for the next chunk. */
    if (!direct)
        buf_consume(&c->in, off);
    else if (off < total && !c->closing)
        buf_put(&c->in, p + off, total - off);
    if (c->in.oom || c->out.oom) {
        lull_endpoint_close(&c->s.ep, -ENOMEM); /* no on_close follows */
        conn_free(c);
        return;
    }
    if (c->closing)
        conn_finish(c);
    else
        flush(c);
}

static void accept_conn(lull_server *ls) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return; /* the waiting connection is closed when we return */
    c->srv = the_server;
    lull_stream_options o = {.flags = LULL_STREAM_RAW};
    if (lull_server_accept(ls, &c->s, &o) < 0) {
        free(c);
        return;
    }
    c->srv->kv.clients++;
    lull_endpoint_set_callbacks(&c->s.ep, on_frame, on_drain, on_close);
}

/* ---------------------------------------------- replica: the primary link */

static void master_connect(server *srv);

static void master_retry(lull_timer *t) {
    master_connect(LULL_CONTAINER_OF(t, server, m.retry));
}

/* The link is down (closed, refused, malformed): try again later. */
static void master_down(server *srv) {
    master *m = &srv->m;
    m->state = M_DOWN;
    srv->kv.link_up = false;
    m->in.len = 0; /* a partial record: it comes again after the resync */
    lull_task_cancel(&m->ack);
    fprintf(stderr, "lull-kv: replica: retrying %s:%d in %" PRIu64 " ms\n",
            m->host, m->port, m->backoff_ns / 1000000);
    lull_timer_start(&m->retry, m->backoff_ns, 0);
    m->backoff_ns =
        m->backoff_ns * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : m->backoff_ns * 2;
}

/* The primary sent what lull-kv's replication protocol does not allow. */
static void master_malformed(server *srv, const char *what) {
    master *m = &srv->m;
    fprintf(stderr,
            "lull-kv: replica: malformed replication stream from %s:%d at "
            "offset %" PRIu64 ": %s; link closed\n",
            m->host, m->port, srv->kv.offset, what);
    lull_endpoint_close(&m->s.ep, -EPROTO); /* no on_close follows */
    master_down(srv);
}

static void master_closed(lull_endpoint *ep, int reason) {
    server *srv = LULL_CONTAINER_OF(ep, server, m.s.ep);
    fprintf(stderr, "lull-kv: replica: link to %s:%d lost (%s)\n", srv->m.host,
            srv->m.port, reason ? strerror(-reason) : "EOF");
    master_down(srv);
}

static void ack_send(lull_task *t) {
    server *srv = LULL_CONTAINER_OF(t, server, m.ack);
    master *m = &srv->m;
    if (m->state != M_UP) return;
    if (m->ack_frame.in_flight) {
        m->ack_again = true; /* its release posts us */
        return;
    }
    char num[24];
    int n = snprintf(num, sizeof num, "%" PRIu64, srv->kv.offset);
    int len = snprintf(m->ack_buf, sizeof m->ack_buf,
                       "*2\r\n$7\r\nREPLACK\r\n$%d\r\n%s\r\n", n, num);
    m->ack_frame.bytes = m->ack_buf;
    m->ack_frame.len = (size_t)len;
    if (lull_endpoint_send(&m->s.ep, &m->ack_frame) == 0)
        m->acked = srv->kv.offset;
}

static void ack_release(lull_frame *f) {
    server *srv = LULL_CONTAINER_OF(f, server, m.ack_frame);
    master *m = &srv->m;
    if (m->ack_again && m->state == M_UP) {
        m->ack_again = false;
        lull_task_post(srv->loop, &m->ack);
    }
}

/* The primary's answer to REPLSYNC: one line. 1 taken, 0 incomplete, -1
 * the link was closed. */
static int master_handshake(server *srv) {
    master *m = &srv->m;
    kv *k = &srv->kv;
    char *lf = memchr(m->in.p, '\n', m->in.len);
    if (!lf) {
        if (m->in.len > 128) return master_malformed(srv, "no reply line"), -1;
        return 0;
    }
    size_t n = (size_t)(lf - m->in.p) + 1;
    char line[130];
    if (n < 3 || n > sizeof line || lf[-1] != '\r')
        return master_malformed(srv, "a bad reply line"), -1;
    memcpy(line, m->in.p, n - 2);
    line[n - 2] = 0;
    char id[41];
    uint64_t off;
    char tail;
    if (line[0] == '-') {
        fprintf(stderr, "lull-kv: replica: %s:%d refused: %s\n", m->host,
                m->port, line + 1);
        lull_endpoint_close(&m->s.ep, 0);
        master_down(srv);
        return -1;
    }
    if (sscanf(line, "+FULLRESYNC %40[0-9a-f] %" SCNu64 "%c", id, &off,
               &tail) == 2 &&
        strlen(id) == 40 && off == 0) {
        store_clear(&k->db); /* another history: start over */
        k->offset = 0;
        memcpy(m->replid, id, sizeof id);
    } else if (sscanf(line, "+CONTINUE %" SCNu64 "%c", &off, &tail) == 1 &&
               off == k->offset) {
        /* the same history: from our offset */
    } else {
        return master_malformed(srv, "not +FULLRESYNC or +CONTINUE"), -1;
    }
    buf_consume(&m->in, n);
    m->state = M_UP;
    k->link_up = true;
    m->backoff_ns = RETRY_MIN_NS;
    m->acked = k->offset;
    fprintf(stderr,
            "lull-kv: replica: in sync with %s:%d from offset %" PRIu64
            " (%s)\n",
            m->host, m->port, k->offset, line[1] == 'F' ? "full" : "continue");
    return 1;
}

static void master_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    server *srv = LULL_CONTAINER_OF(ep, server, m.s.ep);
    master *m = &srv->m;
    buf_put(&m->in, bytes, len);
    if (m->in.oom) {
        m->in.oom = false;
        master_malformed(srv, "out of memory");
        return;
    }
    if (m->state == M_SYNC && master_handshake(srv) <= 0) return;
    const char *err = "";
    long n = kv_apply_stream(&srv->kv, &srv->lim, srv->argv, m->in.p, m->in.len,
                             &err);
    if (n < 0) {
        master_malformed(srv, err);
        return;
    }
    buf_consume(&m->in, (size_t)n);
    if (srv->kv.offset != m->acked) lull_task_post(srv->loop, &m->ack);
}

static void master_connected(lull_stream *s, int status) {
    server *srv = LULL_CONTAINER_OF(s, server, m.s);
    master *m = &srv->m;
    if (status < 0) {
        fprintf(stderr, "lull-kv: replica: connect to %s:%d: %s\n", m->host,
                m->port, strerror(-status));
        master_down(srv);
        return;
    }
    m->state = M_SYNC;
    char req[160], off[24], port[8];
    const char *id = m->replid[0] ? m->replid : "?";
    int on = snprintf(off, sizeof off, "%" PRIu64, srv->kv.offset);
    int pn = snprintf(port, sizeof port, "%d", srv->port);
    int n = snprintf(req, sizeof req,
                     "*4\r\n$8\r\nREPLSYNC\r\n$%zu\r\n%s\r\n$%d\r\n%s\r\n"
                     "$%d\r\n%s\r\n",
                     strlen(id), id, on, off, pn, port);
    lull_endpoint_send_copy(&m->s.ep, req, (size_t)n);
}

static void master_connect(server *srv) {
    master *m = &srv->m;
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .connect_timeout_ns = CONNECT_TIMEOUT_NS};
    m->state = M_CONNECTING;
    int rc = lull_stream_connect_tcp(srv->loop, &m->s, m->addr, m->port, &o,
                                     master_connected);
    if (rc < 0) {
        fprintf(stderr, "lull-kv: replica: connect to %s:%d: %s\n", m->host,
                m->port, strerror(-rc));
        master_down(srv);
        return;
    }
    lull_endpoint_set_callbacks(&m->s.ep, master_frame, NULL, master_closed);
}

/* ----------------------------------------------------------------- main */

static int usage(void) {
    fprintf(stderr,
            "usage: lull-kv [--port N] [--unix PATH] [--max-bulk BYTES]\n"
            "               [--replica-of HOST:PORT] "
            "[--repl-mode per-record|budget]\n");
    return 2;
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
    kv_init(&srv.kv);
    srv.lim.max_bulk = (size_t)64 << 20; /* 64 MiB: see --max-bulk */
    srv.lim.max_args = MAX_ARGS;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--port") == 0) {
            port = atoi(argv[++i]);
        } else if (i + 1 < argc && strcmp(argv[i], "--unix") == 0) {
            unix_path = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--max-bulk") == 0) {
            srv.lim.max_bulk = strtoull(argv[++i], NULL, 10);
        } else if (i + 1 < argc && strcmp(argv[i], "--replica-of") == 0) {
            if (!parse_hostport(argv[++i], &srv.m)) return usage();
            srv.kv.replica = true;
        } else if (i + 1 < argc && strcmp(argv[i], "--repl-mode") == 0) {
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
    the_server = &srv;
    make_replid(srv.kv.replid);
    int rc;
    if ((rc = store_init(&srv.kv.db)) < 0 ||
        (rc = lull_loop_new(&srv.loop, NULL)) < 0) {
        fprintf(stderr, "lull-kv: %s\n", strerror(-rc));
        return 1;
    }
    rc = lull_server_listen_tcp(srv.loop, &srv.tcp, "127.0.0.1", port, 0,
                                accept_conn);
    if (rc < 0) {
        fprintf(stderr, "lull-kv: listen on 127.0.0.1:%d: %s\n", port,
                strerror(-rc));
        return 1;
    }
    if (unix_path) {
        unlink(unix_path); /* a socket file left by an earlier run */
        rc = lull_server_listen_unix(srv.loop, &srv.unx, unix_path, 0,
                                     accept_conn);
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
    if (srv.kv.replica) {
        srv.kv.master_host = srv.m.host;
        srv.kv.master_port = srv.m.port;
        srv.m.backoff_ns = RETRY_MIN_NS;
        lull_timer_init(srv.loop, &srv.m.retry, master_retry);
        lull_task_init(&srv.m.ack, ack_send);
        srv.m.ack_frame.release = ack_release;
        master_connect(&srv);
    }
    lull_loop_run(srv.loop, LULL_RUN_DEFAULT);
    lull_server_close(&srv.tcp);
    if (srv.has_unix) lull_server_close(&srv.unx);
    kv_free(&srv.kv);
    lull_loop_free(srv.loop);
    return 0;
}
