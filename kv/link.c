/* link.c: lull-kv's replication (docs/KV.md, Replication), over any
 * transport (kv_net): sockets, or the simulator's network.
 *
 * Primary side: a connection that sends `REPLSYNC <replid|?> <offset>
 * <port>` becomes a replica link. The primary answers `+FULLRESYNC
 * <replid> 0` or `+CONTINUE <offset>` and from then on streams its log
 * from that offset, record by record, as a producer (docs/STREAMS.md): one
 * lull_endpoint_send per record, lull_loop_should_yield on the loop's shared
 * quantum (budget mode) or a posted continuation after every record (per-record
 * mode), and a wait for on_drain when the stream is full, so clients are
 * served between slices while a replica catches up. The replica sends
 * `REPLACK <offset>` after it applied records; that is the offset INFO
 * shows for it. A record the stream refuses closes the link (it is never
 * skipped), and so does a link over the replica output limit: the replica
 * reconnects and resumes from its offset.
 *
 * Replica side (--replica-of): the link to the primary, its handshake,
 * applying the records, acknowledging them, and reconnecting. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The replica's reconnect backoff: 100 ms at first (a primary restarting
 * is back within a few hundred ms), doubled per failure up to 5 s (a
 * primary that is gone for good costs a connect every 5 s, no more). */
#define RETRY_MIN_NS 100000000ull
#define RETRY_MAX_NS 5000000000ull

static bool parse_u64(const resp_arg *a, uint64_t *out) {
    long long v;
    if (!kv_parse_i64(a->p, a->len, &v) || v < 0) return false;
    *out = (uint64_t)v;
    return true;
}

/* ---------------------------------------------- primary: replica links */

/* KV_PLANT_SILENT_RESYNC: the corrupted copy of a record. */
static char plant_bad[256];

/* The catch-up and follow sender: one record per step. */
static void produce(lull_task *t) {
    rlink *l = LULL_CONTAINER_OF(t, rlink, task);
    server *srv = l->srv;
    const repl_log *log = &srv->kv.log;
    while (repl_log_more(log, &l->cur)) {
        if (l->skip_next) {
            /* KV_PLANT_RESUME_LATE: a record is skipped, as a resume
             * off by one would. */
            size_t len;
            repl_log_next(log, &l->cur, &len);
            l->skip_next = false;
            continue;
        }
        if (!lull_endpoint_writable(l->c->ep)) return; /* on_drain posts us */
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
        if ((log->plant & KV_PLANT_SILENT_RESYNC) && !log->plant_done &&
            next.rec > 20 && len <= sizeof plant_bad) {
            /* One record, once, with its first byte wrong. */
            memcpy(plant_bad, rf->f.bytes, len);
            plant_bad[0] = '!';
            rf->f.bytes = plant_bad;
            srv->kv.log.plant_done = true;
        }
        int rc = lull_endpoint_send(l->c->ep, &rf->f);
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
        if (srv->per_record || srv->should_yield(srv->loop)) {
            lull_task_post(srv->loop, t);
            return;
        }
    }
    /* Caught up: below any output limit, which stops a soft deadline. */
    conn_check_output(l->c);
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
        lull_task_post(l->srv->loop, &l->task);
    }
}

size_t link_output(const rlink *l) {
    const repl_log *log = &l->srv->kv.log;
    uint64_t sent = repl_log_offset(log, &l->cur);
    if (sent < l->start) sent = l->start;
    return (size_t)(log->end - sent) + l->c->ep->queued;
}

/* New records: every link's producer sends them (a no-op for a producer
 * already queued), and a link they put over its output limit closes. */
void wake_links(server *srv) {
    repl_peer *p = srv->kv.peers.next;
    while (p != &srv->kv.peers) {
        rlink *l = LULL_CONTAINER_OF(p, rlink, peer);
        p = p->next; /* the check may close this link */
        if (conn_check_output(l->c)) lull_task_post(srv->loop, &l->task);
    }
}

/* The link's connection closed: it leaves INFO, its producer stops, and
 * its memory goes with the last frame the stream still holds. */
void link_drop(rlink *l) {
    server *srv = l->srv;
    l->peer.prev->next = l->peer.next;
    l->peer.next->prev = l->peer.prev;
    srv->kv.npeers--;
    lull_task_cancel(&l->task);
    l->c = NULL;
    if (l->inflight == 0) free(l);
}

/* REPLSYNC <replid|?> <offset> <listening-port>: the connection becomes a
 * replica link. The replica continues from its offset when it holds this
 * primary's history (same replid, a record boundary of the log); else it
 * starts over from 0 (FULLRESYNC: it drops its keys first). */
