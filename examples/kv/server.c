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
 * record by record, as a producer (docs/STREAMS.md): one lull_send per
 * record, lull_should_yield on the loop's shared quantum (budget mode) or
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
#include <stdarg.h>
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

/* Replies at least this long are handed to the stream as they are (the
 * buffer becomes the frame, freed once written) rather than copied, and a
 * connection sends what it has gathered once it reaches this much: 64 KiB,
 * the stream's high-water mark. So a large reply is never copied twice, a
 * connection keeps no buffer larger than about this between bursts, and a
 * pipeline of large replies waits for the client to read (on_drain). */
#define REPLY_HANDOVER ((size_t)64 << 10)

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
    size_t need;     /* apply again once `in` holds this many bytes */
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
    size_t need;    /* parse `in` again once it holds this many bytes */
    buf out;        /* replies to the current chunk, sent at its end */
    bool closing;   /* QUIT or a protocol error: input is ignored now */
    bool waiting;   /* replies filled the stream: `in` waits for on_drain */
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

static void conn_drop(conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The catch-up and follow sender: one record per step. */
static void produce(lull_task *t) {
    rlink *l = LULL_CONTAINER_OF(t, rlink, task);
    server *srv = the_server;
    const repl_log *log = &srv->kv.log;
    while (repl_log_more(log, &l->cur)) {
        if (!lull_writable(&l->c->s.ep)) return; /* on_drain posts us */
        ring_frame *rf = &l->ring[l->ring_next % RING];
        if (rf->f.in_flight) { /* its release posts us */
            l->starved = true;
            return;
        }
        /* The cursor moves only once the stream took the record: a record
         * that cannot be sent is never skipped. */
        repl_cursor next = l->cur;
        size_t len;
        rf->f.bytes = repl_log_next(log, &next, &len);
        rf->f.len = len;
        int rc = lull_send(&l->c->s.ep, &rf->f);
        if (rc < 0) {
            /* The replica resyncs from its offset when it reconnects. */
            conn_drop(l->c,
                      "the record at offset %" PRIu64 " (%zu bytes) was "
                      "refused (%s)",
                      repl_log_offset(log, &l->cur), len, strerror(-rc));
            return;
        }
        l->cur = next;
        l->ring_next++;
        l->inflight++;
        if (srv->per_record || lull_should_yield(srv->loop)) {
            lull_post(srv->loop, t);
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
        lull_post(the_server->loop, &l->task);
    }
}

/* New records: every link's producer sends them (a no-op for a producer
 * already queued). */
static void wake_links(server *srv) {
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers; p = p->next)
        lull_post(srv->loop, &LULL_CONTAINER_OF(p, rlink, peer)->task);
}

/* The link's connection closed: it leaves INFO, its producer stops, and
 * its memory goes with the last frame the stream still holds. */
static void link_drop(rlink *l) {
    server *srv = the_server;
    l->peer.prev->next = l->peer.next;
    l->peer.next->prev = l->peer.prev;
    srv->kv.npeers--;
    lull_cancel(&l->task);
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
    lull_post(srv->loop, &l->task);
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
static void conn_finish(conn *c);

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
        conn_drop(LULL_CONTAINER_OF(p, rlink, peer)->c, NULL);
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

/* "ip:port" of the connection's peer, for log lines ("unix" for a Unix
 * socket). */
static const char *conn_name(conn *c, char *s, size_t cap) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    char ip[INET6_ADDRSTRLEN] = "?";
    snprintf(s, cap, "unix");
    if (getpeername(lull_stream_fd(&c->s), (struct sockaddr *)&sa, &len) != 0)
        return s;
    if (sa.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(s, cap, "%s:%d", ip, ntohs(in->sin_port));
    } else if (sa.ss_family == AF_INET6) {
        struct sockaddr_in6 *in = (struct sockaddr_in6 *)&sa;
        inet_ntop(AF_INET6, &in->sin6_addr, ip, sizeof ip);
        snprintf(s, cap, "[%s]:%d", ip, ntohs(in->sin6_port));
    }
    return s;
}

/* Closes the connection now and frees it (no on_close follows), after a
 * line on stderr saying why. A connection whose last replies (`fin`) are
 * still in flight is freed by fin's release, which the close runs. */
static void conn_drop(conn *c, const char *fmt, ...) {
    if (fmt) {
        char name[64], why[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        fprintf(stderr, "lull-kv: %s %s: %s; connection closed\n",
                c->link ? "replica" : "client", conn_name(c, name, sizeof name),
                why);
    }
    bool finishing = c->fin.in_flight;
    c->gone = true;
    lull_endpoint_close(&c->s.ep, 0);
    if (!finishing) conn_free(c);
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

/* A reply buffer handed to the stream whole (see REPLY_HANDOVER). */
typedef struct handover {
    lull_frame f;
    char *p; /* the buffer, freed once written */
} handover;

static void handover_release(lull_frame *f) {
    handover *h = LULL_CONTAINER_OF(f, handover, f);
    free(h->p);
    free(h);
}

/* Sends the replies gathered so far. Small ones are copied (one
 * allocation per batch, not per command: the output buffer is reused);
 * from REPLY_HANDOVER bytes on, the buffer itself becomes the frame and a
 * fresh one starts, so a large reply is neither copied again nor kept
 * once written. A refused send closes the connection with the reason:
 * a reply is never dropped while later ones still go out. False when the
 * connection was closed. */
static bool flush(conn *c) {
    if (c->out.len == 0) return true;
    size_t len = c->out.len;
    int rc;
    if (len >= REPLY_HANDOVER) {
        handover *h = malloc(sizeof *h);
        rc = -ENOMEM;
        if (h) {
            h->p = c->out.p;
            h->f = (lull_frame){
                .bytes = h->p, .len = len, .release = handover_release};
            rc = lull_send(&c->s.ep, &h->f);
            if (rc == 0)
                c->out = (buf){0};
            else
                free(h);
        }
    } else {
        rc = lull_send_copy(&c->s.ep, c->out.p, len);
        c->out.len = 0;
    }
    if (rc < 0) {
        conn_drop(c, "a reply of %zu bytes was refused (%s)", len,
                  strerror(-rc));
        return false;
    }
    return true;
}

/* Runs the complete commands at the front of p[0, len): *used gets the
 * bytes they took. It stops at an incomplete command, when the connection
 * starts closing (QUIT, a protocol error), or when its replies have filled
 * the stream: then the rest waits for on_drain (c->waiting), so a
 * connection holds at most about the high-water mark plus one reply
 * however many requests one read brought. False when the connection was
 * closed (and freed). */
static bool run_commands(conn *c, const char *p, size_t len, size_t *used) {
    server *srv = c->srv;
    uint64_t log_end = srv->kv.log.end;
    size_t off = 0;
    bool alive = true;
    while (!c->closing && !c->in.oom && !c->out.oom) {
        size_t argc;
        const char *err = NULL;
        long n = resp_parse_need(&srv->lim, p + off, len - off, srv->argv,
                                 &argc, &err, &c->need);
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
                conn_drop(c, "sent what is not REPLACK <offset>");
                alive = false;
                break;
            }
        } else if (resp_is(&srv->argv[0], "REPLSYNC")) {
            start_link(c, srv->argv, argc);
        } else if (!client_kill_replicas(srv, srv->argv, argc, &c->out)) {
            if (kv_exec(&srv->kv, srv->argv, argc, &c->out) & KV_QUIT)
                c->closing = true;
        }
        if (c->out.len >= REPLY_HANDOVER && !c->closing) {
            if (!flush(c)) {
                alive = false;
                break;
            }
            if (!lull_writable(&c->s.ep)) {
                c->waiting = true; /* on_drain runs the rest */
                break;
            }
        }
    }
    /* Records logged: every replica link sends them (even when this
     * connection is gone: the writes were made). */
    if (srv->kv.log.end != log_end) wake_links(srv);
    *used = off;
    return alive;
}

/* After a batch of commands: send their replies, or end the connection,
 * and stop reading while the stream is full. */
static void conn_after(conn *c) {
    if (c->in.oom || c->out.oom) {
        conn_drop(c, "out of memory");
        return;
    }
    if (c->closing) {
        conn_finish(c);
        return;
    }
    if (!flush(c)) return;
    if (!lull_writable(&c->s.ep)) lull_stream_read_stop(&c->s);
}

/* Keeps the bytes of a command that is not all there. The buffer grows
 * to the size the command needs (c->need, from the parser) and no more,
 * and the parser runs again only once that many bytes are in: a large
 * argument is copied once, from the stream's buffer into this one, and
 * its read costs the same per byte however it is cut. */
static void keep_input(conn *c, const char *bytes, size_t len) {
    if (!buf_reserve_upto(&c->in, len, c->need)) {
        c->in.oom = true;
        return;
    }
    buf_put(&c->in, bytes, len);
}

/* Between bursts a connection keeps no large input buffer (64 KiB: one
 * read of the stream's). */
#define INPUT_KEEP ((size_t)64 << 10)

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    if (c->closing) return;
    size_t used;
    if (c->in.len == 0 && !c->waiting) {
        /* Nothing left over: commands are parsed in the stream's own
         * buffer (valid for this call) and only an unparsed tail is
         * copied, so the common chunk of whole commands is not copied. */
        if (!run_commands(c, bytes, len, &used)) return;
        if (used < len && !c->closing)
            keep_input(c, (const char *)bytes + used, len - used);
    } else {
        keep_input(c, bytes, len);
        if (!c->waiting && !c->in.oom && c->in.len >= c->need) {
            if (!run_commands(c, c->in.p, c->in.len, &used)) return;
            buf_consume(&c->in, used);
            buf_shrink(&c->in, INPUT_KEEP);
        }
    }
    conn_after(c);
}

