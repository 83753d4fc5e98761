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
 * A backlog of at least HANDOFF_MIN bytes on a socket link (a replica
 * catching up) goes to the sender thread instead, when a second CPU is
 * there (--repl-catchup): see "the sender thread" below.
 *
 * Replica side (--replica-of): the link to the primary, its handshake,
 * applying the records, acknowledging them, and reconnecting. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t, pthread_setaffinity_np */
#endif
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include "snap.h"

/* The replica's reconnect backoff: 100 ms at first (a primary restarting
 * is back within a few hundred ms), doubled per failure up to 5 s (a
 * primary that is gone for good costs a connect every 5 s, no more). */
#define RETRY_MIN_NS 100000000ull
#define RETRY_MAX_NS 5000000000ull
/* How long a connected replica waits for the answer to REPLSYNC (AUTH's
 * too) before it closes the link and connects again: Redis' repl-timeout.
 * A primary answers at once; one that took the connection and went
 * silent (partitioned after the connect, wedged) would otherwise hold the
 * replica down for good. The retry timer serves: it is idle meanwhile. */
#define HANDSHAKE_TIMEOUT_NS 60000000000ull

static bool parse_u64(const resp_arg *a, uint64_t *out) {
    long long v;
    if (!kv_parse_i64(a->p, a->len, &v) || v < 0) return false;
    *out = (uint64_t)v;
    return true;
}

/* ---------------------------------------------- primary: replica links */

/* KV_PLANT_SILENT_RESYNC: the corrupted copy of a record. */
static char plant_bad[256];

static bool want_thread(rlink *l);
static int handoff(rlink *l);
static void snap_step(rlink *l);

/* The catch-up and follow sender: one record per step. */
static void produce(lull_task *t) {
    rlink *l = LULL_CONTAINER_OF(t, rlink, task);
    server *srv = l->srv;
    const repl_log *log = &srv->kv.log;
    if (l->handed) return; /* the sender thread's done posts us */
    /* Closed (a CLIENT KILL, the output limit), its close a turn away: a
     * run posted before it sends nothing, and forks no snapshot child. */
    if (l->c->gone) return;
    if (l->snap) {
        snap_step(l);
        return;
    }
    /* A backlog for the sender thread: handed once the stream is empty,
     * so that its bytes follow everything the loop sent on the link. */
    bool to_thread = want_thread(l);
    if (to_thread && l->inflight == 0 && l->c->ep->queued == 0 &&
        l->c->out.len == 0) {
        if (handoff(l) == 0) return;
        l->no_thread = true; /* said why; the loop sends it */
        to_thread = false;
    }
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
        rf->at = repl_log_offset(log, &l->cur);
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
        if (to_thread) { /* this record's release says the stream emptied */
            l->flushing = true;
            return;
        }
        if (srv->per_record || srv->should_yield(srv->loop)) {
            lull_task_post(srv->loop, t);
            return;
        }
    }
    /* Caught up: below any output limit, which stops a soft deadline. */
    conn_check_output(l->c);
}

static void link_free(rlink *l);
static void sender_cut(rlink *l);
static void snap_kill(rlink *l);

static void ring_release(lull_frame *f) {
    rlink *l = ((ring_frame *)(void *)f)->l;
    l->inflight--;
    /* The oldest frame still out pins the log (link_pin): a close drops
     * the frames not yet sent before those in flight are released. */
    while (l->ring_tail < l->ring_next &&
           !l->ring[l->ring_tail % RING].f.in_flight)
        l->ring_tail++;
    if (!l->c) {
        link_free(l); /* the last frame of a closed link, maybe */
        return;
    }
    if (l->starved || (l->flushing && l->inflight == 0)) {
        l->starved = false;
        l->flushing = false;
        lull_task_post(l->srv->loop, &l->task);
    }
}

size_t link_output(const rlink *l) {
    const repl_log *log = &l->srv->kv.log;
    size_t queued = l->c->ep->queued;
    queued -= l->snap_queued < queued ? l->snap_queued : queued;
    /* Before its snapshot is taken (a child forked, or written inline),
     * the log is none of the link's: the snapshot will hold every write
     * made meanwhile, and the link moves to the log's end then. A replica
     * waiting for the next child holds nothing, as a Redis replica
     * waiting for its BGSAVE. */
    if (l->snap == SNAP_WANT || l->snap == SNAP_HELLO || l->snap == SNAP_WAIT)
        return queued;
    uint64_t sent = repl_log_offset(log, &l->cur);
    if (sent < l->start) sent = l->start;
    return (size_t)(log->end - sent) + queued;
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
    lull_timer_stop(&l->snap_due);
    l->c = NULL;
    snap_kill(l);
    /* A backlog out on the sender thread is cut short: its writes fail
     * from now on, and its done frees the link. */
    if (l->handed) sender_cut(l);
    /* Its frames and the thread may still read the log: no trim until
     * they are done. */
    if (l->inflight || l->handed || l->hello_out) {
        l->held = true;
        srv->links_held++;
    }
    link_free(l);
}

/* ------------------------------------- primary: the catch-up sender thread
 *
 * A replica catching up costs the primary one send per record, on the
 * loop that serves its clients: the loop's sender yields at the quantum,
 * but each of its slices still delays a client's request by up to a
 * quantum. With a second CPU the backlog goes to a loop of its own
 * instead (lull_percore, one loop), which writes it to the socket a log
 * chunk at a time, while the primary's loop serves clients.
 *
 * The hand-off. The log is append-only and its bytes never move (repl.h):
 * the backlog [from, end) at the hand-off is a list of spans of chunks,
 * copied for the thread (the chunk table itself may move with the next
 * append); bytes past `end`, the next appends' (in the same chunk, too),
 * are never read by it. So the replica gets the log as of the hand-off,
 * and the writes after it follow: when the thread is done, the loop's
 * sender goes on from `end` (and hands off again if the backlog grew past
 * HANDOFF_MIN meanwhile). Nothing else is sent on the link while the
 * backlog is out: the loop hands off only with its stream empty, its
 * sender does nothing while `handed`, and a link that finishes meanwhile
 * (a protocol error) sends its last reply after the backlog (conn_finish,
 * finish_pending). The loop keeps reading the link
 * (REPLACK, the replica's close); the thread's stream never reads.
 *
 * The socket. The thread writes a descriptor of its own (a dup: closing
 * it leaves the socket to the loop's connection); the link keeps a second
 * one, `keep`, until the backlog is back, so that the loop can cut it
 * short whatever the thread's stream is doing: shutdown(keep) fails the
 * thread's writes, and its stream ends (a replica whose link drops, a
 * CLIENT KILL, the output limit, server_stop). The link is freed by
 * whichever comes last: its close, its frames' release, the thread's done.
 *
 * The five rows of the sender thread (README, "The contracts"):
 *   trigger          produce finding a socket link's backlog of at least
 *                    HANDOFF_MIN with the thread enabled; on the thread, the
 *                    hand-off (go), its stream's drain and frame releases
 *   source of truth  the log (its bytes up to `end`, immutable) and the
 *                    spans copied at the hand-off
 *   pending work     spans not yet written; then the done posted back
 *   next deadline    none: the socket's writability paces it
 *   quiet            no backlog out: the thread waits for a post (no
 *                    timer, no fd); it is started at the first hand-off
 *                    and joined by server_stop. */

/* A backlog at least this long goes to the thread: 1 MiB, one log chunk.
 * Less is a few slices of the loop's own sender, and not worth the
 * thread's two wakeups. */
#define HANDOFF_MIN ((uint64_t)1 << 20)

typedef struct rsender rsender;

/* One chunk's share of the backlog, as a frame of the thread's stream. */
typedef struct span {
    lull_frame f;
    rsender *sx;
} span;

struct rsender {
    /* Set by the loop before the hand-off, read by the thread: */
    rlink *l;         /* the link (the thread never reads it) */
    lull_loop *main;  /* the primary's loop: where done runs */
    lull_loop *loop;  /* the thread's loop */
    lull_percore *pc; /* its percore (lull_percore_stopping) */
    int fd;           /* the thread's descriptor, until its stream owns it */
    span *spans;      /* the backlog, chunk by chunk */
    size_t nspans;    /* spans in it */
    size_t spans_cap; /* room in spans */
    uint64_t from;    /* the log offset it starts at (the link's pin) */
    uint64_t end;     /* the log offset it ends at */
    /* The loop's own: */
    int keep;       /* the loop's descriptor of the socket: its shutdown
                       cuts the backlog short */
    lull_task done; /* posted back by the thread: runs on the loop */
    /* The thread's own, from go until it posts done: */
    lull_task go;    /* posted to the thread's loop */
    lull_stream s;   /* writes the backlog */
    size_t next;     /* the next span to send */
    size_t inflight; /* spans the stream holds */
    bool closing;    /* its stream is closing */
    int status;      /* 0 all written, or why not (read by done) */
};

/* Fails the thread's writes of l's backlog (the socket's other
 * descriptors see it shut too: the link is closing anyway). */
static void sender_cut(rlink *l) {
    shutdown(l->sx->keep, SHUT_RDWR);
}