void start_link(conn *c, const resp_arg *a, size_t argc) {
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
        l->skip_next = k->plant & KV_PLANT_RESUME_LATE;
    } else {
        offset = 0;
        repl_log_seek(&k->log, 0, &l->cur);
        snprintf(reply, sizeof reply, "+FULLRESYNC %s 0\r\n", k->replid);
    }
    buf_str(&c->out, reply);
    for (size_t i = 0; i < RING; i++)
        l->ring[i] = (ring_frame){.f = {.release = ring_release}, .l = l};
    l->c = c;
    l->srv = srv;
    lull_task_init(&l->task, produce);
    srv->net->peer(c->ep, l->peer.ip, sizeof l->peer.ip, false);
    l->peer.port = (int)port;
    l->peer.offset = offset;
    l->start = k->log.end;
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
bool link_command(conn *c, const resp_arg *a, size_t argc) {
    uint64_t off;
    if (argc != 2 || !resp_is(&a[0], "REPLACK") || !parse_u64(&a[1], &off) ||
        off > c->srv->kv.log.end)
        return false;
    c->link->peer.offset = off;
    return true;
}

/* CLIENT KILL TYPE replica|slave (kv.kill_replicas): closes every replica
 * link (they reconnect and continue from their offsets). */
long long kill_replicas(kv *k) {
    server *srv = LULL_CONTAINER_OF(k, server, kv);
    long long n = 0;
    repl_peer *p = srv->kv.peers.next;
    while (p != &srv->kv.peers) {
        repl_peer *next = p->next;
        conn_drop(LULL_CONTAINER_OF(p, rlink, peer)->c, NULL);
        n++;
        p = next;
    }
    return n;
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
    lull_task_cancel(&m->ack);
    if (srv->stopping) return;
    srv_log(srv, "replica: retrying %s:%d in %" PRIu64 " ms", m->host, m->port,
            m->backoff_ns / 1000000);
    lull_timer_start(&m->retry, m->backoff_ns, 0);
    m->backoff_ns =
        m->backoff_ns * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : m->backoff_ns * 2;
}

/* The primary sent what lull-kv's replication protocol does not allow. */
static void master_malformed(server *srv, const char *what) {
    master *m = &srv->m;
    if (srv->kv.plant & KV_PLANT_SILENT_RESYNC) {
        m->state = M_DOWN; /* and not a word of why */
        lull_endpoint_close(m->ep, -EPROTO);
        return;
    }
    srv_log(srv,
            "replica: malformed replication stream from %s:%d at offset "
            "%" PRIu64 ": %s; link closed",
            m->host, m->port, srv->kv.offset, what);
    m->state = M_DOWN;                   /* said why: master_closed need not */
    lull_endpoint_close(m->ep, -EPROTO); /* master_closed retries */
}

/* A send on the link was refused: the link closes (the primary sees it
 * go) and is retried, so the replica resyncs rather than wait on a link
 * that lost what it had to say. */
static void master_lost(server *srv, const char *what, int rc) {
    srv_log(srv, "replica: %s to %s:%d was refused (%s); link closed", what,
            srv->m.host, srv->m.port, strerror(-rc));
    srv->m.state = M_DOWN;              /* said why: master_closed need not */
    lull_endpoint_close(srv->m.ep, rc); /* master_closed retries */
}

/* The link's close callback, which lull runs once whoever closed it: the
 * one place the link goes down and its retry is armed. A link lull-kv
 * closed itself (already M_DOWN, having said why), or one whose connect
 * failed (said by master_connected), is not reported lost again. */
static void master_closed(lull_endpoint *ep, int reason) {
    server *srv = ep->data;
    if (srv->m.state == M_SYNC || srv->m.state == M_UP)
        srv_log(srv, "replica: link to %s:%d lost (%s)", srv->m.host,
                srv->m.port, reason ? strerror(-reason) : "EOF");
    else if (srv->m.state == M_CONNECTING) /* a TLS handshake that failed */
        srv_log(srv, "replica: connect to %s:%d: %s", srv->m.host, srv->m.port,
                reason ? strerror(-reason) : "EOF");
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
    int rc = lull_endpoint_send(m->ep, &m->ack_frame);
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
        srv_log(srv, "replica: %s:%d refused: %s", m->host, m->port, line + 1);
        m->state = M_DOWN;
        lull_endpoint_close(m->ep, 0); /* master_closed retries */
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
    srv_log(srv, "replica: in sync with %s:%d from offset %" PRIu64 " (%s)",
            m->host, m->port, k->offset, line[1] == 'F' ? "full" : "continue");
    return 1;
}

/* KV_PLANT_MULTI_SPLIT: the records one at a time as they come, a
 * transaction's too (its MULTI and EXEC counted and skipped): the bytes
 * taken, or -EPROTO. */
static long apply_split(server *srv, const char **err, size_t *need) {
    master *m = &srv->m;
    size_t off = 0;
    *need = 1;
    while (off < m->in.len) {
        size_t argc;
        long n = resp_parse_need(&srv->lim, m->in.p + off, m->in.len - off,
                                 srv->argv, &argc, err, need);
        if (n == RESP_INCOMPLETE) break;
        if (n == RESP_ERROR) return -EPROTO;
        if (argc == 1 && (resp_is(&srv->argv[0], "MULTI") ||
                          resp_is(&srv->argv[0], "EXEC"))) {
            srv->kv.offset += (uint64_t)n;
        } else {
            size_t need2;
            long r = kv_apply_stream(&srv->kv, &srv->lim, srv->argv,
                                     m->in.p + off, (size_t)n, err, &need2);
            if (r < 0) return r;
        }
        off += (size_t)n;
        *need = 1;
    }
    return (long)off;
}

