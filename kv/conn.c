/* conn.c: lull-kv's client connections.
 *
 * Each connection is an endpoint in raw mode (a lull_stream with
 * LULL_STREAM_RAW, or a simulated connection with LULL_SIMCONN_RAW): bytes
 * arrive in chunks of any size at on_frame. Every complete command at the
 * front of what arrived is run (pipelining), and what is left is kept for
 * the next chunk (partial reads): a command that is not all there is kept
 * in a buffer the size the parser says it needs, and parsed again only
 * once that much is in, so a large argument costs the same per byte
 * however it is cut; and its parse goes on where the last read's stopped
 * (c->ps), so a command of many arguments does too. The replies to one
 * chunk go out as one send, so a pipeline of N commands costs one write,
 * not N; once they reach the stream's high-water mark the connection stops
 * running commands and reading until they drain.
 *
 * QUIT and a protocol error (`-ERR Protocol error: ...`) end a connection:
 * the last replies go out as one frame of our own, the write side is shut,
 * and the frame's release (it is in the kernel) closes the socket, so the
 * server does not wait for the client to hang up. A send the stream
 * refuses, a query buffer over client-query-buffer-limit and an output
 * buffer over client-output-buffer-limit close the connection with a line
 * on stderr. No other connection notices. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "blob.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* blob.h's threshold is the reply handover's size (its comment says why):
 * one figure, checked where both are seen. */
_Static_assert(KV_BLOB_MIN == REPLY_HANDOVER,
               "KV_BLOB_MIN and REPLY_HANDOVER must stay one size");

static void server_command(conn *c, const resp_arg *a, size_t argc);

/* The connection stops being a client: no subscription, no queued
 * transaction, no message will be added to its output (which a `fin` in
 * flight may be pointing at). Idempotent. */
static void conn_quiet(conn *c) {
    kv_client_reset(&c->srv->kv, &c->cl);
    lull_task_cancel(&c->kick);
}

static void say_auth_failures(conn *c);