static void link_free(rlink *l) {
    if (l->c || l->inflight || l->handed || l->hello_out || l->blocks) return;
    if (l->held) l->srv->links_held--;
    if (l->sx) free(l->sx->spans);
    free(l->sx);
    free(l);
}

/* The lowest offset l still reads: its oldest frame in flight, the
 * hand-off's start, or its cursor. */
static uint64_t link_pin(const rlink *l) {
    if (l->handed) return l->sx->from;
    if (l->inflight) return l->ring[l->ring_tail % RING].at;
    return repl_log_offset(&l->srv->kv.log, &l->cur);
}

uint64_t links_pinned(void *arg) {
    server *srv = arg;
    if (srv->links_held) return 0;
    uint64_t low = UINT64_MAX;
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers; p = p->next) {
        uint64_t at = link_pin(LULL_CONTAINER_OF(p, rlink, peer));
        if (at < low) low = at;
    }
    return low;
}

/* The CPUs the process may run on (sched_getaffinity), once. */
static int cpus_allowed(void) {
    static int n; /* the loop's thread only */
    if (n == 0) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    return n;
}

static bool want_thread(rlink *l) {
    server *srv = l->srv;
    if (l->no_thread || l->skip_next || l->c->closing || srv->senders_stopped ||
        srv->catchup == CATCHUP_LOOP || !srv->net->fd ||
        srv->net->fd(l->c->ep) < 0) /* TLS: the session's bytes */
        return false;
    if (srv->catchup == CATCHUP_AUTO && srv->sender_cpu < 0 &&
        cpus_allowed() < 2)
        return false;
    const repl_log *log = &srv->kv.log;
    return log->end - repl_log_offset(log, &l->cur) >= HANDOFF_MIN;
}

/* The thread's start: pinned to --repl-sender-cpu when given. */
static void sender_pin(lull_loop *loop, int index, void *arg) {
    (void)loop;
    (void)index;
    server *srv = arg;
    if (srv->sender_cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(srv->sender_cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc) /* srv_log is the loop's: this thread says it itself */
        fprintf(stderr,
                "lull-kv: the sender thread stays unpinned: CPU %d: "
                "%s\n",
                srv->sender_cpu, strerror(rc));
}

static void sender_end(rsender *sx, int status) {
    if (sx->closing) return;
    sx->closing = true;
    sx->status = status;
    lull_endpoint_close(&sx->s.ep, status);
}

/* On the thread: sends spans while the stream takes them (one always,
 * with none in flight: a stream whose write failed refuses it, -EPIPE,
 * so a failure is heard of whether or not a drain was owed). */
static void sender_pump(rsender *sx) {
    lull_endpoint *ep = &sx->s.ep;
    while (!sx->closing && sx->next < sx->nspans) {
        if (sx->inflight && !lull_endpoint_writable(ep)) return; /* drain */
        sx->inflight++;
        int rc = lull_endpoint_send(ep, &sx->spans[sx->next++].f);
        if (rc < 0) {
            sx->inflight--;
            sender_end(sx, rc);
            return;
        }
    }
    /* All written; a stream whose write failed is not writable. */
    if (sx->inflight == 0)
        sender_end(sx, lull_endpoint_writable(ep) ? 0 : -EPIPE);
}

static void sender_drain(lull_endpoint *ep) {
    sender_pump(ep->data);
}

static void sender_release(lull_frame *f) {
    rsender *sx = ((span *)(void *)f)->sx;
    /* Written, or dropped by a failed write: either way the next span
     * goes now (the stream is empty), or the end is found. */
    if (--sx->inflight == 0) sender_pump(sx);
}

/* The thread's last word on a hand-off: after this post it touches
 * nothing of sx (its stream is closed, every frame released). */
static void sender_closed(lull_endpoint *ep, int reason) {
    rsender *sx = ep->data;
    if (sx->status == 0 && reason < 0) sx->status = reason;
    lull_task_post_remote(sx->main, &sx->done);
}

/* On the thread: the hand-off. Its stream never reads (the loop's
 * connection reads the link). */
static void sender_go(lull_task *t) {
    rsender *sx = LULL_CONTAINER_OF(t, rsender, go);
    if (lull_percore_stopping(sx->pc)) {
        close(sx->fd);
        sx->status = -ECANCELED;
        lull_task_post_remote(sx->main, &sx->done);
        return;
    }
    /* Raw, no frame bound: a span is a whole chunk. */
    lull_stream_options o = {.flags = LULL_STREAM_RAW, .max_frame = SIZE_MAX};
    int rc = lull_stream_open(sx->loop, &sx->s, sx->fd, &o);
    if (rc < 0) { /* the fd is closed */
        sx->status = rc;
        lull_task_post_remote(sx->main, &sx->done);
        return;
    }
    lull_stream_read_stop(&sx->s);
    sx->s.ep.data = sx;
    lull_endpoint_set_callbacks(&sx->s.ep, NULL, sender_drain, sender_closed);
    sx->next = sx->inflight = 0;
    sx->closing = false;
    sx->status = 0;
    sender_pump(sx);
}

/* On the loop: the backlog is back. The link goes on from `end`, or
 * closes when the backlog was cut short (the replica resumes from what it
 * applied). */
static void sender_done(lull_task *t) {
    rsender *sx = LULL_CONTAINER_OF(t, rsender, done);
    rlink *l = sx->l;
    server *srv = l->srv;
    close(sx->keep);
    sx->keep = -1;
    l->handed = false;
    srv->senders_out--;
    if (!l->c) {
        link_free(l);
        return;
    }
    if (sx->status < 0) {
        conn_drop(l->c,
                  "the catch-up sender stopped before offset %" PRIu64 " (%s)",
                  sx->end, strerror(-sx->status));
        return;
    }
    repl_log_seek(&srv->kv.log, sx->end, &l->cur);
    if (l->finish_pending) {
        conn_finish(l->c);
        return;
    }
    if (!srv->senders_stopped) lull_task_post(srv->loop, &l->task);
}

static int senders_start(server *srv) {
    lull_percore_options o = {.loops = 1, .start = sender_pin, .arg = srv};
    return lull_percore_start(&srv->senders, &o);
}

/* The link's backlog to the thread (its stream is empty): 0, or why not
 * (logged; the loop's sender keeps it). */
static int handoff(rlink *l) {
    server *srv = l->srv;
    const repl_log *log = &srv->kv.log;
    int rc = srv->senders ? 0 : senders_start(srv);
    if (rc < 0) {
        srv_log(srv,
                "the catch-up sender thread did not start (%s): "
                "replicas catch up on the loop",
                strerror(-rc));
        srv->catchup = CATCHUP_LOOP;
        return rc;
    }
    rsender *sx = l->sx ? l->sx : calloc(1, sizeof *sx);
    if (!sx) return -ENOMEM;
    l->sx = sx;
    uint64_t from = repl_log_offset(log, &l->cur);
    /* The cursor's chunk may have been trimmed: its record is after it. */
    size_t first = l->cur.chunk > log->chunk0 ? l->cur.chunk - log->chunk0 : 0;
    while (first < log->nchunks &&
           log->chunks[first].start + log->chunks[first].used <= from)
        first++;
    size_t n = log->nchunks - first;
    if (n > sx->spans_cap) {
        span *sp = realloc(sx->spans, n * sizeof *sp);
        if (!sp) return -ENOMEM;
        sx->spans = sp;
        sx->spans_cap = n;
    }
    sx->nspans = 0;
    for (size_t i = first; i < log->nchunks; i++) {
        const repl_chunk *c = &log->chunks[i];
        size_t skip = from > c->start ? (size_t)(from - c->start) : 0;
        if (c->used <= skip) continue; /* an empty tail chunk */
        sx->spans[sx->nspans++] = (span){.f = {.bytes = c->p + skip,
                                               .len = c->used - skip,
                                               .release = sender_release},
                                         .sx = sx};
    }
    int fd = srv->net->fd(l->c->ep);
    sx->fd = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    sx->keep = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (sx->fd < 0 || sx->keep < 0) {
        rc = fd < 0 ? -ENOTSOCK : -errno;
        if (sx->fd >= 0) close(sx->fd);
        if (sx->keep >= 0) close(sx->keep);
        srv_log(srv, "replica %s:%d catches up on the loop: %s", l->peer.ip,
                l->peer.port, strerror(-rc));
        return rc;
    }
    sx->l = l;
    sx->main = srv->loop;
    sx->pc = srv->senders;
    sx->loop = lull_percore_loop(srv->senders, 0);
    sx->from = from;
    sx->end = log->end;
    lull_task_init(&sx->go, sender_go);
    lull_task_init(&sx->done, sender_done);
    l->handed = true;
    srv->senders_out++;
    lull_task_post_remote(sx->loop, &sx->go);
    return 0;
}

void senders_stop(server *srv) {
    if (!srv->senders) return;
    srv->senders_stopped = true;
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers; p = p->next) {
        rlink *l = LULL_CONTAINER_OF(p, rlink, peer);
        if (l->handed) sender_cut(l);
    }
    /* Joins the thread: every backlog's done has been posted by then. */
    lull_percore_stop(srv->senders);
    srv->senders = NULL;
    while (srv->senders_out && lull_loop_run(srv->loop, LULL_RUN_ONCE) >= 0) {
    }
}