static void on_drain(lull_endpoint *ep) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    lull_stream_read_start(&c->s);
    if (c->link) lull_post(c->srv->loop, &c->link->task);
    if (!c->waiting || c->closing) return;
    c->waiting = false;
    size_t used;
    if (!run_commands(c, c->in.p, c->in.len, &used)) return;
    buf_consume(&c->in, used);
    buf_shrink(&c->in, INPUT_KEEP);
    conn_after(c);
}

/* Stops serving this client: its last replies leave as `fin`, the write
 * side is shut, and fin's release closes the socket. c may be gone when
 * this returns. */
static void conn_finish(conn *c) {
    c->closing = true;
    if (c->out.len == 0) {
        conn_drop(c, NULL);
        return;
    }
    c->fin = (lull_frame){
        .bytes = c->out.p, .len = c->out.len, .release = fin_release};
    int rc = lull_send(&c->s.ep, &c->fin);
    if (rc < 0) {
        conn_drop(c, "its last reply was refused (%s)", strerror(-rc));
        return;
    }
    lull_stream_shutdown(&c->s);
}

static void accept_conn(lull_server *ls) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return; /* the waiting connection is closed when we return */
    c->srv = the_server;
    /* Raw: max_frame only bounds one send. lull-kv bounds what a
     * connection holds itself (run_commands' backpressure), so a reply is
     * never refused for its size: a 17 MiB GET answer is one frame. */
    lull_stream_options o = {.flags = LULL_STREAM_RAW, .max_frame = SIZE_MAX};
    if (lull_stream_accept(ls, &c->s, &o) < 0) {
        free(c);
        return;
    }
    c->srv->kv.clients++;
    lull_endpoint_callbacks(&c->s.ep, on_frame, on_drain, on_close);
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
    m->need = 0;
    buf_shrink(&m->in, INPUT_KEEP);
    lull_cancel(&m->ack);
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