static void conn_free(conn *c) {
    server *srv = c->srv;
    if (c->auth_unsaid) say_auth_failures(c);
    if (c->ep && srv->net->io_counts) {
        uint64_t r, w;
        srv->net->io_counts(c->ep, &r, &w);
        srv->gone_reads += r;
        srv->gone_writes += w;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    srv->clients_mem -= c->mem; /* (closed by its peer: no conn_drop) */
    if (c->link)
        link_drop(c->link);
    else
        c->srv->kv.clients--;
    conn_quiet(c);
    lull_timer_stop(&c->soft);
    lull_timer_stop(&c->auth_due);
    buf_free(&c->in);
    buf_free(&c->out);
    buf_free(&c->sent);
    if (c->blob) kv_blob_unref(c->blob); /* a request cut short */
    if (c->vref) kv_blob_unref(c->vref);
    free(c);
}

/* Closes the connection, saying why (fmt) unless it is an ordinary end.
 * Its memory goes in on_close, which lull runs once in a later turn, after
 * every frame it sent (`fin` included) was released: the one place a
 * connection is freed, whoever closed it. Idempotent. */
/* Logs why this connection closes: a replica named as in every line
 * about it (its address and listening port), a client by its address. */
static void say_closed(conn *c, const char *why) {
    if (c->link)
        srv_log(c->srv, "replica %s:%d: %s; connection closed",
                c->link->peer.ip, c->link->peer.port, why);
    else
        srv_log(c->srv, "client %s: %s; connection closed", c->name, why);
}

void conn_drop(conn *c, const char *fmt, ...) {
    if (c->gone) return; /* closed already: on_close frees it */
    if (fmt) {
        char why[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        say_closed(c, why);
    }
    c->srv->clients_mem -= c->mem; /* its memory goes with it */
    c->mem = 0;
    c->gone = true;
    conn_quiet(c);
    /* A snapshot child holds the socket open too: it goes now. */
    if (c->link) link_stop_child(c->link);
    lull_endpoint_close(c->ep, 0);
}

static void on_close(lull_endpoint *ep, int reason) {
    conn *c = ep->data;
    /* EOF, reset, ...: the client is gone either way. A TLS handshake
     * that failed (a plaintext client on the TLS port, a certificate
     * refused, a timeout) is said, with OpenSSL's words, and so is a bad
     * record after it (bytes that are not TLS, a record that fails its
     * MAC), as a plaintext client's protocol error is answered. An EOF
     * without close_notify (-EPROTO too, said "EOF ...") is not:
     * redis-cli and redis-py end so. */
    const char *why = c->tls ? lull_tls_error_string(&c->t.tls) : NULL;
    if (c->tls && !c->gone &&
        (reason == -ECONNABORTED || reason == -EKEYREJECTED ||
         reason == -ETIMEDOUT)) {
        srv_log(c->srv, "client %s: TLS %s (%s); connection closed", c->name,
                reason == -ETIMEDOUT ? "handshake timed out"
                                     : "handshake failed",
                why && *why ? why : strerror(-reason));
    } else if (c->tls && !c->gone && reason == -EPROTO && why && *why &&
               strncmp(why, "EOF", 3) != 0) {
        srv_log(c->srv, "client %s: TLS protocol error (%s); connection closed",
                c->name, why);
    } else if (c->link && !c->gone) {
        /* A replica gone on its own (a crash, a reset) leaves the log a
         * line, as Redis' "Connection with replica ... lost". A replica
         * is named as in every line about it: its address and the port
         * it listens on, which REPLSYNC gave. */
        srv_log(c->srv, "replica %s:%d: connection lost (%s)", c->link->peer.ip,
                c->link->peer.port,
                reason < 0 ? strerror(-reason) : "end of stream");
    }
    conn_free(c);
}

/* The last replies are in the kernel (or were dropped by a close): the
 * connection is done, and closes if it has not already. */
static void fin_release(lull_frame *f) {
    conn_drop(LULL_CONTAINER_OF(f, conn, fin), NULL);
}

/* ------------------------------------------------------------ limits */

static const char *const class_name[CLASSES] = {"normal", "replica", "pubsub"};

static int conn_class(const conn *c) {
    if (c->link) return CLASS_REPLICA;
    return kv_client_subscribed(&c->cl) ? CLASS_PUBSUB : CLASS_NORMAL;
}

/* What the connection holds for its peer: replies not yet handed to the
 * stream and bytes queued in it; for a replica link, the log it is
 * behind by since it started (link_output). */
static size_t conn_output(const conn *c) {
    if (c->link) return link_output(c->link);
    return c->out.len + c->ep->queued;
}

/* The soft output limit's deadline: a connection may stay over its
 * class's soft limit for soft_ns, no longer. Its five rows (README):
 *   trigger          conn_check_output finding the connection over the
 *                    soft limit with the timer not armed: after replies
 *                    were queued, after records were logged (replica
 *                    links), and on drain
 *   source of truth  conn_output(c) against srv->obl[class].soft
 *   pending work     the connection was over the soft limit when last
 *                    looked at
 *   next deadline    soft_ns after it was first seen over (never moved
 *                    while it stays over: Redis counts from the first
 *                    crossing too)
 *   quiet            seen under the soft limit, or no soft limit: no timer
 * No check runs on a period: the timer is armed only while over, and when
 * it fires it looks again and closes only a connection still over. */
static void soft_due(lull_timer *t) {
    conn *c = LULL_CONTAINER_OF(t, conn, soft);
    c->soft_armed = false;
    const obuf_limit *lim = &c->srv->obl[conn_class(c)];
    size_t used = conn_output(c);
    if (lim->soft && used >= lim->soft && c->link) c->srv->links_over_limit++;
    if (lim->soft && used >= lim->soft)
        conn_drop(c,
                  "output buffer of %zu bytes over the %s soft limit (%zu) "
                  "for %" PRIu64 " s",
                  used, class_name[conn_class(c)], lim->soft,
                  lim->soft_ns / 1000000000u);
}

/* A write to c->out failed: out of memory, or past the cap conn_new set
 * (a reply still being built went over the output hard limit). What the
 * buffer holds is never sent, and goes now, not in on_close a turn later:
 * another client's reply built in this turn would have the memory of both
 * (two clients refused at a 1gb limit took 2 GB). */
static void drop_unwritten(conn *c) {
    bool over = c->out.over;
    size_t used = conn_output(c);
    int cls = conn_class(c);
    if (!c->closing) buf_free(&c->out); /* (a `fin` may point at it) */
    if (!over) {
        conn_drop(c, "out of memory");
        return;
    }
    conn_drop(c,
              "output buffer of %zu bytes and a reply that would take it "
              "over the %s hard limit (%zu)",
              used, class_name[cls], c->srv->obl[cls].hard);
}

/* ------------------------------------------------- maxmemory-clients */

/* The clients' buffers together are held to maxmemory-clients: each
 * client under its own limits, many of them (each with a reply it never
 * reads) could still take the machine's memory, and the OOM killer would
 * end lull-kv and every client with it. Past the budget the client
 * holding the most is closed, then the next, until the rest are under
 * it, as Redis 7's client eviction does.
 *
 * The sum is kept as each client is looked at, not summed per send: a
 * client's part (conn.mem) changes when its output is checked (a send
 * with check_at reached, on drain), when part of a command is kept, when
 * its queued transaction passes queue_check, and when it closes. Replies
 * and a queued transaction under CLIENT_MEM_MIN together count 0, so a
 * send of the usual small reply costs flush's one comparison it had
 * (check_at in place of the hard limit). Input kept counts whatever its
 * size: it is looked at as it is kept, off the send path, and a client
 * keeps it as long as it likes by never ending its command (counted 0
 * under 64 KiB, 2000 clients kept 118 MB so at an 8 MiB budget). The sum
 * may be stale high (a client's bytes drained with nothing to look at it
 * since); over the budget, every client is looked at again before any is
 * closed. */
#define CLIENT_MEM_MIN REPLY_HANDOVER

/* What c holds for its peer, counted from CLIENT_MEM_MIN on: its replies
 * not yet handed to the stream, the stream's queue, its queued
 * transaction and its watches. */
static size_t conn_held(const conn *c) {
    size_t n =
        c->out.len + c->ep->queued + c->cl.queue_bytes + c->cl.watch_bytes;
    return n < CLIENT_MEM_MIN ? 0 : n;
}

/* What c holds: conn_held, and its input buffer and a large argument
 * being received (its bytes so far, or whole), whatever their size. */
static size_t conn_mem(const conn *c) {
    size_t blob = c->blob_want ? c->blob_got : c->blob ? c->ps.ext_len + 2 : 0;
    return c->in.cap + blob + conn_held(c);
}

/* flush's and run_batch's tests for c: see conn.check_at. */
static void set_check(conn *c) {
    size_t hard = c->srv->obl[CLASS_NORMAL].hard;
    size_t at = hard ? hard : SIZE_MAX, queue = c->srv->qbuf_limit;
    if (c->srv->maxmemory_clients) {
        size_t m = c->mem && conn_held(c) ? 0 : CLIENT_MEM_MIN;
        if (m < at) at = m;
        if (m < queue) queue = m;
    }
    c->check_at = at;
    c->queue_check = queue;
}

/* Whether the budget applies to c: a client, not a replica's link (the
 * link to a primary is no conn), nor one closed already. */
static bool evictable(const conn *c) {
    return !c->link && !c->gone;
}

/* c's part of the sum, set to n. */
static void set_mem(conn *c, size_t n) {
    c->srv->clients_mem += n - c->mem; /* (modulo: n may be less) */
    c->mem = n;
    set_check(c);
}

/* What the clients holding `at_least` bytes or more hold together. */
static size_t held_from(server *srv, size_t at_least) {
    size_t sum = 0;
    for (conn *d = srv->conns; d; d = d->next) {
        srv->evict_steps++;
        if (evictable(d) && d->mem >= at_least) sum += d->mem;
    }
    return sum;
}

/* Closes, each with its log line, the clients holding more than `cut`
 * (exactly `cut` with `exact`) while the clients are over the budget. */
static void evict_at(server *srv, size_t cut, bool exact) {
    size_t budget = srv->maxmemory_clients;
    for (conn *d = srv->conns; d && srv->clients_mem > budget; d = d->next) {
        srv->evict_steps++;
        if (!evictable(d) || (exact ? d->mem != cut : d->mem <= cut)) continue;
        srv->evicted_clients++;
        conn_drop(d,
                  "evicted, of the clients holding the most (%zu bytes) "
                  "while the clients hold %zu, over maxmemory-clients (%zu)",
                  d->mem, srv->clients_mem, budget);
        /* What it holds unsent goes now, as drop_unwritten's: the next
         * command would otherwise add to the memory it still takes until
         * its close a turn later (a `fin` may point at it when closing). */
        if (!d->closing) buf_free(&d->out);
    }
}

/* Over the budget: every client looked at again, then the ones holding
 * the most closed until the rest are under it. They are the ones holding
 * more than `cut`, then as many holding exactly `cut` as it takes (the
 * first in the list, as taking the biggest one at a time would): cut is
 * the largest part such that the clients holding at least that much free
 * enough, found by halving, a walk of the clients a step (no halving when
 * the biggest alone is enough, the usual case: two walks). Taking the
 * biggest one walk at a time cost a walk per client closed: one CONFIG
 * SET closing 8000 clients stalled lull-kv 5.9 s. */
static void evict(server *srv) {
    size_t most = 0;
    for (conn *d = srv->conns; d; d = d->next) {
        srv->evict_steps++;
        if (!evictable(d)) continue;
        set_mem(d, conn_mem(d));
        if (d->mem > most) most = d->mem;
    }
    size_t budget = srv->maxmemory_clients;
    if (!budget || srv->clients_mem <= budget) return;
    size_t excess = srv->clients_mem - budget, lo = 1, hi = most;
    if (most >= excess) { /* the usual one: the biggest is enough */
        evict_at(srv, most, true);
        return;
    }
    while (lo < hi) { /* held_from(lo) >= excess > held_from(hi + 1) */
        size_t mid = lo + (hi - lo + 1) / 2;
        if (held_from(srv, mid) >= excess)
            lo = mid;
        else
            hi = mid - 1;
    }
    evict_at(srv, lo, false);
    evict_at(srv, lo, true);
}

/* c looked at: its part of the sum brought up to date, and the clients
 * over the budget closed. False when c was among them. */
static bool account(conn *c) {
    if (!evictable(c)) return !c->gone;
    server *srv = c->srv;
    set_mem(c, conn_mem(c));
    if (srv->clients_mem > srv->maxmemory_clients) evict(srv);
    return !c->gone;
}

void clients_evict(lull_task *t) {
    server *srv = LULL_CONTAINER_OF(t, server, evict);
    if (srv->maxmemory_clients && srv->clients_mem > srv->maxmemory_clients)
        evict(srv);
}

void conn_budget_set(server *srv, size_t budget) {
    srv->maxmemory_clients = budget;
    snprintf(srv->maxmemory_clients_text, sizeof srv->maxmemory_clients_text,
             "%zu", budget);
    /* Every client is looked at again (no budget: none is counted), and
     * the ones over it are closed in a later turn: the client that set it
     * is still running its command. */
    for (conn *c = srv->conns; c; c = c->next)
        if (evictable(c)) set_mem(c, budget ? conn_mem(c) : 0);
    if (budget && srv->clients_mem > budget && srv->loop)
        lull_task_post(srv->loop, &srv->evict);
}

const char *conn_config_set(kv *k, const resp_arg *name,
                            const resp_arg *value) {
    static const char param[] = "maxmemory-clients";
    if (name->len != sizeof param - 1 ||
        strncasecmp(name->p, param, sizeof param - 1) != 0)
        return "";
    size_t n;
    /* Bytes only: lull-kv has no maxmemory for a percentage to be of. */
    if (!kv_parse_size(value->p, value->len, &n))
        return "-ERR CONFIG SET failed (possibly related to argument "
               "'maxmemory-clients') - argument must be a memory value\r\n";
    conn_budget_set(LULL_CONTAINER_OF(k, server, kv), n);
    return NULL;
}

bool conn_check_output(conn *c) {
    if (c->srv->maxmemory_clients && !account(c)) return false;
    int cls = conn_class(c);
    const obuf_limit *lim = &c->srv->obl[cls];
    if (!lim->hard && !lim->soft && !c->soft_armed) return true;
    size_t used = conn_output(c);
    if (lim->hard && used >= lim->hard) {
        if (c->link) c->srv->links_over_limit++;
        conn_drop(c, "output buffer of %zu bytes over the %s hard limit (%zu)",
                  used, class_name[cls], lim->hard);
        return false;
    }
    if (lim->soft && used >= lim->soft) {
        if (!c->soft_armed) lull_timer_start(&c->soft, lim->soft_ns, 0);
        c->soft_armed = true;
    } else if (c->soft_armed) {
        lull_timer_stop(&c->soft);
        c->soft_armed = false;
    }
    return true;
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

/* The stream wrote the replies in `sent` (or dropped them in a close):
 * the buffer is free for the next batch. */
static void outf_release(lull_frame *f) {
    conn *c = LULL_CONTAINER_OF(f, conn, outf);
    c->outf_busy = false;
    c->sent.len = 0;
    buf_shrink(&c->sent, REPLY_HANDOVER);
}

/* The bytes of c->out as one frame (see flush): 0 or the send's error. */
static inline __attribute__((always_inline)) int send_out(conn *c) {
    size_t len = c->out.len;
    int rc;
    if (len >= REPLY_HANDOVER) {
        handover *h = malloc(sizeof *h);
        rc = -ENOMEM;
        if (h) {
            h->p = c->out.p;
            h->f = (lull_frame){
                .bytes = h->p, .len = len, .release = handover_release};
            rc = lull_endpoint_send(c->ep, &h->f);
            if (rc == 0)
                c->out = (buf){.max = c->out.max};
            else
                free(h);
        }
    } else if (!c->outf_busy) {
        /* The bytes change places; each buffer keeps its own cap and
         * flags (moving the whole structs cost a reply 5 instructions). */
        char *spare = c->sent.p;
        size_t spare_cap = c->sent.cap;
        c->sent.p = c->out.p;
        c->sent.cap = c->out.cap;
        c->sent.len = len;
        c->out.p = spare;
        c->out.cap = spare_cap;
        c->out.len = 0;
        c->outf = (lull_frame){
            .bytes = c->sent.p, .len = len, .release = outf_release};
        /* Busy before the send: a transport may release it inside. */
        c->outf_busy = true;
        rc = lull_endpoint_send(c->ep, &c->outf);
        if (rc < 0 || (c->srv->kv.plant & KV_PLANT_OUTF_RESEND))
            c->outf_busy = false;
    } else {
        rc = lull_endpoint_send_copy(c->ep, c->out.p, len);
        c->out.len = 0;
    }
    return rc;
}

/* A GET's blob in flight (conn_reply_blob): the value's bytes where they
 * are, then the rest of c->out after them (its CRLF), which the same
 * block holds; the blob is let go once its frame is released, the block
 * once both are. */
typedef struct blob_reply {
    lull_frame value, tail;
    const char *blob; /* held until `value` is released */
    int frames;       /* of the two, the ones not released yet */
    char rest[];      /* tail's bytes */
} blob_reply;

static void blob_reply_done(blob_reply *r) {
    if (--r->frames == 0) free(r);
}

static void blob_value_release(lull_frame *f) {
    blob_reply *r = LULL_CONTAINER_OF(f, blob_reply, value);
    kv_blob_unref(r->blob);
    blob_reply_done(r);
}

static void blob_tail_release(lull_frame *f) {
    blob_reply_done(LULL_CONTAINER_OF(f, blob_reply, tail));
}

/* flush with a blob to send by reference: c->out up to it, the blob, and
 * what followed it. 0 or the first send's error (the later frames then
 * not sent: the connection closes). */
static __attribute__((noinline)) int send_with_blob(conn *c) {
    const char *v = c->vref;
    size_t at = c->vref_at, rest = c->out.len - at;
    c->vref = NULL;
    blob_reply *r = malloc(sizeof *r + rest);
    if (!r) {
        kv_blob_unref(v);
        return -ENOMEM;
    }
    memcpy(r->rest, c->out.p + at, rest);
    c->out.len = at;
    r->blob = v;
    r->frames = 2;
    r->value = (lull_frame){
        .bytes = v, .len = c->vref_len, .release = blob_value_release};
    r->tail = (lull_frame){
        .bytes = r->rest, .len = rest, .release = blob_tail_release};
    int rc = at ? send_out(c) : 0;
    if (rc == 0) rc = lull_endpoint_send(c->ep, &r->value);
    if (rc < 0) {
        kv_blob_unref(v);
        free(r);
        return rc;
    }
    rc = rest ? lull_endpoint_send(c->ep, &r->tail) : 0;
    if (rc < 0 || !rest) blob_reply_done(r); /* the tail is not out */
    return rc;
}

/* Sends the replies gathered so far. The usual batch is sent from its
 * own buffer, which changes places with the spare one (`sent`, free
 * again once written): no copy, no allocation per batch, two buffers per
 * connection that send. While the last batch is still in flight (the
 * client is slow to read) a batch is copied instead (one allocation).
 * From REPLY_HANDOVER bytes on, the buffer itself becomes the frame and a
 * fresh one starts, so a large reply is neither copied again nor kept
 * once written; a GET's blob is sent where it is (send_with_blob). A
 * refused send closes the connection with the reason: a reply is never
 * dropped while later ones still go out. False when the connection was
 * closed. */
static inline __attribute__((always_inline)) bool flush(conn *c) {
    /* A write into the buffer failed (oom): what it holds is missing a
     * reply or message, or ends in part of one, and sending it would
     * hand the client the next ones as the answers to earlier requests.
     * The handover and the swap below would also clear the flag. */
    if (c->out.oom) {
        drop_unwritten(c);
        return false;
    }
    size_t len = c->out.len;
    int rc;
    if (__builtin_expect(c->vref != NULL, 0)) {
        len += c->vref_len;
        rc = send_with_blob(c);
    } else {
        if (len == 0) return true;
        rc = send_out(c);
    }
    if (rc < 0) {
        conn_drop(c, "a reply of %zu bytes was refused (%s)", len,
                  strerror(-rc));
        return false;
    }
    /* The common case, a normal client under its hard limit (lull-kv's
     * default 1gb, or none) with no soft limit, holding less than
     * maxmemory-clients counts (check_at), costs a few loads here, not
     * conn_check_output's call (27 instructions a GET). */
    if (!c->link && !kv_client_subscribed(&c->cl) && !c->soft_armed &&
        !c->srv->obl[CLASS_NORMAL].soft &&
        c->out.len + c->ep->queued < c->check_at)
        return true;
    return conn_check_output(c);
}

bool conn_reply_blob(kv_client *cl, const char *bytes, size_t len) {
    conn *c = cl->owner;
    /* One at a time (run_commands sends it after its command), and not
     * past the output cap: the copy says so in its own words. */
    if (c->vref || c->out.oom || (c->out.max && len > c->out.max - c->out.len))
        return false;
    buf_int(&c->out, '$', (long long)len);
    kv_blob_ref(bytes);
    c->vref = bytes;
    c->vref_at = c->out.len;
    c->vref_len = len;
    buf_put(&c->out, "\r\n", 2);
    return true;
}

/* The stream holds as much of this connection's output as it should:
 * stop running commands and reading until on_drain. Not "not writable":
 * an end whose peer is gone is not writable either (the simulated network
 * and the loopback pair mark it at once, with bytes still to read), but
 * no drain ever comes to it, and reading is what brings the EOF that
 * closes it; its bytes queued are 0 then, as on a closed end. */
static inline bool output_full(const lull_endpoint *ep) {
    return !lull_endpoint_writable(ep) && ep->queued > 0;
}

/* ------------------------------------------------------------- AUTH */

/* Equal, in a time that does not depend on where they differ (Redis'
 * time_independent_strcmp does the same for its passwords). */
static bool same_secret(const resp_arg *a, const char *secret) {
    size_t n = strlen(secret);
    unsigned char diff = a->len != n;
    for (size_t i = 0; i < a->len; i++)
        diff |= (unsigned char)a->p[i] ^ (unsigned char)secret[i < n ? i : 0];
    return diff == 0;
}

/* A connection's failed AUTHs are logged with its address, the first at
 * once and then at most one line a second with their count: a client
 * guessing at the rate it can pipeline (a million a second) would
 * otherwise have the server write five times its request's bytes to
 * stderr, the loop blocked while stderr is slow. Failures held back are
 * said when the second is up (auth_due), or at the close if sooner, so
 * a client that guesses in a burst and then stays shows in full. Its
 * five rows (README):
 *   trigger          a failed AUTH within a second of the last line
 *   source of truth  c->auth_unsaid, c->auth_said
 *   pending work     auth_unsaid > 0
 *   next deadline    auth_said + AUTH_LOG_NS (auth_due, one shot)
 *   quiet            nothing held back: the timer is not armed */
#define AUTH_LOG_NS 1000000000ull

static void say_auth_failures(conn *c) {
    if (!c->auth_said)
        srv_log(c->srv, "client %s: AUTH failed", c->name);
    else
        srv_log(c->srv, "client %s: %" PRIu64 " more failed AUTHs", c->name,
                c->auth_unsaid);
    /* (the loop's clock starts above 0 on a real clock; 1 stands for "a
     * line was said" on a virtual one that starts at 0) */
    uint64_t now = lull_loop_now(c->srv->loop);
    c->auth_said = now ? now : 1;
    c->auth_unsaid = 0;
    lull_timer_stop(&c->auth_due);
}

static void auth_due(lull_timer *t) {
    conn *c = LULL_CONTAINER_OF(t, conn, auth_due);
    if (c->auth_unsaid) say_auth_failures(c);
}

/* kv.auth: AUTH password | AUTH username password, for the default user,
 * the only one (Redis 7's replies, byte for byte), at once or from EXEC's
 * queue. A failure is logged (say_auth_failures); it leaves a client
 * that was authenticated so (as Redis does). */
void conn_auth(kv_client *cl, const resp_arg *a, size_t argc, buf *out) {
    conn *c = cl->owner;
    server *srv = c->srv;
    if (argc > 3) {
        buf_str(out, "-ERR syntax error\r\n");
        return;
    }
    if (argc == 2 && !srv->requirepass) {
        buf_str(out, "-ERR AUTH <password> called without any password "
                     "configured for the default user. Are you sure your "
                     "configuration is correct?\r\n");
        return;
    }
    /* The user name byte for byte, as Redis' ACL looks a user up:
     * resp_is, made for command names, folded its case and took
     * "DEFAULT", a user Redis does not have. */
    bool user_ok =
        argc == 2 || (a[1].len == 7 && memcmp(a[1].p, "default", 7) == 0);
    bool ok = user_ok && (!srv->requirepass ||
                          same_secret(&a[argc - 1], srv->requirepass));
    if (ok) {
        cl->noauth = false;
        buf_str(out, "+OK\r\n");
        return;
    }
    uint64_t since = lull_loop_now(srv->loop) - c->auth_said;
    if (c->auth_unsaid++ == 0 && c->auth_said && since < AUTH_LOG_NS)
        lull_timer_start(&c->auth_due, AUTH_LOG_NS - since, 0);
    if (!c->auth_said || since >= AUTH_LOG_NS) say_auth_failures(c);
    buf_str(out, "-WRONGPASS invalid username-password pair or user is "
                 "disabled.\r\n");
}

/* Before kv_exec, for a client not authenticated while requirepass is
 * set: true when the command was refused here. AUTH, HELLO (which may
 * carry AUTH, and refuses itself without it), RESET and QUIT go on to
 * kv_exec, as Redis lets them;
 * EXEC's refusal is worded as Redis words a rejected EXEC. */
static bool auth_gate(conn *c, const resp_arg *a, size_t argc) {
    (void)argc;
    if (resp_is(&a[0], "AUTH") || resp_is(&a[0], "QUIT") ||
        resp_is(&a[0], "HELLO") || resp_is(&a[0], "RESET"))
        return false;
    if (resp_is(&a[0], "EXEC"))
        buf_str(&c->out, "-EXECABORT Transaction discarded because of: "
                         "NOAUTH Authentication required.\r\n");
    else
        buf_str(&c->out, "-NOAUTH Authentication required.\r\n");
    return true;
}

/* A malformed request (err: the parser's "Protocol error: ..."): the
 * client is told, the connection closes once that line is written, and
 * the log says so with its address, as redis-server logs "Protocol error
 * (...) from client: ..." (at its verbose level; lull-kv has one). One
 * line per connection: it reads nothing more. */
static void protocol_error(conn *c, const char *err) {
    static const char prefix[] = "Protocol error: ";
    char why[160];
    const char *reason = err;
    if (strncmp(err, prefix, sizeof prefix - 1) == 0)
        reason += sizeof prefix - 1;
    snprintf(why, sizeof why, "protocol error (%s)", reason);
    say_closed(c, why);
    buf_str(&c->out, "-ERR ");
    buf_str(&c->out, err);
    buf_str(&c->out, "\r\n");
    c->closing = true;
}

/* A command of a client that must AUTH and has not: parsed under Redis'
 * small request bounds (resp_limits.noauth), so a peer without the
 * password gets no 512 MB argument buffered. Out of the authenticated
 * path, which keeps its limits in place and its one-pass parse. */
static __attribute__((noinline)) long
parse_unauthenticated(conn *c, const char *p, size_t len, size_t *argc,
                      const char **err) {
    resp_limits lim = c->srv->lim;
    lim.noauth = true;
    return resp_parse_general(&lim, &c->ps, p, len, c->srv->argv, argc, err,
                              &c->need);
}

/* Runs the complete commands at the front of p[0, len): *used gets the
 * bytes they took. It stops at an incomplete command, when the connection
 * starts closing (QUIT, a protocol error), or when its replies have filled
 * the stream: then the rest waits for on_drain (c->waiting), so a
 * connection holds at most about the high-water mark plus one reply
 * however many requests one read brought. False when the connection was
 * closed (and freed). */
static bool run_batch(conn *c, const char *p, size_t len, size_t *used) {
    server *srv = c->srv;
    uint64_t log_end = srv->kv.log.end;
    size_t off = 0;
    bool alive = true;
    for (;;) {
        /* All taken, the common end of a read, is looked at first: the
         * flags below cannot bring a command to run, and at one command
         * per read (-P 1) their loads were a tenth of this loop's cost. */
        if (off == len) {
            c->need = 1;
            break;
        }
        if (c->closing || c->in.oom || c->out.oom) break;
        size_t argc;
        const char *err = NULL;
        /* Looked at per command: the AUTH before this one may have passed. */
        bool gated = c->cl.noauth && !c->link;
        long n = __builtin_expect(gated, 0)
                     ? parse_unauthenticated(c, p + off, len - off, &argc, &err)
                     : resp_parse_resume(&srv->lim, &c->ps, p + off, len - off,
                                         srv->argv, &argc, &err, &c->need);
        if (n == RESP_INCOMPLETE) break;
        if (__builtin_expect(n < 0, 0)) {
            if (n == RESP_GROW) { /* a long command: parsed on */
                if (server_args(srv, argc)) continue;
                c->in.oom = true; /* conn_after closes it */
                break;
            }
            protocol_error(c, err);
            break;
        }
        off += (size_t)n;
        if (argc == 0) continue;
        if (gated && auth_gate(c, srv->argv, argc)) continue;
        if (c->link) {
            if (!link_command(c, srv->argv, argc)) {
                conn_drop(c, "sent what is not REPLACK <offset>");
                alive = false;
                break;
            }
        } else {
            int r = kv_exec(&srv->kv, &c->cl, srv->argv, argc, &c->out);
            if (__builtin_expect(r != 0, 0)) { /* QUIT, REPLSYNC */
                if (r & KV_QUIT) c->closing = true;
                if (r & KV_SERVER) server_command(c, srv->argv, argc);
            }
            /* A queued transaction is input not yet run: held to the
             * query buffer's limit, or MULTI and SETs never EXECed would
             * take as much memory as the client sent (Redis has no
             * bound on it). Its watches, keys kept for WATCH, count in
             * maxmemory-clients' sum as it does. */
            if (__builtin_expect(c->cl.queue_bytes + c->cl.watch_bytes >
                                     c->queue_check,
                                 0)) {
                if (c->cl.queue_bytes > srv->qbuf_limit) {
                    conn_drop(c,
                              "queued transaction of %zu bytes over "
                              "client-query-buffer-limit (%zu)",
                              c->cl.queue_bytes, srv->qbuf_limit);
                    alive = false;
                    break;
                }
                /* (counted in maxmemory-clients' sum too) */
                if (srv->maxmemory_clients && !account(c)) {
                    alive = false;
                    break;
                }
            }
            /* Its messages put the subscribers over the budget (conn_wake):
             * the clients holding the most go now, before the next command
             * adds more, not when their kicks get to run. */
            if (__builtin_expect(srv->evict_due, 0)) {
                srv->evict_due = false;
                evict(srv);
                if (c->gone) {
                    alive = false;
                    break;
                }
            }
        }
        if ((c->out.len >= REPLY_HANDOVER && !c->closing) ||
            __builtin_expect(c->vref != NULL, 0)) {
            if (!flush(c)) {
                /* KV_PLANT_BATCH_DEATH: the batch's records not sent. */
                if (srv->kv.plant & KV_PLANT_BATCH_DEATH) return false;
                alive = false;
                break;
            }
            if (output_full(c->ep)) {
                c->waiting = true; /* on_drain runs the rest */
                break;
            }
        }
    }
    /* Records logged: every replica link sends them (even when this
     * connection is gone: the writes were made). Expiry times changed:
     * the timer follows the earliest. */
    if (srv->kv.log.end != log_end && srv->kv.npeers) wake_links(srv);
    if (srv->kv.expiry_changed) kv_expiry_rearm(&srv->expiry);
    *used = off;
    return alive;
}

/* A blob received (c->blob, ready as c->ps.ext) is its command's last
 * argument: SET may keep it (kv.arg_blob); once the command was parsed
 * it is freed unless kept. */
static __attribute__((noinline)) bool run_with_blob(conn *c, const char *p,
                                                    size_t len, size_t *used) {
    kv *k = &c->srv->kv;
    if (c->blob_want) { /* still filling: nothing can be parsed yet */
        *used = 0;
        return true;
    }
    k->arg_blob = c->ps.ext ? c->blob : NULL;
    bool alive = run_batch(c, p, len, used);
    if (!c->ps.ext) { /* parsed (and run, or refused): it is done with */
        if (k->arg_blob) kv_blob_unref(k->arg_blob);
        c->blob = NULL;
    }
    k->arg_blob = NULL;
    return alive;
}

static inline __attribute__((always_inline)) bool
run_commands(conn *c, const char *p, size_t len, size_t *used) {
    if (__builtin_expect(c->blob != NULL, 0))
        return run_with_blob(c, p, len, used);
    return run_batch(c, p, len, used);
}

/* REPLSYNC, the one command kv_exec leaves to the server (once its checks
 * passed: not in a transaction, not subscribed): the connection becomes a
 * replica link. */
static void server_command(conn *c, const resp_arg *a, size_t argc) {
    start_link(c, a, argc);
    /* A link is not counted in maxmemory-clients: its part as a client
     * leaves the sum now, or it would stay there (never looked at again)
     * for as long as the link lives, and clients holding far less than
     * the budget would be closed for it. */
    if (c->link) set_mem(c, 0);
}

/* After a batch of commands: send their replies, or end the connection,
 * and stop reading while the stream is full. */
static inline __attribute__((always_inline)) void conn_after(conn *c) {
    if (__builtin_expect(c->out.oom | c->in.oom, 0)) { /* one test */
        if (c->out.oom)
            drop_unwritten(c);
        else
            conn_drop(c, "out of memory");
        return;
    }
    if (c->closing) {
        conn_finish(c);
        return;
    }
    if (!flush(c)) return;
    if (c->out.cap > REPLY_HANDOVER) buf_shrink(&c->out, REPLY_HANDOVER);
    if (output_full(c->ep)) c->srv->net->read_stop(c->ep);
}

/* Keeps the bytes of a command that is not all there. The buffer grows
 * to the size the command needs (c->need, from the parser), or to twice
 * its size (within the limit) when that is more, and the parser runs
 * again only once that many bytes are in: a large argument is copied
 * once, from the stream's buffer into this one, and its read costs the
 * same per byte however it is cut. (The parser's need is only the end of
 * the argument being received: grown to just that, a command of many
 * small arguments would be moved by realloc at every read.) A command
 * that needs more than client-query-buffer-limit closes the connection as
 * soon as its size is known (Redis closes it once that much has arrived).
 * False when the connection was closed. */
static bool keep_input(conn *c, const char *bytes, size_t len);

/* Bytes for the blob being filled: when it is full, its command waits to
 * run (c->need 0) with the bytes before the blob in `in`, and the ones
 * after it are kept behind them. False when the connection was closed. */
static bool blob_feed(conn *c, const char *bytes, size_t len) {
    size_t take = c->blob_want - c->blob_got;
    if (take > len) take = len;
    memcpy(c->blob + c->blob_got, bytes, take);
    c->blob_got += take;
    if (c->blob_got < c->blob_want) return true;
    size_t blen = c->blob_want - 2;
    c->blob_want = c->blob_got = 0;
    if (c->blob[blen] != '\r' || c->blob[blen + 1] != '\n') {
        /* The parser's answer had the bytes come in the buffer. */
        kv_blob_unref(c->blob);
        c->blob = NULL;
        protocol_error(c, "Protocol error: expected CRLF after bulk");
        return true;
    }
    c->ps.ext = c->blob;
    c->ps.ext_len = blen;
    c->need = 0;
    return take == len || keep_input(c, bytes + take, len - take);
}

/* The command being received (its bytes: in, then bytes[0, len)) has
 * stopped in its last argument's body, of KV_BLOB_MIN bytes or more:
 * that body goes to a blob of its exact size (its memory touched only as
 * the bytes arrive, and no realloc moving them), which SET then keeps as
 * the value. So a large SET costs one copy of its value, where it cost
 * two, and one allocation of its size, where it cost two. */
static bool blob_start(conn *c, const char *bytes, size_t len) {
    size_t body = c->ps.body, blen = c->need - body - 2;
    char *b = kv_blob_new(blen + 2);
    if (!b) {
        c->in.oom = true;
        return true;
    }
    size_t got = 0;
    if (c->in.len > body) { /* `in` holds the start of the body */
        got = c->in.len - body;
        memcpy(b, c->in.p + body, got);
        c->in.len = body;
    } else {
        size_t head = body - c->in.len;
        buf_put(&c->in, bytes, head);
        bytes += head;
        len -= head;
    }
    c->blob = b;
    c->blob_want = blen + 2;
    c->blob_got = got;
    c->need = SIZE_MAX; /* nothing to parse until the blob is full */
    return len == 0 || blob_feed(c, bytes, len);
}

/* Whether the command being received should go on into a blob: stopped
 * in the body of its last argument, a large one, of a client (a replica
 * link sends only REPLACK). */
static inline bool blob_due(const conn *c) {
    const resp_state *st = &c->ps;
    return st->body && !st->ext && !c->link && st->got + 1 == st->nargs &&
           c->need - st->body - 2 >= KV_BLOB_MIN;
}

static bool keep_input(conn *c, const char *bytes, size_t len) {
    if (__builtin_expect(c->blob_want != 0, 0)) return blob_feed(c, bytes, len);
    size_t limit = c->srv->qbuf_limit;
    if (c->in.len + len > limit || c->need > limit) {
        size_t n = c->in.len + len > c->need ? c->in.len + len : c->need;
        conn_drop(c,
                  "query buffer of %zu bytes over client-query-buffer-limit "
                  "(%zu)",
                  n, limit);
        return false;
    }
    if (__builtin_expect(blob_due(c), 0)) return blob_start(c, bytes, len);
    size_t want = 2 * c->in.cap < limit ? 2 * c->in.cap : limit;
    if (want < c->need) want = c->need;
    if (!buf_reserve_upto(&c->in, len, want)) {
        c->in.oom = true;
        return true;
    }
    buf_put(&c->in, bytes, len);
    return true;
}

/* keep_input, and the input kept counted in maxmemory-clients' sum. */
static bool keep_counted(conn *c, const char *bytes, size_t len) {
    if (!keep_input(c, bytes, len)) return false;
    return !c->srv->maxmemory_clients || account(c);
}

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    conn *c = ep->data;
    c->last_ns = lull_loop_now(c->srv->loop); /* CLIENT LIST's idle */
    if (c->closing) return;
    size_t used;
    if (c->in.len == 0 && !c->waiting && !c->blob) {
        /* Nothing left over: commands are parsed in the stream's own
         * buffer (valid for this call) and only an unparsed tail is
         * copied, so the common chunk of whole commands is not copied. */
        if (!run_commands(c, bytes, len, &used)) return;
        if (used < len && !c->closing &&
            !keep_counted(c, (const char *)bytes + used, len - used))
            return;
        /* (a blob may have filled from this chunk: its command runs) */
        if (__builtin_expect(c->blob == NULL, 1)) {
            conn_after(c);
            return;
        }
    } else if (!keep_counted(c, bytes, len)) {
        return;
    }
    if (!c->waiting && !c->in.oom && !c->closing && c->in.len >= c->need) {
        if (!run_commands(c, c->in.p, c->in.len, &used)) return;
        buf_consume(&c->in, used);
        buf_shrink(&c->in, INPUT_KEEP);
    }
    conn_after(c);
}

static void on_drain(lull_endpoint *ep) {
    conn *c = ep->data;
    if (!conn_check_output(c)) return;
    c->srv->net->read_start(c->ep);
    if (c->link) lull_task_post(c->srv->loop, &c->link->task);
    if (!c->waiting || c->closing) return;
    c->waiting = false;
    size_t used;
    if (!run_commands(c, c->in.p, c->in.len, &used)) return;
    buf_consume(&c->in, used);
    buf_shrink(&c->in, INPUT_KEEP);
    conn_after(c);
}

/* Stops serving this client: its last replies leave as `fin`, the write
 * side is shut, and fin's release closes the socket. */
void conn_finish(conn *c) {
    c->closing = true;
    conn_quiet(c);
    /* A replica link's backlog out on the sender thread has the socket's
     * write side until it is back: the last reply follows it (link.c's
     * sender_done finishes the connection then). */
    if (c->link && c->link->handed) {
        c->link->finish_pending = true;
        return;
    }
    if (c->out.len == 0) {
        conn_drop(c, NULL);
        return;
    }
    c->fin = (lull_frame){
        .bytes = c->out.p, .len = c->out.len, .release = fin_release};
    int rc = lull_endpoint_send(c->ep, &c->fin);
    if (rc < 0) {
        conn_drop(c, "its last reply was refused (%s)", strerror(-rc));
        return;
    }
    c->srv->net->shutdown(c->ep);
}

void conn_refuse(conn *c, const char *reply, const char *why) {
    srv_log(c->srv, "client %s: %s; connection closed", c->name, why);
    buf_str(&c->out, reply);
    conn_finish(c);
}

/* Messages were published to this client while it ran nothing itself:
 * send them, and hold it to its output limit. */
static void conn_kick(lull_task *t) {
    conn *c = LULL_CONTAINER_OF(t, conn, kick);
    if (c->closing) return;
    if (!flush(c)) return;
    buf_shrink(&c->out, REPLY_HANDOVER);
}

void conn_wake(kv_client *cl) {
    conn *c = cl->owner;
    lull_task_post(c->srv->loop, &c->kick);
    /* Held to the hard limit as messages are added, not only when the
     * kick sends them: one batch of a publisher's (an EXEC of PUBLISHes)
     * may add far more. A command is running (perhaps this client's own),
     * so the connection is not closed here: its buffer is marked failed
     * and stops growing (max), and the kick, or the end of its own batch,
     * closes it. */
    size_t hard = c->srv->obl[CLASS_PUBSUB].hard;
    if (hard && !c->out.oom && conn_output(c) >= hard) {
        c->out.oom = c->out.over = true;
        c->out.max = c->out.len ? c->out.len : 1;
    }
    /* Counted in maxmemory-clients as they are added too, and the clients
     * over it closed once the publishing command is done (run_batch). A
     * subscriber's part was brought up to date only by its kick's send,
     * a task per subscriber that runs as the loop's quantum allows: kicks
     * behind a publisher that went on let 200 subscribers hold 200 MB of
     * messages at a 32 MB budget, none closed, and messages that its
     * socket took whole at the kick were never counted at all. */
    server *srv = c->srv;
    if (srv->maxmemory_clients && evictable(c)) {
        set_mem(c, conn_mem(c));
        if (srv->clients_mem > srv->maxmemory_clients) srv->evict_due = true;
    }
}

/* The replies being built are held to the output hard limit as they
 * grow, not only once a command is done: one EXEC or MGET of a few KiB,
 * or an SRANDMEMBER with a count of -2^62, may ask for gigabytes. With
 * both classes a client moves between limited, the larger of the two
 * (SUBSCRIBE in a transaction changes the class midway), so the cap never
 * closes one its own class would keep; conn_check_output holds it to its
 * class's limit at each send. With one class unlimited, the client's own
 * class's limit, set again as a subscription moves it (kv.class_changed):
 * dropping the cap altogether let a normal client's reply grow until
 * malloc failed. A reply already refused (out.oom) keeps its cap. */
static void set_cap(conn *c) {
    const obuf_limit *o = c->srv->obl;
    size_t n = o[CLASS_NORMAL].hard, p = o[CLASS_PUBSUB].hard;
    if (c->out.oom) return;
    if (n && p)
        c->out.max = n > p ? n : p;
    else
        c->out.max = kv_client_subscribed(&c->cl) ? p : n;
    c->sent.max = c->out.max;
}

void conn_class_changed(kv_client *cl) {
    if (cl->owner) set_cap(cl->owner);
}

conn *conn_new(server *srv) {
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        /* Its transport closes it. Said once until a client is let in
         * again: a flood of connects would otherwise be a line each. */
        if (!srv->oom_said)
            srv_log(srv, "out of memory for a new client: its connection "
                         "closed, and any more until one is let in");
        srv->oom_said = true;
        return NULL;
    }
    srv->oom_said = false; /* a client was let in */
    c->srv = srv;
    kv_client_init(&c->cl, c, &c->out);
    set_cap(c);
    set_check(c);
    c->cl.noauth = srv->requirepass != NULL;
    lull_task_init(&c->kick, conn_kick);
    return c;
}

void conn_abort(conn *c) {
    free(c);
}

bool conn_start(conn *c, lull_endpoint *ep) {
    /* CLIENT ID, from 1: taken here, so a connection that never started
     * (an accept refused, out of fds) uses none. */
    c->cl.id = ++c->srv->kv.last_id;
    c->ep = ep;
    ep->data = c;
    c->srv->net->peer(ep, c->name, sizeof c->name, true);
    c->born_ns = c->last_ns = lull_loop_now(c->srv->loop);
    c->srv->kv.clients++;
    c->next = c->srv->conns;
    if (c->next) c->next->prev = c;
    c->srv->conns = c;
    lull_timer_init(c->srv->loop, &c->soft, soft_due);
    lull_timer_init(c->srv->loop, &c->auth_due, auth_due);
    lull_endpoint_set_callbacks(ep, on_frame, on_drain, on_close);
    server *srv = c->srv;
    size_t in = srv->kv.clients + srv->kv.npeers + srv->snap_fds; /* c too */
    if (!srv->maxclients || in <= srv->maxclients) {
        srv->full_said = false; /* a client was let in: refusing stopped */
        return true;
    }
    /* Redis' answer, and no line per refusal (a flood of connects would
     * be one): one when refusing starts, again once a client was let in
     * (at most a line per client accepted); INFO counts every one. */
    srv->rejected++;
    if (!srv->full_said)
        srv_log(srv,
                "max number of clients reached (%zu): refusing new "
                "clients",
                srv->maxclients);
    srv->full_said = true;
    buf_str(&c->out, "-ERR max number of clients reached\r\n");
    conn_finish(c);
    return false;
}

void conn_io_totals(const server *srv, uint64_t *reads, uint64_t *writes) {
    *reads = srv->gone_reads;
    *writes = srv->gone_writes;
    if (!srv->net->io_counts) return;
    for (const conn *c = srv->conns; c; c = c->next) {
        uint64_t r, w;
        srv->net->io_counts(c->ep, &r, &w);
        *reads += r;
        *writes += w;
    }
}

/* ------------------------------------------------- CLIENT LIST and KILL */

/* A client's addresses as CLIENT LIST gives them. */
typedef struct client_addrs {
    char addr[128], laddr[128];
    int fd;
    bool unix_sock;
} client_addrs;

/* c's, or (c NULL) the replica's link to its primary's. */
static void addrs_of(server *srv, conn *c, client_addrs *ad) {
    lull_endpoint *ep = c ? c->ep : srv->m.ep;
    ad->fd = -1;
    ad->unix_sock = false;
    snprintf(ad->laddr, sizeof ad->laddr, "%s", srv->name ? srv->name : "?:0");
    if (srv->net->local)
        ad->fd = srv->net->local(ep, !c, ad->laddr, sizeof ad->laddr,
                                 &ad->unix_sock);
    if (ad->unix_sock)
        snprintf(ad->addr, sizeof ad->addr, "%s", ad->laddr);
    else if (c)
        snprintf(ad->addr, sizeof ad->addr, "%s", c->name);
    else
        snprintf(ad->addr, sizeof ad->addr, "%s:%d", srv->m.addr, srv->m.port);
}

static bool same(const resp_arg *a, const char *s) {
    return a->len == strlen(s) && memcmp(a->p, s, a->len) == 0;
}

/* Whether f is about c (NULL: the link to the primary), asked by self.
 * The addresses are looked up only when f names one. */
static bool client_matches(server *srv, conn *c, const kv_client_filter *f,
                           const conn *self) {
    int type = !c                             ? KV_CLIENT_MASTER
               : c->link                      ? KV_CLIENT_REPLICA
               : kv_client_subscribed(&c->cl) ? KV_CLIENT_PUBSUB
                                              : KV_CLIENT_NORMAL;
    if (f->type >= 0 && f->type != type) return false;
    if (f->id && f->id != (c ? c->cl.id : srv->m.id)) return false;
    if (f->users && !c) return false; /* the primary's: (superuser) */
    if (f->skipme && c && c == self) return false;
    if (!f->addr && !f->laddr) return true;
    client_addrs ad;
    addrs_of(srv, c, &ad);
    return (!f->addr || same(f->addr, ad.addr)) &&
           (!f->laddr || same(f->laddr, ad.laddr));
}

static uint64_t secs(uint64_t ns) {
    return ns / 1000000000u;
}

/* c's (NULL: the link to the primary's) CLIENT LIST line. */
static void client_line(server *srv, conn *c, buf *out) {
    client_addrs ad;
    addrs_of(srv, c, &ad);
    uint64_t now = lull_loop_now(srv->loop);
    kv_conn_info ci = {.addr = ad.addr, .laddr = ad.laddr, .fd = ad.fd};
    if (!c) {
        const master *m = &srv->m;
        ci.id = m->id;
        ci.flags = KV_CF_MASTER;
        ci.age = secs(now - m->up_ns);
        ci.idle = secs(now - m->last_ns);
        ci.qbuf = m->in.len;
        ci.qbuf_free = m->in.cap - m->in.len;
        ci.omem = m->ep->queued;
        ci.tot_mem = sizeof *m + m->in.cap;
        ci.events = "r";
        kv_client_line(NULL, &ci, out);
        return;
    }
    ci.id = c->cl.id;
    ci.flags = (c->link ? KV_CF_REPLICA : 0) |
               (c->closing ? KV_CF_CLOSING : 0) |
               (ad.unix_sock ? KV_CF_UNIX : 0);
    ci.age = secs(now - c->born_ns);
    ci.idle = secs(now - c->last_ns);
    ci.qbuf = c->in.len + c->blob_got; /* a blob filling is query too */
    ci.qbuf_free = c->in.cap - c->in.len + (c->blob_want - c->blob_got);
    /* argv-mem: 0, arguments are read where they arrived, never copied */
    ci.rbs = c->out.cap;
    ci.rbp = c->out.len; /* no peak is kept: what it holds */
    ci.obl = c->out.len;
    ci.oll = c->outf_busy;
    ci.omem = c->link ? link_output(c->link) : c->ep->queued;
    /* (a blob being received or waiting to run is this client's too: its
     * bytes and CRLF, as the query buffer held them before blob.h) */
    size_t blob = c->blob_want ? c->blob_want : c->blob ? c->ps.ext_len + 2 : 0;
    ci.tot_mem = sizeof *c + c->in.cap + c->out.cap + c->sent.cap + blob +
                 (c->link ? sizeof *c->link : 0);
    bool reading = !c->closing && !c->waiting && !output_full(c->ep);
    bool writing = c->ep->queued > 0;
    ci.events = reading && writing ? "rw" : reading ? "r" : writing ? "w" : "";
    kv_client_line(&c->cl, &ci, out);
}

/* The connections, oldest first (the list holds the newest first), with
 * the link to the primary among them by its id; NULL ends the walk. */
static conn *oldest(server *srv) {
    conn *c = srv->conns;
    while (c && c->next)
        c = c->next;
    return c;
}

typedef struct client_ref {
    uint64_t id;
    conn *c; /* NULL: the link to the primary */
} client_ref;

static int by_id(const void *a, const void *b) {
    uint64_t x = ((const client_ref *)a)->id, y = ((const client_ref *)b)->id;
    return x < y ? -1 : x > y;
}

/* Every client of srv but the closed ones, by id (oldest first). NULL
 * when out of memory, or (*n 0) when there are none. */
static client_ref *client_refs(server *srv, size_t *n) {
    bool m = srv->m.state == M_UP;
    size_t count = m;
    for (conn *c = srv->conns; c; c = c->next)
        count += !c->gone;
    *n = 0;
    client_ref *r = malloc((count ? count : 1) * sizeof *r);
    if (!r) return NULL;
    for (conn *c = oldest(srv); c; c = c->prev)
        if (!c->gone) r[(*n)++] = (client_ref){c->cl.id, c};
    if (m) r[(*n)++] = (client_ref){srv->m.id, NULL};
    qsort(r, *n, sizeof *r, by_id);
    return r;
}

bool conn_client_list(kv *k, kv_client *cl, const kv_client_filter *f,
                      buf *out) {
    server *srv = LULL_CONTAINER_OF(k, server, kv);
    const conn *self = cl ? cl->owner : NULL;
    size_t n;
    client_ref *r = client_refs(srv, &n);
    if (!r) return false;
    if (!f->nids) {
        for (size_t i = 0; i < n; i++)
            if (client_matches(srv, r[i].c, f, self))
                client_line(srv, r[i].c, out);
    }
    /* CLIENT LIST ID: each id looked up (by halves: a hostile list of
     * ids costs its length times log n, not times n). */
    for (size_t i = 0; i < f->nids; i++) {
        long long id;
        kv_parse_i64(f->ids[i].p, f->ids[i].len, &id);
        client_ref key = {(uint64_t)id, NULL};
        const client_ref *hit =
            id > 0 ? bsearch(&key, r, n, sizeof *r, by_id) : NULL;
        if (hit) client_line(srv, hit->c, out);
    }
    free(r);
    return true;
}

/* Marks the clients f matches during the walk and closes them after it,
 * so that no close can change what the walk is reading; the asking
 * client (cl) closes once its reply is out, as after QUIT. A connection
 * closed already (by an earlier kill in the same batch: it leaves the
 * list only at its close, a turn later) is neither killed nor counted
 * again. */
long long conn_client_kill(kv *k, kv_client *cl, const kv_client_filter *f) {
    server *srv = LULL_CONTAINER_OF(k, server, kv);
    conn *self = cl ? cl->owner : NULL;
    long long n = 0;
    for (conn *c = srv->conns; c; c = c->next) {
        c->kill = !c->gone && client_matches(srv, c, f, self);
        n += c->kill;
    }
    bool link = srv->m.state == M_UP && client_matches(srv, NULL, f, self);
    for (conn *c = srv->conns; c; c = c->next) {
        if (!c->kill) continue;
        c->kill = false;
        if (c == self)
            c->closing = true; /* run_commands stops; conn_after finishes */
        else
            conn_drop(c, NULL);
    }
    if (link) master_kill(srv);
    return n + link;
}