/* ------------------------------------------- primary: full resync by snapshot
 *
 * A replica whose offset the log no longer holds (another replid, below
 * the base, not a record boundary) gets `+FULLRESYNC <replid> <X>`, X the
 * log's end then, a snapshot of the keyspace as of X (snap.h), and the
 * log from X. The cursor stays at X meanwhile, which pins the log there.
 *
 * On a socket (--repl-snapshot fork, the default) the primary forks, as
 * Redis' diskless sync: once everything the loop queued on the link is
 * written (the +FULLRESYNC line last), the child writes the snapshot to
 * the link's socket, through a fixed buffer, waiting in poll() when it is
 * full, and exits 0 when it is all written; while it runs the loop sends
 * nothing on the link (it still reads it). Its exit is heard by a pidfd
 * watched by the loop: 0, and the log goes on from X; anything else
 * closes the link. Elsewhere (the simulator, TLS, --repl-snapshot inline)
 * the loop writes the snapshot at once into the link's stream, as frames
 * of its own.
 *
 * The five rows of a snapshot child:
 *   trigger          REPLSYNC that cannot continue, with the log's base
 *                    past 0 (before, the log from 0 is the snapshot)
 *   source of truth  the child's copy of the keyspace, as of X
 *   pending work     snap == SNAP_CHILD: the child writes; its exit
 *                    status is read once its pidfd is readable
 *   next deadline    the child's: no progress on the socket in
 *                    srv->snap_timeout_ms and it gives up (exit 1)
 *   quiet            no child: nothing watched; a link's close or
 *                    server_stop kills and reaps a child still running */

/* A child's exit statuses besides 0. */
enum { CHILD_STALLED = 1, CHILD_PEER_GONE = 2, CHILD_FAILED = 3 };

static void hello_release(lull_frame *f) {
    rlink *l = LULL_CONTAINER_OF(f, rlink, hello);
    l->hello_out = false;
    if (!l->c) {
        link_free(l);
        return;
    }
    lull_task_post(l->srv->loop, &l->task);
}

/* A buffer of the snapshot, sent as a frame of its own. */
typedef struct snap_block {
    lull_frame f;
    rlink *l; /* its link (freed after every frame it sent) */
    char p[SNAP_BUF];
} snap_block;

static void block_release(lull_frame *f) {
    snap_block *b = LULL_CONTAINER_OF(f, snap_block, f);
    rlink *l = b->l;
    l->snap_queued -= b->f.len;
    l->blocks--;
    free(b);
    if (!l->c) link_free(l); /* the last frame of a closed link, maybe */
}

/* Sends b's first len bytes as a frame of the link: 0, or the stream's
 * refusal (b is then still the caller's). */
static int block_send(rlink *l, snap_block *b, size_t len) {
    b->f = (lull_frame){.bytes = b->p, .len = len, .release = block_release};
    b->l = l;
    int rc = lull_endpoint_send(l->c->ep, &b->f);
    if (rc == 0) {
        l->snap_queued += len;
        l->blocks++;
    }
    return rc;
}

static int inline_flush(snap_out *o) {
    rlink *l = o->arg;
    snap_block *b = LULL_CONTAINER_OF(o->p, snap_block, p);
    int rc = block_send(l, b, o->len);
    o->p = NULL;
    if (rc < 0) {
        free(b);
        return rc;
    }
    b = malloc(sizeof *b);
    if (!b) return -ENOMEM;
    o->p = b->p;
    o->len = 0;
    return 0;
}

/* An inline snapshot is queued whole: a replica that stops reading would
 * hold it (a copy of the keyspace) for as long as it stayed connected.
 * As a child gives up on a link that takes nothing for snap_timeout_ms,
 * so does this check. Its five rows:
 *   trigger          the snapshot queued (snap_inline); then this timer
 *   source of truth  snap_queued, the bytes the stream has not written
 *   pending work     snap_queued > 0
 *   next deadline    snap_timeout_ms after the last check that saw
 *                    progress (snap_queued lower than snap_seen)
 *   quiet            the snapshot written, or the link closed: no timer */
static void snap_due(lull_timer *t) {
    rlink *l = LULL_CONTAINER_OF(t, rlink, snap_due);
    if (!l->c || l->snap_queued == 0) return;
    if (l->snap_queued < l->snap_seen) {
        l->snap_seen = l->snap_queued;
        lull_timer_start(t, (uint64_t)l->srv->snap_timeout_ms * 1000000u, 0);
        return;
    }
    conn_drop(l->c, "took none of its snapshot for %d ms (%zu bytes left)",
              l->srv->snap_timeout_ms, l->snap_queued);
}

/* The loop writes the snapshot now: 0 or why not. */
static int snap_inline(rlink *l) {
    snap_block *b = malloc(sizeof *b);
    if (!b) return -ENOMEM;
    snap_out o = {.p = b->p, .cap = SNAP_BUF, .flush = inline_flush, .arg = l};
    int rc = snap_write(&l->srv->kv, &o);
    if (o.p) free(LULL_CONTAINER_OF(o.p, snap_block, p));
    if (rc == 0 && l->snap_queued) {
        l->snap_seen = l->snap_queued;
        lull_timer_start(&l->snap_due,
                         (uint64_t)l->srv->snap_timeout_ms * 1000000u, 0);
    }
    return rc;
}

/* A snapshot child and the links it writes to: every link that asked
 * while the previous one ran (Redis runs one fork for the replicas
 * waiting too), each by its socket or, for a relay (TLS), by a pipe of
 * its own. Allocated whole before the fork, as the child must not
 * allocate (the sender thread may hold the allocator's lock at the
 * fork). */
typedef struct snap_job {
    server *srv;
    pid_t pid;          /* the child */
    int pidfd;          /* its pidfd, watched by io */
    lull_io io;         /* its exit */
    size_t n;           /* slots (links at the fork) */
    size_t attached;    /* links still reading from it */
    unsigned char *st;  /* per slot, shared with the child (mmap): its
                           verdict, 0 once that link's snapshot is all
                           written; SLOT_BUSY while it writes */
    int *fd;            /* per slot: where the child writes */
    int *keep;          /* the fds sorted: the child's files */
    size_t *off;        /* per slot: the child's progress in its buffer */
    struct pollfd *pfd; /* the child's poll set */
    bool *pipe;         /* per slot: fd is a relay's pipe, not a socket */
} snap_job;

/* A slot the child still writes to (any verdict is below it). */
#define SLOT_BUSY 0xff

/* Where a child writes: the links' sockets, or the pipes the loop relays. */
typedef struct child_out {
    snap_job *job;
    int timeout_ms; /* no progress this long: that link is given up */
} child_out;

static unsigned char child_verdict(int err) {
    return err == ETIMEDOUT                    ? CHILD_STALLED
           : err == EPIPE || err == ECONNRESET ? CHILD_PEER_GONE
                                               : CHILD_FAILED;
}

/* The child's writes: all of o to every slot still busy, waiting for room
 * in poll(). A slot that fails (its replica gone, or taking nothing for
 * the timeout) gets its verdict and no more bytes; the others go on. 0
 * while any is busy, else -EPIPE: nobody left to write to. */
static int child_flush(snap_out *o) {
    const child_out *to = o->arg;
    snap_job *j = to->job;
    for (size_t i = 0; i < j->n; i++)
        j->off[i] = 0;
    for (;;) {
        nfds_t np = 0;
        for (size_t i = 0; i < j->n; i++) {
            while (j->st[i] == SLOT_BUSY && j->off[i] < o->len) {
                /* A pipe's reader gone is EPIPE too: lull-kv ignores
                 * SIGPIPE. The pipe is non-blocking; a socket may not be
                 * (its flags are the parent's, whoever made it): each send
                 * is, so that a replica that stops reading meets the
                 * timeout below. */
                ssize_t w =
                    j->pipe[i]
                        ? write(j->fd[i], o->p + j->off[i], o->len - j->off[i])
                        : send(j->fd[i], o->p + j->off[i], o->len - j->off[i],
                               MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) {
                    j->off[i] += (size_t)w;
                } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                    j->pfd[np++] =
                        (struct pollfd){.fd = j->fd[i], .events = POLLOUT};
                    break;
                } else if (w < 0 && errno != EINTR) {
                    j->st[i] = child_verdict(errno);
                }
            }
        }
        if (np == 0) break;
        int r = poll(j->pfd, np, to->timeout_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r > 0) continue;
        /* None took a byte for the timeout (or poll failed): each polled
         * slot is given up. */
        int err = r == 0 ? ETIMEDOUT : errno;
        for (nfds_t k = 0; k < np; k++)
            for (size_t i = 0; i < j->n; i++)
                if (j->fd[i] == j->pfd[k].fd && j->st[i] == SLOT_BUSY)
                    j->st[i] = child_verdict(err);
    }
    o->len = 0;
    for (size_t i = 0; i < j->n; i++)
        if (j->st[i] == SLOT_BUSY) return 0;
    return -EPIPE;
}