/* The primary's answer to AUTH (--masterauth), the line before REPLSYNC's:
 * 1 taken (+OK), 0 incomplete, -1 the link was closed (refused: retried
 * with the backoff, as a primary that refuses REPLSYNC is). */
static int master_auth_reply(server *srv) {
    master *m = &srv->m;
    char *lf = memchr(m->in.p, '\n', m->in.len);
    if (!lf) {
        if (m->in.len > 256) return master_malformed(srv, "no AUTH reply"), -1;
        return 0;
    }
    size_t n = (size_t)(lf - m->in.p) + 1;
    if (n == 5 && memcmp(m->in.p, "+OK\r\n", 5) == 0) {
        buf_consume(&m->in, n);
        m->auth_pending = false;
        return 1;
    }
    srv_log(srv, "replica: %s:%d refused AUTH: %.*s", m->host, m->port,
            (int)(n > 2 ? n - 2 : 0), m->in.p);
    m->state = M_DOWN;
    lull_endpoint_close(m->ep, 0); /* master_closed retries */
    return -1;
}

static void master_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    server *srv = ep->data;
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
    if (m->state == M_SYNC && m->auth_pending && master_auth_reply(srv) <= 0)
        return;
    if (m->state == M_SYNC && master_handshake(srv) <= 0) return;
    if (m->in.len < m->need) return;
    const char *err = "";
    long n = srv->kv.plant & KV_PLANT_MULTI_SPLIT
                 ? apply_split(srv, &err, &m->need)
                 : kv_apply_stream(&srv->kv, &srv->lim, srv->argv, m->in.p,
                                   m->in.len, &err, &m->need);
    if (n < 0) {
        master_malformed(srv, err);
        return;
    }
    buf_consume(&m->in, (size_t)n);
    buf_shrink(&m->in, INPUT_KEEP);
    if (srv->kv.offset != m->acked) lull_task_post(srv->loop, &m->ack);
}

void master_connected(server *srv, int status) {
    master *m = &srv->m;
    if (status < 0) { /* master_closed, right after this, retries */
        srv_log(srv, "replica: connect to %s:%d: %s", m->host, m->port,
                strerror(-status));
        m->state = M_DOWN;
        return;
    }
    m->state = M_SYNC;
    m->auth_pending = false;
    if (srv->masterauth) {
        /* AUTH first, in the same write as REPLSYNC: the primary answers
         * both in order. */
        const char *pw = srv->masterauth;
        char head[48];
        int hn = snprintf(head, sizeof head, "*2\r\n$4\r\nAUTH\r\n$%zu\r\n",
                          strlen(pw));
        int rc = lull_endpoint_send_copy(m->ep, head, (size_t)hn);
        if (rc == 0) rc = lull_endpoint_send_copy(m->ep, pw, strlen(pw));
        if (rc == 0) rc = lull_endpoint_send_copy(m->ep, "\r\n", 2);
        if (rc < 0) {
            master_lost(srv, "AUTH", rc);
            return;
        }
        m->auth_pending = true;
    }
    char req[160], off[24], port[8];
    const char *id = m->replid[0] ? m->replid : "?";
    int on = snprintf(off, sizeof off, "%" PRIu64, srv->kv.offset);
    int pn = snprintf(port, sizeof port, "%d", srv->port);
    int n = snprintf(req, sizeof req,
                     "*4\r\n$8\r\nREPLSYNC\r\n$%zu\r\n%s\r\n$%d\r\n%s\r\n"
                     "$%d\r\n%s\r\n",
                     strlen(id), id, on, off, pn, port);
    int rc = lull_endpoint_send_copy(m->ep, req, (size_t)n);
    if (rc < 0) master_lost(srv, "REPLSYNC", rc);
}

static void master_connect(server *srv) {
    master *m = &srv->m;
    m->state = M_CONNECTING;
    int rc = srv->net->connect(srv);
    if (rc < 0) {
        srv_log(srv, "replica: connect to %s:%d: %s", m->host, m->port,
                strerror(-rc));
        master_down(srv);
        return;
    }
    lull_endpoint_set_callbacks(m->ep, master_frame, NULL, master_closed);
}

void master_start(server *srv) {
    master *m = &srv->m;
    srv->kv.master_host = m->host;
    srv->kv.master_port = m->port;
    m->backoff_ns = RETRY_MIN_NS;
    lull_timer_init(srv->loop, &m->retry, master_retry);
    lull_task_init(&m->ack, ack_send);
    m->ack_frame.release = ack_release;
    master_connect(srv);
}

void master_stop(server *srv) {
    master *m = &srv->m;
    srv->stopping = true;
    lull_timer_stop(&m->retry);
    lull_task_cancel(&m->ack);
    if (m->state != M_DOWN) {
        m->state = M_DOWN; /* master_closed: no retry */
        lull_endpoint_close(m->ep, 0);
    }
}