/* A send on the link was refused: the link closes (the primary sees it
 * go) and is retried, so the replica resyncs rather than wait on a link
 * that lost what it had to say. */
static void master_lost(server *srv, const char *what, int rc) {
    fprintf(stderr,
            "lull-kv: replica: %s to %s:%d was refused (%s); link closed\n",
            what, srv->m.host, srv->m.port, strerror(-rc));
    lull_endpoint_close(&srv->m.s.ep, rc); /* no on_close follows */
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
    int rc = lull_send(&m->s.ep, &m->ack_frame);
    if (rc < 0) {
        master_lost(srv, "REPLACK", rc);
        return;
    }
    m->acked = srv->kv.offset;
}

static void ack_release(lull_frame *f) {
    server *srv = LULL_CONTAINER_OF(f, server, m.ack_frame);
    master *m = &srv->m;
    if (m->ack_again && m->state == M_UP) {
        m->ack_again = false;
        lull_post(srv->loop, &m->ack);
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
    /* As a client's input (keep_input): the buffer grows to the record
     * being received, and records are parsed again only once it is in. */
    if (!buf_reserve_upto(&m->in, len, m->need)) m->in.oom = true;
    buf_put(&m->in, bytes, len);
    if (m->in.oom) {
        m->in.oom = false;
        master_malformed(srv, "out of memory");
        return;
    }
    if (m->state == M_SYNC && master_handshake(srv) <= 0) return;
    if (m->in.len < m->need) return;
    const char *err = "";
    long n = kv_apply_stream(&srv->kv, &srv->lim, srv->argv, m->in.p, m->in.len,
                             &err, &m->need);
    if (n < 0) {
        master_malformed(srv, err);
        return;
    }
    buf_consume(&m->in, (size_t)n);
    buf_shrink(&m->in, INPUT_KEEP);
    if (srv->kv.offset != m->acked) lull_post(srv->loop, &m->ack);
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
    int rc = lull_send_copy(&m->s.ep, req, (size_t)n);
    if (rc < 0) master_lost(srv, "REPLSYNC", rc);
}

static void master_connect(server *srv) {
    master *m = &srv->m;
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .connect_timeout_ns = CONNECT_TIMEOUT_NS};
    m->state = M_CONNECTING;
    int rc = lull_tcp_connect(srv->loop, &m->s, m->addr, m->port, &o,
                              master_connected);
    if (rc < 0) {
        fprintf(stderr, "lull-kv: replica: connect to %s:%d: %s\n", m->host,
                m->port, strerror(-rc));
        master_down(srv);
        return;
    }
    lull_endpoint_callbacks(&m->s.ep, master_frame, NULL, master_closed);
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
    rc = lull_tcp_listen(srv.loop, &srv.tcp, "127.0.0.1", port, 0, accept_conn);
    if (rc < 0) {
        fprintf(stderr, "lull-kv: listen on 127.0.0.1:%d: %s\n", port,
                strerror(-rc));
        return 1;
    }
    if (unix_path) {
        unlink(unix_path); /* a socket file left by an earlier run */
        rc = lull_unix_listen(srv.loop, &srv.unx, unix_path, 0, accept_conn);
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
    lull_run(srv.loop, LULL_RUN_DEFAULT);
    lull_server_close(&srv.tcp);
    if (srv.has_unix) lull_server_close(&srv.unx);
    kv_free(&srv.kv);
    lull_loop_free(srv.loop);
    return 0;
}