/* The forked child: the snapshot to every slot, then _exit (no loop, no
 * atexit, nothing of the parent's but its copy of the keyspace). It first
 * ends the +FULLRESYNC line with x, the offset the snapshot stands for
 * (on a relay's pipe too: the loop relays it after the line's start). Its
 * status is the first slot's verdict that is not 0. */
static void __attribute__((noreturn))
child_run(kv *k, child_out to, uint64_t x) {
    static char out[SNAP_BUF];
    snap_job *j = to.job;
    snap_out o = {
        .p = out, .cap = sizeof out, .flush = child_flush, .arg = &to};
    for (size_t i = 0; i < j->n; i++)
        j->st[i] = SLOT_BUSY;
    o.len = (size_t)snprintf(out, sizeof out, "%" PRIu64 "\r\n", x);
    int rc = snap_write(k, &o);
    int status = 0;
    for (size_t i = 0; i < j->n; i++) {
        if (j->st[i] == SLOT_BUSY) j->st[i] = rc == 0 ? 0 : child_verdict(-rc);
        if (!status) status = j->st[i];
    }
    _exit(status);
}

static int fd_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The child's files: only the n in keep (sorted) and the standard three
 * (stderr is the log's). A forked copy of anything else of the parent's
 * would hold it open: a client the primary closed would wait for its EOF
 * until the child ended, and a primary that died would leave its port
 * bound (a restart failed with EADDRINUSE) and accepting into a queue
 * nobody reads. close_range (Linux 5.9); where refused, fd by fd. */
static void child_files(const int *keep, size_t n) {
    unsigned lo = 3;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        unsigned k = (unsigned)keep[i];
        if (k > lo) ok = syscall(SYS_close_range, lo, k - 1, 0) == 0;
        lo = k + 1;
    }
    if (ok && syscall(SYS_close_range, lo, ~0u, 0) == 0) return;
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (1u << 20)
                  ? (int)rl.rlim_cur
                  : 1 << 20;
    for (int fd = 3; fd < max; fd++)
        if (!bsearch(&fd, keep, n, sizeof *keep, fd_cmp)) close(fd);
}

/* Stops watching and kills the child, if any, and reaps it. */
void link_stop_child(rlink *l) {
    snap_kill(l);
}

int link_child(const rlink *l) {
    return l->job ? (int)l->job->pid : 0;
}

static void relay_close(rlink *l) {
    if (l->pipe_rd < 0) return;
    lull_io_stop(&l->pipe_io);
    close(l->pipe_rd);
    l->pipe_rd = -1;
    l->srv->snap_fds--;
    free(l->spare);
    l->spare = NULL;
}

static void fork_waiting(server *srv);

/* The job's end: unwatched, its pidfd closed, freed; the links waiting
 * for it get the next child. */
static void job_free(snap_job *j) {
    server *srv = j->srv;
    lull_io_stop(&j->io);
    close(j->pidfd);
    srv->snap_fds--;
    munmap(j->st, j->n);
    free(j);
    if (srv->job == j) {
        srv->job = NULL;
        fork_waiting(srv);
    }
}

/* The link leaves its child, if it has one: the last link out kills and
 * reaps it. A child still writing to the others goes on; this link's
 * socket is shut down so that the child's copy of it fails at once and
 * its replica sees the end (the child would hold it open otherwise). */
static void snap_kill(rlink *l) {
    relay_close(l);
    snap_job *j = l->job;
    if (!j) return;
    l->job = NULL;
    if (--j->attached > 0) {
        if (l->c && l->srv->net->fd) {
            int fd = l->srv->net->fd(l->c->ep);
            if (fd >= 0) (void)shutdown(fd, SHUT_RDWR);
        }
        return;
    }
    /* Through its pidfd: with SIGCHLD ignored (inherited) the kernel may
     * have reaped the child already, and its pid be another process's. */
    (void)syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
    while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    job_free(j);
}

static void child_exited(lull_io *io, int events) {
    (void)events;
    snap_job *j = io->data;
    server *srv = j->srv;
    int status;
    pid_t r = waitpid(j->pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) return; /* not yet */
    int err = errno;
    /* ECHILD: SIGCHLD is ignored (SIG_IGN outlives exec: a supervisor's
     * or a script's), so the kernel reaped the child and its status is
     * gone. The verdicts it left in st still say how each slot went
     * (SLOT_BUSY or CHILD_FAILED: it died before its end). */
    bool auto_reaped = r < 0 && err == ECHILD;
    if (auto_reaped) status = 0; /* exited: the slot's verdict decides */
    bool lost = r < 0 && !auto_reaped;
    repl_peer *p = srv->kv.peers.next;
    while (p != &srv->kv.peers) {
        rlink *l = LULL_CONTAINER_OF(p, rlink, peer);
        p = p->next; /* the drop takes l out */
        if (l->job != j) continue;
        l->job = NULL;
        j->attached--;
        int v = lost ? -1 : j->st[l->slot];
        if (lost || !WIFEXITED(status) || v != 0) {
            conn_drop(l->c, "its snapshot was not written: the child %s %d",
                      lost                ? "could not be reaped:"
                      : WIFEXITED(status) ? "exited with status"
                                          : "was killed by signal",
                      lost                ? err
                      : WIFEXITED(status) ? (v == SLOT_BUSY ? CHILD_FAILED : v)
                                          : WTERMSIG(status));
            continue;
        }
        /* The log from X; a relay's, once the pipe is drained too. */
        if (l->snap == SNAP_CHILD) {
            l->snap = SNAP_NONE;
            l->peer.snapshot = false;
        }
        lull_task_post(srv->loop, &l->task);
    }
    job_free(j);
}

/* Forks the child that writes the snapshot as of the log's end now to the
 * n links (fds: their sockets, or for a relay, one with a pipe, that
 * pipe's writer), and watches its exit: 0, or -1 with every one of them
 * dropped. */
static int start_child(server *srv, rlink **links, const int *fds, size_t n) {
    size_t sz = sizeof(snap_job) + n * (2 * sizeof(int) + sizeof(size_t) +
                                        sizeof(struct pollfd) + sizeof(bool));
    snap_job *j = malloc(sz);
    void *st = j ? mmap(NULL, n, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                 : MAP_FAILED;
    if (st == MAP_FAILED) {
        int err = j ? errno : ENOMEM;
        free(j);
        for (size_t i = 0; i < n; i++)
            conn_drop(links[i]->c, "no snapshot child: %s", strerror(err));
        return -1;
    }
    *j = (snap_job){.srv = srv, .n = n, .attached = n, .st = st};
    j->pfd = (struct pollfd *)(void *)(j + 1);
    j->off = (size_t *)(void *)(j->pfd + n);
    j->fd = (int *)(void *)(j->off + n);
    j->keep = j->fd + n;
    j->pipe = (bool *)(void *)(j->keep + n);
    memset(j->st, CHILD_FAILED, n); /* a child that dies before writing */
    for (size_t i = 0; i < n; i++) {
        j->fd[i] = fds[i];
        j->pipe[i] = links[i]->pipe_rd >= 0;
        /* The snapshot stands for the log's end now: the child's copy of
         * the keyspace has every write before it, and none after. */
        repl_log_seek(&srv->kv.log, srv->kv.log.end, &links[i]->cur);
    }
    memcpy(j->keep, fds, n * sizeof *fds);
    qsort(j->keep, n, sizeof *j->keep, fd_cmp);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        munmap(st, n);
        free(j);
        /* Refused for good (a seccomp profile without clone): every
         * resync would fail so and the replica retry for ever. The loop
         * writes them from now on, as when pidfd_open is refused; these
         * links close and their replicas' retries get one. EAGAIN and
         * ENOMEM pass: the next fork may work. */
        if (err == EPERM || err == ENOSYS) srv->snapshot = SNAPSHOT_INLINE;
        for (size_t i = 0; i < n; i++)
            conn_drop(links[i]->c, "no snapshot child: fork: %s%s",
                      strerror(err),
                      err == EPERM || err == ENOSYS
                          ? "; snapshots are written by the loop from now on"
                          : "");
        return -1;
    }
    if (pid == 0) {
        /* Off the loop's CPU where one is given, as Redis' bgsave_cpulist:
         * the child's encoding would otherwise compete with the clients. */
        if (srv->sender_cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(srv->sender_cpu, &set);
            (void)sched_setaffinity(0, sizeof set, &set);
        }
        /* A snapshot outliving its primary has no log to follow it: the
         * child goes with the thread that forked it (the loop's). */
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(CHILD_FAILED); /* died already */
        /* The pipes' reader ends not among them: with a relay gone, a
         * write to its pipe fails. */
        child_files(j->keep, n);
        child_run(&srv->kv,
                  (child_out){.job = j, .timeout_ms = srv->snap_timeout_ms},
                  srv->kv.log.end);
    }
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int rc =
        pfd < 0 ? -errno : lull_io_init(srv->loop, &j->io, pfd, child_exited);
    if (rc == 0) rc = lull_io_start(&j->io, LULL_READABLE);
    if (rc < 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        if (pfd >= 0) close(pfd);
        munmap(st, n);
        free(j);
        for (size_t i = 0; i < n; i++)
            conn_drop(links[i]->c, "no snapshot child: pidfd: %s",
                      strerror(-rc));
        return -1;
    }
    j->pid = pid;
    j->pidfd = pfd;
    j->io.data = j;
    srv->snap_fds++;
    for (size_t i = 0; i < n; i++) {
        links[i]->job = j;
        links[i]->slot = i;
        srv_log(srv,
                "replica %s:%d: a snapshot as of offset %" PRIu64
                " from child %d, %s%s",
                links[i]->peer.ip, links[i]->peer.port, srv->kv.log.end,
                (int)pid,
                j->pipe[i] ? "relayed by the loop" : "on the link's socket",
                n > 1 ? ", shared" : "");
    }
    srv->job = j;
    return 0;
}

/* True when n more descriptors for l's snapshot leave maxclients' reserve
 * whole (the server's own: listeners, epoll, a connect, the sender
 * thread); else the link is dropped, and the replica retries. */
static bool snap_fds_room(rlink *l, size_t n) {
    const server *srv = l->srv;
    if (!srv->maxclients ||
        srv->kv.clients + srv->kv.npeers + srv->snap_fds + n <= srv->maxclients)
        return true;
    conn_drop(l->c,
              "no snapshot child: its descriptors would pass maxclients "
              "(%zu)",
              srv->maxclients);
    return false;
}

/* A link waiting for the next child. One dropped while it waited is in the
 * list until its close, a turn later: it is not. */
static bool waits(const rlink *l) {
    return l->snap == SNAP_WAIT && !l->c->gone;
}

static int relay_pipe(rlink *l);
static bool snap_relays(const rlink *l);

/* The child ended (or none ran): one child for every link that waited for
 * it, on sockets and relays alike. */
static void fork_waiting(server *srv) {
    size_t n = 0;
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers; p = p->next)
        if (waits(LULL_CONTAINER_OF(p, rlink, peer))) n++;
    if (n == 0) return;
    rlink **links = malloc(n * sizeof *links);
    /* fds[i]: where the child writes for links[i]; fds[n + i]: the same
     * when it is a relay's pipe, the loop's to close after the fork, else
     * -1. */
    int *fds = malloc(2 * n * sizeof *fds);
    size_t k = 0;
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers;) {
        rlink *l = LULL_CONTAINER_OF(p, rlink, peer);
        p = p->next; /* the drop takes l out */
        if (!waits(l)) continue;
        l->snap = SNAP_CHILD;
        if (!links || !fds) {
            conn_drop(l->c, "no snapshot child: %s", strerror(ENOMEM));
            continue;
        }
        bool relay = snap_relays(l);
        int fd = relay ? relay_pipe(l) : srv->net->fd(l->c->ep);
        if (fd < 0) continue; /* relay_pipe dropped it */
        links[k] = l;
        fds[n + k] = relay ? fd : -1;
        fds[k++] = fd;
    }
    int rc = -1;
    if (k > 0 && (!srv->maxclients ||
                  srv->kv.clients + srv->kv.npeers + srv->snap_fds + 1 <=
                      srv->maxclients))
        rc = start_child(srv, links, fds, k);
    else
        for (size_t i = 0; i < k; i++)
            (void)snap_fds_room(links[i], 1);
    for (size_t i = 0; i < k; i++) {
        if (fds[n + i] < 0) continue;
        close(fds[n + i]); /* the child's: its exit is the pipe's end */
        if (rc < 0) continue;
        links[i]->snap = SNAP_RELAY;
        lull_task_post(srv->loop, &links[i]->task);
    }
    free(links);
    free(fds);
}

/* The child on the link's socket, once everything the loop queued on the
 * link is written (a relay's at once: its pipe is relayed after the
 * line); or, while another child runs, the next one, with every link that
 * waits for it, sockets and relays alike. */
static void snap_fork(rlink *l) {
    l->snap = SNAP_WAIT;
    if (!l->srv->job) fork_waiting(l->srv);
}

/* ------------------------------------------------- the relay (TLS links)
 *
 * A TLS link's bytes are the session's, which only the loop can write: the
 * child writes the snapshot to a pipe (one per link: a child serves every
 * link that waited for it, as on sockets), and the loop relays it into the
 * link's stream, a block per read, while the stream is writable, within
 * its quantum. The stream holds at most its high-water mark of it, so the
 * snapshot is never all in memory, and the loop serves its clients between
 * slices, the encoding being the child's. The log from X follows once the
 * pipe is at its end and the child exited 0.
 *
 * The five rows of a relay:
 *   trigger          the pipe readable (its watcher: only while the loop
 *                    found it empty), the stream's drain, the child's exit
 *   source of truth  the pipe's bytes and its end; the child's status
 *   pending work     snap == SNAP_RELAY: bytes in the pipe, or its end
 *                    not yet read, or the child not yet reaped
 *   next deadline    the child's (snap_timeout_ms without progress)
 *   quiet            the pipe empty and watched, or the stream full and
 *                    its drain awaited: nothing runs */

static void relay_readable(lull_io *io, int events) {
    (void)events;
    rlink *l = io->data;
    lull_io_stop(&l->pipe_io); /* the relay reads until empty again */
    lull_task_post(l->srv->loop, &l->task);
}

/* A relay's pipe, for the next child: its reader watched by the loop, its
 * writer returned (the child's, which the loop closes once it forked); or
 * -1 with the link dropped. */
static int relay_pipe(rlink *l) {
    int p[2];
    if (!snap_fds_room(l, 2)) return -1; /* the pipe's reader, the pidfd */
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
        conn_drop(l->c, "no snapshot pipe: %s", strerror(errno));
        return -1;
    }
    /* Fewer, fuller reads; the default (64 KiB) where refused. */
    (void)fcntl(p[1], F_SETPIPE_SZ, SNAP_BUF * 4);
    l->pipe_rd = p[0];
    l->srv->snap_fds++;
    int rc = lull_io_init(l->srv->loop, &l->pipe_io, p[0], relay_readable);
    if (rc < 0) {
        close(p[1]);
        relay_close(l);
        conn_drop(l->c, "no snapshot pipe: %s", strerror(-rc));
        return -1;
    }
    l->pipe_io.data = l;
    return p[1];
}

/* Relays the pipe into the stream while it is writable, within the quantum;
 * then the log from X, once the pipe ended and the child exited 0. */
static void relay_pump(rlink *l) {
    server *srv = l->srv;
    while (l->pipe_rd >= 0) {
        if (!lull_endpoint_writable(l->c->ep)) return; /* on_drain posts us */
        if (lull_loop_should_yield(srv->loop)) {
            lull_task_post(srv->loop, &l->task);
            return;
        }
        snap_block *b = l->spare ? l->spare : malloc(sizeof *b);
        l->spare = NULL;
        if (!b) {
            conn_drop(l->c, "its snapshot was not relayed (%s)",
                      strerror(ENOMEM));
            return;
        }
        ssize_t n = read(l->pipe_rd, b->p, SNAP_BUF);
        if (n > 0) {
            int rc = block_send(l, b, (size_t)n);
            if (rc < 0) {
                free(b);
                conn_drop(l->c, "its snapshot was not relayed (%s)",
                          strerror(-rc));
                return;
            }
            continue;
        }
        l->spare = b;
        if (n == 0) {
            relay_close(l); /* all of it is in the stream */
        } else if (errno == EAGAIN) {
            int rc = lull_io_start(&l->pipe_io, LULL_READABLE);
            if (rc == 0) return; /* relay_readable posts us */
            conn_drop(l->c, "its snapshot pipe: %s", strerror(-rc));
            return;
        } else if (errno != EINTR) {
            conn_drop(l->c, "its snapshot pipe: %s", strerror(errno));
            return;
        }
    }
    if (l->job) return;  /* its exit posts us (or drops the link) */
    l->snap = SNAP_NONE; /* the log from X */
    l->peer.snapshot = false;
    lull_task_post(srv->loop, &l->task);
}

static bool snap_forks(const rlink *l) {
    const server *srv = l->srv;
    return srv->snapshot == SNAPSHOT_FORK && srv->net->fd &&
           srv->net->fd(l->c->ep) >= 0;
}

/* A link with no socket of its own (TLS) that still gets a child: it
 * relays. The simulator's (no fd at all) writes inline. */
static bool snap_relays(const rlink *l) {
    const server *srv = l->srv;
    return srv->snapshot == SNAPSHOT_FORK && srv->net->fd &&
           srv->net->fd(l->c->ep) < 0;
}

/* A child's exit is heard by its pidfd. Where pidfd_open is refused (a
 * kernel before 5.3, a seccomp profile older than it) no child can be
 * watched: every snapshot would fork, fail and close its link, and the
 * replica retry for ever. So the loop writes them from then on (as
 * --repl-snapshot inline), said once, as the sender thread falls back to
 * the loop. Asked of the server's own pid before a resync would fork. */
static void snap_check_pidfd(server *srv) {
    if (srv->snapshot != SNAPSHOT_FORK || !srv->net->fd) return;
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd >= 0) {
        close(fd);
        return;
    }
    if (errno != ENOSYS && errno != EPERM) return; /* EMFILE: the fork's */
    srv_log(srv,
            "pidfd_open: %s: snapshots are written by the loop from now "
            "on",
            strerror(errno));
    srv->snapshot = SNAPSHOT_INLINE;
}

/* The producer of a link in a snapshot (l->snap). */
static void snap_step(rlink *l) {
    server *srv = l->srv;
    if (l->snap == SNAP_RELAY) {
        relay_pump(l);
        return;
    }
    if (l->snap == SNAP_WANT) {
        snap_check_pidfd(srv);
        /* A child writes the line's offset itself: the log's end when it
         * forks, which is once this part of the line is written (on a
         * socket) or queued (a relay's: the pipe follows it), or when
         * the child running now ends. */
        bool relays = snap_relays(l), forks = relays || snap_forks(l);
        repl_log_seek(&srv->kv.log, srv->kv.log.end, &l->cur);
        int n = forks ? snprintf(l->hello_buf, sizeof l->hello_buf,
                                 "+FULLRESYNC %s ", srv->kv.replid)
                      : snprintf(l->hello_buf, sizeof l->hello_buf,
                                 "+FULLRESYNC %s %" PRIu64 "\r\n",
                                 srv->kv.replid, srv->kv.log.end);
        l->hello = (lull_frame){
            .bytes = l->hello_buf, .len = (size_t)n, .release = hello_release};
        int rc = lull_endpoint_send(l->c->ep, &l->hello);
        if (rc == 0) {
            l->hello_out = true;
            l->snap = SNAP_HELLO;
            if (relays) snap_fork(l); /* the pipe is relayed after the line */
            if (forks) return;        /* hello's release posts us */
            rc = snap_inline(l);
            l->snap = SNAP_NONE;
            l->peer.snapshot = false;
        }
        if (rc < 0) {
            conn_drop(l->c, "its snapshot was not sent (%s)", strerror(-rc));
            return;
        }
        lull_task_post(srv->loop, &l->task); /* the log from X */
        return;
    }
    /* SNAP_HELLO: the child writes once the stream is empty (on_drain or
     * hello's release posts us). SNAP_CHILD: its exit posts us. */
    if (l->snap == SNAP_HELLO && !l->hello_out && l->c->ep->queued == 0 &&
        !l->c->outf_busy && l->c->out.len == 0)
        snap_fork(l);
}

void snapshots_stop(server *srv) {
    /* The links waiting first: the last link out of a child would fork
     * the next one for them. */
    for (int pass = 0; pass < 2; pass++) {
        repl_peer *p = srv->kv.peers.next;
        while (p != &srv->kv.peers) {
            rlink *l = LULL_CONTAINER_OF(p, rlink, peer);
            p = p->next; /* the drop takes l out */
            if (pass == 0 ? waits(l) : l->job != NULL)
                conn_drop(l->c, "its snapshot child was stopped");
        }
    }
}

/* REPLSYNC <replid|?> <offset> <listening-port>: the connection becomes a
 * replica link. The replica continues from its offset when it holds this
 * primary's history (same replid, a record boundary the log still holds);
 * else it starts over (FULLRESYNC: it drops its keys first): from the
 * log's offset 0 while the log still holds it (at most a backlog and a
 * chunk: a replay is cheaper than a fork), else from a snapshot. */
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
    repl_log_keep(&k->log); /* a replica: the log is kept from here on */
    /* (KV_PLANT_RESUME_REPLID, repl.h: any replid) */
    bool same = a[1].len == 40 && (memcmp(a[1].p, k->replid, 40) == 0 ||
                                   (k->plant & KV_PLANT_RESUME_REPLID));
    char reply[96];
    /* (KV_PLANT_RESUME_CAUGHT_UP, repl.h: only from the log's end) */
    if (same &&
        (offset == k->log.end || !(k->plant & KV_PLANT_RESUME_CAUGHT_UP)) &&
        repl_log_seek(&k->log, offset, &l->cur) == 0) {
        snprintf(reply, sizeof reply, "+CONTINUE %" PRIu64 "\r\n", offset);
        l->skip_next = k->plant & KV_PLANT_RESUME_LATE;
        buf_str(&c->out, reply);
    } else if (k->log.base == 0) {
        offset = 0;
        repl_log_seek(&k->log, 0, &l->cur);
        /* Its sync point after the 0: the log's records before it are
         * applied, but their messages were published before it came. */
        snprintf(reply, sizeof reply, "+FULLRESYNC %s 0 %" PRIu64 "\r\n",
                 k->replid, k->log.end);
        buf_str(&c->out, reply);
    } else {
        /* The snapshot's producer sends the line, after this batch's
         * replies. */
        repl_log_seek(&k->log, k->log.end, &l->cur);
        l->snap = SNAP_WANT;
        l->peer.snapshot = true;
        offset = 0; /* INFO: nothing acknowledged yet */
    }
    for (size_t i = 0; i < RING; i++)
        l->ring[i] = (ring_frame){.f = {.release = ring_release}, .l = l};
    l->pipe_rd = -1;
    l->c = c;
    l->srv = srv;
    lull_task_init(&l->task, produce);
    (void)lull_timer_init(srv->loop, &l->snap_due, snap_due);
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

/* What a replica may send on its link: REPLACK <offset>. The highest
 * acknowledged is kept (as Redis keeps it): one lower says nothing new.
 * One past the log's end (a replica's bug: nothing was sent there) is
 * ignored, as Redis ignores an ack it cannot use; an acknowledgement
 * carries no data, so nothing is lost, and INFO never shows a replica
 * ahead of its primary. */
bool link_command(conn *c, const resp_arg *a, size_t argc) {
    uint64_t off;
    if (argc != 2 || !resp_is(&a[0], "REPLACK") || !parse_u64(&a[1], &off))
        return false;
    if (off > c->link->peer.offset && off <= c->srv->kv.log.end)
        c->link->peer.offset = off;
    return true;
}

/* Closes every replica link (they reconnect and continue from their
 * offsets): the simulator's and the tests' way to cut them. */
long long kill_replicas(kv *k) {
    server *srv = LULL_CONTAINER_OF(k, server, kv);
    long long n = 0;
    repl_peer *p = srv->kv.peers.next;
    while (p != &srv->kv.peers) {
        repl_peer *next = p->next;
        conn *c = LULL_CONTAINER_OF(p, rlink, peer)->c;
        /* A link closed already (by a CLIENT KILL earlier in the same
         * batch: it leaves the list only at its close, a turn later) is
         * not killed again, nor counted: Redis answers 0 then. */
        if (!c->gone) {
            conn_drop(c, NULL);
            n++;
        }
        p = next;
    }
    return n;
}

/* ---------------------------------------------- replica: the primary link */

void master_kill(server *srv) {
    master *m = &srv->m;
    srv_log(srv, "replica: link to %s:%d closed by CLIENT KILL", m->host,
            m->port);
    m->state = M_DOWN;             /* said why: master_closed need not */
    lull_endpoint_close(m->ep, 0); /* master_closed retries */
}

static void master_connect(server *srv);

static void master_retry(lull_timer *t) {
    server *srv = LULL_CONTAINER_OF(t, server, m.retry);
    master *m = &srv->m;
    if (m->state == M_SYNC) { /* the handshake's deadline */
        srv_log(srv,
                "replica: no answer to REPLSYNC from %s:%d in %llu s; "
                "link closed",
                m->host, m->port, HANDSHAKE_TIMEOUT_NS / 1000000000ull);
        m->state = M_DOWN;                      /* said why */
        lull_endpoint_close(m->ep, -ETIMEDOUT); /* master_closed retries */
        return;
    }
    master_connect(srv);
}

/* The link is down (closed, refused, malformed): try again later. */
static void master_down(server *srv) {
    master *m = &srv->m;
    m->state = M_DOWN;
    srv->kv.link_up = false;
    m->in.len = 0; /* a partial record: it comes again after the resync */
    m->need = 0;
    /* A snapshot cut short: the replid is unknown, and the part taken
     * is dropped; the old keyspace stays as it was, so no watch fails. */
    m->snap = false;
    store_free(&m->snap_db);
    buf_shrink(&m->in, INPUT_KEEP);
    lull_task_cancel(&m->ack);
    /* A link lost before it held RETRY_MAX_NS (a primary that takes the
     * handshake and hangs up, over and over) was a failed attempt: the
     * backoff goes on from before its handshake, else it would reconnect
     * every 100 ms for ever, each time a full sync. One that held longer
     * was working, and its loss is retried after the least backoff. */
    if (m->backoff_was && lull_loop_now(srv->loop) - m->up_ns < RETRY_MAX_NS)
        m->backoff_ns = m->backoff_was;
    m->backoff_was = 0;
    if (srv->stopping) return;
    srv_log(srv, "replica: retrying %s:%d in %" PRIu64 " ms", m->host, m->port,
            m->backoff_ns / 1000000);
    lull_timer_start(&m->retry, m->backoff_ns, 0);
    m->backoff_ns =
        m->backoff_ns * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : m->backoff_ns * 2;
}

/* The primary sent what lull-kv's replication protocol does not allow,
 * or (oom) the replica had no memory to buffer or apply what it sent:
 * said so, not "malformed", which would send a reader after the
 * primary. */
static void master_failed(server *srv, const char *what, bool oom) {
    master *m = &srv->m;
    if (srv->kv.plant & KV_PLANT_SILENT_RESYNC) {
        m->state = M_DOWN; /* and not a word of why */
        lull_endpoint_close(m->ep, -EPROTO);
        return;
    }
    srv_log(srv,
            "replica: %s stream from %s:%d at offset %" PRIu64
            ": %s; link closed",
            oom ? "out of memory for the replication" : "malformed replication",
            m->host, m->port, srv->kv.offset, what);
    /* Backing off as before the handshake: a primary whose every answer
     * is malformed would otherwise be asked again every 100 ms, each time
     * a full sync and a log line. */
    if (m->backoff_was) m->backoff_ns = m->backoff_was;
    m->state = M_DOWN;                   /* said why: master_closed need not */
    lull_endpoint_close(m->ep, -EPROTO); /* master_closed retries */
}

static void master_malformed(server *srv, const char *what) {
    master_failed(srv, what, false);
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
    /* Under --tls-replication, OpenSSL's words ("certificate verify
     * failed: ...", "bad record mac"), as a client's failed handshake is
     * logged: the errno alone ("Key was rejected by service") left the
     * replica's operator to guess between a CA, a name and an expiry. */
    const char *why =
        srv->repl_tls ? lull_tls_error_string(&srv->m.t.tls) : NULL;
    const char *said = why && *why ? why : reason ? strerror(-reason) : "EOF";
    if (srv->m.state == M_SYNC || srv->m.state == M_UP)
        srv_log(srv, "replica: link to %s:%d lost (%s)", srv->m.host,
                srv->m.port, said);
    else if (srv->m.state == M_CONNECTING) /* a TLS handshake that failed */
        srv_log(srv, "replica: connect to %s:%d: %s", srv->m.host, srv->m.port,
                said);
    master_down(srv);
}

static void ack_send(lull_task *t) {
    server *srv = LULL_CONTAINER_OF(t, server, m.ack);
    master *m = &srv->m;
    if (m->state != M_UP) return;
    if (m->ack_frame.in_flight) {
        if (srv->kv.plant & KV_PLANT_ACK_SPIN)
            lull_task_post(srv->loop, &m->ack);
        else
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

/* An offset in the primary's answer: as Redis writes one (no sign, no
 * leading zero), within 63 bits as Redis' offsets are. sscanf's %SCNu64
 * took "-1" and any number past 2^64 as 2^64 - 1, from which the
 * replica's offset wrapped at the first record. */
static bool line_offset(const char *s, uint64_t *out) {
    long long v;
    if (!kv_parse_i64(s, strlen(s), &v) || v < 0) return false;
    *out = (uint64_t)v;
    return true;
}

/* A +FULLRESYNC's offsets: "<offset>", or "0 <sync point>" (the log's
 * end as the primary answered: its PUBLISH records before that are not
 * delivered, cmd.c). s is cut at the space. */
static bool full_offsets(char *s, uint64_t *off, uint64_t *from) {
    char *sp = strchr(s, ' ');
    *from = 0;
    if (sp) {
        *sp = 0;
        if (!line_offset(sp + 1, from)) return false;
    }
    return line_offset(s, off) && (!sp || *off == 0);
}

/* The primary's answer to REPLSYNC: one line. 1 taken, 0 incomplete, -1
 * the link was closed. */
static int master_handshake(server *srv) {
    master *m = &srv->m;
    kv *k = &srv->kv;
    char *lf = memchr(m->in.p, '\n', m->in.len);
    if (!lf) {
        if (m->in.len > 128) return master_malformed(srv, "no reply line"), -1;
        /* "+FULLRESYNC <replid> ", the offset to come: the primary
         * answered, and its snapshot child writes the rest as it starts,
         * which may be once another replica's snapshot is written (one
         * child serves the replicas that waited). It is alive: no
         * deadline, as none while the snapshot comes (TCP keepalive
         * notices a host gone; a close, a reconnect). */
        static const char full[] = "+FULLRESYNC ";
        if (m->in.len >= sizeof full + 40 &&
            memcmp(m->in.p, full, sizeof full - 1) == 0 &&
            m->in.p[sizeof full - 1 + 40] == ' ')
            lull_timer_stop(&m->retry);
        return 0;
    }
    size_t n = (size_t)(lf - m->in.p) + 1;
    char line[130];
    if (n < 3 || n > sizeof line || lf[-1] != '\r')
        return master_malformed(srv, "a bad reply line"), -1;
    memcpy(line, m->in.p, n - 2);
    line[n - 2] = 0;
    char id[41];
    uint64_t off, from;
    char tail;
    if (line[0] == '-') {
        srv_log(srv, "replica: %s:%d refused: %s", m->host, m->port, line + 1);
        m->state = M_DOWN;
        lull_endpoint_close(m->ep, 0); /* master_closed retries */
        return -1;
    }
    /* The word and one space, then sscanf from the replid: a space in
     * its format takes any run of white space, none too, and the offset
     * is read at the column after the replid. */
    const size_t word = sizeof "+FULLRESYNC " - 1;
    if (strncmp(line, "+FULLRESYNC ", word) == 0 &&
        sscanf(line + word, "%40[0-9a-f]%c", id, &tail) == 2 &&
        strlen(id) == 40 && tail == ' ' &&
        full_offsets(line + word + 41, &off, &from)) {
        /* Past 0: a snapshot first, into a keyspace of its own. The
         * replid is taken at its end, so a link lost in the middle starts
         * over with a full sync. */
        m->snap = off > 0;
        m->snap_off = off;
        /* A new history: its messages from the snapshot's offset on, or
         * from the sync point of a replay from 0. */
        k->quiet_until = m->snap ? off : from;
        if (k->plant & KV_PLANT_PUBLISH_AGAIN) k->quiet_until = 0;
        memcpy(m->snap_id, id, sizeof id);
        if (m->snap) {
            m->replid[0] = 0;
            store_free(&m->snap_db);
            store_init(&m->snap_db);
            m->snap_db.plant_int32 = k->db.plant_int32;
            m->snap_db.plant_same_length = k->db.plant_same_length;
            m->snap_db.plant_blob_inplace = k->db.plant_blob_inplace;
        } else {
            /* Another history: start over, from an empty keyspace (a
             * watch of a key there fails; the replayed records are
             * writes, and fail the watches of theirs). */
            kv_watch_touch_all(k, &k->db, NULL);
            store_clear(&k->db);
            k->offset = 0;
            memcpy(m->replid, id, sizeof id);
        }
    } else if (strncmp(line, "+CONTINUE ", 10) == 0 && m->replid[0] &&
               line_offset(line + 10, &off) && off == k->offset) {
        /* the same history: from our offset (a replica that asked with
         * no replid has none to continue: new, or its keyspace at no
         * offset known, after a snapshot cut short or a torn
         * transaction) */
    } else {
        return master_malformed(srv, "not +FULLRESYNC or +CONTINUE"), -1;
    }
    buf_consume(&m->in, n);
    k->txn_scanned = 0;         /* a new stream: nothing of it scanned */
    lull_timer_stop(&m->retry); /* the handshake's deadline */
    m->state = M_UP;
    m->id = ++k->last_id; /* a client in CLIENT LIST, as Redis' master */
    m->up_ns = m->last_ns = lull_loop_now(srv->loop);
    /* In sync (INFO's master_link_status:up) once a snapshot is whole, as
     * a Redis replica is once its RDB is loaded: until then the old keys
     * are served. */
    k->link_up = !m->snap;
    m->backoff_was = m->backoff_ns;
    m->backoff_ns = RETRY_MIN_NS;
    m->acked = k->offset;
    if (m->snap)
        srv_log(srv,
                "replica: full sync with %s:%d: a snapshot as of offset "
                "%" PRIu64 " comes first",
                m->host, m->port, m->snap_off);
    else
        srv_log(srv, "replica: in sync with %s:%d from offset %" PRIu64 " (%s)",
                m->host, m->port, k->offset,
                line[1] == 'F' ? "full" : "continue");
    return 1;
}

/* The bounds the primary's stream is parsed with: its argument count is
 * the argv's, but no bulk length bound. The primary applied its own
 * proto-max-bulk-len to the client that wrote the record; a replica set
 * lower than its primary refused the record, closed the link and got the
 * same record again on every resume, never catching up (Redis exempts
 * its master's stream from the bound too). A length past the machine's
 * memory and swap (m.max_bulk) is refused: it can never be received, and
 * as its buffer grows only with what comes (master_frame), a hostile
 * primary's "$4000000000000000" would otherwise be waited for. */
static resp_limits stream_limits(const server *srv) {
    resp_limits lim = srv->lim;
    lim.max_bulk = srv->m.max_bulk;
    return lim;
}

/* The machine's memory and swap, read once as the link starts (the
 * longest argument a primary's record can have); SIZE_MAX / 4 where it
 * cannot be read. */
static size_t memory_size(void) {
    struct sysinfo si;
    if (sysinfo(&si) != 0 || si.mem_unit == 0) return SIZE_MAX / 4;
    unsigned long long units = (unsigned long long)si.totalram + si.totalswap;
    if (units > (SIZE_MAX / 4) / si.mem_unit) return SIZE_MAX / 4;
    return (size_t)(units * si.mem_unit);
}

/* A record of the primary's into srv->argv (kv_parse_record). Out of
 * memory is RESP_ERROR, *err saying so: the link is closed and tried again. */
static long parse_record(server *srv, resp_limits *lim, const char *p,
                         size_t len, size_t *argc, const char **err,
                         size_t *need) {
    long n =
        kv_parse_record(&srv->kv, lim, &srv->argv, p, len, argc, err, need);
    return n == RESP_GROW ? RESP_ERROR : n;
}

/* KV_PLANT_MULTI_SPLIT: the records one at a time as they come, a
 * transaction's too (its MULTI and EXEC counted and skipped): the bytes
 * taken, or -EPROTO. */
static long apply_split(server *srv, const char **err, size_t *need) {
    master *m = &srv->m;
    resp_limits lim = stream_limits(srv);
    size_t off = 0;
    *need = 1;
    while (off < m->in.len) {
        size_t argc;
        long n = parse_record(srv, &lim, m->in.p + off, m->in.len - off, &argc,
                              err, need);
        if (n == RESP_INCOMPLETE) break;
        if (n == RESP_ERROR) return -EPROTO;
        if (argc == 1 && (resp_is(&srv->argv[0], "MULTI") ||
                          resp_is(&srv->argv[0], "EXEC"))) {
            srv->kv.offset += (uint64_t)n;
        } else {
            size_t need2;
            long r = kv_apply_stream(&srv->kv, &lim, srv->argv, m->in.p + off,
                                     (size_t)n, err, &need2);
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

/* The snapshot's records at the front of m->in, up to its end marker:
 * applied without counting them in the offset (they are not the log's)
 * or failing a watch (kv.loading), into the link's keyspace.
 * The bytes taken, or -1: the link was closed (a malformed snapshot, or
 * one whose key count is not the marker's). */
static long apply_snapshot(server *srv) {
    master *m = &srv->m;
    kv *k = &srv->kv;
    resp_limits lim = stream_limits(srv);
    size_t off = 0;
    m->need = 1;
    /* The snapshot's keyspace is the one written, for this call. */
    store old = k->db;
    k->db = m->snap_db;
    uint64_t offset = k->offset;
    while (m->snap && off < m->in.len) {
        size_t argc, need;
        const char *err = "";
        /* Records are multibulk requests, as the log's: anything else (a
         * snapshot in another format, Redis' RDB) is refused at its first
         * byte, not parsed as an inline line whose end may never come. */
        long n = RESP_ERROR;
        if (m->in.p[off] != '*')
            err = "a record that is not a multibulk request";
        else
            n = parse_record(srv, &lim, m->in.p + off, m->in.len - off, &argc,
                             &err, &need);
        if (n == RESP_INCOMPLETE) {
            m->need = need;
            break;
        }
        char why[160];
        uint64_t keys;
        bool oom = false;
        if (n == RESP_ERROR) {
            snprintf(why, sizeof why, "a malformed snapshot: %s", err);
        } else if (argc >= 1 && resp_is(&srv->argv[0], SNAP_END)) {
            if (argc == 2 && parse_u64(&srv->argv[1], &keys) &&
                keys == store_count(&k->db)) {
                /* The snapshot's keyspace takes the old one's place:
                 * the watches of the keys in either fail. */
                kv_watch_touch_all(k, &old, &k->db);
                store_free(&old);
                memset(&m->snap_db, 0, sizeof m->snap_db);
                k->offset = m->snap_off;
                k->expiry_changed = true;
                k->link_up = true;
                memcpy(m->replid, m->snap_id, sizeof m->replid);
                m->snap = false;
                srv_log(srv,
                        "replica: in sync with %s:%d from offset "
                        "%" PRIu64 " (full: a snapshot of %" PRIu64 " keys)",
                        m->host, m->port, k->offset, keys);
                off += (size_t)n;
                break;
            }
            snprintf(why, sizeof why,
                     "the snapshot's end marker does not match the %zu keys "
                     "received",
                     store_count(&k->db));
        } else {
            size_t need2;
            k->loading = true; /* no write a client saw: no watch touched */
            long r = kv_apply_stream(k, &lim, srv->argv, m->in.p + off,
                                     (size_t)n, &err, &need2);
            k->loading = false;
            k->offset = offset; /* the snapshot's bytes are not the log's */
            if (r == n) {
                off += (size_t)n;
                continue;
            }
            snprintf(why, sizeof why, "a snapshot record failed: %s",
                     r < 0 ? err : "not whole");
            oom = r == -ENOMEM;
        }
        m->snap_db = k->db;
        k->db = old;
        master_failed(srv, why, oom);
        return -1;
    }
    if (m->snap) { /* more to come */
        m->snap_db = k->db;
        k->db = old;
    }
    return (long)off;
}

static void master_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    server *srv = ep->data;
    master *m = &srv->m;
    m->last_ns = lull_loop_now(srv->loop); /* CLIENT LIST's idle */
    /* As a client's input (keep_input), records are parsed again only
     * once the one being received is in; but its announced length, which
     * no limit bounds here (stream_limits), is not reserved at once: a
     * primary's "$4000000000000" would take that much address space (or
     * fail as out of memory) before a byte of it came. The buffer at most
     * doubles per read toward it (large reallocs are mremaps). */
    size_t want = m->need < 2 * m->in.cap ? m->need : 2 * m->in.cap;
    if (!buf_reserve_upto(&m->in, len, want)) m->in.oom = true;
    buf_put(&m->in, bytes, len);
    if (m->in.oom) {
        m->in.oom = false;
        master_failed(srv, "its input buffer could not grow", true);
        return;
    }
    if (m->state == M_SYNC && m->auth_pending && master_auth_reply(srv) <= 0)
        return;
    if (m->state == M_SYNC && master_handshake(srv) <= 0) return;
    if (m->in.len < m->need) return;
    if (m->snap) {
        long taken = apply_snapshot(srv);
        if (taken < 0) return;
        buf_consume(&m->in, (size_t)taken);
        if (m->snap) {
            buf_shrink(&m->in, INPUT_KEEP);
            return;
        }
        m->need = 0;
    }
    const char *err = "";
    resp_limits lim = stream_limits(srv);
    long n = srv->kv.plant & KV_PLANT_MULTI_SPLIT
                 ? apply_split(srv, &err, &m->need)
                 : kv_apply_stream(&srv->kv, &lim, srv->argv, m->in.p,
                                   m->in.len, &err, &m->need);
    if (n < 0) {
        /* Out of memory part way through a record (an RPUSH of many, a
         * transaction), or a transaction's record that failed running
         * after others of it were applied (torn), leaves part of it
         * applied at the offset before it: resumed there, the replica
         * would apply that part twice. Its keyspace is no offset's now:
         * the next sync is a full one. */
        if (n == -ENOMEM || srv->kv.torn) m->replid[0] = 0;
        master_failed(srv, err, n == -ENOMEM);
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
    lull_timer_start(&m->retry, HANDSHAKE_TIMEOUT_NS, 0);
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

static void master_connect_addr(server *srv) {
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

/* A name is looked up again before every connect, as Redis resolves its
 * primary's at each attempt: an address that moved is followed. */
static void master_connect(server *srv) {
    master *m = &srv->m;
    if (!m->named || !srv->net->resolve) {
        master_connect_addr(srv);
        return;
    }
    m->state = M_RESOLVING;
    int rc = srv->net->resolve(srv);
    if (rc < 0) master_resolved(srv, strerror(-rc));
}

void master_resolved(server *srv, const char *failed) {
    master *m = &srv->m;
    if (m->state != M_RESOLVING) return; /* stopped meanwhile */
    if (failed) {
        srv_log(srv, "replica: resolve %s: %s", m->host, failed);
        master_down(srv);
        return;
    }
    master_connect_addr(srv);
}

void master_start(server *srv) {
    master *m = &srv->m;
    srv->kv.master_host = m->host;
    srv->kv.master_port = m->port;
    m->max_bulk = memory_size();
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
    if (m->state == M_RESOLVING) {
        m->state = M_DOWN; /* master_resolved: nothing to do */
        srv->net->resolve_cancel(srv);
    } else if (m->state != M_DOWN) {
        m->state = M_DOWN; /* master_closed: no retry */
        lull_endpoint_close(m->ep, 0);
    }
}
